"""`torch.amp`: autocast regions and gradient scaling, as PyTorch runs them on a machine without CUDA.

`autocast("cpu")` really computes matmul, linear, convolutions and attention
in bfloat16 (or float16) and the losses in float32, as PyTorch's CPU autocast
does (the op lists live in loom.autocast). `autocast("cuda")` warns and does
nothing, as PyTorch does without CUDA. `GradScaler("cuda")` is disabled with a
warning (every call passes through); `GradScaler("cpu")` scales for real.
"""
from __future__ import annotations

import math
import warnings

from loom import autocast as _ac
from loom import dtypes as _dt
from loom.autograd.grad_mode import no_grad
from loom.errors import LoomError, LoomValueError
from loom.tensor import Tensor

__all__ = ["autocast", "GradScaler", "is_autocast_available", "custom_fwd", "custom_bwd"]


def is_autocast_available(device_type: str) -> bool:
    return device_type == "cpu"


class autocast(_ac.autocast):
    """`torch.autocast(device_type, dtype=None, enabled=True, cache_enabled=None)`.

    Examples
    --------
    >>> import loom.torch as torch
    >>> with torch.autocast("cpu"):
    ...     y = torch.nn.functional.linear(torch.randn(2, 4), torch.randn(3, 4))
    >>> y.dtype
    torch.bfloat16
    """

    def __init__(self, device_type: str = "cpu", dtype=None, enabled: bool = True, cache_enabled=None) -> None:
        if not isinstance(device_type, str):
            raise LoomValueError(f"loom.torch.autocast: device_type must be a string such as 'cpu', got "
                                 f"{device_type!r}")
        self.device_type, self.cache_enabled = device_type, cache_enabled
        self._active = device_type == "cpu"
        if not self._active and enabled:
            warnings.warn(f"User provided device_type of '{device_type}', but {device_type.upper()} is not "
                          "available (loom runs on the cpu). Disabling autocast.", UserWarning, stacklevel=2)
            enabled = False
        d = _dt.as_dtype(dtype) if dtype is not None else _dt.bfloat16
        if self._active and enabled and d not in (_dt.bfloat16, _dt.float16):
            warnings.warn(f"In CPU autocast, but the target dtype {d.name} is not supported. Disabling autocast.",
                          UserWarning, stacklevel=2)
            enabled = False
        self.fast_dtype = d if d in (_dt.bfloat16, _dt.float16) else _dt.bfloat16
        super().__init__(self.fast_dtype, enabled)

    def __enter__(self):
        if self._active:  # A region for another device leaves the cpu's autocast state alone.
            super().__enter__()
        return self

    def __exit__(self, *exc) -> bool:
        if self._active:
            super().__exit__(*exc)
        return False

    def __call__(self, fn):
        import functools

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with autocast(self.device_type, self.fast_dtype, self.enabled, self.cache_enabled):
                return fn(*args, **kwargs)
        return wrapper


def is_autocast_enabled(device_type: str | None = None) -> bool:
    """Whether autocast is on for `device_type` (PyTorch's no-argument form asks about CUDA: False here)."""
    return device_type == "cpu" and _ac.is_enabled()


def get_autocast_dtype(device_type: str = "cpu"):
    return _ac.get_dtype() if device_type == "cpu" else _dt.float16


def set_autocast_enabled(device_type, enabled=None) -> None:
    if enabled is None:  # The old one-argument form set CUDA's state.
        return
    if device_type == "cpu":
        _ac._state.enabled = bool(enabled)


def set_autocast_dtype(device_type: str, dtype) -> None:
    if device_type == "cpu":
        _ac._state.dtype = _dt.as_dtype(dtype)


def is_autocast_cpu_enabled() -> bool:
    return _ac.is_enabled()


def set_autocast_cpu_enabled(enabled: bool) -> None:
    set_autocast_enabled("cpu", enabled)


def get_autocast_cpu_dtype():
    return _ac.get_dtype()


def set_autocast_cpu_dtype(dtype) -> None:
    set_autocast_dtype("cpu", dtype)


def get_autocast_gpu_dtype():
    return _dt.float16


def custom_fwd(fwd=None, *, device_type: str = "cpu", cast_inputs=None):
    """Decorator for a custom autograd forward: runs it with `cast_inputs` applied when autocast is on."""
    if fwd is None:
        return lambda f: custom_fwd(f, device_type=device_type, cast_inputs=cast_inputs)
    if cast_inputs is None:
        return fwd
    import functools

    @functools.wraps(fwd)
    def wrapper(*args, **kwargs):
        if device_type == "cpu" and _ac.is_enabled():
            d = _dt.as_dtype(cast_inputs)
            cast = [a.to(d) if isinstance(a, Tensor) and a.dtype.is_floating_point else a for a in args]
            with autocast("cpu", enabled=False):
                return fwd(*cast, **kwargs)
        return fwd(*args, **kwargs)
    return wrapper


def custom_bwd(bwd=None, *, device_type: str = "cpu"):
    """Decorator for a custom autograd backward (runs it as written)."""
    if bwd is None:
        return lambda f: custom_bwd(f, device_type=device_type)
    return bwd


_READY, _UNSCALED, _STEPPED = 0, 1, 2


