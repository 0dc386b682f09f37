"""loom's eager training step under each eager backend (reference, tiered, auto, compiled), beside PyTorch eager.

Each backend runs `loom.bench`'s variant of the workload in this process
(same model, weights and batches as the harness), warmed up, then timed in
blocks, interleaved with the other backends and PyTorch; the figure is the
median ms/step over the blocks.

    python benchmarks/eager_backends.py --model mlp --repeats 5 --threads 1
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import loom  # noqa: E402
from loom.bench import variants, workloads  # noqa: E402
from loom.bench.machine import load_average  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="mlp", choices=("mlp", "mlp-infer", "cnn", "gpt", "gcn"))
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--steps", type=int, default=None, help="steps per timed block (default: the workload's)")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    loom.set_num_threads(args.threads)
    w = workloads.get(args.model)
    steps = args.steps or w.steps
    runners = {}
    for be in ("reference", "tiered", "auto", "compiled"):
        r = variants.build(w, "loom", {"seed": 0, "loom_eager_backend": be})
        runners[be] = (be, r)
    try:
        import torch
        torch.set_num_threads(args.threads)
        runners["torch"] = (None, variants.build(w, "torch", {"seed": 0}))
    except ImportError:
        print("torch is not installed: loom's backends only")
    times: dict[str, list[float]] = {k: [] for k in runners}
    print(f"{args.model}: warming up ({len(runners)} variants), load average {load_average()}")
    for be, r in runners.values():
        if be is not None:
            loom.set_backend(be)
        r.run(3)
    from loom.compiler import eager
    eager.wait_tiered()  # The tiered backend's plans, queued during its warm-up, are compiled.
    for rep in range(args.repeats):
        names = list(runners)
        names = names[rep % len(names):] + names[:rep % len(names)]
        for name in names:
            be, r = runners[name]
            if be is not None:
                loom.set_backend(be)
            t = time.perf_counter()
            r.run(steps)
            times[name].append((time.perf_counter() - t) / steps * 1e3)
    loom.set_backend("tiered")
    ref = statistics.median(times["torch"]) if "torch" in times else None
    for name, ts in times.items():
        med = statistics.median(ts)
        vs = f", {ref / med:.2f}x torch eager" if ref and name != "torch" else ""
        print(f"  {name:<10} {med:9.3f} ms/step (min {min(ts):.3f}){vs}")
    print(f"load average at end {load_average()}")


if __name__ == "__main__":
    main()
