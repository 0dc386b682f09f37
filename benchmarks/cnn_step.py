"""Small CNN training step (conv32-conv64-pool-fc128-fc10, batch 64, Adam) under loom.function vs PyTorch eager.

The compiler issue's target: loom.function >= 0.8x PyTorch eager's
throughput. A thin wrapper over the `cnn` workload of loom.bench.

    python benchmarks/cnn_step.py
    python benchmarks/cnn_step.py --frameworks loom-function,torch,torch-compile
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loom.bench.compare import Target, main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main("cnn", ["loom-function", "torch"],
                  [Target("loom-function", "torch", 0.8), Target("loom-function", "torch-compile")],
                  __doc__.splitlines()[0]))
