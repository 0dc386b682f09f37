"""PyTorch's checkpoint format (`torch.save` / `torch.load`), read and written without PyTorch.

A PyTorch checkpoint is a zip archive (stored, not compressed) holding, under
one top-level folder:

- ``data.pkl``: the object, pickled (protocol 2); each tensor is a call of
  ``torch._utils._rebuild_tensor_v2(storage, offset, size, stride,
  requires_grad, hooks)`` whose storage is a persistent id
  ``('storage', torch.<Type>Storage, key, location, numel)``;
- ``data/<key>``: each storage's raw bytes, in the byte order ``byteorder`` names;
- ``version``, ``byteorder``, ``.format_version``, ``.storage_alignment`` and
  ``.data/serialization_id``, as PyTorch writes them.

Every record's bytes start at a multiple of 64 in the file, as PyTorch aligns
them. Tensors that share a storage (views, tied weights) are written once and
read back sharing it, as PyTorch does.

Loading unpickles with an allow-list (`weights_only=True`, the default): tensor
rebuild functions, ``collections.OrderedDict``, PyTorch's dtype, Size and device
names and a few plain builtins. Anything else is refused with a `LoomError`
naming it, so a checkpoint from an untrusted source cannot run code. With
``weights_only=False`` the file is unpickled as PyTorch does then: any class
named in it is imported and may run code.
"""
from __future__ import annotations

import _codecs
import _compat_pickle
import collections
import io
import math
import os
import pickle
import secrets
import zipfile
from typing import Any, Literal

import numpy as np

from loom import _upper
from loom import dtypes as dt
from loom.errors import LoomError, LoomValueError

_ARCHIVE = "archive"
_ALIGN = 64
_LOCAL_HEADER = 30
_ZIP64_EXTRA = 20  # The zip64 sizes field zipfile adds to a large record's local header.

# PyTorch's storage class of each loom dtype, and its dtype names.
_STORAGE_OF = {dt.float32: "FloatStorage", dt.float64: "DoubleStorage", dt.float16: "HalfStorage",
               dt.bfloat16: "BFloat16Storage", dt.int64: "LongStorage", dt.int32: "IntStorage",
               dt.int16: "ShortStorage", dt.int8: "CharStorage", dt.uint8: "ByteStorage", dt.bool_: "BoolStorage",
               dt.complex64: "ComplexFloatStorage", dt.complex128: "ComplexDoubleStorage"}
_DTYPE_OF_STORAGE = {name: d for d, name in _STORAGE_OF.items()}
_TORCH_DTYPE_NAMES = {"float32": dt.float32, "float": dt.float32, "float64": dt.float64, "double": dt.float64,
                      "float16": dt.float16, "half": dt.float16, "bfloat16": dt.bfloat16, "int64": dt.int64,
                      "long": dt.int64, "int32": dt.int32, "int": dt.int32, "int16": dt.int16, "short": dt.int16,
                      "int8": dt.int8, "uint8": dt.uint8, "bool": dt.bool_, "complex64": dt.complex64,
                      "cfloat": dt.complex64, "complex128": dt.complex128, "cdouble": dt.complex128}
# PyTorch dtypes and storages loom has no dtype for: named in the error, so a user knows what to convert.
_FOREIGN_DTYPES = ("complex32", "chalf", "uint16", "uint32",
                   "uint64", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "qint8",
                   "quint8", "qint32", "quint4x2")
_FOREIGN_STORAGES = {"ComplexFloatStorage": "complex64", "ComplexDoubleStorage": "complex128",
                     "QInt8Storage": "qint8", "QUInt8Storage": "quint8", "QInt32Storage": "qint32",
                     "QUInt4x2Storage": "quint4x2", "QUInt2x4Storage": "quint2x4"}


# ----------------------------------------------------------------------------- writing


