"""Training-mode batch norm's closed-form backward against the primitives' own (and its graph's size)."""
import numpy as np
import pytest

import loom
from loom.functional.nn import _bn_train_reference


def _data(shape=(6, 3, 5, 4), seed=0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 3 + 5).astype(np.float32)  # Far from zero: the centring matters.
    w, b = rng.standard_normal(shape[1]).astype(np.float32), rng.standard_normal(shape[1]).astype(np.float32)
    return x, w, b, rng.standard_normal(shape).astype(np.float32)


def _grads(bn, x, w, b, g):
    X, W, B = (loom.tensor(a, requires_grad=True) for a in (x, w, b))
    y = bn(X, W, B)
    (y * loom.tensor(g)).sum().backward()
    return [t.numpy() for t in (y.detach(), X.grad, W.grad, B.grad)]


@pytest.mark.parametrize("shape", [(6, 3, 5, 4), (7, 2), (4, 5, 9)])
def test_closed_form_backward_matches_the_primitives(shape):
    x, w, b, g = _data(shape)
    fast = _grads(lambda X, W, B: loom.nn.functional.batch_norm(X, None, None, W, B, training=True), x, w, b, g)
    ref = _grads(lambda X, W, B: _bn_train_reference(X, W, B, 1e-5)[0], x, w, b, g)
    for name, got, want in zip(("y", "dx", "dweight", "dbias"), fast, ref):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * max(1.0, np.abs(want).max()), err_msg=name)


def test_second_order_gradients_follow_the_primitives():
    x, w, b, g = _data((5, 2, 3))
    out = []
    for bn in (lambda X, W, B: loom.nn.functional.batch_norm(X, None, None, W, B, training=True),
               lambda X, W, B: _bn_train_reference(X, W, B, 1e-5)[0]):
        X, W, B = (loom.tensor(a, requires_grad=True) for a in (x, w, b))
        (gx,) = loom.autograd.grad([(bn(X, W, B) * loom.tensor(g)).sum()], [X], create_graph=True)
        (gx * gx).sum().backward()
        out.append((X.grad.numpy(), W.grad.numpy()))
    for got, want in zip(*out):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_backward_reduces_twice_per_layer():
    """A traced step: forward mean and variance, backward sum(g) and sum(g * xhat), nothing else."""
    x, w, b, g = _data((8, 4, 6, 6))
    counts = []
    for bn in (lambda X, W, B: loom.nn.functional.batch_norm(X, None, None, W, B, training=True),
               lambda X, W, B: _bn_train_reference(X, W, B, 1e-5)[0]):
        def step(X, W, B, G, bn=bn):
            W, B = W.detach().requires_grad_(), B.detach().requires_grad_()
            X = X.detach().requires_grad_()
            dx, dw, db = loom.autograd.grad([(bn(X, W, B) * G).sum()], [X, W, B])
            return dx, dw, db
        fn = loom.function(step)
        for _ in range(2):  # The second call traces.
            fn(*(loom.tensor(a) for a in (x, w, b, g)))
        (entry,) = fn._cache.values()
        counts.append(sum(1 for n in entry.graph if n.op == "sum" and tuple(n.shape) == (1, 4, 1, 1)))
    fast, ref = counts
    assert fast == 4 and ref > fast, counts
