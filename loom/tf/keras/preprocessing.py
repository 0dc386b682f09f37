"""Keras image preprocessing and augmentation layers over NHWC (or HWC) images.

The random layers (`RandomFlip`, `RandomRotation`, `RandomZoom`,
`RandomTranslation`, `RandomContrast`, `RandomBrightness`) change images when
training (inside `fit`) or called directly, and pass them through with
`training=False` (`predict`, `evaluate`), as Keras 3's. Their random draws come from NumPy seeded by loom's
generator, so values differ from TensorFlow's; geometry, fill modes and
ranges follow Keras. The affine warps run on NumPy data (they are input
augmentation and carry no gradient).
"""
from __future__ import annotations

import numpy as np

import loom
from loom.errors import LoomValueError
from loom.tf import image as tfimage
from loom.tf.keras.engine import Layer


def _rng(seed):
    if seed is not None:
        return np.random.default_rng(int(seed))
    return np.random.default_rng(int(loom.randint(0, 2 ** 31 - 1, (1,)).item()))


def _range(factor, what: str) -> tuple[float, float]:
    if isinstance(factor, (tuple, list)):
        lo, hi = float(factor[0]), float(factor[1])
    else:
        lo, hi = -abs(float(factor)), abs(float(factor))
    if lo > hi:
        raise LoomValueError(f"loom.tf.keras.layers.{what}: factor range ({lo}, {hi}) has lower > upper")
    return lo, hi


def _batch(x):
    return (x.unsqueeze(0), True) if x.ndim == 3 else (x, False)


class _RandomLayer(Layer):
    def __init__(self, seed=None, **kwargs) -> None:
        kwargs.pop("value_range", None)
        super().__init__(**kwargs)
        self.seed = seed
        self._gen = None

    def _draw(self) -> np.random.Generator:
        if self._gen is None:
            self._gen = _rng(self.seed)
        return self._gen

    def call(self, inputs, training=None):
        # As Keras 3, a direct call (training unset) augments; predict/evaluate (training=False) do not.
        if training is not None and not training:
            return inputs
        x, single = _batch(inputs)
        out = self._augment(x)
        return out[0] if single else out


class RandomFlip(_RandomLayer):
    """Flip each image horizontally and/or vertically with probability 1/2 ('horizontal', 'vertical' or
    'horizontal_and_vertical')."""

    def __init__(self, mode="horizontal_and_vertical", seed=None, **kwargs) -> None:
        super().__init__(seed, **kwargs)
        if mode not in ("horizontal", "vertical", "horizontal_and_vertical"):
            raise LoomValueError(f"loom.tf.keras.layers.RandomFlip: mode must be 'horizontal', 'vertical' or "
                                 f"'horizontal_and_vertical', got {mode!r}")
        self.mode = mode

    def _augment(self, x):
        n = x.shape[0]
        g = self._draw()
        if self.mode != "vertical":
            m = loom.tensor(g.random(n) < 0.5).reshape(n, 1, 1, 1)
            x = loom.where(m, x.flip(2), x)
        if self.mode != "horizontal":
            m = loom.tensor(g.random(n) < 0.5).reshape(n, 1, 1, 1)
            x = loom.where(m, x.flip(1), x)
        return x


def _reflect(c: np.ndarray, n: int) -> np.ndarray:
    """Keras's 'reflect' fill: (d c b a | a b c d | d c b a), coordinates folded back into [0, n)."""
    if n == 1:
        return np.zeros_like(c)
    period = 2 * n
    c = np.mod(c, period)
    return np.where(c >= n, period - 1 - c, c)


