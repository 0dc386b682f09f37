"""Collectives and point-to-point messages on loom tensors, over MPI, with PyTorch's signatures.

Each call realises its tensors, runs the MPI operation on a NumPy copy of
their values (MPI's buffer interface), and writes the result back into the
destination tensors in place (``copy_`` under ``no_grad``), so every alias and
view of a destination sees it, as in PyTorch. With ``async_op=True`` the MPI
operation is started non-blocking and a `Work` is returned; the destination
tensors receive their values when ``wait()`` is called.

Float16 values travel as float32 (MPI has no half type); bfloat16 tensors are
read as float32 already. Ranks given as ``src``/``dst`` are global ranks.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from loom.autograd.grad_mode import no_grad
from loom.distributed.comm import agree
from loom.distributed.process_group import (
    DistributedError, ProcessGroup, ReduceOp, _mpi, check_rank_arg, not_member_warning, resolve,
)
from loom.errors import LoomError, LoomTypeError, ShapeError, fmt_shape


class Work:
    """A started operation, as ``torch.distributed.Work``: `wait` finishes it and fills its outputs."""

    def __init__(self, requests: list, finish: Callable[[], object] | None = None, statuses: list | None = None,
                 keep: object = None):
        self._requests = requests
        self._statuses = statuses
        self._keep = keep  # Buffers MPI still reads from or writes into until the requests complete.
        self._finish = finish
        self._done = False
        self._result: object = None

    def _complete(self) -> None:
        self._done = True
        if self._finish is not None:
            self._result = self._finish()

    def wait(self, timeout=None) -> bool:
        """Block until the operation is done and its output tensors hold the result; returns True."""
        if not self._done:
            if self._requests:
                MPI = _mpi()
                try:
                    MPI.Request.Waitall(self._requests, self._statuses)
                except MPI.Exception as e:
                    if e.Get_error_class() != MPI.ERR_TRUNCATE:
                        raise
                    raise DistributedError("loom.distributed: a message is larger than the tensor receiving it; the "
                                           "sender and receiver must use tensors of the same shape and dtype") from None
            self._complete()
        return True

    def is_completed(self) -> bool:
        """Whether the operation has finished (testing it does not block)."""
        if not self._done and (not self._requests or _mpi().Request.Testall(self._requests, self._statuses)):
            self._complete()
        return self._done

    def is_success(self) -> bool:
        """Whether the operation finished without error (errors raise in `wait`)."""
        return self._done

    def result(self):
        """What the operation produced (the sender's rank for a receive), after `wait`."""
        self.wait()
        return self._result


def _check_tensor(t, name: str, op: str):
    from loom.tensor import Tensor
    if not isinstance(t, Tensor):
        raise LoomTypeError(f"loom.distributed.{op}: {name} must be a loom Tensor, got {type(t).__name__}")
    return t


def _read(t, name: str, op: str) -> np.ndarray:
    """A private C-contiguous copy of `t`'s value in a dtype MPI can carry."""
    _check_tensor(t, name, op)
    a = t.detach().numpy()
    dtype = np.float32 if a.dtype == np.float16 else a.dtype
    return np.array(a, dtype=dtype, order="C", copy=True)


def _empty_like(t, name: str, op: str) -> np.ndarray:
    _check_tensor(t, name, op)
    dtype = t.dtype.np
    if dtype == np.float16 or t.dtype.name == "bfloat16":
        dtype = np.dtype(np.float32)
    return np.empty(tuple(t.shape), dtype=dtype)


def _write(t, values: np.ndarray) -> None:
    """Write `values` into `t` in place; every alias of `t` sees the new value."""
    from loom.tensor import tensor
    with no_grad():
        t.copy_(tensor(np.asarray(values).reshape(tuple(t.shape)), dtype=t.dtype))


def _mpi_op(op, name: str):
    MPI = _mpi()
    table = {ReduceOp.SUM: MPI.SUM, ReduceOp.AVG: MPI.SUM, ReduceOp.PRODUCT: MPI.PROD, ReduceOp.MIN: MPI.MIN,
             ReduceOp.MAX: MPI.MAX, ReduceOp.BAND: MPI.BAND, ReduceOp.BOR: MPI.BOR, ReduceOp.BXOR: MPI.BXOR}
    if op not in table:
        raise DistributedError(f"loom.distributed.{name}: op must be a loom.distributed.ReduceOp, got {op!r}")
    return table[op]


def _reduction(bufs: list, op, name: str) -> tuple[list, object]:
    """The buffers as MPI reduces them and the MPI operation: bool values travel as bytes, with SUM, MAX and
    BOR as a logical or, MIN, PRODUCT and BAND as a logical and (MPI defines no MAX on its bool type)."""
    mpi_op = _mpi_op(op, name)
    if not any(b is not None and b.dtype == np.bool_ for b in bufs):
        return bufs, mpi_op
    if op is ReduceOp.AVG:
        raise DistributedError(f"loom.distributed.{name}: cannot average a bool tensor; use ReduceOp.SUM or MAX "
                               "(a logical or) or MIN (a logical and), or cast it to an integer dtype")
    MPI = _mpi()
    logical = {ReduceOp.SUM: MPI.MAX, ReduceOp.MAX: MPI.MAX, ReduceOp.BOR: MPI.MAX, ReduceOp.MIN: MPI.MIN,
               ReduceOp.PRODUCT: MPI.MIN, ReduceOp.BAND: MPI.MIN, ReduceOp.BXOR: MPI.BXOR}
    return [None if b is None else b.view(np.uint8) for b in bufs], logical[op]


def _average(a: np.ndarray, op, size: int) -> np.ndarray:
    if op is not ReduceOp.AVG:
        return a
    return (a / size).astype(a.dtype) if a.dtype.kind == "f" else (a // size).astype(a.dtype)


def _launch(request, finish: Callable[[], object] | None, async_op: bool, keep: object = None):
    """Wrap a started MPI request: returned as a `Work` with ``async_op``, else waited for here.

    `keep` holds the input buffers the request still reads until it completes.
    """
    work = Work([request], finish, keep=keep)
    if async_op:
        return work
    work.wait()
    return None


def _same_shape(t, ref, what: str, op: str) -> None:
    if tuple(t.shape) != tuple(ref.shape):
        raise ShapeError(f"loom.distributed.{op}: {what} has shape {fmt_shape(t.shape)} but the input has "
                         f"shape {fmt_shape(ref.shape)}")


class _Local:
    """Holds this rank's error in a collective's arguments instead of raising it at once: `_agree` then raises on
    every rank together, so a rank whose call was wrong never leaves the others waiting in the collective."""

    def __init__(self) -> None:
        self.problem: LoomError | None = None

    def __enter__(self) -> "_Local":
        return self

    def __exit__(self, kind, value, tb) -> bool:
        if isinstance(value, LoomError):
            self.problem = value
            return True
        return False


def _agree(g: ProcessGroup, t, what: str, op: str, shape: tuple | None | bool = True,
           local: _Local | None = None) -> None:
    """Check that every rank of `g` passed a tensor of one shape and dtype (`loom.distributed.comm.agree`), and
    that no rank found an error in its arguments (`local`). `shape`: True for the tensor's whole shape, a tuple
    for the part that must agree, None for the dtype alone."""
    from loom.tensor import Tensor
    if isinstance(t, Tensor):
        mine = (tuple(t.shape) if shape is True else shape, t.dtype.name)
    else:
        mine = (None, type(t).__name__)
    part = "dtype" if shape is None else ("shape and dtype" if shape is True else "trailing shape and dtype")
    agree(g, mine, op, what, part, None if local is None else local.problem)


def _root(g: ProcessGroup, rank, group_rank, name: str, op: str) -> int:
    """The group rank of a root or peer given as a global rank (`name`) or, PyTorch 2.5's way, as
    ``group_<name>`` (a rank within `g`)."""
    if group_rank is not None:
        if rank is not None:
            raise DistributedError(f"loom.distributed.{op}: give either {name} or group_{name}, not both")
        if isinstance(group_rank, bool) or not isinstance(group_rank, int) or not 0 <= group_rank < g.size():
            raise DistributedError(f"loom.distributed.{op}: group_{name} must be a rank in [0, {g.size()}) of the "
                                   f"group, got {group_rank!r}")
        return group_rank
    if rank is None:
        raise DistributedError(f"loom.distributed.{op}: {name} is required (a global rank; or group_{name}, a "
                               "rank within the group)")
    return g.group_rank(check_rank_arg(rank, name, op), op)


def _list_of(tensors, n: int, name: str, op: str) -> list:
    if not isinstance(tensors, (list, tuple)) or len(tensors) != n:
        got = len(tensors) if isinstance(tensors, (list, tuple)) else type(tensors).__name__
        raise DistributedError(f"loom.distributed.{op}: {name} must be a list of {n} tensors (one per rank of the "
                               f"group), got {got}")
    return [_check_tensor(t, f"{name}[{k}]", op) for k, t in enumerate(tensors)]


def all_reduce(tensor, op: ReduceOp = ReduceOp.SUM, group: ProcessGroup | None = None, async_op: bool = False):
    """Reduce `tensor` across the group's ranks; every rank gets the result in `tensor` (in place).

    Examples
    --------
    .. code-block:: python

        t = loom.ones(3) * (dist.get_rank() + 1)
        dist.all_reduce(t)                       # on 2 ranks: [3., 3., 3.] everywhere
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
    """
    g = resolve(group, "all_reduce")
    if g is None:
        return not_member_warning("all_reduce")
    with _Local() as local:
        buf = _read(tensor, "tensor", "all_reduce")
    _agree(g, tensor, "tensor", "all_reduce", local=local)
    (wire,), mpi_op = _reduction([buf], op, "all_reduce")
    req = g._comm.Iallreduce(_mpi().IN_PLACE, wire, mpi_op)
    return _launch(req, lambda: _write(tensor, _average(buf, op, g.size())), async_op)


def broadcast(tensor, src: int | None = None, group: ProcessGroup | None = None, async_op: bool = False,
              group_src: int | None = None):
    """Copy `tensor` of global rank `src` into `tensor` on every other rank of the group (in place)."""
    g = resolve(group, "broadcast")
    if g is None:
        return not_member_warning("broadcast")
    root = _root(g, src, group_src, "src", "broadcast")
    with _Local() as local:
        buf = _read(tensor, "tensor", "broadcast")
    _agree(g, tensor, "tensor", "broadcast", local=local)
    req = g._comm.Ibcast(buf, root=root)
    return _launch(req, lambda: _write(tensor, buf) if g.rank() != root else None, async_op)


def all_gather(tensor_list: list, tensor, group: ProcessGroup | None = None, async_op: bool = False):
    """Fill ``tensor_list[r]`` with rank r's `tensor`, on every rank (each list entry written in place)."""
    g = resolve(group, "all_gather")
    if g is None:
        return not_member_warning("all_gather")
    with _Local() as local:
        outs = _list_of(tensor_list, g.size(), "tensor_list", "all_gather")
        send = _read(tensor, "tensor", "all_gather")
        for k, o in enumerate(outs):
            _same_shape(o, tensor, f"tensor_list[{k}]", "all_gather")
    _agree(g, tensor, "tensor", "all_gather", local=local)
    recv = np.empty((g.size(),) + send.shape, send.dtype)
    req = g._comm.Iallgather(send, recv)

    def finish():
        for k, o in enumerate(outs):
            _write(o, recv[k])
    return _launch(req, finish, async_op, keep=send)


def all_gather_into_tensor(output_tensor, input_tensor, group: ProcessGroup | None = None, async_op: bool = False):
    """Concatenate every rank's `input_tensor` along dim 0 into `output_tensor` (in place).

    `output_tensor` has ``world_size`` times the input's elements: shape
    ``(world_size * n, ...)`` or ``(world_size, n, ...)``.
    """
    g = resolve(group, "all_gather_into_tensor")
    if g is None:
        return not_member_warning("all_gather_into_tensor")
    with _Local() as local:
        send = _read(input_tensor, "input_tensor", "all_gather_into_tensor")
        _check_tensor(output_tensor, "output_tensor", "all_gather_into_tensor")
        if output_tensor.numel() != send.size * g.size():
            raise ShapeError(f"loom.distributed.all_gather_into_tensor: output_tensor "
                             f"{fmt_shape(output_tensor.shape)} must hold world_size ({g.size()}) times the input "
                             f"{fmt_shape(input_tensor.shape)}")
    _agree(g, input_tensor, "input_tensor", "all_gather_into_tensor", local=local)
    recv = np.empty(send.size * g.size(), send.dtype)
    req = g._comm.Iallgather(send, recv)
    return _launch(req, lambda: _write(output_tensor, recv), async_op, keep=send)


def reduce_scatter(output, input_list: list, op: ReduceOp = ReduceOp.SUM, group: ProcessGroup | None = None,
                   async_op: bool = False):
    """Reduce ``input_list[r]`` across ranks and leave the result in `output` on rank r (in place)."""
    g = resolve(group, "reduce_scatter")
    if g is None:
        return not_member_warning("reduce_scatter")
    ins: list = []
    with _Local() as local:
        ins = _list_of(input_list, g.size(), "input_list", "reduce_scatter")
        _check_tensor(output, "output", "reduce_scatter")
        for k, t in enumerate(ins):
            _same_shape(t, output, f"input_list[{k}]", "reduce_scatter")
        send = np.stack([_read(t, f"input_list[{k}]", "reduce_scatter") for k, t in enumerate(ins)])
    _agree(g, ins[0] if ins else input_list, "input_list entry", "reduce_scatter", local=local)
    recv = np.empty(send.shape[1:], send.dtype)
    (s_wire, r_wire), mpi_op = _reduction([send, recv], op, "reduce_scatter")
    req = g._comm.Ireduce_scatter_block(s_wire, r_wire, mpi_op)
    return _launch(req, lambda: _write(output, _average(recv, op, g.size())), async_op, keep=send)


def reduce_scatter_tensor(output, input, op: ReduceOp = ReduceOp.SUM, group: ProcessGroup | None = None,
                          async_op: bool = False):
    """Reduce `input` across ranks and leave chunk r of the result (dim 0 split in world_size) in `output` on rank r."""
    g = resolve(group, "reduce_scatter_tensor")
    if g is None:
        return not_member_warning("reduce_scatter_tensor")
    with _Local() as local:
        send = _read(input, "input", "reduce_scatter_tensor")
        _check_tensor(output, "output", "reduce_scatter_tensor")
        if send.size != output.numel() * g.size():
            raise ShapeError(f"loom.distributed.reduce_scatter_tensor: input {fmt_shape(input.shape)} must hold "
                             f"world_size ({g.size()}) times the output {fmt_shape(output.shape)}")
    _agree(g, input, "input", "reduce_scatter_tensor", local=local)
    recv = np.empty(output.numel(), send.dtype)
    (s_wire, r_wire), mpi_op = _reduction([send.reshape(-1), recv], op, "reduce_scatter_tensor")
    req = g._comm.Ireduce_scatter_block(s_wire, r_wire, mpi_op)
    return _launch(req, lambda: _write(output, _average(recv, op, g.size())), async_op, keep=send)


def reduce(tensor, dst: int | None = None, op: ReduceOp = ReduceOp.SUM, group: ProcessGroup | None = None,
           async_op: bool = False, group_dst: int | None = None):
    """Reduce `tensor` across ranks into `tensor` on global rank `dst` (other ranks' tensors are left as they are)."""
    g = resolve(group, "reduce")
    if g is None:
        return not_member_warning("reduce")
    root = _root(g, dst, group_dst, "dst", "reduce")
    with _Local() as local:
        send = _read(tensor, "tensor", "reduce")
    _agree(g, tensor, "tensor", "reduce", local=local)
    recv = np.empty_like(send) if g.rank() == root else None
    (s_wire, r_wire), mpi_op = _reduction([send, recv], op, "reduce")
    req = g._comm.Ireduce(s_wire, r_wire, mpi_op, root=root)
    return _launch(req, lambda: _write(tensor, _average(recv, op, g.size())) if recv is not None else None,
                   async_op, keep=send)


def gather(tensor, gather_list: list | None = None, dst: int | None = None, group: ProcessGroup | None = None,
           async_op: bool = False, group_dst: int | None = None):
    """Collect every rank's `tensor` into `gather_list` on global rank `dst` (None elsewhere)."""
    g = resolve(group, "gather")
    if g is None:
        return not_member_warning("gather")
    root = _root(g, dst if dst is not None or group_dst is not None else g._ranks[0], group_dst, "dst", "gather")
    outs = None
    with _Local() as local:
        send = _read(tensor, "tensor", "gather")
        if g.rank() == root:
            outs = _list_of(gather_list, g.size(), "gather_list", "gather")
            for k, o in enumerate(outs):
                _same_shape(o, tensor, f"gather_list[{k}]", "gather")
        elif gather_list:
            raise DistributedError("loom.distributed.gather: gather_list must be None (or empty) on ranks other "
                                   "than dst")
    _agree(g, tensor, "tensor", "gather", local=local)
    recv = np.empty((g.size(),) + send.shape, send.dtype) if outs is not None else None
    req = g._comm.Igather(send, recv, root=root)

    def finish():
        for k, o in enumerate(outs or []):
            _write(o, recv[k])
    return _launch(req, finish, async_op, keep=send)


def scatter(tensor, scatter_list: list | None = None, src: int | None = None, group: ProcessGroup | None = None,
            async_op: bool = False, group_src: int | None = None):
    """Write ``scatter_list[r]`` of global rank `src` into `tensor` on rank r (in place)."""
    g = resolve(group, "scatter")
    if g is None:
        return not_member_warning("scatter")
    root = _root(g, src if src is not None or group_src is not None else g._ranks[0], group_src, "src", "scatter")
    send = None
    with _Local() as local:
        recv = _read(tensor, "tensor", "scatter")
        if g.rank() == root:
            ins = _list_of(scatter_list, g.size(), "scatter_list", "scatter")
            for k, t in enumerate(ins):
                _same_shape(t, tensor, f"scatter_list[{k}]", "scatter")
            send = np.stack([_read(t, f"scatter_list[{k}]", "scatter")
                             for k, t in enumerate(ins)]).astype(recv.dtype)
        elif scatter_list:
            raise DistributedError("loom.distributed.scatter: scatter_list must be None (or empty) on ranks other "
                                   "than src")
    _agree(g, tensor, "tensor", "scatter", local=local)
    req = g._comm.Iscatter(send, recv, root=root)
    return _launch(req, lambda: _write(tensor, recv), async_op, keep=send)


def _alltoallv(g: ProcessGroup, sends: list[np.ndarray], recv_counts: list[int], dtype, finish_parts, async_op,
               op: str):
    # What each rank sends to this one must be what this one expects from it: one small exchange of the counts.
    coming = np.empty(g.size(), np.int64)
    g._comm.Alltoall(np.asarray([s.size for s in sends], np.int64), coming)
    with _Local() as local:
        if coming.tolist() != list(recv_counts):
            raise ShapeError(f"loom.distributed.{op}: rank {g._ranks[g.rank()]} expects {list(recv_counts)} "
                             f"elements from the ranks {g._ranks}, but they send {coming.tolist()}; the output "
                             "sizes (or split sizes) must match what the other ranks send")
    agree(g, (None, "counts"), op, "element count", problem=local.problem)
    send = np.concatenate([s.reshape(-1) for s in sends]).astype(dtype) if sends else np.empty(0, dtype)
    scounts = [s.size for s in sends]
    sdispl = np.concatenate([[0], np.cumsum(scounts)[:-1]]).astype(int).tolist()
    rdispl = np.concatenate([[0], np.cumsum(recv_counts)[:-1]]).astype(int).tolist()
    recv = np.empty(int(sum(recv_counts)), dtype)
    req = g._comm.Ialltoallv([send, (scounts, sdispl)], [recv, (list(recv_counts), rdispl)])

    def finish():
        finish_parts([recv[d:d + c] for d, c in zip(rdispl, recv_counts)])
    return _launch(req, finish, async_op, keep=send)


def all_to_all(output_tensor_list: list, input_tensor_list: list, group: ProcessGroup | None = None,
               async_op: bool = False):
    """Send ``input_tensor_list[r]`` to rank r; ``output_tensor_list[r]`` receives rank r's (in place)."""
    g = resolve(group, "all_to_all")
    if g is None:
        return not_member_warning("all_to_all")
    ins: list = []
    with _Local() as local:
        ins = _list_of(input_tensor_list, g.size(), "input_tensor_list", "all_to_all")
        outs = _list_of(output_tensor_list, g.size(), "output_tensor_list", "all_to_all")
        sends = [_read(t, f"input_tensor_list[{k}]", "all_to_all") for k, t in enumerate(ins)]
    _agree(g, ins[0] if ins else input_tensor_list, "input_tensor_list entry", "all_to_all", shape=None, local=local)
    dtype = sends[0].dtype

    def finish(parts):
        for o, p in zip(outs, parts):
            _write(o, p)
    return _alltoallv(g, sends, [o.numel() for o in outs], dtype, finish, async_op, "all_to_all")


def all_to_all_single(output, input, output_split_sizes: Sequence[int] | None = None,
                      input_split_sizes: Sequence[int] | None = None, group: ProcessGroup | None = None,
                      async_op: bool = False):
    """Split `input` along dim 0 (evenly, or by `input_split_sizes`), send part r to rank r, and concatenate
    what arrives, in rank order, into `output` (in place)."""
    g = resolve(group, "all_to_all_single")
    if g is None:
        return not_member_warning("all_to_all_single")
    def splits(sizes, t, name):
        n = t.shape[0] if len(t.shape) else 0
        if sizes is None:
            if n % g.size():
                raise ShapeError(f"loom.distributed.all_to_all_single: {name} dim 0 ({n}) is not divisible by "
                                 f"the world size {g.size()}; pass {name}_split_sizes")
            return [n // g.size()] * g.size()
        sizes = [int(s) for s in sizes]
        if len(sizes) != g.size() or sum(sizes) != n:
            raise ShapeError(f"loom.distributed.all_to_all_single: {name}_split_sizes {sizes} must have "
                             f"{g.size()} entries summing to {name} dim 0 ({n})")
        return sizes
    sin = sout = [0] * g.size()
    with _Local() as local:
        a = _read(input, "input", "all_to_all_single")
        _check_tensor(output, "output", "all_to_all_single")
        if tuple(output.shape)[1:] != tuple(input.shape)[1:]:
            raise ShapeError(f"loom.distributed.all_to_all_single: output {fmt_shape(output.shape)} and input "
                             f"{fmt_shape(input.shape)} must agree past dim 0")
        sin = splits(input_split_sizes, input, "input")
        sout = splits(output_split_sizes, output, "output")
    _agree(g, input, "input", "all_to_all_single",
           shape=tuple(input.shape)[1:] if local.problem is None else None, local=local)
    row_out = int(np.prod(tuple(output.shape)[1:], dtype=np.int64)) if len(output.shape) else 1
    bounds = np.concatenate([[0], np.cumsum(sin)]).astype(int)
    sends = [a[bounds[k]:bounds[k + 1]] for k in range(g.size())]
    return _alltoallv(g, sends, [s * row_out for s in sout], a.dtype,
                      lambda parts: _write(output, np.concatenate(parts)), async_op, "all_to_all_single")


def barrier(group: ProcessGroup | None = None, async_op: bool = False, device_ids=None, timeout=None):
    """Block until every rank of the group has reached this call."""
    g = resolve(group, "barrier")
    if g is None:
        return not_member_warning("barrier")
    return _launch(g._comm.Ibarrier(), None, async_op)


_BARRIERS: dict[tuple, int] = {}   # Group ranks -> how many monitored barriers this process has passed on it.


def monitored_barrier(group: ProcessGroup | None = None, timeout=None, wait_all_ranks: bool = False) -> None:
    """A barrier that gives up after `timeout` and names the ranks that did not arrive, as
    ``torch.distributed.monitored_barrier``.

    Under ``python -m loom.distributed.run`` it goes over the job's gRPC
    control plane (not the data plane, so a rank stuck in a collective is
    still named); every waiting rank, not only rank 0, learns the missing
    ones (`wait_all_ranks` is accepted for PyTorch's signature). In a job
    started by plain ``mpirun`` it is an MPI barrier bounded by `timeout`.

    Parameters
    ----------
    group : ProcessGroup, optional
    timeout : datetime.timedelta or float, optional
        Default 30 minutes, as PyTorch's.

    Examples
    --------
    .. code-block:: python

        dist.monitored_barrier(timeout=datetime.timedelta(seconds=60))  # raises naming a rank that is late
    """
    import time
    g = resolve(group, "monitored_barrier")
    if g is None:
        return not_member_warning("monitored_barrier")
    seconds = 1800.0 if timeout is None else float(getattr(timeout, "total_seconds", lambda: timeout)())
    ranks = tuple(g._ranks)
    count = _BARRIERS.get(ranks, 0)
    _BARRIERS[ranks] = count + 1
    from loom.distributed.control import ControlPlaneError, job_client
    client = job_client()
    me = g._ranks[g.rank()]
    if client is not None:
        try:
            client.barrier(f"barrier/{','.join(map(str, ranks))}/{count}", me, list(ranks), seconds)
        except ControlPlaneError as e:
            raise DistributedError(str(e)) from None
        finally:
            client.close()
        return None
    req = g._comm.Ibarrier()
    deadline = time.monotonic() + seconds
    while not req.Test():
        if time.monotonic() > deadline:
            raise DistributedError(f"loom.distributed.monitored_barrier: some rank of {list(ranks)} did not reach "
                                   f"the barrier within {seconds:g} s (started without loom's launcher, there is no "
                                   "control plane to say which; use `python -m loom.distributed.run`)")
        time.sleep(0.001)
    return None


def isend(tensor, dst: int | None = None, group: ProcessGroup | None = None, tag: int = 0,
          group_dst: int | None = None, _op: str = "isend") -> Work:
    """Start sending `tensor` to global rank `dst`; returns a `Work` (call ``wait()``)."""
    g = resolve(group, _op)
    if g is None:
        raise DistributedError(f"loom.distributed.{_op}: this process is not a member of the group")
    peer = _root(g, dst, group_dst, "dst", _op)
    buf = _read(tensor, "tensor", _op)
    return Work([g._comm.Isend(buf, dest=peer, tag=tag)], keep=buf)


def irecv(tensor, src: int | None = None, group: ProcessGroup | None = None, tag: int = 0,
          group_src: int | None = None) -> Work:
    """Start receiving into `tensor` from global rank `src` (any rank when None); ``wait()`` fills it.

    ``Work.result()`` gives the sender's global rank.
    """
    g = resolve(group, "irecv")
    if g is None:
        raise DistributedError("loom.distributed.irecv: this process is not a member of the group")
    MPI = _mpi()
    peer = MPI.ANY_SOURCE if src is None and group_src is None else _root(g, src, group_src, "src", "irecv")
    buf = _empty_like(tensor, "tensor", "irecv")
    status = MPI.Status()
    req = g._comm.Irecv(buf, source=peer, tag=tag)

    def finish():
        _check_received(status, buf, g, "irecv")
        _write(tensor, buf)
        return g._ranks[status.Get_source()]
    return Work([req], finish, [status])


def _check_received(status, buf: np.ndarray, g: ProcessGroup, op: str) -> None:
    """A message shorter than the receiving buffer leaves part of it unwritten: an error, not stale values."""
    got = status.Get_count(_mpi().BYTE)
    if got != buf.nbytes:
        raise DistributedError(f"loom.distributed.{op}: received {got} bytes from rank "
                               f"{g._ranks[status.Get_source()]} but the tensor holds {buf.nbytes} ({buf.dtype}"
                               f"{fmt_shape(buf.shape)}); the sender and receiver must use tensors of the same shape "
                               "and dtype")


def send(tensor, dst: int | None = None, group: ProcessGroup | None = None, tag: int = 0,
         group_dst: int | None = None) -> None:
    """Send `tensor` to global rank `dst`, blocking until the send buffer is free."""
    isend(tensor, dst, group, tag, group_dst, _op="send").wait()


def recv(tensor, src: int | None = None, group: ProcessGroup | None = None, tag: int = 0,
         group_src: int | None = None) -> int:
    """Receive into `tensor` (in place) from global rank `src`, or from any rank when None; returns the sender."""
    g = resolve(group, "recv")
    if g is None:
        raise DistributedError("loom.distributed.recv: this process is not a member of the group")
    MPI = _mpi()
    peer = MPI.ANY_SOURCE if src is None and group_src is None else _root(g, src, group_src, "src", "recv")
    buf = _empty_like(tensor, "tensor", "recv")
    status = MPI.Status()
    try:
        g._comm.Recv(buf, source=peer, tag=tag, status=status)
    except MPI.Exception as e:
        if e.Get_error_class() != MPI.ERR_TRUNCATE:
            raise
        raise DistributedError(f"loom.distributed.recv: the message from rank {src} (tag {tag}) is larger than the "
                               f"receiving tensor {tensor.dtype.name}{fmt_shape(tensor.shape)}; the sender and "
                               "receiver must use tensors of the same shape and dtype") from None
    _check_received(status, buf, g, "recv")
    _write(tensor, buf)
    return g._ranks[status.Get_source()]


class P2POp:
    """One point-to-point operation for `batch_isend_irecv`, as ``torch.distributed.P2POp``: `op` is `isend` or
    `irecv`, `peer` a global rank (or `group_peer` a rank within `group`)."""

    def __init__(self, op: Callable, tensor, peer: int | None = None, group: ProcessGroup | None = None,
                 tag: int = 0, group_peer: int | None = None) -> None:
        name = getattr(op, "__name__", "")
        if name not in ("isend", "irecv"):
            raise DistributedError(f"loom.distributed.P2POp: op must be loom.distributed.isend or irecv, got {op!r}")
        self.op, self.tensor, self.peer, self.group = op, tensor, peer, group
        self.tag, self.group_peer = tag, group_peer

    def __repr__(self) -> str:
        return f"P2POp({self.op.__name__}, peer={self.peer}, tag={self.tag})"


def batch_isend_irecv(p2p_op_list: list) -> list[Work]:
    """Start every `P2POp` of the list (all sends and receives non-blocking, so their order between ranks
    cannot deadlock) and return their `Work` handles, as ``torch.distributed.batch_isend_irecv``."""
    if not isinstance(p2p_op_list, (list, tuple)) or not all(isinstance(p, P2POp) for p in p2p_op_list):
        raise DistributedError("loom.distributed.batch_isend_irecv: expected a list of loom.distributed.P2POp, got "
                               f"{p2p_op_list!r}")
    works = []
    for p in p2p_op_list:
        if p.op.__name__ == "isend":
            works.append(isend(p.tensor, p.peer, p.group, p.tag, p.group_peer))
        else:
            works.append(irecv(p.tensor, p.peer, p.group, p.tag, p.group_peer))
    return works


# PyTorch 2.13's names for the flat forms.
all_gather_single = all_gather_into_tensor
reduce_scatter_single = reduce_scatter_tensor
