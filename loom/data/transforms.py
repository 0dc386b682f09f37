"""Image transforms in the manner of torchvision.transforms, over NumPy arrays and loom Tensors.

Layouts follow torchvision: a NumPy array is an image as PIL gives it, HWC
(or HW for one channel), and a loom Tensor is [..., C, H, W]. `ToTensor`
turns the first into the second.

Tensors that require grad are transformed with loom ops, so gradients flow
through the transform; other inputs are computed in NumPy (the values are the
same, and per-example work stays cheap) and returned as the type they came in.

Random transforms draw from a NumPy Generator: the one given as `generator`,
or else the current default (`get_rng()`), which DataLoader workers and the
record pipeline reseed per batch or per example so that augmentation is
reproducible and independent of process timing. `use_rng` and `manual_seed`
set it by hand.
"""
from __future__ import annotations

import numbers
from typing import Callable, Sequence

import numpy as np

from loom import dtypes as dt
from loom.data._random import get_rng, manual_seed, use_rng
from loom.tensor import Tensor, as_tensor, from_numpy, tensor
from loom.errors import LoomTypeError, LoomValueError

__all__ = ["Compose", "Lambda", "Normalize", "RandomCrop", "RandomHorizontalFlip", "RandomVerticalFlip", "ToTensor",
           "get_rng", "manual_seed", "use_rng"]


def _rng(generator) -> np.random.Generator:
    if generator is None:
        return get_rng()
    if isinstance(generator, np.random.Generator):
        return generator
    raise LoomTypeError(f"loom.data.transforms: generator should be a numpy.random.Generator, got "
                        f"{type(generator).__name__}")


def _hw_axes(img) -> tuple[int, int]:
    """The (height, width) axes: [..., H, W] for tensors, HWC or HW for arrays."""
    if isinstance(img, Tensor):
        if img.ndim < 2:
            raise LoomValueError(f"loom.data.transforms: expected a tensor image [..., H, W], got "
                                 f"shape {tuple(img.shape)}")
        return img.ndim - 2, img.ndim - 1
    if img.ndim not in (2, 3):
        raise LoomValueError(f"loom.data.transforms: expected a NumPy image HWC or HW, got shape {img.shape}")
    return 0, 1


def _lazy(img) -> bool:
    """Tensors that require grad go through loom ops (differentiable); everything else is computed in NumPy."""
    return isinstance(img, Tensor) and img.requires_grad


def _np(img) -> np.ndarray:
    return img.numpy(force=True) if isinstance(img, Tensor) else img


def _like(out: np.ndarray, img):
    """`out` as the kind of value `img` was: a NumPy array, or a Tensor of img's dtype."""
    if not isinstance(img, Tensor):
        return out
    if img.dtype is dt.bfloat16:
        return tensor(out, dtype=dt.bfloat16)
    return from_numpy(np.ascontiguousarray(out, dtype=img.dtype.np))


def _check_image(img, opname: str):
    if isinstance(img, (Tensor, np.ndarray)):
        return img
    raise LoomTypeError(f"loom.data.transforms.{opname}: expected a NumPy array or a loom Tensor, "
                        f"got {type(img).__name__}")


class Compose:
    """Apply transforms one after another.

    Examples
    --------
    >>> from loom.data import transforms as T
    >>> t = T.Compose([T.ToTensor(), T.Normalize([0.5], [0.5])])
    >>> t(np.full((2, 2), 255, np.uint8)).tolist()
    [[[1.0, 1.0], [1.0, 1.0]]]
    """

    def __init__(self, transforms: Sequence[Callable]) -> None:
        self.transforms = list(transforms)

    def __call__(self, img):
        for t in self.transforms:
            img = t(img)
        return img

    def __repr__(self) -> str:
        body = "".join(f"\n    {t}" for t in self.transforms)
        return f"{type(self).__name__}({body}\n)"


