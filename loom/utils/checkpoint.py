"""Activation checkpointing, as `torch.utils.checkpoint`: keep a segment's inputs, recompute its inside.

`checkpoint(fn, *args)` runs `fn` once and returns its outputs with a backward
history of one step: from each output straight to the tensors the segment
reads that require grad (its tensor arguments, and the parameters and other
leaves it touches). The intermediate tensors of the segment are not kept for
backward, and in eager mode the outputs are computed at once, so their graph
nodes let go of the segment's intermediate nodes too. When backward reaches
an output, `fn` is run again with gradients on (with the random state it
first saw, so dropout draws the same masks) and the gradient of the recomputed
output is taken; gradients are therefore those of the plain call, to any order.
Under `loom.function` the trace keeps the recomputation in the plan as graph
nodes, marked as such (``graph.meta["recompute"]``): common-subexpression
elimination does not merge them with the forward's twins, so the segment's
intermediates die in the forward and are computed again in the backward,
and the planned arena shrinks as in eager mode.

Examples
--------
>>> from loom.utils.checkpoint import checkpoint
>>> lin = loom.nn.Linear(4, 4)
>>> x = loom.randn(2, 4, requires_grad=True)
>>> checkpoint(lin, x, use_reentrant=False).sum().backward()
>>> x.grad.shape
loom.Size([2, 4])
"""
from __future__ import annotations

import warnings
from contextlib import nullcontext
from typing import Any, Callable

from loom.autograd.engine import grad as _grad
from loom.autograd.grad_mode import enable_grad, is_grad_enabled
from loom.errors import LoomTypeError, LoomValueError
from loom.runtime import realize as _realize
from loom.runtime.realize import realize_barrier
from loom.tensor import Context, Tensor

__all__ = ["checkpoint", "checkpoint_sequential"]


class _CheckpointPrim:
    """Stands in for a primitive in a Context: its backward rule recomputes the segment."""

    def __init__(self, segment: _Segment, index: int) -> None:
        self.name = "checkpoint"
        self.segment = segment
        self.index = index
        self.vjp = self._vjp

    def _vjp(self, g, *rest):
        args = rest[:-2]
        return self.segment.backward(self.index, g, list(args))


class _Segment:
    """One checkpointed call: what to re-run and which tensors its gradients flow to."""

    def __init__(self, fn, args, kwargs, tensor_pos, leaves, rng_state, preserve_rng) -> None:
        self.fn = fn
        self.args = args
        self.kwargs = kwargs
        self.tensor_pos = tensor_pos    # Positions in args of the tensors that require grad.
        self.leaves = leaves            # Other tensors the segment reads that require grad.
        self.rng_state = rng_state
        self.preserve_rng = preserve_rng
        self.recompute_count = 0

    def run(self, inputs: list[Tensor]):
        """fn with the grad-requiring tensor arguments replaced by `inputs`, the RNG as first seen."""
        args = list(self.args)
        for pos, t in zip(self.tensor_pos, inputs):
            args[pos] = t
        if not self.preserve_rng:
            return self.fn(*args, **self.kwargs)
        from loom import _api as loom
        saved = loom.get_rng_state()
        loom.set_rng_state(self.rng_state)
        try:
            return self.fn(*args, **self.kwargs)
        finally:
            loom.set_rng_state(saved)

    def backward(self, index: int, g: Tensor, wrt: list[Tensor]):
        """Recompute the segment and return the gradient of output `index` for cotangent g."""
        n = len(self.tensor_pos)
        self.recompute_count += 1
        create_graph = is_grad_enabled()
        if not create_graph:
            # Fresh leaves stand for the inputs, so the gradient stops at them instead of running on
            # into the history before the segment (the outer backward pass covers that).
            wrt = [t.detach().requires_grad_(True) for t in wrt[:n]] + wrt[n:]
        # Under `loom.function` the trace marks these nodes as a recomputation, so the compiler keeps them
        # apart from the forward's (merged, they would keep the segment's activations alive until backward).
        trace = _realize.active_trace
        marked = trace.recomputing() if trace is not None and hasattr(trace, "recomputing") else nullcontext()
        with enable_grad(), marked:
            outs = _tensors(self.run(wrt[:n]))
        out = outs[index]
        if not out.requires_grad:
            return [None] * len(wrt)
        return list(_grad([out], wrt, [g], retain_graph=True, create_graph=create_graph, allow_unused=True))


