"""A data-parallel training simulator: step time, throughput and speedup on a cluster one does not have.

The model of one data-parallel step (the way DDP, Horovod and OneFlow run
it): every device runs the forward pass, then the backward pass, which
produces gradients from the last layer to the first; gradients are grouped
into buckets, and each bucket's all-reduce starts when its last gradient is
ready and the link is free (buckets go over the link one after another);
the step ends when the backward pass and the last all-reduce are both done,
plus the optimizer update. The simulation is discrete-event over the
buckets, so it accounts for how much communication hides behind the
backward pass and how much is exposed at its end.

Inputs, each measured or taken from a datasheet:

- the model's parameter sizes in the order the backward pass produces
  their gradients (`resnet50_layers`, `bert_base_layers` give the two
  reference models), and its one-device step time — measured (DLPerf's
  published one-GPU throughput for the reference hardware; `loom.bench` on
  this machine) and split into forward and backward by their FLOP shares
  (backward = 2 x forward);
- per-link all-reduce cost alpha + bytes / bandwidth (a ring all-reduce of
  n bytes over p devices moves 2 (p-1)/p n bytes through the slowest link
  and takes 2 (p-1) latency hops), for links inside a machine and between
  machines; `measure_allreduce` measures them for Open MPI here.

`python -m loom.distributed.simulator` prints the predictions for
ResNet-50 and BERT-base on the seed's reference hardware (V100-SXM2-16GB,
8 per machine over NVLink, 100 Gb/s InfiniBand EDR between machines) at 1,
4, 8, 16 and 32 GPUs, beside OneFlow's published DLPerf figures for the
same hardware.

Examples
--------
>>> from loom.distributed import simulator as sim
>>> r = sim.simulate(sim.RESNET50, sim.V100_CLUSTER, nodes=4, gpus_per_node=8)
>>> r.devices, round(r.speedup, 1) > 25
(32, True)
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from loom.errors import LoomError

__all__ = ["Link", "Cluster", "Model", "Result", "simulate", "resnet50_layers", "bert_base_layers", "RESNET50",
           "BERT_BASE", "V100_CLUSTER", "DLPERF", "measure_allreduce", "main"]


@dataclasses.dataclass(frozen=True)
class Link:
    """An all-reduce link: `latency` seconds per hop and `bandwidth` bytes per second (achieved, not nominal)."""

    latency: float
    bandwidth: float

    def allreduce(self, nbytes: float, devices: int) -> float:
        """Seconds for a ring all-reduce of `nbytes` over `devices` whose slowest hop is this link."""
        if devices <= 1:
            return 0.0
        return 2 * (devices - 1) * self.latency + 2 * (devices - 1) / devices * nbytes / self.bandwidth


@dataclasses.dataclass(frozen=True)
class Cluster:
    """Machines of `gpus_per_node` devices joined by `intra` links, machines joined by `inter` links."""

    name: str
    intra: Link
    inter: Link
    max_gpus_per_node: int


@dataclasses.dataclass(frozen=True)
class Model:
    """A model to simulate: gradient sizes in backward order, one-device step time at `batch` per device."""

    name: str
    grad_bytes: tuple[int, ...]
    batch: int
    step_time_1: float
    unit: str = "samples"
    update_time: float = 0.0

    @property
    def params(self) -> int:
        return sum(self.grad_bytes) // 4


@dataclasses.dataclass
class Result:
    """One simulated configuration."""

    model: str
    nodes: int
    gpus_per_node: int
    step_time: float
    compute_time: float
    exposed_comm: float
    comm_time: float
    throughput: float
    speedup: float

    @property
    def devices(self) -> int:
        return self.nodes * self.gpus_per_node


def _buckets(sizes: tuple[int, ...], cap: int) -> list[tuple[int, int]]:
    """(bytes, index of the last gradient) per bucket, filled in backward order up to `cap` bytes."""
    out, acc = [], 0
    for k, s in enumerate(sizes):
        acc += s
        if acc >= cap:
            out.append((acc, k))
            acc = 0
    if acc:
        out.append((acc, len(sizes) - 1))
    return out


def simulate(model: Model, cluster: Cluster, nodes: int = 1, gpus_per_node: int = 1,
             bucket_bytes: int = 25 * 2 ** 20, overlap: bool = True) -> Result:
    """The simulated step of `model` data-parallel over `nodes` x `gpus_per_node` devices of `cluster`.

    The one-device step splits into forward (1/3) and backward (2/3); the
    backward produces the gradients in `model.grad_bytes` order at a rate
    proportional to their size. With `overlap`, a bucket's all-reduce starts
    when its gradients are ready and the previous bucket's is done; without,
    all start after the backward pass.
    """
    if nodes < 1 or gpus_per_node < 1 or gpus_per_node > cluster.max_gpus_per_node:
        raise LoomError(f"loom.distributed.simulator.simulate: {nodes} nodes x {gpus_per_node} GPUs does not fit "
                        f"{cluster.name} ({cluster.max_gpus_per_node} GPUs per node)")
    devices = nodes * gpus_per_node
    link = cluster.inter if nodes > 1 else cluster.intra
    forward = model.step_time_1 / 3
    backward = model.step_time_1 - forward
    total = sum(model.grad_bytes)
    done_at = []
    acc = 0
    for s in model.grad_bytes:
        acc += s
        done_at.append(forward + backward * acc / total)
    link_free = 0.0
    comm = 0.0
    for nbytes, last in _buckets(model.grad_bytes, bucket_bytes):
        start = max(done_at[last] if overlap else forward + backward, link_free)
        t = link.allreduce(nbytes, devices)
        comm += t
        link_free = start + t
    end = max(forward + backward, link_free) + model.update_time
    exposed = end - model.update_time - (forward + backward)
    throughput = devices * model.batch / end
    speedup = throughput / (model.batch / (model.step_time_1 + model.update_time))
    return Result(model.name, nodes, gpus_per_node, end, forward + backward, exposed, comm, throughput, speedup)


# ----------------------------------------------------------------------------- the reference models
def resnet50_layers() -> tuple[int, ...]:
    """ResNet-50 v1.5's gradient sizes in bytes (float32), in the order the backward pass produces them."""
    sizes: list[int] = [64 * 3 * 7 * 7, 64, 64]  # Stem conv + batch norm (weight, bias).
    in_ch = 64
    for blocks, width in ((3, 64), (4, 128), (6, 256), (3, 512)):
        for b in range(blocks):
            out_ch = width * 4
            sizes += [width * in_ch, width, width, width * width * 9, width, width, out_ch * width, out_ch, out_ch]
            if b == 0:
                sizes += [out_ch * in_ch, out_ch, out_ch]  # The projection shortcut.
            in_ch = out_ch
    sizes += [1000 * 2048, 1000]
    return tuple(4 * s for s in reversed(sizes))


