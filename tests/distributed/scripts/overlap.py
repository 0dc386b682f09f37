"""Data parallel backward on the actor runtime with the gradient all-reduces as tasks of their own
(loom.distributed.overlap): an all-reduce overlaps backward computation (the late layer's all-reduce with the
early layer's backward), and the averaged gradients equal one process's on the whole batch."""
import gc
import threading

import numpy as np

import loom
import loom.distributed as dist
from loom.autograd.engine import grad
from loom.distributed.overlap import collective_task
from loom.distributed.process_group import live_communicators
from loom.runtime.actors import Plan

dist.init_process_group("mpi")
r, n = dist.get_rank(), dist.get_world_size()
STEPS, B, D = 4, 64, 256
rng = np.random.default_rng(0)   # The same on every rank.
X = rng.standard_normal((STEPS, n * B, D)).astype(np.float32)
Y = rng.standard_normal((STEPS, n * B, D)).astype(np.float32)
W0 = loom.tensor((rng.standard_normal((D, D)) / np.sqrt(D)).astype(np.float32), requires_grad=True)
W1 = loom.tensor((rng.standard_normal((D, D)) / np.sqrt(D)).astype(np.float32), requires_grad=True)
busy = threading.Lock()   # The two compute tasks share this process's loom state; the all-reduces do not wait on it.


def backward_late(xy):
    with busy:
        x, y = loom.tensor(xy[0]), loom.tensor(xy[1])
        h = (x @ W0).tanh().detach().requires_grad_()
        loss = ((h @ W1 - y) ** 2).mean()
        gh, gw1 = grad([loss], [h, W1])
        return gh.numpy(), gw1.numpy()


def backward_early(xy, late):
    with busy:
        x = loom.tensor(xy[0])
        (gw0,) = grad([(x @ W0).tanh()], [W0], grad_outputs=[loom.tensor(late[0])])
        return gw0.numpy()


plan = Plan("ddp")
shards = ((X[k, r * B:(r + 1) * B], Y[k, r * B:(r + 1) * B]) for k in range(STEPS))
data = plan.source("batches", shards)
late = plan.task("backward_late", backward_late, [data], registers=2)
early = plan.task("backward_early", backward_early, [data, late], registers=2)
collective_task(plan, "allreduce_late", late, pick=lambda v: v[1])
collective_task(plan, "allreduce_early", early)
out = plan.run(timeout=60)

for k in range(STEPS):   # One process on the whole batch of step k.
    W0.grad = W1.grad = None
    loss = (((loom.tensor(X[k]) @ W0).tanh() @ W1 - loom.tensor(Y[k])) ** 2).mean()
    loss.backward()
    np.testing.assert_allclose(out["allreduce_late"][k], W1.grad.numpy(), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(out["allreduce_early"][k], W0.grad.numpy(), rtol=1e-4, atol=1e-6)
print(f"rank {r}: data parallel grads equal one process over {STEPS} steps ok", flush=True)


def intervals(transitions):
    """(start, end) of each firing, by iteration."""
    spans = {}
    for (t, state, detail), nxt in zip(transitions, transitions[1:] + [(float("inf"), "", "")]):
        if state == "running":
            spans[detail] = (t, nxt[0])
    return spans


comm_spans = intervals(plan.trace["allreduce_late"]) | {
    ("early", k): v for k, v in intervals(plan.trace["allreduce_early"]).items()}
compute_spans = list(intervals(plan.trace["backward_early"]).values()) + list(
    intervals(plan.trace["backward_late"]).values())
overlapped = sum(1 for a, b in comm_spans.values() if any(min(b, d) > max(a, c) for c, d in compute_spans))
assert overlapped >= 1, (comm_spans, compute_spans)
print(f"rank {r}: {overlapped} of {len(comm_spans)} all-reduces overlapped a backward task ok", flush=True)
assert live_communicators() == 3, live_communicators()   # The default group and the two tasks' channels.
del plan, data, late, early   # The tasks refer to their plan.
gc.collect()
assert live_communicators() == 1, live_communicators()
print(f"rank {r}: the collective tasks' channels freed with their plan ok", flush=True)
dist.destroy_process_group()
print(f"rank {r}: ALL OK", flush=True)
