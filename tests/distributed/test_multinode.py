"""Multi-machine jobs on one machine: two launchers (``--nnodes 2 --node-rank 0/1``) joined over loopback.

Each test starts both launchers as subprocesses with timeouts; the rank scripts are in tests/distributed/scripts.
"""
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.distributed.test_distributed import ROOT, SCRIPTS, _env, needs_mpi

grpc = pytest.importorskip("grpc", reason="the control plane needs grpcio: pip install 'loom-dl[distributed]'")

from loom.distributed.control import ControlClient, ControlPlaneError, ControlServer  # noqa: E402

TIMEOUT = 120


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _node(rank: int, port: int, script: str, *args: str, nproc: int = 1, token: str | None = "t0ken",
          extra: tuple = ()) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "loom.distributed.run", "--nnodes", "2", "--node-rank", str(rank), "--master",
           f"127.0.0.1:{port}", "--nproc", str(nproc), *(("--token", token) if token else ()), *extra,
           str(SCRIPTS / script), *args]
    return subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait(*procs: subprocess.Popen) -> list[tuple[int, str, str]]:
    """Every launcher's (exit code, stdout, stderr); fails the test (after ending them) past TIMEOUT."""
    deadline, outs = time.monotonic() + TIMEOUT, []
    for p in procs:
        try:
            out, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.terminate()  # A launcher takes its ranks down on SIGTERM.
            texts = [q.communicate(timeout=30) for q in procs]
            pytest.fail(f"the launchers did not end within {TIMEOUT} s: {texts}")
        outs.append((p.returncode, out, err))
    return outs


def _ompi_servers() -> set[int]:
    pids = set()
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if b"ompi-server" in (d / "cmdline").read_bytes():
                    pids.add(int(d.name))
            except OSError:
                continue
    return pids


