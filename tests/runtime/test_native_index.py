"""The driver's index steps (gather, scatter_add, pad, check): native results equal the Python path's, bad
indices raise loom's own error, and training steps with embeddings and cross-entropy are one native segment."""
import numpy as np
import pytest

import loom
import loom.nn as nn
import loom.nn.functional as F
from loom.ir import Graph
from loom.runtime import native
from loom.runtime.executor import Executable
from tests.runtime.test_native import _inputs, _kinds, _python_path, _same, _traced, kernel_cache  # noqa: F401


def _graph_exe(build, *specs):
    """An Executable for the graph `build(g, *inputs)` makes over inputs of `specs` ((shape, dtype) pairs)."""
    g = Graph()
    xs = [g.add_input(shape, d) for shape, d in specs]
    out = build(g, *xs)
    g.outputs = list(out) if isinstance(out, (list, tuple)) else [out]
    exe = Executable(g)
    assert exe.wait(300)
    return exe


def _same_error(exe, ref, arrays):
    """exe raises exactly what the Python path raises, and still runs afterwards."""
    with pytest.raises(loom.LoomError) as want:
        ref(*arrays)
    with pytest.raises(type(want.value)) as got:
        exe(*arrays)
    assert str(got.value) == str(want.value)


def _index_kinds(exe, *arrays):
    exe(*arrays)  # The table is written on the first call after the build.
    return {k for k in _kinds(exe) if k in (native._GATHER, native._SCATTER, native._PAD, native._CHECK)}


def test_embedding_and_cross_entropy_step_is_one_native_segment(monkeypatch):
    loom.manual_seed(0)
    emb, head = nn.Embedding(11, 8), nn.Linear(8, 11)
    opt = loom.optim.SGD(list(emb.parameters()) + list(head.parameters()), lr=0.1, momentum=0.9)

    def step(tokens, targets):
        opt.zero_grad()
        loss = F.cross_entropy(head(emb(tokens).tanh()).reshape(-1, 11), targets.reshape(-1))
        loss.backward()
        opt.step()
        return loss

    rng = np.random.default_rng(0)
    tok, tgt = loom.tensor(rng.integers(0, 11, (4, 6))), loom.tensor(rng.integers(0, 11, (4, 6)))
    exe = _traced(step, tok, tgt)
    assert exe._native.segments() == 1, "no Python step is left between C steps"
    arrays = _inputs(exe)  # Tokens, targets, then the parameters and optimizer state.
    arrays[:2] = [rng.integers(0, 11, (4, 6)), rng.integers(0, 11, (4, 6))]
    assert _index_kinds(exe, *arrays) == {native._GATHER, native._SCATTER, native._CHECK}
    assert native._PY not in _kinds(exe)
    ref = _python_path(exe, monkeypatch)
    _same(exe(*arrays), ref(*arrays), exact=False)
    bad = [arrays[0].copy()] + arrays[1:]
    bad[0][2, 3] = 11
    _same_error(exe, ref, bad)
    bad = [arrays[0], arrays[1].copy()] + arrays[2:]
    bad[1][1, 1] = -3
    _same_error(exe, ref, bad)
    ok_ignore = [arrays[0], arrays[1].copy()] + arrays[2:]
    ok_ignore[1][0, 0] = -100  # cross_entropy's ignore_index passes the check.
    _same(exe(*ok_ignore), ref(*ok_ignore), exact=False)


@pytest.mark.parametrize("idx_dtype", ["int32", "int64"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int16", "uint8"])
def test_gather_any_axis_negative_indices_and_strided_operands(monkeypatch, dtype, idx_dtype):
    def build(g, x, i):
        xt = g.add_node("permute", [x], {"perm": (1, 0)})             # A strided operand: no copy.
        a = g.add_node("gather", [xt, i], {"axis": 1})
        b = g.add_node("gather", [x, g.add_node("permute", [i], {"perm": (1, 0)})], {"axis": 0})
        return a, b

    exe = _graph_exe(build, ((5, 7), dtype), ((7, 3), idx_dtype))
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((5, 7)) * 50).astype(dtype)
    i = rng.integers(-5, 5, (7, 3)).astype(idx_dtype)
    assert native._GATHER in _index_kinds(exe, x, i)
    ref = _python_path(exe, monkeypatch)
    got = exe(x, i)
    _same(got, ref(x, i))
    np.testing.assert_array_equal(got[0], np.take_along_axis(x.T, np.where(i < 0, i + 5, i), 1))
    for v in (5, -6):
        bad = i.copy()
        bad[6, 2] = v
        _same_error(exe, ref, [x, bad])
        _same(exe(x, i), got)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_scatter_add_duplicates_sum_in_the_reference_order(monkeypatch, dtype):
    def build(g, base, i, src):
        b2 = g.add_node("mul", [base, base])                           # A computed base in the arena.
        return (g.add_node("scatter_add", [b2, i, src], {"axis": 0}),
                g.add_node("scatter_add", [base, i, src], {"axis": 1}))

    exe = _graph_exe(build, ((6, 6), dtype), ((4, 6), "int64"), ((5, 6), dtype))
    rng = np.random.default_rng(2)
    base = (rng.standard_normal((6, 6)) * 10).astype(dtype)
    src = (rng.standard_normal((5, 6)) * 1e3).astype(dtype)
    i = rng.integers(-6, 6, (4, 6))
    i[:, 0] = 1  # Every row adds into one place.
    assert native._SCATTER in _index_kinds(exe, base, i, src)
    ref = _python_path(exe, monkeypatch)
    got = exe(base, i, src)
    _same(got, ref(base, i, src))
    bad = i.copy()
    bad[3, 5] = 6
    _same_error(exe, ref, [base, bad, src])
    _same(exe(base, i, src), got)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "uint8"])
