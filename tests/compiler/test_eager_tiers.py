"""The tiered eager backend: a graph structure runs on the reference path until it has repeated, then its
plan is compiled in the background and replayed once ready; failures fall back to the reference path."""
import threading

import numpy as np
import pytest

import loom
from loom.compiler import eager
from loom.errors import LoomError, LoomIndexError

from .test_eager_plans import _batch, _mlp_step


@pytest.fixture
def tiers(monkeypatch):
    """The tiered backend with count-only promotion (no time threshold), empty caches, counters at zero."""
    monkeypatch.setattr(eager, "TIER_AFTER", 3)
    monkeypatch.setattr(eager, "TIER_NODE_SECONDS", 0.0)
    monkeypatch.setattr(eager, "TIER_SYNC", False)
    eager.wait_tiered(60)
    eager._CACHE.clear()
    eager.reset_tiers()
    for k in ("tier_compiles", "tier_failures", "hits"):
        monkeypatch.setitem(eager.stats, k, 0)
    with loom.backend("tiered"):
        yield
    eager.wait_tiered(60)
    eager._CACHE.clear()
    eager.reset_tiers()


def _losses(backend: str, steps: int, wait: bool = False) -> tuple[list[float], list[np.ndarray]]:
    model, step = _mlp_step()
    out = []
    with loom.backend(backend):
        for k in range(steps):
            out.append(float(step(*_batch(8, k)).item()))
            if wait:
                assert eager.wait_tiered(60)
    return out, [p.detach().numpy().copy() for p in model.parameters()]


def test_structure_compiles_after_n_repeats_and_replays(tiers):
    _, step = _mlp_step()
    step(*_batch(8, 0)).item()  # The first step also computes the initial weights: a structure of its own.
    for k in range(1, 3):
        step(*_batch(8, k)).item()
        assert eager.wait_tiered(60)
        assert eager.stats["tier_compiles"] == 0  # Seen once, twice: still the reference path.
    step(*_batch(8, 3)).item()  # The third sighting queues the compile (this step itself runs by reference).
    assert eager.wait_tiered(60)
    assert eager.stats["tier_compiles"] == 1 and eager.stats["hits"] == 0
    for k in range(4, 7):
        step(*_batch(8, k)).item()
    assert eager.stats["tier_compiles"] == 1  # One structure, one compile ...
    assert eager.stats["hits"] == 3           # ... replayed by every later step.


def test_tiers_agree_with_the_reference_path(tiers):
    """Within the compiled backend's tolerance (exact ops bit for bit; exp/log and reordered sums round
    differently), over steps that cross from the reference tier to the compiled one."""
    got, got_params = _losses("tiered", 7, wait=True)
    assert eager.stats["tier_compiles"] == 1 and eager.stats["hits"] == 3
    want, want_params = _losses("reference", 7)
    assert got[:4] == want[:4]  # The reference tier: the same bits.
    np.testing.assert_allclose(got, want, rtol=1e-5)
    for a, b in zip(got_params, want_params):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_sync_tier_switch_is_deterministic(tiers, monkeypatch):
    """With TIER_SYNC (LOOM_TIER_SYNC=1) the third sighting compiles in the calling thread and replays at
    once: two runs give the same bits."""
    monkeypatch.setattr(eager, "TIER_SYNC", True)
    first, _ = _losses("tiered", 6)
    assert eager.stats["tier_compiles"] == 1 and eager.stats["hits"] == 2  # Step 3 compiled and ran it; 4, 5 hit.
    eager._CACHE.clear()
    eager.reset_tiers()
    second, _ = _losses("tiered", 6)
    assert first == second


def test_background_compile_does_not_block_the_steps(tiers, monkeypatch):
    release = threading.Event()
    started = threading.Event()
    real = eager.compile_graph

    def slow_compile(graph, *args, **kwargs):
        started.set()
        assert release.wait(60)
        return real(graph, *args, **kwargs)
    monkeypatch.setattr(eager, "compile_graph", slow_compile)
    got, _ = _losses("tiered", 6)  # The compile starts at step 3 and is held until released below.
    assert started.wait(60)
    assert eager.stats["tier_compiles"] == 0 and len(eager._PENDING) == 1
    want, _ = _losses("reference", 6)
    assert got == want  # Every step ran on the reference path meanwhile, and none waited.
    release.set()
    assert eager.wait_tiered(60)
    assert eager.stats["tier_compiles"] == 1 and not eager._PENDING


def test_failed_compile_keeps_the_reference_path_silently(tiers, monkeypatch):
    def broken(graph, *args, **kwargs):
        raise RuntimeError("the C compiler is missing")
    monkeypatch.setattr(eager, "compile_graph", broken)
    got, _ = _losses("tiered", 6, wait=True)
    assert eager.stats["tier_failures"] == 1 and eager.stats["tier_compiles"] == 0
    assert list(eager._FAILED.values()) == ["RuntimeError: the C compiler is missing"]
    want, _ = _losses("reference", 6)
    assert got == want  # No second try: one failure, the reference path from then on.


