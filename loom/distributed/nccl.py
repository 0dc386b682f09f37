"""NCCL collectives on GPU buffers through CuPy (``cupy.cuda.nccl``), for process groups of backend "nccl".

``init_process_group("nccl")`` makes the default group an NCCL one: ranks and
groups still come from MPI (the launcher, ``mpirun``, the multi-machine
rendezvous), and collectives on loom tensors, which live in host memory, still
run over MPI; the functions here move device buffers over NCCL with
``torch.distributed``'s signatures. A device buffer is anything with
``__cuda_array_interface__`` (a CuPy array, a PyTorch CUDA tensor, a Numba
device array), C-contiguous, in place as in PyTorch.

Each group gets its NCCL communicator on its first NCCL call (collective over
its ranks): its first rank makes an NCCL unique id, which travels over the
job's gRPC control plane (`loom.distributed.control`, key
``nccl/<ranks>/<n>``), or over MPI when the job was started by ``mpirun``
without the launcher. Each process uses GPU ``LOCAL_RANK % device count``.
Operations are enqueued on CuPy's current stream, ordered with the work
around them as in PyTorch; ``async_op=True`` returns a `NcclWork` whose
``wait()`` blocks the host until the operation has run.

Without CuPy or without a GPU, ``init_process_group("nccl")`` raises a
`DistributedError` that says which is missing, and so does a first NCCL
collective with more processes on a machine than it has GPUs. Where no GPU is
present its tests drive it with a stand-in for CuPy's NCCL that moves host
memory over MPI (tests/distributed/test_nccl.py); on a GPU machine the same
test file runs tests/distributed/scripts/nccl_gpu.py on CuPy arrays and
PyTorch CUDA tensors (it passed on one H100 with CuPy 14.2 and NCCL 2.28).
"""
from __future__ import annotations

import os
import sys
from typing import Any, Sequence

import numpy as np

from loom.distributed.process_group import (
    BACKENDS, DistributedError, ProcessGroup, ReduceOp, check_rank_arg, not_member_warning, resolve,
)

# NumPy dtype name -> the names of NCCL's data type in cupy.cuda.nccl (newer names first).
DTYPES = {"int8": "NCCL_INT8", "uint8": "NCCL_UINT8", "int32": "NCCL_INT32", "uint32": "NCCL_UINT32",
          "int64": "NCCL_INT64", "uint64": "NCCL_UINT64", "float16": "NCCL_FLOAT16", "float32": "NCCL_FLOAT32",
          "float64": "NCCL_FLOAT64", "bfloat16": "NCCL_BFLOAT16", "bool": "NCCL_UINT8"}
# loom's reductions -> NCCL's; AVG falls back to SUM then a division where NCCL predates ncclAvg (2.10).
OPS = {ReduceOp.SUM: "NCCL_SUM", ReduceOp.PRODUCT: "NCCL_PROD", ReduceOp.MIN: "NCCL_MIN",
       ReduceOp.MAX: "NCCL_MAX", ReduceOp.AVG: "NCCL_AVG"}
# The CUDA array interface's type strings for the dtypes above ("<V2" is how bfloat16 often shows).
_TYPESTR = {"|i1": "int8", "|u1": "uint8", "<i4": "int32", "<u4": "uint32", "<i8": "int64", "<u8": "uint64",
            "<f2": "float16", "<f4": "float32", "<f8": "float64", "|b1": "bool", "<V2": "bfloat16"}
_ITEMSIZE = {"int8": 1, "uint8": 1, "bool": 1, "float16": 2, "bfloat16": 2, "int32": 4, "uint32": 4,
             "float32": 4, "int64": 8, "uint64": 8, "float64": 8}


