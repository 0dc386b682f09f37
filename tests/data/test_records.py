"""The .lrec record format: round trips of every field kind, sharding, atomic writes, corruption detection,
and a reader and a writer implemented from docs/record-format.md alone."""
import json
import math
import multiprocessing as mp
import os
import signal
import struct
import time
import zlib

import numpy as np
import pytest

import loom
import loom.data as ld
from loom.data.records import decode_example, encode_example


def _equal(a, b):
    if isinstance(a, np.ndarray) or isinstance(a, np.generic):
        return type(a) is type(b) and a.dtype == b.dtype and np.shape(a) == np.shape(b) and \
            a.tobytes() == b.tobytes()
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return type(a) is type(b) and a == b


ALL_FIELDS = {
    "f32": np.arange(12, dtype=np.float32).reshape(3, 4),
    "u8_image": np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3),
    "i64": np.array([-(2 ** 63), 2 ** 63 - 1]),
    "f16": np.array([1.5, -0.25], np.float16),
    "f64_nan": np.array([np.nan, np.inf, -0.0]),
    "bool_arr": np.array([[True, False]]),
    "big_endian": np.arange(3, dtype=">i2"),
    "complex": np.array([1 + 2j], np.complex64),
    "unicode": np.array(["ab", "héllo"]),
    "bytes_arr": np.array([b"x", b"yz"]),
    "datetime": np.array(["2024-01-02"], dtype="datetime64[D]"),
    "structured": np.array([(1, 2.5, [1, 2])], dtype=[("a", "<i4"), ("b", "<f8"), ("c", "<u2", (2,))]),
    "zero_d": np.array(7, np.int32),
    "empty": np.zeros((0, 5), np.float32),
    "non_contiguous": np.arange(20, dtype=np.int16).reshape(4, 5)[:, ::2],
    "np_scalar": np.int16(-3),
    "np_bool_scalar": np.bool_(True),
    "int": -42,
    "big_int": 2 ** 62,
    "float": 0.1,
    "nan": float("nan"),
    "bool": False,
    "bytes": b"\x00\xff binary",
    "empty_bytes": b"",
    "str": "unicode ☃ text",
    "empty_str": "",
}


def test_round_trip_every_field_kind():
    out = decode_example(encode_example(ALL_FIELDS))
    assert list(out) == list(ALL_FIELDS)
    for k, v in ALL_FIELDS.items():
        expect = v.copy(order="C") if isinstance(v, np.ndarray) else v
        assert _equal(expect, out[k]), k
    assert out["f32"].flags.writeable
    out["f32"][0, 0] = 5  # Arrays are writable, as transforms expect.


def test_loom_tensor_fields_are_stored_as_arrays():
    out = decode_example(encode_example({"t": loom.arange(4, dtype=loom.int32)}))
    assert out["t"].dtype == np.int32 and out["t"].tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("bad,err", [({"o": np.array([object()])}, TypeError), ({1: 2}, TypeError),
                                     ({"i": 2 ** 64}, loom.LoomValueError), ({"l": [1, 2]}, TypeError),
                                     ([("a", 1)], TypeError)])
def test_encode_refuses_what_it_cannot_store(bad, err):
    with pytest.raises(err):
        encode_example(bad)


def test_payload_alignment_and_json_table():
    p = encode_example({"a": 1, "x": np.ones(3, np.float64), "s": "abc"})
    (t,) = struct.unpack_from("<I", p)
    table = json.loads(p[4:4 + t])
    data = 4 + t + (-(4 + t) % 16)
    assert data % 16 == 0 and all(f["offset"] % 16 == 0 for f in table["fields"])
    assert [f["kind"] for f in table["fields"]] == ["int", "ndarray", "str"]
    assert len(p) % 16 == 0


def _write(prefix, n, **kw):
    with ld.RecordWriter(prefix, **kw) as w:
        for i in range(n):
            w.write({"i": i, "x": np.full(i % 4 + 1, i, np.float32)})
    return w.files


def test_sharding_num_shards_round_robin(tmp_path):
    files = _write(tmp_path / "d", 10, num_shards=3)
    assert [os.path.basename(f) for f in files] == [f"d-0000{k}-of-00003.lrec" for k in range(3)]
    assert [[ex["i"] for ex in ld.RecordReader(f)] for f in files] == [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]
    assert ld.list_shards(tmp_path / "d") == files
    assert sorted(ex["i"] for ex in ld.read_records(str(tmp_path / "d-*.lrec"))) == list(range(10))
    assert sorted(os.listdir(tmp_path)) == sorted(os.path.basename(f) for f in files)  # No temporaries left.


