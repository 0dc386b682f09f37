"""PyTorch's top-level factorisation functions (`torch.qr`, `torch.svd`, `torch.lu`, ...) over `loom.linalg`.

The `torch.linalg` versions live in `loom.linalg`; these are the older
`torch.*` spellings with their argument orders and result fields, the
Householder-form functions (geqrf, orgqr, ormqr), the randomised low-rank
SVD/PCA and a dense `lobpcg`. Names that PyTorch 2.x has removed
(`torch.solve`, `torch.symeig`, `torch.lstsq`, `torch.matrix_rank`) raise, as
there, saying what replaces them.
"""
from __future__ import annotations

from loom.errors import LoomError, ShapeError, fmt_shape
from loom.tensor import Tensor, tensor, zeros

METHODS = ["qr", "svd", "lstsq", "lu", "lu_solve", "matrix_exp", "pinverse", "triangular_solve", "geqrf", "orgqr",
           "ormqr", "solve", "symeig"]


def _t(x) -> Tensor:
    return x if isinstance(x, Tensor) else tensor(x)


def _la():
    import loom.linalg as la
    return la


_RESULTS: dict = {}


def _named(name: str, fields: tuple[str, ...]):
    """The named result class `name` (made once), as PyTorch's ``torch.return_types.<name>``."""
    if name not in _RESULTS:
        _RESULTS[name] = _la()._named(name, fields, f"({', '.join(fields)}) of ``torch.{name.lower()}``, also "
                                                    "readable by name.")
    return _RESULTS[name]


def qr(input, some: bool = True):
    """(Q, R) of a (batch of) matrix: reduced when `some`, complete otherwise, as ``torch.qr``.

    Examples
    --------
    >>> Q, R = loom.qr(loom.tensor([[3.0, 1.0], [4.0, 2.0]]))
    >>> (Q @ R).round(decimals=4).tolist()
    [[3.0, 1.0], [4.0, 2.0]]
    """
    return _la().qr(input, "reduced" if some else "complete")


def svd(input, some: bool = True, compute_uv: bool = True):
    """(U, S, V) with input = U diag(S) V^T, as ``torch.svd`` (V, not Vh; thin when `some`).

    With ``compute_uv=False`` U and V are zero-filled (m, m) and (n, n)
    matrices, as in PyTorch, and only S carries a gradient.

    Examples
    --------
    >>> U, S, V = loom.svd(loom.tensor([[0.0, 2.0], [1.0, 0.0]]))
    >>> S.tolist()
    [2.0, 1.0]
    """
    la = _la()
    A = la._matrix_input("svd", input)
    cls = _named("SVD", ("U", "S", "V"))
    if not compute_uv:
        m, n = A.shape[-2:]
        batch = tuple(A.shape[:-2])
        return cls((zeros(*batch, m, m, dtype=A.dtype), la.svdvals(A), zeros(*batch, n, n, dtype=A.dtype)))
    U, S, Vh = la.svd(A, full_matrices=not some)
    return cls((U, S, Vh.mT))


def _removed(name: str, replacement: str) -> None:
    raise LoomError(f"loom.{name}: this function was deprecated in PyTorch 1.9 and is removed (as in PyTorch 2.x); "
                    f"use {replacement}")


def lstsq(input, A, *args, **kwargs):
    """Removed in PyTorch 2.x: raises, pointing to ``loom.linalg.lstsq`` (whose arguments are reversed).

    Examples
    --------
    >>> loom.lstsq(loom.ones(2, 1), loom.ones(2, 1))
    Traceback (most recent call last):
    ...
    loom.errors.LoomError: loom.lstsq: this function was deprecated in PyTorch 1.9 and is removed ...
    """
    _removed("lstsq", "loom.linalg.lstsq(A, B), which takes A first and returns (solution, residuals, rank, "
             "singular_values)")


def solve(input, A, *args, **kwargs):
    """Removed in PyTorch 2.x: raises, pointing to ``loom.linalg.solve`` (whose arguments are reversed).

    Examples
    --------
    >>> loom.solve(loom.ones(2, 1), loom.eye(2))
    Traceback (most recent call last):
    ...
    loom.errors.LoomError: loom.solve: this function was deprecated in PyTorch 1.9 and is removed ...
    """
    _removed("solve", "loom.linalg.solve(A, B), which takes A first and does not return the LU factorisation "
             "(loom.linalg.lu_factor does)")


