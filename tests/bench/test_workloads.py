"""loom.bench.workloads: identical weights and data for every framework, and matching first steps."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from loom.bench import variants
from loom.bench.workloads import FRAMEWORKS, WORKLOADS, api, get, init_array, init_state

HAS_TORCH = importlib.util.find_spec("torch") is not None
HAS_JAX = importlib.util.find_spec("jax") is not None


def test_init_array_depends_on_name_and_seed_only():
    a = init_array("layer.weight", (8, 5), seed=3)
    assert np.array_equal(a, init_array("layer.weight", (8, 5), seed=3))
    assert not np.array_equal(a, init_array("other.weight", (8, 5), seed=3))
    assert not np.array_equal(a, init_array("layer.weight", (8, 5), seed=4))
    assert np.abs(a).max() <= 1 / np.sqrt(5)
    assert a.dtype == np.float32


def test_init_array_norm_and_buffer_rules():
    assert init_array("bn.weight", (3,), 0).tolist() == [1.0, 1.0, 1.0]
    assert init_array("bn.bias", (3,), 0).tolist() == [0.0, 0.0, 0.0]
    assert init_array("bn.running_var", (2,), 0).tolist() == [1.0, 1.0]
    n = init_state({"bn.num_batches_tracked": ((), np.int64)}, 0)["bn.num_batches_tracked"]
    assert n.shape == () and n.dtype == np.int64 and n == 0


def test_unknown_workload_and_framework():
    with pytest.raises(ValueError, match="unknown model 'vgg'"):
        get("vgg")
    assert "unknown framework" in get("mlp").supports("tf")
    assert "no JAX variant" in get("resnet").supports("jax")
    assert get("mlp").supports("jax") is None


@pytest.mark.parametrize("name", WORKLOADS)
def test_workload_description_and_batches(name):
    w = get(name)
    if w.unavailable():
        pytest.skip(w.unavailable())
    b1 = w.batches(np.random.default_rng(0))
    b2 = w.batches(np.random.default_rng(0))
    assert len(b1) >= 1 and w.samples_per_step >= 1 and w.unit in ("samples", "tokens", "nodes")
    for x, y in zip(b1, b2):
        assert all(np.array_equal(p, q) for p, q in zip(x, y))  # Same seed, same data.


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")
@pytest.mark.parametrize("name", [n for n in WORKLOADS if get(n).param_shapes is not None])
def test_jax_parameters_match_the_torch_state_dict(name):
    w = get(name)
    sd = w.model(api("torch")).state_dict()
    assert {k: tuple(v.shape) for k, v in sd.items()} == {k: tuple(s) for k, s in w.param_shapes().items()}


@pytest.mark.parametrize("name", WORKLOADS)
def test_loom_and_torch_models_have_the_same_state(name):
    if not HAS_TORCH:
        pytest.skip("torch is not installed")
    w = get(name)
    lsd = w.model(api("loom")).state_dict()
    tsd = w.model(api("torch")).state_dict()
    assert {k: tuple(v.shape) for k, v in lsd.items()} == {k: tuple(v.shape) for k, v in tsd.items()}


@pytest.mark.parametrize("name", ["mlp", "mlp-infer", "gcn"])
def test_first_steps_agree_across_frameworks(name):
    """Same weights, same batch: every variant's first two outputs agree (the second after one update)."""
    w = get(name)
    if w.unavailable():
        pytest.skip(w.unavailable())
    fws = ["loom", "loom-function"] + (["torch"] if HAS_TORCH else []) + \
        (["jax"] if HAS_JAX and w.jax_step is not None else [])
    values = {}
    for fw in fws:
        r = variants.build(w, fw, {"seed": 0, "loom_backend": "reference"})
        values[fw] = [r.value(r.run(1)) for _ in range(2)]
    ref = values["loom"]
    for fw, v in values.items():
        assert v == pytest.approx(ref, rel=1e-4, abs=1e-5), (fw, values)


def test_frameworks_list():
    assert FRAMEWORKS == ("loom", "loom-function", "torch", "torch-compile", "jax")
