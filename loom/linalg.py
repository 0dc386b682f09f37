"""`loom.linalg`: PyTorch's `torch.linalg` functions that decompose into loom's primitives.

Norms, products and diagonals decompose into primitives; LU (and so det,
inv, solve) is written as vectorised elimination steps; QR, SVD, symmetric
eigen, triangular solves and the matrix exponential are library primitives
(`loom.ir.decomp`), and lstsq, pinv, rank, cond and the rest build on them.

Examples
--------
>>> import loom
>>> loom.linalg.vector_norm(loom.tensor([3.0, 4.0])).item()
5.0
"""
from __future__ import annotations

from loom import _upper
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
           "vector_norm", "inv", "det", "slogdet", "cholesky", "solve", "SlogdetResult",
           "qr", "svd", "svdvals", "eigh", "eigvalsh", "lstsq", "lu", "lu_factor", "lu_factor_ex", "lu_solve",
           "solve_triangular",
           "pinv", "matrix_exp", "matrix_rank", "cond", "householder_product", "tensorinv", "tensorsolve", "vander",
           "QRResult", "SVDResult", "EighResult", "LstsqResult", "LUResult", "LUFactorResult", "LUFactorExResult"]

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
        'fro': Frobenius; 'nuc': the sum of singular values; 2 / -2: the
        largest / smallest singular value; 1 / -1: max / min column sum of
        |A|; inf / -inf: max / min row sum.

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
        from loom.functional.shape import movedim
        S = svdvals(movedim(A, (r, c), (-2, -1)))
        out = S.sum(-1) if ord == "nuc" else S.amax(-1) if ord == 2 else S.amin(-1)
        if keepdim:
            for d in sorted((r, c)):
                out = out.unsqueeze(d)
        return out
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
    """A (batch of) square matrix raised to the integer power `n` by repeated squaring (of its inverse for n < 0).

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
        A, n = inv(A), -n
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


# ---------------------------------------------------------------- factorisations (library primitives, loom.ir.decomp)

class _Result(tuple):
    """A tuple of results also readable by name (its `_fields`), as PyTorch's ``torch.return_types``."""

    _fields: tuple[str, ...] = ()

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        for i, f in enumerate(cls._fields):
            setattr(cls, f, property(lambda self, i=i: self[i], doc=f"Item {i}: {f}."))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(" + ", ".join(f"{f}={v!r}" for f, v in zip(self._fields, self)) + ")"


def _named(name: str, fields: tuple[str, ...], doc: str) -> type:
    """A `_Result` class made at run time (for the torch.* spellings' result types)."""
    return type(name, (_Result,), {"_fields": fields, "__doc__": doc, "__module__": __name__})


class QRResult(_Result):
    """(Q, R) of `qr`, also readable by name."""
    _fields = ("Q", "R")


class SVDResult(_Result):
    """(U, S, Vh) of `svd`, also readable by name."""
    _fields = ("U", "S", "Vh")


class EighResult(_Result):
    """(eigenvalues, eigenvectors) of `eigh`, also readable by name."""
    _fields = ("eigenvalues", "eigenvectors")


class LstsqResult(_Result):
    """(solution, residuals, rank, singular_values) of `lstsq`, also readable by name."""
    _fields = ("solution", "residuals", "rank", "singular_values")


class LUResult(_Result):
    """(P, L, U) of `lu`, also readable by name."""
    _fields = ("P", "L", "U")


class LUFactorResult(_Result):
    """(LU, pivots) of `lu_factor`, also readable by name."""
    _fields = ("LU", "pivots")


class LUFactorExResult(_Result):
    """(LU, pivots, info) of `lu_factor_ex`, also readable by name."""
    _fields = ("LU", "pivots", "info")


def _prim(op: str, x: Tensor, **attrs) -> Tensor:
    from loom.tensor import apply
    return apply(op, (x,), attrs)


def _matrix_input(op: str, A, square: bool = False) -> Tensor:
    """`A` checked to be a float32/float64 (batch of) matrix, square when asked."""
    A = _t(A)
    if A.ndim < 2 or (square and A.shape[-1] != A.shape[-2]):
        what = "square matrix (..., n, n)" if square else "matrix (..., m, n)"
        raise ShapeError(f"loom.linalg.{op}: expected a {what} or a batch of them, got {A.dtype.name}"
                         f"{fmt_shape(A.shape)}")
    if A.dtype not in (dt.float32, dt.float64):
        raise DTypeError(f"loom.linalg.{op}: expected a float32 or float64 matrix, got {A.dtype.name}"
                         f"{fmt_shape(A.shape)}")
    return A


