"""Contractions: matmul with PyTorch's broadcasting, and what is built on it (einsum, tensordot...).

Every contraction lowers to the one `matmul` primitive (equal-rank batched
matrices), so each op here has BLAS-backed forward and backward passes and
gradients of any order.
"""
from __future__ import annotations

import math

from loom import _upper
from loom import dtypes as dt
from loom import autocast as _autocast
from loom.autocast import keep_op
from loom.errors import DTypeError, LoomError, LoomTypeError, LoomValueError, ShapeError, fmt_shape
from loom.tensor import Tensor, apply, broadcast_shapes, broadcast_to, const, tensor


def _t(x) -> Tensor:
    return x if isinstance(x, Tensor) else tensor(x)


def _same_dtype(op: str, a: Tensor, b: Tensor, what: str = "operands") -> None:
    if a.dtype is not b.dtype:
        raise DTypeError(f"loom.{op}: expected both {what} to have the same dtype, got "
                         f"{a.dtype.name} and {b.dtype.name}")


def matmul(a, b) -> Tensor:
    """Matrix product with PyTorch's rules: 1-d operands are vectors, batch dims broadcast.

    Parameters
    ----------
    a, b : Tensor
        At least 1-d, of one dtype (integer dtypes work; bool does not).

    Examples
    --------
    >>> (loom.ones(2, 3, 4) @ loom.ones(4)).shape
    loom.Size([2, 3])
    """
    a, b = _autocast.lower(a, b)
    a, b = _t(a), _t(b)
    na, nb = a._node, b._node
    if (len(na.shape) == 2 and len(nb.shape) == 2 and na.shape[1] == nb.shape[0] and na.dtype is nb.dtype
            and na.dtype is not dt.bool_):
        return apply("matmul", (a, b), {})  # Two matrices (a Linear's forward and backward): nothing to adapt.
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(f"loom.matmul: both arguments need at least 1 dimension, got "
                         f"{fmt_shape(a.shape)} and {fmt_shape(b.shape)}")
    _same_dtype("matmul", a, b)
    if a.dtype is dt.bool_:
        raise DTypeError("loom.matmul: not implemented for bool tensors")
    va, vb = a.ndim == 1, b.ndim == 1
    a2 = a.reshape(1, a.shape[0]) if va else a
    b2 = b.reshape(b.shape[0], 1) if vb else b
    if a2.shape[-1] != b2.shape[-2]:
        raise ShapeError(f"loom.matmul: shapes {fmt_shape(a.shape)} and {fmt_shape(b.shape)} cannot be "
                         f"multiplied ({a2.shape[-2]}x{a2.shape[-1]} and {b2.shape[-2]}x{b2.shape[-1]})")
    batch = broadcast_shapes(tuple(a2.shape[:-2]), tuple(b2.shape[:-2]), op="matmul")
    if b2.ndim == 2 and a2.ndim > 2 and not vb:
        # A batch of rows times one matrix (every Linear on 3-d input): fold the batch into the
        # rows, one GEMM forward and backward instead of a batched product over a broadcast weight.
        rows = a2.reshape(-1, a2.shape[-1])
        return apply("matmul", (rows, b2), {}).reshape(batch + (a2.shape[-2], b2.shape[-1]))
    a3 = broadcast_to(a2, batch + tuple(a2.shape[-2:]), "matmul")
    b3 = broadcast_to(b2, batch + tuple(b2.shape[-2:]), "matmul")
    out = apply("matmul", (a3, b3), {})
    if va and vb:
        return out.reshape(batch)
    if va:
        return out.reshape(batch + (b2.shape[-1],))
    if vb:
        return out.reshape(batch + (a2.shape[-2],))
    return out


def mm(a, b) -> Tensor:
    """Product of two matrices (no broadcasting).

    Examples
    --------
    >>> loom.mm(loom.ones(2, 3), loom.ones(3, 4)).shape
    loom.Size([2, 4])
    """
    a, b = _autocast.lower(a, b)
    a, b = _t(a), _t(b)
    if a.ndim != 2 or b.ndim != 2:
        raise ShapeError(f"loom.mm: expected 2-d tensors, got {fmt_shape(a.shape)} and {fmt_shape(b.shape)}")
    return matmul(a, b)


