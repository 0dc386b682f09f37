"""Complex dtypes: promotion, creation and conversion, printing, errors, the compiled paths and docstring examples."""
import doctest
import inspect

import numpy as np
import pytest
import torch

import loom
import loom.torch
from loom import dtypes as dt
from loom.errors import AutogradError, DTypeError, LoomValueError, ShapeError

DTYPES = {loom.float16: torch.float16, loom.bfloat16: torch.bfloat16, loom.float32: torch.float32,
          loom.float64: torch.float64, loom.int64: torch.int64, loom.int32: torch.int32, loom.bool: torch.bool,
          loom.complex64: torch.complex64, loom.complex128: torch.complex128, loom.uint8: torch.uint8}


# ---------------------------------------------------------------- dtypes and promotion

def test_names_and_aliases():
    assert loom.cfloat is loom.complex64 and loom.cdouble is loom.complex128 and loom.chalf is loom.complex32
    assert loom.torch.cfloat is loom.complex64 and loom.torch.complex32 is loom.complex32
    assert dt.as_dtype(torch.complex64) is loom.complex64 and dt.as_dtype("cdouble") is loom.complex128
    assert dt.as_dtype(torch.chalf) is loom.complex32
    assert dt.from_numpy(np.complex128) is loom.complex128
    assert loom.complex64.is_complex and not loom.complex64.is_floating_point
    assert loom.complex64.itemsize == 8 and loom.complex128.itemsize == 16
    assert dt.to_real(loom.complex128) is loom.float64 and dt.to_complex(loom.float32) is loom.complex64


@pytest.mark.parametrize("a", list(DTYPES))
@pytest.mark.parametrize("b", [loom.complex64, loom.complex128])
def test_promote_types_matches_torch(a, b):
    want = torch.promote_types(DTYPES[a], DTYPES[b])
    got = loom.promote_types(a, b)
    assert str(want).split(".")[-1] == got.name


@pytest.mark.parametrize("make", [
    lambda m: (m.ones(2, dtype=m.float64), m.tensor(1j)),           # dim float64 + 0-d complex64 -> complex128
    lambda m: (m.ones(2), m.tensor(1j, dtype=m.complex128)),          # dim float32 + 0-d complex128 -> complex64
    lambda m: (m.tensor(1.0, dtype=m.float64), m.ones(2, dtype=m.complex64)),
    lambda m: (m.ones(2, dtype=m.int64), 1j),
    lambda m: (m.ones(2, dtype=m.float64), 2j),
    lambda m: (m.ones(2, dtype=m.complex64), 2.5),
    lambda m: (m.ones(2, dtype=m.int32), m.tensor(1j, dtype=m.complex128)),
])
def test_result_type_matches_torch(make):
    assert loom.result_type(*make(loom)).name == str(torch.result_type(*make(torch))).split(".")[-1]


def test_complex32_is_a_name_only():
    with pytest.raises(DTypeError, match="complex32"):
        loom.ones(2).chalf()
    with pytest.raises(DTypeError, match="complex32"):
        loom.zeros(2, dtype=loom.complex32)
    with pytest.raises(DTypeError, match="complex32"):
        loom.tensor([1j], dtype=loom.chalf)
    # float16 with a complex scalar promotes to complex32, as in PyTorch, and the error names it.
    assert loom.result_type(loom.ones(2, dtype=loom.float16), 1j) is loom.complex32
    with pytest.raises(DTypeError, match="complex32"):
        loom.ones(2, dtype=loom.float16) * 1j


# ---------------------------------------------------------------- creation and conversion

def test_tensor_from_python_complex():
    z = loom.tensor([1 + 2j, 3.0, 4])
    assert z.dtype is loom.complex64 and z.is_complex() and loom.is_complex(z)
    assert z.tolist() == [1 + 2j, 3 + 0j, 4 + 0j] and isinstance(z[0].item(), complex)
    assert loom.tensor(1j).item() == 1j
    loom.set_default_dtype(loom.float64)
    try:
        assert loom.tensor([1j]).dtype is loom.complex128
    finally:
        loom.set_default_dtype(loom.float32)


