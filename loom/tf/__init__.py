"""loom.tf: run TensorFlow 2 programs on loom with `import loom.tf as tf`.

Tensors are `loom.Tensor`s (with `.numpy()`, `.shape.as_list()`, operators);
`tf.Variable` is a loom tensor that can be assigned; `tf.GradientTape`,
`tf.function` (with AutoGraph), `tf.data.Dataset`, `tf.nn`, `tf.math`,
`tf.random` and `tf.keras` follow TensorFlow's names, defaults (float32,
int32, NHWC, Glorot-uniform) and semantics over loom's core. TensorFlow itself
is never imported.

Examples
--------
>>> import loom.tf as tf
>>> x = tf.constant([[1.0, 2.0], [3.0, 4.0]])
>>> tf.reduce_sum(x, axis=0).numpy().tolist()
[4.0, 6.0]
>>> x.shape.as_list()
[2, 2]
"""
from loom.tensor import Tensor  # noqa: F401
from loom.tf import math, nn, random  # noqa: F401
from loom.tf._core import (  # noqa: F401
    DType, TensorShape, TensorSpec, Variable, add_n, argmax, argmin, argsort, as_dtype, bfloat16, bool,
    boolean_mask, broadcast_to, cast, clip_by_global_norm, clip_by_norm, clip_by_value, concat, constant,
    convert_to_tensor, cumprod, cumsum, double, einsum, expand_dims, eye, fill, float16, float32, float64,
    gather, gather_nd, half, identity, int8, int16, int32, int64, linspace, matmul, norm, one_hot, ones,
    ones_like, pad, range, rank, repeat, roll, meshgrid, sequence_mask, scatter_nd, slice, strided_slice,
    tensor_scatter_nd_update, tensor_scatter_nd_max, tensor_scatter_nd_min, tensor_scatter_nd_sub, unique_with_counts,
    searchsorted, histogram_fixed_width, reverse_sequence, string, dtypes, saturate_cast,
    tensor_scatter_nd_add, reduce_all, reduce_any, reduce_logsumexp, reduce_max, reduce_mean,
    reduce_min, reduce_prod, reduce_std, reduce_sum, reduce_variance, reshape, reverse, shape, size, sort,
    split, squeeze, stack, stop_gradient, tensordot, tile, transpose, uint8, unique, unstack, where, zeros,
    zeros_like,
)
from loom.tf.function import Function, function  # noqa: F401
from loom.tf.tensor_array import TensorArray  # noqa: F401
from loom.tf.math import (  # noqa: F401
    abs, add, atan2, ceil, cos, cosh, divide, equal, erf, exp, floor, floordiv, greater, greater_equal,
    less, less_equal, log, logical_and, logical_not, logical_or, logical_xor, maximum, minimum, multiply,
    negative, not_equal, pow, reciprocal, round, rsqrt, sigmoid, sign, sin, sinh, sqrt, square,
    squared_difference, subtract, tan, tanh, truediv,
)
from loom.tf.math import acos, acosh, asin, asinh, atan, atanh, realdiv, scalar_mul, truncatediv, truncatemod  # noqa: F401
from loom.tf.tape import GradientTape, UnconnectedGradients  # noqa: F401
from loom.tf.control import (  # noqa: F401
    Module, cond, control_dependencies, custom_gradient, device, foldl, foldr, group, init_scope, map_fn,
    name_scope, no_op, numpy_function, py_function, scan, while_loop,
)
from loom.tf import linalg  # noqa: E402,F401
from loom.tf import debugging, image  # noqa: E402,F401
from loom.tf.debugging import (  # noqa: E402,F401
    assert_equal, assert_greater, assert_less, assert_rank, errors,
)
from loom.tf import config, data, nest, train  # noqa: E402,F401
from loom.tf import keras  # noqa: E402,F401
from loom.tf import _semantics  # noqa: E402
from loom.tf.ragged import RaggedTensor, ragged  # noqa: E402,F401

_semantics.install()

newaxis = None


__version__ = "2.21.0-loom"


def executing_eagerly() -> bool:  # noqa: A001
    """True outside a `tf.function` trace."""
    import loom
    return not loom.tracing()


def is_tensor(x) -> bool:  # noqa: A001
    """Whether `x` is a tensor (or variable)."""
    return isinstance(x, Tensor)


def print(*inputs, output_stream=None, summarize=None, sep=" ", end="\n", name=None) -> None:  # noqa: A001
    """Print tensors' values (as `tf.print`: to standard error unless `output_stream` says otherwise)."""
    import builtins
    import sys
    stream = sys.stderr if output_stream is None else output_stream
    builtins.print(*[x.numpy() if isinstance(x, Tensor) else x for x in inputs], sep=sep, end=end, file=stream)


_DTYPES = {"string", "bool", "bfloat16",
           "double", "float16", "float32", "float64", "half", "int8", "int16", "int32", "int64",
           "uint8"}
# The documented API: everything but `Tensor` (it is `loom.Tensor`) and the dtypes (loom's own, listed
# on the docs page), which would make `Tensor` and `bool` in other docstrings ambiguous references.
__all__ = sorted(n for n, v in list(globals().items()) if not n.startswith("_") and n not in _DTYPES
                 and n != "Tensor" and not isinstance(v, type(math)) and n != "newaxis")


from loom.tf._unsupported import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr("loom.tf", "tf")
