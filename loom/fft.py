"""Discrete Fourier transforms, as `torch.fft`: fft, ifft, rfft, irfft, hfft, ihfft and their 2-d/n-d forms.

Every transform is one of three unnormalised primitives (`loom.ir.fft`:
complex to complex, real to half spectrum, half spectrum to real) between a
resize of the input (``n``/``s`` cut or zero-pad the signal, as PyTorch) and
one multiplication by the ``norm`` scale:

=========  ===================  ====================
norm       forward transforms   inverse transforms
=========  ===================  ====================
backward   1 (the default)      1/n
ortho      1/sqrt(n)            1/sqrt(n)
forward    1/n                  1
=========  ===================  ====================

All of them are differentiable with PyTorch's complex convention. `stft` and
`istft` (also ``loom.stft``/``loom.istft``) frame a signal and call these.

Examples
--------
>>> x = loom.tensor([1.0, 2.0, 3.0, 4.0])
>>> loom.fft.fft(x)
tensor([10.+0.j, -2.+2.j, -2.+0.j, -2.-2.j])
>>> loom.fft.irfft(loom.fft.rfft(x), n=4)
tensor([1., 2., 3., 4.])
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from loom import dtypes as dt
from loom.errors import DTypeError, LoomValueError, ShapeError, fmt_shape
from loom.tensor import Tensor, apply, normalize_dim, tensor

__all__ = ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft", "fft2", "ifft2", "rfft2", "irfft2", "hfft2", "ihfft2",
           "fftn", "ifftn", "rfftn", "irfftn", "hfftn", "ihfftn", "fftfreq", "rfftfreq", "fftshift", "ifftshift"]

_NORMS = ("backward", "ortho", "forward")


# ---------------------------------------------------------------- arguments

def _scale(op: str, norm: str | None, n: int, forward: bool) -> float:
    norm = "backward" if norm is None else norm
    if norm not in _NORMS:
        raise LoomValueError(f"loom.fft.{op}: invalid normalization mode {norm!r}; expected one of {list(_NORMS)}")
    if norm == "ortho":
        return 1.0 / math.sqrt(n)
    return 1.0 / n if (norm == "forward") == forward else 1.0


def _input(op: str, x, real: bool = False) -> Tensor:
    """`x` as float32/float64 (`real`) or complex64/complex128; integers compute in the default float."""
    x = x if isinstance(x, Tensor) else tensor(x)
    d = x.dtype
    if d.category < 2:
        d = dt.get_default_dtype()
    if d in (dt.float16, dt.bfloat16, dt.complex32):
        raise DTypeError(f"loom.fft.{op}: dtype {x.dtype.name} is not supported (the CPU transforms take "
                         "float32, float64, complex64 or complex128, as PyTorch's)")
    if real:
        if d.is_complex:
            raise DTypeError(f"loom.fft.{op}: expects a real input tensor, got {x.dtype.name}{fmt_shape(x.shape)}")
        return x.to(d)
    return x.to(dt.to_complex(d))


def _plan(op: str, x: Tensor, s, dim, default_dims: Sequence[int] | None) -> tuple[tuple[int, ...], list[int]]:
    """The transformed dims and the signal size along each (PyTorch's rules for `s` and `dim`)."""
    if dim is not None:
        dims = [dim] if isinstance(dim, int) else list(dim)
        dims = [normalize_dim(d, x.ndim, f"fft.{op}") for d in dims]
        if len(set(dims)) != len(dims):
            raise LoomValueError(f"loom.fft.{op}: dims must be unique, got {list(dim)}")
        if s is not None and len(s) != len(dims):
            raise ShapeError(f"loom.fft.{op}: s {list(s)} and dim {list(dims)} must have the same length")
    elif s is not None:
        if len(s) > x.ndim:
            raise ShapeError(f"loom.fft.{op}: s {list(s)} has more entries than the input {fmt_shape(x.shape)} "
                             "has dims")
        dims = list(range(x.ndim - len(s), x.ndim))
    elif default_dims is not None:
        dims = [normalize_dim(d, x.ndim, f"fft.{op}") for d in default_dims]
    else:
        dims = list(range(x.ndim))
    if not dims:
        raise ShapeError(f"loom.fft.{op}: needs at least one dim to transform, input {fmt_shape(x.shape)}")
    sizes = [x.shape[d] if s is None or s[k] == -1 else int(s[k]) for k, d in enumerate(dims)]
    for n in sizes:
        if n < 1:
            raise ShapeError(f"loom.fft.{op}: invalid number of data points ({n}) specified (input "
                             f"{fmt_shape(x.shape)}, dims {dims})")
    return tuple(dims), sizes


def _resize(x: Tensor, dims: Sequence[int], sizes: Sequence[int]) -> Tensor:
    """Cut or zero-pad `x` at the end of each dim in `dims` to the matching size."""
    cut = list(x.shape)
    for d, n in zip(dims, sizes):
        cut[d] = min(x.shape[d], n)
    if cut != list(x.shape):
        x = apply("slice", (x,), {"starts": [0] * x.ndim, "stops": cut, "steps": [1] * x.ndim})
    pads = [(0, 0)] * x.ndim
    for d, n in zip(dims, sizes):
        pads[d] = (0, n - x.shape[d])
    if any(hi for _, hi in pads):
        x = apply("pad", (x,), {"pads": pads, "value": 0})
    return x


def _scaled(y: Tensor, scale: float) -> Tensor:
    return y if scale == 1.0 else y * scale


# ---------------------------------------------------------------- the transforms, n-d

def _c2c(op: str, x, s, dim, norm, forward: bool, default_dims=None) -> Tensor:
    x = _input(op, x)
    dims, sizes = _plan(op, x, s, dim, default_dims)
    y = apply("fft_c2c", (_resize(x, dims, sizes),), {"axes": dims, "forward": forward})
    return _scaled(y, _scale(op, norm, math.prod(sizes), forward))


def _r2c(op: str, x, s, dim, norm, forward: bool, default_dims=None) -> Tensor:
    x = _input(op, x, real=True)
    dims, sizes = _plan(op, x, s, dim, default_dims)
    y = apply("fft_r2c", (_resize(x, dims, sizes),), {"axes": dims})
    y = _scaled(y, _scale(op, norm, math.prod(sizes), forward))
    # ihfft: the conjugate spectrum, scaled as an inverse (conjugated last: zero imaginary parts read -0, as PyTorch's).
    return y if forward else apply("conj", (y,), {})


def _c2r(op: str, x, s, dim, norm, forward: bool, default_dims=None) -> Tensor:
    x = _input(op, x)
    dims, sizes = _plan(op, x, s, dim, default_dims)
    last = dims[-1]
    if s is None or s[-1] == -1:
        sizes[-1] = 2 * (x.shape[last] - 1)
        if sizes[-1] < 1:
            raise ShapeError(f"loom.fft.{op}: invalid number of data points ({sizes[-1]}) specified: the input "
                             f"{fmt_shape(x.shape)} has {x.shape[last]} frequencies along dim {last}; pass n")
    n = sizes[-1]
    x = _resize(x, dims, sizes[:-1] + [n // 2 + 1])
    if forward:  # hfft: the transform of a Hermitian signal is c2r of its conjugate.
        x = apply("conj", (x,), {})
    y = apply("fft_c2r", (x,), {"axes": dims, "n": n})
    return _scaled(y, _scale(op, norm, math.prod(sizes), forward))


def fftn(input, s=None, dim=None, norm: str | None = None) -> Tensor:
    """The n-d discrete Fourier transform over `dim` (all dims by default), as `torch.fft.fftn`.

    Parameters
    ----------
    input : Tensor
        Real inputs are promoted to complex; integers compute in the default float's complex type.
    s : sequence of int, optional
        Signal size per transformed dim: the input is cut or zero-padded to it (-1 keeps the size).
    dim : sequence of int, optional
        The dims to transform; the last ``len(s)`` dims when only `s` is given.
    norm : {"backward", "ortho", "forward"}, optional
        The scale of the forward transform: 1, 1/sqrt(n) or 1/n.

    Examples
    --------
    >>> loom.fft.fftn(loom.ones(2, 2))
    tensor([[4.+0.j, 0.+0.j],
            [0.+0.j, 0.+0.j]])
    """
    return _c2c("fftn", input, s, dim, norm, True)


def ifftn(input, s=None, dim=None, norm: str | None = None) -> Tensor:
    """The n-d inverse discrete Fourier transform (1/n scale by default), as `torch.fft.ifftn`.

    Examples
    --------
    >>> loom.fft.ifftn(loom.fft.fftn(loom.tensor([[1.0, 2.0], [3.0, 4.0]]))).real
    tensor([[1., 2.],
            [3., 4.]])
    """
    return _c2c("ifftn", input, s, dim, norm, False)


def rfftn(input, s=None, dim=None, norm: str | None = None) -> Tensor:
    """The n-d transform of a real input; the last dim of `dim` keeps n // 2 + 1 frequencies (`torch.fft.rfftn`).

    Examples
    --------
    >>> loom.fft.rfftn(loom.ones(2, 4)).shape
    loom.Size([2, 3])
    """
    return _r2c("rfftn", input, s, dim, norm, True)


def irfftn(input, s=None, dim=None, norm: str | None = None) -> Tensor:
    """The inverse of `rfftn`: a real output, 2 * (m - 1) long in the last dim unless `s` says (`torch.fft.irfftn`).

    Examples
    --------
    >>> x = loom.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    >>> loom.fft.irfftn(loom.fft.rfftn(x), s=x.shape)
    tensor([[1., 2., 3.],
            [4., 5., 6.]])
    """
    return _c2r("irfftn", input, s, dim, norm, False)


def hfftn(input, s=None, dim=None, norm: str | None = None) -> Tensor:
    """The n-d transform of a Hermitian-symmetric signal given by its half (a real result), as `torch.fft.hfftn`.

    Examples
    --------
    >>> loom.fft.hfftn(loom.tensor([[1.0, 2.0], [0.0, 1.0]]))
    tensor([[ 4., -2.],
            [ 2.,  0.]])
    """
    return _c2r("hfftn", input, s, dim, norm, True)


def ihfftn(input, s=None, dim=None, norm: str | None = None) -> Tensor:
    """The inverse of `hfftn`: the half spectrum of a real signal, conjugated and scaled 1/n (`torch.fft.ihfftn`).

    Examples
    --------
    >>> loom.fft.ihfftn(loom.tensor([2.0, 0.0, 2.0, 0.0]))
    tensor([1.-0.j, 0.-0.j, 1.-0.j])
    """
    return _r2c("ihfftn", input, s, dim, norm, False)


# ---------------------------------------------------------------- 1-d and 2-d forms

def _one(n: int | None) -> list[int] | None:
    return None if n is None else [n]


def fft(input, n: int | None = None, dim: int = -1, norm: str | None = None) -> Tensor:
    """The 1-d discrete Fourier transform along `dim`, cut or zero-padded to `n` points (`torch.fft.fft`).

    Examples
    --------
    >>> loom.fft.fft(loom.tensor([1.0, 0.0, 0.0, 0.0]))
    tensor([1.+0.j, 1.+0.j, 1.+0.j, 1.+0.j])
    """
    return _c2c("fft", input, _one(n), [dim], norm, True)


def ifft(input, n: int | None = None, dim: int = -1, norm: str | None = None) -> Tensor:
    """The 1-d inverse discrete Fourier transform, as `torch.fft.ifft`.

    Examples
    --------
    >>> loom.fft.ifft(loom.tensor([4.0, 0.0, 0.0, 0.0]))
    tensor([1.+0.j, 1.+0.j, 1.+0.j, 1.+0.j])
    """
    return _c2c("ifft", input, _one(n), [dim], norm, False)


def rfft(input, n: int | None = None, dim: int = -1, norm: str | None = None) -> Tensor:
    """The 1-d transform of a real signal: its n // 2 + 1 non-negative frequencies, as `torch.fft.rfft`.

    Examples
    --------
    >>> loom.fft.rfft(loom.tensor([1.0, 2.0, 3.0, 4.0]))
    tensor([10.+0.j, -2.+2.j, -2.+0.j])
    """
    return _r2c("rfft", input, _one(n), [dim], norm, True)


def irfft(input, n: int | None = None, dim: int = -1, norm: str | None = None) -> Tensor:
    """The inverse of `rfft`: a real signal of `n` points (2 * (m - 1) by default), as `torch.fft.irfft`.

    Examples
    --------
    >>> loom.fft.irfft(loom.tensor([10.0, -2 + 2j, -2.0]))
    tensor([1., 2., 3., 4.])
    """
    return _c2r("irfft", input, _one(n), [dim], norm, False)


def hfft(input, n: int | None = None, dim: int = -1, norm: str | None = None) -> Tensor:
    """The transform of a Hermitian-symmetric signal given by its first half: a real spectrum (`torch.fft.hfft`).

    Examples
    --------
    >>> loom.fft.hfft(loom.tensor([1.0, 2.0, 3.0]))
    tensor([ 8., -2.,  0., -2.])
    """
    return _c2r("hfft", input, _one(n), [dim], norm, True)


def ihfft(input, n: int | None = None, dim: int = -1, norm: str | None = None) -> Tensor:
    """The inverse of `hfft`: the first half of the Hermitian spectrum of a real signal (`torch.fft.ihfft`).

    Examples
    --------
    >>> loom.fft.ihfft(loom.tensor([8.0, -2.0, 0.0, -2.0]))
    tensor([1.-0.j, 2.-0.j, 3.-0.j])
    """
    return _r2c("ihfft", input, _one(n), [dim], norm, False)


def fft2(input, s=None, dim=(-2, -1), norm: str | None = None) -> Tensor:
    """`fftn` over the last two dims by default, as `torch.fft.fft2`.

    Examples
    --------
    >>> loom.fft.fft2(loom.eye(2))
    tensor([[2.+0.j, 0.+0.j],
            [0.+0.j, 2.+0.j]])
    """
    return _c2c("fft2", input, s, dim, norm, True)


def ifft2(input, s=None, dim=(-2, -1), norm: str | None = None) -> Tensor:
    """`ifftn` over the last two dims by default, as `torch.fft.ifft2`.

    Examples
    --------
    >>> loom.fft.ifft2(loom.tensor([[4.0, 0.0], [0.0, 0.0]])).real
    tensor([[1., 1.],
            [1., 1.]])
    """
    return _c2c("ifft2", input, s, dim, norm, False)


def rfft2(input, s=None, dim=(-2, -1), norm: str | None = None) -> Tensor:
    """`rfftn` over the last two dims by default, as `torch.fft.rfft2`.

    Examples
    --------
    >>> loom.fft.rfft2(loom.ones(2, 2))
    tensor([[4.+0.j, 0.+0.j],
            [0.+0.j, 0.+0.j]])
    """
    return _r2c("rfft2", input, s, dim, norm, True)


def irfft2(input, s=None, dim=(-2, -1), norm: str | None = None) -> Tensor:
    """`irfftn` over the last two dims by default, as `torch.fft.irfft2`.

    Examples
    --------
    >>> loom.fft.irfft2(loom.fft.rfft2(loom.ones(2, 2)))
    tensor([[1., 1.],
            [1., 1.]])
    """
    return _c2r("irfft2", input, s, dim, norm, False)


def hfft2(input, s=None, dim=(-2, -1), norm: str | None = None) -> Tensor:
    """`hfftn` over the last two dims by default, as `torch.fft.hfft2`.

    Examples
    --------
    >>> loom.fft.hfft2(loom.tensor([[1.0, 0.0], [0.0, 0.0]]))
    tensor([[1., 1.],
            [1., 1.]])
    """
    return _c2r("hfft2", input, s, dim, norm, True)


def ihfft2(input, s=None, dim=(-2, -1), norm: str | None = None) -> Tensor:
    """`ihfftn` over the last two dims by default, as `torch.fft.ihfft2`.

    Examples
    --------
    >>> loom.fft.ihfft2(loom.ones(2, 2)).abs()
    tensor([[1., 0.],
            [0., 0.]])
    """
    return _r2c("ihfft2", input, s, dim, norm, False)


# ---------------------------------------------------------------- frequencies and shifts

def _freq_dtype(op: str, dtype) -> dt.DType:
    d = dt.get_default_dtype() if dtype is None else dt.as_dtype(dtype)
    if d.category < 2:
        raise DTypeError(f"loom.fft.{op}: expects a floating point or complex dtype, got {d.name}")
    return d


def fftfreq(n: int, d: float = 1.0, *, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """The sample frequencies of an `n`-point `fft` with sample spacing `d`, as `torch.fft.fftfreq`.

    Examples
    --------
    >>> loom.fft.fftfreq(4)
    tensor([ 0.0000,  0.2500, -0.5000, -0.2500])
    """
    if n < 1:
        raise LoomValueError(f"loom.fft.fftfreq: n must be positive, got {n}")
    k = np.concatenate([np.arange(0, (n - 1) // 2 + 1), np.arange(-(n // 2), 0)])
    return tensor(k * (1.0 / (n * d)), dtype=_freq_dtype("fftfreq", dtype), device=device,
                  requires_grad=requires_grad)


def rfftfreq(n: int, d: float = 1.0, *, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """The n // 2 + 1 sample frequencies of an `n`-point `rfft` with sample spacing `d`, as `torch.fft.rfftfreq`.

    Examples
    --------
    >>> loom.fft.rfftfreq(4)
    tensor([0.0000, 0.2500, 0.5000])
    """
    if n < 1:
        raise LoomValueError(f"loom.fft.rfftfreq: n must be positive, got {n}")
    return tensor(np.arange(n // 2 + 1) * (1.0 / (n * d)), dtype=_freq_dtype("rfftfreq", dtype), device=device,
                  requires_grad=requires_grad)


def _shift(op: str, input, dim, inverse: bool) -> Tensor:
    from loom.functional.shape import roll
    x = input if isinstance(input, Tensor) else tensor(input)
    dims = list(range(x.ndim)) if dim is None else [dim] if isinstance(dim, int) else list(dim)
    dims = [normalize_dim(d, x.ndim, f"fft.{op}") for d in dims]
    if not dims:
        return x
    shifts = [(x.shape[d] + 1) // 2 if inverse else x.shape[d] // 2 for d in dims]
    return roll(x, shifts, dims)


def fftshift(input, dim=None) -> Tensor:
    """Move the zero frequency to the centre of `dim` (all dims by default), as `torch.fft.fftshift`.

    Examples
    --------
    >>> loom.fft.fftshift(loom.fft.fftfreq(5))
    tensor([-0.4000, -0.2000,  0.0000,  0.2000,  0.4000])
    """
    return _shift("fftshift", input, dim, False)


def ifftshift(input, dim=None) -> Tensor:
    """The inverse of `fftshift`, as `torch.fft.ifftshift`.

    Examples
    --------
    >>> loom.fft.ifftshift(loom.fft.fftshift(loom.arange(5))).tolist()
    [0, 1, 2, 3, 4]
    """
    return _shift("ifftshift", input, dim, True)