def test_numpy_round_trip_and_casts():
    a = np.array([[1 + 2j, -3j]], np.complex128)
    z = loom.tensor(a)
    assert z.dtype is loom.complex128 and np.array_equal(z.numpy(), a)
    assert np.array_equal(loom.from_numpy(a).numpy(), a)
    assert z.cfloat().dtype is loom.complex64 and loom.ones(2).cdouble().dtype is loom.complex128
    assert z.real.tolist() == [[1.0, 0.0]] and z.imag.tolist() == [[2.0, -3.0]]
    with pytest.warns(loom.LoomWarning, match="discards the imaginary part"):
        assert z.to(loom.float32).tolist() == [[1.0, 0.0]]  # Keeps the real part, and warns, as PyTorch.
    with pytest.warns(loom.LoomWarning, match="discards the imaginary part"):
        assert z.to(loom.int64).tolist() == [[1, 0]]
    assert z.to(loom.bool).tolist() == [[True, True]]
    with pytest.raises(DTypeError, match="complex"):
        loom.tensor([1j], dtype=loom.float32)


def test_printing_matches_torch():
    rng = np.random.default_rng(1)
    for values in ([1 + 2j, -3.5 - 1j], [[1e-5 + 1j, 100 + 3j]], [0j, 2 - 0.5j], [1 + 1j],
                   [complex(np.nan, 1), complex(1, np.inf)], [1e10 + 1j, 1e-3j], np.arange(2000) + 0j,
                   (rng.standard_normal((3, 20)) * 100 + 1j).astype(np.complex64), np.arange(12).reshape(3, 4) * 1j):
        assert repr(loom.tensor(values)) == repr(torch.tensor(values)).replace("torch.", "loom.")
    assert repr(loom.tensor(1j)) == "tensor(0.+1.j)"
    assert repr(loom.tensor([1j], dtype=loom.complex128)) == "tensor([0.+1.j], dtype=loom.complex128)"


# ---------------------------------------------------------------- errors

def test_ordering_and_real_only_ops_raise_naming_the_op_and_dtype():
    z = loom.tensor([1 + 1j, 2j])
    for fn, op in [(lambda: z < z, "lt"), (lambda: z >= 1, "ge"), (lambda: loom.maximum(z, z), "maximum"),
                   (lambda: z.max(), "max"), (lambda: z.floor(), "floor"), (lambda: z.erf(), "erf"),
                   (lambda: z.argsort(), "argsort"), (lambda: z % 2, "remainder")]:
        with pytest.raises(DTypeError, match=rf"{op}.*complex64|complex64.*{op}"):
            fn()
    with pytest.raises(DTypeError, match="non-complex"):
        _ = loom.ones(2).imag
    with pytest.raises(DTypeError, match="loom.complex"):
        loom.complex(loom.ones(2), loom.ones(2, dtype=loom.float64))
    with pytest.raises(ShapeError, match="view_as_complex"):
        loom.view_as_complex(loom.ones(3))
    with pytest.raises(DTypeError, match="abs_: in-place abs is not supported for complex"):
        loom.tensor([3 + 4j]).abs_()
    with pytest.raises(DTypeError, match="add_: result type complex64 can't be cast"):
        loom.ones(2).add_(1j)
    with pytest.raises(AutogradError, match="real scalar"):
        loom.tensor(1j, requires_grad=True).exp().backward()


def test_fft_argument_errors():
    x = loom.ones(4)
    with pytest.raises(LoomValueError, match="normalization"):
        loom.fft.fft(x, norm="bad")
    with pytest.raises(DTypeError, match="real input"):
        loom.fft.rfft(x.cfloat())
    with pytest.raises(DTypeError, match="float16"):
        loom.fft.fft(x.half())
    with pytest.raises(ShapeError, match="data points"):
        loom.fft.fft(x, n=0)
    with pytest.raises(ShapeError, match="same length"):
        loom.fft.fftn(loom.ones(2, 2), s=(2,), dim=(0, 1))
    with pytest.raises(LoomValueError, match="return_complex"):
        loom.stft(loom.ones(16), 8)
    with pytest.raises(DTypeError, match="complex"):
        loom.istft(loom.ones(5, 3), 8)
    with pytest.raises(LoomValueError, match="overlap add"):
        loom.istft(loom.ones(5, 3, dtype=loom.complex64), 8, hop_length=8, window=loom.zeros(8))


def test_fft_primitive_attr_checks():
    g = loom.ir.Graph()
    x = g.add_input((4,), loom.float32)
    with pytest.raises(DTypeError, match="fft_c2c"):
        g.add_node("fft_c2c", [x], {"axes": (0,), "forward": True})
    z = g.add_node("fft_r2c", [x], {"axes": (0,)})
    assert z.shape == (3,) and z.dtype is loom.complex64
    with pytest.raises(ShapeError, match="n=6"):
        g.add_node("fft_c2r", [z], {"axes": (0,), "n": 6})


# ---------------------------------------------------------------- compiled paths