def _same_dtype(op: str, A: Tensor, B: Tensor) -> None:
    if A.dtype is not B.dtype:
        raise DTypeError(f"loom.linalg.{op}: expected A and B of one dtype, got {A.dtype.name}{fmt_shape(A.shape)} "
                         f"and {B.dtype.name}{fmt_shape(B.shape)}")


def _batch_broadcast(op: str, A: Tensor, B: Tensor) -> tuple[Tensor, Tensor]:
    """A and B with their batch dims (all but the last two) broadcast to one shape."""
    batch = broadcast_shapes(tuple(A.shape[:-2]), tuple(B.shape[:-2]), op=f"linalg.{op}")
    return (broadcast_to(A, batch + tuple(A.shape[-2:]), f"linalg.{op}"),
            broadcast_to(B, batch + tuple(B.shape[-2:]), f"linalg.{op}"))


def qr(A, mode: str = "reduced") -> QRResult:
    """The QR decomposition A = Q R of a (batch of) matrix, as ``torch.linalg.qr``.

    Parameters
    ----------
    A : Tensor
        float32 or float64, shape (..., m, n).
    mode : {'reduced', 'complete', 'r'}
        'reduced': Q (..., m, k), R (..., k, n) with k = min(m, n);
        'complete': Q (..., m, m), R (..., m, n); 'r': R only (Q is empty).

    Returns
    -------
    QRResult
        (Q, R), also as ``.Q`` and ``.R``. Signs follow LAPACK (R's diagonal may
        be negative), as PyTorch's. Differentiable, except mode='complete' with
        m > n, as in PyTorch.

    Examples
    --------
    >>> Q, R = loom.linalg.qr(loom.tensor([[3.0, 1.0], [4.0, 2.0]]))
    >>> (Q @ R).round(decimals=4).tolist()
    [[3.0, 1.0], [4.0, 2.0]]
    """
    A = _matrix_input("qr", A)
    if mode not in ("reduced", "complete", "r"):
        raise LoomError(f"loom.linalg.qr: mode must be 'reduced', 'complete' or 'r', got {mode!r}")
    m = A.shape[-2]
    packed = _prim("qr", A, complete=mode == "complete")
    R = packed[..., m:, :].mT
    if mode == "r":
        return QRResult((A.reshape(-1)[:0] * 0, R))
    return QRResult((packed[..., :m, :], R))


def svd(A, full_matrices: bool = True, *, driver=None) -> SVDResult:
    """The singular value decomposition A = U diag(S) Vh, as ``torch.linalg.svd``.

    Parameters
    ----------
    A : Tensor
        float32 or float64, shape (..., m, n).
    full_matrices : bool
        True: U (..., m, m) and Vh (..., n, n); False: the thin factors with
        k = min(m, n) columns of U and rows of Vh.
    driver : None
        PyTorch's CUDA-only choice of solver; accepted and ignored (must be None).

    Returns
    -------
    SVDResult
        (U, S, Vh), S descending. The singular vectors are unique only up to
        sign (and, at repeated singular values, up to rotation), as PyTorch
        documents: differentiate only losses that do not depend on that choice.
        Gradients through U or Vh are undefined at repeated or zero singular
        values; with ``full_matrices`` the extra columns get no gradient (as in
        PyTorch). For singular values alone use `svdvals`.

    Examples
    --------
    >>> U, S, Vh = loom.linalg.svd(loom.tensor([[3.0, 0.0], [0.0, -2.0]]))
    >>> S.tolist()
    [3.0, 2.0]
    """
    A = _matrix_input("svd", A)
    if driver is not None:
        raise LoomError(f"loom.linalg.svd: driver= picks a CUDA solver; on the CPU it must be None, got {driver!r}")
    m, n = A.shape[-2:]
    k = min(m, n)
    packed = _prim("svd", A, full_matrices=bool(full_matrices))
    cu, cv = (m, n) if full_matrices else (k, k)
    return SVDResult((packed[..., :m, :cu], packed[..., m, :k], packed[..., m + 1:, :cv].mT))


def svdvals(A, *, driver=None) -> Tensor:
    """The singular values of a (batch of) matrix, descending, as ``torch.linalg.svdvals``.

    Differentiable everywhere the singular values are distinct (the gradient is
    U Vh-shaped: U diag(g) Vh).

    Examples
    --------
    >>> loom.linalg.svdvals(loom.tensor([[0.0, 2.0], [1.0, 0.0]])).tolist()
    [2.0, 1.0]
    """
    A = _matrix_input("svdvals", A)
    if driver is not None:
        raise LoomError(f"loom.linalg.svdvals: driver= picks a CUDA solver; on the CPU it must be None, got "
                        f"{driver!r}")
    return _prim("svdvals", A)


