"""Parity of indexing: getitem, setitem / index_put, gather/scatter and their relatives."""
import numpy as np
import pytest

import loom
from tests.parity.harness import Case, bools, distinct, ints, randn, run_case


def neg_step(m, x, dim, s):
    """x sliced by the negative-step slice `s` along `dim`: PyTorch has no negative steps, so its side
    indexes with the same positions as a list."""
    lead = (slice(None),) * dim
    if m is loom:
        return x[lead + (s,)]
    return x[lead + (list(range(x.shape[dim]))[s],)]


def setitem(index, value=None):
    """Body `y = x * 1; y[index] = v; return y`: setitem on a non-leaf, gradients to x and to v.

    `index` is a fixed index, or a callable of the library and the extra tensor inputs (the index
    tensors); the value is the last input unless `value` gives a constant.
    """
    def body(m, x, *rest):
        if value is None:
            *idx_in, v = rest
        else:
            idx_in, v = list(rest), value
        y = x * 1
        y[index(m, *idx_in) if callable(index) else index] = v
        return y
    return body


def set_neg_step(s):
    def body(m, x, v):
        y = x * 1
        if m is loom:
            y[s] = v
        else:
            y[list(range(x.shape[0]))[s]] = v
        return y
    return body


def perm_rows(rows, n, k):
    """An index of `rows` rows of k distinct values below n (scatter targets without duplicates)."""
    return lambda rng: np.stack([rng.permutation(n)[:k] for _ in range(rows)]).astype(np.int64)


def perm(n, k):
    return lambda rng: rng.permutation(n)[:k].astype(np.int64)


MASK_3x4 = np.array([[True, False, True, False], [False, False, True, True], [True, False, False, False]])
ROWS_3 = np.array([True, False, True])