def test_one_index_per_row_gathers_and_scatters_whole_rows(monkeypatch, dtype):
    """An embedding's index broadcast along the row (index stride 0): the row-copy and row-add paths, with
    negative and repeated indices, a strided (transposed) source, and a bad index still reported."""
    def build(g, table, i, src):
        wide = g.add_node("expand", [i], {"shape": (9, 6)})
        rows = g.add_node("gather", [table, wide], {"axis": 0})
        cols = g.add_node("gather", [g.add_node("permute", [table], {"perm": (1, 0)}),
                                     g.add_node("permute", [wide], {"perm": (1, 0)})], {"axis": 1})
        outs = [rows, cols]
        if dtype != "uint8":
            outs.append(g.add_node("scatter_add", [table, wide, src], {"axis": 0}))
        return outs

    exe = _graph_exe(build, ((5, 6), dtype), ((9, 1), "int64"), ((9, 6), dtype))
    rng = np.random.default_rng(4)
    table = (rng.standard_normal((5, 6)) * 20).astype(dtype)
    src = (rng.standard_normal((9, 6)) * 1e3).astype(dtype)
    i = rng.integers(-5, 5, (9, 1))
    i[2:5] = 3  # Several rows add into one.
    assert native._GATHER in _index_kinds(exe, table, i, src)
    ref = _python_path(exe, monkeypatch)
    got = exe(table, i, src)
    _same(got, ref(table, i, src))
    np.testing.assert_array_equal(got[0], table[np.where(i[:, 0] < 0, i[:, 0] + 5, i[:, 0])])
    bad = i.copy()
    bad[7, 0] = 5
    _same_error(exe, ref, [table, bad, src])


@pytest.mark.parametrize("dtype,value", [("float32", 1.5), ("float64", -np.inf), ("int32", 7), ("uint8", 0),
                                         ("bool", True)])
def test_pad_fills_and_copies_strided_sources(monkeypatch, dtype, value):
    def build(g, x):
        xt = g.add_node("permute", [x], {"perm": (1, 0)})
        return (g.add_node("pad", [xt], {"pads": [(1, 2), (0, 3)], "value": value}),
                g.add_node("pad", [x], {"pads": [(0, 0), (2, 0)], "value": value}))

    exe = _graph_exe(build, ((3, 4), dtype))
    x = (np.arange(12).reshape(3, 4) % 5).astype(dtype)
    assert native._PAD in _index_kinds(exe, x)
    got = exe(x)
    _same(got, _python_path(exe, monkeypatch)(x))
    np.testing.assert_array_equal(got[0], np.pad(x.T, [(1, 2), (0, 3)], constant_values=value))


@pytest.mark.parametrize("dtype,low,high,ignore,closed,bad", [
    ("int64", 0, 10, -100, False, 10), ("int32", 0, 10, None, True, 11), ("float32", 0.0, 1.0, None, True, 1.5),
    ("float32", 0, 0.1, None, False, np.float32(0.1)), ("float64", -1.0, 1.0, 5.0, False, np.nan),
    ("int16", 0, 2.5, None, False, 3), ("uint8", 1, 200, 0, False, 250)])
def test_check_bounds_as_numpy_compares_them(monkeypatch, dtype, low, high, ignore, closed, bad):
    attrs = {"low": low, "high": high, "message": "value {value} is outside", "closed": closed,
             "ignore": ignore, "error": "value"}

    def build(g, x):
        return g.add_node("add", [g.add_node("check", [x], attrs), x])

    exe = _graph_exe(build, ((3, 5), dtype))
    x = np.full((3, 5), low, dtype)
    assert native._CHECK in _index_kinds(exe, x)
    if ignore is not None:
        x[0, 0] = ignore
    ref = _python_path(exe, monkeypatch)
    _same(exe(x), ref(x))
    x[2, 1] = bad
    _same_error(exe, ref, [x])


