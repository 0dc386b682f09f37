"""``python -m loom.distributed.run``: start a script on N processes through Open MPI's ``mpirun``.

    python -m loom.distributed.run --nproc 2 train.py --epochs 3

Each process runs ``train.py`` as ``__main__`` with torchrun's environment
(RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, NODE_RANK, MASTER_ADDR,
MASTER_PORT), so `loom.distributed.init_process_group` needs no argument.
As root, Open MPI's run-as-root variables are set; ``--oversubscribe`` is
added when more processes than CPUs are asked for; processes are not bound to
cores, and each gets ``OMP_NUM_THREADS`` = CPUs / processes unless it is set.

Failure: the launcher watches every rank. When one dies (SIGKILL, a crash),
exits with an error, or stops sending heartbeats over the gRPC control plane
(``loom.distributed.control``; a hung or stopped process) for
``--heartbeat-timeout`` seconds, it prints which rank, lets Open MPI abort the
job, kills whatever is left after a grace period, and exits non-zero; nothing
is left running. A rank that raises aborts the job too (the others would
otherwise wait in their next collective forever).

``--nnodes/--node-rank/--master`` are passed to the processes' environment as
torchrun does, but joining separately launched machines is not implemented:
one ``mpirun`` spanning machines is (``--host``/``--hostfile``, passed on to
mpirun).
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Seconds the launcher lets Open MPI tear the job down after a failure before killing what is left.
GRACE_S = 3.0
_POLL_S = 0.05


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m loom.distributed.run",
                                description="Run a loom.distributed script on several processes (Open MPI).")
    p.add_argument("--nproc", "--nproc-per-node", "--nproc_per_node", dest="nproc", type=int, default=1,
                   help="processes to start on this machine (default 1)")
    p.add_argument("--nnodes", type=int, default=1, help="machines in the job (exported as torchrun does)")
    p.add_argument("--node-rank", "--node_rank", dest="node_rank", type=int, default=0,
                   help="this machine's index among --nnodes")
    p.add_argument("--master", default=None, metavar="ADDR:PORT",
                   help="rendezvous address exported as MASTER_ADDR/MASTER_PORT (default 127.0.0.1:29500)")
    p.add_argument("--host", default=None, help="passed to mpirun --host (one mpirun spanning machines)")
    p.add_argument("--hostfile", default=None, help="passed to mpirun --hostfile")
    p.add_argument("--mpirun", default=None, help="the mpirun to use (default: the one on PATH)")
    p.add_argument("--mpi-arg", dest="mpi_args", action="append", default=[],
                   help="an extra argument for mpirun (repeatable)")
    p.add_argument("--heartbeat-timeout", type=float, default=10.0,
                   help="seconds without a heartbeat after which a rank counts as failed (default 10; 0: off)")
    p.add_argument("--control-host", default="127.0.0.1",
                   help="address the gRPC control plane binds to (default loopback)")
    p.add_argument("script", help="the Python script to run on every process")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    return p


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _mpirun_command(opts, mpirun: str, env: dict) -> list[str]:
    cmd = [mpirun, "-n", str(opts.nproc), "--bind-to", "none"]
    if opts.host is None and opts.hostfile is None and opts.nproc > _cpus():
        cmd.append("--oversubscribe")
    if opts.host is not None:
        cmd += ["--host", opts.host]
    if opts.hostfile is not None:
        cmd += ["--hostfile", opts.hostfile]
    for name in ("PYTHONPATH", "LOOM_DIST_RUN_DIR", "LOOM_DIST_NNODES", "LOOM_DIST_NODE_RANK", "MASTER_ADDR",
                 "MASTER_PORT", "OMP_NUM_THREADS", "LOOM_DIST_CONTROL", "LOOM_DIST_TOKEN",
                 "LOOM_DIST_HEARTBEAT_S"):
        if name in env:  # -x forwards the variable to ranks on other machines too.
            cmd += ["-x", name]
    cmd += list(opts.mpi_args)
    cmd += [sys.executable, "-m", "loom.distributed._worker", opts.script] + list(opts.args)
    return cmd


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # A zombie has exited; its parent has not reaped it yet.
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][:1] != "Z"
    except OSError:
        return True


def _ranks(run_dir: Path, prefix: str) -> dict[int, int]:
    out = {}
    for f in run_dir.glob(f"{prefix}.*"):
        try:
            out[int(f.suffix[1:])] = int(f.read_text().strip())
        except ValueError:
            continue  # Being written.
    return out


def _failures(run_dir: Path, control=None, timeout: float = 0.0) -> list[str]:
    """What went wrong so far: ranks that exited with an error code, died without exiting, or went silent.

    A rank that fails by raising records its exit code before it aborts the job, so the ranks that the abort
    then kills are consequences, not causes, and are named as such.
    """
    pids, exits = _ranks(run_dir, "pid"), _ranks(run_dir, "exit")
    errors = [f"rank {r} (pid {pids.get(r, '?')}) exited with code {code}"
              for r, code in sorted(exits.items()) if code != 0]
    dead = [r for r, pid in sorted(pids.items()) if r not in exits and not _alive(pid)]
    silent = []
    if control is not None and timeout > 0:
        silent = [f"rank {r} (pid {pid}) sent no heartbeat for {quiet:.1f} s (hung or stopped)"
                  for r, (quiet, pid) in sorted(control.silent(timeout).items()) if r not in exits and _alive(pid)]
    if errors:
        ended = [f"rank {r} was ended by the abort" for r in dead]
        return errors + silent + ended
    return [f"rank {r} (pid {pids[r]}) died without exiting (killed by a signal, e.g. SIGKILL, or crashed)"
            for r in dead] + silent


def _kill_leftovers(proc: subprocess.Popen, run_dir: Path) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    pids = [pid for pid in _ranks(run_dir, "pid").values() if _alive(pid)]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + GRACE_S  # SIGKILL is asynchronous: return once they are gone.
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(_POLL_S)


def launch(argv: list[str] | None = None) -> int:
    """Run the job described by `argv` (the command line without the program name); returns its exit code."""
    opts = _parser().parse_args(argv)
    if opts.nproc < 1 or opts.nnodes < 1 or not 0 <= opts.node_rank < opts.nnodes:
        print(f"loom.distributed.run: need --nproc >= 1, --nnodes >= 1 and 0 <= --node-rank < --nnodes; got "
              f"--nproc {opts.nproc} --nnodes {opts.nnodes} --node-rank {opts.node_rank}", file=sys.stderr)
        return 2
    if not Path(opts.script).is_file():
        print(f"loom.distributed.run: no script {opts.script!r}", file=sys.stderr)
        return 2
    mpirun = opts.mpirun or shutil.which("mpirun")
    if mpirun is None:
        print("loom.distributed.run: mpirun not found; install Open MPI (apt-get install openmpi-bin "
              "libopenmpi-dev) and `pip install 'loom-dl[distributed]'`", file=sys.stderr)
        return 2
    addr, _, port = (opts.master or "127.0.0.1:29500").rpartition(":")
    run_dir = Path(tempfile.mkdtemp(prefix="loom-dist-"))
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, LOOM_DIST_RUN_DIR=str(run_dir), LOOM_DIST_NNODES=str(opts.nnodes),
               LOOM_DIST_NODE_RANK=str(opts.node_rank), MASTER_ADDR=addr or "127.0.0.1", MASTER_PORT=port,
               PYTHONPATH=os.pathsep.join([root] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    env.setdefault("OMP_NUM_THREADS", str(max(1, _cpus() // opts.nproc)))
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    control = _start_control(opts, env)
    try:
        return _supervise(opts, mpirun, env, run_dir, control)
    finally:
        if control is not None:
            control.stop()


def _start_control(opts, env: dict):
    """The gRPC heartbeat server, or None when grpcio is missing or heartbeats are off."""
    if opts.heartbeat_timeout <= 0:
        return None
    try:
        from loom.distributed.control import ControlServer, new_token
    except ImportError:
        return None
    try:
        server = ControlServer(new_token(), host=opts.control_host)
    except ImportError:
        print("loom.distributed.run: grpcio is not installed; ranks are watched without heartbeats",
              file=sys.stderr)
        return None
    env.update(LOOM_DIST_CONTROL=server.address, LOOM_DIST_TOKEN=server.token,
               LOOM_DIST_HEARTBEAT_S=str(min(1.0, opts.heartbeat_timeout / 4)))
    return server


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _supervise(opts, mpirun: str, env: dict, run_dir: Path, control) -> int:
    """Run mpirun and watch its ranks until it ends; returns the job's exit code."""
    # SIGTERM to the launcher takes the whole job down, as Ctrl-C does (mpirun runs in its own session).
    signal.signal(signal.SIGTERM, _interrupt)
    proc = subprocess.Popen(_mpirun_command(opts, mpirun, env), env=env, start_new_session=True)
    failed_at, reported = None, []
    try:
        while proc.poll() is None:
            if failed_at is None:
                reported = _failures(run_dir, control, opts.heartbeat_timeout)
                if reported:
                    failed_at = time.monotonic()
                    print("loom.distributed.run: " + "; ".join(reported) + "; aborting the job", file=sys.stderr,
                          flush=True)
            elif time.monotonic() - failed_at > GRACE_S:
                _kill_leftovers(proc, run_dir)
            time.sleep(_POLL_S)
    except KeyboardInterrupt:
        _kill_leftovers(proc, run_dir)
        proc.wait()
        shutil.rmtree(run_dir, ignore_errors=True)
        return 130
    rc = proc.returncode
    if not reported:
        reported = _failures(run_dir)
        if reported:
            print("loom.distributed.run: " + "; ".join(reported), file=sys.stderr, flush=True)
    _kill_leftovers(proc, run_dir)  # Anything mpirun left behind (nothing, normally).
    shutil.rmtree(run_dir, ignore_errors=True)
    if reported and rc == 0:
        rc = 1
    if rc != 0 and not reported:
        print(f"loom.distributed.run: mpirun exited with code {rc}", file=sys.stderr, flush=True)
    return rc if rc >= 0 else 128 - rc


def main() -> None:
    """Command-line entry point."""
    sys.exit(launch(sys.argv[1:]))


if __name__ == "__main__":
    main()