class _Global:
    """A name the pickle refers to (module and attribute) without importing it: PyTorch may be absent."""

    __slots__ = ("module", "name")
    _cache: dict[tuple[str, str], _Global] = {}

    def __init__(self, module: str, name: str) -> None:
        self.module, self.name = module, name

    def __call__(self, *args):
        """Never called: being callable lets the pickler take it as a reduce function."""
        raise LoomError(f"loom.io: {self.module}.{self.name} is a name written into a pickle, not a function")

    @classmethod
    def of(cls, module: str, name: str) -> _Global:
        """One object per name, so the pickle memo writes each name once."""
        key = (module, name)
        if key not in cls._cache:
            cls._cache[key] = cls(module, name)
        return cls._cache[key]


class _StorageRef:
    """A storage to write: its key in the archive, its root tensor's bytes and its dtype."""

    __slots__ = ("key", "data", "dtype", "numel")

    def __init__(self, key: str, data: np.ndarray, dtype: dt.DType) -> None:
        self.key, self.data, self.dtype, self.numel = key, data, dtype, data.size


class _PlainTensor:
    """A Parameter's data, pickled as a plain tensor inside `_rebuild_parameter`."""

    __slots__ = ("tensor",)

    def __init__(self, tensor) -> None:
        self.tensor = tensor


class _Writer(pickle._Pickler):  # type: ignore[name-defined]
    """A protocol-2 pickler that writes loom tensors, dtypes, sizes and devices as PyTorch's objects.

    The pure-Python pickler is used because only it lets a name be written as a GLOBAL
    without importing it (PyTorch need not be installed to write its format).
    """

    dispatch = pickle._Pickler.dispatch.copy()  # type: ignore[attr-defined]

    def __init__(self, file, storages: dict[int, _StorageRef], protocol: int = 2) -> None:
        from loom.device import Device
        from loom.nn.parameter import Parameter
        from loom.tensor import Size, Tensor
        super().__init__(file, protocol=protocol)
        self.storages = storages
        self.types = (Device, Parameter, Size, Tensor)

    def _save_name(self, obj) -> None:
        if isinstance(obj, dt.DType):
            module, name = "torch", obj.name
        else:
            module, name = obj.module, obj.name
        self.write(pickle.GLOBAL + f"{module}\n{name}\n".encode())  # type: ignore[attr-defined]
        self.memoize(obj)  # type: ignore[attr-defined]

    dispatch[_Global] = _save_name  # type: ignore[assignment]
    dispatch[dt.DType] = _save_name  # type: ignore[assignment]

    def persistent_id(self, obj):
        if isinstance(obj, _StorageRef):
            return ("storage", _Global.of("torch", _STORAGE_OF[obj.dtype]), obj.key, "cpu", obj.numel)
        return None

    def reducer_override(self, obj):
        Device, Parameter, Size, Tensor = self.types
        if isinstance(obj, _PlainTensor):
            return self._tensor_reduce(obj.tensor)
        if isinstance(obj, Parameter):
            return (_Global.of("torch._utils", "_rebuild_parameter"),
                    (_PlainTensor(obj), obj.requires_grad, collections.OrderedDict()))
        if isinstance(obj, Tensor):
            return self._tensor_reduce(obj)
        if isinstance(obj, Size):
            return (_Global.of("torch", "Size"), (tuple(int(s) for s in obj),))
        if isinstance(obj, Device):
            return (_Global.of("torch", "device"), (str(obj),))
        return NotImplemented

    def _tensor_reduce(self, t):
        root = t._base if t._base is not None else t
        ref = self.storages.get(id(root))
        if ref is None:
            arr = root.detach()._array()
            arr = np.ascontiguousarray(arr).reshape(-1).astype(arr.dtype.newbyteorder("<"), copy=False)
            ref = self.storages[id(root)] = _StorageRef(str(len(self.storages)), arr, root.dtype)
        args = (ref, int(t.storage_offset()), tuple(int(s) for s in t.shape), tuple(int(s) for s in t.stride()),
                bool(t.requires_grad), collections.OrderedDict())
        return (_Global.of("torch._utils", "_rebuild_tensor_v2"), args)


def _pad_extra(offset: int, name: str, zip64: bool) -> bytes:
    """The local-header extra field ('FB' padding, as PyTorch writes) that aligns the record's data to 64."""
    head = offset + _LOCAL_HEADER + len(name.encode()) + (_ZIP64_EXTRA if zip64 else 0) + 4
    pad = -head % _ALIGN
    return b"FB" + pad.to_bytes(2, "little") + b"\0" * pad


