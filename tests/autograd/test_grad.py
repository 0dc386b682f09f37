"""loom.autograd.grad: grad_outputs, higher orders, allow_unused, materialize_grads."""
import numpy as np
import pytest
import torch

import loom


def derivatives(lib, body, x0, order=3):
    """[f'(x0), f''(x0), ...] by repeated grad with create_graph."""
    x = lib.tensor(x0, dtype=lib.float64, requires_grad=True)
    y = body(lib, x)
    out = []
    for _ in range(order):
        (y,) = lib.autograd.grad(y.sum(), x, create_graph=True)
        out.append(y.detach().numpy().copy())
    return out


HIGHER = {
    "x4_sin": lambda m, x: x ** 4 * m.sin(x),
    "tanh_chain": lambda m, x: m.tanh(m.tanh(m.tanh(x) * 2.0) + x),
    "exp_log": lambda m, x: m.log(m.exp(x * 0.5) + 1.0) * x,
    "sigmoid_sq": lambda m, x: m.sigmoid(x * x),
    "division": lambda m, x: 1.0 / (x * x + 1.0),
    "sqrt_erf": lambda m, x: m.sqrt(x * x + 0.5) * m.erf(x),
    "max_smooth": lambda m, x: m.maximum(x, x * 0.5) ** 3,
    "atan2": lambda m, x: m.atan2(x, x * x + 1.0),
    "asinh_acos": lambda m, x: m.asinh(x) + m.acos(x * 0.3),
}


@pytest.mark.parametrize("name", sorted(HIGHER))
def test_third_order_matches_torch(name):
    x0 = [-1.3, -0.4, 0.7, 1.9]
    want = derivatives(torch, HIGHER[name], x0)
    got = derivatives(loom, HIGHER[name], x0)
    for k, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-10, err_msg=f"order {k + 1}")


def test_third_order_through_a_matmul_chain():
    rng = np.random.default_rng(0)
    a_np, b_np = rng.standard_normal((3, 3)), rng.standard_normal((3, 2))
    res = []
    for m in (torch, loom):
        w = m.tensor(a_np, requires_grad=True)
        b = m.tensor(b_np)
        y = (m.tanh(w @ w @ b) ** 2).sum()
        (g1,) = m.autograd.grad(y, w, create_graph=True)
        (g2,) = m.autograd.grad((g1 * g1).sum(), w, create_graph=True)
        (g3,) = m.autograd.grad(g2.sum(), w)
        res.append([g.detach().numpy() for g in (g1, g2, g3)])
    for g, w in zip(*reversed(res)):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-10)


def test_grad_outputs_weights_the_outputs():
    res = []
    for m in (torch, loom):
        x = m.tensor([1.0, 2.0, 3.0], requires_grad=True)
        y = x ** 2
        (g,) = m.autograd.grad(y, x, grad_outputs=m.tensor([1.0, -1.0, 0.5]))
        res.append(g.tolist())
    assert res[0] == res[1] == [2.0, -4.0, 3.0]


def test_grad_of_several_outputs_and_inputs():
    res = []
    for m in (torch, loom):
        x = m.tensor(2.0, requires_grad=True)
        z = m.tensor(3.0, requires_grad=True)
        gx, gz = m.autograd.grad([x * z, x * x], [x, z])
        res.append((gx.item(), gz.item()))
    assert res[0] == res[1] == (7.0, 2.0)


def test_grad_does_not_touch_dot_grad():
    x = loom.tensor([1.0, 2.0], requires_grad=True)
    loom.autograd.grad((x * x).sum(), x)
    assert x.grad is None


def test_grad_without_create_graph_is_constant():
    x = loom.tensor([1.0, 2.0], requires_grad=True)
    (g,) = loom.autograd.grad((x ** 3).sum(), x)
    assert not g.requires_grad
    (g2,) = loom.autograd.grad((x ** 3).sum(), x, create_graph=True)
    assert g2.requires_grad and g2.grad_fn is not None


def test_allow_unused_and_materialize_grads():
    x = loom.tensor([1.0, 2.0], requires_grad=True)
    z = loom.tensor([3.0], requires_grad=True)
    with pytest.raises(loom.AutogradError, match=r"input 1 \(float32\[1\]\) was not used"):
        loom.autograd.grad((x * 2).sum(), [x, z])
    gx, gz = loom.autograd.grad((x * 2).sum(), [x, z], allow_unused=True)
    assert gx.tolist() == [2.0, 2.0] and gz is None
    gx, gz = loom.autograd.grad((x * 2).sum(), [x, z], materialize_grads=True)
    assert gz.tolist() == [0.0]
    tx, tz = torch.autograd.grad((torch.tensor([1.0, 2.0], requires_grad=True) * 2).sum(),
                                 [torch.tensor([1.0, 2.0], requires_grad=True),
                                  torch.tensor([3.0], requires_grad=True)],
                                 allow_unused=True, materialize_grads=True)
    assert tz.tolist() == gz.tolist()


def test_grad_of_non_scalar_without_grad_outputs_raises():
    x = loom.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(loom.AutogradError, match=r"implicitly created only for scalar outputs.*\[2\]"):
        loom.autograd.grad(x * 2, x)


def test_grad_outputs_shape_is_checked():
    x = loom.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(loom.AutogradError, match=r"grad_output 0 has shape \[3\] but the output has shape \[2\]"):
        loom.autograd.grad(x * 2, x, grad_outputs=loom.ones(3))


def test_grad_with_respect_to_an_intermediate():
    x = loom.tensor([1.0, 2.0], requires_grad=True)
    y = x * 3
    (gy,) = loom.autograd.grad((y * y).sum(), y)
    assert gy.tolist() == [6.0, 12.0]


def test_grad_of_the_input_itself():
    x = loom.tensor([1.0, 2.0], requires_grad=True)
    (g,) = loom.autograd.grad(x, x, grad_outputs=loom.tensor([5.0, 6.0]))
    assert g.tolist() == [5.0, 6.0]


def test_hessian_vector_product_matches_torch():
    rng = np.random.default_rng(1)
    x_np, v_np = rng.standard_normal(4), rng.standard_normal(4)
    res = []
    for m in (torch, loom):
        x = m.tensor(x_np, requires_grad=True)
        y = (m.sin(x) * x.sum() + x ** 3).sum()
        (g,) = m.autograd.grad(y, x, create_graph=True)
        (hv,) = m.autograd.grad(g, x, grad_outputs=m.tensor(v_np))
        res.append(hv.detach().numpy())
    np.testing.assert_allclose(res[1], res[0], rtol=1e-10)
