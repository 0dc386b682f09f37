"""The compiled eager backend's plans: one shared arena, held values computed once, no kernel builds
for a new batch size (eager and traced)."""
import numpy as np
import pytest

import loom
import loom.codegen
from loom.compiler import eager


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    """One kernel cache for this module's build counts (kernels the eager test built serve the traced one)."""
    return tmp_path_factory.mktemp("kernels")


@pytest.fixture
def fresh_cache(cache_dir, monkeypatch):
    """This module's kernel cache, nothing in memory, counters at zero."""
    from loom.codegen.cache import clear_memory
    monkeypatch.setenv("LOOM_CACHE_DIR", str(cache_dir))
    clear_memory()
    eager._CACHE.clear()  # Plans compiled before hold their kernels.
    loom.codegen.reset_stats()
    yield cache_dir
    clear_memory()
    eager._CACHE.clear()


def _mlp_step(seed: int = 0):
    loom.manual_seed(seed)
    model = loom.nn.Sequential(loom.nn.Linear(12, 16), loom.nn.ReLU(), loom.nn.Linear(16, 3))
    opt = loom.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def step(x, y):
        opt.zero_grad()
        loss = loom.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return model, step


def _batch(n: int, seed: int = 1):
    rng = np.random.default_rng(seed)
    return loom.tensor(rng.standard_normal((n, 12)).astype(np.float32)), loom.tensor(rng.integers(0, 3, n))


def _wait_all() -> None:
    for exe in eager._CACHE.values():
        exe.wait()


def test_eager_steps_match_the_reference_path():
    losses = {}
    for backend in ("reference", "compiled"):
        model, step = _mlp_step()
        with loom.backend(backend):
            losses[backend] = [float(step(*_batch(8, k)).item()) for k in range(3)]
            losses[backend + "-params"] = [p.detach().numpy().copy() for p in model.parameters()]
    np.testing.assert_allclose(losses["compiled"], losses["reference"], rtol=1e-5)
    for a, b in zip(losses["compiled-params"], losses["reference-params"]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_held_values_come_out_of_the_step():
    """The optimizer's barrier computes the parameters; what the loss is computed from (held by the
    pending loss) comes out with them, so reading the loss later does not run the forward pass again."""
    from loom.runtime.reference import pending_order
    model, step = _mlp_step()
    with loom.backend("compiled"):
        step(*_batch(8))
        loss = step(*_batch(8))  # The optimizer's barrier (in step) has run.
        order = pending_order([loss._node])
        reads = {i.shape for n in order for i in n.inputs if i.buffer is not None}
        assert order and len(order) < 20
        assert (8, 12) not in reads and (16, 12) not in reads  # Neither the batch nor a weight.
        got = loss.item()
    model, step = _mlp_step()
    with loom.backend("reference"):
        step(*_batch(8))
        want = step(*_batch(8)).item()
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_cached_plans_share_one_arena():
    with loom.backend("compiled"):
        outs = []
        for n in (64, 256, 32):
            x = loom.ones(n, n)
            outs.append((((x * 2.0).exp() @ x) - 1.0).tanh().sum().item())
        progs = [exe._native for exe in eager._CACHE.values() if exe._native is not None]
        assert len(progs) >= 3
        arenas = [prog._ctxs[-1].arena for prog in progs[-3:]]
        assert all(np.shares_memory(a, arenas[0]) or a.nbytes == 0 or arenas[0].nbytes == 0 for a in arenas)
        assert eager.arena_bytes() >= max(prog.arena_bytes for prog in progs[-3:])
        # The cache's byte count no longer charges an arena per plan.
        assert all(eager._FOOTPRINT[k] < 2**20 for k in list(eager._CACHE)[-3:])
    for n, got in zip((64, 256, 32), outs):
        x = np.ones((n, n), np.float32)
        np.testing.assert_allclose(got, np.tanh((np.exp(x * 2.0) @ x) - 1.0).sum(), rtol=1e-5)


def test_new_batch_size_builds_no_kernel_eager(fresh_cache):
    """Kernels are specialised by structure, not size: a second batch size compiles plans, builds nothing."""
    _, step = _mlp_step()
    with loom.backend("compiled"):
        step(*_batch(8)).item()
        step(*_batch(8)).item()
        _wait_all()
        built = loom.codegen.stats()["builds"]
        assert built > 0
        compiles = eager.stats["compiles"]
        step(*_batch(5)).item()
        step(*_batch(5)).item()
        assert eager.stats["compiles"] > compiles  # New shapes: new plans ...
        _wait_all()
        assert loom.codegen.stats()["builds"] == built  # ... from the kernels already built.


def test_new_batch_size_builds_no_kernel_traced(fresh_cache):
    """A loom.function step traced again at a new batch size builds no kernel (and none loads from disk)."""
    _, step = _mlp_step()
    fn = loom.function(step)
    for n in (8, 8):
        fn(*_batch(n)).item()
    for entry in fn._cache.values():
        entry.exe.wait()
    before = loom.codegen.stats()
    assert before["builds"] + before["disk_hits"] > 0
    fn(*_batch(5)).item()
    for entry in fn._cache.values():
        entry.exe.wait()
    after = loom.codegen.stats()
    assert fn.trace_count == 2
    assert (after["builds"], after["disk_hits"]) == (before["builds"], before["disk_hits"])


@pytest.mark.parametrize("backend", ["reference", "compiled"])
def test_a_float64_check_bound_holds_for_float32_values(backend):
    """A check bound float32 cannot hold (float64's tiny) splits float32 values alike in every backend."""
    from loom.functional.checks import check
    with loom.backend(backend):
        x = loom.tensor([1.0, 0.0, 2.0]) * 1.0
        y = check(x.abs(), "t", "loom.t: bad value {value}", low=np.finfo(np.float64).tiny, high=np.inf,
                  error="value") + 1.0
        with pytest.raises(loom.LoomValueError, match="loom.t: bad value 0.0"):
            y.tolist()
        x = loom.tensor([1.0, 3.0, 2.0]) * 1.0
        z = check(x, "t", "loom.t: {value}", low=1.0, high=3.0, closed=True, error="value") + 1.0
        assert z.tolist() == [2.0, 4.0, 3.0]


def test_an_empty_cache_lets_the_shared_arena_go():
    saved = eager._CACHE_BYTES
    try:
        with loom.backend("compiled"):
            x = loom.ones(64, 64)
            (((x * 2.0).exp() @ x) - 1.0).tanh().sum().item()
        assert eager.arena_bytes() > 0
        eager.set_cache_bytes(0)
        assert not eager._CACHE and eager.arena_bytes() == 0
    finally:
        eager.set_cache_bytes(saved)
    with loom.backend("compiled"):  # Plans compiled after run on a fresh arena.
        x = loom.ones(8, 8)
        assert (((x * 2.0).exp() @ x) - 1.0).tanh().sum().item() > 0
    assert eager.arena_bytes() > 0
