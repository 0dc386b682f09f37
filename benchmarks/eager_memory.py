"""Peak memory of an eager training step: loom eager against PyTorch eager, each in fresh processes.

    python benchmarks/eager_memory.py                    # gpt, 3 rounds, 4 steps each
    python benchmarks/eager_memory.py --model mlp --rounds 5 --steps 6

The step is the workload's training step from loom.bench (`gpt` by default: 4
layers, 4 heads, d 128, context 64, batch 32, AdamW), built by
`loom.bench.variants.build` as ``python -m loom.bench`` builds it. Each
framework runs `--rounds` times, alternating, each time in a fresh subprocess
with one thread. In each one: import, build the model, optimizer and data,
give freed heap memory back to the OS (``malloc_trim``), take the baseline
(VmRSS), reset the peak (``/proc/self/clear_refs``; where that is refused the
peak since start, ``ru_maxrss``, stands in), run `--steps` steps reading the
loss after each, and report the peak (VmHWM) over the baseline: the
gradients, optimizer state and every transient the steps allocate.

The target (issue 9): loom's peak over baseline at most 1.2x PyTorch's
(median of the rounds).
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from memory_budget import _reset_peak, _status  # noqa: E402  (benchmarks/ is this script's directory)

TARGET = 1.2


def child(model: str, framework: str, steps: int) -> dict:
    """One framework's steps in this (fresh) process; returns the baseline, the peak and the losses."""
    from loom.bench import variants, workloads
    if framework == "torch":
        import torch
        torch.set_num_threads(1)
    runner = variants.build(workloads.get(model), framework, {"seed": 0, "threads": 1})
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass
    base = _status("VmRSS") // 1024
    reset = _reset_peak()
    losses = [runner.value(runner.run(1)) for _ in range(steps)]
    peak = _status("VmHWM") // 1024 if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"framework": framework, "baseline_mib": base / 1024, "peak_mib": peak / 1024,
            "delta_mib": (peak - base) / 1024, "peak_reset": reset, "losses": losses,
            "end_mib": _status("VmRSS") // 1024 / 1024}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="gpt", help="a loom.bench training workload (default: gpt)")
    p.add_argument("--frameworks", default="loom,torch", help="comma-separated: loom (eager), torch")
    p.add_argument("--rounds", type=int, default=3, help="fresh processes per framework; the median is reported")
    p.add_argument("--steps", type=int, default=4, help="training steps per process")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.model, args.child, args.steps)))
        return 0
    frameworks = args.frameworks.split(",")
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    runs: dict[str, list[dict]] = {fw: [] for fw in frameworks}
    for _ in range(args.rounds):
        for fw in frameworks:  # Alternating, so that machine load hits both alike.
            out = subprocess.run([sys.executable, __file__, "--model", args.model, "--steps", str(args.steps),
                                  "--child", fw], env=env, capture_output=True, text=True, check=False)
            if out.returncode != 0:
                print(out.stderr[-3000:], file=sys.stderr)
                return 1
            runs[fw].append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"{args.model}: peak RSS over the baseline, {args.steps} eager steps per fresh process, "
          f"median of {args.rounds}; load average {os.getloadavg()[0]:.2f}")
    med = {}
    for fw, rs in runs.items():
        med[fw] = statistics.median(r["delta_mib"] for r in rs)
        each = ", ".join(f"{r['delta_mib']:.1f}" for r in rs)
        print(f"  {fw:6s} delta {med[fw]:8.1f} MiB (runs {each}); "
              f"baseline {statistics.median(r['baseline_mib'] for r in rs):.1f} MiB, "
              f"end {statistics.median(r['end_mib'] for r in rs):.1f} MiB"
              + ("" if all(r["peak_reset"] for r in rs) else " (peak since start: clear_refs refused)"))
    if "loom" in med and "torch" in med and med["torch"] > 0:
        ratio = med["loom"] / med["torch"]
        print(f"  loom / torch: {ratio:.2f}x (target <= {TARGET}x): {'met' if ratio <= TARGET else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
