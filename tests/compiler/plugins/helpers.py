"""Shared tools for the plugin tests: build one-node graphs and compare a plugin with the reference."""
from __future__ import annotations

import numpy as np

import loom
from loom import dtypes as dt
from loom.compiler.plugins import get_plugin
from loom.ir import Graph

FLOATS = [loom.float32, loom.float64, loom.float16, loom.bfloat16]
INTS = [loom.uint8, loom.int8, loom.int16, loom.int32, loom.int64]
ALL = [loom.bool] + INTS + FLOATS
# Relative error allowed where XLA's math differs from NumPy's in the last bits (transcendentals,
# fused multiply-adds, summation order): a few units in the last place of each type.
ULPS = {loom.float32: 4e-6, loom.float64: 1e-13, loom.float16: 2e-3, loom.bfloat16: 1.6e-2}


def stored(array: np.ndarray, d: dt.DType) -> np.ndarray:
    """A value in loom's stored form (bfloat16 as uint16 bits) from plain NumPy values."""
    if d is dt.bfloat16:
        return dt.f32_to_bf16(np.asarray(array, np.float32))
    return np.asarray(array).astype(d.np)


def as_float(array: np.ndarray, d: dt.DType) -> np.ndarray:
    return np.asarray(dt.bf16_to_f32(array) if d is dt.bfloat16 else array, np.float64)


def one_node(op: str, dtypes, shape, attrs=None, shapes=None) -> Graph:
    """A graph of one `op` node over fresh placeholders (one per dtype)."""
    g = Graph()
    shapes = shapes or [shape] * len(dtypes)
    ins = [g.add_input(s, d, name=f"x{k}") for k, (s, d) in enumerate(zip(shapes, dtypes))]
    g.outputs = [g.add_node(op, ins, attrs or {})]
    return g


def compare(graph: Graph, inputs, rtol: float | None = 0.0, atol: float = 0.0, plugin: str = "xla",
            zero_signs: bool = True):
    """Run `graph` through the plugin and the reference; outputs must agree.

    Shapes and storage dtypes always match exactly, integers and bools are
    equal, float NaN positions equal; other float values are equal within
    rtol/atol (0: exactly; None: the type's ULPS), except that a subnormal
    float32/float64 result may be zero in the plugin (XLA flushes them); with `zero_signs=False` the
    signs of zeros and infinities are not compared (XLA folds x + 0 to x).
    Returns the plugin's outputs.
    """
    got = get_plugin(plugin)(graph)(*inputs)
    # Graph.run takes bfloat16 values as floats (the plugin takes loom's stored bits, as loom.function passes).
    ref_inputs = [as_float(a, n.dtype).astype(np.float32) if n.dtype is dt.bfloat16 else a
                  for a, n in zip(inputs, graph.inputs)]
    want = [t._array() for t in graph.run(*ref_inputs)]
    assert isinstance(got, tuple) and len(got) == len(want) == len(graph.outputs)
    for k, (g, w, node) in enumerate(zip(got, want, graph.outputs)):
        assert isinstance(g, np.ndarray), f"output {k} is a {type(g).__name__}"
        assert g.dtype == w.dtype == node.dtype.np, (k, g.dtype, w.dtype)
        assert g.shape == w.shape == tuple(node.shape), (k, g.shape, w.shape)
        if not node.dtype.is_floating_point:
            np.testing.assert_array_equal(g, w, err_msg=f"output {k} of {node.op}")
            continue
        fg, fw = as_float(g, node.dtype), as_float(w, node.dtype)
        # XLA flushes float32/float64 subnormal results to zero (a documented caveat of the plugin).
        tiny = np.finfo(np.float64 if node.dtype is dt.float64 else np.float32).tiny
        fw = np.where((np.abs(fw) < tiny) & (fg == 0), fg, fw)
        if not zero_signs:
            # XLA's simplifier rewrites x + 0 as x, so a zero's sign (and 1/0's) may differ: compare magnitudes there.
            edge = (fw == 0) | np.isinf(fw)
            fg, fw = np.where(edge, np.abs(fg), fg), np.where(edge, np.abs(fw), fw)
        nan = np.isnan(fw)
        np.testing.assert_array_equal(np.isnan(fg), nan, err_msg=f"output {k} of {node.op}: NaN positions")
        tol = ULPS[node.dtype] if rtol is None else rtol
        if tol == 0 and atol == 0:
            np.testing.assert_array_equal(fg[~nan], fw[~nan], err_msg=f"output {k} of {node.op}")
        else:
            np.testing.assert_allclose(fg[~nan], fw[~nan], rtol=tol, atol=atol, err_msg=f"output {k} of {node.op}")
    return got
