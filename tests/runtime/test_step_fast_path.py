"""A traced training step's call path: updated tensors written in place (donation), and the replay's guards.

Donation must never change a result: every test compares bits with the same step run without it, or with
eager training, and counts (not times) donated outputs, write-backs and traces.
"""
import importlib

import numpy as np
import pytest

import loom
import loom.nn as nn
import loom.nn.functional as F
from loom.ir import Graph
from loom.runtime.executor import Executable
from tests.codegen.helpers import persistent_sync_kernels

lf = importlib.import_module("loom.function")  # The module (`loom.function` the attribute is the decorator).


@pytest.fixture(scope="module", autouse=True)
def kernel_cache(request):
    with persistent_sync_kernels(request.config) as cache_dir:
        yield cache_dir


def _setup(opt_name="SGD", seed=0, **kw):
    loom.manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
    if opt_name == "SGD" and not kw:
        kw = {"momentum": 0.9}
    opt = getattr(loom.optim, opt_name)(model.parameters(), lr=0.05, **kw)

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return model, opt, step


def _batches(n, batch=8):
    rng = np.random.default_rng(1)
    return [(loom.tensor(rng.standard_normal((batch, 6)).astype(np.float32)), loom.tensor(rng.integers(0, 3, batch)))
            for _ in range(n)]


def _state(model, opt):
    """Every parameter, .grad and optimizer state array, copied."""
    out = []
    for p in model.parameters():
        out.append(p.detach().numpy().copy())
        out.append(p.grad.numpy().copy())
        for v in opt.state[p].values():
            if isinstance(v, loom.Tensor):
                out.append(v.detach().numpy().copy())
    return out


fn_stats: list = [{}]  # The call_stats of the function `_train` is running (for `between` callbacks).


def _train(steps=5, traced=True, opt_name="SGD", between=None, **kw):
    """Losses and final state of `steps` steps; `between(i, model, opt)` runs after step i (and its result is
    kept, so tests can hold values across steps)."""
    model, opt, step = _setup(opt_name, **kw)
    fn = loom.function(step) if traced else step
    fn_stats[0] = getattr(fn, "call_stats", {})
    losses, kept = [], []
    for i, (x, y) in enumerate(_batches(steps)):
        losses.append(fn(x, y).item())
        if between is not None:
            kept.append(between(i, model, opt))
    return np.array(losses), _state(model, opt), fn, kept


def _no_donation(monkeypatch):
    monkeypatch.setattr(lf, "_plan_donation", lambda entry, tensor_args: None)


def _same_bits(a, b):
    assert len(a) == len(b)
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u, v)


@pytest.mark.parametrize("opt_name,kw", [("SGD", {"momentum": 0.9}), ("SGD", {"momentum": 0.9, "nesterov": True}),
                                         ("Adam", {}), ("AdamW", {"amsgrad": True})])
def test_donation_gives_the_same_bits_and_writes_in_place(opt_name, kw, monkeypatch):
    seen = []
    l1, s1, fn, _ = _train(opt_name=opt_name, between=lambda i, m, o: seen.append(dict(fn_stats[0])), **kw)
    with monkeypatch.context() as m:
        _no_donation(m)
        l2, s2, fn2, _ = _train(opt_name=opt_name, **kw)
    np.testing.assert_array_equal(l1, l2)
    _same_bits(s1, s2)
    assert fn.trace_count == 1 and fn2.trace_count == 1
    assert fn.call_stats["replays"] == 4  # One warm-up call runs eagerly.
    # Every parameter, .grad and optimizer state tensor (all of `_state`) is updated by each step; from the
    # second replay on (the first may meet memory that is not the tensor's own), all of them in place.
    last_two = fn.call_stats["donated"] - seen[2]["donated"]
    assert last_two == 2 * len(s1)
    assert fn.call_stats["written_back"] == seen[2]["written_back"]
    assert fn2.call_stats["donated"] == 0 and fn2.call_stats["written_back"] == 4 * len(s1)


