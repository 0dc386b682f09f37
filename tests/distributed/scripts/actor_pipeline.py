"""Actors on two ranks exchanging registers through the MPI transport (loom.runtime.transport), no master:
a two-stage model pipelined over 4 micro-batches, forward only and training (forward, backward, gradients
accumulated over the micro-batches), each equal to the single-process result; and a failure on one rank
stopping both."""
import sys

import numpy as np

import loom
import loom.distributed as dist
from loom.distributed.actor_pipeline import pipeline_plan, train_pipeline
from loom.runtime.actors import ActorError, Plan
from loom.runtime.transport import MpiTransport

dist.init_process_group("mpi")
r, n = dist.get_rank(), dist.get_world_size()
assert n == 2, "this script runs on 2 ranks"
transport = MpiTransport()
M, B = 4, 8   # Micro-batches, rows per micro-batch.
rng = np.random.default_rng(0)   # The same data and weights on every rank.
X = rng.standard_normal((M * B, 4)).astype(np.float32)
Y = rng.standard_normal((M * B, 3)).astype(np.float32)
W0 = loom.tensor(rng.standard_normal((4, 8)).astype(np.float32) * 0.5, requires_grad=True)
W1 = loom.tensor(rng.standard_normal((8, 3)).astype(np.float32) * 0.5, requires_grad=True)


def check(name, got, want, tol=1e-6):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=tol, atol=tol, err_msg=f"rank {r}: {name}")
    print(f"rank {r}: {name} ok", flush=True)


# 1. A plain plan with numpy tasks placed on two ranks.
plan = Plan("placed", transport=transport)
src = plan.source("read", (X[k * B:(k + 1) * B] for k in range(M)), rank=0)
h = plan.task("stage0", lambda x: np.tanh(x @ W0.detach().numpy()), [src], registers=2, rank=0)
out = plan.task("stage1", lambda v: v @ W1.detach().numpy(), [h], registers=2, rank=1)
got = plan.run(timeout=30)
want = np.tanh(X @ W0.detach().numpy()) @ W1.detach().numpy()
if r == 1:
    check("placed plan equals one process", np.concatenate(got), want)
else:
    assert got == {}, got   # Rank 0 holds no sink.
    print(f"rank {r}: placed plan has no sink here ok", flush=True)
if r == 0:   # Bytes of registers crossed the wire: 4 activations of 8 x 8 float32.
    check("registers sent", transport.bytes_sent, 4 * B * 8 * 4)

# 2. The same two stages compiled by loom.function, placed by pipeline_plan, forward only.
stage0 = loom.function(lambda x: (x @ W0).tanh())
stage1 = loom.function(lambda v: v @ W1)
outs = pipeline_plan([stage0, stage1], [X[k * B:(k + 1) * B] for k in range(M)], transport=transport)
if r == 1:
    check("loom.function stages pipelined over 4 micro-batches equal one process", np.concatenate(outs), want, 1e-5)

# 2b. One loom.function whose stages (loom.stage) the compiler's partition makes tasks, placed on the ranks.
@loom.function(runtime="actors", warmup=0, placement={0: 0, 1: 1}, transport=transport)
def two_stages(x):
    with loom.stage(0):
        v = (x @ W0).tanh()
    with loom.stage(1):
        return v @ W1


with loom.no_grad():
    outs = [y.numpy() for y in two_stages.map((loom.tensor(X[k * B:(k + 1) * B]),) for k in range(M))]
prog = next(iter(two_stages._cache.values())).exe
assert sorted(t.rank for t in prog.tasks) == [0, 1], [(t.name, t.rank) for t in prog.tasks]
two_stages.close()
check("loom.function stages placed on 2 ranks equal one process (every rank gets the outputs)",
      np.concatenate(outs), want, 1e-5)

# 3. Training: forward and backward pipelined (1F1B-style through the registers), gradients accumulated.
loss_fn = lambda out, y: ((out - y) ** 2).mean()  # noqa: E731
grads, losses = train_pipeline([lambda x: (x @ W0).tanh(), lambda v: v @ W1], [W0, W1], loss_fn,
                               [X[k * B:(k + 1) * B] for k in range(M)], [Y[k * B:(k + 1) * B] for k in range(M)],
                               transport=transport)
W0.grad = W1.grad = None
full = loss_fn((loom.tensor(X) @ W0).tanh() @ W1, loom.tensor(Y))
full.backward()
if r == 0:
    check("pipelined training grad W0 equals one process", grads[0], W0.grad.numpy(), 1e-5)
else:
    check("pipelined training grad W1 equals one process", grads[1], W1.grad.numpy(), 1e-5)
    check("pipelined training loss equals one process", sum(losses), full.detach().numpy(), 1e-5)

# 3b. A whole training step in one loom.function placed on the ranks: a loop over micro-batches, stage blocks,
# backward and SGD update. The compiler puts each stage's backward on its stage's rank and each micro-batch in
# tasks of its own, so micro-batches pipeline forward and backward; the weights equal one process's.
def sgd_step(runtime, **options):
    V = [loom.tensor(W0.detach().numpy(), requires_grad=True), loom.tensor(W1.detach().numpy(), requires_grad=True)]
    opt = loom.optim.SGD(V, lr=0.1)

    @loom.function(runtime=runtime, **options)
    def step(x, y):
        opt.zero_grad()
        total = 0
        for k in range(M):
            with loom.stage(0):
                v = (x[k * B:(k + 1) * B] @ V[0]).tanh()
            with loom.stage(1):
                loss = loss_fn(v @ V[1], y[k * B:(k + 1) * B]) / M
            loss.backward()
            total = total + loss.detach()
        opt.step()
        return total
    return V, step


Vp, placed = sgd_step("actors", placement={0: 0, 1: 1}, transport=transport)
Vs, single = sgd_step("native")
for s in range(3):
    xy = (loom.tensor(X * (1 + 0.1 * s)), loom.tensor(Y))
    got_loss, want_loss = placed(*xy).item(), single(*xy).item()
    check(f"placed training step {s} loss equals one process", got_loss, want_loss, 1e-5)
prog = next(iter(placed._cache.values())).exe
where = {t.name: t.rank for t in prog.tasks}
assert where["stage0.backward.branch0"] == 0 and where["stage1.backward.branch0"] == 1, where
assert {f"stage{k}.mb{M - 1}.branch0" for k in (0, 1)} <= set(where), where
placed.close()
check("placed training step weights equal one process", np.concatenate([v.detach().numpy().ravel() for v in Vp]),
      np.concatenate([v.detach().numpy().ravel() for v in Vs]), 1e-5)

# 4. A task failing on rank 1 stops the actors on both ranks; each raises, naming the task.
plan = Plan("failing", transport=transport)
src = plan.source("read", iter(range(100)), rank=0)
a = plan.task("double", lambda v: v * 2, [src], rank=0)


def boom(v):
    if v == 6:
        raise ValueError("bad value 6")
    return v
plan.task("check", boom, [a], rank=1)
try:
    plan.run(timeout=30)
except ActorError as e:
    want_text = "task 'check' failed" if r == 1 else "stopped because task 'check' on rank 1 failed: ValueError"
    assert want_text in str(e), str(e)
    print(f"rank {r}: failure stops both ranks ok ({str(e)[:60]})", flush=True)
else:
    sys.exit(f"rank {r}: the failing plan did not raise")

transport.close()
dist.destroy_process_group()
print(f"rank {r}: ALL OK", flush=True)
