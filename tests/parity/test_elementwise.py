"""Parity of elementwise ops, broadcasting and promotion."""
import numpy as np
import pytest

from tests.parity.harness import Case, bools, ints, positive, randn, run_case, uniform

U = ["exp", "log1p", "expm1", "sin", "cos", "tanh", "sigmoid", "relu", "abs", "sign", "floor", "ceil",
     "round", "erf", "neg", "square", "reciprocal", "trunc", "frac"]

CASES = []
for name in U:
    inp = positive(3, 4) if name in ("log1p", "reciprocal") else randn(3, 4)
    CASES.append(Case(f"{name}", lambda m, x, n=name: getattr(m, n)(x), (inp,), second_order=True))
for name in ("log", "sqrt", "rsqrt"):
    CASES.append(Case(name, lambda m, x, n=name: getattr(m, n)(x), (positive(2, 5),), second_order=True))
CASES += [
    Case("tan", lambda m, x: m.tan(x), (uniform(4, 3, low=-1.2, high=1.2),), second_order=True),
    Case("add_broadcast", lambda m, a, b: a + b, (randn(2, 3, 1), randn(4)), second_order=True),
    Case("sub_scalar", lambda m, a: 2.5 - a, (randn(3, 2),)),
    Case("mul_broadcast_rows", lambda m, a, b: a * b, (randn(5, 1), randn(1, 6)), second_order=True),
    Case("div", lambda m, a, b: a / b, (randn(3, 4), positive(3, 4)), second_order=True),
    Case("div_int_int", lambda m, a, b: a / b, (ints(3, 4), ints(3, 4, low=1))),
    Case("floordiv_int", lambda m, a, b: a // b, (ints(6, low=-9, high=9), ints(6, low=1, high=4))),
    Case("remainder_float", lambda m, a, b: m.remainder(a, b), (randn(5), positive(5))),
    Case("pow_tensor", lambda m, a, b: a ** b, (positive(3, 3), randn(3, 3)), second_order=True),
    Case("pow_scalar", lambda m, a: a ** 3, (randn(4),), second_order=True),
    Case("rpow", lambda m, a: 2.0 ** a, (randn(4),), second_order=True),
    Case("maximum", lambda m, a, b: m.maximum(a, b), (randn(3, 4), randn(3, 4))),
    Case("minimum_bcast", lambda m, a, b: m.minimum(a, b), (randn(3, 4), randn(4))),
    Case("where", lambda m, c, a, b: m.where(c, a, b), (bools(3, 4), randn(3, 4), randn(1, 4))),
    Case("where_scalar", lambda m, c, a: m.where(c, a, 0.0), (bools(5), randn(5))),
    Case("clamp", lambda m, a: m.clamp(a, -0.5, 0.5), (randn(4, 4),)),
    Case("clamp_min_tensor", lambda m, a, b: a.clamp(min=b), (randn(4, 4), randn(4, 4))),
    Case("lerp", lambda m, a, b: m.lerp(a, b, 0.3), (randn(3), randn(3)), second_order=True),
    Case("int_plus_float_scalar", lambda m, a: a + 1.5, (ints(4),)),
    Case("int32_plus_int64", lambda m, a, b: a + b, (ints(3, dtype=np.int32), ints(3))),
    Case("uint8_plus_int8", lambda m, a, b: a + b, (ints(3, dtype=np.uint8), ints(3, dtype=np.int8))),
    Case("float64_plus_float32", lambda m, a, b: a + b, (randn(3, dtype=np.float64), randn(3))),
    Case("zero_dim_promotion", lambda m, a, b: a * b, (randn(3, dtype=np.float32), randn(dtype=np.float64))),
    Case("compare_lt", lambda m, a, b: a < b, (randn(3, 4), randn(4))),
    Case("compare_eq_int", lambda m, a: a == 3, (ints(10),)),
    Case("logical_and", lambda m, a, b: m.logical_and(a, b), (bools(6), bools(6))),
    Case("bitwise_xor", lambda m, a, b: a ^ b, (ints(6), ints(6))),
    Case("invert_bool", lambda m, a: ~a, (bools(7),)),
    Case("isnan", lambda m, a: m.isnan(a / a), (randn(5),), grad=False),
    Case("non_contiguous_t", lambda m, a: (a.t() * 2).exp(), (randn(3, 5),)),
    Case("zero_size", lambda m, a: (a * 2).exp(), (randn(0, 3),)),
    Case("float16_add", lambda m, a, b: a + b, (randn(4, dtype=np.float16), randn(4, dtype=np.float16)),
         grad=False),
    Case("bfloat16_cast_roundtrip", lambda m, a: a.to(m.bfloat16).to(m.float32) * 2, (randn(6),)),
    Case("cast_float_to_int", lambda m, a: (a * 10).to(m.int32), (randn(8),)),
    Case("softplus", lambda m, a: m.nn.functional.softplus(a), (randn(10) ,), second_order=True),
    Case("gelu", lambda m, a: m.nn.functional.gelu(a), (randn(10),), second_order=True),
    Case("gelu_tanh", lambda m, a: m.nn.functional.gelu(a, approximate="tanh"), (randn(10),), second_order=True),
    Case("silu", lambda m, a: m.nn.functional.silu(a), (randn(10),), second_order=True),
    Case("elu", lambda m, a: m.nn.functional.elu(a), (randn(10),)),
    Case("leaky_relu", lambda m, a: m.nn.functional.leaky_relu(a, 0.2), (randn(10),)),
]



def specials(dtype=np.float32):
    """Zeros of both signs, infinities, NaN, values at and near the integers, and ordinary values."""
    vals = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, 7.0, -7.0, 1e-30, -3.7, 88.0]
    return lambda rng: np.array(vals, dtype=dtype)


