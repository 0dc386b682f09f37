"""Generated kernels against the NumPy reference: every elementwise op and dtype, casts, where, compare.

Many ops share one kernel (output row k is op k, chosen with where), so the
whole file compiles a few dozen kernels; sizes never cause a rebuild.
"""
import numpy as np
import pytest

import loom
from loom import dtypes as dt
from loom.codegen import run_reference
from loom.errors import LoomZeroDivisionError
from loom.ir import Graph

from .helpers import ALL, INTS, TRANSCENDENTAL, assert_same, run_kernel, select_body, selector, \
    special_values

FLOAT_UNARY = ["neg", "recip", "sqrt", "exp", "log", "log1p", "expm1", "sin", "cos", "tan", "tanh", "erf", "abs",
               "sign", "floor", "ceil", "round", "trunc"]
INT_UNARY = ["neg", "abs", "sign", "floor", "ceil", "round", "trunc", "not"]
BOOL_UNARY = ["not", "floor", "ceil", "round", "trunc"]
FLOAT_BINARY = ["add", "sub", "mul", "div", "maximum", "minimum", "floordiv", "mod", "pow", "atan2"]
INT_BINARY = ["add", "sub", "mul", "maximum", "minimum", "and", "or", "xor", "pow"]
BOOL_BINARY = ["add", "mul", "maximum", "minimum", "and", "or", "xor"]
COMPARE = ["eq", "ne", "lt", "le", "gt", "ge"]


def _rows(vals: np.ndarray, n_ops: int, reps: int = 2) -> np.ndarray:
    """Every op row sees every value."""
    return np.tile(vals, (n_ops * reps, 1))


def _check_rows(g, arrays, names, transcendental_ok=True, rtol=None):
    """Compare row by row so a failure names its op."""
    want = run_reference(g, [np.array(a) for a in arrays])
    got = run_kernel(g, arrays)
    for r in range(got.shape[0]):
        name = names[r % len(names)]
        assert_same(got[r], want[r], exact=name not in TRANSCENDENTAL, what=f"{name} row {r}", rtol=rtol)


def _unary_names(d):
    return FLOAT_UNARY if d.is_floating_point else BOOL_UNARY if d is dt.bool_ else INT_UNARY


@pytest.mark.parametrize("d", ALL, ids=lambda d: d.name)
def test_unary_ops(d):
    names = _unary_names(d)
    vals = special_values(d, 61, seed=1)
    if d.is_floating_point:  # Also values near libm's range-reduction edges.
        vals = np.concatenate([vals, np.linspace(-40, 40, 37).astype(d.np), np.array([88.7, -103.9, 709.7, 1e5],
                                                                                       d.np)])
    shape = (len(names) * 2, len(vals))
    g = select_body(shape, d, [(n, lambda g, xs, n=n: g.add_node(n, [xs[0]])) for n in names])
    _check_rows(g, [_rows(vals, len(names)), selector(shape, len(names))], names)


def _pairs(d, n=24, seed=2):
    v = special_values(d, n, seed)
    x, y = np.meshgrid(v, v, indexing="ij")
    return x.reshape(-1), y.reshape(-1)


def _binary_names(d):
    return FLOAT_BINARY if d.is_floating_point else BOOL_BINARY if d is dt.bool_ else INT_BINARY


@pytest.mark.parametrize("d", ALL, ids=lambda d: d.name)
def test_binary_ops(d):
    names = _binary_names(d)
    x, y = _pairs(d)
    if d.category == 1:  # Integer pow: small non-negative exponents, and negative ones for signed types.
        y_pow = np.where(np.arange(len(y)) % 3 == 0, y % 5, y % 70).astype(d.np)
    shape = (len(names) * 2, len(x))
    g = select_body(shape, d, [(n, lambda g, xs, n=n: g.add_node(n, xs)) for n in names], n_inputs=2)
    ys = _rows(y, len(names))
    if d.category == 1:
        for r in range(shape[0]):
            if names[r % len(names)] == "pow":
                ys[r] = y_pow if not d.is_signed else np.where(np.arange(len(y)) % 5 == 0, -1 - y_pow % 3, y_pow)
    _check_rows(g, [_rows(x, len(names)), ys, selector(shape, len(names))], names)


@pytest.mark.parametrize("d", ALL, ids=lambda d: d.name)
def test_compare_ops(d):
    x, y = _pairs(d, seed=3)
    shape = (len(COMPARE), len(x))
    g = select_body(shape, d, [(n, lambda g, xs, n=n: g.add_node(n, xs)) for n in COMPARE], n_inputs=2)
    _check_rows(g, [_rows(x, len(COMPARE), 1), _rows(y, len(COMPARE), 1), selector(shape, len(COMPARE))], COMPARE)


