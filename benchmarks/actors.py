"""The actor runtime against the plain native step: one-task overhead, pipelined stages, overlapped loading, tracker.

Prints four figures, each measured side by side in one process (blocks of
steps alternated between the variants, median over repeats), so machine load
affects both sides alike:

1. ``loom.function(step, runtime="actors")`` against ``loom.function(step)``
   on the MLP and GPT training steps of loom.bench (one task: target within 3%).
2. A two-stage model (``loom.stage``) over 4 micro-batches: ``Function.map``
   on actors (stages overlap) against the same model called per micro-batch;
   and one SGD step looping over 4 micro-batches, its forward and backward
   pipelined on actors, against the native step.
3. A training step fed by a slow data transform: sequential load-then-step
   against `loom.runtime.pipeline` (target: step time near max(load, compute)).
4. The state tracker on and off on a two-branch graph run by actors.

    python benchmarks/actors.py            # about a minute
    python benchmarks/actors.py --quick
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import loom  # noqa: E402
from loom.bench import workloads  # noqa: E402
from loom.runtime import actors  # noqa: E402


def side_by_side(fns: dict, steps: int, repeats: int) -> dict[str, float]:
    """Median seconds per call of each function, timing blocks of `steps` calls in rotating order."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    names = list(fns)
    for r in range(repeats):
        for name in names[r % len(names):] + names[:r % len(names)]:
            fn = fns[name]
            t0 = time.perf_counter()
            for _ in range(steps):
                fn()
            times[name].append((time.perf_counter() - t0) / steps)
    return {k: statistics.median(v) for k, v in times.items()}


def training_step(name: str, runtime: str):
    """A compiled training step of the loom.bench workload `name`, warmed up, as a no-argument call."""
    w = workloads.get(name)
    a = workloads.api("loom")
    loom.manual_seed(0)
    model = w.model(a)
    opt = w.optimizer(a, model.parameters())
    batch = [a.tensor(x) for x in w.batches(np.random.default_rng(0))[0]]

    @loom.function(runtime=runtime)
    def step(*b):
        opt.zero_grad()
        loss = w.loss(a, model, *b)
        loss.backward()
        opt.step()
        return loss
    for _ in range(3):   # Eager warm-up, trace and compile, first replay.
        step(*batch)
    wait_compiled(step)
    return lambda: step(*batch), step


def wait_compiled(fn) -> None:
    """Block until every kernel of a loom.function is built (until then steps run on the NumPy path)."""
    for entry in fn._cache.values():
        for run in [t.run for t in getattr(entry.exe, "tasks", [])] or [entry.exe]:
            if hasattr(run, "wait"):
                run.wait(300)


def paired(fns: dict, steps: int, rounds: int, clock=time.perf_counter) -> dict[str, list[float]]:
    """Seconds per call of each function in each round: a block of `steps` calls each, in rotating order.

    Both sides of a comparison run within the same round, a few milliseconds
    apart, so a change of machine load between rounds hits both alike: the
    per-round ratio is steadier than the ratio of two medians. `clock` may be
    ``time.process_time`` (CPU seconds of every thread of this process), which
    leaves out the time spent waiting for a core on a loaded machine.
    """
    times: dict[str, list[float]] = {k: [] for k in fns}
    names = list(fns)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            fn = fns[name]
            t0 = clock()
            for _ in range(steps):
                fn()
            times[name].append((clock() - t0) / steps)
    return times


