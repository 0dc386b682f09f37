"""One benchmark worker: a process that runs one framework's variant of one workload on command.

Started by the harness as ``python -m loom.bench.worker '<json options>'``
with the thread-count environment already set, so every library sees it from
its first import. It builds the variant, runs the warm-up (timing the first
call and the whole warm-up, which includes tracing and compiling), reports
``ready``, then serves commands, one JSON object a line on stdin:

- ``{"op": "block", "steps": k}``: run k steps, wait for them, answer
  ``{"event": "block", "seconds": s, "cpu_seconds": c}`` (c: CPU time of
  all the process's threads over the block);
- ``{"op": "finish"}``: answer ``{"event": "finish", ...}`` with the peak
  resident memory and framework facts, then exit.

Answers go to the process's original stdout; anything the frameworks print
goes to stderr instead, so it cannot corrupt the protocol. A failure answers
``{"event": "error", "reason": ..., "traceback": ...}``.
"""
from __future__ import annotations

import json
import os
import resource
import sys
import time
import traceback


def rss_mb() -> float:
    """The current resident set size in MiB (from /proc; 0.0 where unavailable)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def peak_rss_mb() -> float:
    """The process's peak resident set size so far in MiB (getrusage ru_maxrss, KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def os_threads() -> int | None:
    """The number of OS threads of this process (None where /proc is unavailable)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return None


def main(argv: list[str]) -> int:
    options = json.loads(argv[1])
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # C-level prints of the frameworks go to stderr too.
    sys.stdout = sys.stderr

    def send(msg: dict) -> None:
        proto.write(json.dumps(msg) + "\n")
        proto.flush()

    try:
        import importlib

        from loom.bench import variants, workloads
        rss_start = rss_mb()
        t0 = time.perf_counter()
        importlib.import_module(variants.framework_module(options["framework"]))
        if options["framework"].startswith("torch"):
            import torch
            torch.set_num_threads(int(options["threads"]))
        import_s = time.perf_counter() - t0
        rss_import = rss_mb()
        workload = workloads.get(options["model"])
        t0 = time.perf_counter()
        runner = variants.build(workload, options["framework"], options)
        setup_s = time.perf_counter() - t0
        calls = []
        first_value = None
        t_warm = time.perf_counter()
        for i in range(max(1, int(options["warmup"]))):
            t = time.perf_counter()
            out = runner.run(1)
            calls.append(time.perf_counter() - t)
            if i == 0:
                first_value = runner.value(out)
        runner.settle()
        warmup_s = time.perf_counter() - t_warm
        send({"event": "ready", "import_s": import_s, "setup_s": setup_s, "first_call_s": calls[0],
              "warmup_calls_s": calls, "warmup_s": warmup_s, "first_value": first_value,
              "rss_start_mb": rss_start, "rss_import_mb": rss_import, "rss_ready_mb": rss_mb(),
              "pid": os.getpid()})
        for line in sys.stdin:
            cmd = json.loads(line)
            if cmd["op"] == "block":
                t, c = time.perf_counter(), time.process_time()
                runner.run(int(cmd["steps"]))
                send({"event": "block", "seconds": time.perf_counter() - t, "cpu_seconds": time.process_time() - c})
            elif cmd["op"] == "finish":
                send({"event": "finish", "peak_rss_mb": peak_rss_mb(), "rss_end_mb": rss_mb(),
                      "steps_run": runner.count, "os_threads": os_threads(), "info": runner.info()})
                break
            else:
                raise ValueError(f"unknown command {cmd!r}")
    except BaseException as e:  # Report every failure to the harness instead of dying silently.
        first_line = (str(e).strip().splitlines() or [""])[0]
        send({"event": "error", "reason": f"{type(e).__name__}: {first_line}",
              "traceback": traceback.format_exc()[-4000:]})
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
