"""TensorFlow's tensor creation, conversion, `tf.Variable` and array ops over loom tensors.

A `tf.Tensor` here *is* a `loom.Tensor`: TensorFlow programs get loom tensors
back from every op, so the rest of loom (autograd, `loom.function`) sees them
unchanged. What differs from PyTorch is the surface: TF's default dtypes
(float32, int32), its argument names (`axis`, `keepdims`), NHWC layouts and
its op set.
"""
from __future__ import annotations

import builtins

import numpy as np

import loom
from loom import dtypes as _dt
from loom.autograd.grad_mode import no_grad
from loom.errors import LoomTypeError, LoomValueError, ShapeError
from loom.nn.parameter import Parameter

from loom.tensor import NUMPY_OF_GRAD_OK, Tensor

float16, bfloat16, float32, float64 = loom.float16, loom.bfloat16, loom.float32, loom.float64
int8, int16, int32, int64, uint8 = loom.int8, loom.int16, loom.int32, loom.int64, loom.uint8
bool = loom.bool  # noqa: A001  (TensorFlow's spelling: tf.bool)
half, double = float16, float64
DType = _dt.DType


class _StringDType:
    """`tf.string`: named so programs can mention it; loom tensors hold numbers, so using it is an error."""

    name = "string"

    def __repr__(self) -> str:
        return "tf.string"

    def __str__(self) -> str:
        return "<dtype: 'string'>"


string = _StringDType()


def as_dtype(d) -> DType:
    """A loom dtype from a TF dtype, a NumPy dtype or a name ('float32')."""
    if isinstance(d, DType):
        return d
    if d is string or d == "string" or d is str:
        raise LoomTypeError("loom.tf: string tensors (tf.string) are not supported, loom tensors hold numbers; "
                            "keep text as Python/NumPy strings and map it to integers with "
                            "tf.keras.layers.TextVectorization or StringLookup")
    if isinstance(d, str) and d == "bool":
        return loom.bool
    try:
        return _dt.as_dtype(np.dtype(d))
    except TypeError:
        return _dt.as_dtype(d)


def _default_array(value) -> np.ndarray:
    """NumPy value with TF's defaults: Python floats are float32, Python ints int32."""
    if isinstance(value, np.ndarray) or isinstance(value, np.generic):
        return np.asarray(value)
    a = np.asarray(value)
    if a.dtype == np.float64:
        return a.astype(np.float32)
    if a.dtype == np.int64:
        return a.astype(np.int32)
    if a.dtype.kind not in "biuf":
        hint = ("; string tensors are not supported: keep text as Python/NumPy strings and map it to integers "
                "with tf.keras.layers.TextVectorization or StringLookup") if a.dtype.kind in "USO" else ""
        raise LoomTypeError(f"loom.tf.constant: cannot make a tensor of {type(value).__name__} "
                            f"(NumPy dtype {a.dtype}); loom tensors hold numbers and booleans{hint}")
    return a


def convert_to_tensor(value, dtype=None, dtype_hint=None, name=None) -> Tensor:
    """`value` (tensor, variable, NumPy array, Python number or nested list) as a loom tensor."""
    if isinstance(value, Tensor):
        return value if dtype is None or value.dtype is as_dtype(dtype) else value.to(as_dtype(dtype))
    if isinstance(value, (list, tuple)) and value and any(isinstance(v, Tensor) for v in value):
        return stack([convert_to_tensor(v, dtype) for v in value])
    if dtype is None and dtype_hint is not None and not isinstance(value, np.ndarray):
        dtype = dtype_hint
    if dtype is not None:
        return loom.tensor(np.asarray(value), dtype=as_dtype(dtype))
    return loom.tensor(_default_array(value))


def constant(value, dtype=None, shape=None, name=None) -> Tensor:
    """A tensor holding `value` (floats default to float32, ints to int32), reshaped to `shape` if given.

    Examples
    --------
    >>> import loom.tf as tf
    >>> tf.constant([[1, 2], [3, 4]]).dtype
    tf.int32
    """
    t = convert_to_tensor(value, dtype)
    if shape is not None:
        shape = [int(s) for s in shape]
        if t.numel() == 1 and int(np.prod(shape)) != 1:
            return fill(shape, t.reshape(()))
        t = t.reshape(shape)
    return t


_t = convert_to_tensor


def _ints(v) -> list[int]:
    """A shape or axis list from ints, lists or tensors."""
    if isinstance(v, Tensor):
        return [int(x) for x in np.asarray(v.numpy()).reshape(-1)]
    if isinstance(v, (int, np.integer)):
        return [int(v)]
    return [int(x) for x in v]


# ---------------------------------------------------------------- variables

ASSIGNS = [0]  # Variable writes so far (tf.function replays a call differentiably only if it wrote none).


def _note_write(var) -> None:
    ASSIGNS[0] += 1


