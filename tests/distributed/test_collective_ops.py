"""The collective primitives of the IR (loom.ir.collective): rules in one process, and on 2 and 4 ranks through
tests/distributed/scripts/collective_graph.py (values, gradients against distributed finite differences,
loom.function equal to eager, send/recv through a two-stage model)."""
import numpy as np
import pytest

import loom
from loom.compiler.passes.cse import cse
from loom.compiler.passes.fold import fold
from loom.errors import LoomError, ShapeError
from loom.ir import collective
from loom.tensor import apply
from tests.distributed.test_distributed import _ok, launch, needs_mpi

ONE = (0,)  # A group of one rank: no MPI, every collective has its one-rank meaning.


def test_every_collective_is_a_primitive_with_a_backward_rule():
    for op in collective.OPS:
        prim = loom.ir.PRIMITIVES[op]
        assert prim.kind == "collective" and prim.vjp is not None and prim.impl is not None, op


def test_shape_rules():
    x = loom.ones(2, 3)
    n = len(ONE)
    assert apply("all_gather", (x,), {"ranks": ONE}).shape == (n, 2, 3)
    assert apply("reduce_scatter", (loom.ones(1, 3),), {"reduction": "sum", "ranks": ONE}).shape == (3,)
    with pytest.raises(ShapeError, match="one row per rank"):
        apply("reduce_scatter", (x,), {"reduction": "sum", "ranks": ONE})
    with pytest.raises(ShapeError, match="one row per rank"):
        apply("all_to_all", (x,), {"ranks": ONE})
    g = loom.ir.Graph()
    t = g.add_input((), "float32")
    r = g.add_node("recv", [t], {"src": 1, "tag": 0, "shape": (4, 2), "dtype": loom.float64, "ranks": (0, 1)})
    assert r.shape == (4, 2) and r.dtype is loom.float64
    s = g.add_node("send", [r], {"dst": 1, "tag": 0, "ranks": (0, 1)})
    assert s.shape == () and s.dtype is loom.float64


def test_attribute_errors_name_the_op_and_the_attr():
    x = loom.ones(3)
    with pytest.raises(LoomError, match=r"loom.all_reduce: attr 'reduction' is 'max'"):
        apply("all_reduce", (x,), {"reduction": "max", "ranks": ONE})
    with pytest.raises(LoomError, match=r"loom.broadcast: attr 'src' is 3; expected one of the group's global"):
        apply("broadcast", (x,), {"src": 3, "ranks": (0, 1)})
    with pytest.raises(LoomError, match=r"loom.all_gather: attr 'ranks' is \(0, 0\); expected distinct"):
        apply("all_gather", (x,), {"ranks": (0, 0)})
    with pytest.raises(LoomError, match="cannot reduce a bool tensor"):
        apply("all_reduce", (loom.ones(2, dtype=loom.bool),), {"reduction": "sum", "ranks": ONE})


def test_one_rank_group_values_and_gradients():
    x = loom.tensor([1.0, -2.0, 3.0], requires_grad=True)
    y = apply("all_reduce", (x * 2,), {"reduction": "avg", "ranks": ONE})
    g = apply("all_gather", (y,), {"ranks": ONE})
    b = apply("broadcast", (g[0],), {"src": 0, "ranks": ONE})
    (b * b).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 8 * np.array([1.0, -2.0, 3.0]))
    assert loom.autograd.gradcheck(
        lambda t: apply("reduce_scatter", (apply("all_to_all", (t,), {"ranks": ONE}).sin(),),
                        {"reduction": "sum", "ranks": ONE}),
        (loom.tensor([[0.3, -0.7]], dtype=loom.float64, requires_grad=True),))


def test_a_collective_needs_an_initialised_group_beyond_one_rank():
    with pytest.raises(LoomError, match=r"runs on ranks \[0, 1\] but the default process group is not initialised"):
        apply("all_reduce", (loom.ones(2),), {"reduction": "sum", "ranks": (0, 1)}).numpy()


