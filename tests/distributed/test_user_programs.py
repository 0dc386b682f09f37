"""Programs written as an MPI or torch.distributed user writes them (tests/distributed/scripts/user_*.py), started
the ways users start them: ``mpirun -n 2`` directly, ``python -m loom.distributed.run --nproc 2``, each rank
started on its own with torchrun's variables, and plain ``python script.py`` (a world of one). Every run is
bounded by a timeout: a hang is a failure, never a stuck test."""
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import loom

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).resolve().parent / "scripts"
TIMEOUT = 90

needs_mpi = pytest.mark.skipif(shutil.which("mpirun") is None or not loom.distributed.is_available(),
                               reason="needs Open MPI (mpirun) and mpi4py: pip install 'loom-dl[distributed]'")


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    return dict(env, PYTHONPATH=str(ROOT), LOOM_CODEGEN=os.environ.get("LOOM_CODEGEN", "0"), **extra)


def _run(cmd: list, env: dict, timeout: int = TIMEOUT) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{' '.join(map(str, cmd))} did not end within {timeout} s (a hang):\n{e.stdout}\n{e.stderr}")


def mpirun(script: str, *args: str) -> subprocess.CompletedProcess:
    """``mpirun -n 2`` as a user runs it; root needs Open MPI's two variables, loom itself needs nothing."""
    env = _env(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return _run(["mpirun", "-n", "2", "--oversubscribe", sys.executable, str(SCRIPTS / script), *args], env)


def launcher(script: str, *args: str) -> subprocess.CompletedProcess:
    return _run([sys.executable, "-m", "loom.distributed.run", "--nproc", "2", str(SCRIPTS / script), *args], _env())


def _ok(proc: subprocess.CompletedProcess, ranks: int = 2) -> str:
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "FAILED" not in out, out
    for r in range(ranks):
        assert f"rank {r}: ALL OK" in proc.stdout, out
    return out


@needs_mpi
def test_collectives_of_a_torch_program_under_plain_mpirun():
    out = _ok(mpirun("user_collectives.py"))
    for what in ("all_reduce BXOR int64", "all_reduce PRODUCT bool", "all_reduce float16",
                 "async all_reduce after wait",
                 "all_reduce of a non-contiguous column writes into its base", "an alias sees the all_reduce result",
                 "all_gather of a non-contiguous int64 input", "reduce_scatter_tensor MAX", "scatter from rank 0",
                 "scatter_object_list", "batch_isend_irecv ring", "get_rank on a group this rank is not in",
                 "broadcast from global rank 1 in a subgroup", "destroy_process_group"):
        assert f"rank 1: {what} ok" in out, what


@needs_mpi
def test_collectives_of_a_torch_program_under_the_launcher_with_the_default_backend():
    _ok(launcher("user_collectives.py", "--backend=default"))


@needs_mpi
@pytest.mark.slow  # PyTorch's torchrun starts slowly on the loaded machine.
def test_the_same_program_passes_under_pytorch_gloo():
    torch = pytest.importorskip("torch")
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).parent / "torchrun")
    assert torch.distributed.is_available()
    proc = _run([torchrun, "--standalone", "--nproc-per-node", "2", str(SCRIPTS / "user_collectives.py"),
                 "--torch"], _env(), timeout=180)
    _ok(proc)


@needs_mpi
@pytest.mark.slow  # torchrun starts slowly on the loaded machine.
def test_a_loom_program_started_by_torchrun():
    # torchrun's agent holds MASTER_PORT with its TCPStore: the ranks meet through it.
    pytest.importorskip("torch")
    torchrun = shutil.which("torchrun") or str(Path(sys.executable).parent / "torchrun")
    _ok(_run([torchrun, "--standalone", "--nproc-per-node", "2", str(SCRIPTS / "user_collectives.py")], _env(),
             timeout=180))
    proc = _run([torchrun, "--standalone", "--nproc-per-node", "2", str(SCRIPTS / "user_errors.py"), "raise"], _env(),
                timeout=180)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "ValueError: user error on rank 1" in out, out
    assert "returned although rank 1" not in out, out


@needs_mpi
def test_mistakes_one_rank_makes_raise_on_every_rank_and_the_group_goes_on():
    out = _ok(mpirun("user_errors.py", "mismatch"))
    for r in (0, 1):
        assert (f"rank {r}: shape mismatch raised DistributedError: loom.distributed.all_reduce: the ranks passed "
                "tensors that differ (rank 0: float32[3], rank 1: float32[4])") in out, out
        assert f"rank {r}: dtype mismatch raised" in out and "rank 1: int64[3]" in out, out
        assert f"rank {r}: is RuntimeError True" in out, out
        for name in ("all_gather", "gather", "scatter", "all_to_all_single", "all_to_all"):
            assert f"rank {r}: {name} mistake raised" in out, (name, out)
        assert f"rank {r}: after the errors all_reduce gives [3.0, 3.0]" in out, out
        assert f"rank {r}: after the errors all_gather gives [[0.0, 0.0], [1.0, 1.0]]" in out, out
    # The rank that did not make the mistake names the one that did, and what it was.
    assert "rank 0: gather mistake raised ShapeError: loom.distributed.gather: gather_list[0] has shape [3]" in out
    assert ("rank 1: gather mistake raised DistributedError: loom.distributed.gather: rank 0 passed arguments it "
            "could not use") in out, out


