"""`loom.jit`: compile with `loom.function` (``loom.jit(fn)`` is ``loom.function(fn)``) and dump for C.

- ``loom.jit(fn, ...)`` traces and compiles `fn` exactly as `loom.function`.
- `save` traces a function for inference and writes a dump (graph,
  weights, generated kernels) that the standalone C runtime libloomrt runs
  without Python (docs/c-runtime.md).
- `load` runs a dump through libloomrt from Python (ctypes), to check it.
- `build_runtime` compiles libloomrt (and an example program);
  `build_kernels` rebuilds a dump's kernels on another machine. The command
  line: ``python -m loom.jit``.

``torch.jit`` in `loom.torch` is a different API (TorchScript stand-ins).

Examples
--------
>>> import loom, subprocess, tempfile
>>> net = loom.nn.Sequential(loom.nn.Linear(4, 8), loom.nn.ReLU(), loom.nn.Linear(8, 2)).eval()
>>> dump = loom.jit.save(net, loom.randn(1, 4), tempfile.mkdtemp())
>>> rt = loom.jit.build_runtime(example="examples/c_runtime/main.c")  # doctest: +SKIP
>>> subprocess.run([rt.example, dump, "x.npy"])                       # doctest: +SKIP
"""
from __future__ import annotations

import sys
import types

from loom.function import function
from loom.jit.builder import Runtime, build_kernels, build_runtime
from loom.jit.dump import save
from loom.jit.runner import CModel, load

__all__ = ["save", "load", "CModel", "build_runtime", "build_kernels", "Runtime"]


class _CallableModule(types.ModuleType):
    """Lets ``loom.jit(fn)`` keep meaning ``loom.function(fn)`` now that ``loom.jit`` is a module."""

    def __call__(self, *args, **kwargs):
        return function(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
