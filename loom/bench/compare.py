"""Head-to-head figures for the scripts in ``benchmarks/``: one workload, loom against PyTorch, with a target.

Each script names a workload, the frameworks to run and the figure the
compiler issue asks for; `main` runs them through the harness (same
protocol as ``python -m loom.bench``: warm-up apart, interleaved repeats,
median of at least 5) and prints the table and one verdict line per target,
for example::

    mlp: loom.function 1.100 ms/step vs torch eager 1.220 ms/step: 1.11x torch eager (target >= 1.0x): met;
    CPU time 1.090 vs 1.210 ms/step: 1.11x: met

The second half compares CPU time per step (all threads of each framework's
worker), which a busy machine disturbs far less than wall time.

The machine's load average is printed beside the figures: on a shared
machine it says how much to trust them.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass

from loom.bench import harness, report
from loom.bench.machine import load_average, machine_info

NAMES = {"torch": "torch eager", "torch-compile": "torch.compile", "loom": "loom eager",
         "loom-function": "loom.function", "jax": "jax.jit"}


@dataclass
class Target:
    """`framework` must reach `ratio` x the throughput of `baseline` (1.0: as fast; >1: faster)."""

    framework: str
    baseline: str
    ratio: float | None = None


def verdicts(results: list[dict], targets: list[Target], latency: bool = False) -> list[str]:
    """One line per target: both figures, the ratio, and whether the target was met.

    Examples
    --------
    >>> rows = [{"model": "mlp", "framework": "loom-function", "status": "ok", "median_ms": 1.0,
    ...          "throughput": 128000.0, "cpu_ms": 1.0},
    ...         {"model": "mlp", "framework": "torch", "status": "ok", "median_ms": 1.2, "throughput": 106666.7,
    ...          "cpu_ms": 0.9}]
    >>> for part in verdicts(rows, [Target("loom-function", "torch", 1.0)])[0].split("; "):
    ...     print(part)
    mlp: loom.function 1.000 ms/step vs torch eager 1.200 ms/step: 1.20x torch eager (target >= 1.0x): met
    CPU time 1.000 vs 0.900 ms/step: 0.90x: MISSED
    """
    by_fw = {r["framework"]: r for r in results}
    lines = []
    for t in targets:
        a, b = by_fw.get(t.framework), by_fw.get(t.baseline)
        model = (a or b or {"model": "?"})["model"]
        if not a or not b or a.get("status") != "ok" or b.get("status") != "ok":
            why = "; ".join(f"{r['framework']} {r.get('status')}: {r.get('reason', '')}" for r in (a, b)
                            if r and r.get("status") != "ok")
            lines.append(f"{model}: {NAMES[t.framework]} vs {NAMES[t.baseline]}: no figure ({why or 'not run'})")
            continue
        ratio = a["throughput"] / b["throughput"]
        unit, scale = ("us", 1e3) if latency else ("ms/step", 1.0)
        line = (f"{model}: {NAMES[t.framework]} {a['median_ms'] * scale:.3f} {unit} vs {NAMES[t.baseline]} "
                f"{b['median_ms'] * scale:.3f} {unit}: {ratio:.2f}x {NAMES[t.baseline]}")
        cpu_ratio = b["cpu_ms"] / a["cpu_ms"] if a.get("cpu_ms") and b.get("cpu_ms") else None
        if t.ratio is not None:
            goal = "latency <= peer's" if latency else f">= {t.ratio:.1f}x"
            line += f" (target {goal}): {'met' if ratio >= t.ratio else 'MISSED'}"
        if cpu_ratio is not None:
            line += (f"; CPU time {a['cpu_ms'] * scale:.3f} vs {b['cpu_ms'] * scale:.3f} {unit}: {cpu_ratio:.2f}x"
                     + (f": {'met' if cpu_ratio >= t.ratio else 'MISSED'}" if t.ratio is not None else ""))
        lines.append(line)
    return lines


def main(model: str, frameworks: list[str], targets: list[Target], description: str,
         argv: list[str] | None = None, latency: bool = False) -> int:
    """Parse the script's options, run `model` under `frameworks`, print the table and the verdicts."""
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--repeats", type=int, default=7, help="timed blocks per framework (at least 5 for figures)")
    p.add_argument("--steps", type=int, default=None, help="steps per timed block (None: the workload's own)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--no-pin", action="store_true", help="do not pin the workers to --threads CPUs")
    p.add_argument("--loom-backend", choices=("c", "reference"), default="c")
    p.add_argument("--frameworks", default=",".join(frameworks), help="override the frameworks compared")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    p.add_argument("--quick", action="store_true", help="a smoke run (2 repeats of tiny blocks)")
    args = p.parse_args(argv)
    if args.repeats < 5 and not args.quick:
        print(f"note: {args.repeats} repeats; the figures asked for are medians of at least 5")
    fws = [f for f in args.frameworks.split(",") if f]
    opts = harness.Options(models=[model], frameworks=fws, repeats=min(args.repeats, 2) if args.quick else args.repeats,
                           steps=args.steps, warmup=min(args.warmup, 2) if args.quick else args.warmup,
                           threads=args.threads, quick=args.quick, loom_backend=args.loom_backend,
                           pin=not args.no_pin)
    machine = machine_info()
    print(f"{description}\n{machine['cpu_model']}, {machine['cores_available']} cores, {args.threads} thread(s), "
          f"load average {machine['load_average']}")
    results = harness.run(opts)
    print()
    print(report.table(results))
    print()
    for line in verdicts(results, [t for t in targets if t.framework in fws and t.baseline in fws], latency):
        print(line)
    print(f"load average at start {machine['load_average']}, at end {load_average()} on "
          f"{machine['cores_available']} cores; median of {opts.repeats} interleaved repeats")
    if args.json:
        from loom.bench.machine import versions
        doc = report.document(results, machine, versions(), harness.options_dict(opts), [model], [], {}, "")
        report.write_json(doc, args.json)
    return 0
