"""Data types and PyTorch-compatible type promotion."""
from __future__ import annotations

import numpy as np

from loom._naming import namespace
from loom.errors import DTypeError


class DType:
    """A loom scalar type: a name, a category and the NumPy storage type."""

    __slots__ = ("name", "category", "itemsize", "np")

    def __init__(self, name: str, category: int, np_dtype: type, itemsize: int) -> None:
        self.name = name
        self.category = category  # 0 bool, 1 integer, 2 floating point, 3 complex.
        self.np = np.dtype(np_dtype)
        self.itemsize = itemsize

    @property
    def is_floating_point(self) -> bool:
        return self.category == 2

    @property
    def is_complex(self) -> bool:
        return self.category == 3

    @property
    def is_differentiable(self) -> bool:
        """Whether tensors of this type can require grad (floating point and complex)."""
        return self.category >= 2

    @property
    def is_signed(self) -> bool:
        return self.name != "bool" and not self.name.startswith("uint")

    # TensorFlow's DType spellings, so loom.tf programs can ask a loom dtype the same questions.
    @property
    def is_floating(self) -> bool:
        return self.category == 2

    @property
    def is_integer(self) -> bool:
        return self.category == 1

    @property
    def is_bool(self) -> bool:
        return self.category == 0

    @property
    def as_numpy_dtype(self) -> type:
        return np.float32 if self.name == "bfloat16" else self.np.type

    def __repr__(self) -> str:
        return f"{namespace()}.{self.name}"  # torch.float32 to a loom.torch program.

    def __str__(self) -> str:
        ns = namespace()
        return f"<dtype: '{self.name}'>" if ns == "tf" else f"{ns}.{self.name}"  # TensorFlow's str(tf.float32).

    def __reduce__(self):
        return (from_name, (self.name,))


bool_ = DType("bool", 0, np.bool_, 1)
uint8 = DType("uint8", 1, np.uint8, 1)
int8 = DType("int8", 1, np.int8, 1)
int16 = DType("int16", 1, np.int16, 2)
int32 = DType("int32", 1, np.int32, 4)
int64 = DType("int64", 1, np.int64, 8)
float16 = DType("float16", 2, np.float16, 2)
# NumPy has no bfloat16: values are stored as the upper 16 bits of a float32 and
# every computation on them runs in float32 and is rounded back.
bfloat16 = DType("bfloat16", 2, np.uint16, 2)
float32 = DType("float32", 2, np.float32, 4)
float64 = DType("float64", 2, np.float64, 8)
# PyTorch's "limited support" unsigned types: creation, casts, comparisons, bitwise ops and the
# NumPy reference path of elementwise ops; no promotion with other integer types (as PyTorch).
uint16 = DType("uint16", 1, np.uint16, 2)
uint32 = DType("uint32", 1, np.uint32, 4)
uint64 = DType("uint64", 1, np.uint64, 8)
_SHELL_UINTS = (uint16, uint32, uint64)

complex64 = DType("complex64", 3, np.complex64, 8)
complex128 = DType("complex128", 3, np.complex128, 16)
# NumPy has no complex half type: complex32 exists as a name (to compare and promote with), but
# no value of it can be made (see `check_computable`).
complex32 = DType("complex32", 3, np.complex64, 4)

ALL = (bool_, uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64, complex64, complex128,
       uint16, uint32, uint64)
_BY_NAME = {d.name: d for d in ALL + (complex32,)}
_BY_NAME.update({"bool_": bool_, "float": float32, "double": float64, "half": float16,
                 "long": int64, "int": int32, "short": int16, "cfloat": complex64, "cdouble": complex128,
                 "chalf": complex32})
_BY_NP = {d.np: d for d in ALL if d is not bfloat16}
_TO_COMPLEX = {float16: complex32, bfloat16: complex64, float32: complex64, float64: complex128}
_TO_REAL = {complex32: float16, complex64: float32, complex128: float64}


def to_complex(d: DType) -> DType:
    """The complex type whose parts are `d` (complex64 for integers, as PyTorch's default)."""
    if d.category == 3:
        return d
    return _TO_COMPLEX.get(d, complex128 if _default_float is float64 else complex64)


def to_real(d: DType) -> DType:
    """The type of the real and imaginary parts of complex `d` (`d` itself when real)."""
    return _TO_REAL.get(d, d)


def check_computable(d: DType, op: str) -> DType:
    """`d`, or a loom error when no value of it can be made (complex32)."""
    if d is complex32:
        raise DTypeError(f"loom.{op}: dtype complex32 (chalf) is not supported: NumPy has no complex half "
                         "type to compute in; use complex64 (cfloat)")
    return d

_default_float = float32


def from_name(name: str) -> DType:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise DTypeError(f"loom: unknown dtype name {name!r}; expected one of "
                        f"{sorted(d.name for d in ALL)}") from None


