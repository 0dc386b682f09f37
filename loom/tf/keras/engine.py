"""The Keras `Layer` base, symbolic `Input`s for the functional API, and the training-flag context."""
from __future__ import annotations

import inspect
import operator
import re

import numpy as np

import loom
from loom.errors import LoomTypeError, LoomValueError
from loom.tensor import Tensor
from loom.tf._core import Variable, as_dtype, convert_to_tensor, float32
from loom.tf.keras import initializers

_TRAINING: list = [None]   # The training flag of the enclosing layer call, as Keras propagates it.
_NAME_COUNTS: dict[str, int] = {}


def _snake(name: str) -> str:
    s = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub(r"([a-z])([A-Z])", r"\1_\2", s).lower()


def unique_name(base: str) -> str:
    """'dense', then 'dense_1', 'dense_2', ... as Keras names layers."""
    n = _NAME_COUNTS.get(base, 0)
    _NAME_COUNTS[base] = n + 1
    return base if n == 0 else f"{base}_{n}"


def clear_session() -> None:
    """Reset layer-name counters (as `keras.backend.clear_session`)."""
    _NAME_COUNTS.clear()


class KerasTensor:
    """A symbolic tensor of the functional API: a shape (None for the batch) and the layer call that made it."""

    def __init__(self, shape, dtype=float32, history=None, name=None) -> None:
        self.shape = tuple(shape)
        self.dtype = as_dtype(dtype)
        self.history = history  # (layer, args, kwargs, index) or None for an Input.
        self.name = name

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        return f"<KerasTensor shape={self.shape}, dtype={self.dtype.name}, name={self.name}>"

    # Operators record an operation layer in the functional graph, as Keras 3 does (`x + y`, `x[:, 0]`).
    def __add__(self, o):
        return _Operation(operator.add)([self, o])

    def __radd__(self, o):
        return _Operation(operator.add)([o, self])

    def __sub__(self, o):
        return _Operation(operator.sub)([self, o])

    def __rsub__(self, o):
        return _Operation(operator.sub)([o, self])

    def __mul__(self, o):
        return _Operation(operator.mul)([self, o])

    def __rmul__(self, o):
        return _Operation(operator.mul)([o, self])

    def __truediv__(self, o):
        return _Operation(operator.truediv)([self, o])

    def __rtruediv__(self, o):
        return _Operation(operator.truediv)([o, self])

    def __matmul__(self, o):
        return _Operation(operator.matmul)([self, o])

    def __pow__(self, o):
        return _Operation(operator.pow)([self, o])

    def __neg__(self):
        return _Operation(operator.neg)([self])

    def __getitem__(self, key):
        return _Operation(operator.getitem)([self, key])


def Input(shape=None, batch_size=None, dtype=None, name=None, batch_shape=None, **kwargs) -> KerasTensor:  # noqa: N802
    """A symbolic input of `shape` (without the batch dimension) for the functional API."""
    if batch_shape is not None:
        full = tuple(batch_shape)
    else:
        full = (batch_size,) + tuple(shape if shape is not None else ())
    layer = InputLayer(batch_shape=full, dtype=dtype, name=name)
    return layer.output


def _dummy(kt: KerasTensor) -> Tensor:
    shape = [1 if s is None else s for s in kt.shape]
    return loom.zeros(*shape, dtype=kt.dtype)


def _map_nest(fn, obj):
    if isinstance(obj, (list, tuple)):
        return type(obj)(_map_nest(fn, v) for v in obj)
    if isinstance(obj, dict):
        return {k: _map_nest(fn, v) for k, v in obj.items()}
    return fn(obj)


def _any_symbolic(obj) -> bool:
    if isinstance(obj, KerasTensor):
        return True
    if isinstance(obj, (list, tuple)):
        return any(_any_symbolic(v) for v in obj)
    if isinstance(obj, dict):
        return any(_any_symbolic(v) for v in obj.values())
    return False


def _shape_of(obj):
    if isinstance(obj, (list, tuple)):
        return [_shape_of(v) for v in obj]
    if isinstance(obj, dict):
        return {k: _shape_of(v) for k, v in obj.items()}
    return tuple(obj.shape) if hasattr(obj, "shape") else None


def _mask_of(inputs):
    """The Keras mask carried by an input tensor (or a list of the masks of a list of inputs)."""
    if isinstance(inputs, Tensor):
        return inputs.__dict__.get("_keras_mask")
    if isinstance(inputs, (list, tuple)):
        masks = [v.__dict__.get("_keras_mask") if isinstance(v, Tensor) else None for v in inputs]
        return masks if any(m is not None for m in masks) else None
    return None


