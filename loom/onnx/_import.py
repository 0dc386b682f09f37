"""`loom.onnx.load`: an ONNX model as a loom Module whose forward runs each ONNX node with loom ops.

Values are either loom Tensors or static NumPy arrays. Integer initializers,
``Constant`` nodes, ``Shape`` and everything computed only from static values
stay NumPy (loom shapes are known when forward runs), so the shape arithmetic
PyTorch's exporter emits (Shape -> Gather -> Unsqueeze -> Concat -> Reshape)
folds away; a static value meets the graph's tensors as a loom constant.
"""
from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from loom import _api as loom
import loom.nn as nn
import loom.nn.functional as F
from loom import dtypes as dt
from loom.errors import LoomError

_DTYPES = {TensorProto.BOOL: dt.bool_, TensorProto.UINT8: dt.uint8, TensorProto.INT8: dt.int8,
           TensorProto.INT16: dt.int16, TensorProto.INT32: dt.int32, TensorProto.INT64: dt.int64,
           TensorProto.FLOAT16: dt.float16, TensorProto.FLOAT: dt.float32, TensorProto.DOUBLE: dt.float64}

# Inputs of these ops that hold statistics rather than weights: buffers, not trainable parameters.
_STAT_INPUTS = {"BatchNormalization": (3, 4)}


class _Unsupported(LoomError):
    pass


def _is_static(v) -> bool:
    return isinstance(v, np.ndarray)


def _tensor(v, like=None) -> loom.Tensor:
    """A loom Tensor for a value (a static array becomes a constant)."""
    if isinstance(v, loom.Tensor):
        return v
    return loom.from_numpy(np.array(v))


def _dtype(elem_type: int, node: Any = None) -> dt.DType:
    d = _DTYPES.get(elem_type)
    if d is None:
        where = f" in node {node.name!r} ({node.op_type})" if node is not None else ""
        raise LoomError(f"loom.onnx.load: ONNX element type {TensorProto.DataType.Name(elem_type)}{where} has no "
                        f"loom dtype; supported: {[TensorProto.DataType.Name(k) for k in _DTYPES]}")
    return d


def _attr_name(name: str, used: set) -> str:
    base = re.sub(r"\W", "_", name).strip("_") or "param"
    if base[0].isdigit():
        base = "p_" + base
    out, k = base, 1
    while out in used:
        k += 1
        out = f"{base}_{k}"
    used.add(out)
    return out


