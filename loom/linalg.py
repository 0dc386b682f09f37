"""`loom.linalg`: PyTorch's `torch.linalg` functions that decompose into loom's primitives.

Norms, products and diagonals live here; factorisations (SVD, QR, LU, and
so det/inv/solve and the nuclear and spectral norms) need library primitives
loom does not have yet and raise a clear error.

Examples
--------
>>> import loom
>>> loom.linalg.vector_norm(loom.tensor([3.0, 4.0])).item()
5.0
"""
from __future__ import annotations

from loom import dtypes as dt
from loom.errors import DTypeError, LoomError, ShapeError, fmt_shape
from loom.functional.linalg import _zero_grad_link, matmul
from loom.functional.reduce import amax, amin, scaled_pnorm
from loom.functional.shape import diagonal as _diagonal
from loom.functional.shape import roll, squeeze
from loom.tensor import (
    Tensor, broadcast_shapes, broadcast_to, eye, normalize_dim, normalize_dims, tensor,
)

__all__ = ["cross", "diagonal", "matmul", "matrix_norm", "matrix_power", "multi_dot", "norm", "vecdot",
           "vector_norm", "inv", "det", "slogdet", "cholesky", "solve", "SlogdetResult"]

_INF = float("inf")


def _t(x) -> Tensor:
    return x if isinstance(x, Tensor) else tensor(x)


def _float_input(op: str, x, dtype) -> Tensor:
    x = _t(x)
    if not x.dtype.is_floating_point:
        raise DTypeError(f"loom.linalg.{op}: expected a floating point tensor as input, got {x.dtype.name}")
    if dtype is not None:
        x = x.to(dtype)
    return x


