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
    for k in ("tier_compiles", "tier_failures", "tier_mismatches", "hits"):
        monkeypatch.setitem(eager.stats, k, 0)
    with loom.backend("tiered"):
        yield
    eager.wait_tiered(60)
    eager._CACHE.clear()
    eager.reset_tiers()


def _exact_step(seed: int = 0):
    """A training step whose compiled plan reproduces the reference path's bits (no bias, whose gradient
    is a column sum that the two paths add up in different orders; no exp/log): it gets promoted."""
    loom.manual_seed(seed)
    model = loom.nn.Sequential(loom.nn.Linear(12, 16, bias=False), loom.nn.ReLU(), loom.nn.Linear(16, 3, bias=False))
    opt = loom.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def step(x, y):
        opt.zero_grad()
        loss = loom.nn.functional.mse_loss(model(x), loom.nn.functional.one_hot(y, 3).float())
        loss.backward()
        opt.step()
        return loss
    return model, step


def _losses(backend: str, steps: int, wait: bool = False, make=_exact_step) -> tuple[list[float], list[np.ndarray]]:
    model, step = make()
    out = []
    with loom.backend(backend):
        for k in range(steps):
            out.append(float(step(*_batch(8, k)).item()))
            if wait:
                assert eager.wait_tiered(60)
    return out, [p.detach().numpy().copy() for p in model.parameters()]


def test_structure_compiles_after_n_repeats_and_replays(tiers):
    _, step = _exact_step()
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


@pytest.mark.parametrize("make, promoted", [(_exact_step, True), (_mlp_step, False)])
def test_tiers_give_the_reference_paths_bits(tiers, make, promoted):
    """Over steps that cross from the reference tier to the compiled one, every loss and parameter has the
    reference path's bits: a plan that reproduces them is promoted (and replayed), one that does not (the
    biased MLP with cross-entropy: its bias gradient's column sums and exp/log round differently) is dropped."""
    got, got_params = _losses("tiered", 7, wait=True, make=make)
    if promoted:
        assert eager.stats["tier_compiles"] == 1 and eager.stats["hits"] == 3
        assert eager.stats["tier_mismatches"] == 0
    else:
        assert eager.stats["tier_compiles"] == 0 and eager.stats["hits"] == 0
        assert eager.stats["tier_mismatches"] == 1 and not eager._CACHE and len(eager._FAILED) == 1
    want, want_params = _losses("reference", 7, make=make)
    assert got == want
    for a, b in zip(got_params, want_params):
        assert a.tobytes() == b.tobytes()


def test_sync_tier_switch_is_deterministic(tiers, monkeypatch):
    """With TIER_SYNC (LOOM_TIER_SYNC=1) the third sighting compiles in the calling thread and replays at
    once: two runs give the same bits."""
    monkeypatch.setattr(eager, "TIER_SYNC", True)
    first, _ = _losses("tiered", 6)
    assert eager.stats["tier_compiles"] == 1 and eager.stats["hits"] == 2  # Step 3 compiled (by reference); 4, 5 hit.
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
        return (emb(ids) * 2.0 + 1.0).detach().numpy()
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

    steps = [_exact_step()[1] for _ in range(2)]  # Seeded one after the other: the same weights.

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
        assert results[k] == want


def test_reference_is_the_default_backend():
    """With no LOOM_BACKEND the reference path computes eager values (the tiered backend is opt-in: on
    today's kernels almost no training step's plan reproduces the reference bits, see the README)."""
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "LOOM_BACKEND"}
    out = subprocess.run([sys.executable, "-c", "import loom; print(loom.get_backend())"], env=env,
                         capture_output=True, text=True, check=True, cwd=os.path.dirname(os.path.dirname(
                             os.path.dirname(os.path.abspath(__file__)))))
    assert out.stdout.strip() == "reference"


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
            y = (y * 0.5 + 1.0).relu()
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
    assert got == want


