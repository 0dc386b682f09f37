"""Third-party compiler plugins: hand a traced graph to another compiler, selected by name.

A plugin is a factory ``factory(graph) -> run``: it receives a `loom.ir.Graph`
(its placeholders ``graph.inputs`` are the input specs: shape and loom dtype of
each argument) and returns a callable ``run(*arrays) -> tuple[np.ndarray]``
that takes one NumPy array per placeholder, in the stored form loom keeps
(bfloat16 as its uint16 bits), and returns one array per ``graph.outputs``
entry with exactly that output's shape and storage dtype.

`loom.function(fn, backend=NAME)` calls ``get_plugin(NAME)(graph)`` once per
traced specialisation and ``run`` on every later call. Built-in plugins
register lazily: importing loom imports none of their libraries; the first
`get_plugin` of one does, and names the package to install when it is absent.

Built-in plugins:

- ``"xla"``: lowers the graph to `jax.lax` / `jax.numpy` under one `jax.jit`
  (`loom.compiler.plugins.xla`; needs ``pip install jax``).
- ``"onnxruntime"``: lowers the graph to ONNX and runs it in an ONNX Runtime
  session (`loom.compiler.plugins.ort`; needs ``pip install 'loom-dl[onnx]'``).

See ``docs/plugins.md`` for the interface in full and an example plugin.
"""
from __future__ import annotations

import importlib
from typing import Callable

from loom.errors import LoomError
from loom.ir.graph import Graph

Plugin = Callable[[Graph], Callable[..., tuple]]

# Execution backends `loom.function` handles itself; never plugin names.
BUILTIN_BACKENDS = ("c", "reference")

_PLUGINS: dict[str, Plugin] = {}

# Plugins that ship with loom, imported on first use: name -> (module, factory attr, package, install hint).
_LAZY: dict[str, tuple[str, str, str, str]] = {
    "xla": ("loom.compiler.plugins.xla", "compile_graph", "jax", "pip install jax==0.10.2"),
    "onnxruntime": ("loom.compiler.plugins.ort", "compile_graph", "onnx", "pip install 'loom-dl[onnx]'"),
}


def register_plugin(name: str, factory: Plugin | None = None, *, override: bool = False):
    """Register `factory` as the compiler plugin `name` (also usable as a decorator).

    Parameters
    ----------
    name : str
        The backend name `loom.function(fn, backend=name)` selects it by.
    factory : callable
        ``factory(graph: loom.ir.Graph) -> run``, where ``run(*arrays)``
        returns a tuple of NumPy arrays, one per graph output (see the module
        docstring for the exact contract).
    override : bool
        Allow replacing a plugin already registered under `name`.

    Examples
    --------
    >>> import loom
    >>> from loom.compiler.plugins import register_plugin, get_plugin
    >>> def interpreter(graph):
    ...     return lambda *arrays: tuple(t._array() for t in graph.run(*arrays))
    >>> _ = register_plugin("interpreter_example", interpreter, override=True)
    >>> get_plugin("interpreter_example") is interpreter
    True
    """
    if factory is None:
        return lambda f: register_plugin(name, f, override=override)
    if not isinstance(name, str) or not name:
        raise LoomError(f"loom.register_plugin: name must be a non-empty str, got {name!r}")
    if name in BUILTIN_BACKENDS:
        raise LoomError(f"loom.register_plugin: {name!r} is a built-in loom backend, not a plugin name")
    if not callable(factory):
        raise LoomError(f"loom.register_plugin: factory for {name!r} must be callable, "
                        f"got {type(factory).__name__}")
    if not override and (name in _PLUGINS or name in _LAZY):
        raise LoomError(f"loom.register_plugin: a plugin named {name!r} is already registered; "
                        "pass override=True to replace it")
    _LAZY.pop(name, None)
    _PLUGINS[name] = factory
    return factory


def available_plugins() -> list[str]:
    """The names of the registered plugins (built-in ones included, installed or not), sorted.

    Examples
    --------
    >>> from loom.compiler.plugins import available_plugins
    >>> "xla" in available_plugins()
    True
    """
    return sorted(set(_PLUGINS) | set(_LAZY))


def get_plugin(name: str) -> Plugin:
    """The factory of the plugin `name`, importing a built-in plugin's library on first use.

    Raises
    ------
    LoomError
        If no plugin has that name (the message lists those that exist), or if
        the plugin's library is not installed (the message says what to install).

    Examples
    --------
    >>> import loom
    >>> from loom.compiler.plugins import get_plugin
    >>> try:
    ...     get_plugin("no_such_compiler")
    ... except loom.LoomError as e:
    ...     print(str(e).split(";")[0])
    loom.function: unknown backend 'no_such_compiler'
    """
    factory = _PLUGINS.get(name)
    if factory is not None:
        return factory
    lazy = _LAZY.get(name)
    if lazy is None:
        raise LoomError(f"loom.function: unknown backend {name!r}; the built-in backends are "
                        f"{list(BUILTIN_BACKENDS)} and the registered plugins {available_plugins()} "
                        "(loom.compiler.plugins.register_plugin adds one)")
    module_name, attr, package, hint = lazy
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        missing = getattr(e, "name", None) or ""
        if missing == package or missing.startswith(package + ".") or (name == "onnxruntime" and
                                                                        missing.startswith("onnxruntime")):
            raise LoomError(f"loom.function: the {name!r} plugin needs the package {package!r}, which is not "
                            f"installed ({e}); install it with: {hint}") from None
        raise
    factory = getattr(module, attr)
    _PLUGINS[name] = factory
    _LAZY.pop(name, None)
    return factory


__all__ = ["register_plugin", "get_plugin", "available_plugins", "BUILTIN_BACKENDS", "Plugin"]