def _batch_free(shape):
    """Shapes (a tuple, or lists/dicts of them) with the batch dimension unknown, as Keras reports them."""
    if isinstance(shape, list):
        return [_batch_free(s) for s in shape]
    if isinstance(shape, dict):
        return {k: _batch_free(s) for k, s in shape.items()}
    return (None,) + tuple(shape[1:]) if isinstance(shape, tuple) and shape else shape


def _to_input(x):
    """Layer inputs as Keras autocasts them: arrays become tensors, float64 becomes float32."""
    if isinstance(x, np.ndarray) or isinstance(x, (list, float, int)) and not isinstance(x, bool):
        x = convert_to_tensor(np.asarray(x))
    if isinstance(x, Tensor) and x.dtype is loom.float64:
        return x.to(loom.float32)
    return x


def _cast_float(v, dtype):
    return v.to(dtype) if isinstance(v, Tensor) and v.dtype.is_floating_point and v.dtype is not dtype else v


class Layer:
    """Base of Keras layers: weights made by `build` (via `add_weight`), computation in `call`.

    Sub-layers and variables assigned as attributes are tracked, so
    `trainable_variables` and `weights` collect them recursively.

    Examples
    --------
    >>> import loom.tf as tf
    >>> class Scale(tf.keras.layers.Layer):
    ...     def build(self, input_shape):
    ...         self.w = self.add_weight(shape=(input_shape[-1],), initializer="ones")
    ...     def call(self, x):
    ...         return x * self.w
    >>> Scale()(tf.ones((2, 3))).shape.as_list()
    [2, 3]
    """

    def __init__(self, trainable: bool = True, name: str | None = None, dtype=None, **kwargs) -> None:
        object.__setattr__(self, "_layers", [])
        object.__setattr__(self, "_own_weights", [])
        self.built = False
        self.trainable = trainable
        self.name = name or unique_name(_snake(type(self).__name__))
        from loom.tf.keras.mixed_precision import policy_of
        self.dtype_policy = policy_of(dtype)
        if self.dtype_policy.name != "float32" or dtype is None or not isinstance(dtype, (str, type(float32))):
            self.dtype = as_dtype(self.dtype_policy.variable_dtype)
        else:
            self.dtype = as_dtype(dtype)
        shape = kwargs.pop("input_shape", None)
        dim = kwargs.pop("input_dim", None)
        batch_input_shape = kwargs.pop("batch_input_shape", None)
        if dim is not None and shape is None:
            shape = (dim,)
        self._input_shape_arg = (None,) + tuple(shape) if shape is not None else (
            tuple(batch_input_shape) if batch_input_shape is not None else None)
        self._inbound = []
        self._out_shape = None
        self._losses: list = []
        kwargs.pop("autocast", None)
        from loom.tf.keras import regularizers
        self.activity_regularizer = regularizers.get(kwargs.pop("activity_regularizer", None))
        unsupported = sorted(k for k, v in kwargs.items() if v is not None)
        if unsupported:
            raise LoomTypeError(f"loom.tf.keras.layers.{type(self).__name__}: unsupported argument(s) {unsupported}")

    @property
    def compute_dtype(self) -> str:
        """The dtype the layer computes in (float16 under mixed_float16)."""
        return self.dtype_policy.compute_dtype if "dtype_policy" in self.__dict__ else self.dtype.name

    @property
    def variable_dtype(self) -> str:
        """The dtype of the layer's variables."""
        return self.dtype_policy.variable_dtype if "dtype_policy" in self.__dict__ else self.dtype.name

    def __setattr__(self, name: str, value) -> None:
        if "_layers" in self.__dict__:
            if isinstance(value, Layer) and value is not self and value not in self._layers:
                self._layers.append(value)
            elif isinstance(value, (list, tuple)) and not name.startswith("_"):
                for v in value:
                    if isinstance(v, Layer) and v not in self._layers:
                        self._layers.append(v)
            elif isinstance(value, Variable) and all(value is not w for w in self._own_weights):
                self._own_weights.append(value)
        object.__setattr__(self, name, value)

    # ------------------------------------------------------------ weights

    def add_weight(self, name=None, shape=None, initializer=None, dtype=None, trainable=True, regularizer=None,
                   constraint=None, **kwargs) -> Variable:
        """Create a variable owned by this layer (Glorot-uniform for floats unless `initializer` is given)."""
        if regularizer is not None:
            raise LoomValueError(f"loom.tf.keras: layer {self.name!r}: add_weight(regularizer=) is not "
                                 "supported; add the penalty with add_loss in call()")
        shape = tuple(int(s) for s in (shape or ()))
        init = initializers.get(initializer if initializer is not None else "glorot_uniform")
        d = as_dtype(dtype) if dtype is not None else float32
        value = init(shape, d) if not isinstance(init, (Tensor, np.ndarray)) else init
        v = Variable(value, trainable=trainable, name=f"{self.name}/{name or 'variable'}", dtype=d)
        v.__dict__["_keras_short"] = name or "variable"
        if constraint is not None:
            from loom.tf.keras import constraints
            v.__dict__["constraint"] = constraints.get(constraint)
        if not isinstance(init, (Tensor, np.ndarray)):
            v.__dict__["_keras_init"] = (init, shape, d)  # keras.models.clone_model draws fresh values from it.
        self._own_weights.append(v)
        return v

    def _all_layers(self) -> list:
        return list(self._layers)

    @property
    def trainable_weights(self) -> list:
        if not self.trainable:
            return []
        out = [w for w in self._own_weights if w.trainable]
        for layer in self._all_layers():
            out += layer.trainable_weights
        return _dedupe(out)

    @property
    def non_trainable_weights(self) -> list:
        if not self.trainable:
            return self.weights
        out = [w for w in self._own_weights if not w.trainable]
        for layer in self._all_layers():
            out += layer.non_trainable_weights
        return _dedupe(out)

    @property
    def weights(self) -> list:
        out = list(self._own_weights)
        for layer in self._all_layers():
            out += layer.weights
        return _dedupe(out)

    trainable_variables = trainable_weights
    non_trainable_variables = non_trainable_weights
    variables = weights

    def get_weights(self) -> list:
        """The weights' values as NumPy arrays, in `weights` order."""
        return [w.numpy().copy() for w in self.weights]

    def set_weights(self, weights) -> None:
        """Set every weight from a list of arrays in `weights` order."""
        mine = self.weights
        weights = list(weights)
        if len(weights) != len(mine):
            raise LoomValueError(f"loom.tf.keras: layer {self.name!r} has {len(mine)} weights, got {len(weights)}")
        for v, a in zip(mine, weights):
            a = np.asarray(a)
            if tuple(a.shape) != tuple(v.shape):
                raise LoomValueError(f"loom.tf.keras: weight {v.name} of layer {self.name!r} has shape "
                                     f"{list(v.shape)}, got an array of shape {list(a.shape)}")
            v.assign(a.astype(v.dtype.np))

    @property
    def losses(self) -> list:
        """Penalties (regularizers, `add_loss`) from this layer's and its sub-layers' last calls."""
        out = list(self._losses)
        for layer in self._all_layers():
            out += layer.losses
        return out

    def add_loss(self, loss) -> None:
        """Add a scalar to the training loss of the current call."""
        self._losses.append(loss)

    def count_params(self) -> int:
        return int(sum(w.numel() for w in self.weights))

    # ------------------------------------------------------------ calling

    def build(self, input_shape) -> None:
        """Create the layer's weights for inputs of `input_shape` (override in subclasses)."""
        self.built = True

    def call(self, inputs, *args, **kwargs):
        """The layer's computation (override in subclasses)."""
        return inputs

    def _call_takes(self, arg: str) -> bool:
        cache = type(self).__dict__.get("_takes_cache")
        if cache is None:
            cache = {}
            type.__setattr__(type(self), "_takes_cache", cache)
        if arg not in cache:
            params = inspect.signature(self.call).parameters
            cache[arg] = arg in params or any(p.kind is p.VAR_KEYWORD for p in params.values())
        return cache[arg]

    def _maybe_build(self, inputs) -> None:
        if not self.built:
            shape = _shape_of(inputs)
            self.build(shape)
            self.built = True

    def __call__(self, inputs, *args, **kwargs):
        if _any_symbolic(inputs) or _any_symbolic(args):
            return self._symbolic_call(inputs, args, kwargs)
        inputs = _map_nest(_to_input, inputs)
        training = kwargs.pop("training", None)
        if training is None:
            training = _TRAINING[-1]
        mask = kwargs.pop("mask", None)
        if mask is None:
            mask = _mask_of(inputs)
        if self._call_takes("mask") and mask is not None:
            kwargs["mask"] = mask
        if self._call_takes("training"):
            kwargs["training"] = training
        policy = self.__dict__.get("dtype_policy")
        compute = as_dtype(policy.compute_dtype) if policy is not None and policy.name.startswith("mixed") else None
        if compute is not None:
            # Mixed precision: loom runs the layer in its variables' dtype (float32; loom's kernels take one
            # dtype, where Keras autocasts the variables down) and returns the output in the compute dtype.
            inputs = _map_nest(lambda v: _cast_float(v, as_dtype(policy.variable_dtype)), inputs)
        elif policy is not None:  # A float32 layer after float16 ones (Keras's float32 output head).
            inputs = _map_nest(lambda v: _cast_float(v, as_dtype(policy.compute_dtype)) if isinstance(v, Tensor)
                               and v.dtype in (loom.float16, loom.bfloat16) else v, inputs)
        self._maybe_build(inputs)
        self._losses = []
        _TRAINING.append(training)
        try:
            out = self.call(inputs, *args, **kwargs)
        finally:
            _TRAINING.pop()
        if compute is not None and not self._layers:
            out = _map_nest(lambda v: _cast_float(v, compute), out)
        reg = self.__dict__.get("activity_regularizer")
        if reg is not None:  # Keras: the penalty of each output, divided by its batch size.
            for o in (out if isinstance(out, (list, tuple)) else [out]):
                if isinstance(o, Tensor):
                    pen = reg(o)
                    self.add_loss(pen / o.shape[0] if o.ndim else pen)
        self._out_shape = _batch_free(_shape_of(out))
        if mask is not None or type(self).compute_mask is not Layer.compute_mask:
            out_mask = self.compute_mask(inputs, mask)
            if out_mask is not None and isinstance(out, Tensor):
                out.__dict__["_keras_mask"] = out_mask
        return out

    # Keras masking: a layer that `supports_masking` passes its input's mask on to its output;
    # `compute_mask` makes (Embedding(mask_zero=True)) or drops (a pooling over time) the mask.
    supports_masking = False

    def compute_mask(self, inputs, mask=None):
        """The mask of this layer's output (the input's mask if the layer supports masking)."""
        return mask if self.supports_masking else None

    def _symbolic_call(self, inputs, args, kwargs):
        """Functional API: record the call and infer output shapes by running on batch-1 zeros."""
        concrete = _map_nest(lambda v: _dummy(v) if isinstance(v, KerasTensor) else v, inputs)
        cargs = _map_nest(lambda v: _dummy(v) if isinstance(v, KerasTensor) else v, args)
        ckw = {k: _map_nest(lambda v: _dummy(v) if isinstance(v, KerasTensor) else v, v) for k, v in kwargs.items()}
        with loom.no_grad():
            out = self(concrete, *cargs, **dict(ckw, training=False))
        counter = [0]

        def sym(t):
            k = counter[0]
            counter[0] += 1
            return KerasTensor((None,) + tuple(t.shape[1:]), t.dtype, (self, inputs, args, kwargs, k),
                               name=f"{self.name}_out{k}")
        result = _map_nest(sym, out)
        self._out_shape = _map_nest(lambda kt: kt.shape, result)
        return result

    @property
    def output_shape(self):
        return self._out_shape

    def compute_output_shape(self, input_shape):
        """The output shape for `input_shape` (from a batch-1 trial call)."""
        kt = KerasTensor(tuple(input_shape))
        return self._symbolic_call(kt, (), {}).shape

    def get_config(self) -> dict:
        return {"name": self.name, "trainable": self.trainable}

    @classmethod
    def from_config(cls, config: dict):
        """A new layer from `get_config()`'s dict: `cls(**config)` (Keras's default)."""
        return cls(**config)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} name={self.name}, built={self.built}>"


