"""Fused elementwise + reduce chain: ((a * b + exp(a)) * 0.5).sum(1) over two 2048x2048 float32 arrays.

loom compiles the chain into one C kernel (one pass over a and b, nothing
written but the 2048 sums); NumPy evaluates it op by op with temporaries;
PyTorch eager likewise. Bandwidth is compared with a plain copy of one array.

Run: ``python benchmarks/elementwise_chain.py [--runs 21] [--size 2048]``
(figures are medians; the machine's load average is printed with them).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import loom  # noqa: E402
from loom.ir import Graph  # noqa: E402


def median_ms(fn, runs: int) -> float:
    fn()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times)) * 1e3


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=21)
    p.add_argument("--size", type=int, default=2048)
    args = p.parse_args()
    n = args.size
    rng = np.random.default_rng(0)
    A = rng.standard_normal((n, n)).astype(np.float32)
    B = rng.standard_normal((n, n)).astype(np.float32)

    a, b = loom.tensor(A), loom.tensor(B)
    graph = Graph.from_tensors(((a * b + a.exp()) * 0.5).sum(1), inputs=[a, b])
    t = time.perf_counter()
    exe = loom.compiler.compile(graph)
    assert exe.wait(), "kernel build failed"
    build_s = time.perf_counter() - t
    fused = [k for k in exe.kernels]
    out = np.empty(n, np.float32)

    def numpy_chain():
        return ((A * B + np.exp(A)) * np.float32(0.5)).sum(1)

    want = ((A.astype(np.float64) * B + np.exp(A.astype(np.float64))) * 0.5).sum(1)
    got = exe(A, B)[0]
    err = float(np.max(np.abs(got - want) / np.maximum(np.abs(want), 1.0)))

    load_before = os.getloadavg()
    results = {
        "loom (compiled graph)": median_ms(lambda: exe(A, B), args.runs),
        "loom (kernel call)": median_ms(lambda: fused[0].run([A, B], out), args.runs),
        "numpy": median_ms(numpy_chain, args.runs),
    }
    try:
        import torch
        ta, tb = torch.from_numpy(A), torch.from_numpy(B)
        results["torch eager"] = median_ms(lambda: ((ta * tb + ta.exp()) * 0.5).sum(1), args.runs)
        torch_threads = torch.get_num_threads()
    except ImportError:
        torch_threads = None
    dst = np.empty_like(A)
    copy_ms = median_ms(lambda: np.copyto(dst, A), args.runs)
    load_after = os.getloadavg()

    copy_gbs = 2 * A.nbytes / copy_ms / 1e6
    moved = A.nbytes + B.nbytes + out.nbytes
    print(f"fused chain ((a*b + exp(a)) * 0.5).sum(1), float32 {n}x{n}, median of {args.runs} runs")
    print(f"cores {os.cpu_count()}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, "
          f"torch threads {torch_threads}, load average {load_before[0]:.1f} -> {load_after[0]:.1f}")
    print(f"kernels in the compiled graph: {len(exe.kernels)} (build {build_s:.2f} s, "
          f"max rel error vs float64 {err:.1e})")
    print(f"plain copy of one array: {copy_ms:.2f} ms = {copy_gbs:.1f} GB/s (read + write)")
    print(f"{'':24}{'ms':>8}{'vs numpy':>10}{'GB/s':>8}{'of copy':>9}")
    base = results["numpy"]
    for name, ms in results.items():
        gbs = moved / ms / 1e6
        print(f"{name:24}{ms:8.2f}{base / ms:9.2f}x{gbs:8.1f}{gbs / copy_gbs:8.0%}")


if __name__ == "__main__":
    main()