class GradScaler:
    """Loss scaling for low-precision training, as `torch.amp.GradScaler(device="cuda", ...)`.

    Without CUDA, a "cuda" scaler is disabled (PyTorch warns and does the same):
    `scale` returns its argument, `step` calls `optimizer.step()`, `update` does
    nothing. A "cpu" scaler works as PyTorch's: gradients are unscaled before
    the step, a step with inf/NaN gradients is skipped and the scale backs off.

    Examples
    --------
    >>> import loom.torch as torch
    >>> w = torch.ones(2, requires_grad=True)
    >>> opt = torch.optim.SGD([w], lr=0.1)
    >>> scaler = torch.amp.GradScaler("cpu", init_scale=4.0)
    >>> scaler.scale((w * 3).sum()).backward()
    >>> scaler.step(opt); scaler.update()
    >>> [round(v, 4) for v in w.tolist()]
    [0.7, 0.7]
    """

    def __init__(self, device: str = "cuda", init_scale: float = 2.0 ** 16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000, enabled: bool = True) -> None:
        self._device = str(device)
        if enabled and self._device != "cpu":
            warnings.warn(f"torch.amp.GradScaler is enabled, but {self._device.upper()} is not available "
                          "(loom runs on the cpu). Disabling.", UserWarning, stacklevel=2)
            enabled = False
        if enabled and not (growth_factor > 1.0 and 0.0 < backoff_factor < 1.0):
            raise LoomValueError(f"loom.torch.amp.GradScaler: expected growth_factor > 1 and 0 < backoff_factor "
                                 f"< 1, got {growth_factor} and {backoff_factor}")
        self._enabled = bool(enabled)
        self._scale = float(init_scale)
        self._growth_factor, self._backoff_factor = float(growth_factor), float(backoff_factor)
        self._growth_interval = int(growth_interval)
        self._growth_tracker = 0
        self._per_optimizer: dict[int, dict] = {}

    def is_enabled(self) -> bool:
        return self._enabled

    def scale(self, outputs):
        """`outputs` (a tensor or nested containers of them) times the current scale."""
        if not self._enabled:
            return outputs
        if isinstance(outputs, Tensor):
            return outputs * self._scale
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(o) for o in outputs)
        if isinstance(outputs, dict):
            return {k: self.scale(v) for k, v in outputs.items()}
        raise LoomValueError(f"loom.torch.amp.GradScaler.scale: expected a tensor or a container of tensors, "
                             f"got {type(outputs).__name__}")

    def _state(self, optimizer) -> dict:
        return self._per_optimizer.setdefault(id(optimizer), {"stage": _READY, "found_inf": False})

    def unscale_(self, optimizer) -> None:
        """Divide the gradients of `optimizer`'s parameters by the scale, noting any inf or NaN."""
        if not self._enabled:
            return
        state = self._state(optimizer)
        if state["stage"] == _UNSCALED:
            raise LoomError("loom.torch.amp.GradScaler.unscale_: unscale_() has already been called on this "
                            "optimizer since the last update()")
        if state["stage"] == _STEPPED:
            raise LoomError("loom.torch.amp.GradScaler.unscale_: unscale_() is being called after step()")
        inv = 1.0 / self._scale
        found = False
        with no_grad():
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        p.grad.mul_(inv)
                        found = found or not bool(p.grad.isfinite().all())
        state["found_inf"], state["stage"] = found, _UNSCALED

    def step(self, optimizer, *args, **kwargs):
        """`optimizer.step()` on unscaled gradients, skipped when they hold inf or NaN."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise LoomError("loom.torch.amp.GradScaler.step: closure use is not supported")
        state = self._state(optimizer)
        if state["stage"] == _STEPPED:
            raise LoomError("loom.torch.amp.GradScaler.step: step() has already been called since the last "
                            "update()")
        if state["stage"] == _READY:
            self.unscale_(optimizer)
        result = None if state["found_inf"] else optimizer.step(*args, **kwargs)
        state["stage"] = _STEPPED
        return result

    def update(self, new_scale=None) -> None:
        """Back the scale off after a skipped step; grow it after `growth_interval` good steps."""
        if not self._enabled:
            return
        if new_scale is not None:
            self._scale = float(new_scale.item() if isinstance(new_scale, Tensor) else new_scale)
        elif any(s["found_inf"] for s in self._per_optimizer.values()):
            self._scale *= self._backoff_factor
            self._growth_tracker = 0
        else:
            self._growth_tracker += 1
            if self._growth_tracker == self._growth_interval:
                self._scale *= self._growth_factor
                self._growth_tracker = 0
        self._per_optimizer.clear()

    def get_scale(self) -> float:
        return self._scale if self._enabled else 1.0

    def get_growth_factor(self) -> float:
        return self._growth_factor

    def set_growth_factor(self, new_factor: float) -> None:
        self._growth_factor = float(new_factor)

    def get_backoff_factor(self) -> float:
        return self._backoff_factor

    def set_backoff_factor(self, new_factor: float) -> None:
        self._backoff_factor = float(new_factor)

    def get_growth_interval(self) -> int:
        return self._growth_interval

    def set_growth_interval(self, new_interval: int) -> None:
        self._growth_interval = int(new_interval)

    def state_dict(self) -> dict:
        if not self._enabled:
            return {}
        return {"scale": self._scale, "growth_factor": self._growth_factor, "backoff_factor": self._backoff_factor,
                "growth_interval": self._growth_interval, "_growth_tracker": self._growth_tracker}

    def load_state_dict(self, state_dict: dict) -> None:
        if not self._enabled:
            return
        if not state_dict:
            raise LoomError("loom.torch.amp.GradScaler.load_state_dict: the state_dict is empty; it came from "
                            "a disabled scaler")
        scale = state_dict["scale"]
        self._scale = float(scale.item() if isinstance(scale, Tensor) else scale)
        self._growth_factor = float(state_dict["growth_factor"])
        self._backoff_factor = float(state_dict["backoff_factor"])
        self._growth_interval = int(state_dict["growth_interval"])
        self._growth_tracker = int(state_dict["_growth_tracker"])
        if not math.isfinite(self._scale):
            raise LoomValueError(f"loom.torch.amp.GradScaler.load_state_dict: scale is {self._scale}")