def _uplo(op: str, UPLO) -> bool:
    if UPLO not in ("L", "U"):
        raise LoomError(f"loom.linalg.{op}: UPLO must be 'L' or 'U', got {UPLO!r}")
    return UPLO == "U"


def eigh(A, UPLO: str = "L") -> EighResult:
    """Eigenvalues (ascending) and eigenvectors (columns) of a symmetric matrix, as ``torch.linalg.eigh``.

    Only the triangle named by `UPLO` ('L' lower, 'U' upper) is read. The
    eigenvectors are unique only up to sign (and rotation within repeated
    eigenvalues); gradients through them are undefined at repeated eigenvalues,
    as in PyTorch, which computes gA = V (diag(gL) + skew(V^T gV) / (l_j - l_i)) V^T.

    Examples
    --------
    >>> L, V = loom.linalg.eigh(loom.tensor([[2.0, 1.0], [1.0, 2.0]]))
    >>> L.round(decimals=4).tolist()
    [1.0, 3.0]
    """
    A = _matrix_input("eigh", A, square=True)
    packed = _prim("eigh", A, upper=_uplo("eigh", UPLO))
    return EighResult((packed[..., 0, :], packed[..., 1:, :]))


def eigvalsh(A, UPLO: str = "L") -> Tensor:
    """The eigenvalues (ascending) of a symmetric matrix, as ``torch.linalg.eigvalsh``.

    Examples
    --------
    >>> loom.linalg.eigvalsh(loom.tensor([[2.0, 0.0], [0.0, -1.0]])).tolist()
    [-1.0, 2.0]
    """
    A = _matrix_input("eigvalsh", A, square=True)
    return _prim("eigvalsh", A, upper=_uplo("eigvalsh", UPLO))


def solve_triangular(A, B, *, upper: bool, left: bool = True, unitriangular: bool = False) -> Tensor:
    """X with A X = B (X A = B with ``left=False``) for triangular A, as ``torch.linalg.solve_triangular``.

    Only the triangle of A named by `upper` is read (and not its diagonal with
    ``unitriangular``, which takes it as ones); batch dims broadcast. A zero on
    the diagonal gives inf/NaN, as LAPACK's trtrs.

    Examples
    --------
    >>> A = loom.tensor([[2.0, 1.0], [0.0, 4.0]])
    >>> loom.linalg.solve_triangular(A, loom.tensor([[4.0], [8.0]]), upper=True).tolist()
    [[1.0], [2.0]]
    """
    A = _matrix_input("solve_triangular", A, square=True)
    B = _matrix_input("solve_triangular", B)
    _same_dtype("solve_triangular", A, B)
    n = A.shape[-1]
    if (B.shape[-2] if left else B.shape[-1]) != n:
        raise ShapeError(f"loom.linalg.solve_triangular: A is {n}x{n} but B has shape {fmt_shape(B.shape)} "
                         f"(expected {n} {'rows' if left else 'columns'}; left={left})")
    A, B = _batch_broadcast("solve_triangular", A, B)
    from loom.tensor import apply
    if left:
        return apply("triangular_solve", (A, B), {"upper": bool(upper), "unitriangular": bool(unitriangular)})
    out = apply("triangular_solve", (A.mT, B.mT), {"upper": not upper, "unitriangular": bool(unitriangular)})
    return out.mT


def matrix_exp(A) -> Tensor:
    """The matrix exponential of a (batch of) square matrix, as ``torch.linalg.matrix_exp``.

    Pade approximation of degree 13 with scaling and squaring (Higham 2005),
    computed in float64; differentiable to any order (its gradient is a block
    of the exponential of a 2n x 2n matrix).

    Examples
    --------
    >>> loom.linalg.matrix_exp(loom.tensor([[0.0, 1.0], [0.0, 0.0]])).tolist()
    [[1.0, 1.0], [0.0, 1.0]]
    """
    return _prim("matrix_exp", _matrix_input("matrix_exp", A, square=True))


def _tolerance(S_max: Tensor, m: int, n: int, atol, rtol, dtype) -> Tensor:
    """max(atol, rtol * S_max), with PyTorch's defaults: rtol = eps * max(m, n) unless only atol is given."""
    import numpy as np
    if rtol is None:
        rtol = 0.0 if atol is not None and not (isinstance(atol, (int, float)) and atol <= 0) else \
            float(np.finfo(dtype.np).eps) * max(m, n)
    atol = 0.0 if atol is None else atol
    from loom.functional.math import maximum
    return maximum(_t(atol).to(dtype), _t(rtol).to(dtype) * S_max)


