"""Parity of loom.nn.functional's composites (softmax, norms, losses, attention...) with PyTorch.

Dropout draws its own random masks, so it is tested statistically and
structurally at the bottom of this file rather than through the harness.
"""
import math

import numpy as np
import pytest

import loom
from loom.errors import DTypeError, LoomIndexError, ShapeError
from tests.parity.harness import Case, distinct, ints, positive, randn, run_case, uniform


def F(m):
    return m.nn.functional


def _probs(*shape, axis=1):
    """Rows of probabilities that sum to 1 along `axis` (class-probability targets)."""
    def make(rng):
        e = np.exp(rng.standard_normal(shape))
        return (e / e.sum(axis=axis, keepdims=True)).astype(np.float32)
    return make


def _targets(*shape, classes, ignore=None, p_ignore=0.3):
    """Class indices in [0, classes), some set to `ignore`."""
    def make(rng):
        t = rng.integers(0, classes, shape)
        if ignore is not None:
            t = np.where(rng.random(shape) < p_ignore, ignore, t)
        return t.astype(np.int64)
    return make


def _signs(*shape):
    return lambda rng: np.where(rng.random(shape) < 0.5, -1.0, 1.0).astype(np.float32)


def _bn_train(m, x, w, b, momentum=0.1):
    rm, rv = m.zeros(x.shape[1]), m.ones(x.shape[1])
    y = F(m).batch_norm(x, rm, rv, w, b, training=True, momentum=momentum)
    return y, rm, rv


def _in_train(m, x):
    rm, rv = m.zeros(x.shape[1]), m.ones(x.shape[1])
    return F(m).instance_norm(x, rm, rv, use_input_stats=True, momentum=0.2), rm, rv


def _emb_max_norm(m, idx, w):
    y = F(m).embedding(idx, w, max_norm=1.0)
    return y, w.detach()


def _bool_mask_dead_row(m, q, k, v):
    mask = m.tensor([[True, False, True, True], [False, False, False, False], [True, True, False, True]])
    return F(m).scaled_dot_product_attention(q, k, v, attn_mask=mask)


ACTIVATIONS = ["relu", "relu6", "elu", "selu", "celu", "gelu", "silu", "mish", "softplus", "softsign",
               "hardtanh", "hardsigmoid", "hardswish", "logsigmoid", "tanhshrink", "sigmoid", "tanh"]

