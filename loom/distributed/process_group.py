"""The default process group and its subgroups, over MPI communicators (mpi4py).

mpi4py is imported when a group is first created, never by ``import loom``:
loading it initialises MPI, which a single-process program does not need.
"""
from __future__ import annotations

import enum
import os
import sys
import warnings
from typing import Any, Callable, Sequence

from loom.distributed._errors import DistributedError
from loom.errors import LoomValueError


# Backends that register themselves when `loom.distributed` is imported (the NCCL one does, from
# loom.distributed.nccl), so this module never imports them: name -> module with check_available/release.
BACKENDS: dict[str, Any] = {}


class ReduceOp(enum.Enum):
    """How a reduction combines the ranks' values, as ``torch.distributed.ReduceOp``.

    ``AVG`` is the sum divided by the group's size (for integer tensors, the
    division truncates as the tensor's dtype does).
    """

    SUM = "sum"
    AVG = "avg"
    PRODUCT = "product"
    MIN = "min"
    MAX = "max"
    BAND = "band"
    BOR = "bor"
    BXOR = "bxor"


class Backend:
    """Backend names accepted by `init_process_group`: ``"mpi"``, ``"gloo"`` (runs on MPI) and ``"nccl"``.

    ``"nccl"`` needs CuPy with NCCL and a GPU (`loom.distributed.nccl`); without them it is refused.
    """

    MPI = "mpi"
    GLOO = "gloo"
    NCCL = "nccl"


def _mpi():
    """The mpi4py ``MPI`` module, imported on first use (it initialises MPI)."""
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise DistributedError("loom.distributed: mpi4py is not installed; install the extra with "
                               "`pip install 'loom-dl[distributed]'` (it needs Open MPI: "
                               "`apt-get install openmpi-bin libopenmpi-dev`)") from e
    return MPI


def is_available() -> bool:
    """Whether loom.distributed can run: True iff mpi4py (and so MPI) can be imported.

    Importing is not attempted (that would initialise MPI); the module is only looked up.
    """
    import importlib.util
    try:
        return importlib.util.find_spec("mpi4py") is not None
    except (ImportError, ValueError):
        return False


class ProcessGroup:
    """A set of ranks that run collectives together (an MPI communicator).

    Ranks passed to collectives (``src``, ``dst``) are global ranks, as in
    PyTorch; `rank` and `size` are the process's rank in this group and the
    group's size.
    """

    def __init__(self, comm: Any, ranks: Sequence[int], backend: str) -> None:
        self._comm = comm
        self._ranks = list(ranks)
        self._backend = backend
        self._asked = backend  # The name `get_backend` reports ("gloo" for a gloo request, which runs on MPI).
        self._nccl: Any = None  # Its NCCL communicator, made by loom.distributed.nccl on first use.
        # Private communicators duplicated from this one (`loom.distributed.comm.channel`), freed with it.
        self._children: list[ProcessGroup] = []
        self._parent: ProcessGroup | None = None

    def rank(self) -> int:
        """This process's rank within the group."""
        return self._comm.Get_rank()

    def size(self) -> int:
        """How many ranks the group has."""
        return len(self._ranks)

    def group_rank(self, global_rank: int, op: str) -> int:
        """The group rank of `global_rank`; raises naming `op` when it is not a member."""
        if not isinstance(global_rank, int) or global_rank not in self._ranks:
            raise DistributedError(f"loom.distributed.{op}: rank {global_rank!r} is not in the group "
                                   f"(its global ranks are {self._ranks})")
        return self._ranks.index(global_rank)

    def __repr__(self) -> str:
        return f"ProcessGroup(ranks={self._ranks}, backend={self._backend!r})"


class GroupMember:
    """Markers as in PyTorch: ``WORLD`` (the default group, once initialised) and ``NON_GROUP_MEMBER``."""

    WORLD: ProcessGroup | None = None
    NON_GROUP_MEMBER = object()


# ``torch.distributed.group``: ``group.WORLD`` is the default group.
group = GroupMember

