"""What a warm compile or a retrace at a new batch size skips, counted (never timed): C rendered again for a
body already met, the step driver's background build, the libmvec probe, re-verifying the trace, a fresh
arena per specialisation, and arena space for views that cost nothing."""
from __future__ import annotations

import numpy as np
import pytest

import loom
from loom.codegen import build, cache, driver
from loom.compiler import pipeline
from loom.ir import Graph
from loom.runtime import native
from tests.compiler.test_eager_plans import _batch, _mlp_step


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    """One kernel cache for the module (each kernel is built once)."""
    return tmp_path_factory.mktemp("kernels")


@pytest.fixture
def fresh_cache(cache_dir, monkeypatch):
    """This module's kernel cache, nothing in memory, counters at zero, builds in the calling thread."""
    monkeypatch.setenv("LOOM_CACHE_DIR", str(cache_dir))
    monkeypatch.setenv("LOOM_CODEGEN_SYNC", "1")
    cache.clear_memory()
    loom.codegen.reset_stats()
    yield cache_dir
    cache.clear_memory()


@pytest.fixture
def renders(monkeypatch):
    """The bodies `loom.codegen` renders as C (appended as they are)."""
    seen: list[Graph] = []
    real = cache.render

    def counting(body):
        seen.append(body)
        return real(body)
    monkeypatch.setattr(cache, "render", counting)
    return seen


def _scaled_sum(shape=(4, 3), c: float = 2.0) -> Graph:
    g = Graph()
    x = g.add_input(shape, loom.float32)
    k = g.add_node("const", [], {"value": c, "shape": tuple(shape), "dtype": loom.float32})
    g.outputs = [g.add_node("mul", [g.add_node("add", [x, x]), k])]
    return g


def test_a_body_met_again_is_not_rendered_again(fresh_cache, renders):
    first = cache.get_kernel(_scaled_sum())
    again = cache.get_kernel(_scaled_sum())  # Another graph object, the same computation.
    assert len(renders) == 1 and again is first
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    out = np.empty((4, 3), np.float32)
    again([x], out)
    np.testing.assert_array_equal(out, (x + x) * np.float32(2.0))
    # Sizes are part of the call arguments, not of the code: a new size renders, but builds nothing new.
    bigger = cache.get_kernel(_scaled_sum((5, 3)))
    assert len(renders) == 2 and bigger is not first and bigger._lib is first._lib
    assert loom.codegen.stats()["builds"] <= 1


def test_the_body_key_tells_apart_what_equality_does_not(fresh_cache, renders):
    plus, minus = _scaled_sum(c=0.0), _scaled_sum(c=-0.0)
    assert cache.body_key(plus) != cache.body_key(minus)
    assert cache.body_key(_scaled_sum(c=-0.0)) == cache.body_key(minus)
    kp, km = cache.get_kernel(plus), cache.get_kernel(minus)
    assert km is not kp and len(renders) == 2
    x = np.ones((4, 3), np.float32)
    op, om = np.empty_like(x), np.empty_like(x)
    kp([x], op)
    km([x], om)
    assert not np.signbit(op).any() and np.signbit(om).all()


def test_a_retrace_renders_only_bodies_whose_shapes_changed(fresh_cache, renders):
    _, step = _mlp_step()
    fn = loom.function(step)
    for n in (8, 8):
        fn(*_batch(n)).item()
    renders.clear()
    fn(*_batch(5)).item()
    assert fn.trace_count == 2
    fused = sum(len(e.exe.kernels) for e in fn._cache.values()) // 2  # Both specialisations have as many.
    # The optimizer's updates (parameter shapes) are the same bodies at every batch size.
    assert 0 < len(renders) < fused


def test_a_traced_step_is_verified_once(fresh_cache, monkeypatch):
    """The trace is built through the Graph API (each node checked as it is added) and the pipeline's output
    is the compiler's own: without LOOM_VERIFY_PASSES neither is walked again."""
    monkeypatch.setattr(pipeline, "VERIFY_PASSES", False)
    calls = []
    real = Graph.verify
    monkeypatch.setattr(Graph, "verify", lambda self: calls.append(self) or real(self))
    _, step = _mlp_step()
    fn = loom.function(step)
    fn(*_batch(8)).item()
    fn(*_batch(8)).item()
    assert fn.trace_count == 1 and calls == []
    # A graph a user built (and may have edited) is still checked.
    g = Graph()
    g.outputs = [g.add_node("exp", [g.add_input((3,), loom.float32)])]
    pipeline.optimize(g)
    assert calls == [g]


