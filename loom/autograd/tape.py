"""TensorFlow-style GradientTape over loom's autograd."""
from __future__ import annotations

from typing import Any

from loom.errors import AutogradError, LoomTypeError, LoomValueError

# Tapes inside whose `with` block the program is: a gradient computed there is
# itself recorded (differentiable), which is how nested tapes give higher orders.
_RECORDING: list = []


class GradientTape:
    """Record ops on watched tensors, then ask for gradients, as `tf.GradientTape`.

    Examples
    --------
    >>> x = loom.tensor(2.0)
    >>> with loom.GradientTape() as tape:
    ...     tape.watch(x)
    ...     y = x * x
    >>> float(tape.gradient(y, x))
    4.0
    """

    def __init__(self, persistent: bool = False, watch_accessed_variables: bool = True) -> None:
        self.persistent = persistent
        self._watched: list = []
        self._enabled: list = []  # Watched tensors this tape made require grad, only while recording.
        self._recording = False
        self._used = False
        self._grad_ctx: Any = None

    def __enter__(self) -> GradientTape:
        from loom.autograd.grad_mode import enable_grad
        self._recording = True
        _RECORDING.append(self)
        self._grad_ctx = enable_grad()
        self._grad_ctx.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._recording = False
        if self in _RECORDING:
            _RECORDING.remove(self)
        self._grad_ctx.__exit__(*exc)
        # Ops after the block must not record: watching does not change the tensor for good.
        for t in self._enabled:
            t.requires_grad = False

    def watch(self, tensors) -> None:
        """Track `tensors` (a tensor or a nested list of them) as sources of gradients."""
        from loom.tensor import Tensor
        items = tensors if isinstance(tensors, (list, tuple)) else [tensors]
        for t in items:
            if isinstance(t, (list, tuple)):
                self.watch(t)
                continue
            if not isinstance(t, Tensor):
                raise LoomTypeError(f"loom.GradientTape.watch: expected Tensors, got {type(t).__name__}")
            if not t.requires_grad:
                t.requires_grad_(True)
                self._enabled.append(t)
            self._watched.append(t)

    def watched_variables(self) -> tuple:
        return tuple(self._watched)

    @staticmethod
    def _seeds(targets, output_gradients) -> list:
        """One cotangent per target; None means ones (TF sums over a non-scalar target)."""
        if output_gradients is None:
            return [None] * len(targets)
        seeds = list(output_gradients) if isinstance(output_gradients, (list, tuple)) else [output_gradients]
        if len(seeds) != len(targets):
            raise AutogradError(f"loom.GradientTape.gradient: {len(seeds)} output_gradients for "
                                f"{len(targets)} targets")
        return seeds

    def gradient(self, target, sources, output_gradients=None, unconnected_gradients: str = "none"):
        """d(target)/d(sources), with the structure of `sources`; None for an unconnected source."""
        from loom.autograd.engine import grad
        from loom.tensor import Tensor, zeros_like
        if self._used and not self.persistent:
            raise AutogradError("loom.GradientTape.gradient: a non-persistent tape can only compute "
                                "gradients once; create it with persistent=True")
        self._used = True
        if unconnected_gradients not in ("none", "zero"):
            raise LoomValueError(f"loom.GradientTape.gradient: unconnected_gradients must be 'none' or 'zero', "
                             f"got {unconnected_gradients!r}")
        single = isinstance(sources, Tensor)
        srcs = [sources] if single else list(sources)
        targets = target if isinstance(target, (list, tuple)) else [target]
        from loom.tensor import ones_like
        # The tape's own sources require grad again for the walk back through what it recorded.
        off = [t for t in self._enabled if not t.requires_grad]
        for t in off:
            t.requires_grad = True
        try:
            pairs = [(t, g) for k, (t, g) in enumerate(zip(targets, self._seeds(targets, output_gradients)))
                     if isinstance(t, Tensor) and t.requires_grad]
            live = [k for k, s in enumerate(srcs) if isinstance(s, Tensor) and s.requires_grad]
            grads: list = [None] * len(srcs)
            if pairs and live:
                found = grad([t for t, _ in pairs], [srcs[k] for k in live],
                             grad_outputs=[g if g is not None else ones_like(t) for t, g in pairs],
                             allow_unused=True, create_graph=bool(_RECORDING), retain_graph=True)
                for k, g in zip(live, found):
                    grads[k] = g
        finally:
            for t in off:
                t.requires_grad = False
        if unconnected_gradients == "zero":
            grads = [zeros_like(s) if g is None else g for g, s in zip(grads, srcs)]
        return grads[0] if single else grads