def test_sharding_examples_per_shard_contiguous(tmp_path):
    files = _write(tmp_path / "e", 7, examples_per_shard=3)
    assert [os.path.basename(f) for f in files] == [f"e-0000{k}-of-00003.lrec" for k in range(3)]
    assert [ex["i"] for ex in ld.read_records(files)] == list(range(7))
    assert [len(ld.RecordReader(f)) for f in files] == [3, 3, 1]
    assert _write(tmp_path / "empty", 0, examples_per_shard=3) == [str(tmp_path / "empty-00000-of-00001.lrec")]
    assert list(ld.read_records(tmp_path / "empty")) == []
    with pytest.raises(ValueError):
        ld.RecordWriter(tmp_path / "z", num_shards=2, examples_per_shard=2)
    with pytest.raises(ValueError):
        ld.RecordWriter(tmp_path / "z", num_shards=0)


def test_random_access_and_record_dataset(tmp_path):
    files = _write(tmp_path / "r", 9, num_shards=2)
    r = ld.RecordReader(files[0])
    assert len(r) == 5 and r[2]["i"] == 4 and r[-1]["i"] == 8 and r[1]["x"].tolist() == [2.0, 2.0, 2.0]
    with pytest.raises(IndexError):
        r[5]
    ds = ld.RecordDataset(tmp_path / "r", transform=lambda ex: ex["i"])
    assert len(ds) == 9 and [ds[k] for k in range(9)] == [0, 2, 4, 6, 8, 1, 3, 5, 7]
    # Readers are safe to share with forked DataLoader workers (each process opens its own descriptor).
    loader = ld.DataLoader(ds, batch_size=4, num_workers=2)
    assert sum((b.tolist() for b in loader), []) == [ds[k] for k in range(9)]


def test_exception_in_writer_leaves_nothing(tmp_path):
    _write(tmp_path / "keep", 3, num_shards=1)
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(ZeroDivisionError):
        with ld.RecordWriter(tmp_path / "new", num_shards=2) as w:
            w.write({"a": 1})
            raise ZeroDivisionError("user code failed mid-write")
    with pytest.raises(TypeError):
        with ld.RecordWriter(tmp_path / "keep", num_shards=1) as w:
            w.write({"a": object()})
    assert sorted(os.listdir(tmp_path)) == before
    assert [ex["i"] for ex in ld.read_records(tmp_path / "keep")] == [0, 1, 2]


def _slow_writer(prefix):
    with ld.RecordWriter(prefix, num_shards=2) as w:
        for i in range(1000):
            w.write({"i": i})
        time.sleep(60)


def test_killed_writer_leaves_no_shard(tmp_path):
    p = mp.get_context("fork").Process(target=_slow_writer, args=(str(tmp_path / "k"),))
    p.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not any(".tmp-" in f for f in os.listdir(tmp_path)):
        time.sleep(0.02)
    time.sleep(0.1)
    os.kill(p.pid, signal.SIGKILL)
    p.join()
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".lrec")]
    with pytest.raises(FileNotFoundError):
        ld.list_shards(tmp_path / "k")


def _flip(path, offset):
    data = bytearray(open(path, "rb").read())
    data[offset] ^= 0x40
    open(path, "wb").write(data)


def test_payload_corruption_names_file_and_record(tmp_path):
    files = _write(tmp_path / "c", 6, num_shards=2)
    r = ld.RecordReader(files[1])
    _flip(files[1], int(r.offsets[2]) + 40)
    with pytest.raises(loom.LoomError, match=r"c-00001-of-00002\.lrec: record 2 \(byte offset \d+\) is corrupt: "
                                             r"payload CRC32 mismatch"):
        list(ld.read_records(files))
    assert ld.RecordReader(files[1])[1]["i"] == 3  # Other records still read.
    assert len(list(ld.RecordReader(files[1], verify=False))) == 3


def test_length_footer_index_and_magic_corruption(tmp_path):
    files = _write(tmp_path / "c", 4, num_shards=1)
    f = files[0]
    pristine = open(f, "rb").read()
    r = ld.RecordReader(f)
    _flip(f, int(r.offsets[1]) + 2)
    with pytest.raises(loom.LoomError, match="record 1 .* length field is damaged"):
        ld.RecordReader(f)[1]
    for offset, what in [(len(pristine) - 20, "footer"), (len(pristine) - 40, "index"), (0, "magic")]:
        open(f, "wb").write(pristine)
        _flip(f, offset)
        with pytest.raises(loom.LoomError, match=what):
            ld.RecordReader(f)
    open(f, "wb").write(pristine[:-5])
    with pytest.raises(loom.LoomError, match="c-00000-of-00001.lrec"):
        ld.RecordReader(f)


def test_list_shards_refuses_incomplete_or_mixed_sets(tmp_path):
    files = _write(tmp_path / "s", 4, num_shards=2)
    os.remove(files[1])
    with pytest.raises(loom.LoomError, match="incomplete"):
        ld.list_shards(tmp_path / "s")
    _write(tmp_path / "m", 2, num_shards=1)
    _write(tmp_path / "m", 2, num_shards=2)
    with pytest.raises(loom.LoomError, match="different sizes"):
        ld.read_records(tmp_path / "m").__next__()