class OnnxModule(nn.Module):
    """An imported ONNX graph: float initializers are parameters, forward interprets the nodes with loom ops.

    Float initializers of one or more dims become trainable parameters (those
    feeding BatchNormalization's mean and variance become buffers); 0-d and
    integer initializers are constants.

    Attributes
    ----------
    input_names, output_names : list of str
        The ONNX graph's inputs (initializers excluded) and outputs, in order.
    param_names : dict
        ONNX initializer name -> attribute name of its parameter or buffer.
    """

    def __init__(self, model: onnx.ModelProto) -> None:
        super().__init__()
        graph = model.graph
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
        self._nodes = list(graph.node)
        init_names = {t.name for t in graph.initializer}
        self.input_names = [i.name for i in graph.input if i.name not in init_names]
        self.output_names = [o.name for o in graph.output]
        self._input_types = {i.name: i.type.tensor_type.elem_type for i in graph.input}
        stats = {n.input[k] for n in self._nodes for k in _STAT_INPUTS.get(n.op_type, ()) if k < len(n.input)}
        used: set = set()
        self.param_names: dict[str, str] = {}
        self._static: dict[str, np.ndarray] = {}
        for t in graph.initializer:
            array = numpy_helper.to_array(t)
            if array.dtype.kind == "f" and array.ndim > 0:  # Scalars are constants of the graph, not weights.
                attr = _attr_name(t.name, used)
                value = loom.from_numpy(np.array(array))
                if t.name in stats:
                    self.register_buffer(attr, value)
                else:
                    self.register_parameter(attr, nn.Parameter(value))
                self.param_names[t.name] = attr
            else:
                self._static[t.name] = np.array(array)
        unknown = sorted({n.op_type for n in self._nodes if n.domain not in ("", "ai.onnx")
                          or n.op_type not in _OPS})
        if unknown:
            bad = next(n for n in self._nodes if n.op_type in unknown)
            raise LoomError(f"loom.onnx.load: no loom mapping for the ONNX operator(s) {unknown} (first: node "
                            f"{bad.name!r}); supported: {sorted(_OPS)}")

    def forward(self, *inputs):
        """Run the graph on one tensor (or NumPy array) per ONNX input; one tensor, or a tuple for several outputs."""
        if len(inputs) != len(self.input_names):
            raise LoomError(f"loom.onnx: the model takes {len(self.input_names)} inputs {self.input_names}, got "
                            f"{len(inputs)}")
        env: dict[str, Any] = dict(self._static)
        for name, attr in self.param_names.items():
            env[name] = getattr(self, attr)
        for name, value in zip(self.input_names, inputs):
            env[name] = value if isinstance(value, loom.Tensor) else loom.from_numpy(np.asarray(value))
        env[""] = None  # Omitted optional inputs.
        for node in self._nodes:
            ins = [env[i] if i in env else _missing(node, i) for i in node.input]
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            try:
                outs = _OPS[node.op_type](self, ins, attrs, node)
            except LoomError as e:
                if str(e).startswith("loom.onnx"):
                    raise
                raise LoomError(f"loom.onnx: node {node.name!r} ({node.op_type}) failed: {e}") from e
            if not isinstance(outs, (list, tuple)):
                outs = [outs]
            for name, value in zip(node.output, outs):
                if name:
                    env[name] = np.asarray(value) if isinstance(value, (np.generic, float, int)) else value
        outs = [_tensor(env[name]) for name in self.output_names]
        return outs[0] if len(outs) == 1 else tuple(outs)


def _missing(node, name):
    raise LoomError(f"loom.onnx: node {node.name!r} ({node.op_type}) reads {name!r}, which no earlier node "
                    "produces (the graph is not in topological order?)")


def load(path: Any) -> OnnxModule:
    """Read an ONNX model (path, bytes or ModelProto) into an OnnxModule."""
    if isinstance(path, onnx.ModelProto):
        model = path
    elif isinstance(path, (bytes, bytearray)):
        model = onnx.load_from_string(bytes(path))
    else:
        p = Path(path)
        if not p.is_file():
            raise LoomError(f"loom.onnx.load: no file at {str(p)!r}")
        model = onnx.load(str(p))
    return OnnxModule(model)


# ---------------------------------------------------------------- helpers for the rules

def _np_or_loom(np_fn: Callable, loom_fn: Callable):
    """Elementwise op: NumPy when every input is static, loom otherwise."""
    def rule(m, ins, a, node):
        if np_fn is not None and all(_is_static(v) for v in ins):
            return np.asarray(np_fn(*ins))
        return loom_fn(*[_tensor(v) for v in ins])
    return rule


def _int_div(x, y):
    q = np.abs(x) // np.abs(y)
    return (np.sign(x) * np.sign(y) * q).astype(np.result_type(x, y))


def _div(x, y):
    if x.dtype.is_floating_point:
        return x / y
    return loom.div(x, y, rounding_mode="trunc")


def _axes(ins, a, k=1):
    """Axes from the attribute (old opsets) or the k-th input (new ones)."""
    if "axes" in a:
        return [int(v) for v in a["axes"]]
    if len(ins) > k and ins[k] is not None:
        return [int(v) for v in np.asarray(_need_static(ins[k], "axes")).reshape(-1)]
    return None


def _need_static(v, what: str):
    if not _is_static(v):
        raise LoomError(f"loom.onnx: {what} must be known when the graph runs (a constant or computed from "
                        "shapes), got a computed tensor")
    return v


def _norm_axis(ax: int, ndim: int) -> int:
    return ax + ndim if ax < 0 else ax


def _static_shape(v) -> list[int]:
    return [int(s) for s in np.asarray(_need_static(v, "a shape")).reshape(-1)]


def _shape_of(v) -> tuple:
    return tuple(v.shape)


# ---------------------------------------------------------------- the rules

