"""`torch.autograd`: loom's autodiff under PyTorch's names (grad, backward, grad modes, Variable)."""
from __future__ import annotations

import contextlib

from loom.autograd import (  # noqa: F401
    backward, enable_grad, grad, inference_mode, is_grad_enabled, no_grad, set_grad_enabled,
)
from loom.torch._forward import install as _install
from loom.tensor import Tensor

_install(globals(), "loom.autograd")

from loom.torch.autograd import functional, graph, profiler  # noqa: E402,F401


def Variable(data: Tensor, requires_grad: bool = False, volatile: bool = False) -> Tensor:  # noqa: N802
    """The pre-0.4 wrapper: the tensor itself (requiring grad if asked)."""
    return data.requires_grad_(True) if requires_grad else data


_anomaly = {"enabled": False, "check_nan": True}


def set_anomaly_enabled(enabled: bool, check_nan: bool = True) -> None:
    """Record anomaly detection; loom's errors already name the op that failed."""
    _anomaly["enabled"], _anomaly["check_nan"] = bool(enabled), bool(check_nan)


def is_anomaly_enabled() -> bool:
    return _anomaly["enabled"]


def is_anomaly_check_nan_enabled() -> bool:
    return _anomaly["check_nan"]


def set_detect_anomaly(mode: bool, check_nan: bool = True):
    """Anomaly detection switch (loom's errors already name the failing op); usable as a context too."""
    previous = is_anomaly_enabled()
    set_anomaly_enabled(mode, check_nan)

    @contextlib.contextmanager
    def region():
        try:
            yield
        finally:
            set_anomaly_enabled(previous)
    return region()


@contextlib.contextmanager
def detect_anomaly(check_nan: bool = True):
    """Context manager form of `set_detect_anomaly(True)`."""
    with set_detect_anomaly(True, check_nan):
        yield
