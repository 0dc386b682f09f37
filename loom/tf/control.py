"""TensorFlow's functional control flow and graph-building names: `tf.cond`, `tf.while_loop`, `tf.map_fn`,
`tf.scan`, `tf.foldl`/`foldr`, `tf.custom_gradient`, `tf.name_scope`, `tf.Module` and friends."""
from __future__ import annotations

import contextlib
import functools
import inspect
import types

import loom
from loom.errors import LoomTypeError, LoomValueError
from loom.tensor import Tensor
from loom.tf._core import convert_to_tensor as _t


def cond(pred, true_fn=None, false_fn=None, name=None):
    """`true_fn()` if `pred` else `false_fn()`; inside `tf.function` both branches are traced and selected.

    Examples
    --------
    >>> import loom.tf as tf
    >>> tf.cond(tf.constant(2.0) > 1.0, lambda: tf.constant(1.0), lambda: tf.constant(0.0)).numpy()
    array(1., dtype=float32)
    """
    if true_fn is None or false_fn is None:
        raise LoomTypeError("loom.tf.cond: both true_fn and false_fn must be given (callables of no arguments)")
    return loom.cond(_t(pred) if not isinstance(pred, (bool, int)) else pred, true_fn, false_fn)


def while_loop(cond, body, loop_vars, shape_invariants=None, parallel_iterations=10, back_prop=True,
               swap_memory=False, maximum_iterations=None, name=None):
    """Repeat `loop_vars = body(*loop_vars)` while `cond(*loop_vars)`; returns the final loop variables.

    `loop_vars` is a tuple or list (returned as the same kind) or a single tensor.

    Examples
    --------
    >>> import loom.tf as tf
    >>> i, s = tf.while_loop(lambda i, s: i < 4, lambda i, s: (i + 1, s + i), (tf.constant(0), tf.constant(0)))
    >>> int(i), int(s)
    (4, 6)
    """
    single = not isinstance(loop_vars, (list, tuple))
    vars_ = [loop_vars] if single else list(loop_vars)
    vars_ = [_t(v) for v in vars_]
    cond_fn, body_fn = cond, body
    if maximum_iterations is not None:
        limit = _t(maximum_iterations, loom.int32)

        def cond_fn(k, *vs):
            return loom.logical_and(k < limit, _t(cond(*vs)))

        def body_fn(k, *vs):
            out = body(*vs)
            out = [out] if not isinstance(out, (list, tuple)) else list(out)
            return (k + 1, *[_t(o) for o in out])

        vars_ = [_t(0, loom.int32)] + vars_
    else:
        def body_fn(*vs):
            out = body(*vs)
            out = [out] if not isinstance(out, (list, tuple)) else list(out)
            if len(out) != len(vs):
                raise LoomValueError(f"loom.tf.while_loop: body returned {len(out)} values for {len(vs)} loop "
                                     "variables")
            return tuple(_t(o) for o in out)
    n_vars = len(vars_)
    if loom.tracing():
        cond_fn, body_fn, captured = _lift_captures(cond_fn, body_fn, n_vars)
        vars_ = vars_ + captured
    out = loom.while_loop(cond_fn, body_fn, tuple(vars_))
    out = list(out)[:n_vars]
    if maximum_iterations is not None:
        out = out[1:]
    if single:
        return out[0]
    return type(loop_vars)(out) if isinstance(loop_vars, tuple) else out


def _captured_tensors(fn, seen: dict) -> list:
    """The tensors `fn` (and functions it closes over) reads through its closure."""
    cells = []
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            v = cell.cell_contents
        except ValueError:  # An empty cell.
            continue
        if isinstance(v, Tensor):
            cells.append(cell)
            seen.setdefault(id(v), v)
        elif isinstance(v, types.FunctionType) and v is not fn:
            cells.extend(_captured_tensors(v, seen))
    return cells


def _rebind(fn, subst: dict):
    """A copy of `fn` whose closed-over tensors (by identity) are replaced by `subst`'s values."""
    if not isinstance(fn, types.FunctionType) or not fn.__closure__:
        return fn
    new_cells = []
    for cell in fn.__closure__:
        try:
            v = cell.cell_contents
        except ValueError:
            new_cells.append(cell)
            continue
        if isinstance(v, Tensor) and id(v) in subst:
            new_cells.append(types.CellType(subst[id(v)]))
        elif isinstance(v, types.FunctionType) and v is not fn:
            new_cells.append(types.CellType(_rebind(v, subst)))
        else:
            new_cells.append(cell)
    g = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, tuple(new_cells))
    g.__kwdefaults__ = fn.__kwdefaults__
    return g