def from_numpy(np_dtype) -> DType:
    """Map a NumPy dtype to a loom dtype (float32 default for Python floats)."""
    nd = np.dtype(np_dtype)
    if nd in _BY_NP:
        return _BY_NP[nd]
    raise DTypeError(f"loom: NumPy dtype {nd} has no loom equivalent; supported: "
                    f"{[d.name for d in ALL]}")


def as_dtype(d) -> DType:
    """Accept a loom dtype, a name, a NumPy dtype, or a Python type."""
    if isinstance(d, DType):
        return d
    if d is float:
        return _default_float
    if d is int:
        return int64
    if d is bool:
        return bool_
    if isinstance(d, str):
        return from_name(d)
    if getattr(d, "__module__", "").startswith("torch") or type(d).__name__ == "dtype" and \
            hasattr(d, "is_floating_point"):
        return from_name(str(d).split(".")[-1])
    return from_numpy(d)


def get_default_dtype() -> DType:
    """The float dtype of tensors made from Python floats and of `randn`, `zeros`, ... (float32 at start)."""
    return _default_float


def set_default_dtype(d) -> None:
    """Make `d` (a floating point dtype) the default float dtype.

    Examples
    --------
    >>> loom.set_default_dtype(loom.float64)
    >>> loom.tensor([1.5]).dtype
    loom.float64
    >>> loom.set_default_dtype(loom.float32)
    """
    global _default_float
    d = as_dtype(d)
    if not d.is_floating_point:
        raise DTypeError(f"loom.set_default_dtype: expected a floating point dtype, got {d}")
    _default_float = d


# Promotion lattice (PyTorch's table): within floats and ints by width, and
# uint8 with a signed int widens to the next signed type.
_ORDER = {bool_: 0, uint8: 1, int8: 2, int16: 3, int32: 4, int64: 5,
          float16: 6, bfloat16: 7, float32: 8, float64: 9, complex32: 10, complex64: 11, complex128: 12,
          uint16: 1, uint32: 1, uint64: 1}


def promote_pair(a: DType, b: DType) -> DType:
    if a is b:
        return a
    if (a in _SHELL_UINTS or b in _SHELL_UINTS) and a.category != 2 and b.category != 2:
        raise DTypeError(f"loom: promotion for uint16, uint32, uint64 types is not supported (as in PyTorch), "
                         f"attempted to promote {a.name} and {b.name}; cast one with .to() first")
    if a.category == 3 or b.category == 3:
        # Complex: the wider of the parts' types (complex64 + float64 -> complex128).
        if a.category < 2 or b.category < 2:
            return a if a.category == 3 else b
        return to_complex(promote_pair(to_real(a), to_real(b)))
    if a.category != b.category:
        return a if a.category > b.category else b
    if a.category == 1:
        if uint8 in (a, b):
            other = b if a is uint8 else a
            return int16 if other is int8 else other
        return a if a.itemsize >= b.itemsize else b
    if {a, b} == {float16, bfloat16}:
        return float32
    if a.category == 2:
        return a if a.itemsize >= b.itemsize else b
    return a


def scalar_dtype(value) -> DType:
    if isinstance(value, (bool, np.bool_)):
        return bool_
    if isinstance(value, (int, np.integer)):
        return int64
    if isinstance(value, (float, np.floating)):
        return _default_float
    if isinstance(value, (complex, np.complexfloating)):
        return to_complex(_default_float)
    raise DTypeError(f"loom: unsupported scalar of type {type(value).__name__}")


def result_type(*operands) -> DType:
    """PyTorch's promotion: dimensioned tensors > zero-dim tensors > Python scalars.

    A lower tier only decides the result when its category (bool < int < float
    < complex) is higher than the tiers above it; a complex lower tier over a
    float result gives the complex type of that float (float64 + 1j -> complex128).
    """
    tiers: list[DType | None] = [None, None, None]
    for op in operands:
        if hasattr(op, "dtype") and hasattr(op, "ndim") and isinstance(op.dtype, DType):
            tier = 0 if op.ndim > 0 else 1
            d = op.dtype
        else:
            tier, d = 2, scalar_dtype(op)
        prev = tiers[tier]
        tiers[tier] = d if prev is None else promote_pair(prev, d)
    result: DType | None = None
    for t in tiers:
        if t is None:
            continue
        if result is None:
            result = t
        elif t.category > result.category:
            result = to_complex(result) if t.category == 3 and result.category == 2 else t
    assert result is not None
    return result


def bf16_to_f32(a: np.ndarray) -> np.ndarray:
    return (a.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(a: np.ndarray) -> np.ndarray:
    """Round float32 to bfloat16 bits, nearest-even, keeping NaN a NaN."""
    shape = np.shape(a)
    a = np.ascontiguousarray(a, dtype=np.float32).reshape(shape)  # (ascontiguousarray makes 0-d 1-d)
    bits = a.view(np.uint32)
    rounding = ((bits >> 16) & 1) + np.uint32(0x7FFF)
    out = np.asarray(((bits + rounding) >> 16).astype(np.uint16))  # asarray: 0-d math gives scalars.
    nan = np.isnan(a)
    if nan.any():
        out[nan] = 0x7FC0
    return out
