"""float16/bfloat16 kernels: load half, compute in float32, store half (loom.codegen.half)."""
import numpy as np
import pytest

import loom
from loom import dtypes as dt
from loom.codegen import get_kernel, run_reference
from loom.codegen.half import widen
from loom.ir import Graph
from loom.runtime import reference

HALVES = [loom.float16, loom.bfloat16]


def _stored(a: np.ndarray, d) -> np.ndarray:
    with np.errstate(over="ignore"):  # (1e6 and 3.4e38 overflow float16 to inf, as they should.)
        return a.astype(np.float16) if d is loom.float16 else dt.f32_to_bf16(a.astype(np.float32))


def _compiled(g: Graph):
    k = get_kernel(g)
    assert k.wait(120) and k.ready, k.fallback_reason
    return k


def _bias_tanh(d, reduce: bool) -> Graph:
    g = Graph()
    x, b = g.add_input((40, 33), d), g.add_input((33,), d)
    e = g.add_node("expand", [g.add_node("reshape", [b], {"shape": (1, 33)})], {"shape": (40, 33)})
    half = g.add_node("const", [], {"value": 0.5, "shape": (40, 33), "dtype": d})
    y = g.add_node("tanh", [g.add_node("mul", [g.add_node("add", [x, e]), half])])
    g.outputs = [g.add_node("sum", [y], {"axes": (1,), "keepdim": False}) if reduce else y]
    return g


@pytest.mark.parametrize("d", HALVES, ids=lambda d: d.name)
@pytest.mark.parametrize("reduce", [False, True], ids=["elementwise", "row-sum"])
def test_half_bodies_run_in_c_within_half_precision(d, reduce):
    g = _bias_tanh(d, reduce)
    assert all(n.dtype in (d, loom.float32) for n in widen(g)), "the widened body computes in float32"
    assert {n.op for n in widen(g) if n.dtype is d} <= {"input", "cast", "reshape", "expand"}
    k = _compiled(g)
    rng = np.random.default_rng(0)
    args = [_stored(rng.standard_normal(s), d) for s in ((40, 33), (33,))]
    out = np.empty(g.outputs[0].shape, d.np)
    k(args, out)
    want = reference.to_compute(run_reference(g, args), d).astype(np.float64)
    got = reference.to_compute(out, d).astype(np.float64)
    eps = 2.0 ** -10 if d is loom.float16 else 2.0 ** -7  # One ulp at 1.
    # Both round every op to half; libm and NumPy may differ by an ulp before rounding.
    np.testing.assert_allclose(got, want, rtol=4 * eps, atol=(33 if reduce else 1) * eps)


SPECIAL = np.array([0.0, -0.0, 1.0, 1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, 1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11,
                    65504.0, 65519.0, 65520.0, 1e6, -1e6, 2.0 ** -20, 2.0 ** -25, 3 * 2.0 ** -26, 1e-40,
                    np.inf, -np.inf, np.nan, 3.3895314e38, -2.5], np.float32)


@pytest.mark.parametrize("d", HALVES, ids=lambda d: d.name)
def test_float32_to_half_rounds_to_nearest_even_like_numpy(d):
    g = Graph()
    x = g.add_input(SPECIAL.shape, loom.float32)
    g.outputs = [g.add_node("cast", [g.add_node("mul", [x, x])], {"dtype": d})]
    k = _compiled(g)
    out = np.empty(SPECIAL.shape, d.np)
    k([SPECIAL], out)
    want = run_reference(g, [SPECIAL])
    nan = np.isnan(reference.to_compute(want, d))
    assert np.array_equal(np.isnan(reference.to_compute(out, d)), nan)
    np.testing.assert_array_equal(out[~nan], want[~nan])  # Bit for bit: ties to even, overflow, subnormals.


@pytest.mark.parametrize("d", HALVES, ids=lambda d: d.name)
def test_half_to_float32_is_exact_and_explicit_rounding_is_kept(d):
    g = Graph()
    x = g.add_input(SPECIAL.shape, d)
    wide = g.add_node("cast", [x], {"dtype": loom.float32})
    third = g.add_node("const", [], {"value": 1 / 3, "shape": SPECIAL.shape, "dtype": loom.float32})
    rounded = g.add_node("cast", [g.add_node("mul", [wide, third])], {"dtype": d})   # Rounded to half here...
    back = g.add_node("cast", [rounded], {"dtype": loom.float32})
    g.outputs = [g.add_node("mul", [back, g.add_node("const", [], {"value": 3.0, "shape": SPECIAL.shape,
                                                                   "dtype": loom.float32})])]  # ...then * 3.
    k = _compiled(g)
    arg = _stored(SPECIAL, d)
    out = np.empty(SPECIAL.shape, np.float32)
    k([arg], out)
    np.testing.assert_array_equal(out, run_reference(g, [arg]))


@pytest.mark.parametrize("src", [loom.int16, loom.uint8, loom.bool], ids=lambda d: d.name)
def test_small_integers_cast_to_half_in_c(src):
    g = Graph()
    x = g.add_input((6,), src)
    g.outputs = [g.add_node("cast", [x], {"dtype": loom.bfloat16})]
    k = _compiled(g)
    arg = np.array([0, 1, 255, 3, 129, 7], np.int64).astype(src.np) if src is not loom.bool else \
        np.array([0, 1, 1, 0, 1, 0], bool)
    out = np.empty(6, np.uint16)
    k([arg], out)
    np.testing.assert_array_equal(out, run_reference(g, [arg]))


def test_wide_integer_to_half_stays_on_reference_path():
    g = Graph()
    x = g.add_input((3,), loom.int64)
    g.outputs = [g.add_node("cast", [x], {"dtype": loom.float16})]
    k = get_kernel(g)
    assert not k.ready and "int64" in k.fallback_reason  # Through float32 it could round twice.
