"""AdaptiveLogSoftmaxWithLoss: a softmax over many classes, split into a frequent shortlist and clusters."""
from __future__ import annotations

from collections import namedtuple
from typing import Sequence

from loom import dtypes as dt
from loom.errors import LoomValueError, ShapeError, fmt_shape
from loom.functional.math import where
from loom.nn import functional as F
from loom.nn.module import Module
from loom.nn.modules.container import ModuleList, Sequential
from loom.nn.modules.linear import Linear
from loom.tensor import Tensor, const

_ASMoutput = namedtuple("_ASMoutput", ["output", "loss"])


class AdaptiveLogSoftmaxWithLoss(Module):
    """Efficient softmax approximation (Grave et al.): the head scores the shortlist classes and one entry
    per cluster; each cluster's own projection scores its classes.

    forward(input, target) returns (output, loss): the target log-probabilities and their negated mean.
    Every row is scored by every cluster (static shapes) and the right score is selected per row.

    Examples
    --------
    >>> asm = loom.nn.AdaptiveLogSoftmaxWithLoss(8, 20, cutoffs=[5, 10])
    >>> out, loss = asm(loom.randn(4, 8), loom.tensor([1, 7, 15, 19]))
    >>> out.shape, asm.log_prob(loom.randn(4, 8)).shape
    (loom.Size([4]), loom.Size([4, 20]))
    """

    def __init__(self, in_features: int, n_classes: int, cutoffs: Sequence[int], div_value: float = 4.0,
                 head_bias: bool = False, device=None, dtype=None) -> None:
        from loom.tensor import _check_device
        _check_device(device, f"nn.{type(self).__name__}")
        super().__init__()
        cutoffs = list(cutoffs)
        if not cutoffs:
            raise ValueError("loom.nn.AdaptiveLogSoftmaxWithLoss: cutoffs should be a sequence of length larger "
                             "than 0")
        if (cutoffs != sorted(cutoffs) or min(cutoffs) <= 0 or max(cutoffs) > n_classes - 1
                or len(set(cutoffs)) != len(cutoffs) or any(int(c) != c for c in cutoffs)):
            raise ValueError("loom.nn.AdaptiveLogSoftmaxWithLoss: cutoffs should be a sequence of unique, positive "
                             "integers sorted in an increasing order, where each value is between 1 and "
                             f"n_classes-1 ({n_classes - 1}); got {cutoffs}")
        self.in_features = in_features
        self.n_classes = n_classes
        self.cutoffs = cutoffs + [n_classes]
        self.div_value = div_value
        self.head_bias = head_bias
        self.shortlist_size = self.cutoffs[0]
        self.n_clusters = len(self.cutoffs) - 1
        self.head_size = self.shortlist_size + self.n_clusters
        self.head = Linear(in_features, self.head_size, bias=head_bias, device=device, dtype=dtype)
        self.tail = ModuleList()
        for i in range(self.n_clusters):
            hsz = int(in_features // (div_value ** (i + 1)))
            osz = self.cutoffs[i + 1] - self.cutoffs[i]
            self.tail.append(Sequential(Linear(in_features, hsz, bias=False, device=device, dtype=dtype),
                                        Linear(hsz, osz, bias=False, device=device, dtype=dtype)))

    def reset_parameters(self) -> None:
        self.head.reset_parameters()
        for i2h, h2o in self.tail:
            i2h.reset_parameters()
            h2o.reset_parameters()

    def forward(self, input_: Tensor, target_: Tensor) -> _ASMoutput:
        name = "loom.nn.AdaptiveLogSoftmaxWithLoss"
        if target_.ndim == 1:
            if input_.ndim != 2 or input_.shape[0] != target_.shape[0]:
                raise ShapeError(f"{name}: a 1-d target {fmt_shape(target_.shape)} needs a 2-d input with the same "
                                 f"batch size, got {fmt_shape(input_.shape)}")
        elif target_.ndim == 0:
            if input_.ndim != 1:
                raise ShapeError(f"{name}: a 0-d target needs a 1-d input, got {fmt_shape(input_.shape)}")
        else:
            raise ShapeError(f"{name}: 0-d or 1-d target expected, multi-target not supported (got "
                             f"{fmt_shape(target_.shape)})")
        batched = target_.ndim > 0
        x = input_ if batched else input_.unsqueeze(0)
        t = (target_ if batched else target_.unsqueeze(0)).to(dt.int64)
        known = t._node.buffer
        if known is not None and known.size and (known.min() < 0 or known.max() >= self.n_classes):
            raise LoomValueError(f"{name}: target values should be in [0, {self.n_classes - 1}], but values in "
                                 f"range [{known.min()}, {known.max()}] were found")
        head_logprob = F.log_softmax(self.head(x), dim=1)
        zero = const(0, (), dt.int64)
        gather_idx = t
        output = None
        for i in range(1, len(self.cutoffs)):
            low, high = self.cutoffs[i - 1], self.cutoffs[i]
            inside = (t >= low) & (t < high)
            cluster_logprob = F.log_softmax(self.tail[i - 1](x), dim=1)
            rel = where(inside, t - low, zero)
            local = cluster_logprob.gather(1, rel.unsqueeze(1)).squeeze(1)
            local = where(inside, local, const(0.0, (), local.dtype))
            output = local if output is None else output + local
            gather_idx = where(inside, const(self.shortlist_size + i - 1, (), dt.int64), gather_idx)
        out = head_logprob.gather(1, gather_idx.unsqueeze(1)).squeeze(1)
        if output is not None:
            out = out + output
        loss = (-out).mean()
        return _ASMoutput(out if batched else out.squeeze(0), loss)

    def _get_full_log_prob(self, input: Tensor, head_output: Tensor) -> Tensor:
        from loom.functional.shape import cat
        head_logprob = F.log_softmax(head_output, dim=1)
        parts = [head_logprob[:, :self.shortlist_size]]
        for i in range(self.n_clusters):
            cluster_logprob = F.log_softmax(self.tail[i](input), dim=1)
            parts.append(cluster_logprob + head_logprob[:, self.shortlist_size + i].unsqueeze(1))
        return cat(parts, 1)

    def log_prob(self, input: Tensor) -> Tensor:
        """Log-probabilities of all n_classes classes for each row of `input`."""
        return self._get_full_log_prob(input, self.head(input))

    def predict(self, input: Tensor) -> Tensor:
        """The most probable class of each row (the argmax of `log_prob`)."""
        return self.log_prob(input).argmax(1)