class Lambda:
    """Wrap a function as a transform.

    Examples
    --------
    >>> loom.data.transforms.Lambda(lambda x: x * 2)(3)
    6
    """

    def __init__(self, lambd: Callable) -> None:
        if not callable(lambd):
            raise LoomTypeError(f"loom.data.transforms.Lambda: argument should be callable, got {type(lambd).__name__}")
        self.lambd = lambd

    def __call__(self, img):
        return self.lambd(img)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class ToTensor:
    """HWC (or HW) image -> CHW tensor; uint8 values are scaled to float32 in [0, 1], as torchvision does.

    Other dtypes keep their values and dtype. A loom Tensor input is taken as HWC too.

    Examples
    --------
    >>> x = loom.data.transforms.ToTensor()(np.array([[[0, 255, 51]]], np.uint8))
    >>> x.shape, x.dtype, x.flatten().tolist()
    (loom.Size([3, 1, 1]), loom.float32, [0.0, 1.0, 0.20000000298023224])
    """

    def __call__(self, pic) -> Tensor:
        pic = _check_image(pic, "ToTensor")
        arr = pic.numpy(force=True) if isinstance(pic, Tensor) else np.asarray(pic)
        if arr.ndim == 2:
            arr = arr[:, :, None]
        if arr.ndim != 3:
            raise LoomValueError(f"loom.data.transforms.ToTensor: pic should be 2 or 3 dimensional, got {arr.ndim} "
                                 f"dimensions (shape {arr.shape})")
        chw = np.ascontiguousarray(arr.transpose(2, 0, 1))
        if chw.dtype == np.uint8:
            return from_numpy(chw.astype(dt.get_default_dtype().np) / np.float32(255))
        return as_tensor(chw)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Normalize:
    """(x - mean) / std per channel of a [..., C, H, W] tensor (or CHW NumPy float array).

    Parameters
    ----------
    mean, std : sequence of float
        One value per channel.
    inplace : bool
        Accepted for torchvision compatibility; loom returns a new tensor.

    Examples
    --------
    >>> x = loom.ones(2, 1, 1)
    >>> loom.data.transforms.Normalize([0.5, 0.0], [0.5, 2.0])(x).flatten().tolist()
    [1.0, 0.5]
    """

    def __init__(self, mean: Sequence[float], std: Sequence[float], inplace: bool = False) -> None:
        self.mean = [float(m) for m in np.atleast_1d(mean)]
        self.std = [float(s) for s in np.atleast_1d(std)]
        self.inplace = inplace
        if any(s == 0 for s in self.std):
            raise LoomValueError(f"loom.data.transforms.Normalize: std evaluated to zero ({self.std}), leading to "
                                 "division by zero")

    def __call__(self, img):
        img = _check_image(img, "Normalize")
        if img.ndim < 3:
            raise LoomValueError(f"loom.data.transforms.Normalize: expected a tensor image of size (..., C, H, W), got "
                                 f"shape {tuple(img.shape)}")
        c = img.shape[-3]
        if len(self.mean) not in (1, c) or len(self.std) not in (1, c):
            raise LoomValueError(f"loom.data.transforms.Normalize: {len(self.mean)} means and {len(self.std)} stds for "
                                 f"an image with {c} channels")
        if isinstance(img, Tensor) and not img.dtype.is_floating_point:
            raise LoomTypeError(f"loom.data.transforms.Normalize: input tensor should be a float "
                                f"tensor, got {img.dtype}")
        if _lazy(img):
            mean = tensor(self.mean, dtype=img.dtype).reshape(-1, 1, 1)
            std = tensor(self.std, dtype=img.dtype).reshape(-1, 1, 1)
            return (img - mean) / std
        arr = _np(img)
        if arr.dtype.kind != "f":
            raise LoomTypeError(f"loom.data.transforms.Normalize: input array should be floating "
                                f"point, got {arr.dtype}")
        mean = np.asarray(self.mean, arr.dtype).reshape(-1, 1, 1)
        std = np.asarray(self.std, arr.dtype).reshape(-1, 1, 1)
        return _like((arr - mean) / std, img)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(mean={self.mean}, std={self.std})"


def _pad_arg(padding) -> tuple[int, int, int, int]:
    """torchvision padding (int, (lr, tb) or (l, t, r, b)) as (left, top, right, bottom)."""
    if isinstance(padding, numbers.Integral):
        p = int(padding)
        return p, p, p, p
    padding = tuple(int(p) for p in padding)
    if len(padding) == 2:
        return padding[0], padding[1], padding[0], padding[1]
    if len(padding) == 4:
        return padding  # type: ignore[return-value]
    raise LoomValueError(f"loom.data.transforms: padding must be an int or a sequence of length 2 or 4, got {padding}")


_NP_MODES = {"constant": "constant", "edge": "edge", "reflect": "reflect", "symmetric": "symmetric"}
_LOOM_MODES = {"edge": "replicate", "reflect": "reflect"}


def _pad(img, pads: tuple[int, int, int, int], fill, mode: str):
    left, top, right, bottom = pads
    if not any(pads):
        return img
    h_ax, w_ax = _hw_axes(img)
    if _lazy(img) and mode in ("constant",) + tuple(_LOOM_MODES):
        from loom.nn.functional import pad
        if mode == "constant":
            return pad(img, (left, right, top, bottom), value=float(fill))
        shape = tuple(img.shape)
        flat = img.reshape(-1, shape[-2], shape[-1])
        return pad(flat, (left, right, top, bottom), mode=_LOOM_MODES[mode]).reshape(
            *shape[:-2], shape[-2] + top + bottom, shape[-1] + left + right)
    arr = _np(img)
    if mode == "constant":  # np.pad is slow for the common case; fill a canvas instead.
        shape = list(arr.shape)
        shape[h_ax] += top + bottom
        shape[w_ax] += left + right
        out = np.full(shape, fill, dtype=arr.dtype)
        inner = [slice(None)] * arr.ndim
        inner[h_ax], inner[w_ax] = slice(top, top + arr.shape[h_ax]), slice(left, left + arr.shape[w_ax])
        out[tuple(inner)] = arr
        return _like(out, img)
    widths = [(0, 0)] * arr.ndim
    widths[h_ax], widths[w_ax] = (top, bottom), (left, right)
    return _like(np.pad(arr, widths, mode=_NP_MODES[mode]), img)


