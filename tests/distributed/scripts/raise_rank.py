"""Rank 1 raises while rank 0 waits in a collective: the job must end, naming rank 1 and its exit code."""
import loom
import loom.distributed as dist

dist.init_process_group("gloo")
if dist.get_rank() == 1:
    raise ValueError("rank 1 fails on purpose")
dist.all_reduce(loom.ones(2))
print("rank 0 passed an all_reduce whose peer failed", flush=True)
