"""The lazy Tensor: when values are computed, memory sharing, creation functions and printing."""
import importlib

import numpy as np
import pytest
import torch

import loom

tensor_module = importlib.import_module("loom.tensor")  # `loom.tensor` the attribute is the function.


# ---------------------------------------------------------------- laziness

def test_ops_are_lazy_until_numpy():
    a = loom.ones(3)
    b = (a + 1) * 2
    assert b.node.buffer is None and b.node.op == "mul"
    assert b.numpy().tolist() == [4.0, 4.0, 4.0]
    assert b.node.buffer is not None and b.node.op == "buffer"


def test_realising_drops_history():
    a = loom.ones(3)
    b = a.exp()
    assert b.node.inputs and b.node.inputs[0] is a.node
    b.realize()
    assert b.node.inputs == () and b.node.depth == 0


@pytest.mark.parametrize("trigger", ["numpy", "item", "tolist", "repr", "str", "bool", "float", "int",
                                     "synchronize", "realize", "module_realize", "format", "array"])
def test_realisation_triggers(trigger):
    t = loom.full((1,), 3.0) * 2
    assert t.node.buffer is None
    actions = {
        "numpy": lambda: t.numpy(), "item": lambda: t.item(), "tolist": lambda: t.tolist(),
        "repr": lambda: repr(t), "str": lambda: str(t), "bool": lambda: bool(t), "float": lambda: float(t),
        "int": lambda: int(t), "synchronize": lambda: loom.synchronize(t), "realize": lambda: t.realize(),
        "module_realize": lambda: loom.realize(t), "format": lambda: f"{t:.2f}", "array": lambda: np.asarray(t),
    }
    actions[trigger]()
    assert t.node.buffer is not None
    assert t.node.buffer.tolist() == [6.0]


def test_metadata_does_not_realise():
    t = loom.ones(2, 3) @ loom.ones(3, 4)
    assert t.shape == (2, 4) and t.dtype is loom.float32 and t.ndim == 2 and t.numel() == 8
    assert t.size(-1) == 4 and len(t) == 2 and t.requires_grad is False
    assert t.node.buffer is None


def test_realize_several_shares_common_subgraph():
    a = loom.arange(4.0)
    shared = a * 3
    x, y = shared + 1, shared - 1
    loom.realize(x, y)
    assert x.node.buffer is not None and y.node.buffer is not None
    assert x.tolist() == [1.0, 4.0, 7.0, 10.0] and y.tolist() == [-1.0, 2.0, 5.0, 8.0]


def test_lazy_depth_limit_bounds_a_long_chain():
    x = loom.zeros(2)
    for _ in range(10_000):
        x = x + 1
    assert x.node.depth <= tensor_module.LAZY_DEPTH_LIMIT
    assert x.tolist() == [10_000.0, 10_000.0]


def test_long_chain_backward_has_no_recursion_limit():
    x = loom.zeros(2, requires_grad=True)
    y = x
    for _ in range(5_000):
        y = y * 1.0001
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0001 ** 5000] * 2, rtol=1e-4)


def test_pending_value_is_computed_once():
    a = loom.arange(3.0)
    b = a.exp()
    first = b.numpy()
    assert b.numpy() is first


def test_shape_error_is_raised_where_the_op_is_written():
    a, b = loom.ones(2, 3), loom.ones(4)
    with pytest.raises(loom.ShapeError, match=r"\[2, 3\] and \[4\]"):
        a + b  # noqa: B018


def test_dtype_error_is_raised_where_the_op_is_written():
    pending = loom.ones(3) * 2
    with pytest.raises(loom.DTypeError, match="bitwise_and"):
        pending & pending  # noqa: B018
    assert pending.node.buffer is None  # Nothing ran to find the error.


