"""The int8 model `convert` builds: NumPy buffers between layers, loom's int8 C kernels inside them.

Activations flow as uint8 (per-tensor scale and zero point) in NHWC layout, so a convolution's im2col reads
contiguous channel runs and its GEMM writes NHWC directly; `QuantizedFlatten` returns to PyTorch's NCHW order
before flattening, so Linear weights keep theirs. A `QuantizedModel` is for inference: it takes float32
input (a loom Tensor or a NumPy array) and returns a float32 loom Tensor.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from loom import _api as loom
from loom.errors import LoomValueError, ShapeError
from loom.nn import Module

from . import kernels


@dataclass
class QArray:
    """A batch between layers: data, its (scale, zero_point) if quantised (else float32), and its layout."""

    data: np.ndarray
    qparams: tuple[float, int] | None
    nhwc: bool

    def dequantize(self) -> np.ndarray:
        if self.qparams is None:
            return self.data
        s, z = self.qparams
        return (self.data.astype(np.float32) - np.float32(z)) * np.float32(s)

    @staticmethod
    def from_input(x) -> QArray:
        """A model's float32 input (a loom Tensor or an array), as it enters the first layer."""
        data = x.detach().numpy() if isinstance(x, loom.Tensor) else np.asarray(x)
        return QArray(np.ascontiguousarray(data, np.float32), None, False)

    def to_output(self) -> np.ndarray:
        """Float32 in PyTorch's layout (NCHW for images), as the float model returns it."""
        out = self.dequantize()
        return np.ascontiguousarray(out.transpose(0, 3, 1, 2) if self.nhwc else out)


