"""`torch.distributed`: loom.distributed (Open MPI through mpi4py) under PyTorch's name.

Start a program with ``python -m loom.distributed.run --nproc N script.py``
(or ``mpirun -n N python script.py``); `init_process_group` then joins the
job. Without a process group, `is_initialized()` is False, so single-process
guards in a script take the single-process path. Object collectives
(``all_gather_object``, ``broadcast_object_list``, ``gather_object``,
``scatter_object_list``) pickle the objects into uint8 tensors and move them
with the tensor collectives, as PyTorch's do.
"""
from __future__ import annotations

from loom.distributed import *  # noqa: F401,F403
from loom.distributed import __all__ as _loom_all
from loom.errors import LoomError

__all__ = list(_loom_all) + ["is_mpi_available", "is_nccl_available", "is_gloo_available",
                             "is_torchelastic_launched", "all_gather_object", "gather_object",
                             "broadcast_object_list", "scatter_object_list"]


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
    """Whether torchrun started this process (it sets ``TORCHELASTIC_RUN_ID``), as PyTorch tells."""
    import os
    return os.environ.get("TORCHELASTIC_RUN_ID") is not None


def _to_bytes(obj):
    import io
    import pickle

    import numpy as np

    import loom
    buf = io.BytesIO()
    pickle.Pickler(buf).dump(obj)
    return loom.tensor(np.frombuffer(buf.getvalue(), dtype=np.uint8).copy())


def _from_bytes(t, n: int):
    import pickle
    return pickle.loads(t.numpy()[:n].tobytes())


def _gathered_bytes(obj, group, op: str):
    """Every rank's pickled `obj` (as uint8 tensors, padded to one length) and each one's true length."""
    import loom
    from loom.distributed import all_gather, get_world_size
    data = _to_bytes(obj)
    n = get_world_size(group)
    sizes = [loom.zeros(1, dtype=loom.int64) for _ in range(n)]
    all_gather(sizes, loom.tensor([data.numel()], dtype=loom.int64), group=group)
    lengths = [int(x.item()) for x in sizes]
    top = max(lengths)
    padded = loom.cat([data, loom.zeros(top - data.numel(), dtype=loom.uint8)]) if data.numel() < top else data
    outs = [loom.zeros(top, dtype=loom.uint8) for _ in range(n)]
    all_gather(outs, padded, group=group)
    return outs, lengths


def all_gather_object(object_list: list, obj, group=None) -> None:
    """Fill ``object_list[r]`` with rank r's picklable `obj`, on every rank of the group."""
    from loom.distributed import get_world_size
    n = get_world_size(group)
    if not isinstance(object_list, list) or len(object_list) != n:
        raise LoomError(f"loom.torch.distributed.all_gather_object: object_list must be a list of world size "
                        f"{n} entries, got {type(object_list).__name__} of length "
                        f"{len(object_list) if hasattr(object_list, '__len__') else '?'}")
    outs, lengths = _gathered_bytes(obj, group, "all_gather_object")
    for r in range(n):
        object_list[r] = _from_bytes(outs[r], lengths[r])


def gather_object(obj, object_gather_list: list | None = None, dst: int = 0, group=None) -> None:
    """Rank `dst` gets every rank's picklable `obj` in ``object_gather_list`` (None on the other ranks)."""
    from loom.distributed import get_rank, get_world_size
    n = get_world_size(group)
    mine = get_rank() == dst
    if mine and (not isinstance(object_gather_list, list) or len(object_gather_list) != n):
        raise LoomError(f"loom.torch.distributed.gather_object: on the destination rank {dst}, "
                        f"object_gather_list must be a list of world size {n} entries")
    outs, lengths = _gathered_bytes(obj, group, "gather_object")
    if mine:
        for r in range(n):
            object_gather_list[r] = _from_bytes(outs[r], lengths[r])


def broadcast_object_list(object_list: list, src: int = 0, group=None, device=None) -> None:
    """Replace `object_list`'s entries on every rank with those of rank `src` (in place; same length)."""
    import loom
    from loom.distributed import broadcast, get_rank
    if not isinstance(object_list, list):
        raise LoomError(f"loom.torch.distributed.broadcast_object_list: object_list must be a list, got "
                        f"{type(object_list).__name__}")
    is_src = get_rank() == src
    data = _to_bytes(list(object_list)) if is_src else None
    size = loom.tensor([data.numel() if is_src else 0], dtype=loom.int64)
    broadcast(size, src=src, group=group)
    buf = data if is_src else loom.zeros(int(size.item()), dtype=loom.uint8)
    broadcast(buf, src=src, group=group)
    got = _from_bytes(buf, int(size.item()))
    if len(got) != len(object_list):
        raise LoomError(f"loom.torch.distributed.broadcast_object_list: rank {src} sent {len(got)} objects but "
                        f"this rank's object_list has {len(object_list)} entries; the lists must be equally long")
    object_list[:] = got


def scatter_object_list(scatter_object_output_list: list, scatter_object_input_list: list | None = None,
                        src: int = 0, group=None) -> None:
    """``scatter_object_output_list[0]`` on rank r becomes ``scatter_object_input_list[r]`` of rank `src`."""
    from loom.distributed import get_rank, get_world_size
    if not isinstance(scatter_object_output_list, list) or len(scatter_object_output_list) < 1:
        raise LoomError("loom.torch.distributed.scatter_object_list: scatter_object_output_list must be a "
                        "non-empty list")
    n = get_world_size(group)
    is_src = get_rank() == src
    if is_src and (scatter_object_input_list is None or len(scatter_object_input_list) != n):
        raise LoomError(f"loom.torch.distributed.scatter_object_list: on the source rank {src}, "
                        f"scatter_object_input_list must hold world size {n} objects")
    box = [list(scatter_object_input_list) if is_src else None]
    broadcast_object_list(box, src=src, group=group)
    scatter_object_output_list[0] = box[0][get_rank(group)]