def _check_bmm(op: str, a: Tensor, b: Tensor) -> None:
    if a.ndim != 3 or b.ndim != 3:
        raise ShapeError(f"loom.{op}: expected 3-d tensors, got {fmt_shape(a.shape)} and {fmt_shape(b.shape)}")
    if a.shape[0] != b.shape[0]:
        raise ShapeError(f"loom.{op}: batch sizes differ: {fmt_shape(a.shape)} and {fmt_shape(b.shape)}")
    if a.shape[2] != b.shape[1]:
        raise ShapeError(f"loom.{op}: shapes {fmt_shape(a.shape)} and {fmt_shape(b.shape)} cannot be "
                         f"multiplied ({a.shape[1]}x{a.shape[2]} and {b.shape[1]}x{b.shape[2]})")


def bmm(a, b) -> Tensor:
    """Batched product of (b, n, m) and (b, m, p) tensors (no broadcasting).

    Examples
    --------
    >>> loom.bmm(loom.ones(5, 2, 3), loom.ones(5, 3, 4)).shape
    loom.Size([5, 2, 4])
    """
    a, b = _autocast.lower(a, b)
    a, b = _t(a), _t(b)
    _check_bmm("bmm", a, b)
    return matmul(a, b)


@keep_op
def mv(a, v) -> Tensor:
    """Product of a matrix and a vector.

    Examples
    --------
    >>> loom.mv(loom.ones(2, 3), loom.ones(3)).tolist()
    [3.0, 3.0]
    """
    a, v = _t(a), _t(v)
    if a.ndim != 2 or v.ndim != 1:
        raise ShapeError(f"loom.mv: expected a 2-d matrix and a 1-d vector, got {fmt_shape(a.shape)} "
                         f"and {fmt_shape(v.shape)}")
    return matmul(a, v)


def _dot(op: str, a, b) -> Tensor:
    a, b = _t(a), _t(b)
    if a.ndim != 1 or b.ndim != 1 or a.shape != b.shape:
        raise ShapeError(f"loom.{op}: expected two 1-d tensors of one size, got {fmt_shape(a.shape)} "
                         f"and {fmt_shape(b.shape)}")
    _same_dtype(op, a, b, "vectors")
    return matmul(a, b)


@keep_op
def dot(a, b) -> Tensor:
    """Inner product of two 1-d tensors of one dtype (the result keeps that dtype).

    Examples
    --------
    >>> loom.dot(loom.tensor([1, 2]), loom.tensor([3, 4])).item()
    11
    """
    return _dot("dot", a, b)


@keep_op
def vdot(a, b) -> Tensor:
    """Dot product conjugating the first argument (the same as :func:`dot` for real tensors).

    Examples
    --------
    >>> loom.vdot(loom.tensor([1.0, 2.0]), loom.tensor([3.0, 4.0])).item()
    11.0
    >>> loom.vdot(loom.tensor([1j]), loom.tensor([1j])).item()
    (1+0j)
    """
    a = _t(a)
    return _dot("vdot", a.conj() if a.dtype.is_complex else a, b)


def inner(a, b) -> Tensor:
    """Sum over the last dims of `a` and `b`: out[i..., j...] = sum_k a[i..., k] b[j..., k].

    Examples
    --------
    >>> loom.inner(loom.ones(2, 3), loom.ones(4, 3)).shape
    loom.Size([2, 4])
    """
    a, b = _t(a), _t(b)
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    _same_dtype("inner", a, b, "inputs")
    if a.shape[-1] != b.shape[-1]:
        raise ShapeError(f"loom.inner: last dims must match, got {fmt_shape(a.shape)} and {fmt_shape(b.shape)}")
    return _tensordot("inner", a, b, [a.ndim - 1], [b.ndim - 1])


def outer(a, b) -> Tensor:
    """Outer product of two 1-d tensors (dtypes promote).

    Examples
    --------
    >>> loom.outer(loom.tensor([1, 2]), loom.tensor([1, 10])).tolist()
    [[1, 10], [2, 20]]
    """
    a, b = _t(a), _t(b)
    if a.ndim != 1 or b.ndim != 1:
        raise ShapeError(f"loom.outer: expected two 1-d tensors, got {fmt_shape(a.shape)} and {fmt_shape(b.shape)}")
    return a.reshape(-1, 1) * b.reshape(1, -1)


