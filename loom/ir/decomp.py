"""The matrix factorisation primitives: library ops like matmul, for what primitives cannot express sensibly.

Each takes a float32/float64 matrix or batch of matrices (..., m, n) and,
as the IR has one output per node, returns one tensor; several factors are
packed into it and the frontend (`loom.linalg`) slices them apart.

``qr(a, complete)``             (..., m + n, kq): [Q; R^T], kq = m if complete else min(m, n)
``svd(a, full_matrices)``       (..., m + 1 + n, w): [U; S; V] (V = Vh^T), w = max(m, n) if full else
                                min(m, n); U fills columns :m (full) or :k, S the first k entries of row m
``svdvals(a)``                  (..., k): the singular values, descending
``eigh(a, upper)``              (..., n + 1, n): [eigenvalues (ascending); eigenvectors as columns]
``eigvalsh(a, upper)``          (..., n): the eigenvalues; `upper` picks the triangle that is read
``triangular_solve(a, b, upper, unitriangular)``   X with A X = B, A (..., n, n), B (..., n, k)
``matrix_exp(a)``               exp(A) of square matrices (Pade 13 with scaling and squaring)
``geqrf(a)``                    (..., m + 1, n): LAPACK's Householder form [a; tau] (tau in row m, :k)

The references are NumPy's LAPACK calls (numpy.linalg), so eigenvector and
singular vector signs follow LAPACK as PyTorch's CPU kernels do. Backward
rules are written with other ops (these primitives among them), so gradients
of gradients work: QR by the copyltu formula, SVD and eigh as PyTorch
documents them (the 1/(s_j^2 - s_i^2) and 1/(l_j - l_i) terms make them
undefined at repeated values, as there), the triangular solve by its
transpose, and exp by the block-matrix form of its Frechet derivative.
``geqrf`` has no gradient, as in PyTorch.
"""
from __future__ import annotations

import math

import numpy as np

from loom import dtypes as dt
from loom.errors import AutogradError, DTypeError, ShapeError, fmt_shape
from loom.ir.ops import P, _attr_names, _bool_attr, _desc, _no_attrs, register

OPS = ("qr", "svd", "svdvals", "eigh", "eigvalsh", "triangular_solve", "matrix_exp", "geqrf")


# ---------------------------------------------------------------- attributes and shapes

def _bools(op, *names):
    def rule(inputs, attrs):
        _attr_names(op, attrs, names)
        for n in names:
            _bool_attr(op, n, attrs[n])
    return rule


def _matrix(op, inputs, square=False):
    """The (m, n) of the first input, checked to be a float32/float64 (batch of) matrix."""
    x = inputs[0]
    if len(x.shape) < 2:
        raise ShapeError(f"loom.{op}: expects a matrix or a batch of matrices (..., m, n), got {_desc(inputs)}")
    if square and x.shape[-1] != x.shape[-2]:
        raise ShapeError(f"loom.{op}: expects square matrices (..., n, n), got {_desc(inputs)}")
    if x.dtype not in (dt.float32, dt.float64):
        raise DTypeError(f"loom.{op}: expects float32 or float64 matrices, got {_desc(inputs)}")
    return x.shape[-2], x.shape[-1]


def _infer_qr(inputs, attrs):
    m, n = _matrix("qr", inputs)
    kq = m if attrs["complete"] else min(m, n)
    return tuple(inputs[0].shape[:-2]) + (m + n, kq), inputs[0].dtype


def _infer_svd(inputs, attrs):
    m, n = _matrix("svd", inputs)
    w = max(m, n) if attrs["full_matrices"] else min(m, n)
    return tuple(inputs[0].shape[:-2]) + (m + 1 + n, w), inputs[0].dtype


def _infer_svdvals(inputs, attrs):
    m, n = _matrix("svdvals", inputs)
    return tuple(inputs[0].shape[:-2]) + (min(m, n),), inputs[0].dtype


def _infer_eigh(inputs, attrs):
    _, n = _matrix("eigh", inputs, square=True)
    return tuple(inputs[0].shape[:-2]) + (n + 1, n), inputs[0].dtype


def _infer_eigvalsh(inputs, attrs):
    _, n = _matrix("eigvalsh", inputs, square=True)
    return tuple(inputs[0].shape[:-2]) + (n,), inputs[0].dtype


