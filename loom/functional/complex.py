"""Complex tensors: parts, conjugates, polar form and the real/complex views, as PyTorch has them.

The parts and the conjugate are primitives (`loom.ir.complex`); the rest are
compositions. `real` and `imag` are views, as in PyTorch: a write through one
changes that part of the complex tensor. `view_as_real` and `view_as_complex`
make new tensors (PyTorch's share storage).
"""
from __future__ import annotations

import math

from loom import dtypes as dt
from loom.alias import make_view
from loom.errors import DTypeError, ShapeError, fmt_shape
from loom.tensor import Tensor, apply, broadcast_shapes, broadcast_to, full, tensor


def _t(x) -> Tensor:
    return x if isinstance(x, Tensor) else tensor(x)


def real(input) -> Tensor:
    """The real part of `input` (a real tensor is its own real part), as `torch.real`.

    Examples
    --------
    >>> loom.real(loom.tensor([1 + 2j, -3j]))
    tensor([1., -0.])
    """
    x = _t(input)
    return make_view(x, apply("real", (x,), {})) if x.dtype.is_complex else x


def imag(input) -> Tensor:
    """The imaginary part of a complex tensor, as `torch.imag` (an error for real tensors, as in PyTorch).

    Examples
    --------
    >>> loom.imag(loom.tensor([1 + 2j, -3j]))
    tensor([ 2., -3.])
    """
    x = _t(input)
    if not x.dtype.is_complex:
        raise DTypeError(f"loom.imag: not implemented for tensors with non-complex dtypes (got "
                         f"{x.dtype.name}{fmt_shape(x.shape)})")
    return make_view(x, apply("imag", (x,), {}))


def conj(input) -> Tensor:
    """The complex conjugate (a real tensor is its own), as `torch.conj`.

    loom computes the conjugate, so `is_conj()` is always False and
    `resolve_conj` has nothing to do.

    Examples
    --------
    >>> loom.conj(loom.tensor([1 + 2j]))
    tensor([1.-2.j])
    """
    x = _t(input)
    return apply("conj", (x,), {}) if x.dtype.is_complex else x


def conj_physical(input) -> Tensor:
    """The complex conjugate, computed (as `conj` always is in loom), as `torch.conj_physical`.

    Examples
    --------
    >>> loom.conj_physical(loom.tensor([1 - 1j])).tolist()
    [(1+1j)]
    """
    return conj(input)


def resolve_conj(input) -> Tensor:
    """`input` itself: no loom tensor carries a pending conjugation, as `torch.resolve_conj`.

    Examples
    --------
    >>> z = loom.tensor([2j])
    >>> loom.resolve_conj(z) is z
    True
    """
    return _t(input)


def is_conj(input) -> bool:
    """False: loom's conjugates are computed, never a lazy bit (`torch.is_conj`).

    Examples
    --------
    >>> loom.is_conj(loom.conj(loom.tensor([1j])))
    False
    """
    return False


def is_complex(input) -> bool:
    """Whether `input` has a complex dtype, as `torch.is_complex`.

    Examples
    --------
    >>> loom.is_complex(loom.tensor([1j])), loom.is_complex(loom.tensor([1.0]))
    (True, False)
    """
    return _t(input).dtype.is_complex


def isreal(input) -> Tensor:
    """Where the imaginary part is zero (everywhere for a real tensor), as `torch.isreal`.

    Examples
    --------
    >>> loom.isreal(loom.tensor([1 + 0j, 1j])).tolist()
    [True, False]
    """
    x = _t(input)
    if x.dtype.is_complex:
        return imag(x) == 0.0
    return full(x.shape, True, dtype=dt.bool_)


def angle(input) -> Tensor:
    """The argument: atan2(imag, real) for complex tensors; pi for negative reals, 0 otherwise (`torch.angle`).

    Examples
    --------
    >>> loom.angle(loom.tensor([1j, -1.0 + 0j]))
    tensor([1.5708, 3.1416])
    >>> loom.angle(loom.tensor([-2.0, 3.0]))
    tensor([3.1416, 0.0000])
    """
    from loom.functional import math as _math
    x = _t(input)
    if x.dtype.is_complex:
        return _math.atan2(imag(x), real(x))
    xf = x if x.dtype.is_floating_point else x.to(dt.get_default_dtype())
    return _math.where(xf < 0, math.pi, _math.where(_math.isnan(xf), xf, 0.0 * xf))


