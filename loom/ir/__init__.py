"""The IR: nodes, the primitive set, graphs and their JSON form.

`Graph` is the DAG users and compiler passes edit; `PRIMITIVES` and `infer`
define what each node computes; `to_json`/`from_json` and `save`/`load` give
the language-neutral format of docs/graph-format.md.
"""
from loom.ir.node import Node
from loom.ir.ops import PRIMITIVES, infer
from loom.ir import conv as _conv  # noqa: F401  (registers the convolution primitives in ops)
from loom.ir import decomp as _decomp  # noqa: F401  (registers the factorisation primitives in ops)
from loom.ir import complex as _complex  # noqa: F401  (registers real, imag, conj, complex)
from loom.ir import fft as _fft  # noqa: F401  (registers the FFT primitives)
from loom.ir import collective as _collective  # noqa: F401  (registers all_reduce, send, recv, ...)
from loom.ir import attention as _attention  # noqa: F401  (registers the attention primitives)
from loom.ir import rows as _rows  # noqa: F401  (registers the row primitives: layer_norm)
from loom.ir.graph import Graph
from loom.ir.serialize import from_json, load, save, to_json

__all__ = ["Node", "Graph", "PRIMITIVES", "infer", "to_json", "from_json", "save", "load"]