def test_the_compiler_neither_merges_nor_folds_collectives():
    g = loom.ir.Graph()
    x = g.add_input((3,), "float32")
    attrs = {"dst": 1, "tag": 0, "ranks": (0, 1)}
    a, b = g.add_node("send", [x], attrs), g.add_node("send", [x], attrs)   # Two messages, not one.
    c = g.add_constant(1.0, "float32", shape=(3,))
    s = g.add_node("all_reduce", [c], {"reduction": "sum", "ranks": (0, 1)})  # Runs at run time, with the others.
    g.outputs = [g.add_node("add", [a, b]), s]
    out = fold(cse(g))
    assert [n.op for n in out].count("send") == 2 and [n.op for n in out].count("all_reduce") == 1


def test_a_collective_node_serialises():
    g = loom.ir.Graph()
    x = g.add_input((2, 3), "float32")
    g.outputs = [g.add_node("all_gather", [x], {"ranks": (0, 2, 3)})]
    back = loom.ir.from_json(loom.ir.to_json(g))
    node = [n for n in back if n.op == "all_gather"][0]
    assert tuple(node.attrs["ranks"]) == (0, 2, 3) and node.shape == (3, 2, 3)


def test_loom_function_traces_a_collective_as_one_node_the_compiler_does_not_fuse():
    fn = loom.function(lambda t: apply("all_reduce", ((t.exp() + 1).sin(),), {"reduction": "sum", "ranks": ONE})
                       .cos() * 2)
    for _ in range(3):
        out = fn(loom.tensor([0.0, 1.0]))
    np.testing.assert_allclose(out.numpy(), 2 * np.cos(np.sin(np.exp([0.0, 1.0]) + 1)), rtol=1e-6)
    entry = next(iter(fn._cache.values()))
    assert [n.op for n in entry.graph].count("all_reduce") == 1
    # The compiled program: elementwise work fused on either side, the collective an opaque step between.
    assert [n.op for n in entry.exe.graph if n.op != "input"] == ["fused", "all_reduce", "fused"]


def _check(out: str, nproc: int) -> None:
    for name in ("all_reduce sum", "all_reduce avg", "all_gather", "reduce_scatter", "broadcast", "reduce",
                 "all_to_all"):
        for what in ("value", "grad vs finite differences", "loom.function value", "loom.function grad"):
            assert f"rank {nproc - 1}: {name} {what} ok" in out, (name, what)
    assert "rank 0: send/recv stage 0 grad ok" in out and "rank 1: send/recv stage 1 grad ok" in out
    assert "rank 1: subgroup all_reduce grad ok" in out


@needs_mpi
def test_collective_primitives_on_2_ranks():
    _check(_ok(launch("collective_graph.py")), 2)


@needs_mpi
@pytest.mark.slow
def test_collective_primitives_on_4_ranks():
    _check(_ok(launch("collective_graph.py", nproc=4), nproc=4), 4)


def test_a_partitioned_graph_with_collectives_runs_its_tasks_in_one_order():
    w = loom.ones(3, 3)

    @loom.function(runtime="actors", warmup=0)
    def two_stages(x):
        with loom.stage(0):
            h = apply("all_reduce", ((x @ w).relu(),), {"reduction": "sum", "ranks": ONE})
        with loom.stage(1):
            return (h @ w).sum(1)
    outs = [y.numpy() for y in two_stages.map((loom.ones(2, 3) * k,) for k in range(3))]
    np.testing.assert_allclose(np.stack(outs), [[0.0, 0.0], [27.0, 27.0], [54.0, 54.0]])
    prog = next(iter(two_stages._cache.values())).exe
    assert len(prog.tasks) == 2 and prog.serial and not prog.parallel
    two_stages.close()


@needs_mpi
@pytest.mark.slow
def test_collectives_match_torch_distributed_in_the_parity_harness_on_2_ranks():
    out = _ok(launch("collective_parity.py"))
    for name in ("all_reduce", "all_gather", "broadcast", "all_to_all"):
        for mode in ("eager", "compiled", "traced"):
            for r in (0, 1):
                assert f"rank {r}: parity {name} {mode} ok" in out, (name, mode, r)