def _write_archive(out, records: list[tuple[str, Any]]) -> None:
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
        start = z.fp.tell()  # type: ignore[union-attr]
        for name, data in records:
            view = memoryview(data).cast("B")
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_STORED
            info.file_size = view.nbytes
            zip64 = view.nbytes * 1.05 > zipfile.ZIP64_LIMIT
            info.extra = _pad_extra(z.fp.tell() - start, name, zip64)  # type: ignore[union-attr]
            with z.open(info, "w", force_zip64=zip64) as dest:
                dest.write(view)


def _is_path(f) -> bool:
    return isinstance(f, (str, os.PathLike))


def torch_save(obj: Any, f, pickle_module: Any = None, pickle_protocol: int = 2,
               _use_new_zipfile_serialization: bool = True) -> None:
    """Write `obj` in PyTorch's zip checkpoint format, which `torch.load` reads.

    Tensors (views and tensors sharing storage included, each storage written
    once), dicts, lists, tuples, ``OrderedDict``, numbers, strings and None give a
    file that ``torch.load(f, weights_only=True)`` reads; loom dtypes, ``Size`` and
    devices are written as PyTorch's. Any other picklable object (a whole loom
    Module) is pickled as it is, as `torch.save` does; such a file loads with
    ``torch_load(f, weights_only=False)`` in loom only.

    Parameters
    ----------
    obj : the object to save
    f : str or os.PathLike or binary file object
        A path is written atomically (a temporary file beside it, fsynced and
        renamed over it, as `loom.save` does); a file object is written from its
        current position.
    pickle_module : accepted for PyTorch compatibility; only Python's pickle is used
    pickle_protocol : int
        The pickle protocol of ``data.pkl`` (2, PyTorch's default, to 5).
    _use_new_zipfile_serialization : must be True: the legacy format is not written

    Examples
    --------
    >>> loom.io.torch_save({"w": loom.ones(2)}, "/tmp/model.pt")
    >>> loom.io.torch_load("/tmp/model.pt")["w"].tolist()
    [1.0, 1.0]
    """
    if not _use_new_zipfile_serialization:
        raise LoomError("loom.io.torch_save: the legacy (pre-1.6, non-zip) format is not written; "
                        "leave _use_new_zipfile_serialization at True")
    if pickle_module is not None and pickle_module is not pickle:
        raise LoomError(f"loom.io.torch_save: pickle_module={pickle_module!r} is not supported; only Python's "
                        "pickle writes PyTorch's format here")
    if not isinstance(pickle_protocol, int) or not 2 <= pickle_protocol <= pickle.HIGHEST_PROTOCOL:
        raise LoomError(f"loom.io.torch_save: pickle_protocol must be an integer from 2 to "
                        f"{pickle.HIGHEST_PROTOCOL}, got {pickle_protocol!r}")
    storages: dict[int, _StorageRef] = {}
    buf = io.BytesIO()
    try:
        _Writer(buf, storages, pickle_protocol).dump(obj)
    except RecursionError:
        raise LoomError("loom.io.torch_save: the object is nested too deeply to pickle") from None
    except (pickle.PicklingError, TypeError, AttributeError) as e:
        raise LoomError(f"loom.io.torch_save: cannot pickle the object: {e}") from e
    records: list[tuple[str, Any]] = [(f"{_ARCHIVE}/data.pkl", buf.getbuffer()),
                                      (f"{_ARCHIVE}/.format_version", b"1"),
                                      (f"{_ARCHIVE}/.storage_alignment", str(_ALIGN).encode()),
                                      (f"{_ARCHIVE}/byteorder", b"little")]
    for ref in storages.values():
        records.append((f"{_ARCHIVE}/data/{ref.key}", ref.data.view(np.uint8)))
    serialization_id = "".join(secrets.choice("0123456789") for _ in range(40))
    records += [(f"{_ARCHIVE}/version", b"3\n"), (f"{_ARCHIVE}/.data/serialization_id", serialization_id.encode())]
    if _is_path(f):
        from loom.io.checkpoint import atomic_write
        atomic_write(os.fspath(f), lambda out: _write_archive(out, records), "loom.io.torch_save")
    elif hasattr(f, "write"):
        _write_archive(f, records)
    else:
        raise LoomError(f"loom.io.torch_save: f must be a path or a binary file object, got {type(f).__name__}")


