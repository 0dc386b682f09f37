"""The disk tier (loom.runtime.storage): exact round trips, atomic files, prefetch, cleanup, the primitive."""
import os

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