ger = outer


def _zero_grad_link(value: Tensor, src: Tensor) -> Tensor:
    """`value`, joined to `src`'s graph with a zero gradient: PyTorch gives zeros there, not None."""
    if not src.requires_grad:
        return value
    shape = tuple(value.shape)
    src = broadcast_to(src.to(value.dtype), shape, "expand")
    return apply("where", (const(False, shape, dt.bool_), src, value), {})


def _scaled_sum(op: str, input, prod: Tensor, beta, alpha) -> Tensor:
    """beta * input + alpha * prod, where beta == 0 ignores input's values (NaN included)."""
    input = _t(input)
    try:
        shape = broadcast_shapes(tuple(input.shape), tuple(prod.shape), op=op)
    except ShapeError:
        shape = None
    if shape != tuple(prod.shape):
        raise ShapeError(f"loom.{op}: input {fmt_shape(input.shape)} cannot be broadcast to the product "
                         f"shape {fmt_shape(prod.shape)}")
    if not prod.dtype.is_floating_point:
        # PyTorch casts the scalars to the integer dtype.
        beta, alpha = int(beta), int(alpha)
    out = prod if alpha == 1 else prod * alpha
    if beta == 0:
        return _zero_grad_link(out.to(dt.result_type(input, out)), input)
    return (input if beta == 1 else input * beta) + out


def addmm(input, mat1, mat2, *, beta=1, alpha=1) -> Tensor:
    """beta * input + alpha * (mat1 @ mat2); input broadcasts to the product's shape.

    Examples
    --------
    >>> loom.addmm(loom.zeros(2), loom.ones(3, 4), loom.ones(4, 2), alpha=0.5).tolist()[0]
    [2.0, 2.0]
    """
    input, mat1, mat2 = _autocast.lower(input, mat1, mat2)
    return _scaled_sum("addmm", input, mm(mat1, mat2), beta, alpha)


@keep_op
def addmv(input, mat, vec, *, beta=1, alpha=1) -> Tensor:
    """beta * input + alpha * (mat @ vec).

    Examples
    --------
    >>> loom.addmv(loom.ones(2), loom.ones(2, 3), loom.ones(3)).tolist()
    [4.0, 4.0]
    """
    return _scaled_sum("addmv", input, mv(mat, vec), beta, alpha)


@keep_op
def addr(input, vec1, vec2, *, beta=1, alpha=1) -> Tensor:
    """beta * input + alpha * outer(vec1, vec2).

    Examples
    --------
    >>> loom.addr(loom.zeros(2, 2), loom.ones(2), loom.ones(2)).tolist()
    [[1.0, 1.0], [1.0, 1.0]]
    """
    return _scaled_sum("addr", input, outer(vec1, vec2), beta, alpha)


def baddbmm(input, batch1, batch2, *, beta=1, alpha=1) -> Tensor:
    """beta * input + alpha * bmm(batch1, batch2).

    Examples
    --------
    >>> loom.baddbmm(loom.zeros(2, 1, 1), loom.ones(2, 1, 3), loom.ones(2, 3, 1)).shape
    loom.Size([2, 1, 1])
    """
    input, batch1, batch2 = _autocast.lower(input, batch1, batch2)
    return _scaled_sum("baddbmm", input, bmm(batch1, batch2), beta, alpha)


def addbmm(input, batch1, batch2, *, beta=1, alpha=1) -> Tensor:
    """beta * input + alpha * sum over the batch of bmm(batch1, batch2).

    Examples
    --------
    >>> loom.addbmm(loom.zeros(1, 1), loom.ones(2, 1, 3), loom.ones(2, 3, 1)).tolist()
    [[6.0]]
    """
    input, batch1, batch2 = _autocast.lower(input, batch1, batch2)
    b1, b2 = _t(batch1), _t(batch2)
    _check_bmm("addbmm", b1, b2)
    # One matmul over (n, b*m) x (b*m, p) sums the batch inside the contraction.
    a = b1.permute(1, 0, 2).reshape(b1.shape[1], b1.shape[0] * b1.shape[2])
    summed = matmul(a, b2.reshape(b2.shape[0] * b2.shape[1], b2.shape[2]))
    return _scaled_sum("addbmm", input, summed, beta, alpha)


