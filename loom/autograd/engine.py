"""Reverse-mode differentiation over the recorded primitive history.

Backward rules are written in primitives, so the gradient is more graph: with
`create_graph=True` it is itself differentiable, to any order.
"""
from __future__ import annotations

from typing import Sequence

from loom import _naming, _upper
from loom.autograd.grad_mode import set_grad_enabled
from loom.errors import AutogradError, LoomTypeError, fmt_shape
from loom.ir.ops import CONJ_VJP, P, vjp_reads_input, wants_needs
from loom.runtime import realize as _realize


def inputs_at_use(ctx, check: bool = False) -> list:
    """The inputs of `ctx` as its op read them.

    An input changed in place since then stands for its earlier value: the
    snapshot its in-place op kept (a non-leaf), the leaf itself (a leaf keeps its
    identity), or None when it did not require grad then. With `check`, a change
    the backward rule cannot ignore raises, as PyTorch does.
    """
    inputs = ctx.inputs
    for inp, v in zip(inputs, ctx.versions):
        if inp._vc.value != v:
            break
    else:
        return list(inputs)  # Nothing changed in place since the op read them (the common case).
    out = []
    for k, (inp, v) in enumerate(zip(inputs, ctx.versions)):
        if inp._version != v:
            if check and vjp_reads_input(ctx.name, k, [i.requires_grad for i in ctx.inputs]):
                raise AutogradError(
                    f"loom.backward: an input of {ctx.name} ({inp.dtype.name}{fmt_shape(inp.shape)}) "
                    f"was modified by an in-place operation after it was used (version {v} -> "
                    f"{inp._version}) and its backward needs the old value; clone it before modifying it")
            past = inp._past.get(v) if inp._past else None
            if past is not None:
                inp = past
            elif not (inp.is_leaf and inp.requires_grad):
                inp = None
        out.append(inp)
    return out


class _Freed:
    """What a tensor's backward record becomes once a backward pass without ``retain_graph`` went through it.

    The saved inputs are let go (so their memory can be freed, as in PyTorch);
    a second backward through the same graph raises instead of reusing them.
    """

    __slots__ = ("prim", "attrs")
    inputs: tuple = ()
    versions: tuple = ()

    def __init__(self, ctx):
        self.prim = ctx.prim
        self.attrs = ctx.attrs
        free_saved = getattr(ctx.prim, "free_saved", None)
        if free_saved is not None:  # A `Function`'s record: what its forward saved goes too.
            free_saved()

    @property
    def name(self) -> str:
        return self.prim.name

    def __repr__(self) -> str:
        return f"<{_naming.grad_fn_name(self.name)} object at {id(self):#x}>"


def _check_not_freed(ctx) -> None:
    if type(ctx) is _Freed:
        raise AutogradError(f"loom.backward: trying to backward through the graph a second time (through "
                            f"{ctx.name}); its saved values were freed by the first backward. Pass "
                            "retain_graph=True to the first backward (or autograd.grad) to keep them")


def _order(roots):
    """Tensors reachable from `roots` through recorded history, consumers before producers."""
    order, seen = [], set()
    for root in roots:
        if id(root) in seen:
            continue
        stack = [(root, False)]
        while stack:
            t, expanded = stack.pop()
            if expanded:
                order.append(t)
                continue
            if id(t) in seen:
                continue
            seen.add(id(t))
            stack.append((t, True))
            ctx = t._ctx
            if ctx is not None:
                if type(ctx) is _Freed:
                    _check_not_freed(ctx)
                for i, v in zip(ctx.inputs, ctx.versions):
                    if i._vc.value != v:
                        inputs = inputs_at_use(ctx)
                        break
                else:
                    inputs = ctx.inputs  # Nothing changed in place since the op read them (the common case).
                for i in inputs:
                    if i is not None and i.requires_grad and id(i) not in seen:
                        stack.append((i, False))
    order.reverse()
    return order


def _seed_grads(outputs, grad_outputs, op: str):
    from loom.tensor import Tensor, ones_like
    seeds = []
    for k, out in enumerate(outputs):
        if not isinstance(out, Tensor):
            raise LoomTypeError(f"loom.{op}: outputs must be Tensors, got {type(out).__name__}")
        if not out.requires_grad:
            raise AutogradError(f"loom.{op}: output {k} ({out.dtype.name}{fmt_shape(out.shape)}) does not "
                                "require grad and has no grad_fn; nothing connects it to a tensor "
                                "with requires_grad=True")
        g = grad_outputs[k] if grad_outputs is not None else None
        if g is None:
            if out.dtype.is_complex:
                raise AutogradError(f"loom.{op}: grad can be implicitly created only for real scalar outputs; "
                                    f"output {k} is {out.dtype.name}{fmt_shape(out.shape)}, pass grad_outputs")
            if out.numel() != 1:
                raise AutogradError(f"loom.{op}: grad can be implicitly created only for scalar outputs; "
                                    f"output {k} has shape {fmt_shape(out.shape)}, pass grad_outputs")
            g = ones_like(out)
        elif not isinstance(g, Tensor):
            from loom.tensor import tensor
            g = tensor(g, dtype=out.dtype)
        if tuple(g.shape) != tuple(out.shape):
            raise AutogradError(f"loom.{op}: grad_output {k} has shape {fmt_shape(g.shape)} but the "
                                f"output has shape {fmt_shape(out.shape)}")
        seeds.append(g.to(out.dtype))
    return seeds