CASES = [
    # ------------------------------------------------------------ softmax family
    Case("softmax_dim1", lambda m, x: F(m).softmax(x, 1), (randn(3, 5),), second_order=True),
    Case("softmax_neg_dim", lambda m, x: F(m).softmax(x, -2), (randn(2, 3, 4),)),
    Case("softmax_method_non_contiguous_t", lambda m, x: x.t().softmax(0), (randn(3, 5),)),
    Case("softmax_method_strided", lambda m, x: x[:, ::2].softmax(-1), (randn(4, 7),)),
    Case("softmax_dtype_float64", lambda m, x: F(m).softmax(x, 1, dtype=m.float64), (randn(2, 6),)),
    Case("softmax_torch_fn_dtype", lambda m, x: m.softmax(x, -1, dtype=m.float64), (randn(2, 3),)),
    Case("softmax_large_values", lambda m, x: F(m).softmax(x * 200.0, -1), (randn(3, 4),)),
    Case("softmax_with_neg_inf", lambda m, x: F(m).softmax(m.where(x < -0.5, float("-inf"), x), -1),
         (distinct(3, 4),)),
    Case("softmax_zero_size", lambda m, x: F(m).softmax(x, 0), (randn(0, 3),)),
    Case("softmax_scalar", lambda m, x: F(m).softmax(x, 0), (randn(),)),
    Case("log_softmax_dim0", lambda m, x: F(m).log_softmax(x, 0), (randn(4, 3),), second_order=True),
    Case("log_softmax_method_permute", lambda m, x: x.permute(2, 0, 1).log_softmax(1), (randn(2, 3, 4),)),
    Case("log_softmax_large", lambda m, x: x.mul(100.0).log_softmax(-1), (randn(2, 5),)),
    Case("softmin", lambda m, x: F(m).softmin(x, 1), (randn(3, 4),), second_order=True),
    Case("glu", lambda m, x: F(m).glu(x, 1), (randn(3, 6, 2),), second_order=True),
    # ------------------------------------------------------------ linear maps
    Case("linear_bias_3d", lambda m, x, w, b: F(m).linear(x, w, b), (randn(2, 3, 5), randn(4, 5), randn(4)),
         second_order=True),
    Case("linear_no_bias", lambda m, x, w: F(m).linear(x, w), (randn(6, 5), randn(3, 5))),
    Case("linear_1d_input", lambda m, x, w, b: F(m).linear(x, w, b), (randn(5), randn(3, 5), randn(3))),
    Case("linear_weight_t", lambda m, x, w: F(m).linear(x, w.t()), (randn(2, 4), randn(4, 3))),
    Case("bilinear", lambda m, a, b, w, c: F(m).bilinear(a, b, w, c),
         (randn(2, 3, 4), randn(2, 3, 5), randn(6, 4, 5), randn(6))),
    # ------------------------------------------------------------ normalisation
    Case("batch_norm_eval_affine", lambda m, x, rm, rv, w, b: F(m).batch_norm(x, rm, rv, w, b),
         (randn(4, 3, 5), randn(3), positive(3), randn(3), randn(3)), grad_inputs=(0, 3, 4)),
    Case("batch_norm_train_running_stats", lambda m, x, w, b: _bn_train(m, x, w, b),
         (randn(6, 3), randn(3), randn(3)), second_order=True),
    Case("batch_norm_train_4d_momentum", lambda m, x: _bn_train(m, x, None, None, momentum=0.3),
         (randn(2, 3, 4, 5),)),
    Case("batch_norm_train_no_running", lambda m, x: F(m).batch_norm(x, None, None, training=True),
         (randn(5, 2, 3),)),
    Case("instance_norm_running_stats", _in_train, (randn(3, 2, 6),)),
    Case("instance_norm_affine", lambda m, x, w, b: F(m).instance_norm(x, weight=w, bias=b),
         (randn(2, 3, 4, 4), randn(3), randn(3))),
    Case("layer_norm_affine", lambda m, x, w, b: F(m).layer_norm(x, (5,), w, b), (randn(3, 5), randn(5), randn(5)),
         second_order=True),
    Case("layer_norm_2d_shape_no_affine", lambda m, x: F(m).layer_norm(x, [3, 4]), (randn(2, 3, 4),),
         second_order=True),
    Case("layer_norm_non_contiguous", lambda m, x: F(m).layer_norm(x.transpose(0, 1), (2,)), (randn(2, 3),)),
    Case("group_norm_affine", lambda m, x, w, b: F(m).group_norm(x, 2, w, b), (randn(2, 4, 3), randn(4), randn(4)),
         second_order=True),
    Case("group_norm_4d_no_affine", lambda m, x: F(m).group_norm(x, 3, eps=1e-3), (randn(2, 6, 2, 3),)),
    Case("rms_norm_weight", lambda m, x, w: F(m).rms_norm(x, (4,), w, eps=1e-6), (randn(3, 4), randn(4))),
    Case("rms_norm_default_eps", lambda m, x: F(m).rms_norm(x, [2, 3]), (randn(4, 2, 3),)),
    Case("normalize_default", lambda m, x: F(m).normalize(x), (randn(3, 4),), second_order=True),
    Case("normalize_p1_neg_dim", lambda m, x: F(m).normalize(x, p=1.0, dim=-1), (randn(2, 3, 4),)),
    # ------------------------------------------------------------ embeddings
    Case("embedding", lambda m, i, w: F(m).embedding(i, w), (ints(2, 3, high=5), randn(5, 4))),
    Case("embedding_padding_idx", lambda m, i, w: F(m).embedding(i, w, padding_idx=1),
         (np.array([[0, 1, 2], [1, 1, 4]]), randn(5, 3))),
    Case("embedding_negative_padding_idx", lambda m, i, w: F(m).embedding(i, w, padding_idx=-1),
         (np.array([4, 0, 4, 2]), randn(5, 3))),
    Case("embedding_max_norm", _emb_max_norm, (np.array([0, 2, 2, 3]), randn(5, 4))),
    Case("embedding_scale_grad_by_freq", lambda m, i, w: F(m).embedding(i, w, scale_grad_by_freq=True),
         (np.array([0, 2, 2, 3, 2]), randn(4, 3))),
    # ------------------------------------------------------------ classification losses
    Case("cross_entropy", lambda m, x, t: F(m).cross_entropy(x, t), (randn(4, 5), ints(4, high=5)),
         second_order=True),
    Case("cross_entropy_weight", lambda m, x, t, w: F(m).cross_entropy(x, t, w),
         (randn(6, 4), ints(6, high=4), positive(4)), grad_inputs=(0,)),
    Case("cross_entropy_ignore_index", lambda m, x, t: F(m).cross_entropy(x, t, ignore_index=2),
         (randn(5, 3), np.array([0, 2, 1, 2, 0]))),
    Case("cross_entropy_all_ignored", lambda m, x, t: F(m).cross_entropy(x, t),
         (randn(3, 4), np.array([-100, -100, -100]))),
    Case("cross_entropy_all_ignored_smoothing", lambda m, x, t: F(m).cross_entropy(x, t, label_smoothing=0.2),
         (randn(3, 4), np.array([-100, -100, -100]))),
    Case("cross_entropy_none", lambda m, x, t: F(m).cross_entropy(x, t, reduction="none"),
         (randn(4, 3), _targets(4, classes=3, ignore=-100))),
    Case("cross_entropy_sum_weight", lambda m, x, t, w: F(m).cross_entropy(x, t, w, reduction="sum"),
         (randn(5, 3), ints(5, high=3), positive(3)), grad_inputs=(0,)),
    Case("cross_entropy_label_smoothing", lambda m, x, t: F(m).cross_entropy(x, t, label_smoothing=0.1),
         (randn(4, 6), ints(4, high=6)), second_order=True),
    Case("cross_entropy_smoothing_weight_ignore",
         lambda m, x, t, w: F(m).cross_entropy(x, t, w, ignore_index=-1, label_smoothing=0.3),
         (randn(6, 4), np.array([0, -1, 3, 2, -1, 1]), positive(4)), grad_inputs=(0,)),
    Case("cross_entropy_smoothing_weight_none",
         lambda m, x, t, w: F(m).cross_entropy(x, t, w, reduction="none", label_smoothing=0.25),
         (randn(5, 3), ints(5, high=3), positive(3)), grad_inputs=(0,)),
    Case("cross_entropy_kdim", lambda m, x, t: F(m).cross_entropy(x, t), (randn(2, 5, 3, 4), ints(2, 3, 4, high=5))),
    Case("cross_entropy_kdim_ignore_weight_smoothing",
         lambda m, x, t, w: F(m).cross_entropy(x, t, w, label_smoothing=0.1),
         (randn(2, 4, 3), _targets(2, 3, classes=4, ignore=-100), positive(4)), grad_inputs=(0,)),
    Case("cross_entropy_probs", lambda m, x, t: F(m).cross_entropy(x, t), (randn(4, 5), _probs(4, 5)),
         second_order=True),
    Case("cross_entropy_probs_smoothing_weight_none",
         lambda m, x, t, w: F(m).cross_entropy(x, t, w, reduction="none", label_smoothing=0.2),
         (randn(3, 4, 2), _probs(3, 4, 2), positive(4)), grad_inputs=(0, 1)),
    Case("cross_entropy_probs_kdim_sum", lambda m, x, t: F(m).cross_entropy(x, t, reduction="sum"),
         (randn(2, 3, 5), _probs(2, 3, 5))),
    Case("cross_entropy_unbatched", lambda m, x, t: F(m).cross_entropy(x, t, label_smoothing=0.1),
         (randn(5), np.array(3))),
    Case("cross_entropy_legacy_size_average", lambda m, x, t: F(m).cross_entropy(x, t, size_average=False),
         (randn(4, 3), ints(4, high=3))),
    Case("cross_entropy_zero_batch", lambda m, x, t: F(m).cross_entropy(x, t), (randn(0, 4), ints(0, high=4))),
    Case("cross_entropy_probs_zero_batch", lambda m, x, t: F(m).cross_entropy(x, t), (randn(0, 4), randn(0, 4))),
    Case("nll_loss", lambda m, x, t: F(m).nll_loss(F(m).log_softmax(x, 1), t), (randn(4, 3), ints(4, high=3))),
    Case("nll_loss_weight_ignore", lambda m, x, t, w: F(m).nll_loss(x, t, w, ignore_index=0),
         (randn(6, 4), np.array([0, 1, 2, 3, 0, 2]), positive(4)), grad_inputs=(0,)),
    Case("nll_loss_kdim_none", lambda m, x, t: F(m).nll_loss(x, t, reduction="none"),
         (randn(2, 3, 4), _targets(2, 4, classes=3, ignore=-100))),
    Case("nll_loss_all_ignored_weight", lambda m, x, t, w: F(m).nll_loss(x, t, w, ignore_index=1),
         (randn(2, 3), np.array([1, 1]), positive(3)), grad_inputs=(0,)),
    Case("binary_cross_entropy", lambda m, x, t: F(m).binary_cross_entropy(x, t),
         (uniform(3, 4, low=0.05, high=0.95), uniform(3, 4, low=0.0, high=1.0)), grad_inputs=(0,)),
    Case("binary_cross_entropy_weight_sum", lambda m, x, t, w: F(m).binary_cross_entropy(x, t, w, reduction="sum"),
         (uniform(5, low=0.05, high=0.95), uniform(5, low=0.0, high=1.0), positive(5)), grad_inputs=(0,)),
    Case("binary_cross_entropy_log_clamp", lambda m, x, t: F(m).binary_cross_entropy(x, t, reduction="none"),
         (np.array([0.0, 1.0, 0.5, 1.0], dtype=np.float32), np.array([1.0, 0.0, 1.0, 1.0], dtype=np.float32)),
         grad=False),
    Case("bce_with_logits", lambda m, x, t: F(m).binary_cross_entropy_with_logits(x, t),
         (randn(4, 3), uniform(4, 3, low=0.0, high=1.0)), second_order=True),
    Case("bce_with_logits_pos_weight_weight",
         lambda m, x, t, w, pw: F(m).binary_cross_entropy_with_logits(x, t, w, pos_weight=pw, reduction="none"),
         (randn(4, 3) , uniform(4, 3, low=0.0, high=1.0), positive(4, 1), positive(3)), grad_inputs=(0, 1)),
    Case("bce_with_logits_extreme", lambda m, x, t: F(m).binary_cross_entropy_with_logits(x * 50.0, t),
         (randn(6), uniform(6, low=0.0, high=1.0))),
    Case("kl_div_batchmean", lambda m, x, t: F(m).kl_div(F(m).log_softmax(x, 1), t, reduction="batchmean"),
         (randn(3, 4), _probs(3, 4))),
    Case("kl_div_zero_target_sum", lambda m, x, t: F(m).kl_div(x, t, reduction="sum"),
         (randn(4), np.array([0.0, 0.5, 0.0, 0.5], dtype=np.float32)), grad_inputs=(0,)),
    Case("kl_div_log_target_none", lambda m, x, t: F(m).kl_div(x, t, reduction="none", log_target=True),
         (randn(3, 4), randn(3, 4))),
    # ------------------------------------------------------------ regression losses
    Case("mse_loss", lambda m, x, t: F(m).mse_loss(x, t), (randn(3, 4), randn(3, 4)), second_order=True),
    Case("mse_loss_none", lambda m, x, t: F(m).mse_loss(x, t, reduction="none"), (randn(2, 3), randn(2, 3))),
    Case("mse_loss_broadcast_sum", lambda m, x, t: F(m).mse_loss(x, t, reduction="sum"), (randn(3, 4), randn(4))),
    Case("mse_loss_weight", lambda m, x, t, w: F(m).mse_loss(x, t, weight=w), (randn(5), randn(5), positive(5))),
    Case("l1_loss_sum", lambda m, x, t: F(m).l1_loss(x, t, reduction="sum"), (randn(3, 4), randn(3, 4))),
    Case("l1_loss_weight", lambda m, x, t, w: F(m).l1_loss(x, t, weight=w), (randn(4), randn(4), positive(4))),
    Case("smooth_l1_loss_beta", lambda m, x, t: F(m).smooth_l1_loss(x, t, beta=0.5), (randn(4, 5), randn(4, 5))),
    Case("smooth_l1_loss_beta0", lambda m, x, t: F(m).smooth_l1_loss(x, t, beta=0.0), (randn(6), randn(6))),
    Case("huber_loss_delta_weight", lambda m, x, t, w: F(m).huber_loss(x, t, delta=0.7, weight=w),
         (randn(3, 4), randn(3, 4), positive(3, 4))),
    Case("huber_loss_none", lambda m, x, t: F(m).huber_loss(x, t, reduction="none", delta=2.0),
         (randn(5) , randn(5))),
    Case("poisson_nll_loss", lambda m, x, t: F(m).poisson_nll_loss(x, t), (randn(4), positive(4))),
    Case("poisson_nll_loss_full_no_log", lambda m, x, t: F(m).poisson_nll_loss(x, t, log_input=False, full=True),
         (positive(6), positive(6, low=0.5, high=4.0))),
    Case("gaussian_nll_loss", lambda m, x, t, v: F(m).gaussian_nll_loss(x, t, v), (randn(4, 3), randn(4, 3),
                                                                               positive(4, 1))),
    Case("gaussian_nll_loss_full_sum", lambda m, x, t, v: F(m).gaussian_nll_loss(x, t, v, full=True, reduction="sum"),
         (randn(4, 3), randn(4, 3), positive(4))),
    # ------------------------------------------------------------ similarity and margins
    Case("cosine_similarity_broadcast", lambda m, a, b: F(m).cosine_similarity(a, b), (randn(3, 4, 2), randn(1, 4, 2)),
         second_order=True),
    Case("cosine_similarity_neg_dim", lambda m, a, b: F(m).cosine_similarity(a, b, dim=-1), (randn(3, 5), randn(3, 5))),
    Case("pairwise_distance", lambda m, a, b: F(m).pairwise_distance(a, b), (randn(4, 3), randn(4, 3))),
    Case("pairwise_distance_p1_keepdim", lambda m, a, b: F(m).pairwise_distance(a, b, p=1.0, keepdim=True),
         (randn(4, 3), randn(4, 3))),
    Case("margin_ranking_loss", lambda m, a, b, y: F(m).margin_ranking_loss(a, b, y, margin=0.2),
         (randn(6), randn(6), _signs(6)), grad_inputs=(0, 1)),
    Case("hinge_embedding_loss", lambda m, x, y: F(m).hinge_embedding_loss(x, y, margin=0.5),
         (randn(3, 4), _signs(3, 4)), grad_inputs=(0,)),
    Case("cosine_embedding_loss", lambda m, a, b, y: F(m).cosine_embedding_loss(a, b, y, margin=0.1),
         (randn(5, 3), randn(5, 3), _signs(5)), grad_inputs=(0, 1)),
    Case("soft_margin_loss", lambda m, x, y: F(m).soft_margin_loss(x, y), (randn(4, 2), _signs(4, 2)),
         grad_inputs=(0,)),
    Case("multilabel_soft_margin_loss", lambda m, x, y, w: F(m).multilabel_soft_margin_loss(x, y, w),
         (randn(3, 4), uniform(3, 4, low=0.0, high=1.0), positive(4)), grad_inputs=(0,)),
    Case("triplet_margin_loss_swap", lambda m, a, p, n: F(m).triplet_margin_loss(a, p, n, swap=True),
         (randn(4, 3), randn(4, 3), randn(4, 3))),
    # ------------------------------------------------------------ attention
    Case("sdpa", lambda m, q, k, v: F(m).scaled_dot_product_attention(q, k, v),
         (randn(2, 3, 4, 8), randn(2, 3, 5, 8), randn(2, 3, 5, 6)), second_order=True),
    Case("sdpa_causal", lambda m, q, k, v: F(m).scaled_dot_product_attention(q, k, v, is_causal=True),
         (randn(2, 5, 4), randn(2, 5, 4), randn(2, 5, 4)), second_order=True),
    Case("sdpa_causal_more_queries", lambda m, q, k, v: F(m).scaled_dot_product_attention(q, k, v, is_causal=True),
         (randn(1, 2, 6, 4), randn(1, 2, 3, 4), randn(1, 2, 3, 4))),
    Case("sdpa_causal_more_keys", lambda m, q, k, v: F(m).scaled_dot_product_attention(q, k, v, is_causal=True),
         (randn(1, 2, 3, 4), randn(1, 2, 6, 4), randn(1, 2, 6, 4))),
    Case("sdpa_bool_mask_broadcast", lambda m, q, k, v, c: F(m).scaled_dot_product_attention(q, k, v, attn_mask=c),
         (randn(2, 2, 3, 4), randn(2, 2, 5, 4), randn(2, 2, 5, 4),
          lambda rng: np.concatenate([np.ones((3, 1), bool), rng.random((3, 4)) < 0.5], axis=1))),
    Case("sdpa_bool_mask_dead_row", _bool_mask_dead_row, (randn(2, 3, 4), randn(2, 4, 4), randn(2, 4, 4))),
    Case("sdpa_float_mask", lambda m, q, k, v, a: F(m).scaled_dot_product_attention(q, k, v, attn_mask=a),
         (randn(2, 3, 4), randn(2, 5, 4), randn(2, 5, 3), randn(2, 3, 5)), grad_inputs=(0, 1, 2)),
    Case("sdpa_scale_broadcast_heads", lambda m, q, k, v: F(m).scaled_dot_product_attention(q, k, v, scale=0.3),
         (randn(2, 4, 3, 5), randn(2, 1, 6, 5), randn(1, 4, 6, 2))),
    Case("sdpa_gqa", lambda m, q, k, v: F(m).scaled_dot_product_attention(q, k, v, enable_gqa=True),
         (randn(1, 4, 3, 4), randn(1, 2, 5, 4), randn(1, 2, 5, 4))),
    # ------------------------------------------------------------ rearrangements and identities
    Case("pixel_shuffle", lambda m, x: F(m).pixel_shuffle(x, 2), (randn(2, 8, 3, 2),)),
    Case("pixel_unshuffle", lambda m, x: F(m).pixel_unshuffle(x, 3), (randn(1, 2, 6, 3),)),
    Case("dropout_eval_identity", lambda m, x: F(m).dropout(x, 0.4, training=False) * 2.0, (randn(3, 4),)),
    Case("dropout_p0_identity", lambda m, x: F(m).dropout(x, 0.0) * 2.0, (randn(3, 4),)),
    Case("dropout_p1_zeros", lambda m, x: F(m).dropout(x, 1.0), (randn(3, 4),)),
    Case("alpha_dropout_eval", lambda m, x: F(m).alpha_dropout(x, 0.3) + 1.0, (randn(5),)),
]
CASES += [Case(f"activation_{n}", lambda m, x, n=n: getattr(F(m), n)(x), (randn(4, 5),)) for n in ACTIVATIONS]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_parity(case, mode):
    run_case(case, mode)


