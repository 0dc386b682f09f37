"""Parity of complex tensors and torch.fft / stft / istft: values and gradients (PyTorch's complex convention)."""
import numpy as np
import pytest

from tests.parity.harness import Case, crandn, positive, randn, run_case

NORMS = (None, "backward", "ortho", "forward")


def _real_loss(m, z):
    """A real function of a complex tensor that weighs both parts, for real -> complex -> real chains."""
    return (z.abs() ** 2).sum() + (z.real * 0.5 - z.imag).sum()


CASES = [
    # Arithmetic and promotion.
    Case("add_sub", lambda m, a, b: (a + b, a - b, a + 2.5, 1j - a), (crandn(3, 4), crandn(3, 4))),
    Case("mul_div", lambda m, a, b: (a * b, a / b, a * (2 - 1j), (3 + 1j) / b), (crandn(3, 4), crandn(3, 4)),
         second_order=True),
    Case("neg", lambda m, a: -a, (crandn(5),)),
    Case("exp_log_sqrt", lambda m, a: (a.exp(), a.log(), a.sqrt(), m.exp(a * 0.5)), (crandn(2, 5),),
         second_order=True),
    Case("pow", lambda m, a, b: (a ** 2, a ** 3.5, a ** b, 2 ** a), (crandn(6), crandn(6)),
         rtol=1e-3, atol=1e-4, reason="complex pow goes through exp/log, which round differently"),
    Case("reciprocal_trig", lambda m, a: (a.reciprocal(), a.sin(), a.cos(), a.tanh(), a.sigmoid()), (crandn(5),)),
    Case("promote_float", lambda m, x, z: (x + z, x * z, z / x, m.result_type(x, z) == m.complex64),
         (randn(3), crandn(3))),
    Case("promote_double", lambda m, x, z: (x + z, (x * z).dtype == m.complex128), (randn(3, dtype=np.float64),
                                                                                   crandn(3))),
    Case("complex128", lambda m, a, b: (a @ b, (a * b).exp().sum(1)), (crandn(3, 3, dtype=np.complex128),
                                                                      crandn(3, 3, dtype=np.complex128)),
         second_order=True),
    Case("sum_mean", lambda m, a: (a.sum(), a.sum(0), a.mean(), a.mean(1, keepdim=True)), (crandn(3, 4),)),
    Case("prod", lambda m, a: a.prod(1), (crandn(3, 4),)),
    Case("matmul", lambda m, a, b: (a @ b, m.matmul(a.conj(), b)), (crandn(3, 4), crandn(4, 3)),
         second_order=True),
    Case("adjoint", lambda m, a: (a.mH, a.H, m.adjoint(a), a.mH @ a, a.mT), (crandn(3, 2),)),
    Case("matmul_batched", lambda m, a, b: a @ b, (crandn(2, 3, 4), crandn(2, 4, 2))),
    Case("views", lambda m, a: (a.reshape(4, 3), a.permute(1, 0), a[1:, ::2], a.T.contiguous(), a.flip(0),
                                a.unsqueeze(0).expand(2, 3, 4)), (crandn(3, 4),)),
    Case("cat_stack", lambda m, a, b: (m.cat([a, b], 1), m.stack([a, b]), m.where(a.real > 0, a, b)),
         (crandn(3, 2), crandn(3, 2))),
    Case("eq_ne", lambda m, a, b: (a == b, a != b, a == a, a == 1j), (crandn(4), crandn(4)), grad=False),
    # Parts, conjugates and polar form.
    Case("abs_angle", lambda m, a: (a.abs(), a.angle(), m.abs(a), m.angle(a)), (crandn(3, 4),)),
    Case("real_imag", lambda m, a: (a.real, a.imag, m.real(a), m.imag(a), a.real * a.imag), (crandn(3, 4),)),
    Case("conj", lambda m, a: (a.conj(), m.conj_physical(a), a.conj().resolve_conj(), a * a.conj()), (crandn(4),)),
    Case("sgn", lambda m, a: m.sgn(a), (crandn(5),)),
    Case("complex_polar", lambda m, x, y: (m.complex(x, y), m.polar(x, y)), (positive(3, 2), randn(3, 2)),
         second_order=True),
    Case("view_as_real_complex", lambda m, a, x: (m.view_as_real(a), m.view_as_complex(x)), (crandn(3, 2),
                                                                                          randn(4, 2))),
    Case("cfloat_cdouble", lambda m, x: (x.cfloat(), x.cdouble() * 1j, x.cfloat().real), (randn(3),)),
    Case("complex_to_real_chain", lambda m, x: _real_loss(m, m.complex(x, x * x) * (1 - 2j)), (randn(5),),
         second_order=True),
    Case("var_std_norm", lambda m, a: (a.var(), a.var(1, correction=0), a.std(0), a.norm(), m.vdot(a[0], a[1])),
         (crandn(3, 4),), second_order=True),
    Case("cov_logsumexp", lambda m, a: (m.cov(a), m.corrcoef(a), m.logsumexp(a, 1), a.sigmoid()), (crandn(3, 5),)),
    Case("nan_checks", lambda m, a: (m.isnan(a), m.isinf(a), m.isfinite(a), m.nan_to_num(a, posinf=5.0)),
         (np.array([complex(np.nan, 1), complex(1, np.inf), 2 - 1j, complex(-np.inf, np.nan)], np.complex64),),
         grad=False),
    Case("is_complex", lambda m, a, x: (a.is_complex(), x.is_complex(), m.is_complex(a)), (crandn(2), randn(2)),
         grad=False),
]

