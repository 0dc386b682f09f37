"""Calls that point up loom's layers, filled in from above.

loom is layered (docs/architecture.md, "The layers"), and a module imports only
modules below it. Where a lower module must call a higher one (Tensor's `@`
calls loom.functional.linalg, `Tensor.backward` the autograd engine, ...), it
calls the slot here, and the higher module fills that slot when it is imported.
`import loom` imports every module that fills a slot before any tensor is made,
so the slots are always filled when user code runs. This module imports nothing.
"""
from __future__ import annotations

from typing import Any, Callable

# Each slot: the module that fills it, and who calls it.
alias: Any  # The module loom.alias (views, shared storage, version counters): loom.tensor.
backward: Callable[..., Any]  # loom.autograd.engine.backward: Tensor.backward.
check: Callable[..., Any]  # loom.functional.checks.check: loom.tensor.multinomial.
matmul: Callable[..., Any]  # loom.functional.linalg.matmul: Tensor.__matmul__.
getitem: Callable[..., Any]  # loom.functional.indexing.getitem: Tensor.__getitem__.
index_put_functional: Callable[..., Any]  # loom.functional.indexing: Tensor.__setitem__, loom.alias.
take: Callable[..., Any]  # loom.functional.indexing.take: loom.alias.
nonzero: Callable[..., Any]  # loom.functional.indexing.nonzero: loom.functional.math.where.
matrix_norm: Callable[..., Any]  # loom.linalg.matrix_norm: loom.functional.reduce.norm.
cross: Callable[..., Any]  # loom.linalg.cross: loom.functional.compat.cross.
multi_dot: Callable[..., Any]  # loom.linalg.multi_dot: loom.functional.compat.chain_matmul.
matrix_power: Callable[..., Any]  # loom.linalg.matrix_power: loom.functional.compat.matrix_power.
multi_head_attention: Callable[..., Any]  # loom.nn.modules.transformer: loom.nn.functional.
is_torch_zip: Callable[..., Any]  # loom.io.torch_format: loom.io.checkpoint.load.
torch_load: Callable[..., Any]  # loom.io.torch_format: loom.io.checkpoint.load.
prepare_eager: Callable[..., Any]  # loom.quantization.eager: loom.quantization.quantize.prepare.
convert_eager: Callable[..., Any]  # loom.quantization.eager: loom.quantization.quantize.convert.
compile_overlapped: Callable[..., Any]  # loom.distributed.overlap: loom.compiler.partition.compile_partitioned.


def register(**impls: Any) -> None:
    """Fill slots; called by the module that owns them when it is imported."""
    for name, impl in impls.items():
        if name not in __annotations__:
            raise NameError(f"loom._upper: no slot {name!r}; the slots are {sorted(__annotations__)}")
        globals()[name] = impl