def test_case_count():
    assert len(CASES) >= 55
    assert len({c.name for c in CASES}) == len(CASES)


# ---------------------------------------------------------------- call-time errors

def test_cross_entropy_errors():
    f = loom.nn.functional
    x = loom.randn(4, 3)
    with pytest.raises(ShapeError, match=r"cross_entropy.*batch size \(4\).*target batch size \(5\)"):
        f.cross_entropy(x, loom.tensor([0, 1, 2, 0, 1]))
    with pytest.raises(ShapeError, match=r"cross_entropy.*probability.*\[4, 3\], got \[4\]"):
        f.cross_entropy(x, loom.tensor([0.0, 1.0, 2.0, 0.0]))
    with pytest.raises(LoomIndexError, match=r"cross_entropy: target 3 is out of bounds for 3 classes"):
        f.cross_entropy(x, loom.tensor([0, 3, 1, 2]))
    with pytest.raises(LoomIndexError, match=r"nll_loss: target -2"):
        f.nll_loss(x, loom.tensor([0, -2, 1, 2]))
    with pytest.raises(ShapeError, match=r"cross_entropy: weight"):
        f.cross_entropy(x, loom.tensor([0, 1, 1, 2]), weight=loom.ones(4))
    with pytest.raises(DTypeError, match=r"nll_loss.*integer target"):
        f.nll_loss(x, loom.tensor([True, False, True, True]))
    with pytest.raises(ValueError, match=r"not a valid value for reduction"):
        f.cross_entropy(x, loom.tensor([0, 1, 1, 2]), reduction="avg")
    # A target still being computed is checked when the loss runs.
    lazy = loom.tensor([0, 1, 1, 2]) + loom.tensor([0, 0, 4, 0])
    with pytest.raises(LoomIndexError, match=r"out of bounds"):
        f.cross_entropy(x, lazy).item()
    # An ignored target may lie outside the class range.
    assert f.cross_entropy(x, loom.tensor([0, -100, 1, 2])).item() > 0


