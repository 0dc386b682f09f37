"""Collectives overlapping compute inside one compiled step (loom.distributed.overlap.compile_overlapped): the
cut itself on one process, and tests/distributed/scripts/graph_overlap.py under the launcher on 2 (and 4) ranks."""
import re

import numpy as np
import pytest

import loom
from loom.distributed.overlap import compile_overlapped, split_at_collectives
from loom.ir import Graph
from loom.runtime.executor import Executable
from tests.distributed.test_distributed import _ok, launch, needs_mpi


def _step_graph():
    """Two layers' 'gradients' (the second needs more work), each all-reduced, then an update reading both."""
    g = Graph()
    x = g.add_input((32, 32), "float32")
    w0 = g.add_input((32, 32), "float32")
    w1 = g.add_input((32, 32), "float32")
    h = g.add_node("tanh", [g.add_node("matmul", [x, w0])])
    g1 = g.add_node("matmul", [h, w1])                                   # Ready first.
    g0 = g.add_node("matmul", [g.add_node("tanh", [g.add_node("matmul", [g1, w1])]), w0])
    r1 = g.add_node("all_reduce", [g1], {"reduction": "avg", "ranks": (0,)})
    r0 = g.add_node("all_reduce", [g0], {"reduction": "sum", "ranks": (0,)})
    g.outputs = [g.add_node("sub", [w0, r0]), g.add_node("sub", [w1, r1]), r1]
    return g


def test_split_puts_each_all_reduce_after_the_compute_it_needs():
    g = _step_graph()
    groups = split_at_collectives(g, min_work=0)
    assert [k for k, _ in groups] == ["compute", "collective", "compute", "collective", "compute"]
    first, second = groups[1][1], groups[3][1]
    assert first[0].attrs["reduction"] == "avg" and second[0].attrs["reduction"] == "sum"   # Cheapest first.
    assert {n.op for n in groups[-1][1]} == {"sub"}   # The update reads the collectives' results.
    # With a large bucket threshold, the second all-reduce shares the first's task (one bucket).
    assert [k for k, _ in split_at_collectives(g, min_work=10**9)] == ["compute", "collective", "compute"]


@pytest.mark.parametrize("min_work, tasks", [
    (0, ["compute0", "all_reduce0", "compute1", "all_reduce1", "compute2"]),
    (10**9, ["compute0", "all_reduce0", "compute1"])])   # One bucket: both all-reduces in one task.
def test_overlapped_program_equals_the_graph_in_order(min_work, tasks):
    g = _step_graph()
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((32, 32)).astype(np.float32) for _ in range(3)]
    prog = compile_overlapped(g, Executable, name="overlap-test", min_work=min_work)
    assert [t.name for t in prog.tasks] == tasks
    try:
        got = prog(*args)
        want = [t.numpy() for t in g.run(*[loom.tensor(a) for a in args])]
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    finally:
        prog.close()


def test_an_all_reduce_of_an_all_reduce_runs_after_it():
    g = Graph()
    x = g.add_input((8, 8), "float32")
    inner = g.add_node("all_reduce", [g.add_node("exp", [x])], {"reduction": "sum", "ranks": (0,)})
    outer = g.add_node("all_reduce", [inner], {"reduction": "avg", "ranks": (0,)})
    g.outputs = [g.add_node("neg", [outer])]
    groups = split_at_collectives(g, min_work=0)
    assert [(k, [n.op for n in nodes]) for k, nodes in groups] == [
        ("compute", ["exp"]), ("collective", ["all_reduce"]), ("collective", ["all_reduce"]), ("compute", ["neg"])]
    assert groups[1][1] == [inner] and groups[2][1] == [outer]
    prog = compile_overlapped(g, Executable, min_work=0)
    try:
        a = np.random.default_rng(1).standard_normal((8, 8)).astype(np.float32)
        np.testing.assert_allclose(prog(a)[0], -np.exp(a), rtol=1e-6)
    finally:
        prog.close()


def test_split_of_a_deep_step_is_quick():
    """150 layers, one all-reduce each: the cut is made in well under a second."""
    import time
    g = Graph()
    h = g.add_input((4, 4), "float32")
    grads = []
    for _ in range(150):
        h = g.add_node("tanh", [h])
        grads.append(g.add_node("all_reduce", [g.add_node("exp", [h])], {"reduction": "avg", "ranks": (0,)}))
    g.outputs = grads
    t0 = time.perf_counter()
    groups = split_at_collectives(g, min_work=0)
    assert time.perf_counter() - t0 < 2.0
    assert sum(k == "collective" for k, _ in groups) == 150


def test_graphs_without_an_overlappable_collective_keep_graph_order():
    g = Graph()
    x = g.add_input((3,), "float32")
    g.outputs = [g.add_node("all_gather", [g.add_node("exp", [x])], {"ranks": (0,)})]
    assert split_at_collectives(g) is None
    g = Graph()
    x = g.add_input((3,), "float32")
    g.outputs = [g.add_node("exp", [x])]
    assert split_at_collectives(g) is None and compile_overlapped(g, Executable) is None


def _check(out: str, nproc: int) -> None:
    for r in range(nproc):
        assert re.search(rf"rank {r}: step cut into tasks \[.*'all_reduce1'.*\] ok", out), out
        assert f"rank {r}: overlapped step equals graph order over 4 steps ok" in out
        assert f"rank {r}: overlapped step equals one process on the whole batch ok" in out
        assert re.search(rf"rank {r}: [1-9]\d* of 16 all-reduce firings ran while compute of the same step ran ok",
                         out), out
        assert re.search(rf"rank {r}: the compiled step's [1-9]\d* channels freed with it ok", out), out


@needs_mpi
def test_compiled_step_overlaps_all_reduce_with_backward_on_two_ranks():
    _check(_ok(launch("graph_overlap.py")), 2)


@needs_mpi
@pytest.mark.slow
def test_compiled_step_overlaps_all_reduce_with_backward_on_four_ranks():
    _check(_ok(launch("graph_overlap.py", nproc=4), nproc=4), 4)
