"""Tensor (model) parallelism, Megatron style, expressed with SBP signatures (`loom.distributed.sbp`).

- `ColumnParallelLinear`: the weight is ``split(0)`` (each rank holds some
  output features); a ``broadcast`` input gives a ``split(1)`` output, with
  no communication in the forward pass.
- `RowParallelLinear`: the weight is ``split(1)`` (each rank holds some input
  features); a ``split(1)`` input (a column-parallel layer's output) gives a
  ``partial_sum``, turned into ``broadcast`` by one all_reduce before the bias.
- `VocabParallelEmbedding`: the table is ``split(0)`` (each rank holds some
  rows of the vocabulary); each rank looks up the indices it holds (zeros
  for the others) and one all_reduce adds the parts.
- `ParallelMLP`: column then row, so a two-layer block costs one all_reduce
  forward and one backward; `ParallelSelfAttention` splits the heads the same
  way (query/key/value projections by column, output projection by row).

Each layer is built from the whole (unsplit) initial weights, identical on
every rank (the same seed), and keeps only its rank's shard, so a
tensor-parallel model starts equal to, and trains like, the same model in
one process. Inputs and outputs are `GlobalTensor` s.

Examples
--------
.. code-block:: python

    from loom.distributed import sbp, tensor_parallel as tp

    mesh = sbp.placement()
    mlp = tp.ParallelMLP(loom.nn.Linear(64, 256), loom.nn.Linear(256, 64), mesh)
    x = sbp.from_full(batch, mesh, sbp.broadcast)
    y = mlp(x)                       # broadcast (64 features), one all_reduce inside
"""
from __future__ import annotations

import math

from loom.distributed import sbp as S
from loom.errors import LoomError, ShapeError

__all__ = ["ColumnParallelLinear", "RowParallelLinear", "ParallelMLP", "ParallelSelfAttention",
           "VocabParallelEmbedding"]


def _check_linear(linear, name: str) -> None:
    from loom.nn import Linear
    if not isinstance(linear, Linear):
        raise LoomError(f"loom.distributed.tensor_parallel.{name}: expected a loom.nn.Linear to shard, got "
                        f"{type(linear).__name__}")


def _param(t):
    from loom.nn import Parameter
    return Parameter(t.detach().clone())


class ColumnParallelLinear:
    """``y = x Wᵀ + b`` with W (out, in) split by rows over the mesh: input broadcast, output ``split(-1)``."""

    def __init__(self, linear, placement: S.Placement):
        _check_linear(linear, "ColumnParallelLinear")
        if linear.out_features < placement.size:
            raise ShapeError(f"loom.distributed.tensor_parallel.ColumnParallelLinear: {linear.out_features} output "
                             f"features cannot be split over {placement.size} ranks")
        self.placement = placement
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = S.from_full(_param(linear.weight), placement, S.split(0))
        self.bias = S.from_full(_param(linear.bias), placement, S.split(0)) if linear.bias is not None else None

    def parameters(self) -> list:
        """This rank's shards (plain parameters an optimizer can update)."""
        return [p.local for p in (self.weight, self.bias) if p is not None]

    def __call__(self, x: S.GlobalTensor) -> S.GlobalTensor:
        if x.shape[-1] != self.in_features or x.ndim != 2:
            raise ShapeError(f"loom.distributed.tensor_parallel.ColumnParallelLinear: expected input (batch, "
                             f"{self.in_features}), got {list(x.shape)}")
        return S.linear(x.to_global(sbp=S.broadcast), self.weight, self.bias)  # The rule: B, S(0), S(0) -> S(1).


class RowParallelLinear:
    """``y = x Wᵀ + b`` with W (out, in) split by columns: input ``split(-1)``, output broadcast (one all_reduce)."""

    def __init__(self, linear, placement: S.Placement):
        _check_linear(linear, "RowParallelLinear")
        if linear.in_features < placement.size:
            raise ShapeError(f"loom.distributed.tensor_parallel.RowParallelLinear: {linear.in_features} input "
                             f"features cannot be split over {placement.size} ranks")
        self.placement = placement
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = S.from_full(_param(linear.weight), placement, S.split(1))
        self.bias = S.from_full(_param(linear.bias), placement, S.broadcast) if linear.bias is not None else None

    def parameters(self) -> list:
        return [p.local for p in (self.weight, self.bias) if p is not None]

    def __call__(self, x: S.GlobalTensor) -> S.GlobalTensor:
        if x.shape[-1] != self.in_features or x.ndim != 2:
            raise ShapeError(f"loom.distributed.tensor_parallel.RowParallelLinear: expected input (batch, "
                             f"{self.in_features}), got {list(x.shape)}")
        bias = self.bias.to_global(sbp=S.partial_sum) if self.bias is not None else None  # Added once.
        return S.linear(x.to_global(sbp=S.split(1)), self.weight, bias).to_global(sbp=S.broadcast)


