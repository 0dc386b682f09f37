"""Parity of sorting, order statistics, unique and searching against PyTorch."""
import numpy as np
import pytest

import loom
from tests.parity.harness import Case, bools, distinct, ints, randn, run_case

NAN = float("nan")


def fixed(values, dtype=np.float32):
    """An input maker returning a fixed array (ties and NaN placed on purpose)."""
    return lambda rng: np.array(values, dtype=dtype)


TIES = [[2.0, 1.0, 2.0, 0.5, 1.0, 2.0], [0.0, 0.0, 3.0, -1.0, 3.0, 0.0]]
WITH_NAN = [[1.0, NAN, 3.0, -2.0, NAN], [0.5, 2.0, NAN, 1.0, -1.0], [4.0, 3.0, 2.0, 1.0, 0.0]]
SORTED_ROWS = [[1.0, 2.0, 2.0, 4.0, 7.0], [-3.0, -1.0, 0.0, 0.0, 5.0]]


def _sorted_values(m, r):
    return m.sort(r.values, -1).values


CASES = [
    # ------------------------------------------------------------ sort / argsort / msort
    Case("sort_last_dim", lambda m, x: m.sort(x), (distinct(3, 5),)),
    Case("sort_dim0_descending", lambda m, x: x.sort(0, descending=True), (distinct(4, 3),)),
    Case("sort_neg_dim_3d", lambda m, x: x.sort(dim=-2), (distinct(2, 4, 3),)),
    Case("sort_stable_ties", lambda m, x: m.sort(x, stable=True), (fixed(TIES),)),
    Case("sort_stable_ties_descending", lambda m, x: x.sort(dim=1, descending=True, stable=True), (fixed(TIES),)),
    Case("sort_nan", lambda m, x: x.sort(dim=1, stable=True), (fixed(WITH_NAN),)),
    Case("sort_nan_descending", lambda m, x: x.sort(dim=1, descending=True, stable=True), (fixed(WITH_NAN),)),
    Case("sort_int64_ties", lambda m, x: x.sort(stable=True), (ints(3, 8, high=4),)),
    Case("sort_int32_descending", lambda m, x: x.sort(dim=0, descending=True, stable=True),
         (ints(6, 2, low=-5, high=5, dtype=np.int32),)),
    Case("sort_uint8", lambda m, x: x.sort(stable=True), (ints(9, high=200, dtype=np.uint8),)),
    Case("sort_bool", lambda m, x: x.sort(descending=True, stable=True), (bools(7),)),
    Case("sort_scalar", lambda m, x: x.sort(), (randn(),)),
    Case("sort_empty", lambda m, x: x.sort(0), (randn(0, 3),)),
    Case("sort_non_contiguous", lambda m, x: x.t().sort(1), (distinct(5, 3),)),
    Case("sort_float64_second_order", lambda m, x: x.sort(1).values ** 2, (distinct(3, 4, dtype=np.float64),),
         second_order=True),
    Case("sort_inf", lambda m, x: x.sort(), (fixed([1.0, float("inf"), -float("inf"), 0.0]),)),
    Case("argsort", lambda m, x: x.argsort(), (distinct(3, 6),)),
    Case("argsort_descending_stable", lambda m, x: m.argsort(x, dim=1, descending=True, stable=True),
         (fixed(TIES),)),
    Case("argsort_dim0_int", lambda m, x: x.argsort(dim=0, stable=True), (ints(5, 3, high=3),)),
    Case("msort", lambda m, x: m.msort(x), (distinct(4, 3),)),
    # ------------------------------------------------------------ topk / kthvalue
    Case("topk", lambda m, x: x.topk(3), (distinct(4, 6),)),
    Case("topk_smallest_dim0", lambda m, x: m.topk(x, 2, dim=0, largest=False), (distinct(5, 3),)),
    Case("topk_k_zero", lambda m, x: x.topk(0), (distinct(3, 4),)),
    Case("topk_k_full", lambda m, x: x.topk(4, dim=1), (distinct(3, 4),)),
    Case("topk_nan_largest", lambda m, x: x.topk(2, dim=1), (fixed([[1.0, NAN, 3.0, -2.0], [0.5, 2.0, 1.0, 7.0]]),)),
    Case("topk_nan_smallest", lambda m, x: x.topk(2, dim=1, largest=False),
         (fixed([[1.0, NAN, 3.0, -2.0], [0.5, 2.0, 1.0, 7.0]]),)),
    Case("topk_unsorted_values", lambda m, x: _sorted_values(m, x.topk(3, sorted=False)), (distinct(2, 7),)),
    Case("topk_int", lambda m, x: x.topk(2), (fixed([[5, 1, 9, 3], [2, 8, 4, 6]], dtype=np.int64),)),
    Case("topk_scalar", lambda m, x: x.topk(1), (randn(),)),
    Case("topk_second_order", lambda m, x: x.topk(2).values.exp(), (distinct(3, 5),), second_order=True),
    Case("kthvalue", lambda m, x: x.kthvalue(2), (distinct(3, 5),)),
    Case("kthvalue_dim0_keepdim", lambda m, x: m.kthvalue(x, 3, 0, True), (distinct(4, 2),)),
    Case("kthvalue_int", lambda m, x: x.kthvalue(1, dim=-1), (fixed([[5, 1, 9], [2, 8, 4]], dtype=np.int32),)),
    # ------------------------------------------------------------ median / nanmedian / mode
    Case("median_odd", lambda m, x: x.median(), (distinct(3, 5),)),
    Case("median_even_lower", lambda m, x: m.median(x), (distinct(2, 4),)),
    Case("median_ties_grad_split", lambda m, x: x.median(), (fixed([[1.0, 2.0, 2.0], [2.0, 5.0, 0.0]]),)),
    Case("median_dim", lambda m, x: x.median(1), (distinct(3, 6),)),
    Case("median_dim0_keepdim", lambda m, x: m.median(x, 0, keepdim=True), (distinct(5, 3),)),
    Case("median_nan", lambda m, x: (x.median(), x.median(1)), (fixed(WITH_NAN),)),
    Case("median_int", lambda m, x: (x.median(), x.median(0).values), (ints(5, 3),)),
    Case("median_empty", lambda m, x: x.median(), (randn(0),)),
    Case("nanmedian", lambda m, x: (x.nanmedian(), m.nanmedian(x, 1)), (fixed(WITH_NAN),)),
    Case("nanmedian_all_nan_row", lambda m, x: m.nanmedian(x, 1).values,
         (fixed([[NAN, NAN, NAN], [1.0, NAN, 2.0]]),)),
    Case("mode", lambda m, x: x.mode(), (fixed([[1, 2, 2, 3, 3, 1, 5], [4, 4, 0, 0, 0, 4, 9]], dtype=np.int64),)),
    Case("mode_dim0_keepdim", lambda m, x: m.mode(x, 0, keepdim=True), (fixed([[1.0, 2.0], [3.0, 2.0], [1.0, 0.5]]),)),
    Case("mode_float_grad", lambda m, x: x.mode(1), (fixed([[0.5, 1.5, 0.5, 2.0], [3.0, 3.0, 1.0, 1.0]]),)),
    # ------------------------------------------------------------ quantile
    Case("quantile_scalar", lambda m, x: x.quantile(0.3), (randn(4, 5),)),
    Case("quantile_tensor_q_dim", lambda m, x, q: m.quantile(x, q, dim=1), (randn(3, 7),
         fixed([0.0, 0.25, 0.5, 0.9, 1.0])), grad_inputs=(0,)),
    Case("quantile_keepdim", lambda m, x, q: x.quantile(q, 0, keepdim=True), (randn(6, 3), fixed([0.2, 0.7])),
         grad_inputs=(0,)),
    Case("quantile_dim_none_keepdim", lambda m, x: x.quantile(0.75, keepdim=True), (randn(3, 4),)),
    Case("quantile_lower", lambda m, x: x.quantile(0.4, 1, interpolation="lower"), (randn(3, 6),)),
    Case("quantile_higher", lambda m, x: x.quantile(0.4, 1, interpolation="higher"), (randn(3, 6),)),
    Case("quantile_midpoint", lambda m, x: x.quantile(0.4, 1, interpolation="midpoint"), (randn(3, 6),)),
    Case("quantile_nearest", lambda m, x, q: x.quantile(q, -1, interpolation="nearest"),
         (randn(3, 5), fixed([0.125, 0.375, 0.625])), grad_inputs=(0,)),
    Case("quantile_nan", lambda m, x: x.quantile(0.5, 1), (fixed(WITH_NAN),)),
    Case("quantile_float64_second_order", lambda m, x: x.quantile(0.35, 0) ** 2,
         (randn(5, 2, dtype=np.float64),), second_order=True),
    Case("nanquantile", lambda m, x, q: m.nanquantile(x, q, dim=1), (fixed(WITH_NAN), fixed([0.1, 0.5, 1.0])),
         grad_inputs=(0,)),
    Case("nanquantile_all_nan", lambda m, x: x.nanquantile(0.5, 1), (fixed([[NAN, NAN], [1.0, 3.0]]),)),
    # ------------------------------------------------------------ unique
    Case("unique", lambda m, x: m.unique(x), (ints(4, 5, high=6),), traceable=False),
    Case("unique_inverse_counts", lambda m, x: x.unique(return_inverse=True, return_counts=True),
         (ints(3, 4, high=5),), traceable=False),
    Case("unique_float", lambda m, x: x.unique(return_counts=True), (fixed([1.5, -2.0, 1.5, 0.0, -2.0]),),
         grad=False, traceable=False),
    Case("unique_dim0", lambda m, x: m.unique(x, dim=0, return_inverse=True, return_counts=True),
         (fixed([[1, 2], [1, 2], [0, 5], [1, 2]], dtype=np.int64),), traceable=False),
    Case("unique_dim1", lambda m, x: x.unique(dim=1), (fixed([[1, 0, 1], [2, 3, 2]], dtype=np.int64),),
         traceable=False),
    Case("unique_bool", lambda m, x: x.unique(), (bools(6),), traceable=False),
    Case("unique_consecutive", lambda m, x: m.unique_consecutive(x, return_inverse=True, return_counts=True),
         (fixed([1, 1, 2, 2, 3, 1, 1, 2], dtype=np.int64),), traceable=False),
    Case("unique_consecutive_dim0", lambda m, x: x.unique_consecutive(dim=0, return_counts=True),
         (fixed([[1, 2], [1, 2], [0, 5], [1, 2]], dtype=np.int64),), traceable=False),
    # ------------------------------------------------------------ searchsorted / bucketize
    Case("searchsorted_left", lambda m, s, v: m.searchsorted(s, v), (fixed(SORTED_ROWS[0]), randn(3, 4))),
    Case("searchsorted_right_ties", lambda m, s, v: m.searchsorted(s, v, right=True),
         (fixed(SORTED_ROWS[0]), fixed([2.0, 0.0, 7.0, 8.0, 4.0]))),
    Case("searchsorted_side_left_ties", lambda m, s, v: m.searchsorted(s, v, side="left"),
         (fixed(SORTED_ROWS[0]), fixed([2.0, 0.0, 7.0, 8.0, 4.0]))),
    Case("searchsorted_nd", lambda m, s, v: m.searchsorted(s, v), (fixed(SORTED_ROWS), randn(2, 3))),
    Case("searchsorted_int32_out", lambda m, s, v: m.searchsorted(s, v, out_int32=True),
         (fixed([1, 3, 5, 7], dtype=np.int64), ints(6, high=9))),
    Case("searchsorted_scalar", lambda m, s: m.searchsorted(s, 2.5), (fixed([1, 2, 3], dtype=np.int64),)),
    Case("searchsorted_sorter", lambda m, s, o, v: m.searchsorted(s, v, sorter=o),
         (fixed([5.0, 1.0, 3.0]), fixed([1, 2, 0], dtype=np.int64), fixed([0.0, 2.0, 3.0, 6.0]))),
    Case("searchsorted_nan", lambda m, s, v: m.searchsorted(s, v), (fixed([1.0, 2.0, 3.0]), fixed([NAN, 2.0]))),
    Case("bucketize", lambda m, v, b: m.bucketize(v, b), (fixed([0.5, 1.0, 2.0, 2.5, 9.0]), fixed([1.0, 2.0, 3.0]))),
    Case("bucketize_right_int32", lambda m, v, b: m.bucketize(v, b, right=True, out_int32=True),
         (fixed([[0, 1], [2, 3]], dtype=np.int64), fixed([1, 2, 3], dtype=np.int64))),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_parity(case, mode):
    run_case(case, mode)


def test_case_names_unique():
    names = [c.name for c in CASES]
    assert len(names) == len(set(names))


# ---------------------------------------------------------------- errors

def test_topk_k_out_of_range():
    x = loom.randn(3, 4)
    with pytest.raises(loom.LoomIndexError, match=r"k=5.*size 4"):
        x.topk(5)
    with pytest.raises(loom.LoomIndexError, match=r"k=-1"):
        x.topk(-1, dim=0)


def test_kthvalue_k_out_of_range():
    with pytest.raises(loom.LoomIndexError, match=r"k=0.*size 4"):
        loom.randn(3, 4).kthvalue(0)
    with pytest.raises(loom.LoomIndexError, match=r"k=4.*size 3"):
        loom.randn(3, 4).kthvalue(4, dim=0)


def test_sort_dim_out_of_range():
    with pytest.raises(loom.LoomIndexError, match="dimension out of range"):
        loom.randn(3, 4).sort(2)
    with pytest.raises(loom.LoomIndexError, match="dimension out of range"):
        loom.randn(3).argsort(-2)


def test_quantile_errors():
    x = loom.randn(5)
    with pytest.raises(loom.LoomError, match=r"\[0, 1\]"):
        x.quantile(1.5)
    with pytest.raises(loom.DTypeError, match="float32 or float64"):
        loom.tensor([1, 2, 3]).quantile(0.5)
    with pytest.raises(loom.LoomError, match="interpolation"):
        x.quantile(0.5, interpolation="cubic")
    with pytest.raises(loom.ShapeError, match="non-empty"):
        loom.zeros(0).quantile(0.5)


def test_median_mode_of_empty_dim():
    with pytest.raises(loom.ShapeError, match="zero-size"):
        loom.zeros(0, 3).median(0)
    with pytest.raises(loom.ShapeError, match="zero-size"):
        loom.zeros(3, 0).mode(1)


def test_searchsorted_shape_mismatch():
    with pytest.raises(loom.ShapeError, match="agree"):
        loom.searchsorted(loom.zeros(2, 3), loom.zeros(3, 1))
    with pytest.raises(loom.LoomError, match="contradict"):
        loom.searchsorted(loom.zeros(3), loom.zeros(2), right=True, side="left")


# ---------------------------------------------------------------- users of argsort/topk

def test_randperm_is_a_permutation():
    loom.manual_seed(0)
    p = loom.randperm(50)
    assert p.dtype is loom.int64
    assert sorted(p.tolist()) == list(range(50))
    assert p.tolist() != list(range(50))


def test_multinomial_without_replacement():
    loom.manual_seed(1)
    probs = loom.tensor([[0.1, 0.2, 0.3, 0.4], [0.0, 0.5, 0.5, 0.0]])
    idx = loom.multinomial(probs, 2)
    assert tuple(idx.shape) == (2, 2)
    rows = idx.tolist()
    assert all(len(set(r)) == 2 for r in rows)
    assert set(rows[1]) == {1, 2}  # Zero-probability categories are never drawn.


def test_sort_is_lazy_and_gradient_flows():
    x = loom.tensor([3.0, 1.0, 2.0], requires_grad=True)
    v = x.sort(descending=True).values
    (v * loom.tensor([1.0, 10.0, 100.0])).sum().backward()
    assert x.grad.tolist() == [1.0, 100.0, 10.0]