def _constant(m, ins, a, node):
    if "value" in a:
        return np.array(numpy_helper.to_array(a["value"]))
    for key, np_type in (("value_float", np.float32), ("value_int", np.int64), ("value_floats", np.float32),
                         ("value_ints", np.int64)):
        if key in a:
            return np.array(a[key], np_type)
    raise LoomError(f"loom.onnx: Constant node {node.name!r} has no value attribute loom reads")


def _gemm(m, ins, a, node):
    x, w = _tensor(ins[0]), _tensor(ins[1])
    if a.get("transA", 0):
        x = x.t()
    if a.get("transB", 0):
        w = w.t()
    y = x @ w
    alpha, beta = a.get("alpha", 1.0), a.get("beta", 1.0)
    if alpha != 1.0:
        y = y * alpha
    if len(ins) > 2 and ins[2] is not None:
        c = _tensor(ins[2])
        y = y + (c * beta if beta != 1.0 else c)
    return y


def _cast(m, ins, a, node):
    d = _dtype(a["to"], node)
    x = ins[0]
    if _is_static(x):
        return x.astype(d.np)
    return x.to(d)


def _reshape(m, ins, a, node):
    x, shape = ins[0], _static_shape(ins[1])
    src = _shape_of(x)
    if not a.get("allowzero", 0):
        shape = [src[k] if s == 0 else s for k, s in enumerate(shape)]
    if _is_static(x):
        return x.reshape(shape)
    return x.reshape(*shape)


def _flatten(m, ins, a, node):
    x = ins[0]
    shape = _shape_of(x)
    ax = _norm_axis(a.get("axis", 1), len(shape))
    new = (math.prod(shape[:ax]), math.prod(shape[ax:]))
    return x.reshape(new) if _is_static(x) else x.reshape(*new)


def _transpose(m, ins, a, node):
    x = ins[0]
    perm = a.get("perm") or list(range(len(_shape_of(x))))[::-1]
    return np.transpose(x, perm) if _is_static(x) else x.permute(*perm)


def _squeeze(m, ins, a, node):
    x = ins[0]
    shape = _shape_of(x)
    axes = _axes(ins, a)
    axes = [k for k, s in enumerate(shape) if s == 1] if axes is None else [_norm_axis(v, len(shape)) for v in axes]
    new = [s for k, s in enumerate(shape) if k not in axes]
    return x.reshape(new) if _is_static(x) else x.reshape(*new)


def _unsqueeze(m, ins, a, node):
    x = ins[0]
    shape = list(_shape_of(x))
    axes = sorted(_norm_axis(v, len(shape) + len(_axes(ins, a))) for v in _axes(ins, a))
    for ax in axes:
        shape.insert(ax, 1)
    return x.reshape(shape) if _is_static(x) else x.reshape(*shape)


def _concat(m, ins, a, node):
    vals = [v for v in ins if v is not None]
    if all(_is_static(v) for v in vals):
        return np.concatenate([np.atleast_1d(v) for v in vals], axis=a["axis"])
    return loom.cat([_tensor(v) for v in vals], dim=a["axis"])


def _shape(m, ins, a, node):
    shape = np.array(_shape_of(ins[0]), np.int64)
    start, end = a.get("start", 0), a.get("end", None)
    return shape[start:end]


def _gather(m, ins, a, node):
    x, idx = ins
    shape = _shape_of(x)
    ax = _norm_axis(a.get("axis", 0), len(shape))
    if _is_static(x) and _is_static(idx):
        return np.take(x, idx, axis=ax)
    if _is_static(idx):
        flat = np.where(idx < 0, idx + shape[ax], idx).astype(np.int64).reshape(-1)
        flat_t = loom.from_numpy(flat)
    else:
        idx_t = idx.to(loom.int64)
        flat_t = loom.where(idx_t < 0, idx_t + shape[ax], idx_t).reshape(-1)
    x = _tensor(x)
    if ax == 0 and len(shape) == 2:
        out = F.embedding(flat_t, x)
    else:
        out = x.index_select(ax, flat_t)
    return out.reshape(*shape[:ax], *_shape_of(idx), *shape[ax + 1:])


