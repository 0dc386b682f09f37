"""cnn: the compiler issue's small convnet on 28x28 images, batch 64, Adam.

conv 1->32 3x3, ReLU, conv 32->64 3x3, ReLU, max-pool 2, flatten (9216),
fc 9216->128, ReLU, fc 128->10; cross-entropy. Data: synthetic
standard-normal images and uniform labels from the seeded generator.
"""
from __future__ import annotations

from loom.bench.workloads import Workload, synthetic_images
from loom.bench.workloads.jax_optim import adam, cross_entropy_jax, training_step

BATCH = 64
LR = 1e-3


def model(a):
    """The convnet as one ``nn.Sequential`` (loom or torch)."""
    nn = a.nn
    return nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(9216, 128), nn.ReLU(), nn.Linear(128, 10))


def optimizer(a, params):
    return a.optim.Adam(params, lr=LR)


def loss(a, m, x, y):
    return a.F.cross_entropy(m(x), y)


def param_shapes() -> dict[str, tuple[int, ...]]:
    return {"0.weight": (32, 1, 3, 3), "0.bias": (32,), "2.weight": (64, 32, 3, 3), "2.bias": (64,),
            "6.weight": (128, 9216), "6.bias": (128,), "8.weight": (10, 128), "8.bias": (10,)}


def jax_step(jax, jnp):
    lax = jax.lax

    def conv(x, w, b):
        y = lax.conv_general_dilated(x, w, (1, 1), "VALID", dimension_numbers=("NCHW", "OIHW", "NCHW"))
        return y + b[None, :, None, None]

    def forward(p, x):
        h = jnp.maximum(conv(x, p["0.weight"], p["0.bias"]), 0)
        h = jnp.maximum(conv(h, p["2.weight"], p["2.bias"]), 0)
        h = lax.reduce_window(h, -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")
        h = h.reshape(h.shape[0], -1)
        h = jnp.maximum(h @ p["6.weight"].T + p["6.bias"], 0)
        return h @ p["8.weight"].T + p["8.bias"]

    def loss_fn(params, x, y):
        return cross_entropy_jax(jax, jnp, forward(params, x), y)
    return training_step(jax, loss_fn, adam(jnp, LR))


WORKLOAD = Workload(
    name="cnn", description="CNN conv32-conv64-pool-fc128-fc10 on 28x28, batch 64, Adam (training step)",
    samples_per_step=BATCH, unit="samples", steps=5, quick_steps=1,
    batches=lambda rng: synthetic_images(rng, 4, BATCH, (1, 28, 28), 10),
    model=model, optimizer=optimizer, loss=loss, jax_step=jax_step, param_shapes=param_shapes)
