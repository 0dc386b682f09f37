"""Benchmark output: the stdout table, the JSON document, a Markdown report and a bar chart.

Examples
--------
>>> rows = [{"model": "mlp", "framework": "torch", "status": "ok", "median_ms": 1.5, "min_ms": 1.4,
...          "max_ms": 1.7, "throughput": 85333.3, "unit": "samples", "ratio_to_best_peer": 1.0,
...          "compile_s": 0.2, "peak_rss_mb": 300.0}]
>>> row = table(rows).splitlines()[2].split()
>>> row[:8]
['mlp', 'torch', '1.500', '1.400', '1.700', '-', '85333', 'samples/s']
>>> row[8:]
['1.00', '-', '-', '-', '0.20', '300', '-', 'ok']
"""
from __future__ import annotations

import json
from pathlib import Path

SCHEMA = "loom.bench/1"

_COLUMNS = ("model", "framework", "median", "min", "max", "throughput", "x best", "warm-up", "peak RSS",
            "planned", "status")


def _fmt(value, spec: str, missing: str = "-") -> str:
    return missing if value is None else format(value, spec)


def _name(r: dict) -> str:
    """The row's model, marked ``+busy`` for blocks timed beside ``--background-load`` processes."""
    return r["model"] + ("+busy" if r.get("background_load") else "")


def table(results: list[dict]) -> str:
    """The results as a fixed-width text table (ms per step, throughput, ratio to the best peer, memory).

    Times are milliseconds per step (CPU: the median CPU time of all the
    framework's threads per step; "x best (CPU)" compares those), GFLOP/s is the step's FLOPs (counted on
    loom's traced step, the same for every framework) over the median time and %sgemm that rate over the
    machine's measured float32 GEMM rate at the same thread count (`loom.bench.roofline`), warm-up is
    seconds (first call, tracing, compiling), peak RSS is the worker's MiB, planned is loom's planned arena
    MiB for the traced step. A model named ``+busy`` is the second round of blocks of a ``--background-load``
    run, timed beside the busy processes.
    """
    head = (f"{'model':<9} {'framework':<13} {'median':>8} {'min':>8} {'max':>8} {'CPU':>8} {'throughput':>20} "
            f"{'x best':>7} {'x best':>7} {'GFLOP':>7} {'%sgemm':>6} {'warm-up':>9} {'peak RSS':>8} {'planned':>7}"
            "  status")
    units = (f"{'':<9} {'':<13} {'ms':>8} {'ms':>8} {'ms':>8} {'ms':>8} {'':>20} {'peer':>7} {'(CPU)':>7} "
             f"{'/s':>7} {'':>6} {'s':>9} {'MiB':>8} {'MiB':>7}")
    lines = [head, units]
    for r in results:
        ok = r.get("status") == "ok"
        planned = r.get("planned_peak_bytes")
        thr = f"{r['throughput']:.0f} {r['unit']}/s" if ok else "-"
        status = "ok" if ok else f"{r.get('status')}: {r.get('reason', '')}"
        frac = r.get("sgemm_fraction")
        lines.append(
            f"{_name(r):<9} {r['framework']:<13} {_fmt(r.get('median_ms'), '.3f'):>8} "
            f"{_fmt(r.get('min_ms'), '.3f'):>8} {_fmt(r.get('max_ms'), '.3f'):>8} {_fmt(r.get('cpu_ms'), '.3f'):>8} "
            f"{thr:>20} "
            f"{_fmt(r.get('ratio_to_best_peer'), '.2f'):>7} {_fmt(r.get('cpu_ratio_to_best_peer'), '.2f'):>7} "
            f"{_fmt(r.get('gflops'), '.1f'):>7} {_fmt(frac * 100 if frac is not None else None, '.0f'):>6} "
            f"{_fmt(r.get('compile_s'), '.2f'):>9} "
            f"{_fmt(r.get('peak_rss_mb'), '.0f'):>8} "
            f"{_fmt(planned / 2**20 if planned is not None else None, '.2f'):>7}  {status}")
    return "\n".join(lines)


def document(results: list[dict], machine: dict, versions: dict, config: dict, command: list[str],
             notes: list[str], scaling: dict, created: str) -> dict:
    """The JSON document: machine, versions, configuration, notes and one result per model and framework."""
    return {"schema": SCHEMA, "created": created, "command": command, "machine": machine, "versions": versions,
            "config": config, "scaling": scaling, "notes": notes, "results": results}


def write_json(doc: dict, path: str | Path) -> None:
    """Write the results `document` to `path` as indented JSON (what ``--json PATH`` writes)."""
    Path(path).write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n")