def test_steady_state_allocates_nothing_for_updated_tensors():
    model, opt, step = _setup()
    fn = loom.function(step)
    batches = _batches(6)
    for x, y in batches[:3]:
        fn(x, y)
    params = list(model.parameters())

    def memory():
        """Where each updated tensor's value lives (ids: holding the arrays would stop their donation)."""
        ts = params + [p.grad for p in params] + [opt.state[p]["momentum_buffer"] for p in params]
        return [(id(t._node), id(t._node.buffer), t._node.buffer.__array_interface__["data"][0]) for t in ts]
    where = memory()
    versions = [p._version for p in params]
    before = dict(fn.call_stats)
    for x, y in batches[3:]:
        fn(x, y)
    assert memory() == where, "an updated tensor got new memory"
    assert [p._version for p in params] == [v + 3 for v in versions]  # Each in-place update is a new version.
    assert fn.call_stats["donated"] - before["donated"] == 3 * len(where)
    assert fn.call_stats["written_back"] == before["written_back"]
    exe = next(iter(fn._cache.values())).exe
    assert not exe._native._forced, "an in-place update was refused by its kernel and left to Python"
    assert fn.trace_count == 1


def test_donated_steps_match_the_executor_loop_and_actors(monkeypatch):
    l1, s1, fn, _ = _train()
    assert fn.call_stats["donated"] > 0
    monkeypatch.setenv("LOOM_NATIVE", "0")
    l2, s2, fn2, _ = _train()
    assert fn2.call_stats["donated"] == 0
    monkeypatch.delenv("LOOM_NATIVE")
    np.testing.assert_array_equal(l1, l2)
    _same_bits(s1, s2)
    model, opt, step = _setup()
    fa = loom.function(step, runtime="actors")
    try:
        la = np.array([fa(x, y).item() for x, y in _batches(5)])
    finally:
        fa.close()
    np.testing.assert_array_equal(l1, la)
    _same_bits(s1, _state(model, opt))


def _hold(kind):
    """What a user keeps of the first parameter after a step, and how to read it later."""
    def between(i, model, opt):
        p = model[0].weight
        if kind == "detach":
            return p.detach()
        if kind == "numpy":
            return p.detach().numpy()
        if kind == "pending":
            return p * 2.0  # Lazy: not computed until read.
        if kind == "data":
            return p.data
        if kind == "grad_numpy":
            return p.grad.numpy()
        if kind == "momentum":
            return opt.state[p]["momentum_buffer"].detach()
        raise AssertionError(kind)
    return between


def _read(v):
    return np.array(v.detach().numpy() if isinstance(v, loom.Tensor) else v)


@pytest.mark.parametrize("kind", ["detach", "numpy", "pending", "data", "grad_numpy", "momentum"])
def test_values_held_across_steps_see_what_they_would_without_donation(kind, monkeypatch):
    l1, s1, fn, kept1 = _train(between=_hold(kind))
    with monkeypatch.context() as m:
        _no_donation(m)
        l2, s2, _, kept2 = _train(between=_hold(kind))
    np.testing.assert_array_equal(l1, l2)
    _same_bits(s1, s2)
    for a, b in zip(kept1, kept2):
        np.testing.assert_array_equal(_read(a), _read(b))
    # The held tensor's memory is not given to the step while the user holds it.
    assert fn.call_stats["written_back"] > 0


def test_changed_argument_shape_and_dtype_retrace():
    model, opt, step = _setup()
    fn = loom.function(step)
    x, y = _batches(1)[0]
    fn(x, y)
    fn(x, y)
    assert fn.trace_count == 1
    fn(x[:5], y[:5])
    assert fn.trace_count == 2
    ref_model, ref_opt, ref_step = _setup()
    ref_step(x, y)
    ref_step(x, y)
    ref_step(x[:5], y[:5])
    _close(_state(model, opt), _state(ref_model, ref_opt))
    with pytest.raises(loom.LoomError):
        fn(x.double(), y)  # float64 input into float32 weights: the retrace runs the Python step, which raises.


