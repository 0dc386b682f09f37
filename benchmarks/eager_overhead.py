"""Eager-mode cost: one MLP training step (784-256-256-10, batch 128, SGD momentum) and bare view ops.

Prints the median of several timed blocks for each; run it from two checkouts
(e.g. before and after a change) with default settings to compare them.

    python benchmarks/eager_overhead.py                 # 5 blocks of 15 steps
    python benchmarks/eager_overhead.py --blocks 9
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import loom  # noqa: E402
import loom.nn as nn  # noqa: E402
import loom.nn.functional as F  # noqa: E402


def mlp_step_ms(blocks: int, steps: int) -> float:
    loom.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = loom.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = loom.randn(128, 784), loom.randint(0, 10, (128,))

    def step():
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()
    for _ in range(3):
        step()
    times = []
    for _ in range(blocks):
        t = time.perf_counter()
        for _ in range(steps):
            step()
        times.append((time.perf_counter() - t) / steps)
    return statistics.median(times) * 1e3


def view_op_us(blocks: int, reps: int = 2000) -> float:
    x = loom.randn(64, 32)
    times = []
    for _ in range(blocks):
        t = time.perf_counter()
        for _ in range(reps):
            x[1:5].t()
            x.view(32, 64).permute(1, 0)
        times.append((time.perf_counter() - t) / (4 * reps))
    return statistics.median(times) * 1e6


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--blocks", type=int, default=5, help="timed blocks; the median is printed")
    p.add_argument("--steps", type=int, default=15, help="training steps per block")
    args = p.parse_args(argv)
    threads = loom.get_num_threads() if hasattr(loom, "get_num_threads") else "default"  # Older checkouts.
    print(f"loom {loom.__file__}, threads: {threads}")
    print(f"mlp eager step: {mlp_step_ms(args.blocks, args.steps):.2f} ms (median of {args.blocks} blocks)")
    print(f"view op: {view_op_us(args.blocks):.1f} us (median of {args.blocks} blocks)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
