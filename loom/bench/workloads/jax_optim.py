"""PyTorch's SGD, Adam and AdamW update rules written out for JAX pytrees (no optax).

Each returns ``(init(params) -> opt_state, update(params, grads, opt_state) ->
(params, opt_state))``; both are pure, so they run inside ``jax.jit``.
"""
from __future__ import annotations


def sgd(jnp, lr: float, momentum: float = 0.0):
    """torch.optim.SGD: buf = momentum * buf + g; p -= lr * buf."""
    def init(params):
        return {k: jnp.zeros_like(v) for k, v in params.items()}

    def update(params, grads, bufs):
        bufs = {k: momentum * bufs[k] + grads[k] for k in params}
        return {k: params[k] - lr * bufs[k] for k in params}, bufs
    return init, update


def adam(jnp, lr: float, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
         decoupled: bool = False):
    """torch.optim.Adam (L2 weight decay added to the gradient) or, with `decoupled`, AdamW."""
    b1, b2 = betas

    def init(params):
        # Separate buffers for m and v: the state is donated, and a buffer may be donated once.
        return {"step": jnp.zeros((), jnp.float32), "m": {k: jnp.zeros_like(v) for k, v in params.items()},
                "v": {k: jnp.zeros_like(v) for k, v in params.items()}}

    def update(params, grads, state):
        t = state["step"] + 1
        bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
        new_p, new_m, new_v = {}, {}, {}
        for k, p in params.items():
            g = grads[k]
            if weight_decay and decoupled:
                p = p * (1 - lr * weight_decay)
            elif weight_decay:
                g = g + weight_decay * p
            m = b1 * state["m"][k] + (1 - b1) * g
            v = b2 * state["v"][k] + (1 - b2) * g * g
            new_p[k] = p - (lr / bc1) * m / (jnp.sqrt(v) / jnp.sqrt(bc2) + eps)
            new_m[k], new_v[k] = m, v
        return new_p, {"step": t, "m": new_m, "v": new_v}
    return init, update


def training_step(jax, loss_fn, opt):
    """A jitted step ``(state, *batch) -> (state, loss)`` for ``loss_fn(params, *batch)`` and `opt`.

    The state is ``(params, opt_state)``; its buffers are donated, so XLA
    updates them in place as the other frameworks do.
    """
    opt_init, opt_update = opt

    def init(params):
        return params, opt_init(params)

    def step(state, *batch):
        params, opt_state = state
        value, grads = jax.value_and_grad(loss_fn)(params, *batch)
        params, opt_state = opt_update(params, grads, opt_state)
        return (params, opt_state), value
    return init, jax.jit(step, donate_argnums=0)


def cross_entropy_jax(jax, jnp, logits, y):
    """Mean cross-entropy of integer targets `y` (F.cross_entropy's default)."""
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=-1))
