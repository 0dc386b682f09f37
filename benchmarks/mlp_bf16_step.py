"""MLP 784-256-256-10 training step (batch 128, SGD momentum) under bfloat16 autocast: loom.function vs PyTorch eager.

Matmuls run in bfloat16 inside ``autocast`` (loom: ``loom.autocast.autocast()``;
PyTorch: ``torch.autocast("cpu", torch.bfloat16)``), everything else in
float32. Interleaved repeats, each the median step time of a block; prints the
median over repeats (ms/step) and loom's speed relative to PyTorch.

    python benchmarks/mlp_bf16_step.py                    # 5 repeats of 20 steps, 1 thread
    python benchmarks/mlp_bf16_step.py --repeats 7 --steps 30 --frameworks loom
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SIZES, BATCH = (784, 256, 256, 10), 128


def _loom_step(x, y):
    import loom
    import loom.nn.functional as F
    from loom import nn
    loom.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = loom.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step(x, y):
        opt.zero_grad()
        with loom.autocast.autocast():
            out = model(x)
        loss = F.cross_entropy(out.float(), y)
        loss.backward()
        opt.step()
        return loss
    fn = loom.function(step)
    args = (loom.tensor(x), loom.tensor(y))

    def run():
        return float(fn(*args).item())
    run.settle = lambda: [entry.exe.wait() for entry in fn._cache.values()]  # Every kernel built.
    return run


def _torch_step(x, y):
    import torch
    import torch.nn.functional as F
    from torch import nn
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    args = (torch.tensor(x), torch.tensor(y))

    def step():
        opt.zero_grad()
        with torch.autocast("cpu", torch.bfloat16):
            out = model(args[0])
        loss = F.cross_entropy(out.float(), args[1])
        loss.backward()
        opt.step()
        return float(loss.detach())
    return step


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--frameworks", default="loom,torch")
    a = p.parse_args()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, SIZES[0])).astype(np.float32)
    y = rng.integers(0, SIZES[-1], BATCH).astype(np.int64)
    steps = {}
    for name in a.frameworks.split(","):
        if name == "loom":
            import loom
            loom.set_num_threads(a.threads)
            steps[name] = _loom_step(x, y)
        else:
            import torch
            torch.set_num_threads(a.threads)
            steps[name] = _torch_step(x, y)
        for _ in range(5):  # Warm-up: loom.function traces on the second call and builds its kernels.
            steps[name]()
    for step in steps.values():
        getattr(step, "settle", lambda: None)()
    times = {name: [] for name in steps}
    for _ in range(a.repeats):
        for name, step in steps.items():
            block = []
            for _ in range(a.steps):
                t0 = time.perf_counter()
                step()
                block.append(time.perf_counter() - t0)
            times[name].append(statistics.median(block) * 1e3)
    med = {name: statistics.median(t) for name, t in times.items()}
    for name, m in med.items():
        print(f"{name:6s} {m:8.3f} ms/step  (repeats: {', '.join(f'{t:.3f}' for t in times[name])})")
    if "loom" in med and "torch" in med:
        print(f"loom / torch speed: {med['torch'] / med['loom']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