def pinv(A, rcond=None, hermitian: bool = False, *, atol=None, rtol=None) -> Tensor:
    """The Moore-Penrose pseudo-inverse, as ``torch.linalg.pinv``.

    Singular values (|eigenvalues| with ``hermitian``, which reads only the
    lower triangle) at or below
    max(atol, rtol * largest) count as zero; by default atol = 0 and
    rtol = eps * max(m, n). `rcond` is PyTorch's older name for `rtol`.
    Differentiable where the rank does not change and the nonzero singular
    values are distinct (it goes through `svd`).

    Examples
    --------
    >>> loom.linalg.pinv(loom.tensor([[2.0, 0.0], [0.0, 0.0]])).tolist()
    [[0.5, 0.0], [0.0, 0.0]]
    """
    A = _matrix_input("pinv", A)
    if rcond is not None:
        if rtol is not None:
            raise LoomError("loom.linalg.pinv: give rcond or rtol, not both (rcond is the older name of rtol)")
        rtol = rcond
    m, n = A.shape[-2:]
    from loom.functional.math import where
    if hermitian:
        if m != n:
            raise ShapeError(f"loom.linalg.pinv: hermitian=True needs square matrices, got {fmt_shape(A.shape)}")
        # The value reads the lower triangle only; the gradient is the general pseudo-inverse's, as PyTorch's.
        low = A.tril(-1)
        A = A + (low + low.mT + _diagonal(A, 0, -2, -1).diag_embed() - A).detach()
    U, S, Vh = svd(A, full_matrices=False)
    tol = _tolerance(S[..., :1], m, n, atol, rtol, A.dtype)
    keep = S > tol
    inv_s = where(keep, 1.0 / where(keep, S, 1.0), 0.0)
    return Vh.mT @ (inv_s.unsqueeze(-1) * U.mT)


def matrix_rank(A, tol=None, hermitian: bool = False, *, atol=None, rtol=None) -> Tensor:
    """The number of singular values above max(atol, rtol * largest), as ``torch.linalg.matrix_rank`` (int64).

    Defaults as `pinv`; `tol` is PyTorch's older name for `atol`.

    Examples
    --------
    >>> loom.linalg.matrix_rank(loom.tensor([[1.0, 2.0], [2.0, 4.0]])).item()
    1
    """
    A = _matrix_input("matrix_rank", A)
    if tol is not None:
        if atol is not None or rtol is not None:
            raise LoomError("loom.linalg.matrix_rank: give tol or atol/rtol, not both (tol is the older name of "
                            "atol)")
        atol, rtol = tol, 0.0
    m, n = A.shape[-2:]
    if hermitian:
        if m != n:
            raise ShapeError(f"loom.linalg.matrix_rank: hermitian=True needs square matrices, got "
                             f"{fmt_shape(A.shape)}")
        S = eigvalsh(A).abs()
    else:
        S = svdvals(A)
    if min(m, n) == 0:
        return S.sum(-1).to(dt.int64)
    tol_ = _tolerance(S.amax(-1, keepdim=True), m, n, atol, rtol, A.dtype)
    return (S > tol_).to(dt.int64).sum(-1)


def cond(A, p=None) -> Tensor:
    """The condition number of a (batch of) matrix in the norm `p`, as ``torch.linalg.cond``.

    p None or 2: largest / smallest singular value (any shape); -2: the
    reverse; 'fro', 'nuc', inf, -inf, 1, -1: norm(A) * norm(inv(A)) (square).

    Examples
    --------
    >>> loom.linalg.cond(loom.tensor([[4.0, 0.0], [0.0, 2.0]])).item()
    2.0
    """
    A = _matrix_input("cond", A)
    if p is None or p == 2 or p == -2:
        S = svdvals(A)
        return S[..., 0] / S[..., -1] if p != -2 else S[..., -1] / S[..., 0]
    if p not in ("fro", "nuc", 1, -1, _INF, -_INF):
        raise LoomError(f"loom.linalg.cond: unsupported p {p!r}; expected None, 'fro', 'nuc', inf, -inf, 1, -1, "
                        "2 or -2")
    A = _matrix_input("cond", A, square=True)
    return matrix_norm(A, p) * matrix_norm(inv(A), p)


