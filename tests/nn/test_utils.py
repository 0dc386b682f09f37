"""loom.nn.utils against torch.nn.utils: clip_grad_norm_ (total norm and scaling), clip_grad_value_,
get_total_norm, parameters_to_vector / vector_to_parameters."""
from __future__ import annotations

import importlib
import math

import numpy as np
import pytest
import torch

import loom
from loom import nn


def _pair(shapes, scale: float, seed: int = 0):
    """The same parameters with the same gradients in torch and loom (one without a gradient)."""
    rng = np.random.default_rng(seed)
    tps, lps = [], []
    for k, shape in enumerate(shapes):
        v = rng.standard_normal(shape).astype(np.float32)
        g = (rng.standard_normal(shape) * scale).astype(np.float32)
        tp, lp = torch.nn.Parameter(torch.from_numpy(v.copy())), nn.Parameter(loom.tensor(v))
        if k != 1:  # Parameter 1 has no gradient and is skipped.
            tp.grad, lp.grad = torch.from_numpy(g.copy()), loom.tensor(g)
        tps.append(tp)
        lps.append(lp)
    return tps, lps


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, math.inf, 0.5])
@pytest.mark.parametrize("scale", [10.0, 0.01])
def test_clip_grad_norm_matches_torch(norm_type, scale):
    shapes = [(4, 3), (5,), (3,), (2, 2, 2)]
    tps, lps = _pair(shapes, scale)
    t_total = torch.nn.utils.clip_grad_norm_(tps, max_norm=1.5, norm_type=norm_type)
    l_total = nn.utils.clip_grad_norm_(lps, max_norm=1.5, norm_type=norm_type)
    assert l_total.shape == () and l_total.dtype is loom.float32
    np.testing.assert_allclose(l_total.item(), t_total.item(), rtol=1e-5)
    for tp, lp in zip(tps, lps):
        if tp.grad is None:
            assert lp.grad is None
            continue
        np.testing.assert_allclose(lp.grad.numpy(), tp.grad.numpy(), rtol=1e-5, atol=1e-7)


def test_clip_grad_norm_single_tensor_and_grad_object_kept():
    p = nn.Parameter(loom.ones(4))
    p.grad = loom.full((4,), 3.0)
    g = p.grad
    total = nn.utils.clip_grad_norm_(p, 3.0)
    assert total.item() == pytest.approx(6.0)
    assert p.grad is g  # Scaled in place.
    assert p.grad.numpy() == pytest.approx(np.full(4, 1.5), rel=1e-5)
    assert nn.utils.clip_grad_norm_([nn.Parameter(loom.ones(2))], 1.0).item() == 0.0  # No gradients at all.


def test_clip_grad_norm_nonfinite():
    p = nn.Parameter(loom.ones(2))
    p.grad = loom.tensor([float("nan"), 1.0])
    with pytest.raises(loom.LoomError, match="non-finite"):
        nn.utils.clip_grad_norm_([p], 1.0, error_if_nonfinite=True)
    total = nn.utils.clip_grad_norm_([p], 1.0)
    assert math.isnan(total.item())


def test_clip_grad_value_matches_torch():
    tps, lps = _pair([(4, 3), (2,), (6,)], 2.0)
    torch.nn.utils.clip_grad_value_(tps, 0.7)
    nn.utils.clip_grad_value_(lps, 0.7)
    for tp, lp in zip(tps, lps):
        if tp.grad is not None:
            np.testing.assert_array_equal(lp.grad.numpy(), tp.grad.numpy())


def test_get_total_norm_matches_torch():
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in [(3, 3), (7,)]]
    want = torch.nn.utils.get_total_norm([torch.from_numpy(a) for a in arrays], norm_type=3.0)
    got = nn.utils.get_total_norm([loom.tensor(a) for a in arrays], norm_type=3.0)
    np.testing.assert_allclose(got.item(), want.item(), rtol=1e-5)


def test_clip_in_a_training_step():
    loom.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1))
    loss = (model(loom.randn(16, 3)) * 100.0).pow(2).mean()
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    after = math.sqrt(sum(float((p.grad * p.grad).sum()) for p in model.parameters()))
    assert after == pytest.approx(0.5, rel=1e-4)


