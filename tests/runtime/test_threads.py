"""loom owns its threads: one count for the generated kernels and the BLAS library."""
from __future__ import annotations

import ctypes
import os
import subprocess
import sys

import numpy as np
import pytest

import loom
from loom.codegen import get_kernel
from loom.ir import Graph
from loom.runtime import threads

F32 = loom.float32


@pytest.fixture(autouse=True)
def _restore_threads():
    old = loom.get_num_threads()
    yield
    loom.set_num_threads(old)


def _built(g: Graph):
    k = get_kernel(g)
    assert k.fallback_reason is None, k.fallback_reason
    assert k.wait(300), f"kernel did not build: {k._lib.error if k._lib else ''}"
    return k


def _team(k) -> int:
    """Threads in the team of the kernel library's last call (its test hook)."""
    fn = k._lib._handle.loom_last_team
    fn.restype = ctypes.c_int64
    return int(fn())


def _elementwise(n: int) -> Graph:
    g = Graph()
    x, y = g.add_input((n,), F32), g.add_input((n,), F32)
    g.outputs = [g.add_node("add", [g.add_node("exp", [x]), g.add_node("mul", [x, y])])]
    return g


def _reduction(shape, axes, d=F32) -> Graph:
    g = Graph()
    x = g.add_input(shape, d)
    g.outputs = [g.add_node("sum", [g.add_node("mul", [x, x])], {"axes": axes, "keepdim": False})]
    return g


def test_get_set_round_trip():
    for n in (1, 2, 3, 1):
        loom.set_num_threads(n)
        assert loom.get_num_threads() == n
    loom.set_num_threads(np.int64(2))  # Any integer type, as torch accepts.
    assert loom.get_num_threads() == 2 and type(loom.get_num_threads()) is int


@pytest.mark.parametrize("bad", [0, -1])
def test_set_rejects_counts_below_one(bad):
    with pytest.raises(loom.LoomValueError, match=rf"at least 1, got {bad}"):
        loom.set_num_threads(bad)


@pytest.mark.parametrize("bad", [2.0, "2", None, True, np.True_])
def test_set_rejects_non_integers(bad):
    before = loom.get_num_threads()
    with pytest.raises(loom.LoomTypeError, match="expected an int number of threads"):
        loom.set_num_threads(bad)
    assert loom.get_num_threads() == before


def test_default_follows_affinity_or_omp_num_threads(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert threads.default_num_threads() == len(os.sched_getaffinity(0)) == threads.available_cpus()
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert threads.default_num_threads() == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "not a number")
    assert threads.default_num_threads() == threads.available_cpus()


def test_count_reaches_blas():
    assert threads.blas_num_threads(), "threadpoolctl found no BLAS library under NumPy"
    loom.set_num_threads(3)
    assert set(threads.blas_num_threads()) == {1}  # Small products first: one thread.
    threads.prepare_blas(threads.blas_par_min())
    assert set(threads.blas_num_threads()) == {3}
    threads.prepare_blas(threads.blas_par_min() - 1)
    assert set(threads.blas_num_threads()) == {1}
    # A large matmul on loom's own path asks for the full count.
    a, b = loom.ones(512, 512), loom.ones(512, threads.blas_par_min() // (512 * 512))
    (a @ b).numpy()
    assert set(threads.blas_num_threads()) == {3}
    loom.set_num_threads(1)
    assert set(threads.blas_num_threads()) == {1}


@pytest.mark.parametrize("n", [1, 2, 3])
def test_count_reaches_kernels(n):
    size = 4 * loom.codegen.kernel.par_min()
    k = _built(_elementwise(size))
    x, y = np.ones(size, np.float32), np.ones(size, np.float32)
    out = np.empty(size, np.float32)
    loom.set_num_threads(n)
    k([x, y], out)
    assert _team(k) == n
    small = _built(_elementwise(7))  # Below LOOM_PAR_MIN: one thread whatever the count.
    small([x[:7], y[:7]], out[:7])
    assert _team(small) == 1


def test_count_reaches_split_reductions():
    rows = 4 * loom.codegen.kernel.par_min()
    k = _built(_reduction((1, rows), (1,)))  # One output: the reduction itself is split across threads.
    x = np.ones((1, rows), np.float32)
    out = np.empty(1, np.float32)
    for n in (2, 1):
        loom.set_num_threads(n)
        k([x], out)
        assert _team(k) == n and out[0] == rows


def test_results_identical_for_one_and_two_threads():
    rng = np.random.default_rng(0)
    size = 4 * loom.codegen.kernel.par_min()
    cases = [
        (_elementwise(size), [rng.standard_normal(size, dtype=np.float32) for _ in range(2)], (size,), np.float32),
        (_reduction((size // 64, 64), (1,)), [rng.standard_normal((size // 64, 64), dtype=np.float32)],
         (size // 64,), np.float32),
        (_reduction((3, size), (1,), loom.int64), [rng.integers(-9, 9, (3, size))], (3,), np.int64),
    ]
    for g, arrays, shape, npd in cases:
        k = _built(g)
        outs = []
        for n in (1, 2):
            loom.set_num_threads(n)
            out = np.empty(shape, npd)
            k(arrays, out)
            assert _team(k) == n
            outs.append(out)
        np.testing.assert_array_equal(outs[0], outs[1])


def test_eager_matmul_identical_for_one_and_two_threads():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((64, 96), dtype=np.float32), rng.standard_normal((96, 32), dtype=np.float32)
    got = []
    for n in (1, 2):
        loom.set_num_threads(n)
        got.append((loom.tensor(a) @ loom.tensor(b)).relu().sum(0).numpy())
    np.testing.assert_array_equal(got[0], got[1])


def test_openmp_waits_passively_unless_told_otherwise():
    """libgomp reads its wait policy once, at load: loom sets PASSIVE first unless the user chose."""
    code = "import os, loom; print(os.environ.get('OMP_WAIT_POLICY'), os.environ.get('GOMP_SPINCOUNT'))"
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    run = lambda extra: subprocess.run([sys.executable, "-c", code], env={**env, **extra}, capture_output=True,
                                       text=True, check=True, cwd=os.path.dirname(os.path.dirname(loom.__file__)))
    assert run({}).stdout.split() == ["PASSIVE", "None"]
    assert run({"GOMP_SPINCOUNT": "1000"}).stdout.split() == ["None", "1000"]