def lstsq(A, B, rcond=None, *, driver=None) -> LstsqResult:
    """The least-squares solution of A X = B, as ``torch.linalg.lstsq`` (a named result).

    Solved through a QR decomposition (of A when m >= n, of A^T for the
    minimum-norm solution when m < n), so A must have full rank: an exactly
    rank-deficient A (a zero on R's diagonal) raises and a nearly deficient
    one gives large values, where PyTorch's default 'gelsy' driver would
    still answer. `B` may be (..., m, k) or a vector batch (..., m); batch dims
    broadcast. As PyTorch's CPU drivers: ``residuals`` (the squared residual
    norms per column) are given for m > n with the drivers 'gels', 'gelsd' and
    'gelss' (else empty); ``rank`` for all but 'gels'; ``singular_values``
    for 'gelsd' and 'gelss'. `rcond` sets the rank tolerance (relative to the
    largest singular value). Differentiable in A and B.

    Examples
    --------
    >>> A = loom.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]])
    >>> r = loom.linalg.lstsq(A, loom.tensor([[1.0], [2.0], [3.0]]), driver="gelsd")
    >>> r.solution.tolist(), r.residuals.tolist(), r.rank.tolist()
    ([[1.0], [2.0]], [9.0], 2)
    """
    A = _matrix_input("lstsq", A)
    B = _t(B)
    if driver not in (None, "gels", "gelsy", "gelsd", "gelss"):
        raise LoomError(f"loom.linalg.lstsq: driver must be None, 'gels', 'gelsy', 'gelsd' or 'gelss', got "
                        f"{driver!r}")
    driver = driver or "gelsy"
    m, n = A.shape[-2:]
    if not 0 <= A.ndim - B.ndim <= 1:
        raise ShapeError(f"loom.linalg.lstsq: B must have as many dims as A or one fewer (a vector right-hand "
                         f"side), got A {fmt_shape(A.shape)} and B {fmt_shape(B.shape)}")
    vector = B.ndim == A.ndim - 1
    if vector:
        B = B.unsqueeze(-1)
    B = _matrix_input("lstsq", B)
    _same_dtype("lstsq", A, B)
    if B.shape[-2] != m:
        raise ShapeError(f"loom.linalg.lstsq: A has {m} rows but B has shape {fmt_shape(B.shape)} (expected B "
                         f"(..., {m}, k) or (..., {m}))")
    A, B = _batch_broadcast("lstsq", A, B)
    rank_msg = ("loom.linalg.lstsq: A does not have full rank (its QR factor R has |pivot| = {value} on the "
                f"diagonal; A is {A.dtype.name}{fmt_shape(A.shape)}); this QR-based solver needs full rank")
    if m >= n:
        Q, R = qr(A)
        X = solve_triangular(_checked_pivots("linalg.lstsq", R, rank_msg), Q.mT @ B, upper=True)
    else:
        Q, R = qr(A.mT)
        X = Q @ solve_triangular(_checked_pivots("linalg.lstsq", R, rank_msg).mT, B, upper=False)
    empty = A.reshape(-1)[:0] * 0  # PyTorch's empty results are part of the graph (they require grad).
    residuals = empty
    if m > n and driver != "gelsy":
        residuals = ((A @ X - B) ** 2).sum(-2)
    rank = tensor([], dtype=dt.int64) if driver == "gels" else matrix_rank(
        A, rtol=rcond if rcond is not None and rcond > 0 else None)
    sv = svdvals(A) if driver in ("gelsd", "gelss") else empty
    if vector:
        X = X.squeeze(-1)
        residuals = residuals.squeeze(-1) if residuals.numel() else residuals
    return LstsqResult((X, residuals, rank, sv))


def _perm_from_pivots(pivots: Tensor, m: int) -> Tensor:
    """The row order perm with A[perm] = L U, from LAPACK's 1-based sequential swaps."""
    from loom.functional.math import where
    from loom.tensor import arange
    batch = tuple(pivots.shape[:-1])
    idx = arange(m).expand(*batch, m)
    perm = idx
    for k in range(pivots.shape[-1]):
        p = pivots[..., k:k + 1].to(dt.int64) - 1
        swap = where(idx == k, p, where(idx == p, k, idx))
        perm = perm.gather(-1, swap)
    return perm


def _perm_matrix(perm: Tensor, dtype) -> Tensor:
    """P with P[perm[i], i] = 1, so A = P @ (L @ U) when A[perm] = L @ U."""
    from loom.tensor import arange
    m = perm.shape[-1]
    return (arange(m).unsqueeze(-1) == perm.unsqueeze(-2)).to(dtype)


