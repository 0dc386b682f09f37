"""Sharded record files (.lrec): examples larger than memory, stored with CRCs and an index for random access.

The byte layout is specified in `docs/record-format.md`; this module is its
reference implementation. An example is a dict of named fields (NumPy arrays
of any non-object dtype and shape, NumPy scalars, ints, floats, bools, bytes,
str), encoded as a small JSON field table followed by the raw bytes. Nothing
is pickled, and reading never runs code.
"""
from __future__ import annotations

import glob
import json
import numbers
import os
import re
import struct
import zlib
from typing import Any, Iterable, Iterator, Sequence

import numpy as np
from numpy.lib import format as npformat

from loom.errors import LoomError, LoomIndexError, LoomTypeError, LoomValueError
from loom.data.errors import LoomFileNotFoundError

MAGIC = b"LOOMREC\x00"
INDEX_MAGIC = b"LOOMIDX\x00"
VERSION = 1
HEADER = struct.Struct("<8sII")          # magic, version, flags
RECORD_HEADER = struct.Struct("<QII")    # payload length, crc32(length bytes), crc32(payload)
TRAILER = struct.Struct("<QQII8s")       # record count, index offset, crc32(index), crc32(first 20 bytes), magic
ALIGN = 16                               # Field data offsets inside a payload are multiples of this.
SUFFIX = ".lrec"
_SHARD_RE = re.compile(r"-(\d{5})-of-(\d{5})\.lrec$")


def _crc(data) -> int:
    return zlib.crc32(data) & 0xFFFFFFFF


def _pad(n: int) -> int:
    return -n % ALIGN


# ------------------------------------------------------------------ examples

