"""Tensor.backward, .grad accumulation, retain_grad, hooks and backward(inputs=...)."""
import numpy as np
import pytest
import torch

import loom
from loom.errors import AutogradError


def both(fn):
    """Run `fn(lib)` with torch and loom; return both results as nested lists."""
    out = []
    for lib in (torch, loom):
        res = fn(lib)
        out.append(_plain(res))
    return out


def _plain(v):
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return np.round(np.asarray(v.detach().tolist(), dtype=np.float64), 5).tolist()


def test_grad_accumulates_over_two_backward_calls():
    def run(m):
        x = m.tensor([1.0, 2.0], requires_grad=True)
        (x * x).sum().backward()
        first = x.grad.clone()
        (x * 3).sum().backward()
        return first, x.grad
    t, lo = both(run)
    assert lo == t == [[2.0, 4.0], [5.0, 7.0]]


def test_grad_is_a_leaf_without_history():
    x = loom.tensor([1.0, 2.0], requires_grad=True)
    (x * x).sum().backward()
    assert not x.grad.requires_grad and x.grad.is_leaf


def test_zeroing_grad_between_steps():
    x = loom.tensor([1.0, 2.0], requires_grad=True)
    (x * x).sum().backward()
    x.grad = None
    (x * 5).sum().backward()
    assert x.grad.tolist() == [5.0, 5.0]
    x.grad.zero_()
    assert x.grad.tolist() == [0.0, 0.0]


def test_retain_grad_on_non_leaf():
    def run(m):
        x = m.tensor([1.0, 2.0], requires_grad=True)
        y = x * 2
        y.retain_grad()
        (y * y).sum().backward()
        return y.grad, x.grad
    t, lo = both(run)
    assert lo == t


def test_retain_grad_accumulates_over_backward_calls():
    def run(m):
        x = m.tensor([1.0, 2.0], requires_grad=True)
        y = x * 2
        y.retain_grad()
        z = (y * y).sum()
        z.backward(retain_graph=True)
        z.backward()
        return y.grad, x.grad
    t, lo = both(run)
    assert lo == t


def test_non_leaf_grad_is_none_without_retain_grad():
    x = loom.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    (y * y).sum().backward()
    assert y.grad is None and not y.is_leaf


def test_hook_modifies_gradient_and_can_be_removed():
    def run(m):
        x = m.tensor([1.0, 2.0], requires_grad=True)
        y = x * 2
        handle = y.register_hook(lambda g: g * 10)
        (y * y).sum().backward(retain_graph=True)
        first = x.grad.clone()
        handle.remove()
        x.grad = None
        (y * y).sum().backward()
        return first, x.grad
    t, lo = both(run)
    assert lo == t == [[80.0, 160.0], [8.0, 16.0]]


def test_hook_on_leaf_sees_and_changes_what_accumulates():
    seen = []

    def run(m):
        x = m.tensor([1.0, 2.0], requires_grad=True)
        x.register_hook(lambda g: seen.append(g.tolist()) or g + 1)
        (x * x).sum().backward()
        return x.grad
    t, lo = both(run)
    assert lo == t == [3.0, 5.0]
    assert seen == [[2.0, 4.0], [2.0, 4.0]]


def test_hook_returning_none_keeps_gradient():
    x = loom.tensor([1.0, 2.0], requires_grad=True)
    calls = []
    x.register_hook(lambda g: calls.append(1))
    (x * 3).sum().backward()
    assert x.grad.tolist() == [3.0, 3.0] and calls == [1]


def test_backward_inputs_restricts_accumulation():
    def run(m):
        x = m.tensor([1.0, 2.0], requires_grad=True)
        z = m.tensor([3.0, 4.0], requires_grad=True)
        (x * z).sum().backward(inputs=[x])
        return x.grad, z.grad
    t, lo = both(run)
    assert lo == t and lo[1] is None


def test_backward_inputs_non_leaf():
    def run(m):
        x = m.tensor([1.0, 2.0], requires_grad=True)
        y = x * 3
        (y * y).sum().backward(inputs=[y])
        return y.grad, x.grad
    t, lo = both(run)
    assert lo == t