def test_a_cached_driver_loads_at_once(fresh_cache, monkeypatch):
    # Built (or found) in this module's cache: a driver loaded earlier from another cache does not count.
    monkeypatch.setattr(driver, "_STATE", driver._State())
    assert driver.get_driver(wait=True) is not None
    monkeypatch.setattr(driver, "_STATE", driver._State())  # A new process: nothing loaded yet.
    monkeypatch.setenv("LOOM_CODEGEN_SYNC", "0")

    def no_background(*args, **kwargs):
        raise AssertionError("a cached driver is loaded, not built in the background")
    monkeypatch.setattr(cache, "_pool", no_background)
    found = driver.get_driver()
    assert found is not None and driver.driver_done()


def test_the_libmvec_probe_runs_once_per_cache(tmp_path, monkeypatch):
    probes = []
    monkeypatch.setattr(build, "_probe_mvec", lambda cc: probes.append(cc) or True)
    monkeypatch.setattr(build, "_MVEC", {})
    monkeypatch.delenv("LOOM_MVEC", raising=False)
    if build.compiler_id() is None:
        pytest.skip("no C compiler to key the answer by")
    assert build.mvec_available(memo_dir=str(tmp_path)) is True
    monkeypatch.setattr(build, "_MVEC", {})  # A new process.
    assert build.mvec_available(memo_dir=str(tmp_path)) is True
    assert len(probes) == 1
    for memo in tmp_path.iterdir():
        memo.write_text("garbage")  # An unreadable answer is probed again.
    monkeypatch.setattr(build, "_MVEC", {})
    assert build.mvec_available(memo_dir=str(tmp_path)) is True
    assert len(probes) == 2


def test_arena_pool_hands_out_the_smallest_buffer_that_fits():
    pool = native.ArenaPool()
    big = pool.take(1000)
    pool.give(big)
    assert pool.take(500) is big and pool.made == 1  # A smaller program runs on the touched buffer.
    small = pool.take(100)  # (big is in use.)
    pool.give(big)
    pool.give(small)
    assert pool.take(50) is small and pool.take(900) is big
    pool.give(small)
    huge = pool.take(5000)  # Nothing fits: a new buffer, and the ones too small for it are let go.
    assert pool.made == 3 and huge.nbytes >= 5000 and pool._free == []
    arena = native._arena_buffer(3 << 20)  # Large: mapped with its pages populated where the system can.
    assert arena.dtype == np.uint8 and arena.nbytes == 3 << 20 and arena.flags.writeable
    arena[::4096] = 7
    assert int(arena[4096]) == 7


def _steps(share: bool, monkeypatch) -> tuple[list[float], list[np.ndarray], object]:
    with monkeypatch.context() as m:
        if not share:
            m.setattr(native.NativeProgram, "share_arenas", lambda self, pool: None)
        model, step = _mlp_step()
        fn = loom.function(step)
        losses = [fn(*_batch(n, k)).item() for k, n in enumerate((8, 8, 5, 5, 8))]
    return losses, [p.detach().numpy().copy() for p in model.parameters()], fn


def test_specialisations_share_one_arena_with_identical_results(fresh_cache, monkeypatch):
    monkeypatch.setattr(pipeline, "VERIFY_PASSES", False)
    losses, params, fn = _steps(True, monkeypatch)
    if all(e.exe._native is None for e in fn._cache.values()):
        pytest.skip("native programs are off (LOOM_NATIVE=0)")
    assert fn.trace_count == 2 and fn._arenas is not None
    assert fn._arenas.made == 1  # Batch 5 ran on the arena batch 8 had touched.
    losses_own, params_own, _ = _steps(False, monkeypatch)
    assert losses == losses_own
    for a, b in zip(params, params_own):
        np.testing.assert_array_equal(a, b)