def symeig(input, eigenvectors: bool = False, upper: bool = True, *args, **kwargs):
    """Removed in PyTorch 2.x: raises, pointing to ``loom.linalg.eigh`` / ``eigvalsh``.

    Examples
    --------
    >>> loom.symeig(loom.eye(2))
    Traceback (most recent call last):
    ...
    loom.errors.LoomError: loom.symeig: this function was deprecated in PyTorch 1.9 and is removed ...
    """
    _removed("symeig", "loom.linalg.eigvalsh(A, UPLO='U' if upper else 'L') for the eigenvalues, or "
             "loom.linalg.eigh(A, UPLO=...) for eigenvalues and eigenvectors (note the default now reads the "
             "lower triangle)")


def matrix_rank(input, tol=None, symmetric: bool = False, *args, **kwargs):
    """Removed in PyTorch 2.x: raises, pointing to ``loom.linalg.matrix_rank``.

    Examples
    --------
    >>> loom.matrix_rank(loom.eye(2))
    Traceback (most recent call last):
    ...
    loom.errors.LoomError: loom.matrix_rank: this function was deprecated in PyTorch 1.9 and is removed ...
    """
    _removed("matrix_rank", "loom.linalg.matrix_rank(A, hermitian=...) ('symmetric' is now 'hermitian')")


def lu(A, pivot: bool = True, get_infos: bool = False):
    """(LU, pivots) of a (batch of) matrix, with LAPACK's ``infos`` when `get_infos`, as ``torch.lu``.

    A singular matrix does not raise (infos is 1 + the index of the first zero pivot, else 0).

    Examples
    --------
    >>> LU, pivots = loom.lu(loom.tensor([[1.0, 2.0], [3.0, 4.0]]))
    >>> pivots.tolist()
    [2, 2]
    """
    LU, piv, info = _la()._lu_compact("lu", A, pivot)
    if not get_infos:
        return LU, piv
    return LU, piv, info


def lu_solve(b, LU_data, LU_pivots) -> Tensor:
    """X with A X = b from A's `lu` factorisation (LU_data, LU_pivots), as ``torch.lu_solve``.

    Examples
    --------
    >>> LU, piv = loom.lu(loom.tensor([[2.0, 0.0], [0.0, 4.0]]))
    >>> loom.lu_solve(loom.tensor([[2.0], [2.0]]), LU, piv).tolist()
    [[1.0], [0.5]]
    """
    return _la().lu_solve(LU_data, LU_pivots, b)


def lu_unpack(LU_data, LU_pivots, unpack_data: bool = True, unpack_pivots: bool = True):
    """(P, L, U) from an LU factorisation in compact form, as ``torch.lu_unpack`` (A = P @ L @ U).

    Examples
    --------
    >>> P, L, U = loom.lu_unpack(*loom.lu(loom.tensor([[1.0, 2.0], [3.0, 4.0]])))
    >>> P.tolist(), U[0].tolist()
    ([[0.0, 1.0], [1.0, 0.0]], [3.0, 4.0])
    """
    return _la()._lu_unpack(LU_data, LU_pivots, unpack_data, unpack_pivots)


def matrix_exp(A) -> Tensor:
    """The matrix exponential, as ``torch.matrix_exp`` (see :func:`loom.linalg.matrix_exp`).

    Examples
    --------
    >>> loom.matrix_exp(loom.zeros(2, 2)).tolist()
    [[1.0, 0.0], [0.0, 1.0]]
    """
    return _la().matrix_exp(A)


def pinverse(input, rcond: float = 1e-15) -> Tensor:
    """The pseudo-inverse with singular values at or below rcond * largest dropped, as ``torch.pinverse``.

    Examples
    --------
    >>> loom.pinverse(loom.tensor([[2.0, 0.0], [0.0, 0.0]])).tolist()
    [[0.5, 0.0], [0.0, 0.0]]
    """
    return _la().pinv(input, rtol=rcond)


def triangular_solve(b, A, upper: bool = True, transpose: bool = False, unitriangular: bool = False):
    """(solution, cloned_coefficient) of A X = b (A^T X = b with `transpose`), as ``torch.triangular_solve``.

    Examples
    --------
    >>> X, _ = loom.triangular_solve(loom.tensor([[4.0], [8.0]]), loom.tensor([[2.0, 1.0], [0.0, 4.0]]))
    >>> X.tolist()
    [[1.0], [2.0]]
    """
    la = _la()
    A, b = _t(A), _t(b)
    coef = A.mT if transpose else A
    X = la.solve_triangular(coef, b, upper=upper != transpose, unitriangular=unitriangular)
    batch = tuple(X.shape[:-2])
    A_out = A.clone() if tuple(A.shape[:-2]) == batch else A.expand(*batch, *A.shape[-2:]).clone()
    return _named("Triangular_solve", ("solution", "cloned_coefficient"))((X, A_out))


