"""loom.distributed on 2 processes: each test runs a script in tests/distributed/scripts under the launcher
(``python -m loom.distributed.run --nproc 2``) or ``mpirun`` directly, in a subprocess with a timeout."""
import os
import shutil
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


def _env():
    return dict(os.environ, PYTHONPATH=str(ROOT), LOOM_CODEGEN=os.environ.get("LOOM_CODEGEN", "0"))


def launch(script: str, *args: str, nproc: int = 2, extra: tuple = ()) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "loom.distributed.run", "--nproc", str(nproc), *extra, str(SCRIPTS / script), *args]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.terminate()  # The launcher takes its ranks down on SIGTERM; nothing is left spinning.
        out, err = proc.communicate(timeout=30)
        pytest.fail(f"the job did not end within {TIMEOUT} s:\n{out}\n{err}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _ok(proc: subprocess.CompletedProcess, nproc: int = 2) -> str:
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    for r in range(nproc):
        assert f"rank {r}: ALL OK" in proc.stdout, out
    return out


def test_import_loom_does_not_import_mpi4py():
    code = "import sys, loom, loom.distributed, loom.nn.parallel; print('mpi4py' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_env(), capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.strip() == "False", out.stdout + out.stderr


@needs_mpi
def test_collectives_match_numpy_on_2_ranks():
    out = _ok(launch("collectives.py"))
    for name in ("all_reduce AVG", "broadcast", "all_gather_into_tensor", "reduce_scatter_tensor", "gather[1]",
                 "scatter", "all_to_all[1]", "all_to_all_single", "recv", "irecv", "new_group all_reduce",
                 "DistributedSampler default"):
        assert f"{name} ok" in out, name


@needs_mpi
@pytest.mark.slow
def test_collectives_match_numpy_on_4_ranks():
    out = _ok(launch("collectives.py", nproc=4), nproc=4)
    assert "rank 3: new_group non-member ok" in out and "rank 3: all_to_all[3] ok" in out


@needs_mpi
def test_script_started_by_mpirun_directly():
    env = dict(_env(), OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    cmd = ["mpirun", "-n", "2", "--oversubscribe", "--bind-to", "none", sys.executable,
           str(SCRIPTS / "collectives.py")]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    _ok(proc)


@needs_mpi
def test_pytorch_user_script_object_collectives_sampler_and_ddp():
    env = dict(_env(), OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    cmd = ["mpirun", "-n", "2", "--oversubscribe", "--bind-to", "none", sys.executable,
           str(SCRIPTS / "torch_user.py")]
    out = _ok(subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT))
    for what in ("broadcast_object_list", "all_gather_object", "gather_object", "scatter_object_list",
                 "DistributedSampler defaults", "parameters equal across ranks"):
        assert f"rank 1: {what} ok" in out, what


@needs_mpi
def test_torchrun_command_line_runs_a_module():
    # torchrun's spelling: --standalone --nproc-per-node N -m package.module args.
    cmd = [sys.executable, "-m", "loom.distributed.run", "--standalone", "--nproc-per-node", "2", "-m",
           "tests.distributed.scripts.torch_user"]
    out = _ok(subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=TIMEOUT))
    assert "rank 1: parameters equal across ranks ok" in out, out
    cmd = [sys.executable, "-m", "loom.distributed.run", "--nproc", "2", "-m", "tests.distributed.no_such_module"]
    proc = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 2 and "no module 'tests.distributed.no_such_module'" in proc.stderr, proc.stderr


@needs_mpi
def test_collective_gradients():
    _ok(launch("autograd.py"))


@needs_mpi
def test_ddp_equals_single_process_and_no_sync_accumulates():
    out = _ok(launch("ddp.py"))
    assert "ddp equals single process after 20 steps" in out and "no_sync accumulation ok" in out
    assert "rank 0: 2 of 2 buckets overlapped backward" in out  # Each all-reduce started during backward.


@needs_mpi
@pytest.mark.slow
def test_ddp_equals_single_process_on_4_ranks():
    out = _ok(launch("ddp.py", nproc=4), nproc=4)
    assert "rank 3: ddp equals single process after 20 steps" in out and "rank 3: no_sync accumulation ok" in out


def _ends_naming_rank_1(tmp_path, mode: str, reason: str, extra: tuple = ()) -> None:
    start = time.time()
    proc = launch("kill_rank.py", str(tmp_path), mode, extra=extra)
    end = time.time()
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "loom.distributed.run: rank 1" in proc.stderr and reason in proc.stderr, out
    assert "passed an all_reduce" not in out
    killed_at = float((tmp_path / "killed_at").read_text())
    assert end - killed_at < 10, f"the job took {end - killed_at:.1f} s to end after the kill\n{out}"
    assert end - start < 60
    for r in (0, 1):  # No rank is left running (a zombie waiting for its reaper has ended).
        pid = int((tmp_path / f"pid{r}").read_text())
        stat = Path(f"/proc/{pid}/stat")
        assert not stat.exists() or stat.read_text().split(") ")[-1][:1] == "Z", (r, stat.read_text())


@needs_mpi
def test_killed_rank_ends_the_job_naming_it(tmp_path):
    _ends_naming_rank_1(tmp_path, "kill", "died without exiting")


@needs_mpi
def test_hung_rank_is_found_by_missing_heartbeats(tmp_path):
    # SIGSTOP: the process lives on, so neither Open MPI nor the pid check sees it; the gRPC heartbeats stop.
    _ends_naming_rank_1(tmp_path, "stop", "sent no heartbeat", extra=("--heartbeat-timeout", "2"))


@needs_mpi
def test_rank_that_raises_aborts_the_job_naming_it():
    proc = launch("raise_rank.py")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "ValueError: rank 1 fails on purpose" in out and "passed an all_reduce" not in out, out
    assert "loom.distributed.run: rank 1 (pid" in proc.stderr and "exited with code 1" in proc.stderr, out


@needs_mpi
def test_single_process_group_and_nccl_refusal():
    code = ("import loom, loom.distributed as d\n"
            "try:\n    d.init_process_group('nccl')\nexcept d.DistributedError as e:\n    print('NCCL:', e)\n"
            "try:\n    d.init_process_group('gloo', world_size=2, rank=0)\nexcept d.DistributedError as e:\n"
            "    print('WS:', e)\n"
            "d.init_process_group('gloo')\nt = loom.ones(2)\nd.all_reduce(t, op=d.ReduceOp.AVG)\n"
            "print('WORLD', d.get_rank(), d.get_world_size(), t.tolist())\n")
    env = dict(_env(), OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60)
    assert "WORLD 0 1 [1.0, 1.0]" in proc.stdout, proc.stdout + proc.stderr
    # A torch-style world_size on a plain `python script.py` says how to start the processes.
    assert "WS: loom.distributed.init_process_group: world_size=2 but MPI says" in proc.stdout
    assert "python -m loom.distributed.run --nproc 2 script.py" in proc.stdout, proc.stdout
    assert "NCCL:" in proc.stdout and "backend 'nccl' runs NCCL through CuPy" in proc.stdout  # No CuPy here.


def test_uninitialised_group_raises_a_clear_error():
    with pytest.raises(loom.distributed.DistributedError, match="init_process_group"):
        loom.distributed.get_rank()
    with pytest.raises(loom.distributed.DistributedError, match="init_process_group"):
        loom.distributed.all_reduce(loom.ones(2))


@needs_mpi
@pytest.mark.slow
def test_ddp_example_trains():
    cmd = [sys.executable, "-m", "loom.distributed.run", "--nproc", "2", str(ROOT / "examples" / "ddp_mlp.py"),
           "--epochs", "2"]
    proc = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    losses = [float(line.split()[-1]) for line in proc.stdout.splitlines() if line.startswith("epoch")]
    assert len(losses) == 2 and losses[1] < losses[0], proc.stdout
    assert float(proc.stdout.split("test accuracy")[1].split()[0]) > 0.8, proc.stdout


@needs_mpi
def test_groups_created_and_destroyed_in_a_loop_leak_nothing_and_reinit_works():
    out = _ok(launch("group_lifecycle.py"))
    for what in ("25 group cycles leak nothing", "destroyed group refuses", "25 init/destroy cycles"):
        assert f"rank 1: {what} ok" in out, what


@needs_mpi
@pytest.mark.slow
def test_group_lifecycle_with_a_2x2_mesh_on_4_ranks():
    out = _ok(launch("group_lifecycle.py", nproc=4), nproc=4)
    assert "rank 3: 25 group cycles leak nothing ok" in out, out


def _plain_mpirun(nproc: int) -> subprocess.CompletedProcess:
    """``mpirun -np N --oversubscribe python plain_mpirun.py`` with no loom variable in the environment
    (PYTHONPATH stands for an installed loom)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOM_")}
    env.update(PYTHONPATH=str(ROOT), OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    cmd = ["mpirun", "-np", str(nproc), "--oversubscribe", sys.executable, str(SCRIPTS / "plain_mpirun.py")]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT)


@needs_mpi
def test_plain_mpirun_script_and_clear_errors_for_tensors_that_differ_between_ranks():
    out = _ok(_plain_mpirun(2))
    for what in ("all_reduce", "broadcast", "all_gather", "reduce_scatter_tensor", "send/recv",
                 "all_reduce bool MAX (or)", "all_reduce bool MIN (and)", "all_reduce float16", "all_to_all_single",
                 "mpi4py allreduce beside loom", "monitored_barrier without the launcher",
                 "average of a bool tensor refused",
                 "differentiable all_gather of different shapes refused",
                 "differentiable all_reduce of different shapes refused", "graph recv of a shorter message refused",
                 "all_reduce of different shapes refused", "broadcast of different dtypes refused",
                 "recv of a shorter message refused", "recv of a longer message refused",
                 "all_reduce after the refusals"):
        assert f"rank 1: {what} ok" in out, what


@needs_mpi
@pytest.mark.slow
def test_plain_mpirun_script_on_4_ranks():
    out = _ok(_plain_mpirun(4), nproc=4)
    assert "rank 3: all_reduce of different shapes refused ok" in out, out


@needs_mpi
@pytest.mark.slow  # PyTorch under torchrun and loom under its launcher: about 40 s on the loaded machine.
def test_a_torch_distributed_program_gives_pytorchs_numbers(tmp_path):
    import numpy as np
    script = str(SCRIPTS / "torch_program.py")
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", script, "torch", str(tmp_path)]
    ran = subprocess.run(torchrun, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=TIMEOUT)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    _ok(launch("torch_program.py", "loom", str(tmp_path)))
    for r in range(2):
        theirs, ours = np.load(tmp_path / f"torch-2-{r}.npz"), np.load(tmp_path / f"loom-2-{r}.npz")
        assert sorted(theirs) == sorted(ours) and len(theirs) >= 19, (sorted(theirs), sorted(ours))
        for k in theirs:
            np.testing.assert_allclose(ours[k], theirs[k], rtol=1e-5, atol=1e-6, err_msg=f"rank {r}: {k}")
