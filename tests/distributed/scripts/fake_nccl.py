"""A stand-in for CuPy's NCCL that moves host memory over MPI, so loom.distributed.nccl runs without a GPU.

"Device" buffers are `HostBuffer`s: NumPy arrays that expose ``__cuda_array_interface__`` with their host
address. `FakeCommunicator` has CuPy's ``NcclCommunicator`` methods and arguments (addresses, element counts,
NCCL data type and reduction codes, a stream) and does the work with mpi4py on COMM_WORLD.
"""
import ctypes

import numpy as np
from mpi4py import MPI

# NCCL's enumerations (the values of nccl.h).
CONSTANTS = {"NCCL_INT8": 0, "NCCL_UINT8": 1, "NCCL_INT32": 2, "NCCL_UINT32": 3, "NCCL_INT64": 4, "NCCL_UINT64": 5,
             "NCCL_FLOAT16": 6, "NCCL_FLOAT32": 7, "NCCL_FLOAT64": 8,
             "NCCL_SUM": 0, "NCCL_PROD": 1, "NCCL_MAX": 2, "NCCL_MIN": 3}  # No NCCL_AVG, no NCCL_BFLOAT16: old.
_NUMPY = {0: np.int8, 1: np.uint8, 2: np.int32, 3: np.uint32, 4: np.int64, 5: np.uint64, 6: np.float16,
          7: np.float32, 8: np.float64}
_MPI_OPS = {0: MPI.SUM, 1: MPI.PROD, 2: MPI.MAX, 3: MPI.MIN}


class HostBuffer:
    def __init__(self, a, readonly=False):
        self.a = np.ascontiguousarray(a)
        self.readonly = readonly

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.a.shape, "typestr": self.a.dtype.str, "data": (self.a.ctypes.data, self.readonly),
                "strides": None, "version": 3}


class StridedBuffer(HostBuffer):
    @property
    def __cuda_array_interface__(self):
        face = super().__cuda_array_interface__
        return dict(face, strides=tuple(reversed(self.a.strides)))


def _view(ptr, count, dtype_code, as_bytes=False):
    """The `count` elements at host address `ptr`; as bytes where the values are only moved (MPI has no half)."""
    dtype = np.dtype(_NUMPY[dtype_code])
    raw = (ctypes.c_byte * (count * dtype.itemsize)).from_address(ptr)
    return np.frombuffer(raw, dtype=np.uint8 if as_bytes else dtype)


class FakeCommunicator:
    def __init__(self, driver, size, uid, rank):
        self.driver, self.world = driver, MPI.COMM_WORLD
        assert size == self.world.Get_size() and rank == self.world.Get_rank(), (size, rank)
        self.uids = self.world.allgather(uid)  # Every rank must have received the same unique id.
        self.destroyed = False
        driver.calls.append("init")

    def allReduce(self, send, recv, count, dtype, op, stream):
        out = _view(recv, count, dtype)
        self.world.Allreduce(_view(send, count, dtype).copy(), out, op=_MPI_OPS[op])
        self.driver.calls.append("allReduce")

    def broadcast(self, send, recv, count, dtype, root, stream):
        buf = _view(recv, count, dtype, True)
        if self.world.Get_rank() == root and send != recv:
            buf[:] = _view(send, count, dtype, True)
        self.world.Bcast(buf, root=root)
        self.driver.calls.append("broadcast")

    def allGather(self, send, recv, count, dtype, stream):
        self.world.Allgather(_view(send, count, dtype, True).copy(),
                             _view(recv, count * self.world.Get_size(), dtype, True))
        self.driver.calls.append("allGather")

    def reduceScatter(self, send, recv, count, dtype, op, stream):
        n = self.world.Get_size()
        self.world.Reduce_scatter_block(_view(send, count * n, dtype).copy(), _view(recv, count, dtype),
                                        op=_MPI_OPS[op])
        self.driver.calls.append("reduceScatter")

    def send(self, buf, count, dtype, peer, stream):
        data = _view(buf, count, dtype, True).copy()
        if self.driver.grouped is not None:
            self.driver.grouped.append(self.world.Isend(data, dest=peer))
            self.driver.keep.append(data)
        else:
            self.world.Send(data, dest=peer)
        self.driver.calls.append("send")

    def recv(self, buf, count, dtype, peer, stream):
        out = _view(buf, count, dtype, True)
        if self.driver.grouped is not None:
            self.driver.grouped.append(self.world.Irecv(out, source=peer))
        else:
            self.world.Recv(out, source=peer)
        self.driver.calls.append("recv")

    def destroy(self):
        self.destroyed = True


class _Event:
    done = True

    def synchronize(self):
        pass


class FakeDriver:
    """One stand-in GPU per process on this machine, as NCCL needs."""

    def __init__(self):
        self.device_count = MPI.COMM_WORLD.Split_type(MPI.COMM_TYPE_SHARED).Get_size()
        self.calls, self.grouped, self.keep, self.device = [], None, [], None

    def use_device(self, index):
        self.device = index

    def unique_id(self):
        return tuple(int(b) - 128 for b in np.random.default_rng().integers(0, 256, 128))

    def communicator(self, size, uid, rank):
        return FakeCommunicator(self, size, uid, rank)

    def constant(self, name):
        return CONSTANTS.get(name)

    def stream(self):
        return 0

    def group_start(self):
        assert self.grouped is None, "nested NCCL group"
        self.grouped = []

    def group_end(self):
        MPI.Request.Waitall(self.grouped)
        self.grouped, self.keep = None, []
        self.calls.append("groupEnd")

    def record_event(self):
        return _Event()

    def copy(self, dst, src):
        dst.a[...] = src.a.reshape(dst.a.shape)

    def divide(self, x, n):
        if x.a.dtype.kind == "f":
            x.a /= n
        else:
            x.a //= n

    def concat(self, xs):
        return HostBuffer(np.concatenate([x.a.reshape(-1) for x in xs]))