_state: dict[str, Any] = {"world": None, "groups": []}
# Every MPI communicator loom.distributed made and has not freed, by id: what `live_communicators` counts.
_LIVE: dict[int, Any] = {}
# Called by `destroy_process_group` when the default group goes: modules above this one drop what refers to it.
_ON_DESTROY: list[Callable[[], None]] = []


def own(comm: Any) -> Any:
    """Record `comm` (a new MPI communicator) as made here, so that it is freed and counted."""
    _LIVE[id(comm)] = comm
    return comm


def free(comm: Any) -> None:
    """Free `comm`, made by `own`; a null communicator (a non-member's) is only forgotten."""
    _LIVE.pop(id(comm), None)
    MPI = sys.modules.get("mpi4py.MPI")
    if MPI is not None and MPI.Is_finalized():
        return
    if comm is not None and (MPI is None or comm != MPI.COMM_NULL):
        comm.Free()


def live_communicators() -> int:
    """How many MPI communicators loom.distributed holds now (groups, their private channels, sub-groups of
    placements); after `destroy_process_group()` it is 0, so creating and destroying groups leaks nothing."""
    return len(_LIVE)


def is_initialized() -> bool:
    """Whether `init_process_group` has run (and `destroy_process_group` has not since)."""
    return _state["world"] is not None


def _world(op: str) -> ProcessGroup:
    world = _state["world"]
    if world is None:
        raise DistributedError(f"loom.distributed.{op}: the default process group is not initialised; call "
                               "loom.distributed.init_process_group() first (launch the program with "
                               "`python -m loom.distributed.run --nproc N script.py` or `mpirun -n N`)")
    return world


def resolve(group, op: str) -> ProcessGroup | None:
    """The group a call runs on: the default one for None; None when this process is not a member."""
    if group is None or group is GroupMember.WORLD:
        return _world(op)
    if group is GroupMember.NON_GROUP_MEMBER:
        return None
    if not isinstance(group, ProcessGroup):
        raise DistributedError(f"loom.distributed.{op}: group must be a ProcessGroup from new_group() or None, "
                               f"got {type(group).__name__}")
    if group._comm is None:
        raise DistributedError(f"loom.distributed.{op}: the group {group!r} has been destroyed "
                               "(destroy_process_group); make a new one with new_group()")
    return group


def _nccl_backend():
    # Python imports the package `loom.distributed` before this module, and the package's
    # __init__ imports loom.distributed.nccl, which registers itself here.
    return BACKENDS["nccl"]


def _normalise_backend(backend) -> str:
    name = "mpi" if backend is None else str(backend).lower()
    if "nccl" in name:  # "nccl", "cuda:nccl", "cpu:gloo,cuda:nccl": device buffers over NCCL.
        _nccl_backend().check_available()  # Raises, naming what is missing (CuPy, its NCCL, a GPU).
        return "nccl"
    if name in ("mpi", "gloo", "cpu:gloo", "cpu:mpi"):
        return "mpi"
    raise DistributedError(f"loom.distributed.init_process_group: unknown backend {backend!r}; expected "
                           "'mpi' or 'gloo' (both run on Open MPI), or 'nccl' (GPU buffers, through CuPy)")