def geqrf(input):
    """(a, tau): the QR decomposition in LAPACK's Householder form, as ``torch.geqrf`` (not differentiable).

    R is on and above the diagonal of `a`; below it are the Householder
    vectors that, with `tau`, give Q through :func:`orgqr`.

    Examples
    --------
    >>> a, tau = loom.geqrf(loom.tensor([[3.0, 1.0], [4.0, 2.0]]))
    >>> a[0].tolist(), tau.shape
    ([-5.0, -2.200000047683716], loom.Size([2]))
    """
    la = _la()
    A = la._matrix_input("geqrf", input).detach()
    m, n = A.shape[-2:]
    packed = la._prim("geqrf", A)
    return _named("Geqrf", ("a", "tau"))((packed[..., :m, :], packed[..., m, :min(m, n)]))


def orgqr(input, tau) -> Tensor:
    """Q's first n columns from `geqrf`'s (a, tau), as ``torch.orgqr`` (= ``loom.linalg.householder_product``).

    Examples
    --------
    >>> a, tau = loom.geqrf(loom.tensor([[3.0, 1.0], [4.0, 2.0]], dtype=loom.float64))
    >>> loom.orgqr(a, tau).abs().round(decimals=4).tolist()
    [[0.6, 0.8], [0.8, 0.6]]
    """
    return _la().householder_product(input, tau)


def ormqr(input, input2, input3, left: bool = True, transpose: bool = False) -> Tensor:
    """Q @ C (or C @ Q, Q^T @ C, C @ Q^T) for the full Q of `geqrf`'s (a, tau), as ``torch.ormqr``.

    `input` (a) and `input2` (tau) hold the reflectors, `input3` is C;
    `left` multiplies from the left, `transpose` uses Q^T.

    Examples
    --------
    >>> a, tau = loom.geqrf(loom.tensor([[3.0, 1.0], [4.0, 2.0]], dtype=loom.float64))
    >>> loom.ormqr(a, tau, loom.eye(2, dtype=loom.float64)).abs().round(decimals=4).tolist()
    [[0.6, 0.8], [0.8, 0.6]]
    """
    la = _la()
    A = la._matrix_input("ormqr", input)
    tau, C = _t(input2), la._matrix_input("ormqr", input3)
    la._same_dtype("ormqr", A, C)
    rows = C.shape[-2] if left else C.shape[-1]
    if A.shape[-2] != rows or tau.shape[-1] > min(A.shape[-2:]) or tuple(tau.shape[:-1]) != tuple(A.shape[:-2]):
        raise ShapeError(f"loom.ormqr: the reflectors a {fmt_shape(A.shape)}, tau {fmt_shape(tau.shape)} do not fit "
                         f"C {fmt_shape(C.shape)} with left={left} (need a's rows = C's "
                         f"{'rows' if left else 'columns'} and tau (..., k) with k <= min(a's dims))")
    if left:
        return la._apply_householder(A, tau, C, transpose=transpose)
    # C Q = (Q^T C^T)^T and C Q^T = (Q C^T)^T.
    return la._apply_householder(A, tau, C.mT, transpose=not transpose).mT


def nuclear_norm(input, dim=None, keepdim: bool = False) -> Tensor:
    """The nuclear norm (sum of singular values) over `dim` (the last two dims by default), as ``torch.nuclear_norm``.

    Examples
    --------
    >>> loom.nuclear_norm(loom.tensor([[3.0, 0.0], [0.0, -2.0]])).item()
    5.0
    """
    if isinstance(dim, bool):  # torch.nuclear_norm(input, keepdim)
        dim, keepdim = None, dim
    return _la().matrix_norm(input, "nuc", (-2, -1) if dim is None else dim, keepdim)


def frobenius_norm(input, dim, keepdim: bool = False) -> Tensor:
    """The 2-norm of all elements over `dim`, as ``torch.frobenius_norm``.

    Examples
    --------
    >>> loom.frobenius_norm(loom.tensor([[3.0, 0.0], [0.0, 4.0]]), (0, 1)).item()
    5.0
    """
    return _la().vector_norm(input, 2, dim, keepdim)


def _approximate_basis(A: Tensor, q: int, niter: int, M: Tensor | None) -> Tensor:
    """An orthonormal (..., m, q) basis of A's range by subspace iteration from a Gaussian start (Halko et al.)."""
    from loom.tensor import randn
    la = _la()
    n = A.shape[-1]
    R = randn(*A.shape[:-2], n, q, dtype=A.dtype)
    X = A @ R if M is None else A @ R - M @ R
    Q = la.qr(X).Q
    for _ in range(niter):
        X = A.mT @ Q if M is None else A.mT @ Q - M.mT @ Q
        Q = la.qr(X).Q
        X = A @ Q if M is None else A @ Q - M @ Q
        Q = la.qr(X).Q
    return Q


