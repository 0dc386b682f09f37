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


# ---------------------------------------------------------------------------- schedulers

SCHEDULES = [
    ("Warm restarts", lambda m, o: m.optim.lr_scheduler.CosineAnnealingWarmRestarts(o, T_0=5)),
    ("Warm restarts T_mult=2", lambda m, o: m.optim.lr_scheduler.CosineAnnealingWarmRestarts(
        o, T_0=3, T_mult=2, eta_min=0.01)),
    ("CyclicLR", lambda m, o: m.optim.lr_scheduler.CyclicLR(o, base_lr=0.01, max_lr=0.1, step_size_up=4)),
    ("CyclicLR triangular2", lambda m, o: m.optim.lr_scheduler.CyclicLR(
        o, base_lr=0.01, max_lr=0.1, step_size_up=3, step_size_down=5, mode="triangular2")),
    ("CyclicLR exp_range", lambda m, o: m.optim.lr_scheduler.CyclicLR(
        o, base_lr=0.01, max_lr=0.1, step_size_up=4, mode="exp_range", gamma=0.9, base_momentum=0.7,
        max_momentum=0.95)),
    ("CyclicLR scale_fn", lambda m, o: m.optim.lr_scheduler.CyclicLR(
        o, base_lr=0.01, max_lr=0.1, step_size_up=2, scale_fn=lambda x: 1.0 / (1.0 + x), scale_mode="iterations",
        cycle_momentum=False)),
    ("PolynomialLR", lambda m, o: m.optim.lr_scheduler.PolynomialLR(o, total_iters=10, power=2.0)),
    ("PolynomialLR linear", lambda m, o: m.optim.lr_scheduler.PolynomialLR(o)),
    ("MultiplicativeLR", lambda m, o: m.optim.lr_scheduler.MultiplicativeLR(o, lambda e: 0.95 if e % 2 else 0.9)),
]


def _run_schedule(lib, make, opt_name, steps=24):
    p = lib.zeros(2, requires_grad=True)
    opt = getattr(lib.optim, opt_name)([p], lr=0.1, **({"momentum": 0.9} if opt_name == "SGD" else {}))
    sched = make(lib, opt)
    lrs, moms = [opt.param_groups[0]["lr"]], []
    for _ in range(steps):
        opt.step()
        sched.step()
        g = opt.param_groups[0]
        lrs.append(g["lr"])
        moms.append(g["betas"][0] if "betas" in g else g.get("momentum", 0.0))
    return lrs, moms, sched.get_last_lr()


