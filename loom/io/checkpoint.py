"""`loom.save` / `loom.load`: nested state in one safetensors file, written atomically and checksummed.

Tensors are stored as safetensors entries, so the file opens with the
`safetensors` package's own loaders and with PyTorch's. Everything else (the
nesting of dicts, lists and tuples, numbers, strings, None: optimizer step
counts, scheduler state, user metadata) is a JSON document in the file's
metadata under the key ``loom.structure``. Nothing is pickled and loading
never executes code.

Integrity: the metadata also holds a CRC-32 of every tensor's bytes
(``loom.crc32``) and a CRC-32 of the header itself (``loom.header_crc32``,
taken over the header's canonical JSON without that one entry). CRC-32 catches
every error burst of up to 32 bits, so any flipped byte is found, at about
4 GB/s. Files from other writers carry no checksums and load unverified, but
every file is checked against the safetensors layout rules (known dtypes,
shapes that match their byte ranges, ranges that tile the data exactly).

A save writes to a temporary file in the target's directory, fsyncs it,
renames it over the target and fsyncs the directory, so an exception or a kill
mid-save leaves the previous checkpoint intact. The temporary file's name
records the target, host, process id and process start time, so the next save
to the same target can remove what a killed save left behind without touching
a live save's file.
"""
from __future__ import annotations

import json
import math
import os
import re
import secrets
import socket
import struct
import time
import zipfile
import zlib
from typing import Any

import numpy as np

from loom import _upper
from loom import dtypes as dt
from loom.errors import DTypeError, LoomError

STRUCTURE_KEY = "loom.structure"
TENSOR_CRC_KEY = "loom.crc32"
HEADER_CRC_KEY = "loom.header_crc32"
FORMAT_VERSION = 1
# The safetensors format's own limit on the header, which keeps a corrupt length field from reading gigabytes.
MAX_HEADER_BYTES = 100_000_000
# A temporary file from another host whose writer cannot be asked is stale once untouched this long.
STALE_TEMP_AGE_S = 3600.0

_TAG_OF = {dt.bool_: "BOOL", dt.uint8: "U8", dt.int8: "I8", dt.int16: "I16", dt.int32: "I32",
           dt.int64: "I64", dt.float16: "F16", dt.bfloat16: "BF16", dt.float32: "F32",
           dt.float64: "F64", dt.complex64: "C64"}
_DTYPE_OF = {tag: d for d, tag in _TAG_OF.items()}
# Tags other writers use that loom has no dtype for.
_FOREIGN_TAGS = ("U16", "U32", "U64", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F4", "F6_E2M3", "F6_E3M2", "C128")


# ----------------------------------------------------------------------------- structure


def _encode(obj: Any, tensors: dict[str, np.ndarray], dtypes: dict[str, str], seen: dict[int, str],
            path: str, active: set[int]) -> Any:
    from loom.tensor import Tensor
    if isinstance(obj, Tensor):
        key = seen.get(id(obj))
        if key is None:
            key = path or "tensor"
            while key in tensors or key == "__metadata__":
                key += "_"
            arr = obj.detach()._array()
            # np.ascontiguousarray would turn a 0-d array into a 1-d one; safetensors is little-endian.
            arr = np.ascontiguousarray(arr).reshape(arr.shape).astype(arr.dtype.newbyteorder("<"), copy=False)
            tensors[key] = arr
            dtypes[key] = obj.dtype.name
            seen[id(obj)] = key
        return {"__tensor__": key}
    if isinstance(obj, (dict, list, tuple)):
        if id(obj) in active:
            raise LoomError(f"loom.save: the {type(obj).__name__} at {path or '<root>'} contains itself; "
                            "checkpoints hold trees, not cycles")
        active.add(id(obj))
        try:
            if isinstance(obj, dict):
                items = []
                for k, v in obj.items():
                    if not isinstance(k, (str, int)) or isinstance(k, bool):
                        raise LoomError(f"loom.save: dict keys must be str or int, got {type(k).__name__} at "
                                        f"{path or '<root>'}")
                    items.append([k, _encode(v, tensors, dtypes, seen, f"{path}.{k}" if path else str(k),
                                             active)])
                return {"__dict__": items}
            kind = "__list__" if isinstance(obj, list) else "__tuple__"
            return {kind: [_encode(v, tensors, dtypes, seen, f"{path}.{i}" if path else str(i), active)
                           for i, v in enumerate(obj)]}
        finally:
            active.discard(id(obj))
    if isinstance(obj, float) and not math.isfinite(obj):
        return {"__float__": repr(obj)}
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, np.generic):
        return _encode(obj.item(), tensors, dtypes, seen, path, active)
    if isinstance(obj, dt.DType):
        return {"__dtype__": obj.name}
    raise LoomError(f"loom.save: cannot store an object of type {type(obj).__name__} at "
                    f"{path or '<root>'}; checkpoints hold tensors, numbers, strings, None and "
                    "dicts/lists/tuples of them (never pickled objects)")


