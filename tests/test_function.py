"""loom.function: a traced training step matches eager training, and its guards and errors hold."""
import os

import numpy as np
import pytest

import loom
import loom.nn as nn
import loom.nn.functional as F

BACKEND = os.environ.get("LOOM_TRACE_BACKEND", "reference")


def _train(traced: bool, opt_name="Adam", steps=6, dropout=0.2, sched=True, **opt_kw):
    loom.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(dropout), nn.Linear(16, 3))
    opt = getattr(loom.optim, opt_name)(model.parameters(), lr=0.05, **opt_kw)
    scheduler = loom.optim.lr_scheduler.StepLR(opt, 2, 0.5) if sched else None

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    fn = loom.function(step, backend=BACKEND) if traced else step
    rng = np.random.default_rng(1)
    losses = []
    for _ in range(steps):
        x = loom.tensor(rng.standard_normal((8, 6)).astype(np.float32))
        y = loom.tensor(rng.integers(0, 3, 8))
        losses.append(fn(x, y).item())
        if scheduler:
            scheduler.step()
    params = [p.detach().numpy().copy() for p in model.parameters()]
    grads = [p.grad.numpy().copy() for p in model.parameters()]
    return losses, params, grads, fn


@pytest.mark.parametrize("opt_name,kw", [("Adam", {}), ("SGD", {"momentum": 0.9, "nesterov": True}),
                                         ("AdamW", {"amsgrad": True}), ("RMSprop", {"centered": True})])
def test_traced_training_equals_eager(opt_name, kw):
    el, ep, eg, _ = _train(False, opt_name, **kw)
    tl, tp, tg, fn = _train(True, opt_name, **kw)
    np.testing.assert_allclose(tl, el, rtol=1e-6)
    for a, b in zip(tp, ep):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    for a, b in zip(tg, eg):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert fn.trace_count == 1, "one signature, one trace (lr changes are runtime inputs)"


def test_replay_runs_no_per_op_python(monkeypatch):
    _, _, _, fn = _train(True, steps=3)
    made = []
    from loom.ir.node import Node
    real = Node.__init__

    def counting(self, op, *args, **kwargs):
        made.append(op)
        real(self, op, *args, **kwargs)
    monkeypatch.setattr(Node, "__init__", counting)
    x, y = loom.randn(8, 6), loom.tensor([0, 1, 2, 0, 1, 2, 0, 1])
    made.clear()
    fn(x, y)
    ops = sorted(set(made))
    assert ops == ["buffer"], f"replay built graph nodes in Python: {ops}"


