"""Embedding: a lookup table of learned vectors."""
from __future__ import annotations

from loom.autograd.grad_mode import no_grad
from loom.tensor import _check_device
from loom.errors import ShapeError, fmt_shape
from loom.nn import functional as F
from loom.nn import init
from loom.nn.module import Module
from loom.nn.parameter import Parameter
from loom.tensor import Tensor, empty


class Embedding(Module):
    """Row `i` of `weight` for each index `i` of the input.

    Parameters
    ----------
    num_embeddings, embedding_dim : int
        Table size and vector size.
    padding_idx : int, optional
        This row starts at zero and gets no gradient.
    max_norm, norm_type, scale_grad_by_freq, sparse
        As in PyTorch (passed to `loom.nn.functional.embedding`).

    The weight starts as N(0, 1), as in PyTorch.

    Examples
    --------
    >>> emb = loom.nn.Embedding(10, 3, padding_idx=0)
    >>> emb(loom.tensor([[0, 2], [4, 9]])).shape
    loom.Size([2, 2, 3])
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None,
                 max_norm: float | None = None, norm_type: float = 2.0, scale_grad_by_freq: bool = False,
                 sparse: bool = False, _weight: Tensor | None = None, _freeze: bool = False, device=None,
                 dtype=None) -> None:
        super().__init__()
        _check_device(device, f"nn.{type(self).__name__}")
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise ValueError(f"loom.nn.Embedding: padding_idx {padding_idx} must be within "
                                 f"num_embeddings ({num_embeddings})")
            padding_idx %= num_embeddings
        self.padding_idx = padding_idx
        self.max_norm = max_norm
        self.norm_type = norm_type
        self.scale_grad_by_freq = scale_grad_by_freq
        self.sparse = sparse
        if _weight is None:
            self.weight = Parameter(empty((num_embeddings, embedding_dim), dtype=dtype),
                                    requires_grad=not _freeze)
            self.reset_parameters()
        else:
            if tuple(_weight.shape) != (num_embeddings, embedding_dim):
                raise ShapeError(f"loom.nn.Embedding: shape of weight {fmt_shape(_weight.shape)} does not "
                                 f"match num_embeddings and embedding_dim ({num_embeddings}, {embedding_dim})")
            self.weight = Parameter(_weight, requires_grad=not _freeze)

    def reset_parameters(self) -> None:
        init.normal_(self.weight)
        self._fill_padding_idx_with_zero()

    def _fill_padding_idx_with_zero(self) -> None:
        if self.padding_idx is not None:
            with no_grad():
                self.weight[self.padding_idx] = 0.0

    def forward(self, input: Tensor) -> Tensor:
        return F.embedding(input, self.weight, self.padding_idx, self.max_norm, self.norm_type,
                           self.scale_grad_by_freq, self.sparse)

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        if self.max_norm is not None:
            s += f", max_norm={self.max_norm}"
        if self.norm_type != 2:
            s += f", norm_type={self.norm_type}"
        if self.scale_grad_by_freq:
            s += ", scale_grad_by_freq=True"
        if self.sparse:
            s += ", sparse=True"
        return s

    @classmethod
    def from_pretrained(cls, embeddings: Tensor, freeze: bool = True, padding_idx: int | None = None,
                        max_norm: float | None = None, norm_type: float = 2.0, scale_grad_by_freq: bool = False,
                        sparse: bool = False) -> Embedding:
        """An Embedding whose weight is `embeddings` (frozen unless `freeze=False`).

        Examples
        --------
        >>> emb = loom.nn.Embedding.from_pretrained(loom.eye(3))
        >>> emb(loom.tensor([1])).tolist(), emb.weight.requires_grad
        ([[0.0, 1.0, 0.0]], False)
        """
        if embeddings.ndim != 2:
            raise ShapeError(f"loom.nn.Embedding.from_pretrained: embeddings must be 2-dimensional, got "
                             f"shape {fmt_shape(embeddings.shape)}")
        rows, cols = embeddings.shape
        return cls(rows, cols, padding_idx=padding_idx, max_norm=max_norm, norm_type=norm_type,
                   scale_grad_by_freq=scale_grad_by_freq, sparse=sparse, _weight=embeddings, _freeze=freeze)


class EmbeddingBag(Module):
    """Sums, means or maxima of bags of embedding rows, without materialising the per-index rows' output.

    Parameters
    ----------
    num_embeddings, embedding_dim : int
    mode : "sum", "mean" or "max"
    padding_idx : int, optional
        This row starts at zero and indices equal to it are left out of their bag.
    include_last_offset : bool
        The offsets passed to forward end with the end of the last bag.

    Examples
    --------
    >>> bag = loom.nn.EmbeddingBag(10, 3, mode="sum")
    >>> bag(loom.tensor([1, 2, 4, 5, 4, 3]), loom.tensor([0, 4])).shape
    loom.Size([2, 3])
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, max_norm: float | None = None,
                 norm_type: float = 2.0, scale_grad_by_freq: bool = False, mode: str = "mean",
                 sparse: bool = False, _weight: Tensor | None = None, include_last_offset: bool = False,
                 padding_idx: int | None = None, device=None, dtype=None) -> None:
        super().__init__()
        _check_device(device, f"nn.{type(self).__name__}")
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        self.max_norm = max_norm
        self.norm_type = norm_type
        self.scale_grad_by_freq = scale_grad_by_freq
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise ValueError(f"loom.nn.EmbeddingBag: padding_idx {padding_idx} must be within "
                                 f"num_embeddings ({num_embeddings})")
            padding_idx %= num_embeddings
        self.padding_idx = padding_idx
        if _weight is None:
            self.weight = Parameter(empty((num_embeddings, embedding_dim), dtype=dtype))
            self.reset_parameters()
        else:
            if tuple(_weight.shape) != (num_embeddings, embedding_dim):
                raise ShapeError(f"loom.nn.EmbeddingBag: shape of weight {fmt_shape(_weight.shape)} does not "
                                 f"match num_embeddings and embedding_dim ({num_embeddings}, {embedding_dim})")
            self.weight = Parameter(_weight)
        self.mode = mode
        self.sparse = sparse
        self.include_last_offset = include_last_offset

    def reset_parameters(self) -> None:
        init.normal_(self.weight)
        if self.padding_idx is not None:
            with no_grad():
                self.weight[self.padding_idx] = 0.0

    def forward(self, input: Tensor, offsets: Tensor | None = None,
                per_sample_weights: Tensor | None = None) -> Tensor:
        return F.embedding_bag(input, self.weight, offsets, self.max_norm, self.norm_type, self.scale_grad_by_freq,
                               self.mode, self.sparse, per_sample_weights, self.include_last_offset,
                               self.padding_idx)

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}, mode={self.mode!r}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        return s

    @classmethod
    def from_pretrained(cls, embeddings: Tensor, freeze: bool = True, max_norm: float | None = None,
                        norm_type: float = 2.0, scale_grad_by_freq: bool = False, mode: str = "mean",
                        sparse: bool = False, include_last_offset: bool = False,
                        padding_idx: int | None = None) -> EmbeddingBag:
        """An EmbeddingBag whose weight is `embeddings` (frozen unless `freeze=False`)."""
        if embeddings.ndim != 2:
            raise ShapeError(f"loom.nn.EmbeddingBag.from_pretrained: embeddings must be 2-dimensional, got "
                             f"shape {fmt_shape(embeddings.shape)}")
        rows, cols = embeddings.shape
        bag = cls(rows, cols, max_norm, norm_type, scale_grad_by_freq, mode, sparse, embeddings,
                  include_last_offset, padding_idx)
        bag.weight.requires_grad_(not freeze)
        return bag
