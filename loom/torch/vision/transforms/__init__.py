"""torchvision.transforms over loom: PIL images, uint8 NumPy images (HW or HWC) and loom Tensors ([..., C, H, W]).

Each transform returns the kind of image it was given, as torchvision's do:
a PIL image stays a PIL image (and is processed by Pillow, so results are
Pillow's), an array stays an array, a Tensor stays a Tensor. `ToTensor`
turns the first two into a float32 CHW tensor in [0, 1]. Resizing arrays and
tensors uses Pillow's separable resampling (antialiased when shrinking, as
torchvision's ``antialias=True``), written in NumPy, so it works without
Pillow and gives Pillow's values up to rounding.

Randomness comes from `loom.data.transforms`' generator (`get_rng`), which
the DataLoader reseeds per worker and batch, or from the `generator`
argument: a `numpy.random.Generator`. The draws differ from torchvision's
(which uses torch's RNG); their distributions are the same.
"""
from __future__ import annotations

import math
import numbers
from typing import Sequence

import numpy as np

from loom.data import transforms as _T
from loom.data.transforms import Compose, Lambda, Normalize, _crop, _hw_axes, _lazy, _like, _np, _pad, _pad_arg, _rng
from loom.errors import LoomTypeError, LoomValueError
from loom.tensor import Tensor, from_numpy, tensor
from loom.torch._forward import install as _install

try:
    from PIL import Image
except ImportError:  # Pillow is optional: arrays and tensors work without it.
    Image = None  # type: ignore[assignment]

__all__ = ["CenterCrop", "ColorJitter", "Compose", "ConvertImageDtype", "Grayscale", "InterpolationMode", "Lambda",
           "Normalize", "PILToTensor", "Pad", "RandomApply", "RandomChoice", "RandomCrop", "RandomGrayscale",
           "RandomHorizontalFlip", "RandomResizedCrop", "RandomVerticalFlip", "Resize", "ToPILImage", "ToTensor",
           "functional"]


class InterpolationMode:
    """The interpolation names of torchvision (`InterpolationMode.BILINEAR` == "bilinear")."""

    NEAREST = "nearest"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"


def is_pil(img) -> bool:
    """Whether `img` is a PIL image (False when Pillow is not installed)."""
    return Image is not None and isinstance(img, Image.Image)


def _check(img, opname: str):
    if is_pil(img) or isinstance(img, (np.ndarray, Tensor)):
        return img
    raise LoomTypeError(f"loom.torch.vision.transforms.{opname}: expected a PIL image, a NumPy image (HW or HWC) or a "
                        f"loom Tensor [..., C, H, W], got {type(img).__name__}")


def image_size(img) -> tuple[int, int]:
    """(height, width) of a PIL image, HW/HWC array or [..., H, W] tensor."""
    if is_pil(img):
        return img.height, img.width
    h_ax, w_ax = _hw_axes(img)
    return int(img.shape[h_ax]), int(img.shape[w_ax])


def _via_array(img, fn):
    """Apply `fn` (array or tensor -> same) to `img`; a PIL image goes through a NumPy array and back."""
    if is_pil(img):
        out = fn(np.asarray(img))
        return Image.fromarray(np.ascontiguousarray(out))
    return fn(img)


def _size_arg(size, opname: str) -> tuple[int, int]:
    if isinstance(size, numbers.Integral):
        return int(size), int(size)
    size = tuple(int(s) for s in size)
    if len(size) == 1:
        return size[0], size[0]
    if len(size) != 2 or min(size) <= 0:
        raise LoomValueError(f"loom.torch.vision.transforms.{opname}: size should be a positive int or (h, w), "
                             f"got {size}")
    return size  # type: ignore[return-value]


# Resampling ---------------------------------------------------------------------------------------------------------

def _bilinear(x: np.ndarray) -> np.ndarray:
    x = np.abs(x)
    return np.where(x < 1.0, 1.0 - x, 0.0)


def _bicubic(x: np.ndarray, a: float = -0.5) -> np.ndarray:
    x = np.abs(x)
    near = ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    far = (((x - 5.0) * x + 8.0) * x - 4.0) * a
    return np.where(x < 1.0, near, np.where(x < 2.0, far, 0.0))