def kron(a, b) -> Tensor:
    """Kronecker product: blocks a[i...] * b (the lower-rank operand gets leading 1s).

    Examples
    --------
    >>> loom.kron(loom.tensor([1, 2]), loom.tensor([1, 10])).tolist()
    [1, 10, 2, 20]
    """
    a, b = _t(a), _t(b)
    n = max(a.ndim, b.ndim)
    a = a.reshape([1] * (n - a.ndim) + list(a.shape))
    b = b.reshape([1] * (n - b.ndim) + list(b.shape))
    ia = [v for s in a.shape for v in (s, 1)]
    ib = [v for s in b.shape for v in (1, s)]
    return (a.reshape(ia) * b.reshape(ib)).reshape([x * y for x, y in zip(a.shape, b.shape)])


def _tensordot(op: str, a: Tensor, b: Tensor, da: list[int], db: list[int]) -> Tensor:
    """Contract dims da of a with dims db of b through one matmul; free dims of a, then of b."""
    _same_dtype(op, a, b)
    if [a.shape[d] for d in da] != [b.shape[d] for d in db]:
        raise ShapeError(f"loom.{op}: contracted dims have sizes {[a.shape[d] for d in da]} and "
                         f"{[b.shape[d] for d in db]} (shapes {fmt_shape(a.shape)} and {fmt_shape(b.shape)})")
    fa = [d for d in range(a.ndim) if d not in da]
    fb = [d for d in range(b.ndim) if d not in db]
    k = math.prod(a.shape[d] for d in da)
    am = a.permute(fa + da).reshape(math.prod(a.shape[d] for d in fa), k)
    bm = b.permute(db + fb).reshape(k, math.prod(b.shape[d] for d in fb))
    return matmul(am, bm).reshape([a.shape[d] for d in fa] + [b.shape[d] for d in fb])


def tensordot(a, b, dims=2) -> Tensor:
    """Contract the last `dims` dims of `a` with the first of `b`, or the listed dim pairs.

    Parameters
    ----------
    dims : int or (list, list)
        An int n contracts a's last n dims with b's first n; a pair of lists
        (or ints) names the dims of each operand to contract, in matching order.

    Examples
    --------
    >>> loom.tensordot(loom.ones(2, 3, 4), loom.ones(4, 3, 5), dims=([1, 2], [1, 0])).shape
    loom.Size([2, 5])
    """
    a, b = _t(a), _t(b)
    if isinstance(dims, Tensor):
        dims = dims.tolist()
    if isinstance(dims, int):
        if dims < 0 or dims > min(a.ndim, b.ndim):
            raise ShapeError(f"loom.tensordot: dims {dims} must be between 0 and the smaller rank of "
                             f"{fmt_shape(a.shape)} and {fmt_shape(b.shape)}")
        da, db = list(range(a.ndim - dims, a.ndim)), list(range(dims))
    else:
        if len(dims) != 2:
            raise ShapeError(f"loom.tensordot: dims must be an int or a pair of dim lists, got {dims!r}")
        da, db = [list(d) if isinstance(d, (list, tuple)) else [d] for d in dims]
        if len(da) != len(db):
            raise ShapeError(f"loom.tensordot: both dim lists must have one length, got {da} and {db}")
    from loom.tensor import normalize_dim
    da = [normalize_dim(d, a.ndim, "tensordot") for d in da]
    db = [normalize_dim(d, b.ndim, "tensordot") for d in db]
    if len(set(da)) != len(da) or len(set(db)) != len(db):
        raise ShapeError(f"loom.tensordot: repeated dim in {da} or {db}")
    return _tensordot("tensordot", a, b, da, db)


# ================================================================ einsum

