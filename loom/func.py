"""Function transforms, as `torch.func`: vmap, grad, grad_and_value, vjp, jvp, jacrev, jacfwd, hessian.

Each transform takes a function of tensors (and pytrees of them: tuples, lists,
dicts) and returns another one; transforms nest (`vmap(grad(f))`,
`jacfwd(jacrev(f))`).

- The derivative transforms run loom's reverse-mode engine. A transform makes
  its differentiated inputs fresh leaves (or, when an outer transform or the
  caller differentiates through them, identity nodes over them) and keeps the
  graph of the result only when something outside still needs it, so the
  results of a plain `grad(f)(x)` do not require grad and nested ones do.
  Forward mode (`jvp`, `jacfwd`) is the double-vjp: the transpose of the
  reverse-mode map, which is linear in its cotangent, differentiated again.
- `vmap` traces `fn` once on one sample's shapes and replays the primitives
  it recorded on the whole batch, each through a batching rule (loom/_batching.py):
  a per-sample-gradient step becomes one graph of batched ops. Where a trace
  cannot stand for every sample (a value read from data, an op without a rule,
  an in-place write to an input, outside tensors that require grad), it calls
  `fn` once per index and stacks the results instead: slower, the same values.

Examples
--------
>>> import loom.func as func
>>> func.grad(lambda x: (x ** 3).sum())(loom.tensor([1.0, 2.0])).tolist()
[3.0, 12.0]
>>> func.vmap(lambda x: x.dot(x))(loom.tensor([[1.0, 2.0], [3.0, 4.0]])).tolist()
[5.0, 25.0]
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

from loom import _batching
from loom.autograd import engine as _engine
from loom.autograd.grad_mode import enable_grad, is_grad_enabled
from loom.errors import LoomError, LoomTypeError, LoomValueError, fmt_shape
from loom.tensor import Tensor, default_generator, zeros_like

__all__ = ["vmap", "grad", "grad_and_value", "vjp", "jvp", "jacrev", "jacfwd", "hessian", "functional_call",
           "stack_module_state", "linearize"]


# ---------------------------------------------------------------- pytrees

def tree_flatten(obj) -> tuple[list, Any]:
    """The leaves of a pytree (tuples, lists, dicts, named tuples) and a spec that rebuilds it."""
    leaves: list = []

    def walk(o):
        if isinstance(o, (tuple, list)):
            return (type(o), [walk(v) for v in o])
        if isinstance(o, dict):
            return (dict, [(k, walk(v)) for k, v in o.items()])
        leaves.append(o)
        return None
    return leaves, walk(obj)


def tree_unflatten(leaves: Sequence, spec) -> Any:
    """The pytree of `spec` (from `tree_flatten`) with `leaves` in its leaves' places."""
    it = iter(leaves)

    def build(s):
        if s is None:
            return next(it)
        cls, items = s
        if cls is dict:
            return {k: build(v) for k, v in items}
        built = [build(v) for v in items]
        if cls is list:
            return built
        return cls(*built) if hasattr(cls, "_fields") else cls(built)
    return build(spec)


def _broadcast_prefix(prefix, tree, op: str, what: str) -> list:
    """`prefix` (a pytree prefix of `tree`, e.g. one in_dim for a whole dict) expanded to one entry per leaf."""
    if isinstance(prefix, (tuple, list)) and isinstance(tree, (tuple, list)):
        if len(prefix) != len(tree):
            raise LoomValueError(f"loom.func.{op}: {what} has {len(prefix)} entries but the value it describes "
                                 f"has {len(tree)}")
        return [e for p, t in zip(prefix, tree) for e in _broadcast_prefix(p, t, op, what)]
    if isinstance(prefix, dict) and isinstance(tree, dict):
        if set(prefix) != set(tree):
            raise LoomValueError(f"loom.func.{op}: {what} has keys {sorted(prefix)} but the value it describes "
                                 f"has {sorted(tree)}")
        return [e for k in tree for e in _broadcast_prefix(prefix[k], tree[k], op, what)]
    if isinstance(prefix, (tuple, list, dict)):
        raise LoomValueError(f"loom.func.{op}: {what} is a {type(prefix).__name__} where the value is a "
                             f"{type(tree).__name__}")
    return [prefix] * len(tree_flatten(tree)[0])


# ---------------------------------------------------------------- vmap

