"""`torch.distributed` for a process that has no process group: loom.distributed is not available yet.

Programs import these names even when they train on one process and guard the
distributed paths with `dist.is_available()` / `dist.is_initialized()`:
both are False here, so those guards take the single-process path. Calls that
need a process group raise loom's error saying so.
"""
from __future__ import annotations

import enum

from loom.errors import LoomError

_NONE = "loom.distributed is not available yet, so there is no process group; run on one process " \
        "(the `dist.is_initialized()` guard of your script is False)"


def _unavailable(op: str):
    raise LoomError(f"loom.torch.distributed.{op}: {_NONE}")


def is_available() -> bool:
    return False


def is_initialized() -> bool:
    return False


def is_torchelastic_launched() -> bool:
    return False


def is_nccl_available() -> bool:
    return False


def is_gloo_available() -> bool:
    return False


def is_mpi_available() -> bool:
    return False


class ReduceOp(enum.Enum):
    SUM = "sum"
    AVG = "avg"
    PRODUCT = "product"
    MIN = "min"
    MAX = "max"
    BAND = "band"
    BOR = "bor"
    BXOR = "bxor"
    PREMUL_SUM = "premul_sum"


class Backend(str):
    """A backend name ("gloo", "nccl", "mpi")."""

    GLOO, NCCL, MPI = "gloo", "nccl", "mpi"


def _raiser(name: str):
    def fn(*args, **kwargs):
        _unavailable(name)
    fn.__name__ = name
    fn.__doc__ = f"`torch.distributed.{name}`: raises, as loom.distributed is not available yet."
    return fn


init_process_group = _raiser("init_process_group")
destroy_process_group = _raiser("destroy_process_group")
new_group = _raiser("new_group")
get_rank = _raiser("get_rank")
get_world_size = _raiser("get_world_size")
get_backend = _raiser("get_backend")
barrier = _raiser("barrier")
all_reduce = _raiser("all_reduce")
all_gather = _raiser("all_gather")
all_gather_object = _raiser("all_gather_object")
all_gather_into_tensor = _raiser("all_gather_into_tensor")
reduce = _raiser("reduce")
reduce_scatter = _raiser("reduce_scatter")
reduce_scatter_tensor = _raiser("reduce_scatter_tensor")
broadcast = _raiser("broadcast")
broadcast_object_list = _raiser("broadcast_object_list")
all_to_all = _raiser("all_to_all")
gather = _raiser("gather")
scatter = _raiser("scatter")
send = _raiser("send")
recv = _raiser("recv")
