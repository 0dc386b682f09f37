"""Bad input: every case raises a loom error that names the op and the offending shapes/dtypes.

Each case is (callable, error class, regex the message must match). The errors
must come when the op is written, so every callable only builds lazy graph
(nothing here calls .numpy() except where realising is the point).
"""
import numpy as np
import pytest

import loom
from loom.errors import (AutogradError, DeviceError, DTypeError, LoomError, LoomIndexError, LoomTypeError,
                         LoomValueError, LoomZeroDivisionError, ShapeError)

F = loom.nn.functional


def _grad_unused():
    x, z = loom.ones(2, requires_grad=True), loom.ones(3, requires_grad=True)
    return loom.autograd.grad((x * 2).sum(), [x, z])


def _modified_after_use():
    x = loom.ones(2, requires_grad=True)
    y = x * 2
    z = y * y
    y.mul_(3)
    z.sum().backward()


def _tape_twice():
    x = loom.tensor(1.0)
    with loom.GradientTape() as tape:
        tape.watch(x)
        y = x * x
    tape.gradient(y, x)
    tape.gradient(y, x)


CASES = {
    # Shapes: broadcasting, matmul, reshape, cat, expand and friends.
    "broadcast_add": (lambda: loom.ones(2, 3) + loom.ones(4), ShapeError,
                      r"^loom\.add: shapes \[2, 3\] and \[4\] cannot be broadcast together: dim -1 has sizes 3 and 4"),
    "broadcast_mul_2d": (lambda: loom.ones(2, 3) * loom.ones(3, 2), ShapeError,
                         r"^loom\.mul: shapes \[2, 3\] and \[3, 2\] cannot be broadcast"),
    "broadcast_where": (lambda: loom.where(loom.ones(2, 3) > 0, loom.ones(4), 0.0), ShapeError,
                        r"^loom\.where: shapes \[2, 3\] and \[4\].*cannot be broadcast"),
    "matmul_inner_dims": (lambda: loom.ones(2, 3) @ loom.ones(4, 5), ShapeError,
                          r"^loom\.matmul: shapes \[2, 3\] and \[4, 5\] cannot be multiplied"),
    "matmul_vectors": (lambda: loom.ones(3) @ loom.ones(4), ShapeError, r"^loom\.matmul: shapes \[3\] and \[4\]"),
    "matmul_scalar": (lambda: loom.matmul(loom.tensor(1.0), loom.ones(3)), ShapeError,
                      r"^loom\.matmul: .*at least 1 dimension.*\[\] and \[3\]"),
    "reshape_size": (lambda: loom.ones(2, 3).reshape(4, 2), ShapeError,
                     r"^loom\.reshape: shape \[4, 2\] is invalid for input of size 6 \(shape \[2, 3\]\)"),
    "reshape_two_inferred": (lambda: loom.ones(6).reshape(-1, -1), ShapeError,
                             r"^loom\.reshape: only one dimension can be inferred"),
    "cat_sizes": (lambda: loom.cat([loom.ones(2, 3), loom.ones(2, 4)], 0), ShapeError,
                  r"^loom\.cat: .*expected size 3 but got 4 in dim 1.*\[2, 3\] and \[2, 4\]"),
    "cat_ranks": (lambda: loom.cat([loom.ones(2, 3), loom.ones(3)]), ShapeError,
                  r"^loom\.cat: .*same number of dimensions.*\[2, 3\] and \[3\]"),
    "stack_shapes": (lambda: loom.stack([loom.ones(2), loom.ones(3)]), ShapeError, r"^loom\.stack: .*\[2\].*\[3\]"),
    "expand_size": (lambda: loom.ones(2, 3).expand(4, 3), ShapeError,
                    r"^loom\.expand: .*size 4 must match the existing size 2.*input \[2, 3\], target \[4, 3\]"),
    "expand_rank": (lambda: loom.ones(2, 3).expand(3), ShapeError, r"^loom\.expand: .*\[2, 3\]"),
    "inplace_result_shape": (lambda: loom.ones(3).add_(loom.ones(2, 3)), ShapeError,
                             r"^loom\.add_: the result of shape \[2, 3\] cannot be written in place into a tensor "
                             r"of shape \[3\]"),
    "setitem_value_shape": (lambda: loom.ones(3).__setitem__(slice(0, 2), loom.ones(3)), ShapeError,
                            r"^loom\.setitem: .*\[3\].*\[2\]"),
    "linear_features": (lambda: F.linear(loom.ones(2, 3), loom.ones(4, 5)), ShapeError,
                        r"^loom\.linear: input \[2, 3\] has 3 features.*weight \[4, 5\]"),
    "conv2d_channels": (lambda: F.conv2d(loom.ones(1, 3, 8, 8), loom.ones(4, 2, 3, 3)), ShapeError,
                        r"^loom\.conv2d: .*\[4, 2, 3, 3\].*\[1, 3, 8, 8\].*2 channels, but got 3"),
    "ragged_nested_list": (lambda: loom.tensor([[1, 2], [3]]), ShapeError, r"^loom\.tensor: .*ragged"),
    # Sizes.
    "zeros_negative_size": (lambda: loom.zeros(2, -1), ShapeError, r"^loom\.zeros: negative dimension -1 in size "
                                                                     r"\[2, -1\]"),
    "randn_negative_size": (lambda: loom.randn(-2), ShapeError, r"^loom\.randn: negative dimension -2"),
    "full_negative_size": (lambda: loom.full((-1,), 2.0), ShapeError, r"^loom\.full: negative dimension -1"),
    "eye_negative": (lambda: loom.eye(-1), ShapeError, r"^loom\.eye: sizes must be non-negative, got n=-1"),
    "split_size_zero": (lambda: loom.ones(4).split(0), ShapeError, r"^loom\.split: split_size must be positive.*0"),
    "chunk_zero": (lambda: loom.ones(4).chunk(0), ShapeError, r"^loom\.chunk: chunks must be positive, got 0"),
    "arange_inconsistent_step": (lambda: loom.arange(0, 10, -1), LoomValueError,
                                 r"^loom\.arange: upper bound and step are inconsistent: start=0, end=10, step=-1"),
    "arange_zero_step": (lambda: loom.arange(0, 10, 0), LoomValueError, r"^loom\.arange: step must be nonzero"),
    "arange_infinite": (lambda: loom.arange(0, float("inf")), LoomError, r"^loom\.arange: end must be a finite number"),
    "linspace_negative_steps": (lambda: loom.linspace(0, 1, -1), LoomValueError,
                                r"^loom\.linspace: number of steps must be a non-negative int, got -1"),
    "randint_low_high": (lambda: loom.randint(5, 3, (2,)), LoomValueError,
                         r"^loom\.randint: expected low < high, got low=5, high=3"),
    # Dtypes.
    "bitwise_and_float": (lambda: loom.ones(2) & loom.ones(2), DTypeError,
                          r"^loom\.bitwise_and: expected integer or bool operands, got float32\[2\] and float32\[2\]"),
    "bitwise_xor_float_scalar": (lambda: loom.tensor([1, 2]) ^ 1.5, DTypeError,
                                 r"^loom\.bitwise_xor: .*int64\[2\] and float 1\.5"),
    "bitwise_not_float": (lambda: ~loom.ones(2), DTypeError, r"^loom\.bitwise_not: .*got float32"),
    "bool_subtraction": (lambda: loom.tensor([True]) - loom.tensor([False]), DTypeError,
                         r"^loom\.sub: subtraction with a bool operand is not supported "
                         r"\(got bool\[1\] and bool\[1\]\)"),
    "bool_minus_scalar": (lambda: loom.ones(2) - True, DTypeError, r"^loom\.sub: .*float32\[2\] and bool True"),
    "bool_negation": (lambda: -loom.tensor([True]), DTypeError, r"^loom\.neg: negation of a bool tensor"),
    "requires_grad_int": (lambda: loom.tensor([1, 2], requires_grad=True), AutogradError,
                          r"^loom\.requires_grad_: only floating point and complex tensors can require gradients, "
                          r"got int64\[2\]"),
    "requires_grad_bool_method": (lambda: loom.ones(2, dtype=loom.bool).requires_grad_(), AutogradError,
                                  r"^loom\.requires_grad_: .*got bool\[2\]"),
    "inplace_result_dtype": (lambda: loom.tensor([1, 2]).add_(1.5), DTypeError,
                             r"^loom\.add_: result type float32 can't be cast to the in-place output type int64"),
    "frac_of_int": (lambda: loom.frac(loom.tensor([1])), DTypeError, r"^loom\.frac: .*floating point.*got int64"),
    "floor_of_bool": (lambda: loom.floor(loom.tensor([True])), DTypeError, r"^loom\.floor: .*bool\[1\]"),
    "hypot_of_ints": (lambda: loom.hypot(loom.tensor([1]), loom.tensor([2])), DTypeError,
                      r"^loom\.hypot: expected floating point tensors, got int64 and int64"),
    "lerp_mixed_dtypes": (lambda: loom.lerp(loom.ones(2), loom.ones(2, dtype=loom.float64), 0.5), DTypeError,
                          r"^loom\.lerp: expected dtype float32 for `end` but got dtype float64"),
    "addcdiv_ints": (lambda: loom.addcdiv(loom.ones(2), loom.tensor([1, 2]), loom.tensor([3, 4])), DTypeError,
                     r"^loom\.addcdiv: integer division.*int64 and int64"),
    "heaviside_dtypes": (lambda: loom.heaviside(loom.tensor([1.0]), loom.tensor([1])), DTypeError,
                         r"^loom\.heaviside: .*float32 and int64"),
    "mean_of_ints": (lambda: loom.tensor([1, 2]).mean(), DTypeError, r"^loom\.mean: .*int64"),
    "matmul_bool": (lambda: loom.tensor([[True]]) @ loom.tensor([[True]]), DTypeError, r"^loom\.matmul: .*bool"),
    "embedding_float_index": (lambda: F.embedding(loom.ones(2), loom.ones(4, 3)), DTypeError,
                              r"^loom\.embedding: expected an integer index tensor, got float32\[2\]"),
    "rand_int_dtype": (lambda: loom.rand(2, dtype=loom.int32), DTypeError,
                       r"^loom\.rand: expected a floating point dtype, got int32"),
    "unknown_dtype_name": (lambda: loom.zeros(2, dtype="float128"), DTypeError,
                           r"^loom: unknown dtype name 'float128'; expected one of \['bfloat16'"),
    "uint16_promotion": (lambda: loom.from_numpy(np.zeros(2, np.uint16)) + loom.tensor([1, 2]), DTypeError,
                         r"^loom: promotion for uint16, uint32, uint64 types is not supported"),
    "int_pow_negative": (lambda: loom.tensor([1, 2]) ** -1, LoomValueError,
                         r"^loom\.pow: integers to negative integer powers are not allowed \(int64\[2\] \*\* -1\)"),
    "int_floor_divide_by_zero": (lambda: loom.tensor([1, 2]) // 0, LoomZeroDivisionError,
                                 r"^loom\.floor_divide: integer division by zero \(int64\[2\] by 0\)"),
    "int_remainder_by_zero": (lambda: loom.tensor([1, 2], dtype=loom.int8) % 0, LoomZeroDivisionError,
                              r"^loom\.remainder: integer division by zero \(int8\[2\] by 0\)"),
    # Dims out of range.
    "sum_dim": (lambda: loom.ones(2, 3).sum(2), LoomIndexError,
                r"^loom\.sum: dimension out of range \(expected to be in range of \[-2, 1\], but got 2\)"),
    "sum_negative_dim": (lambda: loom.ones(2, 3).sum(-3), LoomIndexError, r"^loom\.sum: .*but got -3"),
    "softmax_dim": (lambda: loom.softmax(loom.ones(2, 3), 5), LoomIndexError, r"^loom\.softmax: .*but got 5"),
    "transpose_dim": (lambda: loom.ones(2, 3).transpose(0, 2), LoomIndexError, r"^loom\.transpose: .*but got 2"),
    "squeeze_dim": (lambda: loom.ones(2, 3).squeeze(4), LoomIndexError, r"^loom\.squeeze: .*but got 4"),
    "size_dim": (lambda: loom.ones(2).size(3), LoomIndexError, r"^loom\.size: .*but got 3"),
    "permute_repeated": (lambda: loom.ones(2, 3).permute(0, 0), ShapeError, r"^loom\.permute: .*\[0, 0\]"),
    "dim_not_int": (lambda: loom.ones(2, 3).sum(1.5), LoomTypeError, r"^loom\.sum: dim must be an int, got float"),
    # Indices out of range.
    "getitem_index": (lambda: loom.ones(3)[5], LoomIndexError,
                      r"^loom\.getitem: index 5 is out of bounds for dimension 0 with size 3"),
    "getitem_negative_index": (lambda: loom.ones(3, 2)[:, -3], LoomIndexError,
                               r"^loom\.getitem: index -3 is out of bounds for dimension 1 with size 2"),
    "getitem_too_many": (lambda: loom.ones(3)[0, 0], LoomIndexError,
                         r"^loom\.getitem: too many indices for tensor of dimension 1"),
    "getitem_float_index": (lambda: loom.ones(3)[loom.tensor([0.5])], LoomIndexError,
                            r"^loom\.getitem: tensors used as indices must be .*got float32\[1\]"),
    "gather_index": (lambda: loom.ones(3).gather(0, loom.tensor([4])), LoomIndexError,
                     r"^loom\.gather: index 4 is out of bounds for dimension 0 with size 3"),
    "index_select_index": (lambda: loom.ones(3).index_select(0, loom.tensor([3])), LoomIndexError,
                           r"^loom\.index_select: index 3 is out of bounds for dimension 0 with size 3"),
    # Converting many elements to one value.
    "item_of_many": (lambda: loom.ones(3).item(), LoomError,
                     r"^loom\.Tensor\.item: a tensor with 3 elements \(shape \[3\]\) cannot be converted"),
    "bool_of_many": (lambda: bool(loom.ones(2, 2)), LoomError,
                     r"^loom\.Tensor\.__bool__: the truth value of a tensor with 4 elements \(shape \[2, 2\]\) is "
                     r"ambiguous"),
    "len_of_scalar": (lambda: len(loom.tensor(1.0)), LoomTypeError, r"^loom\.Tensor\.__len__: len\(\) of a 0-d"),
    "index_with_float_tensor": (lambda: [1, 2][loom.tensor(1.0)], LoomTypeError,
                                r"integer tensors of a single element.*got float32\[\]"),
    # Autograd.
    "backward_without_grad": (lambda: loom.ones(2).sum().backward(), AutogradError,
                              r"^loom\.backward: output 0 \(float32\[\]\) does not require grad"),
    "backward_non_scalar": (lambda: (loom.ones(2, requires_grad=True) * 2).backward(), AutogradError,
                            r"^loom\.backward: grad can be implicitly created only for scalar outputs; output 0 has "
                            r"shape \[2\]"),
    "grad_of_unused_input": (_grad_unused, AutogradError,
                             r"^loom\.autograd\.grad: input 1 \(float32\[3\]\) was not used.*allow_unused=True"),
    "grad_input_without_grad": (lambda: loom.autograd.grad(loom.ones(1, requires_grad=True).sum(), loom.ones(2)),
                                AutogradError,
                                r"^loom\.autograd\.grad: input 0 \(float32\[2\]\) does not require grad"),
    "grad_outputs_shape": (lambda: loom.autograd.grad(loom.ones(2, requires_grad=True) * 2,
                                                      loom.ones(2, requires_grad=True), grad_outputs=loom.ones(3)),
                           AutogradError, r"grad_output 0 has shape \[3\] but the output has shape \[2\]"),
    "inplace_on_leaf": (lambda: loom.ones(2, requires_grad=True).add_(1), AutogradError,
                        r"^loom\.add_: a leaf tensor that requires grad \(float32\[2\]\) cannot be modified in place"),
    "setitem_on_leaf": (lambda: loom.ones(2, requires_grad=True).__setitem__(0, 1.0), AutogradError,
                        r"^loom\.setitem: a leaf tensor that requires grad"),
    "modified_after_use": (_modified_after_use, AutogradError,
                           r"^loom\.backward: an input of mul \(float32\[2\]\) was modified by an in-place operation "
                           r"after it was used"),
    "numpy_of_requires_grad": (lambda: loom.ones(2, requires_grad=True).numpy(), LoomError,
                               r"^loom\.Tensor\.numpy: can't call numpy\(\) on a tensor that requires grad"),
    "retain_grad_without_grad": (lambda: loom.ones(2).retain_grad(), AutogradError,
                                 r"^loom\.retain_grad: the tensor does not require grad"),
    "requires_grad_false_on_non_leaf": (lambda: (loom.ones(1, requires_grad=True) * 2).requires_grad_(False),
                                        AutogradError, r"requires_grad_\(False\) is only allowed on leaf tensors"),
    "tape_used_twice": (_tape_twice, AutogradError, r"^loom\.GradientTape\.gradient: a non-persistent tape"),
    # Devices and arguments.
    "device_cuda_creation": (lambda: loom.ones(2, device="cuda"), DeviceError,
                             r"^loom\.ones: device cuda is not available; this build of loom runs on the cpu"),
    "device_cuda_to": (lambda: loom.ones(2).to("cuda:0"), DeviceError,
                       r"^loom\.Tensor\.to: device cuda:0 is not available"),
    "device_unknown": (lambda: loom.device("tpu"), DeviceError, r"^loom\.device: unknown device type 'tpu'"),
    "to_unknown_argument": (lambda: loom.ones(2).to(object()), LoomTypeError,
                            r"^loom\.Tensor\.to: expected a dtype, a device or a tensor, got object"),
    "tensor_from_string": (lambda: loom.tensor("abc"), LoomTypeError,
                           r"^loom\.tensor: cannot build a tensor from an object of type str"),
    "from_numpy_of_list": (lambda: loom.from_numpy([1]), LoomTypeError, r"^loom\.from_numpy: expected np\.ndarray"),
    "clamp_without_bounds": (lambda: loom.clamp(loom.ones(2)), LoomValueError,
                             r"^loom\.clamp: at least one of min and max must be given"),
    "div_rounding_mode": (lambda: loom.div(loom.ones(2), 2, rounding_mode="round"), LoomValueError,
                          r"^loom\.div: rounding_mode must be None, 'floor' or 'trunc', got 'round'"),
    "gelu_approximate": (lambda: F.gelu(loom.ones(2), approximate="fast"), LoomValueError,
                         r"^loom\.gelu: approximate must be 'none' or 'tanh', got 'fast'"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_raises_a_clear_loom_error(name):
    fn, cls, pattern = CASES[name]
    assert issubclass(cls, LoomError)
    with pytest.raises(cls, match=pattern):
        fn()


def test_there_are_at_least_35_cases():
    assert len(CASES) >= 35


def test_errors_are_raised_when_the_op_is_written():
    """Shape and dtype errors come from the op's line, with nothing computed."""
    pending = loom.ones(2, 3) * 2
    with pytest.raises(ShapeError):
        pending + loom.ones(4)
    with pytest.raises(DTypeError):
        pending | pending
    with pytest.raises(LoomIndexError):
        pending.sum(7)
    with pytest.raises(ShapeError):
        pending @ loom.ones(2, 3)
    assert pending.node.buffer is None


def test_error_classes_keep_python_semantics():
    """Each loom error is also the builtin a Python user would catch (and a RuntimeError, as torch)."""
    assert issubclass(ShapeError, ValueError) and issubclass(DTypeError, TypeError)
    assert issubclass(LoomIndexError, IndexError) and issubclass(LoomZeroDivisionError, ZeroDivisionError)
    for cls in (ShapeError, DTypeError, LoomIndexError, AutogradError, DeviceError, LoomTypeError, LoomValueError):
        assert issubclass(cls, RuntimeError) and issubclass(cls, LoomError)
    with pytest.raises(IndexError):
        loom.ones(3)[9]


def test_a_failed_op_leaves_its_inputs_usable():
    x = loom.ones(2, 3)
    with pytest.raises(ShapeError):
        x + loom.ones(4)
    assert (x + 1).tolist() == [[2.0] * 3] * 2


def test_integer_division_by_a_zero_in_a_tensor_raises_when_run():
    q = loom.tensor([4, 5]) // loom.tensor([2, 0])  # The divisor's values are only known when it runs.
    with pytest.raises(LoomZeroDivisionError, match=r"^loom\.floor_divide: integer division by zero"):
        q.numpy()
