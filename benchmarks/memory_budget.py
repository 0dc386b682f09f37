"""The GPT training step under a memory budget: planned arena, measured peak RSS and slowdown, per storage tier.

    python benchmarks/memory_budget.py                       # budget 1/4 of the planned peak, 7 steps each
    python benchmarks/memory_budget.py --fraction 0.25 --steps 7 --rounds 2 --modes never,disk,auto

The model is the `gpt` workload of loom.bench (the one benchmarks/gpt_step.py
times: 4 layers, 4 heads, d 128, context 64, batch 32, AdamW). Every
configuration (no budget; the budget with offload="never", "disk", "auto")
runs in a fresh subprocess, in turn, `--rounds` times, so machine load hits
them alike. In each one:

1. set up the model, optimizer and data, run the eager warm-up step, trace and
   compile (`loom.function`), and run two more steps (kernels built);
2. drop the step's cached arena so the next call allocates it again, give
   freed heap memory back to the OS (``malloc_trim``; without it the new
   arena reuses pages freed by the warm-up and RSS does not move), and take
   the baseline: VmRSS now; reset the peak (``/proc/self/clear_refs``);
3. time `--steps` steps; the peak is VmHWM over them.

Reported: the planned arena, the budget, the RSS delta (peak minus baseline:
the fresh arena, the step's output arrays, the disk tier's transient maps,
everything the steps allocate), the step time (median) and its ratio to the
unbudgeted step's median, and whether the losses agree bit for bit. The
budget is the whole step's memory (`loom.compiler.remat.output_bytes`: the
output arrays count against it beside the arena), so the RSS delta is what
it bounds. The step is `loom.bench.memory_budget._variant`.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _status(field: str) -> int:
    """A /proc/self/status field in bytes (VmRSS, VmHWM)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # Resets VmHWM to the current RSS (Linux 4.0+).
        return True
    except OSError:
        return False


def child(budget: int | None, offload: str, steps: int) -> dict:
    """One configuration, run in this (fresh) process; returns its figures."""
    import numpy as np

    from loom.bench.memory_budget import _variant

    fn, data = _variant(budget, offload)
    losses = []
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        for k in range(3):  # Eager warm-up, then trace + compile + run, then one more run.
            losses.append(float(fn(*data[k % len(data)]).detach().numpy()))
            if k == 1:
                (entry,) = fn._cache.values()
                entry.exe.wait(300)
    setup_s = time.perf_counter() - t0
    (entry,) = fn._cache.values()
    exe = entry.exe
    # The arena is kept between calls: drop it so the measured steps allocate it afresh.
    exe._arenas.clear()
    if exe._native is not None:
        exe._native._ctxs.clear()
        if exe._native._pool is not None:  # The function's arena pool keeps given-back buffers: drop them too.
            exe._native._pool._free.clear()
    import ctypes
    import gc
    gc.collect()
    try:  # Give freed heap memory back to the OS, or the arena reuses it unseen by RSS.
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    base = _status("VmRSS")
    reset = _reset_peak()
    if os.environ.get("LOOM_BENCH_DEBUG"):
        print("debug", base, _status("VmHWM"), len(exe._arenas), exe._native is not None and len(exe._native._ctxs),
              file=sys.stderr)
    times = []
    for k in range(steps):
        t = time.perf_counter()
        losses.append(float(fn(*data[(3 + k) % len(data)]).detach().numpy()))
        times.append(time.perf_counter() - t)
    peak = _status("VmHWM")
    if os.environ.get("LOOM_BENCH_DEBUG"):
        print("debug after", _status("VmRSS"), peak, file=sys.stderr)
    rep = entry.remat
    from loom.compiler.remat import flop_rate
    from loom.runtime.storage import disk_bandwidth
    outputs = sum(int(np.prod(n.shape)) * n.dtype.np.itemsize for n in set(exe.graph.outputs))
    return {"arena": exe.plan.arena_bytes, "outputs": outputs, "flop_rate": flop_rate(),
            "disk_bw": disk_bandwidth() if offload != "never" else None,
            "native_arena": getattr(exe._native, "arena_bytes", None),
            "base_rss": base, "peak_rss": peak, "rss_delta": peak - base, "peak_reset": reset,
            "times": times, "losses": losses, "setup_s": setup_s,
            "strategy": rep.strategy if rep else None, "met": rep.met if rep else None,
            "extra_flops": rep.extra_flops if rep else 0, "recomputed": rep.recomputed if rep else 0,
            "offloaded": rep.offloaded if rep else 0, "offload_bytes": rep.offload_bytes if rep else 0,
            "model_seconds": rep.seconds if rep else 0.0}


