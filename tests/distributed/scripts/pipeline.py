"""Pipeline parallelism on N ranks (one stage each) equals training the whole model in one process.

Both schedules train an MLP for several steps; 1F1B's in-flight activations stay bounded; bad configurations
raise loom errors before any message is sent.
"""
import numpy as np

import loom
import loom.distributed as dist
from loom.distributed.pipeline import PipelineStage, Schedule1F1B, ScheduleGPipe

dist.init_process_group("gloo")
r, n = dist.get_rank(), dist.get_world_size()
rng = np.random.default_rng(0)
B, M = 16, 8  # Batch and micro-batches: M > n, so the 1F1B bound is below GPipe's.
X = rng.standard_normal((5, B, 6)).astype(np.float32)
Y = rng.standard_normal((5, B, 3)).astype(np.float32)
mse = loom.nn.functional.mse_loss


def blocks():
    loom.manual_seed(7)
    return [loom.nn.Sequential(loom.nn.Linear(6, 16), loom.nn.Tanh()),
            loom.nn.Sequential(loom.nn.Linear(16, 16), loom.nn.Tanh()),
            loom.nn.Sequential(loom.nn.Linear(16, 16), loom.nn.Tanh()),
            loom.nn.Linear(16, 3)]


def stage_of(bs):
    per = len(bs) // n
    return loom.nn.Sequential(*bs[r * per:(r + 1) * per])


def schedule_order(Schedule, m):
    """The textbook order of this stage's forwards (F) and backwards (B), which the actors' registers must give."""
    if Schedule is ScheduleGPipe:
        return [("F", k) for k in range(m)] + [("B", k) for k in range(m)]
    warmup = min(n - r - 1, m)
    order = [("F", k) for k in range(warmup)]
    for k in range(warmup, m):
        order += [("F", k), ("B", k - warmup)]
    return order + [("B", k) for k in range(m - warmup, m)]


for Schedule in (ScheduleGPipe, Schedule1F1B):
    ref = loom.nn.Sequential(*blocks())
    ref_opt = loom.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    stage = PipelineStage(stage_of(blocks()), stage_index=r, num_stages=n)
    opt = loom.optim.SGD(stage.submod.parameters(), lr=0.1, momentum=0.9)
    schedule = Schedule(stage, n_microbatches=M, loss_fn=mse)
    for step in range(len(X)):
        x, y = loom.tensor(X[step]), loom.tensor(Y[step])
        opt.zero_grad()
        losses = []
        if stage.is_first:
            out = schedule.step(x)
        elif stage.is_last:
            out = schedule.step(target=y, losses=losses)
        else:
            out = schedule.step()
        opt.step()
        ref_opt.zero_grad()
        ref_out = ref(x)
        ref_loss = mse(ref_out, y)
        ref_loss.backward()
        ref_opt.step()
        if stage.is_last:
            assert len(losses) == M, len(losses)
            assert abs(float(sum(float(v) for v in losses) / M) - float(ref_loss)) < 1e-5, step
            np.testing.assert_allclose(out.numpy(), ref_out.detach().numpy(), rtol=0, atol=1e-5)
        else:
            assert out is None
        expected = M if Schedule is ScheduleGPipe else min(n - r, M)
        assert stage.peak_live == expected and stage.live == 0, (Schedule.__name__, stage.peak_live, expected)
        assert stage.order == schedule_order(Schedule, M), (Schedule.__name__, stage.order)
    ref_stage = stage_of(list(ref))
    for p, q in zip(stage.submod.parameters(), ref_stage.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=0, atol=1e-6)
    print(f"rank {r}: {Schedule.__name__} equals one process after {len(X)} steps "
          f"(peak live micro-batches {stage.peak_live})", flush=True)
    print(f"rank {r}: {Schedule.__name__} actors fired in the schedule's order", flush=True)

# Without a loss function a schedule runs forwards only.
stage = PipelineStage(stage_of(blocks()), r, n)
out = Schedule1F1B(stage, 4).step(loom.tensor(X[0]))
if stage.is_last:
    with loom.no_grad():
        np.testing.assert_allclose(out.numpy(), loom.nn.Sequential(*blocks())(loom.tensor(X[0])).numpy(),
                                   rtol=0, atol=1e-5)
assert stage.live == 0
print(f"rank {r}: forward-only ok", flush=True)

# Under autocast the stages' actors compute in bfloat16 too (the region travels into their threads).
stage = PipelineStage(stage_of(blocks()), r, n)
seen = []
stage.submod.register_forward_pre_hook(lambda module, inputs: seen.append(inputs[0].dtype))
losses = []
with loom.autocast.autocast():
    out = Schedule1F1B(stage, 4, loss_fn=mse).step(loom.tensor(X[0]), target=loom.tensor(Y[0]), losses=losses)
    ref = loom.nn.Sequential(*blocks())
    ref_loss = mse(ref(loom.tensor(X[0])), loom.tensor(Y[0]))
