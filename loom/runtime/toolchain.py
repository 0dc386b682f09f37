"""The compiled code the runtime runs, handed to it from the layer above.

The runtime runs graphs; it never generates or builds code, and it never
imports the code generator. `loom.codegen` registers its `Toolchain` here
when it is imported (``import loom`` does that), and `loom.compiler.compile`
puts it into every executable it builds, beside the graph and the memory
plan. A toolchain answers four questions: the kernel for a fused body, the
native convolution library, the step driver that runs a whole step from C,
and the kernel calling convention. The base class answers "none" to each,
which leaves the runtime on its NumPy reference path with identical
results.

Examples
--------
>>> from loom.runtime import toolchain
>>> toolchain.Toolchain().kernel(None) is None
True
>>> isinstance(toolchain.current(), toolchain.Toolchain)
True
"""
from __future__ import annotations

from typing import Any


class Toolchain:
    """No compiled code: every step runs on the reference path. Code generators subclass it."""

    name = "reference"
    native = False  # Whether it has a step driver and kernels a native step program can call.

    def kernel(self, body) -> Any:
        """The kernel for a fused node's `body` graph (an object with ``run``, ``wait`` and ``ready``), or None."""
        return None

    def conv(self) -> Any:
        """The native convolution module (``run`` and ``max_pool2d_index``), or None."""
        return None

    def library_step(self, node, locs) -> Any:
        """(entry point address, int64 meta) of a native library kernel for `node` (attention, row ops)
        over `locs` (output first, then inputs: objects with shape, byte strides, dtype), or None."""
        return None

    def library_call(self, node, args, out) -> bool:
        """Run `node` (attention, a row op) on NumPy arrays into `out` with its native library kernel, waiting
        for the library's build; False (nothing written) when there is none for the node or the layouts."""
        return False

    def library_pending(self, node) -> bool:
        """Whether the native library that would run `node` is still being built (a later call may use it)."""
        return False

    def kernel_usable(self, array) -> bool:
        """Whether a native kernel may read or write `array` in place (alignment, strides)."""
        return False

    def kernel_abi(self) -> tuple[int, int] | None:
        """The offsets of the kernel argument block the step driver fills, or None."""
        return None

    def kernel_par_min(self) -> int:
        """Work (loop iterations) from which a kernel splits across the threads (1: any work may)."""
        return 1

    def gemm_epilogue(self) -> Any:
        """The module that cuts a kernel's arguments into GEMM row blocks (``block_rows``, ``row_blocks``), or None."""
        return None

    def driver(self) -> Any:
        """The loaded step driver, or None while it is not built (or cannot be)."""
        return None

    def driver_done(self) -> bool:
        """Whether building the driver has finished (successfully or not)."""
        return True

    def wait_driver(self, timeout: float | None = None) -> bool:
        """Block until the driver is built; True if it is usable."""
        return False


_current: Toolchain = Toolchain()


def register(toolchain: Toolchain) -> None:
    """Make `toolchain` the one executables use when none is given (the code generator calls this)."""
    global _current
    if not isinstance(toolchain, Toolchain):
        raise TypeError(f"loom.runtime.toolchain.register: expected a Toolchain, got {type(toolchain).__name__}")
    _current = toolchain


def current() -> Toolchain:
    """The registered toolchain (the reference-only base until `loom.codegen` is imported)."""
    return _current
