"""Collectives that autograd differentiates and `loom.function` traces, as ``torch.distributed.nn.functional``.

Each call adds one collective primitive of the IR (`loom.ir.collective`) to
the graph, carrying its group as the tuple of global ranks; it returns new
tensors and never writes into its inputs. Run eagerly, the collective
happens when the program reaches it (so every rank talks in program order);
inside `loom.function` it is one node of the traced step, run by the
compiled program as an opaque library call in the step's order.

Backward rules are collectives too: ``all_reduce``'s gradient is an
``all_reduce`` of the gradient, ``all_gather`` and ``reduce_scatter`` are each
other's gradient, ``broadcast``'s is a ``reduce`` to its source (and
``reduce``'s a ``broadcast`` from its destination), ``all_to_all``'s is the
reverse ``all_to_all``, and ``send``/``recv`` are each other's. Every rank
must run the backward pass too, in the same order, as in PyTorch.

Examples
--------
.. code-block:: python

    import loom.distributed.nn.functional as dfn
    y = dfn.all_reduce(x)          # the sum over ranks; y.sum().backward() sums the gradients
    parts = dfn.all_gather(x)      # one tensor per rank

    @loom.function
    def step(x):                   # one graph; the all_reduce is one of its nodes
        return dfn.all_reduce(x * 2).sum()
"""
from __future__ import annotations

from loom import dtypes as _dtypes
from loom.autograd.function import Function
from loom.distributed import collectives as c
from loom.distributed.process_group import DistributedError, ReduceOp, check_rank_arg, resolve

__all__ = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all", "all_to_all_single",
           "send", "recv"]


def _ranks(group, op: str) -> tuple:
    g = resolve(group, op)
    if g is None:
        raise DistributedError(f"loom.distributed.nn.functional.{op}: this process is not a member of the group")
    return tuple(g._ranks)


def _member(rank, name: str, ranks: tuple, op: str) -> int:
    check_rank_arg(rank, name, f"nn.functional.{op}")
    if rank not in ranks:
        raise DistributedError(f"loom.distributed.nn.functional.{op}: {name}={rank} is not in the group (its global "
                               f"ranks are {list(ranks)})")
    return rank


def _reduction(op, name: str) -> str:
    if op is ReduceOp.SUM:
        return "sum"
    if op is ReduceOp.AVG:
        return "avg"
    raise DistributedError(f"loom.distributed.nn.functional.{name}: only ReduceOp.SUM and ReduceOp.AVG have a "
                           f"gradient here, got {op!r}")


def _tensor(t, name: str, op: str):
    from loom.tensor import Tensor
    if not isinstance(t, Tensor):
        raise DistributedError(f"loom.distributed.nn.functional.{op}: {name} must be a loom Tensor, got "
                               f"{type(t).__name__}")
    return t


def _apply(op: str, x, **attrs):
    from loom.tensor import apply
    return apply(op, (x,), attrs)


def _stacked(tensors, n: int, name: str, op: str):
    """The list `tensors` (one per rank, one shape) as one (n, ...) tensor."""
    from loom.functional.shape import stack
    if not isinstance(tensors, (list, tuple)) or len(tensors) != n:
        got = len(tensors) if isinstance(tensors, (list, tuple)) else type(tensors).__name__
        raise DistributedError(f"loom.distributed.nn.functional.{op}: {name} must be a list of {n} tensors (one per "
                               f"rank of the group), got {got}")
    shapes = {tuple(_tensor(t, f"{name}[{k}]", op).shape) for k, t in enumerate(tensors)}
    if len(shapes) != 1:
        raise DistributedError(f"loom.distributed.nn.functional.{op}: the tensors of {name} must share one shape, "
                               f"got {sorted(shapes)}")
    return stack(list(tensors))


