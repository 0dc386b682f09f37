"""Adafactor, Muon and SparseAdam follow torch.optim step for step; swap_in_optimizer_params_and_state as torch's."""
import numpy as np
import pytest
import torch

import loom
import loom.nn as nn
import loom.nn.functional as F
from tests.optim.test_new_optimizers import _arrays, _assert_close, _problem, _step
from tests.optim.test_new_optimizers import test_state_dict_moves_between_torch_and_loom as _state_dict_round_trip

CONFIGS = [
    ("Adafactor", dict()),
    ("Adafactor", dict(lr=0.05, weight_decay=0.1, d=1.5, beta2_decay=-0.5)),
    ("Adafactor", dict(lr=0.05, eps=(1e-4, 1e-2), maximize=True)),
    ("Muon", dict(lr=0.02)),
    ("Muon", dict(lr=0.02, nesterov=False, adjust_lr_fn="match_rms_adamw", weight_decay=0.01)),
    ("Muon", dict(lr=0.05, momentum=0.5, ns_steps=3, ns_coefficients=(2.0, -1.5, 0.5))),
]


@pytest.mark.parametrize("name,kw", CONFIGS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CONFIGS)])
def test_twenty_steps_match_torch(name, kw):
    arrays = _arrays()
    tp, tloss = _problem(torch, arrays)
    lp, lloss = _problem(loom, arrays)
    if name == "Muon":  # 2-d parameters only; the bias is left alone in both.
        tp, lp = tp[:1], lp[:1]
    topt = getattr(torch.optim, name)(tp, **kw)
    lopt = getattr(loom.optim, name)(lp, **kw)
    for _ in range(20):
        _step(topt, tloss)
        _step(lopt, lloss)
    _assert_close(lp, tp)
    for lpar, tpar in zip(lp, tp):
        lstate, tstate = lopt.state[lpar], topt.state[tpar]
        assert set(lstate) == set(tstate)
        for k, v in tstate.items():
            np.testing.assert_allclose(lstate[k].numpy(), v.numpy(), rtol=1e-5, atol=1e-6, err_msg=k)


def test_adafactor_state_dict_moves_between_torch_and_loom():
    _state_dict_round_trip("Adafactor", dict(lr=0.05, weight_decay=0.01))


def test_adafactor_factors_the_last_two_dims_of_a_3d_parameter():
    rng = np.random.default_rng(3)
    w0 = rng.standard_normal((2, 4, 3)).astype(np.float32)
    x = rng.standard_normal((2, 5, 4)).astype(np.float32)
    out = []
    for lib in (torch, loom):
        w = lib.tensor(w0, requires_grad=True)
        opt = lib.optim.Adafactor([w], lr=0.05)
        for _ in range(20):
            opt.zero_grad()
            (lib.tanh(lib.tensor(x) @ w) ** 2).sum().backward()
            opt.step()
        out.append((w, opt.state[w]))
    (tw, tstate), (lw, lstate) = out
    np.testing.assert_allclose(lw.detach().numpy(), tw.detach().numpy(), rtol=1e-5, atol=1e-6)
    assert tuple(lstate["row_var"].shape) == (2, 4, 1) and tuple(lstate["col_var"].shape) == (2, 1, 3)
    np.testing.assert_allclose(lstate["col_var"].numpy(), tstate["col_var"].numpy(), rtol=1e-5)


def _embedding_problem(lib, sparse):
    rng = np.random.default_rng(5)
    emb = lib.nn.Embedding(10, 4, sparse=sparse) if lib is torch else lib.nn.Embedding(10, 4)
    with lib.no_grad():
        emb.weight.copy_(lib.tensor(rng.standard_normal((10, 4)).astype(np.float32)))
    batches = [rng.integers(0, 6, 5) for _ in range(20)]  # Rows 6..9 are never looked up.
    targets = rng.standard_normal((5, 4)).astype(np.float32)
    return emb, batches, targets


def test_sparse_adam_matches_torch_on_sparse_embedding_gradients():
    temb, batches, targets = _embedding_problem(torch, True)
    lemb, _, _ = _embedding_problem(loom, False)
    topt = torch.optim.SparseAdam(list(temb.parameters()), lr=0.05)
    lopt = loom.optim.SparseAdam(list(lemb.parameters()), lr=0.05)
    for idx in batches:
        for lib, emb, opt in ((torch, temb, topt), (loom, lemb, lopt)):
            opt.zero_grad()
            ((emb(lib.tensor(idx)) - lib.tensor(targets)) ** 2).sum().backward()
            opt.step()
    np.testing.assert_allclose(lemb.weight.detach().numpy(), temb.weight.detach().numpy(), rtol=1e-5, atol=1e-6)
    for k in ("exp_avg", "exp_avg_sq"):  # Untouched rows keep zero moments, as torch's sparse update leaves them.
        np.testing.assert_allclose(lopt.state[lemb.weight][k].numpy(), topt.state[temb.weight][k].numpy(),
                                   rtol=1e-5, atol=1e-7)
    assert float(lopt.state[lemb.weight]["step"]) == topt.state[temb.weight]["step"] == 20


