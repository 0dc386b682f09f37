"""Contractions: matmul with PyTorch's broadcasting, and what is built on it (einsum, outer...)."""
from __future__ import annotations

import math

from loom import dtypes as dt
from loom.errors import DTypeError, LoomError, ShapeError, fmt_shape
from loom.tensor import Tensor, apply, broadcast_shapes, broadcast_to, tensor


def _t(x) -> Tensor:
    return x if isinstance(x, Tensor) else tensor(x)


def matmul(a, b) -> Tensor:
    """Matrix product with PyTorch's rules: 1-d operands are vectors, batch dims broadcast."""
    a, b = _t(a), _t(b)
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(f"loom.matmul: both arguments need at least 1 dimension, got "
                         f"{fmt_shape(a.shape)} and {fmt_shape(b.shape)}")
    if a.dtype is not b.dtype:
        raise DTypeError(f"loom.matmul: expected both operands to have the same dtype, got "
                         f"{a.dtype.name} and {b.dtype.name}")
    if a.dtype is dt.bool_:
        raise DTypeError("loom.matmul: not implemented for bool tensors")
    va, vb = a.ndim == 1, b.ndim == 1
    a2 = a.reshape(1, a.shape[0]) if va else a
    b2 = b.reshape(b.shape[0], 1) if vb else b
    if a2.shape[-1] != b2.shape[-2]:
        raise ShapeError(f"loom.matmul: shapes {fmt_shape(a.shape)} and {fmt_shape(b.shape)} cannot be "
                         f"multiplied ({a2.shape[-2]}x{a2.shape[-1]} and {b2.shape[-2]}x{b2.shape[-1]})")
    batch = broadcast_shapes(tuple(a2.shape[:-2]), tuple(b2.shape[:-2]), op="matmul")
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
    a, b = _t(a), _t(b)
    if a.ndim != 2 or b.ndim != 2:
        raise ShapeError(f"loom.mm: expected 2-d tensors, got {fmt_shape(a.shape)} and {fmt_shape(b.shape)}")
    return matmul(a, b)


def bmm(a, b) -> Tensor:
    a, b = _t(a), _t(b)
    if a.ndim != 3 or b.ndim != 3:
        raise ShapeError(f"loom.bmm: expected 3-d tensors, got {fmt_shape(a.shape)} and {fmt_shape(b.shape)}")
    if a.shape[0] != b.shape[0]:
        raise ShapeError(f"loom.bmm: batch sizes differ: {fmt_shape(a.shape)} and {fmt_shape(b.shape)}")
    return matmul(a, b)


def mv(a, v) -> Tensor:
    a, v = _t(a), _t(v)
    if a.ndim != 2 or v.ndim != 1:
        raise ShapeError(f"loom.mv: expected a 2-d matrix and a 1-d vector, got {fmt_shape(a.shape)} "
                         f"and {fmt_shape(v.shape)}")
    return matmul(a, v)


def dot(a, b) -> Tensor:
    a, b = _t(a), _t(b)
    if a.ndim != 1 or b.ndim != 1 or a.shape != b.shape:
        raise ShapeError(f"loom.dot: expected two 1-d tensors of one size, got {fmt_shape(a.shape)} "
                         f"and {fmt_shape(b.shape)}")
    return (a * b).sum()


vdot = inner_1d = dot


def inner(a, b) -> Tensor:
    a, b = _t(a), _t(b)
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    return matmul(a, b.transpose(-1, -2) if b.ndim > 1 else b)


def outer(a, b) -> Tensor:
    a, b = _t(a), _t(b)
    if a.ndim != 1 or b.ndim != 1:
        raise ShapeError(f"loom.outer: expected two 1-d tensors, got {fmt_shape(a.shape)} and {fmt_shape(b.shape)}")
    return a.reshape(-1, 1) * b.reshape(1, -1)


ger = outer


def addmm(input, mat1, mat2, beta=1, alpha=1) -> Tensor:
    prod = mm(mat1, mat2)
    return (input * beta if beta != 1 else input) + (prod * alpha if alpha != 1 else prod)


def addmv(input, mat, vec, beta=1, alpha=1) -> Tensor:
    return input * beta + mv(mat, vec) * alpha


def baddbmm(input, b1, b2, beta=1, alpha=1) -> Tensor:
    return input * beta + bmm(b1, b2) * alpha


def addbmm(input, b1, b2, beta=1, alpha=1) -> Tensor:
    return input * beta + bmm(b1, b2).sum(0) * alpha


def kron(a, b) -> Tensor:
    a, b = _t(a), _t(b)
    n = max(a.ndim, b.ndim)
    a = a.reshape([1] * (n - a.ndim) + list(a.shape))
    b = b.reshape([1] * (n - b.ndim) + list(b.shape))
    ia = [v for s in a.shape for v in (s, 1)]
    ib = [v for s in b.shape for v in (1, s)]
    return (a.reshape(ia) * b.reshape(ib)).reshape([x * y for x, y in zip(a.shape, b.shape)])


def tensordot(a, b, dims=2) -> Tensor:
    a, b = _t(a), _t(b)
    if isinstance(dims, int):
        da, db = list(range(a.ndim - dims, a.ndim)), list(range(dims))
    else:
        da, db = [list(d) if isinstance(d, (list, tuple)) else [d] for d in dims]
    da = [d % a.ndim for d in da]
    db = [d % b.ndim for d in db]
    fa = [d for d in range(a.ndim) if d not in da]
    fb = [d for d in range(b.ndim) if d not in db]
    k = math.prod(a.shape[d] for d in da)
    am = a.permute(fa + da).reshape(math.prod(a.shape[d] for d in fa), k)
    bm = b.permute(db + fb).reshape(k, math.prod(b.shape[d] for d in fb))
    return matmul(am, bm).reshape([a.shape[d] for d in fa] + [b.shape[d] for d in fb])


