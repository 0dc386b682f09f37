"""Gradients of the differentiable collectives (loom.distributed.nn.functional) against hand-derived values."""
import numpy as np

import loom
import loom.distributed as dist
import loom.distributed.nn.functional as dfn

dist.init_process_group("mpi")
r, n = dist.get_rank(), dist.get_world_size()
w = np.arange(1, 4, dtype=np.float32)  # The same on every rank.


def check(name, got, want):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6, atol=1e-6, err_msg=name)
    print(f"rank {r}: {name} ok", flush=True)


c = np.float32(r + 1)  # Rank r weighs its output by r + 1: loss_r = (r+1) * sum(w * y).
coef_sum = n * (n + 1) / 2

x = loom.tensor(np.full(3, float(r), np.float32), requires_grad=True)
y = dfn.all_reduce(x * 2)
check("all_reduce value", y.detach(), np.full(3, 2 * sum(range(n))))
(c * (y * loom.tensor(w)).sum()).backward()
# d/dx_r of sum_k c_k * w . (2 * sum_j x_j) = 2 * w * sum_k c_k: the gradient is all-reduced.
check("all_reduce grad", x.grad, 2 * w * coef_sum)

x = loom.tensor(np.full(3, float(r), np.float32), requires_grad=True)
parts = dfn.all_gather(x)
check("all_gather value", loom.stack(parts).detach(), np.stack([np.full(3, k) for k in range(n)]))
loss = sum(((k + 1) * c * (parts[k] * loom.tensor(w)).sum()) for k in range(n))
loss.backward()
# x_r appears as parts[r] on every rank k with weight (r+1) * c_k: summed over ranks.
check("all_gather grad", x.grad, (r + 1) * coef_sum * w)

ins = [loom.tensor(np.full(3, float(10 * r + k), np.float32), requires_grad=True) for k in range(n)]
out = dfn.reduce_scatter(loom.zeros(3), ins)
check("reduce_scatter value", out.detach(), np.full(3, sum(10 * j + r for j in range(n))))
(c * (out * loom.tensor(w)).sum()).backward()
for k in range(n):  # ins[k] of every rank reaches rank k's output, weighted by c_k.
    check(f"reduce_scatter grad[{k}]", ins[k].grad, (k + 1) * w)

x = loom.tensor(np.full(3, float(r + 5), np.float32), requires_grad=True)
y = dfn.broadcast(x, src=1)
check("broadcast value", y.detach(), np.full(3, 6.0))
(c * (y * loom.tensor(w)).sum()).backward()
check("broadcast grad", x.grad, coef_sum * w if r == 1 else np.zeros(3))

x = loom.tensor(np.arange(2 * n, dtype=np.float32) + 100 * r, requires_grad=True)
y = dfn.all_to_all_single(loom.zeros(2 * n), x)
(c * (y * loom.arange(2 * n, dtype=loom.float32)).sum()).backward()
# Element j of rank r's input goes to rank j // 2 at position 2 * r + j % 2.
want = np.array([(j // 2 + 1) * (2 * r + j % 2) for j in range(2 * n)], np.float32)
check("all_to_all_single grad", x.grad, want)

dist.destroy_process_group()
print(f"rank {r}: ALL OK", flush=True)
