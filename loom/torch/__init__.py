"""loom.torch: PyTorch's `torch` namespace over loom, so CPU PyTorch programs run with one import changed.

`import loom.torch as torch` gives PyTorch's names with PyTorch's semantics.
Most names are loom's own objects (`torch.Tensor is loom.Tensor`,
`torch.nn.Linear is loom.nn.Linear`; loom's functions are wrapped to take PyTorch's `out=`
keyword where they have none, `torch.cat.__wrapped__ is loom.cat`); this package adds what PyTorch has and
loom does not (device queries that answer honestly for a CPU-only build,
`torch.compile`, autocast, legacy tensor types, ...) and forwards every other
name to `loom`. `python -m loom.torch script.py` runs an unchanged script with
`torch` (and `torchvision`) resolved to loom for that process.

Examples
--------
>>> import loom.torch as torch
>>> torch.Tensor is loom.Tensor, torch.cuda.is_available()
(True, False)
>>> torch.Tensor(3).shape, torch.Tensor([1, 2]).dtype
(torch.Size([3]), torch.float32)
"""
from __future__ import annotations

import importlib as _importlib
import math as _math

import loom as _loom
from loom import dtypes as _dt
from loom.device import Device as _Device
from loom.errors import DeviceError as _DeviceError, LoomTypeError as _LoomTypeError, LoomValueError as _LoomValueError
from loom.tensor import Tensor, Size, broadcast_shapes as _broadcast_shapes  # noqa: F401
from loom.torch._forward import install as _install

# Every name this module does not define is loom's (loom.cat, loom.float32, ...): see the end of the file.

from loom.torch.version import __version__  # noqa: F401

# ---------------------------------------------------------------- dtypes, devices, constants

dtype = _dt.DType
pi, e, inf, nan = _math.pi, _math.e, _math.inf, _math.nan
newaxis = None


class device(_Device):
    """A device, as `torch.device`: any PyTorch device type can be named; tensors live on the cpu only.

    Examples
    --------
    >>> import loom.torch as torch
    >>> torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device(type='cpu')
    """

    _TYPES = ("cpu", "cuda", "mps", "xpu", "meta", "mtia", "hpu", "xla", "privateuseone")

    def __init__(self, type: str | _Device | int = "cpu", index: int | None = None) -> None:  # noqa: A002
        if isinstance(type, _Device):
            self.type, self.index = type.type, type.index
            return
        if isinstance(type, int) and not isinstance(type, bool):
            type, index = "cuda", type
        if not isinstance(type, str):
            raise _LoomTypeError(f"loom.torch.device: expected a string such as 'cpu', got {type!r}")
        kind, _, idx = type.partition(":")
        if kind not in self._TYPES:
            raise _DeviceError(f"loom.torch.device: unknown device type {kind!r}; expected one of {self._TYPES}")
        self.type, self.index = kind, int(idx) if idx else index

    def __enter__(self) -> device:
        """`with torch.device("cpu"):` makes it the default device of the region (only the cpu exists here)."""
        set_default_device(self)
        return self

    def __exit__(self, *exc) -> bool:
        return False


class _Named:
    """A named sentinel such as `torch.strided` or `torch.channels_last`: loom stores every tensor strided."""

    def __init__(self, module: str, name: str) -> None:
        self._repr = f"{module}.{name}"

    def __repr__(self) -> str:
        return self._repr


class layout(_Named):
    """A tensor layout (`torch.strided`); loom has only the strided one."""


class memory_format(_Named):
    """A memory format (`torch.channels_last`, ...): accepted, and loom keeps its own layout."""


strided = layout("torch", "strided")
jagged = layout("torch", "jagged")  # Nested tensors' layout; loom has no nested tensors, only the name.
contiguous_format = memory_format("torch", "contiguous_format")
channels_last = memory_format("torch", "channels_last")
channels_last_3d = memory_format("torch", "channels_last_3d")
preserve_format = memory_format("torch", "preserve_format")
legacy_contiguous_format = memory_format("torch", "legacy_contiguous_format")


