"""Parity of the torch.nn.functional ops added for issue 12 (activations, losses, pooling, sampling,
distances, embedding bags) with PyTorch, in every execution mode.

Random ops (gumbel_softmax, rrelu in training, fractional pooling without given samples) are checked
structurally at the bottom of the file.
"""
import numpy as np
import pytest
import torch

import loom
from loom.errors import DTypeError, LoomValueError, ShapeError
from tests.parity.harness import Case, distinct, ints, positive, randn, run_case, uniform


def F(m):
    return m.nn.functional


def _off_grid(*shape, low=-1.2, high=1.2):
    """Grid positions that avoid landing exactly on pixel centres or edges (where the gradient jumps)."""
    return lambda rng: rng.uniform(low, high, shape).astype(np.float32)


def _away_from(*shape, at=0.5, gap=0.05):
    """Normal values kept `gap` away from +-at (the kinks of shrink/threshold activations)."""
    def make(rng):
        v = rng.standard_normal(shape).astype(np.float32)
        near = np.abs(np.abs(v) - at) < gap
        return np.where(near, v + np.sign(v) * 2 * gap, v).astype(np.float32)
    return make


def _label_lists(n, c):
    """Multilabel-margin targets: each row a few class indices, then -1 padding (and junk after it)."""
    def make(rng):
        t = np.full((n, c), -1, np.int64)
        for i in range(n):
            k = rng.integers(0, c)
            t[i, :k] = rng.permutation(c)[:k]
            if k + 1 < c:
                t[i, k + 1:] = rng.integers(0, c, c - k - 1)
        return t
    return make


def _unpool(nsp):
    def body(m, x):
        f = F(m)
        pool = getattr(f, f"max_pool{nsp}d")
        y, i = pool(x, 2, return_indices=True)
        return getattr(f, f"max_unpool{nsp}d")(y, i, 2)
    return body


def _ctc(reduction, lengths=(7, 6, 4), tlens=(3, 2, 2), zero_infinity=False):
    def body(m, x, tg):
        return F(m).ctc_loss(x.log_softmax(2), tg, list(lengths), list(tlens), reduction=reduction,
                             zero_infinity=zero_infinity)
    return body


def _ctc_concat(m, x, tg):
    return F(m).ctc_loss(x.log_softmax(2), tg, [7, 5], [3, 2])


ACTIVATIONS = [
    Case("hardshrink", lambda m, x: F(m).hardshrink(x), (_away_from(4, 5),), second_order=True),
    Case("hardshrink_lambd", lambda m, x: F(m).hardshrink(x, 1.0), (_away_from(4, 5, at=1.0),)),
    Case("softshrink", lambda m, x: F(m).softshrink(x, 0.3), (_away_from(4, 5, at=0.3),), second_order=True),
    Case("threshold", lambda m, x: F(m).threshold(x, 0.5, -2.0), (_away_from(3, 6),), second_order=True),
    Case("threshold_inplace", lambda m, x: F(m).threshold_(x * 1.0, 0.5, -2.0), (_away_from(3, 6),)),
    Case("prelu_channels", lambda m, x, w: F(m).prelu(x, w), (randn(2, 3, 4), uniform(3)), second_order=True),
    Case("prelu_shared", lambda m, x, w: F(m).prelu(x, w), (randn(2, 3, 4, 2), uniform(1))),
    Case("prelu_1d", lambda m, x, w: F(m).prelu(x, w), (randn(5), uniform(1))),
    Case("rrelu_eval", lambda m, x: F(m).rrelu(x, 0.1, 0.3), (randn(4, 5),)),
    Case("relu_inplace_fn", lambda m, x: F(m).relu_(x * 1.0), (randn(4, 5),)),
    Case("elu_inplace_fn", lambda m, x: F(m).elu_(x * 1.0, 0.7), (randn(4, 5),)),
    Case("selu_inplace_fn", lambda m, x: F(m).selu_(x * 1.0), (randn(4, 5),)),
    Case("celu_inplace_fn", lambda m, x: F(m).celu_(x * 1.0, 1.5), (randn(4, 5),)),
    Case("leaky_relu_inplace_fn", lambda m, x: F(m).leaky_relu_(x * 1.0, 0.2), (randn(4, 5),)),
    Case("hardtanh_inplace_fn", lambda m, x: F(m).hardtanh_(x * 1.0, -0.5, 0.5), (_away_from(4, 5),)),
]

