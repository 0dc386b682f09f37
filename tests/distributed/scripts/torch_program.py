"""One torch.distributed program, run by PyTorch (torchrun, gloo) or by loom (loom.torch, under loom's launcher or
plain mpirun): every collective and point-to-point call, a subgroup, an object collective, DistributedSampler, DDP
with no_sync gradient accumulation and ZeroRedundancyOptimizer(Adam). Each rank writes its results to
out/<impl>-<world>-<rank>.npz; the test compares loom's with PyTorch's.

argv: impl ("torch" or "loom") out"""
import sys

import numpy as np

impl, out = sys.argv[1], sys.argv[2]
if impl == "torch":
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler
else:
    import loom.torch as torch
    import loom.torch.distributed as dist
    import loom.torch.nn as nn
    from loom.torch.distributed.optim import ZeroRedundancyOptimizer
    from loom.torch.nn.parallel import DistributedDataParallel as DDP
    from loom.torch.utils.data import DataLoader, TensorDataset
    from loom.torch.utils.data.distributed import DistributedSampler

dist.init_process_group("gloo")
r, n = dist.get_rank(), dist.get_world_size()
res = {}


def T(a):
    return torch.tensor(np.asarray(a))


def full(value, size=2):
    return T(np.full(size, value, np.float32))


t = T(np.arange(6, dtype=np.float32).reshape(2, 3) + 10 * r)
dist.all_reduce(t)
res["all_reduce"] = t.numpy()
t = T(np.arange(6, dtype=np.float32) + r)
dist.all_reduce(t, op=dist.ReduceOp.MAX)
res["all_reduce_max"] = t.numpy()
t = T(np.arange(4, dtype=np.int64) * (r + 1))
dist.all_reduce(t, op=dist.ReduceOp.PRODUCT)
res["all_reduce_product_int64"] = t.numpy()
parts = [torch.zeros(3) for _ in range(n)]
dist.all_gather(parts, full(r, 3))
res["all_gather"] = np.stack([p.numpy() for p in parts])
o = torch.zeros(n * 2)
dist.all_gather_into_tensor(o, full(r + 1))
res["all_gather_into_tensor"] = o.numpy()
t = full(r, 4)
dist.broadcast(t, src=n - 1)
res["broadcast"] = t.numpy()
o = torch.zeros(2)
dist.reduce_scatter(o, [full(r * 10 + k) for k in range(n)])
res["reduce_scatter"] = o.numpy()
o = torch.zeros(2)
dist.reduce_scatter_tensor(o, T(np.arange(2 * n, dtype=np.float32) + r))
res["reduce_scatter_tensor"] = o.numpy()
outs = [torch.zeros(2) for _ in range(n)]
dist.all_to_all(outs, [full(100 * r + k) for k in range(n)])
res["all_to_all"] = np.stack([p.numpy() for p in outs])
o = torch.zeros(n)
dist.all_to_all_single(o, T(np.arange(n, dtype=np.float32) + 10 * r))
res["all_to_all_single"] = o.numpy()
t = full(r, 3)
dist.reduce(t, dst=0)
if r == 0:
    res["reduce"] = t.numpy()
parts = [torch.zeros(2) for _ in range(n)] if r == 0 else None
dist.gather(full(r), parts, dst=0)
if r == 0:
    res["gather"] = np.stack([p.numpy() for p in parts])
o = torch.zeros(2)
dist.scatter(o, [full(k * 7) for k in range(n)] if r == 0 else None, src=0)
res["scatter"] = o.numpy()
nxt, prv = (r + 1) % n, (r - 1) % n   # A ring: even ranks send first.
got = torch.zeros(3)
if r % 2 == 0:
    dist.send(full(r, 3), dst=nxt)
    dist.recv(got, src=prv)
else:
    dist.recv(got, src=prv)
    dist.send(full(r, 3), dst=nxt)
res["send_recv"] = got.numpy()
got = torch.zeros(3)
for req in [dist.isend(full(r + 0.5, 3), dst=nxt), dist.irecv(got, src=prv)]:
    req.wait()
res["isend_irecv"] = got.numpy()
t = full(r)
dist.all_reduce(t, async_op=True).wait()
res["async_all_reduce"] = t.numpy()
pair = dist.new_group([0, 1])
if r in (0, 1):
    t = full(r + 1)
    dist.all_reduce(t, group=pair)
    res["subgroup"] = t.numpy()
dist.barrier()
objs = [None] * n
dist.all_gather_object(objs, {"r": r})
res["all_gather_object"] = np.array([d["r"] for d in objs])

rng = np.random.default_rng(0)
X = rng.standard_normal((64, 6)).astype(np.float32)
Y = rng.standard_normal((64, 2)).astype(np.float32)
W1 = (rng.standard_normal((8, 6)) * 0.3).astype(np.float32)
W2 = (rng.standard_normal((2, 8)) * 0.3).astype(np.float32)


def model():
    m = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 2))
    with torch.no_grad():
        m[0].weight.copy_(T(W1))
        m[0].bias.zero_()
        m[2].weight.copy_(T(W2))
        m[2].bias.zero_()
    return m


ds = TensorDataset(T(X), T(Y))
sampler = DistributedSampler(ds, shuffle=False)   # Shuffled orders differ by design (NumPy's generator).
res["sampler"] = np.array(list(iter(sampler)))
m = model()
ddp = DDP(m)
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
for epoch in range(2):
    sampler.set_epoch(epoch)
    for k, (xb, yb) in enumerate(DataLoader(ds, batch_size=8, sampler=sampler)):
        if k % 2 == 0:   # Accumulate one micro-batch locally, average at the next backward.
            with ddp.no_sync():
                ((ddp(xb) - yb) ** 2).mean().backward()
        else:
            ((ddp(xb) - yb) ** 2).mean().backward()
            opt.step()
            opt.zero_grad()
res["ddp_no_sync"] = m[0].weight.detach().numpy().copy()
m = model()
ddp = DDP(m)
zero = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.Adam, lr=0.01)
per = 64 // n
for _ in range(5):
    zero.zero_grad()
    ((ddp(T(X[r * per:(r + 1) * per])) - T(Y[r * per:(r + 1) * per])) ** 2).mean().backward()
    zero.step()
res["zero_adam"] = m[0].weight.detach().numpy().copy()
zero.consolidate_state_dict(to=0)
if r == 0:
    res["zero_exp_avg"] = np.asarray(zero.state_dict()["state"][0]["exp_avg"].numpy())
np.savez(f"{out}/{impl}-{n}-{r}.npz", **res)
dist.destroy_process_group()
print(f"rank {r}: ALL OK", flush=True)