def _gone(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().split(") ")[-1][:1] == "Z"  # A zombie has ended; only its reaper is late.
    except OSError:
        return True


@needs_mpi
def test_two_launchers_form_one_job_over_loopback():
    port, before = _free_port(), _ompi_servers()
    results = _wait(_node(0, port, "multinode.py"), _node(1, port, "multinode.py"))
    text = "\n".join(o + e for _, o, e in results)
    assert [rc for rc, _, _ in results] == [0, 0], text
    assert "node 0 of 2 joined; ranks 0..0 of 2" in results[0][2], text
    assert "node 1 of 2 joined; ranks 1..1 of 2" in results[1][2], text
    for r, (_, out, _) in enumerate(results):  # Node r runs global rank r, with torchrun's environment.
        for what in (f"node {r} local 0 of world 2 master 127.0.0.1:{port}", "all_reduce ok", "all_gather ok",
                     "broadcast ok", "ALL OK"):
            assert f"rank {r}: {what}" in out, text
    assert "rank 1: recv ok" in results[1][1], text
    assert all(_gone(p) for p in _ompi_servers() - before), "node 0 left its ompi-server running"


@needs_mpi
@pytest.mark.slow
def test_two_launchers_of_two_ranks_with_the_token_node_0_made_up():
    port = _free_port()
    first = _node(0, port, "multinode.py", nproc=2, token=None)
    line, deadline = "", time.monotonic() + 60
    while "job token" not in line and time.monotonic() < deadline:
        line = first.stderr.readline()
    token = line.split("job token ")[1].split()[0]
    results = _wait(first, _node(1, port, "multinode.py", nproc=2, token=token))
    text = "\n".join(o + e for _, o, e in results)
    assert [rc for rc, _, _ in results] == [0, 0], text
    for r in range(4):
        assert f"rank {r}: ALL OK" in results[r // 2][1] and f"rank {r}: all_reduce ok" in text, text
    assert "rank 3: recv ok" in results[1][1], text


@needs_mpi
def test_a_node_with_the_wrong_token_is_refused_and_the_rendezvous_times_out():
    port = _free_port()
    start = time.monotonic()
    master = _node(0, port, "multinode.py", extra=("--rendezvous-timeout", "4"))
    (rc1, out1, err1), = _wait(_node(1, port, "multinode.py", token="not-the-token"))
    (rc0, out0, err0), = _wait(master)
    assert rc1 != 0 and "refused the job token" in err1, out1 + err1
    assert rc0 != 0 and "did not complete within 4 s" in err0 and "waiting for node(s) [1]" in err0, out0 + err0
    assert "ALL OK" not in out0 + out1
    assert time.monotonic() - start < 60


def test_a_node_after_0_needs_the_token_and_a_master_that_answers():
    env = {k: v for k, v in _env().items() if k != "LOOM_DIST_TOKEN"}
    cmd = [sys.executable, "-m", "loom.distributed.run", "--nnodes", "2", "--node-rank", "1", "--master",
           f"127.0.0.1:{_free_port()}", str(SCRIPTS / "multinode.py")]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "node 1 needs the job's token" in proc.stderr, proc.stderr
    start = time.monotonic()
    proc = subprocess.run(cmd[:-1] + ["--token", "x", "--rendezvous-timeout", "2", cmd[-1]], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "the rendezvous at 127.0.0.1:" in proc.stderr, proc.stderr
    assert "did not complete within 2 s" in proc.stderr and time.monotonic() - start < 30, proc.stderr


def test_every_control_plane_call_needs_the_token():
    server = ControlServer("s3cret", nnodes=1, config={"ompi_server": "uri"})
    try:
        good, bad = ControlClient(server.address, "s3cret"), ControlClient(server.address, "guess")
        for call in (lambda c: c.put("k", "v"), lambda c: c.get("k", 1.0), lambda c: c.status(0),
                     lambda c: c.join(0, 1, 2, "h", 1, 2.0)):
            with pytest.raises(ControlPlaneError, match="refused the job token"):
                call(bad)
        with grpc.insecure_channel(server.address) as channel:  # No token at all.
            with pytest.raises(grpc.RpcError) as err:
                channel.unary_unary("/loom.distributed.Control/Get")(b'{"key": "k"}', timeout=5)
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert server._kv == {} and server.nodes == {}
        good.put("k", "v")
        assert good.get("k", 1.0) == "v"
        with pytest.raises(ControlPlaneError, match="waiting for key 'other'"):
            good.get("other", 0.5)
        assert good.join(0, 1, 2, "h", 1, 2.0) == {"ompi_server": "uri", "world_size": 2, "offsets": [0],
                                                   "nprocs": [2]}
        with pytest.raises(ControlPlaneError, match="--nnodes 3, but the master expects 1"):
            good.join(0, 3, 2, "h", 1, 2.0)
        with pytest.raises(ControlPlaneError, match="node rank 0 has already joined"):
            good.join(0, 1, 2, "h", 99, 2.0)
        assert good.status(0, failure="rank 1 died") == ["node 0: rank 1 died"]
        good.close()
        bad.close()
    finally:
        server.stop()


def test_join_numbers_the_ranks_of_uneven_nodes_in_node_order():
    server = ControlServer("t", nnodes=3)
    try:
        import threading
        got = {}

        def join(node, nproc):
            got[node] = ControlClient(server.address, "t").join(node, 3, nproc, f"h{node}", node, 10.0)
        threads = [threading.Thread(target=join, args=a) for a in ((2, 1), (0, 2), (1, 3))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(20)
        assert got[0] == got[1] == got[2] == {"world_size": 6, "offsets": [0, 2, 5], "nprocs": [2, 3, 1]}
        assert server.silent_nodes(60.0) == {}
        time.sleep(0.3)
        assert sorted(server.silent_nodes(0.2)) == [0, 1, 2]
        server.report(1, done=0)
        assert sorted(server.silent_nodes(0.2)) == [0, 2]
    finally:
        server.stop()


def _job_ends_naming(tmp_path, mode: str, reason: str, extra: tuple = ()) -> None:
    port, before = _free_port(), _ompi_servers()
    results = _wait(_node(0, port, "kill_rank.py", str(tmp_path), mode, extra=extra),
                    _node(1, port, "kill_rank.py", str(tmp_path), mode, extra=extra))
    end = time.time()
    text = "\n".join(o + e for _, o, e in results)
    assert all(rc != 0 for rc, _, _ in results), text
    for _, _, err in results:  # Both launchers name the rank that failed, on node 1.
        assert "node 1: rank 1 (pid" in err and reason in err, text
    assert "passed an all_reduce" not in text
    killed_at = float((tmp_path / "killed_at").read_text())
    assert end - killed_at < 10, f"the job took {end - killed_at:.1f} s to end after the failure\n{text}"
    for r in (0, 1):
        assert _gone(int((tmp_path / f"pid{r}").read_text())), f"rank {r} is still running"
    assert all(_gone(p) for p in _ompi_servers() - before), "node 0 left its ompi-server running"


@needs_mpi
def test_killed_rank_on_another_node_ends_every_node(tmp_path):
    _job_ends_naming(tmp_path, "kill", "died without exiting")


@needs_mpi
def test_stopped_rank_on_another_node_is_found_by_its_heartbeats(tmp_path):
    _job_ends_naming(tmp_path, "stop", "sent no heartbeat", extra=("--heartbeat-timeout", "2"))


@needs_mpi
def test_killed_master_launcher_ends_every_node_and_leaves_nothing_running(tmp_path):
    port, before = _free_port(), _ompi_servers()
    extra = ("--heartbeat-timeout", "2")
    master = _node(0, port, "spin.py", str(tmp_path), extra=extra)
    other = _node(1, port, "spin.py", str(tmp_path), extra=extra)
    deadline = time.monotonic() + TIMEOUT
    while not all((tmp_path / f"pid{r}").exists() for r in (0, 1)):
        assert time.monotonic() < deadline and other.poll() is None, "the job did not start"
        time.sleep(0.1)
    time.sleep(0.5)
    master.kill()  # SIGKILL node 0's launcher: no chance to clean up.
    killed_at = time.monotonic()
    (rc, out, err), = _wait(other)
    master.communicate(timeout=30)
    assert rc != 0 and "lost the master at 127.0.0.1:" in err, out + err
    pids = [int((tmp_path / f"pid{r}").read_text()) for r in (0, 1)]
    while not all(_gone(p) for p in pids) and time.monotonic() - killed_at < 15:
        time.sleep(0.1)
    assert all(_gone(p) for p in pids), f"ranks still running {time.monotonic() - killed_at:.1f} s after the kill"
    assert time.monotonic() - killed_at < 15
    assert all(_gone(p) for p in _ompi_servers() - before), "node 0's ompi-server outlived its launcher"


@needs_mpi
@pytest.mark.slow
def test_two_node_job_resumes_bit_identical_after_a_kill(tmp_path):
    import numpy as np

    import loom.distributed.checkpoint as dcp
    from tests.distributed.test_distributed import launch
    whole, broken = tmp_path / "whole", tmp_path / "broken"
    whole.mkdir()
    broken.mkdir()
    one = launch("zero_resume.py", "train", str(whole))  # The same 2 ranks in one launcher, uninterrupted.
    assert one.returncode == 0, one.stdout + one.stderr

    def two_nodes(*args):
        port = _free_port()
        return _wait(_node(0, port, "zero_resume.py", *args), _node(1, port, "zero_resume.py", *args))
    killed = two_nodes("train", str(broken), "10")  # Rank 1, on node 1, SIGKILLs itself after step 10.
    assert all(rc != 0 for rc, _, _ in killed) and all("node 1: rank 1" in e for _, _, e in killed), killed
    assert os.path.basename(dcp.latest(broken / "ckpt")) == "step-000008"
    resumed = two_nodes("train", str(broken))
    text = "\n".join(o + e for _, o, e in resumed)
    assert [rc for rc, _, _ in resumed] == [0, 0], text
    assert "rank 0: resumed from step 8" in resumed[0][1] and "rank 1: resumed from step 8" in resumed[1][1], text
    a, b = np.load(whole / "final.npz"), np.load(broken / "final.npz")
    assert sorted(a) == sorted(b)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
