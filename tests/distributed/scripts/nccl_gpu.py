"""loom.distributed.nccl on a real GPU through CuPy's NCCL: every collective on CuPy arrays and PyTorch CUDA
tensors, checked against NumPy. Run under `python -m loom.distributed.run --nproc N` or alone (one rank).

Each rank prints "<name> ok" lines, then ALL OK. Needs CuPy with NCCL and one GPU per rank.
"""
import numpy as np

import loom
import loom.distributed as dist
import loom.distributed.nccl as nccl

import cupy as cp  # noqa: E402  (the point of this script: a real GPU)

dist.init_process_group("nccl")
r, n = dist.get_rank(), dist.get_world_size()
assert dist.get_backend() == "nccl", dist.get_backend()


def ok(name):
    print(f"rank {r}: {name} ok", flush=True)


base = np.arange(6, dtype=np.float32).reshape(2, 3)
t = cp.asarray(base + r)
nccl.all_reduce(t)
np.testing.assert_array_equal(cp.asnumpy(t), sum(base + k for k in range(n)))
ok("all_reduce float32")

for dtype in ("float16", "float64", "int32", "int64", "uint8"):
    t = cp.full(5, r + 1, dtype=dtype)
    nccl.all_reduce(t)
    np.testing.assert_array_equal(cp.asnumpy(t), np.full(5, n * (n + 1) // 2, dtype=dtype))
ok("all_reduce dtypes")

t = cp.full(4, 2.0 * (r + 1), dtype=cp.float32)
work = nccl.all_reduce(t, op=dist.ReduceOp.AVG, async_op=True)
work.wait()
assert work.is_completed()
np.testing.assert_allclose(cp.asnumpy(t), np.full(4, n + 1.0, dtype=np.float32))
ok("all_reduce AVG async")
t = cp.asarray(np.array([r + 1.0, -r], dtype=np.float64))
nccl.all_reduce(t, op=dist.ReduceOp.MAX)
np.testing.assert_array_equal(cp.asnumpy(t), [float(n), 0.0])
nccl.all_reduce(t, op=dist.ReduceOp.MIN)
ok("all_reduce MAX MIN")

b = cp.full(3, r, dtype=cp.int32)
nccl.broadcast(b, src=n - 1)
np.testing.assert_array_equal(cp.asnumpy(b), np.full(3, n - 1, dtype=np.int32))
ok("broadcast")

out = cp.zeros((2 * n, 2), dtype=cp.float16)
nccl.all_gather_into_tensor(out, cp.full((2, 2), r, dtype=cp.float16))
np.testing.assert_array_equal(cp.asnumpy(out), np.repeat(np.arange(n, dtype=np.float16), 4).reshape(2 * n, 2))
parts = [cp.zeros(3, dtype=cp.float32) for _ in range(n)]
nccl.all_gather(parts, cp.full(3, 10.0 * r, dtype=cp.float32))
assert [cp.asnumpy(p).tolist() for p in parts] == [[10.0 * k] * 3 for k in range(n)]
ok("all_gather")

src = cp.asarray(np.arange(2 * n, dtype=np.float32) * (r + 1))
dst = cp.zeros(2, dtype=cp.float32)
nccl.reduce_scatter_tensor(dst, src)
np.testing.assert_array_equal(cp.asnumpy(dst), np.arange(2 * r, 2 * r + 2, dtype=np.float32) * (n * (n + 1) / 2))
dst = cp.zeros(2, dtype=cp.float32)
nccl.reduce_scatter(dst, [cp.full(2, k + r, dtype=cp.float32) for k in range(n)])
np.testing.assert_array_equal(cp.asnumpy(dst), np.full(2, n * r + n * (n - 1) / 2, dtype=np.float32))
ok("reduce_scatter")

ins = [cp.full(2, 100 * r + k, dtype=cp.int32) for k in range(n)]
outs = [cp.zeros(2, dtype=cp.int32) for _ in range(n)]
nccl.all_to_all(outs, ins)
assert [cp.asnumpy(o).tolist() for o in outs] == [[100 * k + r] * 2 for k in range(n)]
ok("all_to_all")

if n > 1:
    if r == 0:
        nccl.send(cp.arange(5, dtype=cp.uint8), dst=n - 1)
    elif r == n - 1:
        got = cp.zeros(5, dtype=cp.uint8)
        assert nccl.recv(got, src=0) == 0
        np.testing.assert_array_equal(cp.asnumpy(got), np.arange(5, dtype=np.uint8))
        ok("send/recv")
nccl.barrier()
ok("barrier")

try:
    import torch
except ImportError:
    torch = None
if torch is not None and torch.cuda.is_available():
    tt = torch.full((8,), float(r + 1), device="cuda")
    nccl.all_reduce(tt)
    torch.cuda.synchronize()
    assert tt.cpu().tolist() == [n * (n + 1) / 2] * 8, tt
    bf = torch.full((4,), float(r + 1), device="cuda", dtype=torch.bfloat16)
    nccl.all_reduce(bf)
    assert bf.float().cpu().tolist() == [n * (n + 1) / 2] * 4, bf
    ok("torch CUDA tensors (float32, bfloat16)")

# A large buffer: 64 MiB, timed (bus bandwidth is only meaningful for n > 1).
big = cp.ones(16 * 1024 * 1024, dtype=cp.float32)
nccl.all_reduce(big)
cp.cuda.get_current_stream().synchronize()
assert float(big[0].get()) == n and float(big[-1].get()) == n
ok("all_reduce 64 MiB")

h = loom.ones(2) * (r + 1)
dist.all_reduce(h)
assert h.tolist() == [n * (n + 1) / 2] * 2
ok("loom tensors over MPI")
world = dist.GroupMember.WORLD
assert world._nccl is not None
dist.destroy_process_group()
assert world._nccl is None  # Its NCCL communicator was destroyed with the group.

dist.init_process_group("nccl")  # A second job phase: a new communicator.
t = cp.full(3, r + 1.0, dtype=cp.float32)
nccl.all_reduce(t)
np.testing.assert_array_equal(cp.asnumpy(t), np.full(3, n * (n + 1) / 2, dtype=np.float32))
dist.destroy_process_group()
ok("re-init after destroy")
print(f"rank {r}: ALL OK", flush=True)
