"""no_grad, enable_grad, set_grad_enabled, inference_mode: as contexts and decorators."""
import threading

import loom


def test_no_grad_context():
    x = loom.ones(2, requires_grad=True)
    with loom.no_grad():
        y = x * 2
        assert not loom.is_grad_enabled()
    assert loom.is_grad_enabled()
    assert not y.requires_grad and y.grad_fn is None


def test_no_grad_decorator():
    @loom.no_grad()
    def double(t):
        return t * 2

    x = loom.ones(2, requires_grad=True)
    assert not double(x).requires_grad
    assert loom.is_grad_enabled()


def test_enable_grad_inside_no_grad():
    x = loom.ones(2, requires_grad=True)
    with loom.no_grad():
        with loom.enable_grad():
            y = x * 2
        z = x * 2
    assert y.requires_grad and not z.requires_grad


def test_enable_grad_decorator():
    @loom.enable_grad()
    def double(t):
        return t * 2

    x = loom.ones(2, requires_grad=True)
    with loom.no_grad():
        assert double(x).requires_grad


def test_set_grad_enabled_context_and_call():
    x = loom.ones(2, requires_grad=True)
    with loom.set_grad_enabled(False):
        assert not (x * 2).requires_grad
    assert loom.is_grad_enabled()
    loom.set_grad_enabled(False)
    try:
        assert not (x * 2).requires_grad
    finally:
        loom.set_grad_enabled(True)
    assert (x * 2).requires_grad


def test_set_grad_enabled_decorator_applies_only_inside():
    @loom.set_grad_enabled(False)
    def double(t):
        return t * 2

    assert loom.is_grad_enabled()
    x = loom.ones(2, requires_grad=True)
    assert not double(x).requires_grad
    assert (x * 2).requires_grad


def test_inference_mode():
    x = loom.ones(2, requires_grad=True)
    with loom.inference_mode():
        y = x * 2
    assert not y.requires_grad
    with loom.inference_mode(False):
        assert (x * 2).requires_grad

    @loom.inference_mode()
    def double(t):
        return t * 2

    assert not double(x).requires_grad


def test_no_grad_restores_on_exception():
    try:
        with loom.no_grad():
            raise ValueError("boom")
    except ValueError:
        pass
    assert loom.is_grad_enabled()


def test_grad_mode_is_per_thread():
    seen = []

    def worker():
        seen.append(loom.is_grad_enabled())

    with loom.no_grad():
        t = threading.Thread(target=worker)
        t.start()
        t.join()
    assert seen == [True]


def test_no_grad_sgd_step_keeps_the_leaf():
    w = loom.tensor([1.0, -2.0], requires_grad=True)
    for _ in range(3):
        loss = (w * w).sum()
        loss.backward()
        with loom.no_grad():
            w -= 0.25 * w.grad
        w.grad = None
    assert w.is_leaf and w.requires_grad
    assert w.tolist() == [0.125, -0.25]
