"""dtypes: storage, casts, bfloat16 rounding and PyTorch's type promotion."""
import itertools
import operator

import numpy as np
import pytest
import torch

import loom

NAMES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64"]
PAIRS = list(itertools.product(NAMES, NAMES))


def ld(name):
    return getattr(loom, name)


def td(name):
    return getattr(torch, name)


def make(lib, name, shape):
    """A tensor of dtype `name` and `shape` holding small positive values (valid in every dtype)."""
    values = np.array([3, 1, 2][: int(np.prod(shape))] if shape else 3).reshape(shape)
    t = torch.tensor(values) if lib is torch else loom.tensor(values)
    return t.to(td(name) if lib is torch else ld(name))


def name_of(dtype) -> str:
    return str(dtype).split(".")[-1]


def test_float32_is_the_default():
    assert loom.get_default_dtype() is loom.float32
    assert loom.tensor([1.5]).dtype is loom.float32 and loom.zeros(2).dtype is loom.float32
    assert loom.tensor(2).dtype is loom.int64 and loom.tensor(True).dtype is loom.bool


def test_dtype_objects():
    assert repr(loom.float32) == "loom.float32"
    assert loom.float is loom.float32 and loom.double is loom.float64 and loom.half is loom.float16
    assert loom.long is loom.int64 and loom.int is loom.int32 and loom.short is loom.int16
    assert loom.float16.is_floating_point and not loom.int8.is_floating_point
    assert [ld(n).itemsize for n in NAMES] == [1, 1, 1, 2, 4, 8, 2, 2, 4, 8]
    assert ld("bfloat16").is_signed and not loom.uint8.is_signed


@pytest.mark.parametrize("name", NAMES)
def test_storage_round_trip(name):
    values = [0, 1, 2, 3, 100] if name != "bool" else [True, False, True, True, False]
    t = loom.tensor(values, dtype=ld(name))
    assert t.dtype.name == name and t.element_size() == ld(name).itemsize
    assert t.tolist() == torch.tensor(values, dtype=td(name)).tolist()


@pytest.mark.parametrize("src,dst", PAIRS)
def test_casts_match_torch(src, dst):
    rng = np.random.default_rng(0)
    values = np.concatenate([rng.uniform(-100, 100, 40), [0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, 99.99, -99.99, 127.0]])
    if src in ("uint8", "bool") or dst == "uint8":
        values = np.abs(values)  # Negative floats to uint8 are undefined behaviour in C.
    t = torch.tensor(values, dtype=torch.float64).to(td(src)).to(td(dst))
    lt = loom.tensor(values, dtype=loom.float64).to(ld(src)).to(ld(dst))
    assert lt.dtype.name == dst
    np.testing.assert_array_equal(lt.to(loom.float64).numpy(), t.double().numpy())


def _bf16_bits_torch(x: np.ndarray) -> np.ndarray:
    return torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)


def test_bfloat16_rounding_is_bit_exact_with_torch():
    rng = np.random.default_rng(0)
    with np.errstate(all="ignore"):
        scaled = (rng.standard_normal(20000) * 10.0 ** rng.integers(-45, 39, 20000)).astype(np.float32)
    raw_bits = rng.integers(0, 2 ** 32, 20000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    edges = np.array([np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 1e-39, -1e-39, 1.17549435e-38, 3.4e38, -3.4e38,
                      3.3961776e38, 1.00390625, 1.01171875, 1.0078125, 65504.0], np.float32)
    x = np.concatenate([scaled, raw_bits, edges])
    got = loom.tensor(x).to(loom.bfloat16)._array()
    want = _bf16_bits_torch(x)
    nan = np.isnan(x)
    # Ties to even, subnormals and overflow to inf agree bit for bit.
    np.testing.assert_array_equal(got[~nan], want[~nan])
    # NaN stays NaN (PyTorch's own bit pattern depends on its kernel path: 0x7FC0 or 0xFFFF).
    assert np.isnan(loom.tensor(x[nan]).to(loom.bfloat16).float().numpy()).all()


def test_bfloat16_from_data_and_arithmetic_round_once():
    x = np.array([1.0, 1.00390625, 3.0, -7.7, 1e-3], np.float32)
    assert loom.tensor(x, dtype=loom.bfloat16).tolist() == torch.tensor(x, dtype=torch.bfloat16).tolist()
    a, b = loom.tensor(x).bfloat16(), loom.tensor(x[::-1].copy()).bfloat16()
    ta, tb = torch.tensor(x).bfloat16(), torch.tensor(x[::-1].copy()).bfloat16()
    for op in (operator.add, operator.mul, operator.truediv, operator.sub):
        assert op(a, b).tolist() == op(ta, tb).tolist()


def test_float16_rounding_matches_torch():
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.standard_normal(5000) * 10.0 ** rng.integers(-9, 6, 5000),
                        [65504.0, 65520.0, 1e-8, 6e-8, -0.0]]).astype(np.float32)
    got = loom.tensor(x).half().numpy()
    want = torch.tensor(x).half().numpy()
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


def test_half_precision_arithmetic_computes_in_float32():
    x = loom.tensor([2049.0], dtype=loom.float16)
    # 2049 is not a float16; the sum is computed in float32 and rounded once.
    assert (x + 1.0).tolist() == (torch.tensor([2049.0], dtype=torch.float16) + 1.0).tolist()


