"""Generated kernels against the reference on bodies with movement ops and reductions.

Covers broadcasting, permutes, strided slices, flips, pads (of inputs and of
computed values), reshapes, reductions over every axis set with and without
keepdim, reductions followed by elementwise ops, NaN/Inf, empty tensors,
non-contiguous and aliased arrays, and the parallel loop modes.
"""
import itertools

import numpy as np
import pytest

import loom
from loom.codegen import get_kernel, run_reference
from loom.codegen.c import Unsupported, render
from loom.ir import Graph

from .helpers import assert_same, check, compiled, run_kernel, special_values

F32, F64, I32, I64, B = loom.float32, loom.float64, loom.int32, loom.int64, loom.bool


def rand(shape, d=F32, seed=0):
    rng = np.random.default_rng(seed)
    if d.is_floating_point:
        return rng.standard_normal(shape).astype(d.np)
    if d is B:
        return rng.integers(0, 2, shape).astype(bool)
    return rng.integers(-50, 50, shape).astype(d.np)


def unary(op, shape, d=F32, move=None, attrs=None):
    """out = op(move(x)) for one movement op applied to the input."""
    g = Graph()
    x = g.add_input(shape, d)
    y = g.add_node(move, [x], attrs) if move else x
    g.outputs = [g.add_node(op, [y])]
    return g


# ---------------------------------------------------------------- movement

def test_broadcast_rows_and_columns():
    g = Graph()
    x = g.add_input((5, 7), F32)
    row = g.add_input((7,), F32)
    col = g.add_input((5, 1), F32)
    r = g.add_node("expand", [g.add_node("reshape", [row], {"shape": (1, 7)})], {"shape": (5, 7)})
    c = g.add_node("expand", [col], {"shape": (5, 7)})
    g.outputs = [g.add_node("sub", [g.add_node("mul", [x, r]), c])]
    check(g, [rand((5, 7)), rand(7, seed=1), rand((5, 1), seed=2)])
    check(g.copy(), [rand((5, 7), seed=3), rand(7, seed=4), rand((5, 1), seed=5)])


@pytest.mark.parametrize("perm", list(itertools.permutations(range(3))))
def test_permute(perm):
    check(unary("neg", (3, 4, 5), F32, "permute", {"perm": perm}), [rand((3, 4, 5))])


@pytest.mark.parametrize("starts,stops,steps", [((0, 0), (7, 9), (2, 3)), ((1, 2), (6, 9), (1, 2)),
                                                ((3, 0), (3, 9), (1, 1)), ((6, 8), (7, 9), (5, 4))])
def test_slice_with_steps(starts, stops, steps):
    check(unary("exp", (7, 9), F64, "slice", {"starts": starts, "stops": stops, "steps": steps}), [rand((7, 9), F64)],
          exact=False)


@pytest.mark.parametrize("axes", [(0,), (1,), (0, 1), ()])
def test_flip(axes):
    check(unary("abs", (4, 6), I32, "flip", {"axes": axes}), [rand((4, 6), I32)])


@pytest.mark.parametrize("pads", [((1, 2), (0, 3)), ((0, 0), (2, 2)), ((3, 0), (0, 0)), ((0, 0), (0, 0))])
@pytest.mark.parametrize("d", [F32, I64, B], ids=lambda d: d.name)
def test_pad_of_input(pads, d):
    g = Graph()
    x = g.add_input((3, 4), d)
    value = {F32: -1.5, I64: 7, B: True}[d]
    p = g.add_node("pad", [x], {"pads": pads, "value": value})
    g.outputs = [g.add_node("not" if d is B else "neg", [p])]
    check(g, [rand((3, 4), d)])


def test_pad_of_computed_value_then_slice_and_permute():
    """exp(x) padded, sliced back with a step and transposed: movement above a pad is index arithmetic."""
    g = Graph()
    x = g.add_input((4, 5), F32)
    e = g.add_node("exp", [x])
    p = g.add_node("pad", [e], {"pads": ((2, 1), (1, 3)), "value": 0.25})
    s = g.add_node("slice", [p], {"starts": (1, 0), "stops": (7, 9), "steps": (2, 3)})
    t = g.add_node("permute", [s], {"perm": (1, 0)})
    y = g.add_input(tuple(t.shape), F32)
    g.outputs = [g.add_node("add", [t, y])]
    check(g, [rand((4, 5)), rand(t.shape, seed=1)], exact=False)


