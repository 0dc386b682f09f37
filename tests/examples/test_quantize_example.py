"""Smoke run of examples/quantize.py: train briefly, PTQ and QAT to int8, export QDQ, run in onnxruntime."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import onnx

ROOT = Path(__file__).resolve().parents[2]


def test_quantize_example_smoke(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "quantize.py"), "--smoke", "--no-progress",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert proc.returncode == 0, f"quantize --smoke failed:\n{proc.stdout}\n{proc.stderr}"
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert {"float32_accuracy", "int8_ptq_accuracy", "int8_qat_accuracy"} <= set(metrics)
    assert abs(metrics["int8_ptq_accuracy"] - metrics["float32_accuracy"]) <= 0.05
    assert metrics["float_bytes"] / metrics["int8_bytes"] > 3.9
    assert metrics["onnxruntime_max_abs_diff"] <= 1e-4
    model = onnx.load(metrics["onnx_path"])
    assert model.ir_version == 10 and any(n.op_type == "QuantizeLinear" for n in model.graph.node)
