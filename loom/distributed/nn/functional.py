"""Collectives that autograd differentiates, as ``torch.distributed.nn.functional``.

Each returns new tensors (it does not write into its inputs) and records a
backward rule that is itself a collective: the gradient of ``all_reduce`` is
an ``all_reduce`` of the gradient, ``all_gather`` and ``reduce_scatter`` are
each other's gradient, ``broadcast``'s gradient is a ``reduce`` to its source,
and ``all_to_all``'s is the reverse ``all_to_all``. Every rank must run the
backward pass too, in the same order, as in PyTorch. They are
`loom.autograd.Function` subclasses and run eagerly.

Examples
--------
.. code-block:: python

    import loom.distributed.nn.functional as dfn
    y = dfn.all_reduce(x)          # the sum over ranks; y.sum().backward() sums the gradients
    parts = dfn.all_gather(x)      # one tensor per rank
"""
from __future__ import annotations

from loom.autograd.function import Function
from loom.distributed import collectives as c
from loom.distributed.process_group import DistributedError, ReduceOp, resolve

__all__ = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "all_to_all_single"]


def _size(group, op: str) -> int:
    g = resolve(group, op)
    if g is None:
        raise DistributedError(f"loom.distributed.nn.functional.{op}: this process is not a member of the group")
    return g.size()


def _differentiable_op(op, name: str):
    if op not in (ReduceOp.SUM, ReduceOp.AVG):
        raise DistributedError(f"loom.distributed.nn.functional.{name}: only ReduceOp.SUM and ReduceOp.AVG have a "
                               f"gradient here, got {op!r}")
    return op


class _AllReduce(Function):
    @staticmethod
    def forward(ctx, op, group, x):
        ctx.op, ctx.group = op, group
        out = x.clone()
        c.all_reduce(out, op=op, group=group)
        return out

    @staticmethod
    def backward(ctx, g):
        g = g.clone()
        c.all_reduce(g, op=ctx.op, group=ctx.group)
        return None, None, g


class _AllGather(Function):
    @staticmethod
    def forward(ctx, group, x):
        import loom
        ctx.group = group
        n = _size(group, "all_gather")
        out = loom.zeros((n,) + tuple(x.shape), dtype=x.dtype)
        c.all_gather_into_tensor(out, x.contiguous(), group=group)
        return out

    @staticmethod
    def backward(ctx, g):
        import loom
        out = loom.zeros(tuple(g.shape[1:]), dtype=g.dtype)
        c.reduce_scatter_tensor(out, g.contiguous(), group=ctx.group)
        return None, out


class _ReduceScatter(Function):
    @staticmethod
    def forward(ctx, op, group, *inputs):
        import loom
        ctx.op, ctx.group = op, group
        out = loom.zeros(tuple(inputs[0].shape), dtype=inputs[0].dtype)
        c.reduce_scatter(out, list(inputs), op=op, group=group)
        return out

    @staticmethod
    def backward(ctx, g):
        import loom
        n = _size(ctx.group, "reduce_scatter")
        out = loom.zeros((n,) + tuple(g.shape), dtype=g.dtype)
        c.all_gather_into_tensor(out, g.contiguous(), group=ctx.group)
        if ctx.op is ReduceOp.AVG:
            out = out / n
        return (None, None) + tuple(out[k] for k in range(n))


class _Broadcast(Function):
    @staticmethod
    def forward(ctx, src, group, x):
        ctx.src, ctx.group = src, group
        out = x.clone()
        c.broadcast(out, src=src, group=group)
        return out

    @staticmethod
    def backward(ctx, g):
        import loom
        g = g.clone()
        c.reduce(g, dst=ctx.src, group=ctx.group)
        g_ = resolve(ctx.group, "broadcast")
        if g_.group_rank(ctx.src, "broadcast") != g_.rank():
            g = loom.zeros_like(g)  # Only the source's value reached the outputs.
        return None, None, g


