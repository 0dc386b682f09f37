"""loom.distributed.nccl's collectives on N ranks, with fake_nccl standing in for CuPy (no GPU here).

Every operation's result is checked against NumPy; each rank prints "<name> ok" lines, then ALL OK.
"""
import os

import numpy as np
from fake_nccl import FakeDriver, HostBuffer, StridedBuffer

import loom
import loom.distributed as dist
import loom.distributed.nccl as nccl

fake = FakeDriver()
nccl._load_driver = lambda: fake
dist.init_process_group("nccl")
r, n = dist.get_rank(), dist.get_world_size()
local = int(os.environ.get("LOCAL_RANK", os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0")))
# One stand-in GPU per process, chosen by local rank.
assert dist.get_backend() == "nccl" and fake.device == local, (dist.get_backend(), fake.device, local)
print(f"rank {r}: unique id over {'gRPC' if os.environ.get('LOOM_DIST_CONTROL') else 'MPI'}", flush=True)


def ok(name):
    print(f"rank {r}: {name} ok", flush=True)


def expect_error(fn, *words):
    try:
        fn()
    except dist.DistributedError as e:
        assert all(w in str(e) for w in words), (str(e), words)
        return
    raise AssertionError(f"no DistributedError for {words}")


t = HostBuffer(np.arange(6, dtype=np.float32).reshape(2, 3) + r)
nccl.all_reduce(t)
np.testing.assert_array_equal(t.a, sum(np.arange(6, dtype=np.float32).reshape(2, 3) + k for k in range(n)))
comm = dist.GroupMember.WORLD._nccl
assert len(set(map(tuple, comm.uids))) == 1, "the ranks' NCCL unique ids differ"
ok("all_reduce")

t = HostBuffer(np.full(4, 2 * (r + 1), dtype=np.int64))
work = nccl.all_reduce(t, op=dist.ReduceOp.AVG, async_op=True)  # This NCCL has no ncclAvg: SUM, then divide.
work.wait()
np.testing.assert_array_equal(t.a, np.full(4, (n + 1), dtype=np.int64))
assert work.is_completed()
ok("all_reduce AVG")
t = HostBuffer(np.array([r + 1.0, -r], dtype=np.float64))
nccl.all_reduce(t, op=dist.ReduceOp.MAX)
np.testing.assert_array_equal(t.a, [float(n), 0.0])
ok("all_reduce MAX")

b = HostBuffer(np.full(3, r, dtype=np.int32))
nccl.broadcast(b, src=n - 1)
np.testing.assert_array_equal(b.a, np.full(3, n - 1, dtype=np.int32))
ok("broadcast")

out = HostBuffer(np.zeros((2 * n, 2), dtype=np.float16))
nccl.all_gather_into_tensor(out, HostBuffer(np.full((2, 2), r, dtype=np.float16)))
np.testing.assert_array_equal(out.a, np.repeat(np.arange(n, dtype=np.float16), 4).reshape(2 * n, 2))
ok("all_gather_into_tensor")
parts = [HostBuffer(np.zeros(3, dtype=np.float32)) for _ in range(n)]
nccl.all_gather(parts, HostBuffer(np.full(3, 10.0 * r, dtype=np.float32)))
assert [p.a.tolist() for p in parts] == [[10.0 * k] * 3 for k in range(n)]
ok("all_gather")

src = HostBuffer(np.arange(2 * n, dtype=np.float32) * (r + 1))
dst = HostBuffer(np.zeros(2, dtype=np.float32))
nccl.reduce_scatter_tensor(dst, src)
np.testing.assert_array_equal(dst.a, np.arange(2 * r, 2 * r + 2, dtype=np.float32) * (n * (n + 1) / 2))
ok("reduce_scatter_tensor")
dst = HostBuffer(np.zeros(2, dtype=np.float32))
nccl.reduce_scatter(dst, [HostBuffer(np.full(2, k + r, dtype=np.float32)) for k in range(n)])
np.testing.assert_array_equal(dst.a, np.full(2, n * r + n * (n - 1) / 2, dtype=np.float32))
ok("reduce_scatter")

ins = [HostBuffer(np.full(2, 100 * r + k, dtype=np.int32)) for k in range(n)]
outs = [HostBuffer(np.zeros(2, dtype=np.int32)) for _ in range(n)]
nccl.all_to_all(outs, ins)
assert [o.a.tolist() for o in outs] == [[100 * k + r] * 2 for k in range(n)]
ok("all_to_all")

if r == 0:
    nccl.send(HostBuffer(np.arange(5, dtype=np.uint8)), dst=n - 1)
elif r == n - 1:
    got = HostBuffer(np.zeros(5, dtype=np.uint8))
    assert nccl.recv(got, src=0) == 0
    np.testing.assert_array_equal(got.a, np.arange(5, dtype=np.uint8))
    ok("recv")
nccl.barrier()

# Argument checks, before anything is sent (every rank raises the same way).
expect_error(lambda: nccl.all_reduce(loom.ones(2)), "GPU buffer", "loom tensor is in host memory")
expect_error(lambda: nccl.all_reduce(HostBuffer(np.ones(2, np.complex64))), "element type", "cannot carry")
expect_error(lambda: nccl.all_reduce(HostBuffer(np.ones(2, np.float32)), op=dist.ReduceOp.BAND), "no BAND")
expect_error(lambda: nccl.all_reduce(HostBuffer(np.ones(2, np.float32), readonly=True)), "read-only")
expect_error(lambda: nccl.all_reduce(StridedBuffer(np.ones((3, 4), np.float32)[:, ::2])), "not C-contiguous")
expect_error(lambda: nccl.all_gather([HostBuffer(np.ones(2, np.float32))], HostBuffer(np.ones(2, np.float32))),
             f"list of {n} buffers")
expect_error(lambda: nccl.all_gather_into_tensor(HostBuffer(np.ones(3, np.float32)),
                                                 HostBuffer(np.ones(2, np.float32))), f"expected {2 * n} elements")
expect_error(lambda: nccl.recv(HostBuffer(np.ones(2, np.float32))), "name src")
expect_error(lambda: nccl.send(HostBuffer(np.ones(2, np.float32)), dst=r), "own rank")
expect_error(lambda: nccl.send(HostBuffer(np.ones(2, np.float32)), dst=n), f"rank {n} is not in the group")
expect_error(lambda: nccl.send(HostBuffer(np.ones(2, np.float32)), dst=(r + 1) % n, tag=3), "no tags")
mpi_group = dist.new_group(list(range(n)), backend="gloo")
expect_error(lambda: nccl.all_reduce(HostBuffer(np.ones(2, np.float32)), group=mpi_group), "backend 'mpi'")
ok("argument checks")

# Host tensors keep travelling over MPI in an NCCL group.
h = loom.ones(2) * (r + 1)
dist.all_reduce(h)
assert h.tolist() == [n * (n + 1) / 2] * 2
ok("loom tensors over MPI")
dist.destroy_process_group()
assert comm.destroyed
print(f"rank {r}: calls {sorted(set(fake.calls))}", flush=True)
print(f"rank {r}: ALL OK", flush=True)
