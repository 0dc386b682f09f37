"""`tf.linalg`: matrix products, norms, transposes, diagonals, inverses, solves and decompositions."""
from __future__ import annotations

import loom
from loom.tf._core import _ints, convert_to_tensor as _t, einsum, eye, matmul, norm, tensordot  # noqa: F401


def matrix_transpose(a, name=None, conjugate=False):
    """`a` with its last two dimensions swapped."""
    return _t(a).transpose(-1, -2)


def diag(diagonal, name=None, k=0):
    """A matrix (batch) with `diagonal` on its main diagonal."""
    return loom.diag_embed(_t(diagonal), offset=int(k))


def diag_part(input, name=None, k=0):
    """The main diagonal of a matrix (batch)."""
    return loom.diagonal(_t(input), offset=int(k), dim1=-2, dim2=-1)


def trace(x, name=None):
    """Sum of the main diagonal of a matrix (batch)."""
    return diag_part(x).sum(-1)


def band_part(input, num_lower, num_upper, name=None):
    """Keep entries within `num_lower` below and `num_upper` above the diagonal (-1: keep all)."""
    x = _t(input)
    m, n = x.shape[-2], x.shape[-1]
    i = loom.arange(m).unsqueeze(-1)
    j = loom.arange(n).unsqueeze(0)
    keep = loom.ones(m, n, dtype=loom.bool)
    if int(num_lower) >= 0:
        keep = loom.logical_and(keep, i - j <= int(num_lower))
    if int(num_upper) >= 0:
        keep = loom.logical_and(keep, j - i <= int(num_upper))
    return loom.where(keep, x, loom.zeros((), dtype=x.dtype))


def l2_normalize(x, axis=None, epsilon=1e-12, name=None):
    """`x` divided by its L2 norm over `axis`."""
    from loom.tf.math import l2_normalize as f
    return f(x, axis, epsilon)


def adjoint(matrix, name=None):
    """The conjugate transpose of a matrix (batch)."""
    x = _t(matrix)
    return (x.conj() if x.dtype.is_complex else x).transpose(-1, -2)


def matvec(a, b, transpose_a=False, adjoint_a=False, a_is_sparse=False, b_is_sparse=False, name=None):
    """Matrix (batch) times vector (batch): `a @ b[..., None]` without the trailing 1."""
    x = adjoint(a) if adjoint_a else matrix_transpose(a) if transpose_a else _t(a)
    return loom.matmul(x, _t(b).unsqueeze(-1)).squeeze(-1)


def inv(input, adjoint=False, name=None):
    """The inverse of a square matrix (batch)."""
    r = loom.linalg.inv(_t(input))
    return globals()["adjoint"](r) if adjoint else r


def det(input, name=None):
    """The determinant of a square matrix (batch)."""
    return loom.linalg.det(_t(input))


def slogdet(input, name=None):
    """`(sign, log_abs_determinant)` of a square matrix (batch)."""
    r = loom.linalg.slogdet(_t(input))
    return r.sign, r.logabsdet


def logdet(matrix, name=None):
    """The log-determinant of a Hermitian positive definite matrix (batch), through its Cholesky factor."""
    c = loom.linalg.cholesky(_t(matrix))
    return 2.0 * loom.log(loom.diagonal(c, dim1=-2, dim2=-1).real if c.dtype.is_complex
                          else loom.diagonal(c, dim1=-2, dim2=-1)).sum(-1)


def cholesky(input, name=None):
    """The lower Cholesky factor of a Hermitian positive definite matrix (batch)."""
    return loom.linalg.cholesky(_t(input))


def cholesky_solve(chol, rhs, name=None):
    """Solve `A X = rhs` given the lower Cholesky factor `chol` of `A`."""
    L, b = _t(chol), _t(rhs)
    y = loom.linalg.solve_triangular(L, b, upper=False)
    return loom.linalg.solve_triangular(adjoint(L), y, upper=True)


def solve(matrix, rhs, adjoint=False, name=None):
    """Solve `matrix X = rhs` (or `adjoint(matrix) X = rhs`) for `X`."""
    A = globals()["adjoint"](matrix) if adjoint else _t(matrix)
    return loom.linalg.solve(A, _t(rhs))


