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

from typing import Any

from loom.runtime import toolchain as _runtime_toolchain

from . import conv as _conv
from . import driver as _driver
from . import gemm as _gemm
from . import kernel as _kernel
from .cache import get_kernel


class CodegenToolchain(_runtime_toolchain.Toolchain):
    """Generated C kernels (cached on disk), oneDNN convolution and the C step driver."""

    name = "codegen"
    native = True

    def kernel(self, body) -> Any:
        return get_kernel(body)

    def conv(self) -> Any:
        return _conv

    def kernel_usable(self, array) -> bool:
        return _kernel._usable(array)

    def kernel_abi(self) -> tuple[int, int] | None:
        return _kernel._ABI

    def gemm_epilogue(self) -> Any:
        return _gemm

    def driver(self) -> Any:
        return _driver.get_driver()

    def driver_done(self) -> bool:
        return _driver.driver_done()

    def wait_driver(self, timeout: float | None = None) -> bool:
        return _driver.wait_driver(timeout)


CODEGEN = CodegenToolchain()
_runtime_toolchain.register(CODEGEN)
