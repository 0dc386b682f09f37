"""PyTorch's legacy tensor types (`torch.FloatTensor`, `torch.LongTensor`, ...) over loom.Tensor.

Each is a constructor (`torch.LongTensor([1, 2])`, `torch.FloatTensor(2, 3)`)
and a type `isinstance` understands: a tensor is a `torch.FloatTensor` when its
dtype is float32. `Tensor.type(torch.LongTensor)` converts.
"""
from __future__ import annotations

from loom import dtypes as dt
from loom._naming import TORCH_TYPE_NAMES
from loom.errors import DeviceError, LoomTypeError
from loom.tensor import Tensor

_NAMES = {dt.from_name(name): legacy for name, legacy in TORCH_TYPE_NAMES.items()}


class _LegacyType(type):
    """The metaclass: `isinstance(t, torch.FloatTensor)` checks the tensor's dtype."""

    dtype: dt.DType

    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, Tensor) and obj.dtype is cls.dtype

    def __repr__(cls) -> str:
        return f"<class 'torch.{cls.__name__}'>"


def _make(d: dt.DType) -> type:
    def __new__(cls, *args, device=None):
        return Tensor(*args, dtype=cls.dtype, device=device)
    return _LegacyType(_NAMES[d], (), {"__new__": __new__, "dtype": d, "is_cuda": False,
                                        "__doc__": f"A {d.name} tensor, as `torch.{_NAMES[d]}`: "
                                                   f"`{_NAMES[d]}(2, 3)` (zeros) or `{_NAMES[d]}(data)`."})


FloatTensor, DoubleTensor, HalfTensor, BFloat16Tensor, LongTensor, IntTensor, ShortTensor, CharTensor, \
    ByteTensor, BoolTensor = (_make(d) for d in _NAMES)
TYPES = {t.__name__: t for t in (FloatTensor, DoubleTensor, HalfTensor, BFloat16Tensor, LongTensor, IntTensor,
                                 ShortTensor, CharTensor, ByteTensor, BoolTensor)}


def type_name(d: dt.DType) -> str:
    """"torch.FloatTensor" for float32, as `torch.typename` writes it."""
    return f"torch.{_NAMES[d]}"


def dtype_of(t, op: str) -> dt.DType:
    """The dtype a legacy type or its name ("torch.LongTensor") stands for."""
    if isinstance(t, _LegacyType):
        return t.dtype
    if isinstance(t, str) and t.rpartition(".")[2] in TYPES:
        if ".cuda." in t:
            raise DeviceError(f"loom.torch.{op}: {t} is a CUDA type; this build of loom runs on the cpu")
        return TYPES[t.rpartition(".")[2]].dtype
    raise LoomTypeError(f"loom.torch.{op}: expected a tensor type such as torch.FloatTensor, got {t!r}")
