"""``python -m loom.distributed.run``: start a script on N processes through Open MPI's ``mpirun``.

    python -m loom.distributed.run --nproc 2 train.py --epochs 3

Each process runs ``train.py`` as ``__main__`` with torchrun's environment
(RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, NODE_RANK, MASTER_ADDR,
MASTER_PORT), so `loom.distributed.init_process_group` needs no argument.
As root, Open MPI's run-as-root variables are set; ``--oversubscribe`` is
added when more processes than CPUs are asked for; processes are not bound to
cores, and each gets ``OMP_NUM_THREADS`` = CPUs / processes unless it is set.

Several machines: run the launcher once on each,

    python -m loom.distributed.run --nnodes 2 --node-rank 0 --master 10.0.0.1:29500 --nproc 4 train.py
    python -m loom.distributed.run --nnodes 2 --node-rank 1 --master 10.0.0.1:29500 --nproc 4 \
        --token <printed by node 0> train.py

Node 0 hosts the job's gRPC control plane at ``--master`` (`loom.distributed.
control`) and an ``ompi-server``; every launcher joins there with the job's
token (``--token`` or ``LOOM_DIST_TOKEN``; node 0 makes one up and prints it
when none is given), learns its ranks' global numbers, and starts its own
``mpirun`` pointed at that ``ompi-server``; the ranks then join their MPI
jobs into one communicator (`loom.distributed.rendezvous`).

Failure: the launcher watches every rank. When one dies (SIGKILL, a crash),
exits with an error, or stops sending heartbeats over the gRPC control plane
(a hung or stopped process) for ``--heartbeat-timeout`` seconds, it prints
which rank, lets Open MPI abort the job, kills whatever is left after a grace
period, and exits non-zero; nothing is left running. A rank that raises
aborts the job too (the others would otherwise wait in their next collective
forever). Across machines, a launcher reports its failure to the master, and
every other launcher ends its ranks as soon as it hears of it, naming the
rank; a launcher that stops calling the master (or loses it) fails the job
the same way.
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
# Seconds between a node's status calls to the master (which hear of other nodes' failures).
_STATUS_S = 0.25
# What a multi-machine launcher adds to its ranks' environment (forwarded by mpirun -x).
_JOB_VARS = ("LOOM_DIST_MASTER_CONTROL", "LOOM_DIST_RANK_OFFSET", "LOOM_DIST_WORLD_SIZE", "LOOM_DIST_RDZV_TIMEOUT")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m loom.distributed.run",
                                description="Run a loom.distributed script on several processes (Open MPI).")
    p.add_argument("--nproc", "--nproc-per-node", "--nproc_per_node", dest="nproc", type=int, default=1,
                   help="processes to start on this machine (default 1)")
    p.add_argument("--nnodes", type=int, default=1, help="machines in the job (exported as torchrun does)")
    p.add_argument("--node-rank", "--node_rank", dest="node_rank", type=int, default=0,
                   help="this machine's index among --nnodes")
    p.add_argument("--master", default=None, metavar="ADDR:PORT",
                   help="with --nnodes > 1, where node 0's control plane listens and the others join "
                        "(default 127.0.0.1:29500); exported as MASTER_ADDR/MASTER_PORT")
    p.add_argument("--token", default=None,
                   help="the job's secret that every control-plane call presents (default: LOOM_DIST_TOKEN, "
                        "else node 0 makes one up and prints it)")
    p.add_argument("--rendezvous-timeout", type=float, default=60.0,
                   help="seconds to wait for every node to join (default 60)")
    p.add_argument("--host", default=None, help="passed to mpirun --host (one mpirun spanning machines)")
    p.add_argument("--hostfile", default=None, help="passed to mpirun --hostfile")
    p.add_argument("--mpirun", default=None, help="the mpirun to use (default: the one on PATH)")
    p.add_argument("--mpi-arg", dest="mpi_args", action="append", default=[],
                   help="an extra argument for mpirun (repeatable)")
    p.add_argument("--heartbeat-timeout", type=float, default=10.0,
                   help="seconds without a heartbeat after which a rank counts as failed (default 10; 0: off)")
    p.add_argument("--control-host", default="127.0.0.1",
                   help="address the gRPC control plane binds to (default loopback)")
    p.add_argument("--standalone", action="store_true",
                   help="accepted for torchrun's command lines: a one-machine job is the default here")
    p.add_argument("-m", "--module", action="store_true",
                   help="run `script` as a module (python -m script), as torchrun's -m does")
    p.add_argument("script", help="the Python script (or, with -m, the module) to run on every process")
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
                 "LOOM_DIST_HEARTBEAT_S", "LOOM_DIST_ORPHAN_S") + _JOB_VARS:
        if name in env:  # -x forwards the variable to ranks on other machines too.
            cmd += ["-x", name]
    if env.get("LOOM_DIST_OMPI_SERVER"):
        cmd += ["--ompi-server", env["LOOM_DIST_OMPI_SERVER"]]
    cmd += list(opts.mpi_args)
    cmd += [sys.executable, "-m", "loom.distributed._worker"] + (["--module"] if opts.module else []) + [opts.script]
    cmd += list(opts.args)
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
    if opts.module:
        import importlib.util
        try:
            found = importlib.util.find_spec(opts.script) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            print(f"loom.distributed.run: no module {opts.script!r} importable here (-m)", file=sys.stderr)
            return 2
    elif not Path(opts.script).is_file():
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
    if opts.nnodes > 1:
        return _launch_node(opts, mpirun, env, run_dir, addr or "127.0.0.1", port or "29500")
    control = _start_control(opts, env)
    try:
        return _supervise(opts, mpirun, env, run_dir, control)
    finally:
        if control is not None:
            control.stop()


def _launch_node(opts, mpirun: str, env: dict, run_dir: Path, addr: str, port: str) -> int:
    """One node of a multi-machine job: join at the master, run this node's ranks, follow the job's fate."""
    from loom.distributed.control import ControlPlaneError
    token = opts.token or os.environ.get("LOOM_DIST_TOKEN")
    if not token and opts.node_rank > 0:
        print(f"loom.distributed.run: node {opts.node_rank} needs the job's token: pass --token (or set "
              "LOOM_DIST_TOKEN) with the one node 0 printed", file=sys.stderr)
        return 2
    if not port.isdigit():
        print(f"loom.distributed.run: --master must be ADDR:PORT, got {opts.master!r}", file=sys.stderr)
        return 2
    job = None
    signal.signal(signal.SIGTERM, _interrupt)  # Ended while joining: still stop what this launcher started.
    try:
        job = _Node(opts, mpirun, token, addr, int(port), run_dir)
        job.join(env)
        rc = _supervise(opts, mpirun, env, run_dir, job.heartbeats, job)
        job.finish(rc)
        return rc
    except ControlPlaneError as e:
        print(f"loom.distributed.run: node {opts.node_rank}: {e}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        if job is not None:
            job.close()
        shutil.rmtree(run_dir, ignore_errors=True)


class _Node:
    """This launcher's part in a multi-machine job: the master's services on node 0, a client of them elsewhere.

    Node 0 starts an ``ompi-server`` (Open MPI joins separately started
    ``mpirun`` jobs only through one) and the job's `ControlServer` at
    ``--master``, which its own ranks' heartbeats also reach. Another node
    keeps a loopback server for its ranks' heartbeats and calls the master.
    """

    def __init__(self, opts, mpirun: str, token: str | None, addr: str, port: int, run_dir: Path) -> None:
        from loom.distributed.control import ControlClient, ControlPlaneError, ControlServer, new_token
        self.opts, self.node = opts, opts.node_rank
        self.master: ControlServer | None = None
        self._ompi_server: subprocess.Popen | None = None
        self._last_check, self._contact = 0.0, time.monotonic()
        self._silence = opts.heartbeat_timeout if opts.heartbeat_timeout > 0 else 10.0
        if self.node == 0:
            if not token:
                token = new_token()
                print(f"loom.distributed.run: job token {token} (start the other nodes with --token {token})",
                      file=sys.stderr, flush=True)
            uri = self._start_ompi_server(mpirun, run_dir)
            try:
                self.master = self.heartbeats = ControlServer(token, host=addr, port=port, nnodes=opts.nnodes,
                                                              config={"ompi_server": uri})
            except BaseException:
                self._stop_ompi_server()
                raise
        else:
            if not token:
                raise ControlPlaneError(f"node {self.node} needs the job's token (--token or LOOM_DIST_TOKEN)")
            self.heartbeats = ControlServer(token, host=opts.control_host)
        self.token: str = token
        self.address = f"{addr}:{port}"
        self.client = ControlClient(self.address, token)

    def _start_ompi_server(self, mpirun: str, run_dir: Path) -> str:
        """Start ``ompi-server`` and return its URI (what every node's ``mpirun --ompi-server`` is given)."""
        from loom.distributed.control import ControlPlaneError
        exe = shutil.which("ompi-server") or str(Path(mpirun).resolve().parent / "ompi-server")
        uri_file = run_dir / "ompi-server.uri"
        env = dict(os.environ)
        if os.geteuid() == 0:
            env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        try:
            cmd = _die_with_parent([exe, "--no-daemonize", "-r", str(uri_file)], signal.SIGKILL)
            self._ompi_server = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                                 start_new_session=True)
        except OSError as e:
            raise ControlPlaneError(f"cannot start Open MPI's ompi-server ({e}); a multi-machine job needs it "
                                    "(apt-get install openmpi-bin)") from None
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline:
            text = uri_file.read_text().strip() if uri_file.exists() else ""
            if text:
                return text
            if self._ompi_server.poll() is not None:
                break
            time.sleep(_POLL_S)
        stderr = self._ompi_server.stderr
        err = stderr.read().decode()[-300:] if stderr is not None and self._ompi_server.poll() is not None else ""
        self._stop_ompi_server()
        raise ControlPlaneError(f"ompi-server did not report its URI within 10 s {err}".strip())

    def join(self, env: dict) -> None:
        """Wait for every node at the master; put this node's part of the job into its ranks' environment."""
        import socket
        config = self.client.join(self.node, self.opts.nnodes, self.opts.nproc, socket.gethostname(), os.getpid(),
                                  self.opts.rendezvous_timeout)
        env.update(LOOM_DIST_TOKEN=self.token, LOOM_DIST_CONTROL=self.heartbeats.address,
                   LOOM_DIST_MASTER_CONTROL=self.address, LOOM_DIST_OMPI_SERVER=config["ompi_server"],
                   LOOM_DIST_RANK_OFFSET=str(config["offsets"][self.node]),
                   LOOM_DIST_WORLD_SIZE=str(config["world_size"]),
                   LOOM_DIST_RDZV_TIMEOUT=str(self.opts.rendezvous_timeout))
        if self.opts.heartbeat_timeout > 0:
            env["LOOM_DIST_HEARTBEAT_S"] = str(min(1.0, self.opts.heartbeat_timeout / 4))
            env["LOOM_DIST_ORPHAN_S"] = str(self.opts.heartbeat_timeout)
        first = config["offsets"][self.node]
        print(f"loom.distributed.run: node {self.node} of {self.opts.nnodes} joined; ranks {first}.."
              f"{first + self.opts.nproc - 1} of {config['world_size']}", file=sys.stderr, flush=True)

    def _status(self, failure: str | None = None, done: int | None = None) -> list[str]:
        """The job's failures so far, reporting ours; silent nodes and a lost master count as failures."""
        from loom.distributed.control import ControlPlaneError
        if self.master is not None:
            failures = self.master.report(self.node, failure, done)
            silent = [f"node {n} stopped calling the master {quiet:.1f} s ago (its launcher hung or died)"
                      for n, quiet in sorted(self.master.silent_nodes(self._silence).items()) if n != self.node]
            return failures + silent
        try:
            failures = self.client.status(self.node, failure, done)
            self._contact = time.monotonic()
            return failures
        except ControlPlaneError as e:
            if time.monotonic() - self._contact > self._silence:
                return [f"lost the master at {self.address} for {self._silence:g} s ({e})"]
            return []

    def others_failed(self) -> list[str]:
        """Failures reported elsewhere in the job (asked at most every `_STATUS_S` seconds)."""
        now = time.monotonic()
        if now - self._last_check < _STATUS_S:
            return []
        self._last_check = now
        return self._status()

    def failed(self, reported: list[str]) -> list[str]:
        """Tell the master about this node's failures; with them, what other nodes reported first."""
        failures = self._status(failure="; ".join(reported))
        mine = f"node {self.node}: " + "; ".join(reported)
        return [f for f in failures if f != mine] + [mine]

    def finish(self, rc: int) -> None:
        """Report this node's end; node 0 waits (bounded) until every node has ended before it stops serving."""
        if self.master is None:
            try:
                self.client.status(self.node, done=rc)
            except Exception:  # The master may be gone already; this node is done either way.
                pass
            return
        self.master.report(self.node, done=rc)
        deadline = time.monotonic() + self._silence + 5.0
        while len(self.master.done) < self.opts.nnodes and time.monotonic() < deadline:
            if self.master.silent_nodes(self._silence):
                break
            time.sleep(_POLL_S)

    def close(self) -> None:
        self.client.close()
        if self.heartbeats is not None:
            self.heartbeats.stop()
        self._stop_ompi_server()

    def _stop_ompi_server(self) -> None:
        if self._ompi_server is not None and self._ompi_server.poll() is None:
            os.killpg(self._ompi_server.pid, signal.SIGKILL)
            self._ompi_server.wait()


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
               LOOM_DIST_HEARTBEAT_S=str(min(1.0, opts.heartbeat_timeout / 4)),
               LOOM_DIST_ORPHAN_S=str(opts.heartbeat_timeout))
    return server


