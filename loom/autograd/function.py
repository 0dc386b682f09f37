"""User-defined differentiable operations: `Function` with PyTorch's interface.

A subclass writes ``forward`` and ``backward`` as static methods over loom
tensors. ``Function.apply`` runs ``forward`` with gradient recording off and
records one backward node for each differentiable output; during backward,
that node calls the subclass's ``backward`` with the gradients of the outputs.
Because ``forward`` and ``backward`` are ordinary loom code, a `Function`
works eagerly and under `loom.function` (the trace records the loom ops they
run), and ``backward`` itself is differentiable unless it is marked
`once_differentiable`.

Examples
--------
>>> import loom
>>> class Cube(loom.autograd.Function):
...     @staticmethod
...     def forward(ctx, x):
...         ctx.save_for_backward(x)
...         return x ** 3
...     @staticmethod
...     def backward(ctx, g):
...         (x,) = ctx.saved_tensors
...         return 3 * x ** 2 * g
>>> x = loom.tensor([1.0, 2.0], requires_grad=True)
>>> Cube.apply(x).sum().backward()
>>> x.grad.tolist()
[3.0, 12.0]
"""
from __future__ import annotations

import functools
from typing import Any, Callable

from loom.autograd.grad_mode import is_grad_enabled, no_grad
from loom.errors import AutogradError, LoomTypeError, fmt_shape


class FunctionCtx:
    """The ``ctx`` a `Function`'s ``forward`` and ``backward`` share.

    Attributes
    ----------
    needs_input_grad : tuple of bool
        One entry per argument of ``forward``: whether that argument is a
        tensor that requires grad (so ``backward`` may skip the others).

    Any other attribute may be set in ``forward`` and read in ``backward``.
    """

    def __init__(self, needs_input_grad: tuple[bool, ...]):
        self.needs_input_grad = needs_input_grad
        self._saved: tuple = ()
        self._saved_versions: tuple = ()
        self._non_differentiable: set[int] = set()
        self._materialize_grads = True
        self._fn_name = "Function"
        self._records = 0  # Backward records (one per differentiable output) not yet freed by a backward pass.

    def save_for_backward(self, *tensors) -> None:
        """Keep `tensors` (or None) for ``backward``, where `saved_tensors` gives them back."""
        from loom.tensor import Tensor
        for k, t in enumerate(tensors):
            if t is not None and not isinstance(t, Tensor):
                raise LoomTypeError(f"loom.autograd.Function {self._fn_name}: save_for_backward takes tensors or "
                                    f"None; argument {k} is a {type(t).__name__} (keep other values as ctx "
                                    "attributes)")
        self._saved = tuple(tensors)
        self._saved_versions = tuple(t._version if t is not None else None for t in tensors)

    @property
    def saved_tensors(self) -> tuple:
        """The tensors given to `save_for_backward`; raises if one was modified in place since."""
        for k, (t, v) in enumerate(zip(self._saved, self._saved_versions)):
            if t is not None and t._version != v:
                raise AutogradError(
                    f"loom.autograd.Function {self._fn_name}: saved tensor {k} ({t.dtype.name}"
                    f"{fmt_shape(t.shape)}) was modified by an in-place operation after save_for_backward "
                    f"(version {v} -> {t._version}); clone it before modifying it")
        return self._saved

    def mark_non_differentiable(self, *outputs) -> None:
        """Declare outputs (e.g. indices) that get no gradient; their grads reach ``backward`` as zeros."""
        self._non_differentiable.update(id(o) for o in outputs)

    def set_materialize_grads(self, value: bool) -> None:
        """With False, outputs that got no gradient pass None to ``backward`` instead of zeros."""
        self._materialize_grads = bool(value)

    def mark_dirty(self, *tensors) -> None:
        """In-place forward functions are not supported: loom raises rather than give wrong gradients."""
        raise AutogradError(f"loom.autograd.Function {self._fn_name}: mark_dirty (a forward that modifies its "
                            "inputs in place) is not supported; return a new tensor instead")


class _Backward:
    """The backward record of one output of a `Function` call (what the engine calls as a rule)."""

    kind = "custom"

    def __init__(self, fn: type, ctx: FunctionCtx, index: int, outputs: list, tensor_args: list[int],
                 nargs: int):
        self.fn = fn
        self.ctx = ctx
        self.index = index           # Which output this record differentiates.
        self.outputs = outputs       # (shape, dtype) of every output, for zero gradients.
        self.tensor_args = tensor_args  # Position in forward's arguments of each tensor input.
        self.nargs = nargs
        self.name = fn.__name__
        self.vjp = self._vjp
        ctx._records += 1

    def free_saved(self) -> None:
        """A backward pass without ``retain_graph`` went through this record: once every output's record
        has been through one, the saved tensors are let go (as PyTorch frees them)."""
        ctx = self.ctx
        ctx._records -= 1
        if ctx._records <= 0:
            ctx._saved = ()
            ctx._saved_versions = ()

    def _vjp(self, g, *args_and_more, needs=None):
        from loom.tensor import Tensor, zeros
        n_in = len(self.tensor_args)
        inputs = args_and_more[:n_in]
        grads = []
        for k, (shape, dtype) in enumerate(self.outputs):
            if k == self.index:
                grads.append(g)
            elif self.ctx._materialize_grads and shape is not None:
                grads.append(zeros(shape, dtype=dtype))
            else:
                grads.append(None)
        if needs is not None:
            need = [False] * self.nargs
            for pos, n in zip(self.tensor_args, needs):
                need[pos] = bool(n)
            self.ctx.needs_input_grad = tuple(need)
        result = self.fn.backward(self.ctx, *grads)
        if not isinstance(result, tuple):
            result = (result,)
        while len(result) > self.nargs and result[-1] is None:
            result = result[:-1]
        if len(result) != self.nargs:
            raise AutogradError(f"loom.autograd.Function {self.fn.__name__}: backward returned {len(result)} "
                                f"gradients but forward took {self.nargs} arguments (return None for the "
                                "ones without a gradient)")
        out = []
        for pos, inp in zip(self.tensor_args, inputs):
            gi = result[pos]
            if gi is not None:
                if not isinstance(gi, Tensor):
                    raise LoomTypeError(f"loom.autograd.Function {self.fn.__name__}: backward's gradient for "
                                        f"argument {pos} is a {type(gi).__name__}, expected a Tensor or None")
                if tuple(gi.shape) != tuple(inp.shape):
                    if gi.numel() == inp.numel() == 1 or _broadcasts(tuple(gi.shape), tuple(inp.shape)):
                        gi = _reduce_to(gi, tuple(inp.shape))
                    else:
                        raise AutogradError(
                            f"loom.autograd.Function {self.fn.__name__}: backward returned a gradient of shape "
                            f"{fmt_shape(gi.shape)} for argument {pos}, whose shape is {fmt_shape(inp.shape)}")
            out.append(gi)
        return out