def _infer_triangular_solve(inputs, attrs):
    a, b = inputs
    _matrix("triangular_solve", inputs, square=True)
    if len(b.shape) != len(a.shape) or tuple(b.shape[:-2]) != tuple(a.shape[:-2]) or b.shape[-2] != a.shape[-1]:
        raise ShapeError(f"loom.triangular_solve: A (..., n, n) and B (..., n, k) need equal batch dims and "
                         f"B's rows matching n, got {_desc(inputs)}")
    if b.dtype is not a.dtype:
        raise DTypeError(f"loom.triangular_solve: A and B must have one dtype, got {_desc(inputs)}")
    return tuple(b.shape), b.dtype


def _infer_matrix_exp(inputs, attrs):
    _matrix("matrix_exp", inputs, square=True)
    return tuple(inputs[0].shape), inputs[0].dtype


def _infer_geqrf(inputs, attrs):
    m, n = _matrix("geqrf", inputs)
    return tuple(inputs[0].shape[:-2]) + (m + 1, n), inputs[0].dtype


# ---------------------------------------------------------------- reference implementations

def _blas(x) -> None:
    """Give LAPACK's BLAS the threads a factorisation of `x` deserves (about m * n * min(m, n) per matrix)."""
    from loom.runtime import threads
    m, n = x.shape[-2:]
    threads.prepare_blas(int(np.prod(x.shape[:-2], dtype=np.int64)) * m * n * min(m, n))


def _qr_ref(x, attrs):
    _blas(x)
    m, n = x.shape[-2:]
    kq = m if attrs["complete"] else min(m, n)
    out = np.zeros(x.shape[:-2] + (m + n, kq), x.dtype)
    if x.size:
        q, r = np.linalg.qr(x, mode="complete" if attrs["complete"] else "reduced")
        out[..., :m, :] = q
        out[..., m:, :] = np.swapaxes(r, -1, -2)
    elif attrs["complete"] and m:
        out[..., :m, :] = np.eye(m, dtype=x.dtype)
    return out


def _svd_ref(x, attrs):
    _blas(x)
    m, n = x.shape[-2:]
    k, full = min(m, n), attrs["full_matrices"]
    out = np.zeros(x.shape[:-2] + (m + 1 + n, max(m, n) if full else k), x.dtype)
    if x.size:
        u, s, vh = np.linalg.svd(x, full_matrices=full)
        out[..., :m, :u.shape[-1]] = u
        out[..., m, :k] = s
        out[..., m + 1:, :vh.shape[-2]] = np.swapaxes(vh, -1, -2)
    elif full:
        out[..., :m, :m] = np.eye(m, dtype=x.dtype)
        out[..., m + 1:, :n] = np.eye(n, dtype=x.dtype)
    return out


def _svdvals_ref(x, attrs):
    _blas(x)
    if not x.size:
        return np.zeros(x.shape[:-2] + (min(x.shape[-2:]),), x.dtype)
    return np.linalg.svd(x, compute_uv=False)


def _eigh_ref(x, attrs):
    _blas(x)
    n = x.shape[-1]
    out = np.zeros(x.shape[:-2] + (n + 1, n), x.dtype)
    if x.size:
        w, v = np.linalg.eigh(x, UPLO="U" if attrs["upper"] else "L")
        out[..., 0, :] = w
        out[..., 1:, :] = v
    return out


def _eigvalsh_ref(x, attrs):
    _blas(x)
    if not x.size:
        return np.zeros(x.shape[:-1], x.dtype)
    return np.linalg.eigvalsh(x, UPLO="U" if attrs["upper"] else "L")


def _triangular_solve_ref(a, b, attrs):
    """Substitution row by row over the whole batch: reads only A's triangle; a zero pivot gives inf/NaN."""
    n, upper, unit = a.shape[-1], attrs["upper"], attrs["unitriangular"]
    x = np.zeros(b.shape, np.result_type(a, b))
    for i in (range(n - 1, -1, -1) if upper else range(n)):
        lo, hi = (i + 1, n) if upper else (0, i)
        acc = b[..., i, :] - (a[..., i:i + 1, lo:hi] @ x[..., lo:hi, :])[..., 0, :] if hi > lo else b[..., i, :]
        x[..., i, :] = acc if unit else acc / a[..., i, i:i + 1]
    return x


# Pade 13 coefficients and the 1-norm bound below which it is accurate without scaling (Higham 2005).
_PADE13 = (64764752532480000., 32382376266240000., 7771770303897600., 1187353796428800., 129060195264000.,
           10559470521600., 670442572800., 33522128640., 1323241920., 40840800., 960960., 16380., 182., 1.)
