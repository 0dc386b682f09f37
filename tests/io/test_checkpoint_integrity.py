"""Checkpoint integrity: checksums catch corruption, malformed files fail clearly, killed saves leave no litter."""
import json
import os
import signal
import stat
import struct
import subprocess
import sys
import textwrap
import time
import zipfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import loom
from loom.io import checkpoint as ck

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _state():
    return {"model": {"w": loom.tensor(np.arange(12, dtype=np.float32).reshape(3, 4) / 7),
                      "b": loom.arange(5, dtype=loom.int64)},
            "bf": loom.tensor([1.0, -2.0, 0.5]).to(loom.bfloat16), "mask": loom.tensor([True, False]),
            "half": loom.tensor([1.5], dtype=loom.float16), "scalar": loom.tensor(2.0),
            "small": loom.tensor([1, 2], dtype=loom.uint8), "step": 3, "betas": (0.9, 0.99), "name": "adam"}


def _same(a, b):
    """Equal nested checkpoints, tensors compared by dtype, shape and bytes."""
    if isinstance(a, loom.Tensor):
        return (isinstance(b, loom.Tensor) and a.dtype is b.dtype and a.shape == b.shape
                and a._array().tobytes() == b._array().tobytes())
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _layout(blob):
    """Header length, header dict and the byte range of each tensor's data in the file."""
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    ranges = {k: (8 + n + v["data_offsets"][0], 8 + n + v["data_offsets"][1])
              for k, v in header.items() if k != "__metadata__"}
    return n, header, ranges


def _expect_clear_error(path, match=None):
    """loom.load(path) raises a LoomError that names the file and no unforeseen exception."""
    with pytest.raises(loom.LoomError) as info:
        loom.load(path)
    msg = str(info.value)
    assert str(path) in msg, msg
    assert "unexpected" not in msg, msg  # The loader's safety net means a check is missing.
    if match is not None:
        assert match in msg, msg
    return msg


def _safetensors(header, data=b"", pad=True):
    raw = json.dumps(header).encode() if not isinstance(header, bytes) else header
    if pad:
        raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + data


# ----------------------------------------------------------------------------- checksums


def test_every_byte_flip_in_a_loom_checkpoint_is_caught(tmp_path):
    src = tmp_path / "good.safetensors"
    loom.save(_state(), src)
    blob = src.read_bytes()
    n, _, ranges = _layout(blob)
    padding = range(8 + len(blob[8:8 + n].rstrip(b" ")), 8 + n)
    bad = tmp_path / "flipped.safetensors"
    bad.write_bytes(blob)
    fd = os.open(bad, os.O_RDWR)  # Flip bytes in place: rewriting the whole file each time is slow.
    rng = np.random.default_rng(0)
    caught_data = 0
    try:
        for pos in range(len(blob)):
            for mask in (1 << (pos % 8), int(rng.integers(1, 256))):
                new = blob[pos] ^ mask
                os.pwrite(fd, bytes([new]), pos)
                owner = [k for k, (b, e) in ranges.items() if b <= pos < e]
                if pos in padding and chr(new) in " \t\r\n":
                    # Padding after the header's JSON turned into other whitespace: the same file in meaning.
                    assert _same(loom.load(bad), _state())
                else:
                    msg = _expect_clear_error(bad)
                    if owner:
                        assert f"tensor {owner[0]!r}" in msg and "checksum" in msg, msg
                        caught_data += 1
            os.pwrite(fd, blob[pos:pos + 1], pos)
    finally:
        os.close(fd)
    assert caught_data == 2 * sum(e - b for b, e in ranges.values())


def test_checksums_are_in_the_metadata_and_readable_by_other_tools(tmp_path):
    import safetensors
    path = tmp_path / "c.safetensors"
    loom.save({"w": loom.ones(4), "step": 1}, path, metadata={"note": "hi"})
    with safetensors.safe_open(str(path), "numpy") as fh:
        meta = fh.metadata()
    assert json.loads(meta[ck.TENSOR_CRC_KEY]) == {"w": f"{__import__('zlib').crc32(np.ones(4, np.float32)):08x}"}
    assert len(meta[ck.HEADER_CRC_KEY]) == 8 and meta["note"] == "hi"
    with pytest.raises(loom.LoomError, match="reserved"):
        loom.save({"w": loom.ones(1)}, path, metadata={ck.TENSOR_CRC_KEY: "x"})