class ParallelMLP:
    """``fc2(act(fc1(x)))`` with fc1 column-parallel and fc2 row-parallel: one all_reduce per pass."""

    def __init__(self, fc1, fc2, placement: S.Placement, activation: str = "gelu"):
        if activation not in ("gelu", "relu", "tanh"):
            raise LoomError(f"loom.distributed.tensor_parallel.ParallelMLP: activation must be gelu, relu or tanh, "
                            f"got {activation!r}")
        self.fc1, self.fc2 = ColumnParallelLinear(fc1, placement), RowParallelLinear(fc2, placement)
        self.activation = activation

    def parameters(self) -> list:
        return self.fc1.parameters() + self.fc2.parameters()

    def __call__(self, x: S.GlobalTensor) -> S.GlobalTensor:
        h = getattr(self.fc1(x), self.activation)()
        return self.fc2(h)


class ParallelSelfAttention:
    """Causal multi-head self-attention over (T, C) with the heads split over the mesh.

    Built from the whole projections ``qkv`` (C -> 3C, PyTorch Linear) and
    ``proj`` (C -> C), as a GPT block holds them. Each rank computes
    ``n_head / ranks`` heads from its columns of the query, key and value
    projections and multiplies by its rows of the output projection; one
    all_reduce sums the heads' contributions.
    """

    def __init__(self, qkv, proj, n_head: int, placement: S.Placement):
        import loom
        _check_linear(qkv, "ParallelSelfAttention")
        _check_linear(proj, "ParallelSelfAttention")
        c = proj.in_features
        if qkv.out_features != 3 * c or n_head % placement.size or c % n_head:
            raise ShapeError(f"loom.distributed.tensor_parallel.ParallelSelfAttention: need qkv C->3C, C divisible "
                             f"by n_head and n_head divisible by the {placement.size} ranks; got C={c}, "
                             f"qkv {qkv.in_features}->{qkv.out_features}, n_head={n_head}")
        self.n_head, self.c, self.placement = n_head, c, placement
        # Regroup the qkv rows so each rank's split(0) shard holds its heads' q, k and v rows.
        w, b = qkv.weight.detach(), qkv.bias.detach() if qkv.bias is not None else None
        parts = placement.size
        per = c // parts

        def regroup(t):
            q, k, v = t[:c], t[c:2 * c], t[2 * c:]
            return loom.cat([loom.cat([q[r * per:(r + 1) * per], k[r * per:(r + 1) * per],
                                       v[r * per:(r + 1) * per]]) for r in range(parts)])
        lin = loom.nn.Linear(c, 3 * c, bias=b is not None)
        with loom.no_grad():
            lin.weight.copy_(regroup(w))
            if b is not None:
                lin.bias.copy_(regroup(b))
        self.qkv = ColumnParallelLinear(lin, placement)
        self.proj = RowParallelLinear(proj, placement)

    def parameters(self) -> list:
        return self.qkv.parameters() + self.proj.parameters()

    def __call__(self, x: S.GlobalTensor) -> S.GlobalTensor:
        import loom
        import loom.nn.functional as F
        t_len = x.shape[0]
        heads = self.n_head // self.placement.size
        hd = self.c // self.n_head
        local = self.qkv(x).local  # (T, 3 * C / ranks): this rank's heads' q, k, v.
        q, k, v = local.split(self.c // self.placement.size, dim=1)
        q, k, v = (t.reshape(t_len, heads, hd).transpose(0, 1) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        mask = loom.ones(t_len, t_len).tril() == 0
        att = F.softmax(att.masked_fill(mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(0, 1).reshape(t_len, heads * hd)  # This rank's heads: split(1) of (T, C).
        return self.proj(S.GlobalTensor(y, self.placement, S.split(1), (t_len, self.c)))


class VocabParallelEmbedding:
    """``weight[idx]`` with the (V, C) table split by rows over the mesh: broadcast indices, broadcast output."""

    def __init__(self, embedding, placement: S.Placement):
        from loom.nn import Embedding
        if not isinstance(embedding, Embedding):
            raise LoomError(f"loom.distributed.tensor_parallel.VocabParallelEmbedding: expected a loom.nn.Embedding "
                            f"to shard, got {type(embedding).__name__}")
        if embedding.num_embeddings < placement.size:
            raise ShapeError(f"loom.distributed.tensor_parallel.VocabParallelEmbedding: {embedding.num_embeddings} "
                             f"rows cannot be split over {placement.size} ranks")
        self.placement = placement
        self.weight = S.from_full(_param(embedding.weight), placement, S.split(0))

    def parameters(self) -> list:
        return [self.weight.local]

    def __call__(self, idx: S.GlobalTensor) -> S.GlobalTensor:
        return S.embedding(idx.to_global(sbp=S.broadcast), self.weight).to_global(sbp=S.broadcast)