def _lift_captures(cond_fn, body_fn, n_vars: int):
    """Inside a trace, tensors the loop's functions close over become extra loop variables (TensorFlow captures
    them), so the loop's subgraphs read them as inputs."""
    seen: dict = {}
    _captured_tensors(cond_fn, seen)
    _captured_tensors(body_fn, seen)
    captured = list(seen.values())
    if not captured:
        return cond_fn, body_fn, []

    def subst(extra):
        return {id(c): e for c, e in zip(captured, extra)}

    def cond2(*vs):
        return _rebind(cond_fn, subst(vs[n_vars:]))(*vs[:n_vars])

    def body2(*vs):
        out = _rebind(body_fn, subst(vs[n_vars:]))(*vs[:n_vars])
        out = [out] if isinstance(out, Tensor) else list(out)
        return (*out, *vs[n_vars:])
    return cond2, body2, captured


def _elems_list(elems, op: str):
    """The per-element slices of `elems` (a tensor or a tuple/list of tensors) and how to regroup them."""
    if isinstance(elems, (list, tuple)):
        ts = [_t(e) for e in elems]
        if not ts:
            raise LoomValueError(f"loom.tf.{op}: elems must hold at least one tensor")
        n = ts[0].shape[0]
        if any(t.shape[0] != n for t in ts):
            raise LoomValueError(f"loom.tf.{op}: all elems must have the same first dimension, got "
                                 f"{[t.shape[0] for t in ts]}")
        return n, [type(elems)(t[i] for t in ts) if isinstance(elems, tuple) else [t[i] for t in ts]
                   for i in range(n)]
    x = _t(elems)
    if x.ndim == 0:
        raise LoomValueError(f"loom.tf.{op}: elems must have at least one dimension, got a scalar")
    return x.shape[0], [x[i] for i in range(x.shape[0])]


def _stack_outputs(outs, op: str):
    if not outs:
        raise LoomValueError(f"loom.tf.{op}: elems has no elements along axis 0")
    first = outs[0]
    if isinstance(first, (list, tuple)):
        return type(first)(loom.stack([_t(o[k]) for o in outs]) for k in range(len(first)))
    return loom.stack([_t(o) for o in outs])


def map_fn(fn, elems, dtype=None, parallel_iterations=None, back_prop=True, swap_memory=False,
           infer_shape=True, name=None, fn_output_signature=None):
    """`fn` applied to each slice of `elems` along axis 0, the results stacked.

    Examples
    --------
    >>> import loom.tf as tf
    >>> tf.map_fn(lambda r: tf.reduce_sum(r), tf.constant([[1, 2], [3, 4]])).numpy()
    array([3, 7], dtype=int32)
    """
    _, items = _elems_list(elems, "map_fn")
    return _stack_outputs([fn(e) for e in items], "map_fn")


def scan(fn, elems, initializer=None, parallel_iterations=10, back_prop=True, swap_memory=False,
         infer_shape=True, reverse=False, name=None):
    """The running values `a = fn(a, x)` over the slices `x` of `elems`, stacked.

    Examples
    --------
    >>> import loom.tf as tf
    >>> tf.scan(lambda a, x: a + x, tf.constant([1, 2, 3, 4])).numpy()
    array([ 1,  3,  6, 10], dtype=int32)
    """
    _, items = _elems_list(elems, "scan")
    if reverse:
        items = items[::-1]
    if initializer is None:
        acc, rest, outs = items[0], items[1:], [items[0]]
    else:
        acc, rest, outs = initializer, items, []
    for x in rest:
        acc = fn(acc, x)
        outs.append(acc)
    if reverse:
        outs = outs[::-1]
    return _stack_outputs(outs, "scan")


def foldl(fn, elems, initializer=None, parallel_iterations=10, back_prop=True, swap_memory=False, name=None):
    """`fn(...fn(fn(initializer, e0), e1)..., en)` over the slices of `elems` (the first slice without
    `initializer`).

    Examples
    --------
    >>> import loom.tf as tf
    >>> tf.foldl(lambda a, x: a * x, tf.constant([1, 2, 3, 4])).numpy()
    array(24, dtype=int32)
    """
    _, items = _elems_list(elems, "foldl")
    acc, rest = (items[0], items[1:]) if initializer is None else (initializer, items)
    for x in rest:
        acc = fn(acc, x)
    return acc


def foldr(fn, elems, initializer=None, parallel_iterations=10, back_prop=True, swap_memory=False, name=None):
    """`foldl` from the last slice of `elems` to the first."""
    _, items = _elems_list(elems, "foldr")
    items = items[::-1]
    acc, rest = (items[0], items[1:]) if initializer is None else (initializer, items)
    for x in rest:
        acc = fn(acc, x)
    return acc