def _run_child(budget, offload, steps) -> dict:
    cmd = [sys.executable, __file__, "--child", json.dumps([budget, offload, steps])]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=dict(os.environ))
    if out.returncode != 0:
        raise RuntimeError(f"configuration budget={budget} offload={offload} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _mib(n) -> str:
    return f"{n / 2**20:.1f} MiB"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--fraction", type=float, default=0.25, help="budget as a fraction of the planned peak")
    p.add_argument("--steps", type=int, default=7, help="timed steps per configuration and round (>= 5)")
    p.add_argument("--rounds", type=int, default=1, help="times each configuration's process is run, in turn")
    p.add_argument("--modes", default="never,disk,auto", help="offload settings to run under the budget")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(*json.loads(args.child))))
        return
    base = _run_child(None, "never", args.steps)
    full = base["arena"]
    budget = int(full * args.fraction)
    configs = [("no budget", None, "never")] + [(f"offload={m}", budget, m) for m in args.modes.split(",")]
    results: dict = {name: [] for name, *_ in configs}
    results["no budget"].append(base)
    for r in range(args.rounds):
        for name, b, mode in configs:
            if r == 0 and b is None:
                continue
            print(f"round {r + 1}: {name}", file=sys.stderr, flush=True)
            results[name].append(_run_child(b, mode, args.steps))
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    base_ms = statistics.median(t for res in results["no budget"] for t in res["times"]) * 1e3
    print(f"gpt step (loom.bench gpt workload); planned peak (arena) without a budget {_mib(full)}; budget "
          f"{args.fraction:g} x = {_mib(budget)} (the whole step: the arena gets the budget minus the step's "
          f"outputs); {args.steps} steps x {args.rounds} rounds per configuration, "
          f"each in a fresh process; load average {load}")
    print(f"  {'configuration':<16} {'arena':>10} {'arena/budget':>12} {'outputs':>9} {'RSS delta':>10} "
          f"{'RSS/budget':>10} {'step ms':>9} {'vs none':>8}  plan")
    ref_losses = results["no budget"][0]["losses"]
    for name, b, _ in configs:
        runs = results[name]
        ms = statistics.median(t for res in runs for t in res["times"]) * 1e3
        arena = runs[0]["arena"]
        rss = max(res["rss_delta"] for res in runs)
        same = all(res["losses"] == ref_losses for res in runs)
        plan = (f"{runs[0]['strategy']}, {runs[0]['extra_flops'] / 1e9:.2f} GFLOP recomputed, "
                f"{runs[0]['offloaded']} values / {_mib(runs[0]['offload_bytes'])} offloaded" if b else "-")
        ratio = f"{arena / budget:.3f}" if b else "-"
        rss_ratio = f"{rss / budget:.3f}" if b else f"{rss / full:.3f}*"
        print(f"  {name:<16} {_mib(arena):>10} {ratio:>12} {_mib(runs[0]['outputs']):>9} {_mib(rss):>10} "
              f"{rss_ratio:>10} {ms:9.1f} "
              f"{ms / base_ms:7.2f}x  {plan}; losses bit-identical: {same}")
    print("  (*: the unbudgeted RSS delta over its own planned arena; RSS delta = peak VmHWM over the timed steps "
          "minus VmRSS before them, with the arena freed before the first timed step; outputs = the step's result "
          "arrays (updated parameters, optimizer state, gradients, loss), fresh each call, counted in the budget)")
    rates = [(r["flop_rate"], r["disk_bw"]) for runs in results.values() for r in runs if r["disk_bw"]]
    if rates:
        print(f"  cost model inputs measured in the offload runs: sgemm {min(f for f, _ in rates) / 1e9:.1f}-"
              f"{max(f for f, _ in rates) / 1e9:.1f} GFLOP/s, disk round trip {min(b for _, b in rates) / 1e6:.0f}-"
              f"{max(b for _, b in rates) / 1e6:.0f} MB/s")


if __name__ == "__main__":
    main()
