"""A traced step at a new batch size reuses the earlier trace's optimised graph (`loom.compiler.respecialize`)
only where that gives what the pass pipeline gives, and never a wrong result."""
from __future__ import annotations

import numpy as np
import loom
from loom.compiler import respecialize
from loom.ir import Graph


def _respecialised(fn) -> bool:
    return "respecialize" in list(fn._cache.values())[-1].exe.graph.meta["pass_seconds"]


def _rows(n: int, seed: int = 0) -> loom.Tensor:
    return loom.tensor(np.random.default_rng(seed).standard_normal((n, 4)).astype(np.float32))


def test_sizes_in_slices_reshapes_and_scalars_take_the_new_values():
    w = loom.tensor(np.linspace(-1, 1, 4, dtype=np.float32))

    @loom.function(warmup=0)
    def f(x):
        n = x.shape[0]
        head = x[: n - 1].reshape(2 * (n - 1), 2)   # A slice bound and a reshape that name the batch size.
        return (head.sum(1) * 3.0).sum() / n + (x * w).sum(1).exp()
    for n, seed in ((6, 0), (6, 1), (4, 2), (9, 3)):
        x = _rows(n, seed)
        got = f(x).numpy()
        a = x.numpy()
        want = (a[: n - 1].reshape(-1, 2).sum(1) * 3.0).sum() / n + np.exp((a * w.numpy()).sum(1))
        np.testing.assert_allclose(got, want, rtol=1e-5)
    assert f.trace_count == 3 and _respecialised(f)


def test_a_constant_folded_from_the_batch_size_is_not_reused():
    @loom.function(warmup=0)
    def f(x):
        # Computed from constants only, so the pipeline folds it: its value depends on the batch size.
        count = loom.ones(x.shape[0], 3).sum()
        return x.sum(1) + count
    for n in (5, 7):
        x = _rows(n)
        np.testing.assert_allclose(f(x).numpy(), x.numpy().sum(1) + 3.0 * n, rtol=1e-6)
    assert f.trace_count == 2 and not _respecialised(f)


def test_a_changed_dtype_or_requires_grad_still_traces_again():
    @loom.function(warmup=0)
    def f(x):
        return (x * 2.0).sum(0)
    f(_rows(6))
    y = f(_rows(3).to(loom.float64))
    assert y.dtype == loom.float64 and f.trace_count == 2
    x = _rows(5)
    x.requires_grad_(True)
    out = f(x)
    assert f.trace_count == 3
    np.testing.assert_allclose(out.detach().numpy(), (x.detach().numpy() * 2.0).sum(0), rtol=1e-6)


def _trace(n: int, value: float = 2.0) -> Graph:
    g = Graph()
    x = g.add_input((n, 4), loom.float32)
    k = g.add_node("const", [], {"value": value, "shape": (n, 4), "dtype": loom.float32})
    g.outputs = [g.add_node("sum", [g.add_node("mul", [x, k])], {"axes": (1,)})]
    return g


def test_what_blocks_reuse():
    old = _trace(8)
    optimized = loom.compiler.optimize(old)[0]
    out = respecialize.respecialize(old, _trace(5), optimized)
    assert out is not None and out.inputs[0].shape == (5, 4) and out.outputs[0].shape == (5,)
    assert respecialize.respecialize(old, _trace(1), optimized) is None  # A size that becomes 1.
    assert respecialize.respecialize(old, _trace(5, 1.0), optimized) is None  # A constant that becomes 1.
    other = _trace(5)
    other.outputs = [other.add_node("neg", [other.outputs[0]])]
    assert respecialize.respecialize(old, other, optimized) is None  # Another structure.


def test_a_registered_pass_blocks_reuse(monkeypatch):
    """A third-party pass may decide anything on sizes: with one in the level, the pipeline runs."""
    from loom.compiler.passes.registry import PASSES, Pass

    assert respecialize.default_pipeline(3)
    monkeypatch.setitem(PASSES, "count_example", Pass("count_example", 3, lambda g: g))
    assert not respecialize.default_pipeline(3)

    @loom.function(warmup=0)
    def f(x):
        return x.sum(1)
    f(_rows(6))
    np.testing.assert_allclose(f(_rows(4)).numpy(), _rows(4).numpy().sum(1), rtol=1e-6)
    assert f.trace_count == 2 and not _respecialised(f)


def test_constants_merged_at_one_size_only_are_not_reused():
    """Dividing by n and by the model's own 8 is one constant at n = 8 (common-subexpression elimination
    computes it once); at another size they differ, so the optimised graph of n = 8 is not reused (it would
    divide both by the new n)."""
    w = loom.tensor(np.linspace(-1, 1, 4, dtype=np.float32))

    @loom.function(warmup=0)
    def f(x):
        return x.sum(0) / x.shape[0] + w / 8.0
    for n in (8, 4):
        x = _rows(n)
        np.testing.assert_allclose(f(x).numpy(), x.numpy().sum(0) / n + w.numpy() / 8.0, rtol=1e-6)
    assert f.trace_count == 2 and not _respecialised(f)