def init_process_group(backend: str | None = None, init_method: str | None = None, timeout=None,
                       world_size: int = -1, rank: int = -1, store=None, group_name: str = "",
                       pg_options=None, device_id=None) -> None:
    """Join the job's default process group, as ``torch.distributed.init_process_group``.

    The ranks and their count come from MPI: start the program with
    ``python -m loom.distributed.run --nproc N script.py`` or ``mpirun -n N
    python script.py``. A program started alone is a group of one.

    Parameters
    ----------
    backend : str, optional
        ``"mpi"`` (default) or ``"gloo"`` (run on MPI too); ``"nccl"`` adds NCCL for GPU buffers
        (`loom.distributed.nccl`; needs CuPy and a GPU, else raises saying which is missing).
    init_method : str, optional
        ``"env://"`` (the default) or ``"tcp://ADDR:PORT"``. Under ``mpirun`` or loom's launcher MPI has
        already met the ranks and it is ignored. Processes started one by one (torchrun style: RANK,
        WORLD_SIZE, MASTER_ADDR, MASTER_PORT in each, or ``tcp://`` with `rank` and `world_size`) meet there
        (`loom.distributed.rendezvous.torch_style_prepare`) and then join through MPI.
    timeout, store, group_name, pg_options, device_id
        Accepted for compatibility and ignored.
    world_size, rank : int
        If given (not -1), they must agree with what MPI reports (or, for processes started one by one, they
        say which rank this is of how many); a mismatch raises.

    Examples
    --------
    .. code-block:: python

        import loom.distributed as dist
        dist.init_process_group("gloo")
        print(dist.get_rank(), "of", dist.get_world_size())
    """
    if is_initialized():
        raise DistributedError("loom.distributed.init_process_group: trying to initialise the default process "
                               "group twice; call destroy_process_group() first")
    name = _normalise_backend(backend)
    from loom.distributed import rendezvous
    joining = rendezvous.torch_style(init_method, world_size, rank) if _state.get("base") is None else None
    if joining is not None:   # Ranks started one by one, torchrun style.
        seconds = getattr(timeout, "total_seconds", lambda: timeout)() if timeout is not None else None
        rendezvous.torch_style_prepare(*joining, float(seconds) if seconds else float(os.environ.get(
            "LOOM_DIST_RDZV_TIMEOUT", "300")))
    MPI = _mpi()
    comm = own(_base_comm(MPI).Dup())
    size, me = comm.Get_size(), comm.Get_rank()
    env_size = int(os.environ.get("WORLD_SIZE", size) or size)
    if env_size != size:
        free(comm)
        alone = ""
        if size == 1:
            alone = (" This process was started on its own: to join processes started one by one, set RANK, "
                     "WORLD_SIZE, MASTER_ADDR and MASTER_PORT in each, as torchrun does.")
        raise DistributedError(
            f"loom.distributed.init_process_group: WORLD_SIZE={env_size} but MPI started {size} process(es).{alone} "
            f"loom.distributed takes its ranks from MPI: launch with `python -m loom.distributed.run --nproc "
            f"{env_size} script.py` (with --nnodes/--node-rank/--master on each machine) or `mpirun -n {env_size} "
            "python script.py`")
    for arg, have, what in ((world_size, size, "world_size"), (rank, me, "rank")):
        if arg not in (-1, None) and arg != have:
            free(comm)
            hint = (f"; start the script on {arg} processes with `python -m loom.distributed.run --nproc {arg} "
                    f"script.py` or `mpirun -n {arg} python script.py`" if what == "world_size" and size == 1 else "")
            raise DistributedError(f"loom.distributed.init_process_group: {what}={arg} but MPI says this process "
                                   f"has {what} {have}; leave {what} at -1 to take MPI's{hint}")
    world = ProcessGroup(comm, range(size), name)
    world._asked = _asked(backend, name)
    _state["world"] = world
    GroupMember.WORLD = world
    if size > 1:
        _abort_on_uncaught_exception()


def _base_comm(MPI):
    """MPI's world, or for a job of separately launched machines, their ranks joined (once per process)."""
    if _state.get("base") is None:
        from loom.distributed.rendezvous import _TORCH, join_world, needs_join, torch_style_join
        if _TORCH:
            _state["base"] = torch_style_join(MPI)
        else:
            _state["base"] = join_world(MPI) if needs_join(MPI) else MPI.COMM_WORLD
    return _state["base"]