def _parse_einsum(equation: str, operands: list[Tensor]) -> tuple[list[str], str]:
    """Subscripts per operand and the output, with '...' spelled out as spare capital letters."""
    eq = equation.replace(" ", "")
    if eq.count("->") > 1:
        raise LoomError(f"loom.einsum: equation {equation!r} has more than one '->'")
    lhs, out = eq.split("->") if "->" in eq else (eq, None)
    terms = lhs.split(",")
    if len(terms) != len(operands):
        raise LoomError(f"loom.einsum: equation {equation!r} names {len(terms)} operands but "
                        f"{len(operands)} were given")
    for t in terms + ([out] if out is not None else []):
        rest = t.replace("...", "", 1)
        for c in rest:
            if not (c.isascii() and c.isalpha()):
                raise LoomError(f"loom.einsum: invalid subscript {c!r} in {equation!r}; subscripts are "
                                "letters a-z, A-Z and one '...' per term")
    letters = {c for t in terms for c in t if c.isalpha()}
    n_ell = []
    for t, op in zip(terms, operands):
        named = len(t) - 3 if "..." in t else len(t)
        k = op.ndim - named if "..." in t else 0
        if k < 0 or (k == 0 and "..." not in t and named != op.ndim):
            raise ShapeError(f"loom.einsum: subscripts {t!r} name {named} dims but the operand has "
                             f"shape {fmt_shape(op.shape)}")
        n_ell.append(k)
    spare = [chr(c) for c in range(ord("A"), ord("Z") + 1) if chr(c) not in letters]
    spare += [chr(c) for c in range(ord("a"), ord("z") + 1) if chr(c) not in letters]
    ell = "".join(spare[:max(n_ell, default=0)])
    # Ellipsis dims broadcast from the right, as in PyTorch.
    expanded = [t.replace("...", ell[len(ell) - k:]) for t, k in zip(terms, n_ell)]
    if out is None:
        counts: dict[str, int] = {}
        for t in expanded:
            for c in t:
                counts[c] = counts.get(c, 0) + 1
        out = ell + "".join(sorted(c for c in counts if counts[c] == 1 and c not in ell))
    else:
        out = out.replace("...", ell)
        for c in out:
            if out.count(c) > 1:
                raise LoomError(f"loom.einsum: output subscript {c!r} appears more than once in {equation!r}")
            if not any(c in t for t in expanded):
                raise LoomError(f"loom.einsum: output subscript {c!r} does not appear in the inputs")
    return expanded, out


def _diagonalise(op: Tensor, t: str) -> tuple[Tensor, str]:
    """Take the diagonal for a letter repeated inside one operand (as in 'ii->i')."""
    from loom.functional.shape import diagonal
    while len(set(t)) != len(t):
        c = next(ch for ch in t if t.count(ch) > 1)
        i = t.index(c)
        j = t.index(c, i + 1)
        if op.shape[i] != op.shape[j]:
            raise ShapeError(f"loom.einsum: subscript {c!r} is repeated for dims of sizes {op.shape[i]} "
                             f"and {op.shape[j]} in one operand")
        op = diagonal(op, 0, i, j)
        t = t[:i] + t[i + 1:j] + t[j + 1:] + c
    return op, t


def _sum_letters(op: Tensor, t: str, keep: set[str]) -> tuple[Tensor, str]:
    drop = [i for i, c in enumerate(t) if c not in keep]
    if not drop:
        return op, t
    return op.sum(drop), "".join(c for i, c in enumerate(t) if i not in drop)


def _contract(a: Tensor, at: str, b: Tensor, bt: str, needed: set[str]) -> tuple[Tensor, str]:
    """Contract two operands through one batched matmul; letters in `needed` survive."""
    batch = [c for c in at if c in bt and c in needed]
    contract = [c for c in at if c in bt and c not in needed]
    left = [c for c in at if c not in bt]
    right = [c for c in bt if c not in at]
    a2 = a.permute([at.index(c) for c in batch + left + contract])
    b2 = b.permute([bt.index(c) for c in batch + contract + right])
    nb = len(batch)
    bshape = list(a2.shape[:nb])
    lsizes = list(a2.shape[nb:nb + len(left)])
    rsizes = list(b2.shape[nb + len(contract):])
    k = math.prod(a2.shape[nb + len(left):])
    a3 = a2.reshape(bshape + [math.prod(lsizes), k])
    b3 = b2.reshape(bshape + [k, math.prod(rsizes)])
    if a3.dtype is dt.bool_:  # A sum of products of bools is their logical OR of ANDs.
        prod = matmul(a3.to(dt.int64), b3.to(dt.int64)) != 0
    else:
        prod = matmul(a3, b3)
    return prod.reshape(bshape + lsizes + rsizes), "".join(batch + left + right)


