"""The eager array path of SGD and Adam(W) (loom/optim/foreach.py) gives the graph path's bits, and steps aside
where it cannot."""
import numpy as np
import pytest

import loom
from loom.optim import foreach

CONFIGS = [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.05, momentum=0.9)),
    ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01)),
    ("SGD", dict(lr=0.05, momentum=0.8, dampening=0.3, maximize=True)),
    ("SGD", dict(lr=1, momentum=0.5, weight_decay=1e-3)),
    ("Adam", dict(lr=0.01)),
    ("Adam", dict(lr=0.01, betas=(0.8, 0.99), weight_decay=0.1, amsgrad=True)),
    ("AdamW", dict(lr=0.01)),
    ("AdamW", dict(lr=0.02, weight_decay=0.3, amsgrad=True, maximize=True)),
]


def _run(name, kw, dtype, graph: bool, steps: int = 6):
    rng = np.random.default_rng(1)
    w = loom.tensor(rng.standard_normal((7, 5)), dtype=dtype, requires_grad=True)
    b = loom.tensor(rng.standard_normal(5), dtype=dtype, requires_grad=True)
    x = loom.tensor(rng.standard_normal((9, 7)), dtype=dtype)
    opt = getattr(loom.optim, name)([w, b], **kw)
    if graph:
        opt._foreach_keys = ()  # The graph path, as under a trace or the compiled backend.
    for _ in range(steps):
        opt.zero_grad()
        (loom.tanh(x @ w + b) ** 2).mean().backward()
        opt.step()
    state = [v.numpy() for p in (w, b) for v in opt.state[p].values() if isinstance(v, loom.Tensor)]
    return [w.detach().numpy(), b.detach().numpy()] + state