def test_free_views_get_no_arena_space(fresh_cache):
    def fn(a, b):
        h = (a @ b).exp()
        t = h.T.reshape(6, 4)  # Views of a computed value: free when nothing overwrites h meanwhile.
        return (t * 2.0).sum(0), (a.T @ h).tanh()

    traced = loom.function(fn, warmup=0)
    a = loom.tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3))
    b = loom.tensor(np.linspace(-1, 1, 18, dtype=np.float32).reshape(3, 6))
    got = [t.numpy() for t in traced(a, b)]
    (entry,) = traced._cache.values()
    prog, plan = entry.exe._native, entry.exe.plan
    if prog is None:
        pytest.skip("native programs are off (LOOM_NATIVE=0)")

    def aligned(n: int) -> int:
        return -(-n // 64) * 64
    unplanned = [st for st in prog._steps if st.node not in plan.offsets and st.out not in prog._out_base]
    assert any(st.out in prog._virtual for st in unplanned), "the test needs a free view the plan left out"
    kept = sum(aligned(max(int(np.prod(st.node.shape)) * st.node.dtype.np.itemsize, 1))
               for st in unplanned if st.out not in prog._virtual)
    assert prog.arena_bytes == aligned(plan.arena_bytes) + kept
    want = fn(a, b)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-5, atol=1e-6)  # (exp, tanh: libm differs by ulps.)


# ---------------------------------------------------------------- a new batch size: what it costs, what it gives