def bert_base_layers(vocab: int = 30522, hidden: int = 768, layers: int = 12, ffn: int = 3072,
                     positions: int = 512) -> tuple[int, ...]:
    """BERT-base's gradient sizes in bytes (float32), backward order (pre-training heads included)."""
    sizes = [vocab * hidden, positions * hidden, 2 * hidden, hidden, hidden]  # Embeddings + their layer norm.
    for _ in range(layers):
        sizes += [hidden * hidden, hidden] * 4 + [hidden, hidden]  # Q, K, V, output projection; layer norm.
        sizes += [ffn * hidden, ffn, hidden * ffn, hidden, hidden, hidden]  # Feed-forward; layer norm.
    sizes += [hidden * hidden, hidden, hidden * hidden, hidden, hidden, hidden, vocab, hidden * 2, 2]  # Heads.
    return tuple(4 * s for s in reversed(sizes))


# OneFlow's published DLPerf figures (github.com/Oneflow-Inc/DLPerf, reports of 2020-08-21/22, OneFlow v0.1.9):
# throughput (images or sentences per second) by (nodes, GPUs per node), V100-SXM2-16GB, float32, no XLA.
DLPERF = {
    "resnet50": {"batch": 128, (1, 1): 384.85, (1, 8): 2969.45, (2, 8): 5906.55, (4, 8): 11711.18},
    "bert-base": {"batch": 96, (1, 1): 149.8, (1, 8): 1158.5, (2, 8): 2257.7, (4, 8): 4456.0},
}

RESNET50 = Model("resnet50", resnet50_layers(), batch=128, step_time_1=128 / DLPERF["resnet50"][(1, 1)],
                 unit="images")
