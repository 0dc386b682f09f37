"""Upsampling layers over `loom.nn.functional.interpolate`."""
from __future__ import annotations

from loom.nn import functional as F
from loom.nn.module import Module
from loom.tensor import Tensor


class Upsample(Module):
    """Resize (N, C, *) inputs to `size` or by `scale_factor` with `mode` interpolation.

    Parameters
    ----------
    size : int or tuple, optional
    scale_factor : float or tuple, optional
    mode : "nearest", "nearest-exact", "linear", "bilinear", "bicubic", "trilinear" or "area"
    align_corners : bool, optional
        For the linear modes: map corner pixel centres onto each other.
    recompute_scale_factor : bool, optional

    Examples
    --------
    >>> loom.nn.Upsample(scale_factor=2, mode="bilinear")(loom.zeros(1, 3, 4, 5)).shape
    loom.Size([1, 3, 8, 10])
    """

    def __init__(self, size=None, scale_factor=None, mode: str = "nearest", align_corners: bool | None = None,
                 recompute_scale_factor: bool | None = None) -> None:
        super().__init__()
        self.name = type(self).__name__
        self.size = size
        if isinstance(scale_factor, (tuple, list)):
            self.scale_factor = tuple(float(f) for f in scale_factor)
        else:
            self.scale_factor = float(scale_factor) if scale_factor is not None else None
        self.mode = mode
        self.align_corners = align_corners
        self.recompute_scale_factor = recompute_scale_factor

    def forward(self, input: Tensor) -> Tensor:
        return F.interpolate(input, self.size, self.scale_factor, self.mode, self.align_corners,
                             recompute_scale_factor=self.recompute_scale_factor)

    def extra_repr(self) -> str:
        if self.scale_factor is not None:
            info = f"scale_factor={self.scale_factor!r}"
        else:
            info = f"size={self.size!r}"
        return info + f", mode={self.mode!r}"


class UpsamplingNearest2d(Upsample):
    """Nearest-neighbour upsampling of (N, C, H, W) inputs."""

    def __init__(self, size=None, scale_factor=None) -> None:
        super().__init__(size, scale_factor, mode="nearest")


class UpsamplingBilinear2d(Upsample):
    """Bilinear upsampling of (N, C, H, W) inputs with align_corners=True (as PyTorch's layer)."""

    def __init__(self, size=None, scale_factor=None) -> None:
        super().__init__(size, scale_factor, mode="bilinear", align_corners=True)
