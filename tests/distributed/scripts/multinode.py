"""Collectives across ranks of separately launched nodes; each rank prints what it checked, then ALL OK."""
import os

import numpy as np

import loom
import loom.distributed as dist

dist.init_process_group("gloo")
r, n = dist.get_rank(), dist.get_world_size()
assert r == int(os.environ["RANK"]) and n == int(os.environ["WORLD_SIZE"]), (r, n, os.environ["RANK"])
print(f"rank {r}: node {os.environ['NODE_RANK']} local {os.environ['LOCAL_RANK']} of world {n} "
      f"master {os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}", flush=True)

t = loom.ones(3) * (r + 1)
dist.all_reduce(t)
np.testing.assert_array_equal(t.numpy(), np.full(3, n * (n + 1) / 2, np.float32))
print(f"rank {r}: all_reduce ok", flush=True)

parts = [loom.zeros(2) for _ in range(n)]
dist.all_gather(parts, loom.full((2,), float(r)))
assert [p.tolist() for p in parts] == [[float(k)] * 2 for k in range(n)]
print(f"rank {r}: all_gather ok", flush=True)

b = loom.full((4,), float(r))
dist.broadcast(b, src=n - 1)  # From the last rank, which is on the last node.
assert b.tolist() == [float(n - 1)] * 4
print(f"rank {r}: broadcast ok", flush=True)

if r == 0:
    dist.send(loom.arange(5.0), dst=n - 1)
elif r == n - 1:
    got = loom.zeros(5)
    dist.recv(got, src=0)
    assert got.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    print(f"rank {r}: recv ok", flush=True)
dist.barrier()
dist.destroy_process_group()
print(f"rank {r}: ALL OK", flush=True)