_FILTERS = {"bilinear": (_bilinear, 1.0), "bicubic": (_bicubic, 2.0)}
_PIL_FILTERS = {"nearest": 0, "bilinear": 2, "bicubic": 3}  # Image.NEAREST, BILINEAR, BICUBIC.


def resample_matrix(in_size: int, out_size: int, mode: str = "bilinear", antialias: bool = True) -> np.ndarray:
    """[out_size, in_size] weights resizing one axis as Pillow does (triangle/cubic filter, stretched when shrinking).

    Examples
    --------
    >>> resample_matrix(4, 2, "nearest").tolist()
    [[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0]]
    >>> resample_matrix(2, 4).round(2).tolist()[:2]
    [[1.0, 0.0], [0.75, 0.25]]
    """
    scale = in_size / out_size
    weights = np.zeros((out_size, in_size))
    if mode == "nearest":
        src = np.minimum(np.floor((np.arange(out_size) + 0.5) * scale).astype(np.int64), in_size - 1)
        weights[np.arange(out_size), src] = 1.0
        return weights
    if mode not in _FILTERS:
        raise LoomValueError(f"loom.torch.vision.transforms: interpolation should be one of nearest, bilinear, "
                             f"bicubic, got {mode!r}")
    kernel, support = _FILTERS[mode]
    stretch = max(scale, 1.0) if antialias else 1.0
    support *= stretch
    for i in range(out_size):
        center = (i + 0.5) * scale
        lo = max(int(center - support + 0.5), 0)
        hi = min(int(center + support + 0.5), in_size)
        w = kernel((np.arange(lo, hi) - center + 0.5) / stretch)
        total = w.sum()
        weights[i, lo:hi] = w / total if total != 0 else w
    return weights


def _resize_array(img, size: tuple[int, int], mode: str, antialias: bool):
    """Resize an HW/HWC array or [..., H, W] tensor to `size` = (h, w)."""
    h_ax, w_ax = _hw_axes(img)
    in_h, in_w = int(img.shape[h_ax]), int(img.shape[w_ax])
    wh = resample_matrix(in_h, size[0], mode, antialias)
    ww = resample_matrix(in_w, size[1], mode, antialias)
    if _lazy(img):  # Differentiable: two matmuls with loom ops.
        return tensor(wh.astype(np.float32), dtype=img.dtype) @ img @ tensor(ww.T.astype(np.float32), dtype=img.dtype)
    arr = _np(img)
    integer = arr.dtype.kind in "ui"

    def settle(x):  # Pillow rounds and clips integer images after each pass.
        if not integer:
            return x
        info = np.iinfo(arr.dtype)
        return np.clip(np.rint(x), info.min, info.max)

    work = arr.astype(np.float64)
    if h_ax == 0:  # HW or HWC array; Pillow resamples the width first.
        out = settle(np.einsum("pw,hw...->hp...", ww, work))
        out = settle(np.einsum("oh,hp...->op...", wh, out))
    else:
        out = settle(np.einsum("...hw,pw->...hp", work, ww))
        out = settle(np.einsum("oh,...hp->...op", wh, out))
    return _like(out.astype(arr.dtype), img)


def _resize(img, size: tuple[int, int], mode: str, antialias: bool = True):
    if is_pil(img):
        return img.resize((size[1], size[0]), _PIL_FILTERS[mode])
    return _resize_array(img, size, mode, antialias)


def _interp(interpolation) -> str:
    mode = getattr(interpolation, "value", interpolation)
    if isinstance(mode, int):  # PIL constants, as old torchvision code passes them.
        mode = {0: "nearest", 2: "bilinear", 3: "bicubic"}.get(mode, mode)
    if mode not in _PIL_FILTERS:
        raise LoomValueError(f"loom.torch.vision.transforms: interpolation should be one of "
                             f"{list(_PIL_FILTERS)}, got {interpolation!r}")
    return mode


