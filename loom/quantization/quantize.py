"""Eager post-training quantisation and quantisation-aware training: prepare, calibrate (or train), convert.

The model is a `loom.nn.Sequential` (nested ones are flattened) of Conv2d, Linear, ReLU, MaxPool2d, Flatten,
Dropout and Identity. `prepare` fuses each Conv2d/Linear with a ReLU that follows it and puts an observer on
the input and on each fused layer's output; `convert` turns the observed model into a `QuantizedModel` that
runs loom's int8 kernels. The last Conv2d/Linear writes float32 straight from its int32 sums (no output
quantisation), as do the layers after it.
"""
from __future__ import annotations

import copy
from typing import Any, Callable, Iterable

import numpy as np

from loom import _api as loom
from loom import _upper
import loom.nn.functional as F
from loom.errors import LoomTypeError, LoomValueError
from loom.nn import Module, ModuleList, Sequential, modules

from .fake_quantize import FakeQuantize
from .modules import (QuantizedConv2d, QuantizedFlatten, QuantizedLinear, QuantizedMaxPool2d, QuantizedModel,
                      QuantizedReLU, QuantStub)
from .qconfig import QConfig, default_qat_qconfig, default_qconfig

COMPUTE = (modules.Conv2d, modules.Linear)
PASS = (modules.ReLU, modules.MaxPool2d, modules.Flatten, modules.Dropout, modules.Identity)


def _leaves(model: Module) -> list[Module]:
    if isinstance(model, Sequential):
        return [leaf for child in model for leaf in _leaves(child)]
    if isinstance(model, COMPUTE + PASS):
        return [model]
    raise LoomTypeError(f"loom.quantization: cannot quantise a {type(model).__name__}; expected a "
                        "loom.nn.Sequential of Conv2d, Linear, ReLU, MaxPool2d, Flatten, Dropout and Identity "
                        "(write the model as a Sequential to quantise it)")


class ObservedLayer(Module):
    """A Conv2d or Linear (with the ReLU fused after it) between observers: what `prepare` makes."""

    def __init__(self, layer: Module, relu: bool, activation_post_process: Module | None,
                 weight_fake_quant: Module | None, weight_observer: Callable) -> None:
        super().__init__()
        if isinstance(layer, modules.Conv2d) and (layer.groups != 1 or layer.padding_mode != "zeros"
                                                  or isinstance(layer.padding, str)):
            raise LoomValueError(f"loom.quantization: {layer!r}: only groups=1, numeric zero padding is supported")
        self.layer = layer
        self.relu = relu
        self.activation_post_process = activation_post_process
        self.weight_fake_quant = weight_fake_quant
        self.weight_observer = weight_observer

    def forward(self, x):
        w = self.layer.weight
        if self.weight_fake_quant is not None:  # QAT: the weight's range is this step's, not a running one.
            self.weight_fake_quant.activation_post_process.min_val = None
            w = self.weight_fake_quant(w)
        if isinstance(self.layer, modules.Conv2d):
            y = F.conv2d(x, w, self.layer.bias, self.layer.stride, self.layer.padding, self.layer.dilation)
        else:
            y = F.linear(x, w, self.layer.bias)
        if self.relu:
            y = F.relu(y)
        return y if self.activation_post_process is None else self.activation_post_process(y)


class ObservedModel(Module):
    """The model `prepare` returns: call it on calibration batches (or train it, after `prepare_qat`)."""

    def __init__(self, quant: Module, layers: list[Module], qat: bool) -> None:
        super().__init__()
        self.quant = quant
        self.layers = ModuleList(layers)
        self.qat = qat

    def forward(self, x):
        x = self.quant(x)
        for layer in self.layers:
            x = layer(x)
        return x


def _prepare(model: Module, qconfig: QConfig, qat: bool, inplace: bool) -> Module:
    if not isinstance(qconfig, QConfig):
        raise LoomTypeError(f"loom.quantization: qconfig must be a loom.quantization.QConfig, got "
                            f"{type(qconfig).__name__}")
    if not isinstance(model, (Sequential, *COMPUTE, *PASS)):  # A forward of its own: torch's eager mode.
        return _upper.prepare_eager(model, qconfig, qat)
    leaves = _leaves(model if inplace else copy.deepcopy(model))
    last = max((i for i, m in enumerate(leaves) if isinstance(m, COMPUTE)), default=-1)
    if last < 0:
        raise LoomValueError("loom.quantization: the model has no Conv2d or Linear layer to quantise")
    layers: list[Module] = []
    i = 0
    while i < len(leaves):
        m = leaves[i]
        if isinstance(m, COMPUTE):
            relu = i + 1 < len(leaves) and isinstance(leaves[i + 1], modules.ReLU)
            out_obs = None if i == last else qconfig.activation()
            wfq = qconfig.weight() if qat else None
            layers.append(ObservedLayer(m, relu, out_obs, wfq, qconfig.weight))
            i += 2 if relu else 1
        else:
            layers.append(m)
            i += 1
    return ObservedModel(qconfig.activation(), layers, qat)


def prepare(model: Module, qconfig: QConfig | None = None, inplace: bool = False) -> Module:
    """Insert observers for post-training quantisation (as ``torch.ao.quantization.prepare``).

    Parameters
    ----------
    model : loom.nn.Sequential
        Float model of Conv2d, Linear, ReLU, MaxPool2d, Flatten, Dropout, Identity (nested Sequentials are fine).
    qconfig : QConfig, optional
        Default `default_qconfig` (min-max uint8 activations, per-channel symmetric int8 weights).
    inplace : bool
        Reuse `model`'s layers instead of copying them.

    Examples
    --------
    >>> import numpy as np, loom, loom.nn as nn
    >>> m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    >>> pm = prepare(m)
    >>> _ = pm(loom.randn(16, 4))
    >>> qm = convert(pm)
    >>> qm(loom.randn(3, 4)).shape
    loom.Size([3, 2])
    """
    prepared = _prepare(model, qconfig or default_qconfig, False, inplace)
    prepared.eval()
    return prepared