def _decode(obj: Any, tensors: dict[str, Any], where: str, fail) -> Any:
    """Rebuild the saved object from its JSON form; `fail(problem)` makes the error for a malformed one."""
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if not isinstance(obj, dict) or len(obj) != 1:
        raise fail(f"the structure entry at {where} is {_short(obj)}, not a tagged value")
    ((tag, val),) = obj.items()
    if tag == "__tensor__":
        if not isinstance(val, str) or val not in tensors:
            raise fail(f"the structure refers to a tensor {_short(val)} at {where} that the file does not hold")
        return tensors[val]
    if tag == "__dict__":
        if not isinstance(val, list):
            raise fail(f"the dict at {where} is {_short(val)}, not a list of [key, value] pairs")
        out = {}
        for item in val:
            if (not isinstance(item, list) or len(item) != 2 or not isinstance(item[0], (str, int))
                    or isinstance(item[0], bool)):
                raise fail(f"the dict at {where} has an item {_short(item)}, not a [str or int key, value] pair")
            out[item[0]] = _decode(item[1], tensors, f"{where}.{item[0]}", fail)
        return out
    if tag in ("__list__", "__tuple__"):
        if not isinstance(val, list):
            raise fail(f"the {tag.strip('_')} at {where} is {_short(val)}, not a JSON list")
        items = [_decode(v, tensors, f"{where}.{i}", fail) for i, v in enumerate(val)]
        return items if tag == "__list__" else tuple(items)
    if tag == "__float__":
        if val not in ("nan", "inf", "-inf"):
            raise fail(f"the non-finite float at {where} is {_short(val)}, not 'nan', 'inf' or '-inf'")
        return float(val)
    if tag == "__dtype__":
        if not isinstance(val, str) or val not in {d.name for d in dt.ALL}:
            raise fail(f"the dtype at {where} is {_short(val)}, not a loom dtype name")
        return dt.from_name(val)
    raise fail(f"unknown entry {_short(tag)} at {where} in the checkpoint structure")


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


# ----------------------------------------------------------------------------- save


def _header_crc(header: dict) -> int:
    """CRC-32 of the header's canonical JSON, leaving out the entry that stores it."""
    meta = {k: v for k, v in header["__metadata__"].items() if k != HEADER_CRC_KEY}
    canonical = json.dumps({**header, "__metadata__": meta}, sort_keys=True, separators=(",", ":"))
    return zlib.crc32(canonical.encode())


def _bytes_of(arr: np.ndarray) -> memoryview:
    return memoryview(arr.reshape(-1).view(np.uint8).data)


def _serialize_header(tensors: dict[str, np.ndarray], dtypes: dict[str, str],
                      meta: dict[str, str]) -> tuple[bytes, list[str]]:
    """The safetensors header (padded to 8 bytes) and the order of the tensors after it."""
    # Widest items first keeps every tensor aligned to its item size, as the safetensors writer does.
    order = sorted(tensors, key=lambda k: (-tensors[k].itemsize, k))
    header: dict[str, Any] = {}
    offset = 0
    for key in order:
        arr = tensors[key]
        d = dt.from_name(dtypes[key])
        if d not in _TAG_OF:
            raise DTypeError(f"loom.save: tensor {key!r} is {d.name}, which the safetensors format cannot store "
                             f"(it stores {sorted(x.name for x in _TAG_OF)}); convert it first, e.g. with "
                             "loom.view_as_real")
        header[key] = {"dtype": _TAG_OF[d], "shape": list(arr.shape),
                       "data_offsets": [offset, offset + arr.nbytes]}
        offset += arr.nbytes
    meta = dict(meta)
    meta[TENSOR_CRC_KEY] = json.dumps({k: f"{zlib.crc32(_bytes_of(tensors[k])):08x}" for k in order},
                                      separators=(",", ":"))
    header["__metadata__"] = meta
    meta[HEADER_CRC_KEY] = f"{_header_crc(header):08x}"
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw, order


