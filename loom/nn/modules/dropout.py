"""Dropout layers: active in training mode, the identity in eval mode."""
from __future__ import annotations

from loom.nn import functional as F
from loom.nn.module import Module
from loom.tensor import Tensor


class _DropoutNd(Module):
    _fn = "dropout"

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        if not isinstance(p, (int, float)) or isinstance(p, bool) or not 0 <= p <= 1:
            raise ValueError(f"loom.nn.{type(self).__name__}: dropout probability has to be between 0 and 1, "
                             f"but got {p}")
        self.p = p
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        return getattr(F, self._fn)(input, self.p, self.training, self.inplace)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


class Dropout(_DropoutNd):
    """Zero each element with probability `p` in training and scale the rest by 1 / (1 - p).

    Examples
    --------
    >>> m = loom.nn.Dropout(0.5).eval()
    >>> m(loom.ones(4)).tolist()
    [1.0, 1.0, 1.0, 1.0]
    """

    _fn = "dropout"


class Dropout1d(_DropoutNd):
    """Zero whole channels of (N, C, L) or (C, L) inputs with probability `p` in training."""

    _fn = "dropout1d"


class Dropout2d(_DropoutNd):
    """Zero whole channels of (N, C, H, W) or (C, H, W) inputs with probability `p` in training."""

    _fn = "dropout2d"


class Dropout3d(_DropoutNd):
    """Zero whole channels of (N, C, D, H, W) or (C, D, H, W) inputs with probability `p` in training."""

    _fn = "dropout3d"


class AlphaDropout(_DropoutNd):
    """Dropout that keeps the self-normalising mean and variance of SELU networks."""

    _fn = "alpha_dropout"


class FeatureAlphaDropout(_DropoutNd):
    """Alpha dropout of whole channels (for SELU networks with convolutions)."""

    _fn = "feature_alpha_dropout"