def _check_dim(op: str, d, ndim: int, what: str) -> int:
    if not isinstance(d, int) or isinstance(d, bool):
        raise LoomTypeError(f"loom.func.{op}: {what} must be an int or None, got {d!r}")
    if not -ndim <= d < max(ndim, 1) or ndim == 0:
        raise LoomValueError(f"loom.func.{op}: {what} is {d} but the tensor has {ndim} dims")
    return d % ndim


def vmap(func: Callable, in_dims: Any = 0, out_dims: Any = 0, randomness: str = "error", *,
         chunk_size: int | None = None) -> Callable:
    """`func` mapped over one dimension of its inputs, as `torch.vmap` / `torch.func.vmap`.

    Parameters
    ----------
    func : callable
        A function of tensors (and pytrees of them) returning tensors or pytrees of tensors.
    in_dims : int, None or pytree
        The dimension of each input to map over: an int for all, or a tuple with one entry per
        positional argument (itself a prefix of that argument's pytree); None leaves an input unmapped.
    out_dims : int, None or tuple
        Where the mapped dimension goes in each output (None: the output does not vary and is
        returned once).
    randomness : {"error", "different", "same"}
        What random ops inside `func` do: raise (the default), draw different values per sample, or
        the same values for every sample.
    chunk_size : int, optional
        Accepted for PyTorch compatibility; every sample runs in one graph.

    Examples
    --------
    >>> import loom.func as func
    >>> x, w = loom.tensor([[1.0, 2.0], [3.0, 4.0]]), loom.tensor([1.0, -1.0])
    >>> func.vmap(lambda a, b: (a * b).sum(), in_dims=(0, None))(x, w).tolist()
    [-1.0, -1.0]
    >>> func.vmap(func.vmap(lambda a: a * 2))(x).tolist()
    [[2.0, 4.0], [6.0, 8.0]]
    """
    if randomness not in ("error", "different", "same"):
        raise LoomValueError(f"loom.func.vmap: randomness must be 'error', 'different' or 'same', got "
                             f"{randomness!r}")
    if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size < 1):
        raise LoomValueError(f"loom.func.vmap: chunk_size must be a positive int or None, got {chunk_size!r}")

    @functools.wraps(func)
    def mapped(*args, **kwargs):
        if isinstance(in_dims, (tuple, list)) and len(in_dims) != len(args):
            raise LoomValueError(f"loom.func.vmap: in_dims has {len(in_dims)} entries but the function got "
                                 f"{len(args)} positional arguments")
        leaves, spec = tree_flatten(args)
        dims = _broadcast_prefix(tuple(in_dims), args, "vmap", "in_dims") \
            if isinstance(in_dims, (tuple, list)) else [in_dims] * len(leaves)
        size = None
        for k, (leaf, d) in enumerate(zip(leaves, dims)):
            if d is None:
                continue
            if not isinstance(leaf, Tensor):
                raise LoomValueError(f"loom.func.vmap: in_dim {d} given for input leaf {k}, a "
                                     f"{type(leaf).__name__}; only tensors can be mapped (use None for it)")
            dims[k] = d = _check_dim("vmap", d, leaf.ndim, f"in_dim of input leaf {k}")
            n = leaf.shape[d]
            if size is not None and n != size:
                raise LoomValueError(f"loom.func.vmap: expected all mapped inputs to have the same size along "
                                     f"their mapped dim, got {size} and {n} (input leaf {k} of shape "
                                     f"{fmt_shape(leaf.shape)}, in_dim {d})")
            size = n
        if size is None:
            raise LoomValueError("loom.func.vmap: no input is mapped; give at least one tensor an in_dim that "
                                 "is not None")
        fast = _batching.batched_call(func, kwargs, leaves, dims, spec, size, randomness, tree_unflatten,
                                      tree_flatten)
        if fast is not None:
            return _place_outputs(*fast, out_dims)
        state = default_generator.get_state().tolist()
        results = []
        for b in range(size):
            if randomness == "same":
                default_generator.set_state(state)
            before = default_generator._counter
            sample = [leaf.select(d, b) if d is not None else leaf for leaf, d in zip(leaves, dims)]
            a = tree_unflatten(sample, spec)
            results.append(func(*a, **kwargs))
            if randomness == "error" and default_generator._counter != before:
                default_generator.set_state(state)
                raise LoomError("loom.func.vmap: the mapped function called a random op; pass "
                                "randomness='different' (independent values per sample) or 'same' "
                                "(one draw shared by all samples)")
        return _stack_outputs(results, out_dims)
    return mapped


