"""sgemm 1024^3: GFLOP/s of loom's matmul path against NumPy and torch.mm.

loom runs matmul nodes through NumPy's BLAS (``np.matmul(a, b, out=...)``,
OpenBLAS) inside a compiled graph; this measures that whole path (input
checks, output allocation included). For reference it also times a direct
``cblas_sgemm`` call on the ``scipy-openblas32`` library when installed
(loom does not use it: it measured no faster, see the README).

Run: ``python benchmarks/sgemm.py [--runs 9] [--size 1024]``
"""
from __future__ import annotations

import argparse
import ctypes
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import loom  # noqa: E402
from loom.ir import Graph  # noqa: E402


def median_s(fn, runs: int) -> float:
    fn()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def direct_cblas(a, b, c):
    """A callable running scipy_openblas32's cblas_sgemm on row-major a @ b -> c, or None."""
    try:
        import scipy_openblas32
    except ImportError:
        return None
    lib = ctypes.CDLL(os.path.join(scipy_openblas32.get_lib_dir(), "libscipy_openblas.so"))
    f = getattr(lib, "scipy_cblas_sgemm", None) or lib.cblas_sgemm
    i, fl, p = ctypes.c_int, ctypes.c_float, ctypes.c_void_p
    f.argtypes = [i, i, i, i, i, i, fl, p, i, p, i, fl, p, i]
    f.restype = None
    m, k = a.shape
    n = b.shape[1]
    pa, pb, pc = a.ctypes.data, b.ctypes.data, c.ctypes.data
    return lambda: f(101, 111, 111, m, n, k, 1.0, pa, k, pb, n, 0.0, pc, n)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=9)
    p.add_argument("--size", type=int, default=1024)
    args = p.parse_args()
    n = args.size
    rng = np.random.default_rng(0)
    A = rng.standard_normal((n, n)).astype(np.float32)
    B = rng.standard_normal((n, n)).astype(np.float32)
    g = Graph()
    x, w = g.add_input((n, n), loom.float32), g.add_input((n, n), loom.float32)
    g.outputs = [g.add_node("matmul", [x, w])]
    exe = loom.compiler.compile(g)
    np.testing.assert_allclose(exe(A, B)[0], A @ B, rtol=1e-3, atol=1e-3)

    flop = 2.0 * n ** 3
    load_before = os.getloadavg()
    res = {"loom (compiled graph)": median_s(lambda: exe(A, B), args.runs),
           "numpy a @ b": median_s(lambda: A @ B, args.runs)}
    try:
        import torch
        ta, tb = torch.from_numpy(A), torch.from_numpy(B)
        res["torch.mm"] = median_s(lambda: torch.mm(ta, tb), args.runs)
        threads = torch.get_num_threads()
    except ImportError:
        threads = None
    C = np.empty((n, n), np.float32)
    cb = direct_cblas(A, B, C)
    if cb is not None:
        res["cblas_sgemm (openblas32)"] = median_s(cb, args.runs)
    load_after = os.getloadavg()
    print(f"sgemm {n}x{n}x{n} float32, median of {args.runs} runs; cores {os.cpu_count()}, torch threads "
          f"{threads}, load average {load_before[0]:.1f} -> {load_after[0]:.1f}")
    base = res["numpy a @ b"]
    for name, s in res.items():
        print(f"{name:28}{s * 1e3:9.2f} ms{flop / s / 1e9:9.1f} GFLOP/s{base / s:8.2f}x numpy")


if __name__ == "__main__":
    main()