# ----------------------------------------------------------------------------- reading


class _StorageType:
    """What a `torch.<Type>Storage` name unpickles to: the dtype its bytes hold (None: untyped bytes)."""

    __slots__ = ("name", "dtype")

    def __init__(self, name: str, dtype: dt.DType | None) -> None:
        self.name, self.dtype = name, dtype


class _Storage:
    """One storage of the archive, read on first use; the tensors over it share one loom root."""

    def __init__(self, reader: _Reader, key: str, dtype: dt.DType | None, numel: int) -> None:
        self.reader, self.key, self.dtype, self.numel = reader, key, dtype, numel
        self.array: np.ndarray | None = None
        self.root: Any = None  # The loom Tensor the storage's tensors are views of.

    def _load(self, d: dt.DType) -> np.ndarray:
        if self.array is None:
            self.array = self.reader.read_storage(self.key, d, self.numel)
        return self.array

    def tensor(self, offset, size, stride, requires_grad: bool, d: dt.DType | None = None):
        from loom import _api as loom
        from loom.ir.node import Node
        from loom.tensor import Tensor
        d = d or self.dtype
        fail = self.reader.fail
        if d is None:
            raise fail(f"storage {self.key!r} is untyped and its tensor names no dtype")
        numel = self.numel if self.dtype is not None else self.numel // d.itemsize
        try:
            offset, size, stride = int(offset), tuple(int(s) for s in size), tuple(int(s) for s in stride)
        except (TypeError, ValueError):
            raise fail(f"a tensor record has offset {offset!r}, size {size!r}, stride {stride!r}; "
                       "expected integers") from None
        if len(size) != len(stride) or offset < 0 or any(s < 0 for s in size) or any(s < 0 for s in stride):
            raise fail(f"a tensor record has offset {offset}, size {size}, stride {stride}, which is not a "
                       "valid layout")
        if 0 not in size:
            last = offset + sum((n - 1) * s for n, s in zip(size, stride))
            if last >= numel:
                raise fail(f"a tensor of size {list(size)}, stride {list(stride)} and offset {offset} reaches "
                           f"element {last} of storage {self.key!r}, which holds {numel}")
        arr = self._load(d)
        if self.dtype is None:
            arr = arr.view(d.np.newbyteorder("<") if d is not dt.bfloat16 else np.uint16)
        contiguous = tuple(int(np.prod(size[i + 1:])) for i in range(len(size)))
        whole = offset == 0 and math.prod(size) == numel and (stride == contiguous or math.prod(size) <= 1)
        if self.root is None and whole:
            self.root = Tensor._wrap(Node("buffer", (), {}, size, d, buffer=arr.reshape(size)), None,
                                     requires_grad)
            return self.root
        if self.root is None:
            self.root = Tensor._wrap(Node("buffer", (), {}, (numel,), d, buffer=arr))
        if self.root.dtype is not d:
            raise fail(f"storage {self.key!r} is read as both {self.root.dtype.name} and {d.name}")
        with loom.no_grad():
            view = self.root.as_strided(size, stride, offset)
        if requires_grad and view.is_leaf:
            view.requires_grad_()
        return view


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad=False, backward_hooks=None,
                       metadata=None):
    if not isinstance(storage, _Storage):
        raise LoomError(f"loom.io.torch_load: a tensor's storage is a {type(storage).__name__}, not a "
                        "storage record (a corrupt checkpoint?)")
    return storage.tensor(storage_offset, size, stride, bool(requires_grad))