_HOST = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())[:40] or "host"
_TEMP_RE = re.compile(r"([A-Za-z0-9-]+)\.([0-9]+)-([0-9]+)\.[0-9a-f]{8}")


def _temp_prefix(path: str) -> str:
    """`.tmp-<target>.`: a save's temporary files name their target, so only its own are cleaned."""
    base = os.path.basename(path)
    tag = base if len(base.encode()) <= 100 else f"{zlib.crc32(base.encode()):08x}"
    return f".tmp-{tag}."


def _start_time(pid: int) -> int:
    """When process `pid` started (clock ticks since boot; Linux), 0 where unknown: tells a reused pid apart."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return int(fh.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return 0


def _writer_alive(pid: int, started: int) -> bool:
    """Whether the process that created a temporary file on this host still runs."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it exists but belongs to someone else.
        pass
    now = _start_time(pid)
    # The same pid with another start time is a new process (a restarted container often reuses pids).
    return not (started and now and now != started)


def _remove_stale_temps(directory: str, prefix: str) -> None:
    """Delete temporary files of earlier saves to this target whose writer is gone."""
    try:
        names = os.listdir(directory)
    except OSError:
        return
    now = time.time()
    for name in names:
        if not name.startswith(prefix):
            continue
        m = _TEMP_RE.fullmatch(name[len(prefix):])
        if m is None:  # Another target whose name extends ours, or not a loom temporary file.
            continue
        full = os.path.join(directory, name)
        try:
            if m[1] == _HOST and os.name == "posix":
                stale = not _writer_alive(int(m[2]), int(m[3]))
            else:  # A writer on another host (shared filesystem): only its silence tells.
                stale = now - os.lstat(full).st_mtime > STALE_TEMP_AGE_S
            if stale:
                os.unlink(full)
        except OSError:  # Gone already (a concurrent save cleaned it), or not ours to remove.
            pass


def _create_temp(directory: str, prefix: str, opname: str) -> tuple[int, str]:
    for _ in range(100):
        pid = os.getpid()
        tmp = os.path.join(directory, f"{prefix}{_HOST}.{pid}-{_start_time(pid)}.{secrets.token_hex(4)}")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666), tmp
        except FileExistsError:
            continue
    raise LoomError(f"{opname}: could not create a temporary file in {directory!r}")