def all_reduce(tensor, op: ReduceOp = ReduceOp.SUM, group=None):
    """The reduction of `tensor` over the group's ranks, as a new tensor; its gradient is the all-reduced gradient.

    Only ``ReduceOp.SUM`` and ``ReduceOp.AVG`` are differentiable.

    Examples
    --------
    .. code-block:: python

        y = dfn.all_reduce(x, op=dist.ReduceOp.AVG)   # the mean of every rank's x
    """
    ranks = _ranks(group, "all_reduce")
    return _apply("all_reduce", _tensor(tensor, "tensor", "all_reduce"), reduction=_reduction(op, "all_reduce"),
                  ranks=ranks)


def all_gather(tensor, group=None) -> tuple:
    """Every rank's `tensor`, as a tuple indexed by group rank; the gradient is reduce-scattered back."""
    ranks = _ranks(group, "all_gather")
    stacked = _apply("all_gather", _tensor(tensor, "tensor", "all_gather"), ranks=ranks)
    return tuple(stacked[k] for k in range(len(ranks)))


def reduce_scatter(output, input_list: list, op: ReduceOp = ReduceOp.SUM, group=None):
    """The reduction over ranks of ``input_list[rank]``, as a new tensor shaped like `output`.

    `output` gives the shape only (PyTorch's signature); the gradient is all-gathered back.
    """
    ranks = _ranks(group, "reduce_scatter")
    x = _stacked(input_list, len(ranks), "input_list", "reduce_scatter")
    if tuple(_tensor(output, "output", "reduce_scatter").shape) != tuple(x.shape[1:]):
        raise DistributedError("loom.distributed.nn.functional.reduce_scatter: output and input_list entries must "
                               f"have the same shape, got {tuple(output.shape)} and {tuple(x.shape[1:])}")
    return _apply("reduce_scatter", x, reduction=_reduction(op, "reduce_scatter"), ranks=ranks)


def broadcast(tensor, src: int, group=None):
    """Global rank `src`'s `tensor` on every rank, as a new tensor; the gradient is summed back onto `src`."""
    ranks = _ranks(group, "broadcast")
    return _apply("broadcast", _tensor(tensor, "tensor", "broadcast"), src=_member(src, "src", ranks, "broadcast"),
                  ranks=ranks)


def reduce(tensor, dst: int, op: ReduceOp = ReduceOp.SUM, group=None):
    """The sum of every rank's `tensor` on global rank `dst` (zeros on the other ranks), as a new tensor.

    Its gradient is the destination's gradient broadcast to every rank. (PyTorch leaves the other ranks'
    values unspecified; here they are zeros, which makes the gradient exact.)
    """
    ranks = _ranks(group, "reduce")
    if op is not ReduceOp.SUM:
        raise DistributedError(f"loom.distributed.nn.functional.reduce: only ReduceOp.SUM is differentiable here, "
                               f"got {op!r}")
    return _apply("reduce", _tensor(tensor, "tensor", "reduce"), dst=_member(dst, "dst", ranks, "reduce"),
                  ranks=ranks)


def all_to_all(output_tensor_list: list, input_tensor_list: list, group=None) -> tuple:
    """Send ``input_tensor_list[r]`` to rank r; returns what each rank sent here, shaped like `output_tensor_list`.

    Differentiable through the reverse exchange. With tensors of one shape it
    is one ``all_to_all`` node; with different shapes the tensors travel as
    one flat exchange of uneven parts (eager only).
    """
    ranks = _ranks(group, "all_to_all")
    shapes = {tuple(t.shape) for t in list(input_tensor_list) + list(output_tensor_list)}
    if len(shapes) == 1 and len(input_tensor_list) == len(ranks) == len(output_tensor_list):
        out = _apply("all_to_all", _stacked(input_tensor_list, len(ranks), "input_tensor_list", "all_to_all"),
                     ranks=ranks)
        return tuple(out[k] for k in range(len(ranks)))
    from loom.functional.shape import cat
    flat_in = cat([t.reshape(-1) for t in input_tensor_list])
    in_splits = [t.numel() for t in input_tensor_list]
    out_splits = [t.numel() for t in output_tensor_list]
    flat_out = _AllToAllUneven.apply(out_splits, in_splits, group, flat_in)
    parts, offset = [], 0
    for t, n in zip(output_tensor_list, out_splits):
        parts.append(flat_out[offset:offset + n].reshape(tuple(t.shape)))
        offset += n
    return tuple(parts)


