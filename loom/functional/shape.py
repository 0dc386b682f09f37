"""Movement ops: views, joins and splits, built on reshape/permute/expand/pad/slice/flip."""
from __future__ import annotations

import math
from typing import Sequence

from loom import dtypes as dt
from loom.errors import LoomError, ShapeError, fmt_shape
from loom.tensor import Size, Tensor, apply, arange, broadcast_shapes, broadcast_to, normalize_dim, tensor


def _t(x) -> Tensor:
    return x if isinstance(x, Tensor) else tensor(x)


def _sizes(shape, op: str) -> list[int]:
    if len(shape) == 1 and isinstance(shape[0], (list, tuple, Size)):
        shape = shape[0]
    out = []
    for s in shape:
        if isinstance(s, Tensor):
            s = int(s.item())
        if not isinstance(s, int) or isinstance(s, bool):
            try:
                s = int(s)  # NumPy integers.
            except (TypeError, ValueError):
                raise TypeError(f"loom.{op}: sizes must be ints, got {shape!r}") from None
        out.append(s)
    return out


def reshape(x, *shape) -> Tensor:
    """A tensor with the same elements in `shape`; one size may be -1 (inferred)."""
    x = _t(x)
    sizes = _sizes(shape, "reshape")
    n = x.numel()
    if sizes.count(-1) > 1:
        raise ShapeError(f"loom.reshape: only one dimension can be inferred, got {sizes}")
    if -1 in sizes:
        known = math.prod(s for s in sizes if s != -1)
        if known == 0 or n % known:
            raise ShapeError(f"loom.reshape: shape {sizes} is invalid for input of size {n} "
                             f"(shape {fmt_shape(x.shape)})")
        sizes[sizes.index(-1)] = n // known
    if any(s < 0 for s in sizes) or math.prod(sizes) != n:
        raise ShapeError(f"loom.reshape: shape {sizes} is invalid for input of size {n} "
                         f"(shape {fmt_shape(x.shape)})")
    if tuple(sizes) == tuple(x.shape):
        return x
    return apply("reshape", (x,), {"shape": tuple(sizes)})


def view(x, *shape) -> Tensor:
    if len(shape) == 1 and (isinstance(shape[0], dt.DType) or shape[0] in (float, int, bool)):
        raise LoomError("loom.view: reinterpreting a tensor as another dtype is not supported; use .to()")
    return reshape(x, *shape)


def view_as(x, other) -> Tensor:
    return reshape(x, tuple(other.shape))


def reshape_as(x, other) -> Tensor:
    return reshape(x, tuple(other.shape))


def permute(x, *dims) -> Tensor:
    x = _t(x)
    dims = _sizes(dims, "permute")
    if len(dims) != x.ndim:
        raise ShapeError(f"loom.permute: number of dims {len(dims)} does not match the rank "
                         f"{x.ndim} of the input {fmt_shape(x.shape)}")
    perm = tuple(normalize_dim(d, x.ndim, "permute") for d in dims)
    if len(set(perm)) != len(perm):
        raise ShapeError(f"loom.permute: repeated dim in {dims}")
    if perm == tuple(range(x.ndim)):
        return x
    return apply("permute", (x,), {"perm": perm})


def transpose(x, dim0: int, dim1: int) -> Tensor:
    x = _t(x)
    if x.ndim < 2 and x.ndim == 0:
        return x
    a, b = normalize_dim(dim0, x.ndim, "transpose"), normalize_dim(dim1, x.ndim, "transpose")
    perm = list(range(x.ndim))
    perm[a], perm[b] = perm[b], perm[a]
    return permute(x, perm)


swapaxes = swapdims = transpose


def t(x) -> Tensor:
    x = _t(x)
    if x.ndim > 2:
        raise ShapeError(f"loom.t: expects a tensor with <= 2 dims, got {fmt_shape(x.shape)}")
    return transpose(x, 0, 1) if x.ndim == 2 else x


def adjoint(x) -> Tensor:
    return transpose(x, -2, -1)


