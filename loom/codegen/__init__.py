"""Native code generation: fused kernel bodies rendered as C, built with gcc, cached on disk.

- `get_kernel(body)` returns a `Kernel` for a fused body (a `loom.ir.Graph`);
  call it as ``kernel(inputs, out)``.
- `render(body)` gives the C source and argument layout (`loom.codegen.c`).
- `stats()`, `cache_dir()`: cache counters and location.
- `KernelCacheWarning`: loom refused a cache directory or a cached library
  (see `loom.codegen.trust` and docs/kernel-cache.md).

Examples
--------
>>> import numpy as np, loom
>>> g = loom.ir.Graph()
>>> a, b = g.add_input((2, 2), loom.float32), g.add_input((2, 2), loom.float32)
>>> g.outputs = [g.add_node("add", [g.add_node("mul", [a, b]), a])]
>>> k = get_kernel(g)
>>> out = np.empty((2, 2), np.float32)
>>> k([np.ones((2, 2), np.float32), np.full((2, 2), 2, np.float32)], out)
>>> out.tolist()
[[3.0, 3.0], [3.0, 3.0]]
"""
from .c import KernelSpec, Unsupported, render
from .cache import cache_dir, clear_memory, get_kernel, reset_stats, stats
from .kernel import Kernel, run_reference
from .trust import KernelCacheWarning
from .toolchain import CODEGEN  # Registers the code generator with the runtime.

__all__ = ["get_kernel", "Kernel", "KernelSpec", "Unsupported", "render", "stats", "reset_stats", "cache_dir",
           "clear_memory", "run_reference", "KernelCacheWarning", "CODEGEN"]
