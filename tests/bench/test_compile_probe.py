"""loom.bench.compile_probe: the per-batch-size record of a traced step (on the reference backend: no C builds)."""
from __future__ import annotations

import pytest

from loom.bench import compare
from loom.bench.compile_probe import probe


def test_probe_records_each_batch_size(tmp_path, monkeypatch):
    monkeypatch.setenv("LOOM_CACHE_DIR", str(tmp_path))
    out = probe("mlp", [128, 32], backend="reference")
    assert out["model"] == "mlp" and out["cache_dir"] == str(tmp_path)
    assert [b["batch"] for b in out["batch_sizes"]] == [128, 32]
    for b in out["batch_sizes"]:
        assert b["traced"] == 1  # A new batch size traces again ...
        assert b["builds"] == 0 and b["new_so_files"] == 0  # ... and the reference backend builds nothing.
        assert b["compile_s"] > 0 and b["pipeline_s"] >= 0 and b["replay_s"] > 0
    assert out["so_files_start"] == out["so_files_end"] == 0


def test_probe_rejects_models_without_a_batch_dimension():
    with pytest.raises(ValueError, match="no batch dimension"):
        probe("gcn", [1])


def test_verdicts_without_figures_say_why():
    rows = [{"model": "cnn", "framework": "loom-function", "status": "failed", "reason": "boom"},
            {"model": "cnn", "framework": "torch", "status": "ok", "median_ms": 2.0, "throughput": 32.0}]
    line = compare.verdicts(rows, [compare.Target("loom-function", "torch", 0.8)])[0]
    assert line == "cnn: loom.function vs torch eager: no figure (loom-function failed: boom)"


def test_verdicts_missed_target_and_latency_units():
    rows = [{"model": "mlp-infer", "framework": "loom-function", "status": "ok", "median_ms": 0.05,
             "throughput": 20000.0},
            {"model": "mlp-infer", "framework": "torch", "status": "ok", "median_ms": 0.04, "throughput": 25000.0}]
    line = compare.verdicts(rows, [compare.Target("loom-function", "torch", 1.0)], latency=True)[0]
    assert line == ("mlp-infer: loom.function 50.000 us vs torch eager 40.000 us: 0.80x torch eager "
                    "(target latency <= peer's): MISSED")
