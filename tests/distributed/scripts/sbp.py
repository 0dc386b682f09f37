"""Global tensors on N ranks: boxing between every pair of signatures (values and gradients), matmul signatures,
data parallelism as split(0) x broadcast, and tensor-parallel MLP and attention against one process."""
import itertools
import math

import numpy as np

import loom
import loom.distributed as dist
import loom.nn.functional as F
from loom.distributed import sbp as S
from loom.distributed import tensor_parallel as tp

dist.init_process_group("gloo")
r, n = dist.get_rank(), dist.get_world_size()
mesh = S.placement()
rng = np.random.default_rng(0)
close = dict(rtol=1e-5, atol=1e-6)


def full(shape):
    return loom.tensor(rng.standard_normal(shape).astype(np.float32))


# 1. Boxing between every pair, on a shape that does not divide evenly; the gradient of (y * w).sum().
sigs = [S.split(0), S.split(1), S.broadcast, S.partial_sum]
value, weight = full((5, 7)), full((5, 7))
for src, dst in itertools.product(sigs, sigs):
    x = S.from_full(value.detach().requires_grad_(True), mesh, src)
    y = x.to_global(sbp=dst)
    assert y.sbp == dst and y.shape == (5, 7), (src, dst, y)
    np.testing.assert_allclose(y.numpy(), value.numpy(), **close)
    w = S.from_full(weight, mesh, S.broadcast)
    (y * w).sum().backward()
    got = S.GlobalTensor(x.local.grad, mesh, src if src != S.partial_sum else S.broadcast, (5, 7))
    np.testing.assert_allclose(got.numpy(), weight.numpy(), **close, err_msg=f"{src} -> {dst}")
print(f"rank {r}: boxing ok", flush=True)

# 2. Matmul under each signature pair equals the product of the whole values; the gradients too.
a_full, b_full = full((6, 4)), full((4, 5))
want = (a_full @ b_full).numpy()
ga_want = np.ones((6, 5), np.float32) @ b_full.numpy().T
gb_want = a_full.numpy().T @ np.ones((6, 5), np.float32)
for sa, sb in itertools.product(sigs, sigs):
    a = S.from_full(a_full.detach().requires_grad_(True), mesh, sa)
    b = S.from_full(b_full.detach().requires_grad_(True), mesh, sb)
    y = a @ b
    np.testing.assert_allclose(y.numpy(), want, **close, err_msg=f"{sa} @ {sb}")
    y.sum().backward()
    for t, s, g in ((a, sa, ga_want), (b, sb, gb_want)):
        layout = s if s != S.partial_sum else S.broadcast
        np.testing.assert_allclose(S.GlobalTensor(t.local.grad, mesh, layout, t.shape).numpy(), g, **close,
                                   err_msg=f"{sa} @ {sb}")
rules = {(S.split(0), S.broadcast): S.split(0), (S.broadcast, S.split(1)): S.split(1),
         (S.split(1), S.split(0)): S.partial_sum, (S.broadcast, S.broadcast): S.broadcast}
for (sa, sb), out in rules.items():
    assert (S.from_full(a_full, mesh, sa) @ S.from_full(b_full, mesh, sb)).sbp == out, (sa, sb)
print(f"rank {r}: matmul ok", flush=True)

# 3. Data parallelism as signatures: batch split(0), weight broadcast; the weight's gradient is the full batch's.
x_full, w_full, t_full = full((8, 3)), full((3, 2)), full((8, 2))
w = S.from_full(loom.nn.Parameter(w_full.clone()), mesh, S.broadcast)
pred = S.from_full(x_full, mesh, S.split(0)) @ w
loss = ((pred - S.from_full(t_full, mesh, S.split(0))) ** 2).mean()
assert loss.sbp == S.partial_sum
loss.backward()
w_ref = loom.nn.Parameter(w_full.clone())
loss_ref = ((x_full @ w_ref - t_full) ** 2).mean()
loss_ref.backward()
np.testing.assert_allclose(loss.numpy(), loss_ref.detach().numpy(), **close)
np.testing.assert_allclose(w.local.grad.numpy(), w_ref.grad.numpy(), **close)
print(f"rank {r}: data parallel ok", flush=True)

