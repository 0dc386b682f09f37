"""A PyTorch user's training resumed on another world size: steps [start, stop) of DDP + ZeroRedundancyOptimizer
(Adam) on a fixed global batch of 16 split over the ranks, through loom.torch; with start > 0 it first loads the
distributed checkpoint out/ckpt (model in place with ``dcp.load``, optimizer shards with ``dcp.read``), whatever
world size wrote it. Saves out/ckpt at stop; rank 0 writes the parameters to out/final-<stop>-<world>.npz.

argv: out start stop"""
import sys

import numpy as np

import loom.torch as torch
import loom.torch.distributed as dist
import loom.torch.distributed.checkpoint as dcp
import loom.torch.nn as nn
from loom.torch.distributed.optim import ZeroRedundancyOptimizer
from loom.torch.nn.parallel import DistributedDataParallel as DDP

out, start, stop = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
dist.init_process_group("gloo")
r, n = dist.get_rank(), dist.get_world_size()
rng = np.random.default_rng(0)
X = rng.standard_normal((8, 16, 6)).astype(np.float32)
Y = rng.standard_normal((8, 16, 3)).astype(np.float32)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))
ddp = DDP(model)
opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.Adam, lr=0.01)
if start > 0:
    state = {"model": model.state_dict(), "step": 0}
    dcp.load(state, checkpoint_id=f"{out}/ckpt")
    opt.load_sharded_state_dict(dcp.read(f"{out}/ckpt")["optim"])
    assert state["step"] == start, state["step"]
    print(f"rank {r}: resumed at step {start} on {n} ranks", flush=True)
per = 16 // n
for s in range(start, stop):
    rows = slice(r * per, (r + 1) * per)
    opt.zero_grad()
    ((ddp(torch.tensor(X[s, rows])) - torch.tensor(Y[s, rows])) ** 2).mean().backward()
    opt.step()
dcp.save({"model": model.state_dict(), "optim": opt.sharded_state_dict(), "step": stop}, checkpoint_id=f"{out}/ckpt")
if r == 0:
    np.savez(f"{out}/final-{stop}-{n}.npz", **{k: v.detach().numpy() for k, v in model.state_dict().items()})
dist.destroy_process_group()
print(f"rank {r}: ALL OK", flush=True)
