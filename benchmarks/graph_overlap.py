"""All-reduce overlapped with backward inside one compiled step, against the same step in graph order.

Run on 2 ranks:

    python -m loom.distributed.run --nproc 2 benchmarks/graph_overlap.py [--width 1024] [--batch 64] [--layers 4]

One data-parallel SGD step of an MLP (forward, backward, each gradient averaged with
`loom.distributed.nn.functional.all_reduce`, update) is traced by `loom.function` twice:

- graph order: ``runtime="native"``, one compiled graph running its all-reduces where they fall;
- overlapped: ``runtime="actors"``, where `loom.distributed.overlap.compile_overlapped` cuts the step so each
  all-reduce (or bucket) is a task on a private communicator that runs while the rest of the backward computes;
- cut, in order: the same cut program with its tasks called one after another in the caller's thread
  (``GraphProgram.parallel = False``), which isolates the overlap from the cut itself.

Each figure is the median over `--repeats` steps (after 2 warm-up steps) of the time between barriers; the two
variants alternate step by step, so machine load hits both alike. Compare the ratio on a shared machine.
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

import loom  # noqa: E402
import loom.distributed as dist  # noqa: E402
import loom.distributed.nn.functional as dfn  # noqa: E402


def make_step(weights, runtime):
    ps = [loom.tensor(w.copy(), requires_grad=True) for w in weights]

    def step(x, y):
        h = x
        for w in ps[:-1]:
            h = (h @ w).tanh()
        loss = ((h @ ps[-1] - y) ** 2).mean()
        grads = loom.autograd.grad([loss], ps)
        with loom.no_grad():
            for p, g in zip(ps, grads):
                p.sub_(0.01 * dfn.all_reduce(g, op=dist.ReduceOp.AVG))
        return loss
    return loom.function(step, warmup=0, runtime=runtime), ps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=64, help="rows per rank")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    dist.init_process_group("mpi")
    r, n = dist.get_rank(), dist.get_world_size()
    rng = np.random.default_rng(0)
    D, B = args.width, args.batch
    weights = [(rng.standard_normal((D, D)) / np.sqrt(D)).astype(np.float32) for _ in range(args.layers)]
    x = loom.tensor(rng.standard_normal((n * B, D)).astype(np.float32)[r * B:(r + 1) * B])
    y = loom.tensor(rng.standard_normal((n * B, D)).astype(np.float32)[r * B:(r + 1) * B])
    variants = {"graph order": make_step(weights, "native"), "overlapped": make_step(weights, "actors"),
                "cut, in order": make_step(weights, "actors")}
    times: dict[str, list[float]] = {k: [] for k in variants}
    for i in range(args.repeats + 2):
        for name, (fn, _) in variants.items():
            dist.barrier()
            t0 = time.perf_counter()
            fn(x, y).detach().numpy()
            dist.barrier()
            if i == 0 and name == "cut, in order":
                next(iter(fn._cache.values())).exe.parallel = False   # Traced and cut; from now on in order.
            if i >= 2:
                times[name].append((time.perf_counter() - t0) * 1e3)
    (_, p_seq), (ovl, p_ovl) = variants["graph order"], variants["overlapped"]
    diff = max(float(np.abs(a.detach().numpy() - b.detach().numpy()).max()) for a, b in zip(p_seq, p_ovl))
    tasks = [t.name for t in next(iter(ovl._cache.values())).exe.tasks]
    ovl.close()
    if r == 0:
        med = {k: statistics.median(v) for k, v in times.items()}
        mb = args.layers * D * D * 4 / 2**20
        print(f"data-parallel MLP step, {n} ranks, width {D}, {args.layers} layers, batch {B}/rank, "
              f"{mb:.0f} MiB of gradients all-reduced per step; median of {args.repeats} steps")
        for k, v in med.items():
            print(f"  {k:14s} {v:8.1f} ms   (min {min(times[k]):.1f}, max {max(times[k]):.1f})")
        print(f"  overlapped / graph order: {med['overlapped'] / med['graph order']:.2f}x the time, "
              f"overlapped / cut in order: {med['overlapped'] / med['cut, in order']:.2f}x; "
              f"tasks {tasks}; params differ by at most {diff:.1e} after {args.repeats + 2} steps")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
