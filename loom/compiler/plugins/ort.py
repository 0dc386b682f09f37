"""The ONNX Runtime plugin: a loom Graph lowered to ONNX (`loom.onnx`'s lowering) and run by onnxruntime.

`compile_graph(graph)` maps every node to ONNX operators (the same rules as
`loom.onnx.export`), builds one `onnxruntime.InferenceSession` on the CPU and
returns an executable; each call is one session run. Shapes are those of the
traced graph (a new input shape retraces, as for every backend).

Scope: inference graphs are the target (forward passes of MLPs, CNNs,
transformers), though any graph whose primitives all have an ONNX mapping
runs, training steps included (the parity suite passes on it with
``LOOM_TRACE_BACKEND=onnxruntime``). Refused, with a `LoomError` naming them:
float16/bfloat16 values (loom computes them in float32 and rounds each result,
ONNX Runtime computes natively), and primitives with no mapping
(``while_loop``). Differences from the reference interpreter: run-time checks
(gather index bounds, integer division by zero) are not made, ``argsort``
uses TopK (not guaranteed stable), float64 ``erf``/``tan`` compute in float32,
and results agree within floating-point rounding, not bitwise.
"""
from __future__ import annotations

import weakref

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

from loom import dtypes as dt
from loom.errors import GraphError, LoomError, fmt_shape
from loom.ir.graph import Graph, _dfs_order
from loom.onnx._export import IR_VERSION
from loom.onnx._lower import ONNX_DTYPE, SUPPORTED, Lowering

OPSET = 18  # Bitwise operators need 18.
_UNSUPPORTED_DTYPES = (dt.float16, dt.bfloat16)


def _walk(g: Graph):
    given = set(g.inputs)
    for node in _dfs_order(g.outputs, lambda n: () if n in given else n.inputs):
        yield node
        body = node.attrs.get("body") if node.op == "fused" else None
        if isinstance(body, Graph):
            yield from _walk(body)


def to_onnx(graph: Graph, opset: int = OPSET) -> onnx.ModelProto:
    """`graph` as an ONNX model with inputs ``in0, in1, ...`` and outputs ``out0, out1, ...``."""
    nodes = list(_walk(graph))
    bad = sorted({n.op for n in nodes if n.op not in SUPPORTED})
    if bad:
        first = next(n for n in nodes if n.op in bad)
        raise LoomError(f"loom.onnxruntime: the ONNX Runtime plugin cannot lower the primitive(s) {bad} (first: "
                        f"node %{first.id}); it lowers {sorted(SUPPORTED)} (use backend='c' or 'xla' for this "
                        "function)")
    half = sorted({n.dtype.name for n in nodes if n.dtype in _UNSUPPORTED_DTYPES})
    if half:
        raise LoomError(f"loom.onnxruntime: the ONNX Runtime plugin does not run {half} values (loom computes "
                        "half precision in float32 and rounds each result; ONNX Runtime would not); use "
                        "backend='c' or 'xla', or cast to float32")
    lw = Lowering(opset)
    names = [f"in{k}" for k in range(len(graph.inputs))]
    outs = lw.graph(graph, dict(zip(graph.inputs, names)))
    out_names = [f"out{k}" for k in range(len(outs))]
    for value, name in zip(outs, out_names):
        lw.nodes.append(helper.make_node("Identity", [value], [name], name=f"output_{name}"))
    inputs = [helper.make_tensor_value_info(n, ONNX_DTYPE[p.dtype], list(p.shape))
              for n, p in zip(names, graph.inputs)]
    outputs = [helper.make_tensor_value_info(n, ONNX_DTYPE[o.dtype], list(o.shape))
               for n, o in zip(out_names, graph.outputs)]
    model = helper.make_model(helper.make_graph(lw.nodes, "loom", inputs, outputs, lw.initializers),
                              opset_imports=[helper.make_opsetid("", opset)], producer_name="loom")
    model.ir_version = IR_VERSION
    return model


class OrtExecutable:
    """A graph compiled for ONNX Runtime: call it with one NumPy array per placeholder, get a tuple of arrays."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.model = to_onnx(graph)
        self._specs = [(f"in{k}", tuple(p.shape), p.dtype) for k, p in enumerate(graph.inputs)]
        self._outs = [f"out{k}" for k in range(len(graph.outputs))]
        self._out_dtypes = [o.dtype.np for o in graph.outputs]
        self._constant: tuple | None = None
        if not any(n.op == "input" for n in _walk(graph)):
            # Nothing reads the inputs: ONNX Runtime folds such a graph to nothing and then refuses it.
            zeros = [np.zeros(shape, d.np) for _, shape, d in self._specs]
            self._constant = tuple(np.array(t._array()) for t in graph.run(*zeros))
            return
        opts = ort.SessionOptions()
        from loom.runtime.threads import get_num_threads
        opts.intra_op_num_threads = get_num_threads()  # loom owns the thread count.
        opts.inter_op_num_threads = 1
        try:
            self.session = ort.InferenceSession(self.model.SerializeToString(), opts,
                                                providers=["CPUExecutionProvider"])
        except Exception as e:  # onnxruntime raises its own exception types.
            raise LoomError(f"loom.onnxruntime: ONNX Runtime refused the lowered graph: {e}") from None

    def __call__(self, *arrays) -> tuple:
        if len(arrays) != len(self._specs):
            raise GraphError(f"loom.onnxruntime: the compiled graph takes {len(self._specs)} inputs, "
                             f"got {len(arrays)}")
        feed = {}
        for k, (a, (name, shape, d)) in enumerate(zip(arrays, self._specs)):
            a = np.asarray(a)
            if a.dtype != d.np:
                a = a.astype(d.np)  # Runtime scalars arrive as Python-typed 0-d arrays.
            if a.shape != shape:
                raise GraphError(f"loom.onnxruntime: input {k} expects {d.name}{fmt_shape(shape)}, got shape "
                                 f"{fmt_shape(a.shape)}")
            feed[name] = a
        if self._constant is not None:
            return tuple(np.array(o) for o in self._constant)
        outs = self.session.run(self._outs, feed)
        return tuple(np.array(o, dtype=d) for o, d in zip(outs, self._out_dtypes))


_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def compile_graph(graph: Graph) -> OrtExecutable:
    """Build an ONNX Runtime session for `graph` (the "onnxruntime" plugin's factory); cached per graph.

    Parameters
    ----------
    graph : loom.ir.Graph
        A traced graph; its placeholders are the inputs.

    Returns
    -------
    OrtExecutable
        ``run(*arrays) -> tuple of np.ndarray``, one per graph output.

    Examples
    --------
    >>> import numpy as np, loom
    >>> from loom.compiler.plugins import get_plugin
    >>> g = loom.ir.Graph()
    >>> x = g.add_input((3,), loom.float32)
    >>> g.outputs = [g.add_node("sum", [g.add_node("mul", [x, x])], {"axes": (0,), "keepdim": False})]
    >>> run = get_plugin("onnxruntime")(g)
    >>> run(np.array([1.0, 2.0, 3.0], np.float32))
    (array(14., dtype=float32),)
    """
    exe = _CACHE.get(graph)
    if exe is None:
        exe = _CACHE[graph] = OrtExecutable(graph)
    return exe


__all__ = ["compile_graph", "to_onnx", "OrtExecutable"]