# ------------------------------------------------------------------ the spec, implemented independently

_SPEC_DECODE = {"int": lambda b: struct.unpack("<q", b)[0], "float": lambda b: struct.unpack("<d", b)[0],
                "bool": lambda b: bool(b[0]), "bytes": bytes, "str": lambda b: b.decode("utf-8")}


def _spec_read(path):
    """Read a shard with nothing but docs/record-format.md: struct, json, zlib."""
    blob = open(path, "rb").read()
    assert blob[:8] == b"LOOMREC\x00" and struct.unpack_from("<I", blob, 8)[0] == 1
    count, index_offset, index_crc, trailer_crc = struct.unpack_from("<QQII", blob, len(blob) - 32)
    assert blob[-8:] == b"LOOMIDX\x00" and zlib.crc32(blob[-32:-12]) == trailer_crc
    index = blob[index_offset:index_offset + 8 * count]
    assert zlib.crc32(index) == index_crc and index_offset + 8 * count + 32 == len(blob)
    offsets = list(struct.unpack(f"<{count}Q", index)) + [index_offset]
    examples = []
    for i in range(count):
        start = offsets[i]
        length, length_crc, payload_crc = struct.unpack_from("<QII", blob, start)
        assert zlib.crc32(blob[start:start + 8]) == length_crc and length == offsets[i + 1] - start - 16
        payload = blob[start + 16:start + 16 + length]
        assert zlib.crc32(payload) == payload_crc
        (t,) = struct.unpack_from("<I", payload)
        table = json.loads(payload[4:4 + t].decode("utf-8"))
        data = 4 + t + (-(4 + t) % 16)
        ex = {}
        for f in table["fields"]:
            raw = payload[data + f["offset"]:data + f["offset"] + f["size"]]
            kind = f["kind"]
            if kind in ("ndarray", "scalar"):
                arr = np.frombuffer(raw, dtype=np.lib.format.descr_to_dtype(f["dtype"])).reshape(f["shape"])
                ex[f["name"]] = arr[()] if kind == "scalar" else arr
            else:
                ex[f["name"]] = _SPEC_DECODE[kind](raw)
        examples.append(ex)
    return examples


def _spec_write(path, examples):
    """Write a shard with nothing but the spec (JSON with spaces and an unknown key, which readers must accept)."""
    out = bytearray(b"LOOMREC\x00" + struct.pack("<II", 1, 0))
    offsets = []
    for ex in examples:
        fields, data = [], b""
        for name, v in ex.items():
            if isinstance(v, np.ndarray):
                entry = {"name": name, "kind": "ndarray", "dtype": v.dtype.str, "shape": list(v.shape)}
                raw = v.tobytes()
            elif isinstance(v, int):
                entry, raw = {"name": name, "kind": "int"}, struct.pack("<q", v)
            else:
                entry, raw = {"name": name, "kind": "str"}, v.encode("utf-8")
            entry.update(offset=len(data), size=len(raw), note="ignored")
            fields.append(entry)
            data += raw + b"\x00" * (-len(raw) % 16)
        table = json.dumps({"fields": fields}, indent=1).encode("utf-8")
        head = struct.pack("<I", len(table)) + table
        payload = head + b"\x00" * (-len(head) % 16) + data
        offsets.append(len(out))
        length = struct.pack("<Q", len(payload))
        out += length + struct.pack("<II", zlib.crc32(length), zlib.crc32(payload)) + payload
    index = struct.pack(f"<{len(offsets)}Q", *offsets)
    trailer = struct.pack("<QQI", len(offsets), len(out), zlib.crc32(index))
    out += index + trailer + struct.pack("<I", zlib.crc32(trailer)) + b"LOOMIDX\x00"
    open(path, "wb").write(out)


def test_spec_reader_reads_loom_files(tmp_path):
    with ld.RecordWriter(tmp_path / "spec", num_shards=1) as w:
        w.write(ALL_FIELDS)
        w.write({"k": 1})
    ex = _spec_read(w.files[0])
    assert [list(e) for e in ex] == [list(ALL_FIELDS), ["k"]]
    for k, v in ALL_FIELDS.items():
        expect = v.copy(order="C") if isinstance(v, np.ndarray) else v
        assert _equal(expect, ex[0][k]), k


def test_loom_reads_spec_written_files(tmp_path):
    path = str(tmp_path / "ext-00000-of-00001.lrec")
    examples = [{"x": np.arange(5, dtype=">f8"), "label": 3, "s": "ok"}, {"x": np.zeros((2, 2), np.uint8),
                                                                         "label": -1, "s": ""}]
    _spec_write(path, examples)
    got = list(ld.read_records(tmp_path / "ext"))
    assert len(got) == 2 and got[0]["x"].dtype == np.dtype(">f8") and got[0]["x"].tolist() == [0, 1, 2, 3, 4]
    assert got[1]["label"] == -1 and got[1]["s"] == "" and got[1]["x"].shape == (2, 2)
