"""`tf.function`: AutoGraph-convert a Python function, then trace and replay it with `loom.function`."""
from __future__ import annotations

import functools
import warnings
from typing import Any, Callable

import numpy as np

import loom
from loom.errors import LoomError, LoomTypeError, LoomWarning
from loom.tensor import Tensor
from loom.tf import autograph

_run_eagerly = [False]
_DATA_READ = "read the value of a tensor it computed"  # loom.function's error for a value read mid-trace.


def run_functions_eagerly(run_eagerly: bool) -> None:
    """Run every `tf.function` as plain Python (for debugging), as `tf.config.run_functions_eagerly`."""
    _run_eagerly[0] = bool(run_eagerly)


def functions_run_eagerly() -> bool:
    """Whether `run_functions_eagerly(True)` is in effect."""
    return _run_eagerly[0]


def _as_tensors(out):
    """Python numbers a tf.function returns come back as tensors, as TensorFlow's outputs do."""
    if isinstance(out, (bool, int, float, np.number)) and not isinstance(out, Tensor):
        from loom.tf._core import convert_to_tensor
        return convert_to_tensor(out)
    if isinstance(out, list):
        return [_as_tensors(v) for v in out]
    if isinstance(out, tuple) and not hasattr(out, "_fields"):
        return tuple(_as_tensors(v) for v in out)
    if isinstance(out, dict):
        return {k: _as_tensors(v) for k, v in out.items()}
    return out


def _outer_tape_recording() -> bool:
    from loom.autograd import tape as _tape
    from loom.autograd.grad_mode import is_grad_enabled
    return bool(_tape._RECORDING) and is_grad_enabled()


def _split(obj, leaves: list):
    """A hashable description of `obj` with its tensors pulled out into `leaves`."""
    if isinstance(obj, Tensor):
        leaves.append(obj)
        return ("T",)
    if isinstance(obj, np.ndarray):
        leaves.append(loom.tensor(obj))
        return ("T",)
    if isinstance(obj, (list, tuple)):
        return ("L" if isinstance(obj, list) else "U", tuple(_split(v, leaves) for v in obj))
    if isinstance(obj, dict):
        return ("D", tuple((k, _split(obj[k], leaves)) for k in obj))
    try:
        hash(obj)
    except TypeError:
        raise LoomTypeError(f"loom.tf.function: argument of type {type(obj).__name__} is neither a tensor, "
                            "an array, a list/tuple/dict of them, nor hashable") from None
    return ("V", obj)


def _join(spec, leaves: list, pos: list):
    kind = spec[0]
    if kind == "T":
        pos[0] += 1
        return leaves[pos[0] - 1]
    if kind == "V":
        return spec[1]
    if kind == "D":
        return {k: _join(v, leaves, pos) for k, v in spec[1]}
    items = [_join(v, leaves, pos) for v in spec[1]]
    return items if kind == "L" else tuple(items)


def _flat_tensors(out) -> list:
    if isinstance(out, Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for v in out for t in _flat_tensors(v)]
    if isinstance(out, dict):
        return [t for k in out for t in _flat_tensors(out[k])]
    return []


def _replace_tensors(out, it):
    if isinstance(out, Tensor):
        return next(it)
    if isinstance(out, list):
        return [_replace_tensors(v, it) for v in out]
    if isinstance(out, tuple) and not hasattr(out, "_fields"):
        return tuple(_replace_tensors(v, it) for v in out)
    if isinstance(out, dict):
        return {k: _replace_tensors(v, it) for k, v in out.items()}
    return out


def _sources(out, leaves) -> list:
    """The leaf tensors that require grad (variables) which `out` depends on, other than the arguments."""
    args = {id(t) for t in leaves}
    found: dict = {}
    stack, seen = _flat_tensors(out), set()
    while stack:
        t = stack.pop()
        if id(t) in seen or id(t) in args:
            continue
        seen.add(id(t))
        if t._ctx is None:
            if t.requires_grad and id(t) not in args:
                found[id(t)] = t
            continue
        stack.extend(t._ctx.inputs)
    return list(found.values())


