"""FakeQuantize: forward as quantise-then-dequantise, straight-through gradient, against torch's fake_quantize."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import loom
from loom.quantization import FakeQuantize, PerChannelMinMaxObserver, fake_quantize


def test_forward_and_ste_against_torch():
    x = np.linspace(-3, 3, 41, dtype=np.float32)
    lx = loom.tensor(x, requires_grad=True)
    y = fake_quantize(lx, np.float32(0.1), 10, 0, 40)
    y.backward(loom.ones_like(y))
    tx = torch.tensor(x, requires_grad=True)
    ty = torch.fake_quantize_per_tensor_affine(tx, 0.1, 10, 0, 40)
    ty.backward(torch.ones_like(ty))
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), atol=1e-6)
    np.testing.assert_array_equal(lx.grad.numpy(), tx.grad.numpy())
    g = lx.grad.numpy()
    assert g[x < -1.05].sum() == 0 and g[x > 3.05].sum() == 0 and (g[(x > -0.95) & (x < 2.95)] == 1).all()


def test_per_channel_against_torch():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3, 2, 2)).astype(np.float32)
    scale = np.array([0.01, 0.02, 0.05, 0.1], np.float32)
    lw = loom.tensor(w, requires_grad=True)
    y = fake_quantize(lw, scale, np.zeros(4, np.int64), -128, 127, ch_axis=0)
    (y * y).sum().backward()
    tw = torch.tensor(w, requires_grad=True)
    ty = torch.fake_quantize_per_channel_affine(tw, torch.tensor(scale), torch.zeros(4, dtype=torch.int32), 0, -128,
                                                127)
    (ty * ty).sum().backward()
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), atol=1e-6)
    np.testing.assert_allclose(lw.grad.numpy(), tw.grad.numpy(), atol=1e-5)


def test_module_observes_then_quantises():
    fq = FakeQuantize()
    x = loom.tensor(np.array([-1.0, 0.0, 0.3, 2.0], np.float32), requires_grad=True)
    y = fq(x)
    scale, zp = fq.calculate_qparams()
    assert scale == np.float32(3.0) / np.float32(255) and zp == 85
    q = np.clip(np.rint(x.detach().numpy() / scale) + zp, 0, 255)
    np.testing.assert_allclose(y.detach().numpy(), (q - zp) * scale, atol=1e-7)
    fq.enable_fake_quant(False)
    np.testing.assert_array_equal(fq(x).detach().numpy(), x.detach().numpy())
    wfq = FakeQuantize(observer=PerChannelMinMaxObserver)
    wfq(loom.tensor(np.ones((3, 2), np.float32)))
    assert wfq.calculate_qparams()[0].shape == (3,)


def test_learnable_scale_trains():
    fq = FakeQuantize(learnable=True)
    x = loom.tensor(np.linspace(-1, 1, 9, dtype=np.float32), requires_grad=True)
    (fq(x) ** 2).sum().backward()
    s0 = float(fq.calculate_qparams()[0])
    assert s0 == pytest.approx(2.0 / 255, rel=1e-5)
    g = float(fq.learned_scale.grad.numpy())
    assert np.isfinite(g) and g != 0.0
    opt = loom.optim.SGD([fq.learned_scale], lr=1e-4)
    opt.step()
    assert float(fq.calculate_qparams()[0]) != s0
    with pytest.raises(loom.errors.LoomValueError, match="per tensor"):
        FakeQuantize(observer=PerChannelMinMaxObserver, learnable=True)