def test_linear_and_norm_errors():
    f = loom.nn.functional
    with pytest.raises(ShapeError, match=r"linear: input \[2, 4\] has 4 features.*weight \[3, 5\].*in_features=5"):
        f.linear(loom.randn(2, 4), loom.randn(3, 5))
    with pytest.raises(ShapeError, match=r"layer_norm: normalized_shape \[4\] does not match.*\[2, 3\]"):
        f.layer_norm(loom.randn(2, 3), (4,))
    with pytest.raises(ShapeError, match=r"layer_norm: weight of shape \[4\]"):
        f.layer_norm(loom.randn(2, 3), (3,), loom.ones(4))
    with pytest.raises(ShapeError, match=r"batch_norm: running_mean of shape \[4\].*\[2, 3\] has 3 channels"):
        f.batch_norm(loom.randn(2, 3), loom.zeros(4), loom.ones(3))
    with pytest.raises(ShapeError, match=r"batch_norm: expected more than 1 value per channel"):
        f.batch_norm(loom.randn(1, 3), None, None, training=True)
    with pytest.raises(ShapeError, match=r"group_norm.*6.*divisible by num_groups=4"):
        f.group_norm(loom.randn(2, 6, 3), 4)
    with pytest.raises(ShapeError, match=r"glu: halving dimension must be even"):
        f.glu(loom.randn(2, 3))
    with pytest.raises(DTypeError, match=r"softmax: expected a floating point input"):
        f.softmax(loom.tensor([1, 2]), 0)
    with pytest.raises(LoomIndexError, match=r"softmax: dimension out of range"):
        f.softmax(loom.randn(2, 3), 2)


