"""Fake quantisation for quantisation-aware training: round to the integer grid in the forward pass only.

``fq(x) = (clamp(round(x / scale) + zero_point, quant_min, quant_max) - zero_point) * scale``, where the
rounding passes its gradient straight through (``v + stop_gradient(round(v) - v)``) and the clamp passes it
only inside its range: d fq / dx is 1 where x lands in [quant_min, quant_max] and 0 outside (the
straight-through estimator). With ``learnable=True`` the scale is a `Parameter` trained by that same formula
(the gradient of LSQ, Esser et al. 2020), initialised from the observer on the first batch.
"""
from __future__ import annotations

import functools
from typing import Any

import numpy as np

from loom import _api as loom
from loom.errors import LoomValueError
from loom.nn import Module, Parameter

from .observer import MovingAverageMinMaxObserver, ObserverBase, PerChannelMinMaxObserver


def fake_quantize(x: loom.Tensor, scale, zero_point, quant_min: int, quant_max: int, ch_axis: int | None = None):
    """Fake-quantise `x` with per-tensor or per-channel (along `ch_axis`) scale and zero point, with the STE.

    `scale` may be a float array or a loom Tensor (trained); `zero_point` an integer array.

    Examples
    --------
    >>> import numpy as np, loom
    >>> x = loom.tensor(np.array([-1.0, 0.26, 9.0], np.float32))
    >>> fake_quantize(x, np.float32(0.5), 0, -4, 4).tolist()
    [-1.0, 0.5, 2.0]
    """
    shape = [1] * x.ndim
    if ch_axis is not None:
        shape[ch_axis] = -1
    s = scale if isinstance(scale, loom.Tensor) else loom.tensor(np.asarray(scale, np.float32))
    s = s.reshape(shape) if ch_axis is not None else s
    z = loom.tensor(np.asarray(zero_point, np.float32).reshape(shape if ch_axis is not None else ()))
    v = x / s
    rounded = v + (loom.round(v) - v).detach()
    return (loom.clamp(rounded + z, quant_min, quant_max) - z) * s


class FakeQuantize(Module):
    """Observe (while `observer_enabled`) and fake-quantise (while `fake_quant_enabled`) what passes through.

    Parameters
    ----------
    observer : observer class or factory
        Default `MovingAverageMinMaxObserver` (uint8, affine), the choice for activations; weights use
        `PerChannelMinMaxObserver` (int8, symmetric).
    learnable : bool
        Train the scale (a `Parameter`) instead of taking it from the observer after the first batch.
    **observer_kwargs
        Passed to the observer (dtype, qscheme, quant_min, quant_max, ch_axis, ...).

    Examples
    --------
    >>> import numpy as np, loom
    >>> fq = FakeQuantize()
    >>> x = loom.tensor(np.linspace(-1, 1, 5, dtype=np.float32), requires_grad=True)
    >>> fq(x).sum().backward()
    >>> x.grad.tolist()
    [1.0, 1.0, 1.0, 1.0, 1.0]
    """

    def __init__(self, observer: Any = MovingAverageMinMaxObserver, learnable: bool = False,
                 **observer_kwargs) -> None:
        super().__init__()
        self.activation_post_process: ObserverBase = observer(**observer_kwargs)
        self.fake_quant_enabled = True
        self.observer_enabled = True
        self.learnable = learnable
        self.scale: np.ndarray | None = None
        self.zero_point: np.ndarray | None = None
        self.learned_scale: Parameter | None = None
        self._scale_set = False
        if learnable:
            if self.ch_axis is not None:
                raise LoomValueError("loom.quantization.FakeQuantize: a learnable scale is per tensor; the observer "
                                     f"{type(self.activation_post_process).__name__} is per channel")
            self.learned_scale = Parameter(loom.tensor(np.float32(1.0)))

    @classmethod
    def with_args(cls, **kwargs) -> Any:
        """A factory making this module with `kwargs` (as torch's ``FakeQuantize.with_args``)."""
        return functools.partial(cls, **kwargs)

    @property
    def quant_min(self) -> int:
        return self.activation_post_process.quant_min

    @property
    def quant_max(self) -> int:
        return self.activation_post_process.quant_max

    @property
    def ch_axis(self) -> int | None:
        return getattr(self.activation_post_process, "ch_axis", None)

    def enable_observer(self, enabled: bool = True) -> FakeQuantize:
        self.observer_enabled = enabled
        return self

    def enable_fake_quant(self, enabled: bool = True) -> FakeQuantize:
        self.fake_quant_enabled = enabled
        return self

    def calculate_qparams(self) -> tuple[np.ndarray, np.ndarray]:
        """(scale, zero_point) in use: the learned scale if any, else the observer's."""
        if self.learned_scale is not None and self._scale_set:
            s = np.abs(self.learned_scale.detach().numpy()).astype(np.float32)
            return np.maximum(s, np.finfo(np.float32).eps), self.zero_point
        return self.activation_post_process.calculate_qparams()

    def forward(self, x: loom.Tensor) -> loom.Tensor:
        if self.observer_enabled and not self._scale_set:
            self.activation_post_process(x.detach())
            self.scale, self.zero_point = self.activation_post_process.calculate_qparams()
            if self.learned_scale is not None:  # The observer's first scale starts the learned one.
                with loom.no_grad():
                    self.learned_scale.copy_(loom.tensor(np.asarray(self.scale, np.float32)))
                self._scale_set = True
        if not self.fake_quant_enabled:
            return x
        if self.scale is None:
            self.scale, self.zero_point = self.activation_post_process.calculate_qparams()
        scale = self.learned_scale.abs() + 1e-12 if self._scale_set else self.scale
        return fake_quantize(x, scale, self.zero_point, self.quant_min, self.quant_max, self.ch_axis)

    def extra_repr(self) -> str:
        return f"fake_quant_enabled={self.fake_quant_enabled}, observer_enabled={self.observer_enabled}, " \
               f"learnable={self.learnable}"


default_weight_fake_quant = FakeQuantize.with_args(observer=PerChannelMinMaxObserver, dtype="int8",
                                                   qscheme="per_channel_symmetric", ch_axis=0)
default_fake_quant = FakeQuantize.with_args(observer=MovingAverageMinMaxObserver, dtype="uint8",
                                            qscheme="per_tensor_affine")
