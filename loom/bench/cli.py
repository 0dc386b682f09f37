"""``python -m loom.bench``: the command line of the benchmark harness.

    python -m loom.bench --models mlp,cnn,gpt --frameworks loom,torch,torch-compile,jax --repeats 7 --json out.json
    python -m loom.bench --quick --models mlp --frameworks loom,loom-function,torch
    python -m loom.bench --models mlp --repeats 5 --background-load 1   # idle, then beside one busy process
    python -m loom.bench --list

A peer that is not installed is skipped with a printed reason. Exit status:
0 when the run finished (even with skipped or failed variants), 2 for bad
arguments.
"""
from __future__ import annotations

import argparse
import datetime
import importlib.util
import sys

from loom.bench import harness, report
from loom.bench.machine import load_average, machine_info, versions
from loom.bench.workloads import FRAMEWORKS, WORKLOADS, get

DEFAULT_MODELS = "mlp,cnn,gpt"


def _csv(kind: str, known: tuple[str, ...]):
    def parse(text: str) -> list[str]:
        items = [t.strip() for t in text.split(",") if t.strip()]
        if items == ["all"]:
            return list(known)
        bad = [t for t in items if t not in known]
        if bad or not items:
            raise argparse.ArgumentTypeError(f"unknown {kind} {', '.join(bad) or '(none given)'}; "
                                             f"choose from {', '.join(known)} or 'all'")
        return list(dict.fromkeys(items))
    return parse


def _nproc(text: str) -> list[int]:
    try:
        values = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--nproc takes comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"--nproc values must be >= 1, got {text!r}")
    return values


def parser() -> argparse.ArgumentParser:
    """The command line of ``python -m loom.bench`` (its options are listed on this page)."""
    p = argparse.ArgumentParser(
        prog="python -m loom.bench",
        description="Benchmark loom against PyTorch and JAX on the same models, data and machine.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--models", type=_csv("model", WORKLOADS), default=DEFAULT_MODELS,
                   help=f"comma-separated workloads ({', '.join(WORKLOADS)}) or 'all'")
    p.add_argument("--frameworks", type=_csv("framework", FRAMEWORKS), default=",".join(FRAMEWORKS),
                   help=f"comma-separated framework variants ({', '.join(FRAMEWORKS)}) or 'all'")
    p.add_argument("--repeats", type=int, default=7, help="timed blocks per framework (the median is reported)")
    p.add_argument("--steps", type=int, default=None, help="steps per timed block (None: each workload's own)")
    p.add_argument("--warmup", type=int, default=3,
                   help="untimed calls first (loom.function traces and compiles on the second)")
    p.add_argument("--threads", type=int, default=1,
                   help="threads for every framework (torch.set_num_threads, OMP/OpenBLAS/MKL variables); "
                        "1 by default because on a shared machine more threads than idle cores make every "
                        "framework's OpenMP and BLAS threads spin-wait")
    p.add_argument("--no-pin", action="store_true",
                   help="do not pin the workers to --threads CPUs (pinning is what limits XLA's thread pools)")
    p.add_argument("--seed", type=int, default=0, help="seed of the weights and batches")
    p.add_argument("--quick", action="store_true", help="a smoke run: 2 repeats of tiny blocks, 2 warm-up calls")
    p.add_argument("--loom-backend", choices=("c", "reference"), default="c",
                   help="backend of loom.function (falls back to reference if loom has no executor)")
    p.add_argument("--loom-eager-backend", choices=("tiered", "auto", "reference", "compiled"), default=None,
                   help="how loom's eager mode computes values (loom.set_backend; default: loom's default)")
    p.add_argument("--nproc", type=_nproc, default=[1],
                   help="process counts for a data-parallel scaling run (e.g. 1,2,4): loom DDP over Open MPI "
                        "beside PyTorch DDP over gloo, each rank on its own batch; replaces the "
                        "one-process comparison")
    p.add_argument("--background-load", type=int, default=0, metavar="N",
                   help="after the idle timed blocks, time every framework again beside N busy single-threaded "
                        "processes pinned to the workers' CPUs (rows named MODEL+busy), and print how much of its "
                        "idle ratio to the best peer each framework keeps; the processes are killed at the end")
    p.add_argument("--background-kind", choices=("gemm", "spin"), default="gemm",
                   help="the busy processes' loop: a NumPy float32 GEMM (competes for the caches too) or a "
                        "pure-Python spin")
    p.add_argument("--cold-cache", action="store_true",
                   help="give the workers an empty LOOM_CACHE_DIR, so loom's warm-up includes every kernel build")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds a worker may take for one answer")
    p.add_argument("--log-dir", default=None, help="folder for the workers' logs (None: a new temporary folder)")
    p.add_argument("--json", metavar="PATH", help="write the machine-readable results here")
    p.add_argument("--markdown", metavar="PATH", help="write a Markdown report here")
    p.add_argument("--plot", metavar="PATH.png", help="write a bar chart of throughput ratios here")
    p.add_argument("--list", action="store_true", help="list the workloads and frameworks, then exit")
    return p


def _executor_available() -> bool:
    return importlib.util.find_spec("loom.runtime.executor") is not None


