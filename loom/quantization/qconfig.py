"""QConfig: which observer (or fake-quant) watches activations and which watches weights."""
from __future__ import annotations

from typing import Any, NamedTuple

from .fake_quantize import default_fake_quant, default_weight_fake_quant
from .observer import HistogramObserver, MinMaxObserver, PerChannelMinMaxObserver


class QConfig(NamedTuple):
    """Factories (classes or ``with_args`` partials) for the activation and weight observers.

    loom's int8 kernels take uint8 activations (per tensor, affine by default; symmetric works too) and int8
    weights with one symmetric scale per output channel, so `weight` must make a per-channel symmetric int8
    observer (or a `FakeQuantize` around one).
    """

    activation: Any
    weight: Any


def get_default_qconfig(activation: str = "minmax", reduce_range: bool = False) -> QConfig:
    """The post-training QConfig: uint8 per-tensor affine activations, int8 per-channel symmetric weights.

    Parameters
    ----------
    activation : {"minmax", "entropy", "percentile"}
        The activation observer: `MinMaxObserver` or a `HistogramObserver` in that mode.
    reduce_range : bool
        Weights in [-64, 63] (7 bits): AVX2 CPUs without VNNI then take the faster ``vpmaddubsw`` route (it
        cannot saturate on such weights); results are exact either way.

    Examples
    --------
    >>> get_default_qconfig().activation().dtype
    'uint8'
    """
    act = MinMaxObserver if activation == "minmax" else HistogramObserver.with_args(mode=activation)
    weight = PerChannelMinMaxObserver.with_args(dtype="int8", qscheme="per_channel_symmetric",
                                                reduce_range=reduce_range)
    return QConfig(act, weight)


def get_default_qat_qconfig(reduce_range: bool = False, learnable: bool = False) -> QConfig:
    """The QAT QConfig: moving-average uint8 activation fake-quant, per-channel int8 weight fake-quant."""
    return QConfig(default_fake_quant.func.with_args(**default_fake_quant.keywords, learnable=learnable),
                   default_weight_fake_quant.func.with_args(**default_weight_fake_quant.keywords,
                                                            reduce_range=reduce_range))


default_qconfig = get_default_qconfig()
default_qat_qconfig = get_default_qat_qconfig()