def test_parameters_to_vector_round_trip_matches_torch():
    torch.manual_seed(0)
    tm = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    lm = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    lm.load_state_dict({k: loom.tensor(v.numpy()) for k, v in tm.state_dict().items()})
    tv = torch.nn.utils.parameters_to_vector(tm.parameters())
    lv = nn.utils.parameters_to_vector(lm.parameters())
    np.testing.assert_array_equal(lv.detach().numpy(), tv.detach().numpy())
    new = loom.arange(lv.shape[0], dtype=loom.float32)
    nn.utils.vector_to_parameters(new, lm.parameters())
    torch.nn.utils.vector_to_parameters(torch.arange(tv.shape[0], dtype=torch.float32), tm.parameters())
    for (k, v), (_, w) in zip(lm.state_dict().items(), tm.state_dict().items()):
        np.testing.assert_array_equal(v.numpy(), w.numpy(), err_msg=k)
    with pytest.raises(loom.ShapeError, match="values of the parameters"):
        nn.utils.vector_to_parameters(loom.zeros(3), lm.parameters())


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("side", ["right", "left"])
def test_pad_sequence_matches_torch(batch_first, side):
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((n, 3)).astype(np.float32) for n in (4, 1, 3)]
    want = torch.nn.utils.rnn.pad_sequence([torch.from_numpy(a) for a in arrays], batch_first=batch_first,
                                           padding_value=-1.0, padding_side=side)
    seqs = [loom.tensor(a, requires_grad=True) for a in arrays]
    got = nn.utils.rnn.pad_sequence(seqs, batch_first=batch_first, padding_value=-1.0, padding_side=side)
    np.testing.assert_array_equal(got.detach().numpy(), want.numpy())
    got.sum().backward()
    assert all(s.grad.tolist() == np.ones_like(a).tolist() for s, a in zip(seqs, arrays))
    if side == "right":
        back = nn.utils.rnn.unpad_sequence(got.detach(), [4, 1, 3], batch_first=batch_first)
        for b, a in zip(back, arrays):
            np.testing.assert_array_equal(b.numpy(), a)


def _prune_program(lib):
    """A PyTorch user's pruning session: local, iterative, structured, custom, global, remove, random."""
    prune = importlib.import_module(lib.__name__ + ".nn.utils.prune")
    nn = lib.nn
    w = np.random.default_rng(0).standard_normal((6, 4)).astype(np.float32)
    m = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 3), nn.Conv2d(2, 3, 2))
    with lib.no_grad():
        m[0].weight.copy_(lib.tensor(w))
        m[0].bias.fill_(0.1)
        m[2].weight.copy_(lib.tensor(np.resize(w, (3, 6)) * 1.37 + 0.011))
        m[2].bias.zero_()
        m[3].weight.copy_(lib.tensor(np.resize(w, (3, 2, 2, 2))))
    prune.l1_unstructured(m[0], "weight", amount=0.3)
    out = [m[0].weight, sorted(n for n, _ in m[0].named_parameters()), sorted(m[0].state_dict())]
    prune.l1_unstructured(m[0], "weight", amount=2)  # Among the entries still kept.
    prune.ln_structured(m[2], "weight", amount=1, n=2, dim=0)
    prune.custom_from_mask(m[0], "bias", lib.tensor([1.0, 0, 1, 0, 1, 1]))
    y = m[2](m[1](m[0](lib.tensor(w[:3]))))
    y.sum().backward()
    out += [m[0].weight_mask, m[2].weight, y, m[0].weight_orig.grad, prune.is_pruned(m)]
    prune.global_unstructured([(m[0], "weight"), (m[2], "weight")], pruning_method=prune.L1Unstructured, amount=0.5)
    out += [m[0].weight, m[2].weight]
    prune.remove(m[0], "weight")
    prune.remove(m[0], "bias")
    out += [sorted(n for n, _ in m[0].named_parameters()), m[0].weight, prune.is_pruned(m[0]), prune.is_pruned(m)]
    prune.ln_structured(m[3], "weight", amount=0.34, n=1, dim=1)
    out.append(m[3].weight_mask)
    prune.random_unstructured(m[3], "weight", amount=0.25)
    out.append(int((m[3].weight == 0).sum()))
    return [o.detach().numpy() if hasattr(o, "detach") else o for o in out]


def test_prune_matches_torch():
    import loom.torch as ltorch
    want, got = _prune_program(torch), _prune_program(ltorch)
    for g, w in zip(got, want):
        if isinstance(w, np.ndarray):
            np.testing.assert_allclose(g, w, rtol=1e-6)
        else:
            assert g == w