def _rebuild_tensor_v3(storage, storage_offset, size, stride, requires_grad, backward_hooks, dtype,
                       metadata=None):
    if not isinstance(storage, _Storage) or not isinstance(dtype, dt.DType):
        raise LoomError("loom.io.torch_load: a tensor record names no storage or dtype (a corrupt checkpoint?)")
    return storage.tensor(storage_offset, size, stride, bool(requires_grad), dtype)


def _rebuild_parameter(data, requires_grad, backward_hooks=None, state=None):
    from loom.nn.parameter import Parameter
    p = Parameter(data, bool(requires_grad))
    _set_public_state(p, state)
    return p


def _rebuild_from_type_v2(func, new_type, args, state):
    from loom.nn.parameter import Parameter
    out = func(*args)
    if new_type is Parameter and not isinstance(out, Parameter):
        out = Parameter(out, out.requires_grad)
    if isinstance(state, tuple) and len(state) == 2:  # (dict, slots)
        state = {**(state[0] or {}), **(state[1] or {})}
    _set_public_state(out, state)
    return out


def _set_public_state(tensor, state) -> None:
    """Restore a tensor's user attributes; private names (loom's own bookkeeping) are never set from a file."""
    if isinstance(state, dict):
        for k, v in state.items():
            if isinstance(k, str) and k.isidentifier() and not k.startswith("_"):
                setattr(tensor, k, v)


def _size(dims=()):
    from loom.tensor import Size
    return Size(tuple(int(d) for d in dims))


def _device(spec="cpu", index=None):
    from loom.device import device
    if isinstance(spec, str) and spec.split(":")[0] != "cpu":
        return spec  # A device loom does not have (cuda): kept as its name, as plain data.
    return device(spec, index)


def _encode(text="", encoding="utf-8"):
    """`_codecs.encode`, with which protocol-2 pickles spell bytes."""
    if encoding not in ("latin1", "latin-1", "utf-8", "utf8", "ascii"):
        raise LoomError(f"loom.io.torch_load: bytes in the pickle use the encoding {encoding!r}, which is refused")
    return _codecs.encode(text, encoding)


def _tensor_type():
    from loom.tensor import Tensor
    return Tensor


def _parameter_type():
    from loom.nn.parameter import Parameter
    return Parameter


_ALLOWED = {
    ("torch._utils", "_rebuild_tensor_v2"): lambda: _rebuild_tensor_v2,
    ("torch._utils", "_rebuild_tensor_v3"): lambda: _rebuild_tensor_v3,
    ("torch._utils", "_rebuild_parameter"): lambda: _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): lambda: _rebuild_parameter,
    ("torch._tensor", "_rebuild_from_type_v2"): lambda: _rebuild_from_type_v2,
    ("torch", "Tensor"): _tensor_type,
    ("torch.nn.parameter", "Parameter"): _parameter_type,
    ("torch", "Size"): lambda: _size,
    ("torch", "device"): lambda: _device,
    ("collections", "OrderedDict"): lambda: collections.OrderedDict,
    ("_codecs", "encode"): lambda: _encode,
    ("builtins", "set"): lambda: set,
    ("builtins", "frozenset"): lambda: frozenset,
    ("builtins", "bytearray"): lambda: bytearray,
    ("builtins", "complex"): lambda: complex,
    ("builtins", "slice"): lambda: slice,
    ("builtins", "range"): lambda: range,
}


_SAFE_GLOBALS: dict[tuple[str, str], Any] = {}  # Globals the user allowed: torch.serialization.add_safe_globals.


class WeightsOnlyUnpicklingError(LoomError, pickle.UnpicklingError):
    """A `weights_only=True` load met a global it may not unpickle (PyTorch raises pickle.UnpicklingError)."""


def add_safe_globals(safe_globals) -> None:
    """Let `weights_only=True` loads unpickle these classes/functions (or `(obj, "module.name")` pairs)."""
    for item in safe_globals:
        if isinstance(item, tuple):
            obj, full = item
            module, _, name = str(full).rpartition(".")
        else:
            obj, module, name = item, getattr(item, "__module__", None), getattr(item, "__qualname__", None)
        if not module or not name:
            raise LoomValueError(f"loom.io.add_safe_globals: expected classes, functions or (obj, 'module.name') "
                                 f"pairs, got {item!r}")
        _SAFE_GLOBALS[(module, name)] = obj