def _complex_graph():
    g = loom.ir.Graph()
    x = g.add_input((8,), loom.float32)
    e = g.add_node("exp", [g.add_node("mul", [x, x])])
    z = g.add_node("complex", [e, x])
    f = g.add_node("fft_c2c", [g.add_node("mul", [z, z])], {"axes": (0,), "forward": True})
    r = g.add_node("abs", [f])
    g.outputs = [g.add_node("sum", [g.add_node("tanh", [g.add_node("add", [r, e])])], {"axes": (0,),
                                                                                      "keepdim": False})]
    return g


def test_fusion_and_codegen_never_see_complex():
    from loom.codegen.c import Unsupported, render
    from loom.compiler import compile as compile_graph
    exe = compile_graph(_complex_graph())
    fused = [n for n in exe.graph.topological_order() if n.op == "fused"]
    assert fused, "the real parts still fuse"
    for n in fused:
        assert all(m.dtype.category != 3 for m in n.attrs["body"].topological_order())
    xv = np.linspace(0, 1, 8).astype(np.float32)
    zv = np.exp(xv * xv) + 1j * xv
    want = np.tanh(np.abs(np.fft.fft(zv * zv)) + np.exp(xv * xv)).sum()
    np.testing.assert_allclose(exe(xv)[0], want, rtol=1e-5)
    body = loom.ir.Graph()
    b = body.add_input((3,), loom.complex64)
    body.outputs = [body.add_node("abs", [body.add_node("neg", [b])])]
    with pytest.raises(Unsupported, match="complex64"):
        render(body)


def test_compiled_backend_and_function_match_reference():
    x0 = np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32)

    def step(x):
        s = loom.fft.rfft(x * 0.2 + 0.1)
        z = s * (1 + 2j) + s.conj() * s
        return (z.abs() ** 2).sum() + z.real.exp().mean() + loom.fft.irfft(z, n=16).tanh().sum()

    ref_x = loom.tensor(x0, requires_grad=True)
    ref = step(ref_x)
    ref.backward()
    with loom.backend("compiled"):
        x = loom.tensor(x0, requires_grad=True)
        y = step(x)
        y.backward()
        np.testing.assert_allclose(y.item(), ref.item(), rtol=1e-5)
        np.testing.assert_allclose(x.grad.numpy(), ref_x.grad.numpy(), rtol=1e-4, atol=1e-4)

    @loom.function
    def train(x):
        y = step(x)
        (g,) = loom.autograd.grad(y, x)
        return y, g

    x = loom.tensor(x0, requires_grad=True)
    for _ in range(2):
        y, g = train(x)
        np.testing.assert_allclose(y.item(), ref.item(), rtol=1e-5)
        np.testing.assert_allclose(g.numpy(), ref_x.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_complex_graph_serialises():
    from loom.ir import from_json, to_json
    text = to_json(_complex_graph())
    assert to_json(from_json(text)) == text
    c = loom.ir.Graph()
    b = c.add_constant(np.array([1 + 2j, 3j], np.complex64))
    assert b.dtype is loom.complex64
    c.outputs = [c.add_node("conj", [b])]
    loaded = from_json(to_json(c))
    assert to_json(loaded) == to_json(c)
    assert np.array_equal(loaded.outputs[0].inputs[0].buffer, [1 + 2j, 3j])


# ---------------------------------------------------------------- docstring examples

def _public(module):
    names = getattr(module, "__all__", None) or [n for n, v in vars(module).items()
                                                 if inspect.isfunction(v) and v.__module__ == module.__name__
                                                 and not n.startswith("_")]
    return [(f"{module.__name__}.{n}", getattr(module, n)) for n in names]


@pytest.mark.parametrize("name,obj", _public(loom.fft) + _public(loom.functional.complex)
                         + _public(loom.functional.spectral) + [("loom.sgn", loom.sgn), ("loom.fft", loom.fft)],
                         ids=lambda v: v if isinstance(v, str) else "")
def test_docstring_examples_run(name, obj):
    assert "Examples" in obj.__doc__, f"{name} has no Examples section"
    test = doctest.DocTestParser().get_doctest(obj.__doc__, {"loom": loom, "np": np}, name, None, 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.attempted > 0 and result.failed == 0


# ---------------------------------------------------------------- real and imag are views

def test_real_imag_write_through_as_torch():
    results = []
    for m in (loom, torch):
        z = m.tensor([1 + 2j, 3 - 1j, -2j])
        z.real.mul_(2)
        z.imag[0] = 5
        r = z.real
        r += 1
        w = m.tensor([1 + 2j, 3 - 1j], requires_grad=True)
        y = w * 2
        y.imag.mul_(3)
        (y.abs() ** 2).sum().backward()
        a = m.zeros(2, 3, dtype=m.complex64)
        a.real.copy_(m.ones(2, 3))
        a.imag[:, 1] = 7
        results.append((z.tolist(), z.real.stride(), z.imag.storage_offset(), z[1:].imag.storage_offset(),
                        w.grad.tolist(), a.tolist()))
    assert results[0] == results[1]


def test_checkpoints_hold_complex(tmp_path):
    z = loom.tensor([1 + 2j, 3j])
    w = loom.tensor([[1 - 1j]], dtype=loom.complex128)
    loom.save({"z": z}, tmp_path / "a.safetensors")
    assert loom.load(tmp_path / "a.safetensors")["z"].tolist() == z.tolist()
    with pytest.raises(DTypeError, match="complex128.*safetensors"):
        loom.save({"w": w}, tmp_path / "b.safetensors")  # The format has C64 but no C128.
    loom.torch.save({"z": z, "w": w}, tmp_path / "c.pt")
    back = torch.load(tmp_path / "c.pt")
    assert back["w"].dtype == torch.complex128 and back["z"].tolist() == z.tolist()
    torch.save({"q": torch.tensor([2 + 3j], dtype=torch.complex128)}, tmp_path / "d.pt")
    q = loom.load(tmp_path / "d.pt")["q"]
    assert q.dtype is loom.complex128 and q.tolist() == [2 + 3j]


def test_random_complex_samples():
    loom.manual_seed(0)
    z = loom.randn(20000, dtype=loom.complex64)
    assert z.dtype is loom.complex64
    assert abs((z.abs() ** 2).mean().item() - 1.0) < 0.05  # Each part has variance 1/2, as PyTorch's.
    assert abs(z.real.mean().item()) < 0.05 and abs(z.imag.std().item() - 0.5 ** 0.5) < 0.05
    r = loom.rand(20000, dtype=loom.complex128)
    assert r.dtype is loom.complex128 and 0.0 <= r.real.min().item() and r.imag.max().item() < 1.0
    assert loom.randn_like(z[:3]).dtype is loom.complex64
    loom.manual_seed(3)
    a = loom.randn(4, dtype=loom.cfloat)
    loom.manual_seed(3)
    assert (a == loom.randn(4, dtype=loom.cfloat)).all().item()


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adamax", "NAdam", "RAdam", "Adadelta",
                                  "ASGD", "Rprop"])
