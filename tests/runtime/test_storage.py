"""The disk tier (loom.runtime.storage): exact round trips, atomic files, prefetch, cleanup, the primitive."""
import os
import threading
import time

import numpy as np
import pytest

import loom
from loom.runtime import storage
from loom.runtime.storage import DiskTier


@pytest.mark.parametrize("io", ["file", "mmap"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.uint8, np.uint16])
def test_round_trip_is_bit_exact_and_deletes_the_file(tmp_path, dtype, io):
    tier = DiskTier(str(tmp_path), io)
    value = (np.random.default_rng(0).standard_normal((3, 5, 7)) * 1000).astype(dtype)
    if value.dtype.kind == "f":
        value.reshape(-1)[:3] = [np.nan, -0.0, np.inf]
    tier.put("v", value)
    assert tier.keys() == ["v"] and tier.bytes_written == value.nbytes
    tier.prefetch("v")
    out = np.empty_like(value)
    assert tier.get("v", out) is out and out.tobytes() == value.tobytes()
    assert tier.keys() == [] and tier.bytes_read == value.nbytes
    folder = tier.directory
    assert os.path.dirname(folder) == str(tmp_path) and os.path.basename(folder).startswith("loom-storage-")
    tier.close()
    assert not os.path.exists(folder)


def test_a_half_written_file_is_never_read(tmp_path):
    tier = DiskTier(str(tmp_path))
    # A write that died before its rename leaves only a .part file: no key, and a reload says so.
    with open(os.path.join(tier.directory, "k.bin.part"), "wb") as f:
        f.write(b"\0" * 10)
    assert tier.keys() == []
    with pytest.raises(loom.LoomError, match="no value stored under key 'k'"):
        tier.get("k", np.empty(10, np.uint8))
    tier.put("k", np.arange(3, dtype=np.int32))
    with pytest.raises(loom.LoomError, match=r"holds 12 B on disk, the value to reload needs 16 B"):
        tier.get("k", np.empty(4, np.int32))
    tier.close()


def test_empty_values_and_the_bandwidth_probe(tmp_path):
    with pytest.raises(loom.LoomValueError, match="io must be 'file' or 'mmap'"):
        DiskTier(str(tmp_path), "tape")
    tier = DiskTier(str(tmp_path))
    tier.put("e", np.empty((0, 4), np.float32))
    assert tier.get("e", np.empty((0, 4), np.float32)).shape == (0, 4)
    tier.close()
    assert storage.disk_bandwidth() > 0 and storage.disk().keys() == []


def test_the_storage_primitive_runs_in_a_graph_and_refuses_bad_attrs():
    g = loom.ir.Graph()
    x = g.add_input((4, 3), "float32")
    tok = g.add_node("storage", [x], {"action": "offload", "key": 7})
    pre = g.add_node("storage", [tok], {"action": "prefetch", "key": 7})
    back = g.add_node("storage", [pre], {"action": "reload", "key": 7, "shape": (4, 3), "dtype": loom.float32})
    g.outputs = [g.add_node("neg", [back])]
    assert tok.shape == (1,) and tok.dtype is loom.uint8 and back.shape == (4, 3)
    v = np.arange(12, dtype=np.float32).reshape(4, 3)
    (got,) = g.run(loom.tensor(v))
    assert got.numpy().tolist() == (-v).tolist()
    with pytest.raises(loom.LoomError, match="action"):
        g.add_node("storage", [x], {"action": "swap", "key": 1})
    with pytest.raises(loom.LoomError, match="shape and dtype"):
        g.add_node("storage", [tok], {"action": "reload", "key": 1})
    with pytest.raises(loom.LoomError, match=r"token of an offload"):
        g.add_node("storage", [x], {"action": "reload", "key": 1, "shape": (4, 3), "dtype": loom.float32})
    with pytest.raises(loom.LoomError, match=r"action 'flush' takes 2 input\(s\)"):
        g.add_node("storage", [tok], {"action": "flush", "key": 7})
    with pytest.raises(loom.LoomError, match="async"):
        g.add_node("storage", [tok], {"action": "prefetch", "key": 7, "async": True})


def _slow_writes(tier, monkeypatch, half_done=None, delay=0.2):
    """Make `tier`'s writes slow: half the bytes go to the .part file, then a pause, then the real write."""
    real = tier._write

    def write(key, value):
        with open(tier._path(key) + ".part", "wb") as f:
            f.write(np.ascontiguousarray(value).tobytes()[: value.nbytes // 2])
        if half_done is not None:
            half_done.set()
        time.sleep(delay)
        real(key, value)
    monkeypatch.setattr(tier, "_write", write)


def test_an_asynchronous_write_is_never_read_half_done(tmp_path, monkeypatch):
    tier = DiskTier(str(tmp_path))
    half = threading.Event()
    _slow_writes(tier, monkeypatch, half)
    value = np.random.default_rng(3).standard_normal((64, 33)).astype(np.float32)
    tier.put_async("k", value)
    assert half.wait(5)
    # Half the bytes are on disk under the .part name: not a key yet, and a reload waits for the write.
    assert tier.keys() == [] and os.path.exists(tier._path("k") + ".part")
    tier.prefetch("k")
    out = np.empty_like(value)
    assert tier.get("k", out).tobytes() == value.tobytes() and tier.bytes_written == value.nbytes
    assert tier.keys() == [] and not os.listdir(tier.directory)
    # flush (wait_written) then get, and a put after a pending write of the same key, keep the last bytes.
    tier.put_async("k", value)
    tier.wait_written("k")
    assert tier.keys() == ["k"]
    tier.put_async("k", value + 1)
    tier.put("k", value + 2)
    assert tier.get("k", out).tobytes() == (value + 2).tobytes()
    tier.close()


def test_asynchronous_offload_in_a_graph_keeps_the_value_until_its_flush(monkeypatch):
    """Slow writes: the flush holds the step until the write is done, so the arena slot is not reused early."""
    from loom.compiler.memory import plan_memory
    from loom.runtime.executor import Executable

    g = loom.ir.Graph()
    x = g.add_input((256,), "float32")
    a = g.add_node("exp", [x])
    tok = g.add_node("storage", [a], {"action": "offload", "key": 11, "async": True})
    flush = g.add_node("storage", [tok, a], {"action": "flush", "key": 11})
    # Work that would overwrite a's slot if a died at the offload.
    b = g.add_node("sin", [g.add_node("neg", [x])])
    pre = g.add_node("storage", [flush], {"action": "prefetch", "key": 11})
    back = g.add_node("storage", [pre], {"action": "reload", "key": 11, "shape": (256,), "dtype": loom.float32})
    g.outputs = [g.add_node("add", [back, b])]
    plan = plan_memory(g)
    order = plan.order
    assert plan.intervals[a][1] == order.index(flush)  # a's slot lives until the flush.
    _slow_writes(storage.disk(), monkeypatch, delay=0.05)
    xv = np.linspace(-2, 2, 256, dtype=np.float32)
    got = Executable(g, plan)(xv)[0]
    assert got.tobytes() == (np.exp(xv) + np.sin(-xv)).tobytes()
    assert storage.disk().keys() == []