def get_safe_globals() -> list:
    """The globals `add_safe_globals` allowed, in the order they were added."""
    return list(_SAFE_GLOBALS.values())


def clear_safe_globals() -> None:
    """Forget every global `add_safe_globals` allowed."""
    _SAFE_GLOBALS.clear()


def _allowed(module: str, name: str, fail):
    """The object a permitted global name unpickles to, or None if the name is not one of them."""
    if (module, name) in _ALLOWED:
        return _ALLOWED[(module, name)]()
    if module == "torch":
        if name in _TORCH_DTYPE_NAMES:
            return _TORCH_DTYPE_NAMES[name]
        if name in _DTYPE_OF_STORAGE:
            return _StorageType(name, _DTYPE_OF_STORAGE[name])
        if name == "UntypedStorage":
            return _StorageType(name, None)
        if name in _FOREIGN_DTYPES or name in _FOREIGN_STORAGES:
            what = _FOREIGN_STORAGES.get(name, name)
            raise fail(f"it holds a tensor of dtype torch.{what}, which loom does not have (it has "
                       f"{', '.join(d.name for d in dt.ALL)}); convert it in PyTorch before saving")
    if module == "torch._utils" and name in ("_rebuild_sparse_tensor", "_rebuild_qtensor",
                                             "_rebuild_wrapper_subclass", "_rebuild_meta_tensor_no_storage"):
        raise fail(f"it holds a kind of tensor loom cannot rebuild ({module}.{name}: sparse, quantized, meta "
                   "or subclass tensors); save dense CPU tensors")
    return None


class _Reader:
    """The archive of one checkpoint: its records, byte order, and storages read so far."""

    def __init__(self, z: zipfile.ZipFile, prefix: str, fail) -> None:
        self.z, self.prefix, self.fail = z, prefix, fail
        self.storages: dict[str, _Storage] = {}
        names = set(z.namelist())
        order = z.read(prefix + "byteorder").decode(errors="replace").strip() if prefix + "byteorder" in names \
            else "little"
        if order not in ("little", "big"):
            raise fail(f"its byteorder record says {order!r}, not 'little' or 'big'")
        self.byteorder: Literal["<", ">"] = "<" if order == "little" else ">"

    def storage(self, key, storage_type, numel) -> _Storage:
        key = str(key)
        st = self.storages.get(key)
        if st is None:
            st = self.storages[key] = _Storage(self, key, storage_type.dtype, int(numel))
        return st

    def read_storage(self, key: str, d: dt.DType, numel: int) -> np.ndarray:
        name = f"{self.prefix}data/{key}"
        try:
            info = self.z.getinfo(name)
        except KeyError:
            raise self.fail(f"it has no record {name!r} for storage {key!r} (a truncated or damaged file)") from None
        untyped = self.storages[key].dtype is None
        itemsize = 1 if untyped else d.itemsize
        if info.file_size != numel * itemsize:
            raise self.fail(f"storage {key!r} should hold {numel} elements of {itemsize} bytes but its record "
                            f"holds {info.file_size} bytes")
        np_dtype = np.dtype(np.uint8) if untyped else d.np.newbyteorder(self.byteorder)
        arr = np.empty(numel, np_dtype)
        with self.z.open(info) as src:
            view = arr.view(np.uint8).reshape(-1).data
            got = 0
            while got < len(view):
                n = src.readinto(view[got:])  # type: ignore[attr-defined]
                if not n:
                    raise self.fail(f"the record of storage {key!r} ends early (a truncated file)")
                got += n
            src.read(1)  # Reaching the end makes zipfile check the record's CRC-32.
        if untyped:
            return arr
        if self.byteorder == ">":
            arr = arr.astype(d.np.newbyteorder("<"))
        if d is dt.bool_ and arr.size and arr.view(np.uint8).max() > 1:
            raise self.fail(f"bool storage {key!r} holds bytes other than 0 and 1")
        return arr.astype(d.np, copy=False)


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, reader: _Reader, weights_only: bool) -> None:
        super().__init__(file)
        self.reader, self.weights_only = reader, weights_only

    def find_class(self, module: str, name: str):
        fail = self.reader.fail
        # Protocol-2 pickles spell Python 3 names the Python 2 way (`__builtin__.set`).
        if (module, name) in _compat_pickle.NAME_MAPPING:
            module, name = _compat_pickle.NAME_MAPPING[(module, name)]
        elif module in _compat_pickle.IMPORT_MAPPING:
            module = _compat_pickle.IMPORT_MAPPING[module]
        obj = _allowed(module, name, fail)
        if obj is not None:
            return obj
        if (module, name) in _SAFE_GLOBALS:
            return _SAFE_GLOBALS[(module, name)]
        if self.weights_only:
            raise WeightsOnlyUnpicklingError(fail(
                f"weights_only=True refuses to unpickle the global {module}.{name}: only tensors, "
                "dicts, lists, tuples, OrderedDict and plain values are allowed (and what "
                "torch.serialization.add_safe_globals allows). Load with weights_only=False only if you trust "
                "the file (unpickling can run any code)").args[0])
        if module == "torch" or module.startswith("torch."):
            raise fail(f"it pickles the PyTorch object {module}.{name}, which loom cannot rebuild (a whole "
                       "torch.nn.Module?); in PyTorch, save its state_dict() instead and load that into the "
                       "loom module")
        return super().find_class(module, name)

    def persistent_load(self, pid):
        if (not isinstance(pid, tuple) or len(pid) != 5 or pid[0] != "storage"
                or not isinstance(pid[1], _StorageType)):
            raise self.reader.fail(f"it has a persistent id {str(pid)[:80]!r}, not a storage record")
        _, storage_type, key, _location, numel = pid
        return self.reader.storage(key, storage_type, numel)