# torch.fft: every transform, with n / s / dim and every norm.
for norm in NORMS:
    tag = norm or "default"
    CASES += [
        Case(f"fft_{tag}", lambda m, z, norm=norm: (m.fft.fft(z, norm=norm), m.fft.fft(z, n=7, dim=0, norm=norm)),
             (crandn(5, 6),), second_order=norm == "ortho"),
        Case(f"ifft_{tag}", lambda m, z, norm=norm: (m.fft.ifft(z, norm=norm), m.fft.ifft(z, n=4, norm=norm)),
             (crandn(5, 6),)),
        Case(f"fft_real_{tag}", lambda m, x, norm=norm: m.fft.fft(x, n=8, norm=norm), (randn(3, 6),)),
        Case(f"rfft_{tag}", lambda m, x, norm=norm: (m.fft.rfft(x, norm=norm), m.fft.rfft(x, n=5, dim=0, norm=norm)),
             (randn(4, 6),), second_order=norm == "forward"),
        Case(f"irfft_{tag}", lambda m, z, norm=norm: (m.fft.irfft(z, norm=norm), m.fft.irfft(z, n=7, norm=norm),
                                                      m.fft.irfft(z, n=4, dim=0, norm=norm)),
             (crandn(4, 5),), second_order=norm is None),
        Case(f"hfft_{tag}", lambda m, z, norm=norm: (m.fft.hfft(z, norm=norm), m.fft.hfft(z, n=5, norm=norm)),
             (crandn(3, 4),)),
        Case(f"ihfft_{tag}", lambda m, x, norm=norm: (m.fft.ihfft(x, norm=norm), m.fft.ihfft(x, n=7, norm=norm)),
             (randn(3, 6),)),
        Case(f"fft2_{tag}", lambda m, z, norm=norm: (m.fft.fft2(z, norm=norm), m.fft.ifft2(z, s=(3, 5), norm=norm)),
             (crandn(2, 4, 4),)),
        Case(f"rfft2_{tag}", lambda m, x, norm=norm: (m.fft.rfft2(x, norm=norm), m.fft.irfft2(m.fft.rfft2(x), s=(4, 5),
                                                                                             norm=norm)),
             (randn(2, 4, 5),)),
        Case(f"fftn_{tag}", lambda m, z, norm=norm: (m.fft.fftn(z, norm=norm), m.fft.ifftn(z, s=(3, 2), dim=(2, 0),
                                                                                         norm=norm)),
             (crandn(3, 2, 4),)),
        Case(f"rfftn_{tag}", lambda m, x, norm=norm: (m.fft.rfftn(x, dim=(2, 0), norm=norm),
                                                      m.fft.rfftn(x, s=(3, 6), norm=norm)),
             (randn(3, 2, 4),)),
        Case(f"irfftn_{tag}", lambda m, z, norm=norm: (m.fft.irfftn(z, norm=norm), m.fft.irfftn(z, s=(2, 3, 5),
                                                                                               norm=norm)),
             (crandn(2, 3, 3),)),
    ]