@pytest.mark.parametrize("a,b", PAIRS)
def test_promote_types_matches_torch(a, b):
    assert loom.promote_types(ld(a), ld(b)).name == name_of(torch.promote_types(td(a), td(b)))


@pytest.mark.parametrize("a,b", PAIRS)
@pytest.mark.parametrize("shapes", [((3,), (3,)), ((3,), ()), ((), (3,)), ((), ())], ids=str)
def test_tensor_tensor_promotion_matches_torch(a, b, shapes):
    sa, sb = shapes
    want = make(torch, a, sa) + make(torch, b, sb)
    got = make(loom, a, sa) + make(loom, b, sb)
    assert got.dtype.name == name_of(want.dtype)
    assert got.shape == tuple(want.shape)
    np.testing.assert_allclose(got.to(loom.float64).numpy(), want.double().numpy())


SCALARS = [True, 2, -2, 2.5, 300]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("scalar", SCALARS, ids=repr)
@pytest.mark.parametrize("op", ["add", "mul", "truediv", "lt", "eq"])
def test_tensor_scalar_promotion_matches_torch(name, scalar, op):
    f = getattr(operator, op)
    for shape in [(3,), ()]:
        for flip in (False, True):
            want = f(scalar, make(torch, name, shape)) if flip else f(make(torch, name, shape), scalar)
            got = f(scalar, make(loom, name, shape)) if flip else f(make(loom, name, shape), scalar)
            assert got.dtype.name == name_of(want.dtype), (name, scalar, op, shape, flip)
            np.testing.assert_allclose(got.to(loom.float64).numpy(), want.double().numpy(), rtol=1e-2)


@pytest.mark.parametrize("op", ["sub", "floordiv", "mod", "pow", "and_", "or_", "xor"])
@pytest.mark.parametrize("a,b", [("int8", "uint8"), ("int32", "float16"), ("bool", "int16"), ("uint8", "int64"),
                                 ("float32", "int64"), ("bfloat16", "float16"), ("int16", "int16")])
def test_other_binary_ops_promote_like_torch(op, a, b):
    f = getattr(operator, op)
    try:
        want = f(make(torch, a, (3,)), make(torch, b, (3,)))
    except RuntimeError:
        with pytest.raises(loom.LoomError):
            f(make(loom, a, (3,)), make(loom, b, (3,)))
        return
    got = f(make(loom, a, (3,)), make(loom, b, (3,)))
    assert got.dtype.name == name_of(want.dtype)
    np.testing.assert_allclose(got.to(loom.float64).numpy(), want.double().numpy(), rtol=1e-2)


def test_result_type_and_can_cast():
    assert loom.result_type(loom.ones(2, dtype=loom.int8), 2.5) is loom.float32
    assert loom.result_type(loom.ones(2, dtype=loom.int8), loom.tensor(1000)) is loom.int8
    assert loom.result_type(loom.ones(2, dtype=loom.float16), loom.tensor(1.0, dtype=loom.float64)) is loom.float16
    assert loom.can_cast(loom.int32, loom.float16) and not loom.can_cast(loom.float32, loom.int64)


def test_integer_scalars_wrap_like_torch():
    u = loom.tensor([3, 200], dtype=loom.uint8)
    t = torch.tensor([3, 200], dtype=torch.uint8)
    assert (u + 300).tolist() == (t + 300).tolist()
    assert (u == -253).tolist() == (t == -253).tolist()
    i8 = loom.tensor([50, -3], dtype=loom.int8)
    assert (i8 < 300).tolist() == (torch.tensor([50, -3], dtype=torch.int8) < 300).tolist()


def test_integer_overflow_wraps_like_torch():
    a = loom.tensor([100, -100], dtype=loom.int8)
    t = torch.tensor([100, -100], dtype=torch.int8)
    assert (a * 3).tolist() == (t * 3).tolist()
    assert (-loom.tensor([1, 2], dtype=loom.uint8)).tolist() == (-torch.tensor([1, 2], dtype=torch.uint8)).tolist()


def test_set_default_dtype():
    try:
        loom.set_default_dtype(loom.float64)
        assert loom.get_default_dtype() is loom.float64
        assert loom.tensor([1.5]).dtype is loom.float64
        assert loom.arange(0.0, 1.0, 0.5).dtype is loom.float64
        assert loom.zeros(2).dtype is loom.float64 and loom.rand(2).dtype is loom.float64
        assert (loom.tensor([1, 2]) / 2).dtype is loom.float64
        assert (loom.tensor([1, 2]) * 0.5).dtype is loom.float64
        assert repr(loom.tensor([1.5])) == "tensor([1.5000])"
        assert repr(loom.tensor([1.5], dtype=loom.float32)) == "tensor([1.5000], dtype=loom.float32)"
    finally:
        loom.set_default_dtype(loom.float32)
    assert loom.tensor([1.5]).dtype is loom.float32
    with pytest.raises(TypeError, match="floating point"):
        loom.set_default_dtype(loom.int64)


def test_dtype_spellings():
    x = loom.ones(2)
    for spelling in ["float64", "double", np.float64, torch.float64, loom.float64]:
        assert x.to(spelling).dtype is loom.float64
    assert loom.zeros(1, dtype=float).dtype is loom.float32
    assert loom.zeros(1, dtype=int).dtype is loom.int64
    assert loom.zeros(1, dtype=bool).dtype is loom.bool
    with pytest.raises(TypeError, match="unknown dtype name 'float128'"):
        loom.zeros(1, dtype="float128")
