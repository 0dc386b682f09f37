"""DistributedDataParallel: data parallelism over `loom.distributed`, with PyTorch's interface.

Every rank holds a replica; construction broadcasts rank 0's parameters and
buffers. A hook on each parameter queues one post-backward callback
(`loom.autograd.engine.queue_callback`); when ``loss.backward()`` has
accumulated every ``.grad``, the callback averages the gradients across ranks,
one all-reduce per bucket of at most ``bucket_cap_mb`` (parameters in reverse
registration order, roughly the order backward produces them, as PyTorch's
reducer). The buckets' all-reduces are started together and awaited together;
they do not overlap the backward computation itself, because loom's eager
backward hands gradients over only when it ends.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

import numpy as np

from loom.autograd import engine
from loom.autograd.grad_mode import no_grad
from loom.distributed import collectives as _coll
from loom.distributed.process_group import DistributedError, _mpi, resolve
from loom.errors import LoomTypeError
from loom.nn.module import Module


def _flat(tensors: list) -> np.ndarray:
    return np.concatenate([_coll._read(t, "tensor", "DistributedDataParallel").reshape(-1) for t in tensors])


def _unflatten_into(tensors: list, flat: np.ndarray) -> None:
    offset = 0
    for t in tensors:
        n = t.numel()
        _coll._write(t, flat[offset:offset + n])
        offset += n


def _broadcast_coalesced(tensors: list, group, src_group_rank: int) -> None:
    """Broadcast `tensors` from one rank with one MPI call per dtype."""
    by_dtype: dict[Any, list] = {}
    for t in tensors:
        by_dtype.setdefault(t.dtype, []).append(t)
    for group_tensors in by_dtype.values():
        flat = _flat(group_tensors)
        group._comm.Bcast(flat, root=src_group_rank)
        if group.rank() != src_group_rank:
            _unflatten_into(group_tensors, flat)


class DistributedDataParallel(Module):
    """Wrap `module` so that its gradients are averaged across the ranks after each backward.

    Parameters
    ----------
    module : loom.nn.Module
        The replica on this rank; available as the ``module`` attribute.
    device_ids, output_device, dim
        Accepted for compatibility (CPU only: ``device_ids`` must be None).
    broadcast_buffers : bool
        Broadcast rank 0's buffers (e.g. BatchNorm statistics) before each forward (default True).
    process_group : ProcessGroup, optional
        The ranks to average over (default: all).
    bucket_cap_mb : float
        Most megabytes (MiB) of gradients per all-reduce (default 25).
    find_unused_parameters : bool
        Accepted. Parameters that got no gradient on any rank keep ``grad=None``;
        one that got a gradient on some rank only is averaged with zeros from the others.
    check_reduction, gradient_as_bucket_view, static_graph
        Accepted for compatibility and ignored.

    Examples
    --------
    .. code-block:: python

        dist.init_process_group("gloo")
        model = loom.nn.parallel.DistributedDataParallel(net)
        loss = loss_fn(model(x_shard), y_shard)
        loss.backward()          # .grad now holds the gradient averaged over ranks
        opt.step()
        with model.no_sync():    # accumulate locally, synchronise on the next backward
            loss_fn(model(x2), y2).backward()
    """

    def __init__(self, module: Module, device_ids=None, output_device=None, dim: int = 0,
                 broadcast_buffers: bool = True, process_group=None, bucket_cap_mb: float | None = None,
                 find_unused_parameters: bool = False, check_reduction: bool = False,
                 gradient_as_bucket_view: bool = False, static_graph: bool = False, **kwargs: Any) -> None:
        super().__init__()
        if not isinstance(module, Module):
            raise LoomTypeError(f"loom.nn.parallel.DistributedDataParallel: module must be a loom.nn.Module, got "
                                f"{type(module).__name__}")
        if device_ids not in (None, [], ["cpu"]):
            raise DistributedError(f"loom.nn.parallel.DistributedDataParallel: device_ids={device_ids!r}; only CPU "
                                   "modules are supported (leave device_ids=None)")
        group = resolve(process_group, "DistributedDataParallel")
        if group is None:
            raise DistributedError("loom.nn.parallel.DistributedDataParallel: this process is not a member of "
                                   "process_group")
        cap = 25.0 if bucket_cap_mb is None else float(bucket_cap_mb)
        if not cap > 0:
            raise DistributedError(f"loom.nn.parallel.DistributedDataParallel: bucket_cap_mb must be > 0, got {cap}")
        self.module = module
        self.broadcast_buffers = bool(broadcast_buffers)
        self.find_unused_parameters = bool(find_unused_parameters)
        self.bucket_bytes_cap = int(cap * 1024 * 1024)
        self.require_backward_grad_sync = True
        self.process_group = group
        params = [p for p in module.parameters() if p.requires_grad]
        self._check_same_shapes(group, params)
        with no_grad():
            _broadcast_coalesced(list(module.parameters()) + list(module.buffers()), group, 0)
        self._buckets = self._make_buckets(params)
        self._hook_handles = [p.register_hook(self._on_grad) for p in params]

    @staticmethod
    def _check_same_shapes(group, params: list) -> None:
        """Every rank must wrap the same model; compare shapes before the first broadcast would misread them."""
        mine = [tuple(p.shape) for p in params]
        theirs = group._comm.allgather(mine)
        for r, other in enumerate(theirs):
            if other != mine:
                raise DistributedError(f"loom.nn.parallel.DistributedDataParallel: group rank {r} has parameters of "
                                       f"shapes {other} but this rank has {mine}; every rank must wrap the same model")

    def _make_buckets(self, params: list) -> list[list]:
        buckets: list[list] = []
        size = 0
        for p in reversed(params):
            nbytes = p.numel() * p.element_size()
            if not buckets or buckets[-1][0].dtype is not p.dtype or size + nbytes > self.bucket_bytes_cap:
                buckets.append([])
                size = 0
            buckets[-1].append(p)
            size += nbytes
        return buckets

    @property
    def bucket_sizes(self) -> list[int]:
        """How many parameters each gradient bucket holds (one all-reduce per bucket)."""
        return [len(b) for b in self._buckets]

    def _on_grad(self, grad):
        # Once per backward pass: the engine's queue is cleared by every backward and autograd.grad.
        if self.require_backward_grad_sync and self._sync_gradients not in engine._post_backward:
            engine.queue_callback(self._sync_gradients)
        return None

    def _sync_gradients(self) -> None:
        """Average every parameter's .grad across the group: one non-blocking all-reduce per bucket."""
        import loom
        group = self.process_group
        grads = [p.grad for b in self._buckets for p in b if p.grad is not None]
        if grads:
            loom.realize(*grads)  # One compiled graph for all of them, not one per parameter.
        MPI = _mpi()
        pending = []
        for bucket in self._buckets:
            parts = []
            for p in bucket:
                if p.grad is not None:
                    parts.append(_coll._read(p.grad, "grad", "DistributedDataParallel").reshape(-1))
                else:
                    parts.append(np.zeros(p.numel(), np.float32 if p.dtype.name in ("float16", "bfloat16")
                                          else p.dtype.np))
            # One flag per parameter (had a gradient here) travels with the values.
            flat = np.concatenate(parts + [np.array([p.grad is not None for p in bucket], parts[0].dtype)])
            pending.append((bucket, flat, group._comm.Iallreduce(MPI.IN_PLACE, flat, MPI.SUM)))
        MPI.Request.Waitall([req for _, _, req in pending])
        from loom.tensor import tensor
        for bucket, flat, _ in pending:
            flat = flat / group.size() if flat.dtype.kind == "f" else flat // group.size()
            offset = 0
            flags = flat[-len(bucket):]
            for p, flag in zip(bucket, flags):
                n = p.numel()
                if flag != 0:
                    p.grad = tensor(flat[offset:offset + n].reshape(tuple(p.shape)), dtype=p.dtype)
                offset += n

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Within this context, backward accumulates gradients locally without averaging them.

        The first backward after the context averages the accumulated gradients, as PyTorch's.
        """
        old = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = old

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        """Run the wrapped module (after broadcasting rank 0's buffers, with ``broadcast_buffers``)."""
        if self.broadcast_buffers:
            buffers = list(self.module.buffers())
            if buffers and self.process_group.size() > 1:
                with no_grad():
                    _broadcast_coalesced(buffers, self.process_group, 0)
        return self.module(*inputs, **kwargs)