def test_pad_inside_reduction_and_flip_of_pad():
    g = Graph()
    x = g.add_input((3, 4), F32)
    p = g.add_node("pad", [g.add_node("flip", [x], {"axes": (1,)})], {"pads": ((1, 1), (2, 0)), "value": 1.0})
    f = g.add_node("flip", [p], {"axes": (0, 1)})
    g.outputs = [g.add_node("sum", [g.add_node("mul", [f, f])], {"axes": (1,), "keepdim": True})]
    check(g, [rand((3, 4))], exact=False, rtol=1e-6)


def test_reshape_merge_and_split_of_inputs():
    g = Graph()
    x = g.add_input((4, 6), F32)
    y = g.add_input((2, 2, 3, 2), F32)
    xm = g.add_node("reshape", [x], {"shape": (2, 2, 3, 2)})
    yt = g.add_node("permute", [y], {"perm": (1, 0, 3, 2)})
    ym = g.add_node("reshape", [yt], {"shape": (2, 2, 3, 2)})  # Not a view: NumPy copies it.
    g.outputs = [g.add_node("add", [xm, ym])]
    check(g, [rand((4, 6)), rand((2, 2, 3, 2), seed=1)])


def test_reshape_of_computed_value_above_reduction():
    """sum(keepdim=True) then a reshape dropping the unit dim, then elementwise with another input."""
    g = Graph()
    x = g.add_input((6, 5), F32)
    s = g.add_node("sum", [g.add_node("exp", [x])], {"axes": (1,), "keepdim": True})
    r = g.add_node("reshape", [s], {"shape": (6,)})
    y = g.add_input((6,), F32)
    g.outputs = [g.add_node("div", [y, r])]
    check(g, [rand((6, 5)), rand(6, seed=2)], exact=False, rtol=1e-6)


def test_permute_of_reduction_result():
    g = Graph()
    x = g.add_input((3, 4, 5), F32)
    s = g.add_node("max", [x], {"axes": (1,), "keepdim": False})
    g.outputs = [g.add_node("neg", [g.add_node("permute", [s], {"perm": (1, 0)})])]
    check(g, [rand((3, 4, 5))])


def test_unsupported_bodies_say_why_and_still_run():
    g = Graph()
    x = g.add_input((4, 5), F32)
    m = g.add_node("max", [x], {"axes": (0,), "keepdim": True})  # (A last-axis one is a row kernel.)
    g.outputs = [g.add_node("sub", [x, g.add_node("expand", [m], {"shape": (4, 5)})])]
    with pytest.raises(Unsupported, match="broadcast reduction"):
        render(g)
    k = get_kernel(g)
    assert not k.ready and "broadcast" in k.fallback_reason
    out = np.empty((4, 5), np.float32)
    a = rand((4, 5))
    k([a], out)
    np.testing.assert_array_equal(out, a - a.max(0, keepdims=True))


# ---------------------------------------------------------------- reductions

AXIS_SETS = [s for r in range(4) for s in itertools.combinations(range(3), r)]


@pytest.mark.parametrize("op", ["sum", "prod", "max", "min"])
@pytest.mark.parametrize("d", [F32, F64, I32, loom.int8, B], ids=lambda d: d.name)
def test_reduction_every_axis_set(op, d):
    x = rand((3, 4, 5), d, seed=3)
    if op == "prod" and d.is_floating_point:
        x = (1 + 0.1 * x).astype(d.np)
    for axes in AXIS_SETS:
        for keep in (False, True):
            g = Graph()
            i = g.add_input((3, 4, 5), d)
            g.outputs = [g.add_node(op, [i], {"axes": axes, "keepdim": keep})]
            exact = not d.is_floating_point or op in ("max", "min")
            check(g, [x], exact=exact, what=f"{op} {axes} keepdim={keep}", rtol=1e-6 if d is F32 else 1e-14)


def test_integer_sum_wraps_like_numpy():
    g = Graph()
    x = g.add_input((4, 300), loom.int8)
    g.outputs = [g.add_node("sum", [x], {"axes": (1,), "keepdim": False})]
    check(g, [np.full((4, 300), 100, np.int8)])


@pytest.mark.parametrize("op", ["max", "min"])
def test_nan_and_inf_in_max_min_reductions(op):
    x = rand((6, 40), F32)
    x[1, 7] = np.nan
    x[2, :] = np.nan
    x[3, 5] = np.inf
    x[4, 9] = -np.inf
    x[:, 33] = np.nan
    x[5] = np.inf if op == "min" else -np.inf
    for axes in [(1,), (0,), (0, 1)]:
        g = Graph()
        i = g.add_input((6, 40), F32)
        g.outputs = [g.add_node(op, [i], {"axes": axes, "keepdim": False})]
        check(g, [x], what=f"{op} {axes}")


