"""The fusion pass: elementwise/reduce/movement groups become ``fused`` kernel nodes (loom.compiler.fuse)."""
from __future__ import annotations

from loom.compiler.fuse import fuse
from loom.compiler.passes.registry import register_pass

register_pass("fuse", level=2, _builtin=True)(fuse)

__all__ = ["fuse"]