@needs_mpi
@pytest.mark.parametrize("mode", ["raise", pytest.param("exit", marks=pytest.mark.slow)])
def test_a_rank_that_raises_or_exits_ends_the_job_under_plain_mpirun(mode):
    proc = mpirun("user_errors.py", mode)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "returned although rank 1" not in out, out
    assert ("ValueError: user error on rank 1" if mode == "raise" else "rank 1 called sys.exit(3)") in out, out


@needs_mpi
@pytest.mark.slow  # The file's default tests stay under a minute.
def test_a_rank_that_calls_sys_exit_ends_the_job_under_the_launcher():
    proc = launcher("user_errors.py", "exit")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "returned although rank 1" not in out, out
    assert "rank 1" in out and "code 3" in out, out


@needs_mpi
def test_ddp_training_of_a_torch_program_equals_one_process():
    out = _ok(mpirun("user_ddp.py"))
    for what in ("sampler epoch 1 shares are disjoint and cover", "set_epoch changes the order",
                 "DDP(Adam) equals one process after 2 epochs", "ZeRO keeps the replicas equal",
                 "checkpoint round trip"):
        assert f"rank 1: {what} ok" in out, what


@needs_mpi
@pytest.mark.parametrize("how", ["default", pytest.param("env", marks=pytest.mark.slow),
                                 pytest.param("tcp", marks=pytest.mark.slow)])
def test_a_plain_python_run_is_a_world_of_one(how):
    extra = {} if how == "default" else dict(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT="29555")
    proc = _run([sys.executable, str(SCRIPTS / "user_single.py"), how], _env(**extra))
    assert proc.returncode == 0 and "ALL OK" in proc.stdout and "FAILED" not in proc.stdout, proc.stdout + proc.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def separately(script: str, *args: str, nproc: int = 2, timeout: int = TIMEOUT, tcp: bool = False) -> list:
    """Start each rank on its own, torchrun style: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set by the user
    (or, with `tcp`, none of them: the script passes ``init_method="tcp://..."``, rank and world_size)."""
    port = str(_free_port())

    def env(r):
        return _env() if tcp else _env(RANK=str(r), WORLD_SIZE=str(nproc), LOCAL_RANK=str(r),
                                       MASTER_ADDR="127.0.0.1", MASTER_PORT=port)

    def argv(r):
        return [f"--init=tcp://127.0.0.1:{port}", f"--rank={r}", f"--world={nproc}"] if tcp else []
    procs = [subprocess.Popen([sys.executable, str(SCRIPTS / script), *args, *argv(r)], cwd=ROOT, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env(r))
             for r in range(nproc)]
    done, deadline = [], time.monotonic() + timeout
    for p in procs:
        try:
            out, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            outs = [q.communicate() for q in procs]
            pytest.fail(f"the ranks did not end within {timeout} s (a hang):\n{outs}")
        done.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
    return done


@needs_mpi
@pytest.mark.parametrize("tcp", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_ranks_started_one_by_one_with_torchrun_variables_join(tcp):
    procs = separately("user_collectives.py", tcp=tcp)
    for r, p in enumerate(procs):
        assert p.returncode == 0 and f"rank {r}: ALL OK" in p.stdout, p.stdout + p.stderr
        assert "FAILED" not in p.stdout, p.stdout
    assert "rank 1: batch_isend_irecv ring ok" in procs[1].stdout


@needs_mpi
@pytest.mark.parametrize("mode", ["raise", pytest.param("exit", marks=pytest.mark.slow)])
def test_ranks_started_one_by_one_end_together_when_one_fails(mode):
    procs = separately("user_errors.py", mode)
    out = "".join(p.stdout + p.stderr for p in procs)
    assert procs[0].returncode != 0 and procs[1].returncode != 0, out
    assert "returned although rank 1" not in out, out
    assert "loom.distributed: rank 1 ended without finishing" in procs[0].stderr, out


@needs_mpi
def test_a_rank_started_alone_for_a_larger_world_says_what_is_missing():
    env = _env(RANK="1", WORLD_SIZE="2", LOOM_DIST_RDZV_TIMEOUT="2", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(_free_port()))
    proc = _run([sys.executable, str(SCRIPTS / "user_collectives.py")], env, timeout=60)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "rank 0 did not open the rendezvous at MASTER_ADDR=127.0.0.1" in proc.stderr, proc.stderr
    env = _env(WORLD_SIZE="2")  # No MASTER_ADDR/PORT: nothing to join at.
    proc = _run([sys.executable, str(SCRIPTS / "user_collectives.py")], env, timeout=60)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "WORLD_SIZE=2 but MPI started 1 process(es). This process was started on its own" in proc.stderr
    assert "python -m loom.distributed.run --nproc 2 script.py" in proc.stderr, proc.stderr
