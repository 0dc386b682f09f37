"""Shared helpers for the codegen tests: build bodies, run them compiled and on the reference path, compare."""
from __future__ import annotations

import contextlib
import os

import numpy as np

import loom
from loom import dtypes as dt
from loom.codegen import get_kernel, run_reference
from loom.ir import Graph

@contextlib.contextmanager
def persistent_sync_kernels(config):
    """LOOM_CODEGEN_SYNC=1 and a LOOM_CACHE_DIR that persists between runs (.pytest_cache); restored after."""
    saved = {k: os.environ.get(k) for k in ("LOOM_CODEGEN_SYNC", "LOOM_CACHE_DIR")}
    os.environ["LOOM_CODEGEN_SYNC"] = "1"
    os.environ["LOOM_CACHE_DIR"] = os.environ.get("LOOM_TEST_CACHE_DIR") or str(config.cache.mkdir("loom-kernels"))
    try:
        yield os.environ["LOOM_CACHE_DIR"]
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


FLOATS = (loom.float32, loom.float64)
INTS = (loom.int8, loom.int16, loom.int32, loom.int64, loom.uint8)
ALL = FLOATS + INTS + (loom.bool,)

# Ops whose C result is bit-for-bit NumPy's; the rest (libm/libmvec) agree to a few ulp.
TRANSCENDENTAL = {"exp", "log", "log1p", "expm1", "sin", "cos", "tan", "tanh", "erf", "pow", "atan2"}


def special_values(d: dt.DType, n: int, seed: int = 0) -> np.ndarray:
    """`n` values of dtype `d` mixing ordinary, extreme and (for floats) NaN/Inf/-0.0 values."""
    rng = np.random.default_rng(seed)
    if d.is_floating_point:
        pool = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, np.inf, -np.inf, np.nan, 3.0, -7.0,
                         1e-30, -1e30, 100.0, 0.1, 2.0, -3.75], d.np)
        vals = np.concatenate([pool, (rng.standard_normal(max(0, n - len(pool))) * 3).astype(d.np)])
        return rng.permutation(vals)[:n] if n < len(vals) else vals[:n]
    if d is dt.bool_:
        return rng.integers(0, 2, n).astype(np.bool_)
    info = np.iinfo(d.np)
    pool = np.array([0, 1, -1, 2, -2, 7, -7, info.max, info.min, info.max - 1, info.min + 1, 3, 100 % info.max],
                    dtype=np.int64)
    pool = pool[(pool >= info.min) & (pool <= info.max)].astype(d.np)
    rest = rng.integers(max(info.min, -100), min(info.max, 100), max(0, n - len(pool)), endpoint=True).astype(d.np)
    return np.concatenate([pool, rest])[:n]


def compiled(g: Graph):
    """The kernel for `g`, built synchronously (the test session sets LOOM_CODEGEN_SYNC=1)."""
    k = get_kernel(g)
    assert k.fallback_reason is None, k.fallback_reason
    assert k.wait(300), f"kernel did not build: {k._lib.error if k._lib else ''}"
    return k


def run_kernel(g: Graph, arrays, out=None) -> np.ndarray:
    k = compiled(g)
    o = g.outputs[0]
    if out is None:
        out = np.empty(o.shape, o.dtype.np)
    k(arrays, out)
    return out


def assert_same(got: np.ndarray, want: np.ndarray, exact: bool, what: str = "", rtol: float | None = None) -> None:
    """Equal values (NaN where NaN); bit-exact unless `exact` is False (then a few ulp, or `rtol`)."""
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    if got.dtype.kind != "f":
        if not np.array_equal(got, want):
            bad = np.argwhere(got != want)[:5]
            raise AssertionError(f"{what}: mismatch at {bad.tolist()}: got {got[tuple(bad.T)]}, "
                                 f"want {want[tuple(bad.T)]}")
        return
    nan_g, nan_w = np.isnan(got), np.isnan(want)
    assert np.array_equal(nan_g, nan_w), f"{what}: NaN positions differ at {np.argwhere(nan_g != nan_w)[:5].tolist()}"
    g, w = got[~nan_g], want[~nan_w]
    if exact:
        same = (g == w) & (np.signbit(g) == np.signbit(w))
        if not same.all():
            idx = np.flatnonzero(~same)[:5]
            raise AssertionError(f"{what}: not bit-exact at flat {idx.tolist()}: got {g[idx]}, want {w[idx]}")
        return
    tol = rtol if rtol is not None else 8 * np.finfo(got.dtype).eps
    np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=what)


def check(g: Graph, arrays, exact: bool = True, what: str = "", rtol: float | None = None) -> np.ndarray:
    """Run `g` compiled and on the reference path and compare."""
    want = run_reference(g, [np.array(a) for a in arrays])
    got = run_kernel(g, arrays)
    assert_same(got, want, exact, what or str(g), rtol)
    return got


def select_body(shape, dtype, ops_and_builders, n_inputs: int = 1, sel_dtype=loom.int32):
    """A body whose output row k (first dim) is op k applied to the inputs: many ops, one kernel.

    `ops_and_builders` is a list of (name, fn(g, inputs) -> node); the output
    is where(sel == k, op_k, ...). Returns (graph, output dtype).
    """
    g = Graph()
    xs = [g.add_input(shape, dtype) for _ in range(n_inputs)]
    sel = g.add_input(shape, sel_dtype)
    results = [(name, fn(g, xs)) for name, fn in ops_and_builders]
    out = results[-1][1]
    for k in range(len(results) - 2, -1, -1):
        kk = g.add_constant(k, sel_dtype, shape=shape)
        mask = g.add_node("eq", [sel, kk])
        out = g.add_node("where", [mask, results[k][1], out])
    g.outputs = [out]
    return g


def selector(shape, n_ops: int, dtype=np.int32) -> np.ndarray:
    """sel[k, ...] = k % n_ops along the first dim."""
    rows = np.arange(shape[0]) % n_ops
    return np.broadcast_to(rows.reshape((-1,) + (1,) * (len(shape) - 1)), shape).astype(dtype)