def _gather_elements(m, ins, a, node):
    x, idx = _tensor(ins[0]), _tensor(ins[1]).to(loom.int64)
    ax = _norm_axis(a.get("axis", 0), x.ndim)
    idx = loom.where(idx < 0, idx + x.shape[ax], idx)
    return x.gather(ax, idx)


def _slice(m, ins, a, node):
    x = ins[0]
    shape = _shape_of(x)
    if len(ins) > 1:
        starts, ends = _static_shape(ins[1]), _static_shape(ins[2])
        axes = _static_shape(ins[3]) if len(ins) > 3 and ins[3] is not None else list(range(len(starts)))
        steps = _static_shape(ins[4]) if len(ins) > 4 and ins[4] is not None else [1] * len(starts)
    else:
        starts, ends = list(a["starts"]), list(a["ends"])
        axes, steps = list(a.get("axes", range(len(starts)))), [1] * len(starts)
    if _is_static(x):
        index = [slice(None)] * len(shape)
        for s, e, ax, st in zip(starts, ends, axes, steps):
            index[_norm_axis(ax, len(shape))] = slice(s, e, st)
        return x[tuple(index)]
    out = x
    for s, e, ax, st in zip(starts, ends, axes, steps):
        ax = _norm_axis(ax, len(shape))
        n = shape[ax]
        s = max(min(s, n), -n - 1) if st > 0 else max(min(s, n - 1), -n - 1)
        e = max(min(e, n), -n - 1)
        lo, hi, step = slice(s, e, st).indices(n)
        if step < 0:
            out = out.flip(ax)
            lo, hi, step = n - 1 - lo, n - 1 - hi, -step
        index = [slice(None)] * len(shape)
        index[ax] = slice(lo, max(hi, lo), step)
        out = out[tuple(index)]
    return out


