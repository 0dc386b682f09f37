"""export_qdq: the int8 model as QDQ ONNX, checked by onnx and run by onnxruntime beside loom's int8 model."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import loom
import loom.nn as nn
from loom.quantization import export_qdq, quantize
from tests.quantization.test_quantize import images, small_cnn


@pytest.fixture(scope="module")
def quantised():
    return quantize(small_cnn(), [images(32, s) for s in range(2)])


def test_qdq_runs_in_onnxruntime(quantised, tmp_path):
    path = tmp_path / "cnn_qdq.onnx"
    model = export_qdq(quantised, (1, 1, 14, 14), path)
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    assert model.ir_version == 10
    ops = [n.op_type for n in model.graph.node]
    assert {"QuantizeLinear", "DequantizeLinear", "Conv", "Gemm", "MaxPool", "Flatten"} <= set(ops)
    weights = [i for i in model.graph.initializer if i.name.startswith("weight") and "_" not in i.name[7:]]
    assert weights and all(w.data_type == onnx.TensorProto.INT8 for w in weights)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for n in (1, 9):  # The batch axis is dynamic.
        x = images(n, 40 + n)
        got = sess.run(None, {"input": x.numpy()})[0]
        ours = quantised(x).numpy()
        # onnxruntime fuses the QDQ pattern into its own int8 kernels; the two agree to float rounding.
        np.testing.assert_allclose(got, ours, atol=1e-5 * max(1.0, float(np.abs(ours).max())))


def test_float_export_of_a_linear_model():
    q = quantize(nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 2)), [loom.randn(16, 5)])
    model = export_qdq(q, (3, 5), dynamic_batch=False)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    np.testing.assert_allclose(sess.run(None, {"input": x})[0], q.run_numpy(x), atol=1e-5)


def test_rejects_other_models():
    with pytest.raises(loom.errors.LoomTypeError, match="QuantizedModel"):
        export_qdq(nn.Linear(2, 2), (1, 2))