@pytest.mark.parametrize("src", ALL, ids=lambda d: d.name)
def test_casts(src):
    """cast(x, dst) for every dst, compared through an exact widening (int64 separately: it is wider)."""
    vals = special_values(src, 50, seed=4)
    if src.is_floating_point:  # Float -> int casts of in-range values only (out of range is undefined in C).
        vals = np.where(np.isfinite(vals) & (np.abs(vals) < 100), vals, np.asarray(-3.5, src.np)).astype(src.np)
    targets = [t for t in ALL if t is not loom.int64]
    names = [t.name for t in targets]
    shape = (len(targets), len(vals))

    def widened(g, xs, t):
        y = g.add_node("cast", [xs[0]], {"dtype": t})
        return g.add_node("cast", [y], {"dtype": loom.float64})
    g = select_body(shape, src, [(t.name, lambda g, xs, t=t: widened(g, xs, t)) for t in targets])
    _check_rows(g, [_rows(vals, len(targets), 1), selector(shape, len(targets))], names)
    g2 = Graph()
    x = g2.add_input((len(vals),), src)
    g2.outputs = [g2.add_node("cast", [x], {"dtype": loom.int64})]
    assert_same(run_kernel(g2, [vals]), run_reference(g2, [vals]), True, "cast int64")


@pytest.mark.parametrize("d", ALL, ids=lambda d: d.name)
def test_where(d):
    g = Graph()
    c = g.add_input((7, 9), loom.bool)
    a, b = g.add_input((7, 9), d), g.add_input((7, 9), d)
    g.outputs = [g.add_node("where", [c, a, b])]
    rng = np.random.default_rng(5)
    arrays = [rng.integers(0, 2, (7, 9)).astype(bool), special_values(d, 63, 6).reshape(7, 9),
              special_values(d, 63, 7).reshape(7, 9)]
    assert_same(run_kernel(g, arrays), run_reference(g, arrays), True, "where")


@pytest.mark.parametrize("d", INTS, ids=lambda d: d.name)
def test_integer_division(d):
    """floordiv/mod (and div on ints) with Python semantics; INT_MIN // -1 wraps as in NumPy."""
    names = ["floordiv", "mod"]
    x, y = _pairs(d, seed=8)
    y = np.where(y == 0, np.asarray(-1 if d.is_signed else 3, d.np), y).astype(d.np)
    shape = (4, len(x))
    g = select_body(shape, d, [(n, lambda g, xs, n=n: g.add_node(n, xs)) for n in names], n_inputs=2)
    _check_rows(g, [_rows(x, 2), _rows(y, 2), selector(shape, 2)], names)


@pytest.mark.parametrize("op", ["floordiv", "mod", "div"])
def test_integer_division_by_zero_raises_like_reference(op):
    g = Graph()
    a, b = g.add_input((4, 5), loom.int32), g.add_input((4, 5), loom.int32)
    g.outputs = [g.add_node("add", [g.add_node(op, [a, b]), a])]
    x = np.arange(20, dtype=np.int32).reshape(4, 5)
    y = np.ones((4, 5), np.int32)
    assert_same(run_kernel(g, [x, y]), run_reference(g, [x, y]), True, op)
    y[3, 4] = 0
    with pytest.raises(LoomZeroDivisionError) as want:
        run_reference(g, [x, y])
    with pytest.raises(LoomZeroDivisionError) as got:
        run_kernel(g, [x, y])
    assert str(got.value) == str(want.value)


def test_float_division_by_zero_gives_inf_and_nan():
    g = Graph()
    a, b = g.add_input((6,), loom.float32), g.add_input((6,), loom.float32)
    names = ["div", "floordiv", "mod"]
    x = np.array([1, -1, 0, np.nan, np.inf, -0.0], np.float32)
    y = np.array([0, 0, 0, 0, -0.0, 0], np.float32)
    for n in names:
        g = Graph()
        a, b = g.add_input((6,), loom.float32), g.add_input((6,), loom.float32)
        g.outputs = [g.add_node(n, [a, b])]
        assert_same(run_kernel(g, [x, y]), run_reference(g, [x, y]), True, n)


def test_round_half_to_even_and_float_to_int_truncation():
    g = Graph()
    x = g.add_input((8,), loom.float64)
    r = g.add_node("round", [x])
    g.outputs = [g.add_node("add", [r, g.add_node("cast", [g.add_node("cast", [x], {"dtype": loom.int32})],
                                                  {"dtype": loom.float64})])]
    v = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.7, 2.7, 3.5])
    out = run_kernel(g, [v])
    np.testing.assert_array_equal(out, np.round(v) + np.trunc(v))


def test_nan_propagation_in_maximum_minimum():
    for op in ("maximum", "minimum"):
        g = Graph()
        a, b = g.add_input((4,), loom.float32), g.add_input((4,), loom.float32)
        g.outputs = [g.add_node(op, [a, b])]
        x = np.array([np.nan, 1, np.nan, -np.inf], np.float32)
        y = np.array([1, np.nan, np.nan, np.inf], np.float32)
        out = run_kernel(g, [x, y])
        assert np.isnan(out[:3]).all() and out[3] == (np.inf if op == "maximum" else -np.inf)
