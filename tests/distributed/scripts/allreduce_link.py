"""Fit the all-reduce link of this job (loom.distributed.simulator.measure_allreduce) and print it."""
import loom.distributed as dist
from loom.distributed.simulator import measure_allreduce

dist.init_process_group("gloo")
link = measure_allreduce(sizes=(2 ** 12, 2 ** 18, 2 ** 22), repeats=3)
assert link.bandwidth > 0 and link.latency >= 0, link
print(f"rank {dist.get_rank()}: link latency {link.latency:.2e} s bandwidth {link.bandwidth:.3e} B/s", flush=True)
print(f"rank {dist.get_rank()}: ALL OK", flush=True)