def test_backward_with_gradient_argument():
    def run(m):
        x = m.tensor([1.0, 2.0, 3.0], requires_grad=True)
        y = x * x
        y.backward(m.tensor([1.0, 0.5, -1.0]))
        return x.grad
    t, lo = both(run)
    assert lo == t


def test_backward_of_several_outputs_via_module_function():
    x = loom.tensor([1.0, 2.0], requires_grad=True)
    a, b = x * 2, x * x
    loom.autograd.backward([a.sum(), b.sum()])
    assert x.grad.tolist() == [4.0, 6.0]


def test_backward_of_a_non_scalar_without_gradient_raises():
    x = loom.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(loom.AutogradError, match=r"only for scalar outputs; output 0 has shape \[2\]"):
        (x * 2).backward()


def test_shared_subexpression_gradients_add_up():
    def run(m):
        x = m.tensor([0.5, -1.5], requires_grad=True)
        y = x.exp()
        z = y * y + y.sin() * y
        z.sum().backward()
        return x.grad
    t, lo = both(run)
    np.testing.assert_allclose(lo, t, rtol=1e-5)


def test_gradient_flows_to_float64_and_float16_leaves():
    def run(m):
        a = m.tensor([1.0, 2.0], dtype=m.float64, requires_grad=True)
        b = m.tensor([3.0, 4.0], dtype=m.float16, requires_grad=True)
        (a * b).sum().backward()
        return a.grad, b.grad, str(a.grad.dtype).split(".")[-1], str(b.grad.dtype).split(".")[-1]
    t, lo = both(run)
    assert lo == t


def test_detach_stops_gradients():
    def run(m):
        x = m.tensor([1.0, 2.0], requires_grad=True)
        y = x * x.detach() + x
        y.sum().backward()
        return x.grad
    t, lo = both(run)
    assert lo == t == [2.0, 3.0]


def test_detach_inplace():
    x = loom.tensor([1.0], requires_grad=True)
    y = x * 2
    y.detach_()
    assert not y.requires_grad and y.is_leaf


def test_integer_casts_cut_the_gradient():
    def run(m):
        x = m.tensor([1.5, 2.5], requires_grad=True)
        i = x.to(m.int32)
        y = (i.to(m.float32) * x).sum()
        return i.requires_grad, i.grad_fn is None, m.autograd.grad(y, x)[0]
    t, lo = both(run)
    assert lo == t == [False, True, [1.0, 2.0]]


def test_comparisons_and_index_results_do_not_require_grad():
    x = loom.tensor([1.0, 2.0], requires_grad=True)
    assert not (x > 1).requires_grad
    assert not x.argmax().requires_grad
    assert not (x * 2).floor_divide(1).to(loom.int64).requires_grad


def test_grad_fn_and_is_leaf():
    x = loom.tensor([1.0], requires_grad=True)
    y = x.exp()
    assert x.is_leaf and x.grad_fn is None
    assert not y.is_leaf and y.grad_fn.name == "exp"


def test_retain_grad_requires_grad():
    with pytest.raises(loom.AutogradError, match="does not require grad"):
        loom.ones(2).retain_grad()


def test_register_hook_requires_grad():
    with pytest.raises(loom.AutogradError, match="does not require grad"):
        loom.ones(2).register_hook(lambda g: g)


def test_backward_frees_the_graph_unless_retained():
    # As in PyTorch: a backward pass lets go of the saved values (so their memory is freed);
    # a second pass through the same graph needs retain_graph=True on the first.
    x = loom.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    assert x.grad.tolist() == [4.0, 8.0]
    with pytest.raises(AutogradError, match="backward through the graph a second time"):
        y.backward()
    z = (x * 3).sum()
    (g,) = loom.autograd.grad(z, x)
    assert g.tolist() == [3.0, 3.0]
    with pytest.raises(AutogradError, match="retain_graph=True"):
        loom.autograd.grad(z, x)
    w = (x ** 3).sum()
    (g,) = loom.autograd.grad(w, x, create_graph=True)   # create_graph keeps the graph by default
    (gg,) = loom.autograd.grad(g.sum(), x)
    assert gg.tolist() == [6.0, 12.0]