def custom_gradient(f=None):
    """Decorate `f(*x) -> (y, grad_fn)` so that the gradient of `y` is `grad_fn(dy)` (TensorFlow's
    `tf.custom_gradient`); `grad_fn` returns one gradient per tensor argument.

    Examples
    --------
    >>> import loom.tf as tf
    >>> @tf.custom_gradient
    ... def clip_grad(x):
    ...     return tf.identity(x), lambda dy: tf.clip_by_value(dy, -0.5, 0.5)
    >>> x = tf.constant([1.0, 2.0])
    >>> with tf.GradientTape() as t:
    ...     t.watch(x)
    ...     y = tf.reduce_sum(clip_grad(x) * 3.0)
    >>> t.gradient(y, x).numpy()
    array([0.5, 0.5], dtype=float32)
    """
    if f is None:
        return custom_gradient

    @functools.wraps(f)
    def wrapped(*args, **kwargs):
        holder = {}

        class _CustomGradient(loom.autograd.Function):
            @staticmethod
            def forward(ctx, *xs):
                out, grad_fn = f(*xs, **kwargs)
                if not callable(grad_fn):
                    raise LoomTypeError(f"loom.tf.custom_gradient: {f.__name__} must return (outputs, grad_fn), "
                                        f"got a {type(grad_fn).__name__} as grad_fn")
                if "variables" in inspect.signature(grad_fn).parameters:
                    raise LoomValueError(f"loom.tf.custom_gradient: {f.__name__}'s grad_fn takes `variables`; "
                                         "gradients for variables used inside a custom_gradient function are "
                                         "not supported, pass the variables as arguments instead")
                holder["grad_fn"] = grad_fn
                holder["multi"] = isinstance(out, (list, tuple))
                return tuple(out) if holder["multi"] else out

            @staticmethod
            def backward(ctx, *dys):
                grads = holder["grad_fn"](*dys)
                grads = list(grads) if isinstance(grads, (list, tuple)) else [grads]
                n_tensors = sum(isinstance(a, Tensor) for a in args)
                if len(grads) != n_tensors:
                    raise LoomValueError(f"loom.tf.custom_gradient: {f.__name__}'s grad_fn returned {len(grads)} "
                                         f"gradients for {n_tensors} tensor arguments")
                it = iter(grads)
                return tuple(next(it) if isinstance(a, Tensor) else None for a in args)

        xs = [_t(a) if isinstance(a, (float, int, list)) and not isinstance(a, bool) else a for a in args]
        args = tuple(xs)
        return _CustomGradient.apply(*args)
    return wrapped


@contextlib.contextmanager
def name_scope(name, *args, **kwargs):
    """A no-op scope (loom names no graph ops); yields the scope name as TensorFlow does."""
    yield name if isinstance(name, str) else ""


@contextlib.contextmanager
def control_dependencies(control_inputs):
    """A no-op scope: loom runs eager code in program order and traces data dependencies."""
    yield


@contextlib.contextmanager
def device(device_name):
    """A no-op scope: loom.tf places everything on the CPU."""
    yield


@contextlib.contextmanager
def init_scope():
    """A no-op scope (variables are created eagerly in loom)."""
    yield


def no_op(name=None):
    """Does nothing (control-dependency anchor in TensorFlow)."""
    return None


def group(*inputs, **kwargs):
    """Does nothing (groups control dependencies in TensorFlow)."""
    return None


def py_function(func, inp, Tout=None, name=None):
    """`func(*inp)` called eagerly on the tensors, results converted to tensors."""
    out = func(*inp)
    if isinstance(out, (list, tuple)):
        return [_t(o) for o in out]
    return _t(out) if out is not None else None


numpy_function = py_function


class Module:
    """A container of variables and sub-modules (`tf.Module`): `variables`, `trainable_variables`,
    `submodules`, `name`.

    Examples
    --------
    >>> import loom.tf as tf
    >>> class Lin(tf.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.w = tf.Variable(tf.ones([2, 1]))
    ...         self.b = tf.Variable(tf.zeros([1]), trainable=False)
    >>> m = Lin()
    >>> len(m.variables), len(m.trainable_variables)
    (2, 1)
    """

    def __init__(self, name=None):
        self._name = name or _snake(type(self).__name__)

    @property
    def name(self):
        return self._name

    @property
    def name_scope(self):
        return name_scope(self._name)

    def _walk(self, seen):
        for _, v in sorted(vars(self).items()):
            yield from _walk_value(v, seen)

    @property
    def variables(self):
        from loom.tf._core import Variable
        return tuple(v for v in self._walk(set()) if isinstance(v, Variable))

    @property
    def trainable_variables(self):
        return tuple(v for v in self.variables if getattr(v, "trainable", True))

    @property
    def submodules(self):
        return tuple(v for v in self._walk(set()) if isinstance(v, Module))

    @classmethod
    def with_name_scope(cls, method):
        return method


def _walk_value(v, seen):
    from loom.tf._core import Variable
    if id(v) in seen:
        return
    if isinstance(v, Variable):
        seen.add(id(v))
        yield v
    elif isinstance(v, Module):
        seen.add(id(v))
        yield v
        yield from v._walk(seen)
    elif isinstance(v, (list, tuple)):
        for x in v:
            yield from _walk_value(x, seen)
    elif isinstance(v, dict):
        for k in sorted(v, key=str):
            yield from _walk_value(v[k], seen)
    elif hasattr(v, "trainable_weights") and hasattr(v, "weights"):  # A Keras layer or model.
        for w in v.weights:
            yield from _walk_value(w, seen)


def _snake(name: str) -> str:
    out = []
    for i, c in enumerate(name):
        if c.isupper() and i:
            out.append("_")
        out.append(c.lower())
    return "".join(out)
