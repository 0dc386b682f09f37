"""char-GPT training step (4 layers, 4 heads, d 128, context 64, batch 32, AdamW) under loom.function vs PyTorch eager.

The compiler issue's target: loom.function >= 0.8x PyTorch eager's
throughput (tokens/s). A thin wrapper over the `gpt` workload of loom.bench.

    python benchmarks/gpt_step.py
    python benchmarks/gpt_step.py --frameworks loom-function,torch,torch-compile
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loom.bench.compare import Target, main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main("gpt", ["loom-function", "torch"],
                  [Target("loom-function", "torch", 0.8), Target("loom-function", "torch-compile")],
                  __doc__.splitlines()[0]))