def _lu_compact(op: str, A, pivot: bool) -> tuple[Tensor, Tensor, Tensor]:
    """(LU, pivots, info) in LAPACK's compact form; info is 1 + the index of the first zero pivot, else 0."""
    A = _matrix_input(op, A)
    if not pivot:
        raise LoomError(f"loom.{op}: LU without pivoting is not implemented on the CPU (as in PyTorch)")
    from loom.functional.compat import _lu
    from loom.functional.shape import cat
    L, U, _, _, piv = _lu(A)
    m, n = A.shape[-2:]
    k = min(m, n)
    low = L - eye(m, k, dtype=A.dtype)
    if m > n:
        LU = low + cat([U, low[..., k:, :] * 0], -2)
    elif m == n:
        LU = low + U
    else:
        LU = cat([low + U[..., :, :k], U[..., :, k:]], -1)
    zero = _diagonal(U, 0, -2, -1) == 0
    first = zero.to(dt.int32).argmax(-1) + 1
    from loom.functional.math import where
    info = where(zero.any(-1), first, 0).to(dt.int32) if k else _zeros_int(tuple(A.shape[:-2]))
    return LU, piv, info


def _zeros_int(shape) -> Tensor:
    from loom.tensor import zeros
    return zeros(*shape, dtype=dt.int32)


def lu_factor_ex(A, *, pivot: bool = True, check_errors: bool = False):
    """(LU, pivots, info) as `lu_factor`, with LAPACK's info instead of an error, as ``torch.linalg.lu_factor_ex``.

    info is 0, or 1 + the index of the first zero on U's diagonal. With
    ``check_errors`` a zero pivot raises, as `lu_factor`.

    Examples
    --------
    >>> loom.linalg.lu_factor_ex(loom.tensor([[1.0, 2.0], [2.0, 4.0]])).info.item()
    2
    """
    LU, piv, info = _lu_compact("linalg.lu_factor_ex", A, pivot)
    if check_errors:
        LU = _checked_pivots("linalg.lu_factor_ex", LU)
    return LUFactorExResult((LU, piv, info))


def _checked_pivots(op: str, LU: Tensor, message: str | None = None) -> Tensor:
    """LU (or R) with its diagonal read through a check that no pivot is zero (`message` holds ``{value}``)."""
    from loom.functional.checks import check
    from loom.functional.shape import cat
    import numpy as np
    d = _diagonal(LU, 0, -2, -1)
    message = message or (f"loom.{op}: U has a zero on its diagonal (|pivot| = {{value}}), so the matrix is "
                          "singular and lu_solve would divide by zero; loom.linalg.lu or lu_factor_ex still factor it")
    checked = check(d.abs(), op, message, low=np.finfo(np.float64).tiny, high=_INF, error="linalg")
    m, n = LU.shape[-2:]
    delta = checked - d.abs()  # Zero: it only places the check where LU is read.
    if n > d.shape[-1]:
        from loom.tensor import zeros
        delta = cat([delta, zeros(*delta.shape[:-1], n - d.shape[-1], dtype=LU.dtype)], -1)
    return LU + delta.unsqueeze(-2) * eye(m, n, dtype=LU.dtype)


def lu_factor(A, *, pivot: bool = True) -> LUFactorResult:
    """The LU factorisation with partial pivoting in LAPACK's compact form, as ``torch.linalg.lu_factor``.

    Returns (LU, pivots): L (unit diagonal, not stored) below the diagonal of
    LU and U on and above it; pivots are the 1-based row swaps (int32). A zero
    on U's diagonal raises, as in PyTorch (`lu_factor_ex` and `lu` do not).
    Written as min(m, n) vectorised elimination steps, so differentiable to
    any order (for the small matrices models factor).

    Examples
    --------
    >>> LU, piv = loom.linalg.lu_factor(loom.tensor([[1.0, 2.0], [3.0, 4.0]]))
    >>> piv.tolist()
    [2, 2]
    """
    LU, piv, _ = _lu_compact("linalg.lu_factor", A, pivot)
    return LUFactorResult((_checked_pivots("linalg.lu_factor", LU), piv))


def lu(A, *, pivot: bool = True) -> LUResult:
    """The LU decomposition A = P L U with partial pivoting, as ``torch.linalg.lu``.

    P (..., m, m) is a permutation matrix, L (..., m, k) unit lower and
    U (..., k, n) upper triangular, k = min(m, n). Differentiable in A.

    Examples
    --------
    >>> P, L, U = loom.linalg.lu(loom.tensor([[1.0, 2.0], [3.0, 4.0]]))
    >>> (P @ L @ U).tolist()
    [[1.0, 2.0], [3.0, 4.0]]
    """
    A = _matrix_input("lu", A)
    if not pivot:
        raise LoomError("loom.linalg.lu: LU without pivoting is not implemented on the CPU (as in PyTorch)")
    from loom.functional.compat import _lu
    L, U, perm, _, _ = _lu(A)
    return LUResult((_perm_matrix(perm, A.dtype), L, U))


