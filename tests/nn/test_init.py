"""loom.nn.init: bounds and statistics of every initialiser, PyTorch's gains and fans, and the
default initialisation of each layer (PyTorch's reset_parameters)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

import loom
from loom import nn
from loom.nn import init


def _np(t) -> np.ndarray:
    return t.detach().numpy().astype(np.float64)


def _check_uniform(w, bound: float) -> None:
    a = _np(w)
    assert np.abs(a).max() <= bound * (1 + 1e-6)
    assert abs(a.std() - bound / math.sqrt(3)) < 0.03 * bound / math.sqrt(3)
    assert abs(a.mean()) < 0.03 * bound


def _check_normal(w, std: float, mean: float = 0.0) -> None:
    a = _np(w)
    assert abs(a.std() - std) < 0.03 * std
    assert abs(a.mean() - mean) < 0.03 * std


@pytest.mark.parametrize("name,param", [("linear", None), ("conv2d", None), ("sigmoid", None), ("tanh", None),
                                        ("relu", None), ("leaky_relu", None), ("leaky_relu", 0.2), ("selu", None),
                                        ("conv_transpose1d", None)])
def test_calculate_gain_matches_torch(name, param):
    assert init.calculate_gain(name, param) == pytest.approx(torch.nn.init.calculate_gain(name, param))


def test_calculate_gain_errors():
    with pytest.raises(ValueError, match="unsupported nonlinearity"):
        init.calculate_gain("swish")
    with pytest.raises(ValueError, match="not a valid number"):
        init.calculate_gain("leaky_relu", "x")


@pytest.mark.parametrize("shape", [(5, 3), (8, 4, 3), (6, 2, 3, 3), (2, 3, 1, 2, 2)])
def test_fans_match_torch(shape):
    assert init._calculate_fan_in_and_fan_out(loom.empty(*shape)) == \
        torch.nn.init._calculate_fan_in_and_fan_out(torch.empty(*shape))


def test_fan_needs_2d():
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        init.xavier_uniform_(loom.empty(5))


def test_uniform_normal_constant():
    loom.manual_seed(0)
    w = init.uniform_(loom.empty(200, 200), -0.5, 1.5)
    a = _np(w)
    assert a.min() >= -0.5 and a.max() < 1.5 and abs(a.mean() - 0.5) < 0.01
    _check_normal(init.normal_(loom.empty(200, 200), mean=2.0, std=0.5), 0.5, 2.0)
    assert init.constant_(loom.empty(2, 3), 0.3).tolist() == [[pytest.approx(0.3)] * 3] * 2
    assert init.zeros_(loom.ones(3)).tolist() == [0.0, 0.0, 0.0]
    assert init.ones_(loom.zeros(2)).tolist() == [1.0, 1.0]


def test_in_place_on_parameters_without_history():
    p = nn.Parameter(loom.zeros(3, 4))
    out = init.kaiming_uniform_(p)
    assert out is p and p.requires_grad and p.is_leaf and float(p.abs().sum()) > 0
    # The write is not recorded: a later backward reaches the parameter directly.
    (p * 2).sum().backward()
    assert p.grad.tolist() == [[2.0] * 4] * 3


def test_trunc_normal_matches_distribution():
    loom.manual_seed(0)
    w = init.trunc_normal_(loom.empty(300, 300), mean=0.5, std=1.0, a=-0.5, b=2.0)
    a = _np(w)
    assert a.min() >= -0.5 and a.max() <= 2.0
    dist = stats.truncnorm(-1.0, 1.5, loc=0.5, scale=1.0)
    assert abs(a.mean() - dist.mean()) < 0.01 and abs(a.std() - dist.std()) < 0.01
    assert stats.kstest(a.ravel()[:20000], dist.cdf).pvalue > 1e-3
    tail = _np(init.trunc_normal_(loom.empty(20000), a=3.0, b=4.0))  # Far in the tail: still exact.
    assert tail.min() >= 3.0 and tail.max() <= 4.0
    assert abs(tail.mean() - stats.truncnorm(3.0, 4.0).mean()) < 0.01


def test_xavier_and_kaiming():
    loom.manual_seed(0)
    w = loom.empty(300, 200)
    _check_uniform(init.xavier_uniform_(w, gain=2.0), 2.0 * math.sqrt(6 / 500))
    _check_normal(init.xavier_normal_(w), math.sqrt(2 / 500))
    _check_uniform(init.kaiming_uniform_(w, nonlinearity="relu"), math.sqrt(2) * math.sqrt(3 / 200))
    _check_uniform(init.kaiming_uniform_(w, mode="fan_out", nonlinearity="relu"), math.sqrt(2) * math.sqrt(3 / 300))
    _check_normal(init.kaiming_normal_(w, a=0.1), math.sqrt(2 / 1.01) / math.sqrt(200))
    conv = loom.empty(64, 16, 3, 3)
    _check_normal(init.kaiming_normal_(conv, mode="fan_out", nonlinearity="relu"), math.sqrt(2 / (64 * 9)))
    with pytest.raises(ValueError, match="mode fan_avg not supported"):
        init.kaiming_uniform_(w, mode="fan_avg")
    assert init.kaiming_uniform_(loom.empty(0, 3)).shape == (0, 3)


def test_eye_dirac_orthogonal_match_torch():
    assert np.array_equal(init.eye_(loom.empty(3, 5)).numpy(), torch.nn.init.eye_(torch.empty(3, 5)).numpy())
    for shape, groups in [((4, 4, 3), 1), ((6, 3, 3, 3), 2), ((2, 2, 1, 3, 3), 1)]:
        got = init.dirac_(loom.empty(*shape), groups).numpy()
        want = torch.nn.init.dirac_(torch.empty(*shape), groups).numpy()
        np.testing.assert_array_equal(got, want)
    for shape in [(4, 6), (6, 4), (3, 2, 2)]:
        q = _np(init.orthogonal_(loom.empty(*shape), gain=2.0)).reshape(shape[0], -1)
        small = q @ q.T if q.shape[0] <= q.shape[1] else q.T @ q
        np.testing.assert_allclose(small, 4.0 * np.eye(small.shape[0]), atol=1e-5)
    with pytest.raises(loom.ShapeError, match="2 dimensions"):
        init.eye_(loom.empty(2, 2, 2))


def test_seeded_initialisation_is_reproducible():
    loom.manual_seed(123)
    a = nn.Linear(4, 3)
    loom.manual_seed(123)
    b = nn.Linear(4, 3)
    np.testing.assert_array_equal(_np(a.weight), _np(b.weight))
    np.testing.assert_array_equal(_np(a.bias), _np(b.bias))
    c = nn.Linear(4, 3)
    assert not np.array_equal(_np(a.weight), _np(c.weight))


# ---------------------------------------------------------------- per-layer defaults (PyTorch's reset_parameters)

def test_linear_default_init():
    loom.manual_seed(0)
    m = nn.Linear(400, 300)
    bound = 1 / math.sqrt(400)  # kaiming_uniform_(a=sqrt(5)) gives the same bound as the bias.
    _check_uniform(m.weight, bound)
    b = _np(m.bias)
    assert np.abs(b).max() <= bound and b.std() > 0.4 * bound


def test_conv_default_init():
    loom.manual_seed(0)
    m = nn.Conv2d(32, 64, 5)
    fan_in = 32 * 25
    _check_uniform(m.weight, 1 / math.sqrt(fan_in))
    assert np.abs(_np(m.bias)).max() <= 1 / math.sqrt(fan_in)
    t = nn.ConvTranspose2d(48, 16, 4)  # Weight (in, out, k, k): fan_in = out * k * k.
    _check_uniform(t.weight, 1 / math.sqrt(16 * 16))


def test_norm_embedding_attention_rnn_default_init():
    loom.manual_seed(0)
    bn = nn.BatchNorm2d(5)
    assert bn.weight.tolist() == [1.0] * 5 and bn.bias.tolist() == [0.0] * 5
    assert bn.running_mean.tolist() == [0.0] * 5 and bn.running_var.tolist() == [1.0] * 5
    assert bn.num_batches_tracked.item() == 0 and bn.num_batches_tracked.dtype is loom.int64
    ln = nn.LayerNorm((2, 3))
    assert ln.weight.tolist() == [[1.0] * 3] * 2 and ln.bias.tolist() == [[0.0] * 3] * 2
    emb = nn.Embedding(300, 200, padding_idx=3)
    _check_normal(emb.weight, 1.0)
    assert emb.weight[3].tolist() == [0.0] * 200
    mha = nn.MultiheadAttention(64, 4)
    _check_uniform(mha.in_proj_weight, math.sqrt(6 / (64 + 192)))
    assert float(mha.in_proj_bias.abs().sum()) == 0.0 and float(mha.out_proj.bias.abs().sum()) == 0.0
    _check_uniform(mha.out_proj.weight, 1 / math.sqrt(64))
    lstm = nn.LSTM(100, 50, num_layers=2)
    for p in lstm.parameters():
        assert np.abs(_np(p)).max() <= 1 / math.sqrt(50)
    _check_uniform(lstm.weight_hh_l1, 1 / math.sqrt(50))
    pr = nn.PReLU(3, init=0.1)
    np.testing.assert_allclose(_np(pr.weight), [0.1] * 3, rtol=1e-6)