GETITEM = [
    Case("int", lambda m, x: x[1], (randn(3, 4),)),
    Case("negative_ints", lambda m, x: x[-1, -2], (randn(3, 4),)),
    Case("slice_steps", lambda m, x: x[1:, ::2], (randn(3, 5),)),
    Case("slice_beyond_bounds", lambda m, x: x[:10, -10:2], (randn(3, 4),)),
    Case("slice_negative_bounds", lambda m, x: x[-2:, 1:-1], (randn(4, 5),)),
    Case("neg_step_reverse", lambda m, x: neg_step(m, x, 0, slice(None, None, -1)), (randn(4, 3),)),
    Case("neg_step_2", lambda m, x: neg_step(m, x, 1, slice(4, 0, -2)), (randn(3, 6),)),
    Case("neg_step_3_from_end", lambda m, x: neg_step(m, x, 1, slice(-1, None, -3)), (randn(2, 7),)),
    Case("neg_step_empty", lambda m, x: neg_step(m, x, 0, slice(0, 3, -1)), (randn(4, 2),)),
    Case("ellipsis_none", lambda m, x: x[..., None, 1], (randn(2, 3, 4),)),
    Case("none_int_ellipsis_none", lambda m, x: x[None, 1, ..., None], (randn(2, 3, 4),)),
    Case("ellipsis_only", lambda m, x: x[...] * 2, (randn(2, 3),)),
    Case("zero_dim_input", lambda m, x: (x[None], x[...], x[()]), (randn(),)),
    Case("list_with_duplicates", lambda m, x: x[[2, 0, 2]], (randn(3, 4),)),
    Case("int_tensor_2d_index", lambda m, x, i: x[i], (randn(4, 3), ints(2, 3, high=4))),
    Case("int32_index", lambda m, x, i: x[:, i], (randn(3, 5), ints(4, high=5, dtype=np.int32))),
    Case("numpy_array_index", lambda m, x: x[np.array([1, 0, -1])], (randn(3, 2),)),
    Case("adv_adjacent_broadcast", lambda m, x, i, j: x[:, i, j],
         (randn(2, 4, 5), ints(3, 1, high=4), ints(2, high=5))),
    Case("adv_separated", lambda m, x, i, j: x[i, :, j], (randn(3, 4, 5), ints(2, high=3), ints(2, high=5))),
    Case("adv_separated_by_none", lambda m, x: x[[0, 1], None, [1, 2]], (randn(3, 4),)),
    Case("adv_int_then_list", lambda m, x: x[0, :, [1, 3]], (randn(2, 3, 4),)),
    Case("adv_broadcast_grid", lambda m, x, i, j: x[i, j], (randn(4, 5), ints(3, 1, high=4), ints(1, 2, high=5))),
    Case("adv_negative_values", lambda m, x: x[[-1, 0], [-2, 1]], (randn(3, 4),)),
    Case("adv_negative_tensor", lambda m, x, i, j: x[i, j],
         (randn(3, 4), ints(5, low=-3, high=3), ints(5, low=-4, high=4))),
    Case("adv_ellipsis_last", lambda m, x: x[None, ..., [0, 2]], (randn(2, 3, 4),)),
    Case("zero_dim_int_tensor_selects", lambda m, x, i: x[i, :, [0, 1]], (randn(2, 3, 4), ints(high=2))),
    Case("bool_mask_full", lambda m, x, k: x[k], (randn(3, 4), bools(3, 4)), traceable=False),
    Case("bool_mask_rows", lambda m, x: x[ROWS_3], (randn(3, 4),)),
    Case("bool_mask_middle_dim", lambda m, x, k: x[:, k], (randn(3, 4, 2), bools(4)), traceable=False),
    Case("bool_mask_with_list", lambda m, x: x[ROWS_3, [0, 2]], (randn(3, 4),)),
    Case("bool_true_false", lambda m, x: (x[True], x[False], x[:, True]), (randn(2, 3),)),
    Case("zero_size_results", lambda m, x: (x[2:2], x[[]], x[:, 5:]), (randn(3, 4),)),
    Case("zero_size_input", lambda m, x: x[:, [0, 1]], (randn(0, 3),)),
    Case("int_dtype", lambda m, x: x[1:, [0, 2]], (ints(3, 4),)),
    Case("bool_dtype", lambda m, x: x[[0, 2], ::2], (bools(3, 4),)),
    Case("non_contiguous", lambda m, x: x.t()[1, ::2], (randn(5, 3),)),
    Case("second_order_adv", lambda m, x: x[[0, 2], 1:] ** 3, (randn(3, 4),), second_order=True),
    Case("second_order_slices", lambda m, x: x[::2] * x[1::2], (randn(4, 3),), second_order=True),
]

