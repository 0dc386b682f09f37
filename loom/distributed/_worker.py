"""One rank of a job started by ``python -m loom.distributed.run``: set torchrun's environment, run the script.

The rank records its pid when it starts and its exit code when it ends, in the
launcher's run directory; a rank with a pid but no exit code that is gone was
killed, which is how the launcher names a dead rank.
"""
from __future__ import annotations

import os
import runpy
import sys
import traceback
from pathlib import Path


def _env_int(*names: str, default: int = 0) -> int:
    for n in names:
        if os.environ.get(n):
            return int(os.environ[n])
    return default


def _record(run_dir: Path | None, kind: str, rank: int, value: int) -> None:
    if run_dir is None:
        return
    tmp = run_dir / f".{kind}.{rank}.tmp"
    tmp.write_text(str(value))
    os.replace(tmp, run_dir / f"{kind}.{rank}")


def _abort(code: int) -> None:
    """End the whole MPI job when this rank fails after MPI started, so that no rank waits forever."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized() and mpi.COMM_WORLD.Get_size() > 1:
        sys.stdout.flush()
        sys.stderr.flush()
        mpi.COMM_WORLD.Abort(code)


def main() -> None:
    """Run ``sys.argv[1]`` as ``__main__`` with ``sys.argv[2:]`` as its arguments (``--module NAME``: the module)."""
    local = _env_int("OMPI_COMM_WORLD_LOCAL_RANK", "PMI_RANK")
    local_size = _env_int("OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_SIZE", default=1)
    world_rank = _env_int("OMPI_COMM_WORLD_RANK", "PMI_RANK")
    world_size = _env_int("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", default=1)
    nnodes, node_rank = _env_int("LOOM_DIST_NNODES", default=1), _env_int("LOOM_DIST_NODE_RANK")
    if nnodes > 1 and world_size == local_size:  # Each machine launched on its own: the rendezvous numbered it.
        world_rank = _env_int("LOOM_DIST_RANK_OFFSET", default=node_rank * local_size) + local
        world_size = _env_int("LOOM_DIST_WORLD_SIZE", default=nnodes * local_size)
    os.environ.update(RANK=str(world_rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(local),
                      LOCAL_WORLD_SIZE=str(local_size), NODE_RANK=str(node_rank), GROUP_RANK=str(node_rank))
    run_dir = Path(os.environ["LOOM_DIST_RUN_DIR"]) if os.environ.get("LOOM_DIST_RUN_DIR") else None
    _record(run_dir, "pid", world_rank, os.getpid())
    if os.environ.get("LOOM_DIST_CONTROL") and os.environ.get("LOOM_DIST_TOKEN"):
        from loom.distributed.control import start_heartbeats
        start_heartbeats(os.environ["LOOM_DIST_CONTROL"], os.environ["LOOM_DIST_TOKEN"], world_rank, os.getpid(),
                         float(os.environ.get("LOOM_DIST_HEARTBEAT_S", "1")),
                         orphan_after=float(os.environ.get("LOOM_DIST_ORPHAN_S", "0")))
    module = sys.argv[1] == "--module"   # `run -m pkg.mod`: run it as `python -m pkg.mod` would.
    if module:
        del sys.argv[1]
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path.insert(0, os.getcwd() if module else str(Path(script).resolve().parent))
    code = 0
    try:
        if module:
            runpy.run_module(script, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        code = 1
    _record(run_dir, "exit", world_rank, code)
    if code != 0:
        _abort(code)
    sys.exit(code)


if __name__ == "__main__":
    main()