def _lu_unpack(LU, pivots, unpack_data: bool = True, unpack_pivots: bool = True, op: str = "lu_unpack") -> LUResult:
    """(P, L, U) from `lu_factor`'s (LU, pivots); the shared body of ``torch.lu_unpack``."""
    LU = _matrix_input(op, LU)
    pivots = _t(pivots)
    m, n = LU.shape[-2:]
    k = min(m, n)
    if pivots.dtype.is_floating_point or tuple(pivots.shape) != tuple(LU.shape[:-2]) + (k,):
        raise ShapeError(f"loom.{op}: pivots must be integers of shape {fmt_shape(tuple(LU.shape[:-2]) + (k,))}"
                         f" for LU {fmt_shape(LU.shape)}, got {pivots.dtype.name}{fmt_shape(pivots.shape)}")
    empty = tensor([], dtype=LU.dtype)
    L = LU[..., :, :k].tril(-1) + eye(m, k, dtype=LU.dtype) if unpack_data else empty
    U = LU[..., :k, :].triu() if unpack_data else empty
    P = _perm_matrix(_perm_from_pivots(pivots, m), LU.dtype) if unpack_pivots else empty
    return LUResult((P, L, U))


def lu_solve(LU, pivots, B, *, left: bool = True, adjoint: bool = False) -> Tensor:
    """X with A X = B given A's `lu_factor` (LU, pivots), as ``torch.linalg.lu_solve``.

    ``left=False`` solves X A = B; ``adjoint=True`` uses A^T. Batch dims
    broadcast. Differentiable in LU and B.

    Examples
    --------
    >>> LU, piv = loom.linalg.lu_factor(loom.tensor([[2.0, 0.0], [0.0, 4.0]]))
    >>> loom.linalg.lu_solve(LU, piv, loom.tensor([[2.0], [2.0]])).tolist()
    [[1.0], [0.5]]
    """
    LU = _matrix_input("lu_solve", LU, square=True)
    B = _matrix_input("lu_solve", B)
    _same_dtype("lu_solve", LU, B)
    n = LU.shape[-1]
    if (B.shape[-2] if left else B.shape[-1]) != n:
        raise ShapeError(f"loom.linalg.lu_solve: LU is {n}x{n} but B has shape {fmt_shape(B.shape)} "
                         f"(expected {n} {'rows' if left else 'columns'}; left={left})")
    P, _, _ = _lu_unpack(LU, pivots, unpack_data=False, op="linalg.lu_solve")
    if not left:  # X A = B  <=>  A^T X^T = B^T.
        return lu_solve(LU, pivots, B.mT, adjoint=not adjoint).mT
    LU, B = _batch_broadcast("lu_solve", LU, B)
    P = broadcast_to(P, tuple(LU.shape), "linalg.lu_solve")
    if not adjoint:  # A = P L U: X = U^-1 L^-1 P^T B.
        y = solve_triangular(LU, P.mT @ B, upper=False, unitriangular=True)
        return solve_triangular(LU, y, upper=True)
    # A^T = U^T L^T P^T: X = P L^-T U^-T B.
    y = solve_triangular(LU.mT, B, upper=False)
    return P @ solve_triangular(LU.mT, y, upper=True, unitriangular=True)


def householder_product(A, tau) -> Tensor:
    """The first n columns of H_1 ... H_k with H_i = I - tau_i v_i v_i^T, as ``torch.linalg.householder_product``.

    v_i is column i of A below the diagonal with a 1 on it (LAPACK's orgqr
    form, as `geqrf` returns it). A (..., m, n) with m >= n, tau (..., k),
    k <= n. Differentiable in A and tau.

    Examples
    --------
    >>> a, tau = loom.geqrf(loom.tensor([[3.0, 1.0], [4.0, 2.0]], dtype=loom.float64))
    >>> loom.linalg.householder_product(a, tau).abs().round(decimals=4).tolist()
    [[0.6, 0.8], [0.8, 0.6]]
    """
    A = _matrix_input("householder_product", A)
    tau = _t(tau)
    m, n = A.shape[-2:]
    if m < n or tau.ndim != A.ndim - 1 or tau.shape[-1] > n or tuple(tau.shape[:-1]) != tuple(A.shape[:-2]):
        raise ShapeError(f"loom.linalg.householder_product: expected A (..., m, n) with m >= n and tau (..., k) with "
                         f"k <= n and A's batch dims, got A {fmt_shape(A.shape)} and tau {fmt_shape(tau.shape)}")
    _same_dtype("householder_product", A, tau)
    X = broadcast_to(eye(m, n, dtype=A.dtype), tuple(A.shape), "linalg.householder_product")
    return _apply_householder(A, tau, X)