def test_sdpa_and_embedding_errors():
    f = loom.nn.functional
    q = loom.randn(2, 3, 4)
    with pytest.raises(ShapeError, match=r"scaled_dot_product_attention: query \[2, 3, 4\] and key \[2, 5, 6\].*"
                                         r"head dim"):
        f.scaled_dot_product_attention(q, loom.randn(2, 5, 6), loom.randn(2, 5, 4))
    with pytest.raises(ShapeError, match=r"key \[2, 5, 4\] and value \[2, 6, 4\]"):
        f.scaled_dot_product_attention(q, loom.randn(2, 5, 4), loom.randn(2, 6, 4))
    with pytest.raises(ShapeError, match=r"enable_gqa"):
        f.scaled_dot_product_attention(loom.randn(1, 3, 2, 4), loom.randn(1, 2, 2, 4), loom.randn(1, 2, 2, 4),
                                       enable_gqa=True)
    with pytest.raises(loom.LoomError, match=r"attn_mask must not be given with is_causal"):
        f.scaled_dot_product_attention(q, q, q, attn_mask=loom.ones(3, 3, dtype=loom.bool), is_causal=True)
    with pytest.raises(LoomIndexError, match=r"embedding: index 7 is out of range.*\[5, 2\]"):
        f.embedding(loom.tensor([1, 7]), loom.randn(5, 2))
    with pytest.raises(DTypeError, match=r"embedding: expected an integer index"):
        f.embedding(loom.tensor([1.0]), loom.randn(5, 2))