def triangular_solve(matrix, rhs, lower=True, adjoint=False, name=None):
    """Solve `matrix X = rhs` for a lower (or upper) triangular `matrix`; `adjoint` solves with its adjoint."""
    A = _t(matrix)
    upper = not lower
    if adjoint:
        A, upper = globals()["adjoint"](A), not upper
    return loom.linalg.solve_triangular(A, _t(rhs), upper=upper)


def lstsq(matrix, rhs, l2_regularizer=0.0, fast=True, name=None):
    """Least-squares solution of `matrix X = rhs` (with optional L2 regularisation)."""
    A, b = _t(matrix), _t(rhs)
    lam = float(l2_regularizer)
    if lam == 0.0:
        return loom.linalg.lstsq(A, b).solution
    At = adjoint(A)
    n = A.shape[-1]
    return loom.linalg.solve(loom.matmul(At, A) + lam * loom.eye(n, dtype=A.dtype), loom.matmul(At, b))


def qr(input, full_matrices=False, name=None):
    """`(q, r)` of a matrix (batch); reduced unless `full_matrices`."""
    r = loom.linalg.qr(_t(input), mode="complete" if full_matrices else "reduced")
    return r.Q, r.R


def svd(tensor, full_matrices=False, compute_uv=True, name=None):
    """`(s, u, v)` as TensorFlow orders them (`v`, not its transpose), or `s` alone without `compute_uv`."""
    x = _t(tensor)
    if not compute_uv:
        return loom.linalg.svdvals(x)
    r = loom.linalg.svd(x, full_matrices=bool(full_matrices))
    return r.S, r.U, adjoint(r.Vh)


def eigh(tensor, name=None):
    """`(eigenvalues, eigenvectors)` of a Hermitian matrix (batch), eigenvalues ascending."""
    r = loom.linalg.eigh(_t(tensor))
    return r.eigenvalues, r.eigenvectors


def eigvalsh(tensor, name=None):
    """Eigenvalues of a Hermitian matrix (batch), ascending."""
    return loom.linalg.eigvalsh(_t(tensor))


def pinv(a, rcond=None, validate_args=False, name=None):
    """The Moore-Penrose pseudo-inverse of a matrix (batch)."""
    return loom.linalg.pinv(_t(a), rtol=rcond)


def matrix_rank(a, tol=None, validate_args=False, name=None):
    """The rank of a matrix (batch), counting singular values above `tol`."""
    return loom.linalg.matrix_rank(_t(a), atol=tol).to(loom.int32)


def expm(input, name=None):
    """The matrix exponential of a square matrix (batch)."""
    return loom.linalg.matrix_exp(_t(input))


def cross(a, b, name=None):
    """The cross product of 3-vectors over the last axis."""
    return loom.linalg.cross(_t(a), _t(b), dim=-1)


def set_diag(input, diagonal, name=None, k=0, align="RIGHT_LEFT"):
    """`input` with its `k`-th diagonal replaced by `diagonal`."""
    x = _t(input)
    d = _t(diagonal).to(x.dtype)
    mask = loom.diag_embed(loom.ones_like(d), offset=int(k)).to(loom.bool)
    new = loom.diag_embed(d, offset=int(k))
    if tuple(mask.shape) != tuple(x.shape[-2:]) and tuple(mask.shape[-2:]) != tuple(x.shape[-2:]):
        from loom.errors import ShapeError
        raise ShapeError(f"loom.tf.linalg.set_diag: diagonal of shape {list(d.shape)} does not fit diagonal {k} of "
                         f"a matrix of shape {list(x.shape)}; expected {min(x.shape[-2:])} entries")
    return loom.where(mask, new, x)


def global_norm(t_list, name=None):
    """The Euclidean norm of all tensors of `t_list` taken together (None entries skipped)."""
    total = None
    for t in t_list:
        if t is None:
            continue
        x = _t(t)
        s = (x * x).sum()
        total = s if total is None else total + s
    return loom.sqrt(total) if total is not None else loom.tensor(0.0)


def normalize(tensor, ord="euclidean", axis=None, name=None):
    """`(tensor / norm, norm)` with the norm kept as a broadcastable tensor."""
    n = norm(tensor, ord=ord, axis=axis, keepdims=True)
    return _t(tensor) / n, n


from loom.tf._unsupported import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr("loom.tf.linalg", "tf.linalg")
