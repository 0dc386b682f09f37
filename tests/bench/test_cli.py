"""``python -m loom.bench``: a smoke run of the command line, its JSON schema, skipped peers and arguments."""
from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from loom.bench import cli, report

REPO = Path(__file__).resolve().parents[2]
HAS_TORCH = importlib.util.find_spec("torch") is not None
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

RESULT_KEYS = {"model", "framework", "status", "unit", "samples_per_step", "steps_per_block", "threads"}
OK_KEYS = {"median_ms", "min_ms", "max_ms", "throughput", "ratio_to_best_peer", "best_peer", "block_seconds",
           "repeats", "compile_s", "first_call_s", "peak_rss_mb", "first_value", "load_average_before"}


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """One quick run of the CLI as a user would start it: loom and torch on the mlp workload."""
    out = tmp_path_factory.mktemp("bench")
    cmd = [sys.executable, "-m", "loom.bench", "--quick", "--models", "mlp", "--frameworks", "loom,torch",
           "--repeats", "2", "--steps", "1", "--json", str(out / "out.json"), "--markdown", str(out / "out.md"),
           "--plot", str(out / "out.png"), "--log-dir", str(out / "logs")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc, out


def test_smoke_run_prints_the_table(smoke):
    proc, _ = smoke
    lines = proc.stdout.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("model ") and "median" in ln)
    rows = [ln for ln in lines[head + 2:] if ln.startswith("mlp ")]
    assert [r.split()[1] for r in rows] == ["loom", "torch"]
    assert rows[0].rstrip().endswith("ok")
    assert "load average" in proc.stdout


def test_smoke_run_json_schema(smoke):
    _, out = smoke
    doc = json.loads((out / "out.json").read_text())
    assert doc["schema"] == report.SCHEMA
    assert {"created", "command", "machine", "versions", "config", "scaling", "notes", "results"} <= set(doc)
    m = doc["machine"]
    assert m["cpu_model"] and m["logical_cores"] >= 1 and isinstance(m["avx512"], bool)
    assert set(m["cpu_flags"]) >= {"avx2", "avx512f", "fma"}
    assert {"python", "numpy", "loom", "torch", "jax"} <= set(doc["versions"])
    c = doc["config"]
    assert c["repeats"] == 2 and c["threads"] == 1 and c["models"] == ["mlp"] and c["steps"] == 1
    assert c["cpu_affinity"] in (None, [c["cpu_affinity"][0]])
    assert c["worker_environment"]["OMP_NUM_THREADS"] == "1" and c["worker_environment"]["OPENBLAS_NUM_THREADS"] == "1"
    assert doc["scaling"] == {"requested": [1], "available": True, "ran": [1]}
    by_fw = {r["framework"]: r for r in doc["results"]}
    assert set(by_fw) == {"loom", "torch"}
    loom_row = by_fw["loom"]
    assert RESULT_KEYS | OK_KEYS <= set(loom_row), sorted(RESULT_KEYS | OK_KEYS - set(loom_row))
    assert loom_row["status"] == "ok" and loom_row["repeats"] == 2 and len(loom_row["block_seconds"]) == 2
    assert loom_row["min_ms"] <= loom_row["median_ms"] <= loom_row["max_ms"]
    assert len(loom_row["block_cpu_seconds"]) == 2 and loom_row["cpu_ms"] > 0 and loom_row["os_threads"] >= 1
    assert loom_row["throughput"] == pytest.approx(128e3 / loom_row["median_ms"])
    assert loom_row["peak_rss_mb"] > 10
    if HAS_TORCH:
        t = by_fw["torch"]
        assert t["status"] == "ok" and t["best_peer"] == "torch" and t["ratio_to_best_peer"] == pytest.approx(1.0)
        assert loom_row["ratio_to_best_peer"] == pytest.approx(loom_row["throughput"] / t["throughput"])
        assert loom_row["cpu_ratio_to_best_peer"] == pytest.approx(t["cpu_ms"] / loom_row["cpu_ms"])
        # Same weights and batch: the first losses agree across frameworks.
        assert loom_row["first_value"] == pytest.approx(t["first_value"], rel=1e-5)
    else:
        assert by_fw["torch"]["status"] == "skipped" and "not installed" in by_fw["torch"]["reason"]