def _out_dims(out_dims, first, n: int) -> list:
    if isinstance(out_dims, (tuple, list)) and isinstance(first, (tuple, list)):
        return _broadcast_prefix(out_dims, first, "vmap", "out_dims")
    return [out_dims] * n


def _place_outputs(spec, batched: list, out_dims) -> Any:
    """The batched replay's outputs (mapped dim first) moved to `out_dims`."""
    from loom.functional.shape import movedim
    first = tree_unflatten(batched, spec)
    out = []
    for k, (t, d) in enumerate(zip(batched, _out_dims(out_dims, first, len(batched)))):
        if d is None:
            out.append(t[0])
            continue
        d = _check_dim("vmap", d, t.ndim, f"out_dim of output leaf {k} (counting its mapped dim)")
        out.append(movedim(t, 0, d) if d else t)
    return tree_unflatten(out, spec)


def _stack_outputs(results: list, out_dims) -> Any:
    from loom.functional.shape import stack
    flat = [tree_flatten(r) for r in results]
    spec = flat[0][1]
    leaves0 = flat[0][0]
    odims = _out_dims(out_dims, results[0], len(leaves0))
    out = []
    for k, (leaf, d) in enumerate(zip(leaves0, odims)):
        if d is None:
            out.append(leaf)
            continue
        if not isinstance(leaf, Tensor):
            raise LoomTypeError(f"loom.func.vmap: the mapped function must return tensors (or pytrees of "
                                f"them); output leaf {k} is a {type(leaf).__name__}")
        d = _check_dim("vmap", d, leaf.ndim + 1, f"out_dim of output leaf {k} (counting its mapped dim)")
        out.append(stack([f[0][k] for f in flat], d))
    return tree_unflatten(out, spec)


# ---------------------------------------------------------------- reverse mode

def _as_tuple(argnums, n: int, op: str) -> tuple[int, ...]:
    nums = argnums if isinstance(argnums, tuple) else (argnums,)
    for a in nums:
        if not isinstance(a, int) or isinstance(a, bool) or not -n <= a < n:
            raise LoomValueError(f"loom.func.{op}: argnums {argnums!r} does not name one of the {n} positional "
                                 "arguments")
    return tuple(a % n for a in nums)


def _fresh(x):
    """The point a transform differentiates at: a leaf of its own, or an identity node when `x` carries grad."""
    if not isinstance(x, Tensor):
        return x
    if not (x.dtype.is_floating_point):
        raise LoomTypeError(f"loom.func: can only differentiate with respect to floating point tensors, got "
                            f"{x.dtype.name}{fmt_shape(x.shape)}")
    if x.requires_grad:
        return x.clone()
    leaf = x.detach().requires_grad_(True)
    leaf.__dict__["_func_leaf"] = True  # vmap's batched replay knows no outside autograd needs it.
    return leaf


def _needs_graph(outputs: list, fresh: list) -> bool:
    """Whether the results must stay differentiable: grad is on and the outputs reach a leaf we did not make."""
    if not is_grad_enabled():
        return False
    ours = {id(t) for t in fresh if isinstance(t, Tensor) and t.is_leaf}
    roots = [o for o in outputs if isinstance(o, Tensor) and o.requires_grad]
    return any(t._ctx is None and id(t) not in ours for t in _engine._order(roots))


def _grads(outputs: list, inputs: list, cotangents: list, create_graph: bool) -> list:
    live = [(o, c) for o, c in zip(outputs, cotangents) if isinstance(o, Tensor) and o.requires_grad]
    if not live:
        return [zeros_like(i) for i in inputs]
    got = _engine.grad([o for o, _ in live], inputs, [c for _, c in live], retain_graph=True,
                       create_graph=create_graph, allow_unused=True)
    return [g if g is not None else zeros_like(i) for g, i in zip(got, inputs)]


def _split_aux(out, has_aux: bool, op: str):
    if not has_aux:
        return out, None
    if not (isinstance(out, tuple) and len(out) == 2):
        raise LoomValueError(f"loom.func.{op}: with has_aux=True the function must return a pair "
                             f"(output, aux), got a {type(out).__name__}")
    return out


def _detach_tree(obj):
    leaves, spec = tree_flatten(obj)
    return tree_unflatten([v.detach() if isinstance(v, Tensor) else v for v in leaves], spec)