def test_sparse_adam_on_a_vector_moves_only_touched_elements():
    w = loom.tensor([1.0, 2.0, 3.0], requires_grad=True)
    opt = loom.optim.SparseAdam([w], lr=0.1)
    w.grad = loom.tensor([0.0, 1.0, 0.0])
    opt.step()
    np.testing.assert_allclose(w.detach().numpy(), [1.0, 1.9, 3.0], rtol=1e-6)


def _train(traced, name, kw, steps=4):
    loom.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3, bias=False))
    opt = getattr(loom.optim, name)(model.parameters() if name != "Muon" else
                                    [p for p in model.parameters() if p.ndim == 2], **kw)

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


@pytest.mark.parametrize("name,kw", [("Adafactor", dict(lr=0.05, weight_decay=0.01)), ("Muon", dict(lr=0.05)),
                                     ("SparseAdam", dict(lr=0.05))])
def test_traced_step_equals_eager(name, kw):
    el, ep, _ = _train(False, name, kw)
    tl, tp, fn = _train(True, name, kw)
    np.testing.assert_allclose(tl, el, rtol=1e-6)
    for a, b in zip(tp, ep):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert fn.trace_count == 1


@pytest.mark.parametrize("bad, match", [
    (lambda p: loom.optim.Adafactor(p, lr=-1.0), "invalid lr"),
    (lambda p: loom.optim.Adafactor(p, beta2_decay=0.5), "beta2_decay"),
    (lambda p: loom.optim.Adafactor(p, d=0.5), "clipping threshold"),
    (lambda p: loom.optim.Adafactor(p, eps=(-1.0, 1e-3)), "epsilon1"),
    (lambda p: loom.optim.Muon(p, adjust_lr_fn="nope"), "adjust_lr_fn"),
    (lambda p: loom.optim.Muon(p, momentum=-0.1), "momentum"),
    (lambda p: loom.optim.Muon([loom.ones(3, requires_grad=True)]), r"only 2-d parameters.*\(3,\)"),
    (lambda p: loom.optim.SparseAdam(p, lr=0.0), "learning rate"),
    (lambda p: loom.optim.SparseAdam(p, betas=(0.9, 1.0)), "betas"),
])
def test_bad_arguments_raise(bad, match):
    with pytest.raises(loom.LoomError, match=match):
        bad([loom.ones(2, 2, requires_grad=True)])


# ------------------------------------------------------------------ swap_in_optimizer_params_and_state

def _swap_run(lib):
    arrays = _arrays()
    params, loss_fn = _problem(lib, arrays)
    opt = lib.optim.Adam(params, lr=0.01)
    for _ in range(3):
        _step(opt, loss_fn)
    saved = opt.state_dict()
    other, other_loss = _problem(lib, {**arrays, "w": arrays["w"] * 2.0})
    with lib.no_grad():  # The swapped-in state is a copy; its tensors are updated in place within the block.
        state = {"state": {i: {k: v.clone() for k, v in st.items()} for i, st in saved["state"].items()},
                 "param_groups": [{**g, "lr": 0.1} for g in saved["param_groups"]]}
    other_loss().backward()
    live_before = [p.detach().clone() for p in params]
    with lib.optim.swap_in_optimizer_params_and_state(opt, {"w": other[0], "b": other[1]}, state):
        assert opt.param_groups[0]["params"][0] is other[0] and opt.param_groups[0]["lr"] == 0.1
        opt.step()
    assert opt.param_groups[0]["params"][0] is params[0] and opt.param_groups[0]["lr"] == 0.01
    for a, b in zip(params, live_before):
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())
    return other, state


def test_swap_in_steps_the_given_params_and_state_then_restores():
    tother, tstate = _swap_run(torch)
    lother, lstate = _swap_run(loom)
    _assert_close(lother, tother)
    for i, st in tstate["state"].items():
        for k, v in st.items():
            np.testing.assert_allclose(lstate["state"][i][k].numpy(), v.numpy(), rtol=1e-5, atol=1e-7, err_msg=k)


def test_swap_in_checks_its_arguments():
    w = loom.ones(2, requires_grad=True)
    opt = loom.optim.SGD([w], lr=0.1, momentum=0.9)
    with pytest.raises(loom.LoomError, match="not initialised"):
        with loom.optim.swap_in_optimizer_params_and_state(opt, {"w": w}, opt.state_dict()):
            pass
    (w * w).sum().backward()
    opt.step()
    sd = opt.state_dict()
    bad_groups = {"state": sd["state"], "param_groups": [{**sd["param_groups"][0], "extra": 1}]}
    with pytest.raises(loom.LoomError, match=r"keys differ.*extra"):
        with loom.optim.swap_in_optimizer_params_and_state(opt, {"w": w}, bad_groups):
            pass
    with pytest.raises(loom.LoomError, match="ids \\[7\\]"):
        with loom.optim.swap_in_optimizer_params_and_state(opt, {"w": w}, {**sd, "state": {7: {}}}):
            pass
    with pytest.raises(loom.LoomError, match="fewer"):
        with loom.optim.swap_in_optimizer_params_and_state(opt, {}, sd):
            pass


@pytest.mark.parametrize("name", ["loom.optim.algorithms", "loom.optim.swap"])
def test_docstring_examples(name):
    import doctest
    import importlib
    result = doctest.testmod(importlib.import_module(name), extraglobs={"loom": loom, "np": np},
                             optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
