"""torchvision.transforms.functional over loom: the transforms as functions of (image, parameters).

Each works on PIL images, uint8 NumPy images (HW or HWC) and loom Tensors
([..., C, H, W]) and returns the kind it was given, as the transform classes
of `loom.torch.vision.transforms` do (they share one implementation).

Examples
--------
>>> import loom.torch.vision.transforms.functional as TF
>>> TF.hflip(np.array([[1, 2, 3]])).tolist()
[[3, 2, 1]]
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from loom.data.transforms import _pad_arg
from loom.tensor import Tensor
from loom.torch.vision import transforms as _T

__all__ = ["center_crop", "crop", "get_dimensions", "get_image_size", "hflip", "normalize", "pad", "pil_to_tensor",
           "resize", "resized_crop", "rgb_to_grayscale", "to_grayscale", "to_pil_image", "to_tensor", "vflip"]


def to_tensor(pic) -> Tensor:
    """PIL image or HW/HWC array -> float32 CHW tensor (uint8 scaled to [0, 1])."""
    return _T.ToTensor()(pic)


def pil_to_tensor(pic) -> Tensor:
    """PIL image or array -> CHW tensor of the same dtype, unscaled."""
    return _T.PILToTensor()(pic)


def to_pil_image(pic, mode: str | None = None):
    """CHW tensor (float in [0, 1] or uint8) -> PIL image (a uint8 array without Pillow)."""
    return _T.ToPILImage(mode)(pic)


def normalize(tensor: Tensor, mean: Sequence[float], std: Sequence[float], inplace: bool = False) -> Tensor:
    """(x - mean) / std per channel of a float [..., C, H, W] tensor."""
    return _T.Normalize(mean, std, inplace)(tensor)


def resize(img, size, interpolation=_T.InterpolationMode.BILINEAR, max_size: int | None = None,
           antialias: bool | None = True):
    """Resize to (h, w), or so that the shorter side is `size` (an int); Pillow's resampling.

    Examples
    --------
    >>> import loom.torch.vision.transforms.functional as TF
    >>> TF.resize(np.zeros((4, 8), np.uint8), [2]).shape
    (2, 4)
    """
    if isinstance(size, (list, tuple)) and len(size) == 1:
        size = size[0]
    return _T.Resize(size, interpolation, max_size, antialias)(img)


def crop(img, top: int, left: int, height: int, width: int):
    """The window at (top, left) of size (height, width); outside the image reads as zeros, as torchvision.

    Examples
    --------
    >>> import loom.torch.vision.transforms.functional as TF
    >>> TF.crop(np.arange(9).reshape(3, 3), 1, 1, 2, 3).tolist()
    [[4, 5, 0], [7, 8, 0]]
    """
    img = _T._check(img, "crop")
    h, w = _T.image_size(img)
    pads = (max(0, -left), max(0, -top), max(0, left + width - w), max(0, top + height - h))
    if any(pads):
        img = _T._pad_any(img, pads, 0, "constant")
        top, left = top + pads[1], left + pads[0]
    return _T._crop_any(img, top, left, height, width)


def center_crop(img, output_size):
    """The central window of `output_size` (int or (h, w)), zero-padded if the image is smaller."""
    return _T.CenterCrop(output_size)(img)


def resized_crop(img, top: int, left: int, height: int, width: int, size,
                 interpolation=_T.InterpolationMode.BILINEAR, antialias: bool | None = True):
    """`crop` then `resize` to `size` (h, w)."""
    return resize(crop(img, top, left, height, width), size, interpolation, antialias=antialias)


def pad(img, padding, fill=0, padding_mode: str = "constant"):
    """Pad the borders (int, (lr, tb) or (l, t, r, b)); modes constant, edge, reflect, symmetric."""
    return _T.Pad(_pad_arg(padding), fill, padding_mode)(img)


def hflip(img):
    """Mirror left-right."""
    return _T.RandomHorizontalFlip(p=1.0)(img)


def vflip(img):
    """Mirror top-bottom."""
    return _T.RandomVerticalFlip(p=1.0)(img)


def rgb_to_grayscale(img, num_output_channels: int = 1):
    """Grey from RGB (Pillow's weights for PIL and uint8 arrays, 0.2989/0.587/0.114 for float)."""
    return _T.Grayscale(num_output_channels)(img)


to_grayscale = rgb_to_grayscale


def get_image_size(img) -> list[int]:
    """[width, height], as torchvision's get_image_size.

    Examples
    --------
    >>> import loom.torch.vision.transforms.functional as TF
    >>> TF.get_image_size(np.zeros((2, 5, 3), np.uint8))
    [5, 2]
    """
    h, w = _T.image_size(img)
    return [w, h]


def get_dimensions(img) -> list[int]:
    """[channels, height, width]."""
    h, w = _T.image_size(img)
    if _T.is_pil(img):
        c = len(img.getbands())
    elif isinstance(img, np.ndarray):
        c = 1 if img.ndim == 2 else int(img.shape[2])
    else:
        c = int(img.shape[-3]) if img.ndim >= 3 else 1
    return [c, h, w]
