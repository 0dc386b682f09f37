"""Parity of loom/functional/misc.py and the other `torch.*` names added with it, against PyTorch."""
import math

import numpy as np
import pytest

import loom
import loom.torch as ltorch
from tests.parity.harness import Case, ints, positive, randn, run_case, uniform

torch = pytest.importorskip("torch")


def _w(*shape):
    return lambda rng: (rng.standard_normal(shape) * 0.4).astype(np.float32)


def _rnn_params(mode_gates, inp, hid, layers, dirs, bias=True):
    shapes = []
    for layer in range(layers):
        for _ in range(dirs):
            i = inp if layer == 0 else hid * dirs
            shapes += [(mode_gates * hid, i), (mode_gates * hid, hid)]
            if bias:
                shapes += [(mode_gates * hid,), (mode_gates * hid,)]
    return tuple(_w(*s) for s in shapes)


def _rnn_case(name, fn, gates, layers, dirs, batch_first, bias=True, lstm=False):
    params = _rnn_params(gates, 3, 4, layers, dirs, bias)
    x = randn(2, 5, 3) if batch_first else randn(5, 2, 3)
    h = randn(layers * dirs, 2, 4)
    if lstm:
        def body(m, x, h, c, *ps):
            return getattr(m, fn)(x, (h, c), list(ps), bias, layers, 0.0, False, dirs == 2, batch_first)
        return Case(name, body, (x, h, randn(layers * dirs, 2, 4)) + params, rtol=1e-4, atol=1e-5)

    def body(m, x, h, *ps):
        return getattr(m, fn)(x, h, list(ps), bias, layers, 0.0, False, dirs == 2, batch_first)
    return Case(name, body, (x, h) + params, rtol=1e-4, atol=1e-5)


def _igamma_inputs(dtype):
    def make(rng):
        return rng.uniform(0.2, 12.0, 40).astype(dtype)
    return make


def _increasing(n):
    return lambda rng: np.cumsum(rng.uniform(0.3, 2.0, n)).astype(np.float32)


def _grid(*shape):
    return lambda rng: rng.uniform(-1.2, 1.2, shape).astype(np.float32)