def movedim(x, source, destination) -> Tensor:
    x = _t(x)
    src = [source] if isinstance(source, int) else list(source)
    dst = [destination] if isinstance(destination, int) else list(destination)
    if len(src) != len(dst):
        raise ShapeError(f"loom.movedim: source {src} and destination {dst} differ in length")
    src = [normalize_dim(s, x.ndim, "movedim") for s in src]
    dst = [normalize_dim(d, x.ndim, "movedim") for d in dst]
    perm = [-1] * x.ndim
    for s, d in zip(src, dst):
        perm[d] = s
    rest = iter(i for i in range(x.ndim) if i not in src)
    perm = [p if p != -1 else next(rest) for p in perm]
    return permute(x, perm)


moveaxis = movedim


def expand(x, *sizes) -> Tensor:
    """Broadcast to `sizes` without copying; -1 keeps a dim, new dims go in front."""
    x = _t(x)
    sizes = _sizes(sizes, "expand")
    if len(sizes) < x.ndim:
        raise ShapeError(f"loom.expand: the number of sizes {len(sizes)} must be at least the rank "
                         f"{x.ndim} of {fmt_shape(x.shape)}")
    lead = len(sizes) - x.ndim
    target = []
    for i, s in enumerate(sizes):
        if s == -1:
            if i < lead:
                raise ShapeError(f"loom.expand: -1 is not allowed for the new leading dim {i}")
            s = x.shape[i - lead]
        target.append(s)
    for i, s in enumerate(x.shape):
        if s != 1 and s != target[lead + i]:
            raise ShapeError(f"loom.expand: the expanded size {target[lead + i]} must match the existing "
                             f"size {s} at non-singleton dim {lead + i}; input {fmt_shape(x.shape)}, "
                             f"target {fmt_shape(target)}")
    return broadcast_to(x, target, "expand")


def expand_as(x, other) -> Tensor:
    return expand(x, tuple(other.shape))


def broadcast_tensors(*tensors) -> tuple[Tensor, ...]:
    ts = [_t(v) for v in tensors]
    shape = broadcast_shapes(*(tuple(v.shape) for v in ts), op="broadcast_tensors")
    return tuple(broadcast_to(v, shape, "broadcast_tensors") for v in ts)


def squeeze(x, dim=None) -> Tensor:
    x = _t(x)
    if dim is None:
        dims = [i for i, s in enumerate(x.shape) if s == 1]
    else:
        dims = [dim] if isinstance(dim, int) else list(dim)
        dims = [normalize_dim(d, x.ndim, "squeeze") for d in dims] if x.ndim else []
        dims = [d for d in dims if x.shape[d] == 1]
    if not dims:
        return x
    return reshape(x, [s for i, s in enumerate(x.shape) if i not in dims])


def unsqueeze(x, dim: int) -> Tensor:
    x = _t(x)
    d = normalize_dim(dim, x.ndim + 1, "unsqueeze")
    shape = list(x.shape)
    shape.insert(d, 1)
    return reshape(x, shape)