# Run argv[3:] with parent-death signal argv[1] set, unless the launcher (pid argv[2]) is already gone.
_PDEATHSIG = ("import ctypes, os, sys\n"
              "ctypes.CDLL(None).prctl(1, int(sys.argv[1]), 0, 0, 0)\n"  # PR_SET_PDEATHSIG = 1.
              "if os.getppid() != int(sys.argv[2]):\n    sys.exit(1)\n"
              "os.execvp(sys.argv[3], sys.argv[3:])\n")


def _die_with_parent(cmd: list[str], sig: int) -> list[str]:
    """`cmd`, made to receive `sig` when the launcher dies, even by SIGKILL (Linux; elsewhere `cmd` as is).

    A wrapper sets the signal and execs: subprocess's preexec_fn would fork a
    process whose gRPC threads are running, which gRPC does not survive.
    """
    if not sys.platform.startswith("linux"):
        return cmd
    return [sys.executable, "-c", _PDEATHSIG, str(int(sig)), str(os.getpid()), *cmd]


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _supervise(opts, mpirun: str, env: dict, run_dir: Path, control, job=None) -> int:
    """Run mpirun and watch its ranks until it ends; returns the job's exit code.

    `job` (a `_Node`, for a multi-machine job) hears of failures on other
    nodes, and is told of this node's.
    """
    # SIGTERM to the launcher takes the whole job down, as Ctrl-C does (mpirun runs in its own session).
    signal.signal(signal.SIGTERM, _interrupt)
    # A launcher killed outright takes its mpirun, and so its ranks, with it.
    proc = subprocess.Popen(_die_with_parent(_mpirun_command(opts, mpirun, env), signal.SIGTERM), env=env,
                            start_new_session=True)
    failed_at, reported = None, []
    try:
        while proc.poll() is None:
            if failed_at is None:
                reported = _failures(run_dir, control, opts.heartbeat_timeout)
                if reported and job is not None:
                    reported = job.failed(reported)
                elif job is not None:
                    reported = job.others_failed()
                    if reported:  # This node's ranks are healthy but wait on a dead peer: end them now.
                        print("loom.distributed.run: " + "; ".join(reported) + "; ending this node's ranks",
                              file=sys.stderr, flush=True)
                        _kill_leftovers(proc, run_dir)
                        break
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
        if job is not None:
            job.failed([f"node {opts.node_rank}'s launcher was interrupted"])
        shutil.rmtree(run_dir, ignore_errors=True)
        return 130
    rc = proc.wait()
    if not reported:
        reported = _failures(run_dir)
        if reported:
            if job is not None:
                reported = job.failed(reported)
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