def test_value_errors_surface_at_realisation_of_the_index():
    idx = loom.tensor([0, 4]) + 1  # Pending: its values are only known when it runs.
    out = loom.arange(3.0).gather(0, idx)
    with pytest.raises(loom.LoomIndexError,
                       match=r"^loom\.gather: index 5 is out of bounds for dimension 0 with size 3"):
        out.numpy()


def test_numpy_of_requires_grad_tensor_raises():
    x = loom.ones(2, requires_grad=True)
    with pytest.raises(loom.LoomError, match="detach"):
        x.numpy()
    assert x.detach().numpy().tolist() == [1.0, 1.0]


# ---------------------------------------------------------------- NumPy memory sharing and DLPack

def test_from_numpy_shares_memory_both_ways():
    a = np.arange(4, dtype=np.float32)
    t = loom.from_numpy(a)
    a[0] = 10.0
    assert t.tolist() == [10.0, 1.0, 2.0, 3.0]
    t.add_(1)
    assert a.tolist() == [11.0, 2.0, 3.0, 4.0]
    t.mul_(2)
    assert a.tolist() == [22.0, 4.0, 6.0, 8.0]
    assert t.numpy() is a


def test_from_numpy_inplace_keeps_earlier_values_intact():
    a = np.arange(3, dtype=np.float64)
    t = loom.from_numpy(a)
    pending = t * 10  # Written before the in-place update: must see the old values.
    copy = t.clone()
    flipped = t.flip(0)
    flipped.realize()
    t.add_(100)
    assert pending.tolist() == [0.0, 10.0, 20.0]
    assert copy.tolist() == [0.0, 1.0, 2.0]
    assert flipped.tolist() == [2.0, 1.0, 0.0]
    assert a.tolist() == [100.0, 101.0, 102.0]


def test_from_numpy_dtypes_and_errors():
    for np_dtype, name in [(np.float16, "float16"), (np.int8, "int8"), (np.uint8, "uint8"), (np.bool_, "bool"),
                           (np.uint16, "uint16"), (np.uint32, "uint32"), (np.uint64, "uint64")]:
        assert loom.from_numpy(np.zeros(2, np_dtype)).dtype.name == name
    with pytest.raises(TypeError, match="expected np.ndarray"):
        loom.from_numpy([1, 2])


def test_dlpack_from_numpy_is_zero_copy():
    a = np.arange(6.0).reshape(2, 3)
    t = loom.from_dlpack(a)
    assert t.dtype is loom.float64 and t.shape == (2, 3)
    a[1, 2] = -1.0
    assert t.tolist()[1][2] == -1.0


def test_dlpack_to_numpy_is_zero_copy():
    t = loom.tensor([1.0, 2.0, 3.0])
    a = np.from_dlpack(t)
    a[0] = 42.0
    assert t.tolist() == [42.0, 2.0, 3.0]
    assert np.shares_memory(np.from_dlpack(t), a)


def test_dlpack_of_a_lazy_non_contiguous_tensor():
    t = loom.arange(6.0).reshape(2, 3).t()
    a = np.from_dlpack(t)
    assert a.tolist() == [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]


def test_dlpack_round_trip_with_torch():
    t = loom.tensor([[1.0, 2.0], [3.0, 4.0]])
    tt = torch.from_dlpack(t)
    tt[0, 0] = 9.0
    assert t.tolist() == [[9.0, 2.0], [3.0, 4.0]]
    src = torch.arange(4, dtype=torch.int32)
    lt = loom.from_dlpack(src)
    assert lt.dtype is loom.int32
    src[0] = 7
    assert lt.tolist() == [7, 1, 2, 3]
    lt.add_(1)
    assert src.tolist() == [8, 2, 3, 4]


