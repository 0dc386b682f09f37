"""``--background-load``: busy processes beside the timed blocks, always ended, and the idle/busy comparison."""
from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loom.bench import harness
from loom.bench.background import BusyLoad

REPO = Path(__file__).resolve().parents[2]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().split(")")[-1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.skipif(not Path("/proc").exists(), reason="reads /proc")
@pytest.mark.parametrize("kind", ["spin", "gemm"])
def test_busy_processes_compute_on_the_given_cpus_and_stop(kind):
    cpus = sorted(os.sched_getaffinity(0))[:1]
    load = BusyLoad(1, kind, cpus)
    with load:
        (proc,) = load._procs
        time.sleep(1.0)
        assert load.running() == 1
        assert os.sched_getaffinity(proc.pid) == set(cpus)
        assert _cpu_seconds(proc.pid) > 0.2, "the process is busy, not sleeping"
    assert load.running() == 0 and not _alive(proc.pid)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_busy_process_dies_with_a_killed_harness():
    code = ("from loom.bench.background import BusyLoad; import sys, time; b = BusyLoad(1, 'spin'); b.start(); "
            "print(b._procs[0].pid, flush=True); time.sleep(60)")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=REPO)
    pid = int(parent.stdout.readline())
    assert _alive(pid)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)


def test_bad_kind_is_refused():
    with pytest.raises(ValueError, match="background load kind must be one of gemm, spin, got 'disk'"):
        BusyLoad(1, "disk")


def test_load_summary_compares_each_framework_to_its_idle_ratio():
    rows = [{"model": "mlp", "framework": "loom", "status": "ok", "ratio_to_best_peer": 1.2},
            {"model": "mlp", "framework": "torch", "status": "ok", "ratio_to_best_peer": 1.0},
            {"model": "mlp", "framework": "loom", "status": "ok", "ratio_to_best_peer": 1.5, "background_load": 1},
            {"model": "mlp", "framework": "torch", "status": "failed", "background_load": 1}]
    assert harness.load_summary(rows) == [
        "  mlp/loom: 1.20x best peer idle, 1.50x beside 1 busy process(es) (keeps 125% of its idle ratio)"]


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="compares with PyTorch")
def test_cli_times_blocks_idle_then_beside_the_load(tmp_path):
    cmd = [sys.executable, "-m", "loom.bench", "--quick", "--models", "mlp", "--frameworks", "loom,torch",
           "--repeats", "1", "--steps", "1", "--background-load", "1", "--background-kind", "spin",
           "--json", str(tmp_path / "out.json"), "--log-dir", str(tmp_path / "logs")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = json.loads((tmp_path / "out.json").read_text())["results"]
    busy = [r for r in rows if r.get("background_load") == 1]
    assert [r["framework"] for r in busy] == ["loom", "torch"] and all(r["status"] == "ok" for r in busy)
    assert all(r["block_seconds"] for r in busy)
    assert "mlp+busy  loom" in proc.stdout
    assert "mlp/loom: " in proc.stdout and "beside 1 busy process(es) (keeps" in proc.stdout