def _close(a, b):
    assert len(a) == len(b)
    for u, v in zip(a, b):
        np.testing.assert_allclose(u, v, rtol=1e-5, atol=1e-6)


def _scenario(change, traced):
    """Two steps, `change(model, opt)`, three more: losses and state, traced or eager."""
    model, opt, step = _setup()
    fn = loom.function(step) if traced else step
    batches = _batches(5)
    losses = [fn(x, y).item() for x, y in batches[:2]]
    change(model, opt)
    losses += [fn(x, y).item() for x, y in batches[2:]]
    return np.array(losses), [p.detach().numpy().copy() for p in model.parameters()], fn


def _assign(model, opt):
    model[2].weight = nn.Parameter(loom.ones(3, 16) * 0.1)
    opt.add_param_group({"params": [model[2].weight]})


def _assign_untrained(model, opt):
    model[2].weight = nn.Parameter(loom.ones(3, 16) * 0.1)


def _add_group(model, opt):
    extra = nn.Linear(3, 3)
    model.add_module("3", nn.ReLU())
    model.add_module("4", extra)
    loom.manual_seed(3)
    with loom.no_grad():
        extra.weight.copy_(loom.randn(3, 3) * 0.5)
    opt.add_param_group({"params": list(extra.parameters()), "lr": 0.01})


def _freeze(model, opt):
    model[0].weight.requires_grad_(False)


@pytest.mark.parametrize("change", [_assign, _assign_untrained, _add_group, _freeze])
def test_changed_parameters_retrace_and_match_eager(change):
    le, pe, _ = _scenario(change, False)
    lt, pt, fn = _scenario(change, True)
    np.testing.assert_allclose(lt, le, rtol=1e-5)
    _close(pt, pe)
    assert fn.trace_count == 2, "the change must be seen, once"


def test_no_grad_calls_are_their_own_trace():
    model, opt, step = _setup()

    def predict(x):
        return model(x).sum()
    fn = loom.function(predict)
    x, _ = _batches(1)[0]
    with_grad = [fn(x) for _ in range(3)]
    with loom.no_grad():
        without = [fn(x) for _ in range(3)]
    assert fn.trace_count == 2
    np.testing.assert_array_equal(without[-1].numpy(), with_grad[-1].detach().numpy())
    fn(x)  # Grad mode again: the first trace serves.
    with loom.no_grad():
        fn(x)  # And the no_grad one.
    assert fn.trace_count == 2 and fn.call_stats["replays"] == 7  # Every call but the eager warm-up.


def test_lr_change_is_read_each_call_without_retracing():
    model, opt, step = _setup()
    fn = loom.function(step)
    ref_model, ref_opt, ref_step = _setup()
    for i, (x, y) in enumerate(_batches(6)):
        for o in (opt, ref_opt):
            o.param_groups[0]["lr"] = 0.05 / (i + 1)
        fn(x, y)
        ref_step(x, y)
    assert fn.trace_count == 1
    _close(_state(model, opt), _state(ref_model, ref_opt))


# ---------------------------------------------------------------- the native program's side

def _graph(sum_first: bool):
    """Outputs r = x @ p, p_new = p - 0.1 * g (elementwise) and s = (p * p).sum(), the sum built (and so run)
    before or after the update."""
    g = Graph()
    p = g.add_input((4, 4), "float32")
    grad = g.add_input((4, 4), "float32")
    x = g.add_input((3, 4), "float32")
    r = g.add_node("matmul", [x, p])

    def total():
        return g.add_node("sum", [g.add_node("mul", [p, p])], {"axes": (0, 1)})
    s = total() if sum_first else None
    p_new = g.add_node("sub", [p, g.add_node("mul", [grad, g.add_constant(0.1, "float32", shape=(4, 4))])])
    s = s if sum_first else total()
    g.outputs = [r, p_new, s]
    return g