class Variable(Parameter):
    """A mutable tensor, as `tf.Variable`: `assign`, `assign_add`, `assign_sub`, `read_value`.

    It is a `loom.Tensor` (a `loom.nn.Parameter`), so every op takes it directly;
    trainable floating variables require gradients, so a `GradientTape` sees them.

    Examples
    --------
    >>> import loom.tf as tf
    >>> v = tf.Variable([1.0, 2.0])
    >>> _ = v.assign_add([1.0, 1.0])
    >>> v.numpy().tolist()
    [2.0, 3.0]
    """

    def __new__(cls, initial_value=None, trainable: bool = True, name: str | None = None, dtype=None,
                shape=None, **kwargs) -> Variable:
        if callable(initial_value) and not isinstance(initial_value, Tensor):
            initial_value = initial_value()
        if initial_value is None:
            raise LoomValueError("loom.tf.Variable: initial_value is required")
        value = convert_to_tensor(initial_value, dtype).detach().clone()
        v = Tensor.__new__(cls)
        v._init(value._node)
        v._trainable = builtin_bool(trainable)
        if trainable and value.dtype.is_floating_point:
            v.requires_grad_(True)
        v._name = name if name is not None else "Variable"  # Eager TensorFlow does not number them.
        v.__dict__["constraint"] = kwargs.get("constraint")  # Applied by optimizers after each update.
        return v

    def __init__(self, *args, **kwargs) -> None:
        pass  # Everything happens in __new__.

    @property
    def trainable(self) -> bool:
        return self._trainable

    @property
    def name(self) -> str:
        # A Keras 3 weight is named by its own name ("kernel"), its path says whose ("dense/kernel").
        short = self.__dict__.get("_keras_short")
        return short if short is not None else f"{self._name}:0"

    @property
    def path(self) -> str:
        return self._name

    def assign(self, value, use_locking=None, name=None, read_value=True):
        """Set the variable's value (same shape); returns the variable."""
        _note_write(self)
        value = convert_to_tensor(value, self.dtype)
        if tuple(value.shape) != tuple(self.shape):
            if value.numel() == self.numel() or value.ndim == 0:
                value = value.reshape(self.shape) if value.ndim else value.expand(self.shape)
            else:
                raise ShapeError(f"loom.tf.Variable.assign: variable {self.name} has shape {list(self.shape)}, "
                                 f"value has shape {list(value.shape)}")
        with no_grad():
            self.copy_(value.detach())
        return self

    def assign_add(self, delta, use_locking=None, name=None, read_value=True):
        """Add `delta` to the variable in place; returns the variable."""
        with no_grad():
            return self.assign(self.detach() + convert_to_tensor(delta, self.dtype))

    def assign_sub(self, delta, use_locking=None, name=None, read_value=True):
        """Subtract `delta` from the variable in place; returns the variable."""
        with no_grad():
            return self.assign(self.detach() - convert_to_tensor(delta, self.dtype))

    def scatter_nd_update(self, indices, updates, name=None):
        """Replace the elements or slices at `indices` with `updates`; returns the variable."""
        return self.assign(tensor_scatter_nd_update(self.detach(), indices, updates))

    def scatter_nd_add(self, indices, updates, name=None):
        """Add `updates` at `indices`; returns the variable."""
        return self.assign(tensor_scatter_nd_add(self.detach(), indices, updates))

    def scatter_nd_sub(self, indices, updates, name=None):
        """Subtract `updates` at `indices`; returns the variable."""
        return self.assign(tensor_scatter_nd_add(self.detach(), indices, -_t(updates, self.dtype)))

    def __getitem__(self, key):
        out = super().__getitem__(key)
        var = self

        def assign(value, use_locking=None, name=None, read_value=True):
            # `v[...].assign(x)` writes through the slice into the variable, as TensorFlow's sliced assign.
            _note_write(var)
            with no_grad():
                var[key] = convert_to_tensor(value, var.dtype)
            return var
        out.__dict__["assign"] = assign
        return out

    def read_value(self) -> Tensor:
        """The current value as a tensor (differentiable with respect to the variable)."""
        return self * 1 if self.dtype is not loom.bool else self.clone()

    value = read_value

    def __repr__(self) -> str:
        if self.__dict__.get("_keras_short") is not None:
            return (f"<Variable path={self.path}, shape={tuple(self.shape)}, dtype={self.dtype.name}, "
                    f"value={self.numpy()}>")
        return (f"<tf.Variable '{self.name}' shape={tuple(self.shape)} dtype={self.dtype.name}, "
                f"numpy={self.numpy()!r}>")

    __str__ = __repr__

    def __reduce_ex__(self, proto):
        return (_rebuild_variable, (self.detach(), self._trainable, self._name, self.__dict__.get("_keras_short")))

    def __deepcopy__(self, memo: dict) -> Variable:
        """An independent variable with the same value, trainability and name (copy.deepcopy of models)."""
        new = Variable(self.detach(), trainable=self._trainable, name=self._name, dtype=self.dtype)
        memo[id(self)] = new
        for k, v in self.__dict__.items():
            if k in ("_keras_init", "_keras_short"):  # The initializer spec is shared, not copied.
                new.__dict__[k] = v
        return new


def _rebuild_variable(value, trainable, name, keras_short=None):
    v = Variable(value, trainable=trainable, name=name)
    if keras_short is not None:
        v.__dict__["_keras_short"] = keras_short
    return v


def _from_tf(t: Tensor) -> builtin_bool:
    """Whether `t` derives from a tf.Variable or a tensor a tf.GradientTape watched (so `.numpy()` works)."""
    stack, seen = [t], set()
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, Variable) or x.__dict__.get("_tf_source"):
            return True
        if x._ctx is not None:
            stack.extend(x._ctx.inputs)
    return False


NUMPY_OF_GRAD_OK.append(_from_tf)

builtin_bool = __builtins__["bool"] if isinstance(__builtins__, dict) else __builtins__.bool


class TensorSpec:
    """The shape and dtype of a tensor argument (for `tf.function(input_signature=...)`)."""

    def __init__(self, shape, dtype=float32, name=None) -> None:
        self.shape = None if shape is None else tuple(None if s is None else int(s) for s in shape)
        self.dtype = as_dtype(dtype)
        self.name = name

    def is_compatible_with(self, t) -> builtin_bool:
        t = convert_to_tensor(t)
        if t.dtype is not self.dtype:
            return False
        if self.shape is None:
            return True
        return len(self.shape) == t.ndim and all(s is None or s == d for s, d in zip(self.shape, t.shape))

    def __repr__(self) -> str:
        return f"TensorSpec(shape={self.shape}, dtype=tf.{self.dtype.name}, name={self.name!r})"


class TensorShape(tuple):
    """A static shape, as `tf.TensorShape`; loom shapes (`loom.Size`) also have `as_list` and `rank`."""

    def __new__(cls, dims=None):
        return super().__new__(cls, () if dims is None else tuple(None if d is None else int(d) for d in dims))

    def as_list(self) -> list:
        return list(self)

    @property
    def rank(self) -> int:
        return len(self)

    ndims = rank

    def num_elements(self):
        """The number of elements, or None when a dimension is unknown."""
        return None if any(d is None for d in self) else int(np.prod(self, dtype=np.int64))

    def __eq__(self, other) -> builtin_bool:
        return tuple(self) == tuple(other) if isinstance(other, (tuple, list)) else NotImplemented

    __hash__ = tuple.__hash__

    def __repr__(self) -> str:
        return f"TensorShape({list(self)})"

    def __str__(self) -> str:
        return str(tuple(self))


