"""prepare / calibrate / convert and QAT on small models: structure, accuracy against float, errors."""
from __future__ import annotations

import numpy as np
import pytest

import loom
import loom.nn as nn
import loom.nn.functional as F
from loom.quantization import (QuantizedModel, convert, get_default_qat_qconfig, get_default_qconfig, prepare,
                               prepare_qat, quantize)
from loom.quantization import modules as qm


def small_cnn() -> nn.Sequential:
    loom.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Sequential(nn.Conv2d(8, 16, 3), nn.ReLU()), nn.Dropout(0.1), nn.Flatten(),
                         nn.Linear(16 * 5 * 5, 32), nn.ReLU(), nn.Linear(32, 5))


def images(n, seed):
    return loom.tensor(np.random.default_rng(seed).standard_normal((n, 1, 14, 14)).astype(np.float32))


def test_structure_fuses_relu_and_ends_in_float():
    q = quantize(small_cnn(), [images(16, s) for s in range(2)])
    kinds = [type(s).__name__ for s in q.steps]
    assert kinds == ["QuantStub", "QuantizedConv2d", "QuantizedMaxPool2d", "QuantizedConv2d", "QuantizedFlatten",
                     "QuantizedLinear", "QuantizedLinear"]
    assert [s.relu for s in q.steps if hasattr(s, "relu")] == [True, True, True, False]
    assert q.steps[-1].out_qparams is None and q.steps[1].out_qparams[1] == 0  # Post-ReLU range starts at 0.


@pytest.mark.parametrize("activation", ["minmax", "entropy", "percentile"])
def test_ptq_agrees_with_float(activation):
    """Labels from the float model itself: the int8 model must pick the same class almost always."""
    model = small_cnn().eval()
    q = quantize(model, [images(32, s) for s in range(3)], get_default_qconfig(activation))
    x = images(256, 99)
    with loom.no_grad():
        ref = model(x).numpy()
    out = q(x).numpy()
    assert out.shape == ref.shape and out.dtype == np.float32
    assert (out.argmax(1) == ref.argmax(1)).mean() >= 0.95
    # Entropy calibration clips this untrained net's activations the most; its error is the largest.
    bound = {"minmax": 0.02, "percentile": 0.02, "entropy": 0.15}[activation]
    assert np.abs(out - ref).mean() <= bound * np.abs(ref).mean()


def test_int8_model_matches_a_numpy_simulation():
    """Each layer against quantise -> float op on dequantised values -> requantise, done in NumPy."""
    model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
    q = quantize(model, [loom.randn(20, 6)])
    x = np.random.default_rng(1).standard_normal((7, 6)).astype(np.float32)
    stub, l1, l2 = q.steps
    xq = qm.quantize_array(x, stub.scale, stub.zero_point).astype(np.int64)
    acc1 = (xq - stub.zero_point) @ l1.weight_int8.T.astype(np.int64) + l1.bias_int32
    h = np.clip(np.rint(acc1.astype(np.float32) * l1.mult) + l1.out_qparams[1], l1.out_qparams[1], 255)
    acc2 = (h.astype(np.int64) - l1.out_qparams[1]) @ l2.weight_int8.T.astype(np.int64) + l2.bias_int32
    np.testing.assert_allclose(q.run_numpy(x), acc2.astype(np.float32) * l2.mult, rtol=1e-6)


def test_weights_four_times_smaller():
    model = small_cnn()
    q = quantize(model, [images(8, 0)])
    float_bytes = sum(p.numel() * 4 for p in model.parameters())
    int8_weights = sum(s.weight_int8.size for s in q.steps if hasattr(s, "weight_int8"))
    weights_float = sum(p.numel() * 4 for n, p in model.named_parameters() if n.endswith("weight"))
    assert int8_weights * 4 == weights_float
    assert float_bytes / q.weight_bytes() > 3.5  # Scales and int32 biases are the rest.


def test_reduce_range_gives_7bit_weights():
    q = quantize(small_cnn(), [images(8, 0)], get_default_qconfig(reduce_range=True))
    layers = [s for s in q.steps if hasattr(s, "packed")]
    assert all(s.packed.narrow for s in layers)
    assert min(s.weight_int8.min() for s in layers) >= -64


def test_without_vnni_same_output(monkeypatch):
    model = small_cnn()
    q = quantize(model, [images(16, 0)])
    x = images(5, 3)
    best = q(x).numpy()
    for path in ("avx2", "scalar"):
        monkeypatch.setenv("LOOM_Q8_PATH", path)
        np.testing.assert_array_equal(q(x).numpy(), best)


def test_calibration_function_and_numpy_input():
    model = nn.Sequential(nn.Linear(4, 3))
    seen = []

    def run(prepared):
        seen.append(type(prepared).__name__)
        prepared(loom.randn(10, 4))

    q = quantize(model, run)
    assert seen == ["ObservedModel"] and isinstance(q, QuantizedModel)
    assert q(np.ones((2, 4), np.float32)).shape == (2, 3)


def test_qat_trains_and_converts():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((256, 8)).astype(np.float32)
    y = (x[:, :4].sum(1) > x[:, 4:].sum(1)).astype(np.int64)
    loom.manual_seed(1)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    qat = prepare_qat(model, get_default_qat_qconfig())
    opt = loom.optim.Adam(qat.parameters(), lr=0.02)
    losses = []
    for _ in range(30):
        i = rng.integers(0, 256, 64)
        loss = F.cross_entropy(qat(loom.tensor(x[i])), loom.tensor(y[i]))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert np.mean(losses[-5:]) < 0.7 * np.mean(losses[:5])
    qat.eval()
    with loom.no_grad():
        fake = qat(loom.tensor(x)).numpy()
    q = convert(qat)
    out = q(loom.tensor(x)).numpy()
    # The fake-quant forward is what the int8 model computes, up to int32 bias and requantisation rounding.
    assert np.abs(out - fake).max() <= 0.05 * np.abs(fake).max()
    assert (out.argmax(1) == y).mean() >= 0.85


def test_errors():
    class Custom(nn.Module):
        def forward(self, x):
            return x

    with pytest.raises(loom.errors.LoomTypeError, match="Sequential"):
        prepare(nn.Sequential(nn.Linear(2, 2), Custom()))
    with pytest.raises(loom.errors.LoomValueError, match="groups=1"):
        prepare(nn.Sequential(nn.Conv2d(4, 4, 3, groups=2)))
    with pytest.raises(loom.errors.LoomValueError, match="no Conv2d or Linear"):
        prepare(nn.Sequential(nn.ReLU()))
    with pytest.raises(loom.errors.LoomValueError, match="no values observed"):
        convert(prepare(nn.Sequential(nn.Linear(2, 2))))
    with pytest.raises(loom.errors.LoomTypeError, match="prepare"):
        convert(nn.Sequential(nn.Linear(2, 2)))
    q = quantize(nn.Sequential(nn.Linear(3, 2)), [loom.randn(4, 3)])
    with pytest.raises(loom.errors.ShapeError, match="3 features"):
        q(loom.randn(4, 5))


def test_numpy_fallback_same_output(monkeypatch):
    """Without the C library (LOOM_Q8_NATIVE=0) the NumPy path gives the same int8 results."""
    q = quantize(small_cnn(), [images(16, 0)])
    x = images(3, 8)
    native = q(x).numpy()
    monkeypatch.setenv("LOOM_Q8_NATIVE", "0")
    from loom.quantization import kernels
    assert kernels.default_path() == "numpy"
    np.testing.assert_array_equal(q(x).numpy(), native)
