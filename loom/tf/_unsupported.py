"""Names TensorFlow has and loom.tf does not: a loom error that says so, instead of a bare AttributeError."""
from __future__ import annotations

from loom.errors import LoomError


class UnsupportedFeatureError(LoomError, AttributeError):
    """A TensorFlow API loom.tf does not provide (an AttributeError too, so hasattr() stays False)."""


def module_getattr(module: str, tf_name: str):
    """A module `__getattr__` raising UnsupportedFeatureError for public names the module lacks."""
    def __getattr__(name: str):
        if name.startswith("_"):
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        raise UnsupportedFeatureError(f"{tf_name}.{name} is not supported by loom.tf ({module} has no {name!r}); "
                                      "see loom.tf's module docs for what is provided")
    return __getattr__