LOSSES = [
    Case("multi_margin", lambda m, x, t: F(m).multi_margin_loss(x, t), (randn(5, 4), ints(5, high=4))),
    Case("multi_margin_p2_weight", lambda m, x, t, w: F(m).multi_margin_loss(x, t, p=2, margin=0.7, weight=w),
         (randn(5, 4), ints(5, high=4), positive(4)), grad_inputs=(0,)),
    Case("multi_margin_none", lambda m, x, t: F(m).multi_margin_loss(x, t, reduction="none"),
         (randn(5, 4), ints(5, high=4))),
    Case("multi_margin_1d", lambda m, x, t: F(m).multi_margin_loss(x, t, reduction="sum"),
         (randn(4), ints(1, high=4))),
    Case("multilabel_margin", lambda m, x, t: F(m).multilabel_margin_loss(x, t), (randn(4, 5), _label_lists(4, 5))),
    Case("multilabel_margin_none", lambda m, x, t: F(m).multilabel_margin_loss(x, t, reduction="none"),
         (randn(6, 3), _label_lists(6, 3))),
    Case("multilabel_margin_1d", lambda m, x, t: F(m).multilabel_margin_loss(x, t),
         (randn(5), lambda rng: np.array([3, 0, -1, 1, 2], np.int64))),
    Case("triplet_with_distance", lambda m, a, p, n: F(m).triplet_margin_with_distance_loss(a, p, n),
         (randn(4, 6), randn(4, 6), randn(4, 6)), second_order=True),
    Case("triplet_with_distance_cosine_swap",
         lambda m, a, p, n: F(m).triplet_margin_with_distance_loss(
             a, p, n, distance_function=lambda u, v: 1.0 - F(m).cosine_similarity(u, v), margin=0.5, swap=True,
             reduction="none"),
         (randn(4, 6), randn(4, 6), randn(4, 6))),
    Case("ctc_mean", _ctc("mean"), (randn(7, 3, 5), ints(3, 3, low=1, high=5))),
    Case("ctc_sum", _ctc("sum"), (randn(7, 3, 5), ints(3, 3, low=1, high=5))),
    Case("ctc_none_repeats", _ctc("none"), (randn(7, 3, 5), lambda rng: np.array([[2, 2, 3], [1, 1, 1], [4, 4, 0]]))),
    Case("ctc_concatenated_targets", _ctc_concat, (randn(7, 2, 4), ints(5, low=1, high=4))),
    Case("ctc_impossible_zero_infinity", _ctc("none", (2, 7, 5), (3, 2, 0), zero_infinity=True),
         (randn(7, 3, 5), lambda rng: np.array([[1, 1, 2], [2, 3, 3], [1, 1, 1]]))),
    Case("ctc_short", _ctc("sum", (4, 3, 4), (2, 1, 2)), (randn(4, 3, 3), ints(3, 2, low=1, high=3))),
]

