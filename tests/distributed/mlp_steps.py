"""The traced MLP and GPT training steps the auto-parallel tests plan: one definition for the single-process tests
(test_autoparallel.py) and the multi-process scripts (scripts/autoparallel.py, scripts/sbp_mesh.py,
scripts/autoparallel_gpt.py)."""
import numpy as np

import loom


def mlp_step(batch: int, d_in: int, hidden: int, d_out: int):
    """A two-layer MLP's SGD step (mean squared error), traced by `loom.function`; returns the step, its
    arguments (x, t) and the two weights. Every rank builds the same weights and data."""
    loom.manual_seed(0)
    fc1, fc2 = loom.nn.Linear(d_in, hidden, bias=False), loom.nn.Linear(hidden, d_out, bias=False)
    opt = loom.optim.SGD(list(fc1.parameters()) + list(fc2.parameters()), lr=0.1)

    @loom.function
    def step(x, t):
        opt.zero_grad()
        loss = ((fc2(fc1(x).relu()) - t) ** 2).mean()
        loss.backward()
        opt.step()
        return loss
    rng = np.random.default_rng(1)
    x = loom.tensor(rng.standard_normal((batch, d_in)).astype(np.float32))
    t = loom.tensor(rng.standard_normal((batch, d_out)).astype(np.float32))
    for _ in range(2):  # The first call runs eagerly, the second traces.
        step(x, t)
    return step, (x, t), (fc1.weight, fc2.weight)


def gpt_step(vocab: int = 11, channels: int = 16, heads: int = 2, context: int = 8, batch: int = 4):
    """A one-block GPT's SGD step (embeddings, layer norm, causal attention, GELU MLP, cross-entropy), traced
    by `loom.function`; returns the step and its arguments (idx, tgt). Every rank builds the same model and data."""
    import loom.nn.functional as F
    from loom import nn
    V, C, H, T = vocab, channels, heads, context

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
            self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
            self.fc, self.out = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.qkv(self.ln1(x)).reshape(b, t, 3, H, c // H).permute(2, 0, 3, 1, 4)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
            return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = nn.Embedding(V, C), nn.Embedding(T, C)
            self.block, self.ln_f, self.head = Block(), nn.LayerNorm(C), nn.Linear(C, V, bias=False)

        def forward(self, idx):
            x = self.tok(idx) + self.pos(loom.arange(idx.shape[1]))
            return self.head(self.ln_f(self.block(x)))

    loom.manual_seed(0)
    model = GPT()
    opt = loom.optim.SGD(model.parameters(), lr=0.1)

    @loom.function
    def step(idx, tgt):
        opt.zero_grad()
        loss = F.cross_entropy(model(idx).reshape(-1, V), tgt.reshape(-1))
        loss.backward()
        opt.step()
        return loss
    rng = np.random.default_rng(0)
    idx = loom.tensor(rng.integers(0, V, (batch, T)).astype(np.int64))
    tgt = loom.tensor(rng.integers(0, V, (batch, T)).astype(np.int64))
    for _ in range(2):  # The first call runs eagerly, the second traces.
        step(idx, tgt)
    return step, (idx, tgt)