def encode_example(example: dict) -> bytes:
    """Encode one example (a dict of named fields) as a record payload.

    Examples
    --------
    >>> from loom.data.records import encode_example, decode_example
    >>> ex = decode_example(encode_example({"x": np.arange(3, dtype=np.int16), "label": 2, "name": "a"}))
    >>> ex["x"].dtype, ex["label"], ex["name"]
    (dtype('int16'), 2, 'a')
    """
    if not isinstance(example, dict):
        raise LoomTypeError(f"loom.data.records: an example must be a dict of named fields, got "
                            f"{type(example).__name__}")
    fields, blobs, offset = [], [], 0
    for name, value in example.items():
        if not isinstance(name, str):
            raise LoomTypeError(f"loom.data.records: field names must be str, got {name!r}")
        entry, raw = _encode_field(name, value)
        entry["offset"], entry["size"] = offset, len(raw)
        fields.append(entry)
        blobs.append(raw)
        blobs.append(b"\x00" * _pad(len(raw)))
        offset += len(raw) + _pad(len(raw))
    table = json.dumps({"fields": fields}, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    head = struct.pack("<I", len(table)) + table
    return b"".join([head, b"\x00" * _pad(len(head))] + blobs)


def _encode_field(name: str, value: Any) -> tuple[dict, bytes]:
    if hasattr(value, "numpy") and hasattr(value, "dtype") and not isinstance(value, (np.ndarray, np.generic)):
        value = np.asarray(value.numpy(force=True))  # A loom Tensor is stored as its NumPy array.
    if isinstance(value, (np.ndarray, np.generic)):
        arr = np.asarray(value)
        if arr.dtype.hasobject:
            raise LoomTypeError(f"loom.data.records: field {name!r} has dtype {arr.dtype}, which holds Python objects; "
                                "records store only plain data (never pickles)")
        kind = "scalar" if isinstance(value, np.generic) else "ndarray"
        entry = {"name": name, "kind": kind, "dtype": npformat.dtype_to_descr(arr.dtype), "shape": list(arr.shape)}
        return entry, np.ascontiguousarray(arr).tobytes()
    if isinstance(value, bool):
        return {"name": name, "kind": "bool"}, bytes([value])
    if isinstance(value, numbers.Integral):
        if not -2 ** 63 <= value < 2 ** 63:
            raise LoomValueError(f"loom.data.records: int field {name!r} = {value} does not fit in 64 bits")
        return {"name": name, "kind": "int"}, struct.pack("<q", value)
    if isinstance(value, numbers.Real):
        return {"name": name, "kind": "float"}, struct.pack("<d", value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"name": name, "kind": "bytes"}, bytes(value)
    if isinstance(value, str):
        return {"name": name, "kind": "str"}, value.encode("utf-8")
    raise LoomTypeError(f"loom.data.records: field {name!r} has type {type(value).__name__}; "
                        f"supported are NumPy arrays "
                        "and scalars, loom Tensors, int, float, bool, bytes and str")


def decode_example(payload) -> dict:
    """Decode a record payload into a dict of fields (arrays are writable and share the payload's buffer)."""
    buf = payload if isinstance(payload, (bytearray, memoryview)) else bytearray(payload)
    mv = memoryview(buf)
    (table_len,) = struct.unpack_from("<I", mv, 0)
    table = json.loads(bytes(mv[4:4 + table_len]).decode("utf-8"))
    start = 4 + table_len + _pad(4 + table_len)
    out: dict = {}
    for f in table["fields"]:
        raw = mv[start + f["offset"]:start + f["offset"] + f["size"]]
        kind = f["kind"]
        if kind in ("ndarray", "scalar"):
            dtype = npformat.descr_to_dtype(f["dtype"])
            arr = np.frombuffer(raw, dtype=dtype).reshape(f["shape"]) if dtype.itemsize else \
                np.zeros(f["shape"], dtype)
            out[f["name"]] = arr[()] if kind == "scalar" else arr
        elif kind == "int":
            out[f["name"]] = struct.unpack("<q", raw)[0]
        elif kind == "float":
            out[f["name"]] = struct.unpack("<d", raw)[0]
        elif kind == "bool":
            out[f["name"]] = bool(raw[0])
        elif kind == "bytes":
            out[f["name"]] = bytes(raw)
        elif kind == "str":
            out[f["name"]] = bytes(raw).decode("utf-8")
        else:
            raise LoomError(f"loom.data.records: unknown field kind {kind!r} for field {f['name']!r}")
    return out


# ------------------------------------------------------------------ writing

def shard_name(prefix: str, index: int, count: int) -> str:
    """The file name of shard `index` of `count`: prefix-00000-of-00004.lrec."""
    return f"{prefix}-{index:05d}-of-{count:05d}{SUFFIX}"


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path or ".", os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class _ShardFile:
    """One shard being written to a temporary file."""

    def __init__(self, temp_path: str) -> None:
        self.temp_path = temp_path
        self.fh = open(temp_path, "wb")
        self.fh.write(HEADER.pack(MAGIC, VERSION, 0))
        self.pos = HEADER.size
        self.offsets: list[int] = []

    def write(self, payload: bytes) -> None:
        length = struct.pack("<Q", len(payload))
        self.fh.write(RECORD_HEADER.pack(len(payload), _crc(length), _crc(payload)))
        self.fh.write(payload)
        self.offsets.append(self.pos)
        self.pos += RECORD_HEADER.size + len(payload)

    def finish(self) -> None:
        index = np.asarray(self.offsets, dtype="<u8").tobytes()
        self.fh.write(index)
        head = struct.pack("<QQI", len(self.offsets), self.pos, _crc(index))
        self.fh.write(head + struct.pack("<I", _crc(head)) + INDEX_MAGIC)
        self.fh.flush()
        os.fsync(self.fh.fileno())
        self.fh.close()

    def abort(self) -> None:
        try:
            self.fh.close()
        finally:
            if os.path.exists(self.temp_path):
                os.remove(self.temp_path)


class RecordWriter:
    """Write examples into sharded record files, each shard atomically.

    Parameters
    ----------
    prefix : str
        Path prefix; shards are named `prefix-00000-of-00004.lrec`.
    num_shards : int, optional
        Fixed number of shards; example i goes to shard i mod num_shards.
    examples_per_shard : int, optional
        Fill shards in order with this many examples each (the shard count
        follows from the total). Give at most one of the two; default one shard.

    Notes
    -----
    Shards are written to temporary files in the target directory and, when
    the writer closes without error, fsynced and renamed to their final names
    (then the directory is fsynced). An exception inside the `with` block
    removes the temporary files and leaves nothing half-written.

    Examples
    --------
    >>> import tempfile, os
    >>> d = tempfile.mkdtemp()
    >>> with loom.data.RecordWriter(os.path.join(d, "train"), num_shards=2) as w:
    ...     for i in range(5):
    ...         w.write({"x": np.full(3, i, np.float32), "y": i})
    >>> [os.path.basename(f) for f in w.files]
    ['train-00000-of-00002.lrec', 'train-00001-of-00002.lrec']
    >>> [ex["y"] for ex in loom.data.read_records(w.files)]
    [0, 2, 4, 1, 3]
    """

    def __init__(self, prefix: str | os.PathLike, num_shards: int | None = None,
                 examples_per_shard: int | None = None) -> None:
        if num_shards is not None and examples_per_shard is not None:
            raise LoomValueError("loom.data.RecordWriter: give num_shards or examples_per_shard, not both")
        for name, v in (("num_shards", num_shards), ("examples_per_shard", examples_per_shard)):
            if v is not None and (not isinstance(v, numbers.Integral) or isinstance(v, bool) or v < 1):
                raise LoomValueError(f"loom.data.RecordWriter: {name} should be a positive integer, got {v!r}")
        self.prefix = os.fspath(prefix)
        directory = os.path.dirname(self.prefix)
        if directory and not os.path.isdir(directory):
            raise LoomFileNotFoundError(f"loom.data.RecordWriter: directory {directory!r} does not exist")
        self.num_shards = num_shards if examples_per_shard is None else None
        if self.num_shards is None and examples_per_shard is None:
            self.num_shards = 1
        self.examples_per_shard = examples_per_shard
        self.files: list[str] = []
        self.num_written = 0
        self._shards: list[_ShardFile] = []
        self._closed = False
        if self.num_shards is not None:
            self._shards = [self._new_shard(k) for k in range(self.num_shards)]

    def _new_shard(self, k: int) -> _ShardFile:
        return _ShardFile(f"{self.prefix}-{k:05d}{SUFFIX}.tmp-{os.getpid()}")

    def write(self, example: dict) -> None:
        """Append one example (a dict of named fields)."""
        if self._closed:
            raise LoomError("loom.data.RecordWriter.write: the writer is closed")
        payload = encode_example(example)
        if self.num_shards is not None:
            shard = self._shards[self.num_written % self.num_shards]
        else:
            if not self._shards or len(self._shards[-1].offsets) >= self.examples_per_shard:
                self._shards.append(self._new_shard(len(self._shards)))
            shard = self._shards[-1]
        shard.write(payload)
        self.num_written += 1

    def close(self) -> list[str]:
        """Finish every shard and move it to its final name; returns the shard paths."""
        if self._closed:
            return self.files
        if not self._shards:
            self._shards.append(self._new_shard(0))
        try:
            for s in self._shards:
                s.finish()
        except BaseException:
            self.abort()
            raise
        count = len(self._shards)
        self.files = [shard_name(self.prefix, k, count) for k in range(count)]
        for s, final in zip(self._shards, self.files):
            os.replace(s.temp_path, final)
        _fsync_dir(os.path.dirname(self.prefix))
        self._closed = True
        return self.files

    def abort(self) -> None:
        """Discard everything written (temporary files are removed; existing shards are untouched)."""
        self._closed = True
        for s in self._shards:
            s.abort()

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


# ------------------------------------------------------------------ reading

def list_shards(prefix: str | os.PathLike) -> list[str]:
    """The complete, ordered shard set `prefix-*-of-N.lrec`; LoomError if shards are missing or sets mix."""
    prefix = os.fspath(prefix)
    found = sorted(glob.glob(glob.escape(prefix) + "-[0-9][0-9][0-9][0-9][0-9]-of-[0-9][0-9][0-9][0-9][0-9]"
                             + SUFFIX))
    if not found:
        raise LoomFileNotFoundError(f"loom.data.records: no shards named {prefix}-NNNNN-of-NNNNN{SUFFIX}")
    counts = {int(_SHARD_RE.search(f).group(2)) for f in found}
    if len(counts) != 1:
        raise LoomError(f"loom.data.records: {prefix} has shard sets of different sizes {sorted(counts)}; "
                        "remove the stale ones")
    count = counts.pop()
    missing = [shard_name(prefix, k, count) for k in range(count) if shard_name(prefix, k, count) not in found]
    if missing:
        raise LoomError(f"loom.data.records: shard set {prefix} is incomplete; missing {missing}")
    return found


def resolve_files(files) -> list[str]:
    """A list of shard paths from a list of paths, one path, a glob pattern, or a shard prefix."""
    if isinstance(files, (str, os.PathLike)):
        path = os.fspath(files)
        if os.path.isfile(path):
            return [path]
        if glob.has_magic(path):
            out = sorted(glob.glob(path))
            if not out:
                raise LoomFileNotFoundError(f"loom.data.records: no files match {path!r}")
            return out
        return list_shards(path)
    out = [os.fspath(f) for f in files]
    if not out:
        raise LoomValueError("loom.data.records: the list of record files is empty")
    return out


class RecordReader:
    """Random and sequential access to one record shard, checking CRCs.

    Parameters
    ----------
    path : str
        A `.lrec` shard.
    verify : bool
        Check each record's CRC32 when it is read. Default: True. Structural
        checks (magic, footer and index CRCs) always run.

    Examples
    --------
    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "d")
    >>> with loom.data.RecordWriter(p) as w:
    ...     w.write({"t": "hello"})
    >>> r = loom.data.RecordReader(w.files[0])
    >>> len(r), r[0]["t"]
    (1, 'hello')
    """

    def __init__(self, path: str | os.PathLike, verify: bool = True) -> None:
        self.path = os.fspath(path)
        self.verify = verify
        self._fd: int | None = None
        self._pid = -1
        size = os.path.getsize(self.path)
        if size < HEADER.size + TRAILER.size:
            self._corrupt(f"is {size} bytes, too short for a record file")
        magic, version, _ = HEADER.unpack(self._pread(HEADER.size, 0))
        if magic != MAGIC:
            self._corrupt(f"does not start with the record magic {MAGIC!r} (found {magic!r}); not a .lrec file")
        if version != VERSION:
            self._corrupt(f"has format version {version}; this loom reads version {VERSION}")
        trailer = self._pread(TRAILER.size, size - TRAILER.size)
        count, index_offset, index_crc, trailer_crc, index_magic = TRAILER.unpack(trailer)
        if index_magic != INDEX_MAGIC or _crc(trailer[:20]) != trailer_crc:
            self._corrupt("has a damaged footer (index magic or footer CRC32 mismatch); the file is truncated or "
                          "corrupt")
        if index_offset + 8 * count + TRAILER.size != size:
            self._corrupt(f"footer says {count} records with the index at byte {index_offset}, which does not match "
                          f"the file size {size}")
        index = self._pread(8 * count, index_offset)
        if _crc(index) != index_crc:
            self._corrupt("has a corrupt index (CRC32 mismatch)")
        self.offsets = np.frombuffer(index, dtype="<u8").astype(np.int64)
        self._ends = np.append(self.offsets[1:], index_offset) if count else self.offsets
        if count and (self.offsets[0] != HEADER.size or np.any(self._ends - self.offsets < RECORD_HEADER.size)):
            self._corrupt("has an index whose record offsets are out of order")
        self.index_offset = index_offset

    def _corrupt(self, what: str):
        raise LoomError(f"loom.data.RecordReader: {self.path} {what}")

    def _fileno(self) -> int:
        if self._fd is None or self._pid != os.getpid():  # A forked child opens its own descriptor.
            self._fd = os.open(self.path, os.O_RDONLY)
            self._pid = os.getpid()
        return self._fd

    def _pread(self, n: int, offset: int) -> bytes:
        data = os.pread(self._fileno(), n, offset)
        if len(data) != n:
            self._corrupt(f"ended early: wanted {n} bytes at offset {offset}, got {len(data)}")
        return data

    def __len__(self) -> int:
        return len(self.offsets)

    def _index(self, i: int) -> int:
        n = len(self.offsets)
        if not -n <= i < n:
            raise LoomIndexError(f"loom.data.RecordReader: record index {i} is out of range for {self.path} "
                                 f"({n} records)")
        return i % n if n else i

    def read_record(self, i: int) -> tuple[int, bytearray]:
        """Record `i` unchecked: its byte offset and its bytes (header and payload), for `check_record`."""
        i = self._index(i)
        start, end = int(self.offsets[i]), int(self._ends[i])
        buf = bytearray(end - start)
        got = os.preadv(self._fileno(), [buf], start)
        if got != len(buf):
            self._corrupt(f"ended early in record {i} (byte offset {start})")
        return start, buf

    def read_raw(self, i: int) -> memoryview:
        """Record `i`'s payload, checked (a writable buffer)."""
        i = self._index(i)
        start, buf = self.read_record(i)
        return check_record(self.path, i, start, buf, self.verify)

    def __getitem__(self, i: int) -> dict:
        return decode_example(self.read_raw(i))

    def __iter__(self) -> Iterator[dict]:
        for i in range(len(self)):
            yield self[i]

    def close(self) -> None:
        if self._fd is not None and self._pid == os.getpid():
            os.close(self._fd)
        self._fd = None

    def __enter__(self) -> RecordReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_fd"], state["_pid"] = None, -1
        return state


def check_record(path: str, i: int, offset: int, record, verify: bool = True) -> memoryview:
    """The payload of a raw record (header + payload); LoomError naming file and record if it is corrupt."""
    length, length_crc, payload_crc = RECORD_HEADER.unpack_from(record, 0)
    where = f"loom.data.RecordReader: {path}: record {i} (byte offset {offset})"
    if _crc(bytes(record[:8])) != length_crc or length != len(record) - RECORD_HEADER.size:
        raise LoomError(f"{where} is corrupt: its length field is damaged")
    payload = memoryview(record)[RECORD_HEADER.size:]
    if verify:
        crc = _crc(payload)
        if crc != payload_crc:
            raise LoomError(f"{where} is corrupt: payload CRC32 mismatch (stored 0x{payload_crc:08x}, computed "
                            f"0x{crc:08x})")
    return payload


def read_records(files: str | os.PathLike | Sequence, verify: bool = True) -> Iterator[dict]:
    """Every example of the record files, file after file.

    Parameters
    ----------
    files : str or list of str
        Shard paths, one path, a glob pattern, or a shard prefix (as written by
        `RecordWriter`).
    verify : bool
        Check CRC32s. Default: True.

    Examples
    --------
    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "d")
    >>> with loom.data.RecordWriter(p, examples_per_shard=2) as w:
    ...     for i in range(3):
    ...         w.write({"i": i})
    >>> [ex["i"] for ex in loom.data.read_records(p)]
    [0, 1, 2]
    """
    for path in resolve_files(files):
        with RecordReader(path, verify) as r:
            yield from r


class RecordDataset:
    """A map-style dataset over record shards (random access through the shards' indexes).

    Examples
    --------
    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "d")
    >>> with loom.data.RecordWriter(p, num_shards=2) as w:
    ...     for i in range(4):
    ...         w.write({"i": i})
    >>> ds = loom.data.RecordDataset(p)
    >>> len(ds), [ds[k]["i"] for k in range(4)]
    (4, [0, 2, 1, 3])
    """

    def __init__(self, files, transform=None, verify: bool = True) -> None:
        self.files = resolve_files(files)
        self.readers = [RecordReader(f, verify) for f in self.files]
        self.transform = transform
        self.cumulative = np.cumsum([len(r) for r in self.readers])

    def __len__(self) -> int:
        return int(self.cumulative[-1]) if len(self.cumulative) else 0

    def __getitem__(self, i: int):
        n = len(self)
        if not -n <= i < n:
            raise LoomIndexError(f"loom.data.RecordDataset: index {i} is out of range for {n} examples")
        i %= n
        shard = int(np.searchsorted(self.cumulative, i, side="right"))
        local = i - (int(self.cumulative[shard - 1]) if shard else 0)
        ex = self.readers[shard][local]
        return self.transform(ex) if self.transform is not None else ex


def count_records(files: Iterable[str]) -> list[int]:
    """The number of records in each shard (reads only the footers)."""
    out = []
    for f in files:
        with RecordReader(f, verify=False) as r:
            out.append(len(r))
    return out
