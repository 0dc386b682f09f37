"""The executor: compiled graphs (fused kernels, BLAS matmul, reference steps, arena memory) vs the reference."""
import threading

import numpy as np
import pytest

import loom
from loom.errors import DTypeError, LoomError, ShapeError
from loom.ir import Graph
from loom.runtime.executor import Executable, run_graph

F32 = loom.float32


def mlp_graph(batch=8):
    """x @ w + b -> relu -> @ w2 -> log_softmax -> mean, as the Tensor layer records it."""
    x, w, b, w2 = loom.randn(batch, 16), loom.randn(16, 32), loom.randn(32), loom.randn(32, 5)
    h = loom.maximum(x @ w + b, loom.tensor(0.0))
    z = h @ w2
    y = (z - z.amax(1, keepdim=True)).exp()
    out = (z - z.amax(1, keepdim=True) - y.sum(1, keepdim=True).log()).mean()
    g = Graph.from_tensors([out, h], inputs=[x, w, b, w2])
    return g, [t.numpy() for t in (x, w, b, w2)]


def reference_outputs(g, arrays):
    return [t.numpy() for t in g.run(*arrays)]


@pytest.mark.parametrize("level", [0, 1, 2, 3])
def test_compiled_levels_match_reference(level):
    g, arrays = mlp_graph()
    exe = loom.compiler.compile(g, level=level)
    assert exe.wait(300)
    got = exe(*arrays)
    for a, b in zip(got, reference_outputs(g, arrays)):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6)
    if level >= 2:
        assert exe.kernels and all(k.ready for k in exe.kernels)
        assert any(n.op == "fused" for n in exe.graph)


def test_arena_plan_is_used_and_outputs_are_fresh():
    g, arrays = mlp_graph()
    exe = loom.compiler.compile(g, level=3)
    assert exe.plan is not None and exe.plan.arena_bytes > 0 and exe._placed
    first = exe(*arrays)
    second = exe(*arrays)
    for a, b in zip(first, second):
        assert a is not b and not np.shares_memory(a, b)
        np.testing.assert_array_equal(a, b)
    arena = exe._native._ctxs[0].arena if exe._native is not None else exe._arenas[0][0]
    for a in first:
        assert not np.shares_memory(a, arena)
        assert not any(np.shares_memory(a, x) for x in arrays)


def test_without_plan_every_value_has_its_own_array():
    g, arrays = mlp_graph()
    opt, _ = loom.compiler.optimize(g, level=2)
    exe = Executable(opt, None)
    for a, b in zip(exe(*arrays), reference_outputs(g, arrays)):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6)


def test_inputs_checked_before_any_kernel_runs(monkeypatch):
    g, arrays = mlp_graph()
    exe = loom.compiler.compile(g)
    calls = []
    for st in exe._steps:
        monkeypatch.setattr(st, "run", lambda *a, _r=st.run: calls.append(1) or _r(*a))
    if exe._native is not None:  # The steps run as one native program.
        monkeypatch.setattr(exe, "_native", lambda *a, _n=exe._native: calls.append(1) or _n(*a))
    with pytest.raises(ShapeError, match=r"input 0 expects float32\[8, 16\]"):
        exe(arrays[0][:4], *arrays[1:])
    with pytest.raises(DTypeError, match="input 1 expects float32"):
        exe(arrays[0], arrays[1].astype(np.float64), *arrays[2:])
    with pytest.raises(LoomError, match="takes 4 inputs"):
        exe(*arrays[:3])
    assert calls == []
    exe(*arrays)
    assert calls


def test_outputs_that_are_inputs_or_constants_are_copies():
    g = Graph()
    x = g.add_input((3,), F32)
    c = g.add_constant(np.arange(3, dtype=np.float32))
    g.outputs = [x, c, g.add_node("add", [x, c])]
    exe = Executable(g)
    a = np.ones(3, np.float32)
    out = exe(a)
    assert not np.shares_memory(out[0], a)
    out[1][0] = 99.0  # Changing a returned constant does not change the graph's constant.
    assert exe(a)[1][0] == 0.0
    np.testing.assert_array_equal(out[2], [1, 2, 3])


def test_matmul_through_blas_batched_and_integer():
    g = Graph()
    a, b = g.add_input((3, 4, 5), loom.float64), g.add_input((3, 5, 2), loom.float64)
    i, j = g.add_input((4, 5), loom.int32), g.add_input((5, 3), loom.int32)
    g.outputs = [g.add_node("matmul", [a, b]), g.add_node("matmul", [i, j])]
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((3, 4, 5)), rng.standard_normal((3, 5, 2)),
              rng.integers(-9, 9, (4, 5)).astype(np.int32), rng.integers(-9, 9, (5, 3)).astype(np.int32)]
    out = run_graph(g, *arrays)
    np.testing.assert_allclose(out[0], arrays[0] @ arrays[1])
    np.testing.assert_array_equal(out[1], arrays[2] @ arrays[3])


def test_concurrent_calls():
    g, arrays = mlp_graph(batch=32)
    exe = loom.compiler.compile(g)
    exe.wait(300)
    want = exe(*arrays)
    errors = []

    def work():
        for _ in range(20):
            got = exe(*arrays)
            if not all(np.array_equal(a, b) for a, b in zip(got, want)):
                errors.append("mismatch")
    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_background_compilation_gives_same_results_before_and_after(monkeypatch, tmp_path):
    """A fresh cache and asynchronous builds: the first calls run on the reference path, later ones compiled."""
    monkeypatch.setenv("LOOM_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("LOOM_CODEGEN_SYNC", "0")
    from loom.codegen import clear_memory
    clear_memory()
    g, arrays = mlp_graph(batch=5)
    exe = loom.compiler.compile(g)
    before = exe(*arrays)
    assert exe.wait(300)
    after = exe(*arrays)
    for a, b, r in zip(before, after, reference_outputs(g, arrays)):
        np.testing.assert_allclose(a, r, rtol=2e-5, atol=1e-6)
        np.testing.assert_allclose(b, r, rtol=2e-5, atol=1e-6)
    clear_memory()


def test_in_place_marked_fused_node_writes_over_its_input():
    g = Graph()
    x = g.add_input((64, 64), F32)
    w = g.add_input((64, 64), F32)
    m = g.add_node("matmul", [x, w])
    e = g.add_node("exp", [g.add_node("neg", [m])])
    t = g.add_node("tanh", [e])
    g.outputs = [g.add_node("matmul", [t, w])]
    exe = loom.compiler.compile(g, level=3)
    assert exe.plan.shares, "the in-place pass should reuse the matmul's slot"
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((64, 64)).astype(np.float32) * 0.1, rng.standard_normal((64, 64)).astype(np.float32)
    np.testing.assert_allclose(exe(a, b)[0], np.tanh(np.exp(-(a @ b))) @ b, rtol=1e-4, atol=1e-5)
