"""Whether composites may use the fused library primitives (``attention``, ``layer_norm``, ...).

sdpa, layer_norm and cross_entropy apply library primitives that compiled steps run as single C
kernels (`loom.ir.attention`, `loom.ir.rows`). Consumers that lower a graph to another format
(ONNX export, the ONNX Runtime backend) want the decomposition into the small primitive set
instead; they trace inside `decomposed()`.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Iterator

_LOCAL = threading.local()


def enabled() -> bool:
    """Whether the composites of this thread may apply the fused library primitives."""
    return not getattr(_LOCAL, "off", 0)


@contextlib.contextmanager
def decomposed() -> Iterator[None]:
    """Within this context, composites of this thread decompose into primitives only."""
    _LOCAL.off = getattr(_LOCAL, "off", 0) + 1
    try:
        yield
    finally:
        _LOCAL.off -= 1