def test_a_checkpoint_rewritten_by_another_tool(tmp_path):
    import safetensors
    import safetensors.numpy
    path = tmp_path / "c.safetensors"
    loom.save({"w": loom.ones(3), "step": 5}, path)
    with safetensors.safe_open(str(path), "numpy") as fh:
        meta = fh.metadata()
    arrays = {"w": np.full(3, 2.0, np.float32)}
    safetensors.numpy.save_file(arrays, str(path), metadata=meta)  # Stale checksums copied along.
    _expect_clear_error(path, "copied loom's old checksums")
    kept = {k: v for k, v in meta.items() if k not in (ck.TENSOR_CRC_KEY, ck.HEADER_CRC_KEY)}
    safetensors.numpy.save_file(arrays, str(path), metadata=kept)
    back = loom.load(path)
    assert back["step"] == 5 and back["w"].tolist() == [2.0, 2.0, 2.0]


def test_files_from_other_writers_load_without_checksums(tmp_path):
    import safetensors.numpy
    import safetensors.torch
    import torch
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    safetensors.numpy.save_file({"a": a, "i": np.array([1, -2], np.int16), "e": np.zeros((0, 3), np.float64)},
                                str(tmp_path / "np.safetensors"), metadata={"who": "numpy"})
    back = loom.load(tmp_path / "np.safetensors")
    np.testing.assert_array_equal(back["a"].numpy(), a)
    assert back["i"].dtype is loom.int16 and back["i"].tolist() == [1, -2]
    assert back["e"].shape == (0, 3) and back["e"].dtype is loom.float64
    safetensors.torch.save_file({"w": torch.linspace(0, 1, 5), "b": torch.ones(2, dtype=torch.bfloat16),
                                 "m": torch.tensor([True, False])}, str(tmp_path / "pt.safetensors"))
    back = loom.load(tmp_path / "pt.safetensors")
    np.testing.assert_array_equal(back["w"].numpy(), np.linspace(0, 1, 5, dtype=np.float32))
    assert back["b"].dtype is loom.bfloat16 and back["b"].tolist() == [1.0, 1.0]
    assert back["m"].tolist() == [True, False]
    # A checkpoint written before loom recorded checksums (no crc entries) still loads.
    blob = (tmp_path / "np.safetensors").read_bytes()
    _, header, _ = _layout(blob)
    header["__metadata__"] = {ck.STRUCTURE_KEY: json.dumps({"version": 1, "root": {"__tensor__": "a"}})}
    (tmp_path / "old.safetensors").write_bytes(_safetensors(header, blob[-(6 * 4 + 2 * 2):]))
    np.testing.assert_array_equal(loom.load(tmp_path / "old.safetensors").numpy(), a)


# ----------------------------------------------------------------------------- malformed files


def _valid_header():
    return {"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
            "i": {"dtype": "I16", "shape": [2], "data_offsets": [8, 12]}}


def _with(**changes):
    h = _valid_header()
    for name, entry in changes.items():
        h[name] = entry
    return _safetensors(h, bytes(12))


def _loom_meta(structure):
    return {"__metadata__": {ck.STRUCTURE_KEY: structure}, **_valid_header()}


DEEP = "[" * 100_000 + "]" * 100_000

