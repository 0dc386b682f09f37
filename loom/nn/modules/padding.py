"""Padding layers: constant (zero), reflection, replication and circular padding of 1, 2 or 3 trailing dims."""
from __future__ import annotations

from loom.nn import functional as F
from loom.nn.module import Module
from loom.tensor import Tensor


class _PadNd(Module):
    _mode = "constant"
    _nsp = 2

    def __init__(self, padding) -> None:
        super().__init__()
        n = 2 * self._nsp
        if isinstance(padding, int):
            padding = (padding,) * n
        padding = tuple(int(p) for p in padding)
        if len(padding) != n:
            raise ValueError(f"loom.nn.{type(self).__name__}: padding must be an int or a tuple of {n} ints, "
                             f"got {padding}")
        self.padding = padding

    def _check(self, input: Tensor) -> None:
        if input.ndim not in (self._nsp + 1, self._nsp + 2):
            raise ValueError(f"loom.nn.{type(self).__name__}: expected a {self._nsp + 1}-d or "
                             f"{self._nsp + 2}-d input, got {input.ndim}-d {list(input.shape)}")

    def forward(self, input: Tensor) -> Tensor:
        if self._mode != "constant":
            self._check(input)
        return F.pad(input, self.padding, self._mode)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class _ConstantPadNd(_PadNd):
    def __init__(self, padding, value: float) -> None:
        super().__init__(padding)
        self.value = value

    def forward(self, input: Tensor) -> Tensor:
        return F.pad(input, self.padding, "constant", self.value)

    def extra_repr(self) -> str:
        return f"padding={self.padding}, value={self.value}"


class ConstantPad1d(_ConstantPadNd):
    """Pad the last dim with `value` (left, right)."""

    _nsp = 1


class ConstantPad2d(_ConstantPadNd):
    """Pad the last two dims with `value` (left, right, top, bottom).

    Examples
    --------
    >>> loom.nn.ConstantPad2d(1, 3.5)(loom.zeros(1, 2, 2)).shape
    loom.Size([1, 4, 4])
    """

    _nsp = 2


class ConstantPad3d(_ConstantPadNd):
    """Pad the last three dims with `value`."""

    _nsp = 3


class _ZeroPadNd(_ConstantPadNd):
    def __init__(self, padding) -> None:
        super().__init__(padding, 0.0)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class ZeroPad1d(_ZeroPadNd):
    """Pad the last dim with zeros."""

    _nsp = 1


class ZeroPad2d(_ZeroPadNd):
    """Pad the last two dims with zeros (left, right, top, bottom)."""

    _nsp = 2


class ZeroPad3d(_ZeroPadNd):
    """Pad the last three dims with zeros."""

    _nsp = 3


class ReflectionPad1d(_PadNd):
    """Pad the last dim with its reflection (the edge not repeated)."""

    _mode, _nsp = "reflect", 1


class ReflectionPad2d(_PadNd):
    """Pad the last two dims with their reflection.

    Examples
    --------
    >>> loom.nn.ReflectionPad2d(1)(loom.arange(4.0).reshape(1, 2, 2))[0, 0].tolist()
    [3.0, 2.0, 3.0, 2.0]
    """

    _mode, _nsp = "reflect", 2


class ReflectionPad3d(_PadNd):
    """Pad the last three dims with their reflection."""

    _mode, _nsp = "reflect", 3


class ReplicationPad1d(_PadNd):
    """Pad the last dim by repeating its edge values."""

    _mode, _nsp = "replicate", 1


class ReplicationPad2d(_PadNd):
    """Pad the last two dims by repeating their edge values."""

    _mode, _nsp = "replicate", 2


class ReplicationPad3d(_PadNd):
    """Pad the last three dims by repeating their edge values."""

    _mode, _nsp = "replicate", 3


class CircularPad1d(_PadNd):
    """Pad the last dim by wrapping around."""

    _mode, _nsp = "circular", 1


class CircularPad2d(_PadNd):
    """Pad the last two dims by wrapping around."""

    _mode, _nsp = "circular", 2


class CircularPad3d(_PadNd):
    """Pad the last three dims by wrapping around."""

    _mode, _nsp = "circular", 3