def test_optimizers_update_complex_parameters_as_torch(name):
    """A complex parameter updates as its (real, imag) pairs (never g * g), with complex state, as PyTorch."""
    z0 = np.array([1 + 2j, -0.5 + 0.3j], np.complex64)
    results = []
    for m in (loom, torch):
        p = m.tensor(z0.copy(), requires_grad=True)
        opt = getattr(m.optim, name)([p], lr=0.1, **({"momentum": 0.9, "weight_decay": 0.1} if name == "SGD" else {}))
        for _ in range(3):
            opt.zero_grad()
            loss = (p.abs() ** 2 * m.tensor([1.0, 3.0])).sum() + (p * (1 - 2j)).real.sum()
            loss.backward()
            opt.step()
        state = sorted((k, str(v.dtype).split(".")[-1], tuple(v.shape)) for k, v in opt.state[p].items()
                       if hasattr(v, "dtype"))
        results.append((np.asarray(p.detach().tolist()), state))
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-5, atol=1e-6)
    assert results[0][1] == results[1][1]


@pytest.mark.parametrize("line_search", [None, "strong_wolfe"])
def test_lbfgs_views_complex_parameters_as_real_pairs(line_search):
    results = []
    for m in (loom, torch):
        p = m.tensor(np.array([1 + 2j, -0.5 + 0.3j]), requires_grad=True)
        q = m.tensor([0.5, -1.0], dtype=m.float64, requires_grad=True)
        opt = m.optim.LBFGS([p, q], lr=0.5, line_search_fn=line_search)

        def closure(m=m, p=p, q=q, opt=opt):
            opt.zero_grad()
            loss = ((p.abs() ** 2 * m.tensor([1.0, 3.0], dtype=m.float64)).sum() + (p * (1 - 2j)).real.sum()
                    + (q ** 2).sum() + (q * p.real).sum())
            loss.backward()
            return loss
        for _ in range(2):
            opt.step(closure)
        results.append(np.asarray(p.detach().tolist() + q.detach().tolist()))
    np.testing.assert_allclose(results[0], results[1], rtol=1e-10, atol=1e-12)
