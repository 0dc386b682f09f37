"""Constant folding."""
import math

import numpy as np
import pytest

import loom
from loom.compiler import run_passes
from loom.compiler.passes.fold import fold
from loom.errors import LoomError
from loom.ir import Graph
from tests.compiler.helpers import assert_same, op_counts, values

F32, I64, BF16, F16 = loom.float32, loom.int64, loom.bfloat16, loom.float16


def test_uniform_constants_fold_to_a_const_of_any_size():
    g = Graph()
    x = g.add_input((512, 512), F32)
    two = g.add_constant(2.0, F32, shape=(512, 512))
    e = g.add_node("exp", [g.add_node("neg", [two])])
    g.outputs = [g.add_node("mul", [x, e])]
    out = run_passes(g, ["fold"])
    assert op_counts(out) == {"input": 1, "const": 1, "mul": 1}
    (c,) = out.find(op="const")
    assert c.shape == (512, 512) and c.attrs["value"] == float(np.exp(np.float32(-2.0)))
    v = values((512, 512))
    assert_same(out.run(v), g.run(v))


def test_movement_of_a_const_stays_a_const():
    g = Graph()
    x = g.add_input((3, 4), F32)
    c = g.add_constant(1.5, F32, shape=(4, 1))
    c = g.add_node("expand", [c], {"shape": (4, 3)})
    c = g.add_node("permute", [c], {"perm": (1, 0)})
    g.outputs = [g.add_node("add", [x, c])]
    out = run_passes(g, ["fold"])
    assert op_counts(out) == {"input": 1, "const": 1, "add": 1}
    v = values((3, 4))
    assert_same(out.run(v), g.run(v))


def test_buffer_expressions_fold_to_buffers():
    g = Graph()
    x = g.add_input((2, 3), F32)
    w = g.add_constant(np.arange(6, dtype=np.float32).reshape(2, 3))
    v = g.add_constant(np.ones((3, 2), np.float32))
    mm = g.add_node("matmul", [w, v])  # (2, 2), all constant
    s = g.add_node("sum", [mm], {"axes": (1,), "keepdim": True})
    s = g.add_node("expand", [s], {"shape": (2, 3)})
    g.outputs = [g.add_node("mul", [x, g.add_node("add", [s, w])])]
    out = run_passes(g, ["fold"])
    assert op_counts(out) == {"input": 1, "buffer": 1, "mul": 1}
    (b,) = out.find(op="buffer")
    np.testing.assert_array_equal(b.buffer, np.array([[6, 7, 8], [27, 28, 29]], np.float32))
    assert not b.buffer.flags.writeable
    xv = values((2, 3))
    assert_same(out.run(xv), g.run(xv))


def test_uniform_buffer_results_become_consts():
    g = Graph()
    x = g.add_input((4,), F32)
    b = g.add_constant(np.array([1.0, -1.0, 1.0, -1.0], np.float32))
    g.outputs = [g.add_node("add", [x, g.add_node("abs", [b])])]
    out = run_passes(g, ["fold"])
    assert op_counts(out) == {"input": 1, "const": 1, "add": 1}


def test_size_limit_keeps_big_results_unfolded():
    g = Graph()
    x = g.add_input((64, 64), F32)
    b = g.add_constant(values((64, 1), 3))
    big = g.add_node("expand", [b], {"shape": (64, 64)})
    g.outputs = [g.add_node("add", [x, g.add_node("exp", [big])])]
    assert op_counts(fold(g.copy(), max_bytes=1024)) == op_counts(g)
    folded = fold(g.copy())  # 16 KiB is under the default limit.
    assert op_counts(folded) == {"input": 1, "buffer": 1, "add": 1}
    xv = values((64, 64))
    assert_same(folded.run(xv), g.run(xv))


def test_rand_is_never_folded():
    g = Graph()
    x = g.add_input((4,), F32)
    r = g.add_node("rand", [], {"seed": 3, "shape": (4,), "dtype": F32})
    g.outputs = [g.add_node("add", [x, g.add_node("exp", [r])])]
    out = run_passes(g, ["fold"])
    assert op_counts(out) == op_counts(g)


def test_arange_expressions_fold():
    g = Graph()
    x = g.add_input((5,), I64)
    a = g.add_node("arange", [], {"start": 0, "step": 2, "shape": (5,), "dtype": I64})
    g.outputs = [g.add_node("add", [x, g.add_node("mul", [a, a])])]
    out = run_passes(g, ["fold"])
    assert op_counts(out) == {"input": 1, "buffer": 1, "add": 1}
    xv = np.arange(5, dtype=np.int64)
    assert_same(out.run(xv), g.run(xv))


def test_errors_stay_at_run_time():
    g = Graph()
    x = g.add_input((3,), I64)
    num = g.add_constant(np.array([1, 2, 3], np.int64))
    den = g.add_constant(np.array([1, 0, 3], np.int64))
    g.outputs = [g.add_node("add", [x, g.add_node("floordiv", [num, den])])]
    out = run_passes(g, ["fold"])
    assert "floordiv" in op_counts(out)
    with pytest.raises(LoomError, match="division by zero"):
        out.run(np.zeros(3, np.int64))


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, -0.0, 0.0, 3.0])
@pytest.mark.parametrize("dtype", [F32, BF16, F16, loom.float64])
def test_special_values_survive_folding(value, dtype):
    g = Graph()
    x = g.add_input((3,), dtype)
    c = g.add_constant(value, dtype, shape=(3,))
    c = g.add_node("neg", [g.add_node("neg", [c])])
    c2 = g.add_node("mul", [c, g.add_constant(np.array([1, 1, 1], dtype.np if dtype is not BF16 else np.float32),
                                                dtype=dtype)])
    g.outputs = [c2, g.add_node("add", [x, c])]
    out = run_passes(g, ["fold"])
    assert "neg" not in op_counts(out) and "mul" not in op_counts(out)
    xv = np.array([1.0, -0.0, np.nan], np.float32)
    assert_same(out.run(xv if dtype in (F32, BF16) else xv.astype(dtype.np)),
                g.run(xv if dtype in (F32, BF16) else xv.astype(dtype.np)))


def test_integer_wrapping_and_casts_fold_exactly():
    g = Graph()
    x = g.add_input((2,), loom.uint8)
    c = g.add_constant(250, loom.uint8, shape=(2,))
    c = g.add_node("add", [c, g.add_constant(10, loom.uint8, shape=(2,))])  # Wraps to 4.
    f = g.add_node("cast", [g.add_constant(-2.7, F32, shape=(2,))], {"dtype": loom.int32})
    g.outputs = [g.add_node("add", [x, c]), f]
    out = run_passes(g, ["fold"])
    assert op_counts(out) == {"input": 1, "const": 2, "add": 1}
    xv = np.array([1, 255], np.uint8)
    got = out.run(xv)
    assert_same(got, g.run(xv))
    assert got[0].tolist() == [5, 3] and got[1].tolist() == [-2, -2]
