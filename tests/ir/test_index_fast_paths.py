"""The gather / scatter_add references' short cut for a repeated (expanded) index gives the general path's bits."""
import numpy as np
import pytest

from loom.errors import LoomIndexError
from loom.ir.ops import _gather_impl, _scatter_add_impl

CASES = [  # (input shape, index shape, axis)
    ((7, 4), (11, 4), 0), ((7, 4), (11, 3), 0), ((3, 6, 5), (3, 9, 5), 1), ((3, 6, 5), (2, 4, 5), 1),
    ((5, 3), (5, 8), 1), ((6,), (10,), 0), ((4, 0), (3, 0), 0), ((0, 3), (0, 3), 0)]


def _expanded(rng, xshape, ishape, axis, dtype=np.int64):
    """A stride-0 index along every dim but `axis`, as `expand` leaves it, with negative entries too."""
    size = max(xshape[axis], 1)
    line = rng.integers(-size, size, ishape[axis]).astype(dtype)
    view = [1] * len(ishape)
    view[axis] = ishape[axis]
    return np.broadcast_to(line.reshape(view), ishape)


def _scatter_loop(base, idx, src, axis):
    """np.add.at's order written out: every source element added in C order of the index."""
    out = base.copy()
    for pos in np.ndindex(*idx.shape):
        at = list(pos)
        at[axis] = idx[pos] % base.shape[axis]
        out[tuple(at)] += src[pos]
    return out


@pytest.mark.parametrize("xshape,ishape,axis", CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.bool_])
def test_expanded_index_gathers_the_general_paths_values(xshape, ishape, axis, dtype):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(xshape) * 4).astype(dtype)
    idx = _expanded(rng, xshape, ishape, axis)
    fast = _gather_impl(x, idx, {"axis": axis})
    general = _gather_impl(x, np.ascontiguousarray(idx) + 0, {"axis": axis})  # Strided: the open index.
    assert fast.shape == general.shape == ishape and fast.dtype == general.dtype
    assert fast.tobytes() == general.tobytes()
    assert fast.flags.c_contiguous and fast.base is None or fast.size == 0


@pytest.mark.parametrize("xshape,ishape,axis", CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.bool_])
@pytest.mark.parametrize("expanded", [True, False])
def test_scatter_add_sums_in_the_index_order(xshape, ishape, axis, dtype, expanded):
    rng = np.random.default_rng(1)
    base = (rng.standard_normal(xshape) * 4).astype(dtype)
    idx = _expanded(rng, xshape, ishape, axis, np.int32)
    if not expanded:
        idx = np.ascontiguousarray(idx)
    src_shape = tuple(s + (d == axis) for d, s in enumerate(ishape))  # The source may be larger.
    src = (rng.standard_normal(src_shape) * 1e3).astype(dtype)
    out = _scatter_add_impl(base, idx, src, {"axis": axis})
    want = _scatter_loop(base, idx, src, axis)
    assert out.dtype == want.dtype and out.tobytes() == want.tobytes()


def test_scatter_add_of_a_general_index_matches_the_loop():
    rng = np.random.default_rng(2)
    base = rng.standard_normal((4, 5, 3)).astype(np.float32)
    idx = rng.integers(-5, 5, (4, 7, 2))
    src = (rng.standard_normal((4, 7, 3)) * 1e4).astype(np.float32)
    out = _scatter_add_impl(base, idx, src, {"axis": 1})
    assert out.tobytes() == _scatter_loop(base, idx, src, 1).tobytes()


@pytest.mark.parametrize("bad", [7, -8])
def test_expanded_index_out_of_bounds_is_a_loom_error(bad):
    x = np.zeros((7, 3), np.float32)
    idx = np.broadcast_to(np.array([0, bad, 2])[:, None], (3, 3))
    with pytest.raises(LoomIndexError, match=rf"loom.gather: index {bad} is out of bounds for a dimension of size 7"):
        _gather_impl(x, idx, {"axis": 0})
    with pytest.raises(LoomIndexError, match=rf"loom.scatter_add: index {bad} is out of bounds .* size 7"):
        _scatter_add_impl(x, idx, np.ones((3, 3), np.float32), {"axis": 0})


@pytest.mark.parametrize("shape,pads", [((1, 3, 4), [(1, 1), (0, 0), (0, 0)]), ((2, 3), [(0, 2), (3, 0)]),
                                        ((3,), [(0, 0)]), ((0, 2), [(1, 1), (2, 0)]), ((), []),
                                        ((2, 2, 2), [(1, 0), (0, 1), (2, 3)])])
@pytest.mark.parametrize("dtype,value", [(np.float32, -0.0), (np.float64, 2.5), (np.int32, 7), (np.bool_, True),
                                         (np.float32, float("nan"))])
def test_pad_writes_np_pads_values(shape, pads, dtype, value):
    from loom.ir.ops import _pad_impl
    x = (np.random.default_rng(3).standard_normal(shape) * 5).astype(dtype)
    out = _pad_impl(x, {"pads": pads, "value": value})
    want = np.pad(x, [tuple(p) for p in pads], constant_values=value) if shape else x.copy()
    assert out.shape == want.shape and out.dtype == want.dtype and out.tobytes() == want.tobytes()
    assert out.base is None and out.flags.c_contiguous