def grad_and_value(func: Callable, argnums: int | tuple[int, ...] = 0, has_aux: bool = False) -> Callable:
    """`func` returning `(gradient, value)`; the gradient of its scalar output w.r.t. `args[argnums]`.

    Examples
    --------
    >>> import loom.func as func
    >>> g, v = func.grad_and_value(lambda x: (x * x).sum())(loom.tensor([1.0, 3.0]))
    >>> g.tolist(), float(v)
    ([2.0, 6.0], 10.0)
    """
    @functools.wraps(func)
    def wrapped(*args, **kwargs):
        nums = _as_tuple(argnums, len(args), "grad")
        args = list(args)
        with enable_grad():
            diff = []
            for a in nums:
                leaves, spec = tree_flatten(args[a])
                fresh = [_fresh(v) for v in leaves]
                diff.append((fresh, spec))
                args[a] = tree_unflatten(fresh, spec)
            out, aux = _split_aux(func(*args, **kwargs), has_aux, "grad")
            if not isinstance(out, Tensor) or out.numel() != 1:
                what = f"a tensor of shape {fmt_shape(out.shape)}" if isinstance(out, Tensor) else \
                    f"a {type(out).__name__}"
                raise LoomValueError(f"loom.func.grad: the function must return a tensor with one element, got "
                                     f"{what}")
            inputs = [v for fresh, _ in diff for v in fresh if isinstance(v, Tensor)]
            keep = _needs_graph([out], inputs)
            gs = iter(_grads([out], inputs, [zeros_like(out) + 1], keep))
            grads = tuple(tree_unflatten([next(gs) if isinstance(v, Tensor) else None for v in fresh], spec)
                          for fresh, spec in diff)
        g = grads if isinstance(argnums, tuple) else grads[0]
        if not keep:
            out, aux, g = out.detach(), _detach_tree(aux), _detach_tree(g)
        return (g, (out, aux)) if has_aux else (g, out)
    return wrapped


def grad(func: Callable, argnums: int | tuple[int, ...] = 0, has_aux: bool = False) -> Callable:
    """The gradient of `func` (which returns one element) w.r.t. `args[argnums]`, as `torch.func.grad`.

    With a tuple `argnums` the result is a tuple of gradients; a pytree argument gets a pytree of
    gradients; `has_aux=True` lets `func` return `(output, aux)` and the result is `(gradient, aux)`.

    Examples
    --------
    >>> import loom.func as func
    >>> func.grad(func.grad(lambda x: x ** 3))(loom.tensor(2.0)).item()
    12.0
    >>> func.grad(lambda p: (p["w"] * 3).sum())({"w": loom.ones(2)})["w"].tolist()
    [3.0, 3.0]
    """
    gv = grad_and_value(func, argnums, has_aux)

    @functools.wraps(func)
    def wrapped(*args, **kwargs):
        g, value = gv(*args, **kwargs)
        return (g, value[1]) if has_aux else g
    return wrapped


def vjp(func: Callable, *primals, has_aux: bool = False):
    """`(func(*primals), vjp_fn)` where `vjp_fn(cotangents)` gives the vector-Jacobian products, as `torch.func.vjp`.

    `vjp_fn` returns a tuple with one entry (a pytree like the primal) per primal, and may be
    called more than once.

    Examples
    --------
    >>> import loom.func as func
    >>> out, vjp_fn = func.vjp(lambda x: x * x, loom.tensor([1.0, 2.0]))
    >>> vjp_fn(loom.ones(2))[0].tolist()
    [2.0, 4.0]
    """
    with enable_grad():
        specs, fresh_all = [], []
        args = []
        for p in primals:
            leaves, spec = tree_flatten(p)
            fresh = [_fresh(v) for v in leaves]
            specs.append((fresh, spec))
            fresh_all += [v for v in fresh if isinstance(v, Tensor)]
            args.append(tree_unflatten(fresh, spec))
        out, aux = _split_aux(func(*args), has_aux, "vjp")
    out_leaves, out_spec = tree_flatten(out)
    keep = _needs_graph(out_leaves, fresh_all)

    def vjp_fn(cotangents):
        cots, cspec = tree_flatten(cotangents)
        if len(cots) != len(out_leaves):
            raise LoomValueError(f"loom.func.vjp: expected cotangents with the structure of the output "
                                 f"({len(out_leaves)} tensors), got {len(cots)}")
        for k, (c, o) in enumerate(zip(cots, out_leaves)):
            if not isinstance(c, Tensor) or tuple(c.shape) != tuple(o.shape):
                raise LoomValueError(f"loom.func.vjp: cotangent {k} must be a tensor of the output's shape "
                                     f"{fmt_shape(o.shape)}, got "
                                     f"{fmt_shape(c.shape) if isinstance(c, Tensor) else type(c).__name__}")
        with enable_grad():
            create = keep or is_grad_enabled() and any(c.requires_grad for c in cots)
            gs = iter(_grads(out_leaves, fresh_all, cots, create))
        result = tuple(tree_unflatten([next(gs) if isinstance(v, Tensor) else None for v in fresh], spec)
                       for fresh, spec in specs)
        return result if create else _detach_tree(result)

    shown = out if keep else _detach_tree(out)
    if has_aux:
        return shown, vjp_fn, aux if keep else _detach_tree(aux)
    return shown, vjp_fn


