"""Adadelta, Adamax, NAdam, RAdam, Rprop, ASGD and LBFGS follow torch.optim's trajectories step for step."""
import collections

import numpy as np
import pytest
import torch

import loom
import loom.nn as nn
import loom.nn.functional as F

CONFIGS = [
    ("Adadelta", dict()),
    ("Adadelta", dict(lr=0.5, rho=0.8, eps=1e-5, weight_decay=0.05)),
    ("Adadelta", dict(lr=0.5, maximize=True)),
    ("Adamax", dict(lr=0.01)),
    ("Adamax", dict(lr=0.02, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)),
    ("Adamax", dict(lr=0.01, maximize=True)),
    ("NAdam", dict(lr=0.01)),
    ("NAdam", dict(lr=0.01, betas=(0.8, 0.95), momentum_decay=0.01)),
    ("NAdam", dict(lr=0.01, weight_decay=0.1)),
    ("NAdam", dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True)),
    ("NAdam", dict(lr=0.01, maximize=True, eps=1e-6)),
    ("RAdam", dict(lr=0.01)),
    ("RAdam", dict(lr=0.01, betas=(0.5, 0.9))),  # rho_t > 5 from step 6: both branches are taken.
    ("RAdam", dict(lr=0.01, weight_decay=0.1)),
    ("RAdam", dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True, betas=(0.5, 0.9))),
    ("RAdam", dict(lr=0.01, maximize=True, betas=(0.5, 0.9))),
    ("Rprop", dict()),
    ("Rprop", dict(lr=0.05, etas=(0.3, 1.5), step_sizes=(1e-3, 0.1))),
    ("Rprop", dict(lr=0.05, maximize=True)),
    ("ASGD", dict(lr=0.05)),
    ("ASGD", dict(lr=0.05, lambd=1e-2, alpha=0.5, t0=5, weight_decay=0.01)),
    ("ASGD", dict(lr=0.05, t0=0, maximize=True)),
]


def _arrays():
    rng = np.random.default_rng(0)
    return {"w": rng.standard_normal((5, 3)).astype(np.float32),
            "b": rng.standard_normal(3).astype(np.float32),
            "x": rng.standard_normal((16, 5)).astype(np.float32),
            "y": rng.standard_normal((16, 3)).astype(np.float32)}


def _problem(lib, arrays):
    w = lib.tensor(arrays["w"], requires_grad=True)
    b = lib.tensor(arrays["b"], requires_grad=True)
    x, y = lib.tensor(arrays["x"]), lib.tensor(arrays["y"])

    def loss_fn():
        pred = lib.tanh(x @ w) + b
        return ((pred - y) ** 2).mean() + (b.sin() ** 2).sum() * 0.1
    return [w, b], loss_fn


def _step(opt, loss_fn):
    opt.zero_grad()
    loss_fn().backward()
    opt.step()


def _assert_close(lp, tp, rtol=1e-5, atol=1e-6):
    for a, b in zip(lp, tp):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=rtol, atol=atol)


@pytest.mark.parametrize("name,kw", CONFIGS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CONFIGS)])
def test_twenty_steps_match_torch(name, kw):
    arrays = _arrays()
    tp, tloss = _problem(torch, arrays)
    lp, lloss = _problem(loom, arrays)
    topt = getattr(torch.optim, name)(tp, **kw)
    lopt = getattr(loom.optim, name)(lp, **kw)
    for i in range(20):
        _step(topt, tloss)
        _step(lopt, lloss)
        if i in (0, 9):
            _assert_close(lp, tp)
    _assert_close(lp, tp)
    # The state has PyTorch's keys and values.
    for lpar, tpar in zip(lp, tp):
        lstate, tstate = lopt.state[lpar], topt.state[tpar]
        assert set(lstate) == set(tstate)
        for k, v in tstate.items():
            np.testing.assert_allclose(np.asarray(lstate[k].numpy() if isinstance(lstate[k], loom.Tensor)
                                                  else lstate[k], dtype=np.float64),
                                       v.detach().numpy().astype(np.float64), rtol=1e-5, atol=1e-6, err_msg=k)


