"""Parity of the torch.nn layers added for issue 12: same weights (PyTorch's state_dict loaded into loom),
same inputs, same outputs, gradients and buffers; plus weight/spectral norm, parametrize and checkpointing."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import loom
from tests.nn.harness import ModuleCase, check_module, const, ints, randn, uniform


def _pool_unpool(lib):
    nn = lib.nn

    class PoolUnpool(nn.Module):
        def __init__(self):
            super().__init__()
            self.pool = nn.MaxPool2d(2, return_indices=True)
            self.unpool = nn.MaxUnpool2d(2)

        def forward(self, x):
            return self.unpool(*self.pool(x))

    return PoolUnpool()


def _frac(lib, nsp):
    samples = np.random.default_rng(3).random((2, 3, nsp)).astype(np.float32)
    t = torch.from_numpy(samples) if lib is torch else loom.tensor(samples)
    cls = lib.nn.FractionalMaxPool2d if nsp == 2 else lib.nn.FractionalMaxPool3d
    return cls(2, output_size=(3,) * nsp, return_indices=True, _random_samples=t)


def _distinct(*shape):
    n = int(np.prod(shape))
    return lambda rng: (rng.permutation(n).reshape(shape) * 0.37 - n * 0.1).astype(np.float32)


def _label_lists(rng):
    return np.array([[3, 0, -1, 1], [1, 2, 3, -1], [0, -1, 2, 2]], np.int64)


ACT = [
    ModuleCase("hardshrink", lambda lib: lib.nn.Hardshrink(0.3), (randn(4, 5),)),
    ModuleCase("softshrink", lambda lib: lib.nn.Softshrink(), (randn(4, 5),)),
    ModuleCase("threshold", lambda lib: lib.nn.Threshold(0.1, 20.0), (randn(4, 5),)),
    ModuleCase("rrelu_eval", lambda lib: lib.nn.RReLU(0.2, 0.4), (randn(4, 5),), modes=("eval",)),
    ModuleCase("softmax2d", lambda lib: lib.nn.Softmax2d(), (randn(2, 3, 4, 4),)),
    ModuleCase("softmax2d_unbatched", lambda lib: lib.nn.Softmax2d(), (randn(3, 4, 4),)),
    ModuleCase("cosine_similarity", lambda lib: lib.nn.CosineSimilarity(dim=1), (randn(4, 6), randn(4, 6))),
    ModuleCase("pairwise_distance", lambda lib: lib.nn.PairwiseDistance(p=1.5, keepdim=True),
               (randn(4, 6), randn(4, 6))),
    ModuleCase("feature_alpha_dropout_eval", lambda lib: lib.nn.FeatureAlphaDropout(0.3), (randn(2, 3, 4),),
               modes=("eval",)),
]

LOSSES = [
    ModuleCase("poisson_nll", lambda lib: lib.nn.PoissonNLLLoss(full=True), (randn(4, 3), uniform(0, 3, 4, 3))),
    ModuleCase("gaussian_nll", lambda lib: lib.nn.GaussianNLLLoss(full=True),
               (randn(4, 3), randn(4, 3), uniform(0.5, 2, 4, 3))),
    ModuleCase("margin_ranking", lambda lib: lib.nn.MarginRankingLoss(0.2),
               (randn(5), randn(5), const(np.array([1, -1, 1, 1, -1], np.float32)))),
    ModuleCase("hinge_embedding", lambda lib: lib.nn.HingeEmbeddingLoss(0.5),
               (randn(5), const(np.array([1, -1, 1, 1, -1], np.float32)))),
    ModuleCase("cosine_embedding", lambda lib: lib.nn.CosineEmbeddingLoss(0.1),
               (randn(4, 3), randn(4, 3), const(np.array([1, -1, 1, -1], np.float32)))),
    ModuleCase("soft_margin", lambda lib: lib.nn.SoftMarginLoss(),
               (randn(5), const(np.array([1, -1, 1, 1, -1], np.float32))), call=lambda m, x, t: m(x, t.detach())),
    ModuleCase("multilabel_soft_margin", lambda lib: lib.nn.MultiLabelSoftMarginLoss(),
               (randn(4, 3), const(np.array([[1, 0, 1], [0, 0, 1], [1, 1, 1], [0, 0, 0]], np.float32)))),
    ModuleCase("multilabel_margin", lambda lib: lib.nn.MultiLabelMarginLoss(), (randn(3, 4), _label_lists)),
    ModuleCase("multi_margin", lambda lib: lib.nn.MultiMarginLoss(p=2, margin=0.5), (randn(5, 4), ints(0, 4, 5))),
    ModuleCase("triplet_margin", lambda lib: lib.nn.TripletMarginLoss(margin=0.5, swap=True),
               (randn(4, 6), randn(4, 6), randn(4, 6))),
    ModuleCase("triplet_margin_with_distance", lambda lib: lib.nn.TripletMarginWithDistanceLoss(margin=0.3),
               (randn(4, 6), randn(4, 6), randn(4, 6))),
    ModuleCase("ctc", lambda lib: lib.nn.CTCLoss(blank=0, zero_infinity=True),
               (randn(6, 2, 4), ints(1, 4, 2, 3), const([6, 5]), const([3, 2])),
               call=lambda m, x, t, il, tl: m(x.log_softmax(2), t, il, tl)),
    ModuleCase("nll_loss_2d", lambda lib: lib.nn.NLLLoss2d(), (randn(2, 3, 4, 4), ints(0, 3, 2, 4, 4)),
               call=lambda m, x, t: m(x.log_softmax(1), t)),
]

NORM = [
    ModuleCase("instance_norm1d", lambda lib: lib.nn.InstanceNorm1d(3), (randn(2, 3, 6),)),
    ModuleCase("instance_norm1d_unbatched", lambda lib: lib.nn.InstanceNorm1d(3, affine=True), (randn(3, 6),)),
    ModuleCase("instance_norm2d_affine_track", lambda lib: lib.nn.InstanceNorm2d(4, affine=True,
                                                                                 track_running_stats=True),
               (randn(2, 4, 5, 5, scale=2.0),), steps=2),
    ModuleCase("instance_norm3d_momentum_none", lambda lib: lib.nn.InstanceNorm3d(2, momentum=None,
                                                                                  track_running_stats=True),
               (randn(2, 2, 3, 4, 3),), steps=2),
    ModuleCase("local_response_norm", lambda lib: lib.nn.LocalResponseNorm(3, alpha=0.1), (randn(2, 5, 4, 4),)),
    # PyTorch's hand-written CrossMapLRN2d backward is not the derivative of its forward (gradcheck fails on
    # it); loom differentiates the forward, so only values are compared (the gradient is checked below).
    ModuleCase("cross_map_lrn2d_odd", lambda lib: lib.nn.CrossMapLRN2d(3, alpha=0.1, beta=0.5, k=2),
               (randn(2, 5, 3, 3),), grad=False),
    ModuleCase("cross_map_lrn2d_even", lambda lib: lib.nn.CrossMapLRN2d(4, alpha=0.2), (randn(2, 6, 3, 3),),
               grad=False),
    ModuleCase("sync_batch_norm_single_process",
               lambda lib: lib.nn.SyncBatchNorm(3) if lib is loom else lib.nn.BatchNorm2d(3),
               (randn(4, 3, 2, 2),), steps=2),
]

PAD = [
    ModuleCase(f"{kind}_pad{nsp}d", lambda lib, kind=kind, nsp=nsp: getattr(lib.nn, f"{kind}Pad{nsp}d")(
        tuple(range(1, 2 * nsp + 1)) if kind != "Reflection" else 1),
        (randn(*([2, 3] + [7] * nsp)),))
    for kind in ("Zero", "Reflection", "Replication", "Circular") for nsp in (1, 2, 3)
] + [
    ModuleCase(f"constant_pad{nsp}d", lambda lib, nsp=nsp: getattr(lib.nn, f"ConstantPad{nsp}d")(2, 3.5),
               (randn(*([2] + [3] * nsp)),)) for nsp in (1, 2, 3)
] + [
    ModuleCase("reflection_pad2d_unbatched", lambda lib: lib.nn.ReflectionPad2d((1, 2, 0, 3)), (randn(2, 4, 5),)),
]

SHAPE = [
    ModuleCase("pixel_shuffle", lambda lib: lib.nn.PixelShuffle(2), (randn(2, 8, 3, 3),)),
    ModuleCase("pixel_unshuffle", lambda lib: lib.nn.PixelUnshuffle(2), (randn(2, 2, 4, 6),)),
    ModuleCase("channel_shuffle", lambda lib: lib.nn.ChannelShuffle(2), (randn(2, 4, 3, 3),), grad=False),
    ModuleCase("fold", lambda lib: lib.nn.Fold((4, 5), (2, 2)), (randn(2, 12, 12),)),
    ModuleCase("unfold", lambda lib: lib.nn.Unfold((2, 3), padding=1, stride=2), (randn(2, 3, 5, 6),)),
    ModuleCase("upsample_nearest", lambda lib: lib.nn.Upsample(scale_factor=2), (randn(1, 2, 3, 4),)),
    ModuleCase("upsample_nearest_1d_size", lambda lib: lib.nn.Upsample(size=7), (randn(1, 2, 3),)),
    ModuleCase("upsample_nearest_3d", lambda lib: lib.nn.Upsample(scale_factor=(1, 2, 2)), (randn(1, 2, 2, 3, 3),)),
    ModuleCase("upsample_bilinear_align", lambda lib: lib.nn.Upsample(size=(5, 7), mode="bilinear",
                                                                      align_corners=True), (randn(1, 2, 3, 4),)),
    ModuleCase("upsample_bicubic", lambda lib: lib.nn.Upsample(scale_factor=1.5, mode="bicubic"),
               (randn(1, 2, 4, 4),), atol=2e-5),
    ModuleCase("upsample_trilinear", lambda lib: lib.nn.Upsample(scale_factor=2, mode="trilinear"),
               (randn(1, 1, 2, 3, 2),)),
    ModuleCase("upsampling_nearest2d", lambda lib: lib.nn.UpsamplingNearest2d(scale_factor=3), (randn(1, 2, 2, 3),)),
    ModuleCase("upsampling_bilinear2d", lambda lib: lib.nn.UpsamplingBilinear2d(size=(4, 6)), (randn(1, 2, 2, 3),)),
]

POOL = [
    ModuleCase("adaptive_max_pool3d", lambda lib: lib.nn.AdaptiveMaxPool3d((2, 3, 2), return_indices=True),
               (_distinct(1, 2, 4, 5, 4),)),
    ModuleCase("lp_pool1d", lambda lib: lib.nn.LPPool1d(2, 3, stride=2), (randn(2, 3, 9),)),
    ModuleCase("lp_pool2d", lambda lib: lib.nn.LPPool2d(1.5, 2), (uniform(0.1, 2, 2, 3, 6, 6),)),
    ModuleCase("lp_pool3d", lambda lib: lib.nn.LPPool3d(2, 2), (randn(1, 2, 4, 4, 4),)),
    ModuleCase("max_unpool2d", _pool_unpool, (_distinct(2, 3, 6, 6),)),
    ModuleCase("fractional_max_pool2d", lambda lib: _frac(lib, 2), (_distinct(2, 3, 7, 8),)),
    ModuleCase("fractional_max_pool3d", lambda lib: _frac(lib, 3), (_distinct(2, 3, 5, 6, 5),)),
]

EMB = [
    ModuleCase("embedding_bag_mean", lambda lib: lib.nn.EmbeddingBag(10, 4),
               (const(np.array([1, 2, 4, 5, 4, 3, 2, 9], np.int64)), const(np.array([0, 4], np.int64)))),
    ModuleCase("embedding_bag_sum_padding", lambda lib: lib.nn.EmbeddingBag(10, 3, mode="sum", padding_idx=4),
               (ints(0, 10, 3, 5),)),
    ModuleCase("embedding_bag_max_weights", lambda lib: lib.nn.EmbeddingBag(10, 3, mode="max"),
               (const(np.array([1, 2, 4, 5, 4, 3], np.int64)), const(np.array([0, 2, 2], np.int64)))),
]

CASES = ACT + LOSSES + NORM + PAD + SHAPE + POOL + EMB


@pytest.mark.parametrize("case", CASES, ids=str)
def test_module_parity(case):
    check_module(case)


def test_every_new_name_is_importable_from_loom_nn():
    names = ["Upsample", "UpsamplingNearest2d", "UpsamplingBilinear2d", "PixelShuffle", "PixelUnshuffle",
             "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "LocalResponseNorm", "Fold", "Unfold",
             "AdaptiveMaxPool3d", "MaxUnpool1d", "MaxUnpool2d", "MaxUnpool3d", "LPPool1d", "LPPool2d", "LPPool3d",
             "FractionalMaxPool2d", "FractionalMaxPool3d", "ReflectionPad1d", "ReplicationPad3d", "ZeroPad2d",
             "ConstantPad3d", "CircularPad2d", "MultiLabelMarginLoss", "MultiLabelSoftMarginLoss",
             "MultiMarginLoss", "PoissonNLLLoss", "GaussianNLLLoss", "TripletMarginLoss",
             "TripletMarginWithDistanceLoss", "CTCLoss", "HingeEmbeddingLoss", "MarginRankingLoss", "Hardshrink",
             "Softshrink", "Threshold", "RReLU", "Softmax2d", "ChannelShuffle", "CosineSimilarity",
             "PairwiseDistance", "EmbeddingBag", "SyncBatchNorm", "CrossMapLRN2d", "FeatureAlphaDropout"]
    missing = [n for n in names if not hasattr(loom.nn, n) or n not in loom.nn.__all__]
    assert not missing


def test_reprs_follow_pytorch():
    assert repr(loom.nn.ReflectionPad2d(1)) == repr(torch.nn.ReflectionPad2d(1))
    assert repr(loom.nn.PixelShuffle(3)) == repr(torch.nn.PixelShuffle(3))
    assert repr(loom.nn.Upsample(scale_factor=2, mode="bilinear")) == \
        repr(torch.nn.Upsample(scale_factor=2, mode="bilinear"))
    assert repr(loom.nn.InstanceNorm2d(4)) == repr(torch.nn.InstanceNorm2d(4))
    assert repr(loom.nn.Hardshrink(0.25)) == repr(torch.nn.Hardshrink(0.25))


def test_instance_norm_errors_and_warnings():
    with pytest.raises(ValueError, match=r"InstanceNorm2d: expected 3D or 4D input \(got 2D input\)"):
        loom.nn.InstanceNorm2d(3)(loom.randn(3, 4))
    with pytest.raises(ValueError, match="expected input's size at dim=1 to match num_features"):
        loom.nn.InstanceNorm1d(3, affine=True)(loom.randn(2, 4, 5))
    with pytest.warns(UserWarning, match="num_features is not used when affine=False"):
        loom.nn.InstanceNorm1d(3)(loom.randn(2, 4, 5))


def test_cross_map_lrn2d_gradient_is_the_forward_derivative():
    x = np.random.default_rng(0).standard_normal((1, 5, 2, 2))
    m = loom.nn.CrossMapLRN2d(3, alpha=0.1, beta=0.5, k=2)
    t = loom.tensor(x, requires_grad=True)
    g = loom.autograd.grad(m(t).sum(), t)[0].numpy()
    num = np.zeros_like(x)
    for idx in np.ndindex(*x.shape):  # Central differences in float64.
        d = np.zeros_like(x)
        d[idx] = 1e-6
        num[idx] = (m(loom.tensor(x + d)).sum().item() - m(loom.tensor(x - d)).sum().item()) / 2e-6
    np.testing.assert_allclose(g, num, rtol=1e-5, atol=1e-7)


def test_sync_batch_norm_conversion_keeps_state():
    net = loom.nn.Sequential(loom.nn.Conv2d(2, 3, 1), loom.nn.BatchNorm2d(3), loom.nn.ReLU())
    net[1].running_mean.fill_(0.5)
    conv = loom.nn.SyncBatchNorm.convert_sync_batchnorm(net)
    assert isinstance(conv[1], loom.nn.SyncBatchNorm)
    np.testing.assert_array_equal(conv[1].running_mean.numpy(), np.full(3, 0.5, np.float32))
    assert list(conv.state_dict()) == list(net.state_dict())


# ---------------------------------------------------------------- weight and spectral norm

def _pair_norm_modules(make, x, steps=2, train=True):
    torch.manual_seed(0)
    tm, lm = make(torch), make(loom)
    assert list(lm.state_dict()) == list(tm.state_dict())
    lm.load_state_dict({k: loom.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})
    tm.train(train)
    lm.train(train)
    for step in range(steps):
        tx, lx = torch.tensor(x, requires_grad=True), loom.tensor(x, requires_grad=True)
        to, lo = tm(tx), lm(lx)
        cot = np.random.default_rng(step).standard_normal(tuple(to.shape)).astype(np.float32)
        tg = torch.autograd.grad(to, [tx] + list(tm.parameters()), torch.from_numpy(cot))
        lg = loom.autograd.grad(lo, [lx] + list(lm.parameters()), loom.tensor(cot))
        np.testing.assert_allclose(lo.detach().numpy(), to.detach().numpy(), rtol=1e-4, atol=1e-5)
        for a, b in zip(lg, tg):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-5)
        for (name, lb), tb in zip(lm.state_dict().items(), tm.state_dict().values()):
            np.testing.assert_allclose(lb.numpy(), tb.detach().numpy(), rtol=1e-5, atol=1e-6, err_msg=name)


_X = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
_XC = np.random.default_rng(1).standard_normal((2, 3, 6, 6)).astype(np.float32)


@pytest.mark.parametrize("dim", [0, 1, None])
def test_parametrizations_weight_norm(dim):
    _pair_norm_modules(lambda lib: lib.nn.utils.parametrizations.weight_norm(lib.nn.Linear(5, 4), dim=dim), _X)


@pytest.mark.parametrize("train", [True, False])
def test_parametrizations_spectral_norm(train):
    _pair_norm_modules(lambda lib: lib.nn.utils.parametrizations.spectral_norm(lib.nn.Linear(5, 4)), _X,
                       train=train)


def test_parametrizations_spectral_norm_conv_transpose_uses_dim1():
    _pair_norm_modules(lambda lib: lib.nn.utils.parametrizations.spectral_norm(lib.nn.ConvTranspose2d(3, 4, 3)),
                       _XC)


def test_hook_weight_norm_and_spectral_norm():
    _pair_norm_modules(lambda lib: lib.nn.utils.weight_norm(lib.nn.Linear(5, 4)), _X)
    _pair_norm_modules(lambda lib: lib.nn.utils.weight_norm(lib.nn.Conv2d(3, 2, 3), dim=None), _XC)
    _pair_norm_modules(lambda lib: lib.nn.utils.spectral_norm(lib.nn.Linear(5, 4)), _X, steps=3)


def test_remove_weight_and_spectral_norm_restore_a_plain_parameter():
    utils = loom.nn.utils
    m = utils.weight_norm(loom.nn.Linear(5, 4))
    y = m(loom.tensor(_X)).detach().numpy()
    utils.remove_weight_norm(m)
    assert list(m.state_dict()) == ["bias", "weight"] and isinstance(m.weight, loom.nn.Parameter)
    np.testing.assert_allclose(m(loom.tensor(_X)).detach().numpy(), y, rtol=1e-6)
    p = utils.parametrizations.weight_norm(loom.nn.Linear(5, 4))
    y = p(loom.tensor(_X)).detach().numpy()
    utils.parametrize.remove_parametrizations(p, "weight")
    assert type(p) is loom.nn.Linear and list(p.state_dict()) == ["bias", "weight"]
    np.testing.assert_allclose(p(loom.tensor(_X)).detach().numpy(), y, rtol=1e-6)
    s = utils.spectral_norm(loom.nn.Linear(5, 4))
    utils.remove_spectral_norm(s)
    assert list(s.state_dict()) == ["bias", "weight"]
    with pytest.raises(loom.errors.LoomValueError, match="weight_norm of 'weight' not found"):
        utils.remove_weight_norm(loom.nn.Linear(2, 2))


def test_parametrize_custom_parametrization_and_assignment():
    class Symmetric(loom.nn.Module):
        def forward(self, x):
            return x.triu() + x.triu(1).transpose(0, 1)

        def right_inverse(self, a):
            return a.triu()

    m = loom.nn.utils.parametrize.register_parametrization(loom.nn.Linear(3, 3), "weight", Symmetric())
    w = m.weight.detach().numpy()
    np.testing.assert_array_equal(w, w.T)
    assert loom.nn.utils.parametrize.is_parametrized(m, "weight") and loom.nn.Linear(2, 2).__class__ is not type(m)
    target = loom.tensor([[1.0, 2.0, 3.0], [2.0, 4.0, 5.0], [3.0, 5.0, 6.0]])
    m.weight = target
    np.testing.assert_array_equal(m.weight.detach().numpy(), target.numpy())
    # Gradients reach the original through the parametrization.
    m(loom.ones(1, 3)).sum().backward()
    assert m.parametrizations.weight.original.grad is not None
    assert type(loom.nn.Linear(2, 2)) is loom.nn.Linear  # Other instances keep their class.


# ---------------------------------------------------------------- checkpoint

def _counting_net():
    calls = {"n": 0}
    net = loom.nn.Sequential(loom.nn.Linear(4, 8), loom.nn.Tanh(), loom.nn.Dropout(0.3), loom.nn.Linear(8, 8),
                             loom.nn.GELU(), loom.nn.Linear(8, 2))
    net[1].register_forward_hook(lambda mod, args, out: calls.__setitem__("n", calls["n"] + 1))
    return net, calls


def test_checkpoint_gradients_equal_plain_and_segment_is_recomputed():
    from loom.utils.checkpoint import checkpoint
    loom.manual_seed(0)
    net, calls = _counting_net()
    x = loom.randn(3, 4, requires_grad=True)
    loom.manual_seed(11)
    out = checkpoint(net, x, use_reentrant=False)
    assert calls["n"] == 1
    out.pow(2).sum().backward()
    assert calls["n"] == 2  # The backward pass ran the segment's forward again.
    got = [p.grad.numpy().copy() for p in net.parameters()] + [x.grad.numpy().copy()]
    net.zero_grad()
    x.grad = None
    loom.manual_seed(11)  # Same dropout mask in the plain run.
    plain = net(x)
    plain.pow(2).sum().backward()
    np.testing.assert_allclose(out.detach().numpy(), plain.detach().numpy(), rtol=1e-6)
    want = [p.grad.numpy() for p in net.parameters()] + [x.grad.numpy()]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-7)


def test_checkpoint_keeps_no_intermediates_in_the_history():
    from loom.utils.checkpoint import checkpoint
    net = loom.nn.Sequential(loom.nn.Linear(4, 4), loom.nn.Tanh(), loom.nn.Linear(4, 4))
    x = loom.randn(2, 4, requires_grad=True)
    y = checkpoint(net, x, use_reentrant=True)
    # One step of history: straight to the input and the four parameters, no intermediate tensors.
    assert y._ctx.name == "checkpoint"
    held = {id(t) for t in y._ctx.inputs}
    assert held == {id(x)} | {id(p) for p in net.parameters()}


def test_checkpoint_lets_go_of_the_segments_intermediates():
    import gc
    import weakref

    from loom.utils.checkpoint import checkpoint
    kept = []

    def segment(x):
        inner = x.sin() * 3.0
        kept.append(weakref.ref(inner))
        return inner.exp().sum()

    x = loom.randn(4, requires_grad=True)
    plain = segment(x)
    ckpt = checkpoint(segment, x, use_reentrant=False)
    gc.collect()
    assert kept[0]() is not None  # The plain call's history holds its intermediate tensor.
    assert kept[1]() is None      # The checkpointed call's does not.
    assert ckpt._node.buffer is not None and ckpt._node.inputs == ()  # Computed; no graph behind it.
    g1 = loom.autograd.grad(ckpt, x)[0]
    g2 = loom.autograd.grad(plain, x)[0]
    np.testing.assert_allclose(g1.numpy(), g2.numpy(), rtol=1e-6)


def test_checkpoint_second_order_and_tuple_outputs():
    from loom.utils.checkpoint import checkpoint

    def f(a, b, scale):
        return (a.sin() * b).exp() * scale, a * b

    a = loom.randn(3, requires_grad=True)
    b = loom.randn(3, requires_grad=True)
    u, v = checkpoint(f, a, b, 2.0, use_reentrant=False)
    pu, pv = f(a, b, 2.0)
    ga = loom.autograd.grad((u + v).sum(), [a, b], create_graph=True)
    gp = loom.autograd.grad((pu + pv).sum(), [a, b], create_graph=True)
    for g, p in zip(ga, gp):
        np.testing.assert_allclose(g.detach().numpy(), p.detach().numpy(), rtol=1e-6)
    h = loom.autograd.grad(ga[0].sum(), a)[0]
    hp = loom.autograd.grad(gp[0].sum(), a)[0]
    np.testing.assert_allclose(h.numpy(), hp.numpy(), rtol=1e-5)


def test_checkpoint_sequential_matches_plain():
    from loom.utils.checkpoint import checkpoint_sequential
    net, calls = _counting_net()
    net.eval()
    x = loom.randn(5, 4, requires_grad=True)
    y = checkpoint_sequential(net, 3, x, use_reentrant=False)
    y.sum().backward()
    assert calls["n"] == 2
    got = [p.grad.numpy().copy() for p in net.parameters()]
    net.zero_grad()
    net(x).sum().backward()
    for g, p in zip(got, net.parameters()):
        np.testing.assert_allclose(g, p.grad.numpy(), rtol=1e-5, atol=1e-7)


def test_checkpoint_warns_without_use_reentrant_and_is_plain_under_no_grad():
    from loom.utils.checkpoint import checkpoint
    with pytest.warns(UserWarning, match="use_reentrant"):
        checkpoint(lambda t: t * 2, loom.ones(2, requires_grad=True))
    with loom.no_grad():
        y = checkpoint(lambda t: t * 2, loom.ones(2, requires_grad=True), use_reentrant=False)
    assert not y.requires_grad


# ---------------------------------------------------------------- lazy layers and the rest

_X4 = np.random.default_rng(2).standard_normal((2, 3, 6, 6)).astype(np.float32)

LAZY = [
    ("LazyLinear", (4,), {}, _X4),
    ("LazyConv1d", (6, 3), {"groups": 3}, _X4[0]),
    ("LazyConv2d", (4, 3), {"padding": 1}, _X4),
    ("LazyConv3d", (2, 2), {}, _X4[None]),
    ("LazyConvTranspose1d", (4, 3), {}, _X4[0]),
    ("LazyConvTranspose2d", (4, 3), {"stride": 2, "output_padding": 1}, _X4),
    ("LazyConvTranspose3d", (2, 2), {}, _X4[None]),
    ("LazyBatchNorm1d", (), {}, _X4[0]),
    ("LazyBatchNorm2d", (), {}, _X4),
    ("LazyBatchNorm3d", (), {"affine": False}, _X4[None]),
    ("LazyInstanceNorm1d", (), {}, _X4[0, 0]),
    ("LazyInstanceNorm2d", (), {"track_running_stats": False}, _X4),
    ("LazyInstanceNorm3d", (), {}, _X4[None]),
]


@pytest.mark.parametrize("name,args,kwargs,x", LAZY, ids=[c[0] for c in LAZY])
def test_lazy_layers_infer_shapes_and_become_the_plain_layer(name, args, kwargs, x):
    torch.manual_seed(0)
    tm, lm = getattr(torch.nn, name)(*args, **kwargs), getattr(loom.nn, name)(*args, **kwargs)
    assert lm.has_uninitialized_params()
    tx, lx = torch.tensor(x), loom.tensor(x)
    tm(tx)
    lm(lx)
    assert type(lm).__name__ == type(tm).__name__ and repr(lm) == repr(tm)
    assert [(k, tuple(v.shape)) for k, v in lm.state_dict().items()] == \
        [(k, tuple(v.shape)) for k, v in tm.state_dict().items()]
    assert all(type(p) is loom.nn.Parameter for p in lm.parameters())
    lm.load_state_dict({k: loom.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})
    np.testing.assert_allclose(lm(lx).detach().numpy(), tm(tx).detach().numpy(), rtol=1e-4, atol=1e-5)


def test_lazy_linear_trains_after_materialising():
    m = loom.nn.LazyLinear(2)
    opt_params = list(m.parameters())
    assert isinstance(opt_params[0], loom.nn.UninitializedParameter)
    m(loom.randn(3, 5)).sum().backward()
    assert opt_params[0].shape == (2, 5) and opt_params[0].grad.shape == (2, 5)  # Same objects, now real.
    with pytest.raises(loom.LoomError, match="uninitialized parameter"):
        loom.nn.UninitializedParameter().numpy()


def test_adaptive_log_softmax_with_loss():
    torch.manual_seed(0)
    kw = dict(cutoffs=[5, 12], head_bias=True)
    tm, lm = torch.nn.AdaptiveLogSoftmaxWithLoss(8, 20, **kw), loom.nn.AdaptiveLogSoftmaxWithLoss(8, 20, **kw)
    assert list(lm.state_dict()) == list(tm.state_dict())
    lm.load_state_dict({k: loom.tensor(v.numpy()) for k, v in tm.state_dict().items()})
    x = np.random.default_rng(0).standard_normal((6, 8)).astype(np.float32)
    t = np.array([1, 7, 15, 19, 0, 12])
    tx, lx = torch.tensor(x, requires_grad=True), loom.tensor(x, requires_grad=True)
    a, b = tm(tx, torch.tensor(t)), lm(lx, loom.tensor(t))
    np.testing.assert_allclose(b.output.detach().numpy(), a.output.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b.loss.item(), a.loss.item(), rtol=1e-6)
    ga = torch.autograd.grad(a.loss, [tx] + list(tm.parameters()))
    gb = loom.autograd.grad(b.loss, [lx] + list(lm.parameters()))
    for u, v in zip(gb, ga):
        np.testing.assert_allclose(u.numpy(), v.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(lm.log_prob(lx).detach().numpy(), tm.log_prob(tx).detach().numpy(), atol=1e-6)
    np.testing.assert_array_equal(lm.predict(lx).numpy(), tm.predict(tx).numpy())
    with pytest.raises(loom.errors.LoomValueError, match=r"target values should be in \[0, 19\]"):
        lm(lx, loom.tensor([0, 1, 2, 3, 4, 20]))


@pytest.mark.parametrize("kw", [{"bias": True}, {"out_features": (3,), "label_smoothing": 0.1},
                                {"ignore_index": 2, "reduction": "sum"}])
def test_linear_cross_entropy_loss(kw):
    torch.manual_seed(1)
    tm, lm = torch.nn.LinearCrossEntropyLoss(8, 5, **kw), loom.nn.LinearCrossEntropyLoss(8, 5, **kw)
    assert repr(lm) == repr(tm)
    lm.load_state_dict({k: loom.tensor(v.numpy()) for k, v in tm.state_dict().items()})
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 8)).astype(np.float32)
    t = rng.integers(0, 5, (6, 3) if "out_features" in kw else (6,))
    np.testing.assert_allclose(lm(loom.tensor(x), loom.tensor(t)).item(), tm(torch.tensor(x), torch.tensor(t)).item(),
                               rtol=1e-5)


def test_data_parallel_and_container():
    inner = loom.nn.Linear(3, 2)
    dp = loom.nn.DataParallel(inner, device_ids=[0])
    x = loom.randn(4, 3)
    np.testing.assert_array_equal(dp(x).detach().numpy(), inner(x).detach().numpy())
    assert list(dp.state_dict()) == list(torch.nn.DataParallel(torch.nn.Linear(3, 2)).state_dict())
    with pytest.warns(DeprecationWarning, match="nn.Container is deprecated"):
        c = loom.nn.Container(fc=loom.nn.Linear(2, 2))
    assert list(c.state_dict()) == ["fc.weight", "fc.bias"]


# ---------------------------------------------------------------- nn.utils and nn.init additions

@pytest.mark.parametrize("transpose", [False, True])
def test_fuse_conv_bn_eval_matches_pytorch(transpose):
    torch.manual_seed(0)
    make = (lambda lib: lib.nn.ConvTranspose2d(3, 4, 3)) if transpose else (lambda lib: lib.nn.Conv2d(3, 4, 3))
    tc, tb = make(torch).eval(), torch.nn.BatchNorm2d(4).eval()
    with torch.no_grad():
        tb.running_mean.uniform_(-1, 1)
        tb.running_var.uniform_(0.5, 2)
        tb.weight.uniform_(0.5, 2)
        tb.bias.uniform_(-1, 1)
    lc, lb = make(loom).eval(), loom.nn.BatchNorm2d(4).eval()
    lc.load_state_dict({k: loom.tensor(v.numpy()) for k, v in tc.state_dict().items()})
    lb.load_state_dict({k: loom.tensor(v.numpy()) for k, v in tb.state_dict().items()})
    tf = torch.nn.utils.fuse_conv_bn_eval(tc, tb, transpose=transpose)
    lf = loom.nn.utils.fuse_conv_bn_eval(lc, lb, transpose=transpose)
    for (k, lv), tv in zip(lf.state_dict().items(), tf.state_dict().values()):
        np.testing.assert_allclose(lv.numpy(), tv.detach().numpy(), rtol=1e-5, atol=1e-6, err_msg=k)
    x = np.random.default_rng(0).standard_normal((1, 3, 6, 6)).astype(np.float32)
    np.testing.assert_allclose(lf(loom.tensor(x)).detach().numpy(), lb(lc(loom.tensor(x))).detach().numpy(),
                               rtol=1e-4, atol=1e-5)
    with pytest.raises(loom.errors.LoomValueError, match="only works in eval mode"):
        loom.nn.utils.fuse_conv_bn_eval(lc.train(), lb)


def test_fuse_linear_bn_eval():
    lin, bn = loom.nn.Linear(3, 4).eval(), loom.nn.BatchNorm1d(4).eval()
    bn.running_mean.uniform_(-1, 1)
    bn.running_var.uniform_(0.5, 2)
    fused = loom.nn.utils.fuse_linear_bn_eval(lin, bn)
    x = loom.randn(5, 3)
    np.testing.assert_allclose(fused(x).detach().numpy(), bn(lin(x)).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_functional_call_swaps_and_restores():
    net = loom.nn.Sequential(loom.nn.Linear(2, 3), loom.nn.BatchNorm1d(3))
    before = {k: v.detach().numpy().copy() for k, v in net.state_dict().items()}
    w = loom.randn(3, 2, requires_grad=True)
    out = loom.nn.utils.stateless.functional_call(net.eval(), {"0.weight": w}, loom.ones(4, 2))
    (g,) = loom.autograd.grad(out.sum(), [w])
    assert g.shape == (3, 2) and float(g.abs().sum()) > 0
    for k, v in net.state_dict().items():
        np.testing.assert_array_equal(v.detach().numpy(), before[k])
    with pytest.raises(loom.errors.LoomValueError, match="no parameter or buffer named 'nope'"):
        loom.nn.utils.stateless.functional_call(net, {"nope": w}, loom.ones(4, 2))


def test_init_sparse_and_deprecated_spellings():
    loom.manual_seed(0)
    w = loom.nn.init.sparse_(loom.empty(10, 4), sparsity=0.3, std=0.5)
    zeros = (w.numpy() == 0).sum(0)
    assert zeros.tolist() == [3, 3, 3, 3] and 0.2 < float(w.numpy()[w.numpy() != 0].std()) < 0.9
    with pytest.warns(FutureWarning, match=r"nn.init.xavier_uniform is now deprecated in favor of"):
        loom.nn.init.xavier_uniform(loom.empty(3, 3))
    with pytest.warns(FutureWarning, match="clip_grad_norm is now deprecated"):
        p = loom.nn.Parameter(loom.ones(2))
        p.grad = loom.ones(2) * 10
        loom.nn.utils.clip_grad_norm([p], 1.0)
    np.testing.assert_allclose(np.linalg.norm(p.grad.numpy()), 1.0, rtol=1e-5)


# ---------------------------------------------------------------- packed sequences

@pytest.mark.parametrize("name,kw,enforce_sorted", [
    ("LSTM", {"num_layers": 2, "bidirectional": True}, False),
    ("LSTM", {"proj_size": 2}, False),
    ("GRU", {}, True),
    ("RNN", {"bidirectional": True, "nonlinearity": "relu"}, False),
])
def test_recurrent_layers_take_packed_sequences(name, kw, enforce_sorted):
    from torch.nn.utils import rnn as tr
    lr = loom.nn.utils.rnn
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 3, 4)).astype(np.float32)
    lens = [5, 3, 2] if enforce_sorted else [3, 5, 2]
    torch.manual_seed(0)
    tm, lm = getattr(torch.nn, name)(4, 6, **kw), getattr(loom.nn, name)(4, 6, **kw)
    lm.load_state_dict({k: loom.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})
    tx, lx = torch.tensor(x, requires_grad=True), loom.tensor(x, requires_grad=True)
    tp = tr.pack_padded_sequence(tx, lens, enforce_sorted=enforce_sorted)
    lp = lr.pack_padded_sequence(lx, lens, enforce_sorted=enforce_sorted)
    np.testing.assert_array_equal(lp.data.detach().numpy(), tp.data.detach().numpy())
    assert lp.batch_sizes.tolist() == tp.batch_sizes.tolist()
    assert (lp.sorted_indices is None) == (tp.sorted_indices is None)
    to, th = tm(tp)
    lo, lh = lm(lp)
    assert isinstance(lo, lr.PackedSequence) and lo.batch_sizes.tolist() == to.batch_sizes.tolist()
    th, lh = (th if isinstance(th, tuple) else (th,)), (lh if isinstance(lh, tuple) else (lh,))
    for a, b in zip(lh, th):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-5, atol=1e-6)
    tpad, tl = tr.pad_packed_sequence(to, batch_first=True, total_length=6)
    lpad, ll = lr.pad_packed_sequence(lo, batch_first=True, total_length=6)
    np.testing.assert_allclose(lpad.detach().numpy(), tpad.detach().numpy(), rtol=1e-5, atol=1e-6)
    assert ll.tolist() == tl.tolist()
    cot = rng.standard_normal(tuple(tpad.shape)).astype(np.float32)
    gt = torch.autograd.grad((tpad * torch.from_numpy(cot)).sum() + sum(h.sum() for h in th),
                             [tx] + list(tm.parameters()))
    gl = loom.autograd.grad((lpad * loom.tensor(cot)).sum() + sum(h.sum() for h in lh), [lx] + list(lm.parameters()))
    for a, b in zip(gl, gt):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-5)


def test_pack_sequence_round_trip_and_errors():
    from torch.nn.utils import rnn as tr
    lr = loom.nn.utils.rnn
    rng = np.random.default_rng(1)
    seqs = [rng.standard_normal((n, 2)).astype(np.float32) for n in (4, 2, 3)]
    tp = tr.pack_sequence([torch.from_numpy(s) for s in seqs], enforce_sorted=False)
    lp = lr.pack_sequence([loom.tensor(s) for s in seqs], enforce_sorted=False)
    np.testing.assert_array_equal(lp.data.numpy(), tp.data.numpy())
    assert lp.sorted_indices.tolist() == tp.sorted_indices.tolist()
    assert lp.unsorted_indices.tolist() == tp.unsorted_indices.tolist()
    for got, want in zip(lr.unpack_sequence(lp), seqs):
        np.testing.assert_array_equal(got.numpy(), want)
    with pytest.raises(loom.errors.LoomValueError, match="must be sorted in decreasing order"):
        lr.pack_padded_sequence(loom.zeros(4, 2, 1), [2, 4])
    with pytest.raises(loom.errors.LoomValueError, match="exceeds the 4 time steps"):
        lr.pack_padded_sequence(loom.zeros(4, 2, 1), [5, 4])


def test_checkpoint_inside_a_traced_step():
    from loom.utils.checkpoint import checkpoint
    net = loom.nn.Sequential(loom.nn.Linear(4, 8), loom.nn.Tanh(), loom.nn.Linear(8, 2))

    def grads(x, use_checkpoint):
        y = checkpoint(net, x, use_reentrant=False) if use_checkpoint else net(x)
        return loom.autograd.grad((y * y).sum(), list(net.parameters()) + [x])

    step = loom.function(lambda x: grads(x, True))
    x = loom.randn(3, 4, requires_grad=True)
    for _ in range(3):
        got = step(x)
    assert step.trace_count == 1
    for g, w in zip(got, grads(x, False)):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- Module hooks and helpers

def _hooked_pair():
    torch.manual_seed(0)
    ts = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    ls = loom.nn.Sequential(loom.nn.Linear(3, 4), loom.nn.Tanh(), loom.nn.Linear(4, 2))
    ls.load_state_dict({k: loom.tensor(v.numpy()) for k, v in ts.state_dict().items()})
    return ts, ls


def _arr(g):
    return None if g is None else g.detach().numpy().copy()


@pytest.mark.parametrize("input_grad", [False, True])
def test_full_backward_hooks_match_pytorch(input_grad):
    import warnings
    ts, ls = _hooked_pair()
    rec = {"t": [], "l": []}
    for key, s in (("t", ts), ("l", ls)):
        def full(m, gi, go, key=key, tag="full"):
            rec[key].append((tag, [_arr(g) for g in gi], [_arr(g) for g in go]))

        def pre(m, go, key=key):
            rec[key].append(("pre", [_arr(g) for g in go]))
            return tuple(g * 2 for g in go)
        s[0].register_full_backward_hook(full)
        s[1].register_full_backward_hook(full)
        s[1].register_full_backward_hook(lambda m, gi, go: tuple(g * 3 for g in gi))
        s[2].register_full_backward_pre_hook(pre)
    x = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    tx, lx = torch.tensor(x, requires_grad=input_grad), loom.tensor(x, requires_grad=input_grad)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ts(tx).sum().backward()
    ls(lx).sum().backward()
    assert [r[0] for r in rec["l"]] == [r[0] for r in rec["t"]] == ["pre", "full", "full"]
    for got, want in zip(rec["l"], rec["t"]):
        for part_l, part_t in zip(got[1:], want[1:]):
            for a, b in zip(part_l, part_t):
                assert (a is None) == (b is None)
                if a is not None:
                    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    for p, q in zip(ls.parameters(), ts.parameters()):  # The hooks' replacements reached the parameters.
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-5, atol=1e-6)
    if input_grad:
        np.testing.assert_allclose(lx.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_state_dict_and_load_hooks():
    m = loom.nn.Linear(2, 2)
    seen = []
    m.register_state_dict_pre_hook(lambda mod, prefix, keep_vars: seen.append(("pre", prefix)))

    def rename(mod, sd, prefix, meta):
        sd[prefix + "extra"] = loom.ones(1)
    h = m.register_state_dict_post_hook(rename)
    sd = m.state_dict()
    assert seen == [("pre", "")] and list(sd) == ["weight", "bias", "extra"]
    h.remove()

    def old_names(mod, sd, prefix, meta, strict, missing, unexpected, errors):
        if prefix + "w" in sd:
            sd[prefix + "weight"] = sd.pop(prefix + "w")
    m.register_load_state_dict_pre_hook(old_names)
    posts = []
    m.register_load_state_dict_post_hook(lambda mod, keys: posts.append(list(keys.missing_keys)))
    given = {"w": loom.full((2, 2), 7.0), "bias": loom.zeros(2)}
    m.load_state_dict(given)
    assert list(given) == ["w", "bias"]  # The caller's dict is left alone.
    assert float(m.weight.sum()) == 28.0 and posts == [[]]


def test_set_submodule_and_to_empty():
    net = loom.nn.Sequential(loom.nn.Linear(2, 3), loom.nn.Sequential(loom.nn.ReLU()))
    net.set_submodule("1.0", loom.nn.Tanh())
    assert isinstance(net[1][0], loom.nn.Tanh)
    with pytest.raises(AttributeError, match="has no submodule `5`"):
        net.set_submodule("1.5", loom.nn.Tanh(), strict=True)
    w = net[0].weight
    net.to_empty()
    assert net[0].weight is w and w.shape == (3, 2)
    with pytest.raises(loom.errors.DeviceError, match="loom.nn.Module.xpu: loom has no xpu backend"):
        net.xpu()
