"""gpt: a character-level GPT, 4 layers, 4 heads, d_model 128, context 64, vocab 65, batch 32, AdamW.

Pre-norm transformer blocks (causal self-attention through
``F.scaled_dot_product_attention``, then a GELU MLP of width 512), learned
position embeddings, a final LayerNorm and an untied output layer;
cross-entropy over every position. Data: windows of tinyshakespeare
(``$LOOM_DATA_DIR/tinyshakespeare/input.txt``, default under
/work/shared/data) at seeded random offsets, or uniform random characters
where the text is absent. Throughput counts tokens (batch x context).
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from loom.bench.workloads import Workload
from loom.bench.workloads.jax_optim import adam, cross_entropy_jax, training_step

LAYERS, HEADS, D_MODEL, CONTEXT, VOCAB, BATCH = 4, 4, 128, 64, 65, 32
LR, WEIGHT_DECAY = 1e-3, 0.01


def text_path() -> Path:
    return Path(os.environ.get("LOOM_DATA_DIR", "/work/shared/data")) / "tinyshakespeare" / "input.txt"


def batches(rng: np.random.Generator, n: int = 4, batch: int = BATCH) -> list[tuple[np.ndarray, np.ndarray]]:
    """`n` (inputs, next-character targets) pairs of shape (batch, CONTEXT), int64."""
    path = text_path()
    if path.exists():
        raw = np.frombuffer(path.read_bytes(), dtype=np.uint8)
        chars, ids = np.unique(raw, return_inverse=True)
        ids = ids.astype(np.int64) % VOCAB  # The text has exactly 65 distinct characters.
    else:
        ids = rng.integers(0, VOCAB, size=100_000, dtype=np.int64)
    out = []
    for _ in range(n):
        starts = rng.integers(0, len(ids) - CONTEXT - 1, size=batch)
        rows = ids[starts[:, None] + np.arange(CONTEXT + 1)]
        out.append((np.ascontiguousarray(rows[:, :-1]), np.ascontiguousarray(rows[:, 1:])))
    return out


def model(a):
    """The GPT as loom or torch modules (names match `param_shapes`)."""
    nn, F, lib = a.nn, a.F, a.lib

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(D_MODEL, 3 * D_MODEL)
            self.proj = nn.Linear(D_MODEL, D_MODEL)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.qkv(x).reshape(b, t, 3, HEADS, c // HEADS).permute(2, 0, 3, 1, 4)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.proj(y.transpose(1, 2).reshape(b, t, c))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(D_MODEL)
            self.attn = Attention()
            self.ln2 = nn.LayerNorm(D_MODEL)
            self.fc = nn.Linear(D_MODEL, 4 * D_MODEL)
            self.out = nn.Linear(4 * D_MODEL, D_MODEL)

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(VOCAB, D_MODEL)
            self.pos = nn.Embedding(CONTEXT, D_MODEL)
            self.blocks = nn.ModuleList([Block() for _ in range(LAYERS)])
            self.ln_f = nn.LayerNorm(D_MODEL)
            self.head = nn.Linear(D_MODEL, VOCAB, bias=False)

        def forward(self, idx):
            x = self.tok(idx) + self.pos(lib.arange(idx.shape[1]))
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln_f(x))
    return GPT()


def optimizer(a, params):
    return a.optim.AdamW(params, lr=LR, weight_decay=WEIGHT_DECAY)


def loss(a, m, x, y):
    logits = m(x)
    return a.F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))


def param_shapes() -> dict[str, tuple[int, ...]]:
    d = D_MODEL
    shapes = {"tok.weight": (VOCAB, d), "pos.weight": (CONTEXT, d)}
    for i in range(LAYERS):
        p = f"blocks.{i}."
        shapes.update({p + "ln1.weight": (d,), p + "ln1.bias": (d,), p + "attn.qkv.weight": (3 * d, d),
                       p + "attn.qkv.bias": (3 * d,), p + "attn.proj.weight": (d, d), p + "attn.proj.bias": (d,),
                       p + "ln2.weight": (d,), p + "ln2.bias": (d,), p + "fc.weight": (4 * d, d),
                       p + "fc.bias": (4 * d,), p + "out.weight": (d, 4 * d), p + "out.bias": (d,)})
    shapes.update({"ln_f.weight": (d,), "ln_f.bias": (d,), "head.weight": (VOCAB, d)})
    return shapes


def jax_step(jax, jnp):
    def layer_norm(x, w, b):
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / jnp.sqrt(var + 1e-5) * w + b

    def linear(x, p, name, bias=True):
        y = x @ p[name + ".weight"].T
        return y + p[name + ".bias"] if bias else y

    def attention(x, p, name):
        b, t, c = x.shape
        qkv = linear(x, p, name + ".qkv").reshape(b, t, 3, HEADS, c // HEADS).transpose(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(c // HEADS)
        mask = jnp.tril(jnp.ones((t, t), bool))
        weights = jax.nn.softmax(jnp.where(mask, scores, -jnp.inf), axis=-1)
        y = (weights @ v).transpose(0, 2, 1, 3).reshape(b, t, c)
        return linear(y, p, name + ".proj")

    def forward(p, idx):
        x = p["tok.weight"][idx] + p["pos.weight"][jnp.arange(idx.shape[1])]
        for i in range(LAYERS):
            n = f"blocks.{i}."
            x = x + attention(layer_norm(x, p[n + "ln1.weight"], p[n + "ln1.bias"]), p, n + "attn")
            h = jax.nn.gelu(linear(layer_norm(x, p[n + "ln2.weight"], p[n + "ln2.bias"]), p, n + "fc"),
                            approximate=True)
            x = x + linear(h, p, n + "out")
        return linear(layer_norm(x, p["ln_f.weight"], p["ln_f.bias"]), p, "head", bias=False)

    def loss_fn(params, x, y):
        return cross_entropy_jax(jax, jnp, forward(params, x).reshape(-1, VOCAB), y.reshape(-1))
    return training_step(jax, loss_fn, adam(jnp, LR, weight_decay=WEIGHT_DECAY, decoupled=True))


WORKLOAD = Workload(
    name="gpt", description="char-GPT 4 layers x 4 heads, d 128, context 64, batch 32, AdamW (training step)",
    samples_per_step=BATCH * CONTEXT, unit="tokens", steps=5, quick_steps=1,
    batches=batches, model=model, optimizer=optimizer, loss=loss, jax_step=jax_step, param_shapes=param_shapes)