def jvp(func: Callable, primals: tuple, tangents: tuple, *, strict: bool = False, has_aux: bool = False):
    """`(func(*primals), J @ tangents)`: the Jacobian-vector product, as `torch.func.jvp`.

    Computed as the derivative of the vector-Jacobian product (linear in its cotangent) along
    the tangents: two reverse passes.

    Examples
    --------
    >>> import loom.func as func
    >>> out, t = func.jvp(lambda x: x ** 2, (loom.tensor([1.0, 3.0]),), (loom.tensor([1.0, 1.0]),))
    >>> out.tolist(), t.tolist()
    ([1.0, 9.0], [2.0, 6.0])
    """
    if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
        raise LoomTypeError("loom.func.jvp: primals and tangents must be tuples (one entry per argument)")
    p_leaves, p_spec = tree_flatten(tuple(primals))
    t_leaves, t_spec = tree_flatten(tuple(tangents))
    if len(p_leaves) != len(t_leaves):
        raise LoomValueError(f"loom.func.jvp: expected one tangent per primal, got {len(t_leaves)} tangents for "
                             f"{len(p_leaves)} primals")
    for k, (p, t) in enumerate(zip(p_leaves, t_leaves)):
        if not isinstance(p, Tensor) or not isinstance(t, Tensor) or tuple(p.shape) != tuple(t.shape):
            raise LoomValueError(f"loom.func.jvp: tangent {k} must be a tensor of its primal's shape")
    with enable_grad():
        fresh = [_fresh(p) for p in p_leaves]
        out, aux = _split_aux(func(*tree_unflatten(fresh, p_spec)), has_aux, "jvp")
        out_leaves, out_spec = tree_flatten(out)
        keep = _needs_graph(out_leaves, fresh) or any(t.requires_grad for t in t_leaves)
        # u -> J^T u is linear in u; its derivative along the tangents is J t.
        us = [zeros_like(o).requires_grad_(True) for o in out_leaves]
        jt_u = _grads(out_leaves, fresh, us, True)
        live = [(g, t) for g, t in zip(jt_u, t_leaves) if g.requires_grad]
        if live:
            got = _engine.grad([g for g, _ in live], us, [t for _, t in live], retain_graph=True,
                               create_graph=keep, allow_unused=True)
            jvps = [g if g is not None else zeros_like(o) for g, o in zip(got, out_leaves)]
        else:
            jvps = [zeros_like(o) for o in out_leaves]
    res_out, res_t = tree_unflatten(out_leaves, out_spec), tree_unflatten(jvps, out_spec)
    if not keep:
        res_out, res_t, aux = _detach_tree(res_out), _detach_tree(res_t), _detach_tree(aux)
    return (res_out, res_t, aux) if has_aux else (res_out, res_t)


def linearize(func: Callable, *primals):
    """`(func(*primals), jvp_fn)` with `jvp_fn(*tangents)` the Jacobian-vector product at `primals`.

    Examples
    --------
    >>> import loom.func as func
    >>> out, jvp_fn = func.linearize(lambda x: x.sin(), loom.tensor([0.0]))
    >>> jvp_fn(loom.tensor([2.0])).tolist()
    [2.0]
    """
    out = func(*primals)

    def jvp_fn(*tangents):
        return jvp(func, primals, tangents)[1]
    return out, jvp_fn


# ---------------------------------------------------------------- Jacobians

