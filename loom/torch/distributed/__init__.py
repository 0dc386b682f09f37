"""`torch.distributed`: loom.distributed (Open MPI through mpi4py) under PyTorch's name.

Start a program with ``python -m loom.distributed.run --nproc N script.py``
(or ``mpirun -n N python script.py``); `init_process_group` then joins the
job. Without a process group, `is_initialized()` is False, so single-process
guards in a script take the single-process path. Object collectives
(``all_gather_object``, ``broadcast_object_list``) are not provided yet and
raise loom's error.
"""
from __future__ import annotations

from loom.distributed import *  # noqa: F401,F403
from loom.distributed import __all__ as _loom_all
from loom.errors import LoomError

__all__ = list(_loom_all) + ["is_mpi_available", "is_nccl_available", "is_gloo_available",
                             "is_torchelastic_launched"]


def is_mpi_available() -> bool:
    """Whether the MPI backend can be used (mpi4py is importable)."""
    from loom.distributed import is_available
    return is_available()


def is_gloo_available() -> bool:
    """"gloo" is accepted and runs on MPI, so this is `is_mpi_available()`."""
    return is_mpi_available()


def is_nccl_available() -> bool:
    """False: loom has no GPU backend on this machine."""
    return False


def is_torchelastic_launched() -> bool:
    """False: loom's launcher is ``python -m loom.distributed.run`` (torchrun is not used)."""
    return False


def _not_yet(name: str):
    def fn(*args, **kwargs):
        raise LoomError(f"loom.torch.distributed.{name}: object collectives are not provided by loom.distributed "
                        "yet; send tensors instead")
    fn.__name__ = name
    fn.__doc__ = f"Not provided yet (raises loom's error): {name}."
    return fn


all_gather_object = _not_yet("all_gather_object")
broadcast_object_list = _not_yet("broadcast_object_list")
gather_object = _not_yet("gather_object")
scatter_object_list = _not_yet("scatter_object_list")