def test_sum_with_nan_inf_and_negative_zero():
    x = special_values(F32, 60, seed=9).reshape(6, 10)
    for axes in [(1,), (0,)]:
        g = Graph()
        i = g.add_input((6, 10), F32)
        g.outputs = [g.add_node("sum", [i], {"axes": axes, "keepdim": False})]
        check(g, [x], exact=False, rtol=1e-6)


def test_reduction_followed_by_elementwise():
    """sqrt(sum(x*x, 1) / n) + bias: one kernel, the tail applied per output element."""
    g = Graph()
    x = g.add_input((9, 33), F32)
    bias = g.add_input((9,), F32)
    s = g.add_node("sum", [g.add_node("mul", [x, x])], {"axes": (1,), "keepdim": False})
    n = g.add_constant(33.0, F32, shape=(9,))
    g.outputs = [g.add_node("add", [g.add_node("sqrt", [g.add_node("div", [s, n])]), bias])]
    check(g, [rand((9, 33)), rand(9, seed=1)], exact=False, rtol=1e-6)


def test_two_reductions_over_one_space():
    """sum(x) / sum(y) over the same reduced dims: both accumulate in one loop."""
    g = Graph()
    x, y = g.add_input((5, 8), F64), g.add_input((5, 8), F64)
    sx = g.add_node("sum", [x], {"axes": (1,), "keepdim": False})
    sy = g.add_node("max", [g.add_node("exp", [y])], {"axes": (1,), "keepdim": False})
    g.outputs = [g.add_node("div", [sx, sy])]
    check(g, [rand((5, 8), F64), rand((5, 8), F64, seed=1)], exact=False, rtol=1e-13)


@pytest.mark.parametrize("shape,axes", [((0, 5), (1,)), ((5, 0), (1,)), ((0, 5), (0,)), ((3, 0, 2), (0, 2)),
                                        ((0,), (0,))])
@pytest.mark.parametrize("op", ["sum", "prod"])
def test_empty_tensors(shape, axes, op):
    g = Graph()
    x = g.add_input(shape, F32)
    g.outputs = [g.add_node(op, [g.add_node("exp", [x])], {"axes": axes, "keepdim": False})]
    check(g, [np.zeros(shape, np.float32)])
    g2 = Graph()
    y = g2.add_input(shape, I32)
    g2.outputs = [g2.add_node("neg", [y])]
    check(g2, [np.zeros(shape, np.int32)])


def test_scalar_bodies():
    g = Graph()
    x = g.add_input((), F32)
    y = g.add_input((), F32)
    g.outputs = [g.add_node("add", [g.add_node("exp", [x]), y])]
    check(g, [np.array(0.5, np.float32), np.array(2.0, np.float32)], exact=False)
    g2 = Graph()
    z = g2.add_input((), F64)
    g2.outputs = [g2.add_node("sum", [z], {"axes": (), "keepdim": False})]
    check(g2, [np.array(-3.0)])


# ---------------------------------------------------------------- layouts and aliasing

def test_non_contiguous_numpy_inputs():
    g = Graph()
    a, b = g.add_input((6, 5), F32), g.add_input((6, 5), F32)
    g.outputs = [g.add_node("sum", [g.add_node("mul", [a, b])], {"axes": (0,), "keepdim": False})]
    big = rand((5, 12))
    at = big.T[::2]            # Transposed and strided.
    bt = rand((6, 5))[::-1]    # Negative strides.
    check(g, [at, bt], exact=False, rtol=1e-6)
    out = np.empty(10, np.float32)[::2]  # A strided output.
    compiled(g)([at, bt], out)
    np.testing.assert_allclose(out, (at * bt).sum(0), rtol=1e-6)


def test_in_place_output_over_input():
    g = Graph()
    a, b = g.add_input((64, 33), F32), g.add_input((64, 33), F32)
    g.outputs = [g.add_node("add", [g.add_node("exp", [a]), b])]
    x, y = rand((64, 33)), rand((64, 33), seed=1)
    want = run_reference(g, [x, y])
    compiled(g)([x, y], x)  # Element-for-element: written in place.
    assert_same(x, want, exact=False)
    g2 = Graph()
    c = g2.add_input((8, 8), F32)
    g2.outputs = [g2.add_node("neg", [g2.add_node("permute", [c], {"perm": (1, 0)})])]
    z = rand((8, 8), seed=2)
    want2 = -z.T
    compiled(g2)([z], z)  # Transposed read over the output: the kernel writes a temporary first.
    np.testing.assert_array_equal(z, want2)


@pytest.mark.parametrize("shape,axes", [((300, 257), (1,)), ((300, 257), (0,)), ((40000,), (0,)),
                                        ((3, 50000), (1,)), ((512, 3, 40), (0, 2)), ((2, 70000), (0,))])
