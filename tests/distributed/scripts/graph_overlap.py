"""One traced data-parallel step (forward, backward, gradient all-reduce, SGD update in one loom.function graph)
on the actor runtime: the compiler cuts it so each all-reduce (or bucket) is a task of its own on a private
communicator, and the state tracker shows an all-reduce running while backward compute runs. The parameters
equal those of the same step run in graph order (runtime="native") and of one process on the whole batch."""
import gc

import numpy as np

import loom
import loom.distributed as dist
import loom.distributed.nn.functional as dfn
from loom.distributed.process_group import live_communicators

dist.init_process_group("mpi")
r, n = dist.get_rank(), dist.get_world_size()
STEPS, B, D, LAYERS = 4, 64, 192, 4
rng = np.random.default_rng(0)   # The same on every rank.
X = rng.standard_normal((STEPS, n * B, D)).astype(np.float32)
Y = rng.standard_normal((STEPS, n * B, D)).astype(np.float32)
W = [(rng.standard_normal((D, D)) / np.sqrt(D)).astype(np.float32) for _ in range(LAYERS)]


def forward(ps, x):
    for w in ps[:-1]:
        x = (x @ w).tanh()
    return x @ ps[-1]


def train(runtime, shard=True, collective=True):
    ps = [loom.tensor(w.copy(), requires_grad=True) for w in W]

    def step(x, y):
        loss = ((forward(ps, x) - y) ** 2).mean()
        grads = loom.autograd.grad([loss], ps)
        with loom.no_grad():
            for p, g in zip(ps, grads):
                p.sub_(0.1 * (dfn.all_reduce(g, op=dist.ReduceOp.AVG) if collective else g))
        return loss
    fn = loom.function(step, warmup=0, runtime=runtime, track=runtime == "actors") if runtime else step
    losses = []
    for k in range(STEPS):
        rows = slice(r * B, (r + 1) * B) if shard else slice(None)
        losses.append(float(fn(loom.tensor(X[k, rows]), loom.tensor(Y[k, rows])).detach().numpy()))
    return fn, [p.detach().numpy() for p in ps], losses


over, p_over, l_over = train("actors")
prog = next(iter(over._cache.values())).exe
names = [t.name for t in prog.tasks]
assert sum(name.startswith("all_reduce") for name in names) >= 2, names
assert sum(name.startswith("compute") for name in names) >= 3, names
print(f"rank {r}: step cut into tasks {names} ok", flush=True)
_, p_seq, l_seq = train("native")
for a, b in zip(p_over, p_seq):
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
np.testing.assert_allclose(l_over, l_seq, rtol=0, atol=1e-6)
print(f"rank {r}: overlapped step equals graph order over {STEPS} steps ok", flush=True)
_, p_one, _ = train(None, shard=False, collective=False)   # One process, whole batch, eager.
for a, b in zip(p_over, p_one):
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)
print(f"rank {r}: overlapped step equals one process on the whole batch ok", flush=True)

over.close()   # The actors stop; their state transitions are the plan's trace.
trace = prog.plan.trace


def spans(task):
    """(iteration, start, end) of each firing of `task`, from its state transitions."""
    out, tr = [], trace[task]
    for (t, state, detail), nxt in zip(tr, tr[1:] + [(float("inf"), "", "")]):
        if state == "running":
            out.append((detail, t, nxt[0]))
    return out


comm_spans = [s for name in names if name.startswith("all_reduce") for s in spans(name)]
compute_spans = [s for name in names if name.startswith("compute") for s in spans(name)]
overlapped = sum(1 for it, a, b in comm_spans if any(j == it and min(b, d) > max(a, c) for j, c, d in compute_spans))
assert overlapped >= 1, (comm_spans, compute_spans)
print(f"rank {r}: {overlapped} of {len(comm_spans)} all-reduce firings ran while compute of the same step ran ok",
      flush=True)
# The compiled step's private communicators go with it, not only when the group is destroyed.
live = live_communicators()
assert live > 1, live   # The default group and the step's channels.
del over, prog
gc.collect()
assert live_communicators() == 1, (live_communicators(), live)
print(f"rank {r}: the compiled step's {live - 1} channels freed with it ok", flush=True)
dist.destroy_process_group()
print(f"rank {r}: ALL OK", flush=True)