def prepare_qat(model: Module, qconfig: QConfig | None = None, inplace: bool = False) -> Module:
    """Insert fake-quant modules for quantisation-aware training (as ``torch.ao.quantization.prepare_qat``).

    Train the returned model as usual (eager mode: observers read values each step), then `convert` it.
    """
    prepared = _prepare(model, qconfig or default_qat_qconfig, True, inplace)
    prepared.train()
    return prepared


def _qparams(obs: Module) -> tuple[float, int]:
    scale, zp = obs.calculate_qparams()
    if isinstance(obs, FakeQuantize):
        obs = obs.activation_post_process
    if obs.dtype != "uint8":
        raise LoomValueError(f"loom.quantization.convert: activations must be uint8 for loom's int8 kernels; the "
                             f"observer {type(obs).__name__} uses {obs.dtype}")
    return float(scale), int(zp)


def _weight_qparams(layer: ObservedLayer) -> tuple[np.ndarray, np.ndarray, int, int]:
    """The int8 weight (out, ...) and its per-output-channel scales, from a fresh observer of the final weight."""
    obs = layer.weight_observer()
    if isinstance(obs, FakeQuantize):
        obs = obs.activation_post_process
    if obs.dtype != "int8" or obs.qscheme != "per_channel_symmetric" or getattr(obs, "ch_axis", None) != 0:
        raise LoomValueError("loom.quantization.convert: weights must be int8, per_channel_symmetric along axis 0 "
                             f"for loom's int8 kernels; got {obs.dtype} {obs.qscheme}")
    w = layer.layer.weight.detach().numpy().astype(np.float32)
    obs(w)
    scale, _ = obs.calculate_qparams()
    shape = (-1,) + (1,) * (w.ndim - 1)
    q = np.clip(np.rint(w / scale.reshape(shape)), obs.quant_min, obs.quant_max).astype(np.int8)
    return q, scale.astype(np.float32), obs.quant_min, obs.quant_max


def convert(model: Module, inplace: bool = False) -> Module:
    """Turn a calibrated (or QAT-trained) `ObservedModel` into an int8 `QuantizedModel`.

    Weights become int8 with one symmetric scale per output channel, biases int32 at the scale
    ``input_scale * weight_scale``, and each layer's requantisation multiplier float32
    ``input_scale * weight_scale / output_scale``.

    Parameters
    ----------
    model : ObservedModel
        From `prepare` (after calibration batches) or `prepare_qat` (after training).
    inplace : bool
        Accepted for torch's signature; the int8 model never shares the float model's buffers.

    Raises
    ------
    loom.errors.LoomValueError
        If an observer saw no values, or the QConfig's dtypes are not what the int8 kernels take
        (uint8 activations, per-channel symmetric int8 weights along axis 0).
    """
    if getattr(model, "_loom_quantization", None) in ("ptq", "qat"):
        return _upper.convert_eager(model)
    if not isinstance(model, ObservedModel):
        raise LoomTypeError(f"loom.quantization.convert: expected the model returned by prepare or prepare_qat, got "
                            f"{type(model).__name__}")
    del inplace  # The quantised model never shares the float model's buffers.
    qparams = _qparams(model.quant)
    steps: list[Module] = [QuantStub(*qparams)]
    for layer in model.layers:
        if isinstance(layer, ObservedLayer):
            out = None if layer.activation_post_process is None else _qparams(layer.activation_post_process)
            wq, ws, _, _ = _weight_qparams(layer)
            bias = None if layer.layer.bias is None else layer.layer.bias.detach().numpy().astype(np.float32)
            cls = QuantizedConv2d if isinstance(layer.layer, modules.Conv2d) else QuantizedLinear
            steps.append(cls.from_float(layer.layer, wq, ws, bias, qparams, out, layer.relu))
            qparams = out
        elif isinstance(layer, modules.MaxPool2d):
            steps.append(QuantizedMaxPool2d(layer))
        elif isinstance(layer, modules.Flatten):
            steps.append(QuantizedFlatten(layer.start_dim, layer.end_dim))
        elif isinstance(layer, modules.ReLU):
            steps.append(QuantizedReLU())
    return QuantizedModel(steps)


def quantize(model: Module, calibration: Iterable | Callable[[Module], Any], qconfig: QConfig | None = None,
             num_batches: int | None = None) -> Module:
    """Post-training quantisation in one call: `prepare`, calibrate, `convert`.

    Parameters
    ----------
    model : loom.nn.Sequential
    calibration : iterable or callable
        Batches (a tensor, or a tuple whose first item is the input, as a DataLoader yields), or a function
        called with the prepared model that runs the calibration itself (as torch's ``quantize(run_fn)``).
    qconfig : QConfig, optional
    num_batches : int, optional
        Stop after this many batches of an iterable.

    Examples
    --------
    >>> import loom, loom.nn as nn
    >>> m = nn.Sequential(nn.Linear(4, 3))
    >>> qm = quantize(m, [loom.randn(8, 4) for _ in range(2)])
    >>> type(qm).__name__
    'QuantizedModel'
    """
    prepared = prepare(model, qconfig)
    with loom.no_grad():
        if callable(calibration) and not hasattr(calibration, "__iter__"):
            calibration(prepared)
        else:
            for i, batch in enumerate(calibration):
                if num_batches is not None and i >= num_batches:
                    break
                prepared(batch[0] if isinstance(batch, (tuple, list)) else batch)
    return convert(prepared)
