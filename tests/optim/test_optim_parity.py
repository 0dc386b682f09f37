"""Twenty steps of every optimiser and configuration match PyTorch's parameters."""
import numpy as np
import pytest
import torch

import loom

CONFIGS = [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.05, momentum=0.9)),
    ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01)),
    ("SGD", dict(lr=0.05, momentum=0.8, dampening=0.3)),
    ("SGD", dict(lr=0.05, momentum=0.9, maximize=True)),
    ("Adam", dict(lr=0.01)),
    ("Adam", dict(lr=0.01, betas=(0.8, 0.99), weight_decay=0.1)),
    ("Adam", dict(lr=0.01, amsgrad=True)),
    ("AdamW", dict(lr=0.01)),
    ("AdamW", dict(lr=0.01, weight_decay=0.3, amsgrad=True)),
    ("RMSprop", dict(lr=0.01)),
    ("RMSprop", dict(lr=0.01, momentum=0.9, centered=True, weight_decay=0.01)),
    ("Adagrad", dict(lr=0.1)),
    ("Adagrad", dict(lr=0.1, lr_decay=0.01, weight_decay=0.01, initial_accumulator_value=0.1)),
]


def _problem(lib, arrays):
    w = lib.tensor(arrays["w"], requires_grad=True)
    b = lib.tensor(arrays["b"], requires_grad=True)
    x, y = lib.tensor(arrays["x"]), lib.tensor(arrays["y"])

    def loss_fn():
        pred = lib.tanh(x @ w) + b
        return ((pred - y) ** 2).mean() + (b.sin() ** 2).sum() * 0.1
    return [w, b], loss_fn


def _arrays():
    rng = np.random.default_rng(0)
    return {"w": rng.standard_normal((5, 3)).astype(np.float32),
            "b": rng.standard_normal(3).astype(np.float32),
            "x": rng.standard_normal((16, 5)).astype(np.float32),
            "y": rng.standard_normal((16, 3)).astype(np.float32)}


@pytest.mark.parametrize("name,kw", CONFIGS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CONFIGS)])
def test_twenty_steps_match_torch(name, kw):
    arrays = _arrays()
    tp, tloss = _problem(torch, arrays)
    lp, lloss = _problem(loom, arrays)
    topt = getattr(torch.optim, name)(tp, **kw)
    lopt = getattr(loom.optim, name)(lp, **kw)
    for _ in range(20):
        topt.zero_grad()
        tloss().backward()
        topt.step()
        lopt.zero_grad()
        lloss().backward()
        lopt.step()
    for a, b in zip(lp, tp):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-5, atol=1e-5)


def test_param_groups_have_their_own_lr_and_weight_decay():
    arrays = _arrays()
    tp, tloss = _problem(torch, arrays)
    lp, lloss = _problem(loom, arrays)
    groups = lambda ps: [{"params": [ps[0]], "lr": 0.02, "weight_decay": 0.1}, {"params": [ps[1]]}]
    topt = torch.optim.AdamW(groups(tp), lr=0.005)
    lopt = loom.optim.AdamW(groups(lp), lr=0.005)
    for _ in range(20):
        for opt, fn in ((topt, tloss), (lopt, lloss)):
            opt.zero_grad()
            fn().backward()
            opt.step()
    for a, b in zip(lp, tp):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-5, atol=1e-5)
    assert lopt.param_groups[0]["lr"] == 0.02 and lopt.param_groups[1]["lr"] == 0.005


def test_state_dict_round_trip_resumes_identically():
    arrays = _arrays()
    lp, lloss = _problem(loom, arrays)
    opt = loom.optim.Adam(lp, lr=0.01)
    for _ in range(5):
        opt.zero_grad()
        lloss().backward()
        opt.step()
    saved = opt.state_dict()
    assert saved["param_groups"][0]["params"] == [0, 1]
    assert float(saved["state"][0]["step"]) == 5.0
    # A second optimiser restored from the state continues exactly like the first.
    lp2 = [p.detach().clone().requires_grad_() for p in lp]
    opt2 = loom.optim.Adam(lp2, lr=0.5)
    opt2.load_state_dict(saved)
    assert opt2.param_groups[0]["lr"] == 0.01

    def loss_of(ps):
        w, b = ps
        x, y = loom.tensor(arrays["x"]), loom.tensor(arrays["y"])
        return ((loom.tanh(x @ w) + b - y) ** 2).mean() + (b.sin() ** 2).sum() * 0.1
    for o, ps in ((opt, lp), (opt2, lp2)):
        for _ in range(3):
            o.zero_grad()
            loss_of(ps).backward()
            o.step()
    for a, b in zip(lp, lp2):
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())


def test_zero_grad_set_to_none_and_zeros():
    w = loom.ones(3, requires_grad=True)
    opt = loom.optim.SGD([w], lr=0.1)
    (w * 2).sum().backward()
    opt.zero_grad(set_to_none=False)
    assert w.grad is not None and w.grad.tolist() == [0.0, 0.0, 0.0]
    opt.zero_grad()
    assert w.grad is None


@pytest.mark.parametrize("bad", [
    lambda p: loom.optim.SGD(p, lr=-1.0),
    lambda p: loom.optim.Adam(p, betas=(1.5, 0.9)),
    lambda p: loom.optim.SGD(p, lr=0.1, nesterov=True),
    lambda p: loom.optim.SGD([], lr=0.1),
    lambda p: loom.optim.SGD([{"params": p}, {"params": p}], lr=0.1),
])
def test_bad_optimizer_arguments_raise(bad):
    p = [loom.ones(2, requires_grad=True)]
    with pytest.raises(loom.LoomError, match="loom.optim"):
        bad(p)


def test_optimizer_rejects_a_single_tensor():
    with pytest.raises(TypeError, match="iterable"):
        loom.optim.SGD(loom.ones(2, requires_grad=True), lr=0.1)
