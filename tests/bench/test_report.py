"""loom.bench.report on hand-made results (failed and skipped rows too), and the package's docstring examples."""
from __future__ import annotations

import doctest
import importlib

import pytest

from loom.bench import report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _doc():
    ok = {"status": "ok", "unit": "samples", "median_ms": 2.0, "min_ms": 1.5, "max_ms": 3.0, "compile_s": 1.25,
          "cpu_ms": 2.5,
          "peak_rss_mb": 120.0, "load_average_before": [1.0, 1.0, 1.0], "load_average_after": [2.0, 1.0, 1.0]}
    rows = [
        dict(ok, model="mlp", framework="loom-function", throughput=64000.0, ratio_to_best_peer=1.25,
             cpu_ratio_to_best_peer=1.5, gflops=40.0, sgemm_fraction=0.5,
             planned_peak_bytes=3 * 2**20),
        dict(ok, model="mlp", framework="torch", throughput=51200.0, ratio_to_best_peer=1.0),
        {"model": "mlp", "framework": "jax", "status": "skipped", "reason": "jax is not installed",
         "unit": "samples"},
        {"model": "mlp", "framework": "torch-compile", "status": "failed", "reason": "no answer within 5 s",
         "unit": "samples"},
    ]
    machine = {"cpu_model": "Test CPU", "cpu_flags": {"avx2": True, "avx512f": False}, "avx512": False,
               "logical_cores": 2, "cores_available": 2, "memory_gib": 8.0, "load_average": [1.0, 1.0, 1.0]}
    config = {"warmup": 3, "repeats": 7, "threads": 1, "loom_backend": "c", "loom_eager_backend": "reference"}
    return report.document(rows, machine, {"python": "3.11"}, config, ["python", "-m", "loom.bench"],
                           ["a note"], {"requested": [1]}, "2024-01-01T00:00:00+00:00")


def test_table_rows_and_columns():
    lines = report.table(_doc()["results"]).splitlines()
    assert lines[0].split()[:5] == ["model", "framework", "median", "min", "max"]
    fn = lines[2].split()
    assert fn[:6] == ["mlp", "loom-function", "2.000", "1.500", "3.000", "2.500"]
    assert fn[6:13] == ["64000", "samples/s", "1.25", "1.50", "40.0", "50", "1.25"] and "3.00" in fn
    assert fn[-1] == "ok"
    torch_row = lines[3].split()
    assert torch_row[10:12] == ["-", "-"]  # No roofline figures: dashes, not zeros.
    assert lines[4].endswith("skipped: jax is not installed")
    assert lines[5].endswith("failed: no answer within 5 s")


def test_markdown_has_protocol_machine_and_every_row():
    md = report.markdown(_doc())
    assert "Test CPU" in md and "AVX-512: no" in md and "7 repeats" in md and "- a note" in md
    row = ("| mlp | loom-function | 2.000 | 1.500 | 3.000 | 2.500 | 64000 samples/s | 1.25 | 1.50 | 40.0 | 50 | 1.25 "
           "| 120 | 3.00 "
           "| 1.0/2.0 | ok |")
    assert row in md
    assert "| mlp | jax | - |" in md and "skipped: jax is not installed" in md


def test_plot_writes_a_png(tmp_path):
    path = tmp_path / "ratios.png"
    report.plot(_doc(), path)
    assert path.read_bytes()[:8] == PNG_MAGIC


@pytest.mark.parametrize("module", ["loom.bench", "loom.bench.stats", "loom.bench.report", "loom.bench.machine",
                                    "loom.bench.workloads", "loom.bench.compare"])
def test_docstring_examples(module):
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
