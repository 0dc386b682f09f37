"""mlp-infer: the mlp workload's perceptron answering one sample at a time (batch 1, no gradients).

Measures per-call latency, where framework overhead rather than arithmetic
dominates. The step is the forward pass under ``no_grad``.
"""
from __future__ import annotations

import numpy as np

from loom.bench.workloads import Workload
from loom.bench.workloads.mlp import SIZES, forward_jax, model, param_shapes


def batches(rng: np.random.Generator) -> list[tuple[np.ndarray]]:
    return [(rng.standard_normal((1, SIZES[0]), dtype=np.float32),) for _ in range(8)]


def infer(a, m, x):
    return m(x)


def jax_step(jax, jnp):
    def init(params):
        return params

    @jax.jit
    def forward(params, x):
        return forward_jax(jnp, params, x)

    def step(state, x):
        return state, forward(state, x)
    return init, step


WORKLOAD = Workload(
    name="mlp-infer", description="MLP 784-256-256-10 inference, batch 1 (latency)",
    samples_per_step=1, unit="samples", steps=200, quick_steps=5,
    batches=batches, model=model, loss=infer, jax_step=jax_step,
    param_shapes=param_shapes, train=False)
