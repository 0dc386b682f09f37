"""Parity of reductions and scans: values, dtypes, shapes, gradients (and second order) against PyTorch."""
import numpy as np
import pytest

import loom
from tests.parity.harness import Case, bools, distinct, ints, positive, randn, run_case, uniform

NAN = float("nan")
INF = float("inf")


def fixed(values, dtype=np.float32):
    """An input maker returning a fixed array (ties, zeros, NaN placed on purpose)."""
    return lambda rng: np.array(values, dtype=dtype)


def with_nan(*shape, at=((0, 1),)):
    def make(rng):
        a = rng.standard_normal(shape).astype(np.float32)
        for ix in at:
            a[ix] = np.nan
        return a
    return make


CASES = [
    # ------------------------------------------------------------ sum / nansum
    Case("sum_all", lambda m, x: x.sum(), (randn(3, 4),), second_order=True),
    Case("sum_dim0", lambda m, x: m.sum(x, 0), (randn(3, 4),)),
    Case("sum_neg_dim_keepdim", lambda m, x: x.sum(-1, keepdim=True), (randn(2, 3, 4),), second_order=True),
    Case("sum_tuple_dims", lambda m, x: x.sum((0, 2)), (randn(2, 3, 4),)),
    Case("sum_list_neg_dims_keepdim", lambda m, x: x.sum(dim=[-1, -3], keepdim=True), (randn(2, 3, 4),)),
    Case("sum_dim_none_keepdim", lambda m, x: m.sum(x, dim=None, keepdim=True), (randn(2, 3),)),
    Case("sum_empty_tuple_is_all", lambda m, x: x.sum(dim=()), (randn(2, 3),)),
    Case("sum_dtype_float64", lambda m, x: x.sum(1, dtype=m.float64), (randn(3, 4),)),
    Case("sum_int32_to_int64", lambda m, x: x.sum(0), (ints(3, 4, dtype=np.int32),)),
    Case("sum_uint8_to_int64", lambda m, x: x.sum(), (ints(5, high=250, dtype=np.uint8),)),
    Case("sum_bool_to_int64", lambda m, x: x.sum(-1), (bools(3, 5),)),
    Case("sum_int_dtype_float", lambda m, x: x.sum(dtype=m.float32), (ints(4, 2),)),
    Case("sum_empty", lambda m, x: x.sum(), (randn(0, 3),)),
    Case("sum_empty_dim0", lambda m, x: x.sum(0), (randn(0, 3),)),
    Case("sum_scalar_tensor", lambda m, x: x.sum(0), (randn(),)),
    Case("sum_non_contiguous", lambda m, x: x.t()[:, ::2].sum(1), (randn(4, 5),)),
    Case("sum_float64", lambda m, x: x.sum(1), (randn(3, 7, dtype=np.float64),), second_order=True),
    Case("nansum", lambda m, x: m.nansum(x, 1), (with_nan(3, 4, at=((0, 1), (2, 3))),)),
    Case("nansum_int", lambda m, x: m.nansum(x), (ints(3, 4),)),
    # ------------------------------------------------------------ prod
    Case("prod_all", lambda m, x: x.prod(), (uniform(3, 3, low=0.5, high=1.5),), second_order=True),
    Case("prod_dim_keepdim", lambda m, x: x.prod(1, keepdim=True), (randn(3, 4),), second_order=True),
    Case("prod_one_zero", lambda m, x: x.prod(1), (fixed([[1.5, 0.0, 2.0, -1.0], [2.0, 3.0, 0.5, 1.0]]),),
         second_order=True),
    Case("prod_two_zeros", lambda m, x: x.prod(1), (fixed([[0.0, 2.0, 0.0, 3.0], [0.0, 0.0, 0.0, 1.0]]),),
         second_order=True),
    Case("prod_all_one_zero", lambda m, x: x.prod(), (fixed([[1.5, 2.0], [0.0, -3.0]]),), second_order=True),
    Case("prod_int_to_int64", lambda m, x: x.prod(0), (ints(3, 4, low=-3, high=4, dtype=np.int32),)),
    Case("prod_bool", lambda m, x: x.prod(), (bools(6, p=0.9),)),
    Case("prod_dtype", lambda m, x: m.prod(x, 0, dtype=m.float64), (randn(3, 2),)),
    Case("prod_empty", lambda m, x: x.prod(), (randn(0, 4),)),
    Case("prod_empty_dim", lambda m, x: x.prod(0), (randn(0, 4),)),
    # ------------------------------------------------------------ mean / nanmean
    Case("mean_all", lambda m, x: x.mean(), (randn(3, 4),), second_order=True),
    Case("mean_dims_keepdim", lambda m, x: x.mean((0, -1), keepdim=True), (randn(2, 3, 4),)),
    Case("mean_int_with_dtype", lambda m, x: x.mean(dtype=m.float64), (ints(3, 4),)),
    Case("mean_empty_is_nan", lambda m, x: x.mean(), (randn(0, 3),)),
    Case("mean_empty_dim", lambda m, x: x.mean(0), (randn(0, 3),)),
    Case("mean_float16", lambda m, x: x.mean(1), (randn(4, 8, dtype=np.float16),), grad=False),
    Case("nanmean", lambda m, x: m.nanmean(x, 0), (with_nan(3, 4, at=((0, 1), (2, 1), (1, 3))),)),
    # An all-NaN slice is NaN; PyTorch's gradient there is NaN too (inf * 0), loom's is 0: values only.
    Case("nanmean_all_nan_slice", lambda m, x: m.nanmean(x, 0), (with_nan(3, 4, at=((0, 1), (2, 1), (1, 1))),),
         grad=False),
    Case("nanmean_keepdim", lambda m, x: x.nanmean(-1, keepdim=True), (with_nan(2, 5),)),
    # ------------------------------------------------------------ var / std
    Case("var_all", lambda m, x: x.var(), (randn(4, 5),), second_order=True),
    Case("var_dim_unbiased_false", lambda m, x: m.var(x, 1, False), (randn(3, 6),), second_order=True),
    Case("var_unbiased_kw", lambda m, x: x.var(0, unbiased=False, keepdim=True), (randn(3, 6),)),
    Case("var_correction", lambda m, x: m.var(x, dim=(0, 1), correction=2), (randn(3, 4, 2),)),
    Case("var_correction_zero", lambda m, x: x.var(-1, correction=0), (randn(3, 4),), second_order=True),
    Case("var_bool_positional_unbiased", lambda m, x: m.var(x, False), (randn(5),)),
    Case("var_single_element_nan", lambda m, x: x.var(1), (randn(3, 1),), grad=False),
    Case("var_float64", lambda m, x: x.var(0), (randn(6, 3, dtype=np.float64),), second_order=True),
    Case("std_all", lambda m, x: x.std(), (randn(4, 5),), second_order=True),
    Case("std_dim_keepdim", lambda m, x: m.std(x, -1, keepdim=True), (randn(3, 6),), second_order=True),
    Case("std_correction0", lambda m, x: x.std(0, correction=0), (randn(5, 2),)),
    Case("var_mean", lambda m, x: m.var_mean(x, 1), (randn(3, 5),), second_order=True),
    Case("std_mean_unbiased", lambda m, x: m.std_mean(x, 0, unbiased=False), (randn(4, 3),)),
    # ------------------------------------------------------------ amax / amin / max / min
    Case("amax_all", lambda m, x: x.amax(), (randn(3, 4),)),
    Case("amax_dims", lambda m, x: m.amax(x, (0, 2), keepdim=True), (randn(2, 3, 4),)),
    Case("amax_ties_split_grad", lambda m, x: x.amax(1), (fixed([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]]),)),
    Case("amin_ties_split_grad", lambda m, x: m.amin(x), (fixed([[1.0, 3.0, 1.0], [2.0, 1.0, 2.0]]),)),
    Case("amax_int", lambda m, x: x.amax(-1), (ints(3, 4),)),
    Case("amax_bool", lambda m, x: x.amax(0), (bools(3, 4),)),
    Case("amax_nan", lambda m, x: x.amax(1), (with_nan(2, 3),)),
    Case("amax_zero_size_other_dim", lambda m, x: x.amax(1), (randn(0, 3),)),
    Case("max_all_ties_even", lambda m, x: x.max(), (fixed([[1.0, 4.0], [4.0, 4.0]]),)),
    Case("min_all", lambda m, x: m.min(x), (randn(3, 4),)),
    Case("max_all_nan_grad", lambda m, x: x.max(), (with_nan(2, 3, at=((0, 1), (1, 2))),)),
    Case("max_dim", lambda m, x: x.max(1), (distinct(3, 5),)),
    Case("max_dim_keepdim_neg", lambda m, x: m.max(x, dim=-2, keepdim=True), (distinct(3, 4, 2),)),
    Case("max_dim_ties_route_to_index", lambda m, x: x.max(1), (fixed([[1.0, 3.0, 3.0], [2.0, 2.0, 0.0]]),)),
    Case("min_dim_ties", lambda m, x: x.min(0), (fixed([[1.0, 0.0], [1.0, 0.0], [2.0, -1.0]]),)),
    Case("max_dim_nan", lambda m, x: x.max(1), (with_nan(3, 4, at=((0, 1), (0, 3), (2, 2))),)),
    Case("min_dim_nan", lambda m, x: x.min(0), (with_nan(3, 4, at=((1, 0), (2, 0))),)),
    Case("max_dim_int", lambda m, x: x.max(0), (ints(4, 3),)),
    Case("max_dim_scalar", lambda m, x: m.max(x, 0), (randn(),)),
    Case("max_dim_namedtuple", lambda m, x: (x.max(1).values * 2, x.min(dim=1).indices), (distinct(3, 4),)),
    Case("max_elementwise", lambda m, a, b: m.max(a, b), (randn(3, 4), randn(4))),
    Case("min_elementwise", lambda m, a, b: m.min(a, b), (randn(3, 4), randn(3, 4))),
    Case("aminmax", lambda m, x: m.aminmax(x, dim=1), (randn(3, 4),)),
    Case("aminmax_all_fields", lambda m, x: (x.aminmax().min, x.aminmax().max), (randn(3, 4),)),
    # ------------------------------------------------------------ argmax / argmin
    Case("argmax_all", lambda m, x: x.argmax(), (randn(3, 4),)),
    Case("argmax_all_keepdim", lambda m, x: m.argmax(x, keepdim=True), (randn(3, 4),)),
    Case("argmax_dim", lambda m, x: x.argmax(1), (randn(3, 4),)),
    Case("argmin_dim_keepdim", lambda m, x: x.argmin(-1, keepdim=True), (randn(2, 3, 4),)),
    Case("argmax_ties_first", lambda m, x: x.argmax(1), (fixed([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]]),)),
    Case("argmax_nan_first", lambda m, x: (x.argmax(1), x.argmin(1), x.argmax()),
         (with_nan(3, 4, at=((0, 2), (0, 3), (1, 1))),)),
    Case("argmax_int", lambda m, x: m.argmax(x, 0), (ints(5, 3, high=3),)),
    Case("argmin_inf", lambda m, x: x.argmin(), (fixed([1.0, -INF, 2.0, -INF]),)),
    # ------------------------------------------------------------ logsumexp
    Case("logsumexp", lambda m, x: m.logsumexp(x, 1), (randn(3, 5),), second_order=True),
    Case("logsumexp_dims_keepdim", lambda m, x: x.logsumexp((0, 2), keepdim=True), (randn(2, 3, 4),)),
    Case("logsumexp_large", lambda m, x: (x * 100).logsumexp(-1), (randn(3, 4),)),
    Case("logsumexp_neg_inf", lambda m, x: x.logsumexp(1), (fixed([[-INF, -INF], [0.0, -INF]]),), grad=False),
    Case("logsumexp_int", lambda m, x: m.logsumexp(x, 0), (ints(3, 2),)),
    Case("logsumexp_empty", lambda m, x: x.logsumexp(0), (randn(0, 3),)),
    # ------------------------------------------------------------ all / any / count_nonzero
    Case("all_any_bool", lambda m, x: (x.all(), x.any(), x.all(1), x.any(0, keepdim=True)), (bools(3, 4, p=0.7),)),
    Case("all_any_float", lambda m, x: (m.all(x, 1), m.any(x, -1)), (fixed([[0.0, 1.0], [2.0, -1.0]]),),
         grad=False),
    Case("all_any_uint8", lambda m, x: (x.all(), x.any(1)), (ints(3, 4, high=2, dtype=np.uint8),)),
    Case("all_any_empty", lambda m, x: (x.all(), x.any(), x.all(0), x.any(0), x.any(1)), (bools(0, 3),)),
    Case("count_nonzero", lambda m, x: (m.count_nonzero(x), x.count_nonzero(1), x.count_nonzero((0, 1))),
         (ints(3, 4, high=3),)),
    # ------------------------------------------------------------ norm
    Case("norm_fro", lambda m, x: x.norm(), (randn(3, 4),), second_order=True),
    Case("norm_2_dim", lambda m, x: m.norm(x, 2, dim=1), (randn(3, 4),), second_order=True),
    Case("norm_fro_dims_keepdim", lambda m, x: m.norm(x, "fro", dim=(0, 1), keepdim=True), (randn(3, 4),)),
    Case("norm_1", lambda m, x: x.norm(1, dim=-1), (randn(3, 4),)),
    Case("norm_inf", lambda m, x: x.norm(INF, dim=1), (randn(3, 4),)),
    Case("norm_neg_inf", lambda m, x: x.norm(-INF), (randn(3, 4),)),
    Case("norm_0", lambda m, x: x.norm(0, dim=0), (fixed([[0.0, 1.0], [2.0, 0.0], [0.0, 0.0]]),)),
    Case("norm_0_nan_inf", lambda m, x: x.norm(0), (fixed([0.0, NAN, INF, -2.0, 0.0]),)),
    Case("norm_3", lambda m, x: x.norm(3, dim=1), (randn(3, 4),), second_order=True),
    Case("norm_half", lambda m, x: x.norm(0.5), (positive(5),)),
    Case("norm_zero_vector_grad", lambda m, x: x.norm(dim=1), (fixed([[0.0, 0.0], [3.0, 4.0]]),)),
    Case("norm_inf_ties", lambda m, x: x.norm(INF), (fixed([[1.0, -3.0], [3.0, 2.0]]),)),
    Case("norm_dtype", lambda m, x: x.norm(dtype=m.float64), (randn(3),)),
    # ------------------------------------------------------------ scans
    Case("cumsum", lambda m, x: x.cumsum(1), (randn(3, 7),), second_order=True),
    Case("cumsum_dim0_neg", lambda m, x: m.cumsum(x, dim=-3), (randn(5, 2, 3),)),
    Case("cumsum_int32", lambda m, x: x.cumsum(0), (ints(6, dtype=np.int32),)),
    Case("cumsum_bool", lambda m, x: x.cumsum(-1), (bools(2, 5),)),
    Case("cumsum_dtype", lambda m, x: x.cumsum(0, dtype=m.float64), (randn(4),)),
    Case("cumsum_empty", lambda m, x: x.cumsum(0), (randn(0, 3),)),
    Case("cumsum_scalar", lambda m, x: x.cumsum(0), (randn(),)),
    Case("cumsum_non_contiguous", lambda m, x: x.t().cumsum(1), (randn(4, 3),)),
    Case("cumprod", lambda m, x: x.cumprod(1), (uniform(3, 6, low=0.5, high=1.5),), second_order=True),
    Case("cumprod_zeros", lambda m, x: x.cumprod(0), (fixed([2.0, 0.0, 3.0, 0.0, -1.5]),), second_order=True),
    Case("cumprod_int", lambda m, x: x.cumprod(-1), (ints(2, 5, low=-2, high=3, dtype=np.int16),)),
    Case("cummax", lambda m, x: x.cummax(1), (randn(3, 6),)),
    Case("cummax_ties", lambda m, x: m.cummax(x, 0), (fixed([1.0, 3.0, 2.0, 3.0, 3.0, 0.0]),)),
    Case("cummin_ties", lambda m, x: m.cummin(x, 0), (fixed([2.0, 1.0, 1.0, 3.0, 0.5, 0.5]),)),
    Case("cummax_nan", lambda m, x: x.cummax(0), (fixed([1.0, NAN, 3.0, NAN, 5.0]),)),
    Case("cummin_int", lambda m, x: x.cummin(1), (ints(3, 6),)),
    Case("cummax_bool", lambda m, x: x.cummax(0), (bools(7),)),
    Case("logcumsumexp", lambda m, x: m.logcumsumexp(x, 1), (randn(3, 5),), second_order=True),
    Case("logcumsumexp_large", lambda m, x: (x * 50).logcumsumexp(0), (randn(6, 2),)),
    Case("logcumsumexp_wide_range", lambda m, x: x.logcumsumexp(0), (fixed([-1000.0, 0.0, -2000.0, 3.0]),)),
    Case("logcumsumexp_neg_inf", lambda m, x: x.logcumsumexp(1), (fixed([[-INF, -INF, 1.0], [2.0, -INF, 0.0]]),),
         grad=False),
    # ------------------------------------------------------------ compositions
    Case("softmax_by_hand", lambda m, x: (x - x.amax(1, keepdim=True)).exp() / (x - x.amax(1, keepdim=True))
         .exp().sum(1, keepdim=True), (randn(3, 5),), second_order=True),
    Case("layer_stats", lambda m, x: (x - x.mean(-1, keepdim=True)) / (x.var(-1, keepdim=True, unbiased=False)
         + 1e-5).sqrt(), (randn(4, 6),), second_order=True),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_parity(case, mode):
    run_case(case, mode)