def main(argv: list[str] | None = None) -> int:
    """Run ``python -m loom.bench`` with `argv` (default: ``sys.argv[1:]``); returns the exit status.

    Examples
    --------
    >>> from loom.bench import cli
    >>> cli.main(["--list"])  # doctest: +ELLIPSIS
    mlp ...
    0
    """
    argv = sys.argv[1:] if argv is None else argv
    args = parser().parse_args(argv)
    if args.plot and args.nproc != [1]:
        parser().error("--plot is for the one-process comparison; a --nproc run prints a table (and --json)")
    if args.list:
        for name in WORKLOADS:
            w = get(name)
            print(f"{name:<10} {w.description}")
        print("frameworks:", ", ".join(FRAMEWORKS))
        return 0
    for name, value in (("--repeats", args.repeats), ("--threads", args.threads)):
        if value < 1:
            parser().error(f"{name} must be >= 1, got {value}")
    if args.background_load < 0:
        parser().error(f"--background-load must be >= 0, got {args.background_load}")
    if args.steps is not None and args.steps < 1:
        parser().error(f"--steps must be >= 1, got {args.steps}")
    notes: list[str] = []

    def say(msg: str) -> None:
        print(msg, flush=True)
    if args.nproc != [1]:
        return _scaling(args, argv, say)
    scaling = {"requested": [1], "available": True, "ran": [1]}
    loom_backend = args.loom_backend
    if loom_backend == "c" and not _executor_available():
        loom_backend = "reference"
        msg = "loom.function: the C backend needs loom/runtime/executor.py, which is missing; using 'reference'"
        say(msg)
        notes.append(msg)
    repeats, warmup = args.repeats, args.warmup
    if args.quick:
        repeats = min(repeats, 2)
        warmup = min(warmup, 2)
    cache_dir = None
    if args.cold_cache:
        import tempfile
        cache_dir = tempfile.mkdtemp(prefix="loom-bench-cache-")
        notes.append(f"cold kernel cache: LOOM_CACHE_DIR={cache_dir}")
    opts = harness.Options(models=args.models, frameworks=args.frameworks, repeats=repeats, steps=args.steps,
                           warmup=warmup, threads=args.threads, seed=args.seed, quick=args.quick,
                           loom_backend=loom_backend, loom_eager_backend=args.loom_eager_backend,
                           timeout=args.timeout, cache_dir=cache_dir, log_dir=args.log_dir, pin=not args.no_pin,
                           background_load=args.background_load, background_kind=args.background_kind)
    machine = machine_info()
    say(f"loom.bench: {machine['cpu_model']}, {machine['cores_available']} cores, {args.threads} thread(s), "
        f"load average {machine['load_average']}; {repeats} repeats, warm-up {warmup}")
    created = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    results = harness.run(opts, say)
    machine["load_average_end"] = load_average()
    print()
    print(report.table(results))
    if args.background_load:
        print("\n".join(harness.load_summary(results)))
    print(f"load average at start {machine['load_average']}, at end {machine['load_average_end']} "
          f"on {machine['cores_available']} cores")
    config = harness.options_dict(opts)
    config["loom_backend_requested"] = args.loom_backend
    config["cpu_affinity"] = harness.worker_cpus(opts)
    env = harness.worker_env(opts)
    config["worker_environment"] = {k: env.get(k) for k in (*harness.THREAD_VARIABLES, "XLA_FLAGS", "JAX_PLATFORMS",
                                                            "LOOM_CACHE_DIR", "LOOM_CODEGEN", "LOOM_CODEGEN_SYNC",
                                                            "LOOM_BACKEND", "GOMP_SPINCOUNT", "OMP_WAIT_POLICY",
                                                            "LOOM_PAR_MIN", "LOOM_BLAS_PAR_MIN")}
    doc = report.document(results, machine, versions(), config, ["python", "-m", "loom.bench", *argv], notes,
                          scaling, created)
    if args.json:
        report.write_json(doc, args.json)
        print(f"wrote {args.json}")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(report.markdown(doc))
        print(f"wrote {args.markdown}")
    if args.plot:
        report.plot(doc, args.plot)
        print(f"wrote {args.plot}")
    return 0


def _scaling(args, argv: list[str], say) -> int:
    """``--nproc``: the data-parallel scaling study (`loom.bench.scaling`)."""
    import json

    from loom.bench import scaling

    frameworks = [f for f in scaling.FRAMEWORKS if any(x == f or x.startswith(f + "-") for x in args.frameworks)]
    if "torch" in frameworks and importlib.util.find_spec("torch") is None:
        say("scaling: PyTorch is not installed; skipping its DDP runs")
        frameworks.remove("torch")
    if not frameworks:
        parser().error("--nproc needs loom and/or torch among --frameworks")
    repeats, warmup = (min(args.repeats, 2), min(args.warmup, 2)) if args.quick else (args.repeats, args.warmup)
    machine = machine_info()
    say(f"loom.bench scaling: {machine['cpu_model']}, {machine['cores_available']} cores, {args.threads} "
        f"thread(s) per process, load average {machine['load_average']}; {repeats} repeats")
    results = scaling.run(args.models, sorted(set(args.nproc)), frameworks, repeats, args.steps, warmup,
                          args.threads, args.seed, args.quick, args.timeout, say)
    machine["load_average_end"] = load_average()
    print()
    print(scaling.table(results))
    print(f"speedup: over the same framework's run on {min(args.nproc)} process(es); load average at start "
          f"{machine['load_average']}, at end {machine['load_average_end']} on {machine['cores_available']} cores")
    if args.json:
        doc = {"kind": "loom.bench.scaling", "command": ["python", "-m", "loom.bench", *argv], "machine": machine,
               "versions": versions(), "results": results,
               "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
        print(f"wrote {args.json}")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("```text\n" + scaling.table(results) + "\n```\n")
        print(f"wrote {args.markdown}")
    return 0