CASES += [
    Case("hfftn_ihfftn", lambda m, z, x: (m.fft.hfftn(z), m.fft.ihfftn(x), m.fft.hfft2(z, s=(3, 4)),
                                          m.fft.ihfft2(x, norm="ortho")), (crandn(3, 3), randn(3, 4))),
    Case("fft_complex128", lambda m, z: (m.fft.fft2(z), m.fft.irfft(z, n=6)), (crandn(3, 4, dtype=np.complex128),)),
    Case("rfft_float64", lambda m, x: m.fft.rfftn(x, norm="ortho"), (randn(4, 6, dtype=np.float64),),
         second_order=True),
    # Real -> complex -> real: a power spectrum and a filter.
    Case("rfft_power", lambda m, x: (m.fft.rfft(x).abs() ** 2).sum(), (randn(3, 16),), second_order=True),
    Case("fft_filter", lambda m, x, h: m.fft.irfft(m.fft.rfft(x) * m.fft.rfft(h, n=x.shape[-1]), n=x.shape[-1]),
         (randn(2, 12), randn(5))),
    Case("fft_roundtrip", lambda m, x: m.fft.ifft(m.fft.fft(x)).real, (randn(2, 7),), second_order=True),
    Case("freqs_shift", lambda m, x: (m.fft.fftfreq(5), m.fft.fftfreq(8, d=0.1), m.fft.rfftfreq(7, 2.0),
                                      m.fft.fftshift(x), m.fft.ifftshift(x, dim=1), m.fft.fftshift(x, dim=(0,))),
         (randn(3, 5),)),
]

# stft / istft.
CASES += [
    Case("stft", lambda m, x: m.stft(x, 16, hop_length=4, return_complex=True), (randn(40),)),
    Case("stft_window", lambda m, x, w: m.stft(x, 16, hop_length=5, win_length=12, window=w, normalized=True,
                                               return_complex=True), (randn(2, 40), positive(12))),
    Case("stft_options", lambda m, x: (m.stft(x, 15, center=False, return_complex=True),
                                       m.stft(x, 16, pad_mode="constant", onesided=False, return_complex=True),
                                       m.stft(x, 8, return_complex=False)), (randn(2, 33),)),
    Case("stft_complex_input", lambda m, z: m.stft(z, 8, hop_length=3, return_complex=True), (crandn(30),)),
    Case("istft", lambda m, z, w: (m.istft(z, 16, hop_length=4, window=w), m.istft(z, 16, hop_length=4, window=w,
                                                                                 length=30)),
         (crandn(9, 11), positive(16, low=0.5))),
    Case("istft_options", lambda m, z: (m.istft(z, 8, hop_length=2, center=False), m.istft(z, 8, normalized=True,
                                                                                         length=20)),
         (crandn(2, 5, 9),)),
    Case("istft_twosided", lambda m, z: (m.istft(z, 8, hop_length=2, onesided=False),
                                         m.istft(z, 8, hop_length=2, onesided=False, return_complex=True)),
         (crandn(8, 9),)),
    Case("stft_istft_roundtrip", lambda m, x, w: m.istft(m.stft(x, 16, hop_length=4, window=w, return_complex=True),
                                                         16, hop_length=4, window=w, length=x.shape[-1]),
         (randn(2, 50), positive(16, low=0.5))),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_parity(case, mode):
    run_case(case, mode)


@pytest.mark.parametrize("case", [c for c in CASES if c.name in ("mul_div", "rfft_power", "stft", "conj")], ids=str)
def test_parity_torch_namespace(case):
    """The same bodies through loom.torch (PyTorch's names over loom)."""
    import loom.torch
    run_case(case, "eager", lib=loom.torch)
