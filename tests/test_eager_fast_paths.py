"""Eager mode's short cuts give the bits of the general paths they skip (loom/functional, loom/tensor)."""
import numpy as np
import pytest

import loom
import loom.functional.nn as fnn
import loom.nn.functional as F
from loom.runtime import reference

SHAPES = [((16, 5), (16,)), ((5,), ()), ((4, 5, 3), (4, 3)), ((0, 5), (0,))]


class _SeesIgnored:
    """NumPy for loom.functional.nn, except that every target seems to hold an ignored entry (the masked path)."""

    def __getattr__(self, name):
        return getattr(np, name)

    @staticmethod
    def any(v):
        return True


def _loss_and_grad(fn, a, t, masked, monkeypatch, **kw):
    x = loom.tensor(a, requires_grad=True)
    tt = loom.tensor(t).reshape(t.shape)  # A pending view of the labels, as `y.reshape(-1)` gives.
    with monkeypatch.context() as m:
        if masked:
            m.setattr(fnn, "np", _SeesIgnored())
        y = fn(x, tt, **kw)
        assert fnn._Targets("t", x, tt, None, -100).all_valid is not masked
    y.sum().backward()
    return y.detach().numpy(), x.grad.numpy()


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("shape,tshape", SHAPES, ids=["2d", "unbatched", "3d", "empty"])
@pytest.mark.parametrize("loss", ["cross_entropy", "cross_entropy_smoothed", "nll_loss"])
def test_losses_on_eager_targets_give_the_masked_paths_bits(loss, shape, tshape, reduction, monkeypatch):
    a = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    t = np.random.default_rng(2).integers(0, 5, tshape)
    if loss == "nll_loss":
        def fn(x, tt, **kw):
            return F.nll_loss(x.log_softmax(0 if x.ndim == 1 else 1), tt, **kw)
        kw = {}
    else:
        fn, kw = F.cross_entropy, ({"label_smoothing": 0.2} if loss.endswith("smoothed") else {})
    fast = _loss_and_grad(fn, a, t, False, monkeypatch, reduction=reduction, **kw)
    masked = _loss_and_grad(fn, a, t, True, monkeypatch, reduction=reduction, **kw)
    for u, v in zip(fast, masked):
        assert u.dtype == v.dtype and u.shape == v.shape
        assert u.tobytes() == v.tobytes()


def test_ignored_targets_still_count_as_ignored():
    x = loom.tensor([[0.0, 1.0], [2.0, 0.0], [1.0, 1.0]], requires_grad=True)
    loss = F.cross_entropy(x, loom.tensor([1, -100, 0]))
    loss.backward()
    expected = -(np.log(np.exp(1) / (1 + np.exp(1))) + np.log(0.5)) / 2
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    assert x.grad.numpy()[1].tolist() == [0.0, 0.0]


def _pending_ops(t):
    return [n.op for n in reference.pending_order([t._node])]


def test_relu_is_three_nodes_with_pytorch_gradient_at_zero():
    x = loom.tensor([-1.0, 0.0, 2.0], requires_grad=True)
    y = loom.relu(x)
    assert sorted(_pending_ops(y)) == ["const", "le", "where"]
    y.sum().backward()
    assert y.tolist() == [0.0, 0.0, 2.0]
    assert x.grad.tolist() == [0.0, 0.0, 1.0]
    assert loom.relu(loom.tensor([-3, 4])).tolist() == [0, 4]


def test_same_shape_where_and_matrix_product_add_one_node_each():
    a, b = loom.randn(3, 4), loom.randn(4, 2)
    c = loom.randn(3, 4) > 0
    loom.realize(a, b, c)
    assert _pending_ops(a @ b) == ["matmul"]
    assert sorted(_pending_ops(loom.where(c, a, a * 2.0))) == ["const", "mul", "where"]
    with pytest.raises(loom.errors.ShapeError, match="cannot be multiplied"):
        loom.ones(2, 3) @ loom.ones(2, 4)


def test_permute_fast_path_keeps_checks_and_views():
    x = loom.randn(2, 3, 4)
    assert x.permute(2, 0, 1).shape == (4, 2, 3)
    assert x.permute(-1, 0, 1).shape == (4, 2, 3)
    with pytest.raises(loom.errors.LoomError):
        x.permute(0, 0, 1)
    with pytest.raises(loom.errors.LoomError):
        x.permute(0, 1)
    v = x.permute(1, 0, 2)
    v[0, 0, 0] = 5.0  # A view: the write shows in x.
    assert x[0, 0, 0].item() == 5.0
    assert x[0].t().shape == (4, 3)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gelu_tanh_closed_form_backward_matches_the_chain_rule(dtype):
    import loom.functional.math as fmath
    a = np.concatenate([np.linspace(-12, 12, 97), [0.0, -0.0, 1e-30]]).astype(dtype)
    g = np.random.default_rng(3).standard_normal(a.shape).astype(dtype)
    x = loom.tensor(a, requires_grad=True)
    y = F.gelu(x, approximate="tanh")
    y.backward(loom.tensor(g))
    x0 = loom.tensor(a, requires_grad=True)
    y0 = fmath._gelu_tanh_parts(x0)[0]  # The same forward, differentiated primitive by primitive.
    y0.backward(loom.tensor(g))
    assert y.detach().numpy().tobytes() == y0.detach().numpy().tobytes()
    tol = 32 * np.finfo(dtype).eps  # A few roundings apart: the derivative is summed in another order.
    np.testing.assert_allclose(x.grad.numpy(), x0.grad.numpy(), rtol=tol, atol=tol)