@pytest.mark.parametrize("name,kw", [("NAdam", dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True)),
                                     ("RAdam", dict(lr=0.01, betas=(0.5, 0.9))), ("Adadelta", dict(lr=0.5)),
                                     ("Adamax", dict(lr=0.01)), ("Rprop", dict(lr=0.05)), ("ASGD", dict(lr=0.05))])
def test_state_dict_moves_between_torch_and_loom(name, kw):
    arrays = _arrays()
    tp, tloss = _problem(torch, arrays)
    lp, lloss = _problem(loom, arrays)
    topt = getattr(torch.optim, name)(tp, **kw)
    for _ in range(5):
        _step(topt, tloss)
    with torch.no_grad(), loom.no_grad():
        for a, b in zip(lp, tp):
            a.copy_(loom.tensor(b.detach().numpy()))
    tsd = topt.state_dict()
    lopt = getattr(loom.optim, name)(lp, **kw)
    lopt.load_state_dict({"state": {i: {k: loom.tensor(v.numpy()) if isinstance(v, torch.Tensor) else v
                                        for k, v in st.items()} for i, st in tsd["state"].items()},
                          "param_groups": tsd["param_groups"]})
    for _ in range(5):
        _step(topt, tloss)
        _step(lopt, lloss)
    _assert_close(lp, tp)
    # And back: loom's state_dict, in PyTorch's layout, resumes a torch optimizer.
    lsd = lopt.state_dict()
    assert sorted(lsd["state"]) == [0, 1] and lsd["param_groups"][0]["params"] == [0, 1]
    tp2, tloss2 = _problem(torch, arrays)
    with torch.no_grad():
        for a, b in zip(tp2, lp):
            a.copy_(torch.tensor(b.detach().numpy()))
    topt2 = getattr(torch.optim, name)(tp2, **kw)
    topt2.load_state_dict({"state": {i: {k: torch.tensor(v.numpy()) if isinstance(v, loom.Tensor) else v
                                         for k, v in st.items()} for i, st in lsd["state"].items()},
                           "param_groups": [{k: v for k, v in g.items()} for g in lsd["param_groups"]]})
    for _ in range(3):
        _step(topt2, tloss2)
        _step(lopt, lloss)
    _assert_close(lp, tp2)


def test_state_is_a_defaultdict_keyed_by_parameter():
    w = loom.ones(2, requires_grad=True)
    opt = loom.optim.NAdam([w])
    assert isinstance(opt.state, collections.defaultdict) and opt.state[w] == {}
    assert opt.state[w].get("step") is None  # Reading creates an empty entry, as in PyTorch; the step fills it.
    (w * w).sum().backward()
    opt.step()
    assert "exp_avg" in opt.state[w] and float(opt.state[w]["step"]) == 1.0
    opt.state[w]["custom"] = 1
    opt.load_state_dict(opt.state_dict())
    assert isinstance(opt.state, collections.defaultdict) and opt.state[loom.ones(1)] == {}


def _lbfgs_problem(lib, arrays):
    w = lib.tensor(arrays["w"], requires_grad=True)
    b = lib.tensor(arrays["b"], requires_grad=True)
    x, y = lib.tensor(arrays["x"]), lib.tensor(arrays["y"])

    def loss_fn():
        return ((x @ w + b - y) ** 2).mean() + (w ** 2).sum() * 0.01 + ((b - 0.5) ** 4).sum()
    return [w, b], loss_fn


def _closure(opt, fn):
    def run():
        opt.zero_grad()
        loss = fn()
        loss.backward()
        return loss
    return run


# Few iterations per step, so every compared step is still far from the optimum, where float noise
# decides the tolerance-based stops.
@pytest.mark.parametrize("kw,steps", [(dict(max_iter=5), 4), (dict(line_search_fn="strong_wolfe", max_iter=5), 3),
                                      (dict(lr=0.3, history_size=3, max_iter=4), 4),
                                      (dict(line_search_fn="strong_wolfe", max_iter=3, history_size=2), 4)],
                         ids=["fixed", "wolfe", "short-history", "wolfe-short-history"])
