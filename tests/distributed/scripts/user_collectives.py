"""A torch.distributed user's program, written once against PyTorch's API: run with loom (``loom.torch``, the
default) or with PyTorch itself (``--torch``, under torchrun over gloo), so the same expectations check both.

Every collective of the tensor API on 2+ ranks: each ReduceOp (bitwise ones on ints, logical on bool), async
handles, in-place writes through views, float64/int64/bool/float16, non-contiguous inputs, lists and flat
tensors, rooted operations, object collectives, point-to-point (blocking, non-blocking, batched), subgroups.
"""
import os
import sys

import numpy as np

if "--torch" in sys.argv:
    import torch
    import torch.distributed as dist
else:
    import loom.torch as torch
    import loom.torch.distributed as dist

backend = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--backend=")), "gloo")
init = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--init=")), None)
if init is not None:   # --init=tcp://ADDR:PORT --rank=R --world=N, torch's explicit rendezvous.
    args = {a[2:].split("=")[0]: int(a.split("=")[1]) for a in sys.argv if a.startswith(("--rank=", "--world="))}
    dist.init_process_group(backend, init_method=init, rank=args["rank"], world_size=args["world"])
elif backend == "default":
    dist.init_process_group()
else:
    dist.init_process_group(backend=backend)
rank, world = dist.get_rank(), dist.get_world_size()
assert dist.is_initialized() and dist.is_available()


def check(cond, what, got=None):
    if not cond:
        print(f"rank {rank}: {what} FAILED (got {got!r})", flush=True)
        raise SystemExit(1)
    print(f"rank {rank}: {what} ok", flush=True)


def arr(t):
    return np.asarray(t.detach().float().numpy() if t.dtype in (torch.float16, torch.bfloat16) else t.numpy())


def same(t, expected, what, dtype=None):
    got = arr(t)
    exp = np.asarray(expected)
    ok = got.shape == exp.shape and np.allclose(got.astype(np.float64), exp.astype(np.float64))
    if dtype is not None:
        ok = ok and t.dtype == dtype
    check(ok, what, (got.tolist(), str(t.dtype)))


if backend == "gloo":
    check(dist.get_backend() == "gloo" and dist.get_backend(dist.group.WORLD) == "gloo", "get_backend",
          dist.get_backend())
check(dist.is_torchelastic_launched() == ("TORCHELASTIC_RUN_ID" in os.environ), "is_torchelastic_launched")
ranks = np.arange(world)
# Every ReduceOp on float64 and int64.
vals = {r: np.array([r + 1.0, -(r + 2.0), 0.5 * r + 3.0]) for r in range(world)}
stack = np.stack([vals[r] for r in range(world)])
for name, ref in (("SUM", stack.sum(0)), ("PRODUCT", stack.prod(0)), ("MIN", stack.min(0)),
                  ("MAX", stack.max(0))):
    t = torch.tensor(vals[rank], dtype=torch.float64)
    ret = dist.all_reduce(t, op=getattr(dist.ReduceOp, name))
    check(ret is None, f"all_reduce {name} returns None")
    same(t, ref, f"all_reduce {name} float64", torch.float64)
ivals = {r: np.array([r + 1, 6 + r * 3, 12 - r, 255], dtype=np.int64) for r in range(world)}
istack = np.stack([ivals[r] for r in range(world)])
for name, ref in (("SUM", istack.sum(0)), ("PRODUCT", istack.prod(0)), ("MIN", istack.min(0)),
                  ("MAX", istack.max(0)), ("BAND", np.bitwise_and.reduce(istack, 0)),
                  ("BOR", np.bitwise_or.reduce(istack, 0)), ("BXOR", np.bitwise_xor.reduce(istack, 0))):
    t = torch.tensor(ivals[rank], dtype=torch.int64)
    dist.all_reduce(t, op=getattr(dist.ReduceOp, name))
    same(t, ref, f"all_reduce {name} int64", torch.int64)
# AVG: gloo has none in PyTorch, so only loom runs it (float: the mean).
if "--torch" not in sys.argv:
    t = torch.tensor(vals[rank], dtype=torch.float32)
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    same(t, stack.mean(0), "all_reduce AVG float32", torch.float32)

# bool: SUM/MAX as or, MIN/PRODUCT as and.
bvals = {r: np.array([True, r == 0, False, r == 1]) for r in range(world)}
bstack = np.stack([bvals[r] for r in range(world)])
for name, ref in (("SUM", bstack.any(0)), ("MAX", bstack.any(0)), ("MIN", bstack.all(0)),
                  ("PRODUCT", bstack.all(0))):
    t = torch.tensor(bvals[rank])
    dist.all_reduce(t, op=getattr(dist.ReduceOp, name))
    same(t, ref, f"all_reduce {name} bool", torch.bool)