_THETA13 = 5.371920351148152


def _expm(a: np.ndarray) -> np.ndarray:
    """exp of one float64 matrix by scaling, Pade 13 and squaring."""
    n = a.shape[-1]
    norm = np.abs(a).sum(0).max() if n else 0.0
    if not np.isfinite(norm):
        return np.full_like(a, np.nan)
    s = max(0, int(math.ceil(math.log2(norm / _THETA13)))) if norm > _THETA13 else 0
    a = a / (2.0 ** s)
    b = _PADE13
    ident = np.eye(n)
    a2 = a @ a
    a4 = a2 @ a2
    a6 = a4 @ a2
    u = a @ (a6 @ (b[13] * a6 + b[11] * a4 + b[9] * a2) + b[7] * a6 + b[5] * a4 + b[3] * a2 + b[1] * ident)
    v = a6 @ (b[12] * a6 + b[10] * a4 + b[8] * a2) + b[6] * a6 + b[4] * a4 + b[2] * a2 + b[0] * ident
    r = np.linalg.solve(v - u, v + u)
    for _ in range(s):
        r = r @ r
    return r


def _matrix_exp_ref(x, attrs):
    _blas(x)
    flat = x.reshape((-1,) + x.shape[-2:]).astype(np.float64)
    out = np.empty_like(flat)
    for k in range(flat.shape[0]):
        out[k] = _expm(flat[k])
    return out.reshape(x.shape).astype(x.dtype)


def _geqrf_ref(x, attrs):
    _blas(x)
    m, n = x.shape[-2:]
    out = np.zeros(x.shape[:-2] + (m + 1, n), x.dtype)
    if x.size and m and n:
        h, tau = np.linalg.qr(x, mode="raw")
        out[..., :m, :] = np.swapaxes(h, -1, -2)
        out[..., m, :tau.shape[-1]] = tau
    return out


# ---------------------------------------------------------------- backward rules

def _col(n):
    return P("expand", P("reshape", P("arange", start=0, step=1, shape=(n,), dtype=dt.int64), shape=(1, n)),
             shape=(n, n))


def _eye(n, d):
    """The n x n identity of dtype `d`, from primitives."""
    cols = _col(n)
    return P("cast", P("eq", P("permute", cols, perm=(1, 0)), cols), dtype=d)


def _skew(x):
    return x - x.mT


def _solve_tri(a, b, upper, unit=False):
    return P("triangular_solve", a, b, upper=upper, unitriangular=unit)


def _qr_square_vjp(gq, gr, q, r):
    """gA of A = Q R with R square (m >= n): (gQ + Q copyltu(M)) R^-T, M = R gR^T - gQ^T Q."""
    m_ = r @ gr.mT - gq.mT @ q
    low = m_.tril(-1)
    b = gq + q @ (low + low.mT + _diag_part(m_))
    return _solve_tri(r, b.mT, True).mT


def _diag_part(x):
    n = x.shape[-1]
    return x * _eye(n, x.dtype)


def _qr_vjp(g, a, out, attrs):
    m, n = a.shape[-2:]
    if attrs["complete"] and m > n:
        raise AutogradError("loom.linalg.qr: the QR decomposition is not differentiable when mode='complete' and "
                            f"nrows > ncols (input {a.dtype.name}{fmt_shape(a.shape)}); use mode='reduced'")
    q, r = out[..., :m, :], out[..., m:, :].mT
    gq, gr = g[..., :m, :], g[..., m:, :].mT
    if m >= n:
        return (_qr_square_vjp(gq, gr, q, r),)
    x = r[..., :, :m]
    gx, gy = gr[..., :, :m], gr[..., :, m:]
    # A = [U | V] with U = Q X and Y = Q^T V: Y's dependence on Q adds V gY^T to gQ.
    gu = _qr_square_vjp(gq + a[..., :, m:] @ gy.mT, gx, q, x)
    left, right = gu, q @ gy  # Side by side along the last dim, with the pad primitive (no frontend import).
    lead = [(0, 0)] * (left.ndim - 1)
    return (P("pad", left, pads=lead + [(0, right.shape[-1])], value=0)
            + P("pad", right, pads=lead + [(left.shape[-1], 0)], value=0),)


def _svd_parts(t, m, n, k):
    return t[..., :m, :k], t[..., m, :k], t[..., m + 1:, :k]