def _parse_einsum(equation: str, operands):
    eq = equation.replace(" ", "")
    if "->" in eq:
        lhs, out = eq.split("->")
    else:
        lhs, out = eq, None
    terms = lhs.split(",")
    if len(terms) != len(operands):
        raise LoomError(f"loom.einsum: equation {equation!r} names {len(terms)} operands but "
                        f"{len(operands)} were given")
    letters = sorted({c for t in terms for c in t if c.isalpha()})
    expanded = []
    ell_letters = ""
    for t, op in zip(terms, operands):
        if "..." in t:
            n_ell = op.ndim - (len(t) - 3)
            if n_ell < 0:
                raise ShapeError(f"loom.einsum: operand {fmt_shape(op.shape)} has too few dims for {t!r}")
            spare = [chr(c) for c in range(ord("A"), ord("Z") + 1) if chr(c) not in letters]
            ell = "".join(spare[:n_ell])
            if len(ell) > len(ell_letters):
                ell_letters = "".join(spare[:len(ell)])
            t = t.replace("...", ell_letters[len(ell_letters) - n_ell:] if n_ell else "")
        if len(t) != op.ndim:
            raise ShapeError(f"loom.einsum: subscripts {t!r} name {len(t)} dims but the operand has "
                             f"shape {fmt_shape(op.shape)}")
        expanded.append(t)
    if out is None:
        counts: dict[str, int] = {}
        for t in expanded:
            for c in t:
                counts[c] = counts.get(c, 0) + 1
        out = ell_letters + "".join(sorted(c for c in counts if counts[c] == 1 and c not in ell_letters))
    elif "..." in out:
        out = out.replace("...", ell_letters)
    return expanded, out


def _diagonalise(op: Tensor, t: str):
    """Take the diagonal for a letter repeated inside one operand (as in 'ii->i')."""
    while len(set(t)) != len(t):
        c = next(ch for ch in t if t.count(ch) > 1)
        i = t.index(c)
        j = t.index(c, i + 1)
        from loom.functional.shape import diagonal
        op = diagonal(op, 0, i, j)
        t = t[:i] + t[i + 1:j] + t[j + 1:] + c
    return op, t


def einsum(equation: str, *operands) -> Tensor:
    """Einstein summation, contracted pairwise through matmul."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    ops = [_t(o) for o in operands]
    terms, out = _parse_einsum(equation, ops)
    sizes: dict[str, int] = {}
    pairs = []
    for t, op in zip(terms, ops):
        op, t = _diagonalise(op, t)
        for c, s in zip(t, op.shape):
            if c in sizes and sizes[c] != s and 1 not in (sizes[c], s):
                raise ShapeError(f"loom.einsum: subscript {c!r} has size {s} in one operand and "
                                 f"{sizes[c]} in another")
            sizes[c] = s if c not in sizes or sizes[c] == 1 else sizes[c]
        pairs.append((op, t))
    for c in out:
        if c not in sizes:
            raise LoomError(f"loom.einsum: output subscript {c!r} does not appear in the inputs")
    # Sum away letters that appear in only one operand and not in the output.
    def reduce_private(op, t, others):
        keep = set(out) | {c for o in others for c in o}
        drop = [i for i, c in enumerate(t) if c not in keep]
        if drop:
            op = op.sum(drop)
            t = "".join(c for i, c in enumerate(t) if i not in drop)
        return op, t
    acc, at = pairs[0]
    acc, at = reduce_private(acc, at, [t for _, t in pairs[1:]])
    for k in range(1, len(pairs)):
        op, t = pairs[k]
        later = [tt for _, tt in pairs[k + 1:]]
        op, t = reduce_private(op, t, [at] + later)
        needed = set(out) | {c for tt in later for c in tt}
        batch = [c for c in at if c in t and c in needed]
        contract = [c for c in at if c in t and c not in needed]
        left = [c for c in at if c not in t]
        right = [c for c in t if c not in at]
        a2 = acc.permute([at.index(c) for c in batch + left + contract])
        b2 = op.permute([t.index(c) for c in batch + contract + right])
        bshape = [max(a2.shape[i], b2.shape[i]) for i in range(len(batch))]
        m = math.prod(a2.shape[len(batch) + i] for i in range(len(left)))
        kk = math.prod(max(sizes[c], 1) for c in contract) if contract else 1
        n = math.prod(b2.shape[len(batch) + len(contract) + i] for i in range(len(right)))
        a2 = a2.expand(bshape + list(a2.shape[len(batch):])) if batch else a2
        b2 = b2.expand(bshape + list(b2.shape[len(batch):])) if batch else b2
        a3 = a2.reshape(bshape + [m, kk])
        b3 = b2.reshape(bshape + [kk, n])
        prod = matmul(a3, b3)
        acc = prod.reshape(bshape + [a2.shape[len(batch) + i] for i in range(len(left))]
                           + [b2.shape[len(batch) + len(contract) + i] for i in range(len(right))])
        at = "".join(batch + left + right)
    acc, at = reduce_private(acc, at, [])
    if sorted(at) != sorted(out):
        raise LoomError(f"loom.einsum: could not form output {out!r} from {equation!r}")
    return acc.permute([at.index(c) for c in out]) if at != out else acc


METHODS = ["matmul", "mm", "bmm", "mv", "dot", "vdot", "inner", "outer", "ger", "addmm", "addmv", "baddbmm",
           "addbmm", "kron"]
INPLACE = ["addmm", "baddbmm"]