class Resize:
    """Resize to `size`: (h, w), or an int that the shorter side becomes (keeping the aspect ratio).

    Parameters
    ----------
    size : int or (h, w)
    interpolation : {"bilinear", "nearest", "bicubic"} or InterpolationMode
    max_size : int, optional
        With an int `size`: the longer side's upper bound.
    antialias : bool
        Stretch the filter when shrinking (Pillow always does). Default: True.

    Examples
    --------
    >>> from loom.torch.vision import transforms
    >>> transforms.Resize(2)(np.zeros((4, 8), np.uint8)).shape
    (2, 4)
    """

    def __init__(self, size, interpolation=InterpolationMode.BILINEAR, max_size: int | None = None,
                 antialias: bool | None = True) -> None:
        if not isinstance(size, numbers.Integral):
            size = _size_arg(size, "Resize")
        self.size, self.interpolation, self.max_size = size, _interp(interpolation), max_size
        self.antialias = True if antialias is None else bool(antialias)

    def output_size(self, h: int, w: int) -> tuple[int, int]:
        if not isinstance(self.size, numbers.Integral):
            return self.size
        short, long = (h, w) if h <= w else (w, h)
        new_short, new_long = int(self.size), int(int(self.size) * long / short)
        if self.max_size is not None:
            if self.max_size <= new_short:
                raise LoomValueError(f"loom.torch.vision.transforms.Resize: max_size = {self.max_size} must be larger "
                                     f"than the requested size {self.size}")
            if new_long > self.max_size:
                new_short, new_long = int(self.max_size * new_short / new_long), self.max_size
        return (new_short, new_long) if h <= w else (new_long, new_short)

    def __call__(self, img):
        img = _check(img, "Resize")
        h, w = image_size(img)
        size = self.output_size(h, w)
        if size == (h, w):
            return img
        return _resize(img, size, self.interpolation, self.antialias)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(size={self.size}, interpolation={self.interpolation})"