def svd_lowrank(A, q: int | None = 6, niter: int | None = 2, M=None):
    """(U, S, V), a rank-`q` approximate SVD of A - M by randomised subspace iteration, as ``torch.svd_lowrank``.

    Exact (up to the signs of the vectors) when the rank of A - M is at most
    `q`; the random start comes from loom's generator, so the vectors of an
    approximation differ from PyTorch's draw by draw.

    Examples
    --------
    >>> A = loom.tensor([[1.0, 2.0], [2.0, 4.0], [3.0, 6.0]])
    >>> U, S, V = loom.svd_lowrank(A, q=1)
    >>> round(S.item(), 4)
    8.3666
    """
    la = _la()
    A = la._matrix_input("svd_lowrank", A)
    q = 6 if q is None else q
    niter = 2 if niter is None else niter
    if M is not None:
        M = _t(M).to(A.dtype).expand(*A.shape)
    m, n = A.shape[-2:]
    if not 0 < q <= min(m, n):
        raise LoomError(f"loom.svd_lowrank: q must be in [1, min(m, n)] = [1, {min(m, n)}] for A "
                        f"{fmt_shape(A.shape)}, got {q!r}")
    transposed = m < n  # Work on the tall orientation, as PyTorch does.
    if transposed:
        A = A.mT
        M = None if M is None else M.mT
    Q = _approximate_basis(A, q, niter, M)
    B = Q.mT @ A if M is None else Q.mT @ (A - M)
    U, S, Vh = la.svd(B, full_matrices=False)
    U, V = Q @ U, Vh.mT
    return (V, S, U) if transposed else (U, S, V)


def pca_lowrank(A, q: int | None = None, center: bool = True, niter: int = 2):
    """(U, S, V) of a rank-`q` PCA of the rows of A (centred by column means when `center`), as ``torch.pca_lowrank``.

    `q` defaults to min(6, m, n). See :func:`svd_lowrank` for how exact it is.

    Examples
    --------
    >>> A = loom.tensor([[1.0, 2.0], [2.0, 4.0], [3.0, 6.0]])
    >>> U, S, V = loom.pca_lowrank(A, q=1)
    >>> round(S.item(), 4)
    3.1623
    """
    la = _la()
    A = la._matrix_input("pca_lowrank", A)
    m, n = A.shape[-2:]
    q = min(6, m, n) if q is None else q
    if not center:
        return svd_lowrank(A, q, niter)
    return svd_lowrank(A - A.mean(-2, keepdim=True), q, niter)


def lobpcg(A, k: int | None = None, B=None, X=None, n: int | None = None, iK=None, niter: int | None = None,
           tol: float | None = None, largest: bool | None = None, method: str | None = None, tracker=None,
           ortho_iparams=None, ortho_fparams=None, ortho_bparams=None):
    """The `k` largest (or smallest) eigenpairs of a symmetric (generalised) problem A x = l B x, as ``torch.lobpcg``.

    An honest dense version: rather than LOBPCG iterations it solves the whole
    symmetric problem (`loom.linalg.eigh`, through B's Cholesky factor when B
    is given) and returns the requested pairs, so the result is exact and
    differentiable, and the iteration controls (X, n, iK, niter, tol, method,
    tracker, ortho_*) do not change it. As PyTorch, it needs the matrix size to
    be at least 3 k. Returns (E, X): E (..., k) with the largest first when
    `largest` (the default), X (..., n, k) B-orthonormal eigenvectors.

    Examples
    --------
    >>> E, X = loom.lobpcg(loom.diag(loom.tensor([1.0, 5.0, 2.0, 3.0])), k=1)
    >>> E.tolist()
    [5.0]
    """
    la = _la()
    A = la._matrix_input("lobpcg", A, square=True)
    size = A.shape[-1]
    if k is None:
        k = 1 if X is None else _t(X).shape[-1]
    if not isinstance(k, int) or k < 1 or size < 3 * k:
        raise LoomError(f"loom.lobpcg: the matrix size ({size}) must be at least 3 x the number of requested "
                        f"eigenpairs (k={k!r}), as in PyTorch; for small problems use loom.linalg.eigh")
    largest = True if largest is None else largest
    if B is None:
        L, V = la.eigh(A)
    else:
        B = la._matrix_input("lobpcg", B, square=True)
        C = la.cholesky(B)
        # L^-1 A L^-T y = l y with x = L^-T y.
        S = la.solve_triangular(C, la.solve_triangular(C, A, upper=False).mT, upper=False)
        L, Y = la.eigh(S)
        V = la.solve_triangular(C.mT, Y, upper=True)
    if largest:
        return L[..., size - k:].flip(-1), V[..., :, size - k:].flip(-1)
    return L[..., :k], V[..., :, :k]