class finfo:
    """Machine limits of a float dtype, as `torch.finfo`.

    Examples
    --------
    >>> import loom.torch as torch
    >>> torch.finfo(torch.bfloat16).eps
    0.0078125
    """

    def __init__(self, type=None) -> None:  # noqa: A002
        import numpy as np
        d = _dt.as_dtype(type) if type is not None else _dt.get_default_dtype()
        d = _dt.to_real(d)  # A complex type's limits are those of its parts, as in PyTorch.
        if not d.is_floating_point:
            raise _LoomTypeError(f"loom.torch.finfo: expected a floating point dtype, got {d.name}")
        self.dtype = d.name
        if d is _dt.bfloat16:
            self.bits, self.eps, self.max, self.tiny = 16, 2.0 ** -7, 3.3895313892515355e38, 2.0 ** -126
            self.resolution, self.smallest_normal = 0.01, 2.0 ** -126
        else:
            fi = np.finfo(d.np)
            self.bits, self.eps, self.max, self.tiny = fi.bits, float(fi.eps), float(fi.max), float(fi.tiny)
            # The resolution is a power of ten (1e-06), not its nearest float32 widened to a Python float.
            self.resolution, self.smallest_normal = float(str(fi.resolution)), float(fi.smallest_normal)
        self.min = -self.max

    def __repr__(self) -> str:
        return f"finfo(resolution={self.resolution}, min={self.min:g}, max={self.max:g}, eps={self.eps:g}, " \
               f"smallest_normal={self.smallest_normal:g}, tiny={self.tiny:g}, dtype={self.dtype})"


class iinfo:
    """Limits of an integer dtype, as `torch.iinfo`.

    Examples
    --------
    >>> import loom.torch as torch
    >>> torch.iinfo(torch.int8).min
    -128
    """

    def __init__(self, type) -> None:  # noqa: A002
        import numpy as np
        d = _dt.as_dtype(type)
        if d.is_floating_point:
            raise _LoomTypeError(f"loom.torch.iinfo: expected an integer dtype, got {d.name}")
        if d is _dt.bool_:
            self.bits, self.min, self.max = 8, 0, 1
        else:
            ii = np.iinfo(d.np)
            self.bits, self.min, self.max = ii.bits, int(ii.min), int(ii.max)
        self.dtype = d.name

    def __repr__(self) -> str:
        return f"iinfo(min={self.min:g}, max={self.max:g}, dtype={self.dtype})"


class Generator(_loom.Generator):
    """A random number generator, as `torch.Generator(device="cpu")`.

    Examples
    --------
    >>> import loom.torch as torch
    >>> g = torch.Generator().manual_seed(0)
    >>> torch.rand(2, generator=g).shape
    torch.Size([2])
    """

    def __init__(self, device="cpu") -> None:
        if self._device_type(device) != "cpu":
            raise _DeviceError(f"loom.torch.Generator: device {device} is not available; this build of loom "
                               "runs on the cpu")
        super().__init__(67280421310721)  # PyTorch's default seed for a new generator.
        self.device = globals()["device"]("cpu")

    @staticmethod
    def _device_type(dev) -> str:
        return dev.type if isinstance(dev, _Device) else str(dev).partition(":")[0]


def get_default_device() -> device:
    """The device new tensors go to: always the cpu in this build."""
    return device("cpu")


def set_default_device(dev) -> None:
    """Set the default device; only the cpu exists here, so anything else raises DeviceError."""
    if dev is not None and Generator._device_type(dev) != "cpu":
        raise _DeviceError(f"loom.torch.set_default_device: device {dev} is not available; this build of loom "
                           "runs on the cpu")


def get_file_path(*path_components: str) -> str:
    """A path inside the directory that holds the `loom` package, as `torch.get_file_path` (torch's parent dir).

    Examples
    --------
    >>> import os
    >>> import loom.torch as torch
    >>> os.path.isfile(torch.get_file_path("loom", "__init__.py"))
    True
    """
    import os
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(_loom.__file__))), *path_components)


def get_device(t: Tensor) -> int:
    """-1, the device index PyTorch gives a cpu tensor."""
    return -1


