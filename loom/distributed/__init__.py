"""Multi-process training over Open MPI, with ``torch.distributed``'s interface.

A program written for PyTorch runs with ``import loom.distributed as dist``:
`init_process_group`, ranks and groups, collectives on loom tensors (in place,
as PyTorch's), point-to-point messages, and work handles for ``async_op=True``.
Start it with ``python -m loom.distributed.run --nproc N script.py`` or
``mpirun -n N python script.py``. mpi4py is imported by `init_process_group`,
not by ``import loom``. See docs/distributed.md.

Examples
--------
.. code-block:: python

    import loom
    import loom.distributed as dist

    dist.init_process_group("gloo")
    t = loom.ones(2) * dist.get_rank()
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
"""
from loom.distributed.collectives import (
    P2POp, Work, all_gather, all_gather_into_tensor, all_gather_single, all_reduce, all_to_all, all_to_all_single,
    barrier, batch_isend_irecv, broadcast, gather, irecv, isend, monitored_barrier, recv, reduce, reduce_scatter,
    reduce_scatter_single, reduce_scatter_tensor, scatter, send,
)
from loom.distributed import nccl as _nccl  # noqa: F401  (registers the "nccl" backend)
from loom import _upper
from loom.distributed.process_group import (
    Backend, DistributedError, GroupMember, ProcessGroup, ReduceOp, destroy_process_group, get_backend,
    get_global_rank, get_group_rank, get_node_local_rank, get_process_group_ranks, get_rank, get_world_size, group,
    init_process_group, is_available, is_backend_available, is_initialized, new_group,
)


def _compile_overlapped(*args, **kwargs):
    # Imported on first use: a compiled step holding collectives is cut into overlapping tasks.
    from loom.distributed.overlap import compile_overlapped
    return compile_overlapped(*args, **kwargs)


_upper.register(compile_overlapped=_compile_overlapped)

__all__ = [
    "init_process_group", "destroy_process_group", "is_initialized", "is_available", "get_rank", "get_world_size",
    "get_backend", "get_global_rank", "get_group_rank", "get_node_local_rank", "get_process_group_ranks",
    "is_backend_available", "new_group", "barrier", "monitored_barrier", "ProcessGroup", "group",
    "GroupMember", "Backend", "ReduceOp", "Work", "DistributedError",
    "all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor",
    "reduce", "gather", "scatter", "all_to_all", "all_to_all_single", "send", "recv", "isend", "irecv",
    "P2POp", "batch_isend_irecv", "all_gather_single", "reduce_scatter_single",
]


def explain(fn_or_plan, placement=None, **options) -> str:
    """The auto-parallel choice for a traced step on `placement`: each node's SBP signature, the collectives
    inserted, the predicted time and the alternatives rejected (see `loom.distributed.autoparallel`)."""
    from loom.distributed.autoparallel import explain as _explain
    return _explain(fn_or_plan, placement, **options)


__all__.append("explain")