def _find_prefix(names: list[str], fail) -> str:
    pkl = [n for n in names if n.endswith("data.pkl") and n.count("/") == 1]
    if len(pkl) != 1:
        if any(n.endswith("/constants.pkl") for n in names) and any("/code/" in n for n in names):
            raise fail("is a TorchScript archive (torch.jit.save), not a torch.save checkpoint; loom cannot "
                       "load TorchScript programs")
        if not pkl:
            raise fail("is a zip archive without a data.pkl record, not a PyTorch checkpoint")
        raise fail(f"holds {len(pkl)} data.pkl records ({', '.join(pkl[:4])}); a PyTorch checkpoint has one")
    return pkl[0][: -len("data.pkl")]


def _check_map_location(map_location) -> None:
    """loom has only the CPU: a map_location naming another device is refused, CPU spellings are accepted."""
    if map_location is None or callable(map_location) or isinstance(map_location, dict):
        return
    name = str(map_location)
    if name.split(":")[0] != "cpu":
        raise LoomError(f"loom.io.torch_load: map_location={map_location!r}, but loom runs on the CPU only; "
                        "leave map_location out or pass 'cpu'")


def torch_load(f, map_location=None, pickle_module: Any = None, *, weights_only: bool | None = True,
               mmap: bool | None = None, **pickle_load_args: Any) -> Any:
    """Read a checkpoint in PyTorch's zip format (`torch.save`'s, or `torch_save`'s).

    With ``weights_only=True`` (the default, as in PyTorch) the pickle may name
    only tensor rebuild functions, ``collections.OrderedDict``, PyTorch's dtypes,
    ``Size`` and ``device``, and plain builtins; any other class or function is
    refused with a `LoomError` that names it, and nothing in the file runs.

    .. warning::
       ``weights_only=False`` unpickles as ``torch.load(weights_only=False)`` does:
       any class the file names is imported and any code it names may run. Use it
       only for files you trust, such as a whole loom Module saved with
       `torch_save`. PyTorch objects (a pickled ``torch.nn.Module``) are still
       refused: loom cannot rebuild them.

    Tensors are rebuilt on the CPU (storages saved from a CUDA device too);
    tensors that shared a storage in the file share one in loom (a view of one
    is a view of the other). PyTorch's dtypes that loom lacks (complex,
    unsigned wider than 8 bits, float8), sparse and quantized tensors, legacy
    (pre-1.6, non-zip) files and TorchScript archives raise `LoomError`.

    Parameters
    ----------
    f : str or os.PathLike or binary file object
    map_location : None, 'cpu', a loom/torch CPU device, a dict or a callable
        Accepted for PyTorch compatibility; everything loads on the CPU.
    pickle_module : accepted for PyTorch compatibility; only Python's pickle is used
    weights_only : bool
        Restrict unpickling to tensors, containers and plain values (default True;
        None means True, as in PyTorch 2.6 and later).
    mmap : accepted for PyTorch compatibility; storages are always read into memory
    pickle_load_args : accepted for PyTorch compatibility (``encoding``) and ignored

    Examples
    --------
    >>> loom.io.torch_save({"w": loom.ones(2), "step": 3}, "/tmp/model.pt")
    >>> loom.io.torch_load("/tmp/model.pt")["step"]
    3
    """
    if pickle_module is not None and pickle_module is not pickle:
        raise LoomError(f"loom.io.torch_load: pickle_module={pickle_module!r} is not supported; only Python's "
                        "pickle reads PyTorch's format here")
    weights_only = True if weights_only is None else bool(weights_only)
    _check_map_location(map_location)
    where = repr(os.fspath(f)) if _is_path(f) else f"<{type(f).__name__}>"

    def fail(problem: str) -> LoomError:
        return LoomError(f"loom.io.torch_load: {where}: {problem}")

    if _is_path(f):
        path = os.fspath(f)
        if os.path.isdir(path):
            raise fail("is a directory, not a checkpoint file")
        try:
            fh = open(path, "rb")
        except FileNotFoundError:
            raise FileNotFoundError(f"loom.io.torch_load: no checkpoint at {path!r}") from None
        with fh:
            return _load_from(fh, weights_only, fail)
    if not hasattr(f, "read"):
        raise LoomError(f"loom.io.torch_load: f must be a path or a binary file object, got {type(f).__name__}")
    return _load_from(f, weights_only, fail)