def typename(obj) -> str:
    """PyTorch's type name of `obj` ("torch.FloatTensor" for a float32 tensor)."""
    if isinstance(obj, Tensor):
        return _legacy.type_name(obj.dtype)
    t = type(obj)
    return t.__qualname__ if t.__module__ in ("builtins", "__builtin__") else f"{t.__module__}.{t.__qualname__}"


def is_storage(obj) -> bool:
    """False: loom has no separate storage objects."""
    return False


def is_nonzero(t: Tensor) -> bool:
    return t.is_nonzero()


def is_same_size(a: Tensor, b: Tensor) -> bool:
    return tuple(a.shape) == tuple(b.shape)


def is_signed(t: Tensor) -> bool:
    return t.dtype.is_signed


def is_inference(t: Tensor) -> bool:
    return False


def is_inference_mode_enabled() -> bool:
    """Whether an inference_mode region is active (loom's inference_mode is no_grad)."""
    return not _loom.is_grad_enabled()


def broadcast_shapes(*shapes) -> Size:
    """The shape `shapes` broadcast to, as `torch.broadcast_shapes`."""
    return Size(_broadcast_shapes(*[(s,) if isinstance(s, int) else tuple(s) for s in shapes]))


def scalar_tensor(s, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A 0-d tensor holding `s`, of the default float dtype unless `dtype` is given."""
    return _loom.tensor(s, dtype=dtype or _dt.get_default_dtype(), device=device, requires_grad=requires_grad)


def asarray(obj, *, dtype=None, device=None, copy=None, requires_grad: bool = False) -> Tensor:
    """`obj` as a tensor, sharing memory with a NumPy array or tensor where it can (unless `copy=True`)."""
    if copy:
        t = _loom.tensor(obj.detach() if isinstance(obj, Tensor) else obj, dtype=dtype, device=device)
    else:
        t = _loom.as_tensor(obj, dtype=dtype, device=device)
    return t.requires_grad_(True) if requires_grad else t


# ---------------------------------------------------------------- global switches

_flags = {"matmul_precision": "highest", "deterministic": False, "warn_only": False, "interop_threads": 1,
          "warn_always": False, "debug_mode": 0}


def set_float32_matmul_precision(precision: str) -> None:
    """Record the float32 matmul precision ("highest", "high", "medium"); loom computes float32 in float32."""
    if precision not in ("highest", "high", "medium"):
        raise _LoomValueError(f"loom.torch.set_float32_matmul_precision: expected 'highest', 'high' or 'medium', "
                              f"got {precision!r}")
    _flags["matmul_precision"] = precision


def get_float32_matmul_precision() -> str:
    return _flags["matmul_precision"]


def use_deterministic_algorithms(mode: bool, *, warn_only: bool = False) -> None:
    """Record the switch; loom's kernels are deterministic whether it is on or off."""
    _flags["deterministic"], _flags["warn_only"] = bool(mode), bool(warn_only)


def are_deterministic_algorithms_enabled() -> bool:
    return _flags["deterministic"]


def is_deterministic_algorithms_warn_only_enabled() -> bool:
    return _flags["warn_only"]


def set_deterministic_debug_mode(mode) -> None:
    levels = {"default": 0, "warn": 1, "error": 2}
    _flags["debug_mode"] = levels[mode] if isinstance(mode, str) else int(mode)
    use_deterministic_algorithms(_flags["debug_mode"] > 0, warn_only=_flags["debug_mode"] == 1)


def get_deterministic_debug_mode() -> int:
    return _flags["debug_mode"]


def set_num_interop_threads(n: int) -> None:
    """Record the inter-op thread count; loom's runtime schedules its own work (see loom.set_num_threads)."""
    if not isinstance(n, int) or n < 1:
        raise _LoomValueError(f"loom.torch.set_num_interop_threads: expected a positive int, got {n!r}")
    _flags["interop_threads"] = n


def get_num_interop_threads() -> int:
    return _flags["interop_threads"]


from loom.torch.autograd import is_anomaly_check_nan_enabled, is_anomaly_enabled, set_anomaly_enabled  # noqa: E402,F401


def set_warn_always(b: bool) -> None:
    _flags["warn_always"] = bool(b)


def is_warn_always_enabled() -> bool:
    return _flags["warn_always"]


def set_flush_denormal(mode: bool) -> bool:
    """False: loom does not change the CPU's denormal mode (PyTorch returns False where unsupported)."""
    return False


def set_default_tensor_type(t) -> None:
    """Set the default float dtype from a legacy type (`torch.DoubleTensor`) or its name."""
    d = _legacy.dtype_of(t, "set_default_tensor_type")
    _loom.set_default_dtype(d)


def compiled_with_cxx11_abi() -> bool:
    return True


class OutOfMemoryError(MemoryError):
    """Raised by PyTorch when a device runs out of memory; here for `except torch.OutOfMemoryError`."""


class AcceleratorError(RuntimeError):
    """Raised by PyTorch for accelerator failures; here for `except torch.AcceleratorError`."""


class FatalError(RuntimeError):
    """PyTorch's fatal internal error type; here for `except` clauses."""


def get_device_module(device=None):
    """The device module (`torch.cpu`, `torch.cuda`, ...) for `device` (default: the cpu)."""
    kind = "cpu" if device is None else Generator._device_type(device)
    mods = {"cpu": "loom.torch.cpu", "cuda": "loom.torch.cuda", "mps": "loom.torch.mps"}
    if kind not in mods:
        raise _DeviceError(f"loom.torch.get_device_module: no module for device type {kind!r}")
    return _importlib.import_module(mods[kind])


def is_distributed(t: Tensor) -> bool:
    return False


def empty_strided(size, stride, *, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A zero-filled tensor of `size` (loom chooses strides itself), as `torch.empty_strided`."""
    return _loom.empty(*size, dtype=dtype, device=device, requires_grad=requires_grad)


def empty_permuted(size, physical_layout, *, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A zero-filled tensor of `size` (loom chooses the memory order), as `torch.empty_permuted`."""
    return _loom.empty(*size, dtype=dtype, device=device, requires_grad=requires_grad)


def frombuffer(buffer, *, dtype, count: int = -1, offset: int = 0, requires_grad: bool = False) -> Tensor:
    """A 1-d tensor sharing memory with a Python buffer, as `torch.frombuffer`."""
    import numpy as np
    d = _dt.as_dtype(dtype)
    if d is _dt.bfloat16:
        raise _LoomTypeError("loom.torch.frombuffer: bfloat16 buffers are not supported; read float32")
    arr = np.frombuffer(buffer, dtype=d.np, count=count, offset=offset)
    t = _loom.from_numpy(arr if arr.flags.writeable else arr.copy())
    return t.requires_grad_(True) if requires_grad else t


def range(start=0, end=None, step=1, *, dtype=None, device=None, requires_grad: bool = False) -> Tensor:  # noqa: A001
    """Values from `start` to `end` inclusive by `step` (deprecated in PyTorch; use arange)."""
    if end is None:
        start, end = 0, start
    n = int(_math.floor((end - start) / step)) + 1
    d = _dt.as_dtype(dtype) if dtype is not None else _dt.get_default_dtype()
    vals = [start + k * step for k in builtins_range(max(n, 0))]
    return _loom.tensor(vals, dtype=d, device=device, requires_grad=requires_grad)


builtins_range = __builtins__["range"] if isinstance(__builtins__, dict) else __builtins__.range


def _window(op: str, n: int, periodic: bool, dtype, requires_grad: bool, fn) -> Tensor:
    if n < 0:
        raise _LoomValueError(f"loom.torch.{op}: window_length must be non-negative, got {n}")
    d = _dt.as_dtype(dtype) if dtype is not None else _dt.get_default_dtype()
    if n == 0:
        return _loom.zeros(0, dtype=d, requires_grad=requires_grad)
    if n == 1:
        return _loom.ones(1, dtype=d, requires_grad=requires_grad)
    m = n if periodic else n - 1
    k = _loom.arange(n, dtype=_dt.float64)
    return fn(k, m).to(d).requires_grad_(requires_grad)


def hann_window(window_length: int, periodic: bool = True, *, dtype=None, device=None,
                requires_grad: bool = False) -> Tensor:
    """The Hann window, as `torch.hann_window`."""
    return _window("hann_window", window_length, periodic, dtype, requires_grad,
                   lambda k, m: 0.5 - 0.5 * (k * (2 * _math.pi / m)).cos())


def hamming_window(window_length: int, periodic: bool = True, alpha: float = 0.54, beta: float = 0.46, *,
                   dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """The Hamming window, as `torch.hamming_window`."""
    return _window("hamming_window", window_length, periodic, dtype, requires_grad,
                   lambda k, m: alpha - beta * (k * (2 * _math.pi / m)).cos())


def blackman_window(window_length: int, periodic: bool = True, *, dtype=None, device=None,
                    requires_grad: bool = False) -> Tensor:
    """The Blackman window, as `torch.blackman_window`."""
    return _window("blackman_window", window_length, periodic, dtype, requires_grad,
                   lambda k, m: 0.42 - 0.5 * (k * (2 * _math.pi / m)).cos() + 0.08 * (k * (4 * _math.pi / m)).cos())


def bartlett_window(window_length: int, periodic: bool = True, *, dtype=None, device=None,
                    requires_grad: bool = False) -> Tensor:
    """The Bartlett (triangular) window, as `torch.bartlett_window`."""
    return _window("bartlett_window", window_length, periodic, dtype, requires_grad,
                   lambda k, m: 1 - (k * (2.0 / m) - 1).abs())


def kaiser_window(window_length: int, periodic: bool = True, beta: float = 12.0, *, dtype=None, device=None,
                  requires_grad: bool = False) -> Tensor:
    """The Kaiser window, as `torch.kaiser_window`."""
    return _window("kaiser_window", window_length, periodic, dtype, requires_grad,
                   lambda k, m: _loom.i0(beta * (1 - (k * (2.0 / m) - 1) ** 2).clamp(min=0).sqrt()) / _loom.i0(
                       _loom.tensor(float(beta), dtype=_dt.float64)))


def to_dlpack(t: Tensor):
    """A DLPack capsule of `t`'s memory, as `torch.to_dlpack` (`torch.utils.dlpack.to_dlpack`)."""
    return t.__dlpack__()


def clear_autocast_cache() -> None:
    """No-op: loom's autocast keeps no cast cache."""


def is_autocast_cache_enabled() -> bool:
    return False


def set_autocast_cache_enabled(enabled: bool) -> None:
    """No-op: loom's autocast keeps no cast cache."""


def set_autocast_gpu_dtype(dtype) -> None:
    """No-op: there is no GPU autocast here."""


# ---------------------------------------------------------------- compile, save, load

def compile(model=None, *, fullgraph: bool = False, dynamic=None, backend="inductor", mode=None,  # noqa: A001
            options=None, disable: bool = False):
    """`torch.compile`: a module or function run through `loom.function` (see loom.torch.compiler)."""
    from loom.torch._compile import compile as _compile
    return _compile(model, fullgraph=fullgraph, dynamic=dynamic, backend=backend, mode=mode, options=options,
                    disable=disable)


def save(obj, f, pickle_module=None, pickle_protocol: int = 2, _use_new_zipfile_serialization: bool = True) -> None:
    """Save `obj` (a state_dict, a tensor, nested containers) to a path or file object, as `torch.save`."""
    io = _importlib.import_module("loom.io")
    fn = getattr(io, "torch_save", None)
    if fn is not None:
        return fn(obj, f)
    return _loom.save(obj, f)


def load(f, map_location=None, pickle_module=None, *, weights_only: bool = True, mmap=None, **kwargs):
    """Load what `save` wrote (or a PyTorch checkpoint, where loom.io reads them), as `torch.load`."""
    io = _importlib.import_module("loom.io")
    fn = getattr(io, "torch_load", None)
    if fn is not None:
        return fn(f, map_location=map_location, weights_only=weights_only)
    return _loom.load(f)


# ---------------------------------------------------------------- submodules

from loom.torch import _legacy  # noqa: E402
from loom.torch._legacy import (  # noqa: E402,F401
    BFloat16Tensor, BoolTensor, ByteTensor, CharTensor, DoubleTensor, FloatTensor, HalfTensor, IntTensor,
    LongTensor, ShortTensor,
)
from loom.torch import (  # noqa: E402,F401
    accelerator, amp, autograd, backends, cpu, cuda, distributed, fft, jit, mps, multiprocessing, nn, optim, random,
    special,
    testing, utils, version,
)
from loom.torch.amp import (  # noqa: E402,F401
    GradScaler, autocast, get_autocast_cpu_dtype, get_autocast_dtype, get_autocast_gpu_dtype, is_autocast_available,
    is_autocast_cpu_enabled, is_autocast_enabled, set_autocast_cpu_dtype, set_autocast_cpu_enabled,
    set_autocast_dtype, set_autocast_enabled,
)
from loom.torch.autograd import is_grad_enabled  # noqa: E402,F401
from loom import functional  # noqa: E402,F401
from loom.torch import linalg  # noqa: E402,F401
from loom.func import vmap  # noqa: E402,F401



from loom.torch._forward import inplace_from  # noqa: E402,F401


def _tensor_method_function(name: str):
    """`torch.name(input, ...)` for a Tensor method `name` loom has no function for: `input.name(...)`.

    PyTorch gives most Tensor methods, in-place ones included (`torch.relu_`, `torch.clone`), a
    top-level twin with the tensor first; an in-place name with no method (`torch.selu_`) writes the
    out-of-place op's result into its input.
    """
    method = Tensor.__dict__.get(name)
    if name.startswith("_") or not callable(method) or isinstance(method, (type, property)):
        if name.endswith("_") and not name.startswith("_"):
            return inplace_from(name, _loom, _importlib.import_module("loom.nn.functional"))
        raise AttributeError(name)

    def fn(input, *args, **kwargs):
        return getattr(input, name)(*args, **kwargs)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"`input.{name}(...)`, as `torch.{name}`."
    globals()[name] = fn
    return fn


# Names not defined here are loom's, then torch.nn.functional's (PyTorch exposes most of those at the
# top level too: torch.dropout, torch.conv2d), then Tensor methods as functions; `torch.vision`
# (torchvision's pieces), `torch.distributions`, `torch.func` and `torch.hub` are imported when first asked for.
def _write_out(name: str, result, out):
    """Write `result` into the `out=` tensor(s), resized to fit as PyTorch does; returns `out`."""
    if isinstance(out, (tuple, list)):
        if not isinstance(result, tuple) or len(result) != len(out):
            raise _LoomTypeError(f"loom.torch.{name}: out= has {len(out)} tensors but the result is "
                                 f"{type(result).__name__}")
        written = [_write_out(name, r, o) for r, o in zip(result, out)]
        return type(result)(*written) if hasattr(result, "_fields") else tuple(written)
    if not isinstance(out, Tensor) or not isinstance(result, Tensor):
        raise _LoomTypeError(f"loom.torch.{name}: out= must be a Tensor, got {type(out).__name__}")
    if result.dtype.category > out.dtype.category:
        raise _LoomTypeError(f"loom.torch.{name}: result type {result.dtype.name} can't be cast to the desired "
                             f"output type {out.dtype.name} (out=)")
    if tuple(out.shape) != tuple(result.shape):
        out.resize_(tuple(result.shape))
    return out.copy_(result)


def _out_variant(name: str, obj):
    """`fn` taking PyTorch's `out=` keyword, for a loom function that has no `out` parameter (None: keep it)."""
    import functools
    import inspect
    import types
    if not isinstance(obj, types.FunctionType):
        return None
    try:
        if "out" in inspect.signature(obj).parameters:
            return None
    except (TypeError, ValueError):
        return None

    @functools.wraps(obj)
    def with_out(*args, out=None, **kwargs):
        result = obj(*args, **kwargs)
        return result if out is None else _write_out(name, result, out)
    return with_out


_install(globals(), "loom", "loom.nn.functional",
         lazy={"vision": "loom.torch.vision", "distributions": "loom.torch.distributions", "func": "loom.torch.func",
               "hub": "loom.torch.hub", "compiler": "loom.torch.compiler", "_dynamo": "loom.torch._dynamo",
               "serialization": "loom.torch.serialization"},
         fallback=_tensor_method_function, wrap=_out_variant)
