"""ONNX in and out: export loom models to ONNX, import ONNX models as loom modules.

- `export(model_or_fn, example_args, path, ...)` traces a module or function
  into loom's graph and writes it as an ONNX model (opset 13-21, IR version
  10, so onnxruntime reads it), weights as initializers, optionally with
  dynamic axes such as the batch.
- `load(path)` reads an ONNX model (e.g. one written by ``torch.onnx.export``)
  into a `loom.nn.Module` whose weights are trainable parameters.

The ``onnx`` package (and ``onnxruntime`` to run exported models) is needed
only when these functions are called: ``pip install loom-dl[onnx]``. Importing
``loom`` or ``loom.onnx`` imports neither. The ``"onnxruntime"`` compiler
plugin (``loom.function(fn, backend="onnxruntime")``) uses the same lowering.
"""
from __future__ import annotations

from typing import Any, Sequence


def _need_onnx(what: str) -> None:
    try:
        import onnx  # noqa: F401
    except ImportError as e:
        from loom.errors import LoomError
        raise LoomError(f"loom.onnx.{what}: needs the 'onnx' package ({e}); install it with "
                        "pip install 'loom-dl[onnx]' (or pip install onnx onnxruntime)") from None


def export(model_or_fn: Any, example_args: Any, path: Any = None, input_names: Sequence[str] | None = None,
           output_names: Sequence[str] | None = None, dynamic_axes: dict | None = None, opset: int = 17,
           check: bool = True, native_conv: bool = True):
    """Trace a loom module or function and write it as an ONNX model.

    The model is traced (with gradients off) into loom's graph, simplified
    (pruning, CSE, algebraic simplification) and every primitive is mapped to
    ONNX operators; parameters and buffers the model reads become
    initializers named after them. Sizes that follow a dynamic axis are
    computed from the input's run-time shape, so the model runs at any size
    of that axis: the model is traced a few more times at shifted sizes, and
    every size that changes is fitted as a multilinear polynomial of the
    dynamic axes (``batch``, ``batch * time``). As ``torch.onnx.export``
    does, a module is traced in eval mode (dropout off, BatchNorm running
    statistics) and its modes are restored afterwards; a function that
    draws random numbers cannot be exported.

    Parameters
    ----------
    model_or_fn : loom.nn.Module or callable
        Called as ``model_or_fn(*example_args)``; returns a tensor or a
        tuple/list/dict of tensors.
    example_args : Tensor or tuple
        Example inputs; nested tuples/lists of tensors are flattened into
        ONNX inputs, other values are fixed in the trace.
    path : str or path-like, optional
        Where to save the model (not saved when None).
    input_names, output_names : list of str, optional
        ONNX names of the flattened tensor inputs and of the outputs. Inputs
        default to the parameter names of ``forward`` (or ``input0``...),
        outputs to ``output`` (or ``output0``...).
    dynamic_axes : dict, optional
        ``{input_name: {axis: symbol}}`` (or ``{input_name: [axes]}``), e.g.
        ``{"x": {0: "batch"}}``. Inputs sharing a symbol share the size.
    opset : int
        ONNX opset, 13 to 21 (default 17).
    check : bool
        Run ``onnx.checker.check_model`` on the result (default True).
    native_conv : bool
        Export each batched ``conv1d/2d/3d`` as one ONNX ``Conv`` (default)
        rather than as loom's decomposition (im2col movement ops and a
        ``MatMul``), which computes the same but runs slower in ONNX Runtime.

    Returns
    -------
    onnx.ModelProto

    Raises
    ------
    loom.LoomError
        For a primitive with no ONNX mapping (the message names the op and
        node), a model whose graph structure changes with a dynamic axis, or
        bad names and axes.

    Examples
    --------
    >>> import loom, loom.nn as nn
    >>> model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).eval()
    >>> m = loom.onnx.export(model, loom.randn(3, 4), input_names=["x"],
    ...                      dynamic_axes={"x": {0: "batch"}})
    >>> m.graph.input[0].type.tensor_type.shape.dim[0].dim_param
    'batch'
    """
    _need_onnx("export")
    from loom.onnx._export import export as _export
    return _export(model_or_fn, example_args, path, input_names, output_names, dynamic_axes, opset, check,
                   native_conv)


def load(path: Any):
    """Import an ONNX model as a loom module whose forward runs it with loom ops.

    Float initializers become trainable `loom.nn.Parameter`s (so the model
    can be fine-tuned); integer initializers, ``Shape`` and the shape
    arithmetic after it are evaluated at trace time from loom's static
    shapes. Covers the operators PyTorch's exporter emits for MLPs, CNNs,
    ResNets, transformers and LSTMs (see ``docs/onnx.md`` for the list); an
    unsupported operator raises a `loom.LoomError` naming it and its node.

    Parameters
    ----------
    path : str, path-like, bytes or onnx.ModelProto
        The model file (or its bytes, or the loaded proto).

    Returns
    -------
    loom.onnx.OnnxModule
        ``module(*inputs)`` takes one tensor per graph input (initializers
        excluded) and returns one tensor, or a tuple for several outputs.

    Examples
    --------
    >>> import numpy as np, loom, loom.nn as nn
    >>> model = nn.Sequential(nn.Linear(4, 3), nn.Tanh()).eval()
    >>> proto = loom.onnx.export(model, loom.randn(2, 4))
    >>> imported = loom.onnx.load(proto)
    >>> x = loom.randn(2, 4)
    >>> np.allclose(imported(x).detach().numpy(), model(x).detach().numpy(), atol=1e-6)
    True
    """
    _need_onnx("load")
    from loom.onnx._import import load as _load
    return _load(path)


def __getattr__(name: str):
    if name == "OnnxModule":
        _need_onnx("OnnxModule")
        from loom.onnx._import import OnnxModule
        return OnnxModule
    raise AttributeError(f"module 'loom.onnx' has no attribute {name!r}")


__all__ = ["export", "load"]