BERT_BASE = Model("bert-base", bert_base_layers(), batch=96, step_time_1=96 / DLPERF["bert-base"][(1, 1)],
                  unit="sentences")

# The reference hardware: 8 x V100-SXM2 per machine (NVLink; NCCL all-reduce reaches about 130 GB/s of bus
# bandwidth on a DGX-1-class machine) and one 100 Gb/s InfiniBand EDR port per machine (12.5 GB/s nominal,
# about 11 GB/s achieved); a few microseconds of latency per hop.
V100_CLUSTER = Cluster("V100-SXM2-16GB x 8 per node, NVLink, IB EDR 100 Gb/s",
                       intra=Link(latency=5e-6, bandwidth=130e9), inter=Link(latency=8e-6, bandwidth=11e9),
                       max_gpus_per_node=8)


def measure_allreduce(sizes=(2 ** 10, 2 ** 20, 2 ** 24), repeats: int = 5) -> Link:
    """Fit alpha + bytes/beta to Open MPI all-reduce times on this job's ranks (collective; call on every rank)."""
    import time

    import numpy as np

    from loom.distributed.process_group import resolve
    g = resolve(None, "simulator.measure_allreduce")
    comm, p = g._comm, g.size()
    xs, ys = [], []
    for n in sizes:
        buf = np.ones(n // 4, np.float32)
        comm.Allreduce(_in_place(), buf)  # Warm-up.
        times = []
        for _ in range(repeats):
            comm.Barrier()
            t = time.perf_counter()
            comm.Allreduce(_in_place(), buf)
            times.append(time.perf_counter() - t)
        xs.append(2 * (p - 1) / p * n)
        ys.append(float(np.median(times)))
    slope, intercept = np.polyfit(np.array(xs, float), np.array(ys, float), 1)
    bandwidth = 1.0 / slope if slope > 0 else float("inf")
    latency = max(intercept, 0.0) / max(2 * (p - 1), 1)
    return Link(latency=latency, bandwidth=bandwidth)


def _in_place():
    from mpi4py import MPI
    return MPI.IN_PLACE


def main(argv: list[str] | None = None) -> int:
    """``python -m loom.distributed.simulator``: predictions for the reference models beside DLPerf's figures."""
    p = argparse.ArgumentParser(prog="python -m loom.distributed.simulator", description=main.__doc__)
    p.add_argument("--bucket-mb", type=float, default=25.0, help="gradient bucket size in MiB (DDP's default: 25)")
    p.add_argument("--no-overlap", action="store_true", help="all-reduce only after the backward pass")
    p.add_argument("--json", metavar="PATH", help="write the predictions here")
    args = p.parse_args(argv)
    rows = []
    for model in (RESNET50, BERT_BASE):
        ref = DLPERF[model.name]
        for nodes, gpus in ((1, 1), (1, 4), (1, 8), (2, 8), (4, 8)):
            r = simulate(model, V100_CLUSTER, nodes, gpus, int(args.bucket_mb * 2 ** 20), not args.no_overlap)
            published = ref.get((nodes, gpus))
            row = dataclasses.asdict(r) | {"devices": r.devices, "dlperf_throughput": published,
                                           "dlperf_speedup": published / ref[(1, 1)] if published else None}
            rows.append(row)
    print(f"{'model':<10} {'GPUs':>4} {'step ms':>8} {'exposed ms':>10} {'throughput':>11} {'speedup':>8} "
          f"{'DLPerf':>8} {'error':>7}")
    for row in rows:
        pub = row["dlperf_speedup"]
        err = f"{(row['speedup'] - pub) / pub:+.1%}" if pub else "-"
        pub_s = f"{pub:.2f}x" if pub else "-"
        print(f"{row['model']:<10} {row['devices']:>4} {row['step_time'] * 1e3:>8.1f} "
              f"{row['exposed_comm'] * 1e3:>10.2f} {row['throughput']:>11.1f} {row['speedup']:>7.2f}x "
              f"{pub_s:>8} {err:>7}")
    print(f"cluster: {V100_CLUSTER.name}; one-device step times from DLPerf's 1-GPU throughput; "
          f"buckets {args.bucket_mb:g} MiB, overlap {'off' if args.no_overlap else 'on'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
