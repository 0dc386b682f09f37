"""MLP 784-256-256-10 training step (batch 128, SGD momentum) under loom.function vs PyTorch eager and torch.compile.

The compiler issue's target: loom.function >= 1.0x PyTorch eager's throughput
(stretch 1.3x). A thin wrapper over the `mlp` workload of loom.bench.

    python benchmarks/mlp_step.py                 # median of 7 interleaved repeats, 1 thread
    python benchmarks/mlp_step.py --threads 2     # the issue's peer figures used 2 threads
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loom.bench.compare import Target, main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main("mlp", ["loom-function", "torch", "torch-compile"],
                  [Target("loom-function", "torch", 1.0), Target("loom-function", "torch-compile")],
                  __doc__.splitlines()[0]))