def one_task(quick: bool) -> None:
    print("1. one-task plan: loom.function(step, runtime='actors') vs loom.function(step) (target: within 3%)")
    print(f"   load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    for name, steps in (("mlp", 10), ("gpt", 1)):
        native, _ = training_step(name, "native")
        again, _ = training_step(name, "native")   # A second native step: the noise floor of the comparison.
        on_actors, fn = training_step(name, "actors")
        (entry,) = fn._cache.values()
        prog = entry.exe
        assert len(prog.tasks) == 1 and prog._single is prog.tasks[0].run, "not a one-task program"
        rounds = 7 if quick else 21
        for clock, what in ((time.perf_counter, "wall"), (time.process_time, "CPU ")):
            t = paired({"native": native, "native again": again, "actors": on_actors}, steps, rounds, clock)
            med = {k: statistics.median(v) for k, v in t.items()}
            ratio = [a / n for a, n in zip(t["actors"], t["native"])]
            floor = [a / n for a, n in zip(t["native again"], t["native"])]
            print(f"   {name:4s} {what} native {med['native'] * 1e3:8.3f} ms  actors (1 task: "
                  f"{type(prog._single).__name__} called directly) {med['actors'] * 1e3:8.3f} ms  ratio, median of "
                  f"{rounds} rounds: {statistics.median(ratio):.3f} (quartiles {_quartiles(ratio)}); noise floor, "
                  f"native vs native again: {statistics.median(floor):.3f} ({_quartiles(floor)})")
    # What the runtime adds to a one-task call, timed alone (it is below the noise of whole steps).
    def noop(*arrays):
        return arrays
    prog = actors.GraphProgram("one", [actors.TaskSpec("t", noop, [(-1, 0), (-1, 1)])], [(0, 0), (0, 1)], 2)
    xs = (np.zeros(1), np.zeros(1))
    reps = 200_000
    t = side_by_side({"direct": lambda: [noop(*xs) for _ in range(reps)],
                      "program": lambda: [prog(*xs) for _ in range(reps)]}, 1, 7)
    added = (t["program"] - t["direct"]) / reps
    print(f"   added per call by a one-task GraphProgram: {added * 1e9:.0f} ns "
          f"(= {added / 1e-3 * 100:.4f}% of a 1 ms step)")


def _quartiles(xs: list[float]) -> str:
    q = statistics.quantiles(xs, n=4)
    return f"{q[0]:.3f}-{q[2]:.3f}"


def two_stages(quick: bool) -> None:
    print("2. two-stage model over 4 micro-batches: Function.map on actors vs sequential calls")
    default = loom.get_num_threads()
    for threads in sorted({1, default}):
        loom.set_num_threads(threads)
        _two_stages(quick)
        _train_stages(quick)
    loom.set_num_threads(default)


def _two_stages(quick: bool) -> None:
    rng = np.random.default_rng(0)
    d = 512
    ws = [loom.tensor((rng.standard_normal((d, d)) / np.sqrt(d)).astype(np.float32)) for _ in range(4)]

    def model(x):
        with loom.stage(0):
            h = (x @ ws[0]).tanh()
            h = (h @ ws[1]).tanh()
        with loom.stage(1):
            h = (h @ ws[2]).tanh()
            return (h @ ws[3]).tanh()
    micro = [loom.tensor(rng.standard_normal((128, d)).astype(np.float32)) for _ in range(4)]
    plain = loom.function(model)
    staged = loom.function(model, runtime="actors")
    for _ in range(3):
        plain(micro[0])
        list(staged.map((x,) for x in micro))
    wait_compiled(plain)
    wait_compiled(staged)
    want = [plain(x).numpy() for x in micro]
    got = [y.numpy() for y in staged.map((x,) for x in micro)]
    assert all(u.tobytes() == v.tobytes() for u, v in zip(want, got)), "pipelined results differ"
    t = side_by_side({"sequential": lambda: [plain(x) for x in micro],
                      "pipelined": lambda: list(staged.map((x,) for x in micro))},
                     2 if quick else 5, 3 if quick else 9)
    staged.close()
    print(f"   threads per kernel {loom.get_num_threads()}: sequential {t['sequential'] * 1e3:8.3f} ms   "
          f"pipelined {t['pipelined'] * 1e3:8.3f} ms   speed-up {t['sequential'] / t['pipelined']:.2f}x "
          f"(ideal for 2 stages x 4 micro-batches: 1.60x)")


def _train_stages(quick: bool) -> None:
    """One SGD step over 4 micro-batches of a two-stage model: forward and backward pipelined on actors."""
    rng = np.random.default_rng(0)
    d, m = 512, 4
    init = [(rng.standard_normal((d, d)) / np.sqrt(d)).astype(np.float32) for _ in range(4)]
    x = loom.tensor(rng.standard_normal((m * 128, d)).astype(np.float32))

    def make(runtime):
        ws = [loom.tensor(w, requires_grad=True) for w in init]
        opt = loom.optim.SGD(ws, lr=1e-3)

        @loom.function(runtime=runtime)
        def step(x):
            opt.zero_grad()
            total = 0
            for k in range(m):
                with loom.stage(0):
                    h = (x[k * 128:(k + 1) * 128] @ ws[0]).tanh()
                    h = (h @ ws[1]).tanh()
                with loom.stage(1):
                    h = (h @ ws[2]).tanh()
                    loss = (h @ ws[3]).tanh().square().mean() / m
                loss.backward()
                total = total + loss.detach()
            opt.step()
            return total
        return ws, step
    (wn, plain), (wa, staged) = make("native"), make("actors")
    for _ in range(3):
        plain(x)
        staged(x)
    wait_compiled(plain)
    wait_compiled(staged)
    # (Warm-up steps may have run some kernels on the NumPy path while they built: close, not bit-equal.)
    assert np.isclose(plain(x).item(), staged(x).item(), rtol=1e-5), "pipelined training differs"
    assert all(np.allclose(u.detach().numpy(), v.detach().numpy(), rtol=1e-5, atol=1e-7) for u, v in zip(wn, wa)), \
        "weights differ"
    (entry,) = staged._cache.values()
    t = side_by_side({"sequential": lambda: plain(x), "pipelined": lambda: staged(x)}, 2 if quick else 3,
                     3 if quick else 9)
    staged.close()
    print(f"   training, threads per kernel {loom.get_num_threads()}: one step over {m} micro-batches, native "
          f"{t['sequential'] * 1e3:8.3f} ms   actors ({len(entry.exe.tasks)} tasks, backward pipelined) "
          f"{t['pipelined'] * 1e3:8.3f} ms   speed-up {t['sequential'] / t['pipelined']:.2f}x")


def slow_loading(quick: bool) -> None:
    print("3. slow data transform: load then step, sequential vs on a pipeline of actors")
    step, _ = training_step("mlp", "native")
    load_s = side_by_side({"step": step}, 20, 3)["step"]   # A transform as slow as the step: the worst case.

    def load(i):
        time.sleep(load_s)   # Reading and decoding: I/O and native code that release the GIL.
        return i
    n = 8 if quick else 20

    def sequential():
        for i in range(n):
            load(i)
            step()

    def pipelined():
        for _ in loom.runtime.pipeline(range(n), load, registers=2):
            step()
    t = side_by_side({"load": lambda: [load(i) for i in range(n)], "compute": lambda: [step() for _ in range(n)],
                      "sequential": sequential, "pipelined": pipelined}, 1, 3 if quick else 7)
    ld, c, seq, pipe = (t[k] / n for k in ("load", "compute", "sequential", "pipelined"))
    print(f"   per step: load {ld * 1e3:.3f} ms, compute {c * 1e3:.3f} ms, sequential {seq * 1e3:.3f} ms, "
          f"pipelined {pipe * 1e3:.3f} ms = {pipe / max(ld, c):.2f}x max(load, compute), {pipe / (ld + c):.2f}x "
          f"the sum")


def tracker(quick: bool) -> None:
    print("4. state tracker on vs off: a 3-task pipeline of ~1 ms NumPy tasks; the cost of one record")
    a = np.random.default_rng(0).standard_normal((360, 360)).astype(np.float32)

    def work(x):
        return float((a @ a).sum()) + x   # About a millisecond, releasing the GIL like loom's kernels.
    n = 30 if quick else 100

    def run(track):
        plan = actors.Plan(f"tracked_{track}", track=track)
        src = plan.source("read", range(n), registers=2)
        b = plan.task("a", work, [src], registers=2)
        c = plan.task("b", work, [b], registers=2)
        plan.task("c", work, [c], registers=2)
        plan.run(timeout=600)
        return plan
    t = side_by_side({"off": lambda: run(False), "on": lambda: run(True)}, 1, 3 if quick else 21)
    records = sum(len(v) for v in run(True).trace.values())
    # The tracker's own cost, timed alone: one record is what each transition costs.
    actor = actors.Actor(actors.Plan("probe").source("s", []), None, [], threading.Event())
    reps = 100_000
    t0 = time.perf_counter()
    for _ in range(reps):
        actor._set("running", 1)
    per_record = (time.perf_counter() - t0) / reps - _loop_cost(reps)
    step, _ = training_step("mlp", "native")
    mlp = side_by_side({"step": step}, 20, 3)["step"]
    per_firing = per_record * records / (3 * n)
    print(f"   pipeline: off {t['off'] / n * 1e3:.3f} ms/item, on {t['on'] / n * 1e3:.3f} ms/item "
          f"({(t['on'] / t['off'] - 1) * 100:+.1f}%)")
    print(f"   one record {per_record * 1e9:.0f} ns, {records / (3 * n):.1f} records per firing: "
          f"{per_firing * 1e6:.2f} us per task firing = {per_firing / mlp * 100:.3f}% of the MLP step "
          f"({mlp * 1e3:.2f} ms)")


def _loop_cost(reps: int) -> float:
    t0 = time.perf_counter()
    for _ in range(reps):
        pass
    return (time.perf_counter() - t0) / reps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    parser.add_argument("--only", type=int, choices=[1, 2, 3, 4], help="run one of the four figures")
    args = parser.parse_args()
    figures = [one_task, two_stages, slow_loading, tracker]
    for k, fig in enumerate(figures, 1):
        if args.only in (None, k):
            fig(args.quick)


if __name__ == "__main__":
    main()
