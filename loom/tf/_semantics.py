"""TensorFlow's operator dtype rules and tensor printing, applied to loom tensors in loom.tf programs.

A `tf.Tensor` is a `loom.Tensor`, whose operators follow PyTorch's promotion.
TensorFlow's differ: `int32 / int32` is float64, and mixing dtypes (int32 with
float32, float32 with float64, an int tensor with a Python float) is an error
rather than a promotion; NumPy arrays and lists convert to the tensor's dtype.
These rules apply to operators written in a loom.tf program (decided by the
calling frame, as loom decides how dtypes print); loom's own code keeps loom's.
"""
from __future__ import annotations

import numbers
import sys as _sys

import numpy as np

import loom
from loom import _naming
from loom import dtypes as _dt
from loom.errors import DTypeError
from loom.tensor import Tensor
from loom.tf.debugging import InvalidArgumentError

_tensor_mod = _sys.modules["loom.tensor"]  # `loom.tensor` the module (the name is also loom's function)
_TENSOR_FILE = _tensor_mod.__file__
# TensorFlow's op names, for error messages that read like TensorFlow's.
_TF_OP = {"add": "AddV2", "sub": "Sub", "mul": "Mul", "div": "RealDiv", "floordiv": "FloorDiv", "mod": "FloorMod",
          "pow": "Pow", "maximum": "Maximum", "minimum": "Minimum", "eq": "Equal", "ne": "NotEqual",
          "lt": "Less", "le": "LessEqual", "gt": "Greater", "ge": "GreaterEqual", "and": "LogicalAnd",
          "or": "LogicalOr", "xor": "LogicalXor", "_true_div": "RealDiv", "floor_divide": "FloorDiv",
          "remainder": "FloorMod"}


class MixedDTypeError(InvalidArgumentError, DTypeError):
    """An operator on two dtypes TensorFlow does not promote between (TF raises InvalidArgumentError or
    TypeError; this is both)."""


def _int(d) -> bool:
    return d.category == 1


def _true_div_type(d):
    """TensorFlow's truediv of integers: float64 for 32- and 64-bit ones, float32 for narrower ones."""
    return loom.float64 if d.itemsize >= 4 else loom.float32


def mixed_error(op: str, da, db) -> MixedDTypeError:
    return MixedDTypeError(
        f"loom.tf: cannot compute {_TF_OP.get(op, op)} of a {da.name} tensor and a {db.name} tensor: "
        f"TensorFlow does not convert dtypes implicitly; cast one operand with tf.cast(x, tf.{da.name})")


def _binary_rule(op: str, a, b):
    """`a op b` with TensorFlow's dtype rules when a loom.tf program wrote it, else None (loom's rules)."""
    ta, tb = isinstance(a, Tensor), isinstance(b, Tensor)
    if ta and tb:
        da, db = a._node.dtype, b._node.dtype
        if da is db and not (op == "div" and _int(da)):
            return None
    elif ta or tb:
        t, other = (a, b) if ta else (b, a)
        d = t._node.dtype
        floaty = isinstance(other, (float, np.floating)) and not isinstance(other, bool)
        array = isinstance(other, (np.ndarray, list, tuple)) or (isinstance(other, np.generic) and not floaty)
        if not (array or (floaty and _int(d)) or (op == "div" and _int(d) and isinstance(other, numbers.Number))):
            return None
    else:
        return None
    if _naming.operator_caller(_TENSOR_FILE) != "tf":
        return None
    if not (ta and tb):
        t, other = (a, b) if ta else (b, a)
        d = t._node.dtype
        if isinstance(other, (float, np.floating)) and _int(d):
            other_type = loom.float32 if isinstance(other, float) else _dt.as_dtype(np.asarray(other).dtype)
            raise mixed_error(op, d, other_type)
        other = loom.tensor(np.asarray(other).astype(d.np)) if d is not loom.bfloat16 else \
            loom.tensor(np.asarray(other, np.float32)).to(d)
        a, b = (t, other) if ta else (other, t)
    da, db = a._node.dtype, b._node.dtype
    if da is not db:
        raise mixed_error(op, da, db)
    if op == "div" and _int(da):
        ft = _true_div_type(da)
        return a.to(ft) / b.to(ft)
    return _tensor_mod.binary(op, a, b)


def _tensor_text(t: Tensor, is_repr: bool) -> str:
    """TensorFlow's str ("tf.Tensor([1. 2.], shape=(2,), dtype=float32)") and repr ("<tf.Tensor: ...>")."""
    shape = tuple(t.shape)
    if loom.tracing():  # A symbolic tensor of a tf.function trace, as TensorFlow prints graph tensors.
        return f'Tensor("{t._node.op}:0", shape={shape}, dtype={t.dtype.name})'
    a = t.detach().numpy()
    text = repr(a) if is_repr and a.ndim else str(a)  # A scalar shows as 3.5, not array(3.5).
    if "\n" in text:
        text = "\n" + text
    if is_repr:
        return f"<tf.Tensor: shape={shape}, dtype={t.dtype.name}, numpy={text}>"
    return f"tf.Tensor({text}, shape={shape}, dtype={t.dtype.name})"


def install() -> None:
    """Register the rules and the printing with loom's core (once)."""
    if _binary_rule not in _tensor_mod.BINARY_RULES:
        _tensor_mod.BINARY_RULES.append(_binary_rule)
    _naming.TENSOR_TEXT["tf"] = _tensor_text
