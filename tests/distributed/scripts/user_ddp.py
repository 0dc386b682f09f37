"""A PyTorch user's DDP training script, run through loom.torch on 2 ranks: DistributedSampler with set_epoch,
DataLoader, DDP(Adam) with a BatchNorm buffer, checked against the same training in one process on the union of
the ranks' batches; then ZeroRedundancyOptimizer, a distributed checkpoint saved and loaded, and a clean exit."""
import sys
import tempfile

import numpy as np

import loom.torch as torch
import loom.torch.distributed as dist
import loom.torch.nn as nn
from loom.torch.distributed.optim import ZeroRedundancyOptimizer
from loom.torch.nn.parallel import DistributedDataParallel as DDP
from loom.torch.utils.data import DataLoader, TensorDataset
from loom.torch.utils.data.distributed import DistributedSampler


def check(cond, what):
    if not cond:
        print(f"rank {rank}: {what} FAILED", flush=True)
        sys.exit(1)
    print(f"rank {rank}: {what} ok", flush=True)


dist.init_process_group(backend="gloo")
rank, world = dist.get_rank(), dist.get_world_size()
rng = np.random.default_rng(0)
N = 24 * world
X = torch.tensor(rng.standard_normal((N, 6)).astype(np.float32))
Y = torch.tensor((rng.standard_normal(N) > 0).astype(np.int64))
ds = TensorDataset(X, Y)


def net(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 2))


# The sampler: disjoint shares covering the data set, one order per epoch, the same order on a second call.
orders = {}
for epoch in range(2):
    s = DistributedSampler(ds, shuffle=True, seed=3)
    s.set_epoch(epoch)
    mine = list(s)
    check(list(s) == mine and len(mine) == len(s) == N // world, f"sampler epoch {epoch} is repeatable")
    every = [None] * world
    dist.all_gather_object(every, mine)
    check(sorted(sum(every, [])) == list(range(N)), f"sampler epoch {epoch} shares are disjoint and cover")
    orders[epoch] = every
check(orders[0] != orders[1], "set_epoch changes the order")

model = DDP(net(10 + rank))   # Different starting weights: DDP broadcasts rank 0's.
ref = net(10)
opt = torch.optim.Adam(model.parameters(), lr=0.01)
ref_opt = torch.optim.Adam(ref.parameters(), lr=0.01)
loss_fn = nn.CrossEntropyLoss()
sampler = DistributedSampler(ds, shuffle=True, seed=3)
B = 6
for epoch in range(2):
    sampler.set_epoch(epoch)
    for step, (xb, yb) in enumerate(DataLoader(ds, batch_size=B, sampler=sampler)):
        opt.zero_grad()
        loss = loss_fn(model(xb), yb)
        loss.backward()
        opt.step()
        # One process on the union of every rank's batch (BatchNorm's statistics are per rank under DDP, as in
        # PyTorch, so the reference runs each rank's part through the model separately and averages the losses).
        ref_opt.zero_grad()
        parts = [orders[epoch][r][step * B:(step + 1) * B] for r in range(world)]
        ref_loss = sum(loss_fn(ref(X[torch.tensor(p)]), Y[torch.tensor(p)]) for p in parts) / world
        ref_loss.backward()
        ref_opt.step()
ok = all(np.allclose(a.detach().numpy(), b.detach().numpy(), atol=1e-5)
         for a, b in zip(model.module.parameters(), ref.parameters()))
check(ok, "DDP(Adam) equals one process after 2 epochs")
check(list(model.state_dict())[0].startswith("module."), "state_dict has the module. prefix")

# ZeRO: sharded Adam keeps the replicas equal.
zopt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=0.01)
for _ in range(3):
    zopt.zero_grad()
    loss_fn(model(X[rank::world]), Y[rank::world]).backward()
    zopt.step()
w = model.module[0].weight.detach().clone()
ws = [torch.zeros_like(w) for _ in range(world)]
dist.all_gather(ws, w)
check(all(torch.equal(ws[0], v) for v in ws), "ZeRO keeps the replicas equal")

# A distributed checkpoint, saved and loaded back.
import loom.torch.distributed.checkpoint as dcp  # noqa: E402

box = [tempfile.mkdtemp() if rank == 0 else None]
dist.broadcast_object_list(box, src=0)
path = f"{box[0]}/ckpt"
dcp.save({"model": model.module.state_dict(), "step": 7}, path)
got = dcp.read(path)
check(got["step"] == 7 and np.array_equal(np.asarray(got["model"]["0.weight"]), w.numpy()),
      "checkpoint round trip")
dist.barrier()
dist.destroy_process_group()
print(f"rank {rank}: ALL OK", flush=True)
sys.exit(0)