def test_case_names_unique():
    names = [c.name for c in CASES]
    assert len(names) == len(set(names))


# ---------------------------------------------------------------- errors

def test_dim_out_of_range():
    with pytest.raises(loom.LoomIndexError, match="dimension out of range"):
        loom.randn(2, 3).sum(2)
    with pytest.raises(loom.LoomIndexError, match="dimension out of range"):
        loom.randn(2, 3).amax(-3)


def test_max_with_several_dims():
    with pytest.raises(TypeError, match="amax"):
        loom.randn(2, 3).max((0, 1))


def test_repeated_dim():
    with pytest.raises(loom.LoomError, match="multiple times"):
        loom.randn(2, 3).sum((1, -1))


def test_mean_of_int_needs_dtype():
    with pytest.raises(loom.DTypeError, match="mean"):
        loom.tensor([1, 2, 3]).mean()
    with pytest.raises(loom.DTypeError, match="nanmean"):
        loom.tensor([1, 2, 3]).nanmean()


def test_var_std_norm_of_int():
    x = loom.tensor([1, 2, 3])
    for fn in (loom.var, loom.std, loom.norm):
        with pytest.raises(loom.DTypeError):
            fn(x)


def test_logcumsumexp_of_int():
    with pytest.raises(loom.DTypeError, match="logcumsumexp"):
        loom.tensor([1, 2]).logcumsumexp(0)