def test_smoke_run_markdown_and_plot(smoke):
    _, out = smoke
    md = (out / "out.md").read_text()
    assert "| mlp | loom |" in md and "Load average" in md
    assert (out / "out.png").read_bytes()[:8] == PNG_MAGIC


def test_missing_peers_are_skipped_with_a_reason(monkeypatch, capsys, tmp_path):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in ("torch", "jax") else real(name, *a))
    monkeypatch.setenv("LOOM_DATA_DIR", str(tmp_path / "no-data"))
    rc = cli.main(["--quick", "--models", "mlp,resnet,gcn", "--frameworks", "torch,torch-compile,jax",
                   "--json", str(tmp_path / "out.json")])
    assert rc == 0
    text = capsys.readouterr().out
    assert "mlp/torch: skipped: torch is not installed" in text
    assert "mlp/jax: skipped: jax is not installed" in text
    assert "model" in text and "median" in text  # The table still prints.
    doc = json.loads((tmp_path / "out.json").read_text())
    rows = doc["results"]
    assert len(rows) == 9 and all(r["status"] == "skipped" and r["reason"] for r in rows)
    assert doc["scaling"]["requested"] == [1]
    gcn = [r for r in rows if r["model"] == "gcn" and r["framework"] == "torch"][0]
    assert "not installed" in gcn["reason"]


def test_unsupported_variant_is_skipped(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("LOOM_DATA_DIR", str(tmp_path / "no-data"))
    rc = cli.main(["--models", "resnet,gcn", "--frameworks", "jax", "--repeats", "1"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "resnet/jax: skipped: no JAX variant of resnet" in text or "jax is not installed" in text
    assert "gcn/jax: skipped:" in text


@pytest.mark.parametrize("args, message", [
    (["--models", "vgg"], "unknown model vgg"),
    (["--frameworks", "loom,tf"], "unknown framework tf"),
    (["--repeats", "0"], "--repeats must be >= 1"),
    (["--nproc", "0"], "--nproc values must be >= 1"),
])
def test_bad_arguments_exit_2(args, message, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(args)
    assert e.value.code == 2
    assert message in capsys.readouterr().err


def test_list(capsys):
    assert cli.main(["--list"]) == 0
    out = capsys.readouterr().out
    assert "mlp" in out and "gcn" in out and "torch-compile" in out


needs_mpi = pytest.mark.skipif(shutil.which("mpirun") is None or importlib.util.find_spec("mpi4py") is None,
                               reason="needs Open MPI (mpirun) and mpi4py: pip install 'loom-dl[distributed]'")


@needs_mpi
def test_nproc_runs_a_data_parallel_scaling_study(capsys, tmp_path):
    rc = cli.main(["--nproc", "1,2", "--models", "mlp", "--frameworks", "loom", "--steps", "1", "--repeats", "1",
                   "--warmup", "1", "--json", str(tmp_path / "scale.json")])
    assert rc == 0
    text = capsys.readouterr().out
    assert "speedup" in text and "mlp      loom          2" in text, text
    doc = json.loads((tmp_path / "scale.json").read_text())
    rows = {r["nproc"]: r for r in doc["results"]}
    assert sorted(rows) == [1, 2] and all("error" not in r for r in rows.values()), rows
    assert rows[2]["world_size"] == 2 and rows[1]["speedup"] == 1.0 and rows[2]["speedup"] > 0
    # Weak scaling: two ranks process two batches per step.
    assert rows[2]["throughput"] == pytest.approx(2 * 128 / (rows[2]["ms_per_step"] / 1e3))


def test_nproc_without_any_ddp_framework_is_refused(monkeypatch, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    with pytest.raises(SystemExit):
        cli.main(["--nproc", "1,2", "--models", "mlp", "--frameworks", "torch"])
    assert "PyTorch is not installed" in capsys.readouterr().out