# ---------------------------------------------------------------- creation

def zeros(shape, dtype=float32, name=None) -> Tensor:
    """A tensor of zeros of `shape` (float32 by default)."""
    return loom.zeros(*_ints(shape), dtype=as_dtype(dtype))


def ones(shape, dtype=float32, name=None) -> Tensor:
    """A tensor of ones of `shape` (float32 by default)."""
    return loom.ones(*_ints(shape), dtype=as_dtype(dtype))


def zeros_like(input, dtype=None, name=None) -> Tensor:
    """Zeros with the shape (and dtype, unless given) of `input`."""
    x = _t(input)
    return loom.zeros(*x.shape, dtype=as_dtype(dtype) if dtype is not None else x.dtype)


def ones_like(input, dtype=None, name=None) -> Tensor:
    """Ones with the shape (and dtype, unless given) of `input`."""
    x = _t(input)
    return loom.ones(*x.shape, dtype=as_dtype(dtype) if dtype is not None else x.dtype)


def fill(dims, value, name=None) -> Tensor:
    """A tensor of shape `dims` filled with `value` (its dtype is `value`'s)."""
    v = _t(value)
    return v.reshape(()).expand(*_ints(dims)).clone()


def range(start, limit=None, delta=1, dtype=None, name="range") -> Tensor:  # noqa: A001
    """Numbers from `start` up to (not including) `limit` by `delta`, as `tf.range`."""
    if limit is None:
        start, limit = 0, start
    vals = [float(v) if isinstance(v, Tensor) and v.dtype.is_floating_point else
            (int(v) if isinstance(v, Tensor) else v) for v in (start, limit, delta)]
    if dtype is None:
        tensors = [v for v in (start, limit, delta) if isinstance(v, Tensor)]
        if tensors:
            dtype = tensors[0].dtype
        else:
            dtype = float32 if any(isinstance(v, float) for v in vals) else int32
    d = as_dtype(dtype)
    return loom.tensor(np.arange(vals[0], vals[1], vals[2]).astype(d.np))


def linspace(start, stop, num, name=None, axis=0) -> Tensor:
    """`num` evenly spaced values from `start` to `stop` inclusive (float32 for Python numbers)."""
    s, e = _t(start), _t(stop)
    d = s.dtype if s.dtype.is_floating_point else float32
    return loom.linspace(float(s), float(e), int(num), dtype=d)


def eye(num_rows, num_columns=None, batch_shape=None, dtype=float32, name=None) -> Tensor:
    """An identity matrix (`num_rows` x `num_columns`), optionally batched."""
    m = loom.eye(int(num_rows), int(num_columns if num_columns is not None else num_rows), dtype=as_dtype(dtype))
    if batch_shape is not None:
        bs = _ints(batch_shape)
        m = m.expand(*bs, *m.shape).clone()
    return m


def identity(input, name=None) -> Tensor:
    """`input` as a new tensor (differentiable copy)."""
    x = _t(input)
    return x * 1 if x.dtype is not loom.bool else x.clone()


def stop_gradient(input, name=None) -> Tensor:
    """`input` with no gradient flowing back through it."""
    return _t(input).detach()


# ---------------------------------------------------------------- shapes

def shape(input, out_type=int32, name=None) -> Tensor:
    """The shape of `input` as a 1-D int32 tensor."""
    return loom.tensor(np.array(list(_t(input).shape), dtype=as_dtype(out_type).np))


def size(input, out_type=int32, name=None) -> Tensor:
    """The number of elements of `input` as a scalar tensor."""
    return loom.tensor(np.array(_t(input).numel(), dtype=as_dtype(out_type).np))


def rank(input, name=None) -> Tensor:
    """The number of dimensions of `input` as a scalar int32 tensor."""
    return loom.tensor(np.array(_t(input).ndim, dtype=np.int32))


def reshape(tensor, shape, name=None) -> Tensor:
    """`tensor` with a new shape (one dimension may be -1)."""
    return _t(tensor).reshape(_ints(shape))


def transpose(a, perm=None, conjugate=False, name="transpose") -> Tensor:
    """`a` with its dimensions permuted by `perm` (reversed by default)."""
    x = _t(a)
    p = list(builtin_range(x.ndim))[::-1] if perm is None else _ints(perm)
    return x.permute(*p)


builtin_range = __builtins__["range"] if isinstance(__builtins__, dict) else __builtins__.range


def expand_dims(input, axis, name=None) -> Tensor:
    """`input` with a new size-1 dimension at `axis`."""
    x = _t(input)
    a = int(axis)
    return x.unsqueeze(a if a >= 0 else x.ndim + 1 + a)


def squeeze(input, axis=None, name=None) -> Tensor:
    """`input` without its size-1 dimensions (only those in `axis`, if given)."""
    x = _t(input)
    if axis is None:
        return x.reshape([s for s in x.shape if s != 1])
    axes = sorted({a % x.ndim for a in _ints(axis)}, reverse=True)
    for a in axes:
        if x.shape[a] != 1:
            raise ShapeError(f"loom.tf.squeeze: cannot squeeze axis {a} of shape {list(x.shape)} (size "
                             f"{x.shape[a]}, expected 1)")
        x = x.squeeze(a)
    return x


def concat(values, axis, name="concat") -> Tensor:
    """Join tensors along an existing `axis`."""
    return loom.cat([_t(v) for v in values], dim=int(axis))


def stack(values, axis=0, name="stack") -> Tensor:
    """Join tensors along a new `axis`."""
    return loom.stack([_t(v) for v in values], dim=int(axis))