@pytest.mark.parametrize("opt_name", ["SGD", "Adam"])
@pytest.mark.parametrize("name,make", SCHEDULES, ids=[s[0] for s in SCHEDULES])
def test_schedule_matches_torch(name, make, opt_name):
    t_lrs, t_moms, t_last = _run_schedule(torch, make, opt_name)
    l_lrs, l_moms, l_last = _run_schedule(loom, make, opt_name)
    np.testing.assert_allclose(l_lrs, t_lrs, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(l_moms, t_moms, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(l_last, t_last, rtol=1e-9, atol=1e-12)
    assert len(set(np.round(l_lrs, 12))) > 3  # The schedule moved.


@pytest.mark.parametrize("T_mult", [1, 2, 3])
def test_warm_restarts_fractional_epochs_match_torch(T_mult):
    epochs = [0.0, 0.25, 0.5, 1.75, 2.0, 3.3, 4.99, 5.0, 7.5, 9.1, 12.0, 20.6, 30.2, 2.5]
    out = {}
    for lib in (torch, loom):
        opt = lib.optim.SGD([lib.zeros(1, requires_grad=True)], lr=0.2)
        sched = lib.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=2, T_mult=T_mult, eta_min=0.001)
        lrs = []
        for e in epochs:
            sched.step(e)
            lrs.append(opt.param_groups[0]["lr"])
        for _ in range(5):  # Plain steps continue from the last fractional epoch.
            sched.step()
            lrs.append(opt.param_groups[0]["lr"])
        out[lib.__name__] = (lrs, sched.last_epoch, sched.T_cur, sched.T_i)
    np.testing.assert_allclose(out["loom"][0], out["torch"][0], rtol=1e-9, atol=1e-12)
    assert out["loom"][1:] == pytest.approx(out["torch"][1:])


METRICS = [1.0, 0.9, 0.9, 0.9, 0.95, 0.8999, 0.9, 0.91, 0.92, 0.93, 0.5, 0.5, 0.5, 0.5, 0.5, 0.49999, 0.5, 0.6,
           0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6]


@pytest.mark.parametrize("kw", [
    dict(),
    dict(patience=2),
    dict(mode="max", patience=1, factor=0.5),
    dict(patience=1, threshold=0.05, threshold_mode="abs"),
    dict(mode="max", patience=1, threshold=0.01, threshold_mode="abs"),
    dict(patience=1, threshold=0.2),
    dict(patience=0, cooldown=2, factor=0.5),
    dict(patience=0, min_lr=0.02, factor=0.3),
    dict(patience=0, factor=0.9, eps=0.005),
], ids=["defaults", "patience", "max", "abs", "max-abs", "rel-threshold", "cooldown", "min_lr", "eps"])
def test_reduce_on_plateau_matches_torch(kw):
    out = {}
    for lib in (torch, loom):
        ps = [lib.zeros(1, requires_grad=True), lib.zeros(1, requires_grad=True)]
        opt = lib.optim.SGD([{"params": [ps[0]]}, {"params": [ps[1]], "lr": 0.05}], lr=0.1)
        sched = lib.optim.lr_scheduler.ReduceLROnPlateau(opt, **kw)
        lrs = []
        for m in METRICS * 2:
            sched.step(m)
            lrs.append([g["lr"] for g in opt.param_groups])
        out[lib.__name__] = (lrs, sched.get_last_lr(), sched.best, sched.num_bad_epochs, sched.last_epoch)
    np.testing.assert_allclose(out["loom"][0], out["torch"][0], rtol=1e-12)
    assert out["loom"][1:] == out["torch"][1:]
    assert out["loom"][0][-1] != out["loom"][0][0]  # Some plateau reduced the lr.


def test_reduce_on_plateau_min_lr_per_group_and_errors():
    ps = [loom.zeros(1, requires_grad=True), loom.zeros(1, requires_grad=True)]
    opt = loom.optim.SGD([{"params": [ps[0]]}, {"params": [ps[1]]}], lr=1.0)
    sched = loom.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0, factor=0.1, min_lr=[0.5, 0.0])
    for _ in range(4):
        sched.step(loom.tensor(1.0))  # A 0-d tensor metric, as a validation loss often is.
    assert sched.get_last_lr() == [0.5, pytest.approx(1e-3)]
    with pytest.raises(loom.LoomError, match="factor"):
        loom.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=1.5)
    with pytest.raises(loom.LoomError, match="min_lrs"):
        loom.optim.lr_scheduler.ReduceLROnPlateau(opt, min_lr=[0.1])
    with pytest.raises(loom.LoomError, match="mode"):
        loom.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="lowest")
    with pytest.raises(loom.LoomError, match="T_0"):
        loom.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=0)
    with pytest.raises(loom.LoomError, match="momentum"):
        loom.optim.lr_scheduler.CyclicLR(loom.optim.Adagrad(ps), 0.01, 0.1)


def _convert(value, to_loom):
    if isinstance(value, (list, tuple)):
        return type(value)(_convert(v, to_loom) for v in value)
    if to_loom and isinstance(value, torch.Tensor):
        return loom.tensor(value.detach().numpy())
    if not to_loom and isinstance(value, loom.Tensor):
        return torch.tensor(value.numpy())
    return value


@pytest.mark.parametrize("kw", [dict(max_iter=3, history_size=4), dict(max_iter=3, line_search_fn="strong_wolfe")],
                         ids=["fixed", "wolfe"])
def test_lbfgs_state_dict_moves_between_torch_and_loom(kw):
    arrays = _arrays()
    tp, tloss = _lbfgs_problem(torch, arrays)
    lp, lloss = _lbfgs_problem(loom, arrays)
    topt = torch.optim.LBFGS(tp, **kw)
    topt.step(_closure(topt, tloss))
    with loom.no_grad():
        for a, b in zip(lp, tp):
            a.copy_(loom.tensor(b.detach().numpy()))
    tsd = topt.state_dict()
    lopt = loom.optim.LBFGS(lp, **kw)
    lopt.load_state_dict({"state": {i: {k: _convert(v, True) for k, v in st.items()} for i, st in tsd["state"].items()},
                          "param_groups": tsd["param_groups"]})
    for _ in range(2):
        topt.step(_closure(topt, tloss))
        lopt.step(_closure(lopt, lloss))
        _assert_close(lp, tp, rtol=1e-5, atol=1e-5)
    lsd = lopt.state_dict()
    assert lsd["state"][0]["n_iter"] == topt.state[tp[0]]["n_iter"] and isinstance(lsd["state"][0]["old_dirs"], list)
    tp2, tloss2 = _lbfgs_problem(torch, arrays)
    with torch.no_grad():
        for a, b in zip(tp2, lp):
            a.copy_(torch.tensor(b.detach().numpy()))
    topt2 = torch.optim.LBFGS(tp2, **kw)
    topt2.load_state_dict({"state": {i: {k: _convert(v, False) for k, v in st.items()}
                                     for i, st in lsd["state"].items()}, "param_groups": lsd["param_groups"]})
    topt2.step(_closure(topt2, tloss2))
    lopt.step(_closure(lopt, lloss))
    _assert_close(lp, tp2, rtol=1e-5, atol=1e-5)
