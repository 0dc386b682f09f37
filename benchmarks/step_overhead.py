"""Python cost of one `loom.function` training-step call: the whole call minus the native walk it runs.

A tiny MLP (batch 8, SGD with momentum) keeps the kernels' own work to a few microseconds, so what is left
is the call path: the signature and guard checks, gathering the input arrays, the native program's entry
and writing the updated parameters, momentum buffers and .grads back. Both figures are this thread's CPU
time (`time.thread_time`), the best of several repeats, so other processes on a busy machine inflate them
less than wall-clock time. The issue's target: under 20 us of Python per step whatever the node count
(``--layers`` adds layers, hence nodes and updated tensors).

    python benchmarks/step_overhead.py                  # 2 and 8 linear layers
    python benchmarks/step_overhead.py --layers 2 4 16
"""
import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

import loom  # noqa: E402
import loom.nn as nn  # noqa: E402
import loom.nn.functional as F  # noqa: E402

WIDTH, BATCH = 16, 8


def build(layers: int):
    """A traced SGD-momentum step of `layers` Linear layers (ReLU between), its inputs, and the function."""
    loom.manual_seed(0)
    mods = []
    for k in range(layers):
        mods += [nn.Linear(WIDTH, WIDTH), nn.ReLU()] if k < layers - 1 else [nn.Linear(WIDTH, 4)]
    model = nn.Sequential(*mods)
    opt = loom.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss
    rng = np.random.default_rng(0)
    x = loom.tensor(rng.standard_normal((BATCH, WIDTH)).astype(np.float32))
    y = loom.tensor(rng.integers(0, 4, BATCH))
    return loom.function(step), x, y


def cpu_us(fn, calls: int, repeats: int) -> float:
    """Best per-call CPU time of this thread over `repeats` runs of `calls` calls, in microseconds."""
    best = float("inf")
    for _ in range(repeats):
        t = time.thread_time()
        for _ in range(calls):
            fn()
        best = min(best, (time.thread_time() - t) / calls)
    return best * 1e6


def measure(layers: int, calls: int, repeats: int) -> dict:
    fn, x, y = build(layers)
    for _ in range(3):
        fn(x, y)
    for entry in fn._cache.values():
        entry.exe.wait(600)
    for _ in range(20):
        fn(x, y)
    (entry,) = fn._cache.values()
    prog = entry.exe._native
    if prog is None or prog._fast is None:
        raise SystemExit("the native program is not running (LOOM_NATIVE=0, or its driver did not build)")
    driver, table = prog._fast
    ctx = prog._new_ctx()
    arrays = fn._inputs(entry, (x, y), {})[1]  # This call's real inputs (a label check stops on garbage).
    outs = [np.empty(shape, d) for shape, d in prog._out_specs]
    objs = (ctx.arena, *arrays, *outs, *prog._const_arrays)
    step_us = cpu_us(lambda: fn(x, y), calls, repeats)
    if driver.run_objects(table[1], objs, ctx.ctl_ptr, 0) != len(table[2]):
        raise SystemExit("the native walk stopped before its last step")
    walk_us = cpu_us(lambda: driver.run_objects(table[1], objs, ctx.ctl_ptr, 0), calls, repeats)
    return {"layers": layers, "steps": len(prog._steps), "outputs": len(outs), "call_us": step_us,
            "walk_us": walk_us, "python_us": step_us - walk_us, "stats": dict(getattr(fn, "call_stats", {}))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, nargs="*", default=[2, 8])
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    loom.set_num_threads(1)
    print(f"load average {os.getloadavg()} on {os.cpu_count()} cores; thread CPU time, best of {args.repeats} x "
          f"{args.calls} calls")
    for n in args.layers:
        r = measure(n, args.calls, args.repeats)
        print(f"{r['layers']:3d} layers ({r['steps']} native steps, {r['outputs']} outputs): "
              f"call {r['call_us']:6.1f} us, native walk {r['walk_us']:5.1f} us, "
              f"Python {r['python_us']:5.1f} us per step")


if __name__ == "__main__":
    main()