def _crop(img, top: int, left: int, h: int, w: int):
    h_ax, _ = _hw_axes(img)
    window = (slice(top, top + h), slice(left, left + w))
    index = window if h_ax == 0 else (Ellipsis,) + window
    return img[index] if _lazy(img) else _like(_np(img)[index], img)


class RandomCrop:
    """Crop a random `size` window, optionally after padding, as torchvision.transforms.RandomCrop.

    Parameters
    ----------
    size : int or (h, w)
        Output size.
    padding : int or sequence, optional
        Border added first: an int, (left/right, top/bottom) or (left, top, right, bottom).
    pad_if_needed : bool
        Pad images smaller than `size`. Default: False.
    fill : number
        Constant padding value. Default: 0.
    padding_mode : {"constant", "edge", "reflect", "symmetric"}
    generator : numpy.random.Generator, optional
        Randomness; default `get_rng()`.

    Examples
    --------
    >>> crop = loom.data.transforms.RandomCrop(2, padding=1, generator=np.random.default_rng(0))
    >>> crop(np.ones((3, 3, 1), np.uint8)).shape
    (2, 2, 1)
    """

    def __init__(self, size, padding=None, pad_if_needed: bool = False, fill=0, padding_mode: str = "constant",
                 generator: np.random.Generator | None = None) -> None:
        self.size = (int(size), int(size)) if isinstance(size, numbers.Integral) else tuple(int(s) for s in size)
        if len(self.size) != 2 or min(self.size) <= 0:
            raise LoomValueError(f"loom.data.transforms.RandomCrop: size should be a positive int "
                                 f"or (h, w), got {size}")
        if padding_mode not in _NP_MODES:
            raise LoomValueError(f"loom.data.transforms.RandomCrop: padding_mode should be one of {list(_NP_MODES)}, "
                                 f"got {padding_mode!r}")
        self.padding = padding
        self.pad_if_needed = pad_if_needed
        self.fill = fill
        self.padding_mode = padding_mode
        self.generator = generator

    def __call__(self, img):
        img = _check_image(img, "RandomCrop")
        if self.padding is not None:
            img = _pad(img, _pad_arg(self.padding), self.fill, self.padding_mode)
        h_ax, w_ax = _hw_axes(img)
        th, tw = self.size
        if self.pad_if_needed:
            dw, dh = max(0, tw - img.shape[w_ax]), max(0, th - img.shape[h_ax])
            img = _pad(img, (dw, dh, dw, dh), self.fill, self.padding_mode)
        h, w = img.shape[h_ax], img.shape[w_ax]
        if h < th or w < tw:
            raise LoomValueError(f"loom.data.transforms.RandomCrop: required crop size {(th, tw)} is larger than the "
                                 f"input image size {(h, w)}")
        rng = _rng(self.generator)
        top = int(rng.integers(0, h - th + 1))
        left = int(rng.integers(0, w - tw + 1))
        return _crop(img, top, left, th, tw)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(size={self.size}, padding={self.padding})"


class _RandomFlip:
    axis = "w"

    def __init__(self, p: float = 0.5, generator: np.random.Generator | None = None) -> None:
        if not 0.0 <= p <= 1.0:
            raise LoomValueError(f"loom.data.transforms.{type(self).__name__}: p should be in [0, 1], got {p}")
        self.p = p
        self.generator = generator

    def __call__(self, img):
        img = _check_image(img, type(self).__name__)
        if _rng(self.generator).random() >= self.p:
            return img
        h_ax, w_ax = _hw_axes(img)
        ax = w_ax if self.axis == "w" else h_ax
        if _lazy(img):
            return img.flip(ax)
        return _like(np.flip(_np(img), ax).copy(), img)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(p={self.p})"


class RandomHorizontalFlip(_RandomFlip):
    """Mirror the image left-right with probability `p` (default 0.5).

    Examples
    --------
    >>> flip = loom.data.transforms.RandomHorizontalFlip(p=1.0)
    >>> flip(loom.tensor([[[1, 2, 3]]])).tolist()
    [[[3, 2, 1]]]
    """

    axis = "w"


class RandomVerticalFlip(_RandomFlip):
    """Mirror the image top-bottom with probability `p` (default 0.5).

    Examples
    --------
    >>> loom.data.transforms.RandomVerticalFlip(p=1.0)(np.array([[1], [2]])).tolist()
    [[2], [1]]
    """

    axis = "h"