def test_dlpack_bfloat16_with_torch():
    t = loom.tensor([1.5, -2.0, 3.25]).bfloat16()
    tt = torch.from_dlpack(t)
    assert tt.dtype == torch.bfloat16 and tt.tolist() == [1.5, -2.0, 3.25]
    tt[0] = 8.0
    assert t.tolist() == [8.0, -2.0, 3.25]
    src = torch.tensor([0.1, 1e30, -7.0], dtype=torch.bfloat16)
    lt = loom.from_dlpack(src)
    assert lt.dtype is loom.bfloat16
    assert lt.tolist() == src.float().tolist()


def test_dlpack_refuses_tensors_that_require_grad():
    with pytest.raises(loom.AutogradError, match="detach"):
        np.from_dlpack(loom.ones(2, requires_grad=True))


def test_dlpack_device():
    assert loom.ones(1).__dlpack_device__() == (1, 0)


# ---------------------------------------------------------------- creation vs torch

def _same(t_out, l_out, exact=True):
    assert str(t_out.dtype).split(".")[-1] == l_out.dtype.name
    assert tuple(t_out.shape) == tuple(l_out.shape)
    if exact:
        assert t_out.tolist() == l_out.tolist()
    else:
        np.testing.assert_allclose(l_out.numpy().astype(np.float64), t_out.double().numpy(), rtol=1e-6,
                                   atol=1e-6)


CREATION = {
    "nested_ints": lambda m: m.tensor([[1, 2], [3, 4]]),
    "mixed_int_float_bool": lambda m: m.tensor([1, 2.5, True]),
    "bools": lambda m: m.tensor([[True], [False]]),
    "int_and_bool": lambda m: m.tensor([1, True]),
    "float_scalar": lambda m: m.tensor(2.5),
    "bool_scalar": lambda m: m.tensor(True),
    "empty": lambda m: m.tensor([]),
    "empty_2d": lambda m: m.tensor([[], []]),
    "numpy_float64": lambda m: m.tensor(np.arange(3.0)),
    "numpy_int32": lambda m: m.tensor(np.arange(3, dtype=np.int32)),
    "numpy_scalar_float64": lambda m: m.tensor(np.float64(2.0)),
    "numpy_scalar_int32": lambda m: m.tensor(np.int32(3)),
    "list_of_numpy_float64": lambda m: m.tensor([np.float64(1.0), 2.0]),
    "list_of_numpy_float32_int": lambda m: m.tensor([np.float32(1.5), 2]),
    "list_of_numpy_int32": lambda m: m.tensor([np.int32(1), 2]),
    "float_to_int32_truncates": lambda m: m.tensor([1.7, -2.7], dtype=m.int32),
    "ints_to_bool": lambda m: m.tensor([0, 2, -1], dtype=m.bool),
    "tuple": lambda m: m.tensor((1, 2)),
    "list_of_tensors": lambda m: m.tensor([m.tensor(1.0), m.tensor(2.0)]),
    "large_int": lambda m: m.tensor([2 ** 40, 1]),
    "zeros": lambda m: m.zeros(2, 3),
    "zeros_tuple_int8": lambda m: m.zeros((2, 3), dtype=m.int8),
    "zeros_0d": lambda m: m.zeros(()),
    "zeros_zero_size": lambda m: m.zeros(2, 0),
    "ones_list": lambda m: m.ones([2]),
    "ones_bool": lambda m: m.ones(2, dtype=m.bool),
    "full_int": lambda m: m.full((2,), 3),
    "full_float": lambda m: m.full((2,), 3.5),
    "full_bool": lambda m: m.full((2,), True),
    "full_float16": lambda m: m.full((2, 2), 7, dtype=m.float16),
    "full_float_into_int32": lambda m: m.full([2], 2.0, dtype=m.int32),
    "arange_int": lambda m: m.arange(5),
    "arange_start_end_step": lambda m: m.arange(2, 9, 3),
    "arange_negative_step": lambda m: m.arange(5, 0, -1),
    "arange_negative_int_step_remainder": lambda m: m.arange(10, -3, -4),
    "arange_empty": lambda m: m.arange(3, 3),
    "arange_float_end": lambda m: m.arange(2.0),
    "arange_dtype_float64": lambda m: m.arange(5, dtype=m.float64),
    "arange_int64_with_float_step": lambda m: m.arange(0, 5, 1.5, dtype=m.int64),
    "arange_int32_with_float_step": lambda m: m.arange(0, 5, 1.5, dtype=m.int32),
    "linspace_int": lambda m: m.linspace(0, 10, 4, dtype=m.int64),
    "linspace_one": lambda m: m.linspace(2, 3, 1),
    "linspace_zero": lambda m: m.linspace(2, 3, 0),
    "eye": lambda m: m.eye(3),
    "eye_rectangular": lambda m: m.eye(2, 4),
    "eye_int32": lambda m: m.eye(2, dtype=m.int32),
    "eye_empty": lambda m: m.eye(0),
    "zeros_like_keeps_dtype": lambda m: m.zeros_like(m.ones(2, dtype=m.int32)),
    "ones_like_dtype": lambda m: m.ones_like(m.ones(2), dtype=m.float64),
    "full_like_int_truncates": lambda m: m.full_like(m.ones(2, dtype=m.int64), 2.7),
    "full_like_float": lambda m: m.full_like(m.ones(2), 2),
    "empty_like_shape": lambda m: m.zeros_like(m.empty_like(m.ones(3, dtype=m.int16))),
    "empty_shape": lambda m: m.zeros_like(m.empty(2, 3)),
    "as_tensor_dtype": lambda m: m.as_tensor([1, 2], dtype=m.float32),
}