def _jac_layout(out, diff_specs, blocks, argnums):
    """Arrange `blocks[out_leaf][in_leaf]` as torch.func does: output pytree of (tuples of) input pytrees."""
    out_leaves, out_spec = tree_flatten(out)
    per_out = []
    for k in range(len(out_leaves)):
        it = iter(blocks[k])
        per_arg = tuple(tree_unflatten([next(it) for _ in fresh], spec) for fresh, spec in diff_specs)
        per_out.append(per_arg if isinstance(argnums, tuple) else per_arg[0])
    return tree_unflatten(per_out, out_spec)


def _jacobian(func: Callable, argnums, has_aux: bool, op: str, forward: bool) -> Callable:
    from loom.functional.shape import stack

    @functools.wraps(func)
    def wrapped(*args, **kwargs):
        nums = _as_tuple(argnums, len(args), op)
        args = list(args)
        with enable_grad():
            diff, fresh_all = [], []
            for a in nums:
                leaves, spec = tree_flatten(args[a])
                fresh = [_fresh(v) for v in leaves]
                if not all(isinstance(v, Tensor) for v in fresh):
                    raise LoomTypeError(f"loom.func.{op}: the differentiated arguments must be tensors or "
                                        "pytrees of tensors")
                diff.append((fresh, spec))
                fresh_all += fresh
                args[a] = tree_unflatten(fresh, spec)
            out, aux = _split_aux(func(*args, **kwargs), has_aux, op)
            out_leaves, _ = tree_flatten(out)
            for k, o in enumerate(out_leaves):
                if not isinstance(o, Tensor):
                    raise LoomTypeError(f"loom.func.{op}: the function must return tensors; output {k} is a "
                                        f"{type(o).__name__}")
            keep = _needs_graph(out_leaves, fresh_all)
            if forward:
                blocks = _forward_blocks(out_leaves, fresh_all, keep, stack)
            else:
                blocks = _reverse_blocks(out_leaves, fresh_all, keep, stack)
        jac = _jac_layout(out, diff, blocks, argnums)
        if not keep:
            jac, aux = _detach_tree(jac), _detach_tree(aux)
        return (jac, aux) if has_aux else jac
    return wrapped


def _reverse_blocks(outs: list, ins: list, keep: bool, stack) -> list:
    """Row by row: one reverse pass per output element, mapped over the rows by `vmap` when nothing outside
    needs the Jacobian's graph (the passes then replay as one batched pass)."""
    from loom.autograd.grad_mode import no_grad
    from loom.tensor import eye
    blocks = []
    for o in outs:
        n = o.numel()
        if not keep and n > 1:
            with no_grad():
                basis = eye(n, dtype=o.dtype).reshape(n, *o.shape)
                rows_t = vmap(lambda e: tuple(_grads([o], ins, [e], False)))(basis)
            blocks.append([r.reshape(*o.shape, *i.shape) for r, i in zip(rows_t, ins)])
            continue
        rows: list[list] = [[] for _ in ins]
        for j in range(n):
            e = zeros_like(o).reshape(-1).index_fill(0, _index(j), 1.0).reshape(o.shape)
            for r, g in zip(rows, _grads([o], ins, [e], keep)):
                r.append(g)
        blocks.append([(stack(r, 0) if n else zeros_like(i).reshape(0, *i.shape)).reshape(*o.shape, *i.shape)
                       for r, i in zip(rows, ins)])
    return blocks


def _forward_blocks(outs: list, ins: list, keep: bool, stack) -> list:
    """Column by column: one Jacobian-vector product (double vjp) per input element."""
    us = [zeros_like(o).requires_grad_(True) for o in outs]
    jt_u = _grads(outs, ins, us, True)
    cols: list[list[list]] = [[[] for _ in ins] for _ in outs]
    for k, (g, i) in enumerate(zip(jt_u, ins)):
        for j in range(i.numel()):
            t = zeros_like(i).reshape(-1).index_fill(0, _index(j), 1.0).reshape(i.shape)
            if g.requires_grad:
                got = _engine.grad([g], us, [t], retain_graph=True, create_graph=keep, allow_unused=True)
            else:
                got = [None] * len(outs)
            for m, (c, o) in enumerate(zip(got, outs)):
                cols[m][k].append(c if c is not None else zeros_like(o))
    blocks = []
    for m, o in enumerate(outs):
        row = []
        for k, i in enumerate(ins):
            c = stack(cols[m][k], -1) if i.numel() else zeros_like(o).unsqueeze(-1)[..., :0]
            row.append(c.reshape(*o.shape, *i.shape))
        blocks.append(row)
    return blocks