def divisors(dtype=np.float32):
    vals = [2.0, -2.0, 3.0, -3.0, np.inf, 1.0, np.nan, 0.0, -0.0, 0.75, -0.75, 2.0, -2.0, 2.0, 5.0, 2.0, -1.5]
    return lambda rng: np.array(vals, dtype=dtype)


def unit(*shape, dtype=np.float32):
    """Inside (-1, 1), away from the ends where asin/atanh gradients blow up."""
    return uniform(*shape, low=-0.9, high=0.9, dtype=dtype)


def above_one(*shape, dtype=np.float32):
    return uniform(*shape, low=1.1, high=4.0, dtype=dtype)


def fn(name, *args, **kw):
    """Body calling `lib.<name>(x, ...)`: the same call in torch and in loom."""
    return lambda m, *xs: getattr(m, name)(*xs, *args, **kw)


def method(name, *args, **kw):
    return lambda m, x, *xs: getattr(x, name)(*xs, *args, **kw)


def inplace(name, *args, **kw):
    """In-place method on a clone, so gradients reach the leaf inputs."""
    return lambda m, x, *xs: getattr(x.clone(), name + "_")(*xs, *args, **kw)


I64, I32, U8, F64, F16 = np.int64, np.int32, np.uint8, np.float64, np.float16
INT_A = lambda rng: np.array([7, -7, 7, -7, 0, 5, -5, 1, -1, 9, 3, -8])  # noqa: E731
INT_B = lambda rng: np.array([3, 3, -3, -3, 2, -2, 2, 4, 4, -4, 1, 3])  # noqa: E731

