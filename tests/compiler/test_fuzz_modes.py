"""Differential fuzz: random valid graphs give the same results in every execution mode.

Each graph (from tests/compiler/fuzz_graphs.py, over the whole primitive set)
runs four ways:

- reference: `Graph.run`, the NumPy reference interpreter;
- eager: the graph replayed op by op through the Tensor layer (`apply`);
- eager_compiled: the same replay under ``loom.backend("compiled")``;
- compiled: `loom.compiler.compile` (all passes, generated C kernels, built
  before their first call);
- traced: the same replay traced by `loom.function` and run from its plan.

Exact outputs (no transcendental function or reordered float sum on their
way) must agree bit for bit, NaN-aware; the others within float rounding.
Graphs come from a pool of structures instantiated at many sizes and data,
so the C kernels of the pool are built once (the kernel cache persists in
.pytest_cache between runs). The fast test runs 200 graphs; the slow one
10,000 (``LOOM_FUZZ_GRAPHS`` overrides the count).
"""
from __future__ import annotations

import os
import time

import numpy as np
import pytest

import loom
from loom.errors import LoomError
from loom.tensor import apply

from tests.codegen.helpers import persistent_sync_kernels

from .fuzz_graphs import make_graph

RTOL = {"bfloat16": 1.6e-2, "float16": 4e-3, "float32": 2e-4, "float64": 1e-9}


@pytest.fixture(scope="module", autouse=True)
def sync_kernels(request):
    """Kernels are built before their first call (so compiled modes run C), cached between runs."""
    with persistent_sync_kernels(request.config):
        yield


def replay(graph, tensors, fixed=None):
    """The graph's nodes applied one by one to loom tensors, through the Tensor layer.

    `fixed` maps nodes to tensors to use instead of applying them.
    """
    env = dict(zip(graph.inputs, tensors))
    env.update(fixed or {})
    for n in graph.topological_order():
        if n not in env:
            env[n] = apply(n.op, [env[i] for i in n.inputs], dict(n.attrs))
    return tuple(env[o] for o in graph.outputs)


def _arrays(results):
    return [np.asarray(r.numpy() if isinstance(r, loom.Tensor) else r) for r in results]


def run_modes(graph, arrays) -> dict[str, list[np.ndarray]]:
    out = {"reference": _arrays(graph.run(*arrays))}
    out["compiled"] = _arrays(loom.compiler.compile(graph)(*[np.array(a) for a in arrays]))
    out["eager"] = _arrays(replay(graph, [loom.tensor(np.array(a)) for a in arrays]))
    with loom.backend("compiled"):
        out["eager_compiled"] = _arrays(replay(graph, [loom.tensor(np.array(a)) for a in arrays]))
    # A traced function draws fresh random numbers on every call (loom.function's contract), so its
    # `rand` sources are computed outside the trace, from the graph's own seeds.
    rands = {n: loom.tensor(r.numpy()) for n, r in zip(
        [n for n in graph if n.op == "rand"],
        [apply("rand", [], dict(n.attrs)) for n in graph if n.op == "rand"])}
    traced = loom.function(lambda *ts: replay(graph, ts, rands), warmup=0)
    out["traced"] = _arrays(traced(*[loom.tensor(np.array(a)) for a in arrays]))
    return out


def compare(want: np.ndarray, got: np.ndarray, exact) -> str | None:
    """None if `got` matches `want` as the output's exactness demands, else why not.

    `exact`: True for a bitwise match, else the float type whose rounding bounds the error.
    """
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"{got.dtype}{list(got.shape)} instead of {want.dtype}{list(want.shape)}"
    if want.dtype.kind != "f" or exact is True:
        same = np.array_equal(got, want, equal_nan=want.dtype.kind == "f")
        if same and want.dtype.kind == "f":  # -0.0 and 0.0 compare equal; their signs must match too
            number = ~np.isnan(want)          # (a NaN's sign bit means nothing: C and NumPy differ).
            same = np.array_equal(np.signbit(got[number]), np.signbit(want[number]))
        return None if same else "differs (bitwise comparison)"
    finite = want[np.isfinite(want)]
    rtol = max(RTOL[want.dtype.name], RTOL.get(exact, 0.0))
    scale = 1.0 + (float(np.max(np.abs(finite))) if finite.size else 0.0)
    ok = np.isclose(got, want, rtol=rtol, atol=rtol * scale, equal_nan=True)
    return None if ok.all() else f"differs beyond float rounding at {int((~ok).sum())} of {ok.size} elements"