def _run(outputs, seeds, create_graph: bool, stop_at: set[int] | None, retain_graph: bool = True):
    """Propagate gradients; returns {id(tensor): (tensor, grad)} for leaves or `stop_at` tensors.

    Without `retain_graph`, each record the pass goes through lets go of its saved inputs.
    """
    grads: dict[int, object] = {}
    for out, g in zip(outputs, seeds):
        grads[id(out)] = grads[id(out)] + g if id(out) in grads else g
    found: dict[int, object] = {}
    with set_grad_enabled(create_graph):
        for t in _order(outputs):
            g = grads.pop(id(t), None)
            if g is None:
                continue
            if t._hooks:
                for hook in t._hooks:
                    new = hook(g)
                    if new is not None:
                        g = _hooked(hook, new, g)
            if stop_at is not None and id(t) in stop_at:
                found[id(t)] = (t, g)
                if t._ctx is None:
                    continue
            if t._ctx is None:
                if stop_at is None:
                    found[id(t)] = (t, g)
                continue
            if stop_at is None and t._retains_grad:
                # As PyTorch's, a retained .grad accumulates over backward calls until zeroed.
                rg = g if create_graph else g.detach()
                t.grad = rg if t.grad is None else t.grad + rg
            ctx = t._ctx
            # A trace with pipeline stages learns which stage's backward each rule's nodes belong to.
            tr = _realize.active_trace
            mark = tr.on_backward(t) if tr is not None and tr.stages else None
            inputs = ctx.inputs
            for inp, v in zip(inputs, ctx.versions):
                if inp._vc.value != v:
                    used = inputs_at_use(ctx, check=True)
                    # A rule that ignores input values only needs shapes: the current tensor serves.
                    args = [u if u is not None else i for u, i in zip(used, inputs)]
                    break
            else:
                used = args = inputs  # Nothing changed in place since the op read them (the common case).
            # A holomorphic rule written for reals gives PyTorch's complex gradient conjugated around it.
            prim = ctx.prim
            conj = t._node.dtype.category == 3 and prim.name in CONJ_VJP
            if conj:
                g = P("conj", g)
            w = _NEEDS.get(getattr(prim.vjp, "__func__", prim.vjp))
            if w is None:
                w = _wants_needs(prim)
            if w:
                in_grads = prim.vjp(g, *args, t, ctx.attrs,
                                    needs=tuple([u is not None and u.requires_grad for u in used]))
            else:
                in_grads = prim.vjp(g, *args, t, ctx.attrs)
            if conj:
                in_grads = [None if gi is None else P("conj", gi) for gi in in_grads]
            if mark is not None:
                mark()
            if not retain_graph:
                t._ctx = _Freed(ctx)
            for inp, gi in zip(used, in_grads):
                if gi is None or inp is None or not inp.requires_grad:
                    continue
                if gi._node.dtype is not inp._node.dtype:
                    if gi.dtype.is_complex and not inp.dtype.is_complex:
                        gi = P("real", gi)  # A real input of a complex op gets the real part, as in PyTorch.
                    gi = gi.to(inp.dtype)
                key = id(inp)
                prev = grads.get(key)
                grads[key] = gi if prev is None else prev + gi
    return found


_NEEDS: dict = {}  # Keyed by backward rule (a function, hashed by identity).


def _wants_needs(prim) -> bool:
    """`wants_needs`, looked up once per primitive.

    A bound method (a `Function` call's record) is keyed by its function: keyed by the method, the
    table would keep every record alive, and with it the tensors its forward saved."""
    key = getattr(prim.vjp, "__func__", prim.vjp)
    w = _NEEDS.get(key)
    if w is None:
        w = _NEEDS[key] = wants_needs(prim)
    return w


def _hooked(hook, new, g):
    """A tensor hook's replacement gradient, checked as PyTorch checks it: a tensor of the gradient's shape."""
    from loom.tensor import Tensor
    name = getattr(hook, "__qualname__", None) or type(hook).__name__
    if not isinstance(new, Tensor):
        raise LoomTypeError(f"loom.Tensor.register_hook: the hook {name} returned a {type(new).__name__}; a "
                            f"gradient hook returns None (keep the gradient) or a Tensor (replace it)")
    if tuple(new.shape) != tuple(g.shape):
        raise LoomTypeError(f"loom.Tensor.register_hook: the hook {name} changed the gradient's shape from "
                            f"{fmt_shape(g.shape)} to {fmt_shape(new.shape)}; it must return a gradient of the same "
                            "shape")
    return new