# float16 keeps its dtype.
t = torch.full((5,), 0.5 * (rank + 1), dtype=torch.float16)
dist.all_reduce(t)
same(t, np.full(5, 0.5 * sum(r + 1 for r in range(world))), "all_reduce float16", torch.float16)

# In place through views: a non-contiguous column of a matrix, and an alias that sees the result (PyTorch's
# gloo mishandles non-contiguous tensors, so only loom runs these).
TORCH = "--torch" in sys.argv
m = torch.arange(12, dtype=torch.float32).reshape(3, 4) * (rank + 1)
col = m[:, 1]
alias = m.view(12)
dist.all_reduce(col)
scale = sum(r + 1 for r in range(world))
expect = np.arange(12, dtype=np.float32).reshape(3, 4) * (rank + 1)
expect[:, 1] = np.arange(12, dtype=np.float32).reshape(3, 4)[:, 1] * scale
if not TORCH:
    same(m, expect, "all_reduce of a non-contiguous column writes into its base")
    same(alias, expect.reshape(12), "an alias sees the all_reduce result")
tt = (torch.arange(6, dtype=torch.float32).reshape(2, 3) + rank).t()
dist.all_reduce(tt)
TORCH or same(tt, sum((np.arange(6, dtype=np.float32).reshape(2, 3) + r).T for r in range(world)),
     "all_reduce of a transposed tensor")

# async_op handles.
t = torch.ones(4) * (rank + 1)
work = dist.all_reduce(t, async_op=True)
check(work is not None and hasattr(work, "wait") and hasattr(work, "is_completed"), "async_op returns a Work")
work.wait()
check(work.is_completed(), "is_completed after wait")
same(t, np.full(4, float(scale)), "async all_reduce after wait")
works = [dist.broadcast(x, src=0, async_op=True) for x in [torch.full((3,), float(rank + k)) for k in range(3)]]
for w in works:
    w.wait()
check(all(w.is_completed() for w in works), "several async broadcasts complete")

# all_gather into a list (and of a non-contiguous input), all_gather_into_tensor (flat and stacked).
outs = [torch.zeros(2, 3) for _ in range(world)]
dist.all_gather(outs, torch.full((2, 3), float(rank)))
check(all(np.array_equal(arr(o), np.full((2, 3), float(r))) for r, o in enumerate(outs)), "all_gather list")
src = torch.arange(6, dtype=torch.int64).reshape(2, 3).t() + 10 * rank
outs = [torch.zeros(3, 2, dtype=torch.int64) for _ in range(world)]
dist.all_gather(outs, src)
check(all(np.array_equal(arr(o), np.arange(6).reshape(2, 3).T + 10 * r) for r, o in enumerate(outs)),
      "all_gather of a non-contiguous int64 input")
flat = torch.zeros(world * 2)
dist.all_gather_into_tensor(flat, torch.tensor([rank, rank + 0.5]))
same(flat, np.concatenate([[r, r + 0.5] for r in range(world)]), "all_gather_into_tensor flat")
stacked = torch.zeros(world, 2)
if not TORCH:  # PyTorch's gloo takes only the flat form.
    dist.all_gather_into_tensor(stacked, torch.tensor([rank, rank + 0.5]))
    same(stacked, np.array([[r, r + 0.5] for r in range(world)]), "all_gather_into_tensor stacked")

# reduce_scatter_tensor (SUM and MAX), reduce_scatter list.
inp = torch.arange(world * 2, dtype=torch.float32) * (rank + 1)
out = torch.zeros(2)
dist.reduce_scatter_tensor(out, inp)
same(out, (np.arange(world * 2) * scale)[rank * 2:rank * 2 + 2], "reduce_scatter_tensor SUM")
dist.reduce_scatter_tensor(out, inp, op=dist.ReduceOp.MAX)
same(out, (np.arange(world * 2) * world)[rank * 2:rank * 2 + 2], "reduce_scatter_tensor MAX")
if "--torch" not in sys.argv:  # gloo has no reduce_scatter in PyTorch.
    out = torch.zeros(2)
    dist.reduce_scatter(out, [torch.full((2,), float(rank * 10 + k)) for k in range(world)])
    same(out, np.full(2, float(sum(r * 10 + rank for r in range(world)))), "reduce_scatter list")

# Rooted: reduce, gather, scatter, broadcast to/from rank 1.
t = torch.tensor([1.0, 2.0]) * (rank + 1)
dist.reduce(t, dst=1, op=dist.ReduceOp.SUM)
if rank == 1:
    same(t, np.array([1.0, 2.0]) * scale, "reduce to rank 1")
t = torch.tensor([rank + 1.0])
dist.reduce(t, dst=0, op=dist.ReduceOp.PRODUCT)
if rank == 0:
    same(t, [float(np.prod(ranks + 1))], "reduce PRODUCT to rank 0")
