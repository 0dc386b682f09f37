"""Smoke run of examples/onnx_export.py: train briefly, export, run in onnxruntime, compare with loom."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import onnx

ROOT = Path(__file__).resolve().parents[2]


def test_onnx_export_smoke(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "onnx_export.py"), "--smoke", "--no-progress",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert proc.returncode == 0, f"onnx_export --smoke failed:\n{proc.stdout}\n{proc.stderr}"
    m = re.search(r"onnxruntime matches loom: max \|diff\| (\S+) ", proc.stdout)
    assert m and float(m.group(1)) <= 1e-5, proc.stdout
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    for batch in ("batch1", "batch64"):
        r = metrics[batch]
        assert r["same_predictions"] and r["loom_accuracy"] == r["onnxruntime_accuracy"]
        assert r["max_abs_diff"] <= 1e-5
    assert metrics["batch64"]["images"] == 128
    model = onnx.load(str(tmp_path / "fashion_cnn.onnx"))
    assert model.ir_version == 10 and model.graph.input[0].name == "pixels"
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