# True while a ``backward`` call without ``inputs=`` propagates: a leaf's hook then sees the gradient that this
# call adds to its ``.grad`` (DDP starts a bucket's all-reduce once all its parameters' hooks have run).
_accumulating = False

# Callbacks queued during a backward pass run once it has accumulated every .grad (DDP's gradient all-reduce).
_post_backward: list = []


def queue_callback(fn) -> None:
    """Run `fn()` when the current ``backward`` call has finished accumulating gradients into ``.grad``.

    Meant for tensor hooks (``register_hook``) that need the final gradients,
    as ``torch.autograd.Variable._execution_engine.queue_callback``.
    """
    _post_backward.append(fn)


def _run_callbacks() -> None:
    while _post_backward:
        _post_backward.pop(0)()


def _unlink(t) -> None:
    from loom.alias import unlink  # loom.alias imports grad modes from this package.
    unlink(t)


def backward(tensors: Sequence, grad_tensors: Sequence | None = None, retain_graph: bool | None = None,
             create_graph: bool = False, inputs: Sequence | None = None) -> None:
    """Accumulate gradients of `tensors` into `.grad` of the leaves (or of `inputs`)."""
    from loom.tensor import Tensor
    if isinstance(tensors, Tensor):
        tensors = [tensors]
    if isinstance(grad_tensors, Tensor):
        grad_tensors = [grad_tensors]
    tensors = list(tensors)
    retain = create_graph if retain_graph is None else bool(retain_graph)
    global _accumulating
    _post_backward.clear()  # Left by a backward that raised.
    seeds = _seed_grads(tensors, grad_tensors, "backward")
    if inputs is not None:
        inputs = [inputs] if isinstance(inputs, Tensor) else list(inputs)
        found = _run(tensors, seeds, create_graph, {id(i) for i in inputs}, retain)
    else:
        _accumulating = True
        try:
            found = _run(tensors, seeds, create_graph, None, retain)
        finally:
            _accumulating = False
    for leaf, g in found.values():
        g = g if create_graph else g.detach()
        _unlink(g)  # As PyTorch's, a .grad has storage of its own, never a view of a temporary.
        grad_dtype = leaf.__dict__.get("_grad_dtype")  # Set through Tensor.grad_dtype.
        if grad_dtype is not None and g.dtype is not grad_dtype:
            g = g.to(grad_dtype)
        leaf.grad = g if leaf.grad is None else leaf.grad + g
    for leaf, _ in found.values():  # Tensor.register_post_accumulate_grad_hook: once .grad holds the sum.
        for hook in list(leaf.__dict__.get("_post_accumulate_grad_hooks", {}).values()):
            hook(leaf)
    _run_callbacks()

def grad(outputs, inputs, grad_outputs=None, retain_graph: bool | None = None,
         create_graph: bool = False, allow_unused: bool = False, materialize_grads: bool = False):
    """Gradients of `outputs` with respect to `inputs`, returned (not accumulated).

    Examples
    --------
    >>> x = loom.tensor(3.0, requires_grad=True)
    >>> (dx,) = loom.autograd.grad(x ** 3, x, create_graph=True)
    >>> (d2x,) = loom.autograd.grad(dx, x)
    >>> float(dx), float(d2x)
    (27.0, 18.0)
    """
    from loom.tensor import Tensor, zeros_like
    single = isinstance(inputs, Tensor)
    outputs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    inputs = [inputs] if single else list(inputs)
    if isinstance(grad_outputs, Tensor):
        grad_outputs = [grad_outputs]
    for k, i in enumerate(inputs):
        if not isinstance(i, Tensor):
            raise LoomTypeError(f"loom.autograd.grad: inputs must be Tensors, got {type(i).__name__} at {k}")
        if not i.requires_grad:
            raise AutogradError(f"loom.autograd.grad: input {k} ({i.dtype.name}{fmt_shape(i.shape)}) "
                                "does not require grad")
    seeds = _seed_grads(outputs, grad_outputs, "autograd.grad")
    retain = create_graph if retain_graph is None else bool(retain_graph)
    found = _run(outputs, seeds, create_graph, {id(i) for i in inputs}, retain)
    _post_backward.clear()  # autograd.grad accumulates nothing, so post-backward work does not apply.
    result = []
    for k, i in enumerate(inputs):
        g = found.get(id(i), (None, None))[1]
        if g is None:
            if materialize_grads:
                g = zeros_like(i)
            elif not allow_unused:
                raise AutogradError(f"loom.autograd.grad: input {k} ({i.dtype.name}{fmt_shape(i.shape)}) "
                                    "was not used to compute the outputs; pass allow_unused=True "
                                    "to get None for it")
        elif not create_graph:
            g = g.detach()
        if g is not None:
            _unlink(g)
        result.append(g)
    return tuple(result)


_upper.register(backward=backward)
