"""Parity of the matrix factorisations (loom.ir.decomp primitives and what builds on them) with PyTorch.

Inputs are well conditioned, with distinct singular values and eigenvalues, and the bodies
return quantities that do not depend on the sign (gauge) of singular vectors and eigenvectors
(squares, reconstructions), as PyTorch's own tests do; QR and LU are unique as LAPACK computes
them and are compared directly.
"""
import numpy as np
import pytest
import torch

import loom
from loom.errors import DTypeError, LoomError, ShapeError
from tests.parity.harness import Case, randn, run_case


def _orth(rng, n):
    q, r = np.linalg.qr(rng.standard_normal((n, n)))
    return q * np.sign(np.diag(r))


def conditioned(*shape, dtype=np.float64, low=1.0, high=3.0):
    """(..., m, n) matrices U diag(s) V^T with distinct singular values spread over [low, high]."""
    *batch, m, n = shape
    k = min(m, n)

    def make(rng):
        out = np.empty(shape)
        for idx in np.ndindex(*batch):
            s = np.linspace(high, low, k) * rng.uniform(0.95, 1.05, k)
            out[idx] = _orth(rng, m)[:, :k] @ np.diag(s) @ _orth(rng, n)[:, :k].T
        return out.astype(dtype)
    return make


def symmetric(*shape, dtype=np.float64):
    """(..., n, n) symmetric matrices with well separated eigenvalues (the other triangle is noise)."""
    *batch, n, _ = shape

    def make(rng):
        out = np.empty(shape)
        for idx in np.ndindex(*batch):
            q = _orth(rng, n)
            lam = np.arange(n) * 1.5 - n / 2 + rng.uniform(-0.2, 0.2, n)
            out[idx] = q @ np.diag(lam) @ q.T
        return out.astype(dtype)
    return make


def triangular(*shape, dtype=np.float64):
    """(..., n, n) matrices with a dominant diagonal: either triangle is a well conditioned system."""
    n = shape[-1]
    return lambda rng: (rng.standard_normal(shape) + 3 * np.eye(n) * np.sign(rng.standard_normal(shape[:-1])
                                                                               )[..., None]).astype(dtype)


def low_rank(m, n, r, dtype=np.float64):
    def make(rng):
        s = np.linspace(3, 1, r)
        return (_orth(rng, m)[:, :r] @ np.diag(s) @ _orth(rng, n)[:, :r].T).astype(dtype)
    return make


def _svd_invariants(m, U, S, Vh, k):
    """Gauge-invariant views of an SVD: squared vectors and the rank-k reconstruction."""
    U, Vh = U[..., :, :k], Vh[..., :k, :]
    return U * U, S, Vh * Vh, U @ (S.unsqueeze(-1) * Vh)


def _svd_body(full):
    def body(m, a):
        k = min(a.shape[-2:])
        return _svd_invariants(m, *m.linalg.svd(a, full_matrices=full), k)
    return body


def _eigh_body(uplo):
    def body(m, a):
        L, V = m.linalg.eigh(a, UPLO=uplo)
        return L, V * V, (V * L.unsqueeze(-2)) @ V.mT
    return body


CASES = []
for shape in [(4, 3), (3, 3), (3, 5), (2, 5, 3), (2, 3, 4)]:
    tag = "x".join(map(str, shape))
    CASES += [
        Case(f"qr_reduced_{tag}", lambda m, a: m.linalg.qr(a), (conditioned(*shape),), second_order=shape == (4, 3)),
        Case(f"svd_thin_{tag}", _svd_body(False), (conditioned(*shape),), second_order=shape == (3, 3)),
        Case(f"svd_full_{tag}", _svd_body(True), (conditioned(*shape),)),
        Case(f"svdvals_{tag}", lambda m, a: m.linalg.svdvals(a), (conditioned(*shape),), second_order=True),
        Case(f"lu_factor_{tag}", lambda m, a: m.linalg.lu_factor(a), (randn(*shape, dtype=np.float64),)),
        Case(f"lu_{tag}", lambda m, a: m.linalg.lu(a), (randn(*shape, dtype=np.float64),)),
        Case(f"lstsq_{tag}", lambda m, a, b: m.linalg.lstsq(a, b).solution,
             (conditioned(*shape), randn(*shape[:-1], 2, dtype=np.float64))),
        Case(f"pinv_{tag}", lambda m, a: m.linalg.pinv(a), (conditioned(*shape),)),
        Case(f"matrix_norm_nuc_2_{tag}", lambda m, a: (m.linalg.matrix_norm(a, "nuc"), m.linalg.matrix_norm(a, 2),
                                                        m.linalg.matrix_norm(a, -2)), (conditioned(*shape),)),
        Case(f"cond_{tag}", lambda m, a: (m.linalg.cond(a), m.linalg.cond(a, -2)), (conditioned(*shape),)),
    ]