@pytest.mark.parametrize("name", sorted(CREATION))
def test_creation_matches_torch(name):
    fn = CREATION[name]
    _same(fn(torch), fn(loom))


FLOAT_RANGES = [
    (0.0, 1.0, 0.1), (0.0, 0.3, 0.1), (1.0, 2.2, 0.4), (1.0, -1.0, -0.3), (-1e3, 1e3, 0.7),
    (23.315, 87.152, 1.64), (71.979, -64.517, -0.4), (-0.5, 0.5, 1e-3),
]


@pytest.mark.parametrize("start,end,step", FLOAT_RANGES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_arange_float_steps_match_torch(start, end, step, dtype):
    t = torch.arange(start, end, step, dtype=getattr(torch, dtype))
    lt = loom.arange(start, end, step, dtype=getattr(loom, dtype))
    assert tuple(lt.shape) == tuple(t.shape)  # The length rule is exact.
    # Values agree to the last bit or so: PyTorch's vectorised kernel rounds each chunk's
    # start to the output type (how depends on the CPU's vector width).
    eps = np.finfo(getattr(np, dtype)).eps * max(abs(start), abs(end))
    np.testing.assert_allclose(lt.numpy(), t.numpy(), rtol=0, atol=2 * eps)


def test_arange_default_float_dtype():
    assert loom.arange(0, 1, 0.25).dtype is loom.float32
    assert loom.arange(0, 1, 0.25).tolist() == [0.0, 0.25, 0.5, 0.75]


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "int32"])
def test_linspace_is_bit_exact_with_torch(dtype):
    rng = np.random.default_rng(0)
    for _ in range(40):
        s, e = (rng.uniform(-100, 100, 2) * 10 ** rng.uniform(-3, 3)).tolist()
        n = int(rng.integers(0, 300))
        want = torch.linspace(s, e, n, dtype=getattr(torch, dtype)).numpy()
        got = loom.linspace(s, e, n, dtype=getattr(loom, dtype)).numpy()
        np.testing.assert_array_equal(got, want, err_msg=f"linspace({s}, {e}, {n})")


def test_logspace_matches_torch():
    for args in [(0, 2, 3), (0, 3, 4, 2.0), (-2, 2, 9)]:
        _same(torch.logspace(*args), loom.logspace(*args), exact=False)


