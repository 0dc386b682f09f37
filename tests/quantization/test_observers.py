"""Observers' scales and zero points: by hand, and against torch.ao.quantization's observers."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.ao.quantization import observer as tobs

import loom
from loom.quantization import (HistogramObserver, MinMaxObserver, MovingAverageMinMaxObserver,
                               PerChannelMinMaxObserver)

TORCH_DTYPE = {"int8": torch.qint8, "uint8": torch.quint8}


def batches():
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((8, 16)) * 3 + 1).astype(np.float32)
    return [x * (b + 1) - b for b in range(3)]


def test_minmax_by_hand():
    obs = MinMaxObserver()
    obs(loom.tensor(np.array([-1.0, 0.5], np.float32)))
    obs(np.array([3.0, 0.0], np.float32))
    scale, zp = obs.calculate_qparams()
    assert scale == np.float32(4.0) / np.float32(255)
    assert zp == 64  # 0 - round(-1 / (4/255)) = round(63.75)
    sym = MinMaxObserver(dtype="int8", qscheme="per_tensor_symmetric")
    sym(np.array([-1.0, 3.0], np.float32))
    s, z = sym.calculate_qparams()
    assert s == np.float32(3.0) / np.float32(127.5) and z == 0


def test_range_always_holds_zero():
    obs = MinMaxObserver()
    obs(np.array([2.0, 6.0], np.float32))
    scale, zp = obs.calculate_qparams()
    assert zp == 0 and scale == np.float32(6.0) / np.float32(255)


def test_moving_average_by_hand():
    obs = MovingAverageMinMaxObserver(averaging_constant=0.5)
    obs(np.array([-2.0, 2.0], np.float32))
    obs(np.array([0.0, 6.0], np.float32))
    assert obs.min_val == np.float32(-1.0) and obs.max_val == np.float32(4.0)


@pytest.mark.filterwarnings("ignore:Please use quant_min")
@pytest.mark.parametrize("ours,theirs,kw", [
    (MinMaxObserver, tobs.MinMaxObserver, {}),
    (MinMaxObserver, tobs.MinMaxObserver, dict(dtype="int8", qscheme="per_tensor_symmetric")),
    (MinMaxObserver, tobs.MinMaxObserver, dict(dtype="uint8", qscheme="per_tensor_symmetric")),
    (MinMaxObserver, tobs.MinMaxObserver, dict(reduce_range=True)),
    (MovingAverageMinMaxObserver, tobs.MovingAverageMinMaxObserver, dict(averaging_constant=0.1)),
    (PerChannelMinMaxObserver, tobs.PerChannelMinMaxObserver,
     dict(ch_axis=1, dtype="int8", qscheme="per_channel_symmetric")),
    (PerChannelMinMaxObserver, tobs.PerChannelMinMaxObserver,
     dict(ch_axis=0, dtype="uint8", qscheme="per_channel_affine")),
])
def test_against_torch(ours, theirs, kw):
    tkw = dict(kw)
    if "dtype" in kw:
        tkw["dtype"] = TORCH_DTYPE[kw["dtype"]]
    if "qscheme" in kw:
        tkw["qscheme"] = getattr(torch, kw["qscheme"])
    a, b = ours(**kw), theirs(**tkw)
    for x in batches():
        a(x)
        b(torch.from_numpy(x))
    s, z = a.calculate_qparams()
    ts, tz = b.calculate_qparams()
    np.testing.assert_array_equal(s, ts.numpy())
    np.testing.assert_array_equal(z, tz.numpy())


def test_histogram_percentile():
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.random(100_000), [1000.0]]).astype(np.float32)
    obs = HistogramObserver(mode="percentile", percentile=99.0, bins=4096)
    obs(x)
    lo, hi = obs.min_max()
    # The 99th percentile of |x| is ~0.99; bins are 1000/4096 wide, so the threshold is the first bin edge past it.
    assert lo == x.min()
    assert 0.99 <= hi <= 0.99 + 1000 / 4096 + 1e-6


def test_histogram_entropy_clips_outliers():
    rng = np.random.default_rng(2)
    x = np.concatenate([rng.standard_normal(200_000), [-40.0, 40.0]]).astype(np.float32)
    obs = HistogramObserver(mode="entropy")
    for part in np.split(x[rng.permutation(x.size)], 2):  # Two batches: the second widens nothing.
        obs(part)
    lo, hi = obs.min_max()
    assert lo == -hi and 2.5 < hi < 10.0
    full = HistogramObserver(mode="minmax")
    full(x)
    assert full.min_max()[1] == 40.0


def test_histogram_rebins_when_range_grows():
    obs = HistogramObserver(mode="percentile", percentile=100.0, bins=256)
    obs(np.full(10, 1.0, np.float32))
    obs(np.full(10, 4.0, np.float32))
    assert obs.hist.sum() == 20 and obs.amax == 4.0
    assert obs.hist[63] == 10 and obs.hist[255] == 10  # 1.0 sits in the bin a quarter of the way up.


def test_errors():
    with pytest.raises(loom.errors.LoomValueError, match="no values observed"):
        MinMaxObserver().calculate_qparams()
    with pytest.raises(loom.errors.LoomValueError, match="not supported"):
        MinMaxObserver(dtype="float16")
    with pytest.raises(loom.errors.LoomValueError, match="quant_min"):
        MinMaxObserver(quant_min=-5)
    with pytest.raises(loom.errors.LoomValueError, match="mode"):
        HistogramObserver(mode="kl")
    with pytest.raises(loom.errors.ShapeError, match="ch_axis"):
        PerChannelMinMaxObserver(ch_axis=3)(np.zeros((2, 2), np.float32))
