"""Data-dependent indices, targets and probabilities are checked in every mode, as PyTorch checks them.

Each case runs its op on an index that is *pending* (computed by loom, e.g.
``loom.tensor([...]) - 5``) in eager mode on the reference and the compiled
backend, and on an index computed inside a `loom.function` trace, replayed
by the C executor, the reference runner and (for a few) XLA. A bad value
must raise the user's op's error naming the value and the valid range; a
good value must give PyTorch's result.
"""
import re
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import loom
import loom.nn.functional as LF
from loom.errors import LoomIndexError, LoomValueError

X = np.arange(6, dtype=np.float32).reshape(2, 3) / 10.0
W = np.arange(12, dtype=np.float32).reshape(4, 3)


def nnf(m):
    return LF if m is loom else TF


def setitem_cols(m, x, i):
    y = x * 1
    y[:, i] = 7.0
    return y


@dataclass
class Case:
    name: str
    op: str                           # The op the error must name.
    fn: Callable                      # fn(m, x, idx) with m = loom or torch.
    good: list
    bad: tuple                        # (too negative, too large), each a list with one bad value.
    low: int                          # The valid range [low, high) the message must state.
    high: int
    what: str = "index"
    ignore: int | None = None         # A target value allowed outside the range (ignore_index).

    @property
    def valid(self) -> str:
        text = f"{self.low} <= {self.what} < {self.high}"
        return text if self.ignore is None else f"{text} or {self.what} == ignore_index ({self.ignore})"


CASES = [
    Case("gather", "gather", lambda m, x, i: m.gather(x, 1, i.reshape(2, 1)),
         [2, 0], ([-1, 0], [3, 0]), 0, 3),
    Case("index_select", "index_select", lambda m, x, i: x.index_select(1, i),
         [2, 0, 2], ([0, -1, 2], [3, 0, 0]), 0, 3),
    Case("embedding", "embedding", lambda m, x, i: nnf(m).embedding(i, m.tensor(W)),
         [3, 0, 1], ([-1, 0, 0], [0, 4, 1]), 0, 4),
    Case("one_hot", "one_hot", lambda m, x, i: nnf(m).one_hot(i, 3),
         [2, 0, 1], ([-1, 0, 0], [0, 0, 3]), 0, 3, "class value"),
    Case("scatter", "scatter", lambda m, x, i: x.scatter(1, i.reshape(2, 1), 9.0),
         [2, 0], ([-1, 0], [0, 3]), 0, 3),
    Case("scatter_add", "scatter_add", lambda m, x, i: x.scatter_add(1, i.reshape(2, 1), m.ones(2, 1)),
         [2, 0], ([-1, 0], [3, 0]), 0, 3),
    Case("scatter_reduce", "scatter_reduce",
         lambda m, x, i: x.scatter_reduce(1, i.reshape(2, 1), m.ones(2, 1), "amax"),
         [2, 0], ([0, -1], [3, 0]), 0, 3),
    Case("index_add", "index_add", lambda m, x, i: x.index_add(1, i, m.ones(2, 2)),
         [2, 2], ([-1, 0], [0, 3]), 0, 3),
    Case("index_copy", "index_copy", lambda m, x, i: x.index_copy(1, i, m.ones(2, 2)),
         [2, 0], ([-1, 0], [0, 3]), 0, 3),
    Case("index_fill", "index_fill", lambda m, x, i: x.index_fill(1, i, 5.0),
         [-1, 0], ([-4, 0], [0, 3]), -3, 3),
    Case("getitem", "getitem", lambda m, x, i: x[:, i],
         [-1, 2, 0], ([-4, 0, 0], [3, 0, 0]), -3, 3),
    Case("getitem_two_indices", "getitem", lambda m, x, i: x[i, i],
         [1, -2], ([-3, 0], [0, 2]), -2, 2),
    Case("setitem", "setitem", setitem_cols,
         [-1, 0], ([-4, 0], [3, 0]), -3, 3),
    Case("index_put", "index_put",
         lambda m, x, i: x.index_put((i,), m.tensor(1.0), accumulate=True),
         [1, 1, -2], ([-3, 0, 0], [2, 0, 0]), -2, 2),
    Case("take", "take", lambda m, x, i: m.take(x, i),
         [5, -6, 0], ([-7, 0, 0], [6, 0, 0]), -6, 6),
    Case("take_along_dim", "take_along_dim", lambda m, x, i: m.take_along_dim(x, i.reshape(2, 1), 1),
         [-1, 2], ([-4, 0], [3, 0]), -3, 3),
    Case("cross_entropy", "cross_entropy", lambda m, x, i: nnf(m).cross_entropy(x, i),
         [2, -100], ([-1, 0], [0, 3]), 0, 3, "target", ignore=-100),
    Case("nll_loss", "nll_loss", lambda m, x, i: nnf(m).nll_loss(x, i, ignore_index=1),
         [2, 1], ([-1, 0], [3, 0]), 0, 3, "target", ignore=1),
]
BY_NAME = {c.name: c for c in CASES}


