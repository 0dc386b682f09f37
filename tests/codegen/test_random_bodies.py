"""Hypothesis: random fused bodies, compiled vs the reference path (thousands of examples).

Kernel sources depend only on a body's structure, so the test draws each
body's *structure* from a fixed pool of random recipes (op trees over the
dtype's ops, leaves that are plain, broadcast or padded, an optional
reduction with an elementwise tail) and lets hypothesis draw everything
else: sizes (zero included), the movement ops on each input (permute,
flip, strided slice, reshape, pad widths), reduction axes, the memory
layout of each array (C, Fortran, reversed, strided) and the data. The
pool compiles once (and is cached on disk between runs); every example
then runs a real compiled kernel.
"""
from __future__ import annotations

import os
import random
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import loom
from loom.codegen import get_kernel, run_reference
from loom.ir import Graph

from .helpers import assert_same

EXAMPLES = int(os.environ.get("LOOM_RANDOM_BODIES", "2000"))
POOL_SIZE = 24

FLOAT_BIN = ["add", "sub", "mul", "div", "maximum", "minimum", "floordiv", "mod"]
FLOAT_UN = ["neg", "abs", "tanh", "sin", "floor", "round", "sqrt_abs", "exp_tanh"]
INT_BIN = ["add", "sub", "mul", "maximum", "minimum", "and", "or", "xor", "floordiv_safe"]
INT_UN = ["neg", "abs", "not", "sign"]
BOOL_BIN = ["and", "or", "xor"]
TRANSCENDENTAL = {"tanh", "sin", "exp_tanh"}


@dataclass
class Recipe:
    dtype: loom.dtypes.DType
    expr: tuple
    leaves: list[str]              # Per leaf: "view", "bcast_row", "bcast_col" or "pad".
    reduce: tuple | None           # (op, "one" | "all", keepdim)
    post: str | None               # Elementwise tail on the reduced value: a unary op or "add_leaf".

    @property
    def transcendental(self) -> bool:
        return _uses(self.expr, TRANSCENDENTAL)


def _uses(expr, names) -> bool:
    return expr[0] in names or any(_uses(e, names) for e in expr[1:] if isinstance(e, tuple))


def _random_expr(rng: random.Random, d, n_leaves: int, depth: int):
    if depth == 0 or rng.random() < 0.25:
        return ("leaf", rng.randrange(n_leaves))
    if d is loom.bool:
        if rng.random() < 0.2:
            return ("not", _random_expr(rng, d, n_leaves, depth - 1))
        return (rng.choice(BOOL_BIN), _random_expr(rng, d, n_leaves, depth - 1), _random_expr(rng, d, n_leaves,
                                                                                                depth - 1))
    r = rng.random()
    un, bi = (FLOAT_UN, FLOAT_BIN) if d.is_floating_point else (INT_UN, INT_BIN)
    if r < 0.25:
        return (rng.choice(un), _random_expr(rng, d, n_leaves, depth - 1))
    if r < 0.35:
        return ("where_gt", *[_random_expr(rng, d, n_leaves, depth - 1) for _ in range(4)])
    if r < 0.42:
        return ("const_mul", _random_expr(rng, d, n_leaves, depth - 1))
    return (rng.choice(bi), _random_expr(rng, d, n_leaves, depth - 1), _random_expr(rng, d, n_leaves, depth - 1))


def make_pool() -> list[Recipe]:
    rng = random.Random(20240611)
    dtypes = [loom.float32, loom.float32, loom.float64, loom.int32, loom.int64, loom.int8, loom.bool]
    pool = []
    for k in range(POOL_SIZE):
        d = dtypes[k % len(dtypes)]
        n_leaves = rng.randint(1, 3)
        expr = _random_expr(rng, d, n_leaves, 3)
        leaves = [rng.choice(["view", "view", "bcast_row", "bcast_col", "pad"]) for _ in range(n_leaves)]
        reduce = None
        if rng.random() < 0.6:
            ops = ["sum", "max", "min", "prod"] if d is not loom.bool else ["sum", "max", "min"]
            reduce = (rng.choice(ops), rng.choice(["one", "one", "all"]), rng.random() < 0.5)
        post = None
        if reduce and rng.random() < 0.6:
            post = "add_leaf" if d is not loom.bool else "not"
            if rng.random() < 0.4 and d is not loom.bool:
                post = rng.choice(FLOAT_UN if d.is_floating_point else INT_UN)
        pool.append(Recipe(d, expr, leaves, reduce, post))
    return pool


POOL = make_pool()


# ---------------------------------------------------------------- building a body from a recipe

