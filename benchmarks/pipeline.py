"""Pipeline parallelism: per-step time of an MLP trained in 1 process vs cut into 2 stages (GPipe, 1F1B).

Each figure is the median of several steps (after warm-up steps) of SGD on the same batch. The 1-process
figure is taken here; the pipeline figures by this script re-run under the launcher on 2 ranks. On a
machine whose cores are shared, compare the ratios, not the absolute times.

    python benchmarks/pipeline.py                       # width 512, 8 layers, batch 256, 8 micro-batches
    python benchmarks/pipeline.py --width 1024 --steps 9
"""
import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

import loom  # noqa: E402


def blocks(args):
    loom.manual_seed(0)
    out = [loom.nn.Sequential(loom.nn.Linear(args.width, args.width), loom.nn.Tanh()) for _ in range(args.layers)]
    return out


def batch(args):
    rng = np.random.default_rng(0)
    return (loom.tensor(rng.standard_normal((args.batch, args.width)).astype(np.float32)),
            loom.tensor(rng.standard_normal((args.batch, args.width)).astype(np.float32)))


def timed(step, args) -> float:
    for _ in range(args.warmup):
        step()
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def one_process(args) -> float:
    model = loom.nn.Sequential(*blocks(args))
    opt = loom.optim.SGD(model.parameters(), lr=0.01)
    x, y = batch(args)

    def step():
        opt.zero_grad()
        loom.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        loom.realize(*model.parameters())
    return timed(step, args)


def worker(args) -> None:
    """One rank of the pipeline: its half of the layers, timed under each schedule."""
    import loom.distributed as dist
    from loom.distributed.pipeline import PipelineStage, Schedule1F1B, ScheduleGPipe
    dist.init_process_group("gloo")
    r, n = dist.get_rank(), dist.get_world_size()
    per = args.layers // n
    stage = PipelineStage(loom.nn.Sequential(*blocks(args)[r * per:(r + 1) * per]), r, n)
    opt = loom.optim.SGD(stage.submod.parameters(), lr=0.01)
    x, y = batch(args)
    for Schedule in (ScheduleGPipe, Schedule1F1B):
        schedule = Schedule(stage, args.microbatches, loss_fn=loom.nn.functional.mse_loss)

        def step():
            dist.barrier()  # Every rank starts the step together, so each rank's time is the pipeline's.
            opt.zero_grad()
            schedule.step(x) if stage.is_first else schedule.step(target=y)
            opt.step()
            loom.realize(*stage.submod.parameters())
        t = timed(step, args)
        if r == 0:
            print(f"RESULT {Schedule.__name__} {t}", flush=True)
    dist.destroy_process_group()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--microbatches", type=int, default=8)
    p.add_argument("--steps", type=int, default=7)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args)
    print(f"load: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    print(f"MLP {args.layers} x Linear({args.width}, {args.width}) + Tanh, batch {args.batch}, "
          f"{args.microbatches} micro-batches, median of {args.steps} steps")
    base = one_process(args)
    cmd = [sys.executable, "-m", "loom.distributed.run", "--nproc", "2", __file__, "--worker",
           *[f"--{k}={v}" for k, v in vars(args).items() if k != "worker"]]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    rows = [("1 process", base)] + [(f"2 stages, {line.split()[1]}", float(line.split()[2]))
                                    for line in out.splitlines() if line.startswith("RESULT")]
    for name, t in rows:
        print(f"{name:24s} {t * 1e3:9.2f} ms/step   {base / t:5.2f}x vs 1 process")
    print(f"load: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")


if __name__ == "__main__":
    main()
