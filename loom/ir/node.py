"""A node of the tensor DAG: one primitive applied to input nodes."""
from __future__ import annotations

import itertools
from typing import Any

from loom.dtypes import DType

_ids = itertools.count()


class Node:
    """One value in the DAG: `op` applied to `inputs` with `attrs`.

    A realised node holds its value in `buffer`, becomes op ``"buffer"`` and
    drops its inputs, so computed history is freed as soon as it is no longer
    needed.
    """

    __slots__ = ("id", "op", "inputs", "attrs", "shape", "dtype", "device", "name",
                 "buffer", "depth", "__weakref__")

    def __init__(self, op: str, inputs: tuple[Node, ...], attrs: dict[str, Any],
                 shape: tuple[int, ...], dtype: DType, device: str = "cpu",
                 name: str | None = None, buffer=None) -> None:
        self.id = next(_ids)
        self.op = op
        self.inputs = inputs
        self.attrs = attrs
        self.shape = shape
        self.dtype = dtype
        self.device = device
        self.name = name
        self.buffer = buffer
        # Longest chain of pending nodes behind this one, to bound lazy graphs.
        depth = 0
        if buffer is None:
            for i in inputs:  # A loop, not max() over a generator: this runs for every op in eager mode.
                if i.depth > depth:
                    depth = i.depth
            depth += 1
        self.depth = depth

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def realized(self) -> bool:
        return self.buffer is not None

    def __repr__(self) -> str:
        shape = "x".join(map(str, self.shape)) or "scalar"
        ins = ", ".join(f"%{i.id}" for i in self.inputs)
        label = f" {self.name!r}" if self.name else ""
        return f"%{self.id}{label} = {self.op}({ins}) {self.attrs or ''} : {self.dtype.name}[{shape}]"
