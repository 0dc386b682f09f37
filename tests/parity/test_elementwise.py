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


@pytest.mark.parametrize("case", CASES, ids=str)
def test_parity(case, mode):
    run_case(case, mode)