def _warp(images: np.ndarray, matrices: np.ndarray, fill_mode: str, fill_value: float,
          interpolation: str) -> np.ndarray:
    """Sample each output pixel (x, y) at matrices[i] @ (x, y, 1) of image i (Keras's transform)."""
    n, h, w, c = images.shape
    ys, xs = np.meshgrid(np.arange(h, dtype=np.float64), np.arange(w, dtype=np.float64), indexing="ij")
    out = np.empty_like(images, dtype=np.float64)
    for i in range(n):
        a0, a1, a2, b0, b1, b2 = matrices[i]
        sx = a0 * xs + a1 * ys + a2
        sy = b0 * xs + b1 * ys + b2
        if interpolation == "nearest":
            corners = [(np.round(sy), np.round(sx), np.ones_like(sx))]
        else:
            x0, y0 = np.floor(sx), np.floor(sy)
            fx, fy = sx - x0, sy - y0
            corners = [(y0, x0, (1 - fy) * (1 - fx)), (y0, x0 + 1, (1 - fy) * fx),
                       (y0 + 1, x0, fy * (1 - fx)), (y0 + 1, x0 + 1, fy * fx)]
        acc = np.zeros((h, w, c))
        for cy, cx, wt in corners:
            inside = (cy >= 0) & (cy < h) & (cx >= 0) & (cx < w)
            if fill_mode == "reflect":
                cy, cx = _reflect(cy, h), _reflect(cx, w)
            elif fill_mode == "wrap":
                cy, cx = np.mod(cy, h), np.mod(cx, w)
            elif fill_mode == "nearest":
                cy, cx = np.clip(cy, 0, h - 1), np.clip(cx, 0, w - 1)
            vals = images[i][np.clip(cy, 0, h - 1).astype(np.int64), np.clip(cx, 0, w - 1).astype(np.int64)]
            if fill_mode == "constant":
                vals = np.where(inside[..., None], vals, fill_value)
            acc += vals * wt[..., None]
        out[i] = acc
    return out


class _Affine(_RandomLayer):
    def __init__(self, fill_mode="reflect", interpolation="bilinear", seed=None, fill_value=0.0, **kwargs) -> None:
        super().__init__(seed, **kwargs)
        if fill_mode not in ("reflect", "wrap", "constant", "nearest"):
            raise LoomValueError(f"loom.tf.keras.layers.{type(self).__name__}: fill_mode must be 'reflect', "
                                 f"'wrap', 'constant' or 'nearest', got {fill_mode!r}")
        if interpolation not in ("bilinear", "nearest"):
            raise LoomValueError(f"loom.tf.keras.layers.{type(self).__name__}: interpolation must be 'bilinear' "
                                 f"or 'nearest', got {interpolation!r}")
        self.fill_mode, self.interpolation, self.fill_value = fill_mode, interpolation, float(fill_value)

    def _augment(self, x):
        arr = x.numpy().astype(np.float64)
        n, h, w = arr.shape[:3]
        mats = self._matrices(n, h, w, self._draw())
        out = _warp(arr, mats, self.fill_mode, self.fill_value, self.interpolation)
        return loom.tensor(out.astype(x.dtype.np if x.dtype.is_floating_point else np.float32))


class RandomRotation(_Affine):
    """Rotate each image by a random angle of `factor` (a fraction of a full turn, or a (low, high) range)."""

    def __init__(self, factor, fill_mode="reflect", interpolation="bilinear", seed=None, fill_value=0.0,
                 **kwargs) -> None:
        super().__init__(fill_mode, interpolation, seed, fill_value, **kwargs)
        self.factor = _range(factor, "RandomRotation")

    def _matrices(self, n, h, w, g):
        ang = g.uniform(self.factor[0], self.factor[1], n) * 2 * np.pi
        cos, sin = np.cos(ang), np.sin(ang)
        cx, cy = (w - 1) / 2, (h - 1) / 2
        # Output pixel (x, y) samples the input at the inverse rotation about the centre.
        return np.stack([cos, -sin, cx - cos * cx + sin * cy, sin, cos, cy - sin * cx - cos * cy], 1)


class RandomZoom(_Affine):
    """Zoom each image in or out by a random fraction (`height_factor`, and `width_factor` or the same)."""

    def __init__(self, height_factor, width_factor=None, fill_mode="reflect", interpolation="bilinear", seed=None,
                 fill_value=0.0, **kwargs) -> None:
        super().__init__(fill_mode, interpolation, seed, fill_value, **kwargs)
        self.height_factor = _range(height_factor, "RandomZoom")
        self.width_factor = None if width_factor is None else _range(width_factor, "RandomZoom")

    def _matrices(self, n, h, w, g):
        zy = 1.0 + g.uniform(self.height_factor[0], self.height_factor[1], n)
        zx = zy if self.width_factor is None else 1.0 + g.uniform(self.width_factor[0], self.width_factor[1], n)
        cx, cy = (w - 1) / 2, (h - 1) / 2
        zeros = np.zeros(n)
        return np.stack([zx, zeros, cx - zx * cx, zeros, zy, cy - zy * cy], 1)