def test_max_of_empty():
    with pytest.raises(loom.ShapeError, match="zero-size|numel"):
        loom.zeros(0, 3).max()
    with pytest.raises(loom.ShapeError, match="zero-size"):
        loom.zeros(0, 3).max(0)
    with pytest.raises(loom.ShapeError, match="zero-size"):
        loom.zeros(0, 3).argmax()
    with pytest.raises(loom.ShapeError, match="zero-size"):
        loom.zeros(2, 0).amin(1)


def test_sum_result_is_a_new_tensor():
    x = loom.tensor(2.0)
    y = x.sum()
    y.add_(1.0)
    assert x.item() == 2.0 and y.item() == 3.0


def test_cumsum_inplace():
    x = loom.tensor([1.0, 2.0, 3.0])
    x.cumsum_(0)
    assert x.tolist() == [1.0, 3.0, 6.0]


def test_prod_third_order_with_zeros():
    import torch
    a = np.array([[0.0, 2.0, 0.0, 3.0, 1.5], [0.5, 0.0, -2.0, 1.0, 4.0]], dtype=np.float64)
    outs = []
    for lib in (torch, loom):
        x = lib.tensor(a, requires_grad=True)
        grad = torch.autograd.grad if lib is torch else loom.autograd.grad
        (g1,) = grad(x.prod(1).sum(), [x], create_graph=True)
        (g2,) = grad((g1 * g1).sum(), [x], create_graph=True)
        (g3,) = grad((g2 * lib.arange(5.0, dtype=lib.float64)).sum(), [x])
        outs.append([t.detach().numpy() for t in (g1, g2, g3)])
    for got, want in zip(outs[1], outs[0]):
        np.testing.assert_allclose(got, want, rtol=1e-10)
