"""torchvision.utils over loom: `make_grid` and `save_image` (a PNG via Pillow, matplotlib, or loom's own writer).

Examples
--------
>>> from loom.torch.vision.utils import make_grid
>>> make_grid(loom.zeros(4, 1, 2, 2), nrow=2, padding=1).shape
loom.Size([3, 7, 7])
"""
from __future__ import annotations

import math
import os
import struct
import zlib
from pathlib import Path
from typing import BinaryIO, Sequence

import numpy as np

from loom.errors import LoomValueError
from loom.tensor import Tensor, from_numpy
from loom.torch.vision.transforms import to_uint8_hwc

__all__ = ["make_grid", "save_image", "write_png"]


def _as_array(tensor) -> np.ndarray:
    if isinstance(tensor, (list, tuple)):
        return np.stack([_as_array(t) for t in tensor])
    if isinstance(tensor, Tensor):
        return tensor.numpy(force=True)
    return np.asarray(tensor)


def _normalize(x: np.ndarray, value_range) -> np.ndarray:
    low, high = (float(x.min()), float(x.max())) if value_range is None else map(float, value_range)
    return (np.clip(x, low, high) - low) / max(high - low, 1e-5)


def make_grid(tensor, nrow: int = 8, padding: int = 2, normalize: bool = False,
              value_range: tuple[float, float] | None = None, scale_each: bool = False,
              pad_value: float = 0.0) -> Tensor:
    """Tile a batch of images [B, C, H, W] (or a list of [C, H, W]) into one [C, H', W'] image, as torchvision.

    One-channel images become three (grey as RGB); a single image is returned
    as it is (after `normalize`). With `normalize`, values are clamped to
    `value_range` (default: the batch's min and max, or each image's with
    `scale_each`) and scaled to [0, 1].

    Examples
    --------
    >>> from loom.torch.vision.utils import make_grid
    >>> g = make_grid(loom.ones(3, 1, 2, 2), nrow=2, padding=1, pad_value=0.5)
    >>> g.shape, g[0, 0].tolist()
    (loom.Size([3, 7, 7]), [0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5])
    """
    x = _as_array(tensor)
    if x.ndim == 2:
        x = x[None]
    if x.ndim == 3:
        x = (np.repeat(x, 3, axis=0) if x.shape[0] == 1 else x)[None]
    if x.ndim != 4:
        raise LoomValueError(f"loom.torch.vision.utils.make_grid: expected images [B, C, H, W], [C, H, W] or [H, W], "
                             f"got shape {x.shape}")
    if x.shape[1] == 1:
        x = np.repeat(x, 3, axis=1)
    x = x.astype(np.float32) if x.dtype.kind != "f" else x
    if normalize:
        x = np.stack([_normalize(img, value_range) for img in x]) if scale_each else _normalize(x, value_range)
        x = x.astype(np.float32)
    if x.shape[0] == 1:
        return from_numpy(np.ascontiguousarray(x[0]))
    nmaps, c, h, w = x.shape
    xmaps = min(nrow, nmaps)
    ymaps = int(math.ceil(nmaps / xmaps))
    height, width = h + padding, w + padding
    grid = np.full((c, height * ymaps + padding, width * xmaps + padding), pad_value, dtype=x.dtype)
    for k in range(nmaps):
        y, xx = divmod(k, xmaps)
        top, left = y * height + padding, xx * width + padding
        grid[:, top:top + h, left:left + w] = x[k]
    return from_numpy(grid)


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def write_png(fp: str | os.PathLike | BinaryIO, pixels: np.ndarray) -> None:
    """Write uint8 pixels (HW grey, HWC with 3 or 4 channels) as a PNG: no filtering, zlib-compressed.

    Examples
    --------
    >>> import io; buf = io.BytesIO()
    >>> write_png(buf, np.zeros((2, 3), np.uint8)); buf.getvalue()[:8]
    b'\\x89PNG\\r\\n\\x1a\\n'
    """
    pixels = np.ascontiguousarray(pixels, dtype=np.uint8)
    if pixels.ndim == 3 and pixels.shape[2] == 1:
        pixels = pixels[:, :, 0]
    color = {2: 0, 3: {3: 2, 4: 6}.get(pixels.shape[-1], -1)}[pixels.ndim] if pixels.ndim in (2, 3) else -1
    if color < 0:
        raise LoomValueError(f"loom.torch.vision.utils.write_png: expected HW, HWx3 or HWx4 uint8 pixels, got shape "
                             f"{pixels.shape}")
    h, w = pixels.shape[:2]
    rows = pixels.reshape(h, -1)
    raw = np.concatenate([np.zeros((h, 1), np.uint8), rows], axis=1).tobytes()  # Filter type 0 on every row.
    data = (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, color, 0, 0, 0))
            + _chunk(b"IDAT", zlib.compress(raw, 6)) + _chunk(b"IEND", b""))
    if hasattr(fp, "write"):
        fp.write(data)
    else:
        Path(fp).write_bytes(data)


def save_image(tensor, fp: str | os.PathLike | BinaryIO, format: str | None = None, nrow: int = 8,
               padding: int = 2, normalize: bool = False, value_range: Sequence[float] | None = None,
               scale_each: bool = False, pad_value: float = 0.0) -> None:
    """Save a batch (tiled by `make_grid`) or one image, float in [0, 1], as an image file, as torchvision.

    Values are scaled by 255, rounded and clamped to uint8. The file is
    written by Pillow when it is installed (any format it knows, from the
    suffix or `format`), else by matplotlib, else by loom's own PNG writer
    (then only PNG).

    Examples
    --------
    >>> import os, tempfile; from loom.torch.vision.utils import save_image
    >>> path = os.path.join(tempfile.mkdtemp(), "grid.png")
    >>> save_image(loom.rand(4, 3, 8, 8), path, nrow=2)
    >>> open(path, "rb").read(4)
    b'\\x89PNG'
    """
    grid = make_grid(tensor, nrow=nrow, padding=padding, normalize=normalize, pad_value=pad_value,
                     value_range=(value_range[0], value_range[1]) if value_range is not None else None,
                     scale_each=scale_each)
    _save_pixels(to_uint8_hwc(grid), fp, format)


def _save_pixels(pixels: np.ndarray, fp, format: str | None) -> None:
    try:
        from PIL import Image
    except ImportError:
        Image = None  # type: ignore[assignment]
    if Image is not None:
        Image.fromarray(pixels).save(fp, format=format)
        return
    suffix = (format or Path(getattr(fp, "name", fp) if not hasattr(fp, "write") else "x.png").suffix.lstrip(".")
              or "png").lower()
    try:
        import matplotlib.image as mpimg
    except ImportError:
        mpimg = None
    if mpimg is not None:
        mpimg.imsave(fp, pixels, format=suffix, cmap="gray" if pixels.ndim == 2 else None, vmin=0, vmax=255)
        return
    if suffix != "png":
        raise LoomValueError(f"loom.torch.vision.utils.save_image: without Pillow or matplotlib only PNG can be "
                             f"written, got format {suffix!r}")
    write_png(fp, pixels)
