"""Eager-mode quantisation of models with their own ``forward`` (residual additions), as torch's eager mode.

The model marks where quantised computation starts and ends with `QuantStub` / `DeQuantStub`, does its
additions through a `FloatFunctional` (``self.skip.add(a, b)``), and uses modules, not functions, for
everything between the stubs (``nn.ReLU()``, ``nn.MaxPool2d``, ``nn.Flatten``); `fuse_modules` fuses a
Conv2d/Linear with the ReLU after it. `prepare` then puts observers on the stubs, the adds and each
Conv2d/Linear output, and `convert` swaps every module for its int8 form in place, so the model's own
``forward`` runs on int8 data.
"""
from __future__ import annotations

import copy

import numpy as np

from loom import _api as loom
from loom import _upper
from loom.errors import LoomTypeError, LoomValueError
from loom.nn import Identity, Module, modules

from . import modules as qm


class QuantStub(Module):
    """Where float32 input becomes quantised (identity until `convert`; observed after `prepare`)."""

    def __init__(self) -> None:
        super().__init__()
        self.activation_post_process: Module | None = None

    def forward(self, x):
        return x if self.activation_post_process is None else self.activation_post_process(x)


class DeQuantStub(Module):
    """Where quantised data becomes float32 again (identity before `convert`)."""

    def forward(self, x):
        return x


class FloatFunctional(Module):
    """Additions that quantisation can observe and replace: ``self.skip = FloatFunctional()``, then
    ``self.skip.add(a, b)`` (or ``add_relu``) in ``forward``, as ``torch.ao.nn.quantized.FloatFunctional``.

    Examples
    --------
    >>> import loom
    >>> FloatFunctional().add(loom.ones(2), loom.ones(2)).tolist()
    [2.0, 2.0]
    """

    def __init__(self) -> None:
        super().__init__()
        self.activation_post_process: Module | None = None

    def _observe(self, y):
        return y if self.activation_post_process is None else self.activation_post_process(y)

    def add(self, a, b):
        return self._observe(a + b)

    def add_relu(self, a, b):
        return self._observe(loom.relu(a + b))

    def forward(self, *args):
        raise LoomTypeError("loom.quantization.FloatFunctional: call .add(a, b) or .add_relu(a, b), not the module")


class QuantizedFunctional(Module):
    """`FloatFunctional` on uint8 data: dequantise both, add (then ReLU), quantise to the observed range."""

    def __init__(self, scale: float, zero_point: int) -> None:
        super().__init__()
        self.scale, self.zero_point = scale, zero_point

    def _join(self, a: qm.QArray, b: qm.QArray, relu: bool) -> qm.QArray:
        if a.nhwc != b.nhwc or a.data.shape != b.data.shape:
            raise LoomValueError(f"loom.quantization.QuantizedFunctional.add: shapes {a.data.shape} and "
                                 f"{b.data.shape} differ")
        y = a.dequantize() + b.dequantize()
        if relu:
            y = np.maximum(y, np.float32(0))
        return qm.QArray(qm.quantize_array(y, self.scale, self.zero_point), (self.scale, self.zero_point), a.nhwc)

    def add(self, a: qm.QArray, b: qm.QArray) -> qm.QArray:
        return self._join(a, b, False)

    def add_relu(self, a: qm.QArray, b: qm.QArray) -> qm.QArray:
        return self._join(a, b, True)


class _Quantize(Module):
    """A converted `QuantStub`: float32 Tensor (or array) in, uint8 `QArray` out."""

    def __init__(self, scale: float, zero_point: int) -> None:
        super().__init__()
        self.stub = qm.QuantStub(scale, zero_point)

    def forward(self, x) -> qm.QArray:
        return self.stub(qm.QArray.from_input(x))


class _DeQuantize(Module):
    """A converted `DeQuantStub`: `QArray` in, float32 Tensor out (NCHW, as the float model's)."""

    def forward(self, x: qm.QArray) -> loom.Tensor:
        return loom.tensor(x.to_output())


class _Fused(Module):
    """A Conv2d/Linear with the ReLU after it (what `fuse_modules` makes)."""

    def __init__(self, layer: Module) -> None:
        super().__init__()
        self.layer = layer

    def forward(self, x):
        return loom.relu(self.layer(x))