def test_loss_shape_errors():
    f = loom.nn.functional
    with pytest.raises(ShapeError, match=r"binary_cross_entropy: target of shape \[3\].*\[3, 1\]"):
        f.binary_cross_entropy(loom.rand(3, 1), loom.rand(3))
    with pytest.raises(ShapeError, match=r"binary_cross_entropy_with_logits"):
        f.binary_cross_entropy_with_logits(loom.randn(3), loom.rand(4))
    with pytest.raises(ShapeError, match=r"mse_loss: weight"):
        f.mse_loss(loom.randn(3), loom.randn(3), weight=loom.ones(2))
    with pytest.warns(UserWarning, match="different to the input size"), \
            pytest.raises(ShapeError, match=r"mse_loss: input \[3\] and target \[4\]"):
        f.mse_loss(loom.randn(3), loom.randn(4))


# ---------------------------------------------------------------- softmax/log_softmax as methods and ops

def test_softmax_methods_and_top_level():
    x = loom.randn(3, 4)
    np.testing.assert_allclose(x.softmax(-1).numpy(), loom.softmax(x, -1).numpy())
    np.testing.assert_allclose(x.log_softmax(0).exp().sum(0).numpy(), np.ones(4), rtol=1e-5)
    assert x.softmax(1, dtype=loom.float64).dtype is loom.float64