class _OneUlpOff:
    """A compiled plan whose first output is one ulp off in one element, standing in for a kernel that
    rounds differently from the reference path."""

    def __init__(self, exe):
        self.exe = exe

    def wait(self):
        self.exe.wait()

    def __call__(self, *arrays):
        out = list(self.exe(*arrays))
        first = np.array(out[0], copy=True)
        flat = first.reshape(-1)
        flat[0] = np.nextafter(flat[0], np.inf)
        out[0] = first
        return tuple(out)


def test_a_plan_that_differs_in_one_ulp_is_never_promoted(tiers, monkeypatch):
    real = eager.compile_graph
    compiled = []

    def off(graph, *args, **kwargs):
        compiled.append(graph)
        return _OneUlpOff(real(graph, *args, **kwargs))
    monkeypatch.setattr(eager, "compile_graph", off)
    got, got_params = _losses("tiered", 10, wait=True)
    assert len(compiled) == 1  # Compiled once, checked, dropped: no second try.
    assert eager.stats["tier_mismatches"] == 1 and eager.stats["tier_compiles"] == 0
    assert eager.stats["hits"] == 0 and not eager._CACHE and len(eager._FAILED) == 1
    want, want_params = _losses("reference", 10)
    assert got == want  # Every step has the reference path's bits.
    for a, b in zip(got_params, want_params):
        assert a.tobytes() == b.tobytes()


def test_seeded_random_ops_replay_the_reference_paths_numbers(tiers):
    """A random op's seed is part of its structure: a graph that repeats with the same seed is promoted and
    its plan draws the numbers the reference path drew; dropout, drawing a new seed every step, never
    repeats a structure and stays on the reference path."""
    x = loom.tensor(np.linspace(-1.0, 1.0, 30, dtype=np.float32).reshape(6, 5))

    def seeded():
        loom.manual_seed(3)
        return ((loom.rand(6, 5) * x + 1.0) * 2.0 - x).numpy()
    got = [seeded() for _ in range(6)]
    assert eager.wait_tiered(60)
    got += [seeded() for _ in range(2)]
    assert eager.stats["tier_compiles"] == 1 and eager.stats["hits"] >= 2
    with loom.backend("reference"):
        want = seeded()
    assert all(g.tobytes() == want.tobytes() for g in got)

    eager._CACHE.clear()
    eager.reset_tiers()
    eager.stats["tier_compiles"] = eager.stats["hits"] = 0
    drop = loom.nn.Dropout(0.5)
    for _ in range(6):
        (drop(x * 1.0) * 2.0 + 1.0).numpy()
    assert eager.wait_tiered(60)
    assert eager.stats["tier_compiles"] == 0 and eager.stats["tier_mismatches"] == 0 and not eager._CACHE


@pytest.mark.parametrize("make, promoted", [(_exact_step, True), (_mlp_step, False)])
def test_training_twice_with_one_seed_gives_the_same_bits(tiers, make, promoted):
    """PyTorch-style determinism under the tiered backend: the first run switches to the compiled tier
    part-way (its plan is checked against the reference path first), the second starts on it; both end
    with the same parameters, bit for bit, as a run on the reference path."""
    first, first_params = _losses("tiered", 8, wait=True, make=make)
    assert eager.stats["tier_compiles"] == (1 if promoted else 0)
    hits = eager.stats["hits"]
    assert hits == (4 if promoted else 0)
    second, second_params = _losses("tiered", 8, make=make)  # No waiting: the plan is there from the start.
    assert eager.stats["tier_compiles"] == (1 if promoted else 0)
    assert eager.stats["hits"] - hits == (7 if promoted else 0)  # Every step after the first (weights' init).
    want, want_params = _losses("reference", 8, make=make)
    assert first == second == want
    for a, b, c in zip(first_params, second_params, want_params):
        assert a.tobytes() == b.tobytes() == c.tobytes()