def _inside(name: str, done: list[str]) -> bool:
    """Whether `name` lies inside a module already wrapped or swapped (its parts are left alone)."""
    return any(name.startswith(d + ".") for d in done)


def fuse_modules(model: Module, names: list[list[str]], inplace: bool = False) -> Module:
    """Fuse each ``[conv_or_linear, relu]`` pair of submodule names (as ``torch.ao.quantization.fuse_modules``).

    The first becomes the fused module and the ReLU an `Identity`.
    """
    model = model if inplace else copy.deepcopy(model)
    for pair in names:
        if len(pair) != 2:
            raise LoomValueError(f"loom.quantization.fuse_modules: expected [layer, relu] pairs, got {pair}")
        layer, relu = model.get_submodule(pair[0]), model.get_submodule(pair[1])
        if not isinstance(layer, (modules.Conv2d, modules.Linear)) or not isinstance(relu, modules.ReLU):
            raise LoomTypeError(f"loom.quantization.fuse_modules: {pair} is {type(layer).__name__}, "
                                f"{type(relu).__name__}; expected Conv2d or Linear, then ReLU")
        model.set_submodule(pair[0], _Fused(layer))
        model.set_submodule(pair[1], Identity())
    return model


def prepare_eager(model: Module, qconfig, qat: bool) -> Module:
    """Observers on the stubs, the adds and each Conv2d/Linear output; the model's own forward is kept."""
    from .quantize import ObservedLayer
    if not any(isinstance(m, QuantStub) for m in model.modules()):
        raise LoomValueError("loom.quantization.prepare: the model is not a Sequential and has no QuantStub; mark "
                             "where quantised computation starts (QuantStub) and ends (DeQuantStub)")
    model = copy.deepcopy(model)
    done: list[str] = []
    for name, m in list(model.named_modules()):
        if _inside(name, done):
            continue
        if isinstance(m, (QuantStub, FloatFunctional)):
            m.activation_post_process = qconfig.activation()
            done.append(name)
        elif isinstance(m, (modules.Conv2d, modules.Linear, _Fused)) and name:
            layer = m.layer if isinstance(m, _Fused) else m
            done.append(name)
            model.set_submodule(name, ObservedLayer(layer, isinstance(m, _Fused), qconfig.activation(),
                                                    qconfig.weight() if qat else None, qconfig.weight))
    model._loom_quantization = "qat" if qat else "ptq"
    return model


def convert_eager(model: Module) -> Module:
    """Swap every observed or supported module for its int8 form, in a copy of `model`."""
    from .quantize import ObservedLayer, _qparams, _weight_qparams  # Imported here: quantize imports this module.
    model = copy.deepcopy(model)
    done: list[str] = []
    for name, m in list(model.named_modules()):
        if not name or _inside(name, done):
            continue
        if isinstance(m, QuantStub):
            new: Module = _Quantize(*_qparams(m.activation_post_process))
        elif isinstance(m, DeQuantStub):
            new = _DeQuantize()
        elif isinstance(m, FloatFunctional):
            new = QuantizedFunctional(*_qparams(m.activation_post_process))
        elif isinstance(m, ObservedLayer):
            wq, ws, _, _ = _weight_qparams(m)
            bias = None if m.layer.bias is None else m.layer.bias.detach().numpy().astype(np.float32)
            cls = qm.QuantizedConv2d if isinstance(m.layer, modules.Conv2d) else qm.QuantizedLinear
            # The input's parameters are set when the first input comes (`set_input_qparams`).
            new = cls.from_float(m.layer, wq, ws, bias, (1.0, 0), _qparams(m.activation_post_process), m.relu)
        elif isinstance(m, modules.MaxPool2d):
            new = qm.QuantizedMaxPool2d(m)
        elif isinstance(m, modules.Flatten):
            new = qm.QuantizedFlatten(m.start_dim, m.end_dim)
        elif isinstance(m, modules.ReLU):
            new = qm.QuantizedReLU()
        elif isinstance(m, modules.Dropout):
            new = Identity()
        else:
            continue
        model.set_submodule(name, new)
        done.append(name)
    from . import kernels
    kernels.library(wait=True)
    model.eval()
    model._loom_quantization = "int8"
    return model


_upper.register(prepare_eager=prepare_eager, convert_eager=convert_eager)  # For quantize.prepare/convert.
