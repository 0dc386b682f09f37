"""Gradients across placements on N ranks: a model whose layers live on different placements (one rank, then
every rank data parallel, then the other rank; and on 4 ranks a 2-rank placement to a disjoint 2-rank one and
into and out of a 2 x 2 mesh),
trained by SGD with `backward` through every `to_global(placement=...)`, eagerly and as a traced
`loom.function` step, equals the single-process run (gradients every step and parameters after the last, to
1e-6)."""
import numpy as np

import loom
import loom.distributed as dist
from loom.distributed import sbp as S

dist.init_process_group("gloo")
r, n = dist.get_rank(), dist.get_world_size()
rng = np.random.default_rng(0)
TOL = dict(rtol=1e-6, atol=1e-6)
B = S.broadcast
LR, STEPS = 0.1, 3


def value(*shape):
    return loom.tensor(rng.standard_normal(shape), dtype=loom.float64)


def param(*shape):
    return value(*shape).requires_grad_(True)


def check(got, want, what):
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), **TOL, err_msg=f"rank {r}: {what}")


def train(stages, x, t, loss_fn):
    """Run `stages` (each: a placement, the signature its input arrives in, and (weight, bias) pairs, every
    layer a tanh) on global tensors and the same layers in one process; compare gradients and parameters."""
    ref = [(w.detach().clone().requires_grad_(True), b.detach().clone().requires_grad_(True))
           for _, _, layers in stages for w, b in layers]
    glob = []
    for mesh, _, layers in stages:
        whole = B if mesh.ndim == 1 else (B,) * mesh.ndim
        glob += [(S.from_full(w, mesh, whole), S.from_full(b, mesh, whole)) for w, b in layers]
    owned = [p.local for wb in glob for p in wb if p.local is not None]
    opt_ref = loom.optim.SGD([p for wb in ref for p in wb], lr=LR)
    opt = loom.optim.SGD(owned, lr=LR) if owned else None
    first = stages[0][0]
    for step in range(STEPS):
        h = x
        for w, b in ref:
            h = loom.nn.functional.linear(h, w, b).tanh()
        want = loss_fn(h, t)
        opt_ref.zero_grad()
        want.backward()
        opt_ref.step()

        g = S.from_full(x, first, stages[0][1])
        k = 0
        for mesh, sig, layers in stages:
            g = g.to_global(placement=mesh, sbp=sig)   # Crossing placements (send/recv), differentiable.
            for _ in layers:
                g = S.linear(g, *glob[k]).tanh()
                k += 1
        last = stages[-1][0]
        tg = S.from_full(t, last, B if last.ndim == 1 else (B,) * last.ndim)
        loss = loss_fn(g, tg)
        if opt is not None:
            opt.zero_grad()
        loss.backward()                                  # Every rank calls it: the gradient crosses back.
        if last.is_member:
            check(loss.full(), want, f"loss at step {step}")   # Whole on every rank of the last placement.
        for (gw, gb), (rw, rb) in zip(glob, ref):
            if gw.local is not None:
                check(gw.local.grad, rw.grad, f"weight grad at step {step}")
                check(gb.local.grad, rb.grad, f"bias grad at step {step}")
        if opt is not None:
            opt.step()
    for (gw, gb), (rw, rb) in zip(glob, ref):
        if gw.local is not None:
            check(gw.local, rw, "weight after training")
            check(gb.local, rb, "bias after training")
    assert not S._TAPE, "the backward pass left crossings on the tape"


def mse(y, t):
    return ((y - t) ** 2).mean()


x, t = value(8, 5), value(8, 3)
first, last, mesh = S.placement(ranks=[0]), S.placement(ranks=[n - 1]), S.placement()

# 1. Rank 0's layers, then rank n-1's: one crossing, one rank to another.
train([(first, B, [(param(6, 5), param(6))]), (last, B, [(param(3, 6), param(3))])], x, t, mse)
print(f"rank {r}: one rank to another ok", flush=True)

# 2. Rank 0, then every rank data parallel (split(0): rank 0 keeps its rows, the others receive theirs), then a
# tensor-parallel layer's input split by features, then rank n-1 alone: crossings into and out of overlapping
# placements, the gradients boxed into each source's layout on the way back.
train([(first, B, [(param(6, 5), param(6))]),
       (mesh, S.split(0), [(param(7, 6), param(7))]),
       (last, B, [(param(3, 7), param(3))])], x, t, mse)
print(f"rank {r}: one rank to all ranks and back ok", flush=True)

# 3. Back and forth: rank 0 -> rank n-1 -> rank 0 -> rank n-1 (each rank sends and receives twice).
train([(first, B, [(param(6, 5), param(6))]), (last, B, [(param(6, 6), param(6))]),
       (first, B, [(param(4, 6), param(4))]), (last, B, [(param(3, 4), param(3))])], x, t, mse)
print(f"rank {r}: back and forth ok", flush=True)

# 4. A move whose value is not used by the loss still gets (zero) gradients, a move under no_grad records
# nothing, and a move into a partial sum.
a = S.from_full(param(4, 2), first, B)
with loom.no_grad():
    a.to_global(placement=last, sbp=B)