class Draws:
    """Choices drawn by hypothesis."""

    def __init__(self, data):
        self.data = data

    def int(self, lo: int, hi: int) -> int:
        return self.data.draw(st.integers(lo, hi))

    def choice(self, options):
        return self.data.draw(st.sampled_from(options))

    def require(self, condition: bool) -> None:
        assume(condition)


class Fixed(Draws):
    """Choices from a seeded generator (to build the pool's kernels before the hypothesis run)."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)

    def int(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def choice(self, options):
        return self.rng.choice(list(options))

    def require(self, condition: bool) -> None:
        assert condition


class Builder:
    """Builds one body for a recipe at concrete sizes and movement choices, with matching input arrays."""

    def __init__(self, recipe: Recipe, m: int, n: int, pick: Draws):
        self.r, self.m, self.n, self.pick = recipe, m, n, pick
        self.g = Graph()
        self.arrays: list[np.ndarray] = []
        self.leaf_nodes = [self.leaf(kind) for kind in recipe.leaves]

    def data(self, shape) -> np.ndarray:
        d = self.r.dtype
        seed = self.pick.int(0, 2**31 - 1)
        rng = np.random.default_rng(seed)
        if d is loom.bool:
            a = rng.integers(0, 2, shape).astype(bool)
        elif d.is_floating_point:
            a = (rng.integers(-400, 400, shape) / 100).astype(d.np)
            if a.size and self.pick.int(0, 1):
                flat = a.reshape(-1)
                flat[rng.integers(0, a.size, max(1, a.size // 8))] = rng.choice(
                    np.array([np.nan, np.inf, -np.inf, -0.0, 0.0], d.np), max(1, a.size // 8))
        else:
            info = np.iinfo(d.np)
            a = rng.integers(max(info.min, -60), min(info.max, 60), shape, endpoint=True).astype(d.np)
        return self.layout(a)

    def layout(self, a: np.ndarray) -> np.ndarray:
        how = self.pick.choice(["c", "f", "reversed", "strided"])
        a = np.asarray(a)
        if how == "f" and a.ndim:
            return np.asfortranarray(a)
        if how == "reversed" and a.ndim:
            rev = tuple(slice(None, None, -1) for _ in range(a.ndim))
            return np.ascontiguousarray(a[rev])[rev]
        if how == "strided" and a.ndim:
            big = np.zeros(tuple(s * 2 for s in a.shape), a.dtype)
            view = big[tuple(slice(None, None, 2) for _ in range(a.ndim))]
            view[...] = a
            return view
        return a

    def inp(self, shape):
        node = self.g.add_input(shape, self.r.dtype)
        self.arrays.append(self.data(shape))
        return node

    def leaf(self, kind: str):
        m, n, g = self.m, self.n, self.g
        if kind == "bcast_row":
            x = self.inp((n,))
            return g.add_node("expand", [g.add_node("reshape", [x], {"shape": (1, n)})], {"shape": (m, n)})
        if kind == "bcast_col":
            return g.add_node("expand", [self.inp((m, 1))], {"shape": (m, n)})
        if kind == "pad":
            lo0 = self.pick.int(0, m)
            hi0 = self.pick.int(0, m - lo0)
            lo1 = self.pick.int(0, n)
            hi1 = self.pick.int(0, n - lo1)
            x = self.inp((m - lo0 - hi0, n - lo1 - hi1))
            value = {loom.bool: True}.get(self.r.dtype, 3)
            return g.add_node("pad", [x], {"pads": ((lo0, hi0), (lo1, hi1)), "value": value})
        view = self.pick.choice(["plain", "permute", "flip", "slice", "reshape"])
        if view == "permute":
            return g.add_node("permute", [self.inp((n, m))], {"perm": (1, 0)})
        if view == "flip":
            axes = self.pick.choice([(0,), (1,), (0, 1)])
            return g.add_node("flip", [self.inp((m, n))], {"axes": axes})
        if view == "slice":
            s0, s1 = self.pick.int(1, 3), self.pick.int(1, 3)
            a0, a1 = self.pick.int(0, 2), self.pick.int(0, 2)
            x = self.inp((a0 + m * s0, a1 + n * s1))
            return g.add_node("slice", [x], {"starts": (a0, a1), "stops": (a0 + m * s0, a1 + n * s1),
                                             "steps": (s0, s1)})
        if view == "reshape":
            return g.add_node("reshape", [self.inp((m * n,))], {"shape": (m, n)})
        return self.inp((m, n))

    def expr(self, e):
        g, d = self.g, self.r.dtype
        op = e[0]
        if op == "leaf":
            return self.leaf_nodes[e[1]]
        args = [self.expr(c) for c in e[1:]]
        shape = tuple(args[0].shape)
        if op == "sqrt_abs":
            return g.add_node("sqrt", [g.add_node("abs", args)])
        if op == "exp_tanh":
            return g.add_node("exp", [g.add_node("tanh", args)])
        if op == "const_mul":
            return g.add_node("mul", [args[0], g.add_constant(3 if d.category == 1 else 0.75, d, shape=shape)])
        if op == "where_gt":
            return g.add_node("where", [g.add_node("gt", args[:2]), args[2], args[3]])
        if op == "floordiv_safe":  # |b| + 1 is never 0 for the data drawn.
            one = g.add_constant(1, d, shape=shape)
            return g.add_node("floordiv", [args[0], g.add_node("add", [g.add_node("abs", [args[1]]), one])])
        return g.add_node(op, args)

    def build(self) -> Graph:
        g, r = self.g, self.r
        out = self.expr(r.expr)
        if r.reduce:
            op, which, keep = r.reduce
            axes = (self.pick.int(0, 1),) if which == "one" else (0, 1)
            sizes = [(self.m, self.n)[a] for a in axes]
            self.pick.require(op not in ("max", "min") or all(sizes))
            out = g.add_node(op, [out], {"axes": axes, "keepdim": keep})
            if r.post == "add_leaf":
                out = g.add_node("add", [out, self.inp(tuple(out.shape))])
            elif r.post:
                out = _unary(g, r.post, out)
        g.outputs = [out]
        return g


def _unary(g, op, x):
    if op == "sqrt_abs":
        return g.add_node("sqrt", [g.add_node("abs", [x])])
    if op == "exp_tanh":
        return g.add_node("exp", [g.add_node("tanh", [x])])
    return g.add_node(op, [x])


def _compare(recipe: Recipe, got, want):
    d = recipe.dtype
    if not d.is_floating_point:
        assert_same(got, want, True)
        return
    summing = recipe.reduce is not None and recipe.reduce[0] in ("sum", "prod")
    if not summing and not recipe.transcendental and recipe.post not in TRANSCENDENTAL:
        assert_same(got, want, True)
        return
    if summing:  # Summation order differs; the error scales with the terms, bounded by the result's scale.
        fin = want[np.isfinite(want)]
        scale = 1.0 + (float(np.max(np.abs(fin))) if fin.size else 0.0)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * scale, equal_nan=True)
    else:
        np.testing.assert_allclose(got, want, rtol=20 * np.finfo(d.np).eps, atol=20 * np.finfo(d.np).eps,
                                   equal_nan=True)


# ---------------------------------------------------------------- the test

@pytest.fixture(scope="module")
def pool_kernels():
    """Build the pool's kernels up front, in parallel on the background pool."""
    saved = os.environ.get("LOOM_CODEGEN_SYNC")
    os.environ["LOOM_CODEGEN_SYNC"] = "0"
    try:
        kernels = [get_kernel(Builder(recipe, 3, 4, Fixed(k)).build()) for k, recipe in enumerate(POOL)]
        for k in kernels:
            assert k.fallback_reason is None, k.fallback_reason
            assert k.wait(600), "pool kernel failed to build"
        return kernels
    finally:
        os.environ["LOOM_CODEGEN_SYNC"] = saved or "1"


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(data=st.data(), index=st.integers(0, POOL_SIZE - 1), m=st.integers(0, 9), n=st.integers(0, 9))
def test_random_bodies(pool_kernels, data, index, m, n):
    recipe = POOL[index]
    b = Builder(recipe, m, n, Draws(data))
    g = b.build()
    kernel = get_kernel(g)
    assert kernel.key == pool_kernels[index].key, "a body's kernel must not depend on its sizes"
    assert kernel.ready
    out = np.empty(g.outputs[0].shape, g.outputs[0].dtype.np)
    kernel(b.arrays, out)
    want = run_reference(g, [np.array(a) for a in b.arrays])
    _compare(recipe, out, want)


def test_pool_covers_the_features():
    """The recipe pool exercises every leaf kind, every reduction and every dtype kind."""
    kinds = {k for r in POOL for k in r.leaves}
    assert kinds == {"view", "bcast_row", "bcast_col", "pad"}
    assert {r.reduce[0] for r in POOL if r.reduce} == {"sum", "max", "min", "prod"}
    assert {r.reduce[1] for r in POOL if r.reduce} == {"one", "all"}
    assert any(r.post == "add_leaf" for r in POOL) and sum(r.reduce is None for r in POOL) >= 4
