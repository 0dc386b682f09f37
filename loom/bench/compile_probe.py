"""Compile time of a traced training step, and what a new batch size costs.

``python -m loom.bench.compile_probe --model gpt --batch-sizes 32,16`` builds
the workload's loom model and optimizer, wraps the step in `loom.function`,
and times, in this one process:

- the eager warm-up call (``warmup_call_s``);
- the first traced call: tracing, the pass pipeline, building the executable
  (``pipeline_s`` of it, ``passes_s`` the wall time of each pass) and waiting
  until every kernel is built or loaded (``compile_s`` in all);
- then, for each further batch size, the retrace and its kernel builds.

Beside each it counts kernel builds (``loom.codegen.stats()``: ``builds``
compiled with the C compiler, ``disk_hits`` loaded from the cache) and the
``.so`` files in ``LOOM_CACHE_DIR``. Run it with an empty ``LOOM_CACHE_DIR``
for a cold compile and again with the same folder for a warm one; the result
is one JSON object on stdout. Kernels are specialised by structure, not by
size, so a new batch size should build nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

# Workloads whose batches are batch-first tensors, so a smaller batch is a slice.
BATCH_FIRST = ("mlp", "cnn", "gpt", "resnet")


def so_files() -> int:
    """The number of compiled kernels (.so files) in the kernel cache folder."""
    from loom.codegen import cache_dir
    return sum(1 for _ in Path(cache_dir()).rglob("*.so"))


def probe(model: str, batch_sizes: list[int], backend: str = "c", seed: int = 0) -> dict:
    """Time the traced step of `model` at each batch size (the first is the workload's own)."""
    import loom
    import loom.codegen
    from loom.bench import variants
    from loom.bench.workloads import get

    if model not in BATCH_FIRST:
        raise ValueError(f"loom.bench.compile_probe: {model} has no batch dimension to vary; "
                         f"choose from {', '.join(BATCH_FIRST)}")
    lf = sys.modules["loom.function"]  # The module (the attribute loom.function is the decorator).
    workload = get(model)
    runner = variants.build(workload, "loom-function", {"seed": seed, "loom_backend": backend})
    fn = runner.step_fn
    pipeline = {"s": 0.0}
    passes: dict[str, float] = {}
    real_compile = lf._compile

    def timed_compile(*args, **kwargs):
        t = time.perf_counter()
        try:
            exe = real_compile(*args, **kwargs)
        finally:
            pipeline["s"] += time.perf_counter() - t
        optimized = getattr(exe, "graph", None)
        for name, s in (getattr(optimized, "meta", None) or {}).get("pass_seconds", {}).items():
            passes[name] = passes.get(name, 0.0) + s
        return exe
    lf._compile = timed_compile
    base = runner.batches[0]
    full = int(base[0].shape[0])
    result: dict = {"model": model, "backend": backend, "cache_dir": loom.codegen.cache_dir(),
                    "so_files_start": so_files(), "batch_sizes": []}

    def measure(batch) -> dict:
        loom.codegen.reset_stats()
        pipeline["s"] = 0.0
        passes.clear()
        so_before = so_files()
        traces = fn.trace_count
        t = time.perf_counter()
        runner.sync(fn(*batch))
        runner.settle()
        total = time.perf_counter() - t
        stats = loom.codegen.stats()
        return {"compile_s": total, "pipeline_s": pipeline["s"], "passes_s": dict(passes),
                "traced": fn.trace_count - traces,
                "builds": stats["builds"], "disk_hits": stats["disk_hits"], "memory_hits": stats["memory_hits"],
                "build_failures": stats["build_failures"], "new_so_files": so_files() - so_before,
                "kernels": sum(len(getattr(e.exe, "kernels", []) or []) for e in fn._cache.values())}

    t = time.perf_counter()
    runner.sync(fn(*base))  # The eager warm-up call (loom.function's warmup=1).
    result["warmup_call_s"] = time.perf_counter() - t
    for b in batch_sizes:
        if b > full:
            raise ValueError(f"loom.bench.compile_probe: batch size {b} exceeds the workload's {full}")
        batch = base if b == full else tuple(loom.from_numpy(np.ascontiguousarray(x.numpy()[:b])) for x in base)
        entry = {"batch": b, **measure(batch)}
        t = time.perf_counter()
        runner.sync(fn(*batch))
        entry["replay_s"] = time.perf_counter() - t
        result["batch_sizes"].append(entry)
    lf._compile = real_compile
    result["so_files_end"] = so_files()
    return result


def main(argv: list[str] | None = None) -> int:
    """``python -m loom.bench.compile_probe --model gpt``: print cold/warm compile times and kernel builds as JSON."""
    p = argparse.ArgumentParser(prog="python -m loom.bench.compile_probe", description=__doc__.splitlines()[0])
    p.add_argument("--model", default="gpt", choices=BATCH_FIRST)
    p.add_argument("--batch-sizes", default="", help="comma-separated; default: the workload's batch, then half")
    p.add_argument("--backend", default="c", choices=("c", "reference"))
    args = p.parse_args(argv)
    from loom.bench.workloads import get
    full = int(get(args.model).batches(np.random.default_rng(0))[0][0].shape[0])
    sizes = [int(s) for s in args.batch_sizes.split(",") if s] or [full, full // 2]
    out = probe(args.model, sizes, args.backend)
    out["pid"] = os.getpid()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