def _index(j: int) -> Tensor:
    from loom.tensor import tensor
    from loom import dtypes as dt
    return tensor([j], dtype=dt.int64)


def jacrev(func: Callable, argnums: int | tuple[int, ...] = 0, *, has_aux: bool = False,
           chunk_size: int | None = None, _preallocate_and_copy: bool = False) -> Callable:
    """The Jacobian of `func` w.r.t. `args[argnums]` by reverse mode, as `torch.func.jacrev`.

    Each output's Jacobian has shape `output.shape + input.shape`.

    Examples
    --------
    >>> import loom.func as func
    >>> func.jacrev(lambda x: x ** 2)(loom.tensor([1.0, 2.0])).tolist()
    [[2.0, 0.0], [0.0, 4.0]]
    """
    return _jacobian(func, argnums, has_aux, "jacrev", forward=False)


def jacfwd(func: Callable, argnums: int | tuple[int, ...] = 0, has_aux: bool = False, *,
           randomness: str = "error") -> Callable:
    """The Jacobian of `func` w.r.t. `args[argnums]` by forward mode (column by column), as `torch.func.jacfwd`.

    Examples
    --------
    >>> import loom.func as func
    >>> func.jacfwd(lambda x, y: x * y, argnums=1)(loom.tensor([1.0, 2.0]), loom.tensor([3.0, 4.0])).tolist()
    [[1.0, 0.0], [0.0, 2.0]]
    """
    if randomness not in ("error", "different", "same"):
        raise LoomValueError(f"loom.func.jacfwd: randomness must be 'error', 'different' or 'same', got "
                             f"{randomness!r}")
    return _jacobian(func, argnums, has_aux, "jacfwd", forward=True)


def hessian(func: Callable, argnums: int | tuple[int, ...] = 0) -> Callable:
    """The Hessian of a scalar `func`: `jacfwd(jacrev(func))`, as `torch.func.hessian`.

    Examples
    --------
    >>> import loom.func as func
    >>> func.hessian(lambda x: (x ** 3).sum())(loom.tensor([1.0, 2.0])).tolist()
    [[6.0, 0.0], [0.0, 12.0]]
    """
    return jacfwd(jacrev(func, argnums), argnums)


# ---------------------------------------------------------------- modules

def functional_call(module, parameter_and_buffer_dicts, args: Any = None, kwargs: dict | None = None, *,
                    tie_weights: bool = True, strict: bool = False) -> Any:
    """`module(*args, **kwargs)` with the given tensors in place of its parameters and buffers.

    `parameter_and_buffer_dicts` is a dict of names to tensors, or a tuple of such dicts.

    Examples
    --------
    >>> import loom.func as func
    >>> lin = loom.nn.Linear(2, 1)
    >>> p = {"weight": loom.ones(1, 2), "bias": loom.zeros(1)}
    >>> func.functional_call(lin, p, (loom.tensor([[1.0, 2.0]]),)).tolist()
    [[3.0]]
    """
    from loom.nn.utils.stateless import functional_call as call
    return call(module, parameter_and_buffer_dicts, args, kwargs, tie_weights=tie_weights, strict=strict)


def stack_module_state(models) -> tuple[dict, dict]:
    """The parameters and buffers of same-structured `models`, stacked along a new first dim (for ensembles).

    The stacked parameters are new leaves that require grad; use them with `vmap` over
    `functional_call` on one of the models (or a copy).

    Examples
    --------
    >>> import loom.func as func
    >>> params, buffers = func.stack_module_state([loom.nn.Linear(3, 2) for _ in range(4)])
    >>> params["weight"].shape
    loom.Size([4, 2, 3])
    """
    from loom.functional.shape import stack
    models = list(models)
    if not models:
        raise LoomValueError("loom.func.stack_module_state: expected at least one model")
    names = [n for n, _ in models[0].named_parameters()]
    for m in models[1:]:
        if [n for n, _ in m.named_parameters()] != names:
            raise LoomValueError("loom.func.stack_module_state: the models' parameters differ in names; expected "
                                 "models of one structure")
    params = {n: stack([dict(m.named_parameters())[n].detach() for m in models]).requires_grad_(True)
              for n in names}
    buffers = {n: stack([dict(m.named_buffers())[n] for m in models]) for n, _ in models[0].named_buffers()}
    return params, buffers