def _apply_householder(A: Tensor, tau: Tensor, X: Tensor, transpose: bool = False) -> Tensor:
    """H_1 ... H_k X (H_k ... H_1 X with `transpose`) for the reflectors stored in (A, tau)."""
    from loom.functional.math import where
    from loom.tensor import arange
    m = A.shape[-2]
    idx = arange(m).unsqueeze(-1)
    order = range(tau.shape[-1]) if transpose else range(tau.shape[-1] - 1, -1, -1)
    for i in order:
        v = where(idx > i, A[..., :, i:i + 1], where(idx == i, 1.0, 0.0).to(A.dtype))  # (..., m, 1)
        X = X - tau[..., i:i + 1].unsqueeze(-1) * (v @ (v.mT @ X))
    return X


def tensorinv(A, ind: int = 2) -> Tensor:
    """The inverse of A read as a matrix of its first `ind` dims by the rest, as ``torch.linalg.tensorinv``.

    The result has shape A.shape[ind:] + A.shape[:ind].

    Examples
    --------
    >>> loom.linalg.tensorinv(loom.eye(4).reshape(4, 2, 2) * 2, ind=1).shape
    loom.Size([2, 2, 4])
    """
    A = _t(A)
    if not isinstance(ind, int) or ind <= 0:
        raise LoomError(f"loom.linalg.tensorinv: ind must be a positive int, got {ind!r}")
    import math
    out_dims, in_dims = tuple(A.shape[:ind]), tuple(A.shape[ind:])
    p, q = math.prod(out_dims), math.prod(in_dims)
    if p != q:
        raise ShapeError(f"loom.linalg.tensorinv: the product of the first {ind} dims of {fmt_shape(A.shape)} "
                         f"({p}) must equal the product of the rest ({q})")
    return inv(A.reshape(p, q)).reshape(*in_dims, *out_dims)


def tensorsolve(A, B, dims=None) -> Tensor:
    """X with tensordot(A, X, X.ndim) = B, as ``torch.linalg.tensorsolve``.

    `dims` (optional) names dims of A moved to the end first. X has shape
    A.shape[B.ndim:].

    Examples
    --------
    >>> A = loom.eye(6).reshape(2, 3, 6) * 2
    >>> loom.linalg.tensorsolve(A, loom.ones(2, 3)).shape
    loom.Size([6])
    """
    A, B = _t(A), _t(B)
    if dims is not None:
        from loom.functional.shape import movedim
        dims = [dims] if isinstance(dims, int) else list(dims)
        A = movedim(A, dims, list(range(A.ndim - len(dims), A.ndim)))
    import math
    lead = tuple(A.shape[:B.ndim])
    if lead != tuple(B.shape):
        raise ShapeError(f"loom.linalg.tensorsolve: A's leading dims {fmt_shape(lead)} must equal B's shape "
                         f"{fmt_shape(B.shape)} (A {fmt_shape(A.shape)})")
    x_shape = tuple(A.shape[B.ndim:])
    p, q = math.prod(lead), math.prod(x_shape)
    if p != q:
        raise ShapeError(f"loom.linalg.tensorsolve: A {fmt_shape(A.shape)} must reshape to a square matrix: "
                         f"{p} (B's elements) != {q} (the solution's)")
    return solve(A.reshape(p, q), B.reshape(p)).reshape(x_shape)


def vander(x, *, N=None) -> Tensor:
    """The Vandermonde matrix of increasing powers x^0 ... x^(N-1) along a new last dim, as ``torch.linalg.vander``.

    Examples
    --------
    >>> loom.linalg.vander(loom.tensor([1, 2, 3])).tolist()
    [[1, 1, 1], [1, 2, 4], [1, 3, 9]]
    """
    x = _t(x)
    if x.ndim < 1:
        raise ShapeError("loom.linalg.vander: expected a tensor with at least 1 dim, got a 0-d tensor")
    if x.dtype is dt.bool_:
        raise DTypeError("loom.linalg.vander: expected a numeric tensor, got bool")
    N = x.shape[-1] if N is None else N
    if not isinstance(N, int) or N <= 1:
        raise LoomError(f"loom.linalg.vander: N must be an int greater than 1, got {N!r}")
    from loom.functional.shape import stack
    from loom.tensor import ones_like
    powers = [ones_like(x)]
    for _ in range(1, N):
        powers.append(powers[-1] * x)
    return stack(powers[:N], -1)


_upper.register(matrix_norm=matrix_norm, cross=cross, multi_dot=multi_dot, matrix_power=matrix_power)