def _abort_on_uncaught_exception() -> None:
    """Make an uncaught exception in one rank, or its ``sys.exit`` with a failure status, end the whole job
    instead of leaving the others blocked (MPI_Finalize at exit would wait for them, and they for it)."""
    previous: Callable = sys.excepthook
    if getattr(previous, "_loom_aborts", False):
        return

    def hook(kind, value, tb):
        previous(kind, value, tb)
        sys.stderr.flush()
        _base_comm(_mpi()).Abort(1)

    hook._loom_aborts = True  # type: ignore[attr-defined]
    sys.excepthook = hook
    # SystemExit never reaches the excepthook and its status is gone by the time atexit runs, so `sys.exit`
    # records it (a bare ``raise SystemExit(1)`` is not seen; the launcher, which runs the script, sees both).
    real_exit = sys.exit

    def exit(status=None):
        _state["exit_status"] = status
        real_exit(status)

    sys.exit = exit
    import atexit
    atexit.register(_abort_on_failed_exit)


def _abort_on_failed_exit() -> None:
    status = _state.pop("exit_status", None)
    code = status if isinstance(status, int) else (0 if status is None else 1)
    MPI = sys.modules.get("mpi4py.MPI")
    if code == 0 or MPI is None or not MPI.Is_initialized() or MPI.Is_finalized():
        return
    sys.stdout.flush()
    print(f"loom.distributed: rank {_base_comm(MPI).Get_rank()} called sys.exit({status!r}); ending the job so "
          "that no other rank waits for it", file=sys.stderr, flush=True)
    _base_comm(MPI).Abort(code)


def destroy_process_group(group: ProcessGroup | None = None) -> None:
    """Free `group`'s communicators (its own, its private channels, its NCCL one), as
    ``torch.distributed.destroy_process_group``; with None (or the default group) every group and the default one,
    after which `init_process_group` may run again.

    Every member of the group calls it. A destroyed group refuses further collectives.

    Examples
    --------
    .. code-block:: python

        g = dist.new_group([0, 1])
        dist.all_reduce(t, group=g)
        dist.destroy_process_group(g)      # its MPI communicator is freed
        dist.destroy_process_group()       # everything; init_process_group() may be called again
    """
    if group is GroupMember.NON_GROUP_MEMBER:
        return
    if group is None or group is _state["world"]:
        for hook in list(_ON_DESTROY):
            hook()
        for g in _state["groups"] + ([_state["world"]] if _state["world"] is not None else []):
            _release(g)
        _state["groups"] = []
        _state["world"] = None
        GroupMember.WORLD = None
        return
    if not isinstance(group, ProcessGroup):
        raise DistributedError(f"loom.distributed.destroy_process_group: group must be a ProcessGroup from "
                               f"new_group() or None, got {type(group).__name__}")
    if group in _state["groups"]:
        _state["groups"].remove(group)
    if group._parent is not None and group in group._parent._children:
        group._parent._children.remove(group)
    _release(group)


def _release(group: ProcessGroup) -> None:
    """Free everything `group` holds: its channels, its NCCL communicator, its MPI communicator."""
    for child in group._children:
        _release(child)
    group._children = []
    if getattr(group, "_nccl", None) is not None:
        _nccl_backend().release(group)
    if group._comm is not None:
        free(group._comm)
        group._comm = None


def new_group(ranks: Sequence[int] | None = None, timeout=None, backend: str | None = None,
              pg_options=None, use_local_synchronization: bool = False):
    """A group of the given global ranks (all ranks when None), as ``torch.distributed.new_group``.

    Every rank of the default group must call it with the same `ranks`, in
    the same order of calls. A rank outside `ranks` gets
    ``GroupMember.NON_GROUP_MEMBER``, on which collectives do nothing.
    """
    world = _world("new_group")
    name = world._backend if backend is None else _normalise_backend(backend)
    members = list(range(world.size())) if ranks is None else sorted(int(r) for r in ranks)
    bad = [r for r in members if not 0 <= r < world.size()]
    if bad or len(set(members)) != len(members):
        raise DistributedError(f"loom.distributed.new_group: ranks must be distinct and in [0, {world.size()}); "
                               f"got {list(ranks) if ranks is not None else None}")
    everyone = world._comm.Get_group()
    chosen = everyone.Incl(members)
    try:
        comm = world._comm.Create_group(chosen)
    finally:  # The group handles are only needed to make the communicator.
        chosen.Free()
        everyone.Free()
    if world.rank() not in members:
        return GroupMember.NON_GROUP_MEMBER
    own(comm)
    group = ProcessGroup(comm, members, name)
    group._asked = world._asked if backend is None else _asked(backend, name)
    _state["groups"].append(group)
    return group


