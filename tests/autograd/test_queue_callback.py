"""engine.queue_callback: work queued by a gradient hook runs once backward has accumulated every .grad."""
import loom
from loom.autograd import engine


def test_callback_sees_accumulated_grads_and_runs_once_per_backward():
    w = loom.tensor([1.0, 2.0], requires_grad=True)
    w.grad = loom.tensor([10.0, 10.0])  # Accumulated earlier (as under DDP's no_sync).
    seen = []

    def callback():
        seen.append(w.grad.tolist())

    def hook(g):
        if callback not in engine._post_backward:
            engine.queue_callback(callback)

    w.register_hook(hook)
    (w * 3).sum().backward()
    assert seen == [[13.0, 13.0]]
    (w * w).sum().backward()
    assert seen == [[13.0, 13.0], [15.0, 17.0]]


def test_autograd_grad_drops_queued_callbacks():
    w = loom.tensor([1.0], requires_grad=True)
    ran = []
    w.register_hook(lambda g: engine.queue_callback(lambda: ran.append(1)))
    (g,) = loom.autograd.grad((w * 2).sum(), w)
    assert g.tolist() == [2.0] and ran == [] and engine._post_backward == []