POOLING = [
    Case("lp_pool1d", lambda m, x: F(m).lp_pool1d(x, 2, 3, 2), (randn(2, 3, 9),)),
    Case("lp_pool2d_p3", lambda m, x: F(m).lp_pool2d(x, 3, (2, 3)), (positive(2, 2, 6, 7),), second_order=True),
    Case("lp_pool2d_p1_ceil", lambda m, x: F(m).lp_pool2d(x, 1, 2, ceil_mode=True), (positive(1, 2, 5, 5),)),
    Case("lp_pool3d", lambda m, x: F(m).lp_pool3d(x, 2, 2), (randn(1, 2, 4, 4, 4),)),
    Case("max_unpool1d", _unpool(1), (distinct(2, 3, 8),)),
    Case("max_unpool2d", _unpool(2), (distinct(2, 2, 6, 6),), second_order=True),
    Case("max_unpool3d", _unpool(3), (distinct(1, 2, 4, 4, 4),)),
    Case("max_unpool2d_output_size",
         lambda m, x: F(m).max_unpool2d(*F(m).max_pool2d(x, 2, return_indices=True), 2, output_size=(7, 7)),
         (distinct(1, 2, 7, 7),)),
    Case("max_pool2d_with_indices", lambda m, x: F(m).max_pool2d_with_indices(x, 3, 2, 1),
         (distinct(1, 2, 7, 7),)),
    Case("adaptive_max_pool1d_with_indices", lambda m, x: F(m).adaptive_max_pool1d_with_indices(x, 3),
         (distinct(2, 3, 8),)),
    Case("fractional_max_pool2d", lambda m, x, s: F(m).fractional_max_pool2d(
        x, 3, output_size=(4, 5), return_indices=True, _random_samples=s),
        (distinct(2, 3, 9, 10), uniform(2, 3, 2, low=0.0, high=1.0)), grad_inputs=(0,)),
    Case("fractional_max_pool2d_ratio", lambda m, x, s: F(m).fractional_max_pool2d(
        x, (2, 3), output_ratio=(0.5, 0.6), _random_samples=s),
        (distinct(1, 2, 8, 10), uniform(1, 2, 2, low=0.0, high=1.0)), grad_inputs=(0,)),
    Case("fractional_max_pool3d", lambda m, x, s: F(m).fractional_max_pool3d(
        x, 2, output_size=(3, 4, 3), return_indices=True, _random_samples=s),
        (distinct(1, 2, 6, 7, 5), uniform(1, 2, 3, low=0.0, high=1.0)), grad_inputs=(0,)),
    Case("local_response_norm", lambda m, x: F(m).local_response_norm(x, 3), (randn(2, 5, 4, 4),),
         second_order=True),
    Case("local_response_norm_3d_even", lambda m, x: F(m).local_response_norm(x, 4, 0.1, 0.5, 2.0),
         (randn(2, 6, 5),)),
    Case("local_response_norm_5d", lambda m, x: F(m).local_response_norm(x, 2), (randn(1, 3, 2, 3, 2),)),
]

SAMPLING = [
    Case(f"grid_sample_{mode}_{pad}_{'align' if align else 'edges'}",
         lambda m, x, g, mode=mode, pad=pad, align=align: F(m).grid_sample(x, g, mode, pad, align),
         (randn(2, 3, 5, 6), _off_grid(2, 4, 7, 2)), rtol=1e-4, atol=2e-5,
         reason="bicubic: sixteen weighted taps" if mode == "bicubic" else "")
    for mode in ("bilinear", "nearest", "bicubic") for pad in ("zeros", "border", "reflection")
    for align in (False, True)
] + [
    Case(f"grid_sample_3d_{mode}_{pad}",
         lambda m, x, g, mode=mode, pad=pad: F(m).grid_sample(x, g, mode, pad, False),
         (randn(1, 2, 4, 5, 3), _off_grid(1, 3, 2, 4, 3)))
    for mode in ("bilinear", "nearest") for pad in ("zeros", "reflection")
] + [
    Case("affine_grid_2d", lambda m, t: F(m).affine_grid(t, (2, 3, 5, 4), align_corners=False),
         (randn(2, 2, 3),)),
    Case("affine_grid_2d_align", lambda m, t: F(m).affine_grid(t, (1, 1, 3, 6), align_corners=True),
         (randn(1, 2, 3),)),
    Case("affine_grid_3d", lambda m, t: F(m).affine_grid(t, (2, 1, 3, 4, 5), align_corners=False),
         (randn(2, 3, 4),)),
    Case("affine_then_grid_sample",
         lambda m, x, t: F(m).grid_sample(x, F(m).affine_grid(t, (2, 3, 4, 4), align_corners=False),
                                          align_corners=False),
         (randn(2, 3, 6, 6), lambda rng: (np.eye(2, 3)[None] * 0.8 + rng.uniform(-0.2, 0.2, (2, 2, 3)))
          .astype(np.float32))),
    Case("channel_shuffle", lambda m, x: F(m).channel_shuffle(x, 3), (randn(2, 6, 3, 2),)),
    Case("native_channel_shuffle", lambda m, x: F(m).native_channel_shuffle(x, 2), (randn(2, 4, 5),), grad=False,
         reason="PyTorch has no derivative for native_channel_shuffle"),
]