def _split(m, ins, a, node):
    x = _tensor(ins[0])
    ax = _norm_axis(a.get("axis", 0), x.ndim)
    if len(ins) > 1 and ins[1] is not None:
        sizes = _static_shape(ins[1])
    elif "split" in a:
        sizes = list(a["split"])
    else:
        n = len(node.output)
        size = -(-x.shape[ax] // n)
        sizes = [min(size, x.shape[ax] - k * size) for k in range(n)]
    return list(x.split(sizes, dim=ax))


def _expand(m, ins, a, node):
    x, shape = ins[0], _static_shape(ins[1])
    target = np.broadcast_shapes(_shape_of(x), tuple(shape))
    if _is_static(x):
        return np.broadcast_to(x, target).copy()
    return loom.broadcast_to(x, target)


def _tile(m, ins, a, node):
    reps = _static_shape(ins[1])
    if _is_static(ins[0]):
        return np.tile(ins[0], reps)
    return ins[0].tile(*reps)


def _constant_of_shape(m, ins, a, node):
    value = numpy_helper.to_array(a["value"]) if "value" in a else np.zeros(1, np.float32)
    return np.full(_static_shape(ins[0]), value.reshape(-1)[0], dtype=value.dtype)


def _range(m, ins, a, node):
    start, limit, delta = (np.asarray(_need_static(v, "Range bounds")) for v in ins)
    return np.arange(start, limit, delta, dtype=start.dtype)


def _where(m, ins, a, node):
    c, x, y = ins
    if all(_is_static(v) for v in ins):
        return np.where(c, x, y)
    return loom.where(_tensor(c), _tensor(x), _tensor(y))


def _softmax(fn):
    def rule(m, ins, a, node):
        x = _tensor(ins[0])
        ax = a.get("axis", -1 if m.opset >= 13 else 1)
        if m.opset < 13:  # Old semantics: flatten from `axis`, then softmax over the flattened tail.
            shape = x.shape
            ax = _norm_axis(ax, x.ndim)
            flat = x.reshape(math.prod(shape[:ax]), -1)
            return fn(flat, -1).reshape(*shape)
        return fn(x, ax)
    return rule


def _reduce(name: str):
    def rule(m, ins, a, node):
        x = _tensor(ins[0])
        axes = _axes(ins, a)
        if axes is None:
            if a.get("noop_with_empty_axes", 0):
                return x
            axes = list(range(x.ndim))
        axes = tuple(_norm_axis(v, x.ndim) for v in axes)
        keep = bool(a.get("keepdims", 1))
        if name == "mean":
            return x.mean(dim=axes, keepdim=keep)
        if name == "sum":
            return x.sum(dim=axes, keepdim=keep)
        if name == "prod":
            out = x
            for ax in sorted(axes, reverse=True):
                out = out.prod(dim=ax, keepdim=keep)
            return out
        return (x.amax if name == "max" else x.amin)(dim=axes, keepdim=keep)
    return rule


def _conv_pads(a, x_shape, w_shape, ndim) -> list[int]:
    """ONNX pads as [begin..., end...] after auto_pad."""
    auto = a.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    strides = list(a.get("strides", [1] * ndim))
    dil = list(a.get("dilations", [1] * ndim))
    kernel = list(a.get("kernel_shape", w_shape[-ndim:]))
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        begin, end = [], []
        for size, k, s, d in zip(x_shape[-ndim:], kernel, strides, dil):
            out = -(-size // s)
            total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
            small, big = total // 2, total - total // 2
            begin.append(big if auto == "SAME_LOWER" else small)
            end.append(small if auto == "SAME_LOWER" else big)
        return begin + end
    if auto == "VALID":
        return [0] * (2 * ndim)
    return list(a.get("pads", [0] * (2 * ndim)))


def _padded(x, pads: list[int], ndim: int, value=0.0):
    """`x` padded explicitly when the pads are asymmetric; returns (x, symmetric padding)."""
    begin, end = pads[:ndim], pads[ndim:]
    if begin == end:
        return x, begin
    flat = []
    for b, e in zip(reversed(begin), reversed(end)):
        flat += [b, e]
    return F.pad(x, flat, value=value), [0] * ndim


def _conv(m, ins, a, node):
    x, w = _tensor(ins[0]), _tensor(ins[1])
    b = _tensor(ins[2]) if len(ins) > 2 and ins[2] is not None else None
    ndim = w.ndim - 2
    fn = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}.get(ndim)
    if fn is None:
        raise LoomError(f"loom.onnx: Conv node {node.name!r} has {ndim} spatial dims; loom has conv1d/2d/3d")
    x, pad = _padded(x, _conv_pads(a, x.shape, w.shape, ndim), ndim)
    return fn(x, w, b, stride=tuple(a.get("strides", [1] * ndim)), padding=tuple(pad),
              dilation=tuple(a.get("dilations", [1] * ndim)), groups=a.get("group", 1))


def _pool(kind: str):
    def rule(m, ins, a, node):
        x = _tensor(ins[0])
        ndim = x.ndim - 2
        kernel = tuple(a["kernel_shape"])
        strides = tuple(a.get("strides", [1] * ndim))
        pads = _conv_pads(a, x.shape, (1, 1, *kernel), ndim)
        ceil = bool(a.get("ceil_mode", 0))
        if kind == "max":
            fn = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[ndim]
            x, pad = _padded(x, pads, ndim, value=-math.inf)
            return fn(x, kernel, strides, tuple(pad), dilation=tuple(a.get("dilations", [1] * ndim)), ceil_mode=ceil)
        fn = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}[ndim]
        include = bool(a.get("count_include_pad", 0))
        if pads[:ndim] != pads[ndim:] and not include:
            raise LoomError(f"loom.onnx: AveragePool node {node.name!r} has asymmetric pads {pads} without "
                            "count_include_pad; loom's avg_pool takes symmetric padding")
        x, pad = _padded(x, pads, ndim)
        return fn(x, kernel, strides, tuple(pad), ceil_mode=ceil, count_include_pad=include)
    return rule


def _global_pool(kind: str):
    def rule(m, ins, a, node):
        x = _tensor(ins[0])
        axes = tuple(range(2, x.ndim))
        return x.mean(dim=axes, keepdim=True) if kind == "avg" else x.amax(dim=axes, keepdim=True)
    return rule


def _batch_norm(m, ins, a, node):
    x, scale, bias, mean, var = (_tensor(v) for v in ins[:5])
    if a.get("training_mode", 0):
        raise LoomError(f"loom.onnx: BatchNormalization node {node.name!r} is in training mode; export the "
                        "model in eval mode")
    return F.batch_norm(x, mean, var, scale, bias, training=False, eps=a.get("epsilon", 1e-5))


