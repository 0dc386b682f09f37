"""`loom.save` / `loom.load`: nested state in one safetensors file, written atomically.

Tensors are stored as safetensors entries, so the file opens with the
`safetensors` package's own loaders and with PyTorch's. Everything else (the
nesting of dicts, lists and tuples, numbers, strings, None: optimizer step
counts, scheduler state, user metadata) is a JSON document in the file's
metadata under the key ``loom.structure``. Nothing is pickled and loading
never executes code.

A save writes to a temporary file in the target's directory, fsyncs it and
renames it over the target, so an exception or a kill mid-save leaves the
previous checkpoint intact.
"""
from __future__ import annotations

import json
import math
import os
import struct
import tempfile
from typing import Any

import numpy as np

from loom import dtypes as dt
from loom.errors import LoomError

STRUCTURE_KEY = "loom.structure"
FORMAT_VERSION = 1


def _encode(obj: Any, tensors: dict[str, np.ndarray], dtypes: dict[str, str], seen: dict[int, str],
            path: str) -> Any:
    from loom.tensor import Tensor
    if isinstance(obj, Tensor):
        key = seen.get(id(obj))
        if key is None:
            key = path or "tensor"
            while key in tensors:
                key += "_"
            arr = obj.detach()._array()
            # np.ascontiguousarray would turn a 0-d array into a 1-d one.
            tensors[key] = arr if arr.flags.c_contiguous else np.ascontiguousarray(arr).reshape(arr.shape)
            dtypes[key] = obj.dtype.name
            seen[id(obj)] = key
        return {"__tensor__": key}
    if isinstance(obj, dict):
        items = []
        for k, v in obj.items():
            if not isinstance(k, (str, int)) or isinstance(k, bool):
                raise LoomError(f"loom.save: dict keys must be str or int, got {type(k).__name__} at "
                                f"{path or '<root>'}")
            items.append([k, _encode(v, tensors, dtypes, seen, f"{path}.{k}" if path else str(k))])
        return {"__dict__": items}
    if isinstance(obj, (list, tuple)):
        kind = "__list__" if isinstance(obj, list) else "__tuple__"
        return {kind: [_encode(v, tensors, dtypes, seen, f"{path}.{i}" if path else str(i))
                       for i, v in enumerate(obj)]}
    if isinstance(obj, float) and not math.isfinite(obj):
        return {"__float__": repr(obj)}
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, np.generic):
        return _encode(obj.item(), tensors, dtypes, seen, path)
    if isinstance(obj, dt.DType):
        return {"__dtype__": obj.name}
    raise LoomError(f"loom.save: cannot store an object of type {type(obj).__name__} at "
                    f"{path or '<root>'}; checkpoints hold tensors, numbers, strings, None and "
                    "dicts/lists/tuples of them (never pickled objects)")


def _decode(obj: Any, tensors: dict[str, Any]) -> Any:
    if isinstance(obj, dict):
        if "__tensor__" in obj:
            return tensors[obj["__tensor__"]]
        if "__dict__" in obj:
            return {k: _decode(v, tensors) for k, v in obj["__dict__"]}
        if "__list__" in obj:
            return [_decode(v, tensors) for v in obj["__list__"]]
        if "__tuple__" in obj:
            return tuple(_decode(v, tensors) for v in obj["__tuple__"])
        if "__float__" in obj:
            return float(obj["__float__"])
        if "__dtype__" in obj:
            return dt.from_name(obj["__dtype__"])
        raise LoomError(f"loom.load: unknown entry {sorted(obj)} in the checkpoint structure")
    return obj


def _set_header_dtypes(blob: bytes, changes: dict[str, str]) -> bytes:
    """Rewrite dtype tags in a safetensors header (bfloat16 travels as its uint16 bits in NumPy)."""
    if not changes:
        return blob
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    for key, tag in changes.items():
        header[key]["dtype"] = tag
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + blob[8 + n:]


def _read_header(blob: bytes) -> dict:
    if len(blob) < 8:
        raise LoomError("loom.load: the file is too short to be a safetensors checkpoint")
    (n,) = struct.unpack("<Q", blob[:8])
    if n > len(blob) - 8:
        raise LoomError("loom.load: the safetensors header is truncated (is the file complete?)")
    try:
        return json.loads(blob[8:8 + n])
    except json.JSONDecodeError as e:
        raise LoomError(f"loom.load: the safetensors header is not valid JSON: {e}") from None


def save(obj: Any, f, metadata: dict[str, str] | None = None) -> None:
    """Write `obj` (tensors nested in dicts/lists/tuples with plain values) to the file `f`, atomically.

    Parameters
    ----------
    obj : a Tensor, or dicts/lists/tuples of Tensors, numbers, strings and None
    f : path of the checkpoint file (conventionally ``*.safetensors``)
    metadata : extra string key/values stored in the safetensors header

    Examples
    --------
    >>> loom.save({"w": loom.ones(2), "step": 3}, "/tmp/ckpt.safetensors")
    >>> loom.load("/tmp/ckpt.safetensors")["step"]
    3
    """
    import safetensors.numpy as stn
    path = os.fspath(f)
    tensors: dict[str, np.ndarray] = {}
    dtypes: dict[str, str] = {}
    structure = _encode(obj, tensors, dtypes, {}, "")
    meta = {str(k): str(v) for k, v in (metadata or {}).items()}
    if STRUCTURE_KEY in meta:
        raise LoomError(f"loom.save: metadata key {STRUCTURE_KEY!r} is reserved")
    meta[STRUCTURE_KEY] = json.dumps({"version": FORMAT_VERSION, "root": structure,
                                      "dtypes": dtypes}, allow_nan=False)
    blob = stn.save(tensors, metadata=meta)
    blob = _set_header_dtypes(blob, {k: "BF16" for k, d in dtypes.items() if d == "bfloat16"})
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".safetensors", dir=directory)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(blob)
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
    except OSError:
        pass


def load(f, map_location=None, weights_only: bool = True) -> Any:
    """Read a checkpoint written by `loom.save` (or any safetensors file, as a dict of tensors).

    `map_location` and `weights_only` are accepted for PyTorch compatibility; loading
    never unpickles or runs code, whatever they say.
    """
    import safetensors.numpy as stn

    from loom.ir.node import Node
    from loom.tensor import Tensor, from_numpy
    path = os.fspath(f)
    if not os.path.exists(path):
        raise FileNotFoundError(f"loom.load: no checkpoint at {path!r}")
    with open(path, "rb") as fh:
        blob = fh.read()
    header = _read_header(blob)
    bf16 = {k: "U16" for k, v in header.items() if k != "__metadata__" and v.get("dtype") == "BF16"}
    try:
        arrays = stn.load(_set_header_dtypes(blob, bf16))
    except Exception as e:  # safetensors raises its own error type for corrupt files.
        raise LoomError(f"loom.load: {path!r} is not a readable safetensors file: {e}") from None
    meta = header.get("__metadata__") or {}
    tensors: dict[str, Tensor] = {}
    for key, arr in arrays.items():
        if key in bf16:
            t = Tensor._wrap(Node("buffer", (), {}, tuple(arr.shape), dt.bfloat16, buffer=np.array(arr)))
        else:
            t = from_numpy(np.array(arr))
        tensors[key] = t
    if STRUCTURE_KEY not in meta:
        return tensors
    doc = json.loads(meta[STRUCTURE_KEY])
    if doc.get("version", 0) > FORMAT_VERSION:
        raise LoomError(f"loom.load: checkpoint format version {doc['version']} is newer than this "
                        f"loom understands ({FORMAT_VERSION})")
    return _decode(doc["root"], tensors)