@pytest.mark.parametrize("dtype", [loom.float32, loom.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name,kw", CONFIGS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CONFIGS)])
def test_array_path_gives_the_graph_path_bits(name, kw, dtype):
    fast, slow = _run(name, kw, dtype, graph=False), _run(name, kw, dtype, graph=True)
    assert len(fast) == len(slow) >= 2
    for a, b in zip(fast, slow):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)


def test_array_path_runs_and_bumps_versions():
    w = loom.ones(3, requires_grad=True)
    opt = loom.optim.SGD([w], lr=0.1, momentum=0.9)
    before = w._version
    (w * w).sum().backward()
    assert foreach.available() and foreach.eligible([w], lambda p: opt.state.get(p, {}))
    opt.step()
    assert w._version == before + 1
    assert w.tolist() == pytest.approx([0.8, 0.8, 0.8])
    assert opt.state[w]["momentum_buffer"].tolist() == pytest.approx([2.0, 2.0, 2.0])


def test_old_values_read_before_the_step_keep_their_value():
    w = loom.ones(3, requires_grad=True)
    opt = loom.optim.Adam([w], lr=0.5)
    kept = w.detach() * 1.0  # Pending: reads w's value from before the step.
    (w * 3.0).sum().backward()
    opt.step()
    assert kept.tolist() == [1.0, 1.0, 1.0]
    assert w.tolist() == pytest.approx([0.5, 0.5, 0.5])


@pytest.mark.parametrize("name,kw", [c for c in CONFIGS if c[0] != "SGD" or "momentum" in c[1]],
                         ids=lambda v: v if isinstance(v, str) else None)
def test_arrays_seen_elsewhere_are_never_written_in_place(name, kw):
    # Arrays only their tensor sees are updated in place; a NumPy array or a pending node that still reads a
    # parameter's or a state tensor's value from before the step keeps it (aliases follow the update, as in
    # PyTorch, either way).
    rng = np.random.default_rng(0)
    w = loom.tensor(rng.standard_normal((4, 3)), dtype=loom.float32, requires_grad=True)
    opt = getattr(loom.optim, name)([w], **kw)
    (w * w).sum().backward()
    opt.step()  # State tensors exist from here on.
    w.realize()
    assert foreach.owned(w) is not None
    before = w.detach().numpy().copy()
    shared = w.detach().numpy()  # The parameter's own array.
    pending = w.detach() * 1.0
    states = [v for v in opt.state[w].values() if isinstance(v, loom.Tensor) and v.ndim]
    state_before = [v.detach().numpy().copy() for v in states]
    state_arrays = [v.detach().numpy() for v in states]
    assert foreach.owned(w) is None and all(foreach.owned(v) is None for v in states)
    opt.zero_grad()
    (w * w).sum().backward()
    opt.step()
    assert not np.array_equal(w.detach().numpy(), before)
    np.testing.assert_array_equal(shared, before)
    np.testing.assert_array_equal(pending.numpy(), before)
    for a, b in zip(state_arrays, state_before):
        np.testing.assert_array_equal(a, b)


def test_owned_arrays_are_reused_by_the_update():
    w = loom.ones(4, 3, requires_grad=True)
    opt = loom.optim.Adam([w], lr=0.1)
    for _ in range(2):
        opt.zero_grad()
        (w * w).sum().backward()
        opt.step()
    arrays = [w._node.buffer] + [v._node.buffer for v in opt.state[w].values() if v.ndim]
    opt.zero_grad()
    (w * w).sum().backward()
    del arrays[:]  # Only their tensors hold them now.
    ids = [id(w._node.buffer)] + [id(v._node.buffer) for v in opt.state[w].values() if v.ndim]
    opt.step()
    assert [id(w._node.buffer)] + [id(v._node.buffer) for v in opt.state[w].values() if v.ndim] == ids


def test_graph_path_where_the_array_path_cannot_go():
    base = loom.zeros(2, 3)
    with loom.no_grad():
        view = base[0]  # A parameter sharing storage with another tensor.
    view.requires_grad_(True)
    opt = loom.optim.SGD([view], lr=1.0)
    (view * 2.0).sum().backward()
    assert not foreach.eligible([view], lambda p: opt.state.get(p, {}))
    opt.step()
    assert view.tolist() == [-2.0, -2.0, -2.0]
    assert base.tolist() == [[-2.0, -2.0, -2.0], [0.0, 0.0, 0.0]]
    with loom.backend("compiled"):
        assert not foreach.available()


def test_a_subclass_that_changes_the_rule_keeps_it():
    class Halved(loom.optim.SGD):
        def _update(self, p, g, group, state):
            super()._update(p, g * 0.5, group, state)
    w = loom.ones(2, requires_grad=True)
    opt = Halved([w], lr=1.0)
    w.sum().backward()
    opt.step()
    assert w.tolist() == [0.5, 0.5]


def test_tensor_hyperparameters_take_the_graph_path():
    w = loom.ones(2, requires_grad=True)
    opt = loom.optim.SGD([w], lr=loom.tensor(0.25))
    w.sum().backward()
    opt.step()
    assert w.tolist() == [0.75, 0.75]


def test_a_parameter_still_pending_is_computed_first():
    w = loom.zeros(3, requires_grad=True)  # A const node, not yet a buffer.
    opt = loom.optim.Adam([w], lr=0.1)
    w.sum().backward()
    opt.step()
    assert w.tolist() == pytest.approx([-0.1, -0.1, -0.1])


def test_views_of_a_parameter_follow_the_update():
    w = loom.ones(2, 3, requires_grad=True)
    opt = loom.optim.SGD([w], lr=0.5)
    wt = w.t()  # A live view made with grad enabled (as a Linear layer's forward makes one).
    (wt * 2.0).sum().backward()
    assert foreach.eligible([w], lambda p: opt.state.get(p, {}))
    opt.step()
    assert w.tolist() == [[0.0] * 3] * 2
    assert wt.tolist() == [[0.0] * 2] * 3


@pytest.mark.parametrize("name,kw", CONFIGS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CONFIGS)])
def test_zero_dim_parameters_step_on_the_graph_path(name, kw):
    # A 0-d parameter (a learnable scale, a temperature) takes the graph path: it steps, and stays a 0-d array.
    def run(graph):
        s = loom.tensor(0.5, requires_grad=True)
        x = loom.tensor(np.linspace(-1, 1, 6, dtype=np.float32))
        opt = getattr(loom.optim, name)([s], **kw)
        if graph:
            opt._foreach_keys = ()
        for _ in range(4):
            opt.zero_grad()
            ((x * s - 0.3) ** 2).mean().backward()
            opt.step()
        return s.detach().numpy(), [v.numpy() for v in opt.state[s].values() if isinstance(v, loom.Tensor)]
    s = loom.tensor(0.5, requires_grad=True)
    (s * 2).backward()
    assert not foreach.eligible([s], lambda p: {})
    (fast, fast_state), (slow, slow_state) = run(False), run(True)
    assert isinstance(fast, np.ndarray) and fast.shape == () and fast.dtype == np.float32
    np.testing.assert_array_equal(fast, slow)
    for a, b in zip(fast_state, slow_state, strict=True):
        np.testing.assert_array_equal(a, b)