def markdown(doc: dict) -> str:
    """A Markdown report: how it was measured, on what, and the table of results."""
    m, v, c = doc["machine"], doc["versions"], doc["config"]
    flags = ", ".join(f for f, on in m.get("cpu_flags", {}).items() if on)
    out = [
        "# loom benchmark results", "",
        f"Command: `{' '.join(doc['command'])}`  ",
        f"Created: {doc['created']}", "",
        f"- Machine: {m['cpu_model']}, {m['cores_available']} cores available of {m['logical_cores']}, "
        f"{m.get('memory_gib')} GiB; flags: {flags}; AVX-512: {'yes' if m.get('avx512') else 'no'}",
        f"- Load average (1/5/15 min) at start: {m.get('load_average')}",
        f"- Versions: python {v.get('python')}, numpy {v.get('numpy')}, loom {v.get('loom')} "
        f"({v.get('loom_commit')}), torch {v.get('torch')}, jax {v.get('jax')}, cc {v.get('cc')}",
        f"- Protocol: {c['warmup']} warm-up calls (reported as warm-up/compile time), then {c['repeats']} "
        f"repeats of timed blocks, frameworks interleaved in rotating order; {c['threads']} thread(s), workers "
        f"pinned to CPUs {c.get('cpu_affinity')}; median/min/max wall time over the repeats, and the median CPU "
        "time of all the worker's threads; peak RSS is ru_maxrss of each framework's own worker process.",
        f"- loom.function backend: {c['loom_backend']}; loom eager backend: {c['loom_eager_backend'] or 'default'}", "",
        "| model | framework | median ms/step | min | max | CPU ms/step | throughput | x best peer "
        "| x best peer (CPU) | GFLOP/s | % of sgemm | warm-up s | peak RSS MiB | planned MiB "
        "| load (1 min) before/after | status |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in doc["results"]:
        ok = r.get("status") == "ok"
        planned = r.get("planned_peak_bytes")
        load = "/".join(str(x[0]) if x else "-" for x in (r.get("load_average_before"),
                                                             r.get("load_average_after")))
        out.append(
            f"| {_name(r)} | {r['framework']} | {_fmt(r.get('median_ms'), '.3f')} | {_fmt(r.get('min_ms'), '.3f')} "
            f"| {_fmt(r.get('max_ms'), '.3f')} | {_fmt(r.get('cpu_ms'), '.3f')} | "
            + (f"{r['throughput']:.0f} {r['unit']}/s" if ok else "-")
            + f" | {_fmt(r.get('ratio_to_best_peer'), '.2f')} | {_fmt(r.get('cpu_ratio_to_best_peer'), '.2f')} "
            f"| {_fmt(r.get('gflops'), '.1f')} "
            f"| {_fmt(r['sgemm_fraction'] * 100 if r.get('sgemm_fraction') is not None else None, '.0f')} "
            f"| {_fmt(r.get('compile_s'), '.2f')} "
            f"| {_fmt(r.get('peak_rss_mb'), '.0f')} | {_fmt(planned / 2**20 if planned else None, '.2f')} "
            f"| {load} | {'ok' if ok else r.get('status') + ': ' + r.get('reason', '')} |")
    if doc.get("notes"):
        out += ["", "Notes:", ""] + [f"- {n}" for n in doc["notes"]]
    return "\n".join(out) + "\n"


def plot(doc: dict, path: str | Path) -> None:
    """A bar chart of each framework's throughput relative to the best peer, grouped by model (PNG)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in doc["results"] if r.get("status") == "ok" and r.get("ratio_to_best_peer") is not None]
    models = list(dict.fromkeys(_name(r) for r in doc["results"]))
    frameworks = list(dict.fromkeys(r["framework"] for r in doc["results"]))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(models) + 2), 4.0))
    width = 0.8 / max(len(frameworks), 1)
    for i, fw in enumerate(frameworks):
        xs, ys = [], []
        for j, m in enumerate(models):
            hit = [r for r in rows if _name(r) == m and r["framework"] == fw]
            if hit:
                xs.append(j + (i - (len(frameworks) - 1) / 2) * width)
                ys.append(hit[0]["ratio_to_best_peer"])
        bars = ax.bar(xs, ys, width, label=fw)
        ax.bar_label(bars, fmt="%.2f", fontsize=7)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xticks(range(len(models)), models)
    ax.set_ylabel("throughput / best peer's")
    c = doc["config"]
    ax.set_title(f"loom.bench: {c['threads']} thread(s), median of {c['repeats']} "
                 f"(load {doc['machine'].get('load_average', ['?'])[0]})", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