SETITEM = [
    Case("set_int", setitem(1), (randn(3, 4), randn(4))),
    Case("set_slice_scalar", setitem((slice(None), slice(1, 3)), 0.5), (randn(3, 4),)),
    Case("set_slice_step", setitem((slice(None, None, 2), 1)), (randn(5, 3), randn(3))),
    Case("set_neg_step", set_neg_step(slice(None, None, -2)), (randn(5, 3), randn(3, 3))),
    Case("set_all", setitem(Ellipsis), (randn(2, 3), randn(3))),
    Case("set_list_rows", setitem([0, 2]), (randn(3, 4), randn(2, 4))),
    Case("set_adv_broadcast_value", setitem(([0, 2], slice(1, None))), (randn(3, 4), randn(3))),
    Case("set_adv_separated", setitem(lambda m, i, j: (i, slice(None), j)),
         (randn(3, 4, 5), lambda rng: perm(3, 2)(rng).reshape(2, 1), lambda rng: perm(5, 2)(rng).reshape(1, 2),
          randn(2, 2, 4))),
    Case("set_adv_negative", setitem(([-1, 0], [-2, 1])), (randn(3, 4), randn(2))),
    Case("set_mask_scalar", setitem(lambda m, k: k, -1.0), (randn(3, 4), bools(3, 4))),
    Case("set_mask_0d_tensor", setitem(lambda m, k: k), (randn(3, 4), bools(3, 4), randn())),
    Case("set_mask_rows_broadcast", setitem(lambda m, k: k), (randn(3, 4), bools(3), randn(4))),
    Case("set_mask_counted_values", setitem(MASK_3x4), (randn(3, 4), randn(5))),
    Case("set_ellipsis_none", setitem((Ellipsis, None, 1)), (randn(2, 3, 4), randn(3, 1))),
    Case("set_zero_dim_tensor_index", setitem(lambda m, i: i), (randn(3, 2), ints(high=3), randn(2))),
    Case("set_empty_selection", setitem(slice(2, 2), 5.0), (randn(3, 2),)),
    Case("set_duplicates_same_value", setitem([0, 0, 2], 1.5), (randn(3, 2),)),
    Case("set_value_cast_from_int", setitem(0), (randn(2, 3), ints(3))),
    Case("set_int_dtype", setitem(([0, 1], 2), 7), (ints(3, 4),)),
    Case("set_bool_dtype", setitem(slice(1, None), True), (bools(3, 4),)),
    Case("set_value_leading_ones", setitem(0), (randn(2, 3), randn(1, 1, 3))),
    Case("set_second_order", lambda m, x, v: (lambda y: (y.__setitem__(0, v * v), y * y)[1])(x * 1),
         (randn(3, 2), randn(2)), second_order=True),
    Case("index_put_accumulate", lambda m, x, i, v: x.index_put((i,), v, accumulate=True),
         (randn(3, 4), np.array([0, 2, 0]), randn(3, 4))),
    Case("index_put_two_dims", lambda m, x, v: m.index_put(x, (m.tensor([0, 2]), m.tensor([1, 3])), v),
         (randn(3, 4), randn(2))),
    Case("index_put_inplace", lambda m, x, v: (x * 1).index_put_((m.tensor([1]),), v), (randn(3, 2), randn(2))),
]