def _layer_norm(m, ins, a, node):
    x = _tensor(ins[0])
    ax = _norm_axis(a.get("axis", -1), x.ndim)
    scale = _tensor(ins[1])
    bias = _tensor(ins[2]) if len(ins) > 2 and ins[2] is not None else None
    return F.layer_norm(x, tuple(x.shape[ax:]), scale, bias, eps=a.get("epsilon", 1e-5))


def _dropout(m, ins, a, node):
    x = ins[0]
    return [x, np.ones(_shape_of(x), bool)]


def _clip(m, ins, a, node):
    x = _tensor(ins[0])
    lo = ins[1] if len(ins) > 1 else a.get("min")
    hi = ins[2] if len(ins) > 2 else a.get("max")
    lo = None if lo is None else float(np.asarray(_need_static(np.asarray(lo), "Clip bounds")))
    hi = None if hi is None else float(np.asarray(_need_static(np.asarray(hi), "Clip bounds")))
    return x.clamp(lo, hi)


def _variadic(np_fn, loom_fn):
    def rule(m, ins, a, node):
        out = ins[0]
        for v in ins[1:]:
            out = np_fn(out, v) if _is_static(out) and _is_static(v) else loom_fn(_tensor(out), _tensor(v))
        return out
    return rule


def _pow(m, ins, a, node):
    x, y = ins
    if _is_static(x) and _is_static(y):
        return np.power(x, y).astype(x.dtype)
    if _is_static(y) and y.size == 1:
        exp = y.reshape(()).item()
        return _tensor(x) ** exp
    return (_tensor(x) ** _tensor(y)).to(_tensor(x).dtype)


def _unary(np_fn, loom_fn):
    return _np_or_loom(np_fn, loom_fn)


def _lstm(m, ins, a, node):
    """ONNX LSTM (gates i, o, f, c; layout 0: X is (seq, batch, input)), unrolled over the sequence."""
    x, w, r = _tensor(ins[0]), _tensor(ins[1]), _tensor(ins[2])
    b = _tensor(ins[3]) if len(ins) > 3 and ins[3] is not None else None
    if len(ins) > 4 and ins[4] is not None:
        lens = np.asarray(_need_static(ins[4], "LSTM sequence_lens"))
        if not (lens == x.shape[0]).all():
            raise LoomError(f"loom.onnx: LSTM node {node.name!r}: sequences of different lengths are not supported")
    if a.get("layout", 0) or "activations" in a or a.get("input_forget", 0) or a.get("clip") is not None:
        raise LoomError(f"loom.onnx: LSTM node {node.name!r} uses layout/activations/clip/input_forget, which "
                        "loom's importer does not support")
    direction = a.get("direction", b"forward")
    direction = direction.decode() if isinstance(direction, bytes) else direction
    dirs = ["forward", "reverse"] if direction == "bidirectional" else [direction]
    hidden = a.get("hidden_size", r.shape[-1])
    seq, batch = x.shape[0], x.shape[1]
    h0 = _tensor(ins[5]) if len(ins) > 5 and ins[5] is not None else None
    c0 = _tensor(ins[6]) if len(ins) > 6 and ins[6] is not None else None
    ys, hs, cs = [], [], []
    for k, d in enumerate(dirs):
        wk, rk = w[k], r[k]
        bias = (b[k, :4 * hidden] + b[k, 4 * hidden:]) if b is not None else None
        h = h0[k] if h0 is not None else loom.zeros(batch, hidden, dtype=x.dtype)
        c = c0[k] if c0 is not None else loom.zeros(batch, hidden, dtype=x.dtype)
        xw = x @ wk.t()
        if bias is not None:
            xw = xw + bias
        steps = range(seq - 1, -1, -1) if d == "reverse" else range(seq)
        out = [None] * seq
        for t in steps:
            gates = xw[t] + h @ rk.t()
            i, o, f, g = gates.split(hidden, dim=-1)
            c = f.sigmoid() * c + i.sigmoid() * g.tanh()
            h = o.sigmoid() * c.tanh()
            out[t] = h
        ys.append(loom.stack(out))
        hs.append(h)
        cs.append(c)
    return [loom.stack(ys, dim=1), loom.stack(hs), loom.stack(cs)]


