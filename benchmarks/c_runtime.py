"""libloomrt (C, no Python) against loom.function (Python replay) on the same inference dumps.

    python benchmarks/c_runtime.py [--repeat 300]

Per model: the median time of one forward call through the compiled
`loom.function` and through the example program's `--repeat` loop (libloomrt,
one thread), each after a warm-up, in one process run side by side.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import loom
import loom.nn as nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.jit.test_c_runtime import CNN, GPT  # noqa: E402


def models():
    mlp = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    yield "mlp 784-256-256-10, batch 1", mlp, loom.randn(1, 784)
    yield "cnn (2 conv + pool + linear), batch 8", CNN(), loom.randn(8, 1, 8, 8)
    yield "gpt (1 block, d 16, T 8), batch 2", GPT(), loom.tensor(np.random.default_rng(0).integers(0, 11, (2, 8)))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeat", type=int, default=300)
    a = p.parse_args()
    loom.set_num_threads(1)
    rt = loom.jit.build_runtime(example=ROOT / "examples" / "c_runtime" / "main.c")
    loom.manual_seed(0)
    print(f"{'model':40s} {'loom.function us':>17s} {'libloomrt us':>13s} {'ratio':>6s}")
    for name, model, x in models():
        model.eval()
        with tempfile.TemporaryDirectory() as d:
            loom.jit.save(model, x, d)
            np.save(f"{d}/x.npy", x.numpy())
            f = loom.function(model)
            with loom.no_grad():
                for _ in range(5):
                    f(x).numpy()
                times = []
                for _ in range(a.repeat):
                    t0 = time.perf_counter()
                    f(x).numpy()
                    times.append((time.perf_counter() - t0) * 1e6)
            r = subprocess.run([rt.example, d, f"{d}/x.npy", "--repeat", str(a.repeat)], capture_output=True,
                               text=True, check=True, env={"LOOM_NUM_THREADS": "1"})
            c_us = float(re.search(r"median ([0-9.]+) us", r.stdout).group(1))
            py_us = float(np.median(times))
            print(f"{name:40s} {py_us:17.1f} {c_us:13.1f} {py_us / c_us:6.1f}x")


if __name__ == "__main__":
    main()