GATHER_SCATTER = [
    Case("gather_dim1", lambda m, x, i: m.gather(x, 1, i), (randn(3, 4), ints(3, 5, high=4)), second_order=True),
    Case("gather_neg_dim_smaller_index", lambda m, x, i: x.gather(-2, i), (randn(4, 3), ints(2, 2, high=4))),
    Case("gather_square", lambda m, x, i: x.gather(0, i) ** 2, (randn(3, 3), ints(3, 3, high=3)),
         second_order=True),
    Case("scatter_src", lambda m, x, i, s: x.scatter(1, i, s), (randn(2, 5), perm_rows(2, 5, 3), randn(2, 3))),
    Case("scatter_value", lambda m, x, i: m.scatter(x, 0, i, 2.5), (randn(4, 3), perm_rows(2, 4, 3))),
    # PyTorch's backward fails for a source larger than the index, so only x's gradient is compared.
    Case("scatter_src_larger", lambda m, x, i, s: x.scatter(1, i, s), (randn(3, 5), perm_rows(2, 5, 2),
                                                                       randn(3, 4)), grad_inputs=(0,)),
    Case("scatter_inplace", lambda m, x, i, s: (x * 1).scatter_(0, i, s), (randn(4), perm(4, 2), randn(2))),
    Case("scatter_int", lambda m, x, i, s: x.scatter(1, i, s), (ints(2, 4), perm_rows(2, 4, 2), ints(2, 2))),
    Case("scatter_add_duplicates", lambda m, x, i, s: m.scatter_add(x, 1, i, s),
         (randn(2, 4), ints(2, 6, high=4), randn(2, 6)), second_order=True),
    Case("scatter_add_inplace", lambda m, x, i, s: (x * 1).scatter_add_(0, i, s), (randn(3), ints(5, high=3),
                                                                                   randn(5))),
    Case("index_select_dim0", lambda m, x, i: m.index_select(x, 0, i), (randn(3, 4), ints(5, high=3))),
    Case("index_select_neg_dim", lambda m, x: x.index_select(-1, m.tensor([3, 0, 3])), (randn(2, 3, 4),)),
    Case("index_select_zero_dim_index", lambda m, x: x.index_select(0, m.tensor(1)), (randn(3, 2),)),
    Case("index_add_alpha", lambda m, x, s: x.index_add(1, m.tensor([0, 2, 0]), s, alpha=2),
         (randn(2, 3), randn(2, 3))),
    Case("index_add_inplace_int", lambda m, x, s: (x * 1).index_add_(0, m.tensor([1, 1]), s), (ints(3), ints(2))),
    # Message passing (a graph layer): gather rows, weight them, scatter-add them; native runs it as one record.
    Case("index_select_mul_index_add", lambda m, x, y, w, r, c: x.index_add(0, r, y.index_select(0, c)
                                                                            * w.unsqueeze(1)),
         (randn(4, 3), randn(5, 3), randn(9), ints(9, high=4), ints(9, high=5)), grad_inputs=(0, 1, 2)),
    Case("index_copy", lambda m, x, s: x.index_copy(0, m.tensor([2, 0]), s), (randn(3, 2), randn(2, 2))),
    Case("index_fill_scalar", lambda m, x: x.index_fill(1, m.tensor([0, 2]), -3.0), (randn(2, 4),)),
    Case("index_fill_tensor_value", lambda m, x, v: m.index_fill(x, 0, m.tensor([1]), v), (randn(3, 2), randn())),
    Case("masked_fill_broadcast_mask", lambda m, x, k: x.masked_fill(k, 0.25), (randn(3, 4), bools(4))),
    Case("masked_fill_tensor_value", lambda m, x, k, v: m.masked_fill(x, k, v), (randn(3, 4), bools(3, 4),
                                                                                 randn())),
    Case("masked_fill_inplace_int", lambda m, x, k: (x * 1).masked_fill_(k, 9), (ints(5), bools(5))),
    Case("masked_select", lambda m, x, k: m.masked_select(x, k), (randn(3, 4), bools(3, 4)), traceable=False),
    Case("masked_select_broadcast", lambda m, x, k: x.masked_select(k), (randn(3, 4), bools(4)), traceable=False),
    Case("masked_scatter", lambda m, x, k, s: x.masked_scatter(k, s), (randn(3, 4), bools(3, 4), randn(14))),
    Case("take", lambda m, x: m.take(x, m.tensor([[0, -1], [5, 2]])), (randn(2, 3),)),
    Case("take_along_dim", lambda m, x, i: m.take_along_dim(x, i, 1), (randn(3, 4), perm_rows(3, 4, 4))),
    Case("take_along_dim_broadcast", lambda m, x, i: m.take_along_dim(x, i, 0), (randn(4, 3), ints(2, 1, high=4))),
    Case("take_along_dim_flat", lambda m, x, i: x.take_along_dim(i), (randn(2, 3), ints(2, 2, high=6))),
    Case("nonzero", lambda m, x: m.nonzero(x), (ints(3, 4, high=2),), traceable=False),
    Case("nonzero_as_tuple", lambda m, x: m.nonzero(x > 0, as_tuple=True), (randn(2, 3, 2),), grad=False,
         traceable=False),
    Case("nonzero_zero_dim", lambda m, x: (x.nonzero(), m.argwhere(x)), (ints(low=1, high=3),), traceable=False),
    Case("argwhere_bool", lambda m, x: x.argwhere(), (bools(5),), traceable=False),
    Case("one_hot", lambda m, x: m.nn.functional.one_hot(x, 5), (ints(2, 3, high=5),)),
    Case("one_hot_inferred", lambda m, x: m.nn.functional.one_hot(x), (ints(4, high=4),), traceable=False),
]
for _mode in ("sum", "prod", "mean", "amax", "amin"):
    for _self in (True, False):
        GATHER_SCATTER.append(Case(
            f"scatter_reduce_{_mode}_{'self' if _self else 'noself'}",
            lambda m, x, i, s, r=_mode, inc=_self: x.scatter_reduce(1, i, s, r, include_self=inc),
            (distinct(2, 4), ints(2, 5, high=4), distinct(2, 5))))

CASES = GETITEM + SETITEM + GATHER_SCATTER


@pytest.mark.parametrize("case", CASES, ids=str)
def test_parity(case, mode):
    run_case(case, mode)


def test_case_names_unique():
    names = [c.name for c in CASES]
    assert len(names) == len(set(names))


