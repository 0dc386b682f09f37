"""A (2, 2) mesh on 4 ranks: nd-SBP signatures (data parallel on axis 0, tensor parallel on axis 1), boxing per
axis over the sub-groups, a 2x2 data + tensor parallel MLP trained 3 SGD steps against one process, and moving
tensors between 1-D and 2-D placements."""
import itertools

import numpy as np

import loom
import loom.distributed as dist
import loom.nn.functional as F
from loom.distributed import sbp as S

dist.init_process_group("gloo")
r, n = dist.get_rank(), dist.get_world_size()
assert n == 4, "run on 4 ranks"
mesh = S.placement(shape=(2, 2))
assert mesh.coords == (r // 2, r % 2)
rng = np.random.default_rng(0)
close = dict(rtol=1e-5, atol=1e-5)
B, P, S0, S1 = S.broadcast, S.partial_sum, S.split(0), S.split(1)


def full(*shape):
    return loom.tensor(rng.standard_normal(shape).astype(np.float32))


# 1. Boxing between nd signatures, axis by axis: every pair of a few, values intact.
value = full(6, 5)
sigs = [(S0, B), (B, S0), (S0, S1), (S1, S0), (P, S1), (B, P), (P, P), (B, B)]
for src, dst in itertools.product(sigs, sigs):
    x = S.from_full(value, mesh, src)
    y = x.to_global(sbp=dst)
    assert y.sbp == dst
    np.testing.assert_allclose(y.numpy(), value.numpy(), **close, err_msg=f"{src} -> {dst}")
    if all(s != P for s in dst):
        expect = value.numpy()
        for a, s in enumerate(dst):
            if s.is_split:
                lo, hi = S._bounds(value.shape[s.dim], 2)[mesh.coords[a]]
                expect = np.take(expect, range(lo, hi), axis=s.dim)
        np.testing.assert_allclose(y.local.numpy(), expect, **close)
print(f"rank {r}: nd boxing ok", flush=True)

# 2. The 2x2 MLP: batch split on axis 0; fc1 column-parallel and fc2 row-parallel on axis 1.
loom.manual_seed(3)
fc1, fc2 = loom.nn.Linear(6, 8), loom.nn.Linear(8, 3)
w1 = S.from_full(loom.nn.Parameter(fc1.weight.detach().clone()), mesh, (B, S0))
b1 = S.from_full(loom.nn.Parameter(fc1.bias.detach().clone()), mesh, (B, S0))
w2 = S.from_full(loom.nn.Parameter(fc2.weight.detach().clone()), mesh, (B, S1))
b2 = S.from_full(loom.nn.Parameter(fc2.bias.detach().clone()), mesh, (B, B))
params = [w1, b1, w2, b2]
assert w1.local.shape == (4, 6) and w2.local.shape == (3, 4)
opt = loom.optim.SGD([p.local for p in params], lr=0.1)
opt_ref = loom.optim.SGD(list(fc1.parameters()) + list(fc2.parameters()), lr=0.1)
for step in range(3):
    xb, tb = full(8, 6), full(8, 3)
    x, t = S.from_full(xb, mesh, (S0, B)), S.from_full(tb, mesh, (S0, B))
    h = S.linear(x, w1, b1).relu()
    assert h.sbp == (S0, S1), h.sbp           # No communication in the column-parallel layer.
    y = S.linear(h, w2, b2)
    assert y.sbp == (S0, P), y.sbp            # Row-parallel: partial sums along the tensor-parallel axis.
    loss = ((y - t) ** 2).mean()
    ref = ((fc2(F.relu(fc1(xb))) - tb) ** 2).mean()
    np.testing.assert_allclose(loss.numpy(), ref.detach().numpy(), **close)
    opt.zero_grad()
    opt_ref.zero_grad()
    loss.backward()
    ref.backward()
    for g_, want in zip(params, (fc1.weight, fc1.bias, fc2.weight, fc2.bias)):
        np.testing.assert_allclose(g_.grad.numpy(), want.grad.numpy(), **close, err_msg=f"step {step}")
    opt.step()
    opt_ref.step()
for g_, want in zip(params, (fc1.weight, fc1.bias, fc2.weight, fc2.bias)):
    np.testing.assert_allclose(g_.numpy(), want.detach().numpy(), **close)
print(f"rank {r}: 2x2 data + tensor parallel MLP ok", flush=True)

# 3. Crossing placements: 1-D [0, 1] -> 2-D (all four ranks) -> 1-D [2, 3] -> [3].
low, high, only3 = S.placement(ranks=[0, 1]), S.placement(ranks=[2, 3]), S.placement(ranks=[3])
v = full(4, 6)
a = S.from_full(v, low, S0)
assert (a.local is None) == (r >= 2)
m = a.to_global(placement=mesh, sbp=(S1, S0))
np.testing.assert_allclose(m.numpy(), v.numpy())
hi = m.to_global(placement=high, sbp=S1)
if r >= 2:
    np.testing.assert_allclose(hi.numpy(), v.numpy())
    assert hi.local.shape == (4, 3)
else:
    assert hi.local is None
last = hi.to_global(placement=only3, sbp=B)
if r == 3:
    np.testing.assert_allclose(last.local.numpy(), v.numpy())
print(f"rank {r}: crossing placements ok", flush=True)

# 4. Auto-parallel on the 2x2 mesh: a traced MLP step planned (jointly, and axis by axis) and run on the 4 ranks
# equals one process.
from loom.distributed import autoparallel as ap  # noqa: E402
from tests.distributed.mlp_steps import mlp_step  # noqa: E402

train_step, args, _ = mlp_step(32, 16, 64, 16)
values = ap.inputs_of(train_step, *args)
for joint in (True, False):
    plan = ap.plan(train_step, mesh, joint=joint)
    for k, (got, want) in enumerate(zip(ap.execute(plan, *values, placement=mesh), plan.graph.run(*values))):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-5, err_msg=f"joint={joint}: output {k}")
    if r == 0:
        print(ap.explain(plan).splitlines()[-1], flush=True)
print(f"rank {r}: 2x2 auto-parallel plan ok", flush=True)
print(f"rank {r}: ALL OK", flush=True)