def quantize_array(x: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    """uint8 ``clamp(round_half_even(x / scale) + zero_point, 0, 255)`` (ONNX QuantizeLinear's rule)."""
    q = np.rint(np.asarray(x, np.float32) / np.float32(scale)) + np.float32(zero_point)
    return np.clip(q, 0, 255).astype(np.uint8)


class QuantStub(Module):
    """float32 input to uint8 (NCHW images become NHWC)."""

    def __init__(self, scale: float, zero_point: int) -> None:
        super().__init__()
        self.scale, self.zero_point = scale, zero_point

    def forward(self, x: QArray) -> QArray:
        data = x.data.transpose(0, 2, 3, 1) if x.data.ndim == 4 else x.data
        return QArray(quantize_array(data, self.scale, self.zero_point), (self.scale, self.zero_point),
                      x.data.ndim == 4)

    def extra_repr(self) -> str:
        return f"scale={self.scale:.6g}, zero_point={self.zero_point}"


class _QuantizedGemmLayer(Module):
    """What QuantizedLinear and QuantizedConv2d share: the packed weight and the fused epilogue."""

    def __init__(self, wq: np.ndarray, w_scale: np.ndarray, bias: np.ndarray | None, in_qparams: tuple[float, int],
                 out_qparams: tuple[float, int] | None, relu: bool) -> None:
        super().__init__()
        n = wq.shape[0]
        self.weight_int8 = wq                      # As the float layer holds it: (out, in) or (out, c, kh, kw).
        self.weight_scale = w_scale.astype(np.float32)
        self.bias_float = bias
        self.in_qparams, self.out_qparams, self.relu = in_qparams, out_qparams, relu
        rows = wq.transpose(0, 2, 3, 1).reshape(n, -1) if wq.ndim == 4 else wq  # (out, kh*kw*c): NHWC order.
        self.packed = kernels.pack_weight(np.ascontiguousarray(rows))
        self.set_input_qparams(in_qparams)

    def set_input_qparams(self, in_qparams: tuple[float, int]) -> None:
        """The int32 bias (with the input zero point's correction) and multipliers for this input scale."""
        self.in_qparams = in_qparams
        s_x, z_x = in_qparams
        acc_scale = np.float32(s_x) * self.weight_scale
        bias, n = self.bias_float, self.packed.n
        self.bias_int32 = (np.zeros(n, np.int32) if bias is None else
                           np.rint(bias.astype(np.float64) / acc_scale.astype(np.float64)).astype(np.int32))
        self.bias_eff = (self.bias_int32.astype(np.int64) - z_x * self.packed.colsum.astype(np.int64)).astype(np.int32)
        out = self.out_qparams
        self.mult = (acc_scale / np.float32(out[0]) if out else acc_scale).astype(np.float32)

    def weight_bytes(self) -> int:
        """Bytes of the int8 weight, its float32 scales and int32 bias."""
        return self.weight_int8.size + self.weight_scale.nbytes + self.bias_int32.nbytes

    def _gemm(self, a: np.ndarray) -> np.ndarray:
        if self.out_qparams is None:
            return kernels.gemm(a, self.packed, self.bias_eff, self.mult, "float32", relu=self.relu)
        return kernels.gemm(a, self.packed, self.bias_eff, self.mult, "uint8", self.out_qparams[1], self.relu)

    def _check(self, x: QArray) -> None:
        if x.qparams is None:
            raise LoomValueError(f"loom.quantization.{type(self).__name__}: its input is float32 (it follows the "
                                 "last quantised layer, or no QuantStub came before it); only the last "
                                 "Conv2d/Linear may produce float output")
        if x.qparams != self.in_qparams:  # Eager-mode models: the input's parameters are known when it comes.
            self.set_input_qparams(x.qparams)


class QuantizedLinear(_QuantizedGemmLayer):
    """y = x @ W.T + b on uint8 x and per-channel int8 W, requantised (or float32 for the last layer)."""

    @classmethod
    def from_float(cls, layer, wq, ws, bias, in_qparams, out_qparams, relu) -> QuantizedLinear:
        return cls(wq, ws, bias, in_qparams, out_qparams, relu)

    def forward(self, x: QArray) -> QArray:
        self._check(x)
        if x.nhwc or x.data.shape[-1] != self.packed.k:
            raise ShapeError(f"loom.quantization.QuantizedLinear: input of shape {x.data.shape} does not end in "
                             f"{self.packed.k} features")
        lead = x.data.shape[:-1]
        y = self._gemm(x.data.reshape(-1, self.packed.k))
        return QArray(y.reshape(*lead, -1), self.out_qparams, False)

    def extra_repr(self) -> str:
        return f"in_features={self.packed.k}, out_features={self.packed.n}, relu={self.relu}, " \
               f"float_output={self.out_qparams is None}"


class QuantizedConv2d(_QuantizedGemmLayer):
    """2-d convolution (groups 1, zero padding) as im2col on uint8 NHWC + the int8 GEMM."""

    @classmethod
    def from_float(cls, layer, wq, ws, bias, in_qparams, out_qparams, relu) -> QuantizedConv2d:
        m = cls(wq, ws, bias, in_qparams, out_qparams, relu)
        m.kernel_size, m.stride = tuple(layer.kernel_size), tuple(layer.stride)
        m.padding, m.dilation = tuple(layer.padding), tuple(layer.dilation)
        return m

    def forward(self, x: QArray) -> QArray:
        self._check(x)
        c = self.weight_int8.shape[1]
        if not x.nhwc or x.data.shape[3] != c:
            raise ShapeError(f"loom.quantization.QuantizedConv2d: expected an (N, C, H, W) input with C={c}, got "
                             f"{x.data.shape} ({'NHWC' if x.nhwc else 'flat'} inside the quantised model)")
        n, h, w, _ = x.data.shape
        ho, wo = kernels.conv_out_hw(h, w, self.kernel_size, self.stride, self.padding, self.dilation)
        if self.kernel_size == (1, 1) and self.stride == (1, 1) and self.padding == (0, 0):
            a = x.data.reshape(-1, c)
        else:
            zp = x.qparams[1] if x.qparams is not None else 0  # Quantised: `_check` saw to it.
            a = kernels.im2col(x.data, self.kernel_size, self.stride, self.padding, self.dilation, zp)
        return QArray(self._gemm(a).reshape(n, ho, wo, -1), self.out_qparams, True)

    def extra_repr(self) -> str:
        o, c = self.weight_int8.shape[:2]
        return f"{c}, {o}, kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, " \
               f"relu={self.relu}, float_output={self.out_qparams is None}"


class QuantizedMaxPool2d(Module):
    """Max pooling on NHWC data: on uint8 directly (max commutes with the monotone quantisation)."""

    def __init__(self, layer) -> None:
        super().__init__()
        pair = (lambda v: (v, v) if isinstance(v, int) else tuple(v))
        if layer.ceil_mode or getattr(layer, "return_indices", False):
            raise LoomValueError(f"loom.quantization: {layer!r}: ceil_mode and return_indices are not supported")
        self.kernel_size, self.padding = pair(layer.kernel_size), pair(layer.padding)
        self.stride = pair(layer.stride if layer.stride is not None else layer.kernel_size)
        self.dilation = pair(layer.dilation)

    def forward(self, x: QArray) -> QArray:
        if not x.nhwc:
            raise ShapeError(f"loom.quantization.QuantizedMaxPool2d: expected a 4-d input, got {x.data.shape}")
        d = x.data
        n, h, w, c = d.shape
        (kh, kw), (sh, sw), (ph, pw), (dh, dw) = self.kernel_size, self.stride, self.padding, self.dilation
        ho, wo = kernels.conv_out_hw(h, w, self.kernel_size, self.stride, self.padding, self.dilation)
        if (kh, kw) == (sh, sw) and (ph, pw) == (0, 0) and (dh, dw) == (1, 1):
            out = d[:, :ho * kh, :wo * kw].reshape(n, ho, kh, wo, kw, c).max(axis=(2, 4))
            return QArray(out, x.qparams, True)
        low = 0 if d.dtype == np.uint8 else -np.inf
        d = np.pad(d, ((0, 0), (ph, ph), (pw, pw), (0, 0)), constant_values=low)
        out = None
        for i in range(kh):
            for j in range(kw):
                tap = d[:, i * dh:i * dh + sh * (ho - 1) + 1:sh, j * dw:j * dw + sw * (wo - 1) + 1:sw]
                out = tap.copy() if out is None else np.maximum(out, tap, out=out)
        return QArray(out, x.qparams, True)


class QuantizedFlatten(Module):
    """Flatten in PyTorch's NCHW order (NHWC data is transposed back first)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x: QArray) -> QArray:
        d = x.data.transpose(0, 3, 1, 2) if x.nhwc else x.data
        nd = d.ndim
        s, e = self.start_dim % nd, self.end_dim % nd
        shape = d.shape[:s] + (int(np.prod(d.shape[s:e + 1])),) + d.shape[e + 1:]
        return QArray(np.ascontiguousarray(d).reshape(shape), x.qparams, False)


class QuantizedReLU(Module):
    """ReLU on uint8 data: max with the zero point."""

    def forward(self, x: QArray) -> QArray:
        if x.qparams is None:
            return QArray(np.maximum(x.data, np.float32(0)), None, x.nhwc)
        return QArray(np.maximum(x.data, np.uint8(x.qparams[1])), x.qparams, x.nhwc)


class QuantizedModel(Module):
    """An int8 model: call it on float32 input; it returns float32 (a loom Tensor).

    Examples
    --------
    >>> import loom, loom.nn as nn
    >>> from loom.quantization import quantize
    >>> qm = quantize(nn.Sequential(nn.Linear(4, 3), nn.ReLU()), [loom.randn(8, 4)])
    >>> bool((qm(loom.randn(2, 4)).numpy() >= 0).all())
    True
    """

    def __init__(self, steps: list[Module]) -> None:
        super().__init__()
        from loom.nn import ModuleList
        self.steps = ModuleList(steps)
        kernels.library(wait=True)  # Build (once per machine) or load the C library now, not in the first call.

    def forward(self, x) -> loom.Tensor:
        return loom.tensor(self.run_numpy(x))

    def run_numpy(self, x) -> np.ndarray:
        """The forward pass on NumPy: float32 array (or Tensor) in, float32 array out (NCHW / PyTorch order)."""
        q = QArray.from_input(x)
        for step in self.steps:
            q = step(q)
        return q.to_output()

    def weight_bytes(self) -> int:
        """Bytes of all int8 weights with their scales and int32 biases."""
        return sum(s.weight_bytes() for s in self.steps if isinstance(s, _QuantizedGemmLayer))