def unstack(value, num=None, axis=0, name="unstack") -> list:
    """Split `value` along `axis` into a list of tensors without that axis."""
    return list(loom.unbind(_t(value), dim=int(axis)))


def split(value, num_or_size_splits, axis=0, num=None, name="split") -> list:
    """Split `value` along `axis` into equal parts (an int) or parts of the given sizes (one may be -1)."""
    x = _t(value)
    ax = int(axis) % x.ndim
    n = x.shape[ax]
    if isinstance(num_or_size_splits, (int, np.integer)):
        k = int(num_or_size_splits)
        if k <= 0 or n % k:
            raise ShapeError(f"loom.tf.split: axis {ax} of size {n} does not split into {k} equal parts")
        return list(loom.split(x, n // k, dim=ax))
    sizes = _ints(num_or_size_splits)
    if -1 in sizes:
        sizes[sizes.index(-1)] = n - (sum(sizes) + 1)
    if sum(sizes) != n:
        raise ShapeError(f"loom.tf.split: sizes {sizes} do not add up to axis {ax} of size {n}")
    return list(loom.split(x, sizes, dim=ax))


def tile(input, multiples, name=None) -> Tensor:
    """`input` repeated `multiples[i]` times along each dimension."""
    return _t(input).repeat(*_ints(multiples))


def pad(tensor, paddings, mode="CONSTANT", constant_values=0, name=None) -> Tensor:
    """`tensor` padded by `paddings` ([[before, after], ...] per dimension); CONSTANT or REFLECT."""
    x = _t(tensor)
    pads = np.asarray(paddings.numpy() if isinstance(paddings, Tensor) else paddings, dtype=np.int64)
    if pads.shape != (x.ndim, 2):
        raise ShapeError(f"loom.tf.pad: paddings must have shape [{x.ndim}, 2] for a tensor of shape "
                         f"{list(x.shape)}, got {list(pads.shape)}")
    flat: list[int] = []
    for before, after in pads[::-1]:
        flat += [int(before), int(after)]
    m = mode.upper()
    if m == "CONSTANT":
        return loom.pad(x, flat, mode="constant", value=float(constant_values))
    if m == "REFLECT":
        return _pad_each(x, pads, "reflect")
    if m == "SYMMETRIC":
        out = x
        for ax, (before, after) in enumerate(pads):
            parts = []
            if before:
                parts.append(out.narrow(ax, 0, int(before)).flip(ax))
            parts.append(out)
            if after:
                parts.append(out.narrow(ax, out.shape[ax] - int(after), int(after)).flip(ax))
            out = loom.cat(parts, dim=ax)
        return out
    raise LoomValueError(f"loom.tf.pad: mode must be 'CONSTANT', 'REFLECT' or 'SYMMETRIC', got {mode!r}")


def _pad_each(x, pads, mode):
    out = x
    for ax, (before, after) in enumerate(pads):
        parts = []
        n = out.shape[ax]
        if before:
            parts.append(out.narrow(ax, 1, int(before)).flip(ax))
        parts.append(out)
        if after:
            parts.append(out.narrow(ax, n - 1 - int(after), int(after)).flip(ax))
        out = loom.cat(parts, dim=ax)
    return out


def cast(x, dtype, name=None) -> Tensor:
    """`x` converted to `dtype` (floats to ints truncate toward zero)."""
    return _t(x).to(as_dtype(dtype))


def saturate_cast(value, dtype, name=None) -> Tensor:
    """`value` clipped to the range of `dtype`, then cast."""
    d, x = as_dtype(dtype), _t(value)
    if not d.is_floating_point and d is not loom.bool:
        info = np.iinfo(d.np)
        if x.dtype.is_floating_point:
            x = loom.clamp(x, float(info.min), float(info.max))
        else:
            x = loom.clamp(x.to(int64), int(info.min), int(info.max))
    return x.to(d)


class dtypes:  # noqa: N801  (TensorFlow's namespace spelling)
    """`tf.dtypes`: DType, as_dtype, cast, saturate_cast and the dtype constants."""

    DType = DType
    as_dtype = staticmethod(as_dtype)
    cast = staticmethod(cast)
    saturate_cast = staticmethod(saturate_cast)
    float16, bfloat16, float32, float64 = float16, bfloat16, float32, float64
    int8, int16, int32, int64, uint8, bool, string = int8, int16, int32, int64, uint8, bool, string
    half, double = float16, float64


def gather(params, indices, validate_indices=None, axis=None, batch_dims=0, name=None) -> Tensor:
    """Slices of `params` along `axis` at `indices`; the result has `indices`' shape in place of `axis`."""
    p, idx = _t(params), _t(indices)
    b = int(batch_dims) % idx.ndim if batch_dims and idx.ndim else int(batch_dims)
    ax = (b if axis is None else int(axis)) % p.ndim
    if b:
        return _batched_gather(p, idx, ax, b)
    flat = loom.index_select(p, ax, idx.reshape(-1).to(loom.int64))
    return flat.reshape(list(p.shape[:ax]) + list(idx.shape) + list(p.shape[ax + 1:]))


def _batched_gather(p: Tensor, idx: Tensor, ax: int, b: int) -> Tensor:
    """`tf.gather` with `batch_dims=b`: each of the leading `b` batch entries gathers from its own slice."""
    if ax < b or tuple(p.shape[:b]) != tuple(idx.shape[:b]):
        raise LoomValueError(f"loom.tf.gather: with batch_dims={b}, params {list(p.shape)} and indices "
                             f"{list(idx.shape)} must share their first {b} dimensions and axis ({ax}) must be "
                             f">= batch_dims")
    batch, mid, post = list(p.shape[:b]), list(p.shape[b:ax]), list(p.shape[ax + 1:])
    ishape = list(idx.shape[b:])
    n = p.shape[ax]
    # Bring the gathered axis right after the batch dims, then fold batch and axis into one row index.
    perm = list(builtins.range(b)) + [ax] + list(builtins.range(b, ax)) + list(builtins.range(ax + 1, p.ndim))
    nb = int(np.prod(batch))
    rows = p.permute(*perm).reshape([nb * n] + mid + post)
    offs = (loom.arange(nb, dtype=loom.int64) * n).reshape(nb, 1)
    lin = (idx.to(loom.int64).reshape(nb, -1) + offs).reshape(-1)
    out = loom.index_select(rows, 0, lin).reshape(batch + ishape + mid + post)
    ni, nm = len(ishape), len(mid)
    order = (list(builtins.range(b)) + list(builtins.range(b + ni, b + ni + nm)) + list(builtins.range(b, b + ni))
             + list(builtins.range(b + ni + nm, out.ndim)))
    return out.permute(*order)


def slice(input_, begin, size, name=None) -> Tensor:  # noqa: A001
    """The block of `input_` starting at `begin` with extent `size` (-1: to the end of that dimension)."""
    x = _t(input_)
    b, n = _ints(begin), _ints(size)
    if len(b) != x.ndim or len(n) != x.ndim:
        raise LoomValueError(f"loom.tf.slice: begin {b} and size {n} need one entry per dimension of the "
                             f"{x.ndim}-d input {list(x.shape)}")
    idx = tuple(builtins.slice(s, x.shape[d] if k == -1 else s + k) for d, (s, k) in enumerate(zip(b, n)))
    return x[idx]


def strided_slice(input_, begin, end, strides=None, begin_mask=0, end_mask=0, ellipsis_mask=0, new_axis_mask=0,
                  shrink_axis_mask=0, name=None) -> Tensor:
    """`input_[begin:end:strides]` per dimension, with TensorFlow's bit masks (bit i refers to dimension i)."""
    x = _t(input_)
    b, e = _ints(begin), _ints(end)
    st = _ints(strides) if strides is not None else [1] * len(b)
    if ellipsis_mask or new_axis_mask:
        raise LoomValueError("loom.tf.strided_slice: ellipsis_mask and new_axis_mask are not supported; index the "
                             "tensor with Python slices (x[..., 1:3], x[:, tf.newaxis]) instead")
    idx: list = []
    for d, (s, t, k) in enumerate(zip(b, e, st)):
        if shrink_axis_mask >> d & 1:
            idx.append(s)
            continue
        idx.append(builtins.slice(None if begin_mask >> d & 1 else s, None if end_mask >> d & 1 else t, k))
    return x[tuple(idx)]


def gather_nd(params, indices, batch_dims=0, name=None) -> Tensor:
    """Elements or slices of `params` addressed by the last dimension of `indices` (per batch entry with
    `batch_dims`)."""
    p, idx = _t(params), _t(indices).to(loom.int64)
    b = int(batch_dims)
    if b:
        if tuple(p.shape[:b]) != tuple(idx.shape[:b]):
            raise ShapeError(f"loom.tf.gather_nd: with batch_dims={b}, params {list(p.shape)} and indices "
                             f"{list(idx.shape)} must share their first {b} dimensions")
        batch = list(p.shape[:b])
        nb = int(np.prod(batch))
        inner = idx.reshape([nb, -1, idx.shape[-1]])
        ids = loom.arange(nb, dtype=loom.int64).reshape(nb, 1, 1).expand(nb, inner.shape[1], 1)
        out = gather_nd(p.reshape([nb] + list(p.shape[b:])), loom.cat([ids, inner], dim=-1))
        return out.reshape(batch + list(idx.shape[b:-1]) + list(out.shape[2:]))
    k = idx.shape[-1]
    lead = list(idx.shape[:-1])
    flat_idx = idx.reshape(-1, k)
    strides = np.cumprod([1] + list(p.shape[:k])[::-1][:-1])[::-1].copy()
    lin = (flat_idx * loom.tensor(strides.astype(np.int64))).sum(-1)
    rows = p.reshape([-1] + list(p.shape[k:]))
    return loom.index_select(rows, 0, lin).reshape(lead + list(p.shape[k:]))


def boolean_mask(tensor, mask, axis=None, name="boolean_mask") -> Tensor:
    """The elements (or rows) of `tensor` where `mask` is true."""
    x, m = _t(tensor), _t(mask).to(loom.bool)
    k = m.ndim
    a = 0 if axis is None else int(axis) % x.ndim
    if tuple(x.shape[a:a + k]) != tuple(m.shape):
        raise ShapeError(f"loom.tf.boolean_mask: mask of shape {list(m.shape)} does not match dimensions {a}.."
                         f"{a + k - 1} of the tensor's shape {list(x.shape)}")
    rows = x.reshape(list(x.shape[:a]) + [-1] + list(x.shape[a + k:]))
    keep = np.nonzero(m.numpy().reshape(-1))[0]
    return loom.index_select(rows, a, loom.tensor(keep.astype(np.int64)))


def where(condition, x=None, y=None, name=None) -> Tensor:
    """Elementwise `x` where `condition` holds else `y`; with one argument, the int64 indices of true elements."""
    c = _t(condition).to(loom.bool)
    if x is None and y is None:
        return loom.tensor(np.argwhere(c.numpy()).astype(np.int64))
    if x is None or y is None:
        raise LoomValueError("loom.tf.where: give both x and y, or neither")
    return loom.where(c, _t(x), _t(y))


def one_hot(indices, depth, on_value=None, off_value=None, axis=None, dtype=None, name=None) -> Tensor:
    """One-hot vectors of length `depth` for `indices` (out-of-range indices give all `off_value`)."""
    idx = _t(indices)
    d = as_dtype(dtype) if dtype is not None else (_t(on_value).dtype if on_value is not None else float32)
    hot = idx.unsqueeze(-1).to(loom.int64) == loom.arange(int(depth), dtype=loom.int64)
    on = 1 if on_value is None else on_value
    off = 0 if off_value is None else off_value
    out = loom.where(hot, _t(on, d), _t(off, d))
    if axis is not None and int(axis) != -1:
        out = out.movedim(-1, int(axis))
    return out


def matmul(a, b, transpose_a=False, transpose_b=False, adjoint_a=False, adjoint_b=False, a_is_sparse=False,
           b_is_sparse=False, output_type=None, name=None) -> Tensor:
    """Matrix product of `a` and `b` (batched over leading dims), optionally transposing either."""
    x, y = _t(a), _t(b)
    if transpose_a or adjoint_a:
        x = x.transpose(-1, -2)
    if transpose_b or adjoint_b:
        y = y.transpose(-1, -2)
    return loom.matmul(x, y)


def einsum(equation, *inputs, **kwargs) -> Tensor:
    """Einstein summation over `inputs` as described by `equation`."""
    return loom.einsum(equation, *[_t(v) for v in inputs])


def tensordot(a, b, axes, name=None) -> Tensor:
    """Sum of products over the given axes of `a` and `b`."""
    return loom.tensordot(_t(a), _t(b), dims=axes)


def reverse(tensor, axis, name=None) -> Tensor:
    """`tensor` with the order of elements reversed along `axis`."""
    return _t(tensor).flip(*_ints(axis))


def broadcast_to(input, shape, name=None) -> Tensor:
    """`input` broadcast to `shape`."""
    return _t(input).expand(*_ints(shape)).clone()


def clip_by_value(t, clip_value_min, clip_value_max, name=None) -> Tensor:
    """`t` with values below `clip_value_min` or above `clip_value_max` set to those bounds."""
    x = _t(t)
    return loom.minimum(loom.maximum(x, _t(clip_value_min, x.dtype)), _t(clip_value_max, x.dtype))


def _sumsq(x):
    return (x.to(float32) * x.to(float32)).sum() if not x.dtype.is_floating_point else (x * x).sum()


def global_norm(t_list, name=None) -> Tensor:
    """sqrt(sum of squares of every element of every tensor in `t_list`); None entries are skipped."""
    terms = [_sumsq(_t(x)) for x in t_list if x is not None]
    return loom.sqrt(loom.stack(terms).sum()) if terms else loom.tensor(0.0)


def clip_by_norm(t, clip_norm, axes=None, name=None) -> Tensor:
    """`t` scaled so that its L2 norm (over `axes`) is at most `clip_norm`."""
    x = _t(t)
    dims = None if axes is None else tuple(_ints(axes))
    sq = (x * x).sum(dim=dims, keepdim=True) if dims is not None else (x * x).sum()
    norm = loom.sqrt(sq)
    c = _t(clip_norm, x.dtype)
    return x * c / loom.maximum(norm, c)


def clip_by_global_norm(t_list, clip_norm, use_norm=None, name=None):
    """Scale every tensor of `t_list` by clip_norm / max(global_norm, clip_norm); returns (list, global_norm)."""
    items = list(t_list)
    norm = global_norm(items) if use_norm is None else _t(use_norm)
    c = float(clip_norm)
    scale = c * loom.minimum(1.0 / norm, _t(1.0 / c, norm.dtype))
    return [None if x is None else _t(x) * scale.to(_t(x).dtype) for x in items], norm


def argmax(input, axis=None, output_type=int64, name=None) -> Tensor:
    """Index of the largest value along `axis` (0 by default), as int64."""
    return loom.argmax(_t(input), dim=0 if axis is None else int(axis)).to(as_dtype(output_type))


def argmin(input, axis=None, output_type=int64, name=None) -> Tensor:
    """Index of the smallest value along `axis` (0 by default), as int64."""
    return loom.argmin(_t(input), dim=0 if axis is None else int(axis)).to(as_dtype(output_type))


def sort(values, axis=-1, direction="ASCENDING", name=None) -> Tensor:
    """`values` sorted along `axis`."""
    return loom.sort(_t(values), dim=int(axis), descending=direction.upper() == "DESCENDING").values


def argsort(values, axis=-1, direction="ASCENDING", stable=False, name=None) -> Tensor:
    """Indices that sort `values` along `axis`, as int32."""
    return loom.argsort(_t(values), dim=int(axis), descending=direction.upper() == "DESCENDING").to(int32)


def unique(x, out_idx=int32, name=None):
    """The unique values of 1-D `x` in order of first appearance, and each element's index into them."""
    a = _t(x).numpy()
    vals, first, inv = np.unique(a, return_index=True, return_inverse=True)
    order = np.argsort(first)
    rank_of = np.empty_like(order)
    rank_of[order] = np.arange(len(order))
    return loom.tensor(vals[order]), loom.tensor(rank_of[inv].astype(as_dtype(out_idx).np))


def _axes(x, axis):
    if axis is None:
        return tuple(builtin_range(x.ndim))
    return tuple(sorted({a % x.ndim for a in _ints(axis)})) if x.ndim else ()


def reduce_sum(input_tensor, axis=None, keepdims=False, name=None) -> Tensor:
    """Sum over `axis` (all axes by default)."""
    x = _t(input_tensor)
    ax = _axes(x, axis)
    if x.dtype is loom.bool:
        x = x.to(int32)
    out = x.sum(dim=ax, keepdim=keepdims) if ax else (x * 1)
    return out.to(x.dtype) if out.dtype is not x.dtype else out


def reduce_mean(input_tensor, axis=None, keepdims=False, name=None) -> Tensor:
    """Mean over `axis` (all axes by default); integer means truncate as TensorFlow's do."""
    x = _t(input_tensor)
    ax = _axes(x, axis)
    if not ax:
        return x * 1
    if x.dtype.is_floating_point:
        return x.mean(dim=ax, keepdim=keepdims)
    n = int(np.prod([x.shape[a] for a in ax]))
    s = x.to(int64).sum(dim=ax, keepdim=keepdims)
    return loom.trunc(s.to(float64) / n).to(x.dtype)


def reduce_max(input_tensor, axis=None, keepdims=False, name=None) -> Tensor:
    """Maximum over `axis` (all axes by default)."""
    x = _t(input_tensor)
    ax = _axes(x, axis)
    return loom.amax(x, dim=ax, keepdim=keepdims) if ax else x * 1


def reduce_min(input_tensor, axis=None, keepdims=False, name=None) -> Tensor:
    """Minimum over `axis` (all axes by default)."""
    x = _t(input_tensor)
    ax = _axes(x, axis)
    return loom.amin(x, dim=ax, keepdim=keepdims) if ax else x * 1


def _each_axis(x, ax, keepdims, fn):
    for a in sorted(ax, reverse=True):
        x = fn(x, a, keepdims)
    return x


def reduce_prod(input_tensor, axis=None, keepdims=False, name=None) -> Tensor:
    """Product over `axis` (all axes by default)."""
    x = _t(input_tensor)
    return _each_axis(x, _axes(x, axis), keepdims, lambda v, a, k: loom.prod(v, dim=a, keepdim=k))


def reduce_any(input_tensor, axis=None, keepdims=False, name=None) -> Tensor:
    """Logical or over `axis` (all axes by default)."""
    x = _t(input_tensor).to(loom.bool)
    return _each_axis(x, _axes(x, axis), keepdims, lambda v, a, k: loom.any(v, dim=a, keepdim=k))


def reduce_all(input_tensor, axis=None, keepdims=False, name=None) -> Tensor:
    """Logical and over `axis` (all axes by default)."""
    x = _t(input_tensor).to(loom.bool)
    return _each_axis(x, _axes(x, axis), keepdims, lambda v, a, k: loom.all(v, dim=a, keepdim=k))


def reduce_logsumexp(input_tensor, axis=None, keepdims=False, name=None) -> Tensor:
    """log(sum(exp(x))) over `axis`, computed stably."""
    x = _t(input_tensor)
    ax = _axes(x, axis)
    return loom.logsumexp(x, dim=ax, keepdim=keepdims)


def reduce_variance(input_tensor, axis=None, keepdims=False, name=None) -> Tensor:
    """Population variance over `axis`."""
    x = _t(input_tensor)
    ax = _axes(x, axis)
    m = x.mean(dim=ax, keepdim=True)
    return ((x - m) ** 2).mean(dim=ax, keepdim=keepdims)


def reduce_std(input_tensor, axis=None, keepdims=False, name=None) -> Tensor:
    """Population standard deviation over `axis`."""
    return loom.sqrt(reduce_variance(input_tensor, axis, keepdims))


def norm(tensor, ord="euclidean", axis=None, keepdims=None, name=None) -> Tensor:
    """The Euclidean (or `ord`-) norm of `tensor` over `axis` (all elements by default)."""
    x = _t(tensor)
    ax = _axes(x, axis)
    p = 2 if ord in ("euclidean", "fro", 2) else ord
    if p == 1:
        return loom.abs(x).sum(dim=ax, keepdim=builtin_bool(keepdims))
    if p == np.inf:
        return loom.amax(loom.abs(x), dim=ax, keepdim=builtin_bool(keepdims))
    return loom.sqrt((x * x).sum(dim=ax, keepdim=builtin_bool(keepdims)))


def add_n(inputs, name=None) -> Tensor:
    """Elementwise sum of a list of tensors."""
    items = [_t(v) for v in inputs]
    out = items[0]
    for v in items[1:]:
        out = out + v
    return out


def cumsum(x, axis=0, exclusive=False, reverse=False, name=None) -> Tensor:
    """Cumulative sum along `axis` (optionally exclusive and/or from the end)."""
    v = _t(x)
    a = int(axis)
    if reverse:
        v = v.flip(a)
    out = loom.cumsum(v, dim=a)
    if exclusive:
        out = out - v
    return out.flip(a) if reverse else out


def cumprod(x, axis=0, exclusive=False, reverse=False, name=None) -> Tensor:
    """Cumulative product along `axis`."""
    v = _t(x)
    a = int(axis)
    if reverse:
        v = v.flip(a)
    if exclusive:
        n = v.shape[a]
        v = loom.cat([loom.ones_like(v.narrow(a, 0, 1)), v.narrow(a, 0, n - 1)], dim=a)
    out = loom.cumprod(v, dim=a)
    return out.flip(a) if reverse else out


def repeat(input, repeats, axis=None, name=None) -> Tensor:
    """Each element (or slice along `axis`) repeated `repeats` times; flattened first when `axis` is None."""
    x = _t(input)
    r = repeats if isinstance(repeats, int) else _t(repeats).to(loom.int64)
    if axis is None:
        return loom.repeat_interleave(x.reshape(-1), r)
    return loom.repeat_interleave(x, r, dim=int(axis))


def roll(input, shift, axis, name=None) -> Tensor:
    """`input` shifted cyclically by `shift` along `axis` (both may be lists)."""
    return loom.roll(_t(input), tuple(_ints(shift)), tuple(_ints(axis)))


def meshgrid(*args, indexing="xy", name=None) -> list:
    """Coordinate grids from 1-D tensors ('xy' or 'ij' indexing)."""
    return list(loom.meshgrid(*[_t(a) for a in args], indexing=indexing))


def sequence_mask(lengths, maxlen=None, dtype=bool, name=None) -> Tensor:
    """mask[..., j] = j < lengths[...], with `maxlen` columns (the largest length by default)."""
    n = _t(lengths)
    m = int(n.max()) if maxlen is None else int(maxlen)
    mask = loom.arange(m, dtype=n.dtype) < n.unsqueeze(-1)
    return mask if as_dtype(dtype) is loom.bool else mask.to(as_dtype(dtype))


def _linear_index(shape, idx) -> Tensor:
    k = idx.shape[-1]
    strides = np.cumprod([1] + list(shape[:k])[::-1][:-1])[::-1].copy()
    return (idx.to(loom.int64).reshape(-1, k) * loom.tensor(strides.astype(np.int64))).sum(-1)


def _scatter_rows(base: Tensor, indices, updates, mode: str) -> Tensor:
    idx = _t(indices)
    k = idx.shape[-1]
    rows = base.reshape([-1] + list(base.shape[k:]))
    upd = _t(updates, base.dtype).reshape([-1] + list(base.shape[k:]))
    lin = _linear_index(base.shape, idx)
    if mode == "add":
        out = loom.index_add(rows, 0, lin, upd)
    else:
        out = loom.index_copy(rows, 0, lin, upd)
    return out.reshape(base.shape)


def _scatter_reduce(tensor, indices, updates, fn) -> Tensor:
    """`tensor` with `fn(old, update)` written at `indices` (one update at a time, as TF's max/min/sub)."""
    base = _t(tensor)
    idx, upd = _t(indices), _t(updates, base.dtype)
    k = idx.shape[-1]
    lin = _linear_index(base.shape, idx).numpy()
    rows = base.reshape([-1] + list(base.shape[k:]))
    upd = upd.reshape([-1] + list(base.shape[k:]))
    for j, r in enumerate(lin.tolist()):
        rows = tensor_scatter_nd_update(rows, [[r]], fn(rows[r], upd[j]).unsqueeze(0))
    return rows.reshape(base.shape)


def tensor_scatter_nd_max(tensor, indices, updates, name=None) -> Tensor:
    """`tensor` with each element at `indices` replaced by the larger of it and its update."""
    return _scatter_reduce(tensor, indices, updates, loom.maximum)


def tensor_scatter_nd_min(tensor, indices, updates, name=None) -> Tensor:
    """`tensor` with each element at `indices` replaced by the smaller of it and its update."""
    return _scatter_reduce(tensor, indices, updates, loom.minimum)


def tensor_scatter_nd_sub(tensor, indices, updates, name=None) -> Tensor:
    """`tensor` with `updates` subtracted at `indices`."""
    return tensor_scatter_nd_add(tensor, indices, -_t(updates, _t(tensor).dtype))


def unique_with_counts(x, out_idx=int32, name=None):
    """`unique(x)` plus how often each unique value occurs (fields y, idx, count)."""
    y, idx = unique(x, out_idx)
    count = loom.tensor(np.bincount(idx.numpy().astype(np.int64), minlength=y.shape[0]).astype(as_dtype(out_idx).np))
    return _UniqueWithCounts(y, idx, count)


class _UniqueWithCounts(tuple):
    def __new__(cls, y, idx, count):
        return super().__new__(cls, (y, idx, count))

    y = property(lambda self: self[0])
    idx = property(lambda self: self[1])
    count = property(lambda self: self[2])


def searchsorted(sorted_sequence, values, side="left", out_type=int32, name=None) -> Tensor:
    """Insertion points of `values` in each row of `sorted_sequence` (the innermost dimension)."""
    seq, v = _t(sorted_sequence).numpy(), _t(values).numpy()
    if seq.ndim == 1:
        out = np.searchsorted(seq, v, side=side)
    else:
        out = np.stack([np.searchsorted(sr, vr, side=side) for sr, vr in zip(seq.reshape(-1, seq.shape[-1]),
                                                                              v.reshape(-1, v.shape[-1]))])
        out = out.reshape(v.shape)
    return loom.tensor(out.astype(as_dtype(out_type).np))


def histogram_fixed_width(values, value_range, nbins=100, dtype=int32, name=None) -> Tensor:
    """Counts of `values` in `nbins` equal bins over `value_range` (outliers go to the end bins)."""
    v = _t(values).numpy().astype(np.float64).reshape(-1)
    lo, hi = (float(r) for r in np.asarray(_t(value_range).numpy(), np.float64))
    bins = np.clip(np.floor((v - lo) / (hi - lo) * int(nbins)), 0, int(nbins) - 1).astype(np.int64)
    return loom.tensor(np.bincount(bins, minlength=int(nbins)).astype(as_dtype(dtype).np))


def reverse_sequence(input, seq_lengths, seq_axis=None, batch_axis=0, name=None) -> Tensor:
    """Each batch entry's first `seq_lengths[i]` elements along `seq_axis` reversed, the rest unchanged."""
    x = _t(input)
    lens = [int(n) for n in _t(seq_lengths).numpy().reshape(-1)]
    sa, ba = int(seq_axis) % x.ndim, int(batch_axis) % x.ndim
    n = x.shape[sa]
    order = np.tile(np.arange(n), (len(lens), 1))
    for i, k in enumerate(lens):
        order[i, :k] = order[i, :k][::-1]
    # Gather along seq_axis with a per-batch order: move batch and seq axes to the front, then back.
    rest = [d for d in builtin_range(x.ndim) if d not in (ba, sa)]
    xt = x.permute(ba, sa, *rest)
    out = gather(xt, loom.tensor(order), axis=1, batch_dims=1)
    inv = np.argsort([ba, sa] + rest)
    return out.permute(*[int(i) for i in inv])


def scatter_nd(indices, updates, shape, name=None) -> Tensor:
    """Zeros of `shape` with `updates` added at `indices` (duplicates add up)."""
    u = _t(updates)
    return _scatter_rows(loom.zeros(*_ints(shape), dtype=u.dtype), indices, u, "add")


def tensor_scatter_nd_update(tensor, indices, updates, name=None) -> Tensor:
    """`tensor` with the elements or slices at `indices` replaced by `updates`."""
    return _scatter_rows(_t(tensor), indices, updates, "update")


def tensor_scatter_nd_add(tensor, indices, updates, name=None) -> Tensor:
    """`tensor` with `updates` added at `indices`."""
    return _scatter_rows(_t(tensor), indices, updates, "add")


def unsorted_segment_sum(data, segment_ids, num_segments, name=None) -> Tensor:
    """Sums of the rows of `data` grouped by `segment_ids` into `num_segments` rows."""
    d, ids = _t(data), _t(segment_ids).to(loom.int64)
    out = loom.zeros(int(num_segments), *d.shape[ids.ndim:], dtype=d.dtype)
    return loom.index_add(out, 0, ids.reshape(-1), d.reshape([-1] + list(d.shape[ids.ndim:])))


def segment_sum(data, segment_ids, name=None) -> Tensor:
    """Sums of the rows of `data` grouped by sorted `segment_ids`."""
    ids = _t(segment_ids)
    return unsorted_segment_sum(data, ids, int(ids.max()) + 1 if ids.numel() else 0)
