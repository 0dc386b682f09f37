"""torch.optim.swa_utils (AveragedModel for SWA and EMA, SWALR, update_bn) against PyTorch's."""
import importlib

import numpy as np
import pytest
import torch

import loom.torch as ltorch

X = np.random.default_rng(0).standard_normal((16, 3)).astype(np.float32)


def _program(lib, kind):
    su = importlib.import_module(lib.__name__ + ".optim.swa_utils")
    m = lib.nn.Sequential(lib.nn.Linear(3, 4), lib.nn.BatchNorm1d(4), lib.nn.Linear(4, 1))
    with lib.no_grad():
        for k, p in enumerate(m.parameters()):
            p.copy_(lib.tensor(np.random.default_rng(k).standard_normal(tuple(p.shape)).astype(np.float32) * 0.3))
    if kind == "swa":
        avg = su.AveragedModel(m)
    elif kind == "ema":
        avg = su.AveragedModel(m, multi_avg_fn=su.get_ema_multi_avg_fn(0.9))
    else:
        avg = su.AveragedModel(m, avg_fn=su.get_ema_avg_fn(0.8), use_buffers=True)
    opt = lib.optim.SGD(m.parameters(), lr=0.1)
    sched = su.SWALR(opt, swa_lr=0.02, anneal_epochs=3, anneal_strategy="linear" if kind == "ema" else "cos")
    x = lib.tensor(X)
    lrs = []
    for _ in range(6):
        opt.zero_grad()
        m(x).pow(2).mean().backward()
        opt.step()
        avg.update_parameters(m)
        sched.step()
        lrs.append(opt.param_groups[0]["lr"])
    su.update_bn(lib.utils.data.DataLoader(lib.utils.data.TensorDataset(x), batch_size=4), avg)
    avg.eval()
    outs = [avg(x), avg.module[1].running_mean, avg.module[1].running_var, *avg.parameters()]
    return np.array(lrs), int(avg.n_averaged), [o.detach().numpy() for o in outs]


@pytest.mark.parametrize("kind", ["swa", "ema", "ema_avg_fn_with_buffers"])
def test_averaged_model_swalr_update_bn_match_torch(kind):
    want_lrs, want_n, want = _program(torch, kind)
    got_lrs, got_n, got = _program(ltorch, kind)
    np.testing.assert_allclose(got_lrs, want_lrs, rtol=1e-9)
    assert got_n == want_n == 6
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6)