def _center_crop(img, size: tuple[int, int]):
    th, tw = size
    h, w = image_size(img)
    if th > h or tw > w:  # torchvision pads with zeros first, splitting the excess (the odd pixel right/bottom).
        pads = ((tw - w) // 2 if tw > w else 0, (th - h) // 2 if th > h else 0,
                (tw - w + 1) // 2 if tw > w else 0, (th - h + 1) // 2 if th > h else 0)
        img = _pad_any(img, pads, 0, "constant")
        h, w = image_size(img)
        if (h, w) == (th, tw):
            return img
    top, left = int(round((h - th) / 2.0)), int(round((w - tw) / 2.0))
    return _crop_any(img, top, left, th, tw)


def _crop_any(img, top: int, left: int, h: int, w: int):
    if is_pil(img):
        return img.crop((left, top, left + w, top + h))
    return _crop(img, top, left, h, w)


def _pad_any(img, pads: tuple[int, int, int, int], fill, mode: str):
    return _via_array(img, lambda a: _pad(a, pads, fill, mode))


class CenterCrop:
    """Crop the central `size` window (padding with zeros if the image is smaller), as torchvision.

    Examples
    --------
    >>> from loom.torch.vision import transforms
    >>> transforms.CenterCrop(2)(np.arange(16).reshape(4, 4)).tolist()
    [[5, 6], [9, 10]]
    """

    def __init__(self, size) -> None:
        self.size = _size_arg(size, "CenterCrop")

    def __call__(self, img):
        return _center_crop(_check(img, "CenterCrop"), self.size)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(size={self.size})"


class Pad:
    """Pad the borders: `padding` an int, (left/right, top/bottom) or (left, top, right, bottom).

    Parameters
    ----------
    padding : int or sequence
    fill : number or tuple
        The constant for ``padding_mode="constant"`` (a tuple gives one value per channel).
    padding_mode : {"constant", "edge", "reflect", "symmetric"}

    Examples
    --------
    >>> from loom.torch.vision import transforms
    >>> transforms.Pad((1, 0), fill=9)(np.zeros((1, 1), np.uint8)).tolist()
    [[9, 0, 9]]
    """

    def __init__(self, padding, fill=0, padding_mode: str = "constant") -> None:
        self.padding = _pad_arg(padding)
        if padding_mode not in ("constant", "edge", "reflect", "symmetric"):
            raise LoomValueError(f"loom.torch.vision.transforms.Pad: padding_mode should be constant, edge, reflect or "
                                 f"symmetric, got {padding_mode!r}")
        self.fill, self.padding_mode = fill, padding_mode

    def __call__(self, img):
        return _pad_any(_check(img, "Pad"), self.padding, self.fill, self.padding_mode)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(padding={self.padding}, fill={self.fill}, padding_mode={self.padding_mode})"


class RandomCrop(_T.RandomCrop):
    """torchvision.transforms.RandomCrop (see `loom.data.transforms.RandomCrop`), also for PIL images.

    Examples
    --------
    >>> from loom.torch.vision import transforms
    >>> transforms.RandomCrop(28, padding=4)(np.zeros((28, 28), np.uint8)).shape
    (28, 28)
    """

    def __call__(self, img):
        return _via_array(_check(img, "RandomCrop"), super().__call__)


class RandomHorizontalFlip(_T.RandomHorizontalFlip):
    """Mirror left-right with probability `p` (default 0.5); PIL images, arrays and tensors.

    Examples
    --------
    >>> from loom.torch.vision import transforms
    >>> transforms.RandomHorizontalFlip(p=1.0)(np.array([[1, 2, 3]])).tolist()
    [[3, 2, 1]]
    """

    def __call__(self, img):
        return _via_array(_check(img, type(self).__name__), super().__call__)


class RandomVerticalFlip(_T.RandomVerticalFlip):
    """Mirror top-bottom with probability `p` (default 0.5); PIL images, arrays and tensors.

    Examples
    --------
    >>> from loom.torch.vision import transforms
    >>> transforms.RandomVerticalFlip(p=1.0)(np.array([[1], [2]])).tolist()
    [[2], [1]]
    """

    def __call__(self, img):
        return _via_array(_check(img, type(self).__name__), super().__call__)


class RandomResizedCrop:
    """Crop a random area and aspect ratio, then resize to `size`, as torchvision.transforms.RandomResizedCrop.

    Up to 10 tries draw an area fraction from `scale` and a log-uniform aspect
    ratio from `ratio`; if none fits, the central crop with the ratio clamped
    to `ratio` is used.

    Examples
    --------
    >>> from loom.torch.vision import transforms
    >>> t = transforms.RandomResizedCrop(8, generator=np.random.default_rng(0))
    >>> t(np.zeros((20, 30, 3), np.uint8)).shape
    (8, 8, 3)
    """

    def __init__(self, size, scale: Sequence[float] = (0.08, 1.0), ratio: Sequence[float] = (3 / 4, 4 / 3),
                 interpolation=InterpolationMode.BILINEAR, antialias: bool | None = True,
                 generator: np.random.Generator | None = None) -> None:
        self.size = _size_arg(size, "RandomResizedCrop")
        if scale[0] > scale[1] or ratio[0] > ratio[1]:
            raise LoomValueError(f"loom.torch.vision.transforms.RandomResizedCrop: scale {tuple(scale)} and ratio "
                                 f"{tuple(ratio)} should be (min, max)")
        self.scale, self.ratio = tuple(scale), tuple(ratio)
        self.interpolation, self.antialias = _interp(interpolation), antialias is not False
        self.generator = generator

    def get_params(self, img) -> tuple[int, int, int, int]:
        """(top, left, height, width) of the crop."""
        height, width = image_size(img)
        area = height * width
        rng = _rng(self.generator)
        log_ratio = (math.log(self.ratio[0]), math.log(self.ratio[1]))
        for _ in range(10):
            target_area = area * rng.uniform(self.scale[0], self.scale[1])
            aspect = math.exp(rng.uniform(log_ratio[0], log_ratio[1]))
            w = int(round(math.sqrt(target_area * aspect)))
            h = int(round(math.sqrt(target_area / aspect)))
            if 0 < w <= width and 0 < h <= height:
                return int(rng.integers(0, height - h + 1)), int(rng.integers(0, width - w + 1)), h, w
        in_ratio = width / height
        if in_ratio < min(self.ratio):
            w, h = width, int(round(width / min(self.ratio)))
        elif in_ratio > max(self.ratio):
            h, w = height, int(round(height * max(self.ratio)))
        else:
            w, h = width, height
        return (height - h) // 2, (width - w) // 2, h, w

    def __call__(self, img):
        img = _check(img, "RandomResizedCrop")
        top, left, h, w = self.get_params(img)
        return _resize(_crop_any(img, top, left, h, w), self.size, self.interpolation, self.antialias)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(size={self.size}, scale={self.scale}, ratio={self.ratio})"


class Grayscale:
    """RGB to grey, with 1 or 3 output channels: Pillow's "L" conversion for PIL images and uint8 arrays
    (L = (19595 R + 38470 G + 7471 B + 2^15) >> 16), torchvision's 0.2989 R + 0.587 G + 0.114 B for float.

    Examples
    --------
    >>> from loom.torch.vision import transforms
    >>> transforms.Grayscale()(np.array([[[255, 0, 0]]], np.uint8)).tolist()
    [[76]]
    """

    def __init__(self, num_output_channels: int = 1) -> None:
        if num_output_channels not in (1, 3):
            raise LoomValueError(f"loom.torch.vision.transforms.Grayscale: num_output_channels should be 1 or 3, got "
                                 f"{num_output_channels}")
        self.num_output_channels = num_output_channels

    def __call__(self, img):
        img = _check(img, "Grayscale")
        n = self.num_output_channels
        if is_pil(img):
            grey = img.convert("L")
            return grey if n == 1 else Image.merge("RGB", (grey, grey, grey))
        if isinstance(img, np.ndarray):
            if img.ndim == 2:
                grey = img
            elif img.shape[2] == 1:
                grey = img[:, :, 0]
            elif img.dtype == np.uint8:
                rgb = img[:, :, :3].astype(np.uint32)
                grey = ((rgb[..., 0] * 19595 + rgb[..., 1] * 38470 + rgb[..., 2] * 7471 + 0x8000) >> 16).astype(
                    np.uint8)
            else:
                grey = (0.2989 * img[..., 0] + 0.587 * img[..., 1] + 0.114 * img[..., 2]).astype(img.dtype)
            return grey if n == 1 else np.repeat(grey[:, :, None], 3, axis=2)
        if img.ndim < 3 or img.shape[-3] not in (1, 3):
            raise LoomValueError(f"loom.torch.vision.transforms.Grayscale: expected a [..., 1 or 3, H, W] tensor, "
                                 f"got shape {tuple(img.shape)}")
        if img.shape[-3] == 3:
            r, g, b = img[..., 0:1, :, :], img[..., 1:2, :, :], img[..., 2:3, :, :]
            img = 0.2989 * r + 0.587 * g + 0.114 * b
        return img if n == 1 else img.expand(*img.shape[:-3], 3, *img.shape[-2:])

    def __repr__(self) -> str:
        return f"{type(self).__name__}(num_output_channels={self.num_output_channels})"


class ToTensor(_T.ToTensor):
    """PIL image or HW/HWC array -> float32 CHW tensor, uint8 scaled to [0, 1] (as torchvision.transforms.ToTensor).

    Examples
    --------
    >>> from loom.torch.vision import transforms
    >>> transforms.ToTensor()(np.full((1, 2), 255, np.uint8)).tolist()
    [[[1.0, 1.0]]]
    """

    def __call__(self, pic) -> Tensor:
        if is_pil(pic):
            arr = np.asarray(pic)
            if pic.mode == "1":
                arr = arr.astype(np.uint8) * 255
            return super().__call__(arr)
        return super().__call__(pic)


class PILToTensor:
    """PIL image or array -> CHW tensor of the same dtype, values unscaled (torchvision.transforms.PILToTensor).

    Examples
    --------
    >>> from loom.torch.vision import transforms
    >>> transforms.PILToTensor()(np.full((1, 2), 7, np.uint8)).tolist()
    [[[7, 7]]]
    """

    def __call__(self, pic) -> Tensor:
        arr = np.asarray(pic)
        if arr.ndim == 2:
            arr = arr[:, :, None]
        return from_numpy(np.ascontiguousarray(arr.transpose(2, 0, 1)))

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def to_uint8_hwc(pic) -> np.ndarray:
    """A CHW tensor/array (float in [0, 1] or uint8) as a uint8 HW or HWC array, rounded as torchvision's save_image."""
    arr = pic.numpy(force=True) if isinstance(pic, Tensor) else np.asarray(pic)
    if arr.ndim == 2:
        arr = arr[None]
    if arr.ndim != 3:
        raise LoomValueError(f"loom.torch.vision: expected a CHW image, got shape {arr.shape}")
    if arr.dtype.kind == "f":
        arr = np.clip(arr * 255.0 + 0.5, 0, 255)
    arr = arr.astype(np.uint8).transpose(1, 2, 0)
    return arr[:, :, 0] if arr.shape[2] == 1 else np.ascontiguousarray(arr)


class ToPILImage:
    """CHW tensor (float in [0, 1], or uint8) -> PIL image (or uint8 HW/HWC array without Pillow).

    Examples
    --------
    >>> from loom.torch.vision import transforms
    >>> img = transforms.ToPILImage()(loom.ones(1, 2, 2))
    >>> np.asarray(img).tolist()
    [[255, 255], [255, 255]]
    """

    def __init__(self, mode: str | None = None) -> None:
        self.mode = mode

    def __call__(self, pic):
        if is_pil(pic):
            return pic if self.mode is None else pic.convert(self.mode)
        arr = to_uint8_hwc(pic)
        if Image is None:
            return arr
        img = Image.fromarray(arr)
        return img if self.mode is None else img.convert(self.mode)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"



class RandomApply:
    """Apply the list of transforms, in order, with probability `p` (default 0.5), else none of them.

    Examples
    --------
    >>> from loom.torch.vision import transforms
    >>> transforms.RandomApply([transforms.Lambda(lambda x: x + 1)], p=1.0)(1)
    2
    """

    def __init__(self, transforms: Sequence, p: float = 0.5, generator: np.random.Generator | None = None) -> None:
        if not 0.0 <= p <= 1.0:
            raise LoomValueError(f"loom.torch.vision.transforms.RandomApply: p should be in [0, 1], got {p}")
        self.transforms, self.p, self.generator = list(transforms), p, generator

    def __call__(self, img):
        if _rng(self.generator).random() >= self.p:
            return img
        for t in self.transforms:
            img = t(img)
        return img

    def __repr__(self) -> str:
        return f"{type(self).__name__}(p={self.p}, transforms={self.transforms})"


class RandomChoice:
    """Apply one transform picked at random from the list (with probabilities `p`, default uniform).

    Examples
    --------
    >>> from loom.torch.vision import transforms
    >>> transforms.RandomChoice([transforms.Lambda(lambda x: -x)], generator=np.random.default_rng(0))(3)
    -3
    """

    def __init__(self, transforms: Sequence, p: Sequence[float] | None = None,
                 generator: np.random.Generator | None = None) -> None:
        self.transforms = list(transforms)
        if not self.transforms or (p is not None and len(p) != len(self.transforms)):
            raise LoomValueError(f"loom.torch.vision.transforms.RandomChoice: {len(self.transforms)} transforms and "
                                 f"{None if p is None else len(p)} probabilities; need at least one, and as many "
                                 "probabilities as transforms")
        total = float(sum(p)) if p is not None else 0.0
        self.p = [float(v) / total for v in p] if p is not None else None
        self.generator = generator

    def __call__(self, img):
        k = int(_rng(self.generator).choice(len(self.transforms), p=self.p))
        return self.transforms[k](img)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(transforms={self.transforms}, p={self.p})"


class RandomGrayscale:
    """`Grayscale` with probability `p` (default 0.1), keeping the number of channels.

    Examples
    --------
    >>> from loom.torch.vision import transforms
    >>> transforms.RandomGrayscale(p=1.0)(np.array([[[255, 0, 0]]], np.uint8)).tolist()
    [[[76, 76, 76]]]
    """

    def __init__(self, p: float = 0.1, generator: np.random.Generator | None = None) -> None:
        self.p, self.generator = p, generator

    def __call__(self, img):
        img = _check(img, "RandomGrayscale")
        if _rng(self.generator).random() >= self.p:
            return img
        if is_pil(img):
            channels = len(img.getbands())
        elif isinstance(img, np.ndarray):
            channels = 1 if img.ndim == 2 else int(img.shape[2])
        else:
            channels = int(img.shape[-3])
        return Grayscale(3 if channels == 3 else 1)(img)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(p={self.p})"


class ConvertImageDtype:
    """Convert a tensor image to `dtype`, rescaling values as torchvision does (uint8 255 <-> float 1.0).

    Examples
    --------
    >>> from loom.torch.vision import transforms
    >>> transforms.ConvertImageDtype(loom.float32)(loom.tensor([[[0, 255]]], dtype=loom.uint8)).tolist()
    [[[0.0, 1.0]]]
    """

    def __init__(self, dtype) -> None:
        self.dtype = dtype

    def __call__(self, image: Tensor) -> Tensor:
        if not isinstance(image, Tensor):
            raise LoomTypeError(f"loom.torch.vision.transforms.ConvertImageDtype: expected a loom Tensor, got "
                                f"{type(image).__name__}")
        src, dst = image.dtype, self.dtype
        if src == dst:
            return image
        if src.is_floating_point and dst.is_floating_point:
            return image.to(dst)
        arr = image.numpy(force=True)
        if src.is_floating_point:  # [0, 1] -> 0..max, as torchvision: x * (max + 1 - 0.001), truncated.
            top = np.iinfo(dst.np).max
            return from_numpy((arr.astype(np.float64) * (top + 1.0 - 1e-3)).astype(dst.np))
        top_src = int(np.iinfo(src.np).max)  # type: ignore[type-var]
        if dst.is_floating_point:
            return from_numpy((arr / np.float64(top_src)).astype(dst.np))
        top_dst = int(np.iinfo(dst.np).max)
        if top_src > top_dst:
            out = arr.astype(np.int64) // ((top_src + 1) // (top_dst + 1))
        else:
            out = arr.astype(np.int64) * ((top_dst + 1) // (top_src + 1))
        return from_numpy(out.astype(dst.np))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(dtype={self.dtype})"



def _rgb_to_hsv(rgb: np.ndarray) -> np.ndarray:
    """[..., 3, H, W] RGB in [0, 1] -> HSV, each in [0, 1] (torchvision's formulas)."""
    r, g, b = rgb[..., 0, :, :], rgb[..., 1, :, :], rgb[..., 2, :, :]
    maxc, minc = rgb.max(axis=-3), rgb.min(axis=-3)
    same = maxc == minc
    span = maxc - minc
    s = span / np.where(same, 1.0, maxc)
    div = np.where(same, 1.0, span)
    rc, gc, bc = (maxc - r) / div, (maxc - g) / div, (maxc - b) / div
    h = np.where(maxc == r, bc - gc, np.where(maxc == g, 2.0 + rc - bc, 4.0 + gc - rc))
    h = np.where(same, 0.0, h)
    return np.stack([np.fmod(h / 6.0 + 1.0, 1.0), s, maxc], axis=-3)


def _hsv_to_rgb(hsv: np.ndarray) -> np.ndarray:
    h, s, v = hsv[..., 0, :, :], hsv[..., 1, :, :], hsv[..., 2, :, :]
    i = np.floor(h * 6.0)
    f = h * 6.0 - i
    i = i.astype(np.int64) % 6
    p = np.clip(v * (1.0 - s), 0.0, 1.0)
    q = np.clip(v * (1.0 - s * f), 0.0, 1.0)
    t = np.clip(v * (1.0 - s * (1.0 - f)), 0.0, 1.0)
    r = np.choose(i, [v, q, p, p, t, v])
    g = np.choose(i, [t, v, v, q, p, p])
    b = np.choose(i, [p, p, t, v, v, q])
    return np.stack([r, g, b], axis=-3)


def _jitter_chw(x: np.ndarray, op: str, factor: float, bound: float) -> np.ndarray:
    """One ColorJitter step on a [..., C, H, W] float array in [0, `bound`] (torchvision's tensor rules)."""
    if op == "hue":
        if x.shape[-3] == 1:
            return x
        hsv = _rgb_to_hsv(x / bound)
        hsv[..., 0, :, :] = np.fmod(hsv[..., 0, :, :] + factor, 1.0) % 1.0
        return _hsv_to_rgb(hsv) * bound
    if op == "brightness":
        other = np.zeros_like(x)
    else:
        grey = x if x.shape[-3] == 1 else (0.2989 * x[..., 0:1, :, :] + 0.587 * x[..., 1:2, :, :]
                                           + 0.114 * x[..., 2:3, :, :])
        if bound == 255.0:
            grey = np.floor(grey)  # torchvision's uint8 grey is truncated to uint8.
        other = grey.mean(axis=(-3, -2, -1), keepdims=True) if op == "contrast" else grey
    return np.clip(factor * x + (1.0 - factor) * other, 0.0, bound)


class ColorJitter:
    """Random brightness, contrast, saturation and hue changes, applied in a random order, as torchvision.

    Each of `brightness`, `contrast`, `saturation` is a float x (factor drawn
    from [max(0, 1 - x), 1 + x]) or a (min, max) pair; `hue` is x in [0, 0.5]
    (shift drawn from [-x, x]) or a pair. PIL images use Pillow's
    ImageEnhance (and an HSV shift for hue), as torchvision does; arrays and
    tensors use torchvision's tensor formulas (blend with black, the mean
    grey, the grey image; hue rotated in HSV). Tensors are not differentiated
    through.

    Examples
    --------
    >>> from loom.torch.vision import transforms
    >>> transforms.ColorJitter(brightness=(0.5, 0.5))(loom.full((3, 1, 1), 0.8)).flatten().tolist()
    [0.4000000059604645, 0.4000000059604645, 0.4000000059604645]
    """

    def __init__(self, brightness=0, contrast=0, saturation=0, hue=0,
                 generator: np.random.Generator | None = None) -> None:
        self.brightness = self._range(brightness, "brightness", 1.0, (0.0, float("inf")))
        self.contrast = self._range(contrast, "contrast", 1.0, (0.0, float("inf")))
        self.saturation = self._range(saturation, "saturation", 1.0, (0.0, float("inf")))
        self.hue = self._range(hue, "hue", 0.0, (-0.5, 0.5))
        self.generator = generator

    @staticmethod
    def _range(value, name: str, center: float, bounds: tuple[float, float]) -> tuple[float, float] | None:
        if isinstance(value, numbers.Real):
            if value < 0:
                raise LoomValueError(f"loom.torch.vision.transforms.ColorJitter: {name} should be non-negative, got "
                                     f"{value}")
            lo, hi = center - float(value), center + float(value)
            if name != "hue":
                lo = max(lo, 0.0)
        else:
            lo, hi = (float(v) for v in value)
        if not bounds[0] <= lo <= hi <= bounds[1]:
            raise LoomValueError(f"loom.torch.vision.transforms.ColorJitter: {name} range {(lo, hi)} should lie in "
                                 f"{bounds}")
        return None if lo == hi == center else (lo, hi)

    def get_params(self) -> tuple[list[int], list[float | None]]:
        """(the order of the four operations, each one's factor or None)."""
        rng = _rng(self.generator)
        order = [int(i) for i in rng.permutation(4)]
        factors = [None if r is None else float(rng.uniform(r[0], r[1]))
                   for r in (self.brightness, self.contrast, self.saturation, self.hue)]
        return order, factors

    def __call__(self, img):
        img = _check(img, "ColorJitter")
        order, factors = self.get_params()
        names = ("brightness", "contrast", "saturation", "hue")
        steps = [(names[i], factors[i]) for i in order if factors[i] is not None]
        if not steps:
            return img
        if is_pil(img):
            return self._pil(img, steps)
        return self._array(img, steps)

    @staticmethod
    def _pil(img, steps):
        from PIL import ImageEnhance
        enhance = {"brightness": ImageEnhance.Brightness, "contrast": ImageEnhance.Contrast,
                   "saturation": ImageEnhance.Color}
        for op, factor in steps:
            if op in enhance:
                img = enhance[op](img).enhance(factor)
            elif img.mode not in ("L", "1", "I", "F"):
                mode = img.mode
                h, s, v = img.convert("HSV").split()
                hue = np.asarray(h).astype(np.int64) + int(np.int64(round(factor * 255)))
                h = Image.fromarray((hue % 256).astype(np.uint8))
                img = Image.merge("HSV", (h, s, v)).convert(mode)
        return img

    @staticmethod
    def _array(img, steps):
        arr = _np(img)
        if isinstance(img, np.ndarray):  # HW or HWC -> CHW.
            chw = arr[None] if arr.ndim == 2 else np.moveaxis(arr, 2, 0)
        else:
            chw = arr
        work = chw.astype(np.float64)
        uint8 = chw.dtype == np.uint8
        for op, factor in steps:
            work = _jitter_chw(work, op, factor, 255.0 if uint8 else 1.0)
            if uint8:
                work = np.floor(work)  # torchvision casts back to uint8 after every step (truncating).
        out = work.astype(chw.dtype)
        if isinstance(img, np.ndarray):
            out = out[0] if arr.ndim == 2 else np.moveaxis(out, 0, 2)
        return _like(np.ascontiguousarray(out), img)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(brightness={self.brightness}, contrast={self.contrast}, "
                f"saturation={self.saturation}, hue={self.hue})")


# torchvision's transforms.functional, imported when first asked for: it builds on the transforms above.
_install(globals(), lazy={"functional": "loom.torch.vision.transforms.functional"})