class Function:
    """A Python function run as one traced, compiled loom graph, as `tf.function`.

    The function's `if`/`while`/`for` statements over tensors are rewritten by
    AutoGraph (`loom.tf.autograph`) into `loom.cond` / `loom.while_loop`; the
    result is traced by `loom.function`: the first call runs eagerly (variables
    get created), the second traces and compiles, later calls with the same
    argument shapes, dtypes and Python values replay the compiled graph.
    Variable updates (`assign`, optimizer steps) are written back.

    Examples
    --------
    >>> import loom.tf as tf
    >>> @tf.function
    ... def f(x):
    ...     if tf.reduce_sum(x) > 0:
    ...         y = x * 2
    ...     else:
    ...         y = -x
    ...     return y
    >>> [f(tf.constant([1.0, -3.0])).numpy().tolist() for _ in range(3)][-1]
    [-1.0, 3.0]
    """

    def __init__(self, fn: Callable, input_signature=None, autograph_: bool = True, jit_compile=None,
                 reduce_retracing: bool = False, name: str | None = None) -> None:
        functools.update_wrapper(self, fn)
        self.python_function = fn
        self.input_signature = None if input_signature is None else list(input_signature)
        self._converted = autograph.convert(fn) if autograph_ else fn
        self._traced = loom.function(self._call_flat)
        self._vjp_traced = loom.function(self._vjp_flat)
        self._under_tape: dict = {}  # Argument types -> variables the outputs depend on (False: run eagerly).
        self._n_out: dict = {}
        self._eager_only = False

    def _call_flat(self, spec, *leaves):
        args, kwargs = _join(spec, list(leaves), [0])
        return self._converted(*args, **kwargs)

    def _check_signature(self, args) -> None:
        sig = self.input_signature
        if sig is None:
            return
        if len(args) != len(sig):
            raise LoomTypeError(f"loom.tf.function {self.__name__}: input_signature has {len(sig)} entries, "
                                f"the call passed {len(args)} positional arguments")
        for k, (a, s) in enumerate(zip(args, sig)):
            if hasattr(s, "is_compatible_with") and not s.is_compatible_with(a):
                t = a if isinstance(a, Tensor) else loom.tensor(np.asarray(a))
                raise LoomTypeError(f"loom.tf.function {self.__name__}: argument {k} ({t.dtype.name}"
                                    f"{list(t.shape)}) does not match input_signature {s}")

    def __call__(self, *args, **kwargs) -> Any:
        self._check_signature(args)
        if loom.tracing():
            return self._converted(*args, **kwargs)
        if _run_eagerly[0]:
            return _as_tensors(self._converted(*args, **kwargs))
        if _outer_tape_recording():
            return self._call_under_tape(args, kwargs)
        leaves: list = []
        spec = _split((args, kwargs), leaves)
        if self._eager_only:
            return _as_tensors(self._converted(*args, **kwargs))
        try:
            return _as_tensors(self._traced(spec, *leaves))
        except LoomError as e:
            if _DATA_READ not in str(e):
                raise
        # The body reads tensor values in Python (a Keras metric's update_state, .numpy(), a Python `if` on
        # data AutoGraph cannot convert): TensorFlow would trace it as graph ops, loom cannot; run eagerly.
        warnings.warn(f"loom.tf.function {self.__name__}: the function reads tensor values in Python (for "
                      "example a Keras metric's update_state), so it runs eagerly instead of as a compiled "
                      "graph; results are the same", LoomWarning, stacklevel=2)
        self._eager_only = True
        return _as_tensors(self._converted(*args, **kwargs))

    # ------------------------------------------------------------ differentiable replay
    def _call_under_tape(self, args, kwargs):
        """A call an enclosing GradientTape records: the compiled replay as one differentiable op.

        The first call with given argument types runs eagerly (the tape records it op by op) and finds
        the variables the outputs depend on. Later calls replay the compiled function; their backward
        replays a second compiled function that recomputes the outputs and returns the vector-Jacobian
        product for the arguments and those variables. A function that writes variables or draws random
        numbers keeps running eagerly (a recomputation would repeat the write or draw other numbers).
        """
        from loom.tensor import default_generator
        from loom.tf import _core
        leaves: list = []
        spec = _split((args, kwargs), leaves)
        key = (spec, tuple((tuple(t.shape), t.dtype, bool(t.requires_grad)) for t in leaves))
        entry = self._under_tape.get(key)
        if entry is None:
            writes, draws = _core.ASSIGNS[0], default_generator._counter
            out = self._converted(*args, **kwargs)
            pure = _core.ASSIGNS[0] == writes and default_generator._counter == draws
            self._under_tape[key] = _sources(out, leaves) if pure else False
            return _as_tensors(out)
        if entry is False:
            return _as_tensors(self._converted(*args, **kwargs))
        grad_pos = [k for k, t in enumerate(leaves) if t.dtype.is_differentiable]
        fn = self

        class _Replay(loom.autograd.Function):
            @staticmethod
            def forward(ctx, *sources):
                with loom.no_grad():
                    out = fn._traced(spec, *leaves)
                holder["out"] = out
                flat = _flat_tensors(out)
                fn._n_out[key] = len(flat)
                return tuple(flat)

            @staticmethod
            def backward(ctx, *dys):
                dys = [loom.zeros_like(o) if d is None else d for d, o in zip(dys, holder["flat"])]
                grads = fn._vjp(spec, key, tuple(grad_pos), *leaves, *dys)
                return tuple(grads)

        holder: dict = {}
        sources = [leaves[k] for k in grad_pos] + list(entry)
        flat_out = _Replay.apply(*sources)
        flat_out = list(flat_out) if isinstance(flat_out, (tuple, list)) else [flat_out]
        holder["flat"] = flat_out
        return _as_tensors(_replace_tensors(holder["out"], iter(flat_out)))

    def _vjp_flat(self, spec, key, grad_pos, *flat):
        n = len(flat) - self._n_out[key]
        leaves, dys = list(flat[:n]), list(flat[n:])
        with loom.enable_grad():
            for k in grad_pos:
                leaves[k] = leaves[k].detach().requires_grad_(True)
            args, kwargs = _join(spec, leaves, [0])
            outs = _flat_tensors(self._converted(*args, **kwargs))
            sources = [leaves[k] for k in grad_pos] + list(self._under_tape[key])
            pairs = [(o, d) for o, d in zip(outs, dys) if o.requires_grad]
            if not pairs:
                return tuple(loom.zeros_like(s) for s in sources)
            grads = loom.autograd.grad([o for o, _ in pairs], sources, grad_outputs=[d for _, d in pairs],
                                       allow_unused=True)
        return tuple(loom.zeros_like(s) if g is None else g for g, s in zip(grads, sources))

    def _vjp(self, spec, key, grad_pos, *flat):
        return self._vjp_traced(spec, key, grad_pos, *flat)

    def __get__(self, instance, owner=None):
        # A method: the instance is the first argument (one trace per instance, keyed by identity).
        return self if instance is None else functools.partial(self, instance)

    def get_concrete_function(self, *args, **kwargs):
        """A callable for these argument types (here: the function itself, traced on first use)."""
        return self

    def experimental_get_tracing_count(self) -> int:
        """How many times the function has been traced."""
        return self._traced.trace_count


def function(func: Callable | None = None, input_signature=None, autograph: bool = True, jit_compile=None,
             reduce_retracing: bool = False, experimental_relax_shapes=None, name: str | None = None, **kwargs):
    """Compile `func` into a loom graph with AutoGraph, as `tf.function` (decorator or call).

    Parameters
    ----------
    func : the Python function (or method) to compile
    input_signature : optional list of `tf.TensorSpec` the positional arguments must match
    autograph : rewrite `if`/`while`/`for` over tensors into graph control flow (default True)
    jit_compile, reduce_retracing, experimental_relax_shapes : accepted for compatibility

    Examples
    --------
    >>> import loom.tf as tf
    >>> square = tf.function(lambda x: x * x)
    >>> float(square(tf.constant(3.0)))
    9.0
    """
    def wrap(f):
        return Function(f, input_signature=input_signature, autograph_=autograph, jit_compile=jit_compile,
                        reduce_retracing=reduce_retracing, name=name)
    return wrap if func is None else wrap(func)