class _CupyDriver:
    """What this module needs from CuPy: NCCL's communicator and constants, streams, events, devices."""

    def __init__(self) -> None:
        try:
            import cupy  # type: ignore[import-not-found]
            from cupy.cuda import nccl  # type: ignore[import-not-found]
        except ImportError as e:
            raise DistributedError(
                "loom.distributed: backend 'nccl' runs NCCL through CuPy, which is not installed (or has no "
                f"NCCL: {e}); install the CuPy wheel for your CUDA (e.g. `pip install cupy-cuda12x`), or use "
                "backend='mpi' / 'gloo' on CPU") from None
        if not getattr(nccl, "available", True):
            raise DistributedError("loom.distributed: backend 'nccl': this CuPy was built without NCCL; install "
                                   "a CuPy wheel that ships it (cupy-cuda11x / cupy-cuda12x)")
        try:
            count = cupy.cuda.runtime.getDeviceCount()
        except Exception as e:  # CuPy raises its CUDARuntimeError when there is no driver or no device.
            raise DistributedError(f"loom.distributed: backend 'nccl' needs a CUDA GPU; CuPy found none "
                                   f"({e})") from None
        if count < 1:
            raise DistributedError("loom.distributed: backend 'nccl' needs a CUDA GPU; CuPy found none")
        self.cupy, self.nccl, self.device_count = cupy, nccl, count

    def use_device(self, index: int) -> None:
        self.cupy.cuda.Device(index).use()

    def unique_id(self) -> tuple:
        return self.nccl.get_unique_id()

    def communicator(self, size: int, uid: tuple, rank: int) -> Any:
        # CuPy 14 takes the id as 128 bytes; earlier CuPy took a tuple of 128 signed chars.
        raw = bytes(int(b) & 0xFF for b in uid)
        try:
            return self.nccl.NcclCommunicator(size, raw, rank)
        except TypeError:
            return self.nccl.NcclCommunicator(size, tuple(uid), rank)

    def constant(self, name: str) -> int | None:
        return getattr(self.nccl, name, None)

    def stream(self) -> int:
        return self.cupy.cuda.get_current_stream().ptr

    def group_start(self) -> None:
        self.nccl.groupStart()

    def group_end(self) -> None:
        self.nccl.groupEnd()

    def record_event(self) -> Any:
        event = self.cupy.cuda.Event(block=True, disable_timing=True)
        event.record(self.cupy.cuda.get_current_stream())
        return event

    def copy(self, dst: Any, src: Any) -> None:
        """Device-to-device copy of `src`'s elements into `dst` (same count)."""
        out = self.cupy.asarray(dst)
        out[...] = self.cupy.asarray(src).reshape(out.shape)

    def divide(self, x: Any, n: int) -> None:
        """Divide in place (truncating for integers), for AVG where NCCL has no ncclAvg."""
        arr = self.cupy.asarray(x)
        if arr.dtype.kind == "f":
            arr /= n
        else:
            arr //= n

    def concat(self, xs: list) -> Any:
        """One new device buffer holding `xs`' elements one after another."""
        return self.cupy.concatenate([self.cupy.asarray(x).reshape(-1) for x in xs])


def _load_driver():
    """The CuPy driver; tests replace this function to run the module without a GPU."""
    return _CupyDriver()


_driver: dict[str, Any] = {}