def _trilu(m, ins, a, node):
    k = int(np.asarray(_need_static(ins[1], "Trilu k"))) if len(ins) > 1 and ins[1] is not None else 0
    upper = bool(a.get("upper", 1))
    if _is_static(ins[0]):
        return (np.triu if upper else np.tril)(ins[0], k)
    return (loom.triu if upper else loom.tril)(ins[0], k)


def _mod(m, ins, a, node):
    if a.get("fmod", 0):
        return _np_or_loom(np.fmod, loom.fmod)(m, ins, a, node)
    return _np_or_loom(np.mod, loom.remainder)(m, ins, a, node)


def _pad(m, ins, a, node):
    x = ins[0]
    ndim = len(_shape_of(x))
    pads = _static_shape(ins[1]) if len(ins) > 1 else list(a["pads"])
    value = ins[2] if len(ins) > 2 and ins[2] is not None else np.array(a.get("value", 0.0))
    value = float(np.asarray(_need_static(value, "Pad value")).reshape(-1)[0])
    axes = _static_shape(ins[3]) if len(ins) > 3 and ins[3] is not None else list(range(ndim))
    axes = [_norm_axis(v, ndim) for v in axes]
    mode = a.get("mode", b"constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if min(pads, default=0) < 0 or mode not in ("constant", "reflect", "edge"):
        raise LoomError(f"loom.onnx: Pad node {node.name!r}: negative pads or mode {mode!r} are not supported")
    k = len(axes)
    full = [(0, 0)] * ndim
    for j, ax in enumerate(axes):
        full[ax] = (pads[j], pads[k + j])
    if _is_static(x):
        return np.pad(x, full, mode=mode, **({"constant_values": value} if mode == "constant" else {}))
    flat = []
    for lo, hi in reversed(full):
        flat += [lo, hi]
    mode = {"edge": "replicate"}.get(mode, mode)
    return F.pad(x, flat, mode=mode, value=value if mode == "constant" else None)


def _scatter_elements(m, ins, a, node):
    base, idx, src = _tensor(ins[0]), _tensor(ins[1]).to(loom.int64), _tensor(ins[2])
    ax = _norm_axis(a.get("axis", 0), base.ndim)
    idx = loom.where(idx < 0, idx + base.shape[ax], idx)
    red = a.get("reduction", b"none")
    red = red.decode() if isinstance(red, bytes) else red
    if red == "add":
        return base.scatter_add(ax, idx, src)
    if red == "none":
        return base.scatter(ax, idx, src)
    raise LoomError(f"loom.onnx: ScatterElements node {node.name!r}: reduction {red!r} is not supported")


def _topk(m, ins, a, node):
    x = _tensor(ins[0])
    k = int(np.asarray(_need_static(ins[1], "TopK k")).reshape(-1)[0])
    values, indices = loom.topk(x, k, dim=a.get("axis", -1), largest=bool(a.get("largest", 1)),
                                sorted=bool(a.get("sorted", 1)))
    return [values, indices]


def _bool_fn(np_fn, loom_fn):
    return _np_or_loom(np_fn, loom_fn)


_OPS: dict[str, Callable] = {
    "Identity": lambda m, ins, a, node: ins[0],
    "Dropout": _dropout,
    "Constant": _constant,
    "Gemm": _gemm,
    "MatMul": _np_or_loom(np.matmul, loom.matmul),
    "Add": _np_or_loom(np.add, lambda x, y: x + y),
    "Sub": _np_or_loom(np.subtract, lambda x, y: x - y),
    "Mul": _np_or_loom(np.multiply, lambda x, y: x * y),
    "Div": _np_or_loom(lambda x, y: x / y if x.dtype.kind == "f" else _int_div(x, y), _div),
    "Pow": _pow,
    "Pad": _pad,
    "ScatterElements": _scatter_elements,
    "TopK": _topk,
    "Sign": _unary(np.sign, loom.sign),
    "IsNaN": _unary(np.isnan, loom.isnan),
    "Round": _unary(np.round, loom.round),
    "Mod": _mod,
    "Trilu": _trilu,
    "Sqrt": _unary(np.sqrt, loom.sqrt),
    "Reciprocal": _unary(np.reciprocal, loom.reciprocal),
    "Exp": _unary(np.exp, loom.exp),
    "Log": _unary(np.log, loom.log),
    "Neg": _unary(np.negative, loom.neg),
    "Abs": _unary(np.abs, loom.abs),
    "Floor": _unary(np.floor, loom.floor),
    "Ceil": _unary(np.ceil, loom.ceil),
    "Sin": _unary(np.sin, loom.sin),
    "Cos": _unary(np.cos, loom.cos),
    "Erf": _unary(None, loom.erf),
    "Tanh": _unary(np.tanh, loom.tanh),
    "Sigmoid": _unary(None, loom.sigmoid),
    "Relu": _unary(lambda x: np.maximum(x, 0).astype(x.dtype), F.relu),
    "LeakyRelu": lambda m, ins, a, node: F.leaky_relu(_tensor(ins[0]), a.get("alpha", 0.01)),
    "Elu": lambda m, ins, a, node: F.elu(_tensor(ins[0]), a.get("alpha", 1.0)),
    "Softplus": lambda m, ins, a, node: F.softplus(_tensor(ins[0])),
    "HardSigmoid": lambda m, ins, a, node: (_tensor(ins[0]) * a.get("alpha", 0.2) + a.get("beta", 0.5)).clamp(0, 1),
    "Gelu": lambda m, ins, a, node: F.gelu(_tensor(ins[0]), approximate=(a.get("approximate", b"none").decode()
                                                                         if isinstance(a.get("approximate"), bytes)
                                                                         else a.get("approximate", "none"))),
    "Not": _bool_fn(np.logical_not, loom.logical_not),
    "And": _bool_fn(np.logical_and, loom.logical_and),
    "Or": _bool_fn(np.logical_or, loom.logical_or),
    "Xor": _bool_fn(np.logical_xor, loom.logical_xor),
    "Equal": _np_or_loom(np.equal, loom.eq),
    "Less": _np_or_loom(np.less, loom.lt),
    "LessOrEqual": _np_or_loom(np.less_equal, loom.le),
    "Greater": _np_or_loom(np.greater, loom.gt),
    "GreaterOrEqual": _np_or_loom(np.greater_equal, loom.ge),
    "Max": _variadic(np.maximum, loom.maximum),
    "Min": _variadic(np.minimum, loom.minimum),
    "Sum": _variadic(np.add, lambda x, y: x + y),
    "Clip": _clip,
    "Where": _where,
    "Cast": _cast,
    "Reshape": _reshape,
    "Flatten": _flatten,
    "Transpose": _transpose,
    "Squeeze": _squeeze,
    "Unsqueeze": _unsqueeze,
    "Concat": _concat,
    "Split": _split,
    "Slice": _slice,
    "Shape": _shape,
    "Size": lambda m, ins, a, node: np.array(math.prod(_shape_of(ins[0])), np.int64),
    "Gather": _gather,
    "GatherElements": _gather_elements,
    "Expand": _expand,
    "Tile": _tile,
    "ConstantOfShape": _constant_of_shape,
    "Range": _range,
    "Softmax": _softmax(lambda x, ax: F.softmax(x, dim=ax)),
    "LogSoftmax": _softmax(lambda x, ax: F.log_softmax(x, dim=ax)),
    "ReduceMean": _reduce("mean"),
    "ReduceSum": _reduce("sum"),
    "ReduceMax": _reduce("max"),
    "ReduceMin": _reduce("min"),
    "ReduceProd": _reduce("prod"),
    "Conv": _conv,
    "MaxPool": _pool("max"),
    "AveragePool": _pool("avg"),
    "GlobalAveragePool": _global_pool("avg"),
    "GlobalMaxPool": _global_pool("max"),
    "BatchNormalization": _batch_norm,
    "LayerNormalization": _layer_norm,
    "LSTM": _lstm,
}

SUPPORTED_OPS = frozenset(_OPS)