def test_creation_requires_grad_and_device():
    x = loom.zeros(2, requires_grad=True)
    assert x.requires_grad and x.is_leaf
    assert loom.arange(3.0, requires_grad=True).is_leaf
    assert loom.ones(2, device="cpu").device == loom.device("cpu")
    assert loom.tensor([1.0], device=loom.device("cpu")).device.type == "cpu"


# ---------------------------------------------------------------- Tensor basics

def test_clone_is_a_new_node_with_gradient():
    x = loom.tensor([1.0, 2.0], requires_grad=True)
    c = x.clone()
    assert c.node is not x.node and c.requires_grad and not c.is_leaf
    (c * c).sum().backward()
    assert x.grad.tolist() == [2.0, 4.0]


def test_detach_and_data_share_the_value_without_history():
    x = loom.tensor([1.0, 2.0], requires_grad=True)
    y = x * 3
    d = y.detach()
    assert not d.requires_grad and d.is_leaf and d.grad_fn is None and d.node is y.node
    assert not x.data.requires_grad and x.data.tolist() == [1.0, 2.0]


def test_data_setter_replaces_the_value():
    x = loom.tensor([1.0, 2.0], requires_grad=True)
    x.data = loom.tensor([5.0, 6.0])
    assert x.tolist() == [5.0, 6.0] and x.requires_grad


def test_requires_grad_():
    x = loom.ones(2)
    assert x.requires_grad_() is x and x.requires_grad
    x.requires_grad_(False)
    assert not x.requires_grad
    y = loom.ones(2, requires_grad=True) * 2
    with pytest.raises(loom.AutogradError, match="leaf"):
        y.requires_grad_(False)


def test_item_on_each_dtype():
    assert loom.tensor(True).item() is True
    assert loom.tensor(False).item() is False
    v = loom.tensor(3).item()
    assert v == 3 and type(v) is int
    assert type(loom.tensor([7], dtype=loom.uint8).item()) is int
    f = loom.tensor(2.5).item()
    assert f == 2.5 and type(f) is float
    assert loom.tensor(1.5).bfloat16().item() == 1.5
    assert loom.tensor([[4.0]]).item() == 4.0


def test_bool_of_one_element():
    assert bool(loom.tensor([3]))
    assert not bool(loom.tensor(0.0))


def test_conversions_and_predicates():
    x = loom.tensor([1.7, -2.2])
    assert x.int().tolist() == [1, -2] and x.long().dtype is loom.int64
    assert x.double().dtype is loom.float64 and x.half().dtype is loom.float16
    assert x.bool().tolist() == [True, True] and x.byte().dtype is loom.uint8
    assert x.to(loom.int8).dtype is loom.int8 and x.to("float64").dtype is loom.float64
    assert x.to(torch.float16).dtype is loom.float16
    assert x.to(x) is x and x.to("cpu") is x and x.float() is x
    assert x.type() == "loom.float32" and x.type_as(loom.ones(1, dtype=loom.int16)).dtype is loom.int16
    assert x.is_floating_point() and not x.long().is_floating_point() and x.element_size() == 4
    assert loom.is_tensor(x) and not loom.is_tensor(1.0) and loom.numel(x) == 2


def test_iteration_len_and_index():
    x = loom.arange(6).reshape(3, 2)
    assert [r.tolist() for r in x] == [[0, 1], [2, 3], [4, 5]]
    assert len(x) == 3
    assert [10, 20, 30][loom.tensor(1)] == 20
    with pytest.raises(TypeError, match="0-d"):
        len(loom.tensor(1.0))
    with pytest.raises(TypeError, match="integer tensors of a single element"):
        [1, 2][loom.tensor(1.0)]


def test_size_is_a_tuple_that_prints_like_torch():
    s = loom.ones(2, 3).shape
    assert s == (2, 3) and isinstance(s, tuple) and s.numel() == 6
    assert repr(s) == "loom.Size([2, 3])"


# ---------------------------------------------------------------- printing

