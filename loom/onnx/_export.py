"""`loom.onnx.export`: a traced loom model written as an ONNX file."""
from __future__ import annotations

import inspect
from typing import Any, Callable, Sequence

import onnx
from onnx import helper

from loom.errors import LoomError
from loom.onnx._lower import ONNX_DTYPE, Lowering, tensor_proto
from loom.onnx._trace import Dim, external_names, trace

IR_VERSION = 10  # onnx 1.23 writes 14 by default; onnxruntime reads at most 10-11 with opset <= 21.
MIN_OPSET, MAX_OPSET = 13, 21


def _default_input_names(fn: Callable, args: Sequence, n_leaves: int) -> list[str]:
    from loom.tensor import Tensor

    if n_leaves == len(args) and all(isinstance(a, Tensor) for a in args):
        target = getattr(fn, "forward", fn)
        try:
            params = [p.name for p in inspect.signature(target).parameters.values()
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        except (TypeError, ValueError):
            params = []
        if len(params) >= n_leaves:
            return params[:n_leaves]
    return [f"input{k}" for k in range(n_leaves)] if n_leaves > 1 else ["input"]


def _dynamic_spec(dynamic_axes, input_names: list[str], output_names: list[str] | None) -> dict[int, dict[int, str]]:
    """{input index: {axis: symbol}} from torch-style dynamic_axes ({name: {axis: symbol}} or {name: [axes]})."""
    out: dict[int, dict[int, str]] = {}
    for name, axes in (dynamic_axes or {}).items():
        if output_names is not None and name in output_names and name not in input_names:
            continue  # Output sizes follow from the inputs'.
        if name not in input_names:
            raise LoomError(f"loom.onnx.export: dynamic_axes names {name!r}, which is not an input; the inputs "
                            f"are {input_names}")
        if isinstance(axes, dict):
            spec = {int(a): str(s) for a, s in axes.items()}
        elif isinstance(axes, (list, tuple)):
            spec = {int(a): f"{name}_dim{int(a)}" for a in axes}
        else:
            raise LoomError(f"loom.onnx.export: dynamic_axes[{name!r}] must be a dict {{axis: name}} or a list "
                            f"of axes, got {axes!r}")
        out[input_names.index(name)] = spec
    return out


def _value_info(name: str, dtype, shape) -> onnx.ValueInfoProto:
    dims = []
    for d in shape:
        if isinstance(d, Dim):
            dims.append(d.symbol or str(d))
        else:
            dims.append(int(d))
    return helper.make_tensor_value_info(name, ONNX_DTYPE[dtype], dims)


def export(model_or_fn: Any, example_args: Any, path: Any = None, input_names: Sequence[str] | None = None,
           output_names: Sequence[str] | None = None, dynamic_axes: dict | None = None,
           opset: int = 17, check: bool = True, native_conv: bool = True) -> onnx.ModelProto:
    """Trace a loom module or function and write it as an ONNX model; see `loom.onnx.export`."""
    from loom.tensor import Tensor

    if not callable(model_or_fn):
        raise LoomError(f"loom.onnx.export: expected a loom Module or a function, got {type(model_or_fn).__name__}")
    if not isinstance(opset, int) or not MIN_OPSET <= opset <= MAX_OPSET:
        raise LoomError(f"loom.onnx.export: opset must be an int in {MIN_OPSET}..{MAX_OPSET}, got {opset!r}")
    args = (example_args,) if isinstance(example_args, Tensor) else tuple(example_args)
    from loom.onnx._trace import _flatten_args
    leaves, _ = _flatten_args(args)
    if not leaves:
        raise LoomError("loom.onnx.export: example_args hold no tensor")
    names = list(input_names) if input_names is not None else _default_input_names(model_or_fn, args, len(leaves))
    if len(names) != len(leaves) or len(set(names)) != len(names):
        raise LoomError(f"loom.onnx.export: input_names must be {len(leaves)} distinct names, one per tensor in "
                        f"example_args, got {names}")
    dynamic = _dynamic_spec(dynamic_axes, names, list(output_names) if output_names else None)
    for k, axes in dynamic.items():
        for axis in axes:
            if not 0 <= axis < leaves[k].ndim:
                raise LoomError(f"loom.onnx.export: dynamic axis {axis} of input {names[k]!r} is out of range for "
                                f"its shape {list(leaves[k].shape)}")
    # As torch.onnx.export: a module is exported in inference mode (dropout off, BatchNorm statistics).
    training = [m for m in model_or_fn.modules() if m.training] if hasattr(model_or_fn, "modules") else []
    for m in training:
        m.training = False
    try:
        traced = trace(model_or_fn, args, dynamic, native_conv)
    finally:
        for m in training:
            m.training = True
    g = traced.graph
    placeholders = list(g.inputs)
    n_ext = len(traced.externals)
    if len(placeholders) != traced.n_args + n_ext:
        extra = [p.name for p in placeholders[traced.n_args + n_ext:]]
        raise LoomError(f"loom.onnx.export: the model draws random numbers ({extra}), e.g. dropout with "
                        "training=True; ONNX export takes inference graphs")
    symbols = {s: (names[k], axis) for s, (k, axis) in traced.symbols.items()}
    lw = Lowering(opset, symbols, traced.sym_attrs, traced.sym_shapes)
    feeds = {p: names[k] for k, p in enumerate(placeholders[:traced.n_args])}
    ext_names = external_names(model_or_fn, traced.externals)
    ext_names = [n if n not in names else n + "_weight" for n in ext_names]
    for p, t, name in zip(placeholders[traced.n_args:], traced.externals, ext_names):
        lw.initializers.append(tensor_proto(t._array(), p.dtype, name))
        feeds[p] = name
    outs = lw.graph(g, feeds)
    if output_names is None:
        output_names = ["output"] if len(outs) == 1 else [f"output{k}" for k in range(len(outs))]
    output_names = list(output_names)
    if len(output_names) != len(outs):
        raise LoomError(f"loom.onnx.export: the model returns {len(outs)} tensors but output_names has "
                        f"{len(output_names)} names")
    for value, name in zip(outs, output_names):
        lw.nodes.append(helper.make_node("Identity", [value], [name], name=f"output_{name}"))
    inputs = [_value_info(names[k], p.dtype, traced.sym_shapes[id(p)]) for k, p in
              enumerate(placeholders[:traced.n_args])]
    outputs = [_value_info(name, o.dtype, traced.sym_shapes[id(o)]) for name, o in zip(output_names, g.outputs)]
    graph = helper.make_graph(lw.nodes, "loom", inputs, outputs, lw.initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="loom")
    model.ir_version = IR_VERSION
    if check:
        onnx.checker.check_model(model)
    if path is not None:
        onnx.save(model, str(path))
    return model