def test_lbfgs_trajectory_matches_torch(kw, steps):
    arrays = _arrays()
    tp, tloss = _lbfgs_problem(torch, arrays)
    lp, lloss = _lbfgs_problem(loom, arrays)
    topt, lopt = torch.optim.LBFGS(tp, **kw), loom.optim.LBFGS(lp, **kw)
    for _ in range(steps):
        tl = topt.step(_closure(topt, tloss))
        ll = lopt.step(_closure(lopt, lloss))
        np.testing.assert_allclose(float(ll), float(tl.detach()), rtol=1e-5)
        _assert_close(lp, tp, rtol=1e-5, atol=1e-5)
        tstate, lstate = topt.state[tp[0]], lopt.state[lp[0]]
        assert lstate["n_iter"] == tstate["n_iter"] and lstate["func_evals"] == tstate["func_evals"]
        np.testing.assert_allclose(lstate["t"], float(tstate["t"]), rtol=1e-5)


@pytest.mark.parametrize("kw", [dict(), dict(line_search_fn="strong_wolfe")], ids=["fixed", "wolfe"])
def test_lbfgs_converges_where_torch_does(kw):
    arrays = _arrays()
    tp, tloss = _lbfgs_problem(torch, arrays)
    lp, lloss = _lbfgs_problem(loom, arrays)
    topt, lopt = torch.optim.LBFGS(tp, **kw), loom.optim.LBFGS(lp, **kw)
    first = lopt.step(_closure(lopt, lloss))
    topt.step(_closure(topt, tloss))
    assert lopt.state[lp[0]]["n_iter"] == topt.state[tp[0]]["n_iter"] == 20
    np.testing.assert_allclose(float(lloss()), float(tloss().detach()), rtol=1e-6)
    assert float(lloss()) < float(first) * 0.1
    _assert_close(lp, tp, rtol=1e-3, atol=1e-3)


def test_lbfgs_needs_a_closure_and_one_group():
    w = loom.ones(2, requires_grad=True)
    with pytest.raises(loom.LoomError, match="closure"):
        loom.optim.LBFGS([w]).step()
    with pytest.raises(loom.LoomError, match="parameter groups"):
        loom.optim.LBFGS([{"params": [w]}, {"params": [loom.ones(1, requires_grad=True)]}])
    with pytest.raises(loom.LoomError, match="strong_wolfe"):
        loom.optim.LBFGS([w], line_search_fn="backtracking")


@pytest.mark.parametrize("bad", [
    lambda p: loom.optim.Adadelta(p, rho=1.5),
    lambda p: loom.optim.Adamax(p, betas=(0.9, 1.0)),
    lambda p: loom.optim.NAdam(p, momentum_decay=-1.0),
    lambda p: loom.optim.RAdam(p, lr=-0.1),
    lambda p: loom.optim.Rprop(p, etas=(1.5, 1.2)),
    lambda p: loom.optim.ASGD(p, weight_decay=-1.0),
])
def test_bad_arguments_raise(bad):
    with pytest.raises(loom.LoomError, match="loom.optim"):
        bad([loom.ones(2, requires_grad=True)])


def _train(traced, name, kw, steps=5):
    loom.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
    opt = getattr(loom.optim, name)(model.parameters(), **kw)

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss
    fn = loom.function(step, backend="reference") if traced else step
    rng = np.random.default_rng(1)
    losses = [fn(loom.tensor(rng.standard_normal((8, 6)).astype(np.float32)),
                 loom.tensor(rng.integers(0, 3, 8))).item() for _ in range(steps)]
    return losses, [p.detach().numpy().copy() for p in model.parameters()], fn


@pytest.mark.parametrize("name,kw", [("NAdam", dict(lr=0.05, weight_decay=0.01, decoupled_weight_decay=True)),
                                     ("RAdam", dict(lr=0.05, betas=(0.5, 0.9))), ("Adamax", dict(lr=0.05)),
                                     ("Adadelta", dict(lr=1.0)), ("Rprop", dict(lr=0.01)),
                                     ("ASGD", dict(lr=0.05, t0=2))])
def test_traced_step_equals_eager(name, kw):
    el, ep, _ = _train(False, name, kw)
    tl, tp, fn = _train(True, name, kw)
    np.testing.assert_allclose(tl, el, rtol=1e-6)
    for a, b in zip(tp, ep):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert fn.trace_count == 1