def _float_pair(op: str, a, b) -> tuple[Tensor, Tensor]:
    a, b = _t(a), _t(b)
    if a.dtype is not b.dtype or a.dtype not in (dt.float32, dt.float64):
        raise DTypeError(f"loom.{op}: expects two float32 or two float64 tensors of one dtype, got "
                         f"{a.dtype.name}{fmt_shape(a.shape)} and {b.dtype.name}{fmt_shape(b.shape)}")
    shape = broadcast_shapes(tuple(a.shape), tuple(b.shape), op=op)
    return broadcast_to(a, shape, op), broadcast_to(b, shape, op)


def complex(real, imag) -> Tensor:
    """The complex tensor real + i imag (both float32 or both float64, broadcast), as `torch.complex`.

    Examples
    --------
    >>> loom.complex(loom.tensor([1.0, 2.0]), loom.tensor([3.0, -4.0]))
    tensor([1.+3.j, 2.-4.j])
    """
    re, im = _float_pair("complex", real, imag)
    return apply("complex", (re, im), {})


def polar(abs, angle) -> Tensor:
    """The complex tensor abs * (cos(angle) + i sin(angle)), as `torch.polar`.

    Examples
    --------
    >>> z = loom.polar(loom.tensor([2.0]), loom.tensor([0.0]))
    >>> z.tolist()
    [(2+0j)]
    """
    r, theta = _float_pair("polar", abs, angle)
    return apply("complex", (r * theta.cos(), r * theta.sin()), {})


def view_as_real(input) -> Tensor:
    """A complex tensor as a real one with a last dim of 2 (real, imag), as `torch.view_as_real`.

    Examples
    --------
    >>> loom.view_as_real(loom.tensor([1 + 2j])).tolist()
    [[1.0, 2.0]]
    """
    from loom.functional.shape import stack
    x = _t(input)
    if not x.dtype.is_complex:
        raise DTypeError(f"loom.view_as_real: expects a complex tensor, got {x.dtype.name}{fmt_shape(x.shape)}")
    return stack([apply("real", (x,), {}), apply("imag", (x,), {})], -1)


def view_as_complex(input) -> Tensor:
    """A float32/float64 tensor whose last dim is 2 (real, imag) as a complex tensor, as `torch.view_as_complex`.

    Examples
    --------
    >>> loom.view_as_complex(loom.tensor([[1.0, 2.0], [3.0, 0.0]]))
    tensor([1.+2.j, 3.+0.j])
    """
    x = _t(input)
    if x.dtype not in (dt.float32, dt.float64):
        raise DTypeError(f"loom.view_as_complex: expects a float32 or float64 tensor, got "
                         f"{x.dtype.name}{fmt_shape(x.shape)}")
    if x.ndim == 0 or x.shape[-1] != 2:
        raise ShapeError(f"loom.view_as_complex: the last dim must have size 2 (real, imag), got "
                         f"{fmt_shape(x.shape)}")
    return apply("complex", (x[..., 0], x[..., 1]), {})


def _cfloat(self) -> Tensor:
    """`self.to(loom.complex64)`."""
    return self.to(dt.complex64)


def _cdouble(self) -> Tensor:
    """`self.to(loom.complex128)`."""
    return self.to(dt.complex128)


def _chalf(self) -> Tensor:
    """`self.to(loom.complex32)`: an error naming complex32, which loom cannot compute in."""
    return self.to(dt.complex32)


METHODS = ["conj", "conj_physical", "resolve_conj", "angle", "isreal"]
INPLACE = ["conj_physical"]
PROPERTIES = {"real": real, "imag": imag}
TENSOR_METHODS = {"cfloat": _cfloat, "cdouble": _cdouble, "chalf": _chalf}
