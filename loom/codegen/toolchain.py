"""The code generator's `Toolchain`: what compiled executables run with.

`loom.compiler.compile` hands it to each executable, and importing
`loom.codegen` registers it as the runtime's default, so the runtime gets
generated kernels, the native convolution library and the step driver
without importing this package (see `loom.runtime.toolchain`).

Examples
--------
>>> from loom.codegen.toolchain import CODEGEN
>>> CODEGEN.name, CODEGEN.native
('codegen', True)
"""
from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from loom.runtime import threads as _threads
from loom.runtime import toolchain as _runtime_toolchain

from . import attention as _attention
from . import conv as _conv
from . import driver as _driver
from . import gemm as _gemm
from . import kernel as _kernel
from . import rows as _rows
from .cache import get_kernel


class CodegenToolchain(_runtime_toolchain.Toolchain):
    """Generated C kernels (cached on disk), oneDNN convolution and the C step driver."""

    name = "codegen"
    native = True

    def kernel(self, body) -> Any:
        return get_kernel(body)

    def conv(self) -> Any:
        return _conv

    def library_step(self, node, locs) -> Any:
        if node.op in _rows.OPS:
            return _rows.step(node, locs)
        return _attention.step(node, locs)

    def library_pending(self, node) -> bool:
        lib = _library_of(node)
        return lib.enabled() and lib.state["status"] in ("unbuilt", "building")

    def library_call(self, node, args, out) -> bool:
        lib = _library_of(node)
        if not lib.available(timeout=None):  # Waits for the build: every tier then computes the same bits.
            return False
        found = self.library_step(node, [out] + list(args))
        if found is None or not all(_kernel._usable(a) for a in [out] + list(args)) or \
                any(np.may_share_memory(out, a) for a in args):
            return False
        fn, meta = found
        cells = np.array([a.__array_interface__["data"][0] for a in [out] + list(args)], np.uintp)
        refs = cells.ctypes.data + cells.itemsize * np.arange(len(cells), dtype=np.uintp)
        rc = _ENTRY(fn)(refs.ctypes.data, meta.ctypes.data, _threads.get_num_threads())
        return rc == 0

    def kernel_usable(self, array) -> bool:
        return _kernel._usable(array)

    def kernel_abi(self) -> tuple[int, int] | None:
        return _kernel._ABI

    def kernel_par_min(self) -> int:
        return _kernel.par_min()

    def gemm_epilogue(self) -> Any:
        return _gemm

    def driver(self) -> Any:
        return _driver.get_driver()

    def driver_done(self) -> bool:
        return _driver.driver_done()

    def wait_driver(self, timeout: float | None = None) -> bool:
        return _driver.wait_driver(timeout)


_ENTRY = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)


def _library_of(node):
    return _rows.LIBRARY if node.op in _rows.OPS else _attention.LIBRARY


CODEGEN = CodegenToolchain()
_runtime_toolchain.register(CODEGEN)
