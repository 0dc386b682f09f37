"""loom used as an MPI user would: started by plain ``mpirun -np N python plain_mpirun.py`` (no loom launcher, no
loom environment variables), `init_process_group()` with no arguments picks the MPI backend, collectives on
ordinary loom tensors give NumPy's answers, and tensors that differ between ranks (shape or dtype) raise a
DistributedError naming each rank's on every rank, after which the job goes on. Prints one line per check,
'ALL OK' at the end."""
import os

import numpy as np

import loom
import loom.distributed as dist
import loom.distributed.nn.functional as dfn
from loom.distributed import comm

assert not [k for k in os.environ if k.startswith("LOOM_")], "started with loom environment variables"
dist.init_process_group()
r, n = dist.get_rank(), dist.get_world_size()
assert dist.is_initialized() and dist.get_backend() == "mpi" and n >= 2, (dist.get_backend(), n)


def check(name, got, want):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6, err_msg=name)
    print(f"rank {r}: {name} ok", flush=True)


def mine(k, dtype=np.float32):
    return (np.arange(6).reshape(2, 3) + 10 * k).astype(dtype)


every = np.stack([mine(k) for k in range(n)])
t = loom.tensor(mine(r))
dist.all_reduce(t)
check("all_reduce", t.numpy(), every.sum(0))
t = loom.tensor(mine(r, np.int64))
dist.all_reduce(t, op=dist.ReduceOp.MAX)
check("all_reduce int64 MAX", t.numpy(), every.max(0))
t = loom.tensor(mine(r))
dist.broadcast(t, src=n - 1)
check("broadcast", t.numpy(), mine(n - 1))
parts = [loom.zeros((2, 3)) for _ in range(n)]
dist.all_gather(parts, loom.tensor(mine(r)))
check("all_gather", np.stack([p.numpy() for p in parts]), every)
out = loom.zeros((2, 3))
dist.reduce_scatter_tensor(out, loom.tensor(np.concatenate([mine(k) for k in range(n)]) * (r + 1)))
check("reduce_scatter_tensor", out.numpy(), mine(r) * n * (n + 1) / 2)
if r == 0:
    dist.send(loom.tensor(mine(7)), dst=1)
elif r == 1:
    got = loom.zeros((2, 3))
    dist.recv(got, src=0)
    check("send/recv", got.numpy(), mine(7))
flags = loom.tensor(np.array([True, r == 0, False]))
dist.all_reduce(flags, op=dist.ReduceOp.MAX)
check("all_reduce bool MAX (or)", flags.numpy(), [True, True, False])
flags = loom.tensor(np.array([True, r == 0, False]))
dist.all_reduce(flags, op=dist.ReduceOp.MIN)
check("all_reduce bool MIN (and)", flags.numpy(), [True, False, False])
half = loom.ones(3, dtype=loom.float16) * (r + 1)
dist.all_reduce(half)
assert half.dtype == loom.float16
check("all_reduce float16", half.float().numpy(), np.full(3, n * (n + 1) / 2))
out = loom.zeros(n)
dist.all_to_all_single(out, loom.tensor(np.arange(n, dtype=np.float32) + 10 * r))
check("all_to_all_single", out.numpy(), np.arange(n) * 10 + r)
# The user's own mpi4py calls interleave with loom's on the same job.
from mpi4py import MPI  # noqa: E402

check("mpi4py allreduce beside loom", MPI.COMM_WORLD.allreduce(r), n * (n - 1) / 2)
dist.monitored_barrier(timeout=60)   # Without the launcher's control plane: an MPI barrier with a timeout.
check("monitored_barrier without the launcher", 1, 1)
dist.barrier()


def refused(name, fn, *words):
    try:
        fn()
    except dist.DistributedError as e:
        for w in words:
            assert w in str(e), (w, str(e))
        print(f"rank {r}: {name} refused ok", flush=True)
        return
    raise AssertionError(f"rank {r}: {name} was not refused")


shape = (3,) if r == 0 else (4,)
refused("all_reduce of different shapes", lambda: dist.all_reduce(loom.ones(shape)),
        "loom.distributed.all_reduce", "rank 0: float32[3]", "rank 1: float32[4]", "same shape and dtype")
dtype = loom.float32 if r == 0 else loom.float64
refused("broadcast of different dtypes", lambda: dist.broadcast(loom.ones(3, dtype=dtype), src=0),
        "loom.distributed.broadcast", "rank 0: float32[3]", "rank 1: float64[3]")
# The differentiable collectives (graph primitives, the path loom.function compiles) check the same way.
refused("differentiable all_gather of different shapes", lambda: dfn.all_gather(loom.ones(shape)),
        "loom.distributed.all_gather", "rank 0: float32[3]", "rank 1: float32[4]")
refused("differentiable all_reduce of different shapes", lambda: dfn.all_reduce(loom.ones(shape)),
        "loom.distributed.all_reduce", "rank 0: float32[3]", "rank 1: float32[4]")
if r == 0:
    comm.send(np.ones(2, np.float32), 1, 5, tuple(range(n)))
elif r == 1:
    refused("graph recv of a shorter message", lambda: comm.recv((4,), np.float32, 0, 5, tuple(range(n))),
            "has 8 bytes", "holds 16")
refused("average of a bool tensor", lambda: dist.all_reduce(loom.ones(2, dtype=loom.bool), op=dist.ReduceOp.AVG),
        "cannot average a bool tensor")
refused("all_gather of different shapes",
        lambda: dist.all_gather([loom.zeros(shape) for _ in range(n)], loom.ones(shape)), "all_gather")
if r == 0:
    dist.send(loom.ones(2), dst=1)
    dist.send(loom.ones(5), dst=1)
elif r == 1:
    refused("recv of a shorter message", lambda: dist.recv(loom.zeros(4), src=0), "received 8 bytes", "16")
    refused("recv of a longer message", lambda: dist.recv(loom.zeros(4), src=0), "larger than the receiving tensor")
t = loom.ones(2) * (r + 1)
dist.all_reduce(t)
check("all_reduce after the refusals", t.numpy(), np.full(2, n * (n + 1) / 2))
dist.destroy_process_group()
print(f"rank {r}: ALL OK", flush=True)
