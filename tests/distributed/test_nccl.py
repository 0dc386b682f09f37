"""The NCCL backend (loom.distributed.nccl) without a GPU: its errors, id encoding, tables and buffer checks in
this process, and every collective on 2 ranks with tests/distributed/scripts/fake_nccl.py standing in for CuPy.

Only the last test runs NCCL itself, on CuPy arrays and PyTorch CUDA tensors, where CuPy and a GPU are present
(the device machine; CI has neither).
"""
import subprocess
import sys
import types

import numpy as np
import pytest

import loom
import loom.distributed.nccl as nccl
from loom.distributed import DistributedError, ReduceOp
from tests.distributed.test_distributed import ROOT, SCRIPTS, TIMEOUT, _env, _ok, launch, needs_mpi


class Buf:
    """A host array posing as a device buffer (``__cuda_array_interface__`` with its host address)."""

    def __init__(self, a, strides=None):
        self.a, self.strides = a, strides

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.a.shape, "typestr": self.a.dtype.str, "data": (self.a.ctypes.data, False),
                "strides": self.strides, "version": 3}


class Tables:
    """A driver with an old NCCL's constants: no ncclAvg, no bfloat16."""

    device_count = 2
    names = {"NCCL_SUM": 0, "NCCL_PROD": 1, "NCCL_MAX": 2, "NCCL_MIN": 3, "NCCL_FLOAT32": 7, "NCCL_INT64": 4}

    def use_device(self, index):
        self.device = index

    def constant(self, name):
        return self.names.get(name)


@pytest.fixture
def fresh_driver(monkeypatch):
    monkeypatch.setattr(nccl, "_driver", {})
    return monkeypatch


def test_without_cupy_the_nccl_backend_is_a_clear_loom_error(fresh_driver):
    fresh_driver.setitem(sys.modules, "cupy", None)  # Importing it fails, as where CuPy is not installed.
    with pytest.raises(DistributedError, match=r"backend 'nccl' runs NCCL through CuPy, which is not installed.*"
                                               r"pip install cupy-cuda12x"):
        nccl.check_available()
    with pytest.raises(loom.LoomError, match="through CuPy"):
        loom.distributed.process_group._normalise_backend("cpu:gloo,cuda:nccl")


def test_without_a_gpu_the_nccl_backend_is_a_clear_loom_error(fresh_driver):
    class NoDevice(Exception):
        pass

    def count():
        raise NoDevice("cudaErrorNoDevice: no CUDA-capable device is detected")
    cupy = types.ModuleType("cupy")
    cupy.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(getDeviceCount=count),
                                      nccl=types.SimpleNamespace(available=True))
    fresh_driver.setitem(sys.modules, "cupy", cupy)
    fresh_driver.setitem(sys.modules, "cupy.cuda", cupy.cuda)
    with pytest.raises(DistributedError, match="needs a CUDA GPU; CuPy found none .*no CUDA-capable device"):
        nccl.check_available()
    cupy.cuda.nccl.available = False
    with pytest.raises(DistributedError, match="built without NCCL"):
        nccl.check_available()


def test_init_process_group_nccl_without_cupy_refuses_before_starting_mpi():
    code = ("import sys, loom.distributed as d\nsys.modules['cupy'] = None  # As where CuPy is not installed.\n"
            "try:\n    d.init_process_group('nccl')\n"
            "except d.DistributedError as e:\n    print('REFUSED', e)\nprint('mpi4py' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_env(), capture_output=True, text=True,
                         timeout=60)
    assert "REFUSED loom.distributed: backend 'nccl' runs NCCL through CuPy" in out.stdout, out.stdout + out.stderr
    assert out.stdout.strip().endswith("False"), out.stdout  # Refused before MPI was started.


def test_unique_id_round_trips_through_text():
    uid = tuple((k * 37) % 256 - 128 for k in range(128))
    text = nccl.encode_id(uid)
    assert len(text) == 256 and nccl.decode_id(text) == uid
    with pytest.raises(DistributedError, match="128 bytes, got 3"):
        nccl.encode_id((1, 2, 3))
    with pytest.raises(DistributedError, match="128 bytes, got 2"):
        nccl.decode_id("abcd")
    raw = bytes(b & 0xFF for b in uid)  # CuPy 14's get_unique_id() gives bytes.
    assert nccl.decode_id(nccl.encode_id(raw)) == uid


def test_the_cupy_driver_passes_the_id_as_bytes_or_as_signed_chars():
    seen = []

    class Comm14:
        def __init__(self, size, uid, rank):
            if not isinstance(uid, bytes):
                raise TypeError("Argument 'commId' has incorrect type (expected bytes, got tuple)")
            seen.append((size, uid, rank))

    class CommOld:
        def __init__(self, size, uid, rank):
            if not isinstance(uid, tuple):
                raise TypeError("expected tuple")
            seen.append((size, uid, rank))

    d = object.__new__(nccl._CupyDriver)
    uid = tuple((k * 37) % 256 - 128 for k in range(128))
    for comm in (Comm14, CommOld):
        d.nccl = types.SimpleNamespace(NcclCommunicator=comm)
        d.communicator(2, uid, 1)
    assert seen == [(2, bytes(b & 0xFF for b in uid), 1), (2, uid, 1)]