CASES = [
    _rnn_case("rnn_tanh", "rnn_tanh", 1, 1, 1, False),
    _rnn_case("rnn_relu_2layer_batch_first", "rnn_relu", 1, 2, 1, True),
    _rnn_case("rnn_tanh_bidirectional_nobias", "rnn_tanh", 1, 1, 2, False, bias=False),
    _rnn_case("lstm_2layer_bidirectional", "lstm", 4, 2, 2, False, lstm=True),
    _rnn_case("lstm_batch_first", "lstm", 4, 1, 1, True, lstm=True),
    _rnn_case("gru_2layer", "gru", 3, 2, 1, False),
    _rnn_case("gru_bidirectional_batch_first", "gru", 3, 1, 2, True),
    Case("rnn_tanh_cell", lambda m, x, h, a, b, c, d: m.rnn_tanh_cell(x, h, a, b, c, d),
         (randn(2, 3), randn(2, 4), _w(4, 3), _w(4, 4), _w(4), _w(4)), second_order=True),
    Case("rnn_relu_cell_nobias", lambda m, x, h, a, b: m.rnn_relu_cell(x, h, a, b),
         (randn(2, 3), randn(2, 4), _w(4, 3), _w(4, 4))),
    Case("lstm_cell", lambda m, x, h, c, a, b, d, e: m.lstm_cell(x, (h, c), a, b, d, e),
         (randn(2, 3), randn(2, 4), randn(2, 4), _w(16, 3), _w(16, 4), _w(16), _w(16))),
    Case("gru_cell", lambda m, x, h, a, b, c, d: m.gru_cell(x, h, a, b, c, d),
         (randn(2, 3), randn(2, 4), _w(12, 3), _w(12, 4), _w(12), _w(12))),
    Case("igamma_float64", lambda m, a, x: m.igamma(a, x), (_igamma_inputs(np.float64), _igamma_inputs(np.float64)),
         grad_inputs=(1,), second_order=True, rtol=1e-9, atol=1e-12),
    Case("igammac_float64", lambda m, a, x: m.igammac(a, x),
         (_igamma_inputs(np.float64), _igamma_inputs(np.float64)), grad_inputs=(1,), rtol=1e-9, atol=1e-12),
    Case("igamma_float32_methods", lambda m, a, x: (a.igamma(x), a.igammac(x), (a * 1).igamma_(x)),
         (_igamma_inputs(np.float32), _igamma_inputs(np.float32)), grad_inputs=(1,)),
    Case("igamma_edges", lambda m: (m.igamma(m.tensor([0.0, 1.0, 2.0, -1.0, 1.0, 0.0, 3.0]),
                                             m.tensor([1.0, 0.0, -1.0, 1.0, math.inf, 0.0, 30.0])),
                                    m.igammac(m.tensor([0.0, 1.0, 2.0, -1.0, 1.0, 0.0, 50.0]),
                                              m.tensor([1.0, 0.0, -1.0, 1.0, math.inf, 0.0, 0.5]))), (), grad=False),
    Case("nextafter", lambda m, x, y: (m.nextafter(x, y), x.nextafter(y * 0), (x * 1).nextafter_(x)),
         (randn(30), randn(30)), grad=False),
    Case("nextafter_edges", lambda m: m.nextafter(m.tensor([0.0, 1.0, 1.0, math.inf, -1.0, 0.5, -0.5, 2.0]),
                                                  m.tensor([1.0, 2.0, 1.0, 0.0, -2.0, 0.0, -1.0, math.nan])),
         (), grad=False),
    Case("nextafter_float64", lambda m, x, y: m.nextafter(x, y), (randn(20, dtype=np.float64),
                                                                  randn(20, dtype=np.float64)), grad=False),
    Case("gradient_default", lambda m, x: m.gradient(x), (randn(4, 5),), second_order=True),
    Case("gradient_spacing_dim_edge2", lambda m, x: m.gradient(x, spacing=2.0, dim=1, edge_order=2), (randn(3, 5),)),
    Case("gradient_spacing_list", lambda m, x: m.gradient(x, spacing=[0.5, 3.0], dim=[0, -1]), (randn(3, 4),)),
    Case("gradient_coordinates", lambda m, x, c: m.gradient(x, spacing=(c,), dim=0),
         (randn(6, 2), _increasing(6)), grad_inputs=(0, 1)),
    Case("gradient_coordinates_edge2", lambda m, x, c: m.gradient(x, spacing=(c,), dim=0, edge_order=2),
         (randn(5), _increasing(5)), grad_inputs=(0, 1), rtol=1e-4, atol=1e-4),
    Case("gradient_int", lambda m, x: m.gradient(x), (ints(6, high=20),), grad=False),
    Case("histogramdd_range", lambda m, x: m.histogramdd(x, bins=[3, 4], range=[-1.0, 1.0, -2.0, 2.0]),
         (randn(50, 2),), grad=False),
    Case("histogramdd_weight_density", lambda m, x, w: m.histogramdd(x, bins=3, weight=w, density=True,
                                                                      range=[-2.0, 2.0, -2.0, 2.0, -2.0, 2.0]),
         (randn(40, 3), positive(40)), grad=False),
    Case("histogramdd_edges_3d_input", lambda m, x: m.histogramdd(x, bins=[m.tensor([-1.0, 0.0, 0.5, 2.0]),
                                                                           m.tensor([-3.0, 0.0, 3.0])]),
         (randn(4, 6, 2),), grad=False),
    Case("histogramdd_data_range", lambda m, x: m.histogramdd(x, bins=4), (randn(30, 2),), grad=False,
         traceable=False),
    *[Case(f"index_reduce_{r}_{s}", lambda m, x, s_, r=r, s=s: m.index_reduce(x, 0, m.tensor([0, 2, 0, 3]), s_, r,
                                                                               include_self=s),
           (uniform(4, 3, low=0.5, high=2.0), uniform(4, 3, low=0.5, high=2.0)))
      for r in ("prod", "mean", "amax", "amin") for s in (True, False)],
    Case("index_reduce_method_dim1", lambda m, x, s: (x.index_reduce(1, m.tensor([1, 1]), s, "mean"),
                                                      (x * 1).index_reduce_(-1, m.tensor([0, 2]), s, "amax")),
         (randn(2, 3), randn(2, 2))),
    *[Case(f"segment_reduce_{r}", lambda m, x, r=r: m.segment_reduce(x, r, lengths=m.tensor([2, 0, 3, 1])),
           (uniform(6, 3, low=0.5, high=2.0),)) for r in ("sum", "mean", "max", "min", "prod")],
    Case("segment_reduce_offsets_axis1",
         lambda m, x: m.segment_reduce(x, "sum", offsets=m.tensor([[0, 2, 5, 5], [0, 1, 1, 5]]), axis=1),
         (randn(2, 5),)),
    Case("segment_reduce_initial", lambda m, x: (m.segment_reduce(x, "max", lengths=m.tensor([3, 0, 1]), initial=0.5),
                                                 m.segment_reduce(x, "sum", lengths=m.tensor([3, 0, 1]), initial=2.0),
                                                 m.segment_reduce(x, "mean", lengths=m.tensor([3, 0, 1]), initial=2.0)),
         (randn(4),)),
    # PyTorch 2.13's gradient for `input` is the cotangent at the overwritten places instead of the others
    # (test_as_strided_scatter_input_gradient checks loom's); `src`'s is compared.
    Case("as_strided_scatter", lambda m, x, s: m.as_strided_scatter(x, s, (2, 2), (1, 3), 1), (randn(8), randn(2, 2)),
         grad_inputs=(1,), reason="PyTorch's input gradient is wrong"),
    Case("as_strided_scatter_method", lambda m, x, s: x.as_strided_scatter(s, (3,), (2,)), (randn(2, 3), randn(3)),
         grad_inputs=(1,), reason="PyTorch's input gradient is wrong"),
    Case("norm_except_dim", lambda m, v: (m.norm_except_dim(v, 2, 0), m.norm_except_dim(v, 3, 1),
                                          m.norm_except_dim(v, 2, -1)), (randn(3, 4, 2),)),
    Case("convolution_2d", lambda m, x, w, b: m.convolution(x, w, b, [2, 1], [1, 0], [1, 2], False, [0, 0], 2),
         (randn(1, 4, 6, 7), randn(6, 2, 3, 2), randn(6))),
    Case("convolution_transposed_1d", lambda m, x, w: m.convolution(x, w, None, [2], [1], [1], True, [1], 1),
         (randn(2, 3, 5), randn(3, 2, 3))),
    Case("grid_sampler_bilinear_zeros", lambda m, x, g: m.grid_sampler(x, g, 0, 0, False),
         (randn(2, 3, 5, 4), _grid(2, 3, 2, 2))),
    Case("grid_sampler_2d_bicubic_border", lambda m, x, g: m.grid_sampler_2d(x, g, 2, 1, True),
         (randn(1, 2, 4, 4), _grid(1, 2, 3, 2)), rtol=1e-4, atol=1e-5),
    Case("grid_sampler_3d_reflection", lambda m, x, g: m.grid_sampler_3d(x, g, 0, 2, False),
         (randn(1, 2, 3, 4, 3), _grid(1, 2, 2, 2, 3))),
    Case("affine_grid_generator", lambda m, t: m.affine_grid_generator(t, [2, 3, 4, 5], False), (randn(2, 2, 3),)),
    Case("feature_dropout_eval", lambda m, x: (m.feature_dropout(x, 0.3, False), m.feature_dropout_(x * 1, 0.3, False)),
         (randn(2, 3, 4),)),
    Case("embedding_renorm_", lambda m, w: m.embedding_renorm_(w * 1, m.tensor([0, 2, 2]), 1.0, 2.0),
         (randn(4, 3),), grad=False),
    Case("tensor_hardshrink_prelu", lambda m, x, w: (x.hardshrink(), x.hardshrink(0.2), x.prelu(w)),
         (randn(2, 3, 4), positive(3))),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_parity(case, mode):
    run_case(case, mode)


@pytest.mark.parametrize("case", [c for c in CASES if c.name in ("lstm_batch_first", "igamma_edges", "gradient_default",
                                                                   "segment_reduce_sum", "convolution_2d")], ids=str)
def test_parity_through_torch_names(case):
    run_case(case, "eager", lib=ltorch)


def test_igamma_input_gradient_is_not_implemented():
    a = loom.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(loom.AutogradError, match="input"):
        loom.igamma(a, loom.tensor([1.0, 2.0])).sum().backward()
    with pytest.raises(loom.DTypeError, match="floating point"):
        loom.igamma(loom.tensor([1, 2]), loom.tensor([1.0, 2.0]))


def test_poisson_and_binomial_have_their_distributions():
    loom.manual_seed(3)
    rates = loom.tensor([0.0, 0.5, 4.0, 40.0]).repeat(20000, 1)
    s = loom.poisson(rates).numpy()
    assert s.dtype == np.float32 and (s == np.round(s)).all() and (s[:, 0] == 0).all()
    np.testing.assert_allclose(s.mean(0), [0.0, 0.5, 4.0, 40.0], rtol=0.03, atol=0.02)
    np.testing.assert_allclose(s.var(0), [0.0, 0.5, 4.0, 40.0], rtol=0.06, atol=0.02)
    n = loom.tensor([0.0, 5.0, 20.0, 7.0]).repeat(20000, 1)
    p = loom.tensor([0.3, 0.0, 0.25, 1.0])
    b = loom.binomial(n, p.expand(20000, 4)).numpy()
    assert (b[:, 0] == 0).all() and (b[:, 1] == 0).all() and (b[:, 3] == 7).all() and b.max() <= 20
    assert abs(b[:, 2].mean() - 5.0) < 0.1 and abs(b[:, 2].var() - 3.75) < 0.25
    g = loom.Generator(7)
    assert loom.poisson(loom.full((5,), 3.0), generator=g).tolist() == \
        loom.poisson(loom.full((5,), 3.0), generator=loom.Generator(7)).tolist()
    with pytest.raises(loom.LoomValueError, match="non-negative"):
        loom.poisson(loom.tensor([-1.0]))
    with pytest.raises(loom.LoomValueError, match="0 <= prob <= 1"):
        loom.binomial(loom.tensor([2.0]), loom.tensor([1.5]))


def test_feature_dropout_drops_whole_channels():
    loom.manual_seed(0)
    y = loom.feature_dropout(loom.ones(64, 8, 5), 0.5, True).numpy()
    per_channel = y.reshape(64 * 8, 5)
    assert set(np.unique(per_channel)) <= {0.0, 2.0}
    assert (per_channel.min(1) == per_channel.max(1)).all()
    assert 0.4 < (per_channel[:, 0] == 0).mean() < 0.6
    x = loom.ones(4, 3)
    assert loom.feature_dropout_(x, 0.5, True) is x


def test_sync_batch_norm_pieces_match_batch_norm():
    rng = np.random.default_rng(0)
    x = loom.tensor(rng.standard_normal((6, 3, 4)), requires_grad=True)
    w, b = loom.tensor(rng.uniform(0.5, 2, 3)), loom.tensor(rng.standard_normal(3))
    dy = loom.tensor(rng.standard_normal((6, 3, 4)))
    eps = 1e-5
    y_ref = loom.nn.functional.batch_norm(x, None, None, w, b, training=True, eps=eps)
    (gx_ref,) = loom.autograd.grad(y_ref, x, dy)
    xd = x.detach()
    # Two "processes" of 4 and 2 samples, combined as SyncBatchNorm does.
    parts = [xd[:4], xd[4:]]
    stats = [loom.batch_norm_stats(p, eps) for p in parts]
    rm, rv = loom.zeros(3, dtype=loom.float64), loom.ones(3, dtype=loom.float64)
    mean, invstd = loom.batch_norm_gather_stats_with_counts(
        xd, loom.stack([s[0] for s in stats]), loom.stack([s[1] for s in stats]), rm, rv, 0.1, eps,
        loom.tensor([16.0, 8.0], dtype=loom.float64))
    y = loom.batch_norm_elemt(xd, w, b, mean, invstd, eps)
    np.testing.assert_allclose(y.numpy(), y_ref.detach().numpy(), rtol=1e-9, atol=1e-9)
    batch_var = xd.var((0, 2))
    np.testing.assert_allclose(rm.numpy(), 0.1 * xd.mean((0, 2)).numpy(), rtol=1e-9)
    np.testing.assert_allclose(rv.numpy(), 0.9 + 0.1 * batch_var.numpy(), rtol=1e-9)
    sum_dy, sum_dy_xmu, gw, gb = loom.batch_norm_backward_reduce(dy, xd, mean, invstd, w, True, True, True)
    gx = loom.batch_norm_backward_elemt(dy, xd, mean, invstd, w, sum_dy, sum_dy_xmu, loom.tensor([16, 8]))
    np.testing.assert_allclose(gx.numpy(), gx_ref.numpy(), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(gb.numpy(), dy.sum((0, 2)).numpy(), rtol=1e-9)
    assert loom.batch_norm_backward_reduce(dy, xd, mean, invstd, w, False, False, False)[0].numel() == 0
    m2, v2 = loom.batch_norm_gather_stats(xd, loom.stack([stats[0][0], stats[0][0]]),
                                          loom.stack([stats[0][1], stats[0][1]]), None, None, 0.1, eps, 16)
    np.testing.assert_allclose(m2.numpy(), stats[0][0].numpy(), rtol=1e-9)
    np.testing.assert_allclose(v2.numpy(), stats[0][1].numpy(), rtol=1e-7)
    rm, rv = loom.zeros(3, dtype=loom.float64), loom.ones(3, dtype=loom.float64)
    m3, v3 = loom.batch_norm_update_stats(xd, rm, rv, 0.5)
    np.testing.assert_allclose(v3.numpy(), xd.var((0, 2), correction=0).numpy(), rtol=1e-9)
    np.testing.assert_allclose(rv.numpy(), 0.5 + 0.5 * batch_var.numpy(), rtol=1e-9)


def test_as_strided_scatter_input_gradient():
    x = loom.zeros(8, requires_grad=True)
    y = loom.as_strided_scatter(x, loom.ones(2, 2), (2, 2), (1, 3), 1)
    assert y.tolist() == [0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0]
    (g,) = loom.autograd.grad(y, x, loom.arange(8.0))
    assert g.tolist() == [0.0, 0.0, 0.0, 3.0, 0.0, 0.0, 6.0, 7.0]  # The places src did not overwrite.


def test_misc_errors_name_the_problem():
    with pytest.raises(loom.LoomValueError, match="expected 4 weights"):
        loom.lstm(loom.ones(2, 1, 3), (loom.zeros(1, 1, 4), loom.zeros(1, 1, 4)), [loom.ones(16, 3)], True, 1, 0.0,
                  False, False, False)
    with pytest.raises(loom.LoomValueError, match="sum to the size"):
        loom.segment_reduce(loom.ones(4), "sum", lengths=loom.tensor([1, 2]))
    with pytest.raises(loom.ShapeError, match="axis must be its last dim"):
        loom.segment_reduce(loom.ones(2, 4), "sum", lengths=loom.tensor([1, 3]), axis=1)
    with pytest.raises(loom.LoomValueError, match="at least edge_order"):
        loom.gradient(loom.ones(2), edge_order=2)
    with pytest.raises(loom.ShapeError, match="source must have shape"):
        loom.index_reduce(loom.ones(3, 2), 0, loom.tensor([0, 1]), loom.ones(3, 2), "prod")
    with pytest.raises(loom.LoomError, match="quantized"):
        loom.empty_quantized([2], loom.ones(2))
    with pytest.raises(loom.DTypeError, match="same dtype"):
        loom.nextafter(loom.ones(2), loom.ones(2, dtype=loom.float64))


# ---------------------------------------------------------------- Tensor attributes

def test_resize_family_matches_pytorch():
    for shape, new in [((2, 3), (4,)), ((4,), (2, 2)), ((3,), (2, 3)), ((2, 2), (0,))]:
        n = int(np.prod(shape))
        x, t = loom.arange(float(n)).reshape(shape), torch.arange(float(n)).reshape(shape)
        assert x.resize_(*new) is x and tuple(x.shape) == tuple(t.resize_(*new).shape)
        keep = min(n, int(np.prod(new)))
        np.testing.assert_array_equal(x.numpy().reshape(-1)[:keep], t.numpy().reshape(-1)[:keep])
    x = loom.zeros(5)
    assert x.resize_as_(loom.ones(2, 3)).shape == (2, 3)
    y = loom.arange(6.0, requires_grad=True)
    r = y.resize(3, 2)
    assert r.shape == (3, 2) and r.requires_grad and y.resize_as(loom.ones(2, 3)).shape == (2, 3)
    with pytest.raises(loom.ShapeError, match="keeps the element count"):
        y.resize(4)
    with pytest.raises(loom.AutogradError, match="requires grad"):
        y.resize_(2)


def test_as_strided_inplace_and_map2_match_pytorch():
    x, t = loom.arange(8.0), torch.arange(8.0)
    assert x.as_strided_((3, 2), (2, 1), 1) is x
    t.as_strided_((3, 2), (2, 1), 1)
    np.testing.assert_array_equal(x.numpy(), t.numpy())
    a, b, c = ([1.0, 2.0], [3.0, 4.0], [5.0, 6.0])
    got = loom.tensor(a).map2_(loom.tensor(b), loom.tensor(c), lambda p, q, r: p * q - r)
    want = torch.tensor(a).map2_(torch.tensor(b), torch.tensor(c), lambda p, q, r: p * q - r)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_metadata_attributes_match_pytorch():
    x, t = loom.ones(2, 3), torch.ones(2, 3)
    assert repr(x.layout) == repr(t.layout) == "torch.strided" and x.layout is ltorch.strided
    assert x.name is None and t.name is None and x.output_nr == t.output_nr == 0
    with pytest.warns(UserWarning, match="volatile was removed"):
        assert x.volatile is False
    assert x.grad_dtype is loom.float32 and t.grad_dtype is torch.float32
    with pytest.raises(loom.LoomError, match="leaf"):
        _ = (loom.ones(2, requires_grad=True) * 2).grad_dtype


def test_grad_dtype_casts_the_accumulated_gradient():
    w = loom.ones(3, requires_grad=True)
    w.grad_dtype = loom.float64
    (w * 2).sum().backward()
    assert w.grad.dtype is loom.float64 and w.grad.tolist() == [2.0, 2.0, 2.0]
    w.grad_dtype = None
    assert w.grad_dtype is None


def test_post_accumulate_grad_hook_sees_the_summed_grad():
    for lib in (loom, torch):
        w = lib.ones(2, requires_grad=True)
        seen = []
        h = w.register_post_accumulate_grad_hook(lambda p: seen.append(p.grad.tolist()))
        (w * 3 + w * 4).sum().backward()  # Two paths into w: the hook runs once, after both.
        (w * 1).sum().backward()
        h.remove()
        (w * 1).sum().backward()
        assert seen == [[7.0, 7.0], [8.0, 8.0]], lib
    with pytest.raises(loom.AutogradError, match="non-leaf"):
        (loom.ones(2, requires_grad=True) * 2).register_post_accumulate_grad_hook(print)


def test_removed_and_nested_only_methods_raise_like_pytorch():
    x = loom.ones(2)
    with pytest.raises(loom.LoomError, match="reinforce\\(\\) was removed"):
        x.reinforce(1.0)
    with pytest.raises(loom.LoomError, match="nested tensor"):
        x.to_padded_tensor(0.0)
    with pytest.raises(loom.LoomError, match="first-class"):
        x.index((0,), None)


def test_igamma_without_a_c_compiler_uses_loom_ops():
    from loom.functional.misc import _igamma_pq
    rng = np.random.default_rng(1)
    a, x = rng.uniform(0.05, 40.0, 200), rng.uniform(0.0, 60.0, 200)
    p, q = _igamma_pq(loom.tensor(a), loom.tensor(x))
    np.testing.assert_allclose(p.numpy(), torch.special.gammainc(torch.tensor(a), torch.tensor(x)).numpy(),
                               rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(q.numpy(), torch.special.gammaincc(torch.tensor(a), torch.tensor(x)).numpy(),
                               rtol=1e-8, atol=1e-12)


# ---------------------------------------------------------------- dtypes and namespace odds and ends

@pytest.mark.parametrize("name", ["uint16", "uint32", "uint64"])
def test_wide_unsigned_dtypes_behave_like_pytorchs(name):
    d, td = getattr(ltorch, name), getattr(torch, name)
    vals = [1, 2, 3, 70000]
    x, t = loom.tensor(vals).to(d), torch.tensor(vals).to(td)
    assert x.dtype is d and not x.is_signed() and ltorch.iinfo(d).max == torch.iinfo(td).max
    for f in (lambda v: v * 2, lambda v: v & 5, lambda v: v == 2, lambda v: v.sum(), lambda v: v.to(ltorch.float64
              if isinstance(v, loom.Tensor) else torch.float64), lambda v: v.sort().values, lambda v: v / 2):
        got, want = f(x), f(t)
        assert got.dtype.name == str(want.dtype).split(".")[-1]
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    with pytest.raises(loom.DTypeError, match="promotion for uint16, uint32, uint64"):
        _ = x + loom.tensor([1, 2, 3, 4])
    assert loom.from_numpy(np.arange(3, dtype=d.np)).dtype is d


def test_hash_tensor_matches_pytorch():
    for vals in ([1.5, -2.0, 3.25], [[1, 2, 3], [4, 5, 6]], [True, False, True]):
        x, t = loom.tensor(vals), torch.tensor(vals)
        assert x.hash_tensor().dtype is loom.uint64
        assert loom.hash_tensor(x).item() == torch.hash_tensor(t).item()
        np.testing.assert_array_equal(x.hash_tensor(0, keepdim=True).numpy(), t.hash_tensor(0, keepdim=True).numpy())


def test_namespace_odds_and_ends():
    import os
    assert repr(ltorch.jagged) == repr(torch.jagged) == "torch.jagged"
    assert os.path.isfile(ltorch.get_file_path("loom", "torch", "__init__.py"))
    assert ltorch.uint32 is loom.uint32


def test_grid_sample_mode_codes_drive_grid_sampler():
    F, TF = ltorch.nn.functional, torch.nn.functional
    assert F.GRID_SAMPLE_INTERPOLATION_MODES == TF.GRID_SAMPLE_INTERPOLATION_MODES
    assert F.GRID_SAMPLE_PADDING_MODES == TF.GRID_SAMPLE_PADDING_MODES
    x, g = loom.randn(1, 1, 3, 3), loom.rand(1, 2, 2, 2) * 2 - 1
    for mode, m in F.GRID_SAMPLE_INTERPOLATION_MODES.items():
        for pad, p in F.GRID_SAMPLE_PADDING_MODES.items():
            np.testing.assert_array_equal(ltorch.grid_sampler(x, g, m, p, False).numpy(),
                                          F.grid_sample(x, g, mode, pad, False).numpy())