def save(obj: Any, f, metadata: dict[str, str] | None = None) -> None:
    """Write `obj` (tensors nested in dicts/lists/tuples with plain values) to the file `f`, atomically.

    The file is a safetensors file: ``safetensors`` and PyTorch read its tensors. Its
    metadata records a CRC-32 of every tensor and of the header, which `loom.load`
    verifies. The write goes to a temporary file beside `f` (named
    ``.tmp-<name of f>.<host>.<pid>-<start time>.<random>``), which is fsynced and renamed over `f`,
    and the directory is fsynced: after a crash or kill, `f` holds either the previous
    checkpoint or the new one, never a mix. Each save removes the temporary files that
    killed saves to the same `f` left behind (those of a process that no longer runs
    on this host, or, from another host, untouched for an hour); a concurrent save's
    file is left alone.

    Parameters
    ----------
    obj : a Tensor, or dicts/lists/tuples of Tensors, numbers, strings and None
    f : path of the checkpoint file (conventionally ``*.safetensors``). Whatever its
        suffix (``.pt`` too), the file is in loom's safetensors format; write PyTorch's
        zip format with `loom.io.torch_save`.
    metadata : extra string key/values stored in the safetensors header (the keys
        ``loom.structure``, ``loom.crc32`` and ``loom.header_crc32`` are reserved)

    Examples
    --------
    >>> loom.save({"w": loom.ones(2), "step": 3}, "/tmp/ckpt.safetensors")
    >>> loom.load("/tmp/ckpt.safetensors")["step"]
    3
    """
    path = os.fspath(f)
    tensors: dict[str, np.ndarray] = {}
    dtypes: dict[str, str] = {}
    try:
        structure = _encode(obj, tensors, dtypes, {}, "", set())
        doc = json.dumps({"version": FORMAT_VERSION, "root": structure, "dtypes": dtypes}, allow_nan=False)
    except RecursionError:
        raise LoomError("loom.save: the object is nested too deeply to store") from None
    meta = {str(k): str(v) for k, v in (metadata or {}).items()}
    for key in (STRUCTURE_KEY, TENSOR_CRC_KEY, HEADER_CRC_KEY):
        if key in meta:
            raise LoomError(f"loom.save: metadata key {key!r} is reserved")
    meta[STRUCTURE_KEY] = doc
    head, order = _serialize_header(tensors, dtypes, meta)

    def write(out) -> None:
        out.write(head)
        for key in order:
            out.write(_bytes_of(tensors[key]))
    atomic_write(path, write, "loom.save")


