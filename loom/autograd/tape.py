"""TensorFlow-style GradientTape over loom's autograd."""
from __future__ import annotations

from loom.errors import AutogradError


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
        self._recording = False
        self._used = False
        self._grad_ctx = None

    def __enter__(self) -> GradientTape:
        from loom.autograd.grad_mode import enable_grad
        self._recording = True
        self._grad_ctx = enable_grad()
        self._grad_ctx.__enter__()
        return self

    def __exit__(self, *exc) -> bool:
        self._recording = False
        self._grad_ctx.__exit__(*exc)
        return False

    def watch(self, tensors) -> None:
        """Track `tensors` (a tensor or a nested list of them) as sources of gradients."""
        from loom.tensor import Tensor
        items = tensors if isinstance(tensors, (list, tuple)) else [tensors]
        for t in items:
            if isinstance(t, (list, tuple)):
                self.watch(t)
                continue
            if not isinstance(t, Tensor):
                raise TypeError(f"loom.GradientTape.watch: expected Tensors, got {type(t).__name__}")
            if not t.requires_grad:
                t.requires_grad_(True)
            self._watched.append(t)

    def watched_variables(self) -> tuple:
        return tuple(self._watched)

    def gradient(self, target, sources, output_gradients=None, unconnected_gradients: str = "none"):
        """d(target)/d(sources), with the structure of `sources`; None for an unconnected source."""
        from loom.autograd.engine import grad
        from loom.tensor import Tensor, zeros_like
        if self._used and not self.persistent:
            raise AutogradError("loom.GradientTape.gradient: a non-persistent tape can only compute "
                                "gradients once; create it with persistent=True")
        self._used = True
        single = isinstance(sources, Tensor)
        srcs = [sources] if single else list(sources)
        targets = target if isinstance(target, (list, tuple)) else [target]
        from loom.tensor import ones_like
        connected = [t for t in targets if isinstance(t, Tensor) and t.requires_grad]
        if not connected:
            grads = [None] * len(srcs)
        else:
            seeds = None
            if output_gradients is not None:
                seeds = output_gradients if isinstance(output_gradients, (list, tuple)) else [output_gradients]
            else:
                seeds = [ones_like(t) for t in connected]  # TF sums over non-scalar targets.
            grads = list(grad(connected, srcs, grad_outputs=seeds, allow_unused=True,
                              create_graph=self._recording))
        if unconnected_gradients == "zero":
            grads = [zeros_like(s) if g is None else g for g, s in zip(grads, srcs)]
        return grads[0] if single else grads