def check_graph(struct_seed: int, size_seed: int) -> list[str]:
    """Every mismatch of one random graph, described for a report (empty: all modes agree).

    Every other graph runs its kernels' OpenMP path (``LOOM_PAR_MIN=1``), whatever its size.
    """
    graph, arrays, exact = make_graph(struct_seed, size_seed)
    saved = os.environ.get("LOOM_PAR_MIN")
    if size_seed % 2:
        os.environ["LOOM_PAR_MIN"] = "1"
    try:
        results = run_modes(graph, arrays)
    except LoomError as e:
        return [f"graph ({struct_seed}, {size_seed}): a mode raised {type(e).__name__}: {e}\n{graph}"]
    finally:
        if saved is None:
            os.environ.pop("LOOM_PAR_MIN", None)
        else:
            os.environ["LOOM_PAR_MIN"] = saved
    problems = []
    for mode in ("compiled", "eager", "eager_compiled", "traced"):
        for k, (want, got) in enumerate(zip(results["reference"], results[mode])):
            why = compare(want, got, exact[k])
            if why:
                problems.append(f"graph ({struct_seed}, {size_seed}) output {k}: {mode} {why}\n"
                                f"want {want!r}\ngot  {got!r}\n{graph}")
    return problems


def fuzz(n_graphs: int, n_structures: int, seed: int) -> tuple[int, list[str]]:
    problems: list[str] = []
    for k in range(n_graphs):
        problems += check_graph(seed + k % n_structures, seed * 1_000_003 + k)
    return n_graphs, problems


def test_generator_covers_every_primitive():
    """The pool of structures the fast test uses reaches every primitive with attributes or kernels."""
    seen = set()
    for s in range(50):
        g, _, _ = make_graph(s, s)
        seen |= {n.op for n in g}
    wanted = {"input", "const", "arange", "rand", "neg", "abs", "sign", "floor", "ceil", "round", "trunc", "sqrt",
              "recip", "log", "log1p", "exp", "expm1", "sin", "cos", "tan", "tanh", "erf", "not", "cast", "add",
              "sub", "mul", "div", "pow", "maximum", "minimum", "floordiv", "mod", "atan2", "eq", "ne", "lt", "le",
              "gt", "ge", "and", "or", "xor", "where", "sum", "prod", "max", "min", "reshape", "permute", "expand",
              "pad", "slice", "flip", "gather", "scatter_add", "matmul", "argsort"}
    assert wanted - seen == set()


def test_compare_catches_differences():
    """The comparison the fuzz relies on is not vacuous."""
    a = np.array([1.0, np.nan, -0.0], np.float32)
    assert compare(a, a.copy(), True) is None
    assert compare(a, np.array([1.0, np.nan, 0.0], np.float32), True) is not None  # Sign of zero.
    assert compare(a, np.array([1.0, -np.nan, -0.0], np.float32), True) is None  # Not of NaN.
    assert compare(a, np.array([1.0 + 1e-6, np.nan, -0.0], np.float32), True) is not None
    assert compare(a, np.array([1.0 + 1e-6, np.nan, -0.0], np.float32), "float32") is None
    assert compare(a, np.array([1.01, np.nan, -0.0], np.float32), "float32") is not None
    assert compare(np.array([1, 2]), np.array([1, 3]), "float32") is not None
    b = np.array([3.0899953], np.float64)
    assert compare(b, b * (1 + 1e-7), "float64") is not None
    assert compare(b, b * (1 + 1e-7), "float32") is None


def test_fuzz_modes_fast():
    """200 random graphs (50 structures x 4 instances) agree in every mode."""
    n, problems = fuzz(200, 50, seed=0)
    assert not problems, f"{len(problems)} mismatches in {n} graphs; first:\n" + "\n\n".join(problems[:3])


@pytest.mark.slow
def test_fuzz_modes_slow():
    """10,000 random graphs (400 structures x 25 instances) agree in every mode."""
    n_graphs = int(os.environ.get("LOOM_FUZZ_GRAPHS", "10000"))
    start = time.perf_counter()
    n, problems = fuzz(n_graphs, 400, seed=100_000)
    elapsed = time.perf_counter() - start
    print(f"\nfuzz: {n} graphs in {elapsed:.0f} s, {len(problems)} mismatches")
    assert n >= min(n_graphs, 10_000)
    assert not problems, f"{len(problems)} mismatches in {n} graphs; first:\n" + "\n\n".join(problems[:5])