def _load_from(fh, weights_only: bool, fail) -> Any:
    if not hasattr(fh, "seek") or (hasattr(fh, "seekable") and not fh.seekable()):
        fh = io.BytesIO(fh.read())
    start = fh.tell()
    head = fh.read(4)
    fh.seek(start)
    if not head:
        raise fail("is empty")
    if not head.startswith(b"PK"):
        if head[:1] == b"\x80":
            raise fail("is a legacy (pre-1.6, non-zip) torch.save checkpoint, which loom does not read; load it "
                       "in PyTorch and save it again with a current torch.save")
        raise fail("is not a PyTorch zip checkpoint (it does not start with a zip header)")
    try:
        with zipfile.ZipFile(fh) as z:
            prefix = _find_prefix(z.namelist(), fail)
            reader = _Reader(z, prefix, fail)
            with z.open(prefix + "data.pkl") as pkl:
                return _Unpickler(io.BytesIO(pkl.read()), reader, weights_only).load()
    except LoomError:
        raise
    except RecursionError:
        raise fail("its pickle nests too deeply") from None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, ValueError, KeyError, IndexError,
            TypeError, AttributeError, pickle.UnpicklingError, UnicodeDecodeError) as e:
        raise fail(f"cannot be read as a PyTorch checkpoint (a truncated or damaged file?): "
                   f"{type(e).__name__}: {e}") from e


def is_torch_zip(path) -> bool:
    """Whether the file at `path` is a zip archive with one top-level ``<folder>/data.pkl`` (torch.save's)."""
    try:
        with open(path, "rb") as fh:
            if fh.read(4) != b"PK\x03\x04":
                return False
        with zipfile.ZipFile(path) as z:
            return any(n.endswith("/data.pkl") and n.count("/") == 1 for n in z.namelist())
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        return False


_upper.register(is_torch_zip=is_torch_zip, torch_load=torch_load)  # loom.io.checkpoint.load reads with them.
