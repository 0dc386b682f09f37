"""A GPT cut into one pipeline stage per rank (token and position embeddings with the first block, the final layer
norm and the head with the last) trains with 1F1B and GPipe and equals the whole model trained in one process:
the integer token ids enter the first stage, float activations cross the ranks, cross-entropy on the last.
SGD, not Adam: the key bias's gradient is zero up to rounding (softmax ignores a shift of the keys), and Adam
turns rounding-sized gradients into steps of the learning rate's size."""
import numpy as np

import loom
import loom.distributed as dist
import loom.nn.functional as F
from loom import nn
from loom.distributed.pipeline import PipelineStage, Schedule1F1B, ScheduleGPipe

dist.init_process_group()
r, n = dist.get_rank(), dist.get_world_size()
V, C, H, T, B, M, STEPS = 13, 16, 2, 8, 8, 4, 3
rng = np.random.default_rng(0)
IDX = rng.integers(0, V, (STEPS, B, T)).astype(np.int64)
TGT = rng.integers(0, V, (STEPS, B, T)).astype(np.int64)


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


class Embed(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(V, C), nn.Embedding(T, C)

    def forward(self, idx):
        return self.tok(idx) + self.pos(loom.arange(idx.shape[1]))


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_f, self.head = nn.LayerNorm(C), nn.Linear(C, V, bias=False)

    def forward(self, x):
        return self.head(self.ln_f(x))


def stages():
    """One list of modules per stage: n blocks, the embeddings before the first, the head after the last."""
    loom.manual_seed(3)
    parts = [[Block()] for _ in range(n)]
    parts[0].insert(0, Embed())
    parts[-1].append(Head())
    return parts


def loss_fn(logits, tgt):
    return F.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1))


for Schedule in (Schedule1F1B, ScheduleGPipe):
    ref_parts = stages()
    ref = nn.Sequential(*[m for part in ref_parts for m in part])
    ref_opt = loom.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    stage = PipelineStage(nn.Sequential(*stages()[r]), stage_index=r, num_stages=n)
    opt = loom.optim.SGD(stage.submod.parameters(), lr=0.1, momentum=0.9)
    schedule = Schedule(stage, n_microbatches=M, loss_fn=loss_fn)
    for step in range(STEPS):
        idx, tgt = loom.tensor(IDX[step]), loom.tensor(TGT[step])
        opt.zero_grad()
        losses: list = []
        if stage.is_first:
            schedule.step(idx)
        elif stage.is_last:
            schedule.step(target=tgt, losses=losses)
        else:
            schedule.step()
        opt.step()
        ref_opt.zero_grad()
        ref_loss = loss_fn(ref(idx), tgt)
        ref_loss.backward()
        ref_opt.step()
        if stage.is_last:
            got = sum(float(v) for v in losses) / M
            assert abs(got - float(ref_loss)) < 1e-5, (Schedule.__name__, step, got, float(ref_loss))
    mine = nn.Sequential(*ref_parts[r])
    for p, q in zip(stage.submod.parameters(), mine.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=0, atol=1e-5)
    print(f"rank {r}: {Schedule.__name__} GPT equals one process after {STEPS} steps", flush=True)
dist.destroy_process_group()
print(f"rank {r}: ALL OK", flush=True)
