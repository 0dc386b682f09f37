"""The GPT training step under memory budgets: planned arena, recompute work and step time against no budget.

    python -m loom.bench.memory_budget --fractions 0.5,0.25 --repeats 7 [--offload never,disk,auto]

Each budget is a fraction of the unbudgeted step's planned arena and covers
the whole step (the arena plus the arrays the step returns); each line names
the plan the remat pass chose (`loom.compiler.remat`). Every
variant starts from the same weights; steps alternate between variants so
machine load hits them alike, and the report gives each variant's median
step time and its ratio to the unbudgeted one, and checks the losses agree
bit for bit.
"""
from __future__ import annotations

import argparse
import statistics
import time
import warnings

import numpy as np


def _variant(budget, offload: str = "auto"):
    """The GPT training step of the ``gpt`` workload under `budget` (None: none) and `offload`, and its batches.

    Shared with ``benchmarks/memory_budget.py`` (peak RSS per storage tier).
    """
    import loom
    from loom.bench.workloads import api, get, load_initial_state

    w = get("gpt")
    a = api("loom")
    a.lib.manual_seed(0)
    model = w.model(a)
    load_initial_state(a, model, 0)
    model.train(True)
    opt = w.optimizer(a, model.parameters())
    data = [tuple(a.tensor(x) for x in b) for b in w.batches(np.random.default_rng(0))]

    def step(*batch):
        opt.zero_grad()
        loss = w.loss(a, model, *batch)
        loss.backward()
        opt.step()
        return loss
    return loom.function(step, memory_budget=budget, offload=offload), data


def main(argv=None) -> None:
    from loom.compiler.remat import flops

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--fractions", default="0.5,0.25", help="budgets as fractions of the unbudgeted arena")
    p.add_argument("--repeats", type=int, default=7, help="timed steps per variant")
    p.add_argument("--offload", default="auto", help="storage tiers under the budgets: never, disk or auto "
                   "(comma-separated: one variant per setting and fraction)")
    args = p.parse_args(argv)

    base, data = _variant(None)
    losses = {None: [float(base(*data[k % len(data)]).detach().numpy()) for k in range(2)]}
    (entry,) = base._cache.values()
    full = entry.exe.plan.arena_bytes
    step_flops = sum(flops(n) for n in entry.exe.graph if n.op not in ("input", "buffer", "const"))
    runs = {None: base}
    for frac in [float(f) for f in args.fractions.split(",")]:
        for mode in args.offload.split(","):
            fn, _ = _variant(int(full * frac), mode)
            with warnings.catch_warnings(record=True):
                warnings.simplefilter("always")
                losses[(frac, mode)] = [float(fn(*data[k % len(data)]).detach().numpy()) for k in range(2)]
            runs[(frac, mode)] = fn
    times: dict = {k: [] for k in runs}
    for r in range(args.repeats):
        for k, fn in runs.items():
            t0 = time.perf_counter()
            fn(*data[r % len(data)]).detach().numpy()
            times[k].append(time.perf_counter() - t0)
    base_ms = statistics.median(times[None]) * 1e3
    print(f"gpt step, unbudgeted planned arena {full / 2**20:.1f} MiB, ~{step_flops / 1e9:.2f} GFLOP per step")
    for k, fn in runs.items():
        ms = statistics.median(times[k]) * 1e3
        (e,) = fn._cache.values()
        rep = e.remat
        arena = e.exe.plan.arena_bytes
        frac = None if k is None else k[0]
        extra = (f"{rep.strategy}: {rep.extra_flops / 1e9:.2f} GFLOP recomputed ({rep.recomputed} nodes), "
                 f"{rep.offloaded} values offloaded, (arena + {rep.outputs / 2**20:.1f} MiB outputs)/budget "
                 f"{(arena + rep.outputs) / int(full * frac):.3f}, met={rep.met}" if rep else "")
        name = "no budget" if k is None else f"budget {frac:.2f} x ({int(full * frac) / 2**20:.1f} MiB) {k[1]}"
        print(f"  {name:<36} arena {arena / 2**20:7.1f} MiB  step {ms:8.1f} ms  x{ms / base_ms:.2f}  "
              f"losses bit-identical: {losses[k] == losses[None]}  {extra}")


if __name__ == "__main__":
    main()