MALFORMED = {
    "empty": (b"", "is empty"),
    "short": (b"\x01\x02\x03", "too short"),
    "huge header length": (struct.pack("<Q", 2**63) + b"{}", "header length field says"),
    "header length past the end": (struct.pack("<Q", 100) + b'{"a":1}', "only 7 follow"),
    "zero header length": (struct.pack("<Q", 0) + b"{}", "does not start with '{'"),
    "garbage": (bytes(range(200, 256)) * 4, "header length field says"),
    "text": (b"hello world, this is not a checkpoint\n", "header length field says"),
    "not json": (_safetensors(b"{not json"), "not valid JSON"),
    "not utf-8": (_safetensors(b'{"\xff\xfe":1}'), "not UTF-8"),
    "json list": (_safetensors(b"[1, 2]"), "does not start with '{'"),
    "json string header": (_safetensors(b'{"a": "b"}'), "not an object"),
    "deep header": (_safetensors(('{"a":' + DEEP + "}").encode()), "nests too deeply"),
    "huge integer": (_safetensors(('{"a":{"shape":[' + "9" * 5000 + "]}}").encode()), "not valid JSON"),
    "unknown dtype": (_with(w={"dtype": "F33", "shape": [2], "data_offsets": [0, 8]}), "unknown dtype 'F33'"),
    "missing dtype": (_with(w={"shape": [2], "data_offsets": [0, 8]}), "unknown dtype None"),
    "fp8 dtype": (_with(w={"dtype": "F8_E4M3", "shape": [8], "data_offsets": [0, 8]}), "loom does not support"),
    "uint16 dtype": (_with(w={"dtype": "U16", "shape": [4], "data_offsets": [0, 8]}), "loom does not support"),
    "dtype size mismatch": (_with(w={"dtype": "F64", "shape": [2], "data_offsets": [0, 8]}), "needs 16 bytes"),
    "negative shape": (_with(w={"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}), "non-negative integers"),
    "bool in shape": (_with(w={"dtype": "F32", "shape": [True, 2], "data_offsets": [0, 8]}), "non-negative"),
    "float shape": (_with(w={"dtype": "F32", "shape": [2.0], "data_offsets": [0, 8]}), "non-negative"),
    "shape not a list": (_with(w={"dtype": "F32", "shape": 2, "data_offsets": [0, 8]}), "not a list"),
    "huge shape": (_with(w={"dtype": "F32", "shape": [2**62, 2**62], "data_offsets": [0, 8]}), "needs"),
    "reversed offsets": (_with(w={"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}), "0 <= begin <= end"),
    "three offsets": (_with(w={"dtype": "F32", "shape": [2], "data_offsets": [0, 8, 9]}), "data_offsets"),
    "offsets past the end": (_with(i={"dtype": "I16", "shape": [2], "data_offsets": [12, 16]}), "past the end"),
    "overlapping offsets": (_with(i={"dtype": "I16", "shape": [2], "data_offsets": [4, 8]}), "overlaps tensor 'w'"),
    "gap": (_safetensors({"w": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, bytes(12)), "gap of 4"),
    "trailing bytes": (_safetensors(_valid_header(), bytes(20)), "cover 12 bytes"),
    "truncated data": (_safetensors(_valid_header(), bytes(10)), "past the end"),
    "entry not an object": (_with(w=[1, 2]), "not an object"),
    "metadata not strings": (_safetensors({"__metadata__": {"a": 1}}), "map of strings"),
    "metadata a list": (_safetensors({"__metadata__": ["a"]}), "map of strings"),
    "bad bool bytes": (_safetensors({"m": {"dtype": "BOOL", "shape": [2], "data_offsets": [0, 2]}}, b"\x01\x07"),
                       "other than 0 and 1"),
    "structure not json": (_safetensors(_loom_meta("{oops"), bytes(12)), "not valid JSON"),
    "structure deep": (_safetensors(_loom_meta('{"root":' + DEEP + "}"), bytes(12)), "nests too deeply"),
    "structure without root": (_safetensors(_loom_meta('{"version":1}'), bytes(12)), "with a 'root'"),
    "structure newer": (_safetensors(_loom_meta('{"version":9,"root":1}'), bytes(12)), "version 9 is newer"),
    "structure bad version": (_safetensors(_loom_meta('{"version":"1","root":1}'), bytes(12)), "not an integer"),
    "missing tensor": (_safetensors(_loom_meta('{"root":{"__tensor__":"nope"}}'), bytes(12)),
                       "tensor 'nope' at <root>"),
    "unknown tag": (_safetensors(_loom_meta('{"root":{"__set__":[1]}}'), bytes(12)), "unknown entry '__set__'"),
    "two tags": (_safetensors(_loom_meta('{"root":{"__list__":[],"__tuple__":[]}}'), bytes(12)),
                 "not a tagged value"),
    "raw list": (_safetensors(_loom_meta('{"root":[1,2]}'), bytes(12)), "not a tagged value"),
    "bad dict items": (_safetensors(_loom_meta('{"root":{"__dict__":[["a"]]}}'), bytes(12)), "pair"),
    "dict of list key": (_safetensors(_loom_meta('{"root":{"__dict__":[[["a"],1]]}}'), bytes(12)), "pair"),
    "bad float": (_safetensors(_loom_meta('{"root":{"__float__":"1e400x"}}'), bytes(12)), "non-finite"),
    "bad dtype name": (_safetensors(_loom_meta('{"root":{"__dtype__":"float128"}}'), bytes(12)), "dtype at"),
    "deep tagged structure": (_safetensors(_loom_meta('{"root":' + '{"__list__":[' * 3000 + "1" + "]}" * 3000
                                                      + "}"), bytes(12)), "nests too deeply"),
    "dtype disagreement": (_safetensors(_loom_meta('{"root":1,"dtypes":{"w":"int32"}}'), bytes(12)),
                           "stored as F32 but the structure says 'int32'"),
    "one checksum entry missing": (_safetensors({"__metadata__": {ck.TENSOR_CRC_KEY: "{}"}}), "beside the other"),
    "npy file": (b"\x93NUMPY\x01\x00v\x00{'descr': '<f4'}" + bytes(64), "NumPy .npy"),
    "pickle": (b"\x80\x04\x95" + bytes(40), "Python pickle"),
    "gzip": (b"\x1f\x8b\x08\x00" + bytes(40), "gzip"),
    "hdf5": (b"\x89HDF\r\n\x1a\n" + bytes(40), "HDF5"),
    "bad zip": (b"PK\x03\x04" + bytes(40), "damaged zip"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_file_gives_a_clear_error(tmp_path, case):
    blob, expected = MALFORMED[case]
    path = tmp_path / "bad.safetensors"
    path.write_bytes(blob)
    _expect_clear_error(path, expected)


def test_header_length_beyond_the_format_limit_is_not_read(tmp_path):
    path = tmp_path / "sparse.safetensors"
    with open(path, "wb") as fh:  # A sparse 200 MB file: its size costs no disk or time.
        fh.write(struct.pack("<Q", 150_000_000) + b"{")
        fh.truncate(200_000_000)
    _expect_clear_error(path, "more than the 100000000 the safetensors format allows")


def test_zip_pickle_and_directory_are_named(tmp_path):
    import torch
    pt = tmp_path / "model.pt"
    torch.save({"w": torch.ones(2)}, pt)
    assert loom.load(pt)["w"].tolist() == [1.0, 1.0]  # A PyTorch zip checkpoint goes to loom.io.torch_load.
    torch.save({"w": torch.ones(2)}, pt, _use_new_zipfile_serialization=False)
    _expect_clear_error(pt, "legacy torch.save")
    with zipfile.ZipFile(tmp_path / "a.zip", "w") as z:
        z.writestr("x.txt", "hello")
    _expect_clear_error(tmp_path / "a.zip", "a zip archive")
    np.savez(tmp_path / "a.npz", x=np.ones(2))
    _expect_clear_error(tmp_path / "a.npz", "NumPy .npz")
    (tmp_path / "d.safetensors").mkdir()
    _expect_clear_error(tmp_path / "d.safetensors", "is a directory")
    with pytest.raises(FileNotFoundError, match="loom.load"):
        loom.load(tmp_path / "missing.safetensors")


def test_save_refuses_cycles_and_directories(tmp_path):
    a = [loom.ones(1)]
    a.append(a)
    with pytest.raises(loom.LoomError, match=r"list at 1 contains itself"):
        loom.save(a, tmp_path / "c.safetensors")
    deep: list = []
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(loom.LoomError, match="nested too deeply"):
        loom.save(deep, tmp_path / "c.safetensors")
    (tmp_path / "d").mkdir()
    with pytest.raises(loom.LoomError, match="is a directory"):
        loom.save({"x": 1}, tmp_path / "d")
    # The same object twice in a tree is not a cycle.
    b = [1, 2]
    loom.save({"x": b, "y": b}, tmp_path / "ok.safetensors")
    assert loom.load(tmp_path / "ok.safetensors") == {"x": [1, 2], "y": [1, 2]}


# ----------------------------------------------------------------------------- fuzzing

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def good_blob(tmp_path_factory):
    path = tmp_path_factory.mktemp("good") / "g.safetensors"
    loom.save(_state(), path)
    return path.read_bytes()


def _load_bytes(tmp_path, blob):
    path = tmp_path / "fuzz.safetensors"
    path.write_bytes(blob)
    return path


@FUZZ
@given(data=st.data())
def test_fuzz_truncations_and_corruptions_of_a_loom_file(tmp_path, good_blob, data):
    blob = bytearray(good_blob)
    kind = data.draw(st.sampled_from(["truncate", "flips", "splice", "append"]))
    if kind == "truncate":
        blob = blob[:data.draw(st.integers(0, len(blob) - 1))]
    elif kind == "flips":
        for pos in data.draw(st.lists(st.integers(0, len(blob) - 1), min_size=1, max_size=8, unique=True)):
            blob[pos] ^= data.draw(st.sampled_from([1, 2, 4, 8, 16, 32, 64, 128]))
    elif kind == "splice":
        pos = data.draw(st.integers(0, len(blob) - 1))
        junk = data.draw(st.binary(min_size=1, max_size=64))
        if blob[pos:pos + len(junk)] == junk:
            return
        blob[pos:pos + len(junk)] = junk
    else:
        blob += data.draw(st.binary(min_size=1, max_size=64))
    _expect_clear_error(_load_bytes(tmp_path, bytes(blob)))


def _agrees_with_safetensors(blob, back):
    """Whatever loom accepts, the reference reader accepts with the same values (NumPy has no bf16)."""
    import safetensors.numpy
    ref = safetensors.numpy.load(blob)
    assert ref.keys() == back.keys()
    for k, v in ref.items():
        assert back[k].shape == v.shape
        np.testing.assert_array_equal(back[k].numpy(), v)


@FUZZ
@given(blob=st.binary(max_size=300))
def test_fuzz_random_bytes(tmp_path, blob):
    path = _load_bytes(tmp_path, blob)
    try:
        back = loom.load(path)
    except loom.LoomError as e:
        assert str(path) in str(e) and "unexpected" not in str(e), str(e)
        return
    _agrees_with_safetensors(blob, back)


_TAG_SIZES = {"F32": 4, "F64": 8, "I64": 8, "I16": 2, "U8": 1, "BOOL": 1, "F16": 2}
_counts = st.one_of(st.integers(0, 6), st.integers(-3, 2**64), st.sampled_from([True, 1.0, "2", None]))


@FUZZ
@given(data=st.data())
def test_fuzz_headers(tmp_path, data):
    """Headers near the valid ones: random dtypes, shapes and offsets (overlaps, gaps, past the end)."""
    names = data.draw(st.lists(st.sampled_from("abcd"), max_size=4, unique=True))
    rarely = st.integers(0, 5).map(lambda i: i == 0)  # Each field goes wrong one time in six.
    header, offset = {}, 0
    for name in names:
        tag = data.draw(st.sampled_from([*_TAG_SIZES, "BF16"]))
        if data.draw(rarely):
            tag = data.draw(st.sampled_from(["U16", "Q4", 7, None]))
        shape = data.draw(st.lists(st.integers(0, 4), max_size=3))
        size = int(np.prod(shape)) * _TAG_SIZES.get(tag, 2)
        offsets = [offset, offset + size]
        if data.draw(rarely):
            shape = data.draw(st.one_of(st.lists(_counts, max_size=3), _counts))
        if data.draw(rarely):
            offsets = data.draw(st.one_of(st.lists(_counts, max_size=3), _counts))
        elif data.draw(rarely):
            shift = data.draw(st.integers(-3, 3))
            offsets = [max(0, offsets[0] + shift), max(0, offsets[1] + shift)]
        offset += size
        header[name] = {"dtype": tag, "shape": shape, "data_offsets": offsets}
    if data.draw(rarely):
        header["__metadata__"] = data.draw(st.sampled_from(
            [None, {}, {"k": "v"}, {"k": 1}, [], {ck.STRUCTURE_KEY: '{"root":{"__tensor__":"a"}}'}]))
    extra = data.draw(st.integers(-2, 2)) if data.draw(rarely) else 0
    blob = _safetensors(header, bytes(max(0, offset + extra)) if data.draw(st.booleans())
                        else data.draw(st.binary(min_size=max(0, offset + extra), max_size=max(0, offset + extra))))
    path = _load_bytes(tmp_path, blob)
    try:
        back = loom.load(path)
    except loom.LoomError as e:
        assert str(path) in str(e) and "unexpected" not in str(e), str(e)
        return
    if isinstance(back, dict) and not any(h.get("dtype") == "BF16" for h in header.values()
                                          if isinstance(h, dict)):
        _agrees_with_safetensors(blob, back)


# ----------------------------------------------------------------------------- atomic writes, temp files


def test_save_fsyncs_the_file_then_renames_then_fsyncs_the_directory(tmp_path, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append("fsync dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "fsync file")
        real_fsync(fd)

    def replace(src, dst):
        events.append("replace")
        real_replace(src, dst)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    loom.save({"w": loom.ones(3)}, tmp_path / "c.safetensors")
    assert events == ["fsync file", "replace", "fsync dir"]
    assert sorted(os.listdir(tmp_path)) == ["c.safetensors"]


def _temp_name(target, host, pid, started=None, token="0123abcd"):
    started = ck._start_time(pid) if started is None else started
    return f"{ck._temp_prefix(str(target))}{host}.{pid}-{started}.{token}"


def test_stale_temp_files_of_the_target_are_removed_and_no_others(tmp_path):
    target = tmp_path / "ckpt.safetensors"
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(done.stdout)  # A process that has exited and been reaped.
    old = time.time() - 2 * ck.STALE_TEMP_AGE_S
    names = {
        "dead writer": (_temp_name(target, ck._HOST, dead), None, False),
        "live writer": (_temp_name(target, ck._HOST, os.getppid()), None, True),
        "this process": (_temp_name(target, ck._HOST, os.getpid(), token="0000beef"), None, True),
        # A process killed before this one started with the same pid (as after a container restart).
        "reused pid": (_temp_name(target, ck._HOST, os.getpid(), ck._start_time(os.getpid()) - 1, "0000dead"),
                       None, not ck._start_time(os.getpid())),
        "other host, fresh": (_temp_name(target, "otherhost", dead), None, True),
        "other host, silent": (_temp_name(target, "otherhost", dead, token="00000001"), old, False),
        "other target": (_temp_name(tmp_path / "ckpt.safetensors.bak", ck._HOST, dead), None, True),
        "other target, longer": (f".tmp-ckpt.safetensors.x.{ck._HOST}.{dead}-0.0123abcd", None, True),
        "not loom's": (".tmp-ckpt.safetensors.notes", old, True),
    }
    for name, mtime, _ in names.values():
        (tmp_path / name).write_bytes(b"partial")
        if mtime is not None:
            os.utime(tmp_path / name, (mtime, mtime))
    loom.save({"step": 1}, target)
    left = set(os.listdir(tmp_path))
    for what, (name, _, kept) in names.items():
        assert (name in left) == kept, what
    assert loom.load(target) == {"step": 1}


BLOCKED_SAVER = textwrap.dedent("""
    import os, sys, time
    import loom
    def hang(src, dst):  # The temp file is complete and fsynced; the process dies before the rename.
        print("ready", flush=True)
        time.sleep(60)
    os.replace = hang
    loom.save({"step": 99, "w": loom.ones(1000)}, sys.argv[1])
""")


def test_killed_save_leaves_a_temp_file_that_the_next_save_removes(tmp_path):
    target = tmp_path / "ckpt.safetensors"
    loom.save({"step": 1}, target)
    script = tmp_path / "saver.py"
    script.write_text(BLOCKED_SAVER)
    proc = subprocess.Popen([sys.executable, str(script), str(target)], stdout=subprocess.PIPE,
                            env=dict(os.environ, PYTHONPATH=ROOT))
    try:
        assert proc.stdout.readline().strip() == b"ready"
        temps = [p for p in os.listdir(tmp_path) if p.startswith(".tmp-")]
        assert len(temps) == 1
        loom.save({"step": 2}, target)  # A concurrent save to the same target leaves the live one's file.
        assert temps[0] in os.listdir(tmp_path) and loom.load(target) == {"step": 2}
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    loom.save({"step": 3}, target)
    assert sorted(os.listdir(tmp_path)) == ["ckpt.safetensors", "saver.py"]
    assert loom.load(target) == {"step": 3}
