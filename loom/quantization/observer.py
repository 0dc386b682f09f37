"""Calibration observers: they watch tensors go by and turn what they saw into a scale and a zero point.

Quantisation maps a real value x to an integer q = clamp(round(x / scale) + zero_point, quant_min, quant_max)
and back to scale * (q - zero_point). The formulas follow ``torch.ao.quantization``'s observers so a PyTorch
user gets the same parameters from the same data (computed in float32, rounding half to even):

- affine (uint8 activations): scale = (max' - min') / (quant_max - quant_min) with min' = min(min, 0),
  max' = max(max, 0), and zero_point = quant_min - round(min' / scale);
- symmetric (int8 weights): scale = max(-min', max') / ((quant_max - quant_min) / 2), zero_point 0 for int8
  (128 for uint8).

Scales never fall below float32's epsilon. Observers are `loom.nn.Module`s that return their input unchanged;
they read values with ``.numpy()``, so calibration runs in eager mode.
"""
from __future__ import annotations

import functools
from typing import Any

import numpy as np

from loom.errors import LoomValueError, ShapeError
from loom.nn import Module

EPS = np.float32(np.finfo(np.float32).eps)
SCHEMES = ("per_tensor_affine", "per_tensor_symmetric", "per_channel_symmetric", "per_channel_affine")


def _dtype_name(dtype: Any) -> str:
    name = str(getattr(dtype, "name", dtype)).replace("loom.", "").replace("torch.", "")
    name = {"quint8": "uint8", "qint8": "int8"}.get(name, name)
    if name not in ("uint8", "int8"):
        raise LoomValueError(f"loom.quantization: dtype {dtype!r} is not supported; expected uint8 or int8")
    return name


