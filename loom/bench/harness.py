"""The benchmark protocol: one worker process per framework, warm-up apart, timed blocks interleaved.

For each workload the harness starts one worker process per framework
(`loom.bench.worker`), one after another, and lets each build its variant and
warm up: the first call and the whole warm-up (tracing, compiling, kernel
builds) are timed and reported as compile/first-call time, never mixed into
the step times. Then come R repeats; in each, every framework runs one timed
block of k steps, in an order that rotates from repeat to repeat
(`stats.interleave`), so that noise from the rest of the machine lands on all
frameworks alike. Only one worker computes at a time; the others wait on
their command pipe.

Separate processes give each framework its own thread settings from its
first import, its own peak resident memory (``ru_maxrss`` of the worker, which
includes the interpreter and the framework's import; the import baseline is
reported beside it), and isolation: a variant that crashes or hangs becomes a
"failed" row with a reason, not a dead benchmark.

Each worker is pinned to `threads` CPUs, and besides wall time it reports the
CPU time of all its threads per block. On a machine shared with other work,
wall time mostly measures the scheduler; CPU time per step (and the ratios
computed from it, ``cpu_ratio_to_best_peer``) stays close to what an idle
machine would show, so both are recorded.
"""
from __future__ import annotations

import importlib.util
import json
import os
import select
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from loom.bench import roofline, stats
from loom.bench.background import BusyLoad
from loom.bench.machine import load_average
from loom.bench.workloads import FRAMEWORKS, get

REPO_ROOT = Path(__file__).resolve().parents[2]
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS",
                    "NUMEXPR_NUM_THREADS")


@dataclass
class Options:
    """How to run the benchmark (the command line's options; see ``python -m loom.bench --help``)."""

    models: list[str]
    frameworks: list[str]
    repeats: int = 7
    steps: int | None = None          # Steps per timed block; None: each workload's default.
    warmup: int = 3                   # Untimed calls before timing (loom.function traces on the 2nd).
    threads: int = 1
    seed: int = 0
    quick: bool = False
    loom_backend: str = "c"           # loom.function's backend.
    loom_eager_backend: str | None = None  # None: loom's default (`loom.get_backend`).
    timeout: float = 1800.0           # Seconds a worker may take for one answer (build + warm-up included).
    cache_dir: str | None = None      # LOOM_CACHE_DIR for the workers; None keeps the environment's.
    log_dir: str | None = None        # Where workers' stderr goes; None: a temporary folder.
    pin: bool = True                  # Pin each worker to `threads` CPUs (see `worker_cpus`).
    background_load: int = 0          # Busy processes beside the workers in a second round of timed blocks.
    background_kind: str = "gemm"     # Their loop: "gemm" (NumPy, one thread) or "spin" (pure Python).


def framework_missing(framework: str) -> str | None:
    """Why `framework` cannot run in this environment (a package is not installed), or None."""
    if framework not in FRAMEWORKS:
        return f"unknown framework {framework!r} (known: {', '.join(FRAMEWORKS)})"
    module = {"torch": "torch", "torch-compile": "torch", "jax": "jax"}.get(framework)
    if module is not None and importlib.util.find_spec(module) is None:
        return f"{module} is not installed"
    return None


def worker_cpus(opts: Options) -> list[int] | None:
    """The CPUs every worker is pinned to: the first `threads` of those this process may use (None: no pinning).

    Thread-count settings do not bind every framework (XLA's CPU runtime sizes
    its thread pools from the CPU affinity, not from any variable), so the
    affinity mask is what makes "N threads" mean the same for all of them.
    """
    if not opts.pin or not hasattr(os, "sched_setaffinity"):
        return None
    cpus = sorted(os.sched_getaffinity(0))
    return cpus[:opts.threads] if opts.threads < len(cpus) else None


