"""Distance to the machine's limit: FLOPs per step of each workload and the machine's measured sgemm rate.

Every framework does the same arithmetic for a workload, so the FLOPs of a
step are counted once, on loom's traced graph of the step (forward, backward
and optimizer update; see `count_flops`), and each framework's achieved
GFLOP/s is that count over its median step time. The limit it is compared
with is the float32 GEMM rate this machine reaches with the same number of
threads (`sgemm_gflops`, NumPy's OpenBLAS on a 1024^3 product, median of
several runs): a step made only of large matrix products could at best run
at that rate, so ``achieved / sgemm`` says how far a framework is from it.

The harness runs `probe` in a subprocess pinned and configured exactly like
its workers (``python -m loom.bench.roofline '<json options>'``).

Examples
--------
>>> import loom
>>> g = loom.ir.Graph()
>>> a = g.add_input((4, 8), loom.float32)
>>> b = g.add_input((8, 3), loom.float32)
>>> g.outputs = [g.add_node("tanh", [g.add_node("matmul", [a, b])])]
>>> count_flops(g)
{'matmul': 192, 'other': 12, 'total': 204}
"""
from __future__ import annotations

import json
import sys
import time
from typing import Any

import numpy as np

# Primitive kinds whose nodes do no arithmetic (data movement, sources, checks): zero FLOPs.
_FREE_KINDS = {"source", "movement", "check", "placeholder", "sort", "control"}


def _numel(shape) -> int:
    return int(np.prod(shape, dtype=np.int64)) if len(shape) else 1


def _node_flops(node) -> tuple[str, int]:
    from loom.ir import ops
    op = node.op
    if op == "matmul":
        return "matmul", 2 * _numel(node.shape) * int(node.inputs[0].shape[-1])
    # A convolution and its two adjoints each cost 2 x (forward output elements) x (C_in/groups x kH x kW).
    if op == "conv2d":                # (x, weight) -> y
        return "matmul", 2 * _numel(node.shape) * _numel(node.inputs[1].shape[1:])
    if op == "conv2d_input_grad":     # (grad_y, weight) -> grad_x
        return "matmul", 2 * _numel(node.inputs[0].shape) * _numel(node.inputs[1].shape[1:])
    if op == "conv2d_weight_grad":    # (x, grad_y) -> grad_weight
        return "matmul", 2 * _numel(node.inputs[1].shape) * _numel(node.shape[1:])
    # Attention counts the products of its plain formula: q k^T and p v forward, four more backward
    # (the backward kernel's recomputed scores are not model FLOPs), each 2 x (batch L S E).
    if op in ("attention", "attention_grad"):
        q, k = node.inputs[0].shape, node.inputs[1].shape
        return "matmul", (2 if op == "attention" else 4) * 2 * _numel(q) * int(k[-2])
    if op == "fused":
        return "other", sum(_node_flops(n)[1] for n in node.attrs["body"])
    kind = getattr(ops.PRIMITIVES.get(op), "kind", None)
    if kind in _FREE_KINDS or op == "cast":
        return "other", 0
    if kind == "reduce":
        return "other", _numel(node.inputs[0].shape)
    return "other", _numel(node.shape)


def count_flops(graph) -> dict[str, int]:
    """FLOPs of one run of `graph`: 2*M*N*K per matrix product (and convolution), one per element elsewhere.

    Elementwise ops count one FLOP per output element and reductions one per
    input element; data movement (reshape, permute, slicing, gathers, casts)
    counts zero. Returns ``{"matmul": ..., "other": ..., "total": ...}``.
    """
    out = {"matmul": 0, "other": 0}
    for node in graph:
        kind, f = _node_flops(node)
        out[kind] += f
    out["total"] = out["matmul"] + out["other"]
    return out


def step_flops(model: str, seed: int = 0) -> dict[str, int]:
    """FLOPs of one step of the workload `model`, counted on loom's traced (unoptimised) step graph."""
    from loom.bench import variants, workloads
    workload = workloads.get(model)
    runner = variants.build(workload, "loom-function", {"seed": seed, "loom_backend": "reference"})
    runner.step()   # Warm-up call (eager): optimizer state exists before the trace.
    runner.step()   # Traces.
    fn = runner.step_fn
    graphs = [e.graph for e in fn._cache.values() if e.graph is not None]
    if not graphs:
        raise RuntimeError(f"loom.bench.roofline: the {model} step was not traced")
    return count_flops(graphs[0])


def sgemm_gflops(threads: int, size: int = 1024, runs: int = 7) -> float:
    """The float32 GEMM rate (GFLOP/s) of NumPy's BLAS on `threads` threads: median of `runs` size^3 products."""
    from threadpoolctl import threadpool_limits
    rng = np.random.default_rng(0)
    a = rng.standard_normal((size, size), dtype=np.float32)
    b = rng.standard_normal((size, size), dtype=np.float32)
    c = np.empty((size, size), np.float32)
    times = []
    with threadpool_limits(threads, user_api="blas"):
        np.matmul(a, b, out=c)
        for _ in range(runs):
            t = time.perf_counter()
            np.matmul(a, b, out=c)
            times.append(time.perf_counter() - t)
    return 2.0 * size ** 3 / float(np.median(times)) / 1e9


def probe(models: list[str], threads: int, seed: int = 0) -> dict:
    """`step_flops` of each model (or the reason it failed) and `sgemm_gflops` at `threads`."""
    import loom
    loom.set_num_threads(threads)
    out: dict[str, Any] = {"sgemm_gflops": sgemm_gflops(threads), "threads": threads, "flops": {}, "errors": {}}
    for m in models:
        try:
            out["flops"][m] = step_flops(m, seed)
        except Exception as e:  # Reported beside the table; a workload without a count still runs.
            out["errors"][m] = f"{type(e).__name__}: {e}"
    return out


def annotate(results: list[dict], roof: dict) -> None:
    """Add ``flops_per_step``, ``gflops`` and ``sgemm_fraction`` to each successful result (in place)."""
    rate = roof.get("sgemm_gflops")
    for r in results:
        f = roof.get("flops", {}).get(r["model"])
        if f is None:
            continue
        r["flops_per_step"] = f["total"]
        r["matmul_flops_per_step"] = f["matmul"]
        if r.get("status") == "ok" and r.get("median_ms"):
            r["gflops"] = f["total"] / (r["median_ms"] / 1e3) / 1e9
            if rate:
                r["sgemm_gflops"] = rate
                r["sgemm_fraction"] = r["gflops"] / rate


def main(argv: list[str]) -> int:
    opts = json.loads(argv[1])
    result = probe(opts["models"], int(opts["threads"]), int(opts.get("seed", 0)))
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
