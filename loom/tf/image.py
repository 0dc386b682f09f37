"""`tf.image`: resizing, flips, crops, dtype conversion and per-image normalisation of NHWC (or HWC) images.

Examples
--------
>>> import loom.tf as tf
>>> tf.image.resize(tf.ones((1, 2, 2, 1)), (4, 4)).shape.as_list()
[1, 4, 4, 1]
"""
from __future__ import annotations

import loom
import loom.nn.functional as F
from loom.errors import LoomValueError
from loom.tf._core import convert_to_tensor as _t


def _batched(images, op: str):
    x = _t(images)
    if x.ndim not in (3, 4):
        raise LoomValueError(f"loom.tf.image.{op}: expected an image [height, width, channels] or a batch "
                             f"[batch, height, width, channels], got shape {list(x.shape)}")
    return (x.unsqueeze(0), True) if x.ndim == 3 else (x, False)


def resize(images, size, method="bilinear", preserve_aspect_ratio=False, antialias=False, name=None):
    """Images resized to `size` = (height, width) by 'bilinear' (float32 out) or 'nearest'."""
    x, single = _batched(images, "resize")
    h, w = (int(s) for s in (size.numpy().tolist() if hasattr(size, "numpy") else size))
    if preserve_aspect_ratio:
        scale = min(h / x.shape[1], w / x.shape[2])
        h, w = max(1, int(round(x.shape[1] * scale))), max(1, int(round(x.shape[2] * scale)))
    method = getattr(method, "value", method)
    modes = {"bilinear": "bilinear", "nearest": "nearest-exact"}
    if method not in modes:
        raise LoomValueError(f"loom.tf.image.resize: method {method!r} is not supported; loom.tf resizes with "
                             f"{sorted(modes)} (TensorFlow's bicubic kernel and area sampling are not implemented)")
    if antialias and method != "nearest" and (h < x.shape[1] or w < x.shape[2]):
        raise LoomValueError("loom.tf.image.resize: antialias=True when downsampling is not supported")
    nchw = x.to(loom.float32).permute(0, 3, 1, 2)
    kw = {} if method == "nearest" else {"align_corners": False}
    out = F.interpolate(nchw, size=(h, w), mode=modes[method], **kw).permute(0, 2, 3, 1)
    if method == "nearest":
        out = out.to(x.dtype) if x.dtype.is_floating_point else out
    return out[0] if single else out


def flip_left_right(image):
    """Images mirrored along the width axis."""
    x, single = _batched(image, "flip_left_right")
    out = x.flip(2)
    return out[0] if single else out


def flip_up_down(image):
    """Images mirrored along the height axis."""
    x, single = _batched(image, "flip_up_down")
    out = x.flip(1)
    return out[0] if single else out


def random_flip_left_right(image, seed=None):
    """Each image mirrored along the width axis with probability 1/2."""
    x, single = _batched(image, "random_flip_left_right")
    keep = (loom.rand(x.shape[0]) < 0.5).reshape(-1, 1, 1, 1)
    out = loom.where(keep, x.flip(2), x)
    return out[0] if single else out


def random_flip_up_down(image, seed=None):
    """Each image mirrored along the height axis with probability 1/2."""
    x, single = _batched(image, "random_flip_up_down")
    keep = (loom.rand(x.shape[0]) < 0.5).reshape(-1, 1, 1, 1)
    out = loom.where(keep, x.flip(1), x)
    return out[0] if single else out


def central_crop(image, central_fraction):
    """The central `central_fraction` of each image's height and width."""
    x, single = _batched(image, "central_crop")
    if not 0.0 < central_fraction <= 1.0:
        raise LoomValueError(f"loom.tf.image.central_crop: central_fraction must be in (0, 1], got {central_fraction}")
    h, w = x.shape[1], x.shape[2]
    top, left = int((h - h * central_fraction) / 2), int((w - w * central_fraction) / 2)
    out = x[:, top:h - top, left:w - left]
    return out[0] if single else out


def convert_image_dtype(image, dtype, saturate=False, name=None):
    """Images converted between integer [0, MAX] and float [0, 1] ranges (or cast between floats)."""
    from loom.tf._core import as_dtype
    x = _t(image)
    d = as_dtype(dtype)
    if x.dtype is d:
        return x
    import numpy as np
    if x.dtype.is_floating_point and d.is_floating_point:
        return x.to(d)
    if not x.dtype.is_floating_point and d.is_floating_point:
        return x.to(d) / float(np.iinfo(x.dtype.as_numpy_dtype).max)
    if x.dtype.is_floating_point:
        top = float(np.iinfo(d.as_numpy_dtype).max)
        return (x * (top + 0.5)).to(d) if not saturate else loom.clamp(x * (top + 0.5), 0, top).to(d)
    raise LoomValueError(f"loom.tf.image.convert_image_dtype: integer to integer conversion ({x.dtype.name} to "
                         f"{d.name}) is not supported")


def rgb_to_grayscale(images, name=None):
    """Luma (0.2989 R + 0.5870 G + 0.1140 B) of RGB images, keeping a channel axis of 1."""
    x = _t(images)
    w = loom.tensor([0.2989, 0.5870, 0.1140], dtype=loom.float32)
    return (x.to(loom.float32) * w).sum(-1, keepdim=True).to(x.dtype) if x.dtype.is_floating_point \
        else loom.round((x.to(loom.float32) * w).sum(-1, keepdim=True)).to(x.dtype)


def per_image_standardization(image):
    """Each image scaled to zero mean and unit variance (std floored at 1 / sqrt(pixels))."""
    x, single = _batched(image, "per_image_standardization")
    x = x.to(loom.float32)
    n = x.shape[1] * x.shape[2] * x.shape[3]
    mean = x.mean(dim=(1, 2, 3), keepdim=True)
    std = ((x - mean) ** 2).mean(dim=(1, 2, 3), keepdim=True).sqrt()
    out = (x - mean) / loom.maximum(std, loom.tensor(1.0 / n ** 0.5))
    return out[0] if single else out


def adjust_brightness(image, delta):
    """Images plus `delta`."""
    return _t(image) + delta


from loom.tf._unsupported import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr("loom.tf.image", "tf.image")