assert not S._TAPE
unused = a.to_global(placement=last, sbp=B)
assert (unused.local is not None) == (r == n - 1) and (unused.requires_grad == (r == n - 1))
y = (S.from_full(value(4, 2), last, B) * 2.0).sum() + (a * 3.0).sum().to_global(placement=last, sbp=B)
y.backward()
if r == 0:
    np.testing.assert_allclose(a.local.grad.numpy(), np.full((4, 2), 3.0))
assert not S._TAPE
# A value moved into a partial sum over every rank (rank 0 keeps it, the others hold zeros), differentiated
# with a given gradient: the gradient of a partial sum is whole on every rank, and comes back whole.
v = param(4, 3)
a = S.from_full(v, first, B)
m = a.to_global(placement=mesh, sbp=S.partial_sum)
gw = value(4, 3)
(m * 2.0).backward(S.from_full(gw, mesh, B))
if r == 0:
    np.testing.assert_allclose(a.local.grad.numpy(), 2 * gw.numpy(), **TOL)
assert S._anchor().grad is None  # The arrivals' anchor never takes a gradient.
print(f"rank {r}: unused and no_grad moves ok", flush=True)

# 5. A traced training step (loom.function: forward, backward and SGD in one graph per rank): rank 0's layer,
# then rank n-1's. The moves are send/recv nodes of the graph, forward and backward, and the replayed steps
# equal the single-process run.
W1, b1, W2, b2 = param(6, 5), param(6), param(3, 6), param(3)
ref = [p.detach().clone().requires_grad_(True) for p in (W1, b1, W2, b2)]
stage0 = [S.from_full(p, first, B) for p in (W1, b1)]
stage1 = [S.from_full(p, last, B) for p in (W2, b2)]
owned = [p.local for p in stage0 + stage1 if p.local is not None]
opt = loom.optim.SGD(owned, lr=LR) if owned else None
opt_ref = loom.optim.SGD(ref, lr=LR)
xg, tg = S.from_full(x, first, B), S.from_full(t, last, B)


@loom.function
def step(scale):
    if opt is not None:
        opt.zero_grad()
    h = S.linear(xg * scale, *stage0).tanh()
    y = S.linear(h.to_global(placement=last, sbp=B), *stage1)
    loss = mse(y, tg)
    loss.backward()
    if opt is not None:
        opt.step()
    return loss.local if loss.local is not None else loom.zeros((), dtype=loom.float64)


for k in range(4):   # The first call runs eagerly, the second traces, the rest replay the graph.
    scale = loom.tensor(1.0 + 0.1 * k, dtype=loom.float64)
    got = step(scale)
    F = loom.nn.functional
    want = mse(F.linear(F.linear(x * scale, ref[0], ref[1]).tanh(), ref[2], ref[3]), t)
    opt_ref.zero_grad()
    want.backward()
    opt_ref.step()
    if r == n - 1:
        check(got, want, f"traced loss at call {k}")
for p, q in zip(stage0 + stage1, ref):
    if p.local is not None:
        check(p.local, q, "parameter after the traced steps")
assert step.trace_count == 1 and len(step._cache) == 1, (step.trace_count, len(step._cache))
graph = next(iter(step._cache.values())).graph
p2p = sorted(v.op for v in graph if v.op in ("send", "recv"))
if r in (0, n - 1):
    assert p2p == ["recv", "send"], p2p       # Forward one way, the gradient back the other.
else:
    assert p2p == [], p2p

# Boxing over several ranks inside a trace is an all_gather node of the step (scripts/traced_boxing.py tests the
# other conversions and their gradients).
rows = S.from_full(x, mesh, S.split(0))
whole = loom.function(lambda s: rows.to_global(sbp=B).local * s)
for k in range(3):
    check(whole(loom.tensor(1.0 + k, dtype=loom.float64)), x * (1.0 + k), f"traced all_gather at call {k}")
assert whole.trace_count == 1
print(f"rank {r}: traced step ok", flush=True)

# 6. On 4 ranks: ranks {0, 1} data parallel, then ranks {2, 3} (disjoint) with the rows split there too, then
# the features split on {2, 3}.
if n >= 4:
    low, high = S.placement(ranks=[0, 1]), S.placement(ranks=[2, 3])
    train([(low, S.split(0), [(param(6, 5), param(6))]), (high, S.split(0), [(param(4, 6), param(4))]),
           (high, S.split(1), [(param(3, 4), param(3))])], x, t,
          lambda y, tt: (y * tt).sum())
    print(f"rank {r}: two ranks to two others ok", flush=True)
    # Into a 2 x 2 mesh (rows split along axis 0, features along axis 1) and out to rank 3: the gradients are
    # boxed over both mesh axes on the way back.
    grid = S.placement(shape=(2, 2))
    train([(low, S.split(0), [(param(6, 5), param(6))]), (grid, (S.split(0), S.split(1)), [(param(4, 6), param(4))]),
           (S.placement(ranks=[3]), B, [(param(3, 4), param(3))])], x, t, mse)
    print(f"rank {r}: into and out of a 2 x 2 mesh ok", flush=True)
print(f"rank {r}: ALL OK", flush=True)
