"""DistributedDataParallel: data parallelism over `loom.distributed`, with PyTorch's interface.

Every rank holds a replica; construction broadcasts rank 0's parameters and
buffers. Gradients are averaged across ranks with one all-reduce per bucket of
at most ``bucket_cap_mb`` (parameters in reverse registration order, roughly
the order backward produces them, as PyTorch's reducer). A hook on each
parameter sees its gradient when ``loss.backward()`` has finished summing it
(a leaf is reached after everything that feeds it); as soon as every parameter
of a bucket has been seen, the bucket's gradients (``.grad`` plus this
backward's part) are computed and its non-blocking all-reduce is started, so
communication overlaps the rest of the backward pass. A post-backward callback
(`loom.autograd.engine.queue_callback`) starts the buckets that are still
incomplete (parameters unused in this pass), waits for all of them and writes
the averages into ``.grad``.
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
        self._bucket_of = {id(p): k for k, b in enumerate(self._buckets) for p in b}
        self._reset_pass()
        self._hook_handles = [p.register_hook(self._grad_hook(p)) for p in params]

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

    def _reset_pass(self) -> None:
        self._ready: dict[int, object] = {}  # id(param) -> its final gradient in this backward pass.
        self._pending: dict[int, tuple] = {}  # Bucket index -> (flat values, MPI request).
        self.overlapped_buckets = 0  # Buckets started during the last backward, before it ended.

    def _grad_hook(self, p):
        def hook(grad):
            if not self.require_backward_grad_sync:
                return None
            # Once per backward pass: the engine's queue is cleared by every backward and autograd.grad.
            if self._sync_gradients not in engine._post_backward:
                self._reset_pass()
                engine.queue_callback(self._sync_gradients)
            if engine._accumulating:  # This pass adds `grad` to p.grad: the sum is p's final gradient.
                self._ready[id(p)] = grad.detach() if p.grad is None else p.grad.detach() + grad.detach()
                k = self._bucket_of[id(p)]
                if all(id(q) in self._ready for q in self._buckets[k]):
                    self._start(k)
                    self.overlapped_buckets += 1
            return None
        return hook

    def _start(self, k: int) -> None:
        """Start bucket `k`'s non-blocking all-reduce: its gradients (zeros where none) and one had-a-gradient
        flag per parameter."""
        from loom.tensor import realize
        bucket = self._buckets[k]
        grads = [self._ready.get(id(p), p.grad) for p in bucket]
        present = [g for g in grads if g is not None]
        if present:
            realize(*present)  # One compiled graph for the bucket, not one per parameter.
        parts = []
        for p, g in zip(bucket, grads):
            if g is not None:
                parts.append(_coll._read(g, "grad", "DistributedDataParallel").reshape(-1))
            else:
                parts.append(np.zeros(p.numel(), np.float32 if p.dtype.name in ("float16", "bfloat16")
                                      else p.dtype.np))
        flat = np.concatenate(parts + [np.array([g is not None for g in grads], parts[0].dtype)])
        MPI = _mpi()
        if self._pending:  # Open MPI moves started operations on only inside MPI calls: give them a turn.
            MPI.Request.Testall([req for _, req in self._pending.values()])
        self._pending[k] = (flat, self.process_group._comm.Iallreduce(MPI.IN_PLACE, flat, MPI.SUM))

    def _sync_gradients(self) -> None:
        """Average every parameter's .grad across the group: start the buckets not started during backward,
        then wait for all of them, in bucket order."""
        from loom.tensor import tensor
        group = self.process_group
        self._ready.clear()  # Every .grad is final now; a bucket started here reads it.
        for k in range(len(self._buckets)):
            if k not in self._pending:
                self._start(k)
        _mpi().Request.Waitall([req for _, req in self._pending.values()])
        for k, bucket in enumerate(self._buckets):
            flat = self._pending[k][0]
            flat = flat / group.size() if flat.dtype.kind == "f" else flat // group.size()
            offset = 0
            flags = flat[-len(bucket):]
            for p, flag in zip(bucket, flags):
                n = p.numel()
                if flag != 0:
                    p.grad = tensor(flat[offset:offset + n].reshape(tuple(p.shape)), dtype=p.dtype)
                offset += n
        self._pending = {}

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