def get_rank(group: ProcessGroup | None = None) -> int:
    """This process's rank in `group` (the default group when None); -1 if it is not a member."""
    g = resolve(group, "get_rank")
    return -1 if g is None else g.rank()


def get_world_size(group: ProcessGroup | None = None) -> int:
    """How many ranks `group` (the default group when None) has; -1 if this process is not a member."""
    g = resolve(group, "get_world_size")
    return -1 if g is None else g.size()


def get_backend(group: ProcessGroup | None = None) -> str:
    """The backend name of `group` as it was asked for, as PyTorch reports it: ``"gloo"`` (which runs on MPI),
    ``"mpi"`` (also the default) or ``"nccl"``."""
    g = resolve(group, "get_backend")
    if g is None:
        raise DistributedError("loom.distributed.get_backend: this process is not a member of the group")
    return g._asked


def _asked(backend, name: str) -> str:
    """The backend name `get_backend` reports: "gloo" for a gloo request (run on MPI), else the backend's."""
    return "gloo" if name == "mpi" and str(backend).lower() in ("gloo", "cpu:gloo") else name


def get_global_rank(group: ProcessGroup, group_rank: int) -> int:
    """The global rank of the process that has rank `group_rank` in `group`."""
    g = resolve(group, "get_global_rank")
    if g is None or not 0 <= group_rank < g.size():
        raise DistributedError(f"loom.distributed.get_global_rank: group rank {group_rank} is not in the group")
    return g._ranks[group_rank]


def get_group_rank(group: ProcessGroup, global_rank: int) -> int:
    """The rank within `group` of the process whose global rank is `global_rank`."""
    g = resolve(group, "get_group_rank")
    if g is None:
        raise DistributedError("loom.distributed.get_group_rank: this process is not a member of the group")
    return g.group_rank(global_rank, "get_group_rank")


def get_node_local_rank(fallback_rank: int | None = None) -> int:
    """This process's rank on its machine (``LOCAL_RANK``, which the launcher sets; Open MPI's local rank under
    plain ``mpirun``), else `fallback_rank`."""
    for name in ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"):
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    if fallback_rank is not None:
        return int(fallback_rank)
    raise DistributedError("loom.distributed.get_node_local_rank: LOCAL_RANK is not set (start the program with "
                           "`python -m loom.distributed.run`), and no fallback_rank was given")


def is_backend_available(backend: str) -> bool:
    """Whether `backend` can be used here: ``"mpi"`` and ``"gloo"`` need mpi4py, ``"nccl"`` CuPy's NCCL and a GPU."""
    name = str(backend).lower()
    if "nccl" in name:
        try:
            _nccl_backend().check_available()
        except DistributedError:
            return False
        return True
    return name in ("mpi", "gloo", "cpu:gloo", "cpu:mpi") and is_available()


def get_process_group_ranks(group: ProcessGroup) -> list[int]:
    """The global ranks that make up `group`, in group-rank order."""
    g = resolve(group, "get_process_group_ranks")
    if g is None:
        raise DistributedError("loom.distributed.get_process_group_ranks: this process is not a member")
    return list(g._ranks)


def not_member_warning(op: str) -> None:
    """PyTorch warns, and does nothing, when a collective runs on a group the process is not in."""
    warnings.warn(f"loom.distributed.{op}: this process is not a member of the group; nothing done",
                  stacklevel=3)


def check_rank_arg(value, name: str, op: str) -> int:
    """Validate a user-given global rank argument."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise LoomValueError(f"loom.distributed.{op}: {name} must be an int rank, got {value!r}")
    return value
