"""Per-call cost of a compiled graph of N tiny kernel steps: native program vs the executor's Python loop.

Each step is its own fused kernel on a 4x8 float32 array, so the time is almost all dispatch. The
issue's target: under 20 us per call whatever the node count.

    python benchmarks/native_overhead.py            # 1 and 50 steps
    python benchmarks/native_overhead.py --steps 200
"""
import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from loom.ir import Graph  # noqa: E402
from loom.runtime.executor import Executable  # noqa: E402

SHAPE = (4, 8)


def chain(n: int) -> Graph:
    """n fused nodes, each one op (exp or tanh), in a row."""
    g = Graph()
    h = g.add_input(SHAPE, "float32")
    for i in range(n):
        body = Graph()
        x = body.add_input(SHAPE, "float32")
        body.outputs = [body.add_node(("exp", "tanh")[i % 2], [x])]
        h = g.add_node("fused", [h], {"body": body})
    g.outputs = [h]
    return g


def per_call_us(fn, arg, calls: int = 2000, repeats: int = 7) -> float:
    for _ in range(50):
        fn(arg)
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(calls):
            fn(arg)
        best = min(best, (time.perf_counter() - t) / calls)
    return best * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, nargs="*", default=[1, 50])
    args = ap.parse_args()
    x = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)
    print(f"load average {os.getloadavg()} on {os.cpu_count()} cores; best of 7 x 2000 calls")
    for n in args.steps:
        g = chain(n)
        os.environ["LOOM_NATIVE"] = "0"
        loop = Executable(g)
        del os.environ["LOOM_NATIVE"]
        prog = Executable(g)
        if not (prog.wait(600) and loop.wait(600)):
            raise SystemExit("kernels or the native driver did not build")
        same = np.array_equal(prog(x)[0], loop(x)[0])
        print(f"{n:4d} steps: native {per_call_us(prog, x):7.1f} us/call, Python loop {per_call_us(loop, x):7.1f} "
              f"us/call, identical results: {same}")


if __name__ == "__main__":
    main()
