"""Every schedule gives PyTorch's learning rates step for step."""
import math

import numpy as np
import pytest
import torch

import loom

SCHEDULES = [
    ("StepLR", lambda m, o: m.optim.lr_scheduler.StepLR(o, step_size=4, gamma=0.5)),
    ("MultiStepLR", lambda m, o: m.optim.lr_scheduler.MultiStepLR(o, milestones=[3, 7, 12], gamma=0.3)),
    ("CosineAnnealingLR", lambda m, o: m.optim.lr_scheduler.CosineAnnealingLR(o, T_max=10, eta_min=0.001)),
    ("LinearLR", lambda m, o: m.optim.lr_scheduler.LinearLR(o, start_factor=0.2, total_iters=6)),
    ("ExponentialLR", lambda m, o: m.optim.lr_scheduler.ExponentialLR(o, gamma=0.9)),
    ("LambdaLR", lambda m, o: m.optim.lr_scheduler.LambdaLR(o, lambda e: 1.0 / (1 + e))),
    ("OneCycleLR", lambda m, o: m.optim.lr_scheduler.OneCycleLR(o, max_lr=0.5, total_steps=25)),
    ("OneCycleLR-3phase-linear", lambda m, o: m.optim.lr_scheduler.OneCycleLR(
        o, max_lr=0.5, total_steps=25, three_phase=True, anneal_strategy="linear")),
    ("SequentialLR", lambda m, o: m.optim.lr_scheduler.SequentialLR(
        o, [m.optim.lr_scheduler.LinearLR(o, start_factor=0.1, total_iters=5),
            m.optim.lr_scheduler.CosineAnnealingLR(o, T_max=15)], milestones=[5])),
]


def _run(lib, make, opt_name):
    p = lib.zeros(2, requires_grad=True)
    opt = getattr(lib.optim, opt_name)([p], lr=0.1, **({"momentum": 0.9} if opt_name == "SGD" else {}))
    sched = make(lib, opt)
    lrs, moms = [], []
    for _ in range(24):
        opt.step()
        sched.step()
        lrs.append(opt.param_groups[0]["lr"])
        g = opt.param_groups[0]
        moms.append(g["betas"][0] if "betas" in g else g.get("momentum", 0.0))
    return lrs, moms, sched.get_last_lr()


@pytest.mark.parametrize("opt_name", ["SGD", "Adam"])
@pytest.mark.parametrize("name,make", SCHEDULES, ids=[s[0] for s in SCHEDULES])
def test_schedule_matches_torch(name, make, opt_name):
    t_lrs, t_moms, t_last = _run(torch, make, opt_name)
    l_lrs, l_moms, l_last = _run(loom, make, opt_name)
    np.testing.assert_allclose(l_lrs, t_lrs, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(l_moms, t_moms, rtol=1e-9, atol=1e-12)
    assert math.isclose(l_last[0], t_last[0], rel_tol=1e-9, abs_tol=1e-12)


def test_scheduler_state_dict_round_trip():
    p = loom.zeros(1, requires_grad=True)
    opt = loom.optim.SGD([p], lr=1.0)
    s = loom.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    for _ in range(5):
        s.step()
    state = s.state_dict()
    opt2 = loom.optim.SGD([p], lr=1.0)
    s2 = loom.optim.lr_scheduler.StepLR(opt2, step_size=2, gamma=0.5)
    s2.load_state_dict(state)
    s.step()
    s2.step()
    assert s.get_last_lr() == s2.get_last_lr() == [0.125]


def _user_schedulers(lib):
    """Schedulers written for PyTorch by subclassing LRScheduler / _LRScheduler and overriding get_lr()."""
    class Warmup(lib.optim.lr_scheduler.LRScheduler):
        def __init__(self, optimizer, warmup):
            self.warmup = warmup
            super().__init__(optimizer)

        def get_lr(self):
            return [b * min(1.0, (self.last_epoch + 1) / self.warmup) for b in self.base_lrs]

    class Chained(lib.optim.lr_scheduler._LRScheduler):  # The chainable form reads the groups' current lr.
        def get_lr(self):
            if self.last_epoch == 0:
                return [g["lr"] for g in self.optimizer.param_groups]
            return [g["lr"] * 0.8 for g in self.optimizer.param_groups]
    return Warmup, Chained


def test_user_scheduler_overriding_get_lr_matches_torch():
    out = []
    for lib in (torch, loom):
        warm_cls, chained_cls = _user_schedulers(lib)
        p = lib.zeros(2, requires_grad=True)
        o1, o2 = lib.optim.SGD([p], lr=0.1), lib.optim.SGD([p], lr=0.1)
        s1, s2 = warm_cls(o1, warmup=4), chained_cls(o2)
        lrs = []
        for _ in range(6):
            o1.step()
            o2.step()
            s1.step()
            s2.step()
            lrs.append((s1.get_last_lr()[0], o2.param_groups[0]["lr"], s1._step_count))
        out.append(lrs)
    np.testing.assert_allclose(np.array(out[1]), np.array(out[0]), rtol=1e-12)


@pytest.mark.parametrize("make", [
    lambda s, o: [s.ExponentialLR(o, 0.9), s.StepLR(o, 3, 0.5)],
    lambda s, o: [s.ConstantLR(o, factor=0.1, total_iters=2), s.ExponentialLR(o, gamma=0.9)],
    lambda s, o: [s.LinearLR(o, start_factor=0.2, total_iters=4), s.MultiStepLR(o, [5, 8], 0.3)],
], ids=["exp-step", "constant-exp", "linear-multistep"])
def test_chained_scheduler_matches_torch(make):
    out = []
    for lib in (torch, loom):
        opt = lib.optim.SGD([lib.zeros(2, requires_grad=True), lib.ones(1, requires_grad=True)], lr=0.5)
        chain = lib.optim.lr_scheduler.ChainedScheduler(make(lib.optim.lr_scheduler, opt))
        lrs = [opt.param_groups[0]["lr"]]
        for _ in range(10):
            opt.step()
            chain.step()
            lrs += [opt.param_groups[0]["lr"], chain.get_last_lr()[0]]
        out.append(lrs)
    np.testing.assert_allclose(out[1], out[0], rtol=1e-9)