# 4. Tensor-parallel MLP (column then row) equals the same MLP in one process, over 3 SGD steps.
loom.manual_seed(5)
fc1, fc2 = loom.nn.Linear(8, 16), loom.nn.Linear(16, 8)
mlp = tp.ParallelMLP(fc1, fc2, mesh, activation="gelu")
assert mlp.fc1.weight.local.shape == (16 // n, 8) and mlp.fc2.weight.local.shape == (8, 16 // n)
opt = loom.optim.SGD(mlp.parameters(), lr=0.1)
opt_ref = loom.optim.SGD(list(fc1.parameters()) + list(fc2.parameters()), lr=0.1)
for _step in range(3):
    xb = full((4, 8))
    y = mlp(S.from_full(xb, mesh, S.broadcast))
    assert y.sbp == S.broadcast
    y_ref = fc2(F.gelu(fc1(xb)))
    np.testing.assert_allclose(y.numpy(), y_ref.detach().numpy(), **close)
    opt.zero_grad()
    opt_ref.zero_grad()
    (y ** 2).mean().backward()
    (y_ref ** 2).mean().backward()
    np.testing.assert_allclose(mlp.fc1.weight.grad.numpy(), fc1.weight.grad.numpy(), **close)
    np.testing.assert_allclose(mlp.fc2.weight.grad.numpy(), fc2.weight.grad.numpy(), **close)
    np.testing.assert_allclose(mlp.fc2.bias.grad.numpy(), fc2.bias.grad.numpy(), **close)
    opt.step()
    opt_ref.step()
np.testing.assert_allclose(mlp.fc1.weight.numpy(), fc1.weight.detach().numpy(), **close)
print(f"rank {r}: tensor-parallel MLP ok", flush=True)

# 5. Tensor-parallel causal self-attention (heads split) equals one process, output and gradients.
T, C, H = 6, 8, 2 * n
loom.manual_seed(9)
qkv, proj = loom.nn.Linear(C, 3 * C), loom.nn.Linear(C, C)
attn = tp.ParallelSelfAttention(qkv, proj, H, mesh)
xa = full((T, C))
y = attn(S.from_full(xa, mesh, S.broadcast))
q, k, v = qkv(xa).split(C, dim=1)
q, k, v = (t.reshape(T, H, C // H).transpose(0, 1) for t in (q, k, v))
att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // H))
att = F.softmax(att.masked_fill(loom.ones(T, T).tril() == 0, float("-inf")), dim=-1)
y_ref = proj((att @ v).transpose(0, 1).reshape(T, C))
np.testing.assert_allclose(y.numpy(), y_ref.detach().numpy(), **close)
y.sum().backward()
y_ref.sum().backward()
np.testing.assert_allclose(attn.proj.weight.grad.numpy(), proj.weight.grad.numpy(), **close)
print(f"rank {r}: tensor-parallel attention ok", flush=True)

# 6. Vocabulary-parallel embedding: each rank holds some rows of the table.
loom.manual_seed(4)
emb = loom.nn.Embedding(7 * n, 5)
vemb = tp.VocabParallelEmbedding(emb, mesh)
assert vemb.weight.local.shape == (7, 5)
ids = loom.tensor(rng.integers(0, 7 * n, (3, 4)).astype(np.int64))
y = vemb(S.from_full(ids, mesh, S.broadcast))
assert y.sbp == S.broadcast
y_ref = emb(ids)
np.testing.assert_allclose(y.numpy(), y_ref.detach().numpy(), **close)
(y * y).sum().backward()
(y_ref * y_ref).sum().backward()
np.testing.assert_allclose(vemb.weight.grad.numpy(), emb.weight.grad.numpy(), **close)
print(f"rank {r}: vocabulary-parallel embedding ok", flush=True)
print(f"rank {r}: ALL OK", flush=True)