def _tiny_gpt_step(seed: int = 0):
    """A two-block causal transformer (embedding, layer_norm, attention, GELU MLP, cross-entropy) with AdamW."""
    F = loom.nn.functional
    vocab, d, heads = 11, 8, 2
    loom.manual_seed(seed)

    class Block(loom.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = loom.nn.LayerNorm(d), loom.nn.LayerNorm(d)
            self.qkv, self.proj = loom.nn.Linear(d, 3 * d), loom.nn.Linear(d, d)
            self.fc, self.out = loom.nn.Linear(d, 4 * d), loom.nn.Linear(4 * d, d)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.qkv(self.ln1(x)).reshape(b, t, 3, heads, c // heads).permute(2, 0, 3, 1, 4)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
            return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(loom.nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = loom.nn.Embedding(vocab, d), loom.nn.Embedding(6, d)
            self.blocks = loom.nn.ModuleList([Block(), Block()])
            self.head = loom.nn.Linear(d, vocab, bias=False)

        def forward(self, idx):
            x = self.tok(idx) + self.pos(loom.arange(idx.shape[1]))
            for block in self.blocks:
                x = block(x)
            return self.head(x)

    model = GPT()
    opt = loom.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x).reshape(-1, vocab), y.reshape(-1))
        loss.backward()
        opt.step()
        return loss
    return model, step


def _tokens(n: int, seed: int = 1):
    rng = np.random.default_rng(seed)
    return loom.tensor(rng.integers(0, 11, (n, 6))), loom.tensor(rng.integers(0, 11, (n, 6)))


def _state(model) -> list[np.ndarray]:
    return [p.detach().numpy().copy() for p in model.parameters()] + \
        [p.grad.numpy().copy() for p in model.parameters() if p.grad is not None]


@pytest.mark.parametrize("make, data, sizes", [(_mlp_step, _batch, (8, 1)), (_mlp_step, _batch, (8, 3)),
                                               (_tiny_gpt_step, _tokens, (4, 1)), (_tiny_gpt_step, _tokens, (4, 3))],
                         ids=["mlp-8-1", "mlp-8-3", "gpt-4-1", "gpt-4-3"])
def test_a_new_batch_size_gives_what_a_fresh_compile_at_that_size_gives(monkeypatch, make, data, sizes):
    """Bit for bit: losses, parameters and gradients of a function that compiled another batch size first,
    against a function whose first compile is at the new size (a batch of 1 changes what fuses)."""
    # Every kernel built before it runs, so both run the same code; the user's kernel cache (a fresh one
    # would rebuild the transformer's kernels on every run).
    monkeypatch.setenv("LOOM_CODEGEN_SYNC", "1")
    first, new = sizes
    results = []
    for reuse in (True, False):
        model, step = make()
        fn = loom.function(step)
        for k in range(2):  # The eager warm-up call, then the traced step at the first size.
            fn(*data(first, k)).item()
        if not reuse:
            fn = loom.function(step, warmup=0)  # Nothing compiled yet: its first trace is at the new size.
        losses = [fn(*data(new, k)).item() for k in (2, 3)]
        assert fn.trace_count == (2 if reuse else 1)
        if reuse:
            # Re-specialised from the first size's optimised graph, except to a batch of 1 (size-1 axes are what
            # simplification and fusion rules look for, so the pipeline runs).
            seconds = list(fn._cache.values())[-1].exe.graph.meta["pass_seconds"]
            assert ("respecialize" in seconds) == (new > 1), seconds
        results.append((losses, _state(model)))
    (losses_a, state_a), (losses_b, state_b) = results
    assert losses_a == losses_b
    assert len(state_a) == len(state_b) > 0
    for a, b in zip(state_a, state_b):
        np.testing.assert_array_equal(a, b)


def test_a_new_batch_size_builds_nothing_and_infers_no_traced_node_again(fresh_cache, monkeypatch):
    """Counted, not timed: at a new batch size no kernel is built, the trace's nodes enter the graph without
    their shapes being inferred again, and the pipeline never walks the graph depth-first (a graph built in
    order is its own topological order, and each pass leaves it in order)."""
    from loom.ir import graph as graph_module
    monkeypatch.setattr(pipeline, "VERIFY_PASSES", False)
    _, step = _mlp_step()
    fn = loom.function(step)
    for k in range(2):
        fn(*_batch(8, k)).item()
    inferred: list[str] = []
    walks: list[int] = []
    real_infer, real_walk = Graph._infer, graph_module._dfs_order
    monkeypatch.setattr(Graph, "_infer", lambda self, op, *a, **k: inferred.append(op) or real_infer(self, op, *a, **k))

    def walk(roots, expand):
        out = real_walk(roots, expand)
        walks.append(len(out))
        return out
    monkeypatch.setattr(graph_module, "_dfs_order", walk)
    loom.codegen.reset_stats()
    fn(*_batch(5, 2)).item()
    assert fn.trace_count == 2
    assert loom.codegen.stats()["builds"] == 0
    entry = list(fn._cache.values())[-1]
    traced = entry.graph
    # The earlier trace's optimised graph is re-specialised (no pass before fusion runs again); the pipeline
    # reports each step's wall time (benchmarks/compile_time.py prints them).
    assert set(entry.exe.graph.meta["pass_seconds"]) == {"respecialize", "inplace", "memory"}
    # Placeholders, fused nodes and the constants folding makes are new nodes; no traced op is inferred again.
    rewritten = [op for op in inferred if op not in ("input", "fused", "const")]
    assert len(rewritten) < len(traced) // 10, rewritten  # The nodes simplify rewrites.
    # No depth-first walk: a pass that appends nodes earlier nodes now read (fold's and simplify's new nodes,
    # the copies `fuse.recompute_cheap` makes of cheap shared values, the fused nodes) stores the order the walk
    # would give (`passes.prune.keep_walk_order`), so the next pass, inplace, memory and the executor take it
    # as it is; never a walk per fused body (hundreds).
    assert walks == [], walks


@pytest.mark.parametrize("make, data", [(_mlp_step, _batch), (_tiny_gpt_step, _tokens)], ids=["mlp", "gpt"])
def test_a_step_compiled_at_8_then_called_at_4_and_16_matches_fresh_compiles(monkeypatch, make, data):
    """Bit for bit, and with no kernel built: one function compiled at batch 8 and then called at 4, 16 and 8
    again, against a fresh function compiled first at each new size (from the same state)."""
    monkeypatch.setenv("LOOM_CODEGEN_SYNC", "1")
    runs = []
    for reuse in (True, False):
        model, step = make()
        fn = loom.function(step)
        for k in range(2):  # The eager warm-up call, then the trace at batch 8.
            fn(*data(8, k)).item()
        seen = []
        for k, n in ((2, 4), (3, 16)):
            call = fn if reuse else loom.function(step, warmup=0)  # A fresh one compiles first at n.
            loom.codegen.reset_stats()
            traces = call.trace_count
            seen.append((call(*data(n, k)).item(), _state(model)))
            assert call.trace_count == traces + 1
            if reuse:
                assert loom.codegen.stats()["builds"] == 0, loom.codegen.stats()
        traces = fn.trace_count
        seen.append((fn(*data(8, 4)).item(), _state(model)))  # Batch 8 again: replayed, not traced.
        assert fn.trace_count == traces
        runs.append(seen)
    for (loss_a, state_a), (loss_b, state_b) in zip(*runs):
        assert loss_a == loss_b
        assert len(state_a) == len(state_b) > 0
        for a, b in zip(state_a, state_b):
            np.testing.assert_array_equal(a, b)
