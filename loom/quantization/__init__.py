"""int8 quantisation: calibration observers, fake-quant for QAT, int8 C kernels, QDQ ONNX export.

Post-training, as in ``torch.ao.quantization``::

    qmodel = loom.quantization.quantize(model, calib_loader)           # or:
    prepared = loom.quantization.prepare(model, qconfig)
    for x, _ in calib_loader: prepared(x)
    qmodel = loom.quantization.convert(prepared)

Quantisation-aware: ``prepare_qat(model)``, train, ``convert``. Models with their own ``forward``
(residual additions) use torch's eager-mode markers: `QuantStub`, `DeQuantStub`, `FloatFunctional`,
`fuse_modules`. See docs/quantization.md.
"""
from .eager import DeQuantStub, FloatFunctional, QuantStub, fuse_modules
from .fake_quantize import FakeQuantize, fake_quantize
from .observer import (HistogramObserver, MinMaxObserver, MovingAverageMinMaxObserver, ObserverBase,
                       PerChannelMinMaxObserver)
from .qconfig import QConfig, default_qat_qconfig, default_qconfig, get_default_qat_qconfig, get_default_qconfig
from .quantize import ObservedModel, convert, prepare, prepare_qat, quantize
from .modules import QuantizedModel
from .onnx import export_qdq

__all__ = ["DeQuantStub", "FakeQuantize", "FloatFunctional", "HistogramObserver", "MinMaxObserver",
           "MovingAverageMinMaxObserver", "ObservedModel", "ObserverBase", "PerChannelMinMaxObserver", "QConfig",
           "QuantStub", "QuantizedModel", "convert", "default_qat_qconfig", "default_qconfig", "export_qdq",
           "fake_quantize", "fuse_modules", "get_default_qat_qconfig", "get_default_qconfig", "prepare",
           "prepare_qat", "quantize"]