def vector_norm(x, ord=2, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
    """The vector `ord`-norm over `dim` (all elements when None).

    Parameters
    ----------
    x : Tensor
        A floating point tensor.
    ord : float
        inf: max |x|; -inf: min |x|; 0: number of nonzeros; otherwise
        (sum |x|**ord)**(1/ord). Default 2.
    dim : int or tuple of ints, optional
    keepdim : bool
    dtype : loom.dtype, optional
        Cast `x` to this dtype first.

    Examples
    --------
    >>> loom.linalg.vector_norm(loom.tensor([[3.0, -4.0]]), 1, dim=1).tolist()
    [7.0]
    """
    x = _float_input("vector_norm", x, dtype)
    dims = normalize_dims(dim, x.ndim, "linalg.vector_norm")
    p = float(ord)
    if p == _INF:
        return amax(x.abs(), dims, keepdim)
    if p == -_INF:
        return amin(x.abs(), dims, keepdim)
    if p == 0:
        return _zero_grad_link((x != 0).to(x.dtype), x).sum(dims, keepdim)
    if p == 1:
        return x.abs().sum(dims, keepdim)
    if p < 0:
        return (x.abs() ** p).sum(dims, keepdim) ** (1.0 / p)
    return scaled_pnorm(x, p, dims, keepdim)


def matrix_norm(A, ord="fro", dim=(-2, -1), keepdim: bool = False, *, dtype=None) -> Tensor:
    """The matrix norm of the (dim[0], dim[1]) planes.

    Parameters
    ----------
    ord : 'fro', 1, -1, inf or -inf
        'fro': Frobenius; 1 / -1: max / min column sum of |A|; inf / -inf:
        max / min row sum. 'nuc', 2 and -2 need an SVD and raise.

    Examples
    --------
    >>> loom.linalg.matrix_norm(loom.tensor([[1.0, -2.0], [3.0, 4.0]]), 1).item()
    6.0
    """
    A = _float_input("matrix_norm", A, dtype)
    if A.ndim < 2:
        raise ShapeError(f"loom.linalg.matrix_norm: expected a tensor with at least 2 dims, got "
                         f"{fmt_shape(A.shape)}")
    dims = list(dim) if isinstance(dim, (list, tuple)) else [dim]
    if len(dims) != 2:
        raise ShapeError(f"loom.linalg.matrix_norm: dim must be a 2-tuple, got {dim!r}")
    r, c = (normalize_dim(d, A.ndim, "linalg.matrix_norm") for d in dims)
    if r == c:
        raise ShapeError(f"loom.linalg.matrix_norm: dims must be different, got {dim!r}")
    if ord == "fro":
        return vector_norm(A, 2, (r, c), keepdim)
    if ord in ("nuc", 2, -2):
        raise LoomError(f"loom.linalg.matrix_norm: ord {ord!r} needs singular values (an SVD), which loom "
                        "does not have yet; use 'fro', 1, -1, inf or -inf")
    if ord not in (1, -1, _INF, -_INF):
        raise LoomError(f"loom.linalg.matrix_norm: unsupported ord {ord!r}; expected 'fro', 'nuc', "
                        "1, -1, 2, -2, inf or -inf")
    # ord 1: sum over rows (a column sum), then the extreme over columns; inf the other way round.
    inner, outer = (r, c) if abs(ord) == 1 else (c, r)
    sums = A.abs().sum(inner, keepdim=True)
    out = (amax if ord > 0 else amin)(sums, outer, keepdim=True)
    return out if keepdim else squeeze(out, (r, c))


def norm(A, ord=None, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
    """A vector or matrix norm, chosen as `torch.linalg.norm` chooses.

    An int `dim` (or a 1-tuple) gives a vector norm and a 2-tuple a matrix
    norm. With `dim=None`: no `ord` gives the 2-norm of all elements; with an
    `ord`, 1-d input gives a vector norm and 2-d input a matrix norm.

    Examples
    --------
    >>> loom.linalg.norm(loom.tensor([[3.0, 0.0], [0.0, 4.0]])).item()
    5.0
    """
    A = _float_input("norm", A, dtype)
    if isinstance(dim, int) or (isinstance(dim, (list, tuple)) and len(dim) == 1):
        if isinstance(ord, str):
            raise LoomError(f"loom.linalg.norm: ord {ord!r} is a matrix norm and needs a 2-tuple dim, got {dim!r}")
        return vector_norm(A, 2 if ord is None else ord, dim, keepdim)
    if dim is not None:
        return matrix_norm(A, "fro" if ord is None else ord, dim, keepdim)
    if ord is None:
        return vector_norm(A, 2, None, keepdim)
    if A.ndim == 1:
        if isinstance(ord, str):
            raise LoomError(f"loom.linalg.norm: ord {ord!r} is a matrix norm but the input is 1-d")
        return vector_norm(A, ord, None, keepdim)
    if A.ndim == 2:
        return matrix_norm(A, ord, (-2, -1), keepdim)
    raise ShapeError(f"loom.linalg.norm: with an ord and no dim the input must be 1-d or 2-d, got "
                     f"{fmt_shape(A.shape)}")


def vecdot(x, y, *, dim: int = -1) -> Tensor:
    """Dot products of vectors along `dim` (the inputs broadcast).

    Examples
    --------
    >>> loom.linalg.vecdot(loom.ones(2, 3), loom.ones(3)).tolist()
    [3.0, 3.0]
    """
    x, y = _t(x), _t(y)
    shape = broadcast_shapes(tuple(x.shape), tuple(y.shape), op="linalg.vecdot")
    d = normalize_dim(dim, len(shape), "linalg.vecdot")
    return (broadcast_to(x, shape, "linalg.vecdot") * broadcast_to(y, shape, "linalg.vecdot")).sum(d)


def multi_dot(tensors) -> Tensor:
    """The product of a chain of matrices; the first and last may be vectors.

    Examples
    --------
    >>> loom.linalg.multi_dot([loom.ones(3), loom.ones(3, 2), loom.ones(2)]).item()
    6.0
    """
    ts = [_t(v) for v in tensors]
    if len(ts) < 2:
        raise LoomError(f"loom.linalg.multi_dot: expected at least 2 tensors, got {len(ts)}")
    for k, v in enumerate(ts):
        ok = v.ndim == 2 or (v.ndim == 1 and k in (0, len(ts) - 1))
        if not ok:
            raise ShapeError(f"loom.linalg.multi_dot: tensor {k} must be 2-d (the first and last may be 1-d), "
                             f"got {fmt_shape(v.shape)}")
    out = ts[0]
    for v in ts[1:]:
        out = matmul(out, v)
    return out


def matrix_power(A, n: int) -> Tensor:
    """A (batch of) square matrix raised to the integer power `n` >= 0, by repeated squaring.

    Examples
    --------
    >>> loom.linalg.matrix_power(loom.tensor([[1, 1], [0, 1]]), 3).tolist()
    [[1, 3], [0, 1]]
    """
    A = _t(A)
    if A.ndim < 2 or A.shape[-1] != A.shape[-2]:
        raise ShapeError(f"loom.linalg.matrix_power: expected a (batch of) square matrix, got {fmt_shape(A.shape)}")
    n = int(n)
    if n < 0:
        raise LoomError("loom.linalg.matrix_power: negative powers need a matrix inverse, which loom does "
                        "not have yet")
    if n == 0:
        ident = broadcast_to(eye(A.shape[-1], dtype=A.dtype), tuple(A.shape), "linalg.matrix_power")
        return _zero_grad_link(ident, A)
    result, base = None, A
    while n:
        if n & 1:
            result = base if result is None else matmul(result, base)
        n >>= 1
        if n:
            base = matmul(base, base)
    return result if result is not A else result.clone()


def diagonal(A, *, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Tensor:
    """The diagonals of the (dim1, dim2) planes (the last two dims by default).

    Examples
    --------
    >>> loom.linalg.diagonal(loom.eye(2)).tolist()
    [1.0, 1.0]
    """
    return _diagonal(A, offset, dim1, dim2)


def cross(x, y, *, dim: int = -1) -> Tensor:
    """The cross product of 3-vectors along `dim` (inputs of one rank, broadcast).

    Examples
    --------
    >>> loom.linalg.cross(loom.tensor([1.0, 0.0, 0.0]), loom.tensor([0.0, 1.0, 0.0])).tolist()
    [0.0, 0.0, 1.0]
    """
    x, y = _t(x), _t(y)
    if x.ndim != y.ndim:
        raise ShapeError(f"loom.linalg.cross: inputs must have the same number of dims, got "
                         f"{fmt_shape(x.shape)} and {fmt_shape(y.shape)}")
    shape = broadcast_shapes(tuple(x.shape), tuple(y.shape), op="linalg.cross")
    d = normalize_dim(dim, len(shape), "linalg.cross")
    if shape[d] != 3:
        raise ShapeError(f"loom.linalg.cross: dim {dim} must have size 3, got shapes {fmt_shape(x.shape)} "
                         f"and {fmt_shape(y.shape)}")
    d_out = dt.result_type(x, y)
    x = broadcast_to(x.to(d_out), shape, "linalg.cross")
    y = broadcast_to(y.to(d_out), shape, "linalg.cross")
    # c_i = x_{i+1} y_{i+2} - x_{i+2} y_{i+1}, with indices mod 3.
    return roll(x, -1, d) * roll(y, -2, d) - roll(x, -2, d) * roll(y, -1, d)



# ---------------------------------------------------------------- square-matrix functions (torch.linalg names)

class SlogdetResult(tuple):
    """(sign, logabsdet) of `slogdet`, also readable by name."""

    @property
    def sign(self) -> Tensor:
        return self[0]

    @property
    def logabsdet(self) -> Tensor:
        return self[1]


def inv(A) -> Tensor:
    """The inverse of a square matrix (or batch); a singular one raises, as ``torch.linalg.inv``.

    Examples
    --------
    >>> loom.linalg.inv(loom.tensor([[2.0, 0.0], [0.0, 4.0]])).tolist()
    [[0.5, 0.0], [0.0, 0.25]]
    """
    from loom.functional.compat import inverse
    return inverse(_float_input("inv", A, None))


def det(A) -> Tensor:
    """The determinant of a square matrix (or batch), as ``torch.linalg.det``.

    Examples
    --------
    >>> loom.linalg.det(loom.tensor([[2.0, 1.0], [1.0, 3.0]])).item()
    5.0
    """
    from loom.functional.compat import det as _det
    return _det(_float_input("det", A, None))


def slogdet(A) -> SlogdetResult:
    """(sign, log|det|) of a square matrix (or batch), as ``torch.linalg.slogdet`` (fields ``sign``, ``logabsdet``).

    Examples
    --------
    >>> r = loom.linalg.slogdet(loom.tensor([[2.0, 1.0], [1.0, 3.0]]))
    >>> round(r.logabsdet.item(), 4), r.sign.item()
    (1.6094, 1.0)
    """
    from loom.functional.compat import slogdet as _slogdet
    return SlogdetResult(_slogdet(_float_input("slogdet", A, None)))


def cholesky(A, *, upper: bool = False) -> Tensor:
    """The Cholesky factor of a symmetric positive-definite matrix (or batch), as ``torch.linalg.cholesky``.

    Examples
    --------
    >>> loom.linalg.cholesky(loom.tensor([[4.0, 2.0], [2.0, 5.0]])).tolist()
    [[2.0, 0.0], [1.0, 2.0]]
    """
    from loom.functional.compat import cholesky as _cholesky
    return _cholesky(_float_input("cholesky", A, None), upper=upper)


def solve(A, B, *, left: bool = True) -> Tensor:
    """The solution X of ``A X = B`` (``X A = B`` with ``left=False``), as ``torch.linalg.solve``.

    `B` may be a vector (one right-hand side) or a (batch of) matrix; batch
    dimensions broadcast. Computed through the inverse of `A` (LU with partial
    pivoting), so it is differentiable in `A` and `B`; meant for the small,
    well-conditioned systems of training code.

    Examples
    --------
    >>> loom.linalg.solve(loom.tensor([[2.0, 0.0], [0.0, 4.0]]), loom.tensor([2.0, 2.0])).tolist()
    [1.0, 0.5]
    """
    A = _float_input("solve", A, None)
    B = _float_input("solve", B, None)
    if A.ndim < 2 or A.shape[-1] != A.shape[-2]:
        raise ShapeError(f"loom.linalg.solve: A must be a (batch of) square matrix, got shape {list(A.shape)}")
    Ainv = inv(A)
    n = A.shape[-1]
    vector = B.ndim == A.ndim - 1 and tuple(B.shape[-1:]) == (n,)
    if vector:
        if not left:
            raise ShapeError("loom.linalg.solve: left=False needs B to be a matrix, got a vector")
        return (Ainv @ B.unsqueeze(-1)).squeeze(-1)
    if left:
        if B.shape[-2] != n:
            raise ShapeError(f"loom.linalg.solve: A is {n}x{n} but B has {B.shape[-2]} rows "
                             f"(shapes {list(A.shape)} and {list(B.shape)})")
        return Ainv @ B
    if B.shape[-1] != n:
        raise ShapeError(f"loom.linalg.solve: with left=False, B must have {n} columns, got shape {list(B.shape)}")
    return B @ Ainv