def _tensors(out) -> list:
    if isinstance(out, Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return list(out)
    raise LoomTypeError(f"loom.utils.checkpoint: the checkpointed function must return a Tensor or a tuple of "
                        f"them, got {type(out).__name__}")


def _leaves_of(outputs: list, stop: set[int]) -> list[Tensor]:
    """Tensors requiring grad that the outputs' history starts from (not counting those in `stop`)."""
    seen: set[int] = set()
    found: list[Tensor] = []
    stack = [o for o in outputs if isinstance(o, Tensor) and o.requires_grad]
    while stack:
        t = stack.pop()
        if id(t) in seen:
            continue
        seen.add(id(t))
        if id(t) in stop:
            continue
        if t._ctx is None:
            found.append(t)
            continue
        stack.extend(i for i in t._ctx.inputs if i.requires_grad)
    return found


def checkpoint(function: Callable, *args, use_reentrant: bool | None = None, context_fn=None,
               determinism_check: str = "default", debug: bool = False, preserve_rng_state: bool = True,
               **kwargs) -> Any:
    """Run `function(*args, **kwargs)` without keeping its intermediate tensors for backward.

    Parameters
    ----------
    function : callable
        Returns a Tensor or a tuple of Tensors.
    *args, **kwargs
        Its arguments; tensors among them that require grad receive gradients.
    use_reentrant : bool
        Accepted for PyTorch compatibility (both variants behave the same in loom); PyTorch warns when it
        is not given, and so does loom.
    preserve_rng_state : bool
        Replay the random state during recomputation (default True), so random ops repeat their draws.

    Returns
    -------
    The function's outputs, whose gradients equal those of the plain call.

    Examples
    --------
    >>> f = lambda x: (x.sin() * 2).exp()
    >>> x = loom.tensor([0.5, -1.0], requires_grad=True)
    >>> y = loom.utils.checkpoint.checkpoint(f, x, use_reentrant=False)
    >>> [round(v, 4) for v in loom.autograd.grad(y.sum(), x)[0].tolist()]
    [4.5787, 0.2008]
    """
    if use_reentrant is None:
        warnings.warn("loom.utils.checkpoint: the use_reentrant parameter should be passed explicitly (as "
                      "PyTorch asks); both values behave the same in loom", stacklevel=2)
    if context_fn is not None:
        raise LoomValueError("loom.utils.checkpoint: context_fn is not supported")
    if not is_grad_enabled():
        return function(*args, **kwargs)
    from loom import _api as loom
    rng_state = loom.get_rng_state() if preserve_rng_state else None
    tensor_pos = [k for k, a in enumerate(args) if isinstance(a, Tensor) and a.requires_grad]
    # The first run records history so the leaves the segment reads can be found; only the outputs' nodes
    # survive it (each output gets a one-step history instead).
    detached = list(args)
    for k in tensor_pos:
        detached[k] = args[k].detach().requires_grad_(True)
    segment = _Segment(function, args, kwargs, tensor_pos, [], rng_state, preserve_rng_state)
    with enable_grad():
        out = segment.run([detached[k] for k in tensor_pos])
    outs = _tensors(out)
    segment.leaves = _leaves_of(outs, {id(detached[k]) for k in tensor_pos})
    # Compute the outputs now (in eager mode; a trace leaves this to its plan): their nodes then drop the
    # segment's intermediate nodes, and backward rebuilds the segment from its inputs instead.
    realize_barrier([o._node for o in outs if isinstance(o, Tensor)])
    wrt = [args[k] for k in tensor_pos] + segment.leaves
    segment.args = tuple(a if k not in tensor_pos else None for k, a in enumerate(args))
    wrapped = []
    for k, o in enumerate(outs):
        if isinstance(o, Tensor) and o.requires_grad and wrt:
            w = Tensor._wrap(o._node, Context(_CheckpointPrim(segment, k), tuple(wrt), {}), True)
            wrapped.append(w)
        elif isinstance(o, Tensor):
            wrapped.append(o.detach())
        else:
            wrapped.append(o)
    if isinstance(out, Tensor):
        return wrapped[0]
    return type(out)(wrapped) if isinstance(out, tuple) else wrapped


def checkpoint_sequential(functions, segments: int, input: Tensor, use_reentrant: bool | None = None,
                          **kwargs) -> Tensor:
    """Run a Sequential (or list of modules) in `segments` checkpointed chunks; the last chunk runs plainly.

    Examples
    --------
    >>> net = loom.nn.Sequential(*[loom.nn.Linear(4, 4) for _ in range(4)])
    >>> y = loom.utils.checkpoint.checkpoint_sequential(net, 2, loom.randn(3, 4), use_reentrant=False)
    >>> y.shape
    loom.Size([3, 4])
    """
    if use_reentrant is None:
        warnings.warn("loom.utils.checkpoint_sequential: the use_reentrant parameter should be passed "
                      "explicitly (as PyTorch asks); both values behave the same in loom", stacklevel=2)
    fns = list(functions.children()) if hasattr(functions, "children") else list(functions)
    if segments <= 0:
        raise LoomValueError(f"loom.utils.checkpoint_sequential: segments must be positive, got {segments}")
    size = max(len(fns) // segments, 1)

    def run(start: int, end: int) -> Callable:
        def forward(x):
            for f in fns[start:end]:
                x = f(x)
            return x
        return forward

    end = -1
    x = input
    for start in range(0, size * (segments - 1), size):
        end = start + size - 1
        x = checkpoint(run(start, end + 1), x, use_reentrant=use_reentrant, **kwargs)
    return run(end + 1, len(fns))(x)