def test_parallel_modes(shape, axes, monkeypatch):
    """With a low threshold every loop mode runs multi-threaded: per output, tiled over outputs, split reduction."""
    monkeypatch.setenv("LOOM_PAR_MIN", "1000")
    for op in ("sum", "max"):
        g = Graph()
        x = g.add_input(shape, F32)
        y = g.add_node("mul", [g.add_node("tanh", [x]), x])
        g.outputs = [g.add_node(op, [y], {"axes": axes, "keepdim": False})]
        check(g, [rand(shape, seed=4)], exact=False, rtol=1e-5, what=f"{op}{axes}")
    g = Graph()
    x = g.add_input(shape, I64)
    g.outputs = [g.add_node("sum", [g.add_node("mul", [x, x])], {"axes": axes, "keepdim": True})]
    check(g, [rand(shape, I64, seed=5)])


def test_large_elementwise_parallel():
    g = Graph()
    a, b = g.add_input((513, 1031), F32), g.add_input((1031,), F32)
    bb = g.add_node("expand", [g.add_node("reshape", [b], {"shape": (1, 1031)})], {"shape": (513, 1031)})
    g.outputs = [g.add_node("where", [g.add_node("gt", [a, bb]), a, g.add_node("mul", [a, bb])])]
    check(g, [rand((513, 1031)), rand(1031, seed=1)])


def test_results_identical_across_batch_sizes_and_kernels_shared():
    """Same structure, different sizes: one compiled object, correct results for each size."""
    keys = set()
    for n in (1, 2, 7, 64):
        g = Graph()
        x = g.add_input((n, 12), F32)
        w = g.add_input((12,), F32)
        ww = g.add_node("expand", [g.add_node("reshape", [w], {"shape": (1, 12)})], {"shape": (n, 12)})
        g.outputs = [g.add_node("max", [g.add_node("mul", [x, ww])], {"axes": (1,), "keepdim": False})]
        keys.add(compiled(g).key)
        check(g, [rand((n, 12), seed=n), rand(12, seed=99)])
    assert len(keys) == 1


def test_kernel_checks_arguments():
    g = unary("neg", (2, 3))
    k = compiled(g)
    out = np.empty((2, 3), np.float32)
    with pytest.raises(loom.errors.ShapeError, match="input 0 must have shape"):
        k([np.zeros((3, 2), np.float32)], out)
    with pytest.raises(loom.errors.DTypeError, match="float32"):
        k([np.zeros((2, 3), np.float64)], out)
    with pytest.raises(loom.errors.LoomError, match="takes 1 inputs"):
        k([], out)
    with pytest.raises(loom.errors.LoomError, match="out must be"):
        k([np.zeros((2, 3), np.float32)], np.empty((3, 2), np.float32))
    assert run_kernel(g, [np.ones((2, 3), np.float32)]).tolist() == [[-1.0] * 3] * 2


def test_misaligned_and_odd_stride_arrays():
    """Data the C code cannot index directly (misaligned, strides in part-elements) goes through copies."""
    g = Graph()
    a, b = g.add_input((10,), F32), g.add_input((10,), F32)
    g.outputs = [g.add_node("mul", [a, b])]
    raw = np.zeros(41, np.uint8)
    mis = raw[1:].view(np.float32)  # Not 4-byte aligned.
    mis[:] = np.arange(10)
    assert not mis.flags.aligned
    rec = np.zeros(10, dtype=[("x", np.float32), ("y", np.int8)])
    rec["x"] = np.arange(10) * 2
    odd = rec["x"]  # Stride 5 bytes.
    check(g, [mis, odd])
    out = np.zeros(41, np.uint8)[1:].view(np.float32)  # A misaligned output.
    compiled(g)([mis, odd], out)
    np.testing.assert_array_equal(out, np.arange(10) * np.arange(10) * 2)


def test_portable_pointer_path(monkeypatch):
    """Without the tuple/array struct offsets, pointers travel in a table: same results."""
    from loom.codegen import kernel as kmod
    g = Graph()
    a, b = g.add_input((5, 4), F32), g.add_input((4,), F32)
    bb = g.add_node("expand", [g.add_node("reshape", [b], {"shape": (1, 4)})], {"shape": (5, 4)})
    g.outputs = [g.add_node("sum", [g.add_node("mul", [a, bb])], {"axes": (0,), "keepdim": False})]
    k = compiled(g)
    monkeypatch.setattr(kmod, "_ABI", None)
    monkeypatch.setattr(k._lib, "call", kmod.make_call(k._lib._handle))
    k._plans.clear()
    x, y = rand((5, 4)), rand(4, seed=1)
    out = np.empty(4, np.float32)
    k([x, y], out)
    np.testing.assert_allclose(out, (x * y).sum(0), rtol=1e-6)
    k._plans.clear()


