"""Auto-parallel on a traced GPT training step (embeddings, layer norm, causal attention, GELU MLP, cross-entropy,
SGD): every node gets a signature from the rule table, and the plan run on the ranks equals one process."""
import numpy as np

import loom
import loom.distributed as dist
import loom.nn.functional as F
from loom import nn
from loom.distributed import autoparallel as ap
from loom.distributed import sbp as S

V, C, H, T, BATCH = 11, 16, 2, 8, 4


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


dist.init_process_group("gloo")
r, n = dist.get_rank(), dist.get_world_size()
mesh = S.placement()
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
idx = loom.tensor(rng.integers(0, V, (BATCH, T)).astype(np.int64))
tgt = loom.tensor(rng.integers(0, V, (BATCH, T)).astype(np.int64))
for _ in range(2):
    step(idx, tgt)
values = ap.inputs_of(step, idx, tgt)
p = ap.plan(step, mesh)
split_nodes = sum(1 for v in p.graph.topological_order() if p.signature(v) != S.broadcast)
assert split_nodes > len(p.graph) // 2, (split_nodes, len(p.graph))  # Most of the step runs sharded.
want = p.graph.run(*values)
got = ap.execute(p, *values)
for k, (a, b) in enumerate(zip(got, want)):
    np.testing.assert_allclose(a, b.numpy(), rtol=1e-4, atol=1e-5, err_msg=f"output {k}")
if r == 0:
    print("\n".join(ap.explain(p).splitlines()[-4:]), flush=True)
print(f"rank {r}: gpt plan ({split_nodes} of {len(p.graph)} nodes sharded) equals one process ok", flush=True)
print(f"rank {r}: ALL OK", flush=True)
