"""Actors across ranks: a two-stage training pipeline on the actor runtime, and gradient all-reduces as
their own tasks, each against its sequential counterpart.

Run on 2 ranks:

    python -m loom.distributed.run --nproc 2 benchmarks/actor_comm.py [--width 512] [--batch 256] [--repeats 5]

1. pipeline: `train_pipeline` (stage i on rank i, 4 micro-batches) against one process running both stages
   on the 4 micro-batches one after another (rank 0 alone; rank 1 waits).
2. overlap: a data-parallel backward (2 layers) whose all-reduces are `collective_task`s overlapping the
   backward tasks, against the same functions called in sequence with blocking all-reduces.

Each figure is the median of `--repeats` runs after one warm-up run; compare ratios on a shared machine.
"""
import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

import loom  # noqa: E402
import loom.distributed as dist  # noqa: E402
from loom.autograd.engine import grad  # noqa: E402
from loom.distributed import comm  # noqa: E402
from loom.distributed.actor_pipeline import train_pipeline  # noqa: E402
from loom.distributed.overlap import collective_task  # noqa: E402
from loom.runtime.actors import Plan  # noqa: E402
from loom.runtime.transport import MpiTransport  # noqa: E402


def median_ms(fn, repeats):
    fn()
    times = []
    for _ in range(repeats):
        dist.barrier()
        t0 = time.perf_counter()
        fn()
        dist.barrier()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    dist.init_process_group("mpi")
    r, n = dist.get_rank(), dist.get_world_size()
    W, B, M = args.width, args.batch, 4
    rng = np.random.default_rng(0)
    X = rng.standard_normal((B, W)).astype(np.float32)
    Y = rng.standard_normal((B, W)).astype(np.float32)
    w0 = loom.tensor((rng.standard_normal((W, W)) / np.sqrt(W)).astype(np.float32), requires_grad=True)
    w1 = loom.tensor((rng.standard_normal((W, W)) / np.sqrt(W)).astype(np.float32), requires_grad=True)
    stages = [lambda x: (x @ w0).tanh(), lambda h: h @ w1]
    loss_fn = lambda out, y: ((out - y) ** 2).mean()  # noqa: E731
    xs = [X[k * B // M:(k + 1) * B // M] for k in range(M)]
    ys = [Y[k * B // M:(k + 1) * B // M] for k in range(M)]
    transport = MpiTransport()

    def pipelined():
        train_pipeline(stages, [w0, w1], loss_fn, xs, ys, transport=transport)

    def one_process():
        if r == 0:
            for x, y in zip(xs, ys):
                loss = loss_fn(stages[1](stages[0](loom.tensor(x))), loom.tensor(y)) / M
                [g.numpy() for g in grad([loss], [w0, w1])]

    t_pipe, t_one = median_ms(pipelined, args.repeats), median_ms(one_process, args.repeats)

    busy = threading.Lock()
    shard = (X[r * B // n:(r + 1) * B // n], Y[r * B // n:(r + 1) * B // n])

    def late(xy):
        with busy:
            h = (loom.tensor(xy[0]) @ w0).tanh().detach().requires_grad_()
            gh, g1 = grad([((h @ w1 - loom.tensor(xy[1])) ** 2).mean()], [h, w1])
            return gh.numpy(), g1.numpy()

    def early(xy, lt):
        with busy:
            return grad([(loom.tensor(xy[0]) @ w0).tanh()], [w0], grad_outputs=[loom.tensor(lt[0])])[0].numpy()

    def overlapped():
        plan = Plan("ddp", track=False)
        data = plan.source("batches", iter([shard] * M))
        lt = plan.task("backward_late", late, [data], registers=2)
        ea = plan.task("backward_early", early, [data, lt], registers=2)
        collective_task(plan, "allreduce_late", lt, pick=lambda v: v[1])
        collective_task(plan, "allreduce_early", ea)
        plan.run(timeout=120)

    ranks = tuple(range(n))

    def sequential():
        for _ in range(M):
            lt = late(shard)
            comm.all_reduce(lt[1], "avg", ranks)
            comm.all_reduce(early(shard, lt), "avg", ranks)

    t_over, t_seq = median_ms(overlapped, args.repeats), median_ms(sequential, args.repeats)
    if r == 0:
        load = os.getloadavg()
        print(f"width {W}, batch {B}, {M} micro-batches/steps, 2 ranks, load average {load[0]:.1f}")
        print(f"pipeline: 2 stages on actors {t_pipe:.1f} ms vs 1 process {t_one:.1f} ms "
              f"({t_one / t_pipe:.2f}x)")
        print(f"overlap: all-reduce tasks {t_over:.1f} ms vs sequential {t_seq:.1f} ms ({t_seq / t_over:.2f}x)")
    transport.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