DISTANCES = [
    Case("pdist_p2", lambda m, x: F(m).pdist(x), (randn(5, 3),)),
    Case("pdist_p1", lambda m, x: F(m).pdist(x, 1), (randn(4, 6),)),
    Case("pdist_p3", lambda m, x: F(m).pdist(x, 3.0), (randn(4, 2),)),
    Case("pdist_inf", lambda m, x: F(m).pdist(x, float("inf")), (distinct(5, 3),)),
    Case("cdist_p2_direct", lambda m, a, b: m.cdist(a, b), (randn(2, 4, 3), randn(2, 5, 3))),
    Case("cdist_p2_mm", lambda m, a, b: m.cdist(a, b), (randn(30, 3), randn(6, 3)), rtol=1e-4, atol=1e-4,
         reason="the matmul path forms |a|^2 + |b|^2 - 2ab, with cancellation"),
    Case("cdist_p1", lambda m, a, b: m.cdist(a, b, p=1), (randn(3, 4), randn(5, 4))),
    Case("cdist_p_half", lambda m, a, b: m.cdist(a, b, p=0.5), (randn(3, 4), randn(5, 4)), rtol=1e-4),
    Case("cdist_inf", lambda m, a, b: m.cdist(a, b, p=float("inf")), (distinct(3, 4), distinct(2, 4))),
]


def _bag(mode, padding_idx=None, last=False, psw=False):
    def body(m, w, idx, off, *rest):
        kw = {"per_sample_weights": rest[0]} if psw else {}
        return F(m).embedding_bag(idx, w, off, mode=mode, padding_idx=padding_idx, include_last_offset=last, **kw)
    return body


_IDX = lambda rng: rng.integers(0, 10, 12).astype(np.int64)  # noqa: E731
_OFF = lambda rng: np.array([0, 3, 3, 7], np.int64)  # noqa: E731 - bag 1 is empty.
_OFF_LAST = lambda rng: np.array([0, 3, 3, 7, 12], np.int64)  # noqa: E731

BAGS = [
    Case(f"embedding_bag_{mode}{'_pad' if pad is not None else ''}", _bag(mode, pad),
         (randn(10, 4), _IDX, _OFF)) for mode in ("sum", "mean", "max") for pad in (None, 2)
] + [
    Case("embedding_bag_include_last_offset", _bag("mean", last=True), (randn(10, 4), _IDX, _OFF_LAST)),
    Case("embedding_bag_per_sample_weights", _bag("sum", psw=True), (randn(10, 4), _IDX, _OFF, randn(12))),
    Case("embedding_bag_2d", lambda m, w, idx: F(m).embedding_bag(idx, w, mode="mean", padding_idx=1),
         (randn(10, 3), ints(4, 5, high=10))),
    Case("embedding_bag_2d_max", lambda m, w, idx: F(m).embedding_bag(idx, w, mode="max"),
         (distinct(10, 3), ints(4, 5, high=10))),
]

CASES = ACTIVATIONS + LOSSES + POOLING + SAMPLING + DISTANCES + BAGS


# ---------------------------------------------------------------- random ops

def test_gumbel_softmax_soft_and_hard():
    f = loom.nn.functional
    loom.manual_seed(3)
    logits = loom.randn(64, 5, requires_grad=True)
    soft = f.gumbel_softmax(logits, tau=0.5)
    np.testing.assert_allclose(soft.detach().numpy().sum(-1), 1.0, rtol=1e-5)
    assert (soft.detach().numpy() > 0).all()
    hard = f.gumbel_softmax(logits, hard=True, dim=-1)
    h = hard.detach().numpy()
    assert set(np.unique(h).tolist()) <= {0.0, 1.0} and (h.sum(-1) == 1).all()
    assert len(set(h.argmax(-1).tolist())) > 1  # The noise really varies between rows.
    # Straight-through: the gradient of the hard sample is that of the soft sample drawn with the same noise.
    loom.manual_seed(7)
    g_hard = loom.autograd.grad((f.gumbel_softmax(logits, hard=True) * loom.arange(5.0)).sum(), logits)[0]
    loom.manual_seed(7)
    g_soft = loom.autograd.grad((f.gumbel_softmax(logits) * loom.arange(5.0)).sum(), logits)[0]
    np.testing.assert_allclose(g_hard.numpy(), g_soft.numpy(), rtol=1e-5, atol=1e-7)