class _AllToAllSingle(Function):
    @staticmethod
    def forward(ctx, out_splits, in_splits, group, x):
        import loom
        ctx.out_splits, ctx.in_splits, ctx.group, ctx.in_shape = out_splits, in_splits, group, tuple(x.shape)
        _size(group, "all_to_all_single")
        rows = sum(out_splits) if out_splits is not None else x.shape[0]
        out = loom.zeros((rows,) + tuple(x.shape[1:]), dtype=x.dtype)
        c.all_to_all_single(out, x, out_splits, in_splits, group=group)
        return out

    @staticmethod
    def backward(ctx, g):
        import loom
        out = loom.zeros(ctx.in_shape, dtype=g.dtype)
        c.all_to_all_single(out, g.contiguous(), ctx.in_splits, ctx.out_splits, group=ctx.group)
        return None, None, None, out


def all_reduce(tensor, op: ReduceOp = ReduceOp.SUM, group=None):
    """The reduction of `tensor` over the group's ranks, as a new tensor; its gradient is the all-reduced gradient.

    Only ``ReduceOp.SUM`` and ``ReduceOp.AVG`` are differentiable.
    """
    return _AllReduce.apply(_differentiable_op(op, "all_reduce"), group, tensor)


def all_gather(tensor, group=None) -> tuple:
    """Every rank's `tensor`, as a tuple indexed by group rank; the gradient is reduce-scattered back."""
    stacked = _AllGather.apply(group, tensor)
    return tuple(stacked[k] for k in range(stacked.shape[0]))


def reduce_scatter(output, input_list: list, op: ReduceOp = ReduceOp.SUM, group=None):
    """The reduction over ranks of ``input_list[rank]``, as a new tensor shaped like `output`.

    `output` gives the shape only (PyTorch's signature); the gradient is all-gathered back.
    """
    if tuple(output.shape) != tuple(input_list[0].shape):
        raise DistributedError("loom.distributed.nn.functional.reduce_scatter: output and input_list entries must "
                               f"have the same shape, got {tuple(output.shape)} and {tuple(input_list[0].shape)}")
    return _ReduceScatter.apply(_differentiable_op(op, "reduce_scatter"), group, *input_list)


def broadcast(tensor, src: int, group=None):
    """Global rank `src`'s `tensor` on every rank, as a new tensor; the gradient is summed back onto `src`."""
    return _Broadcast.apply(src, group, tensor)


def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None, group=None):
    """`input` split along dim 0 and exchanged between ranks (see `loom.distributed.all_to_all_single`).

    `output` gives the shape only; a new tensor is returned. The gradient is the reverse exchange.
    """
    out = _AllToAllSingle.apply(None if output_split_sizes is None else list(output_split_sizes),
                                None if input_split_sizes is None else list(input_split_sizes), group, input)
    if tuple(out.shape) != tuple(output.shape):
        raise DistributedError(f"loom.distributed.nn.functional.all_to_all_single: the result has shape "
                               f"{tuple(out.shape)} but output has shape {tuple(output.shape)}")
    return out


def all_to_all(output_tensor_list: list, input_tensor_list: list, group=None) -> tuple:
    """Send ``input_tensor_list[r]`` to rank r; returns what each rank sent here, shaped like `output_tensor_list`.

    Differentiable through the reverse exchange.
    """
    from loom.functional.shape import cat
    flat_in = cat([t.reshape(-1) for t in input_tensor_list])
    in_splits = [t.numel() for t in input_tensor_list]
    out_splits = [t.numel() for t in output_tensor_list]
    flat_out = _AllToAllSingle.apply(out_splits, in_splits, group, flat_in)
    parts, offset = [], 0
    for t, n in zip(output_tensor_list, out_splits):
        parts.append(flat_out[offset:offset + n].reshape(tuple(t.shape)))
        offset += n
    return tuple(parts)
