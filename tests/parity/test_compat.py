"""Parity of loom/functional/compat.py: PyTorch's second spellings, in-place twins and small composites."""
import numpy as np
import pytest

import loom
from tests.parity.harness import Case, bools, ints, positive, randn, run_case, uniform



def _well_conditioned(*shape, dtype=np.float32):
    return lambda rng: (rng.standard_normal(shape) + 3 * np.eye(shape[-1])).astype(dtype)


def _spd(*shape, dtype=np.float32):
    def make(rng):
        a = rng.standard_normal(shape)
        return (a @ np.swapaxes(a, -1, -2) + shape[-1] * np.eye(shape[-1])).astype(dtype)
    return make


def _lower(*shape):
    return lambda rng: np.linalg.cholesky(_spd(*shape, dtype=np.float64)(rng)).astype(np.float32)


CASES = [
    Case("diff", lambda m, x: m.diff(x), (randn(3, 5),), second_order=True),
    Case("diff_n2_dim0_prepend", lambda m, x, p: m.diff(x, n=2, dim=0, prepend=p), (randn(3, 4), randn(1, 4))),
    Case("diff_append_scalar_dim", lambda m, x, a: x.diff(dim=1, append=a), (randn(2, 3), randn(2, 2))),
    Case("diff_bool", lambda m, x: m.diff(x), (bools(6),), grad=False),
    Case("cov", lambda m, x: m.cov(x), (randn(3, 6),)),
    Case("cov_correction0", lambda m, x: m.cov(x, correction=0), (randn(2, 5),)),
    Case("cov_weights", lambda m, x, f, a: m.cov(x, fweights=f, aweights=a), (randn(3, 5), ints(5, low=1, high=4),
                                                                              positive(5)), grad_inputs=(0,)),
    Case("cov_1d", lambda m, x: m.cov(x), (randn(6),)),
    Case("corrcoef", lambda m, x: m.corrcoef(x), (randn(3, 7),), rtol=1e-4, atol=1e-5),
    Case("trace", lambda m, x: m.trace(x), (randn(3, 4),), second_order=True),
    Case("diagflat", lambda m, x: m.diagflat(x, 1), (randn(2, 2),)),
    Case("dist", lambda m, a, b: m.dist(a, b), (randn(3, 4), randn(3, 4))),
    Case("dist_p1", lambda m, a, b: m.dist(a, b, p=1), (randn(5), randn(5))),
    Case("cross_default_dim", lambda m, a, b: m.cross(a, b), (randn(4, 3), randn(4, 3))),
    Case("histc", lambda m, x: m.histc(x, bins=5, min=-1, max=1), (uniform(40, low=-1.5, high=1.5),), grad=False),
    Case("histc_data_range", lambda m, x: m.histc(x, bins=7), (randn(30),), grad=False, traceable=False),
    Case("bincount", lambda m, x: m.bincount(x), (ints(20, high=6),), grad=False, traceable=False),
    Case("bincount_weights", lambda m, x, w: m.bincount(x, w, minlength=9), (ints(20, high=6), randn(20)),
         grad=False, traceable=False),
    Case("tril_indices", lambda m: m.tril_indices(4, 3, -1), (), grad=False),
    Case("triu_indices", lambda m: m.triu_indices(3, 5, 1), (), grad=False),
    Case("block_diag", lambda m, a, b, c: m.block_diag(a, b, c), (randn(2, 2), randn(3), randn(2, 1))),
    Case("cartesian_prod", lambda m, a, b: m.cartesian_prod(a, b), (randn(3), randn(2))),
    Case("combinations", lambda m, x: m.combinations(x, 2), (randn(4),)),
    Case("combinations_replacement", lambda m, x: m.combinations(x, 3, with_replacement=True), (randn(3),)),
    Case("cdist", lambda m, a, b: m.cdist(a, b), (randn(4, 3), randn(5, 3)), rtol=1e-4, atol=1e-4),
    Case("cdist_p1_batched", lambda m, a, b: m.cdist(a, b, p=1), (randn(2, 3, 4), randn(2, 2, 4))),
    Case("rsub", lambda m, a, b: m.rsub(a, b, alpha=2), (randn(3), randn(3))),
    Case("vander", lambda m, x: m.vander(x, N=4), (randn(3),), grad=False,
         reason="PyTorch cannot differentiate vander (its own in-place write breaks autograd)"),
    Case("vander_increasing_int", lambda m, x: m.vander(x, increasing=True), (ints(4, high=4),), grad=False),
    Case("unravel_index", lambda m, i: m.unravel_index(i, (3, 4)), (ints(5, high=12),), grad=False),
    Case("isin", lambda m, a, b: m.isin(a, b), (ints(8, high=6), ints(3, high=6)), grad=False),
    Case("isin_invert", lambda m, a, b: m.isin(a, b, invert=True), (ints(2, 3, high=4), ints(2, high=4)),
         grad=False),
    Case("isclose", lambda m, a, b: m.isclose(a, a + b * 1e-6, rtol=1e-6), (randn(10), randn(10)), grad=False),
    Case("isclose_int", lambda m, a, b: m.isclose(a, b, atol=2, rtol=0), (ints(10), ints(10)), grad=False),
    Case("isclose_inf_nan", lambda m: m.isclose(m.tensor([float("inf"), float("nan"), -float("inf"), 1.0]),
                                                m.tensor([float("inf"), float("nan"), float("inf"), 1.0]),
                                                equal_nan=True), (), grad=False),
    Case("chain_matmul", lambda m, a, b, c: m.chain_matmul(a, b, c), (randn(2, 3), randn(3, 4), randn(4, 2))),
    Case("hsplit", lambda m, x: m.hsplit(x, 2), (randn(3, 4),)),
    Case("vsplit_list", lambda m, x: m.vsplit(x, [1, 3]), (randn(4, 2),)),
    Case("dsplit", lambda m, x: m.dsplit(x, 3), (randn(2, 2, 6),)),
    Case("select_scatter", lambda m, x, s: m.select_scatter(x, s, 1, 2), (randn(3, 4), randn(3))),
    Case("slice_scatter", lambda m, x, s: m.slice_scatter(x, s, 0, 1, 5, 2), (randn(6, 2), randn(2, 2))),
    Case("diagonal_scatter", lambda m, x, s: m.diagonal_scatter(x, s, 1), (randn(3, 4), randn(3))),
    Case("diagonal_scatter_dims", lambda m, x, s: m.diagonal_scatter(x, s, -1, 1, 2), (randn(2, 3, 3), randn(2, 2))),
    Case("trapezoid", lambda m, y: m.trapezoid(y), (randn(3, 5),)),
    Case("trapezoid_x", lambda m, y, x: m.trapezoid(y, x, dim=0), (randn(4, 2), randn(4))),
    Case("trapz_dx", lambda m, y: m.trapz(y, dx=0.5), (randn(5),)),
    Case("cumulative_trapezoid", lambda m, y: m.cumulative_trapezoid(y, dx=2.0), (randn(2, 5),)),
    Case("renorm", lambda m, x: m.renorm(x, 2, 0, 1.5), (randn(4, 3),), rtol=1e-4, atol=1e-5),
    Case("renorm_method_p1", lambda m, x: x.renorm(1, 1, 2.0), (randn(3, 4),), rtol=1e-4, atol=1e-5),
    Case("bitwise_shifts", lambda m, a, b: (m.bitwise_left_shift(a, b), m.bitwise_right_shift(a, b)),
         (ints(8, low=-50, high=50), ints(8, high=5)), grad=False),
    Case("angle", lambda m, x: m.angle(x), (randn(8),), grad=False),
    Case("conj_real_resolve", lambda m, x: (m.conj(x), m.resolve_conj(x), m.resolve_neg(x), m.real(x)), (randn(3),)),
    Case("nonzero_static", lambda m, x: m.nonzero_static(x, size=6), (bools(3, 3),), grad=False, traceable=False),
    Case("put", lambda m, x, v: m.put(x, m.tensor([0, 4, -1]), v), (randn(2, 3), randn(3))),
    Case("put_accumulate", lambda m, x, v: m.put(x, m.tensor([1, 1, 2]), v, accumulate=True), (randn(4), randn(3))),
    Case("put_", lambda m, x, v: (x * 1).put_(m.tensor([0, 2]), v), (randn(3), randn(2))),
    Case("sum_to_size", lambda m, x: x.sum_to_size(3, 1), (randn(2, 3, 4),)),
    Case("unfold", lambda m, x: x.unfold(1, 3, 2), (randn(2, 7),)),
    Case("unfold_dim0_step1", lambda m, x: x.unfold(0, 2, 1) * 2, (randn(4, 3),)),
    Case("fill_diagonal_", lambda m, x: (x * 1).fill_diagonal_(3.0), (randn(4, 3),)),
    Case("fill_diagonal_wrap", lambda m, x: (x * 1).fill_diagonal_(-1.0, wrap=True), (randn(7, 3),)),
    Case("fill_diagonal_cube", lambda m, x: (x * 1).fill_diagonal_(2.0), (randn(3, 3, 3),)),
    Case("tensor_where", lambda m, c, a, b: a.where(c, b), (bools(5), randn(5), randn(5))),
    Case("aliases", lambda m, x, y: (m.arccos(x), m.arcsinh(y), m.arctan2(x, y), m.absolute(y), m.negative(y),
                                     m.multiply(x, y), m.subtract(x, y, alpha=2), m.divide(x, y, rounding_mode="floor"),
                                     m.true_divide(x, y), m.clip(y, -0.5, 0.5)), (uniform(6, low=-0.9, high=0.9),
                                                                                  positive(6))),
    Case("alias_methods", lambda m, x: (x.arcsin(), x.arctanh(), x.arctan()),
         (uniform(5, low=-0.9, high=0.9),)),
    Case("inplace_twins", lambda m, x, y: [getattr(x * 1, n + "_")() for n in
                                           ("acos", "asin", "atan", "cosh", "sinh", "erfc", "exp2", "log10",
                                            "log2", "deg2rad", "rad2deg", "sinc", "square", "frac", "trunc",
                                            "sgn", "fix", "arccos", "negative", "absolute")] +
         [getattr(x * 1, n + "_")(y) for n in ("hypot", "copysign", "fmod", "remainder", "xlogy",
                                                "multiply", "subtract", "divide", "arctan2")],
         (uniform(6, low=0.1, high=0.9), positive(6))),
    Case("compare_inplace", lambda m, x, y: [getattr(x * 1, n + "_")(y) for n in
                                             ("eq", "ne", "lt", "le", "gt", "ge", "greater", "less",
                                              "greater_equal", "less_equal", "not_equal")],
         (randn(6), randn(6)), grad=False),
    Case("logical_bitwise_inplace", lambda m, a, b: [getattr(a.clone(), n + "_")(b) for n in
                                                     ("logical_and", "logical_or", "logical_xor", "bitwise_and",
                                                      "bitwise_or", "bitwise_xor")] + [a.clone().bitwise_not_()],
         (ints(6, high=8), ints(6, high=8)), grad=False),
    Case("clamp_min_max_inplace", lambda m, x: ((x * 1).clamp_min_(0.1), (x * 1).clamp_max_(-0.1)), (randn(6),)),
    Case("heaviside_", lambda m, x, y: (x * 1).heaviside_(y), (randn(6), randn(6)), grad=False,
         reason="PyTorch has no derivative for heaviside_"),
    Case("gcd_lcm", lambda m, a, b: (m.gcd(a, b), m.lcm(a, b), a.gcd(b)), (ints(30, low=-60, high=60),
                                                                           ints(30, low=-60, high=60)), grad=False),
    Case("gcd_int32_broadcast", lambda m, a, b: m.gcd(a, b), (ints(3, 1, low=0, high=1000, dtype=np.int32),
                                                             ints(4, low=0, high=1000, dtype=np.int32)), grad=False),
    Case("gcd_inplace", lambda m, a, b: a.clone().gcd_(b), (ints(5, high=50), ints(5, high=50)), grad=False),
    Case("frexp", lambda m, x: m.frexp(x * 1e3), (randn(20),), grad=False),
    Case("frexp_specials", lambda m: m.frexp(m.tensor([0.0, float("inf"), float("nan"), 1024.0, 0.5, -0.25])),
         (), grad=False),
    Case("histogram", lambda m, x: m.histogram(x, bins=6), (randn(40),), grad=False, traceable=False),
    Case("histogram_range_weight_density", lambda m, x, w: m.histogram(x, bins=4, range=(-1.0, 1.0), weight=w,
                                                                       density=True), (randn(30), positive(30)),
         grad=False),
    Case("histogram_edges", lambda m, x: m.histogram(x, bins=m.tensor([-2.0, -0.5, 0.0, 0.7, 2.0])), (randn(30),),
         grad=False),
    Case("float_power_float64", lambda m, x: (x * 1).float_power_(2.5), (positive(5, dtype=np.float64),)),
    Case("det", lambda m, a: m.det(a), (_well_conditioned(4, 4),), rtol=1e-4, atol=1e-4),
    Case("det_batched_pivoting", lambda m, a: a.det(), (randn(3, 3, 3),), rtol=1e-4, atol=1e-4),
    Case("slogdet", lambda m, a: m.slogdet(a), (randn(2, 4, 4),), rtol=1e-4, atol=1e-4),
    Case("logdet", lambda m, a: m.logdet(a), (_spd(3, 3),), rtol=1e-4, atol=1e-4),
    Case("inverse", lambda m, a: m.inverse(a), (_well_conditioned(2, 4, 4),), rtol=1e-4, atol=1e-5),
    Case("inverse_float64_second_order", lambda m, a: a.inverse().sum(-1), (_well_conditioned(3, 3, dtype=np.float64),),
         second_order=True),
    Case("cholesky", lambda m, a: m.cholesky(a), (_spd(2, 4, 4),), rtol=1e-4, atol=1e-4),
    Case("cholesky_upper", lambda m, a: a.cholesky(upper=True), (_spd(3, 3),), rtol=1e-4, atol=1e-4),
    Case("cholesky_solve", lambda m, b, l: m.cholesky_solve(b, l), (randn(2, 3, 2), _lower(2, 3, 3)),
         rtol=1e-4, atol=1e-4),
    Case("cholesky_solve_upper", lambda m, b, l: m.cholesky_solve(b, l.mT, upper=True), (randn(3, 1), _lower(3, 3)),
         rtol=1e-4, atol=1e-4),
    Case("cholesky_inverse", lambda m, l: m.cholesky_inverse(l), (_lower(4, 4),), rtol=1e-4, atol=1e-4),
    Case("lgamma", lambda m, x: m.lgamma(x), (uniform(40, low=-4.5, high=9.0),), second_order=True,
         rtol=1e-4, atol=1e-5),
    Case("lgamma_float64", lambda m, x: x.lgamma(), (uniform(30, low=-3.3, high=40.0, dtype=np.float64),),
         rtol=1e-10, atol=1e-10),
    Case("digamma", lambda m, x: m.digamma(x), (uniform(40, low=-4.5, high=9.0),), rtol=1e-4, atol=1e-4),
    Case("digamma_float64", lambda m, x: x.digamma(), (uniform(30, low=0.1, high=50.0, dtype=np.float64),),
         rtol=1e-9, atol=1e-9),
    Case("polygamma", lambda m, x: (m.polygamma(1, x), m.polygamma(3, x)), (positive(10, low=0.2, high=8.0),),
         grad=False, rtol=1e-4, atol=1e-4),
    Case("polygamma_method", lambda m, x: (x.polygamma(2), x.clone().polygamma_(1), x.real * 1),
         (positive(6, low=0.5, high=5.0),), grad=False, rtol=1e-4, atol=1e-4),
    Case("mvlgamma", lambda m, x: m.mvlgamma(x, 3), (positive(8, low=1.2, high=6.0),), rtol=1e-4, atol=1e-5),
    Case("erfinv", lambda m, x: m.erfinv(x), (uniform(40, low=-0.999, high=0.999),), rtol=1e-4, atol=1e-5),
    Case("erfinv_float64_edges", lambda m: m.erfinv(m.tensor([-1.0, 1.0, 1.5, 0.0, 0.9999999], dtype=m.float64)),
         (), grad=False),
    Case("i0", lambda m, x: m.i0(x), (uniform(40, low=-30.0, high=30.0, dtype=np.float64),), rtol=1e-10),
    Case("i0_float32", lambda m, x: x.i0(), (uniform(20, low=-5.0, high=5.0),)),
    Case("special_inplace", lambda m, x: ((x * 1).lgamma_(), (x * 1).digamma_(), (x * 0.1).erfinv_(),
                                          (x * 1).i0_()), (positive(6, low=0.5, high=3.0),), rtol=1e-4, atol=1e-5),
    Case("lerp_inplace", lambda m, a, b: (a * 1).lerp_(b, 0.3), (randn(5), randn(5))),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_parity(case, mode):
    run_case(case, mode)


def test_allclose_and_isclose_errors():
    a = loom.tensor([1.0, 2.0])
    assert loom.allclose(a, a + 1e-9) and not loom.allclose(a, a + 1e-3)
    assert loom.ones(2).allclose(loom.ones(2))
    with pytest.raises(loom.DTypeError, match="same dtype"):
        loom.isclose(a, loom.tensor([1, 2]))
    with pytest.raises(loom.LoomValueError, match="non-negative"):
        loom.isclose(a, a, rtol=-1)


def test_bincount_and_histc_errors():
    with pytest.raises(loom.LoomValueError, match="non-negative"):
        loom.bincount(loom.tensor([1, -1]))
    with pytest.raises(loom.LoomValueError, match="1-d integer"):
        loom.bincount(loom.ones(3))
    with pytest.raises(loom.DTypeError, match="floating point"):
        loom.histc(loom.tensor([1, 2]))
    assert loom.histc(loom.tensor([2.0, 2.0]), bins=2).tolist() == [0.0, 2.0]


def test_linalg_errors_name_the_problem():
    with pytest.raises(loom.LoomValueError, match="singular"):
        loom.inverse(loom.tensor([[1.0, 2.0], [2.0, 4.0]]) * 0).tolist()
    with pytest.raises(loom.LoomValueError, match="not positive-definite"):
        loom.cholesky(-loom.eye(2)).tolist()
    with pytest.raises(loom.ShapeError, match="square"):
        loom.det(loom.ones(2, 3))


def test_float_power_inplace_needs_float64():
    with pytest.raises(loom.DTypeError, match="requires dtype float64"):
        loom.ones(2).float_power_(2)


def test_polygamma_rejects_non_positive_input():
    with pytest.raises(loom.LoomValueError, match="x > 0"):
        loom.polygamma(1, loom.tensor([-0.5, 1.0])).tolist()
    with pytest.raises(loom.LoomValueError, match="non-negative int"):
        loom.polygamma(-1, loom.ones(1))


def test_python_callable_methods():
    x = loom.tensor([1.0, 2.0, 3.0])
    assert x.apply_(lambda v: v * 10).tolist() == [10.0, 20.0, 30.0]
    assert x.map_(loom.tensor([1.0, 1.0, 2.0]), lambda a, b: a - b).tolist() == [9.0, 19.0, 28.0]
    with pytest.raises(loom.LoomError, match="requires grad"):
        loom.ones(2, requires_grad=True).apply_(abs)


def test_as_subclass_and_unfold_view():
    class Mine(loom.Tensor):
        pass
    x = loom.arange(6.0)
    y = x.as_subclass(Mine)
    assert type(y) is Mine and y.tolist() == x.tolist()
    w = x.unfold(0, 2, 2)
    x.add_(1)
    assert w.tolist() == [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
    with pytest.raises(loom.ShapeError, match="maximum size"):
        x.unfold(0, 7, 1)
    np.testing.assert_array_equal(loom.tril_indices(3, 3).numpy(), np.stack(np.tril_indices(3)))