class RandomTranslation(_Affine):
    """Shift each image by a random fraction of its height and width."""

    def __init__(self, height_factor, width_factor, fill_mode="reflect", interpolation="bilinear", seed=None,
                 fill_value=0.0, **kwargs) -> None:
        super().__init__(fill_mode, interpolation, seed, fill_value, **kwargs)
        self.height_factor = _range(height_factor, "RandomTranslation")
        self.width_factor = _range(width_factor, "RandomTranslation")

    def _matrices(self, n, h, w, g):
        dy = g.uniform(self.height_factor[0], self.height_factor[1], n) * h
        dx = g.uniform(self.width_factor[0], self.width_factor[1], n) * w
        ones, zeros = np.ones(n), np.zeros(n)
        return np.stack([ones, zeros, -dx, zeros, ones, -dy], 1)


class RandomContrast(_RandomLayer):
    """Scale each image's deviation from its per-channel mean by a random factor in [1 - lower, 1 + upper]."""

    def __init__(self, factor, seed=None, **kwargs) -> None:
        super().__init__(seed, **kwargs)
        lo, hi = (factor, factor) if not isinstance(factor, (tuple, list)) else factor
        self.lower, self.upper = float(lo), float(hi)

    def _augment(self, x):
        n = x.shape[0]
        f = loom.tensor(self._draw().uniform(1 - self.lower, 1 + self.upper, n).astype(np.float32))
        xf = x.to(loom.float32)
        mean = xf.mean(dim=(1, 2), keepdim=True)
        return (xf - mean) * f.reshape(n, 1, 1, 1) + mean


class RandomBrightness(_RandomLayer):
    """Add a random offset in `factor` times the value range (default [0, 255]) to each image, clipped."""

    def __init__(self, factor, value_range=(0, 255), seed=None, **kwargs) -> None:
        super().__init__(seed, **kwargs)
        self.factor = _range(factor, "RandomBrightness")
        self.value_range = (float(value_range[0]), float(value_range[1]))

    def _augment(self, x):
        n = x.shape[0]
        lo, hi = self.value_range
        d = self._draw().uniform(self.factor[0], self.factor[1], n) * (hi - lo)
        out = x.to(loom.float32) + loom.tensor(d.astype(np.float32)).reshape(n, 1, 1, 1)
        return loom.clamp(out, lo, hi)


class Resizing(Layer):
    """Resize images to (height, width) ('bilinear' or 'nearest'; `crop_to_aspect_ratio` crops first)."""

    def __init__(self, height, width, interpolation="bilinear", crop_to_aspect_ratio=False, **kwargs) -> None:
        super().__init__(**kwargs)
        self.height, self.width = int(height), int(width)
        self.interpolation, self.crop = interpolation, crop_to_aspect_ratio

    def call(self, inputs):
        x, single = _batch(inputs)
        if self.crop:
            h, w = x.shape[1], x.shape[2]
            target = self.width / self.height
            ch, cw = (h, int(round(h * target))) if w / h > target else (int(round(w / target)), w)
            top, left = (h - ch) // 2, (w - cw) // 2
            x = x[:, top:top + ch, left:left + cw]
        out = tfimage.resize(x, (self.height, self.width), method=self.interpolation)
        return out[0] if single else out


class CenterCrop(Layer):
    """The central (height, width) window of each image (resized up first if the image is smaller)."""

    def __init__(self, height, width, **kwargs) -> None:
        super().__init__(**kwargs)
        self.height, self.width = int(height), int(width)

    def call(self, inputs):
        x, single = _batch(inputs)
        h, w = x.shape[1], x.shape[2]
        if h < self.height or w < self.width:
            x = tfimage.resize(x, (max(h, self.height), max(w, self.width)))
            h, w = x.shape[1], x.shape[2]
        top, left = (h - self.height) // 2, (w - self.width) // 2
        out = x[:, top:top + self.height, left:left + self.width]
        return out[0] if single else out