def flatten(x, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    x = _t(x)
    if x.ndim == 0:
        return reshape(x, 1)
    s = normalize_dim(start_dim, x.ndim, "flatten")
    e = normalize_dim(end_dim, x.ndim, "flatten")
    if s > e:
        raise ShapeError(f"loom.flatten: start_dim {start_dim} comes after end_dim {end_dim}")
    shape = list(x.shape[:s]) + [math.prod(x.shape[s:e + 1])] + list(x.shape[e + 1:])
    return reshape(x, shape)


def unflatten(x, dim: int, sizes) -> Tensor:
    x = _t(x)
    d = normalize_dim(dim, x.ndim, "unflatten")
    sizes = list(sizes)
    if -1 in sizes:
        known = math.prod(s for s in sizes if s != -1)
        sizes[sizes.index(-1)] = x.shape[d] // known if known else 0
    if math.prod(sizes) != x.shape[d]:
        raise ShapeError(f"loom.unflatten: sizes {sizes} do not multiply to dim {d} of size {x.shape[d]}")
    return reshape(x, list(x.shape[:d]) + sizes + list(x.shape[d + 1:]))


def ravel(x) -> Tensor:
    return reshape(x, -1)


def _slice_dim(x: Tensor, dim: int, start: int, stop: int, step: int = 1) -> Tensor:
    if start == 0 and stop == x.shape[dim] and step == 1:
        return x
    starts = [0] * x.ndim
    stops = list(x.shape)
    steps = [1] * x.ndim
    starts[dim], stops[dim], steps[dim] = start, stop, step
    return apply("slice", (x,), {"starts": starts, "stops": stops, "steps": steps})


def narrow(x, dim: int, start: int, length: int) -> Tensor:
    x = _t(x)
    d = normalize_dim(dim, x.ndim, "narrow")
    if start < 0:
        start += x.shape[d]
    if not 0 <= start <= x.shape[d] or length < 0 or start + length > x.shape[d]:
        raise ShapeError(f"loom.narrow: start {start} + length {length} exceeds dim {d} of size "
                         f"{x.shape[d]} in {fmt_shape(x.shape)}")
    return _slice_dim(x, d, start, start + length)


def select(x, dim: int, index: int) -> Tensor:
    x = _t(x)
    d = normalize_dim(dim, x.ndim, "select")
    n = x.shape[d]
    if not -n <= index < n:
        from loom.errors import LoomIndexError
        raise LoomIndexError(f"loom.select: index {index} is out of range for dim {d} of size {n}")
    index %= n
    return squeeze(_slice_dim(x, d, index, index + 1), d)


def cat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """Join tensors along an existing dim (each is padded into place and summed, all primitives)."""
    ts = [_t(v) for v in tensors]
    if not ts:
        raise LoomError("loom.cat: expected a non-empty sequence of tensors")
    # PyTorch skips 1-d empty tensors in cat.
    ts = [v for v in ts if not (v.ndim == 1 and v.shape[0] == 0)] or ts[:1]
    ref = ts[0]
    if ref.ndim == 0:
        raise ShapeError("loom.cat: zero-dimensional tensors cannot be concatenated")
    d = normalize_dim(dim, ref.ndim, "cat")
    dtype = dt.result_type(*ts)
    for k, v in enumerate(ts):
        if v.ndim != ref.ndim or any(a != b for i, (a, b) in enumerate(zip(v.shape, ref.shape)) if i != d):
            raise ShapeError(f"loom.cat: sizes of tensors must match except in dim {d}; tensor 0 has "
                             f"shape {fmt_shape(ref.shape)} and tensor {k} has {fmt_shape(v.shape)}")
    if len(ts) == 1:
        return ts[0].to(dtype)
    total = sum(v.shape[d] for v in ts)
    out = None
    offset = 0
    for v in ts:
        pads = [(0, 0)] * v.ndim
        pads[d] = (offset, total - offset - v.shape[d])
        part = apply("pad", (v.to(dtype),), {"pads": pads, "value": 0})
        offset += v.shape[d]
        if out is None:
            out = part
        elif dtype is dt.bool_:
            out = out | part
        else:
            out = out + part
    return out


concat = concatenate = cat


def stack(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    ts = [_t(v) for v in tensors]
    if not ts:
        raise LoomError("loom.stack: expected a non-empty sequence of tensors")
    for k, v in enumerate(ts):
        if tuple(v.shape) != tuple(ts[0].shape):
            raise ShapeError(f"loom.stack: all tensors must have one shape; tensor 0 has "
                             f"{fmt_shape(ts[0].shape)} and tensor {k} has {fmt_shape(v.shape)}")
    d = normalize_dim(dim, ts[0].ndim + 1, "stack")
    return cat([unsqueeze(v, d) for v in ts], d)


def hstack(tensors):
    ts = [_t(v) for v in tensors]
    return cat(ts, 0 if ts[0].ndim == 1 else 1)


def vstack(tensors):
    return cat([atleast_2d(v) for v in tensors], 0)


def atleast_1d(x):
    x = _t(x)
    return reshape(x, 1) if x.ndim == 0 else x


def atleast_2d(x):
    x = _t(x)
    return reshape(x, 1, -1) if x.ndim < 2 else x


def split(x, split_size_or_sections, dim: int = 0) -> tuple[Tensor, ...]:
    x = _t(x)
    d = normalize_dim(dim, x.ndim, "split")
    n = x.shape[d]
    if isinstance(split_size_or_sections, int):
        size = split_size_or_sections
        if size <= 0 and n > 0:
            raise ShapeError(f"loom.split: split_size must be positive, got {size}")
        sizes = [min(size, n - i) for i in range(0, n, size)] if n else [0]
    else:
        sizes = list(split_size_or_sections)
        if sum(sizes) != n:
            raise ShapeError(f"loom.split: sections {sizes} do not add up to dim {d} of size {n} "
                             f"in {fmt_shape(x.shape)}")
    out, start = [], 0
    for s in sizes:
        out.append(_slice_dim(x, d, start, start + s))
        start += s
    return tuple(out)


def tensor_split(x, indices_or_sections, dim: int = 0):
    x = _t(x)
    d = normalize_dim(dim, x.ndim, "tensor_split")
    n = x.shape[d]
    if isinstance(indices_or_sections, int):
        k = indices_or_sections
        sizes = [n // k + (1 if i < n % k else 0) for i in range(k)]
    else:
        bounds = [0] + list(indices_or_sections) + [n]
        sizes = [max(0, min(b, n) - min(a, n)) for a, b in zip(bounds, bounds[1:])]
    return split(x, sizes, d)


def chunk(x, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
    x = _t(x)
    if chunks <= 0:
        raise ShapeError(f"loom.chunk: chunks must be positive, got {chunks}")
    d = normalize_dim(dim, x.ndim, "chunk")
    n = x.shape[d]
    size = -(-n // chunks) if n else 1
    return split(x, max(size, 1), d) if n else (x,)


def unbind(x, dim: int = 0) -> tuple[Tensor, ...]:
    x = _t(x)
    d = normalize_dim(dim, x.ndim, "unbind")
    return tuple(select(x, d, i) for i in range(x.shape[d]))


def repeat(x, *sizes) -> Tensor:
    """Tile the tensor `sizes` times along each dim (PyTorch's repeat)."""
    x = _t(x)
    reps = _sizes(sizes, "repeat")
    if len(reps) < x.ndim:
        raise ShapeError(f"loom.repeat: number of repeat dims {len(reps)} can not be smaller than the "
                         f"rank {x.ndim} of {fmt_shape(x.shape)}")
    x = reshape(x, [1] * (len(reps) - x.ndim) + list(x.shape))
    inter, final = [], []
    for r, s in zip(reps, x.shape):
        inter += [1, s]
        final.append(r * s)
    y = reshape(x, inter)
    y = expand(y, [v for r, s in zip(reps, x.shape) for v in (r, s)])
    return reshape(y, final)


def tile(x, dims) -> Tensor:
    x = _t(x)
    dims = list(dims)
    if len(dims) < x.ndim:
        dims = [1] * (x.ndim - len(dims)) + dims
    return repeat(x, dims)


def repeat_interleave(x, repeats, dim=None) -> Tensor:
    x = _t(x)
    if dim is None:
        x, dim = reshape(x, -1), 0
    d = normalize_dim(dim, x.ndim, "repeat_interleave")
    if isinstance(repeats, Tensor) and repeats.numel() > 1:
        from loom.functional.indexing import index_select
        reps = repeats.tolist()
        idx = [i for i, r in enumerate(reps) for _ in range(r)]
        return index_select(x, d, tensor(idx, dtype=dt.int64))
    r = int(repeats.item()) if isinstance(repeats, Tensor) else int(repeats)
    y = unsqueeze(x, d + 1)
    shape = list(y.shape)
    shape[d + 1] = r
    y = expand(y, shape)
    out = list(x.shape)
    out[d] *= r
    return reshape(y, out)


def flip(x, dims) -> Tensor:
    x = _t(x)
    dims = [dims] if isinstance(dims, int) else list(dims)
    axes = tuple(sorted({normalize_dim(d, x.ndim, "flip") for d in dims})) if x.ndim else ()
    if not axes:
        return x
    return apply("flip", (x,), {"axes": axes})


def fliplr(x):
    return flip(x, [1])


def flipud(x):
    return flip(x, [0])


def roll(x, shifts, dims=None) -> Tensor:
    x = _t(x)
    if dims is None:
        flat = reshape(x, -1)
        return reshape(roll(flat, shifts, 0), tuple(x.shape))
    shifts = [shifts] if isinstance(shifts, int) else list(shifts)
    dims = [dims] if isinstance(dims, int) else list(dims)
    if len(shifts) != len(dims):
        raise ShapeError(f"loom.roll: shifts {shifts} and dims {dims} must have the same length")
    for s, dim in zip(shifts, dims):
        d = normalize_dim(dim, x.ndim, "roll")
        n = x.shape[d]
        if n == 0:
            continue
        s %= n
        if s:
            x = cat([_slice_dim(x, d, n - s, n), _slice_dim(x, d, 0, n - s)], d)
    return x


def rot90(x, k: int = 1, dims=(0, 1)) -> Tensor:
    x = _t(x)
    k %= 4
    a, b = dims
    if k == 1:
        return transpose(flip(x, [b]), a, b)
    if k == 2:
        return flip(x, [a, b])
    if k == 3:
        return flip(transpose(x, a, b), [b])
    return x


def _tri_mask(x: Tensor, diagonal: int, upper: bool) -> Tensor:
    if x.ndim < 2:
        raise ShapeError(f"loom.{'triu' if upper else 'tril'}: expected a tensor with at least 2 dims, "
                         f"got {fmt_shape(x.shape)}")
    n, m = x.shape[-2], x.shape[-1]
    rows = reshape(arange(n), n, 1)
    cols = reshape(arange(m), 1, m)
    keep = (cols - rows >= diagonal) if upper else (cols - rows <= diagonal)
    return keep


def tril(x, diagonal: int = 0) -> Tensor:
    from loom.functional.math import where
    x = _t(x)
    return where(_tri_mask(x, diagonal, False), x, 0 if not x.dtype.is_floating_point else 0.0).to(x.dtype)


def triu(x, diagonal: int = 0) -> Tensor:
    from loom.functional.math import where
    x = _t(x)
    return where(_tri_mask(x, diagonal, True), x, 0 if not x.dtype.is_floating_point else 0.0).to(x.dtype)


def pad(x, pad: Sequence[int], mode: str = "constant", value: float | None = None) -> Tensor:
    """Pad the last dims: `pad` is (left, right, top, bottom, ...) from the last dim backwards.

    Negative amounts crop. Modes: constant, reflect, replicate, circular.
    """
    x = _t(x)
    pad = [int(p) for p in pad]
    if len(pad) % 2 or len(pad) // 2 > x.ndim:
        raise ShapeError(f"loom.pad: padding length {len(pad)} must be even and at most twice the rank "
                         f"{x.ndim} of {fmt_shape(x.shape)}")
    pairs = [(0, 0)] * x.ndim
    for i in range(len(pad) // 2):
        pairs[x.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    if mode == "constant":
        # Crop negative amounts first, then pad the rest.
        for d, (lo, hi) in enumerate(pairs):
            if lo < 0 or hi < 0:
                x = _slice_dim(x, d, max(-lo, 0), x.shape[d] - max(-hi, 0))
        pos = [(max(lo, 0), max(hi, 0)) for lo, hi in pairs]
        if all(p == (0, 0) for p in pos):
            return x
        v = 0 if value is None else value
        if not x.dtype.is_floating_point:
            v = int(v) if x.dtype is not dt.bool_ else bool(v)
        return apply("pad", (x,), {"pads": pos, "value": v})
    if mode not in ("reflect", "replicate", "circular"):
        raise ValueError(f"loom.pad: unknown mode {mode!r}; expected constant, reflect, replicate or circular")
    for d, (lo, hi) in enumerate(pairs):
        if lo == 0 and hi == 0:
            continue
        n = x.shape[d]
        if mode == "reflect" and (lo >= n or hi >= n):
            raise ShapeError(f"loom.pad: reflect padding ({lo}, {hi}) must be smaller than dim {d} of size {n}")
        parts = []
        if lo:
            if mode == "reflect":
                parts.append(flip(_slice_dim(x, d, 1, lo + 1), [d]))
            elif mode == "replicate":
                parts.append(expand_dim(_slice_dim(x, d, 0, 1), d, lo))
            else:
                parts.append(_slice_dim(x, d, n - lo, n))
        parts.append(x)
        if hi:
            if mode == "reflect":
                parts.append(flip(_slice_dim(x, d, n - hi - 1, n - 1), [d]))
            elif mode == "replicate":
                parts.append(expand_dim(_slice_dim(x, d, n - 1, n), d, hi))
            else:
                parts.append(_slice_dim(x, d, 0, hi))
        x = cat(parts, d)
    return x


def expand_dim(x: Tensor, d: int, size: int) -> Tensor:
    shape = list(x.shape)
    shape[d] = size
    return broadcast_to(x, shape, "expand")


def diagonal(x, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    x = _t(x)
    a, b = normalize_dim(dim1, x.ndim, "diagonal"), normalize_dim(dim2, x.ndim, "diagonal")
    y = movedim(x, (a, b), (-2, -1))
    n, m = y.shape[-2], y.shape[-1]
    if offset >= 0:
        length = max(0, min(n, m - offset))
        rows, cols = arange(length), arange(length) + offset
    else:
        length = max(0, min(n + offset, m))
        rows, cols = arange(length) - offset, arange(length)
    from loom.functional.indexing import getitem
    return getitem(y, (Ellipsis, rows, cols))


def diag(x, diagonal: int = 0) -> Tensor:
    x = _t(x)
    if x.ndim == 1:
        n = x.shape[0] + abs(diagonal)
        from loom.tensor import eye
        base = reshape(x, 1, -1) if diagonal >= 0 else reshape(x, -1, 1)
        m = eye(n, dtype=x.dtype)
        m = m if diagonal == 0 else roll(m, diagonal, 1)
        padded = pad(x, (max(diagonal, 0), max(-diagonal, 0)))
        return m * (reshape(padded, 1, n) if diagonal >= 0 else reshape(pad(x, (-diagonal, 0)), n, 1))
    return globals()["diagonal"](x, diagonal)


def diag_embed(x, offset: int = 0, dim1: int = -2, dim2: int = -1):
    from loom.tensor import eye
    x = _t(x)
    n = x.shape[-1]
    return unsqueeze(x, -1) * eye(n, dtype=x.dtype)


def meshgrid(*tensors, indexing: str = "ij"):
    ts = [_t(v) for v in (tensors[0] if len(tensors) == 1 and isinstance(tensors[0], (list, tuple))
                          else tensors)]
    shape = [v.numel() for v in ts]
    outs = []
    for i, v in enumerate(ts):
        s = [1] * len(ts)
        s[i] = shape[i]
        outs.append(expand(reshape(v, s), shape))
    if indexing == "xy" and len(ts) >= 2:
        outs = [transpose(o, 0, 1) for o in outs]
    return tuple(outs)


def _mT(x):
    return transpose(x, -2, -1)


METHODS = ["reshape", "view", "view_as", "reshape_as", "permute", "transpose", "swapaxes", "swapdims", "t",
           "adjoint", "movedim", "moveaxis", "expand", "expand_as", "squeeze", "unsqueeze", "flatten",
           "unflatten", "ravel", "narrow", "select", "split", "tensor_split", "chunk", "unbind", "repeat",
           "tile", "repeat_interleave", "flip", "fliplr", "flipud", "roll", "rot90", "tril", "triu",
           "diagonal", "diag", "diag_embed"]
INPLACE = ["tril", "triu", "squeeze", "unsqueeze", "transpose", "t"]
PROPERTIES = {"mT": _mT, "T": lambda x: permute(x, list(range(x.ndim))[::-1]) if x.ndim > 1 else x,
              "mH": _mT, "H": lambda x: permute(x, list(range(x.ndim))[::-1]) if x.ndim > 1 else x}