ref_loss.backward()
for p, q in zip(stage.submod.parameters(), stage_of(list(ref)).parameters()):
    np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=0, atol=2e-2)
if stage.is_last:
    assert abs(float(sum(float(v) for v in losses) / 4) - float(ref_loss)) < 2e-2, (losses, float(ref_loss))
    assert all(v.dtype == loom.float32 for v in losses)   # Losses compute in float32 under autocast.
    assert out.dtype == loom.bfloat16, out.dtype           # The last Linear ran in bfloat16 in its actor.
if not stage.is_first:   # Activations arrive in the dtype they left in (bfloat16, which NumPy lacks).
    assert seen == [loom.bfloat16] * 4, seen
print(f"rank {r}: autocast ok", flush=True)


class Part(loom.nn.Module):
    """A stage passing (integer row index, activation) on: integer activations travel without gradients."""

    def __init__(self, first, last):
        super().__init__()
        self.first, self.last, self.lin = first, last, loom.nn.Linear(6, 6)

    def forward(self, *inputs):
        idx, h = (loom.arange(inputs[0].shape[0]), inputs[0]) if self.first else inputs
        h = loom.tanh(self.lin(h)) * (idx.reshape(-1, 1) + 1).to(h.dtype)
        return h if self.last else (idx, h)


def parts():
    loom.manual_seed(3)
    return [Part(k == 0, k == n - 1) for k in range(n)]


stage = PipelineStage(parts()[r], r, n)
opt = loom.optim.SGD(stage.submod.parameters(), lr=0.1)
x, y = loom.tensor(X[0][:4]), loom.tensor(Y[0][:4, :1].repeat(6, axis=1))
ScheduleGPipe(stage, 1, loss_fn=mse).step(x, target=y)  # One micro-batch: the row index is the batch's.
ref_parts = parts()
h = x
for k, part in enumerate(ref_parts):
    h = part(*((h,) if k == 0 else h))
mse(h, y).backward()
for p, q in zip(stage.submod.parameters(), ref_parts[r].parameters()):
    np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=0, atol=1e-5)
print(f"rank {r}: tuple with integer activations ok", flush=True)


def raises(fn, *words):
    try:
        fn()
    except loom.errors.LoomError as e:
        assert all(w in str(e) for w in words), str(e)
        return
    raise AssertionError(f"no error; expected one naming {words}")


raises(lambda: PipelineStage(stage_of(blocks()), r, n + 1), "num_stages=", f"{n} ranks")
raises(lambda: PipelineStage(stage_of(blocks()), (r + 1) % n, n), "stage_index", f"rank {r}")
raises(lambda: ScheduleGPipe(stage, 0), "n_microbatches must be an int >= 1")
bad = Schedule1F1B(stage, 3, loss_fn=mse)
raises(lambda: bad.step(loom.tensor(X[0]), target=loom.tensor(Y[0])), "dim 0 (16)", "n_microbatches=3")
if stage.is_last and not stage.is_first:
    raises(lambda: Schedule1F1B(stage, 4, loss_fn=mse).step(), "needs target=")
if stage.is_first:
    raises(lambda: Schedule1F1B(stage, 4, loss_fn=mse).step(target=loom.tensor(Y[0])), "needs the batch")
print(f"rank {r}: errors ok", flush=True)


class Faulty(loom.nn.Module):
    """The last stage fails on its third micro-batch: every rank's step raises instead of waiting forever."""

    def __init__(self):
        super().__init__()
        self.lin, self.seen = loom.nn.Linear(6, 6), 0

    def forward(self, x):
        self.seen += 1
        if r == n - 1 and self.seen == 3:
            raise ValueError("bad micro-batch 2")
        return self.lin(x)


try:
    Schedule1F1B(PipelineStage(Faulty(), r, n), 4, loss_fn=mse).step(loom.tensor(X[0][:8, :6]),
                                                                     target=loom.tensor(Y[0][:8].repeat(2, axis=1)))
except loom.errors.LoomError as e:
    assert "forward" in str(e) and ("bad micro-batch 2" in str(e) or f"rank {n - 1} failed" in str(e)), str(e)
    print(f"rank {r}: a failing stage stops every rank ok", flush=True)
else:
    raise AssertionError("the failing pipeline did not raise")
dist.destroy_process_group()
print(f"rank {r}: ALL OK", flush=True)