CASES += [
    # Every unary function of math.py, first and second order.
    Case("log2", fn("log2"), (positive(3, 4),), second_order=True),
    Case("log10", fn("log10"), (positive(3, 4),), second_order=True),
    Case("exp2", fn("exp2"), (randn(3, 4),), second_order=True),
    Case("erfc", fn("erfc"), (randn(3, 4),), second_order=True),
    Case("negative", fn("negative"), (randn(5),)),
    Case("absolute", fn("absolute"), (randn(5),)),
    Case("atan", fn("atan"), (randn(4, 3),), second_order=True),
    Case("asin", fn("asin"), (unit(4, 3),), second_order=True),
    Case("acos", fn("acos"), (unit(4, 3),), second_order=True),
    Case("atanh", fn("atanh"), (unit(4, 3),), second_order=True),
    Case("sinh", fn("sinh"), (randn(4, 3),), second_order=True),
    Case("cosh", fn("cosh"), (randn(4, 3),), second_order=True),
    Case("asinh", fn("asinh"), (randn(4, 3),), second_order=True),
    Case("asinh_wide_range", fn("asinh"), (lambda rng: np.array([0.0, -0.0, 1e-8, -1e-8, 0.3, 1.0, -1.0, 3.0,
                                                                  1e5, -1e30, 3e38], np.float32),)),
    Case("acosh", fn("acosh"), (above_one(4, 3),), second_order=True),
    Case("acosh_wide_range", fn("acosh"), (lambda rng: np.array([1.0, 1.0 + 1e-6, 1.5, 10.0, 1e20, 3e38,
                                                                  0.5, -3.0], np.float32),), grad=False),
    Case("atanh_near_zero", fn("atanh"), (lambda rng: np.array([0.0, -0.0, 1e-8, -1e-6, 0.5, -0.99, 1.0,
                                                                 -1.0, 2.0], np.float32),), grad=False),
    Case("asin_edges", fn("asin"), (lambda rng: np.array([0.0, -0.0, 1e-8, 0.999999, -1.0, 1.0, 1.5],
                                                          np.float32),), grad=False),
    Case("acos_edges", fn("acos"), (lambda rng: np.array([0.0, 1e-8, 0.999999, -1.0, 1.0, -1.5], np.float32),),
         grad=False),
    Case("sinc", fn("sinc"), (randn(4, 3),), second_order=True),
    Case("sinc_at_zero", fn("sinc"), (lambda rng: np.array([0.0, 1.0, -2.0, 0.5], np.float32),)),
    Case("deg2rad", fn("deg2rad"), (randn(5),)),
    Case("rad2deg", fn("rad2deg"), (randn(5),)),
    Case("deg2rad_int", fn("deg2rad"), (ints(5),)),
    Case("sigmoid_method", method("sigmoid"), (randn(3, 2),), second_order=True),
    Case("float_power", fn("float_power", 2.5), (positive(4),), second_order=True),
    Case("float_power_tensor", fn("float_power"), (positive(4), randn(4))),
    Case("round_decimals", fn("round", decimals=2), (randn(6, dtype=F64),)),
    Case("round_negative_decimals", fn("round", decimals=-1), (lambda rng: rng.uniform(-500, 500, 8),)),
    Case("round_half_even", fn("round"), (lambda rng: np.array([0.5, 1.5, 2.5, -0.5, -1.5, 3.49], np.float32),)),
    Case("frac_negative", fn("frac"), (randn(6),)),
    Case("exp2_int", fn("exp2"), (ints(5),)),
    Case("sqrt_int_promotes", fn("sqrt"), (ints(5),)),
    Case("square_bool", fn("square"), (bools(5),)),
    Case("square_int", fn("square"), (ints(5, low=-5),)),
    Case("abs_int8", fn("abs"), (ints(6, low=-9, dtype=np.int8),)),
    Case("sign_int", fn("sign"), (ints(6, low=-3, high=3),)),
    Case("sign_bool", fn("sign"), (bools(6),)),
    Case("floor_int_passthrough", fn("floor"), (ints(5),)),
    Case("relu_int", fn("relu"), (ints(5, low=-5),)),
    Case("neg_uint8_wraps", lambda m, x: -x, (ints(5, dtype=U8),)),
    # Special values (no gradients: the derivative at +-0 or inf is a convention).
    *[Case(f"{name}_specials", fn(name), (specials(),), grad=False)
      for name in ["exp", "expm1", "log", "log1p", "sqrt", "sin", "cos", "tanh", "sigmoid", "erf", "erfc", "floor",
                   "ceil", "trunc", "round", "frac", "abs", "sign", "neg", "reciprocal", "rsqrt", "square",
                   "atan", "sinh", "cosh", "asinh", "sinc", "relu", "signbit", "isnan", "isinf", "isfinite",
                   "isposinf", "isneginf", "nan_to_num", "exp2", "log2", "log10"]],
    Case("nan_to_num_args", fn("nan_to_num", nan=1.5, posinf=100.0, neginf=-100.0), (specials(),), grad=False),
    Case("nan_to_num_float64", fn("nan_to_num"), (specials(F64),), grad=False),
    Case("nan_to_num_float16", fn("nan_to_num"), (specials(F16),), grad=False),
    Case("nan_to_num_bfloat16", lambda m, x: m.nan_to_num(x.to(m.bfloat16)).float(), (specials(),), grad=False),
    Case("nan_to_num_grad", fn("nan_to_num"), (randn(5),)),
    Case("isnan_int", fn("isnan"), (ints(4),)),
    Case("isinf_int", fn("isinf"), (ints(4),)),
    Case("isfinite_int", fn("isfinite"), (ints(4),)),
    Case("signbit_int", fn("signbit"), (ints(6, low=-3, high=3),)),
    Case("signbit_float64", fn("signbit"), (specials(F64),)),
    # Binary arithmetic: names and aliases.
    Case("add_alpha", fn("add", alpha=2.5), (randn(3, 4), randn(4)), second_order=True),
    Case("add_alpha_int", fn("add", alpha=3), (ints(4), ints(4))),
    Case("sub_alpha", fn("sub", alpha=0.5), (randn(3, 4), randn(3, 1))),
    Case("subtract", fn("subtract"), (randn(3), randn(3))),
    Case("multiply", fn("multiply"), (randn(3), randn(2, 3))),
    Case("divide", fn("divide"), (randn(3), positive(3))),
    Case("true_divide_int", fn("true_divide"), (ints(4), ints(4, low=1))),
    Case("div_floor_float", fn("div", rounding_mode="floor"), (specials(), divisors()), grad=False),
    Case("div_trunc_float", fn("div", rounding_mode="trunc"), (specials(), divisors()), grad=False),
    Case("div_floor_int", fn("div", rounding_mode="floor"), (INT_A, INT_B)),
    Case("div_trunc_int", fn("div", rounding_mode="trunc"), (INT_A, INT_B)),
    Case("div_trunc_int32_scalar", fn("div", -2, rounding_mode="trunc"), (ints(6, low=-9, dtype=I32),)),
    Case("div_floor_grad", fn("div", rounding_mode="floor"), (randn(4), positive(4))),
    Case("floor_divide_negative_int", fn("floor_divide"), (INT_A, INT_B)),
    Case("floor_divide_by_negative_scalar", lambda m, a: a // -3, (ints(8, low=-9, high=9),)),
    Case("floor_divide_float", fn("floor_divide"), (specials(), divisors()), grad=False),
    Case("remainder_negative_int", fn("remainder"), (INT_A, INT_B)),
    Case("remainder_negative_scalar", lambda m, a: a % -3, (ints(8, low=-9, high=9),)),
    Case("remainder_rscalar", lambda m, b: 5 % b, (INT_B,)),
    Case("remainder_float_signs", fn("remainder"), (specials(), divisors()), grad=False),
    Case("remainder_float_grad", fn("remainder"), (randn(6), lambda rng: np.array([1.5, -2.0, 0.7, -0.3, 3.0, 2.5],
                                                                                 np.float32))),
    Case("remainder_float64", fn("remainder"), (randn(6, dtype=F64), positive(6, dtype=F64))),
    Case("fmod_int", fn("fmod"), (INT_A, INT_B)),
    Case("fmod_uint8", fn("fmod"), (ints(6, dtype=U8), ints(6, low=1, dtype=U8))),
    Case("fmod_float_signs", fn("fmod"), (specials(), divisors()), grad=False),
    Case("fmod_float64_signs", fn("fmod"), (specials(F64), divisors(F64)), grad=False),
    Case("fmod_scalar", fn("fmod", -2.5), (randn(6),)),
    Case("fmod_int_float_scalar", fn("fmod", 2.5), (ints(6, low=-9),)),
    Case("fmod_grad", fn("fmod"), (randn(6), lambda rng: np.array([1.5, -2.0, 0.7, -0.3, 3.0, 2.5], np.float32))),
    Case("fmod_large_exact", fn("fmod"), (lambda rng: np.array([1e10, -1e10, 123456.789], F64),
                                           lambda rng: np.array([3.3, 3.3, -0.1], F64)), grad=False),
    Case("pow_int_tensor", fn("pow"), (ints(5, low=-3, high=4), ints(5, low=0, high=4))),
    Case("pow_int_scalar_float", fn("pow", 0.5), (ints(5, low=1),)),
    Case("pow_specials", fn("pow"), (specials(), divisors()), grad=False),
    Case("pow_zero_base_grad", fn("pow"), (lambda rng: np.array([0.0, 0.0, 2.0], np.float32),
                                           lambda rng: np.array([2.0, 3.0, 0.0], np.float32))),
    Case("atan2_grad", fn("atan2"), (randn(3, 4), randn(4)), second_order=True),
    Case("arctan2", fn("arctan2"), (randn(3), randn(3))),
    Case("atan2_int_promotes", fn("atan2"), (ints(4), ints(4, low=1))),
    Case("atan2_specials", fn("atan2"), (specials(), divisors()), grad=False),
    Case("maximum_nan", fn("maximum"), (specials(), divisors()), grad=False),
    Case("minimum_nan", fn("minimum"), (specials(), divisors()), grad=False),
    Case("fmax_ignores_nan", fn("fmax"), (specials(), divisors()), grad=False),
    Case("fmin_ignores_nan", fn("fmin"), (specials(), divisors()), grad=False),
    Case("fmax_grad", fn("fmax"), (randn(5), randn(5))),
    Case("maximum_int_float", fn("maximum"), (ints(4), randn(4))),
    Case("hypot", fn("hypot"), (randn(3, 4), randn(4)), second_order=True),
    Case("hypot_int_and_float", fn("hypot"), (ints(4), randn(4)), grad=False),
    Case("xlogy", fn("xlogy"), (randn(5), positive(5)), second_order=True),
    Case("xlogy_zero_x", fn("xlogy"), (lambda rng: np.array([0.0, 0.0, 1.0, 2.0], np.float32),
                                       lambda rng: np.array([0.0, np.nan, 0.0, 3.0], np.float32)), grad=False),
    Case("xlogy_scalar_y_float64", fn("xlogy", 2.0), (randn(4, dtype=F64),)),
    Case("xlogy_scalar_x", lambda m, y: m.xlogy(2, y), (positive(4),)),
    Case("copysign", fn("copysign"), (randn(5), randn(5))),
    Case("copysign_signed_zero", fn("copysign"), (specials(), lambda rng: np.array(
        [-0.0, 0.0, 1.0, -1.0, -0.0, 0.0, -0.0, 2.0, -2.0, 1.0, -1.0, 0.0, -0.0, 3.0, -3.0, 1.0, -1.0],
        np.float32)), grad=False),
    Case("copysign_scalar_negzero", fn("copysign", -0.0), (randn(5),)),
    Case("copysign_int", fn("copysign"), (ints(4), ints(4, low=-5, high=5))),
    Case("heaviside", fn("heaviside"), (lambda rng: np.array([-1.0, 0.0, 2.0, 0.0], np.float32),
                                        lambda rng: np.array([0.5, 0.25, 0.5, 0.75], np.float32)), grad=False),
    Case("heaviside_int", fn("heaviside"), (ints(6, low=-2, high=3), ints(6))),
    Case("clip", fn("clip", -0.5, 0.5), (randn(4, 4),)),
    Case("clamp_min_only", fn("clamp", min=0.1), (randn(6),)),
    Case("clamp_max_only", fn("clamp", max=0.1), (randn(6),)),
    Case("clamp_min_fn", fn("clamp_min", 0.2), (randn(6),)),
    Case("clamp_max_fn", fn("clamp_max", 0.2), (randn(6),)),
    Case("clamp_tensors", lambda m, x, lo, hi: m.clamp(x, lo, hi), (randn(3, 4), uniform(4, low=-1, high=-0.1),
                                                                     uniform(3, 1, low=0.1, high=1))),
    Case("clamp_tensor_max", lambda m, x, hi: x.clamp(max=hi), (randn(3, 4), randn(4))),
    Case("clamp_int_float_bound", fn("clamp", 0.5, 4.5), (ints(6),)),
    Case("clamp_int", fn("clamp", 2, 6), (ints(8),)),
    Case("clamp_nan", fn("clamp", -1.0, 1.0), (specials(),), grad=False),
    Case("lerp_tensor_weight", lambda m, a, b, w: m.lerp(a, b, w), (randn(4), randn(4), uniform(4, low=0, high=1)),
         second_order=True),
    Case("lerp_weight_above_half", fn("lerp", weight=0.9), (randn(6), randn(6))),
    Case("lerp_broadcast", lambda m, a, b: m.lerp(a, b, 0.25), (randn(3, 1), randn(4))),
    Case("lerp_infinite", lambda m, a, b: m.lerp(a, b, 0.75), (specials(), divisors()), grad=False),
    Case("addcmul", fn("addcmul", value=0.5), (randn(3, 4), randn(4), randn(3, 1)), second_order=True),
    Case("addcdiv", fn("addcdiv", value=2.0), (randn(3, 4), randn(4), positive(3, 1)), second_order=True),
    Case("addcmul_int", fn("addcmul", value=2), (ints(4), ints(4), ints(4))),
    # Comparisons, every name.
    *[Case(f"compare_{name}", fn(name), (specials(), divisors()), grad=False)
      for name in ["eq", "ne", "lt", "le", "gt", "ge", "greater", "greater_equal", "less", "less_equal", "not_equal"]],
    Case("compare_int_float_scalar", lambda m, a: a < 2.5, (ints(6),)),
    Case("compare_uint8_negative_scalar", lambda m, a: a > -1, (ints(6, dtype=U8),)),
    Case("compare_bool_int", fn("eq"), (bools(4), ints(4, high=2))),
    Case("equal_true", lambda m, a: m.equal(a, a * 1), (randn(3),), traceable=False),
    Case("equal_false", lambda m, a, b: m.equal(a, b), (randn(3), randn(3)), traceable=False),
    Case("equal_shapes_differ", lambda m, a, b: m.equal(a, b), (randn(3), randn(1, 3))),
    # Logical and bitwise.
    Case("logical_not_float", fn("logical_not"), (specials(),), grad=False),
    Case("logical_and_int_float", fn("logical_and"), (ints(5, high=3), randn(5)), grad=False),
    Case("logical_or", fn("logical_or"), (bools(6), bools(6))),
    Case("logical_xor_int", fn("logical_xor"), (ints(6, high=3), ints(6, high=2))),
    Case("bitwise_not_int", fn("bitwise_not"), (ints(6, low=-5),)),
    Case("bitwise_not_uint8", fn("bitwise_not"), (ints(6, dtype=U8),)),
    Case("bitwise_and", fn("bitwise_and"), (ints(6, low=-9), ints(6))),
    Case("bitwise_or_scalar", fn("bitwise_or", 6), (ints(6),)),
    Case("bitwise_xor_bool", fn("bitwise_xor"), (bools(6), bools(6))),
    Case("bitwise_and_int_bool", lambda m, a, b: a & b, (ints(6), bools(6))),
    # In-place twins, through clone so gradients reach the inputs.
    Case("add_inplace", inplace("add", alpha=2.0), (randn(3, 4), randn(4))),
    Case("sub_inplace_scalar", inplace("sub", 1.5), (randn(3),)),
    Case("mul_inplace", inplace("mul"), (randn(3, 4), randn(3, 1))),
    Case("div_inplace", inplace("div"), (randn(3), positive(3))),
    Case("div_inplace_trunc", inplace("div", rounding_mode="trunc"), (randn(5) , positive(5)), grad=False),
    Case("exp_inplace", inplace("exp"), (randn(4),)),
    Case("sqrt_inplace", inplace("sqrt"), (positive(4),)),
    Case("clamp_inplace", inplace("clamp", -0.2, 0.3), (randn(6),)),
    Case("pow_inplace", inplace("pow", 3), (randn(4),)),
    Case("fmod_inplace", inplace("fmod", 0.7), (randn(6),)),
    Case("remainder_inplace_int", inplace("remainder", -3), (ints(6, low=-9),)),
    Case("floor_divide_inplace_int", inplace("floor_divide", -2), (ints(6, low=-9),)),
    Case("lerp_inplace", inplace("lerp", weight=0.7), (randn(4), randn(4))),
    Case("addcmul_inplace", inplace("addcmul", value=0.5), (randn(4), randn(4), randn(4))),
    Case("nan_to_num_inplace", inplace("nan_to_num"), (specials(),), grad=False),
    Case("copysign_inplace", inplace("copysign"), (randn(4), randn(4))),
    Case("hypot_inplace", inplace("hypot"), (randn(4), randn(4))),
    Case("xlogy_inplace", inplace("xlogy"), (positive(4), positive(4))),
    Case("atan2_inplace", inplace("atan2"), (randn(4), randn(4))),
    Case("logical_not_inplace", inplace("logical_not"), (bools(4),)),
    Case("iadd_int_by_float_refused_like_torch", lambda m, a: a.clone().add_(1), (ints(3),)),
    Case("logaddexp", fn("logaddexp"), (randn(3, 4), randn(4)), second_order=True),
    Case("logaddexp_large", fn("logaddexp"), (lambda rng: np.array([1000.0, -1000.0, 5.0, 2.0], np.float32),
                                               lambda rng: np.array([999.0, -1000.5, 5.0, -3.0], np.float32))),
    Case("logaddexp_infinities", fn("logaddexp"), (specials(), divisors()), grad=False),
    Case("logaddexp2", fn("logaddexp2"), (randn(5), randn(5)), second_order=True),
    Case("logaddexp_int_and_float", fn("logaddexp"), (ints(4), randn(4))),
    Case("logit", fn("logit"), (uniform(6, low=0.05, high=0.95),), second_order=True),
    Case("logit_eps", fn("logit", eps=0.1), (uniform(8, low=0.0, high=1.0),)),
    Case("sgn", fn("sgn"), (randn(5),)),
    Case("positive", fn("positive"), (randn(5),)),
    Case("fix", fn("fix"), (randn(5),)),
    # Non-negative exponents only: PyTorch's ldexp backward computes 2**other in integers (0 for other < 0).
    Case("ldexp", fn("ldexp"), (randn(4), ints(4, low=0, high=4))),
    Case("ldexp_negative_exponent", fn("ldexp"), (randn(4), ints(4, low=-3, high=0)), grad=False),
    Case("ldexp_int_base", fn("ldexp"), (ints(4), ints(4, high=4)), grad=False),
    Case("logit_inplace", inplace("logit"), (uniform(4, low=0.1, high=0.9),)),
    # Gradients at the kinks themselves follow PyTorch's conventions.
    *[Case(f"{name}_at_kinks", body, (lambda rng: np.array([0.0, -1.0, 1.0, 6.0, -3.0, 3.0, 0.5, -0.0],
                                                            np.float32),))
      for name, body in [("relu", fn("relu")), ("clamp", fn("clamp", 0.0, 1.0)),
                         ("hardtanh", lambda m, x: m.nn.functional.hardtanh(x)),
                         ("relu6", lambda m, x: m.nn.functional.relu6(x)),
                         ("elu", lambda m, x: m.nn.functional.elu(x)),
                         ("celu", lambda m, x: m.nn.functional.celu(x, 2.0)),
                         ("hardsigmoid", lambda m, x: m.nn.functional.hardsigmoid(x)),
                         ("leaky_relu", lambda m, x: m.nn.functional.leaky_relu(x, 0.1)),
                         ("abs", fn("abs")), ("maximum_tie", lambda m, x: m.maximum(x, x.detach())),
                         ("clamp_tensor_bounds", lambda m, x: m.clamp(x, min=x.detach() * 0, max=x.detach() * 0 + 1)),
                         ("sigmoid", fn("sigmoid"))]],
    Case("clamp_min_above_max", fn("clamp", 1.0, 0.0), (randn(5),)),
    Case("sigmoid_tails", fn("sigmoid"), (lambda rng: np.array([-90.0, -30.0, -10.0, 0.0, 10.0, 30.0, 90.0],
                                                                np.float32),)),
    # Half precision arithmetic: computed in float32 and rounded once, as PyTorch's CPU kernels.
    *[Case(f"{name}_float16", fn(name), (uniform(4, 3, low=0.1, high=2.0, dtype=F16),), grad=False)
      for name in ["exp", "log", "sqrt", "sin", "tanh", "sigmoid", "reciprocal", "exp2", "asinh", "atan"]],
    *[Case(f"{name}_bfloat16", lambda m, x, n=name: getattr(m, n)(x.to(m.bfloat16)).float(),
           (uniform(4, 3, low=0.1, high=2.0),), grad=False)
      for name in ["exp", "log", "sqrt", "sin", "tanh", "sigmoid", "reciprocal", "erf"]],
    Case("mul_float16", lambda m, a, b: a * b - a / b, (randn(8, dtype=F16), positive(8, dtype=F16)), grad=False),
    Case("add_bfloat16", lambda m, a, b: (a.to(m.bfloat16) + b.to(m.bfloat16) * 3).float(), (randn(8), randn(8))),
    Case("float16_plus_bfloat16", lambda m, a, b: (a + b.to(m.bfloat16)).float(), (randn(5, dtype=F16), randn(5)),
         grad=False),
    Case("float16_grad", lambda m, a: (a * a).sum() * 0.5, (randn(6, dtype=F16),)),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_parity(case, mode):
    run_case(case, mode)


def test_every_math_function_has_a_case():
    from loom.functional import math as lmath
    names = " ".join(c.name for c in CASES)
    missing = [n for n in lmath.METHODS if n not in names]
    assert not missing, f"math.py functions without a parity case: {missing}"
