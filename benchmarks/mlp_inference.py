"""MLP 784-256-256-10 inference latency at batch 1: loom.function and loom eager vs PyTorch eager.

The compiler issue's target: loom.function's latency at or below PyTorch
eager's (31 us on an idle machine). Figures are microseconds per call, the
median of interleaved repeats of 200 calls. A thin wrapper over the
`mlp-infer` workload of loom.bench.

    python benchmarks/mlp_inference.py
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loom.bench.compare import Target, main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main("mlp-infer", ["loom-function", "loom", "torch"],
                  [Target("loom-function", "torch", 1.0), Target("loom", "torch")],
                  __doc__.splitlines()[0], latency=True))
