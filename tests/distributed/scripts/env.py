"""Print torchrun's environment as the launcher sets it, then try to join the group."""
import os

import loom.distributed as dist

print("ENV", *(f"{k}={os.environ.get(k)}" for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                                     "NODE_RANK", "MASTER_ADDR", "MASTER_PORT")), flush=True)
try:
    dist.init_process_group()
    print("JOINED", dist.get_rank(), dist.get_world_size(), flush=True)
except dist.DistributedError as e:
    print("REFUSED", e, flush=True)
