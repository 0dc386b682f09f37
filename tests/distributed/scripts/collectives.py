"""Every collective on 2+ ranks against its NumPy expectation; prints one line per check, 'ALL OK' at the end."""
import numpy as np

import loom
import loom.distributed as dist

dist.init_process_group("gloo")
r, n = dist.get_rank(), dist.get_world_size()
assert dist.is_initialized() and dist.get_backend() == "gloo" and n >= 2


def base(k):  # Rank k's input: distinct per rank.
    return np.arange(6, dtype=np.float32).reshape(2, 3) + 10 * k


def check(name, got, want):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6, err_msg=name)
    print(f"rank {r}: {name} ok", flush=True)


everyone = np.stack([base(k) for k in range(n)])
for op, ref in [(dist.ReduceOp.SUM, everyone.sum(0)), (dist.ReduceOp.AVG, everyone.mean(0)),
                (dist.ReduceOp.MAX, everyone.max(0)), (dist.ReduceOp.MIN, everyone.min(0)),
                (dist.ReduceOp.PRODUCT, everyone.prod(0))]:
    t = loom.tensor(base(r))
    view = t[0]  # An alias: sees the in-place result.
    dist.all_reduce(t, op=op)
    check(f"all_reduce {op.name}", t, ref)
    check(f"all_reduce {op.name} view", view, ref[0])

base_t = loom.tensor(base(r))
dist.all_reduce(base_t[1], op=dist.ReduceOp.MAX)  # Into a view: the base sees it.
check("all_reduce into a view", base_t, np.stack([base(r)[0], everyone.max(0)[1]]))

ti = loom.tensor(np.full(3, r + 1, dtype=np.int64))
dist.all_reduce(ti)
check("all_reduce int64", ti, np.full(3, n * (n + 1) // 2))

t = loom.tensor(base(r))
work = dist.all_reduce(t, async_op=True)
assert work.wait() and work.is_completed()
check("all_reduce async", t, everyone.sum(0))

t = loom.tensor(base(r))
dist.broadcast(t, src=1)
check("broadcast", t, base(1))

outs = [loom.zeros(2, 3) for _ in range(n)]
dist.all_gather(outs, loom.tensor(base(r)))
for k in range(n):
    check(f"all_gather[{k}]", outs[k], base(k))

out = loom.zeros(2 * n, 3)
dist.all_gather_into_tensor(out, loom.tensor(base(r)))
check("all_gather_into_tensor", out, everyone.reshape(2 * n, 3))

out = loom.zeros(2, 3)
dist.reduce_scatter(out, [loom.tensor(base(r) + k) for k in range(n)])
check("reduce_scatter", out, everyone.sum(0) + n * r)

out = loom.zeros(1, 3)
dist.reduce_scatter_tensor(out, loom.tensor(np.concatenate([base(r)[:1] + k for k in range(n)])))
check("reduce_scatter_tensor", out, everyone[:, :1].sum(0) + n * r)

t = loom.tensor(base(r))
dist.reduce(t, dst=0)
check("reduce", t, everyone.sum(0) if r == 0 else base(r))

gl = [loom.zeros(2, 3) for _ in range(n)] if r == 0 else None
dist.gather(loom.tensor(base(r)), gl, dst=0)
if r == 0:
    for k in range(n):
        check(f"gather[{k}]", gl[k], base(k))

t = loom.zeros(2, 3)
dist.scatter(t, [loom.tensor(base(k) * 2) for k in range(n)] if r == 0 else None, src=0)
check("scatter", t, base(r) * 2)

outs = [loom.zeros(k + 1) for k in range(n)]  # Rank k sends k+1 values to everyone.
dist.all_to_all(outs, [loom.full((r + 1,), float(10 * r + j)) for j in range(n)])
for k in range(n):
    check(f"all_to_all[{k}]", outs[k], np.full(k + 1, 10 * k + r))

inp = loom.tensor(np.arange(2 * n, dtype=np.float32) + 100 * r)
out = loom.zeros(2 * n)
dist.all_to_all_single(out, inp)
check("all_to_all_single", out, np.concatenate([np.arange(2 * r, 2 * r + 2) + 100 * k for k in range(n)]))

if r == 0:
    dist.send(loom.tensor(base(0) * 3), dst=1)
    w = dist.irecv(buf := loom.zeros(2, 3), src=1)
    w.wait()
    check("irecv", buf, base(1) - 1)
elif r == 1:
    buf = loom.zeros(2, 3)
    assert dist.recv(buf) == 0
    check("recv", buf, base(0) * 3)
    dist.isend(loom.tensor(base(1) - 1), dst=0).wait()

s = loom.data.DistributedSampler(range(2 * n + 1), shuffle=False)  # Rank and size from the group.
padded = list(range(2 * n + 1)) + list(range(n - 1))  # Padded to 3n by repeating the start.
check("DistributedSampler default", list(s), padded[r::n])

g = dist.new_group([0, 1])
t = loom.tensor(base(r))
dist.all_reduce(t, group=g)
if r < 2:
    check("new_group all_reduce", t, everyone[:2].sum(0))
    assert dist.get_rank(g) == r and dist.get_world_size(g) == 2
else:  # Not a member: nothing happens, as in PyTorch.
    check("new_group non-member", t, base(r))

dist.barrier()
dist.destroy_process_group()
assert not dist.is_initialized()
print(f"rank {r}: ALL OK", flush=True)
