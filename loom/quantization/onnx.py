"""Export a `QuantizedModel` as QDQ ONNX: QuantizeLinear/DequantizeLinear pairs around float Conv/Gemm.

The QDQ form is ONNX's standard way to carry a quantised model: each activation goes through a
QuantizeLinear (uint8, the scale and zero point loom calibrated) and a DequantizeLinear; each weight is an
int8 initializer with a per-output-channel DequantizeLinear (axis 0); each bias an int32 initializer at scale
``input_scale * weight_scale``. onnxruntime recognises the pattern and runs its own int8 kernels (QLinearConv,
QGemm); any other runtime can run it in float. The last layer's output stays float, as in loom's model.
Needs the ``onnx`` package (``pip install 'loom-dl[onnx]'``).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from loom.errors import LoomTypeError, LoomValueError

OPSET = 17
IR_VERSION = 10  # onnxruntime reads at most 10-11; onnx 1.23 writes 14 by default.


def export_qdq(qmodel: Any, input_shape: tuple[int, ...], path: Any = None, dynamic_batch: bool = True,
               input_name: str = "input", output_name: str = "output"):
    """Write `qmodel` (from `loom.quantization.convert`) as a QDQ ONNX model; returns the ModelProto.

    Parameters
    ----------
    qmodel : QuantizedModel
    input_shape : tuple of int
        The float input's shape (NCHW for images); the batch axis is symbolic with `dynamic_batch`.
    path : str or path-like, optional
        Where to save it (not saved when None).

    Examples
    --------
    >>> import loom, loom.nn as nn
    >>> from loom.quantization import quantize
    >>> qm = quantize(nn.Sequential(nn.Linear(4, 3)), [loom.randn(8, 4)])
    >>> [n.op_type for n in export_qdq(qm, (1, 4)).graph.node]
    ['QuantizeLinear', 'DequantizeLinear', 'DequantizeLinear', 'DequantizeLinear', 'Gemm', 'Identity']
    """
    from loom.onnx import _need_onnx
    _need_onnx("export_qdq")
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from .modules import (QuantizedConv2d, QuantizedFlatten, QuantizedLinear, QuantizedMaxPool2d, QuantizedModel,
                          QuantizedReLU, QuantStub)
    if not isinstance(qmodel, QuantizedModel):
        raise LoomTypeError(f"loom.quantization.export_qdq: expected a QuantizedModel, got {type(qmodel).__name__}")
    nodes, inits = [], []
    names: dict[str, int] = {}

    def name(base: str) -> str:
        names[base] = names.get(base, -1) + 1
        return f"{base}_{names[base]}"

    def const(base: str, value: np.ndarray) -> str:
        n = name(base)
        inits.append(numpy_helper.from_array(np.asarray(value), n))
        return n

    def qdq(x: str, qparams: tuple[float, int]) -> str:
        s = const("scale", np.array(qparams[0], np.float32))
        z = const("zero_point", np.array(qparams[1], np.uint8))
        q, dq = name("q"), name("dq")
        nodes.append(helper.make_node("QuantizeLinear", [x, s, z], [q]))
        nodes.append(helper.make_node("DequantizeLinear", [q, s, z], [dq]))
        return dq

    def dequant_const(base: str, value: np.ndarray, scale: np.ndarray, zp: np.ndarray) -> str:
        out = name(base + "_dq")
        nodes.append(helper.make_node("DequantizeLinear", [const(base, value), const(base + "_scale", scale),
                                                           const(base + "_zp", zp)], [out], axis=0))
        return out

    x = input_name
    for step in qmodel.steps:
        if isinstance(step, QuantStub):
            x = qdq(x, (step.scale, step.zero_point))
        elif isinstance(step, (QuantizedConv2d, QuantizedLinear)):
            w = dequant_const("weight", step.weight_int8, step.weight_scale, np.zeros(len(step.weight_scale), np.int8))
            acc_scale = (np.float32(step.in_qparams[0]) * step.weight_scale).astype(np.float32)
            b = dequant_const("bias", step.bias_int32, acc_scale, np.zeros(len(acc_scale), np.int32))
            y = name("conv" if isinstance(step, QuantizedConv2d) else "gemm")
            if isinstance(step, QuantizedConv2d):
                p = step.padding
                nodes.append(helper.make_node("Conv", [x, w, b], [y], kernel_shape=list(step.kernel_size),
                                              strides=list(step.stride), dilations=list(step.dilation),
                                              pads=[p[0], p[1], p[0], p[1]]))
            else:
                nodes.append(helper.make_node("Gemm", [x, w, b], [y], transB=1))
            if step.relu:
                r = name("relu")
                nodes.append(helper.make_node("Relu", [y], [r]))
                y = r
            x = qdq(y, step.out_qparams) if step.out_qparams is not None else y
        elif isinstance(step, QuantizedMaxPool2d):
            y = name("maxpool")
            p = step.padding
            nodes.append(helper.make_node("MaxPool", [x], [y], kernel_shape=list(step.kernel_size),
                                          strides=list(step.stride), dilations=list(step.dilation),
                                          pads=[p[0], p[1], p[0], p[1]]))
            x = y
        elif isinstance(step, QuantizedFlatten):
            if step.start_dim != 1 or step.end_dim != -1:
                raise LoomValueError(f"loom.quantization.export_qdq: Flatten(start_dim={step.start_dim}, "
                                     f"end_dim={step.end_dim}) is not exported; only Flatten(1, -1)")
            y = name("flatten")
            nodes.append(helper.make_node("Flatten", [x], [y], axis=1))
            x = y
        elif isinstance(step, QuantizedReLU):
            y = name("relu")
            nodes.append(helper.make_node("Relu", [x], [y]))
            x = y
        else:
            raise LoomTypeError(f"loom.quantization.export_qdq: no ONNX form for {type(step).__name__}")
    nodes.append(helper.make_node("Identity", [x], [output_name]))
    batch = "batch" if dynamic_batch else input_shape[0]
    out_shape = qmodel.run_numpy(np.zeros(input_shape, np.float32)).shape
    graph = helper.make_graph(nodes, "loom_qdq", [
        helper.make_tensor_value_info(input_name, TensorProto.FLOAT, [batch, *input_shape[1:]])], [
        helper.make_tensor_value_info(output_name, TensorProto.FLOAT, [batch, *out_shape[1:]])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="loom")
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    if path is not None:
        onnx.save(model, str(path))
    return model
