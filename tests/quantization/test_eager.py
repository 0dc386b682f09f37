"""Eager-mode quantisation of a model with its own forward and a residual addition (torch's eager workflow)."""
from __future__ import annotations

import numpy as np
import pytest

import loom
import loom.nn as nn
import loom.nn.functional as F
from loom.quantization import (DeQuantStub, FloatFunctional, QuantStub, convert, fuse_modules, prepare, prepare_qat,
                               quantize)
from loom.quantization import modules as qm


class ResidualNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.quant = QuantStub()
        self.conv1, self.relu1 = nn.Conv2d(1, 8, 3, padding=1), nn.ReLU()
        self.conv2, self.relu2 = nn.Conv2d(8, 8, 3, padding=1), nn.ReLU()
        self.skip = FloatFunctional()
        self.pool, self.flat = nn.MaxPool2d(2), nn.Flatten()
        self.fc = nn.Linear(8 * 5 * 5, 4)
        self.dequant = DeQuantStub()

    def forward(self, x):
        x = self.quant(x)
        h = self.relu1(self.conv1(x))
        y = self.skip.add_relu(self.relu2(self.conv2(h)), h)
        return self.dequant(self.fc(self.flat(self.pool(y))))


def images(n, seed):
    return loom.tensor(np.random.default_rng(seed).standard_normal((n, 1, 10, 10)).astype(np.float32))


def model():
    loom.manual_seed(3)
    return fuse_modules(ResidualNet().eval(), [["conv1", "relu1"], ["conv2", "relu2"]])


def test_residual_model_quantises():
    float_model = model()
    q = quantize(float_model, [images(32, s) for s in range(3)])
    assert isinstance(q, ResidualNet)  # The model's own forward runs on int8 data.
    assert isinstance(q.conv1, qm.QuantizedConv2d) and q.conv1.relu and isinstance(q.skip.add(
        qm.QArray(np.zeros((1, 2), np.uint8), (1.0, 0), False), qm.QArray(np.ones((1, 2), np.uint8), (1.0, 0), False)),
        qm.QArray)
    x = images(128, 9)
    with loom.no_grad():
        ref = float_model(x).numpy()
    out = q(x).numpy()
    assert out.shape == ref.shape
    assert (out.argmax(1) == ref.argmax(1)).mean() >= 0.95
    assert np.abs(out - ref).mean() <= 0.03 * np.abs(ref).mean()
    assert q.conv2.in_qparams == q.conv1.out_qparams  # Set from the input when it came.


def test_qat_eager():
    qat = prepare_qat(model().train())
    opt = loom.optim.SGD(qat.parameters(), lr=0.01)
    x, y = images(32, 1), loom.tensor(np.arange(32) % 4)
    loss = F.cross_entropy(qat(x), y)
    loss.backward()
    assert qat.conv1.layer.weight.grad is not None
    opt.step()
    q = convert(qat.eval())
    with loom.no_grad():
        fake = qat(x).numpy()
    assert np.abs(q(x).numpy() - fake).max() <= 0.1 * np.abs(fake).max()


def test_eager_errors():
    class NoStub(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(2, 2)

        def forward(self, x):
            return self.fc(x)

    with pytest.raises(loom.errors.LoomValueError, match="QuantStub"):
        prepare(NoStub())
    with pytest.raises(loom.errors.LoomTypeError, match="Conv2d or Linear, then ReLU"):
        fuse_modules(ResidualNet(), [["relu1", "conv1"]])
