"""A PyTorch user's DDP script through loom.torch, run on 2 ranks: object collectives, the sampler's defaults
from the process group, DDP training that keeps parameters equal on every rank."""
import loom.torch as torch
import loom.torch.distributed as dist
import loom.torch.nn as nn
from loom.torch.nn.parallel import DistributedDataParallel as DDP
from loom.torch.utils.data import DataLoader, TensorDataset
from loom.torch.utils.data.distributed import DistributedSampler


def check(cond, what):
    if not cond:
        raise SystemExit(f"rank {rank}: {what} FAILED")
    print(f"rank {rank}: {what} ok", flush=True)


dist.init_process_group(backend="gloo")
rank, world = dist.get_rank(), dist.get_world_size()

box = [{"lr": 0.1, "tags": ["a", "b"]}, None] if rank == 0 else [None, None]
dist.broadcast_object_list(box, src=0)
check(box == [{"lr": 0.1, "tags": ["a", "b"]}, None], "broadcast_object_list")
got = [None] * world
dist.all_gather_object(got, {"rank": rank, "payload": "x" * (rank * 50)})
check(got == [{"rank": r, "payload": "x" * (r * 50)} for r in range(world)], "all_gather_object")
gathered = [None] * world if rank == 0 else None
dist.gather_object(rank * 3, gathered, dst=0)
check(gathered == ([0, 3] if rank == 0 else None), "gather_object")
out = [None]
dist.scatter_object_list(out, [f"part{r}" for r in range(world)] if rank == 0 else None, src=0)
check(out == [f"part{rank}"], "scatter_object_list")

torch.manual_seed(0)
x = torch.randn(32, 4)
y = (x.sum(1) > 0).long()
ds = TensorDataset(x, y)
sampler = DistributedSampler(ds, shuffle=True, seed=0)  # num_replicas and rank from the process group.
check(sampler.num_replicas == world and sampler.rank == rank and len(sampler) == 16, "DistributedSampler defaults")
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
ddp = DDP(model)
opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
for epoch in range(2):
    sampler.set_epoch(epoch)
    for xb, yb in DataLoader(ds, batch_size=8, sampler=sampler):
        opt.zero_grad()
        nn.functional.cross_entropy(ddp(xb), yb).backward()
        opt.step()
w = model[0].weight.detach().clone()
ws = [torch.zeros_like(w) for _ in range(world)]
dist.all_gather(ws, w)
check(all(torch.equal(ws[0], v) for v in ws), "parameters equal across ranks")
dist.destroy_process_group()
print(f"rank {rank}: ALL OK", flush=True)