def _dedupe(items: list) -> list:
    seen: set = set()
    out = []
    for w in items:
        if id(w) not in seen:
            seen.add(id(w))
            out.append(w)
    return out


class InputLayer(Layer):
    """The layer behind `keras.Input`: holds the input's shape and passes values through."""

    def __init__(self, shape=None, batch_size=None, dtype=None, name=None, batch_shape=None, **kwargs) -> None:
        super().__init__(name=name or unique_name("input_layer"))
        if batch_shape is None:
            batch_shape = (batch_size,) + tuple(shape or ())
        self.batch_shape = tuple(batch_shape)
        self.built = True
        d = as_dtype(dtype) if dtype is not None else float32
        self.output = KerasTensor(self.batch_shape, d, None, name=self.name)
        self.output._input_layer = self
        self._out_shape = self.batch_shape

    def call(self, inputs):
        return inputs


class _Operation(Layer):
    """An operator applied to symbolic tensors in the functional API (`x + y`, `x * 2`, `x[:, 0]`)."""

    def __init__(self, fn, name=None) -> None:
        super().__init__(name=name or unique_name(fn.__name__.strip("_")))
        self.fn = fn

    def __call__(self, inputs, *args, **kwargs):
        # Keys of `x[...]` (slices, tuples, None) are not tensors: keep them out of the input conversion.
        if self.fn is operator.getitem and not args:
            return super().__call__([inputs[0]], _Key(inputs[1]), **kwargs)
        return super().__call__(inputs, *args, **kwargs)

    def call(self, inputs, key=None):
        if key is not None:
            return inputs[0][key.key]
        return self.fn(*inputs)


class _Key:
    """An indexing key carried through a functional-graph call unchanged."""

    def __init__(self, key) -> None:
        self.key = key