def _broadcasts(src: tuple, dst: tuple) -> bool:
    """Whether `src` is `dst` broadcast to more or larger dims (so summing gives `dst` back)."""
    if len(src) < len(dst):
        return False
    for a, b in zip(src[len(src) - len(dst):], dst):
        if b != 1 and a != b:
            return False
    return True


def _reduce_to(g, shape: tuple):
    lead = g.ndim - len(shape)
    if lead:
        g = g.sum(tuple(range(lead)))
    axes = tuple(i for i, (a, b) in enumerate(zip(g.shape, shape)) if b == 1 and a != 1)
    if axes:
        g = g.sum(axes, keepdim=True)
    return g.reshape(shape)


class Function:
    """Base class of user-defined differentiable operations (PyTorch's ``torch.autograd.Function``).

    Subclasses define ``forward(ctx, *args, **kwargs)`` and ``backward(ctx,
    *grad_outputs)`` as static methods and are called through `apply`.
    ``backward`` returns one gradient (or None) per argument of ``forward``.
    PyTorch 2's split style also works: ``forward(*args)`` without ``ctx``
    plus ``setup_context(ctx, inputs, output)``.

    ``forward`` runs with gradient recording off. ``backward`` runs with it on
    only for ``create_graph=True`` (higher-order gradients), unless wrapped in
    `once_differentiable`. With several outputs, ``backward`` is called once
    for each output that receives a gradient, with zeros for the others (by
    linearity the sum is the same as one call with every gradient).
    """

    @staticmethod
    def forward(ctx: FunctionCtx, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("loom.autograd.Function: subclasses must define forward")

    @staticmethod
    def backward(ctx: FunctionCtx, *grad_outputs: Any) -> Any:
        raise NotImplementedError("loom.autograd.Function: subclasses must define backward")

    @classmethod
    def apply(cls, *args: Any, **kwargs: Any) -> Any:
        """Run ``forward`` on `args` and record ``backward`` for the outputs that need a gradient."""
        from loom.tensor import Context, Tensor
        if kwargs and cls._split_style():
            raise LoomTypeError(f"loom.autograd.Function {cls.__name__}: keyword arguments are not supported "
                                "with setup_context; pass them positionally")
        needs = tuple(isinstance(a, Tensor) and a.requires_grad for a in args)
        ctx = FunctionCtx(needs)
        ctx._fn_name = cls.__name__
        with no_grad():
            if cls._split_style():
                output = cls.forward(*args)
                cls.setup_context(ctx, args, output)
            else:
                output = cls.forward(ctx, *args, **kwargs)
        single = not isinstance(output, (tuple, list))
        outs = [output] if single else list(output)
        record = is_grad_enabled() and any(needs)
        tensor_args = [k for k, a in enumerate(args) if isinstance(a, Tensor)]
        inputs = tuple(args[k] for k in tensor_args)
        specs = [(tuple(o.shape), o.dtype) if isinstance(o, Tensor) else (None, None) for o in outs]
        wrapped = []
        for k, o in enumerate(outs):
            if (record and isinstance(o, Tensor) and o.dtype.is_floating_point
                    and id(o) not in ctx._non_differentiable):
                rule = _Backward(cls, ctx, k, specs, tensor_args, len(args))
                o = Tensor._wrap(o._node, Context(rule, inputs, {}), True)
            wrapped.append(o)
        if single:
            return wrapped[0]
        return type(output)(wrapped) if isinstance(output, tuple) else wrapped

    @staticmethod
    def setup_context(ctx: FunctionCtx, inputs: tuple, output: Any) -> None:
        """PyTorch 2's split style: save what ``backward`` needs from `inputs` and `output` (override it)."""
        raise NotImplementedError("loom.autograd.Function: setup_context is only called when a subclass "
                                  "defines it")

    @classmethod
    def _split_style(cls) -> bool:
        """Whether the subclass uses PyTorch 2's ``setup_context`` (forward without ctx)."""
        return cls.setup_context is not Function.setup_context


def once_differentiable(backward: Callable) -> Callable:
    """Decorate a ``backward`` that is not itself differentiable: it runs with gradient recording off.

    The gradients it returns then carry no history, so a higher-order gradient
    through the function does not silently use a wrong derivative: there is none
    to follow (as in PyTorch, where double backward through it is an error).
    """
    @functools.wraps(backward)
    def wrapper(ctx, *grads):
        with no_grad():
            return backward(ctx, *grads)
    return wrapper
