"""In-place ops under autograd: refused on leaves, exact on non-leaves, version checks like torch."""
import numpy as np
import pytest
import torch

import loom


def test_inplace_on_leaf_requiring_grad_raises():
    x = loom.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(loom.AutogradError, match=r"loom.add_: a leaf tensor that requires grad \(float32\[2\]\) "
                                                 r"cannot be modified in place"):
        x.add_(1)
    with pytest.raises(loom.AutogradError, match="loom.mul_"):
        x *= 2
    with pytest.raises(loom.AutogradError, match="loom.setitem"):
        x[0] = 5.0
    assert x.tolist() == [1.0, 2.0]


def test_inplace_on_leaf_under_no_grad_is_an_sgd_update():
    x = loom.tensor([1.0, 2.0], requires_grad=True)
    (x * x).sum().backward()
    with loom.no_grad():
        x.sub_(0.1 * x.grad)
        x.mul_(2)
    assert x.is_leaf and x.requires_grad and x.grad_fn is None
    np.testing.assert_allclose(x.detach().numpy(), [1.6, 3.2], rtol=1e-6)


INPLACE_CHAINS = {
    "add_exp": lambda y: y.add_(1).exp_(),
    "sub_div_sigmoid": lambda y: y.sub_(0.5).div_(2).sigmoid_(),
    "div_pow_clamp": lambda y: y.div_(2).pow_(2).clamp_(0.1, 2.0),
    "operators": lambda y: (y.__iadd__(2), y.__imul__(3.0), y.__itruediv__(3))[-1],
    "neg_abs_tanh": lambda y: y.neg_().abs_().tanh_(),
    "fill_then_add": lambda y: y.fill_(2.0).add_(y.detach()),
}


@pytest.mark.parametrize("name", sorted(INPLACE_CHAINS))
def test_inplace_on_non_leaf_matches_torch(name):
    res = []
    for m in (torch, loom):
        x = m.tensor([0.3, -1.2, 2.0], requires_grad=True)
        y = x * 2
        out = INPLACE_CHAINS[name](y)
        assert out is y
        (y * m.tensor([1.0, 2.0, 3.0])).sum().backward()
        res.append((y.detach().numpy().copy(), x.grad.numpy().copy()))
    np.testing.assert_allclose(res[1][0], res[0][0], rtol=1e-6)
    np.testing.assert_allclose(res[1][1], res[0][1], rtol=1e-5, atol=1e-7)


def test_setitem_on_non_leaf_matches_torch():
    res = []
    for m in (torch, loom):
        x = m.tensor([1.0, 2.0, 3.0], requires_grad=True)
        y = x * 1.5
        y[1] = y[0] * 4
        y.sum().backward()
        res.append(x.grad.tolist())
    assert res[0] == res[1]


def test_copy_into_non_leaf_routes_gradient_to_the_source():
    res = []
    for m in (torch, loom):
        x = m.tensor([1.0, 2.0], requires_grad=True)
        s = m.tensor([5.0, 7.0], requires_grad=True)
        y = x * 2
        y.copy_(s * s)
        y.sum().backward()
        res.append((x.grad.tolist() if x.grad is not None else None, s.grad.tolist()))
    assert res[1][1] == res[0][1]
    assert res[1][0] in (None, [0.0, 0.0]) and res[0][0] in (None, [0.0, 0.0])


def test_modified_after_use_raises_a_clear_error_at_backward():
    x = loom.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    z = y * y  # The product needs y's value for its gradient.
    y.add_(1)
    with pytest.raises(loom.AutogradError, match=r"an input of mul \(float32\[2\]\) was modified by an in-place "
                                                 r"operation after it was used \(version 0 -> 1\)"):
        z.sum().backward()
    tx = torch.tensor([1.0, 2.0], requires_grad=True)
    ty = tx * 2
    tz = ty * ty
    ty.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        tz.sum().backward()


def test_leaf_modified_under_no_grad_after_use_raises_at_backward():
    w = loom.tensor([1.0, 2.0], requires_grad=True)
    loss = (w * w).sum()
    with loom.no_grad():
        w.add_(1)
    with pytest.raises(loom.AutogradError, match="modified by an in-place operation"):
        loss.backward()


def test_value_written_before_inplace_keeps_its_value():
    x = loom.tensor([1.0, 2.0])
    y = x * 10  # Pending when x changes below.
    x.add_(5)
    assert y.tolist() == [10.0, 20.0] and x.tolist() == [6.0, 7.0]


def test_version_counter():
    x = loom.ones(2)
    v0 = x._version
    x.add_(1)
    x.mul_(2)
    assert x._version == v0 + 2


def test_inplace_type_rules_match_torch():
    i = loom.tensor([1, 2])
    with pytest.raises(loom.DTypeError, match="result type float32 can't be cast to the in-place output type int64"):
        i.add_(1.5)
    with pytest.raises(RuntimeError):
        torch.tensor([1, 2]).add_(1.5)
    f = loom.tensor([1.0, 2.0])
    f.add_(loom.tensor([1, 1]))
    assert f.dtype is loom.float32 and f.tolist() == [2.0, 3.0]


def test_inplace_shape_must_not_change():
    x = loom.ones(3)
    with pytest.raises(loom.ShapeError, match=r"\[2, 3\] cannot be written in place into a tensor of shape \[3\]"):
        x.add_(loom.ones(2, 3))


def test_inplace_on_a_tensor_requiring_grad_via_requires_grad_after_ops():
    x = loom.ones(2)
    y = x * 2
    x.requires_grad_()
    with pytest.raises(loom.AutogradError, match="leaf"):
        x.exp_()
    assert y.tolist() == [2.0, 2.0]


AFTER_USE = {
    # The first op's backward needs only its output or shapes, so PyTorch allows the change.
    "exp_then_mul_": lambda m, y: (y.exp(), y.mul_(3))[0],
    "slice_then_mul_": lambda m, y: (y[1:] * 2, y.mul_(-1))[0],
    "sum_then_add_": lambda m, y: (y.sum() * y.detach().sum(), y.add_(5))[0],
    "reshape_then_pow_": lambda m, y: (y.reshape(3, 1).tanh(), y.pow_(2))[0],
}


@pytest.mark.parametrize("name", sorted(AFTER_USE))
def test_gradient_after_an_allowed_inplace_change_matches_torch(name):
    res = []
    for m in (torch, loom):
        x = m.tensor([0.3, -1.2, 2.0], requires_grad=True)
        y = x * 2
        z = AFTER_USE[name](m, y)
        (z.sum() + y.sum()).backward()  # Both the old and the new value of y contribute.
        res.append(x.grad.numpy().copy())
    np.testing.assert_allclose(res[1], res[0], rtol=1e-6)
