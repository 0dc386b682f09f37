"""Row kernels: a last-axis reduction broadcast back along its row reduces each row once, then writes it."""
import numpy as np
import pytest

import loom
from loom.codegen import render
from loom.ir import Graph

from .helpers import check, compiled

F32, F64, I32 = loom.float32, loom.float64, loom.int32


def _mode(k, arrays, out):
    plan = k._plan(arrays, out)
    pos, _ = k.spec.layout.offsets()["mode"]
    return int(plan.meta[-k.spec.layout.size:][pos])


def _row_body(shape, d, reduce_op, post_op, transposed=False):
    """post_op(x, expand(reduce_op(x over the last axis, keepdim))), x optionally a transposed input."""
    g = Graph()
    x = g.add_input(shape[:-2] + (shape[-1], shape[-2]) if transposed else shape, d)
    if transposed:
        x = g.add_node("permute", [x], {"perm": tuple(range(len(shape) - 2)) + (len(shape) - 1, len(shape) - 2)})
    r = g.add_node(reduce_op, [x], {"axes": (len(shape) - 1,), "keepdim": True})
    g.outputs = [g.add_node(post_op, [x, g.add_node("expand", [r], {"shape": shape})])]
    return g


@pytest.mark.parametrize("d", [F32, F64, I32], ids=lambda d: d.name)
@pytest.mark.parametrize("transposed", [False, True])
def test_sum_then_divide_or_subtract_per_row(d, transposed):
    shape = (3, 5, 37)
    post = "div" if d.is_floating_point else "sub"
    g = _row_body(shape, d, "sum", post, transposed)
    spec = render(g)
    assert spec.row and "run_R" in spec.source
    rng = np.random.default_rng(0)
    x = rng.standard_normal(g.inputs[0].shape) * 3 + 20 if d.is_floating_point else \
        rng.integers(-50, 50, g.inputs[0].shape)
    x = x.astype(d.np)
    got = check(g, [x], exact=not d.is_floating_point, rtol=1e-6)
    k = compiled(g)
    assert _mode(k, [x], got) == 2, "each row is reduced once"


def test_max_then_exp_keeps_nan_and_inf_rows():
    shape = (4, 9)
    g = _row_body(shape, F32, "max", "sub")
    g.outputs = [g.add_node("exp", [g.outputs[0]])]
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    x[1, 3] = np.nan
    x[2, :] = -np.inf
    x[3, 7] = np.inf
    check(g, [x], exact=False)


def test_rows_split_across_threads_give_the_same_bits(monkeypatch):
    shape = (64, 96)
    g = _row_body(shape, F32, "sum", "div")
    k = compiled(g)
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32) + 5
    one = np.empty(shape, np.float32)
    k([x], one)
    monkeypatch.setenv("LOOM_PAR_MIN", "1")  # Every call multi-threaded, rows cut mid-way between threads.
    k._plans.clear()
    prev = loom.get_num_threads()
    loom.set_num_threads(3)
    try:
        many = np.empty(shape, np.float32)
        k([x], many)
    finally:
        loom.set_num_threads(prev)
        k._plans.clear()
    np.testing.assert_array_equal(many, one)
    np.testing.assert_allclose(one, x / x.sum(1, keepdims=True), rtol=1e-6)


def test_softmax_and_layer_norm_traced_match_numpy():
    x = np.random.default_rng(3).standard_normal((6, 4, 33)).astype(np.float32)
    f = loom.function(lambda t: (loom.softmax(t, -1), loom.nn.functional.layer_norm(t, (33,))))
    t = loom.tensor(x)
    f(t)
    got = [a.numpy() for a in f(t)]
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(got[0], e / e.sum(-1, keepdims=True), rtol=2e-6, atol=1e-7)
    c = x - x.mean(-1, keepdims=True)
    np.testing.assert_allclose(got[1], c / np.sqrt((c * c).mean(-1, keepdims=True) + 1e-5), rtol=2e-5, atol=2e-6)
