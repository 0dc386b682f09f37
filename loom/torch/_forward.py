"""Name forwarding: a loom.torch module answers the names it lacks from loom's own modules.

Each `loom.torch` module defines what PyTorch has and loom lacks, and forwards
every other name to the loom module with the same job (`loom.torch.nn` to
`loom.nn`, ...), looked up when asked for: a name added to loom later shows up
under `loom.torch` with no change here.
"""
from __future__ import annotations

import importlib
from types import ModuleType


def install(globs: dict, *sources: str, lazy: dict[str, str] | None = None, fallback=None, wrap=None) -> None:
    """Give the module whose globals are `globs` a `__getattr__` and `__dir__` over `sources` (module names).

    `lazy` maps names to submodules imported when first asked for; `fallback(name)`, if given, is asked
    last and returns the object or raises AttributeError. `wrap(name, obj)`, if given, may replace an
    object found in `sources` (returning a replacement, kept in `globs`, or None to keep `obj`).
    """
    here = globs["__name__"]
    lazy = lazy or {}
    wrapped: dict[tuple[str, int], tuple[object, object]] = {}  # Holds the object too, so its id stays its own.

    def modules() -> list[ModuleType]:
        found = []
        for s in sources:
            try:
                found.append(importlib.import_module(s))
            except ModuleNotFoundError as e:  # A source another part of loom has not added (yet).
                if e.name is None or not s.startswith(e.name):
                    raise
        return found

    def __getattr__(name: str):
        if name.startswith("__"):
            raise AttributeError(f"module {here!r} has no attribute {name!r}")
        if name in lazy:
            globs[name] = importlib.import_module(lazy[name])
            return globs[name]
        for mod in modules():
            try:
                obj = getattr(mod, name)
            except AttributeError:
                continue
            if wrap is not None:
                key = (name, id(obj))
                if key not in wrapped:  # One wrapper per object: `torch.add is torch.add`.
                    wrapped[key] = (obj, wrap(name, obj))
                replacement = wrapped[key][1]
                if replacement is not None:
                    return replacement
            return obj
        if fallback is not None:
            try:
                return fallback(name)
            except AttributeError:
                pass
        raise AttributeError(f"module {here!r} has no attribute {name!r}: loom does not provide "
                             f"{here.replace('loom.torch', 'torch')}.{name} yet "
                             "(`python -m loom.torch.coverage` lists what is missing)")

    def __dir__() -> list[str]:
        names = {n for n in globs if not n.startswith("_")}
        for mod in modules():
            names.update(n for n in dir(mod) if not n.startswith("_"))
        return sorted(names)

    globs["__getattr__"] = __getattr__
    globs["__dir__"] = __dir__


def inplace_from(name: str, *sources):
    """`name_` (e.g. `selu_`) as the op `name` found in `sources` whose result is written into its input."""
    base = name[:-1]
    for src in sources:
        fn = getattr(src, base, None)
        if callable(fn) and not isinstance(fn, type):
            def inplace(input, *args, **kwargs):
                return input.copy_(fn(input, *args, **kwargs))
            inplace.__name__ = inplace.__qualname__ = name
            inplace.__doc__ = f"In-place `{base}`: the result is written into `input`."
            return inplace
    raise AttributeError(name)