def worker_env(opts: Options) -> dict[str, str]:
    """The environment of a worker: fixed thread counts, the repository on the path, the kernel cache."""
    env = dict(os.environ)
    for var in THREAD_VARIABLES:
        env[var] = str(opts.threads)
    if opts.threads == 1:
        # XLA's CPU backend has no thread-count flag; this keeps its Eigen kernels on one thread.
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false").strip()
    env.setdefault("JAX_PLATFORMS", "cpu")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                                                          if p])
    if opts.cache_dir:
        env["LOOM_CACHE_DIR"] = opts.cache_dir
    return env


class Worker:
    """A running `loom.bench.worker` process and its line protocol."""

    def __init__(self, model: str, framework: str, opts: Options, log_path: Path):
        config = {"model": model, "framework": framework, "threads": opts.threads, "seed": opts.seed,
                  "warmup": opts.warmup, "loom_backend": opts.loom_backend,
                  "loom_eager_backend": opts.loom_eager_backend}
        self.log_path = log_path
        self._log = open(log_path, "wb")
        cpus = worker_cpus(opts)
        self.proc = subprocess.Popen([sys.executable, "-m", "loom.bench.worker", json.dumps(config)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
                                     env=worker_env(opts), cwd=str(REPO_ROOT),
                                     preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
        self._buf = b""

    def send(self, msg: dict) -> None:
        try:
            self.proc.stdin.write((json.dumps(msg) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # The worker died; recv() reports why.

    def recv(self, timeout: float) -> dict:
        """The worker's next answer; an ``error`` event if it died or took longer than `timeout` s."""
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                return {"event": "error", "reason": f"no answer within {timeout:.0f} s (killed)"}
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                code = self.proc.wait()
                return {"event": "error", "reason": f"worker exited with code {code}: {self.log_tail(3)}"}
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return json.loads(line)

    def log_tail(self, lines: int = 20) -> str:
        self._log.flush()
        try:
            text = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return " | ".join(text[-lines:])

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def close(self) -> None:
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()
        self._log.close()


def _fail(entry: dict, reason: str, say: Callable[[str], None]) -> None:
    entry["status"] = "failed"
    entry["reason"] = reason
    say(f"  {entry['model']}/{entry['framework']}: FAILED: {reason}")


def run(opts: Options, say: Callable[[str], None] = print) -> list[dict]:
    """Run every requested workload under every requested framework; one result dict per pair.

    A result has ``status`` "ok", "skipped" (with ``reason``: the package is not
    installed, or the workload has no such variant) or "failed" (with
    ``reason`` and the worker's log file).
    """
    log_dir = Path(opts.log_dir or tempfile.mkdtemp(prefix="loom-bench-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    results: list[dict] = []
    roof = roofline_probe(opts, log_dir, say)
    for model in opts.models:
        workload = get(model)
        steps = opts.steps or (workload.quick_steps if opts.quick else workload.steps)
        say(f"{model}: {workload.description}")
        entries: dict[str, dict] = {}
        workers: dict[str, Worker] = {}
        for fw in opts.frameworks:
            entry = {"model": model, "framework": fw, "unit": workload.unit,
                     "samples_per_step": workload.samples_per_step, "steps_per_block": steps,
                     "threads": opts.threads}
            entries[fw] = entry
            results.append(entry)
            reason = framework_missing(fw) or workload.supports(fw)
            if reason:
                entry.update(status="skipped", reason=reason)
                say(f"  {model}/{fw}: skipped: {reason}")
                continue
            say(f"  {model}/{fw}: building and warming up ({opts.warmup} calls)")
            log_path = log_dir / f"{model}-{fw}.log"
            entry["log"] = str(log_path)
            worker = Worker(model, fw, opts, log_path)
            msg = worker.recv(opts.timeout)
            if msg.get("event") != "ready":
                worker.kill()
                worker.close()
                _fail(entry, msg.get("reason", f"unexpected answer {msg}"), say)
                continue
            entry.update({k: v for k, v in msg.items() if k not in ("event", "pid")})
            entry["compile_s"] = msg["warmup_s"]
            workers[fw] = worker
        phases = [0] + ([opts.background_load] if opts.background_load > 0 else [])
        for busy in phases:
            if busy:
                loaded = {fw: dict(entries[fw], background_load=busy, background_kind=opts.background_kind)
                          for fw in workers}
                results.extend(loaded.values())
                say(f"  {model}: timed blocks again beside {busy} busy {opts.background_kind} process(es) "
                    f"on CPUs {worker_cpus(opts) or 'any'}")
                with BusyLoad(busy, opts.background_kind, worker_cpus(opts)):
                    _timed(opts, model, workload, steps, workers, loaded, roof, say)
            else:
                _timed(opts, model, workload, steps, workers, entries, roof, say)
        for fw, worker in workers.items():
            worker.send({"op": "finish"})
            msg = worker.recv(opts.timeout)
            worker.close()
            if msg.get("event") == "finish":
                for e in results:
                    if e["model"] == model and e["framework"] == fw and e.get("status") == "ok":
                        e["peak_rss_mb"] = msg["peak_rss_mb"]
                        e["os_threads"] = msg.get("os_threads")
                        e["info"] = msg["info"]
                        planned = msg["info"].get("planned_peak_bytes")
                        if planned is not None:
                            e["planned_peak_bytes"] = planned
        if len(phases) > 1:
            for line in load_summary([e for e in results if e["model"] == model]):
                say(line)
    return results


def _timed(opts: Options, model: str, workload, steps: int, workers: dict[str, Worker], entries: dict[str, dict],
           roof: dict, say: Callable[[str], None]) -> None:
    """One round of interleaved timed blocks of every live worker, summarised into `entries`."""
    blocks: dict[str, list[float]] = {fw: [] for fw in workers}
    cpu: dict[str, list[float]] = {fw: [] for fw in workers}
    load_before = load_average()
    order = stats.interleave(list(workers), opts.repeats)
    for r, fw in order:
        if fw not in workers:
            continue
        worker = workers[fw]
        worker.send({"op": "block", "steps": steps})
        msg = worker.recv(opts.timeout)
        if msg.get("event") != "block":
            worker.kill()
            worker.close()
            del workers[fw]
            _fail(entries[fw], f"during timed repeat {r + 1}: {msg.get('reason', msg)}", say)
            continue
        blocks[fw].append(msg["seconds"])
        if "cpu_seconds" in msg:
            cpu[fw].append(msg["cpu_seconds"])
    for fw in list(blocks):
        if fw not in workers:
            continue
        entry = entries[fw]
        entry["block_seconds"] = blocks[fw]
        entry.update(stats.summarize(blocks[fw], steps))
        if cpu[fw]:
            # CPU time of all the worker's threads: steadier than wall time on a busy machine, and
            # above it when a framework computes on several threads.
            entry["block_cpu_seconds"] = cpu[fw]
            entry["cpu_ms"] = stats.summarize(cpu[fw], steps)["median_ms"]
        entry["throughput"] = stats.throughput(entry["median_ms"], workload.samples_per_step)
        entry["status"] = "ok"
    load_after = load_average()
    ok = {fw: e["throughput"] for fw, e in entries.items() if e.get("status") == "ok"}
    ratios = stats.ratios_to_best_peer(ok)
    best = stats.best_peer(ok)
    ok_cpu = {fw: stats.throughput(e["cpu_ms"], workload.samples_per_step) for fw, e in entries.items()
              if e.get("status") == "ok" and e.get("cpu_ms")}
    cpu_ratios = stats.ratios_to_best_peer(ok_cpu)
    values = [e["first_value"] for e in entries.values() if e.get("status") == "ok"]
    for fw, e in entries.items():
        e["load_average_before"] = load_before
        e["load_average_after"] = load_after
        if e.get("status") == "ok":
            e["best_peer"] = best
            e["ratio_to_best_peer"] = ratios[fw]
            if fw in ok_cpu:
                e["cpu_throughput"] = ok_cpu[fw]
                e["cpu_best_peer"] = stats.best_peer(ok_cpu)
                e["cpu_ratio_to_best_peer"] = cpu_ratios[fw]
            # All frameworks start from the same weights and batch: their first outputs must agree.
            e["first_value_spread"] = max(values) - min(values) if values else None
    for fw, e in entries.items():
        if e.get("status") == "ok":
            ratio = e["ratio_to_best_peer"]
            cpu_ratio = e.get("cpu_ratio_to_best_peer")
            roofline.annotate([e], roof)
            busy = f" [beside {e['background_load']} busy]" if e.get("background_load") else ""
            say(f"  {model}/{fw}{busy}: {e['median_ms']:.3f} ms/step (min {e['min_ms']:.3f}, "
                f"max {e['max_ms']:.3f}), {e['throughput']:.1f} {workload.unit}/s"
                + (f", {ratio:.2f}x best peer" if ratio else "")
                + (f" (CPU time: {e['cpu_ms']:.3f} ms/step, {cpu_ratio:.2f}x)" if cpu_ratio else "")
                + (f", {e['gflops']:.1f} GFLOP/s = {100 * e['sgemm_fraction']:.0f}% of sgemm"
                   if e.get("sgemm_fraction") is not None else ""))


def load_summary(results: list[dict]) -> list[str]:
    """Lines comparing each framework's ratio to the best peer idle and beside the busy processes.

    Examples
    --------
    >>> rows = [{"model": "mlp", "framework": "loom", "status": "ok", "ratio_to_best_peer": 1.1},
    ...         {"model": "mlp", "framework": "loom", "status": "ok", "ratio_to_best_peer": 0.9,
    ...          "background_load": 1, "median_ms": 2.0}]
    >>> load_summary(rows)
    ['  mlp/loom: 1.10x best peer idle, 0.90x beside 1 busy process(es) (keeps 82% of its idle ratio)']
    """
    idle = {(e["model"], e["framework"]): e for e in results if not e.get("background_load")}
    lines = []
    for e in results:
        base = idle.get((e["model"], e["framework"]))
        if not e.get("background_load") or base is None or e.get("status") != "ok" or base.get("status") != "ok":
            continue
        a, b = base.get("ratio_to_best_peer"), e.get("ratio_to_best_peer")
        if a is None or b is None:
            continue
        lines.append(f"  {e['model']}/{e['framework']}: {a:.2f}x best peer idle, {b:.2f}x beside "
                     f"{e['background_load']} busy process(es) (keeps {100 * b / a:.0f}% of its idle ratio)")
    return lines


def roofline_probe(opts: Options, log_dir: Path, say: Callable[[str], None] = print) -> dict:
    """FLOPs per step of each model and the sgemm rate at `opts.threads`, measured like a worker would.

    Runs `loom.bench.roofline` in a subprocess with the workers' environment
    and CPU pinning; on failure the results simply carry no roofline columns.
    """
    cpus = worker_cpus(opts)
    config = {"models": list(opts.models), "threads": opts.threads, "seed": opts.seed}
    log_path = log_dir / "roofline.log"
    with open(log_path, "wb") as log:
        try:
            proc = subprocess.run([sys.executable, "-m", "loom.bench.roofline", json.dumps(config)],
                                  stdout=subprocess.PIPE, stderr=log, env=worker_env(opts), cwd=str(REPO_ROOT),
                                  preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
                                  timeout=opts.timeout)
            roof = json.loads(proc.stdout.decode().strip().splitlines()[-1])
        except (subprocess.TimeoutExpired, ValueError, IndexError) as e:
            say(f"roofline: no figures ({type(e).__name__}; see {log_path})")
            return {}
    say(f"roofline: sgemm {roof['sgemm_gflops']:.1f} GFLOP/s on {opts.threads} thread(s); FLOPs per step: "
        + ", ".join(f"{m} {f['total'] / 1e9:.3f} G" for m, f in roof.get("flops", {}).items()))
    for m, err in roof.get("errors", {}).items():
        say(f"roofline: {m}: FLOPs not counted ({err})")
    return roof


def options_dict(opts: Options) -> dict:
    return asdict(opts)