def expected(case: Case, values) -> np.ndarray:
    return case.fn(torch, torch.tensor(X), torch.tensor(values)).numpy()


def pending(values) -> loom.Tensor:
    """An index loom has not computed yet."""
    idx = loom.tensor([v + 5 for v in values]) - 5
    assert idx._node.buffer is None
    return idx


def _re(text: str) -> str:
    return re.escape(text)


# ---------------------------------------------------------------- eager: reference and compiled backends

@pytest.mark.parametrize("backend", ["reference", "compiled"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_eager_pending_index(case, backend):
    with loom.backend(backend):
        got = case.fn(loom, loom.tensor(X), pending(case.good)).numpy()
        np.testing.assert_allclose(got, expected(case, case.good), rtol=1e-6, atol=1e-6)
        for bad in case.bad:
            check_raises(case, bad, lambda bad=bad: case.fn(loom, loom.tensor(X), pending(bad)).numpy())


def check_raises(case: Case, bad: list, run: Callable[[], object]) -> None:
    """`run` raises the case's op error naming the one bad value of `bad` and the valid range."""
    value = next(v for v in bad if not case.low <= v < case.high and v != case.ignore)
    out_of = "range" if case.op in ("one_hot", "embedding") else "bounds"
    pattern = rf"^loom\.{case.op}: {case.what} {value} is out of {out_of} .*{_re(case.valid)}"
    with pytest.raises(LoomIndexError, match=pattern) as info:
        run()
    assert isinstance(info.value, IndexError)




def test_eager_computed_index_is_checked_at_the_call():
    """A computed index needs no graph node: the op raises at once, before any value is asked for."""
    with pytest.raises(LoomIndexError, match=r"^loom\.gather: index -1 is out of bounds .*0 <= index < 3"):
        loom.gather(loom.tensor(X), 1, loom.tensor([[-1], [0]]))
    y = loom.gather(loom.tensor(X), 1, loom.tensor([[2], [0]]))
    assert "check" not in {n.op for n in _ancestors(y._node)}


def _ancestors(node):
    seen, stack = set(), [node]
    while stack:
        n = stack.pop()
        if n not in seen:
            seen.add(n)
            stack.extend(n.inputs)
    return seen


# ---------------------------------------------------------------- traced: the replay raises

@pytest.mark.parametrize("backend", ["c", "reference"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_traced_index(case, backend):
    x = loom.tensor(X)
    step = loom.function(lambda i: case.fn(loom, x, i - 5), backend=backend, warmup=0)
    shifted = lambda vals: loom.tensor([v + 5 for v in vals])  # noqa: E731
    np.testing.assert_allclose(step(shifted(case.good)).numpy(), expected(case, case.good), rtol=1e-6, atol=1e-6)
    for bad in case.bad:
        check_raises(case, bad, lambda bad=bad: step(shifted(bad)).numpy())
    assert step.trace_count == 1  # The replay raised: nothing was traced again.


@pytest.mark.parametrize("name", ["gather", "cross_entropy", "getitem_two_indices", "one_hot"])
def test_traced_index_xla(name):
    pytest.importorskip("jax")
    case = BY_NAME[name]
    x = loom.tensor(X)
    step = loom.function(lambda i: case.fn(loom, x, i - 5), backend="xla", warmup=0)
    shifted = lambda vals: loom.tensor([v + 5 for v in vals])  # noqa: E731
    np.testing.assert_allclose(step(shifted(case.good)).numpy(), expected(case, case.good), rtol=1e-6, atol=1e-6)
    for bad in case.bad:
        check_raises(case, bad, lambda bad=bad: step(shifted(bad)).numpy())
    assert step.trace_count == 1


def test_traced_state_changed_between_calls_is_checked():
    """An index held outside the function (a buffer) is re-read every call, so it is checked every call."""
    table = loom.tensor(W)
    ids = loom.tensor([0, 3])
    step = loom.function(lambda: LF.embedding(ids, table).sum(), backend="c", warmup=0)
    assert step().item() == pytest.approx(float(W[[0, 3]].sum()))
    ids.copy_(loom.tensor([0, 4]))
    with pytest.raises(LoomIndexError, match=r"^loom\.embedding: index 4 is out of range .*0 <= index < 4"):
        step()


def test_trace_constant_index_is_checked_once_while_tracing():
    """An index made of constants inside the function cannot change: checked at trace time, no node."""
    step = loom.function(lambda x: x[:, [2, -1]], backend="c", warmup=0)
    np.testing.assert_array_equal(step(loom.tensor(X)).numpy(), X[:, [2, -1]])
    graph = next(iter(step._cache.values())).graph
    assert "check" not in {n.op for n in graph}
    bad = loom.function(lambda x: x[:, [2, 3]], backend="c", warmup=0)
    with pytest.raises(LoomIndexError, match=r"^loom\.getitem: index 3 is out of bounds .*-3 <= index < 3"):
        bad(loom.tensor(X))


def test_traced_gradient_passes_through_the_check():
    """Gradients flow through checked values: embedding rows and binary_cross_entropy's input."""
    w = loom.tensor(W, requires_grad=True)
    logits = loom.tensor([0.3, -1.2, 2.0], requires_grad=True)

    def step(i):
        loss = LF.embedding(i - 5, w).sum() + LF.binary_cross_entropy(logits.sigmoid(), loom.ones(3))
        loss.backward()
        return loss
    traced = loom.function(step, backend="c", warmup=0)
    traced(loom.tensor([5, 8, 8]))
    tw = torch.tensor(W, requires_grad=True)
    tl = torch.tensor([0.3, -1.2, 2.0], requires_grad=True)
    (TF.embedding(torch.tensor([0, 3, 3]), tw).sum()
     + TF.binary_cross_entropy(tl.sigmoid(), torch.ones(3))).backward()
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(logits.grad.numpy(), tl.grad.numpy(), rtol=1e-5)


# ---------------------------------------------------------------- probabilities and BCE inputs

MODES = ["eager-reference", "eager-compiled", "traced-c", "traced-reference", "traced-xla"]


def in_mode(mode: str, fn: Callable, arg: np.ndarray, valid: np.ndarray | None = None) -> np.ndarray:
    """fn applied to a pending float tensor holding `arg`, in `mode`; returns the computed value.

    A traced mode first traces on `valid` (default: all 0.5), so the call on `arg` is a replay.
    """
    if mode.startswith("eager"):
        with loom.backend(mode.split("-")[1]):
            return fn(loom.tensor(arg) * 1.0).numpy()
    backend = mode.split("-")[1]
    if backend == "xla":
        pytest.importorskip("jax")
    step = loom.function(lambda p: fn(p * 1.0), backend=backend, warmup=0)
    step(loom.tensor(np.full_like(arg, 0.5) if valid is None else valid))
    return step(loom.tensor(arg)).numpy()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("probs, pattern", [
    ([[0.5, -0.1], [0.5, 0.5]], r"probability tensor contains either inf, nan or element < 0, got -0\.1"),
    ([[0.5, 0.5], [np.inf, 1.0]], r"probability tensor contains either inf, nan or element < 0, got inf"),
    ([[0.5, np.nan], [0.5, 0.5]], r"probability tensor contains either inf, nan or element < 0, got nan"),
    ([[0.5, 0.5], [0.0, 0.0]], r"invalid multinomial distribution \(sum of probabilities <= 0\): a row sums "
                               r"to 0\.0"),
], ids=["negative", "inf", "nan", "all_zero"])
def test_multinomial_rejects_bad_probabilities(mode, probs, pattern):
    with pytest.raises(LoomValueError, match=r"^loom\.multinomial: " + pattern):
        in_mode(mode, lambda p: loom.multinomial(p, 1), np.array(probs, np.float32))


@pytest.mark.parametrize("mode", MODES)
def test_multinomial_valid_probabilities_sample_their_support(mode):
    probs = np.array([[0.0, 1.0, 0.0], [0.2, 0.0, 0.8]], np.float32)
    got = in_mode(mode, lambda p: loom.multinomial(p, 2, replacement=True), probs)
    assert got.shape == (2, 2)
    assert (got[0] == 1).all() and set(got[1].tolist()) <= {0, 2}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("value", [1.5, -0.25, np.nan], ids=["above_one", "negative", "nan"])
def test_binary_cross_entropy_rejects_inputs_outside_unit_interval(mode, value):
    x = np.array([0.5, value, 0.2], np.float32)
    text = "nan" if np.isnan(value) else str(np.float32(value))
    with pytest.raises(LoomValueError, match=rf"^loom\.binary_cross_entropy: all elements of input should be "
                                             rf"between 0 and 1, got {_re(text)}$"):
        in_mode(mode, lambda p: LF.binary_cross_entropy(p, loom.ones(3)), x)


@pytest.mark.parametrize("mode", MODES)
def test_binary_cross_entropy_valid_inputs_match_torch(mode):
    x = np.array([0.0, 0.25, 1.0], np.float32)
    t = np.array([0.0, 1.0, 1.0], np.float32)
    got = in_mode(mode, lambda p: LF.binary_cross_entropy(p, loom.tensor(t)), x)
    want = TF.binary_cross_entropy(torch.tensor(x), torch.tensor(t)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6)


# ---------------------------------------------------------------- the check node in the compiler

def test_check_survives_the_pipeline_and_folds_only_when_valid():
    from loom.compiler import compile as compile_graph
    from loom.ir import Graph

    def graph(idx_values):
        g = Graph()
        x = g.add_input((3,), loom.float32)
        idx = g.add_constant(np.array(idx_values, np.int64))
        attrs = {"user_op": "gather", "low": 0, "high": 3, "closed": False, "ignore": None, "error": "index",
                 "positive_rows": False, "message": "loom.gather: index {value} is bad", "rows_message": ""}
        checked = g.add_node("check", [idx], attrs)
        again = g.add_node("check", [idx], dict(attrs))  # CSE may merge the two: same test, same error.
        g.outputs = [g.add_node("add", [g.add_node("gather", [x, checked], {"axis": 0}),
                                         g.add_node("gather", [x, again], {"axis": 0})])]
        return g
    x = np.array([1.0, 2.0, 4.0], np.float32)
    assert compile_graph(graph([2, 0, 1]))(x)[0].tolist() == [8.0, 2.0, 4.0]
    exe = compile_graph(graph([2, -1, 1]))  # A constant that fails is not folded: the run raises.
    with pytest.raises(LoomIndexError, match=r"^loom\.gather: index -1 is bad$"):
        exe(x)


@pytest.mark.parametrize("mode", MODES)
def test_masked_scatter_source_too_short(mode):
    """A pending mask that selects more elements than the source holds is an error, not a wrapped read."""
    def fn(p):
        return loom.zeros(4).masked_scatter(p > 0.25, loom.tensor([1.0, 2.0]))
    good = np.array([0.0, 1.0, 1.0, 0.0], np.float32)
    np.testing.assert_array_equal(in_mode(mode, fn, good, good), [0.0, 1.0, 2.0, 0.0])
    with pytest.raises(LoomValueError, match=r"^loom\.masked_scatter: number of elements of source \(2\) < "
                                             r"number of ones in mask: .* element 2 \(expected 0 <= position < 2\)"):
        in_mode(mode, fn, np.array([1.0, 1.0, 1.0, 0.0], np.float32), good)


def test_check_node_attrs_are_validated():
    from loom.errors import GraphError
    from loom.ir import Graph
    g = Graph()
    x = g.add_input((3,), loom.int64)
    with pytest.raises(GraphError, match=r"loom\.check: needs attr 'message', which is missing"):
        g.add_node("check", [x], {"low": 0, "high": 3})
    with pytest.raises(GraphError, match=r"loom\.check: attr 'error' is 'oops'; expected 'index', 'value' or 'linalg'"):
        g.add_node("check", [x], {"low": 0, "high": 3, "message": "m {value}", "error": "oops"})