CASES += [
    Case("qr_complete_square", lambda m, a: m.linalg.qr(a, mode="complete"), (conditioned(2, 3, 3),)),
    Case("qr_complete_wide", lambda m, a: m.linalg.qr(a, mode="complete"), (conditioned(3, 5),)),
    Case("qr_complete_tall_forward", lambda m, a: m.linalg.qr(a, mode="complete"), (conditioned(5, 3),), grad=False,
         reason="PyTorch does not differentiate mode='complete' with m > n"),
    Case("qr_r", lambda m, a: m.linalg.qr(a, mode="r")[1], (conditioned(4, 3),), grad=False,
         reason="PyTorch does not differentiate mode='r'"),
    Case("qr_float32", lambda m, a: m.linalg.qr(a), (conditioned(5, 3, dtype=np.float32),)),
    Case("svd_float32", _svd_body(False), (conditioned(4, 3, dtype=np.float32),), rtol=1e-3, atol=1e-4,
         reason="float32 singular vectors"),
    Case("svd_singular_values_only", lambda m, a: m.linalg.svd(a)[1], (conditioned(4, 3),)),
    Case("eigh_L", _eigh_body("L"), (symmetric(4, 4),), second_order=True),
    Case("eigh_U_batch", _eigh_body("U"), (symmetric(2, 5, 5),)),
    Case("eigh_nonsymmetric_input", _eigh_body("L"), (randn(4, 4, dtype=np.float64),),
         reason="only the lower triangle is read; the gradient is PyTorch's full (unprojected) one"),
    Case("eigh_float32", _eigh_body("L"), (symmetric(4, 4, dtype=np.float32),), rtol=1e-3, atol=1e-4),
    Case("eigvalsh", lambda m, a: (m.linalg.eigvalsh(a), m.linalg.eigvalsh(a, "U")), (symmetric(2, 4, 4),),
         second_order=True),
    Case("matrix_exp", lambda m, a: m.linalg.matrix_exp(a), (randn(3, 3, dtype=np.float64),), second_order=True),
    Case("matrix_exp_large_norm", lambda m, a: m.linalg.matrix_exp(3 * a), (randn(2, 4, 4, dtype=np.float64),),
         rtol=1e-6),
    Case("matrix_exp_float32", lambda m, a: m.matrix_exp(a), (randn(4, 4),)),
    Case("matrix_rank", lambda m, a, b: (m.linalg.matrix_rank(a), m.linalg.matrix_rank(b),
                                         m.linalg.matrix_rank(b, hermitian=True), m.linalg.matrix_rank(a, atol=1.5)),
         (low_rank(5, 4, 2), symmetric(3, 3))),
    Case("lstsq_vector_rhs", lambda m, a, b: m.linalg.lstsq(a, b).solution,
         (conditioned(5, 3), randn(5, dtype=np.float64))),
    Case("lstsq_broadcast_batch", lambda m, a, b: m.linalg.lstsq(a, b).solution,
         (conditioned(1, 5, 3), randn(2, 5, 2, dtype=np.float64))),
    Case("lstsq_gelsd_fields", lambda m, a, b: tuple(m.linalg.lstsq(a, b, driver="gelsd")),
         (conditioned(2, 5, 3), randn(2, 5, 2, dtype=np.float64))),
    Case("lstsq_gels_fields", lambda m, a, b: tuple(m.linalg.lstsq(a, b, driver="gels")),
         (conditioned(5, 3), randn(5, 2, dtype=np.float64))),
    Case("lstsq_gelsy_fields", lambda m, a, b: tuple(m.linalg.lstsq(a, b)),
         (conditioned(2, 3, 5), randn(2, 3, 2, dtype=np.float64))),
    Case("lu_solve", lambda m, a, b: m.linalg.lu_solve(*m.linalg.lu_factor(a), b),
         (randn(2, 4, 4, dtype=np.float64), randn(2, 4, 3, dtype=np.float64))),
    Case("lu_solve_second_order", lambda m, a, b: m.linalg.lu_solve(*m.linalg.lu_factor(a), b),
         (randn(3, 3, dtype=np.float64), randn(3, 1, dtype=np.float64)), second_order=True),
    Case("lu_solve_left_false_adjoint", lambda m, a, b: (m.linalg.lu_solve(*m.linalg.lu_factor(a), b, left=False),
                                                         m.linalg.lu_solve(*m.linalg.lu_factor(a), b.mT, adjoint=True)),
         (randn(4, 4, dtype=np.float64), randn(3, 4, dtype=np.float64))),
    Case("pinv_hermitian", lambda m, a: m.linalg.pinv(a, hermitian=True), (symmetric(2, 4, 4),)),
    Case("pinv_rank_deficient_forward", lambda m, a: m.linalg.pinv(a), (low_rank(5, 4, 2),), grad=False,
         reason="the gradient through dropped singular values is undefined"),
    Case("cond_other_norms", lambda m, a: tuple(m.linalg.cond(a, p) for p in ("fro", -1, float("inf"))),
         (conditioned(2, 2),), grad=False, reason="PyTorch's own backward of these fails (an in-place inverse)"),
    Case("cond_nuc", lambda m, a: m.linalg.cond(a, "nuc"), (conditioned(2, 3, 3),)),
    Case("pinv_hermitian_reads_lower", lambda m, a: m.linalg.pinv(a, hermitian=True),
         (randn(2, 4, 4, dtype=np.float64),),
         grad=False, reason="the gradient at a non-symmetric input differs: PyTorch's reads both triangles"),
    Case("householder_product", lambda m, a, t: m.linalg.householder_product(a, t),
         (randn(2, 5, 3, dtype=np.float64), randn(2, 3, dtype=np.float64)), second_order=True),
    Case("householder_product_short_tau", lambda m, a, t: m.linalg.householder_product(a, t),
         (randn(4, 4, dtype=np.float64), randn(2, dtype=np.float64))),
    Case("tensorinv", lambda m, a: m.linalg.tensorinv(a.reshape(2, 2, 4), ind=2), (conditioned(4, 4),)),
    Case("tensorsolve", lambda m, a, b: m.linalg.tensorsolve(a.reshape(2, 3, 2, 3), b),
         (conditioned(6, 6), randn(2, 3, dtype=np.float64))),
    Case("tensorsolve_dims", lambda m, a, b: m.linalg.tensorsolve(a.reshape(6, 2, 3), b, dims=(0,)),
         (conditioned(6, 6), randn(2, 3, dtype=np.float64))),
    Case("vander", lambda m, x: (m.linalg.vander(x), m.linalg.vander(x, N=5)), (randn(2, 3, dtype=np.float64),),
         second_order=True),
    Case("lu_singular_and_det", lambda m, a: (m.linalg.lu(a), m.linalg.lu_factor_ex(a), m.lu(a, get_infos=True),
                                              m.linalg.det(a)),
         (lambda rng: np.array([[0.0, 2.0, 1.0], [0.0, 1.0, 3.0], [0.0, 4.0, 1.0]]),), grad=False,
         reason="a zero pivot column is skipped as LAPACK does; gradients at singular matrices differ by method"),
    Case("matrix_power_negative", lambda m, a: m.linalg.matrix_power(a, -3), (conditioned(3, 3),)),
]