class _BrokenPlan:
    """A cached plan whose every run fails, standing in for a miscompiled kernel."""

    def __call__(self, *arrays):
        raise RuntimeError("kernel crashed")


def test_failed_replay_falls_back_to_the_reference_path(tiers):
    _losses("tiered", 4, wait=True)
    (key,) = list(eager._CACHE)
    eager._CACHE[key] = _BrokenPlan()
    got, _ = _losses("tiered", 5)  # Same structure: the broken plan is tried once, then dropped.
    assert eager.stats["tier_failures"] == 1 and key in eager._FAILED and key not in eager._CACHE
    want, _ = _losses("reference", 5)
    assert got == want


def test_an_error_reaches_the_user_only_when_the_reference_path_fails_too(tiers):
    emb = loom.nn.Embedding(5, 4)

    def run(labels):
        ids = loom.tensor(np.array(labels)) + 0  # A pending index: checked when the graph runs.
        return (emb(ids).exp().sum(dim=1) * 2.0 + 1.0).sum().item()
    for _ in range(4):  # The first run also computes the initial weights: a structure of its own.
        run([0, 1, 4])
    assert eager.wait_tiered(60) and eager.stats["tier_compiles"] == 1
    with pytest.raises(LoomIndexError, match="embedding"):
        run([0, 7, 4])
    assert eager.stats["tier_failures"] == 0  # The data was at fault, not the plan: it stays cached.
    assert len(eager._CACHE) == 1
    run([1, 2, 3])
    assert eager.stats["hits"] >= 1


def test_set_backend_still_chooses(tiers):
    with loom.backend("reference"):
        assert loom.get_backend() == "reference"
        _losses("reference", 6, wait=True)
    assert eager.stats["tier_compiles"] == 0 and not eager._CACHE
    assert loom.get_backend() == "tiered"
    with pytest.raises(LoomError, match="unknown backend 'jit'"):
        loom.set_backend("jit")
    assert loom.get_backend() == "tiered"


def test_two_threads_share_one_plan_per_structure(tiers):
    """Two Python threads stepping models of one structure: one compile, every step correct."""
    results: dict[int, list[float]] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(2)

    steps = [_mlp_step()[1] for _ in range(2)]  # Seeded one after the other: the same weights.

    def worker(k: int) -> None:
        try:
            barrier.wait(60)
            results[k] = [float(steps[k](*_batch(8, j)).item()) for j in range(12)]
        except BaseException as e:  # noqa: BLE001 - reported below.
            errors.append(e)
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert eager.wait_tiered(60)
    assert eager.stats["tier_compiles"] == 1 and eager.stats["tier_failures"] == 0
    want, _ = _losses("reference", 12)
    for k in range(2):
        np.testing.assert_allclose(results[k], want, rtol=1e-5)


def test_tiered_is_the_default_backend():
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "LOOM_BACKEND"}
    out = subprocess.run([sys.executable, "-c", "import loom; print(loom.get_backend())"], env=env,
                         capture_output=True, text=True, check=True, cwd=os.path.dirname(os.path.dirname(
                             os.path.dirname(os.path.abspath(__file__)))))
    assert out.stdout.strip() == "tiered"


class _Clock:
    """The `time` module with a perf_counter whose every reading is `step` seconds after the one before."""

    def __init__(self, step: float):
        import time
        self.now, self.step = 0.0, step
        self.monotonic, self.sleep = time.monotonic, time.sleep

    def perf_counter(self) -> float:
        self.now += self.step
        return self.now


def test_a_structure_compiles_once_its_reference_runs_cost_enough(tiers, monkeypatch):
    """TIER_NODE_SECONDS per node of reference time buys a compile: with every run taking 5 ms (a fake
    clock) and 2 ms per node asked of a graph of n nodes, the compile comes at the first sighting whose
    predecessors reach 2n ms, not at the TIER_AFTER-th."""
    monkeypatch.setattr(eager, "TIER_AFTER", 2)
    monkeypatch.setattr(eager, "TIER_NODE_SECONDS", 0.002)
    monkeypatch.setattr(eager, "TIER_SYNC", True)
    monkeypatch.setattr(eager, "time", _Clock(0.005))
    x = loom.tensor(np.ones((4, 4), np.float32))

    def graph():
        y = x
        for _ in range(4):
            y = (y * 0.5 + 1.0).exp()
        return y.sum()
    from loom.runtime.reference import pending_order
    n = len(pending_order([graph()._node]))
    need = -(-2 * n // 5)  # Sightings whose 5 ms each stay below 2 ms x n; the next one compiles.
    assert need >= 2
    for _ in range(need):
        graph().item()
    assert eager.stats["tier_compiles"] == 0
    got = graph().item()  # Compiled now (TIER_SYNC) and replayed.
    assert eager.stats["tier_compiles"] == 1
    with loom.backend("reference"):
        want = graph().item()
    np.testing.assert_allclose(got, want, rtol=1e-5)
