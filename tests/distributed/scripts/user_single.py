"""A torch.distributed program run as ``python script.py`` with no launcher: a world of one (with or without
torchrun's variables RANK=0 WORLD_SIZE=1 MASTER_ADDR MASTER_PORT), every collective with its one-rank meaning."""
import sys

import loom.torch as torch
import loom.torch.distributed as dist
import loom.torch.nn as nn
from loom.torch.nn.parallel import DistributedDataParallel as DDP
from loom.torch.utils.data import TensorDataset
from loom.torch.utils.data.distributed import DistributedSampler


def check(cond, what):
    if not cond:
        print(f"{what} FAILED", flush=True)
        sys.exit(1)
    print(f"{what} ok", flush=True)


check(dist.is_available() and not dist.is_initialized(), "available, not initialised")
how = sys.argv[1] if len(sys.argv) > 1 else "default"
if how == "env":
    dist.init_process_group(backend="gloo", init_method="env://")
elif how == "tcp":
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29555", rank=0, world_size=1)
else:
    dist.init_process_group()
check(dist.is_initialized() and dist.get_rank() == 0 and dist.get_world_size() == 1, "a world of one")
t = torch.tensor([1.0, 2.0])
dist.all_reduce(t)
check(t.tolist() == [1.0, 2.0], "all_reduce")
w = dist.all_reduce(t, op=dist.ReduceOp.MAX, async_op=True)
w.wait()
check(w.is_completed(), "async all_reduce")
outs = [torch.zeros(2)]
dist.all_gather(outs, t)
check(outs[0].tolist() == [1.0, 2.0], "all_gather")
dist.broadcast(t, src=0)
dist.reduce(t, dst=0)
g = [torch.zeros(2)]
dist.gather(t, g, dst=0)
check(g[0].tolist() == [1.0, 2.0], "gather")
s = torch.zeros(2)
dist.scatter(s, [torch.ones(2)], src=0)
check(s.tolist() == [1.0, 1.0], "scatter")
objs = [None]
dist.all_gather_object(objs, {"a": 1})
check(objs == [{"a": 1}], "all_gather_object")
box = ["x"]
dist.broadcast_object_list(box, src=0)
check(box == ["x"], "broadcast_object_list")
grp = dist.new_group([0])
dist.all_reduce(t, group=grp)
dist.barrier()
model = DDP(nn.Linear(3, 1))
model(torch.ones(2, 3)).sum().backward()
check(model.module.weight.grad is not None, "DDP on one rank")
check(len(DistributedSampler(TensorDataset(torch.ones(5, 1)))) == 5, "DistributedSampler on one rank")
dist.destroy_process_group()
check(not dist.is_initialized(), "destroyed")
dist.init_process_group("gloo")
check(dist.get_world_size() == 1, "initialised again")
dist.destroy_process_group()
print("ALL OK", flush=True)