# Triangular solves: both triangles, unit diagonals, right-hand side on either side, broadcast batches.
for upper in (True, False):
    for unit in (False, True):
        CASES.append(Case(f"solve_triangular_upper{upper}_unit{unit}",
                          lambda m, a, b, upper=upper, unit=unit: m.linalg.solve_triangular(
                              a, b, upper=upper, unitriangular=unit),
                          (triangular(2, 4, 4), randn(2, 4, 3, dtype=np.float64)), second_order=not unit))
CASES += [
    Case("solve_triangular_right", lambda m, a, b: m.linalg.solve_triangular(a, b, upper=True, left=False),
         (triangular(4, 4), randn(3, 4, dtype=np.float64))),
    Case("solve_triangular_broadcast", lambda m, a, b: m.linalg.solve_triangular(a, b, upper=False),
         (triangular(4, 4), randn(2, 4, 3, dtype=np.float64))),
    Case("solve_triangular_float32", lambda m, a, b: m.linalg.solve_triangular(a, b, upper=False),
         (triangular(4, 4, dtype=np.float32), randn(4, 2))),
]

# The torch.* spellings and Tensor methods.
CASES += [
    Case("torch_qr", lambda m, a: (m.qr(a), m.qr(a, some=False), a.qr()), (conditioned(3, 3),)),
    Case("torch_svd", lambda m, a: [v * v if k != 1 else v for k, v in enumerate(m.svd(a))],
         (conditioned(4, 3),)),
    Case("torch_svd_some_false", lambda m, a: [v[..., :3] ** 2 if k != 1 else v
                                               for k, v in enumerate(a.svd(some=False))], (conditioned(4, 3),)),
    Case("torch_svd_no_uv", lambda m, a: tuple(m.svd(a, compute_uv=False)), (conditioned(4, 3),)),
    Case("torch_lu_and_solve", lambda m, a, b: (m.lu(a), m.lu_solve(b, *m.lu(a)), b.lu_solve(*a.lu()),
                                                m.lu(a, get_infos=True)),
         (randn(2, 3, 3, dtype=np.float64), randn(2, 3, 2, dtype=np.float64))),
    Case("torch_lu_unpack", lambda m, a: m.lu_unpack(*m.linalg.lu_factor(a)), (randn(2, 4, 3, dtype=np.float64),)),
    Case("torch_lu_unpack_wide", lambda m, a: m.lu_unpack(*m.linalg.lu_factor(a)), (randn(3, 5, dtype=np.float64),)),
    Case("torch_triangular_solve", lambda m, b, a: (m.triangular_solve(b, a), b.triangular_solve(a, upper=False),
                                                    m.triangular_solve(b, a, transpose=True, unitriangular=True)),
         (randn(4, 2, dtype=np.float64), triangular(4, 4))),
    Case("torch_pinverse_matrix_exp", lambda m, a: (m.pinverse(a), a.pinverse(), a[..., :3, :].matrix_exp()),
         (conditioned(4, 3),)),
    Case("torch_geqrf", lambda m, a: (m.geqrf(a), a.geqrf()), (conditioned(2, 5, 3),), grad=False,
         reason="geqrf is not differentiable in PyTorch"),
    Case("torch_orgqr", lambda m, a, t: (m.orgqr(a, t), a.orgqr(t)),
         (randn(5, 3, dtype=np.float64), randn(3, dtype=np.float64))),
    Case("torch_ormqr", lambda m, a, t, c: tuple(m.ormqr(a, t, c if left else c.mT, left=left, transpose=tr)
                                                 for left in (True, False) for tr in (False, True)),
         (randn(4, 3, dtype=np.float64), randn(3, dtype=np.float64), randn(4, 2, dtype=np.float64))),
    Case("torch_nuclear_frobenius", lambda m, a: (m.nuclear_norm(a), m.nuclear_norm(a, True),
                                                  m.nuclear_norm(a, (0, 2)), m.frobenius_norm(a, (1, 2))),
         (conditioned(3, 4, 3),)),
    Case("torch_norm_nuc", lambda m, a: (m.norm(a[0], p="nuc"), a.norm("nuc", dim=(0, 2), keepdim=True)),
         (conditioned(3, 4, 3),)),
    Case("torch_lowrank_exact", lambda m, a: (m.svd_lowrank(a, q=2)[1], m.pca_lowrank(a, q=3, center=False)[1],
                                              (lambda u, s, v: u @ (s.unsqueeze(-1) * v.mT))(*m.svd_lowrank(a, q=2))),
         (low_rank(6, 4, 2),), grad=False, reason="the random subspace differs from PyTorch's draw"),
    Case("torch_svd_lowrank_with_M", lambda m, a: m.svd_lowrank(a, q=3, M=a.mean(-2, keepdim=True))[1],
         (low_rank(6, 4, 2),), grad=False, reason="the random subspace differs from PyTorch's draw"),
    Case("torch_lobpcg_generalized", lambda m, a, b: m.lobpcg(a, k=1, B=b @ b.mT + 4 * m.eye(6, dtype=b.dtype),
                                                              largest=False)[0],
         (symmetric(6, 6), randn(6, 6, dtype=np.float64)), rtol=1e-5, atol=1e-6, grad=False,
         reason="PyTorch iterates to its tolerance, and has no backward with B"),
    Case("torch_pca_lowrank_centered", lambda m, a: m.pca_lowrank(a, q=2)[1], (low_rank(6, 4, 2),), grad=False),
    Case("torch_lobpcg", lambda m, a: (lambda e, x: (e, x * x))(*m.lobpcg(a @ a.mT + 0.1 * a.new_ones(()), k=2)),
         (symmetric(8, 8),), rtol=1e-5, atol=1e-6, reason="PyTorch iterates to its tolerance"),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_parity(case, mode):
    run_case(case, mode)


@pytest.mark.parametrize("case", [c for c in CASES if c.name.startswith(("torch_", "lstsq_3x5", "svd_thin_3x5",
                                                                           "eigh_L", "qr_reduced_4x3"))], ids=str)
def test_parity_through_loom_torch(case):
    """The same bodies through `import loom.torch as torch` (PyTorch's names and Tensor methods over loom)."""
    import loom.torch
    run_case(case, "eager", lib=loom.torch)


def test_traced_function_replays_factorisations():
    """loom.function traces the factorisation primitives and replays them on new values."""
    @loom.function
    def step(a, s):
        q, r = loom.linalg.qr(a)
        return q.sum() + r.sum() + loom.linalg.eigvalsh(s).sum() + loom.linalg.svdvals(a).sum()

    rng = np.random.default_rng(0)
    for _ in range(3):
        a, s = rng.standard_normal((4, 3)), symmetric(3, 3)(rng)
        ta, ts = torch.tensor(a), torch.tensor(s)
        want = (sum(v.sum().item() for v in torch.linalg.qr(ta)) + torch.linalg.eigvalsh(ts).sum().item()
                + torch.linalg.svdvals(ta).sum().item())
        np.testing.assert_allclose(step(loom.tensor(a), loom.tensor(s)).item(), want, rtol=1e-10)


@pytest.mark.parametrize("name", ["solve", "symeig", "lstsq", "matrix_rank"])
def test_removed_functions_raise_as_in_torch(name):
    import loom.torch as ltorch
    args = {"solve": 2, "lstsq": 2}.get(name, 1)
    with pytest.raises(RuntimeError, match="removed"):
        getattr(torch, name)(*[torch.eye(2)] * args)
    with pytest.raises(LoomError, match=rf"loom\.{name}: this function was deprecated in PyTorch 1\.9 and is removed"):
        getattr(ltorch, name)(*[loom.eye(2)] * args)
    if name != "matrix_rank":
        with pytest.raises(LoomError, match=rf"loom\.{name}:"):
            getattr(loom.eye(2), name)(*[loom.eye(2)] * (args - 1))


def test_named_results():
    a = loom.tensor(conditioned(4, 3)(np.random.default_rng(0)))
    assert loom.linalg.qr(a).R.shape == (3, 3) and loom.linalg.svd(a).Vh.shape == (3, 3)
    assert loom.linalg.eigh(a[:3]).eigenvectors.shape == (3, 3) and loom.linalg.lu(a).P.shape == (4, 4)
    assert loom.linalg.lu_factor(a).pivots.dtype is loom.int32 and loom.svd(a).V.shape == (3, 3)
    r = loom.linalg.lstsq(a, loom.ones(4, 1, dtype=loom.float64))
    assert r.solution.shape == (3, 1) and r.rank.item() == 3 and r.residuals.shape == (0,)
    assert "QRResult(Q=" in repr(loom.linalg.qr(a))


def test_bad_inputs_name_the_op_shapes_and_dtypes():
    ints, wide, f32 = loom.ones(3, 3, dtype=loom.int64), loom.ones(2, 3, dtype=loom.float64), loom.eye(3)
    with pytest.raises(DTypeError, match=r"loom\.linalg\.qr: expected a float32 or float64 matrix, got int64\[3, 3\]"):
        loom.linalg.qr(ints)
    with pytest.raises(DTypeError, match=r"loom\.linalg\.svd: expected a float32 or float64 matrix, got float16"):
        loom.linalg.svd(loom.ones(3, 3, dtype=loom.float16))
    with pytest.raises(ShapeError, match=r"loom\.linalg\.eigh: expected a square matrix \(\.\.\., n, n\).*float64"
                                         r"\[2, 3\]"):
        loom.linalg.eigh(wide)
    with pytest.raises(ShapeError, match=r"loom\.linalg\.svdvals: expected a matrix \(\.\.\., m, n\).*float32\[3\]"):
        loom.linalg.svdvals(loom.ones(3))
    with pytest.raises(ShapeError, match=r"loom\.linalg\.matrix_exp: expected a square matrix"):
        loom.linalg.matrix_exp(wide)
    with pytest.raises(ShapeError, match=r"loom\.linalg\.solve_triangular: A is 3x3 but B has shape \[2, 3\] "
                                         r"\(expected 3 rows; left=True\)"):
        loom.linalg.solve_triangular(f32, loom.ones(2, 3), upper=True)
    with pytest.raises(ShapeError, match=r"linalg\.solve_triangular.*\[2\].*\[3\]"):
        loom.linalg.solve_triangular(loom.eye(3).expand(2, 3, 3), loom.ones(3, 3, 1), upper=True)
    with pytest.raises(DTypeError, match=r"loom\.linalg\.solve_triangular: expected A and B of one dtype, got "
                                         r"float32\[3, 3\] and float64\[3, 1\]"):
        loom.linalg.solve_triangular(f32, loom.ones(3, 1, dtype=loom.float64), upper=True)
    with pytest.raises(LoomError, match=r"loom\.linalg\.eigh: UPLO must be 'L' or 'U', got 'X'"):
        loom.linalg.eigh(f32, UPLO="X")
    with pytest.raises(LoomError, match=r"loom\.linalg\.qr: mode must be"):
        loom.linalg.qr(f32, mode="full")
    with pytest.raises(ShapeError, match=r"loom\.linalg\.lstsq: A has 3 rows but B has shape \[2, 1\]"):
        loom.linalg.lstsq(f32, loom.ones(2, 1))
    with pytest.raises(LoomError, match=r"loom\.linalg\.lstsq: A does not have full rank \(its QR factor R has "
                                        r"\|pivot\| = 0.* A is float32\[3, 2\]\)"):
        loom.linalg.lstsq(loom.zeros(3, 2), loom.ones(3, 1)).solution.numpy()
    with pytest.raises(LoomError, match=r"loom\.linalg\.lu_factor: LU without pivoting is not implemented"):
        loom.linalg.lu_factor(f32, pivot=False)
    singular = loom.tensor([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0]])
    with pytest.raises(LoomError, match=r"loom\.linalg\.lu_factor: U has a zero on its diagonal"):
        loom.linalg.lu_factor(singular)[0].numpy()
    with pytest.raises(RuntimeError, match=r"U\[2,2\] is zero"):
        torch.linalg.lu_factor(torch.tensor([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0]]))
    with pytest.raises(ShapeError, match=r"loom\.linalg\.householder_product: expected A \(\.\.\., m, n\) with "
                                         r"m >= n"):
        loom.linalg.householder_product(wide, loom.ones(2, dtype=loom.float64))
    LU, piv = loom.linalg.lu_factor(f32)
    with pytest.raises(ShapeError, match=r"loom\.linalg\.lu_solve: pivots must be integers of shape \[3\] for LU "
                                         r"\[3, 3\], got float32\[3\]"):
        loom.linalg.lu_solve(LU, piv.float(), loom.ones(3, 1))
    with pytest.raises(ShapeError, match=r"loom\.lu_unpack: pivots must be integers of shape \[3\] for LU "
                                         r"\[3, 3\], got int32\[2\]"):
        loom.lu_unpack(LU, piv[:2])
    with pytest.raises(ShapeError, match=r"loom\.linalg\.lstsq: B must have as many dims as A or one fewer"):
        loom.linalg.lstsq(f32, loom.ones(2, 3, 1))
    with pytest.raises(ShapeError, match=r"loom\.linalg\.tensorinv: the product of the first 1 dims"):
        loom.linalg.tensorinv(loom.ones(2, 3), ind=1)
    with pytest.raises(LoomError, match=r"loom\.lobpcg: the matrix size \(3\) must be at least 3 x"):
        loom.lobpcg(f32, k=2)
    with pytest.raises(LoomError, match=r"loom\.linalg\.vander: N must be an int greater than 1"):
        loom.linalg.vander(loom.ones(3), N=1)


