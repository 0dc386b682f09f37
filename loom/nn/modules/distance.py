"""Distance layers: CosineSimilarity and PairwiseDistance."""
from __future__ import annotations

from loom.nn import functional as F
from loom.nn.module import Module
from loom.tensor import Tensor


class CosineSimilarity(Module):
    """Cosine of the angle between x1 and x2 along `dim`.

    Examples
    --------
    >>> loom.nn.CosineSimilarity(dim=0)(loom.tensor([1.0, 0.0]), loom.tensor([1.0, 1.0])).item()
    0.7071067690849304
    """

    def __init__(self, dim: int = 1, eps: float = 1e-8) -> None:
        super().__init__()
        self.dim = dim
        self.eps = eps

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        return F.cosine_similarity(x1, x2, self.dim, self.eps)


class PairwiseDistance(Module):
    """p-norm of x1 - x2 + eps along the last dim."""

    def __init__(self, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False) -> None:
        super().__init__()
        self.norm = p
        self.eps = eps
        self.keepdim = keepdim

    def forward(self, x1: Tensor, x2: Tensor) -> Tensor:
        return F.pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)
