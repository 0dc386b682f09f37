"""torch.autocast / GradScaler on the cpu: PyTorch's dtypes and values, and the cuda spellings disabled."""
import warnings

import numpy as np
import pytest

import loom
import loom.torch as torch

F = torch.nn.functional
pt = pytest.importorskip("torch")


def _pair(shape, seed):
    a = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return torch.tensor(a), pt.tensor(a)


def test_autocast_dtypes_match_pytorch():
    (x, tx), (w, tw), (b, tb) = _pair((4, 8), 0), _pair((3, 8), 1), _pair((3,), 2)
    (img, timg), (k, tk) = _pair((1, 2, 5, 5), 3), _pair((3, 2, 3, 3), 4)
    target, ttarget = torch.tensor([0, 1, 2, 0]), pt.tensor([0, 1, 2, 0])
    with torch.autocast("cpu"), pt.autocast("cpu"):
        ours = {"linear": F.linear(x, w, b), "matmul": x @ w.t(), "bmm": torch.bmm(x[None], w.t()[None]),
                "conv": F.conv2d(img, k), "mv": torch.mv(x, w[0]), "relu": F.relu(F.linear(x, w)),
                "ce": F.cross_entropy(F.linear(x, w), target), "mse": F.mse_loss(x, x * 2),
                "add": F.linear(x, w) + x[:, :3], "f64": x.double() @ w.double().t()}
        theirs = {"linear": pt.nn.functional.linear(tx, tw, tb), "matmul": tx @ tw.t(),
                  "bmm": pt.bmm(tx[None], tw.t()[None]), "conv": pt.nn.functional.conv2d(timg, tk),
                  "mv": pt.mv(tx, tw[0]), "relu": pt.relu(pt.nn.functional.linear(tx, tw)),
                  "ce": pt.nn.functional.cross_entropy(pt.nn.functional.linear(tx, tw), ttarget),
                  "mse": pt.nn.functional.mse_loss(tx, tx * 2), "add": pt.nn.functional.linear(tx, tw) + tx[:, :3],
                  "f64": tx.double() @ tw.double().t()}
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") is torch.bfloat16
    for name in ours:
        assert ours[name].dtype.name == str(theirs[name].dtype).split(".")[1], name
        np.testing.assert_allclose(ours[name].float().detach().numpy(), theirs[name].float().detach().numpy(),
                                   rtol=2e-2, atol=2e-2, err_msg=name)
    assert not torch.is_autocast_enabled("cpu") and F.linear(x, w).dtype is torch.float32


def test_autocast_gradients_reach_float32_leaves():
    x = torch.randn(4, 8, requires_grad=True)
    w = torch.randn(3, 8, requires_grad=True)
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        loss = F.linear(x, w).float().pow(2).sum()
    loss.backward()
    assert x.grad.dtype is torch.float32 and w.grad.dtype is torch.float32
    np.testing.assert_allclose(w.grad.numpy(), (2 * (x @ w.t()).t() @ x).detach().numpy(), rtol=5e-2, atol=0.5)


def test_autocast_float16_nesting_and_decorator():
    x, w = torch.randn(2, 4), torch.randn(3, 4)
    with torch.autocast("cpu", dtype=torch.float16):
        assert F.linear(x, w).dtype is torch.float16
        with torch.autocast("cpu", enabled=False):
            assert F.linear(x, w).dtype is torch.float32
        assert F.linear(x, w).dtype is torch.float16

    @torch.autocast("cpu")
    def f():
        return F.linear(x, w).dtype
    assert f() is torch.bfloat16
    with torch.cpu.amp.autocast():
        assert F.linear(x, w).dtype is torch.bfloat16


def test_cuda_autocast_warns_and_disables():
    x, w = torch.randn(2, 4), torch.randn(3, 4)
    with pytest.warns(UserWarning, match="Disabling autocast"):
        with torch.autocast("cuda"):
            assert F.linear(x, w).dtype is torch.float32
            assert not torch.is_autocast_enabled("cuda")
    with pytest.warns(UserWarning):
        with torch.cuda.amp.autocast():
            assert F.linear(x, w).dtype is torch.float32


def test_cuda_grad_scaler_passes_through():
    w = torch.ones(2, requires_grad=True)
    opt = torch.optim.SGD([w], lr=0.5)
    with pytest.warns(UserWarning, match="Disabling"):
        scaler = torch.cuda.amp.GradScaler()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert not torch.amp.GradScaler("cuda").is_enabled()
    loss = (w * 2).sum()
    assert scaler.scale(loss) is loss
    loss.backward()
    scaler.unscale_(opt)
    scaler.step(opt)
    scaler.update()
    assert w.tolist() == [0.0, 0.0] and scaler.get_scale() == 1.0 and scaler.state_dict() == {}


def test_cpu_grad_scaler_scales_unscales_and_skips_infs():
    w = torch.ones(2, requires_grad=True)
    opt = torch.optim.SGD([w], lr=0.5)
    scaler = torch.amp.GradScaler("cpu", init_scale=8.0, growth_interval=2)
    scaler.scale((w * 2).sum()).backward()
    assert w.grad.tolist() == [16.0, 16.0]
    scaler.step(opt)
    scaler.update()
    assert w.tolist() == [0.0, 0.0] and scaler.get_scale() == 8.0
    opt.zero_grad()
    scaler.scale((w * float("inf")).sum()).backward()
    scaler.step(opt)
    scaler.update()
    assert w.tolist() == [0.0, 0.0] and scaler.get_scale() == 4.0
    state = scaler.state_dict()
    other = torch.amp.GradScaler("cpu")
    other.load_state_dict(state)
    assert other.get_scale() == 4.0 and other.state_dict() == state
    with pytest.raises(loom.LoomError, match="already been called"):
        scaler.unscale_(opt)
        scaler.unscale_(opt)
