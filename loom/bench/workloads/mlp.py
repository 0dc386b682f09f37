"""mlp: a 784-256-256-10 ReLU perceptron, batch 128, cross-entropy, SGD with momentum 0.9.

The compiler issue's first training benchmark (MNIST-shaped inputs). Data:
synthetic standard-normal images and uniform labels from the seeded generator.
"""
from __future__ import annotations

from loom.bench.workloads import Workload, synthetic_images
from loom.bench.workloads.jax_optim import cross_entropy_jax, sgd, training_step

BATCH = 128
SIZES = (784, 256, 256, 10)
LR, MOMENTUM = 0.01, 0.9


def model(a):
    """The perceptron as an ``nn.Sequential`` of Linear and ReLU layers (loom or torch)."""
    nn = a.nn
    return nn.Sequential(nn.Linear(SIZES[0], SIZES[1]), nn.ReLU(), nn.Linear(SIZES[1], SIZES[2]), nn.ReLU(),
                         nn.Linear(SIZES[2], SIZES[3]))


def optimizer(a, params):
    return a.optim.SGD(params, lr=LR, momentum=MOMENTUM)


def loss(a, m, x, y):
    return a.F.cross_entropy(m(x), y)


def forward_jax(jnp, p, x):
    """The same perceptron over a dict of PyTorch-named parameters (weights are (out, in))."""
    h = jnp.maximum(x @ p["0.weight"].T + p["0.bias"], 0)
    h = jnp.maximum(h @ p["2.weight"].T + p["2.bias"], 0)
    return h @ p["4.weight"].T + p["4.bias"]


def param_shapes() -> dict[str, tuple[int, ...]]:
    shapes = {}
    for i, (n_in, n_out) in enumerate(zip(SIZES[:-1], SIZES[1:])):
        shapes[f"{2 * i}.weight"] = (n_out, n_in)
        shapes[f"{2 * i}.bias"] = (n_out,)
    return shapes


def jax_step(jax, jnp):
    def loss_fn(params, x, y):
        return cross_entropy_jax(jax, jnp, forward_jax(jnp, params, x), y)
    return training_step(jax, loss_fn, sgd(jnp, LR, MOMENTUM))


WORKLOAD = Workload(
    name="mlp", description="MLP 784-256-256-10, batch 128, SGD momentum (training step)",
    samples_per_step=BATCH, unit="samples", steps=20, quick_steps=2,
    batches=lambda rng: synthetic_images(rng, 4, BATCH, (SIZES[0],), SIZES[-1]),
    model=model, optimizer=optimizer, loss=loss, jax_step=jax_step,
    param_shapes=param_shapes)
