"""`keras.layers`: Dense, Conv2D, pooling, normalization, Embedding, LSTM, attention and merge layers.

Layouts and defaults are Keras's: channels-last images, kernels [*k, in, out],
Glorot-uniform kernels and zero biases, BatchNormalization momentum 0.99 and
epsilon 1e-3, LSTM gates in the order input, forget, cell, output.
"""
from __future__ import annotations

import math

import numpy as np

import loom
import loom.nn.functional as F
from loom.errors import LoomValueError
from loom.tf import nn as tfnn
from loom.tf._core import convert_to_tensor as _convert_to_tensor
from loom.tf.keras import activations, initializers, regularizers
from loom.tf.keras.engine import Input, InputLayer, KerasTensor, Layer  # noqa: F401


def _tuple(v, n: int) -> tuple:
    return tuple(v) if isinstance(v, (list, tuple)) else (int(v),) * n


class Dense(Layer):
    """y = activation(x @ kernel + bias) over the last axis."""

    def __init__(self, units, activation=None, use_bias=True, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", kernel_regularizer=None, bias_regularizer=None, kernel_constraint=None,
                 bias_constraint=None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.kernel_constraint, self.bias_constraint = kernel_constraint, bias_constraint
        self.units = int(units)
        self.activation = activations.get(activation)
        self.use_bias = use_bias
        self.kernel_initializer = initializers.get(kernel_initializer)
        self.bias_initializer = initializers.get(bias_initializer)
        self.kernel_regularizer = regularizers.get(kernel_regularizer)
        self.bias_regularizer = regularizers.get(bias_regularizer)

    def build(self, input_shape) -> None:
        self.kernel = self.add_weight("kernel", (input_shape[-1], self.units), self.kernel_initializer,
                                      constraint=self.kernel_constraint)
        if self.use_bias:
            self.bias = self.add_weight("bias", (self.units,), self.bias_initializer, constraint=self.bias_constraint)

    def call(self, inputs):
        _regularize(self)
        y = loom.matmul(inputs, self.kernel)
        if self.use_bias:
            y = y + self.bias
        return self.activation(y)


class EinsumDense(Layer):
    """y = einsum(equation, x, kernel) + bias, the projection MultiHeadAttention uses."""

    def __init__(self, equation, output_shape, bias_axes=None, activation=None, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", **kwargs) -> None:
        super().__init__(**kwargs)
        self.equation = equation
        self.partial_output_shape = tuple(output_shape) if isinstance(output_shape, (list, tuple)) else (output_shape,)
        self.bias_axes = bias_axes
        self.activation = activations.get(activation)
        self.kernel_initializer = initializers.get(kernel_initializer)
        self.bias_initializer = initializers.get(bias_initializer)

    def build(self, input_shape) -> None:
        lhs, out = self.equation.split("->")
        x_sub, k_sub = lhs.split(",")
        x_core = x_sub.replace("...", "")
        sizes = dict(zip(x_core, list(input_shape)[-len(x_core):]))
        out_core = out.replace("...", "")
        for ch, s in zip(out_core[-len(self.partial_output_shape):], self.partial_output_shape):
            if s is not None:
                sizes[ch] = s
        kshape = tuple(sizes[c] for c in k_sub)
        self.kernel = self.add_weight("kernel", kshape, self.kernel_initializer)
        if self.bias_axes:
            bshape = tuple(sizes[c] for c in out_core if c in self.bias_axes)
            self.bias = self.add_weight("bias", bshape, self.bias_initializer)
            self._bias_rank = len(out_core) - out_core.index(self.bias_axes[0])
        else:
            self.bias = None

    def call(self, inputs):
        y = loom.einsum(self.equation, inputs, self.kernel)
        if self.bias is not None:
            y = y + self.bias
        return self.activation(y)


class Conv2D(Layer):
    """2-D convolution over NHWC inputs with an [kh, kw, in, filters] kernel; padding 'valid' or 'same'."""

    def __init__(self, filters, kernel_size, strides=(1, 1), padding="valid", data_format=None,
                 dilation_rate=(1, 1), groups=1, activation=None, use_bias=True, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", kernel_regularizer=None, bias_regularizer=None, **kwargs) -> None:
        super().__init__(**kwargs)
        if data_format not in (None, "channels_last"):
            raise LoomValueError("loom.tf.keras.layers.Conv2D: only data_format='channels_last' is supported")
        self.filters = int(filters)
        self.kernel_size = _tuple(kernel_size, 2)
        self.strides = _tuple(strides, 2)
        self.padding = padding.lower()
        self.dilation_rate = _tuple(dilation_rate, 2)
        self.groups = int(groups)
        self.activation = activations.get(activation)
        self.use_bias = use_bias
        self.kernel_initializer = initializers.get(kernel_initializer)
        self.bias_initializer = initializers.get(bias_initializer)
        self.kernel_regularizer = regularizers.get(kernel_regularizer)
        self.bias_regularizer = regularizers.get(bias_regularizer)

    def build(self, input_shape) -> None:
        cin = input_shape[-1]
        self.kernel = self.add_weight("kernel", self.kernel_size + (cin // self.groups, self.filters),
                                      self.kernel_initializer)
        if self.use_bias:
            self.bias = self.add_weight("bias", (self.filters,), self.bias_initializer)

    def call(self, inputs):
        _regularize(self)
        padding = self.padding.upper()
        if padding == "CAUSAL":  # Conv1D: left-pad so step t sees only steps <= t.
            if inputs.ndim != 3:
                raise LoomValueError(f"loom.tf.keras.layers.{type(self).__name__}: padding='causal' is for 1-D "
                                     "convolutions (Conv1D)")
            left = (self.kernel_size[0] - 1) * self.dilation_rate[0]
            inputs = loom.cat([loom.zeros(inputs.shape[0], left, inputs.shape[2], dtype=inputs.dtype), inputs], dim=1)
            padding = "VALID"
        y = tfnn.convolution(inputs, self.kernel, self.strides, padding, dilations=self.dilation_rate)
        if self.use_bias:
            y = y + self.bias
        return self.activation(y)


class Conv1D(Conv2D):
    """1-D convolution over NWC inputs with a [k, in, filters] kernel."""

    def __init__(self, filters, kernel_size, strides=1, padding="valid", dilation_rate=1, **kwargs) -> None:
        super().__init__(filters, 1, 1, padding, dilation_rate=1, **kwargs)
        self.kernel_size = _tuple(kernel_size, 1)
        self.strides = _tuple(strides, 1)
        self.dilation_rate = _tuple(dilation_rate, 1)


class DepthwiseConv2D(Layer):
    """Per-channel 2-D convolution over NHWC inputs: a [kh, kw, in, depth_multiplier] kernel."""

    def __init__(self, kernel_size, strides=(1, 1), padding="valid", depth_multiplier=1, data_format=None,
                 dilation_rate=(1, 1), activation=None, use_bias=True, depthwise_initializer="glorot_uniform",
                 bias_initializer="zeros", depthwise_regularizer=None, bias_regularizer=None, **kwargs) -> None:
        super().__init__(**kwargs)
        if data_format not in (None, "channels_last"):
            raise LoomValueError(f"loom.tf.keras.layers.{type(self).__name__}: only data_format='channels_last' "
                                 "is supported")
        self.kernel_size, self.strides = _tuple(kernel_size, 2), _tuple(strides, 2)
        self.padding, self.dilation_rate = padding.upper(), _tuple(dilation_rate, 2)
        self.depth_multiplier = int(depth_multiplier)
        self.activation = activations.get(activation)
        self.use_bias = use_bias
        self.depthwise_initializer = initializers.get(depthwise_initializer)
        self.bias_initializer = initializers.get(bias_initializer)
        self.kernel_regularizer = regularizers.get(depthwise_regularizer)
        self.bias_regularizer = regularizers.get(bias_regularizer)

    def build(self, input_shape) -> None:
        cin = input_shape[-1]
        self.kernel = self.add_weight("kernel", self.kernel_size + (cin, self.depth_multiplier),
                                      self.depthwise_initializer)
        if self.use_bias:
            self.bias = self.add_weight("bias", (cin * self.depth_multiplier,), self.bias_initializer)

    def _depthwise(self, x):
        return tfnn.depthwise_conv2d(x, self.kernel, self.strides, self.padding, dilations=self.dilation_rate)

    def call(self, inputs):
        _regularize(self)
        y = self._depthwise(inputs)
        if self.use_bias:
            y = y + self.bias
        return self.activation(y)


class SeparableConv2D(DepthwiseConv2D):
    """A depthwise 2-D convolution followed by a 1x1 (pointwise) convolution to `filters` channels."""

    def __init__(self, filters, kernel_size, strides=(1, 1), padding="valid", data_format=None,
                 dilation_rate=(1, 1), depth_multiplier=1, activation=None, use_bias=True,
                 depthwise_initializer="glorot_uniform", pointwise_initializer="glorot_uniform",
                 bias_initializer="zeros", **kwargs) -> None:
        super().__init__(kernel_size, strides, padding, depth_multiplier, data_format, dilation_rate, activation,
                         use_bias, depthwise_initializer, bias_initializer, **kwargs)
        self.filters = int(filters)
        self.pointwise_initializer = initializers.get(pointwise_initializer)

    def build(self, input_shape) -> None:
        cin = input_shape[-1]
        self.depthwise_kernel = self.add_weight("depthwise_kernel", self.kernel_size + (cin, self.depth_multiplier),
                                                self.depthwise_initializer)
        self.pointwise_kernel = self.add_weight("pointwise_kernel", (1, 1, cin * self.depth_multiplier,
                                                                     self.filters), self.pointwise_initializer)
        if self.use_bias:
            self.bias = self.add_weight("bias", (self.filters,), self.bias_initializer)

    def _depthwise(self, x):
        y = tfnn.depthwise_conv2d(x, self.depthwise_kernel, self.strides, self.padding, dilations=self.dilation_rate)
        return tfnn.convolution(y, self.pointwise_kernel, 1, "VALID")

    def call(self, inputs):
        y = self._depthwise(inputs)
        if self.use_bias:
            y = y + self.bias
        return self.activation(y)


class _Pool2D(Layer):
    def __init__(self, pool_size=(2, 2), strides=None, padding="valid", data_format=None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.pool_size = _tuple(pool_size, 2)
        self.strides = _tuple(strides, 2) if strides is not None else self.pool_size
        self.padding = padding.upper()


class MaxPooling2D(_Pool2D):
    """Max over pool_size windows (strides default to pool_size) of NHWC inputs."""

    def call(self, inputs):
        return tfnn.max_pool2d(inputs, self.pool_size, self.strides, self.padding)


class AveragePooling2D(_Pool2D):
    """Mean over pool_size windows (strides default to pool_size) of NHWC inputs."""

    def call(self, inputs):
        return tfnn.avg_pool2d(inputs, self.pool_size, self.strides, self.padding)


MaxPool2D = MaxPooling2D
AvgPool2D = AveragePooling2D


class GlobalAveragePooling2D(Layer):
    """Mean over the spatial dimensions of NHWC inputs."""

    def __init__(self, data_format=None, keepdims=False, **kwargs) -> None:
        super().__init__(**kwargs)
        self.keepdims = keepdims

    def call(self, inputs):
        return inputs.mean(dim=(1, 2), keepdim=self.keepdims)


class GlobalMaxPooling2D(GlobalAveragePooling2D):
    """Maximum over the spatial dimensions of NHWC inputs."""

    def call(self, inputs):
        return loom.amax(inputs, dim=(1, 2), keepdim=self.keepdims)


class GlobalAveragePooling1D(GlobalAveragePooling2D):
    """Mean over the steps of [batch, steps, features] inputs."""

    def call(self, inputs, mask=None):
        if mask is None:
            return inputs.mean(dim=1, keepdim=self.keepdims)
        m = mask.to(inputs.dtype).unsqueeze(-1)
        return (inputs * m).sum(dim=1, keepdim=self.keepdims) / m.sum(dim=1, keepdim=self.keepdims)

    def compute_mask(self, inputs, mask=None):
        return None


GlobalAvgPool2D = GlobalAveragePooling2D
GlobalMaxPool2D = GlobalMaxPooling2D


class _Pool1D(Layer):
    def __init__(self, pool_size=2, strides=None, padding="valid", data_format=None, **kwargs) -> None:
        super().__init__(**kwargs)
        if data_format not in (None, "channels_last"):
            raise LoomValueError(f"loom.tf.keras.layers.{type(self).__name__}: only data_format='channels_last' is "
                                 "supported")
        self.pool_size = _tuple(pool_size, 1)
        self.strides = _tuple(strides, 1) if strides is not None else self.pool_size
        self.padding = padding.upper()


class MaxPooling1D(_Pool1D):
    """Max over pool_size steps (strides default to pool_size) of [batch, steps, features] inputs."""

    def call(self, inputs):
        return tfnn.max_pool2d(inputs.unsqueeze(1), (1,) + self.pool_size, (1,) + self.strides, self.padding)[:, 0]


class AveragePooling1D(_Pool1D):
    """Mean over pool_size steps (strides default to pool_size) of [batch, steps, features] inputs."""

    def call(self, inputs):
        return tfnn.avg_pool2d(inputs.unsqueeze(1), (1,) + self.pool_size, (1,) + self.strides, self.padding)[:, 0]


class GlobalMaxPooling1D(GlobalAveragePooling2D):
    """Maximum over the steps of [batch, steps, features] inputs."""

    def call(self, inputs):
        return loom.amax(inputs, dim=1, keepdim=self.keepdims)


MaxPool1D = MaxPooling1D
AvgPool1D = AveragePooling1D
GlobalAvgPool1D = GlobalAveragePooling1D
GlobalMaxPool1D = GlobalMaxPooling1D


class Conv2DTranspose(Layer):
    """Transposed 2-D convolution of NHWC inputs with a [kh, kw, filters, in] kernel; padding 'valid' or 'same'."""

    def __init__(self, filters, kernel_size, strides=(1, 1), padding="valid", output_padding=None, data_format=None,
                 dilation_rate=(1, 1), activation=None, use_bias=True, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", kernel_regularizer=None, bias_regularizer=None, **kwargs) -> None:
        super().__init__(**kwargs)
        if data_format not in (None, "channels_last"):
            raise LoomValueError("loom.tf.keras.layers.Conv2DTranspose: only data_format='channels_last' is supported")
        if _tuple(dilation_rate, 2) != (1, 1) or output_padding is not None:
            raise LoomValueError("loom.tf.keras.layers.Conv2DTranspose: dilation_rate other than 1 and "
                                 "output_padding are not supported")
        self.filters = int(filters)
        self.kernel_size = _tuple(kernel_size, 2)
        self.strides = _tuple(strides, 2)
        self.padding = padding.lower()
        if self.padding not in ("valid", "same"):
            raise LoomValueError(f"loom.tf.keras.layers.Conv2DTranspose: padding must be 'valid' or 'same', got "
                                 f"{padding!r}")
        self.activation = activations.get(activation)
        self.use_bias = use_bias
        self.kernel_initializer = initializers.get(kernel_initializer)
        self.bias_initializer = initializers.get(bias_initializer)
        self.kernel_regularizer = regularizers.get(kernel_regularizer)
        self.bias_regularizer = regularizers.get(bias_regularizer)

    def build(self, input_shape) -> None:
        self.kernel = self.add_weight("kernel", self.kernel_size + (self.filters, input_shape[-1]),
                                      self.kernel_initializer)
        if self.use_bias:
            self.bias = self.add_weight("bias", (self.filters,), self.bias_initializer)

    def call(self, inputs):
        _regularize(self)
        return self._transpose(inputs, self.kernel)

    def _transpose(self, inputs, kernel):
        x = inputs.permute(0, 3, 1, 2)
        y = F.conv_transpose2d(x, kernel.permute(3, 2, 0, 1), stride=self.strides)
        # Full output is (n - 1) * s + k; TensorFlow's is n * s ('same') or (n - 1) * s + max(k, s) ('valid').
        for axis, (n, k, st) in enumerate(zip(x.shape[2:], self.kernel_size, self.strides)):
            want = n * st if self.padding == "same" else (n - 1) * st + max(k, st)
            have = y.shape[2 + axis]
            if have > want:
                top = (k - st) // 2 if self.padding == "same" else 0
                y = y.narrow(2 + axis, top, want)
            elif have < want:
                pad = [0, 0, 0, 0]
                pad[2 * (1 - axis) + 1] = want - have
                y = F.pad(y, pad)
        y = y.permute(0, 2, 3, 1)
        if self.use_bias:
            y = y + self.bias
        return self.activation(y)


Convolution2DTranspose = Conv2DTranspose


class RepeatVector(Layer):
    """[batch, features] to [batch, n, features]."""

    def __init__(self, n, **kwargs) -> None:
        super().__init__(**kwargs)
        self.n = int(n)

    def call(self, inputs):
        return inputs.unsqueeze(1).expand(inputs.shape[0], self.n, *inputs.shape[1:]).clone()


class Permute(Layer):
    """Permute the non-batch axes by `dims` (1-based, as Keras)."""

    def __init__(self, dims, **kwargs) -> None:
        super().__init__(**kwargs)
        self.dims = tuple(int(d) for d in dims)
        if sorted(self.dims) != list(range(1, len(self.dims) + 1)):
            raise LoomValueError(f"loom.tf.keras.layers.Permute: dims must be a permutation of 1..{len(self.dims)}, "
                                 f"got {self.dims}")

    def call(self, inputs):
        return inputs.permute(0, *self.dims)


class TimeDistributed(Layer):
    """Apply `layer` to every step of [batch, steps, ...] inputs (the steps folded into the batch)."""

    def __init__(self, layer, **kwargs) -> None:
        super().__init__(**kwargs)
        self.layer = layer

    def call(self, inputs, training=None):
        b, t = inputs.shape[0], inputs.shape[1]
        y = self.layer(inputs.reshape(b * t, *inputs.shape[2:]), training=training)
        return y.reshape(b, t, *y.shape[1:])


class Bidirectional(Layer):
    """Run a recurrent `layer` forwards and a copy of it backwards; merge their outputs (`merge_mode`:
    'concat', 'sum', 'mul', 'ave' or None for a list)."""

    def __init__(self, layer, merge_mode="concat", weights=None, backward_layer=None, **kwargs) -> None:
        super().__init__(**kwargs)
        import copy
        if merge_mode not in ("concat", "sum", "mul", "ave", None):
            raise LoomValueError(f"loom.tf.keras.layers.Bidirectional: merge_mode must be one of 'concat', 'sum', "
                                 f"'mul', 'ave' or None, got {merge_mode!r}")
        if weights is not None:
            raise LoomValueError("loom.tf.keras.layers.Bidirectional: initial `weights` are not supported; call "
                                 "set_weights after building")
        self.forward_layer = layer
        if backward_layer is None:
            backward_layer = copy.deepcopy(layer)
            backward_layer.go_backwards = not layer.go_backwards
        self.backward_layer = backward_layer
        self.merge_mode = merge_mode
        self.return_sequences = layer.return_sequences
        self.return_state = layer.return_state

    def call(self, inputs, training=None, mask=None):
        f = self.forward_layer(inputs, training=training, mask=mask)
        b = self.backward_layer(inputs, training=training, mask=mask)
        f_states, b_states = [], []
        if self.return_state:
            f, f_states = f[0], list(f[1:])
            b, b_states = b[0], list(b[1:])
        if self.return_sequences:
            b = b.flip(1)
        if self.merge_mode == "concat":
            out = loom.cat([f, b], dim=-1)
        elif self.merge_mode == "sum":
            out = f + b
        elif self.merge_mode == "mul":
            out = f * b
        elif self.merge_mode == "ave":
            out = (f + b) / 2
        else:
            out = [f, b]
        if self.return_state:
            return (out if isinstance(out, list) else [out]) + f_states + b_states
        return out

    def compute_mask(self, inputs, mask=None):
        return mask if self.return_sequences and not self.return_state else None


class Flatten(Layer):
    """[batch, ...] to [batch, features]."""

    def call(self, inputs):
        return inputs.reshape(inputs.shape[0], -1)


class Reshape(Layer):
    """[batch, ...] to [batch, *target_shape] (one entry may be -1)."""

    def __init__(self, target_shape, **kwargs) -> None:
        super().__init__(**kwargs)
        self.target_shape = tuple(target_shape)

    def call(self, inputs):
        return inputs.reshape(inputs.shape[0], *self.target_shape)


class Dropout(Layer):
    """Zero inputs with probability `rate` (scaling the rest by 1 / (1 - rate)) while training."""

    def __init__(self, rate, noise_shape=None, seed=None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.rate = float(rate)
        self.noise_shape = noise_shape
        self.seed = seed

    def call(self, inputs, training=None):
        if not training or self.rate == 0:
            return inputs
        return tfnn.dropout(inputs, self.rate, self.noise_shape)


class Activation(Layer):
    """activation(inputs)."""

    def __init__(self, activation, **kwargs) -> None:
        super().__init__(**kwargs)
        self.activation = activations.get(activation)

    def call(self, inputs):
        return self.activation(inputs)


class ReLU(Layer):
    """max(x, 0) with optional cap, leak and threshold."""

    def __init__(self, max_value=None, negative_slope=0.0, threshold=0.0, **kwargs) -> None:
        super().__init__(**kwargs)
        self.max_value, self.negative_slope, self.threshold = max_value, negative_slope, threshold

    def call(self, inputs):
        return activations.relu(inputs, self.negative_slope, self.max_value)


class LeakyReLU(Layer):
    """x if x > 0 else negative_slope * x (0.3 by default)."""

    def __init__(self, negative_slope=0.3, **kwargs) -> None:
        kwargs.pop("alpha", None)
        super().__init__(**kwargs)
        self.negative_slope = negative_slope

    def call(self, inputs):
        return F.leaky_relu(inputs, self.negative_slope)


class Softmax(Layer):
    """Softmax along `axis`."""

    def __init__(self, axis=-1, **kwargs) -> None:
        super().__init__(**kwargs)
        self.axis = axis

    def call(self, inputs, mask=None):
        return F.softmax(inputs, dim=self.axis)


class ELU(Layer):
    """x if x > 0 else alpha * (exp(x) - 1)."""

    def __init__(self, alpha=1.0, **kwargs) -> None:
        super().__init__(**kwargs)
        self.alpha = float(alpha)

    def call(self, inputs):
        return F.elu(inputs, self.alpha)


class PReLU(Layer):
    """x if x > 0 else alpha * x, with a learned `alpha` per feature (shared over `shared_axes`)."""

    def __init__(self, alpha_initializer="zeros", alpha_regularizer=None, alpha_constraint=None, shared_axes=None,
                 **kwargs) -> None:
        super().__init__(**kwargs)
        self.alpha_initializer = initializers.get(alpha_initializer)
        self.shared_axes = [] if shared_axes is None else ([shared_axes] if isinstance(shared_axes, int)
                                                           else list(shared_axes))

    def build(self, input_shape) -> None:
        shape = [1 if i in self.shared_axes else d for i, d in enumerate(input_shape) if i > 0]
        self.alpha = self.add_weight("alpha", tuple(shape), self.alpha_initializer)

    def call(self, inputs):
        return loom.where(inputs > 0, inputs, inputs * self.alpha)


class Identity(Layer):
    """Returns its input unchanged."""

    def call(self, inputs):
        return inputs


class GaussianNoise(Layer):
    """Add zero-mean Gaussian noise of standard deviation `stddev` while training."""

    def __init__(self, stddev, seed=None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.stddev = float(stddev)

    def call(self, inputs, training=None):
        if not training or self.stddev == 0:
            return inputs
        return inputs + loom.randn(*inputs.shape, dtype=inputs.dtype) * self.stddev


class GaussianDropout(Layer):
    """Multiply by Gaussian noise of mean 1 and variance rate / (1 - rate) while training."""

    def __init__(self, rate, seed=None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.rate = float(rate)

    def call(self, inputs, training=None):
        if not training or self.rate == 0:
            return inputs
        std = math.sqrt(self.rate / (1.0 - self.rate))
        return inputs * (1.0 + loom.randn(*inputs.shape, dtype=inputs.dtype) * std)


class SpatialDropout1D(Dropout):
    """Dropout of whole feature channels of [batch, steps, features] inputs while training."""

    def call(self, inputs, training=None):
        if not training or self.rate == 0:
            return inputs
        return tfnn.dropout(inputs, self.rate, (inputs.shape[0], 1, inputs.shape[-1]))


class SpatialDropout2D(Dropout):
    """Dropout of whole feature maps of NHWC inputs while training."""

    def __init__(self, rate, data_format=None, seed=None, **kwargs) -> None:
        super().__init__(rate, seed=seed, **kwargs)

    def call(self, inputs, training=None):
        if not training or self.rate == 0:
            return inputs
        return tfnn.dropout(inputs, self.rate, (inputs.shape[0], 1, 1, inputs.shape[-1]))


class Cropping1D(Layer):
    """Remove `cropping` = (start, end) steps of [batch, steps, features] inputs."""

    def __init__(self, cropping=(1, 1), **kwargs) -> None:
        super().__init__(**kwargs)
        self.cropping = (int(cropping), int(cropping)) if isinstance(cropping, int) else tuple(cropping)

    def call(self, inputs):
        a, b = self.cropping
        return inputs[:, a:inputs.shape[1] - b]


class Cropping2D(Layer):
    """Remove rows and columns at the borders of NHWC images: ((top, bottom), (left, right))."""

    def __init__(self, cropping=((0, 0), (0, 0)), data_format=None, **kwargs) -> None:
        super().__init__(**kwargs)
        c = cropping
        if isinstance(c, int):
            c = ((c, c), (c, c))
        elif isinstance(c[0], int):
            c = ((c[0], c[0]), (c[1], c[1]))
        self.cropping = tuple(tuple(int(v) for v in p) for p in c)

    def call(self, inputs):
        (t, b), (left, r) = self.cropping
        return inputs[:, t:inputs.shape[1] - b, left:inputs.shape[2] - r]


class UpSampling1D(Layer):
    """Repeat each step of [batch, steps, features] inputs `size` times."""

    def __init__(self, size=2, **kwargs) -> None:
        super().__init__(**kwargs)
        self.size = int(size)

    def call(self, inputs):
        return loom.repeat_interleave(inputs, self.size, dim=1)


class ZeroPadding1D(Layer):
    """Zero steps at the start and end of [batch, steps, features] inputs."""

    def __init__(self, padding=1, **kwargs) -> None:
        super().__init__(**kwargs)
        self.padding = (int(padding), int(padding)) if isinstance(padding, int) else tuple(padding)

    def call(self, inputs):
        return loom.pad(inputs, [0, 0, self.padding[0], self.padding[1]])


class GroupNormalization(Layer):
    """Normalize each example over groups of channels (the last axis), then scale and shift; epsilon 1e-3."""

    def __init__(self, groups=32, axis=-1, epsilon=1e-3, center=True, scale=True, beta_initializer="zeros",
                 gamma_initializer="ones", **kwargs) -> None:
        super().__init__(**kwargs)
        if axis not in (-1,):
            raise LoomValueError("loom.tf.keras.layers.GroupNormalization: only axis=-1 (channels last) is supported")
        self.groups, self.epsilon, self.center, self.scale = int(groups), float(epsilon), center, scale
        self._inits = (gamma_initializer, beta_initializer)

    def build(self, input_shape) -> None:
        c = input_shape[-1]
        if c % self.groups:
            raise LoomValueError(f"loom.tf.keras.layers.GroupNormalization: the number of channels ({c}) must be a "
                                 f"multiple of groups ({self.groups})")
        self.gamma = self.add_weight("gamma", (c,), self._inits[0]) if self.scale else None
        self.beta = self.add_weight("beta", (c,), self._inits[1]) if self.center else None

    def call(self, inputs):
        shape = inputs.shape
        x = inputs.reshape(*shape[:-1], self.groups, shape[-1] // self.groups)
        red = tuple(range(1, x.ndim - 2)) + (x.ndim - 1,)
        mean = x.mean(dim=red, keepdim=True)
        var = ((x - mean) ** 2).mean(dim=red, keepdim=True)
        out = ((x - mean) * loom.rsqrt(var + self.epsilon)).reshape(*shape)
        if self.gamma is not None:
            out = out * self.gamma
        if self.beta is not None:
            out = out + self.beta
        return out


class Lambda(Layer):
    """A layer computing `function(inputs)`."""

    def __init__(self, function, **kwargs) -> None:
        super().__init__(**kwargs)
        self.function = function

    def call(self, inputs):
        return self.function(inputs)


class Rescaling(Layer):
    """inputs * scale + offset."""

    def __init__(self, scale, offset=0.0, **kwargs) -> None:
        super().__init__(**kwargs)
        self.scale, self.offset = scale, offset

    def call(self, inputs):
        return inputs * self.scale + self.offset


class Normalization(Layer):
    """(x - mean) / sqrt(variance) per feature, with mean and variance given or learned by `adapt(data)`."""

    def __init__(self, axis=-1, mean=None, variance=None, invert=False, **kwargs) -> None:
        super().__init__(**kwargs)
        self.axis = (axis,) if isinstance(axis, int) else (tuple(axis) if axis is not None else ())
        self.invert = invert
        self._given = None if mean is None else (mean, variance)
        if (mean is None) != (variance is None):
            raise LoomValueError("loom.tf.keras.layers.Normalization: give both mean and variance, or neither")

    def _stat_shape(self, shape) -> tuple:
        nd = len(shape)
        keep = {a % nd for a in self.axis}
        return tuple(shape[d] if d in keep else 1 for d in range(nd))

    def build(self, input_shape) -> None:
        shape = self._stat_shape(tuple(input_shape))
        self.mean = self.add_weight("mean", shape, "zeros", trainable=False)
        self.variance = self.add_weight("variance", shape, "ones", trainable=False)
        if self._given is not None:
            m, v = self._given
            self.mean.assign(np.broadcast_to(np.asarray(m, np.float32), shape).copy())
            self.variance.assign(np.broadcast_to(np.asarray(v, np.float32), shape).copy())

    def adapt(self, data, batch_size=None, steps=None) -> None:
        """Set mean and variance from `data` (an array, tensor or Dataset of batches)."""
        from loom.tf.data import Dataset
        if isinstance(data, Dataset):
            parts = [np.asarray(b.numpy() if isinstance(b, loom.Tensor) else b, np.float64) for b in data]
            arr = np.concatenate([p.reshape((-1,) + p.shape[1:]) for p in parts])
        else:
            arr = np.asarray(data.numpy() if isinstance(data, loom.Tensor) else data, np.float64)
        if arr.ndim == 1 and self.axis == (-1,):
            arr = arr[:, None]
        nd = arr.ndim
        keep = {a % nd for a in self.axis}
        red = tuple(d for d in range(nd) if d not in keep)
        if not self.built:
            self.build((None,) + arr.shape[1:])
            self.built = True
        shape = tuple(self.mean.shape)
        self.mean.assign(arr.mean(axis=red, keepdims=True).reshape(shape).astype(np.float32))
        self.variance.assign(arr.var(axis=red, keepdims=True).reshape(shape).astype(np.float32))

    def call(self, inputs):
        x = inputs.to(loom.float32) if not inputs.dtype.is_floating_point else inputs
        std = loom.maximum(loom.sqrt(self.variance), loom.tensor(1e-7, dtype=self.variance.dtype))
        if self.invert:
            return self.mean + x * std
        return (x - self.mean) / std


class BatchNormalization(Layer):
    """Normalize with batch statistics while training (updating moving averages), moving ones otherwise."""

    def __init__(self, axis=-1, momentum=0.99, epsilon=1e-3, center=True, scale=True, beta_initializer="zeros",
                 gamma_initializer="ones", moving_mean_initializer="zeros", moving_variance_initializer="ones",
                 **kwargs) -> None:
        super().__init__(**kwargs)
        self.axis, self.momentum, self.epsilon = axis, float(momentum), float(epsilon)
        self.center, self.scale = center, scale
        self._inits = (gamma_initializer, beta_initializer, moving_mean_initializer, moving_variance_initializer)

    def build(self, input_shape) -> None:
        c = (input_shape[self.axis],)
        g, b, mm, mv = self._inits
        self.gamma = self.add_weight("gamma", c, g) if self.scale else None
        self.beta = self.add_weight("beta", c, b) if self.center else None
        self.moving_mean = self.add_weight("moving_mean", c, mm, trainable=False)
        self.moving_variance = self.add_weight("moving_variance", c, mv, trainable=False)

    def call(self, inputs, training=None):
        ax = self.axis % inputs.ndim
        red = tuple(i for i in range(inputs.ndim) if i != ax)
        shape = [1] * inputs.ndim
        shape[ax] = inputs.shape[ax]
        if training and self.trainable:
            mean = inputs.mean(dim=red, keepdim=True)
            var = ((inputs - mean) ** 2).mean(dim=red, keepdim=True)
            m = self.momentum
            self.moving_mean.assign(self.moving_mean * m + mean.reshape(-1).detach() * (1 - m))
            self.moving_variance.assign(self.moving_variance * m + var.reshape(-1).detach() * (1 - m))
        else:
            mean = self.moving_mean.reshape(shape)
            var = self.moving_variance.reshape(shape)
        out = (inputs - mean) * loom.rsqrt(var + self.epsilon)
        if self.gamma is not None:
            out = out * self.gamma.reshape(shape)
        if self.beta is not None:
            out = out + self.beta.reshape(shape)
        return out


class LayerNormalization(Layer):
    """Normalize each example over `axis` (the last), then scale by gamma and shift by beta; epsilon 1e-3."""

    def __init__(self, axis=-1, epsilon=1e-3, center=True, scale=True, beta_initializer="zeros",
                 gamma_initializer="ones", **kwargs) -> None:
        super().__init__(**kwargs)
        self.axis, self.epsilon, self.center, self.scale = axis, float(epsilon), center, scale
        self._inits = (gamma_initializer, beta_initializer)

    def build(self, input_shape) -> None:
        axes = [self.axis] if isinstance(self.axis, int) else list(self.axis)
        shape = tuple(input_shape[a] for a in axes)
        self.gamma = self.add_weight("gamma", shape, self._inits[0]) if self.scale else None
        self.beta = self.add_weight("beta", shape, self._inits[1]) if self.center else None

    def call(self, inputs):
        axes = [self.axis] if isinstance(self.axis, int) else list(self.axis)
        red = tuple(a % inputs.ndim for a in axes)
        mean = inputs.mean(dim=red, keepdim=True)
        var = ((inputs - mean) ** 2).mean(dim=red, keepdim=True)
        out = (inputs - mean) * loom.rsqrt(var + self.epsilon)
        shape = [inputs.shape[i] if i in red else 1 for i in range(inputs.ndim)]
        if self.gamma is not None:
            out = out * self.gamma.reshape(shape)
        if self.beta is not None:
            out = out + self.beta.reshape(shape)
        return out


class Embedding(Layer):
    """Rows of an [input_dim, output_dim] table (uniform ±0.05 init) looked up by integer inputs."""

    def __init__(self, input_dim, output_dim, embeddings_initializer="uniform", mask_zero=False, **kwargs) -> None:
        kwargs.pop("input_length", None)  # Keras 2's argument, deprecated (ignored) by Keras 3.
        super().__init__(**kwargs)
        self.input_dim, self.output_dim = int(input_dim), int(output_dim)
        init = "random_uniform" if embeddings_initializer == "uniform" else embeddings_initializer
        self.embeddings_initializer = initializers.get(init)
        self.mask_zero = mask_zero

    def build(self, input_shape) -> None:
        self.embeddings = self.add_weight("embeddings", (self.input_dim, self.output_dim),
                                          self.embeddings_initializer)

    def call(self, inputs):
        idx = inputs if inputs.dtype in (loom.int32, loom.int64) else inputs.to(loom.int64)
        return tfnn.embedding_lookup(self.embeddings, idx)

    def compute_mask(self, inputs, mask=None):
        """With `mask_zero`, the positions whose index is not 0 (Keras masking for the layers after it)."""
        return inputs != 0 if self.mask_zero else None


class LSTM(Layer):
    """Long short-term memory over [batch, time, features]; gates i, f, c, o; unit forget bias on."""

    def __init__(self, units, activation="tanh", recurrent_activation="sigmoid", use_bias=True,
                 kernel_initializer="glorot_uniform", recurrent_initializer="orthogonal", bias_initializer="zeros",
                 unit_forget_bias=True, return_sequences=False, return_state=False, go_backwards=False,
                 dropout=0.0, recurrent_dropout=0.0, **kwargs) -> None:
        _no_recurrent_dropout("LSTM", dropout, recurrent_dropout)
        super().__init__(**kwargs)
        self.units = int(units)
        self.activation = activations.get(activation)
        self.recurrent_activation = activations.get(recurrent_activation)
        self.use_bias, self.unit_forget_bias = use_bias, unit_forget_bias
        self.return_sequences, self.return_state, self.go_backwards = return_sequences, return_state, go_backwards
        self._inits = (kernel_initializer, recurrent_initializer, bias_initializer)

    def build(self, input_shape) -> None:
        u = self.units
        self.kernel = self.add_weight("kernel", (input_shape[-1], 4 * u), self._inits[0])
        self.recurrent_kernel = self.add_weight("recurrent_kernel", (u, 4 * u), self._inits[1])
        if self.use_bias:
            b = initializers.get(self._inits[2])((4 * u,))
            if self.unit_forget_bias:
                b = loom.cat([b[:u], loom.ones(u), b[2 * u:]])
            self.bias = self.add_weight("bias", (4 * u,), initializers.Zeros())
            self.bias.assign(b)

    def call(self, inputs, initial_state=None, training=None, mask=None):
        x = inputs
        n, t = x.shape[0], x.shape[1]
        u = self.units
        keep = _step_mask(mask, x)
        if initial_state is not None:
            h, c = initial_state
        else:
            h = loom.zeros(n, u, dtype=x.dtype)
            c = loom.zeros(n, u, dtype=x.dtype)
        xz = loom.matmul(x, self.kernel)
        if self.use_bias:
            xz = xz + self.bias
        steps = range(t - 1, -1, -1) if self.go_backwards else range(t)
        outs = []
        for s in steps:
            z = xz[:, s] + loom.matmul(h, self.recurrent_kernel)
            i = self.recurrent_activation(z[:, :u])
            f = self.recurrent_activation(z[:, u:2 * u])
            g = self.activation(z[:, 2 * u:3 * u])
            o = self.recurrent_activation(z[:, 3 * u:])
            c_new = f * c + i * g
            h_new = o * self.activation(c_new)
            if keep is None:
                h, c = h_new, c_new
            else:  # A masked step keeps the previous state (and output), as Keras.
                h, c = loom.where(keep[s], h_new, h), loom.where(keep[s], c_new, c)
            outs.append(h)
        out = loom.stack(outs, dim=1) if self.return_sequences else h
        return [out, h, c] if self.return_state else out

    def compute_mask(self, inputs, mask=None):
        return mask if self.return_sequences and not self.return_state else None


class _Recurrent(Layer):
    """Shared loop of the recurrent layers: `_step(x_proj_t, state) -> (output, state)` over time."""

    def __init__(self, units, activation="tanh", use_bias=True, kernel_initializer="glorot_uniform",
                 recurrent_initializer="orthogonal", bias_initializer="zeros", return_sequences=False,
                 return_state=False, go_backwards=False, **kwargs) -> None:
        _no_recurrent_dropout(type(self).__name__, kwargs.pop("dropout", 0.0), kwargs.pop("recurrent_dropout", 0.0))
        super().__init__(**kwargs)
        self.units = int(units)
        self.activation = activations.get(activation)
        self.use_bias = use_bias
        self.return_sequences, self.return_state, self.go_backwards = return_sequences, return_state, go_backwards
        self._inits = (kernel_initializer, recurrent_initializer, bias_initializer)

    def call(self, inputs, initial_state=None, training=None, mask=None):
        x = inputs
        n, t = x.shape[0], x.shape[1]
        keep = _step_mask(mask, x)
        h = initial_state[0] if isinstance(initial_state, (list, tuple)) else initial_state
        if h is None:
            h = loom.zeros(n, self.units, dtype=x.dtype)
        xz = self._project(x)
        steps = range(t - 1, -1, -1) if self.go_backwards else range(t)
        outs = []
        for s in steps:
            h_new = self._step(xz[:, s], h)
            h = h_new if keep is None else loom.where(keep[s], h_new, h)
            outs.append(h)
        out = loom.stack(outs, dim=1) if self.return_sequences else h
        return [out, h] if self.return_state else out

    def compute_mask(self, inputs, mask=None):
        return mask if self.return_sequences and not self.return_state else None


class SimpleRNN(_Recurrent):
    """h_t = activation(x_t @ kernel + h_{t-1} @ recurrent_kernel + bias)."""

    def build(self, input_shape) -> None:
        u = self.units
        self.kernel = self.add_weight("kernel", (input_shape[-1], u), self._inits[0])
        self.recurrent_kernel = self.add_weight("recurrent_kernel", (u, u), self._inits[1])
        if self.use_bias:
            self.bias = self.add_weight("bias", (u,), self._inits[2])

    def _project(self, x):
        xz = loom.matmul(x, self.kernel)
        return xz + self.bias if self.use_bias else xz

    def _step(self, xz, h):
        return self.activation(xz + loom.matmul(h, self.recurrent_kernel))


class GRU(_Recurrent):
    """Gated recurrent unit as Keras's default (reset_after=True): gates z, r, h; bias [input; recurrent]."""

    def __init__(self, units, recurrent_activation="sigmoid", reset_after=True, **kwargs) -> None:
        super().__init__(units, **kwargs)
        if not reset_after:
            raise LoomValueError("loom.tf.keras.layers.GRU: only reset_after=True (Keras's default) is supported")
        self.recurrent_activation = activations.get(recurrent_activation)

    def build(self, input_shape) -> None:
        u = self.units
        self.kernel = self.add_weight("kernel", (input_shape[-1], 3 * u), self._inits[0])
        self.recurrent_kernel = self.add_weight("recurrent_kernel", (u, 3 * u), self._inits[1])
        if self.use_bias:
            self.bias = self.add_weight("bias", (2, 3 * u), self._inits[2])

    def _project(self, x):
        xz = loom.matmul(x, self.kernel)
        return xz + self.bias[0] if self.use_bias else xz

    def _step(self, xz, h):
        u = self.units
        rec = loom.matmul(h, self.recurrent_kernel)
        if self.use_bias:
            rec = rec + self.bias[1]
        z = self.recurrent_activation(xz[:, :u] + rec[:, :u])
        r = self.recurrent_activation(xz[:, u:2 * u] + rec[:, u:2 * u])
        hh = self.activation(xz[:, 2 * u:] + r * rec[:, 2 * u:])
        return z * h + (1 - z) * hh


class UpSampling2D(Layer):
    """Repeat rows and columns of NHWC images `size` times (nearest neighbour)."""

    def __init__(self, size=(2, 2), data_format=None, interpolation="nearest", **kwargs) -> None:
        super().__init__(**kwargs)
        if interpolation != "nearest":
            raise LoomValueError("loom.tf.keras.layers.UpSampling2D: only interpolation='nearest' is supported")
        self.size = _tuple(size, 2)

    def call(self, inputs):
        x = loom.repeat_interleave(inputs, self.size[0], dim=1)
        return loom.repeat_interleave(x, self.size[1], dim=2)


class Masking(Layer):
    """Mask timesteps whose features all equal `mask_value` (zeroing them); later layers get the mask."""

    supports_masking = True

    def __init__(self, mask_value=0.0, **kwargs) -> None:
        super().__init__(**kwargs)
        self.mask_value = mask_value

    def _keep(self, x):
        return loom.any(_convert_to_tensor(x) != self.mask_value, dim=-1)

    def call(self, inputs):
        x = _convert_to_tensor(inputs)
        return x * self._keep(x).unsqueeze(-1).to(x.dtype)

    def compute_mask(self, inputs, mask=None):
        return self._keep(inputs)


class Conv1DTranspose(Conv2DTranspose):
    """Transposed 1-D convolution of NWC inputs with a [k, filters, in] kernel (a height-1 Conv2DTranspose)."""

    def __init__(self, filters, kernel_size, strides=1, padding="valid", output_padding=None, data_format=None,
                 dilation_rate=1, **kwargs) -> None:
        super().__init__(filters, (1, _tuple(kernel_size, 1)[0]), (1, _tuple(strides, 1)[0]), padding,
                         output_padding, data_format, (1, _tuple(dilation_rate, 1)[0]), **kwargs)

    def build(self, input_shape) -> None:
        self.kernel = self.add_weight("kernel", (self.kernel_size[1], self.filters, input_shape[-1]),
                                      self.kernel_initializer)
        if self.use_bias:
            self.bias = self.add_weight("bias", (self.filters,), self.bias_initializer)

    def call(self, inputs):
        _regularize(self)
        return self._transpose(_convert_to_tensor(inputs).unsqueeze(1), self.kernel.unsqueeze(0)).squeeze(1)


class SeparableConv1D(SeparableConv2D):
    """A depthwise 1-D convolution followed by a pointwise one: [k, in, mult] and [1, in*mult, filters] kernels."""

    def __init__(self, filters, kernel_size, strides=1, padding="valid", data_format=None, dilation_rate=1,
                 depth_multiplier=1, **kwargs) -> None:
        if str(padding).lower() == "causal":
            raise LoomValueError("loom.tf.keras.layers.SeparableConv1D: padding='causal' is not supported")
        super().__init__(filters, (1, _tuple(kernel_size, 1)[0]), (1, _tuple(strides, 1)[0]), padding, data_format,
                         (1, _tuple(dilation_rate, 1)[0]), depth_multiplier, **kwargs)

    def build(self, input_shape) -> None:
        cin = input_shape[-1]
        self.depthwise_kernel = self.add_weight("depthwise_kernel", (self.kernel_size[1], cin,
                                                                     self.depth_multiplier),
                                                self.depthwise_initializer)
        self.pointwise_kernel = self.add_weight("pointwise_kernel", (1, cin * self.depth_multiplier, self.filters),
                                                self.pointwise_initializer)
        if self.use_bias:
            self.bias = self.add_weight("bias", (self.filters,), self.bias_initializer)

    def _depthwise(self, x):
        x = _convert_to_tensor(x).unsqueeze(1)
        y = tfnn.depthwise_conv2d(x, self.depthwise_kernel.unsqueeze(0), self.strides, self.padding,
                                  dilations=self.dilation_rate)
        return tfnn.convolution(y, self.pointwise_kernel.unsqueeze(0), 1, "VALID").squeeze(1)


class Attention(Layer):
    """Keras's dot-product (Luong) attention over [query, value(, key)]: softmax(q k^T) v, with value and
    causal masks; `score_mode="concat"` sums tanh(q + k) instead."""

    def __init__(self, use_scale=False, score_mode="dot", dropout=0.0, seed=None, **kwargs) -> None:
        super().__init__(**kwargs)
        if score_mode not in ("dot", "concat"):
            raise LoomValueError(f"loom.tf.keras.layers.Attention: score_mode must be 'dot' or 'concat', got "
                                 f"{score_mode!r}")
        self.use_scale, self.score_mode, self.dropout = bool(use_scale), score_mode, float(dropout)

    def build(self, input_shape):
        self.scale = self.add_weight(name="scale", shape=(), initializer="ones") if self.use_scale else None
        if self.score_mode == "concat":
            self.concat_score_weight = self.add_weight(name="concat_score_weight", shape=(), initializer="ones")
        self.built = True

    def _scores(self, q, k):
        if self.score_mode == "dot":
            s = loom.matmul(q, k.transpose(-1, -2))
            return s * self.scale if self.scale is not None else s
        t = q.unsqueeze(-2) + k.unsqueeze(-3)
        if self.scale is not None:
            t = self.scale * t
        return self.concat_score_weight * loom.tanh(t).sum(-1)

    def call(self, inputs, mask=None, training=None, return_attention_scores=False, use_causal_mask=False):
        if not isinstance(inputs, (list, tuple)) or len(inputs) not in (2, 3):
            raise LoomValueError(f"loom.tf.keras.layers.{type(self).__name__}: inputs must be [query, value] or "
                                 "[query, value, key]")
        q, v = _convert_to_tensor(inputs[0]), _convert_to_tensor(inputs[1])
        k = _convert_to_tensor(inputs[2]) if len(inputs) == 3 else v
        q_mask, v_mask = (list(mask) + [None, None])[:2] if mask is not None else (None, None)
        scores = self._scores(q, k)
        keep = None
        if v_mask is not None:
            keep = _convert_to_tensor(v_mask).to(loom.bool).unsqueeze(-2)
        if use_causal_mask:
            tq, tv = scores.shape[-2], scores.shape[-1]
            causal = loom.tensor(np.tril(np.ones((tq, tv), bool)))
            keep = causal if keep is None else loom.logical_and(keep, causal)
        if keep is not None:
            big = 65504.0 if scores.dtype is loom.float16 else 1.0e9
            scores = scores - big * loom.logical_not(keep).to(scores.dtype)
        weights = F.softmax(scores, dim=-1)
        if training and self.dropout > 0:
            weights = tfnn.dropout(weights, self.dropout)
        out = loom.matmul(weights, v)
        if q_mask is not None:
            out = out * _convert_to_tensor(q_mask).to(out.dtype).unsqueeze(-1)
        return (out, weights) if return_attention_scores else out

    def compute_mask(self, inputs, mask=None):
        return None if mask is None else mask[0]


class AdditiveAttention(Attention):
    """Keras's additive (Bahdanau) attention: scores sum(scale * tanh(q + k)) over the feature dimension."""

    def __init__(self, use_scale=True, dropout=0.0, **kwargs) -> None:
        super().__init__(use_scale=use_scale, dropout=dropout, **kwargs)

    def build(self, input_shape):
        dim = input_shape[0][-1]
        self.scale = self.add_weight(name="scale", shape=(dim,), initializer="glorot_uniform") \
            if self.use_scale else None
        self.built = True

    def _scores(self, q, k):
        t = loom.tanh(q.unsqueeze(-2) + k.unsqueeze(-3))
        return (t * self.scale).sum(-1) if self.scale is not None else t.sum(-1)


class MultiHeadAttention(Layer):
    """Keras's multi-head attention: per-head query/key/value projections, softmax(QK^T/sqrt(d))V, output projection."""

    def __init__(self, num_heads, key_dim, value_dim=None, dropout=0.0, use_bias=True, output_shape=None,
                 attention_axes=None, kernel_initializer="glorot_uniform", bias_initializer="zeros", **kwargs) -> None:
        super().__init__(**kwargs)
        self.num_heads, self.key_dim = int(num_heads), int(key_dim)
        self.value_dim = int(value_dim) if value_dim is not None else self.key_dim
        self.dropout, self.use_bias = float(dropout), use_bias
        self._output_dim = output_shape
        self._inits = (kernel_initializer, bias_initializer)

    def _dense(self, name, eq, out_shape, bias):
        return EinsumDense(eq, out_shape, bias_axes=bias if self.use_bias else None, name=name,
                           kernel_initializer=self._inits[0], bias_initializer=self._inits[1])

    def build(self, query_shape, value_shape=None, key_shape=None) -> None:
        h, kd, vd = self.num_heads, self.key_dim, self.value_dim
        self._query_dense = self._dense("query", "abc,cde->abde", (None, h, kd), "de")
        self._key_dense = self._dense("key", "abc,cde->abde", (None, h, kd), "de")
        self._value_dense = self._dense("value", "abc,cde->abde", (None, h, vd), "de")
        out_dim = self._output_dim if self._output_dim is not None else query_shape[-1]
        self._output_dense = self._dense("attention_output", "abcd,cde->abe", (None, out_dim), "e")

    def __call__(self, query, value=None, key=None, **kwargs):
        if value is None:
            raise LoomValueError("loom.tf.keras.layers.MultiHeadAttention: call it with (query, value[, key])")
        return super().__call__(query, value, key, **kwargs)

    def _maybe_build(self, inputs) -> None:
        if not self.built:
            self.build(tuple(inputs.shape))
            self.built = True

    def call(self, query, value, key=None, attention_mask=None, return_attention_scores=False, training=None,
             use_causal_mask=False):
        key = value if key is None else key
        q = self._query_dense(query)
        k = self._key_dense(key)
        v = self._value_dense(value)
        q = q * (1.0 / math.sqrt(self.key_dim))
        scores = loom.einsum("aecd,abcd->acbe", k, q)  # [batch, heads, q_len, k_len]
        mask = None
        if attention_mask is not None:
            mask = _convert_to_tensor(attention_mask).to(loom.bool)
            mask = mask.unsqueeze(1) if mask.ndim == 3 else mask
        if use_causal_mask:
            ql, kl = scores.shape[-2], scores.shape[-1]
            causal = loom.tril(loom.ones(ql, kl, dtype=loom.bool))
            mask = causal if mask is None else loom.logical_and(mask, causal)
        if mask is not None:
            scores = loom.where(mask, scores, loom.full((), -1e9, dtype=scores.dtype))
        probs = F.softmax(scores, dim=-1)
        p = tfnn.dropout(probs, self.dropout) if training and self.dropout > 0 else probs
        ctx = loom.einsum("acbe,aecd->abcd", p, v)  # [batch, q_len, heads, value_dim]
        out = self._output_dense(ctx)
        return (out, probs) if return_attention_scores else out


class _Merge(Layer):
    def call(self, inputs):
        if not isinstance(inputs, (list, tuple)) or len(inputs) < 2:
            raise LoomValueError(f"loom.tf.keras.layers.{type(self).__name__}: expected a list of at least two "
                                 "inputs")
        out = inputs[0]
        for x in inputs[1:]:
            out = self._merge(out, x)
        return self._finish(out, len(inputs))

    def _finish(self, out, n):
        return out


class Add(_Merge):
    """Elementwise sum of a list of inputs."""

    def _merge(self, a, b):
        return a + b


class Subtract(_Merge):
    """inputs[0] - inputs[1]."""

    def _merge(self, a, b):
        return a - b


class Multiply(_Merge):
    """Elementwise product of a list of inputs."""

    def _merge(self, a, b):
        return a * b


class Average(_Merge):
    """Elementwise mean of a list of inputs."""

    def _merge(self, a, b):
        return a + b

    def _finish(self, out, n):
        return out / n


class Maximum(_Merge):
    """Elementwise maximum of a list of inputs."""

    def _merge(self, a, b):
        return loom.maximum(a, b)


class Minimum(_Merge):
    """Elementwise minimum of a list of inputs."""

    def _merge(self, a, b):
        return loom.minimum(a, b)


class Dot(Layer):
    """Dot products of two inputs over `axes` (per batch element), optionally of L2-normalised inputs (cosine)."""

    def __init__(self, axes, normalize=False, **kwargs) -> None:
        super().__init__(**kwargs)
        self.axes = axes
        self.normalize = normalize

    def call(self, inputs):
        if not isinstance(inputs, (list, tuple)) or len(inputs) != 2:
            raise LoomValueError("loom.tf.keras.layers.Dot: expected a list of exactly two inputs")
        a, b = inputs
        ax = self.axes if isinstance(self.axes, (list, tuple)) else (self.axes, self.axes)
        ax = [x % t.ndim for x, t in zip(ax, (a, b))]
        if self.normalize:
            a = F.normalize(a, dim=ax[0], eps=1e-12)
            b = F.normalize(b, dim=ax[1], eps=1e-12)
        if a.ndim == 2 and b.ndim == 2:
            return (a * b).sum(dim=1, keepdim=True)
        # Batched contraction of a's axis ax[0] with b's axis ax[1]; the remaining axes follow in order.
        a = a.movedim(ax[0], -1)
        b = b.movedim(ax[1], 1)
        return loom.matmul(a.reshape(a.shape[0], -1, a.shape[-1]), b.reshape(b.shape[0], b.shape[1], -1)).reshape(
            a.shape[0], *a.shape[1:-1], *b.shape[2:])


class Concatenate(Layer):
    """Join a list of inputs along `axis` (the last by default)."""

    def __init__(self, axis=-1, **kwargs) -> None:
        super().__init__(**kwargs)
        self.axis = axis

    def call(self, inputs):
        return loom.cat(list(inputs), dim=self.axis)


class ZeroPadding2D(Layer):
    """Zero rows and columns around NHWC images."""

    def __init__(self, padding=(1, 1), **kwargs) -> None:
        super().__init__(**kwargs)
        p = padding
        if isinstance(p, int):
            p = ((p, p), (p, p))
        elif isinstance(p[0], int):
            p = ((p[0], p[0]), (p[1], p[1]))
        self.padding = p

    def call(self, inputs):
        (t, b), (left, r) = self.padding
        return loom.pad(inputs, [0, 0, left, r, t, b])


def add(inputs, **kwargs):
    """Functional form of `Add`: the elementwise sum of `inputs`."""
    return Add(**kwargs)(inputs)


def subtract(inputs, **kwargs):
    """Functional form of `Subtract`: `inputs[0] - inputs[1]`."""
    return Subtract(**kwargs)(inputs)


def multiply(inputs, **kwargs):
    """Functional form of `Multiply`: the elementwise product of `inputs`."""
    return Multiply(**kwargs)(inputs)


def average(inputs, **kwargs):
    """Functional form of `Average`: the elementwise mean of `inputs`."""
    return Average(**kwargs)(inputs)


def maximum(inputs, **kwargs):
    """Functional form of `Maximum`: the elementwise maximum of `inputs`."""
    return Maximum(**kwargs)(inputs)


def minimum(inputs, **kwargs):
    """Functional form of `Minimum`: the elementwise minimum of `inputs`."""
    return Minimum(**kwargs)(inputs)


def concatenate(inputs, axis=-1, **kwargs):
    """Functional form of `Concatenate`: `inputs` joined along `axis`."""
    return Concatenate(axis=axis, **kwargs)(inputs)


def dot(inputs, axes=-1, normalize=False, **kwargs):
    """Functional form of `Dot`: dot products of the two `inputs` over `axes`."""
    return Dot(axes=axes, normalize=normalize, **kwargs)(inputs)


def _step_mask(mask, x):
    """A Keras mask [batch, time] as one [batch, 1] boolean per step (None: no mask)."""
    if mask is None:
        return None
    m = mask if isinstance(mask, loom.Tensor) else _convert_to_tensor(mask)
    if tuple(m.shape) != tuple(x.shape[:2]):
        raise LoomValueError(f"loom.tf.keras: a recurrent layer's mask must have shape [batch, time] = "
                             f"{list(x.shape[:2])}, got {list(m.shape)}")
    m = m.to(loom.bool).unsqueeze(-1)
    return [m[:, s] for s in range(x.shape[1])]


def _regularize(layer) -> None:
    """Add the layer's kernel and bias penalties to its losses."""
    if layer.kernel_regularizer is not None:
        layer.add_loss(layer.kernel_regularizer(layer.kernel))
    if layer.bias_regularizer is not None and layer.use_bias:
        layer.add_loss(layer.bias_regularizer(layer.bias))


def _no_recurrent_dropout(layer: str, dropout, recurrent_dropout) -> None:
    if dropout or recurrent_dropout:
        raise LoomValueError(f"loom.tf.keras.layers.{layer}: dropout and recurrent_dropout are not supported; "
                             "add a Dropout layer on the inputs or outputs instead")


# Layers that pass a Keras mask through unchanged (as Keras 3's `supports_masking`).
for _cls in (Dense, EinsumDense, Dropout, Activation, ReLU, LeakyReLU, ELU, Softmax, LayerNormalization,
             BatchNormalization, Rescaling, GaussianNoise, GaussianDropout, SpatialDropout1D, TimeDistributed,
             Identity):
    _cls.supports_masking = True


def _merge_masks(self, inputs, mask=None):
    """Merged inputs are valid where every input is (Keras's merge-layer mask)."""
    if not isinstance(mask, (list, tuple)):
        return mask
    masks = [m for m in mask if m is not None]
    if not masks:
        return None
    out = masks[0]
    for m in masks[1:]:
        out = loom.logical_and(out, m)
    return out


_Merge.compute_mask = _merge_masks
Concatenate.compute_mask = _merge_masks

from loom.tf.keras.preprocessing import (  # noqa: E402,F401  (image preprocessing and augmentation layers)
    CenterCrop, RandomBrightness, RandomContrast, RandomFlip, RandomRotation, RandomTranslation, RandomZoom, Resizing,
)
from loom.tf.keras.text import Hashing, IntegerLookup, StringLookup, TextVectorization  # noqa: E402,F401


from loom.tf._unsupported import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr("loom.tf.keras.layers", "tf.keras.layers")