def test_batch_norm_eval_leaves_running_stats():
    rm, rv = loom.tensor([0.5, -0.5]), loom.tensor([2.0, 3.0])
    loom.nn.functional.batch_norm(loom.randn(4, 2), rm, rv, training=False)
    assert rm.tolist() == [0.5, -0.5] and rv.tolist() == [2.0, 3.0]


def test_composites_stay_lazy():
    """The ops build graphs; nothing runs until a value is asked for."""
    x = loom.randn(4, 5, requires_grad=True)
    t = loom.tensor([0, 1, 2, 3])
    loss = loom.nn.functional.cross_entropy(loom.nn.functional.layer_norm(x, (5,)), t, label_smoothing=0.1)
    assert loss.node.buffer is None
    loss.backward()
    assert x.grad.shape == (4, 5)


# ---------------------------------------------------------------- dropout: statistics and structure

def test_dropout_statistics():
    f = loom.nn.functional
    loom.manual_seed(1234)
    n, p = 200_000, 0.3
    y = f.dropout(loom.ones(n), p).numpy()
    zero = float((y == 0).mean())
    assert abs(zero - p) < 0.01, zero
    kept = y[y != 0]
    np.testing.assert_allclose(kept, 1.0 / (1.0 - p), rtol=1e-6)
    assert abs(float(y.mean()) - 1.0) < 0.01  # The expectation is preserved.