def test_more_processes_than_gpus_is_a_clear_error_at_the_first_collective(fresh_driver):
    fresh_driver.setattr(nccl, "_load_driver", Tables)  # Two GPUs.
    fresh_driver.setenv("LOCAL_WORLD_SIZE", "3")
    group = types.SimpleNamespace(_nccl=None, _backend="nccl", _ranks=[0, 1, 2])
    with pytest.raises(DistributedError, match="3 processes run on this machine but it has 2 GPU"):
        nccl.communicator(group)


def test_dtypes_and_reductions_map_to_this_nccl(fresh_driver):
    fresh_driver.setattr(nccl, "_load_driver", Tables)
    assert nccl.nccl_dtype("float32", "all_reduce") == 7 and nccl.nccl_dtype("int64", "all_reduce") == 4
    with pytest.raises(DistributedError, match="all_gather: NCCL has no data type for bfloat16 .*NCCL >= 2.10"):
        nccl.nccl_dtype("bfloat16", "all_gather")
    assert nccl.nccl_op(ReduceOp.MAX, "all_reduce") == (2, False)
    assert nccl.nccl_op(ReduceOp.AVG, "all_reduce") == (0, True)  # No ncclAvg: sum, then divide.
    for op in (ReduceOp.BAND, ReduceOp.BOR, ReduceOp.BXOR):
        with pytest.raises(DistributedError, match=f"NCCL has no {op.name} reduction"):
            nccl.nccl_op(op, "all_reduce")
    with pytest.raises(DistributedError, match="op must be a loom.distributed.ReduceOp"):
        nccl.nccl_op("sum", "all_reduce")
    assert set(nccl.OPS) == {ReduceOp.SUM, ReduceOp.PRODUCT, ReduceOp.MIN, ReduceOp.MAX, ReduceOp.AVG}


def test_device_buffers_are_read_from_the_cuda_array_interface():
    a = np.zeros((3, 4), np.float32)
    b = nccl._Buffer(Buf(a), "tensor", "all_reduce", writable=True)
    assert (b.ptr, b.count, b.dtype, b.shape) == (a.ctypes.data, 12, "float32", (3, 4))
    assert nccl._Buffer(Buf(a, strides=(16, 4)), "t", "all_reduce").count == 12  # Explicit C strides are fine.
    with pytest.raises(DistributedError, match=r"shape \[3, 2\], strides \[16, 8\]\) is not C-contiguous"):
        nccl._Buffer(Buf(a[:, ::2], strides=(16, 8)), "t", "all_reduce")
    with pytest.raises(DistributedError, match="element type '<c8', which NCCL cannot carry"):
        nccl._Buffer(Buf(np.zeros(2, np.complex64)), "t", "all_reduce")
    with pytest.raises(DistributedError, match="must be a GPU buffer .* got ndarray"):
        nccl._Buffer(np.zeros(2), "t", "all_reduce")
    with pytest.raises(DistributedError, match="loom tensor is in host memory"):
        nccl._Buffer(loom.ones(2), "t", "all_reduce")


@needs_mpi
def test_nccl_collectives_on_2_ranks_with_a_stand_in_for_cupy():
    out = _ok(launch("nccl_collectives.py"))
    for name in ("all_reduce", "all_reduce AVG", "all_reduce MAX", "broadcast", "all_gather_into_tensor",
                 "all_gather", "reduce_scatter_tensor", "reduce_scatter", "all_to_all", "argument checks",
                 "loom tensors over MPI"):
        assert f"rank 0: {name} ok" in out and f"rank 1: {name} ok" in out, name
    assert "rank 1: recv ok" in out and "rank 0: unique id over gRPC" in out, out


@needs_mpi
def test_nccl_unique_id_goes_over_mpi_when_started_by_mpirun():
    env = dict(_env(), OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    cmd = ["mpirun", "-n", "2", "--oversubscribe", "--bind-to", "none", sys.executable,
           str(SCRIPTS / "nccl_collectives.py")]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    out = _ok(proc)
    assert "rank 0: unique id over MPI" in out and "rank 1: all_to_all ok" in out, out


def _gpu_present() -> bool:
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # No CuPy, or CuPy without a driver or device.
        return False


@pytest.mark.skipif(not _gpu_present(), reason="needs CuPy and a CUDA GPU (run on the GPU machine)")
def test_nccl_collectives_on_a_real_gpu():
    out = subprocess.run([sys.executable, str(SCRIPTS / "nccl_gpu.py")], cwd=ROOT, env=_env(), capture_output=True,
                         text=True, timeout=TIMEOUT)
    assert out.returncode == 0 and "rank 0: ALL OK" in out.stdout, out.stdout + out.stderr