def test_gumbel_softmax_samples_follow_the_softmax():
    f = loom.nn.functional
    loom.manual_seed(0)
    logits = loom.tensor([[1.0, 0.0, -1.0]]).expand(20000, 3)
    freq = f.gumbel_softmax(logits, hard=True).numpy().mean(0)
    want = np.exp([1.0, 0.0, -1.0]) / np.exp([1.0, 0.0, -1.0]).sum()
    np.testing.assert_allclose(freq, want, atol=0.015)


def test_rrelu_training_slopes_lie_in_range():
    loom.manual_seed(1)
    x = -loom.rand(5000) - 0.5
    y = loom.nn.functional.rrelu(x, 0.1, 0.3, training=True)
    slope = (y / x).numpy()
    assert slope.min() >= 0.1 - 1e-6 and slope.max() <= 0.3 + 1e-6 and slope.std() > 0.03
    pos = loom.rand(10) + 0.1
    np.testing.assert_array_equal(loom.nn.functional.rrelu(pos, training=True).numpy(), pos.numpy())


def test_fractional_max_pool_draws_its_own_samples():
    loom.manual_seed(4)
    x = loom.randn(2, 3, 11, 11)
    a = loom.nn.functional.fractional_max_pool2d(x, 2, output_size=5)
    assert a.shape == (2, 3, 5, 5)
    # Every output is the max of some 2x2 window of its channel.
    windows = torch.nn.functional.max_pool2d(torch.from_numpy(x.numpy()), 2, 1).numpy()
    got = a.numpy()
    for n in range(2):
        for c in range(3):
            assert np.isin(got[n, c], windows[n, c]).all()


# ---------------------------------------------------------------- call-time errors

ERRORS = [
    (DTypeError, r"hardshrink: expected a floating point input, got int64",
     lambda f: f.hardshrink(loom.tensor([1, 2]))),
    (ShapeError, r"prelu: weight of 2 elements does not match the 3 channels of input \[4, 3\]",
     lambda f: f.prelu(loom.randn(4, 3), loom.ones(2))),
    (LoomValueError, r"multi_margin_loss: only p == 1 and p == 2 are supported, got p=3",
     lambda f: f.multi_margin_loss(loom.randn(2, 3), loom.tensor([0, 1]), p=3)),
    (ShapeError, r"multilabel_margin_loss: target \[2, 4\] does not fit input \[2, 3\]",
     lambda f: f.multilabel_margin_loss(loom.randn(2, 3), loom.zeros(2, 4, dtype=loom.int64))),
    (LoomValueError, r"ctc_loss: input_lengths \[9\] must lie in \[0, 5\]",
     lambda f: f.ctc_loss(loom.randn(5, 1, 3).log_softmax(2), loom.tensor([[1, 2]]), [9], [2])),
    (ShapeError, r"grid_sample: grid \[1, 3, 3, 3\] does not fit input \[1, 2, 4, 4\]",
     lambda f: f.grid_sample(loom.randn(1, 2, 4, 4), loom.zeros(1, 3, 3, 3))),
    (LoomValueError, r"grid_sample: mode must be 'bilinear', 'nearest' or 'bicubic', got 'area'",
     lambda f: f.grid_sample(loom.randn(1, 2, 4, 4), loom.zeros(1, 3, 3, 2), mode="area")),
    (ShapeError, r"affine_grid: theta \[1, 2, 2\] must be \[1, 2, 3\]",
     lambda f: f.affine_grid(loom.randn(1, 2, 2), (1, 1, 4, 4))),
    (LoomValueError, r"channel_shuffle: 5 channels of input \[1, 5, 2\] cannot be split into 2 groups",
     lambda f: f.channel_shuffle(loom.randn(1, 5, 2), 2)),
    (ShapeError, r"max_unpool2d: input \[1, 1, 2, 2\] and indices \[1, 1, 2, 3\] must have the same shape",
     lambda f: f.max_unpool2d(loom.randn(1, 1, 2, 2), loom.zeros(1, 1, 2, 3, dtype=loom.int64), 2)),
    (ShapeError, r"fractional_max_pool2d: output size \[6, 6\] with kernel \[3, 3\] is too large",
     lambda f: f.fractional_max_pool2d(loom.randn(1, 1, 7, 7), 3, output_size=6)),
    (ShapeError, r"local_response_norm: expected an input of 3 or more dims",
     lambda f: f.local_response_norm(loom.randn(3, 4), 2)),
    (LoomValueError, r"embedding_bag: per_sample_weights are only supported with mode='sum'",
     lambda f: f.embedding_bag(loom.tensor([0, 1]), loom.randn(3, 2), loom.tensor([0]),
                               per_sample_weights=loom.ones(2))),
    (ShapeError, r"pdist: expected a 2-d \(N, M\) input, got \[2, 3, 4\]", lambda f: f.pdist(loom.randn(2, 3, 4))),
    (ShapeError, r"cdist: x1 \[3, 4\] and x2 \[2, 5\] must be", lambda f: loom.cdist(loom.randn(3, 4),
                                                                                 loom.randn(2, 5))),
]


