"""Data-parallel scaling: ``python -m loom.bench --nproc 1,2,4`` for loom and PyTorch DDP side by side.

For each workload and process count, loom runs under ``python -m
loom.distributed.run --nproc N`` (Open MPI) with
`loom.nn.parallel.DistributedDataParallel`, and PyTorch runs N processes
with ``torch.nn.parallel.DistributedDataParallel`` over gloo. The scaling is
weak: every rank trains on the workload's own batch (rank-specific data), so
a step processes N batches. Each timed block is bracketed by barriers and
timed on rank 0; the report gives the median block, throughput (samples or
tokens per second over all ranks) and the speedup over the same
framework's one-process run. Every process gets ``--threads`` threads, so
``--nproc 4 --threads 1`` on a 2-core machine oversubscribes it (the
machine's core count is in the report).

The worker side of this module runs as a script: ``scaling.py --worker
'<json options>'``.
"""
from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

FRAMEWORKS = ("loom", "torch")
_MARK = "LOOM_SCALING_RESULT "


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(threads: int) -> dict[str, str]:
    env = dict(os.environ)
    for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "LOOM_NUM_THREADS"):
        env[k] = str(threads)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _launch(framework: str, nproc: int, options: dict, timeout: float) -> dict:
    """Run one (workload, framework, nproc) measurement; rank 0's result dict, or {"error": ...}."""
    payload = json.dumps(options)
    env = _env(int(options["threads"]))
    script = str(Path(__file__).resolve())
    if framework == "loom":
        cmd = [sys.executable, "-m", "loom.distributed.run", "--nproc", str(nproc), script, "--worker", payload]
        procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)]
    else:
        port = _free_port()
        procs = []
        for r in range(nproc):
            e = dict(env, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(nproc), MASTER_ADDR="127.0.0.1",
                     MASTER_PORT=str(port))
            procs.append(subprocess.Popen([sys.executable, script, "--worker", payload], env=e,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = []
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            outs.append(p.communicate(timeout=max(1.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            return {"error": f"timed out after {timeout:.0f} s"}
    for out, _ in outs:
        for line in out.splitlines():
            if line.startswith(_MARK):
                return json.loads(line[len(_MARK):])
    codes = [p.returncode for p in procs]
    tail = "\n".join(err.strip().splitlines()[-1] if err.strip() else "" for _, err in outs)
    return {"error": f"no result (exit codes {codes}): {tail[-300:]}"}


def run(models: list[str], nprocs: list[int], frameworks: list[str], repeats: int, steps: int | None,
        warmup: int, threads: int, seed: int, quick: bool, timeout: float, say: Callable[[str], None]) -> list[dict]:
    """Measure every (model, framework, nproc); one result dict each, with speedups filled in."""
    from loom.bench.workloads import get

    results = []
    for model in models:
        w = get(model)
        if not w.train:
            say(f"scaling: {model} is an inference workload; data parallelism applies to training, skipped")
            continue
        k = steps or (w.quick_steps if quick else w.steps)
        for framework in frameworks:
            for n in nprocs:
                opts = {"model": model, "framework": framework, "repeats": repeats, "steps": k, "warmup": warmup,
                        "threads": threads, "seed": seed}
                say(f"scaling: {model} {framework} nproc={n} ...")
                res = _launch(framework, n, opts, timeout)
                res.update(model=model, framework=framework, nproc=n, unit=w.unit,
                           samples_per_rank_step=w.samples_per_step, steps_per_block=k)
                if "error" in res:
                    say(f"scaling: {model} {framework} nproc={n} failed: {res['error']}")
                results.append(res)
    for r in results:  # Speedup: throughput over the same framework's run with the fewest processes.
        base = next((b for b in results if b["model"] == r["model"] and b["framework"] == r["framework"]
                     and b["nproc"] == min(nprocs) and "error" not in b), None)
        if "error" not in r and base is not None:
            r["speedup"] = r["throughput"] / base["throughput"]
            r["speedup_over_nproc"] = base["nproc"]
    return results


def table(results: list[dict]) -> str:
    """The scaling results as a plain-text table."""
    head = f"{'model':<8} {'framework':<9} {'nproc':>5} {'ms/step':>9} {'throughput':>14} {'speedup':>8}"
    lines = [head, "-" * len(head)]
    for r in results:
        if "error" in r:
            lines.append(f"{r['model']:<8} {r['framework']:<9} {r['nproc']:>5}  failed: {r['error'][:60]}")
            continue
        lines.append(f"{r['model']:<8} {r['framework']:<9} {r['nproc']:>5} {r['ms_per_step']:>9.2f} "
                     f"{r['throughput']:>10.0f} {r['unit'][:3]}/s {r.get('speedup', float('nan')):>7.2f}x")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- the worker
def _worker(options: dict) -> None:
    import numpy as np

    from loom.bench.workloads import api, get, load_initial_state

    framework, w = options["framework"], get(options["model"])
    a = api(framework)
    if framework == "torch":
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        torch.set_num_threads(int(options["threads"]))
        dist.init_process_group("gloo")
    else:
        import loom.distributed as dist
        from loom.nn.parallel import DistributedDataParallel as DDP
        dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    seed = int(options["seed"])
    a.lib.manual_seed(seed)
    model = w.model(a)
    load_initial_state(a, model, seed)
    model.train(True)
    model = DDP(model)
    opt = w.optimizer(a, model.parameters())
    data = [tuple(a.tensor(x) for x in b) for b in w.batches(np.random.default_rng(seed + 1000 * rank))]

    def step(batch):
        opt.zero_grad()
        loss = w.loss(a, model, *batch)
        loss.backward()
        opt.step()
        return loss

    def block(k: int, start: int) -> float:
        dist.barrier()
        t = time.perf_counter()
        for i in range(k):
            loss = step(data[(start + i) % len(data)])
        float(loss.detach().sum().item())  # The last step's value: everything before it is computed.
        dist.barrier()
        return time.perf_counter() - t
    block(max(1, int(options["warmup"])), 0)
    k = int(options["steps"])
    times = [block(k, (j + 1) * k) for j in range(int(options["repeats"]))]
    if rank == 0:
        med = statistics.median(times)
        result = {"ms_per_step": med / k * 1e3, "throughput": size * w.samples_per_step * k / med,
                  "block_seconds": times, "world_size": size}
        print(_MARK + json.dumps(result), flush=True)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        _worker(json.loads(sys.argv[2]))
    else:
        sys.exit("usage: scaling.py --worker '<json options>' (started by python -m loom.bench --nproc ...)")