def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None, group=None):
    """`input` split along dim 0 and exchanged between ranks (see `loom.distributed.all_to_all_single`).

    `output` gives the shape only; a new tensor is returned. The gradient is the reverse exchange. Even
    splits (no split sizes) are one ``all_to_all`` node; uneven splits run eagerly.
    """
    ranks = _ranks(group, "all_to_all_single")
    n = len(ranks)
    _tensor(input, "input", "all_to_all_single")
    if output_split_sizes is None and input_split_sizes is None and input.ndim and input.shape[0] % n == 0:
        rows = input.shape[0] // n
        out = _apply("all_to_all", input.reshape((n, rows) + tuple(input.shape[1:])), ranks=ranks)
        out = out.reshape(tuple(input.shape))
    else:
        out = _AllToAllUneven.apply(None if output_split_sizes is None else list(output_split_sizes),
                                    None if input_split_sizes is None else list(input_split_sizes), group, input)
    if tuple(out.shape) != tuple(output.shape):
        raise DistributedError(f"loom.distributed.nn.functional.all_to_all_single: the result has shape "
                               f"{tuple(out.shape)} but output has shape {tuple(output.shape)}")
    return out


def send(tensor, dst: int, group=None, tag: int = 0):
    """Send `tensor` to global rank `dst`; returns a 0-d zero token whose backward receives the gradient.

    To send the gradient back through a pipeline, make the sender's loss
    depend on the token (``token.backward()``, or add it to the loss): its
    backward rule receives the gradient of `tensor` from `dst` (where the
    `recv` that got it sent it back).

    Examples
    --------
    .. code-block:: python

        token = dfn.send(h, dst=1)      # rank 0
        token.backward()                # gets dL/dh from rank 1 and continues into rank 0's layers
    """
    ranks = _ranks(group, "send")
    _member(dst, "dst", ranks, "send")
    return _apply("send", _tensor(tensor, "tensor", "send"), dst=dst, tag=int(tag), ranks=ranks)


def recv(shape, dtype, src: int, group=None, tag: int = 0, token=None):
    """Receive a tensor of `shape` and `dtype` from global rank `src`; its backward sends the gradient to `src`.

    `token` (a 0-d tensor) orders the receive after whatever computed it;
    by default a fresh leaf that requires grad, so a floating-point result
    takes part in autograd.

    Examples
    --------
    .. code-block:: python

        h = dfn.recv((8, 16), loom.float32, src=0)     # rank 1
        loss = model(h).sum(); loss.backward()         # sends dL/dh back to rank 0
    """
    from loom import _api as loom
    ranks = _ranks(group, "recv")
    _member(src, "src", ranks, "recv")
    d = _dtypes.as_dtype(dtype)
    if token is None:
        token = loom.zeros((), dtype=d if d.is_floating_point else loom.float32,
                           requires_grad=d.is_floating_point)
    return _apply("recv", _tensor(token, "token", "recv"), src=src, tag=int(tag),
                  shape=tuple(int(s) for s in shape), dtype=d, ranks=ranks)


class _AllToAllUneven(Function):
    """all_to_all_single with uneven splits (no single primitive shape rule): eager, through the collectives."""

    @staticmethod
    def forward(ctx, out_splits, in_splits, group, x):
        from loom import _api as loom
        ctx.out_splits, ctx.in_splits, ctx.group, ctx.in_shape = out_splits, in_splits, group, tuple(x.shape)
        rows = sum(out_splits) if out_splits is not None else x.shape[0]
        out = loom.zeros((rows,) + tuple(x.shape[1:]), dtype=x.dtype)
        c.all_to_all_single(out, x, out_splits, in_splits, group=group)
        return out

    @staticmethod
    def backward(ctx, g):
        from loom import _api as loom
        out = loom.zeros(ctx.in_shape, dtype=g.dtype)
        c.all_to_all_single(out, g.contiguous(), ctx.in_splits, ctx.out_splits, group=ctx.group)
        return None, None, None, out