REPRS = [
    lambda m: m.arange(2000.0),
    lambda m: m.arange(30.0).reshape(3, 10) * 1.5,
    lambda m: m.tensor([[[-1.1643, 0.1729], [0.2180, -0.2896]], [[0.2383, -0.8088], [1.4417, 2.0035]]]),
    lambda m: m.tensor([float("nan"), float("inf"), 1.0]),
    lambda m: m.tensor([float("nan"), float("-inf"), 1.5]),
    lambda m: m.tensor([1e10, 1.0]),
    lambda m: m.tensor([1e-5, 1e5]),
    lambda m: m.tensor([[1, 200], [3, -4]]),
    lambda m: m.arange(100).reshape(2, 50),
    lambda m: m.arange(3000).reshape(3, 1000),
    lambda m: m.arange(3000.0).reshape(10, 3, 100),
    lambda m: m.zeros(2, 0, 3),
    lambda m: m.zeros(0, dtype=m.int64),
    lambda m: m.zeros(0, dtype=m.bool),
    lambda m: m.tensor([]),
    lambda m: m.tensor(-0.0),
    lambda m: m.tensor([0.0, -0.0]),
    lambda m: m.tensor(1e-8),
    lambda m: m.tensor([1.123456789]),
    lambda m: m.tensor([123456.5, 1.25]),
    lambda m: m.tensor([1.0, 2.0]).double(),
    lambda m: m.tensor(3, dtype=m.int32),
    lambda m: m.tensor([True, False]),
    lambda m: m.ones(2, 3, dtype=m.bfloat16) / 3,
    lambda m: m.ones(2, 3, dtype=m.float16) / 3,
    lambda m: m.ones(30, requires_grad=True),
    lambda m: m.ones(12, 12, dtype=m.float64) / 7,
    lambda m: m.tensor([[1, 2], [3, 4]], dtype=m.uint8),
    lambda m: m.tensor(float("nan")),
    lambda m: m.ones(2, 1, 1, 3),
]


@pytest.mark.parametrize("k", range(len(REPRS)))
def test_repr_matches_torch(k):
    want = repr(REPRS[k](torch)).replace("torch.", "loom.")
    assert repr(REPRS[k](loom)) == want


def test_repr_of_a_result_shows_its_grad_fn():
    x = loom.tensor([1.0, 2.0], requires_grad=True)
    assert repr(x * 2) == "tensor([2., 4.], grad_fn=<MulBackward>)"
    assert repr(x) == "tensor([1., 2.], requires_grad=True)"


def test_set_printoptions():
    try:
        loom.set_printoptions(precision=2)
        assert repr(loom.tensor([1.23456])) == "tensor([1.23])"
        loom.set_printoptions(sci_mode=True)
        assert repr(loom.tensor([1.5])) == "tensor([1.50e+00])"
    finally:
        loom.set_printoptions(profile="default")
    assert repr(loom.tensor([1.23456])) == "tensor([1.2346])"


def test_format_of_scalar_tensor():
    assert f"{loom.tensor(3.14159):.2f}" == "3.14"
    assert f"{loom.tensor([1, 2])}" == "tensor([1, 2])"


def test_shift_operators_match_torch():
    def program(lib):
        a = lib.tensor([5, -6, 7, -1])
        b = lib.tensor([1, 2, 0, 3])
        u = lib.tensor([200, 3], dtype=lib.uint8)
        c = a.clone()
        c <<= 2
        d = a.clone()
        d >>= b
        return [a << 1, a >> 1, a << b, a >> b, 1 << b, 64 >> b, u << 1, u >> 1, c, d]
    for got, want in zip(program(loom), program(torch)):
        assert got.dtype.name == str(want.dtype).split(".")[-1]
        assert got.tolist() == want.tolist()
    with pytest.raises(loom.DTypeError, match="shifts take integer operands"):
        loom.tensor([1.5]) << 1