g = [torch.zeros(2) for _ in range(world)] if rank == 1 else None
dist.gather(torch.tensor([rank, -rank], dtype=torch.float32), g, dst=1)
if rank == 1:
    check(all(np.array_equal(arr(x), [r, -r]) for r, x in enumerate(g)), "gather to rank 1")
s = torch.zeros(3, dtype=torch.int64)
dist.scatter(s, [torch.full((3,), 7 * r, dtype=torch.int64) for r in range(world)] if rank == 0 else None, src=0)
same(s, np.full(3, 7 * rank), "scatter from rank 0", torch.int64)
b = torch.tensor([rank * 1.5, 4.0], dtype=torch.float64)
dist.broadcast(b, src=1)
same(b, [1.5, 4.0], "broadcast from rank 1", torch.float64)
bb = torch.tensor([rank == 1, True, False])
dist.broadcast(bb, src=1)
same(bb, [True, True, False], "broadcast bool", torch.bool)

# Object collectives.
objs = [{"rank": rank, "s": "x" * rank}, (1, 2)] if rank == 0 else [None, None]
dist.broadcast_object_list(objs, src=0)
check(objs == [{"rank": 0, "s": ""}, (1, 2)], "broadcast_object_list", objs)
got = [None] * world
dist.all_gather_object(got, {"r": rank, "big": list(range(rank * 100))})
check(got == [{"r": r, "big": list(range(r * 100))} for r in range(world)], "all_gather_object")
gl = [None] * world if rank == 0 else None
dist.gather_object(("hello", rank), gl, dst=0)
if rank == 0:
    check(gl == [("hello", r) for r in range(world)], "gather_object", gl)
outl = [None]
dist.scatter_object_list(outl, [{"k": r} for r in range(world)] if rank == 0 else None, src=0)
check(outl == [{"k": rank}], "scatter_object_list", outl)

# Point to point: blocking, non-blocking, batched.
if rank == 0:
    dist.send(torch.tensor([3.0, 1.0, 4.0]), dst=1)
    r = torch.zeros(2, dtype=torch.int64)
    dist.recv(r, src=1)
    same(r, [5, 9], "recv from rank 1", torch.int64)
elif rank == 1:
    r = torch.zeros(3)
    dist.recv(r, src=0)
    same(r, [3.0, 1.0, 4.0], "recv from rank 0")
    dist.send(torch.tensor([5, 9], dtype=torch.int64), dst=0)
peer = (rank + 1) % world
prev = (rank - 1) % world
sbuf = torch.full((4,), float(rank))
rbuf = torch.zeros(4)
reqs = [dist.isend(sbuf, dst=peer), dist.irecv(rbuf, src=prev)]
for q in reqs:
    q.wait()
same(rbuf, np.full(4, float(prev)), "isend/irecv ring")
rbuf2 = torch.zeros(4)
ops = [dist.P2POp(dist.isend, sbuf * 2, peer), dist.P2POp(dist.irecv, rbuf2, prev)]
for q in dist.batch_isend_irecv(ops):
    q.wait()
same(rbuf2, np.full(4, 2.0 * prev), "batch_isend_irecv ring")

# Subgroups: a group of rank 0 alone, a group of every rank, get_rank(group), non-members.
g0 = dist.new_group([0])
gall = dist.new_group(list(range(world)))
check(dist.get_rank(gall) == rank and dist.get_world_size(gall) == world, "get_rank/get_world_size of a group")
if rank == 0:
    check(dist.get_rank(g0) == 0 and dist.get_world_size(g0) == 1, "get_rank of a one-rank group")
    t = torch.tensor([5.0])
    dist.all_reduce(t, group=g0)
    same(t, [5.0], "all_reduce on a one-rank group")
else:
    check(dist.get_rank(g0) == -1, "get_rank on a group this rank is not in", dist.get_rank(g0))
t = torch.tensor([float(rank)])
dist.all_reduce(t, group=gall, op=dist.ReduceOp.MAX)
same(t, [float(world - 1)], "all_reduce on new_group(all)")
g1 = dist.new_group([1, 0]) if world > 1 else None  # Order given by the user; torch sorts. Every rank calls it.
if rank in (0, 1) and world > 1:
    check(dist.get_process_group_ranks(g1) == [0, 1], "get_process_group_ranks")
    t = torch.tensor([1.0 + rank])
    dist.broadcast(t, src=1, group=g1)
    same(t, [2.0], "broadcast from global rank 1 in a subgroup")
dist.barrier()
dist.barrier(group=gall)
dist.destroy_process_group()
check(not dist.is_initialized(), "destroy_process_group")
print(f"rank {rank}: ALL OK", flush=True)