def test_new_batch_size_retraces_and_is_correct():
    w = loom.ones(4, requires_grad=True)

    @loom.function(backend=BACKEND)
    def f(x):
        return (x * w).sum(1).exp()
    a, b = loom.randn(3, 4), loom.randn(5, 4)
    f(a)
    ra = f(a)
    rb = f(b)
    np.testing.assert_allclose(ra.numpy(), (a * w).sum(1).exp().detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(rb.numpy(), (b * w).sum(1).exp().detach().numpy(), rtol=1e-6)
    assert f.trace_count == 2


def test_python_values_are_traced_by_value():
    @loom.function(backend=BACKEND, warmup=0)
    def f(x, scale, flip):
        return -x * scale if flip else x * scale
    x = loom.ones(2)
    assert f(x, 2.0, False).tolist() == [2.0, 2.0]
    assert f(x, 3.0, True).tolist() == [-3.0, -3.0]
    assert f(x, 2.0, False).tolist() == [2.0, 2.0]
    assert f.trace_count == 2


def test_external_tensor_changed_outside_is_seen():
    w = loom.ones(3)

    @loom.function(backend=BACKEND, warmup=0)
    def f(x):
        return x + w
    assert f(loom.zeros(3)).tolist() == [1.0, 1.0, 1.0]
    w.add_(1.0)  # Eager update between calls: the next replay reads the new value.
    assert f(loom.zeros(3)).tolist() == [2.0, 2.0, 2.0]


def test_mutated_argument_is_written_back():
    @loom.function(backend=BACKEND, warmup=0)
    def f(buf, x):
        buf.mul_(0.5).add_(x)
        return buf.sum()
    buf = loom.ones(3)
    for _ in range(3):
        s = f(buf, loom.ones(3))
    assert buf.tolist() == [1.875, 1.875, 1.875]
    assert s.item() == pytest.approx(5.625)


def test_random_numbers_match_eager_stream():
    def f(x):
        return x + loom.rand(3)
    traced = loom.function(f, backend=BACKEND)
    loom.manual_seed(5)
    eager = [f(loom.zeros(3)).tolist() for _ in range(4)]
    loom.manual_seed(5)
    got = [traced(loom.zeros(3)).tolist() for _ in range(4)]
    assert got == eager
    assert got[1] != got[2]


def test_reading_a_traced_value_raises():
    @loom.function(backend=BACKEND, warmup=0)
    def f(x):
        if (x.sum() > 0).item():
            return x
        return -x
    with pytest.raises(loom.LoomError, match="loom.cond"):
        f(loom.ones(2))


def test_cond_selects_in_traces_and_branches_eagerly():
    def f(x):
        return loom.cond(x.sum() > 0, lambda v: v * 2, lambda v: v - 1, x)
    traced = loom.function(f, backend=BACKEND, warmup=0)
    for v in ([1.0, 2.0], [-3.0, 1.0]):
        x = loom.tensor(v)
        assert traced(x).tolist() == f(x).tolist()


def test_cond_is_differentiable_in_traces():
    w = loom.tensor([1.0, -2.0], requires_grad=True)

    def f(x):
        y = loom.cond(x.sum() > 0, lambda v: (v * w).sum(), lambda v: (v * w * w).sum(), x)
        (g,) = loom.autograd.grad(y, w)
        return g
    traced = loom.function(f, backend=BACKEND, warmup=0)
    for v in ([1.0, 2.0], [-3.0, 1.0]):
        x = loom.tensor(v)
        assert traced(x).tolist() == f(x).tolist()


def test_while_loop_in_a_trace_depends_on_data():
    def collatz_steps(n):
        def cond(v, k):
            return v != 1
        def body(v, k):
            return loom.where(v % 2 == 0, v // 2, 3 * v + 1), k + 1
        return loom.while_loop(cond, body, (n, loom.tensor(0)))[1]
    traced = loom.function(collatz_steps, backend=BACKEND, warmup=0)
    for n, steps in ((6, 8), (7, 16), (27, 111)):
        assert traced(loom.tensor(n)).item() == steps
        assert collatz_steps(loom.tensor(n)).item() == steps
    assert traced.trace_count == 1


def test_while_loop_rejects_gradients():
    w = loom.tensor(1.0, requires_grad=True)

    @loom.function(backend=BACKEND, warmup=0)
    def f(x):
        return loom.while_loop(lambda v: v < 10, lambda v: v * 2, x * w)
    with pytest.raises(loom.LoomError, match="not supported"):
        f(loom.tensor(1.0))


def test_hyperparameter_flag_change_retraces():
    w = loom.ones(2, requires_grad=True)
    opt = loom.optim.SGD([w], lr=0.1)

    @loom.function(backend=BACKEND)
    def step():
        opt.zero_grad()
        (w * w).sum().backward()
        opt.step()
    step()
    step()
    opt.param_groups[0]["weight_decay"] = 0.5  # Adds a term: the graph must change.
    step()
    assert step.trace_count == 2
    w2 = loom.ones(2, requires_grad=True)
    opt2 = loom.optim.SGD([w2], lr=0.1)
    for wd in (0.0, 0.0, 0.5):
        opt2.param_groups[0]["weight_decay"] = wd
        opt2.zero_grad()
        (w2 * w2).sum().backward()
        opt2.step()
    np.testing.assert_allclose(w.detach().numpy(), w2.detach().numpy(), rtol=1e-6)


def test_returns_structures_and_bad_arguments():
    @loom.function(backend=BACKEND, warmup=0)
    def f(x):
        return {"a": x + 1, "b": (x * 2, None, 3)}
    out = f(loom.ones(2))
    assert out["a"].tolist() == [2.0, 2.0] and out["b"][1] is None and out["b"][2] == 3
    with pytest.raises(loom.LoomError, match="NumPy"):
        f(np.ones(2))
    with pytest.raises(loom.LoomError, match="hashable"):
        f([loom.ones(2)])


# ---------------------------------------------------------------- .grad of arguments and captured tensors

def test_grad_of_tensor_argument_accumulates_like_eager():
    w = loom.tensor([1.0, -2.0], requires_grad=True)

    @loom.function(backend=BACKEND)
    def f(x):
        loss = (x * x).sum()
        loss.backward()
        return loss

    seen = []
    for _ in range(4):
        f(w)
        seen.append(w.grad.tolist())
    assert seen == [[2.0, -4.0], [4.0, -8.0], [6.0, -12.0], [8.0, -16.0]]
    w.grad = None
    f(w)  # A fresh .grad after set-to-None, as eagerly.
    assert w.grad.tolist() == [2.0, -4.0]


@pytest.mark.parametrize("set_to_none", [True, False])
@pytest.mark.parametrize("zero_inside", [True, False])
def test_grads_of_arguments_and_parameters_match_eager(set_to_none, zero_inside):
    def run(traced):
        loom.manual_seed(0)
        lin = nn.Linear(3, 2)
        x = loom.tensor([1.0, -2.0, 0.5], requires_grad=True)
        opt = loom.optim.SGD(list(lin.parameters()), lr=0.1, momentum=0.5)

        def step(x):
            if zero_inside:
                opt.zero_grad(set_to_none=set_to_none)
            loss = (lin(x) ** 2).sum()
            loss.backward()
            opt.step()
            return loss

        fn = loom.function(step, backend=BACKEND) if traced else step
        out = []
        for i in range(5):
            if not zero_inside and i == 3:
                opt.zero_grad(set_to_none=set_to_none)  # Between calls, outside the step.
            loss = fn(x)
            out.append([loss.item(), x.grad.tolist(), lin.weight.grad.tolist(), lin.weight.tolist()])
        return out

    eager, traced = run(False), run(True)
    np.testing.assert_allclose(np.array(_flat(traced)), np.array(_flat(eager)), rtol=1e-5, atol=1e-6)


def _flat(obj):
    if isinstance(obj, (list, tuple)):
        return [v for o in obj for v in _flat(o)]
    return [obj]


def test_while_loop_results_follow_input_values_not_array_identity():
    """The loop nodes share one run per input values: an array refilled in place (or a recycled id) reruns it."""
    from loom.function import _while_impl
    from loom.ir import Graph

    cond = Graph()
    c = cond.add_input((), loom.int64)
    cond.outputs = [cond.add_node("lt", [c, cond.add_constant(10, loom.int64)])]
    body = Graph()
    b = body.add_input((), loom.int64)
    body.outputs = [body.add_node("add", [b, body.add_constant(1, loom.int64)])]
    attrs = {"cond": cond, "body": body, "index": 0}
    a = np.array(3, np.int64)
    assert int(_while_impl(a, attrs)) == 10
    a[...] = 20  # Same array object, new value.
    assert int(_while_impl(a, attrs)) == 20
    assert int(_while_impl(np.array(4, np.int64), attrs)) == 10