def _program(graph, runs_before: bool):
    """The compiled graph, checking the test's premise: the sum (output 2) runs before the update (output 1)
    or after it."""
    from loom.compiler import compile as compile_graph

    exe = compile_graph(graph, level=3)
    assert isinstance(exe, Executable) and exe.wait(300)
    order = [st.out for st in exe._native._steps]
    assert (order.index(exe._out_slots[2]) < order.index(exe._out_slots[1])) == runs_before
    return exe


def test_native_program_writes_an_update_over_its_input_when_every_reader_ran():
    exe = _program(_graph(sum_first=True), True)
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(n.shape).astype(np.float32) for n in exe._inputs]
    expected = exe(*[a.copy() for a in arrays])
    allowed = exe.donatable([(1, 0), (0, 0), (2, -1)])
    assert 0 not in allowed, "a GEMM reading p may not write its result over p"
    assert 1 in allowed, "the elementwise update of p may write over p once the GEMM and the sum read it"
    assert 2 in allowed, "memory the program does not read may take any output"
    into = [None] * (max(allowed.values()) + 1)
    into[allowed[1]] = arrays[0]
    scratch = np.empty((), np.float32)
    into[allowed[2]] = scratch
    out = exe.run_checked(arrays, into)
    assert out[1] is arrays[0] and out[2] is scratch, "the outputs were not written into the given memory"
    for a, b in zip(out, expected):
        np.testing.assert_array_equal(a, b)


def test_native_program_refuses_donation_when_the_input_is_read_later():
    exe = _program(_graph(sum_first=False), False)
    assert 1 not in exe.donatable([(1, 0)]), "the sum reads p after the update would have overwritten it"
    g = Graph()
    p = g.add_input((4, 4), "float32")
    p_new = g.add_node("add", [p, g.add_constant(1.0, "float32", shape=(4, 4))])
    g.outputs = [p_new, g.add_node("matmul", [p_new, p])]  # The GEMM needs p_new, so it reads p after it.
    from loom.compiler import compile as compile_graph
    exe = compile_graph(g, level=3)
    assert exe.wait(300)
    assert exe.donatable([(0, 0)]) == {}
    assert exe.donatable([(1, -1)]) != {}


def test_a_call_that_fails_leaves_the_updated_tensors_as_they_were():
    p = loom.ones(4)
    table = loom.randn(5, 3)

    @loom.function(warmup=0)
    def f(idx):
        p.sub_(0.5)
        return table[idx + (p.sum() * 0).long()].sum()  # The index check runs after the update.
    good = loom.tensor([0, 1])
    for _ in range(3):
        f(good)
    assert f.call_stats["replays"] == 3
    before = p.numpy().copy()
    with pytest.raises(loom.LoomError):
        f(loom.tensor([0, 7]))
    np.testing.assert_array_equal(p.numpy(), before)
    f(good)
    np.testing.assert_array_equal(p.numpy(), before - 0.5)


def test_a_module_made_inside_the_step_does_not_retrace_every_call():
    w = loom.ones(4, requires_grad=True)

    @loom.function
    def f(x):
        return nn.ReLU()(x * w).sum()  # A fresh module each Python run (gone after the trace).
    x = loom.ones(4)
    for _ in range(5):
        f(x)
    assert f.trace_count == 1 and f.call_stats["replays"] == 4


def test_parameters_changing_dtype_retrace_and_match_eager():
    def run(traced):
        model, opt, step = _setup()
        fn = loom.function(step) if traced else step
        batches = _batches(5)
        losses = [fn(x, y).item() for x, y in batches[:2]]
        model.double()  # Every parameter a float64 tensor now: the captured ones no longer match the trace.
        losses += [fn(x.double(), y).item() for x, y in batches[2:]]
        return np.array(losses), [p.detach().numpy().copy() for p in model.parameters()], fn
    le, pe, _ = run(False)
    lt, pt, fn = run(True)
    assert fn.trace_count == 2
    assert all(p.dtype == np.float64 for p in pt)
    np.testing.assert_allclose(lt, le, rtol=1e-6)
    _close(pt, pe)
