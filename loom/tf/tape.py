"""`tf.GradientTape` over `loom.GradientTape`: nested sources and targets, variables, stop_recording."""
from __future__ import annotations

import contextlib
import enum

from loom.autograd import tape as _tape
from loom.autograd.grad_mode import no_grad
from loom.errors import LoomTypeError
from loom.tensor import Tensor


class UnconnectedGradients(enum.Enum):
    """What `GradientTape.gradient` gives for a source the target does not depend on."""

    NONE = "none"
    ZERO = "zero"


def flatten(structure) -> list:
    """The leaves of a nest of lists, tuples and dicts (dicts in sorted key order, as `tf.nest`)."""
    if isinstance(structure, dict):
        return [leaf for k in sorted(structure) for leaf in flatten(structure[k])]
    if isinstance(structure, (list, tuple)):
        return [leaf for v in structure for leaf in flatten(v)]
    return [structure]


def pack_sequence_as(structure, flat: list):
    """`flat`'s values arranged in `structure`'s nesting (the inverse of `flatten`)."""
    it = iter(flat)

    def build(s):
        if isinstance(s, dict):
            out = {k: build(s[k]) for k in sorted(s)}
            return {k: out[k] for k in s}
        if isinstance(s, (list, tuple)):
            items = [build(v) for v in s]
            if isinstance(s, tuple) and hasattr(s, "_fields"):
                return type(s)(*items)
            return type(s)(items)
        return next(it)
    return build(structure)


class GradientTape(_tape.GradientTape):
    """Record operations for automatic differentiation, as `tf.GradientTape`.

    Trainable `tf.Variable`s are watched automatically (unless
    `watch_accessed_variables=False`); other tensors need `tape.watch`. Nest
    tapes for higher-order gradients; `persistent=True` allows several
    `gradient` calls.

    Examples
    --------
    >>> import loom.tf as tf
    >>> x = tf.constant(3.0)
    >>> with tf.GradientTape() as g:
    ...     g.watch(x)
    ...     y = x * x
    >>> float(g.gradient(y, x))
    6.0
    """

    def __init__(self, persistent: bool = False, watch_accessed_variables: bool = True) -> None:
        super().__init__(persistent=persistent, watch_accessed_variables=watch_accessed_variables)
        self.watch_accessed_variables = watch_accessed_variables

    def watch(self, tensor) -> None:
        """Track `tensor` (or a nest of tensors) so gradients with respect to it can be taken."""
        for t in flatten(tensor):
            if not isinstance(t, Tensor):
                raise LoomTypeError(f"loom.tf.GradientTape.watch: expected tensors or variables, got "
                                    f"{type(t).__name__}")
            t.__dict__["_tf_source"] = True
            super().watch(t)

    @contextlib.contextmanager
    def stop_recording(self):
        """Within this block, operations are not recorded (their results carry no gradient)."""
        with no_grad():
            yield

    def reset(self) -> None:
        """Forget what was watched."""
        self._watched = []

    def gradient(self, target, sources, output_gradients=None, unconnected_gradients=UnconnectedGradients.NONE):
        """Gradients of `target` (a tensor or a nest) with respect to `sources`, in `sources`' structure."""
        from loom.tf._core import Variable
        mode = unconnected_gradients.value if isinstance(unconnected_gradients, UnconnectedGradients) \
            else str(unconnected_gradients)
        flat = flatten(sources)
        targets = flatten(target)
        seeds = None if output_gradients is None else flatten(output_gradients)
        grads = super().gradient(targets, flat, seeds, mode)
        if not self.watch_accessed_variables:
            watched = {id(t) for t in self._watched}
            grads = [g if id(s) in watched or not isinstance(s, Variable) else
                     (None if mode == "none" else g * 0) for g, s in zip(grads, flat)]
        if isinstance(sources, Tensor):
            return grads[0]
        return pack_sequence_as(sources, grads)

    def jacobian(self, target, sources, unconnected_gradients=UnconnectedGradients.NONE, **kwargs):
        """d(target[i...])/d(source) for every element of `target`: shape target.shape + source.shape."""
        import loom
        flat = flatten(sources)
        t = target.reshape(-1)
        rows = []
        with self._many_gradients("jacobian"):
            for i in range(t.shape[0]):
                seed = loom.zeros(t.shape[0], dtype=t.dtype)
                seed[i] = 1
                rows.append(super().gradient([t], flat, [seed], "zero"))
        out = [loom.stack([r[k] for r in rows]).reshape(list(target.shape) + list(s.shape))
               for k, s in enumerate(flat)]
        return out[0] if isinstance(sources, Tensor) else pack_sequence_as(sources, out)

    def batch_jacobian(self, target, source, unconnected_gradients=UnconnectedGradients.NONE, **kwargs):
        """Per-example jacobians: d(target[b, i...])/d(source[b, j...]), shape [batch, *target[1:], *source[1:]].

        As TensorFlow, it assumes example b of `target` depends only on example b of `source`.
        """
        import loom
        if target.ndim < 1 or source.ndim < 1 or target.shape[0] != source.shape[0]:
            raise LoomTypeError(f"loom.tf.GradientTape.batch_jacobian: target {list(target.shape)} and source "
                                f"{list(source.shape)} need the same first (batch) dimension")
        b = target.shape[0]
        t = target.reshape(b, -1)
        n = t.shape[1]
        rows = []
        with self._many_gradients("batch_jacobian"):
            for j in range(n):
                seed = loom.zeros(b, n, dtype=t.dtype)
                seed[:, j] = 1
                rows.append(super().gradient([t], [source], [seed], "zero")[0])
        out = loom.stack(rows, dim=1)  # [batch, n, *source[1:]]
        return out.reshape([b] + list(target.shape[1:]) + list(source.shape[1:]))

    @contextlib.contextmanager
    def _many_gradients(self, what: str):
        """One gradient per target element; a non-persistent tape allows this once, as TensorFlow's."""
        if self._used and not self.persistent:
            raise _tape.AutogradError(f"loom.tf.GradientTape.{what}: a non-persistent tape can only compute "
                                      "gradients once; create it with persistent=True")
        was_persistent, was_used = self.persistent, self._used
        self.persistent = True
        try:
            yield
        finally:
            self.persistent = was_persistent
            self._used = True if not was_persistent else was_used
