"""Composite ops: every public op that is not a primitive, written in primitives.

Each module lists in METHODS the functions that are also Tensor methods, and in
INPLACE those with a PyTorch-style in-place twin (`x.add_(y)`).
"""
from __future__ import annotations

import importlib

MODULES = ["math", "reduce", "shape", "linalg", "indexing", "sort", "nn", "conv", "activation", "losses", "pooling",
           "sampling", "distance", "sparse", "grouped", "complex", "spectral", "compat", "decomp", "misc"]


def _modules():
    for name in MODULES:
        try:
            yield importlib.import_module(f"loom.functional.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"loom.functional.{name}":
                raise


def _inplace_method(name, fn):
    def method(self, *args, **kwargs):
        return self._inplace(name + "_", fn, *args, **kwargs)
    method.__name__ = name + "_"
    method.__doc__ = f"In-place version of :meth:`{name}`."
    return method


def install_methods(cls) -> None:
    """Attach each module's METHODS (and their in-place twins) to the Tensor class."""
    core = set(cls.__dict__)  # Methods the Tensor class defines itself win.
    for mod in _modules():
        for name in getattr(mod, "METHODS", []):
            if name not in core:
                setattr(cls, name, getattr(mod, name))
        for name in getattr(mod, "INPLACE", []):
            setattr(cls, name + "_", _inplace_method(name, getattr(mod, name)))
        for name, fn in getattr(mod, "PROPERTIES", {}).items():
            setattr(cls, name, property(fn))
        for name, fn in getattr(mod, "TENSOR_METHODS", {}).items():  # Methods with no top-level function.
            setattr(cls, name, fn)