def test_check_positive_rows(monkeypatch):
    attrs = {"low": 0.0, "high": np.inf, "message": "bad {value}", "positive_rows": True,
             "rows_message": "row sums to {value}", "error": "value"}

    def build(g, x):
        return g.add_node("exp", [g.add_node("check", [x], attrs)])

    exe = _graph_exe(build, ((3, 4), "float32"))
    x = np.array([[0, 0, 0, 1], [1, 2, 0, 0], [0, 0.5, 0, 0]], np.float32)
    assert native._CHECK in _index_kinds(exe, x)
    ref = _python_path(exe, monkeypatch)
    _same(exe(x), ref(x))
    x[1] = 0
    _same_error(exe, ref, [x])
    x[1, 0] = -1
    _same_error(exe, ref, [x])


def _message_passing_step(nodes, features, hidden):
    """A GCN-like training step: gather, weight and scatter-add rows (index_select, index_add) both ways."""
    loom.manual_seed(0)
    lin1, lin2 = nn.Linear(features, hidden, bias=False), nn.Linear(hidden, 3, bias=False)
    opt = loom.optim.SGD(list(lin1.parameters()) + list(lin2.parameters()), lr=0.1)

    def spmm(rows, cols, values, dense):
        messages = dense.index_select(0, cols) * values.unsqueeze(1)
        return loom.zeros(dense.shape[0], dense.shape[1]).index_add(0, rows, messages)

    def step(x, rows, cols, values, labels):
        opt.zero_grad()
        h = F.relu(spmm(rows, cols, values, lin1(x)))
        loss = F.cross_entropy(spmm(rows, cols, values, lin2(h)), labels)
        loss.backward()
        opt.step()
        return loss
    return step


def test_message_passing_runs_as_sparse_products_with_the_unfused_bits(monkeypatch):
    nodes, features, hidden, edges = 9, 5, 6, 23
    rng = np.random.default_rng(3)
    rows = np.concatenate([rng.integers(0, nodes, edges), [4, 4, 4]])  # Repeated targets sum in order.
    cols = np.concatenate([rng.integers(0, nodes, edges), [0, 0, 8]])
    data = [rng.standard_normal((nodes, features)).astype(np.float32), rows, cols,
            rng.standard_normal(len(rows)).astype(np.float32), rng.integers(0, 3, nodes)]
    exe = _traced(_message_passing_step(nodes, features, hidden), *[loom.tensor(a) for a in data])
    arrays = _inputs(exe)
    arrays[:5] = data
    got = exe(*arrays)
    kinds = _kinds(exe)
    assert kinds.count(native._SPMM) >= 3, "the forward products and the backward ones are single records"
    assert native._PY not in kinds
    ref = _python_path(exe, monkeypatch)
    _same(got, ref(*arrays))  # Bit for bit: each product rounded, then added in the index's order.
    bad = list(arrays)
    bad[2] = cols.copy()
    bad[2][5] = nodes
    _same_error(exe, ref, bad)
    _same(exe(*arrays), got)


@pytest.mark.parametrize("idx_dtype", ["int32", "int64"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_sparse_product_record_on_strided_operands_and_index_blocks(monkeypatch, dtype, idx_dtype):
    from loom.compiler import optimize

    def build(g, x, ci, ri, w, base):
        xt = g.add_node("permute", [g.add_node("exp", [x])], {"perm": (1, 0)})  # Strided rows, in the arena.
        gathered = g.add_node("gather", [xt, ci], {"axis": 0})
        prod = g.add_node("mul", [gathered, w])
        return g.add_node("scatter_add", [base, ri, prod], {"axis": 0})

    g = Graph()
    specs = [((4, 6), dtype), ((8, 3), idx_dtype), ((8, 3), idx_dtype), ((8, 3), dtype), ((5, 3), dtype)]
    xs = [g.add_input(shape, d) for shape, d in specs]
    g.outputs = [build(g, *xs)]
    opt, plan = optimize(g, 3)
    exe = Executable(opt, plan)
    assert exe.wait(300)
    rng = np.random.default_rng(4)
    x = rng.standard_normal((4, 6)).astype(dtype)
    ci = rng.integers(-6, 6, (8, 3)).astype(idx_dtype)    # Per-element indices, negative ones too.
    ri = rng.integers(-5, 5, (8, 3)).astype(idx_dtype)
    ri[:, 1] = 2
    w = rng.standard_normal((8, 3)).astype(dtype)
    base = rng.standard_normal((5, 3)).astype(dtype)
    got = exe(x, ci, ri, w, base)
    assert native._SPMM in _kinds(exe)
    ref = _python_path(exe, monkeypatch)
    _same(got, ref(x, ci, ri, w, base))
    want = base.copy()
    np.add.at(want, (np.where(ri < 0, ri + 5, ri), np.arange(3)), np.exp(x).T[np.where(ci < 0, ci + 6, ci),
                                                                            np.arange(3)] * w)
    np.testing.assert_allclose(got[0], want, rtol=1e-6)
    for k, v in ((1, 6), (2, -6)):
        bad = [x, ci.copy(), ri.copy(), w, base]
        bad[k][7, 2] = v
        _same_error(exe, ref, bad)
    _same(exe(x, ci, ri, w, base), got)