def test_ir_rules_refuse_bad_operands():
    """The primitives' own shape rules (what a graph file or the compiler meets) name the op and operands."""
    from loom.tensor import apply
    with pytest.raises(DTypeError, match=r"loom\.svd: expects float32 or float64 matrices, got int64\[2, 2\]"):
        apply("svd", [loom.ones(2, 2, dtype=loom.int64)], {"full_matrices": False})
    with pytest.raises(ShapeError, match=r"loom\.triangular_solve: A \(\.\.\., n, n\) and B \(\.\.\., n, k\) need "
                                         r"equal batch dims"):
        apply("triangular_solve", [loom.eye(3), loom.ones(2, 3, 1)], {"upper": True, "unitriangular": False})


def test_complete_qr_of_tall_matrix_is_not_differentiable():
    a = loom.tensor(conditioned(5, 3)(np.random.default_rng(0)), requires_grad=True)
    q, r = loom.linalg.qr(a, mode="complete")
    with pytest.raises(LoomError, match=r"loom\.linalg\.qr: the QR decomposition is not differentiable when "
                                        r"mode='complete' and nrows > ncols"):
        q.sum().backward()


def test_geqrf_gives_no_gradient():
    a = loom.tensor(conditioned(4, 3)(np.random.default_rng(0)), requires_grad=True)
    out, tau = loom.geqrf(a)
    assert not out.requires_grad and not tau.requires_grad


def test_docstring_examples_run():
    import doctest

    from loom.functional import decomp
    names = [(loom.linalg, n) for n in loom.linalg.__all__] + [(decomp, n) for n in dir(decomp)]
    ran = 0
    for mod, name in names:
        obj = getattr(mod, name)
        if not callable(obj) or getattr(obj, "__module__", "") != mod.__name__ or "Examples" not in (obj.__doc__ or ""):
            continue
        test = doctest.DocTestParser().get_doctest(obj.__doc__, {"loom": loom, "np": np}, name, None, 0)
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
        runner.run(test)
        result = runner.summarize(verbose=False)
        assert result.failed == 0, name
        ran += result.attempted
    assert ran > 60