def test_dropout_reproducible_under_manual_seed():
    f = loom.nn.functional
    x = loom.randn(64, 32)
    loom.manual_seed(7)
    a = f.dropout(x, 0.5).numpy()
    loom.manual_seed(7)
    b = f.dropout(x, 0.5).numpy()
    c = f.dropout(x, 0.5).numpy()  # The next draw differs.
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_dropout_gradient_is_the_mask():
    f = loom.nn.functional
    loom.manual_seed(3)
    x = loom.randn(50, 20, requires_grad=True)
    y = f.dropout(x, 0.25)
    y.sum().backward()
    out, g, xv = y.detach().numpy(), x.grad.numpy(), x.detach().numpy()
    np.testing.assert_allclose(g, np.where(out != 0, 1.0 / 0.75, 0.0), rtol=1e-6)
    np.testing.assert_allclose(out, xv * g, rtol=1e-6)


def test_dropout_identities_and_errors():
    f = loom.nn.functional
    x = loom.randn(3, 4)
    assert f.dropout(x, 0.5, training=False) is x
    assert f.dropout(x, 0.0) is x
    assert np.all(f.dropout(x, 1.0).numpy() == 0)
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match="dropout probability has to be between 0 and 1"):
            f.dropout(x, bad)


def test_dropout_inplace():
    loom.manual_seed(11)
    x = loom.ones(1000)
    before = x._version
    out = loom.nn.functional.dropout(x, 0.5, inplace=True)
    assert out is x and x._version == before + 1
    vals = x.numpy()
    assert set(np.unique(vals).tolist()) <= {0.0, 2.0} and 0 < (vals == 0).sum() < 1000


@pytest.mark.parametrize("fn,shape", [("dropout1d", (4, 6, 10)), ("dropout1d", (6, 10)),
                                      ("dropout2d", (4, 6, 5, 5)), ("dropout3d", (2, 6, 3, 3, 3)),
                                      ("dropout3d", (6, 3, 3, 3))])
def test_channel_dropout_zeroes_whole_channels(fn, shape):
    loom.manual_seed(5)
    y = getattr(loom.nn.functional, fn)(loom.ones(*shape), 0.5).numpy()
    batched = len(shape) == {"dropout1d": 3, "dropout2d": 4, "dropout3d": 5}[fn]
    chans = y.reshape(shape[0] * shape[1] if batched else shape[0], -1)
    for row in chans:  # Every channel is either dropped entirely or kept and scaled entirely.
        assert np.all(row == 0) or np.all(row == 2.0)
    dropped = np.all(chans == 0, axis=1).mean()
    assert 0 < dropped < 1


def test_alpha_dropout_keeps_selu_statistics():
    loom.manual_seed(9)
    x = loom.randn(200_000)
    y = loom.nn.functional.alpha_dropout(x, 0.2, training=True).numpy()
    assert abs(float(y.mean())) < 0.02 and abs(float(y.var()) - 1.0) < 0.03
    # Dropped units all take one value: a * (-alpha') + b.
    alpha = 1.7580993408473766
    a = 1.0 / math.sqrt((alpha * alpha * 0.2 + 1.0) * 0.8)
    dropped = a * -alpha + alpha * a * 0.2
    assert abs(float(np.isclose(y, dropped, atol=1e-6).mean()) - 0.2) < 0.01


def test_sdpa_dropout_reproducible():
    f = loom.nn.functional
    q = loom.randn(2, 3, 4)
    loom.manual_seed(2)
    a = f.scaled_dot_product_attention(q, q, q, dropout_p=0.5).numpy()
    loom.manual_seed(2)
    b = f.scaled_dot_product_attention(q, q, q, dropout_p=0.5).numpy()
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, f.scaled_dot_product_attention(q, q, q).numpy())