# ---------------------------------------------------------------- bad input

def test_int_index_out_of_range():
    x = loom.zeros(3, 4)
    with pytest.raises(loom.LoomIndexError,
                       match=r"loom.getitem: index 5 is out of bounds for dimension 1 with size 4"):
        x[0, 5]
    with pytest.raises(loom.LoomIndexError, match=r"index -4 is out of bounds for dimension 0 with size 3"):
        x[-4]


def test_too_many_indices():
    with pytest.raises(loom.LoomIndexError, match=r"too many indices for tensor of dimension 2"):
        loom.zeros(3, 4)[0, 1, 2]
    with pytest.raises(loom.LoomIndexError, match=r"single ellipsis"):
        loom.zeros(3, 4)[..., 0, ...]


def test_float_index_tensor():
    with pytest.raises(loom.LoomIndexError, match=r"tensors used as indices must be long, int, byte or bool.*float32"):
        loom.zeros(3)[loom.tensor([0.0, 1.0])]
    with pytest.raises(loom.DTypeError, match=r"loom.gather: expected an integer index tensor, got float32"):
        loom.zeros(3).gather(0, loom.tensor([0.0]))


def test_mask_shape_mismatch():
    with pytest.raises(loom.LoomIndexError, match=r"the shape of the mask \[2, 4\] does not match the shape \[3, 4\]"):
        loom.zeros(3, 4)[loom.ones(2, 4).bool()]


def test_list_index_checked_early():
    x = loom.zeros(3, 4)
    with pytest.raises(loom.LoomIndexError, match=r"index 7 is out of bounds for dimension 1 with size 4"):
        x[:, [0, 7]]
    with pytest.raises(loom.LoomIndexError, match=r"index 3 is out of bounds for dimension 0 with size 3"):
        x[[0, 3]] = 1.0


def test_lazy_tensor_index_checked_at_run_time():
    x = loom.zeros(3, 4)
    i = loom.tensor([0, 2]) + loom.tensor([0, 2])  # Lazy: its values are unknown until it runs.
    j = loom.tensor([1, 1]) * 1
    y = x[i, j]
    assert tuple(y.shape) == (2,)
    with pytest.raises(loom.LoomIndexError, match=r"out of bounds"):
        y.numpy()
    with pytest.raises(loom.LoomIndexError, match=r"out of bounds"):
        x[i].numpy()


def test_index_tensors_must_broadcast():
    with pytest.raises(loom.LoomIndexError, match=r"could not be broadcast together with shapes \[2\], \[3\]"):
        loom.zeros(3, 4)[[0, 1], [0, 1, 2]]


def test_setitem_value_shape_mismatch():
    x = loom.zeros(3, 4)
    with pytest.raises(loom.ShapeError, match=r"value tensor of shape \[3\] cannot be broadcast to indexing result "
                                              r"of shape \[4\]"):
        x[0] = loom.ones(3)


def test_scatter_dtype_mismatch_and_one_hot_range():
    with pytest.raises(loom.DTypeError, match=r"loom.scatter_add: expected src to have the dtype of self, float32"):
        loom.zeros(3).scatter_add(0, loom.tensor([0]), loom.ones(1, dtype=loom.float64))
    with pytest.raises(loom.LoomIndexError, match=r"loom.one_hot: class value 5 is out of range for num_classes=3"):
        loom.nn.functional.one_hot(loom.tensor([0, 5]), 3)
    with pytest.raises(loom.DTypeError, match=r"masked_fill: only supports boolean masks"):
        loom.zeros(3).masked_fill(loom.ones(3), 1.0)


def test_getitem_stays_lazy_and_setitem_updates_in_place():
    x = loom.arange(12, dtype=loom.float32).reshape(3, 4)
    y = x[[0, 2], 1:]
    assert y.node.buffer is None  # Nothing ran: advanced indexing is one lazy gather.
    x[x > 5] = 0.0  # A mask with a scalar value stays lazy too.
    assert x.node.buffer is None
    assert x.tolist() == [[0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]