def _sublist_equation(args: tuple) -> tuple[str, tuple]:
    """Turn einsum's sublist form (operand, [dims], ..., [out]) into an equation and its operands."""
    def letters(dims, where: str) -> str:
        if not isinstance(dims, (list, tuple)):
            raise LoomTypeError(f"loom.einsum: in the sublist form, expected a list of dims {where}, got {dims!r}")
        out = []
        for d in dims:
            if d is Ellipsis:
                out.append("...")
            elif isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 52:
                out.append("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"[d])
            else:
                raise LoomValueError(f"loom.einsum: a sublist dim must be an int in [0, 52) or ..., got {d!r}")
        return "".join(out)
    pairs, out = (args[:-1], args[-1]) if len(args) % 2 else (args, None)
    ops = pairs[0::2]
    eq = ",".join(letters(d, f"after operand {i}") for i, d in enumerate(pairs[1::2]))
    return (eq if out is None else eq + "->" + letters(out, "for the output")), ops


def einsum(equation: str, *operands) -> Tensor:
    """Einstein summation, contracted pairwise from left to right through matmul.

    Supports '...' (broadcasting from the right), letters repeated inside one
    operand (diagonals), implicit output (letters seen once, sorted, after the
    '...' dims) and size-1 dims that broadcast against other operands.

    Examples
    --------
    >>> loom.einsum("bij,bjk->bik", loom.ones(2, 3, 4), loom.ones(2, 4, 5)).shape
    loom.Size([2, 3, 5])
    """
    if not isinstance(equation, str):  # The sublist form: einsum(a, [0, 1], b, [1, 2], [0, 2]).
        equation, operands = _sublist_equation((equation, *operands))
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    ops = [_t(o) for o in operands]
    if not ops:
        raise LoomError("loom.einsum: expected at least one operand")
    for o in ops[1:]:
        if o.dtype is not ops[0].dtype:
            raise DTypeError(f"loom.einsum: expected all operands to have the same dtype, got "
                             f"{ops[0].dtype.name} and {o.dtype.name}")
    terms, out = _parse_einsum(equation, ops)
    pairs = [_diagonalise(op, t) for op, t in zip(ops, terms)]
    sizes: dict[str, int] = {}
    for op, t in pairs:
        for c, s in zip(t, op.shape):
            if c in sizes and s != sizes[c] and 1 not in (s, sizes[c]):
                raise ShapeError(f"loom.einsum: subscript {c!r} has size {s} in one operand and "
                                 f"{sizes[c]} in another")
            if c not in sizes or sizes[c] == 1:
                sizes[c] = s
    # Size-1 dims broadcast: expand them where another operand has the full size.
    pairs = [(op.expand([sizes[c] for c in t]) if len(pairs) > 1 else op, t) for op, t in pairs]
    acc, at = pairs[0]
    for k in range(1, len(pairs)):
        op, t = pairs[k]
        later = {c for _, tt in pairs[k + 1:] for c in tt}
        needed = set(out) | later
        acc, at = _sum_letters(acc, at, needed | set(t))
        op, t = _sum_letters(op, t, needed | set(at))
        if acc.dtype is not op.dtype:  # Integer sums promote to int64.
            d = dt.result_type(acc, op)
            acc, op = acc.to(d), op.to(d)
        acc, at = _contract(acc, at, op, t, needed)
    acc, at = _sum_letters(acc, at, set(out))
    if at == out:
        return acc if len(pairs) > 1 or acc is not ops[0] else acc.clone()
    return acc.permute([at.index(c) for c in out])


METHODS = ["matmul", "mm", "bmm", "mv", "dot", "vdot", "inner", "outer", "ger", "addmm", "addmv", "addr",
           "baddbmm", "addbmm", "kron"]
INPLACE = ["addmm", "addmv", "addr", "baddbmm", "addbmm"]


_upper.register(matmul=matmul)