def _svd_grad(gu, gs, gv, u, s, v):
    """gA for the thin SVD A = U diag(S) V^T, as PyTorch's svd_backward (real case)."""
    m, n = u.shape[-2], v.shape[-2]
    s2 = s * s
    e = s2.unsqueeze(-2) - s2.unsqueeze(-1) + _eye(s.shape[-1], s.dtype)
    core = (_skew(u.mT @ gu) * s.unsqueeze(-2) + s.unsqueeze(-1) * _skew(v.mT @ gv)) / e + gs.diag_embed()
    if m > n:
        gus = gu / s.unsqueeze(-2)
        return (u @ core + gus - u @ (u.mT @ gus)) @ v.mT
    if m < n:
        sgv = gv.mT / s.unsqueeze(-1)
        return u @ (core @ v.mT + sgv - (sgv @ v) @ v.mT)
    return u @ core @ v.mT


def _svd_vjp(g, a, out, attrs):
    # With full_matrices the extra columns get no gradient, as in PyTorch (which narrows to the thin part).
    m, n = a.shape[-2:]
    k = min(m, n)
    u, s, v = _svd_parts(out, m, n, k)
    gu, gs, gv = _svd_parts(g, m, n, k)
    return (_svd_grad(gu, gs, gv, u, s, v),)


def _svdvals_vjp(g, a, out, attrs):
    m, n = a.shape[-2:]
    u, _, v = _svd_parts(P("svd", a, full_matrices=False), m, n, min(m, n))
    return ((u * g.unsqueeze(-2)) @ v.mT,)


def _eigh_vjp(g, a, out, attrs):
    n = a.shape[-1]
    lam, v = out[..., 0, :], out[..., 1:, :]
    glam, gv = g[..., 0, :], g[..., 1:, :]
    eye = _eye(n, a.dtype)
    e = lam.unsqueeze(-2) - lam.unsqueeze(-1) + eye
    inner = 0.5 * _skew(v.mT @ gv) / e + glam.diag_embed()
    return (v @ inner @ v.mT,)


def _eigvalsh_vjp(g, a, out, attrs):
    v = P("eigh", a, upper=attrs["upper"])[..., 1:, :]
    return ((v * g.unsqueeze(-2)) @ v.mT,)


def _triangular_solve_vjp(g, a, b, out, attrs, needs=(True, True)):
    upper, unit = attrs["upper"], attrs["unitriangular"]
    gb = _solve_tri(a.mT, g, not upper, unit)
    ga = None
    if needs[0]:
        full = -(gb @ out.mT)
        ga = full.triu(1 if unit else 0) if upper else full.tril(-1 if unit else 0)
    return ga, (gb if needs[1] else None)


def _matrix_exp_vjp(g, a, out, attrs):
    # d exp(A)[G]^* = the upper right block of exp([[A^T, G], [0, A^T]]) (the adjoint Frechet derivative).
    n, r = a.shape[-1], len(a.shape)
    at = a.mT
    lead = ((0, 0),) * (r - 2)
    big = (P("pad", at, pads=lead + ((0, n), (0, n)), value=0.0) + P("pad", at, pads=lead + ((n, 0), (n, 0)), value=0.0)
           + P("pad", g, pads=lead + ((0, n), (n, 0)), value=0.0))
    return (P("matrix_exp", big)[..., :n, n:],)


register("qr", "contraction", 1, _infer_qr, _qr_ref, _qr_vjp, check_attrs=_bools("qr", "complete"))
register("svd", "contraction", 1, _infer_svd, _svd_ref, _svd_vjp, check_attrs=_bools("svd", "full_matrices"))
register("svdvals", "contraction", 1, _infer_svdvals, _svdvals_ref, _svdvals_vjp, check_attrs=_no_attrs("svdvals"))
register("eigh", "contraction", 1, _infer_eigh, _eigh_ref, _eigh_vjp, check_attrs=_bools("eigh", "upper"))
register("eigvalsh", "contraction", 1, _infer_eigvalsh, _eigvalsh_ref, _eigvalsh_vjp,
         check_attrs=_bools("eigvalsh", "upper"))
register("triangular_solve", "contraction", 2, _infer_triangular_solve, _triangular_solve_ref, _triangular_solve_vjp,
         check_attrs=_bools("triangular_solve", "upper", "unitriangular"))
register("matrix_exp", "contraction", 1, _infer_matrix_exp, _matrix_exp_ref, _matrix_exp_vjp,
         check_attrs=_no_attrs("matrix_exp"))
register("geqrf", "contraction", 1, _infer_geqrf, _geqrf_ref, check_attrs=_no_attrs("geqrf"))