def atomic_write(path: str, write, opname: str) -> None:
    """Call `write(file)` on a temporary file beside `path`, fsync it and rename it over `path`."""
    if os.path.isdir(path):
        raise LoomError(f"{opname}: {path!r} is a directory; give the path of a file to write")
    directory = os.path.dirname(os.path.abspath(path))
    prefix = _temp_prefix(path)
    _remove_stale_temps(directory, prefix)
    fd, tmp = _create_temp(directory, prefix, opname)
    try:
        with os.fdopen(fd, "wb") as out:
            write(out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    try:  # Make the rename itself durable.
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:  # Some platforms and filesystems cannot open or fsync a directory.
        pass


# ----------------------------------------------------------------------------- load


def _foreign_format(path: str, prefix: bytes) -> str | None:
    """Name a well-known non-safetensors format from its first bytes, with a hint how to convert it."""
    torch_hint = ("load it with `torch.load(path, weights_only=True)` and write the state dict with "
                  "`safetensors.torch.save_file(state_dict, 'model.safetensors')`, which loom.load reads")
    if prefix.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        try:
            with zipfile.ZipFile(path) as z:
                names = z.namelist()
        except (zipfile.BadZipFile, OSError, ValueError, EOFError):
            return "a damaged zip archive, not a safetensors file"
        if any(n == "data.pkl" or n.endswith("/data.pkl") for n in names):
            return f"a PyTorch pickle checkpoint (torch.save), not a safetensors file; {torch_hint}"
        if names and all(n.endswith(".npy") for n in names):
            return ("a NumPy .npz archive, not a safetensors file; load it with numpy.load and wrap the "
                    "arrays with loom.tensor")
        return "a zip archive, not a safetensors file"
    if len(prefix) >= 2 and prefix[0] == 0x80 and 2 <= prefix[1] <= 5:
        return f"a Python pickle (such as a legacy torch.save checkpoint), not a safetensors file; {torch_hint}"
    if prefix.startswith(b"\x93NUMPY"):
        return "a NumPy .npy file, not a safetensors file; load it with numpy.load and wrap it with loom.tensor"
    if prefix.startswith(b"\x89HDF\r\n\x1a\n"):
        return "an HDF5 file, not a safetensors file"
    if prefix.startswith(b"\x1f\x8b"):
        return "a gzip-compressed file, not a safetensors file; decompress it first"
    if prefix.startswith(b"GGUF"):
        return "a GGUF file, not a safetensors file"
    return None


def _parse_header(raw: bytes, fail) -> dict:
    if not raw.startswith(b"{"):
        raise fail("the safetensors header does not start with '{' (not a safetensors file?)")
    try:
        header = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise fail(f"the safetensors header is not UTF-8 text (byte {e.start} of the header)") from None
    except ValueError as e:  # Also integers too long to convert.
        raise fail(f"the safetensors header is not valid JSON: {e}") from None
    except RecursionError:
        raise fail("the safetensors header nests too deeply") from None
    if not isinstance(header, dict):
        raise fail(f"the safetensors header is a JSON {type(header).__name__}, not an object")
    return header


def _check_layout(header: dict, data_len: int, fail) -> tuple[dict[str, tuple], dict[str, str]]:
    """Validate every entry against the safetensors rules; returns {name: (dtype, shape, begin, end)}."""
    meta = header.get("__metadata__")
    if meta is None:
        meta = {}
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise fail("the safetensors __metadata__ is not a map of strings to strings")
    entries: dict[str, tuple] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(entry, dict):
            raise fail(f"the header entry of tensor {name!r} is {_short(entry)}, not an object")
        tag, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
        if tag not in _DTYPE_OF:
            if tag in _FOREIGN_TAGS:
                raise fail(f"tensor {name!r} has dtype {tag}, which loom does not support (it has "
                           f"{', '.join(_DTYPE_OF)})")
            raise fail(f"tensor {name!r} has an unknown dtype {_short(tag)}")

        def is_count(v: Any) -> bool:
            return isinstance(v, int) and not isinstance(v, bool) and v >= 0
        if not isinstance(shape, list) or not all(is_count(s) for s in shape):
            raise fail(f"tensor {name!r} has shape {_short(shape)}, not a list of non-negative integers")
        if (not isinstance(offsets, list) or len(offsets) != 2 or not all(is_count(o) for o in offsets)
                or offsets[0] > offsets[1]):
            raise fail(f"tensor {name!r} has data_offsets {_short(offsets)}, not [begin, end] with "
                       "0 <= begin <= end")
        d = _DTYPE_OF[tag]
        nbytes = math.prod(shape) * d.itemsize
        if offsets[1] - offsets[0] != nbytes:
            raise fail(f"tensor {name!r} of dtype {tag} and shape {shape} needs {nbytes} bytes but its "
                       f"data_offsets {offsets} span {offsets[1] - offsets[0]}")
        if offsets[1] > data_len:
            raise fail(f"tensor {name!r} has data_offsets {offsets} past the end of the data "
                       f"({data_len} bytes; is the file truncated?)")
        entries[name] = (d, tuple(shape), offsets[0], offsets[1])
    # The byte ranges must tile the data exactly: no overlaps, no holes, nothing after the last one.
    end, last = 0, None
    for name, (_, _, b, e) in sorted(entries.items(), key=lambda kv: (kv[1][2], kv[1][3])):
        if b != end:
            what = f"overlaps tensor {last!r}" if b < end else f"leaves a gap of {b - end} bytes before it"
            raise fail(f"tensor {name!r} has data_offsets [{b}, {e}], which {what}")
        end, last = e, name
    if end != data_len:
        raise fail(f"the tensors cover {end} bytes of data but the file holds {data_len} after the header "
                   "(truncated, or the header length is wrong)")
    return entries, meta


def _read_exact(fh, view: memoryview) -> int:
    got = 0
    while got < len(view):
        n = fh.readinto(view[got:])
        if not n:
            break
        got += n
    return got


def _hex_crc(value: Any) -> int | None:
    if isinstance(value, str) and re.fullmatch(r"[0-9a-f]{8}", value):
        return int(value, 16)
    return None


_REWRITTEN = (f", or a tool rewrote it and copied loom's old checksums (leave out the {HEADER_CRC_KEY!r} and "
              f"{TENSOR_CRC_KEY!r} metadata when rewriting a loom checkpoint)")


def _checksums(header: dict, meta: dict[str, str], entries: dict, fail) -> dict[str, int] | None:
    """Verify the header's own CRC and return each tensor's expected CRC (None for unchecksummed files)."""
    if TENSOR_CRC_KEY not in meta and HEADER_CRC_KEY not in meta:
        return None
    for key in (TENSOR_CRC_KEY, HEADER_CRC_KEY):
        if key not in meta:
            raise fail(f"the header has no {key!r} entry beside the other checksum (the header is corrupt)")
    want = _hex_crc(meta[HEADER_CRC_KEY])
    if want is None or want != _header_crc(header):
        raise fail(f"the header's checksum does not match its contents: the header is corrupt{_REWRITTEN}")
    try:
        crcs = json.loads(meta[TENSOR_CRC_KEY])
    except ValueError:
        crcs = None
    if not isinstance(crcs, dict) or set(crcs) != set(entries):
        raise fail(f"the {TENSOR_CRC_KEY!r} entry does not list a checksum for each tensor")
    out = {}
    for name, value in crcs.items():
        crc = _hex_crc(value)
        if crc is None:
            raise fail(f"the checksum of tensor {name!r} is {_short(value)}, not 8 hex digits")
        out[name] = crc
    return out


def _read_tensors(fh, base: int, entries: dict, crcs: dict[str, int] | None, fail) -> dict[str, np.ndarray]:
    arrays: dict[str, np.ndarray] = {}
    for name, (d, shape, b, e) in sorted(entries.items(), key=lambda kv: kv[1][2]):
        arr = np.empty(shape, d.np.newbyteorder("<"))
        view = _bytes_of(arr)
        fh.seek(base + b)
        if _read_exact(fh, view) != e - b:
            raise fail(f"the data of tensor {name!r} ends early (the file is truncated)")
        if crcs is not None and zlib.crc32(view) != crcs[name]:
            raise fail(f"the data of tensor {name!r} does not match its checksum: the file is corrupt{_REWRITTEN}")
        if d is dt.bool_ and arr.size and arr.view(np.uint8).max() > 1:
            raise fail(f"tensor {name!r} of dtype BOOL holds bytes other than 0 and 1")
        arrays[name] = arr.astype(d.np, copy=False)
    return arrays


def load(f, map_location=None, weights_only: bool = True) -> Any:
    """Read a checkpoint written by `loom.save` (or any safetensors file, as a dict of tensors).

    A PyTorch zip checkpoint (a ``.pt`` file from `torch.save` or `loom.io.torch_save`),
    given by path or as a binary file object, is read by `loom.io.torch_load` with
    the given `map_location` and `weights_only` (restricted unpickling by default).

    A file written by `loom.save` is verified against the CRC-32 checksums recorded in it:
    a flipped byte anywhere in it raises `LoomError` naming the file and the corrupt part
    (the header, or the tensor whose data changed). Safetensors files from other writers
    (the ``safetensors`` package, PyTorch) carry no checksums and load without that check.
    Every file is checked against the safetensors layout, and any malformed, truncated or
    foreign file (a PyTorch ``.pt`` pickle, a zip, a directory) raises `LoomError` saying
    which file and what is wrong; a missing file raises `FileNotFoundError`.

    Parameters
    ----------
    f : path of the checkpoint file (or a binary file object holding a PyTorch checkpoint)
    map_location, weights_only : as `loom.io.torch_load` takes them, for a PyTorch
        checkpoint; a safetensors file is never unpickled, whatever they say

    Returns
    -------
    The object given to `loom.save`, or for a safetensors file from another writer a dict
    of its tensors by name.

    Examples
    --------
    >>> loom.save({"w": loom.ones(2), "step": 3}, "/tmp/ckpt.safetensors")
    >>> loom.load("/tmp/ckpt.safetensors")["w"].tolist()
    [1.0, 1.0]
    """
    is_torch_zip, torch_load = _upper.is_torch_zip, _upper.torch_load  # loom.io.torch_format writes through here.
    if not isinstance(f, (str, os.PathLike)) and hasattr(f, "read"):
        # A file object: PyTorch's format reads from one; loom's safetensors checkpoints are read from paths.
        if getattr(f, "seekable", lambda: False)():
            start = f.tell()
            head = f.read(4)
            f.seek(start)
            if head != b"PK\x03\x04":
                raise LoomError(f"loom.load: the {type(f).__name__} does not hold a PyTorch zip checkpoint; "
                                "loom.load reads file objects only in that format (loom.io.torch_load), and "
                                "loom's own safetensors checkpoints from a path")
        return torch_load(f, map_location, weights_only=weights_only)
    path = os.fspath(f)

    def fail(problem: str) -> LoomError:
        return LoomError(f"loom.load: {path!r}: {problem}")

    if os.path.isfile(path) and is_torch_zip(path):
        return torch_load(path, map_location, weights_only=weights_only)

    try:
        fh = open(path, "rb", buffering=0)
    except FileNotFoundError:
        raise FileNotFoundError(f"loom.load: no checkpoint at {path!r}") from None
    except IsADirectoryError:
        raise fail("is a directory, not a checkpoint file") from None
    with fh:
        if os.path.isdir(path):  # Platforms where a directory opens.
            raise fail("is a directory, not a checkpoint file")
        try:
            return _load_open(fh, path, fail)
        except (LoomError, OSError, MemoryError):
            raise
        except RecursionError:
            raise fail("its header nests too deeply") from None
        except Exception as e:  # Every malformed file must give a LoomError, even one no check foresaw.
            raise fail(f"cannot be read as a checkpoint (unexpected {type(e).__name__}: {e})") from e


def _load_open(fh, path: str, fail) -> Any:
    from loom.ir.node import Node
    from loom.tensor import Tensor, from_numpy
    size = os.fstat(fh.fileno()).st_size
    prefix = fh.read(8)
    if len(prefix) < 8:
        raise fail("is empty" if not prefix else f"is {len(prefix)} bytes long, too short to be a safetensors file")
    (n,) = struct.unpack("<Q", prefix)
    first = fh.read(1) if 0 < n <= size - 8 else b""
    if first != b"{" or n > MAX_HEADER_BYTES:
        foreign = _foreign_format(path, prefix)
        if foreign is not None:
            raise fail(f"is {foreign}")
        if n > size - 8:
            raise fail(f"its header length field says {n} bytes but only {size - 8} follow "
                       "(a truncated file, or not a safetensors file)")
        if n > MAX_HEADER_BYTES:
            raise fail(f"its header length field says {n} bytes, more than the {MAX_HEADER_BYTES} "
                       "the safetensors format allows (a corrupt file?)")
    raw = first + fh.read(n - 1) if first else b""
    header = _parse_header(raw, fail)
    entries, meta = _check_layout(header, size - 8 - n, fail)
    crcs = _checksums(header, meta, entries, fail)
    arrays = _read_tensors(fh, 8 + n, entries, crcs, fail)
    tensors: dict[str, Tensor] = {}
    for key, arr in arrays.items():
        if entries[key][0] is dt.bfloat16:
            tensors[key] = Tensor._wrap(Node("buffer", (), {}, tuple(arr.shape), dt.bfloat16, buffer=arr))
        else:
            tensors[key] = from_numpy(arr)
    if STRUCTURE_KEY not in meta:
        return tensors
    try:
        doc = json.loads(meta[STRUCTURE_KEY])
    except ValueError as e:
        raise fail(f"the {STRUCTURE_KEY!r} metadata is not valid JSON: {e}") from None
    except RecursionError:
        raise fail(f"the {STRUCTURE_KEY!r} metadata nests too deeply") from None
    if not isinstance(doc, dict) or "root" not in doc:
        raise fail(f"the {STRUCTURE_KEY!r} metadata is {_short(doc)}, not an object with a 'root'")
    version = doc.get("version", 0)
    if not isinstance(version, int) or isinstance(version, bool):
        raise fail(f"the checkpoint format version is {_short(version)}, not an integer")
    if version > FORMAT_VERSION:
        raise fail(f"checkpoint format version {version} is newer than this loom understands ({FORMAT_VERSION})")
    names = doc.get("dtypes", {})
    if not isinstance(names, dict):
        raise fail(f"the structure's dtypes are {_short(names)}, not an object")
    for key, name in names.items():
        if key in entries and name != entries[key][0].name:
            raise fail(f"tensor {key!r} is stored as {_TAG_OF[entries[key][0]]} but the structure says "
                       f"{_short(name)}")
    try:
        return _decode(doc["root"], tensors, "<root>", fail)
    except RecursionError:
        raise fail(f"the {STRUCTURE_KEY!r} metadata nests too deeply") from None