def _as_array(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach()
    if hasattr(x, "numpy"):
        x = x.numpy()
    return np.asarray(x, np.float32)


def qparams(min_val, max_val, quant_min: int, quant_max: int, symmetric: bool, dtype: str):
    """Scale(s) and zero point(s) for the observed range(s) (arrays or scalars), as torch computes them."""
    lo = np.minimum(np.asarray(min_val, np.float32), np.float32(0))
    hi = np.maximum(np.asarray(max_val, np.float32), np.float32(0))
    if symmetric:
        amax = np.maximum(-lo, hi)
        scale = np.maximum(amax / np.float32((quant_max - quant_min) / 2), EPS).astype(np.float32)
        zp = np.full(scale.shape, 0 if dtype == "int8" else (quant_min + quant_max + 1) // 2, np.int64)
    else:
        scale = np.maximum((hi - lo) / np.float32(quant_max - quant_min), EPS).astype(np.float32)
        zp = np.clip(quant_min - np.rint(lo / scale).astype(np.int64), quant_min, quant_max).astype(np.int64)
    return scale, zp


def _smooth(p: np.ndarray, eps: float = 1e-4) -> np.ndarray:
    """Give empty bins a little mass and renormalise, so the divergence stays finite."""
    p = np.where(p == 0, eps, p)
    return p / p.sum()


class ObserverBase(Module):
    """What every observer shares: dtype, scheme and integer range, `with_args`, `calculate_qparams`."""

    def __init__(self, dtype: Any = "uint8", qscheme: str = "per_tensor_affine", quant_min: int | None = None,
                 quant_max: int | None = None, reduce_range: bool = False) -> None:
        super().__init__()
        self.dtype = _dtype_name(dtype)
        if qscheme not in SCHEMES:
            raise LoomValueError(f"loom.quantization: qscheme {qscheme!r}: expected one of {SCHEMES}")
        self.qscheme = qscheme
        default = (0, 255) if self.dtype == "uint8" else (-128, 127)
        if reduce_range:
            default = (0, 127) if self.dtype == "uint8" else (-64, 63)
        self.quant_min = default[0] if quant_min is None else int(quant_min)
        self.quant_max = default[1] if quant_max is None else int(quant_max)
        full = (0, 255) if self.dtype == "uint8" else (-128, 127)
        if not full[0] <= self.quant_min < self.quant_max <= full[1]:
            raise LoomValueError(f"loom.quantization: quant_min {self.quant_min}, quant_max {self.quant_max} do not "
                                 f"fit {self.dtype} (expected {full[0]} <= quant_min < quant_max <= {full[1]})")

    @classmethod
    def with_args(cls, **kwargs) -> Any:
        """A factory making this observer with `kwargs` (as torch's ``Observer.with_args``)."""
        return functools.partial(cls, **kwargs)

    @property
    def symmetric(self) -> bool:
        return self.qscheme.endswith("symmetric")

    def min_max(self) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def calculate_qparams(self) -> tuple[np.ndarray, np.ndarray]:
        """(scale, zero_point) as float32 and int64 arrays (0-d per tensor, 1-d per channel)."""
        lo, hi = self.min_max()
        if lo is None:
            raise LoomValueError(f"loom.quantization.{type(self).__name__}: no values observed yet; run calibration "
                                 "batches through the prepared model before convert")
        return qparams(lo, hi, self.quant_min, self.quant_max, self.symmetric, self.dtype)

    def extra_repr(self) -> str:
        return f"dtype={self.dtype}, qscheme={self.qscheme}, quant_min={self.quant_min}, quant_max={self.quant_max}"


class MinMaxObserver(ObserverBase):
    """The running minimum and maximum of everything seen (per tensor).

    Examples
    --------
    >>> import numpy as np
    >>> obs = MinMaxObserver()
    >>> _ = obs(np.array([-1.0, 0.5, 3.0], np.float32))
    >>> scale, zp = obs.calculate_qparams()
    >>> round(float(scale), 6), int(zp)
    (0.015686, 64)
    """

    def __init__(self, dtype: Any = "uint8", qscheme: str = "per_tensor_affine", **kwargs) -> None:
        super().__init__(dtype, qscheme, **kwargs)
        self.min_val: np.ndarray | None = None
        self.max_val: np.ndarray | None = None

    def _update(self, lo: np.ndarray, hi: np.ndarray) -> None:
        if self.min_val is None:
            self.min_val, self.max_val = lo, hi
        else:
            self.min_val, self.max_val = np.minimum(self.min_val, lo), np.maximum(self.max_val, hi)

    def forward(self, x):
        a = _as_array(x)
        if a.size:
            self._update(a.min(), a.max())
        return x

    def min_max(self):
        return self.min_val, self.max_val


class MovingAverageMinMaxObserver(MinMaxObserver):
    """An exponential moving average of each batch's minimum and maximum (the first batch sets them)."""

    def __init__(self, averaging_constant: float = 0.01, dtype: Any = "uint8", qscheme: str = "per_tensor_affine",
                 **kwargs) -> None:
        super().__init__(dtype, qscheme, **kwargs)
        if not 0 < averaging_constant <= 1:
            raise LoomValueError(f"loom.quantization.MovingAverageMinMaxObserver: averaging_constant "
                                 f"{averaging_constant} must lie in (0, 1]")
        self.averaging_constant = np.float32(averaging_constant)

    def _update(self, lo, hi):
        if self.min_val is None:
            self.min_val, self.max_val = lo, hi
        else:
            c = self.averaging_constant
            self.min_val = (self.min_val + c * (lo - self.min_val)).astype(np.float32)
            self.max_val = (self.max_val + c * (hi - self.max_val)).astype(np.float32)


class PerChannelMinMaxObserver(MinMaxObserver):
    """Minimum and maximum per slice along `ch_axis` (weights: one scale per output channel)."""

    def __init__(self, ch_axis: int = 0, dtype: Any = "int8", qscheme: str = "per_channel_symmetric",
                 **kwargs) -> None:
        super().__init__(dtype, qscheme, **kwargs)
        if not qscheme.startswith("per_channel"):
            raise LoomValueError(f"loom.quantization.PerChannelMinMaxObserver: qscheme {qscheme!r} is not per "
                                 "channel")
        self.ch_axis = ch_axis

    def forward(self, x):
        a = _as_array(x)
        if a.ndim == 0 or not -a.ndim <= self.ch_axis < a.ndim:
            raise ShapeError(f"loom.quantization.PerChannelMinMaxObserver: ch_axis {self.ch_axis} is out of range "
                             f"for shape {a.shape}")
        if a.size:
            flat = np.moveaxis(a, self.ch_axis, 0).reshape(a.shape[self.ch_axis], -1)
            if self.min_val is not None and self.min_val.shape[0] != flat.shape[0]:
                raise ShapeError(f"loom.quantization.PerChannelMinMaxObserver: saw {self.min_val.shape[0]} "
                                 f"channels before, now {flat.shape[0]} (shape {a.shape})")
            self._update(flat.min(1), flat.max(1))
        return x


class HistogramObserver(ObserverBase):
    """A histogram of |x| that chooses a clipping threshold, rather than the extremes, by `mode`.

    - ``"percentile"``: the `percentile` (default 99.99) of |x|;
    - ``"entropy"``: the threshold whose quantised distribution is closest to the observed one in
      Kullback-Leibler divergence (TensorRT's calibration): for each candidate threshold (bin i from the
      number of levels up), the histogram up to it, outliers folded into its last bin, is compared with
      its merge into as many levels as the integer range gives that side (128 for int8 or signed data,
      256 for uint8 data that never went negative);
    - ``"minmax"``: no clipping (the same as `MinMaxObserver`).

    The range is then [max(min, -t), min(max, t)] for threshold t. The histogram has `bins` bins over
    [0, the largest |x| seen]; when a batch goes beyond, the old counts are spread into the wider bins.
    """

    def __init__(self, mode: str = "entropy", bins: int = 2048, percentile: float = 99.99, dtype: Any = "uint8",
                 qscheme: str = "per_tensor_affine", **kwargs) -> None:
        super().__init__(dtype, qscheme, **kwargs)
        if mode not in ("percentile", "entropy", "minmax"):
            raise LoomValueError(f"loom.quantization.HistogramObserver: mode {mode!r}: expected 'percentile', "
                                 "'entropy' or 'minmax'")
        if not 0 < percentile <= 100:
            raise LoomValueError(f"loom.quantization.HistogramObserver: percentile {percentile} must lie in (0, 100]")
        if bins < 256:
            raise LoomValueError(f"loom.quantization.HistogramObserver: bins {bins} must be at least 256")
        self.mode, self.bins, self.percentile = mode, int(bins), float(percentile)
        self.hist = np.zeros(self.bins, np.float64)
        self.amax = np.float32(0)
        self.min_val: np.ndarray | None = None
        self.max_val: np.ndarray | None = None

    def forward(self, x):
        a = _as_array(x)
        if not a.size:
            return x
        lo, hi = a.min(), a.max()
        self.min_val = lo if self.min_val is None else np.minimum(self.min_val, lo)
        self.max_val = hi if self.max_val is None else np.maximum(self.max_val, hi)
        mag = np.abs(a).ravel()
        amax = np.float32(max(self.amax, mag.max()))
        if amax > self.amax and self.hist.sum() > 0:  # Spread the old counts into the wider bins.
            centres = (np.arange(self.bins) + 0.5) * (float(self.amax) / self.bins)
            idx = np.minimum((centres / float(amax) * self.bins).astype(np.int64), self.bins - 1)
            self.hist = np.bincount(idx, weights=self.hist, minlength=self.bins)
        self.amax = amax
        if amax > 0:
            h, _ = np.histogram(mag, bins=self.bins, range=(0.0, float(amax)))
            self.hist += h
        return x

    def threshold(self) -> float:
        """The clipping magnitude chosen by `mode`."""
        width = float(self.amax) / self.bins
        if self.amax == 0 or self.mode == "minmax":
            return float(self.amax)
        if self.mode == "percentile":
            cdf = np.cumsum(self.hist) / self.hist.sum()
            i = int(np.searchsorted(cdf, self.percentile / 100.0))
            return min((i + 1) * width, float(self.amax))
        levels = 256 if self.dtype == "uint8" and not self.symmetric and self.min_val >= 0 else 128
        return (self._kl_bin(levels) + 1) * width

    def _kl_bin(self, levels: int) -> int:
        """The last bin kept by the threshold of least KL divergence (TensorRT's entropy calibration)."""
        hist = self.hist
        best, best_i = np.inf, self.bins - 1
        for i in range(levels, self.bins + 1):
            p = hist[:i].copy()
            p[-1] += hist[i:].sum()
            # Merge the i bins into `levels` groups; spread each group's mass over the bins p uses.
            group = (np.arange(i) * levels) // i
            nonzero = p > 0
            mass = np.bincount(group, weights=hist[:i], minlength=levels)
            count = np.bincount(group, weights=nonzero, minlength=levels)
            q = np.where(nonzero, mass[group] / np.maximum(count[group], 1), 0.0)
            ps, qs = p.sum(), q.sum()
            if ps == 0 or qs == 0:
                continue
            pn, qn = _smooth(p / ps), _smooth(q / qs)
            kl = float(np.sum(pn * np.log(pn / qn)))
            if kl < best:
                best, best_i = kl, i - 1
        return best_i

    def min_max(self):
        if self.min_val is None:
            return None, None
        t = np.float32(self.threshold())
        return np.maximum(self.min_val, -t).astype(np.float32), np.minimum(self.max_val, t).astype(np.float32)