def driver():
    """The loaded driver (CuPy), created on first use; raises `DistributedError` without CuPy or a GPU."""
    if "d" not in _driver:
        d = _load_driver()
        local = int(os.environ.get("LOCAL_RANK", os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0")) or 0)
        d.use_device(local % max(1, int(d.device_count)))
        _driver["d"] = d
    return _driver["d"]


def check_available() -> None:
    """Raise a `DistributedError` naming what is missing unless NCCL can run here (CuPy with NCCL, a GPU)."""
    driver()


# ------------------------------------------------------------------------------------------- id exchange
def encode_id(uid: Sequence[int] | bytes) -> str:
    """An NCCL unique id (128 bytes, or 128 signed chars from older CuPy) as hex text for the control plane."""
    if len(uid) != 128 or any(not -128 <= int(b) <= 255 for b in uid):
        raise DistributedError(f"loom.distributed.nccl: an NCCL unique id is 128 bytes, got {len(uid)} values")
    return bytes(int(b) & 0xFF for b in uid).hex()


def decode_id(text: str) -> tuple:
    """The inverse of `encode_id`: the tuple of signed chars that ``NcclCommunicator`` takes."""
    raw = bytes.fromhex(text)
    if len(raw) != 128:
        raise DistributedError(f"loom.distributed.nccl: an NCCL unique id is 128 bytes, got {len(raw)}")
    return tuple(b - 256 if b > 127 else b for b in raw)


def _exchange_id(group: ProcessGroup, key: str, make) -> tuple:
    """The group's first rank makes the id; the others receive it over gRPC, or over MPI without a launcher."""
    from loom.distributed.control import job_client
    client = job_client()
    first = group.rank() == 0
    if client is None:
        text = encode_id(make()) if first else None
        return decode_id(group._comm.bcast(text, root=0))
    try:
        if first:
            text = encode_id(make())
            client.put(key, text)
        else:
            text = client.get(key, float(os.environ.get("LOOM_DIST_RDZV_TIMEOUT", "60")))
    finally:
        client.close()
    return decode_id(text)


_made: dict[tuple, int] = {}  # Ranks -> how many NCCL communicators this process made for groups of them.


def communicator(group: ProcessGroup) -> Any:
    """The group's NCCL communicator, made on first use (every rank of the group must call this together)."""
    comm = getattr(group, "_nccl", None)
    if comm is None:
        if group._backend != "nccl":
            raise DistributedError(f"loom.distributed.nccl: the group {group!r} has backend {group._backend!r}; "
                                   "NCCL collectives need init_process_group('nccl') or new_group(backend='nccl')")
        d = driver()
        _check_one_gpu_per_process(d)
        ranks = tuple(group._ranks)
        n = _made.get(ranks, 0)
        _made[ranks] = n + 1
        key = f"nccl/{'-'.join(map(str, ranks))}/{n}"
        uid = _exchange_id(group, key, d.unique_id)
        comm = d.communicator(group.size(), uid, group.rank())
        group._nccl = comm
    return comm


def _check_one_gpu_per_process(d) -> None:
    """NCCL refuses two ranks of one communicator on one GPU: say so before NCCL's own 'invalid usage'."""
    local = os.environ.get("LOCAL_WORLD_SIZE") or os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE") or "1"
    count = int(d.device_count)
    if int(local) > count:
        raise DistributedError(
            f"loom.distributed.nccl: {local} processes run on this machine but it has {count} GPU(s); NCCL needs "
            "one GPU per process (process LOCAL_RANK uses GPU LOCAL_RANK % device count). Start at most "
            f"{count} process(es) per machine, or use backend='mpi' for host tensors")


def release(group: ProcessGroup) -> None:
    """Destroy the group's NCCL communicator, if it has one."""
    comm = getattr(group, "_nccl", None)
    if comm is not None:
        comm.destroy()
        group._nccl = None


# ------------------------------------------------------------------------------------------- buffers
class _Buffer:
    """A device buffer's address, element count, dtype and shape, read from ``__cuda_array_interface__``."""

    def __init__(self, x: Any, name: str, op: str, writable: bool = False) -> None:
        face = getattr(x, "__cuda_array_interface__", None)
        if not isinstance(face, dict):
            hint = (" (a loom tensor is in host memory: use loom.distributed's collectives, which run over MPI)"
                    if type(x).__module__.startswith("loom") else "")
            raise DistributedError(f"loom.distributed.nccl.{op}: {name} must be a GPU buffer with "
                                   f"__cuda_array_interface__ (a CuPy array, a CUDA tensor), got "
                                   f"{type(x).__name__}{hint}")
        self.shape = tuple(int(s) for s in face["shape"])
        self.count = int(np.prod(self.shape, dtype=np.int64))
        typestr = str(face["typestr"])
        dtype = _TYPESTR.get(typestr)
        if dtype is None or dtype not in DTYPES:
            raise DistributedError(f"loom.distributed.nccl.{op}: {name} has element type {typestr!r}, which NCCL "
                                   f"cannot carry; expected one of {sorted(DTYPES)}")
        self.dtype = dtype
        strides = face.get("strides")
        if strides is not None and self.count > 1:
            want, step = [], _ITEMSIZE[dtype]
            for s in reversed(self.shape):
                want.append(step)
                step *= s
            if tuple(strides) != tuple(reversed(want)):
                raise DistributedError(f"loom.distributed.nccl.{op}: {name} (shape {list(self.shape)}, strides "
                                       f"{list(strides)}) is not C-contiguous; pass a contiguous copy")
        ptr, readonly = face["data"]
        if writable and readonly:
            raise DistributedError(f"loom.distributed.nccl.{op}: {name} is read-only but receives the result")
        self.ptr = int(ptr)
        self.x = x


def nccl_dtype(dtype: str, op: str) -> int:
    """NCCL's data type for a NumPy dtype name; raises naming `op` when this NCCL lacks it."""
    value = driver().constant(DTYPES[dtype]) if dtype in DTYPES else None
    if value is None:
        raise DistributedError(f"loom.distributed.nccl.{op}: NCCL has no data type for {dtype} here "
                               f"(supported: {sorted(DTYPES)}; bfloat16 needs NCCL >= 2.10)")
    return value


def nccl_op(op: ReduceOp, name: str) -> tuple[int, bool]:
    """NCCL's reduction for `op`, and whether the sum must then be divided (AVG without ncclAvg)."""
    if not isinstance(op, ReduceOp):
        raise DistributedError(f"loom.distributed.nccl.{name}: op must be a loom.distributed.ReduceOp, got {op!r}")
    if op not in OPS:
        raise DistributedError(f"loom.distributed.nccl.{name}: NCCL has no {op.name} reduction; supported: "
                               f"{[o.name for o in OPS]}")
    value = driver().constant(OPS[op])
    if value is None and op is ReduceOp.AVG:
        return driver().constant("NCCL_SUM"), True
    return value, False


class NcclWork:
    """An enqueued NCCL operation, as ``torch.distributed.Work``: `wait` blocks until it has run on the GPU."""

    def __init__(self, event: Any, after=None) -> None:
        self._event, self._after, self._done = event, after, False

    def wait(self, timeout=None) -> bool:
        """Block the host until the operation has run; returns True."""
        if not self._done:
            self._event.synchronize()
            if self._after is not None:
                self._after()
            self._done = True
        return True

    def is_completed(self) -> bool:
        """Whether the operation has run (does not block)."""
        if not self._done and self._event.done:
            self.wait()
        return self._done

    def is_success(self) -> bool:
        """Whether the operation finished (NCCL errors raise when the call is made)."""
        return self._done


def _finish(async_op: bool, after=None):
    """Work for `async_op`; otherwise the caller's stream holds the ordering, as in PyTorch."""
    if after is not None and not async_op:
        after()
        return None
    return NcclWork(driver().record_event(), after) if async_op else None


def _group(group, op: str) -> ProcessGroup | None:
    g = resolve(group, op)
    if g is None:
        not_member_warning(op)
    return g


def _same(a: _Buffer, b: _Buffer, what: str, op: str, scale: int = 1) -> None:
    if a.dtype != b.dtype or a.count != b.count * scale:
        raise DistributedError(f"loom.distributed.nccl.{op}: {what}: expected {b.count * scale} elements of "
                               f"{b.dtype}, got {a.count} of {a.dtype} (shape {list(a.shape)})")


# ------------------------------------------------------------------------------------------- collectives
def all_reduce(tensor, op: ReduceOp = ReduceOp.SUM, group: ProcessGroup | None = None, async_op: bool = False):
    """Reduce the device buffer `tensor` over the group's ranks, in place on every rank."""
    g = _group(group, "all_reduce")
    if g is None:
        return None
    b = _Buffer(tensor, "tensor", "all_reduce", writable=True)
    code, divide = nccl_op(op, "all_reduce")
    communicator(g).allReduce(b.ptr, b.ptr, b.count, nccl_dtype(b.dtype, "all_reduce"), code, driver().stream())
    return _finish(async_op, (lambda: driver().divide(b.x, g.size())) if divide else None)


def broadcast(tensor, src: int, group: ProcessGroup | None = None, async_op: bool = False):
    """Copy global rank `src`'s device buffer `tensor` into `tensor` on every rank of the group."""
    g = _group(group, "broadcast")
    if g is None:
        return None
    root = g.group_rank(check_rank_arg(src, "src", "broadcast"), "broadcast")
    b = _Buffer(tensor, "tensor", "broadcast", writable=True)
    communicator(g).broadcast(b.ptr, b.ptr, b.count, nccl_dtype(b.dtype, "broadcast"), root, driver().stream())
    return _finish(async_op)


def all_gather_into_tensor(output_tensor, input_tensor, group: ProcessGroup | None = None, async_op: bool = False):
    """Concatenate every rank's `input_tensor` (in rank order, along dim 0) into `output_tensor`."""
    g = _group(group, "all_gather_into_tensor")
    if g is None:
        return None
    src = _Buffer(input_tensor, "input_tensor", "all_gather_into_tensor")
    out = _Buffer(output_tensor, "output_tensor", "all_gather_into_tensor", writable=True)
    _same(out, src, f"output_tensor must hold {g.size()} inputs", "all_gather_into_tensor", scale=g.size())
    communicator(g).allGather(src.ptr, out.ptr, src.count, nccl_dtype(src.dtype, "all_gather_into_tensor"),
                              driver().stream())
    return _finish(async_op)


def all_gather(tensor_list: list, tensor, group: ProcessGroup | None = None, async_op: bool = False):
    """Fill ``tensor_list[r]`` with rank r's `tensor` on every rank (one send/receive per peer, grouped)."""
    g = _group(group, "all_gather")
    if g is None:
        return None
    src = _Buffer(tensor, "tensor", "all_gather")
    outs = _list(tensor_list, g.size(), "tensor_list", "all_gather", like=src, writable=True)
    _exchange(g, [src] * g.size(), outs, "all_gather")
    return _finish(async_op)


def reduce_scatter_tensor(output, input, op: ReduceOp = ReduceOp.SUM, group: ProcessGroup | None = None,
                          async_op: bool = False):
    """Reduce `input` (the group's size times `output`'s elements) over ranks; rank r gets the r-th block."""
    g = _group(group, "reduce_scatter_tensor")
    if g is None:
        return None
    src = _Buffer(input, "input", "reduce_scatter_tensor")
    out = _Buffer(output, "output", "reduce_scatter_tensor", writable=True)
    _same(src, out, f"input must hold {g.size()} outputs", "reduce_scatter_tensor", scale=g.size())
    code, divide = nccl_op(op, "reduce_scatter_tensor")
    communicator(g).reduceScatter(src.ptr, out.ptr, out.count, nccl_dtype(out.dtype, "reduce_scatter_tensor"),
                                  code, driver().stream())
    return _finish(async_op, (lambda: driver().divide(out.x, g.size())) if divide else None)


def reduce_scatter(output, input_list: list, op: ReduceOp = ReduceOp.SUM, group: ProcessGroup | None = None,
                   async_op: bool = False):
    """Reduce ``input_list[r]`` over ranks into `output` on rank r (the list is packed into one buffer first)."""
    g = _group(group, "reduce_scatter")
    if g is None:
        return None
    out = _Buffer(output, "output", "reduce_scatter", writable=True)
    ins = _list(input_list, g.size(), "input_list", "reduce_scatter", like=out)
    packed = driver().concat([b.x for b in ins])
    return reduce_scatter_tensor(output, packed, op, g, async_op)


def all_to_all(output_tensor_list: list, input_tensor_list: list, group: ProcessGroup | None = None,
               async_op: bool = False):
    """Send ``input_tensor_list[r]`` to rank r; receive rank r's into ``output_tensor_list[r]``."""
    g = _group(group, "all_to_all")
    if g is None:
        return None
    ins = _list(input_tensor_list, g.size(), "input_tensor_list", "all_to_all")
    outs = _list(output_tensor_list, g.size(), "output_tensor_list", "all_to_all", writable=True)
    for r, (i, o) in enumerate(zip(ins, outs)):
        _same(o, i, f"output_tensor_list[{r}] must match input_tensor_list[{r}]", "all_to_all")
    _exchange(g, ins, outs, "all_to_all")
    return _finish(async_op)


def send(tensor, dst: int, group: ProcessGroup | None = None, tag: int = 0) -> None:
    """Send the device buffer `tensor` to global rank `dst` (`tag` is not supported by NCCL and must be 0)."""
    g = _group(group, "send")
    if g is None:
        return
    peer = _peer(g, dst, "dst", "send", tag)
    b = _Buffer(tensor, "tensor", "send")
    communicator(g).send(b.ptr, b.count, nccl_dtype(b.dtype, "send"), peer, driver().stream())


def recv(tensor, src: int | None = None, group: ProcessGroup | None = None, tag: int = 0) -> int:
    """Receive into the device buffer `tensor` from global rank `src` (NCCL needs the source named)."""
    g = _group(group, "recv")
    if g is None:
        return -1
    if src is None:
        raise DistributedError("loom.distributed.nccl.recv: NCCL cannot receive from any rank; name src")
    peer = _peer(g, src, "src", "recv", tag)
    b = _Buffer(tensor, "tensor", "recv", writable=True)
    communicator(g).recv(b.ptr, b.count, nccl_dtype(b.dtype, "recv"), peer, driver().stream())
    return src


def barrier(group: ProcessGroup | None = None) -> None:
    """Wait for every rank of the group: this rank's GPU work first, then the group over MPI."""
    g = _group(group, "barrier")
    if g is None:
        return
    driver().record_event().synchronize()
    g._comm.Barrier()


def _peer(g: ProcessGroup, rank, name: str, op: str, tag: int) -> int:
    if tag != 0:
        raise DistributedError(f"loom.distributed.nccl.{op}: NCCL messages have no tags; got tag={tag}")
    peer = g.group_rank(check_rank_arg(rank, name, op), op)
    if peer == g.rank():
        raise DistributedError(f"loom.distributed.nccl.{op}: {name}={rank} is this process's own rank")
    return peer


def _list(xs, n: int, name: str, op: str, like: _Buffer | None = None, writable: bool = False) -> list[_Buffer]:
    if not isinstance(xs, (list, tuple)) or len(xs) != n:
        got = len(xs) if isinstance(xs, (list, tuple)) else type(xs).__name__
        raise DistributedError(f"loom.distributed.nccl.{op}: {name} must be a list of {n} buffers (one per rank "
                               f"of the group), got {got}")
    bufs = [_Buffer(x, f"{name}[{k}]", op, writable=writable) for k, x in enumerate(xs)]
    if like is not None:
        for k, b in enumerate(bufs):
            _same(b, like, f"{name}[{k}] must match", op)
    return bufs


def _exchange(g: ProcessGroup, sends: list[_Buffer], recvs: list[_Buffer], op: str) -> None:
    """Send ``sends[r]`` to and receive ``recvs[r]`` from every rank r, as one NCCL group call."""
    comm, d, me = communicator(g), driver(), g.rank()
    stream = d.stream()
    d.group_start()
    try:
        for r in range(g.size()):
            if r == me:
                continue
            comm.send(sends[r].ptr, sends[r].count, nccl_dtype(sends[r].dtype, op), r, stream)
            comm.recv(recvs[r].ptr, recvs[r].count, nccl_dtype(recvs[r].dtype, op), r, stream)
    finally:
        d.group_end()
    d.copy(recvs[me].x, sends[me].x)


BACKENDS["nccl"] = sys.modules[__name__]  # init_process_group("nccl") finds check_available/release here.