def test_concat_by_pads_merges_unpadded_dims_and_tests_only_padded_ones():
    """Three values padded along dim 0 and added (how a split's gradient is assembled): the dims no pad
    touches merge into one long loop, and the result is exact, also with a transposed input."""
    for transposed in (False, True):
        g = Graph()
        a = g.add_input((2, 3, 4, 5), F32)
        b = g.add_input((2, 3, 5, 4) if transposed else (2, 3, 4, 5), F32)
        c = g.add_input((2, 3, 4, 5), F32)
        bb = g.add_node("permute", [b], {"perm": (0, 1, 3, 2)}) if transposed else b

        def padded(x, lo):
            r = g.add_node("reshape", [x], {"shape": (1, 2, 3, 4, 5)})
            return g.add_node("pad", [r], {"pads": ((lo, 2 - lo), (0, 0), (0, 0), (0, 0), (0, 0)), "value": 0.0})
        g.outputs = [g.add_node("add", [g.add_node("add", [padded(a, 0), padded(bb, 1)]), padded(c, 2)])]
        arrays = [rand((2, 3, 4, 5)), rand(tuple(b.shape), seed=1), rand((2, 3, 4, 5), seed=2)]
        got = check(g, arrays)
        np.testing.assert_array_equal(got[1], np.swapaxes(arrays[1], 2, 3) if transposed else arrays[1])
        np.testing.assert_array_equal(got[0], arrays[0])
        k = compiled(g)
        plan = k._plan(arrays, np.empty(got.shape, np.float32))
        pos, n = k.spec.layout.offsets()["n"]
        sizes = plan.meta[-k.spec.layout.size:][pos:pos + n]
        assert max(sizes) == (2 * 3 if transposed else 2 * 3 * 4 * 5), sizes


# ---------------------------------------------------------------- many broadcast leaves

def _channel_body(n_leaves, reduce, plane_first=False):
    """Batch-norm shape: x (N, C, H, W) against `n_leaves` per-channel (1, C, 1, 1) values (the first one a
    per-position (1, 1, H, W) value with `plane_first`: not broadcast along rows)."""
    shape = (4, 3, 5, 6)
    g = Graph()
    x = g.add_input(shape, F32)
    v, arrays = x, [rand(shape)]
    for k in range(n_leaves):
        small = (1, 1, 5, 6) if plane_first and k == 0 else (1, 3, 1, 1)
        c = g.add_node("expand", [g.add_input(small, F32)], {"shape": shape})
        arrays.append(rand(small, seed=1 + k))
        v = g.add_node("mul" if k % 2 else "sub", [v, c])
    v = g.add_node("mul", [v, x])
    g.outputs = [g.add_node("sum", [v], {"axes": (0, 2, 3), "keepdim": True}) if reduce else v]
    return g, arrays


def _flag(kernel, arrays, out, name):
    """One field of the kernel's argument block for these arrays (e.g. whether the fast loop runs)."""
    meta, lay = kernel.plan(arrays, out).meta, kernel.spec.layout
    return int(meta[len(meta) - lay.size + lay.offsets()[name][0]])


@pytest.mark.parametrize("reduce", [False, True])
@pytest.mark.parametrize("n_leaves", [2, 3, 5])
def test_channel_values_broadcast_along_rows_take_the_contiguous_loop(n_leaves, reduce):
    """Past the per-combination loops (two broadcast leaves), one more loop hoists them all: batch norm's
    mean, scale, shift... read per row, not through the strided generic loop."""
    from loom.codegen.c import BCAST_SLOTS, bcast_masks
    assert bcast_masks(BCAST_SLOTS + 2) == list(range(1 << BCAST_SLOTS)) + [(1 << BCAST_SLOTS + 2) - 1]
    flag = "fast_a" if reduce else "fast_post"
    for plane_first in (False, True):
        g, arrays = _channel_body(n_leaves, reduce, plane_first)
        check(g, arrays, exact=not reduce, rtol=1e-5)  # Sums may add in another order than NumPy's.
        out = np.empty(g.outputs[0].shape, np.float32)
        # A broadcast leaf that moves along rows beside others that do not: a mask with no loop of its
        # own past two slots, so the generic loop computes it (and the check above says it does right).
        want = 0 if plane_first and n_leaves > BCAST_SLOTS else 1
        assert _flag(compiled(g), arrays, out, flag) == want