def test_gelu_tanh_second_derivative_is_the_primitives():
    import loom.functional.math as fmath
    a = np.linspace(-4, 4, 17)
    x = loom.tensor(a, requires_grad=True)
    (dx,) = loom.autograd.grad([F.gelu(x, approximate="tanh").sum()], [x], create_graph=True)
    (ddx,) = loom.autograd.grad([dx.sum()], [x])
    x0 = loom.tensor(a, requires_grad=True)
    (dx0,) = loom.autograd.grad([fmath._gelu_tanh_parts(x0)[0].sum()], [x0], create_graph=True)
    (ddx0,) = loom.autograd.grad([dx0.sum()], [x0])
    assert ddx.numpy().tobytes() == ddx0.numpy().tobytes()
    assert np.abs(ddx.numpy()).max() > 0.5  # 0.798 at 0: a real second derivative, not zeros.


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_where_selecting_a_zero_splat_gives_np_wheres_bits(dtype):
    # The ReLU shortcut of the bitwise select (a +0.0 splat on either side), on NaN, infinities and -0.0.
    from loom.ir.ops import _splat, _where_impl
    rng = np.random.default_rng(3)
    x = rng.standard_normal((96, 64)).astype(dtype)
    x.flat[:5] = [np.nan, -0.0, np.inf, -np.inf, 0.0]
    c = rng.random(x.shape) < 0.5
    for zero in (_splat(np.array(0.0, dtype), x.shape), _splat(np.array(-0.0, dtype), x.shape)):
        for a, b in ((zero, x), (x, zero)):
            got, want = _where_impl(c, a, b, {}), np.where(c, a, b)
            assert got.dtype == want.dtype and got.shape == want.shape
            assert np.array_equal(got.view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("src, shape", [((1, 5), (4, 5)), ((3, 1), (3, 6)), ((1, 1, 2), (2, 3, 2)), ((2, 3), (2, 3)),
                                        ((0, 3), (0, 3)), ((4,), (2, 4))])
def test_expand_gives_broadcast_tos_view(src, shape):
    # The direct view of a contiguous array: broadcast_to's shape, strides, values and read-only flag.
    from loom.ir.ops import PRIMITIVES
    x = np.arange(int(np.prod(src)), dtype=np.float32).reshape(src)
    for a in (x, x[::-1]):  # A reversed array is not contiguous: broadcast_to itself.
        got, want = PRIMITIVES["expand"].impl(a, {"shape": shape}), np.broadcast_to(a, shape)
        assert got.shape == want.shape and got.strides == want.strides and not got.flags.writeable
        assert np.array_equal(got, want) and np.shares_memory(got, a) == (a.size > 0)


def test_where_backward_builds_only_the_gradients_asked_for():
    from loom.ir.ops import PRIMITIVES
    g, c = loom.ones(3), loom.tensor([True, False, True])
    vjp = PRIMITIVES["where"].vjp
    assert [r is None for r in vjp(g, c, g, g, g, {}, needs=(False, False, True))] == [True, True, False]
    assert [r is None for r in vjp(g, c, g, g, g, {})] == [True, False, False]
    a, b = loom.tensor([1.0, 2.0, 3.0], requires_grad=True), loom.tensor([4.0, 5.0, 6.0], requires_grad=True)
    loom.where(c, a, b).sum().backward()
    assert a.grad.tolist() == [1.0, 0.0, 1.0] and b.grad.tolist() == [0.0, 1.0, 0.0]
    x = loom.tensor([-1.0, 0.0, 2.0], requires_grad=True)
    loom.where(x > 0, x, 0.0).sum().backward()  # A broadcast Python zero: only x's gradient.
    assert x.grad.tolist() == [0.0, 0.0, 1.0]


def test_plain_node_gradients_of_matmul_permute_reshape_match_numpy_and_differentiate_again():
    # Their backward rules build permute/reshape nodes directly (no views): values and second derivatives hold.
    rng = np.random.default_rng(5)
    a_np, b_np = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 4, 5))
    a, b = loom.tensor(a_np, requires_grad=True), loom.tensor(b_np, requires_grad=True)
    y = (a @ b).permute(2, 0, 1).reshape(5, 6)
    (ga,) = loom.autograd.grad((y * y).sum(), a, create_graph=True)
    prod = a_np @ b_np
    np.testing.assert_allclose(ga.detach().numpy(), 2 * prod @ b_np.transpose(0, 2, 1), rtol=1e-12)
    (gb,) = loom.autograd.grad(ga.sum(), b)  # d/db of sum(2 (a b) b^T).
    ones = np.ones_like(a_np)
    want = 2 * (a_np.transpose(0, 2, 1) @ ones @ b_np + (ones.transpose(0, 2, 1) @ a_np @ b_np))
    np.testing.assert_allclose(gb.numpy(), want, rtol=1e-12)
    x = loom.tensor([[1.0, 2.0]], requires_grad=True)
    x.permute(0, 1).reshape(1, 2).sum().backward()  # Identity permute and reshape: the gradient itself.
    assert x.grad.tolist() == [[1.0, 1.0]]
