"""DDP on N ranks (batch B/N each) equals one process on the full batch B, parameters to 1e-6 after 20 steps;
no_sync accumulates; state_dict has the 'module.' prefix."""
import numpy as np

import loom
import loom.distributed as dist
from loom.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
r, n = dist.get_rank(), dist.get_world_size()
rng = np.random.default_rng(0)
X = rng.standard_normal((8 * n, 5)).astype(np.float32)
Y = rng.standard_normal((8 * n, 2)).astype(np.float32)


def mlp(seed):
    loom.manual_seed(seed)
    return loom.nn.Sequential(loom.nn.Linear(5, 16), loom.nn.Tanh(), loom.nn.Linear(16, 2))


def params(m):
    return [p.detach().numpy().copy() for p in m.parameters()]


# Replicas start from different weights: construction must broadcast rank 0's.
model = DDP(mlp(100 + r), bucket_cap_mb=0.0002)  # A tiny cap: several buckets.
assert len(model.bucket_sizes) > 1, model.bucket_sizes
assert list(model.state_dict())[0].startswith("module.") and not list(model.module.state_dict())[0].startswith("m")
ref = mlp(100)
for a, b in zip(params(model), params(ref)):
    np.testing.assert_allclose(a, b, rtol=0, atol=0)

opt = loom.optim.SGD(model.parameters(), lr=0.1)
ref_opt = loom.optim.SGD(ref.parameters(), lr=0.1)
shard = slice(r * 8, (r + 1) * 8)
for step in range(20):
    opt.zero_grad()
    loss = loom.nn.functional.mse_loss(model(loom.tensor(X[shard])), loom.tensor(Y[shard]))
    loss.backward()
    # Every bucket's all-reduce started during backward, as soon as its gradients were final.
    assert model.overlapped_buckets == len(model.bucket_sizes), (model.overlapped_buckets, model.bucket_sizes)
    opt.step()
    ref_opt.zero_grad()
    ref_loss = loom.nn.functional.mse_loss(ref(loom.tensor(X)), loom.tensor(Y))
    ref_loss.backward()
    ref_opt.step()
    mean = loss.detach().clone()
    dist.all_reduce(mean, op=dist.ReduceOp.AVG)
    assert abs(float(mean) - float(ref_loss)) < 1e-5, (step, float(mean), float(ref_loss))
for a, b in zip(params(model), params(ref)):
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
print(f"rank {r}: ddp equals single process after 20 steps", flush=True)
print(f"rank {r}: {model.overlapped_buckets} of {len(model.bucket_sizes)} buckets overlapped backward", flush=True)

# no_sync: the first micro-batch accumulates locally, the second backward averages the sum.
opt.zero_grad()
ref_opt.zero_grad()
half = [slice(r * 8, r * 8 + 4), slice(r * 8 + 4, r * 8 + 8)]
with model.no_sync():
    loom.nn.functional.mse_loss(model(loom.tensor(X[half[0]])), loom.tensor(Y[half[0]])).backward()
local = [p.grad.numpy().copy() for p in model.parameters()]
loom.nn.functional.mse_loss(model(loom.tensor(X[half[1]])), loom.tensor(Y[half[1]])).backward()
idx = np.concatenate([np.arange(k * 8, k * 8 + 4) for k in range(n)])
loom.nn.functional.mse_loss(ref(loom.tensor(X[idx])), loom.tensor(Y[idx])).backward()
loom.nn.functional.mse_loss(ref(loom.tensor(X[idx + 4])), loom.tensor(Y[idx + 4])).backward()
for p, q in zip(model.parameters(), ref.parameters()):
    np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=0, atol=1e-5)
# Inside no_sync the gradients were this rank's own (they differ across ranks).
mine = loom.tensor(local[0])
gathered = [loom.zeros_like(mine) for _ in range(n)]
dist.all_gather(gathered, mine)
assert not any(np.allclose(gathered[0].numpy(), g.numpy()) for g in gathered[1:]), "no_sync gradients were synced"
print(f"rank {r}: no_sync accumulation ok", flush=True)

class WithUnused(loom.nn.Module):
    def __init__(self):
        super().__init__()
        self.used, self.unused, self.bn = loom.nn.Linear(3, 1), loom.nn.Linear(3, 1), loom.nn.BatchNorm1d(3)

    def forward(self, x):
        return self.used(self.bn(x))


m = WithUnused()
if r == 0:  # Rank 0's running statistics move; broadcast_buffers gives them to every rank at each forward.
    m.bn(loom.randn(4, 3) * 5 + 3)
m = DDP(m, find_unused_parameters=True)
(m(loom.ones(4, 3) * (r + 1)).sum()).backward()
assert m.module.unused.weight.grad is None and m.module.used.weight.grad is not None
# The bucket holding the unused parameters never completes during backward; the post-backward callback starts it.
assert m.overlapped_buckets == 0 and len(m.bucket_sizes) == 1, (m.overlapped_buckets, m.bucket_sizes)
m.eval()  # Training forwards move each rank's statistics with its own batch; the next forward re-broadcasts.
m(loom.ones(1, 3))
stats = [loom.zeros(3) for _ in range(n)]
dist.all_gather(stats, m.module.bn.running_mean)
for other in stats[1:]:
    np.testing.assert_allclose(other.numpy(), stats[0].numpy(), rtol=0, atol=0)
print(f"rank {r}: unused parameters and buffers ok", flush=True)
dist.destroy_process_group()
print(f"rank {r}: ALL OK", flush=True)