@pytest.mark.parametrize("err,pattern,call", ERRORS, ids=[e[1][:40] for e in ERRORS])
def test_errors_name_the_op_and_shapes(err, pattern, call):
    with pytest.raises(err, match=pattern):
        call(loom.nn.functional)


def test_new_functionals_stay_lazy():
    f = loom.nn.functional
    x = loom.randn(1, 2, 6, 6)
    ys = [f.grid_sample(x, loom.zeros(1, 2, 2, 2), align_corners=False), f.local_response_norm(x, 3),
          f.lp_pool2d(x, 2, 2), f.hardshrink(x), f.channel_shuffle(x, 2)]
    assert all(y._node.buffer is None for y in ys)


def _offs(*ends):
    return lambda rng: np.array(ends, np.int32)


def _mha(m, q, k, v, w_in, b_in, w_out, b_out):
    out, weights = F(m).multi_head_attention_forward(q, k, v, 8, 2, w_in, b_in, None, None, False, 0.0, w_out, b_out,
                                                     training=False)
    return out, weights


OTHERS = [
    Case("grouped_mm_2d_3d", lambda m, a, b, o: F(m).grouped_mm(a, b, offs=o),
         (randn(16, 8), randn(2, 8, 4), _offs(5, 16))),
    Case("grouped_mm_3d_3d", lambda m, a, b: F(m).grouped_mm(a, b), (randn(2, 4, 8), randn(2, 8, 4))),
    Case("grouped_mm_3d_2d", lambda m, a, b, o: F(m).grouped_mm(a, b, offs=o),
         (randn(2, 4, 8), randn(8, 16), _offs(8, 16))),
    Case("grouped_mm_2d_2d", lambda m, a, b, o: F(m).grouped_mm(a, b, offs=o),
         (randn(4, 16), randn(16, 8), _offs(4, 16))),
    Case("conv_tbc", lambda m, x, w, b: F(m).conv_tbc(x, w, b, 1), (randn(6, 2, 3), randn(3, 3, 4), randn(4))),
    Case("multi_head_attention_forward", _mha,
         (randn(5, 2, 8), randn(4, 2, 8), randn(4, 2, 8), randn(24, 8), randn(24), randn(8, 8), randn(8))),
    Case("linear_cross_entropy", lambda m, x, w, t: F(m).linear_cross_entropy(x, w, t, label_smoothing=0.1),
         (randn(6, 4), randn(5, 4), ints(6, high=5)), second_order=True),
    Case("linear_cross_entropy_kdim", lambda m, x, w, b, t: F(m).linear_cross_entropy(x, w, t, linear_bias=b,
                                                                                      reduction="none"),
         (randn(6, 4), randn(5, 3, 4), randn(5, 3), ints(6, 3, high=5))),
]
CASES += OTHERS


@pytest.mark.parametrize("case", CASES, ids=str)
def test_parity(case, mode):
    run_case(case, mode)


def test_case_count():
    assert len(CASES) >= 90
    assert len({c.name for c in CASES}) == len(CASES)
