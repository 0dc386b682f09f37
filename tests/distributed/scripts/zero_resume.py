"""ZeRO-1 and distributed checkpoints on N ranks.

argv: mode out_dir [kill_at]
- "equal": DDP + ZeroRedundancyOptimizer(Adam) equals plain Adam on the full batch in one process.
- "train": train 16 steps with dropout and a shuffling DistributedSampler, saving a distributed checkpoint
  every 4 steps under out_dir/ckpt and resuming from the latest one; with kill_at, rank 1 SIGKILLs itself
  right after that step. Rank 0 writes the final parameters to out_dir/final.npz.
- "inspect": load the latest checkpoint under out_dir/ckpt on this many ranks and write the consolidated
  optimizer state to out_dir/state-<world>.npz.
"""
import os
import signal
import sys
from pathlib import Path

import numpy as np

import loom
import loom.distributed as dist
import loom.distributed.checkpoint as dcp
from loom.data import DataLoader, DistributedSampler, TensorDataset
from loom.distributed.optim import ZeroRedundancyOptimizer
from loom.nn.parallel import DistributedDataParallel as DDP

mode, out = sys.argv[1], Path(sys.argv[2])
kill_at = int(sys.argv[3]) if len(sys.argv) > 3 else -1
dist.init_process_group("gloo")
r, n = dist.get_rank(), dist.get_world_size()
rng = np.random.default_rng(0)
X = rng.standard_normal((64, 6)).astype(np.float32)
Y = rng.standard_normal((64, 3)).astype(np.float32)


def mlp(dropout=0.0):
    loom.manual_seed(7)
    return loom.nn.Sequential(loom.nn.Linear(6, 32), loom.nn.Tanh(), loom.nn.Dropout(dropout), loom.nn.Linear(32, 16),
                              loom.nn.Tanh(), loom.nn.Linear(16, 3))


if mode == "equal":
    model = DDP(mlp())
    opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=loom.optim.Adam, lr=0.01)
    ref = mlp()
    ref_opt = loom.optim.Adam(ref.parameters(), lr=0.01)
    per = 16 // n
    for step in range(20):
        lo = (step * 16) % 64
        xb, yb = X[lo:lo + 16], Y[lo:lo + 16]
        opt.zero_grad()
        loom.nn.functional.mse_loss(model(loom.tensor(xb[r * per:(r + 1) * per])),
                                    loom.tensor(yb[r * per:(r + 1) * per])).backward()
        opt.step()
        ref_opt.zero_grad()
        loom.nn.functional.mse_loss(ref(loom.tensor(xb)), loom.tensor(yb)).backward()
        ref_opt.step()
    for a, b in zip(model.parameters(), ref.parameters()):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=0, atol=1e-6)
    owned = opt.owned_parameters()
    assert len(opt.state) == len(owned) and 0 < len(owned) < len(list(model.parameters())), (len(opt.state), owned)
    mine = sum(int(np.prod(p.shape)) for p in owned)
    total = sum(int(np.prod(p.shape)) for p in model.parameters())
    print(f"rank {r}: owns {len(owned)} parameters, {mine} of {total} elements", flush=True)
    opt.consolidate_state_dict(to=0)
    if r == 0:
        full, want = opt.state_dict(), ref_opt.state_dict()
        assert sorted(full["state"]) == sorted(want["state"]), (sorted(full["state"]), sorted(want["state"]))
        for i in want["state"]:
            np.testing.assert_allclose(full["state"][i]["exp_avg"].numpy(), want["state"][i]["exp_avg"].numpy(),
                                       rtol=0, atol=1e-6)
elif mode == "train":
    model = DDP(mlp(dropout=0.25))
    opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=loom.optim.Adam, lr=0.01)
    sampler = DistributedSampler(TensorDataset(loom.tensor(X), loom.tensor(Y)), shuffle=True, seed=3)
    loader = DataLoader(sampler.dataset, batch_size=8, sampler=sampler)
    steps_per_epoch = len(loader)
    loom.manual_seed(100 + r)  # Each rank's own dropout stream.
    ckpt = out / "ckpt"
    start = 0
    path = dcp.latest(ckpt)
    if path is not None:
        state = dcp.read(path, keys=lambda k: not k.startswith("rng/") or k.startswith(f"rng/{r}/"))
        model.module.load_state_dict(state["model"])
        opt.load_sharded_state_dict(state["optim"])
        loom.set_rng_state(state["rng"][r]["state"])
        start = state["step"]
        print(f"rank {r}: resumed from step {start}", flush=True)
    step = start
    while step < 16:
        epoch, skip = divmod(step, steps_per_epoch)
        sampler.set_epoch(epoch)
        for k, (xb, yb) in enumerate(loader):
            if k < skip:
                continue
            opt.zero_grad()
            loom.nn.functional.mse_loss(model(xb), yb).backward()
            opt.step()
            step += 1
            if step % 4 == 0:
                dcp.save({"model": model.module.state_dict(), "optim": opt.sharded_state_dict(), "step": step,
                          "rng": {r: {"state": loom.get_rng_state()}}}, ckpt / f"step-{step:06d}")
            if step == kill_at and r == 1:
                os.kill(os.getpid(), signal.SIGKILL)
            if step == 16:
                break
    if r == 0:
        np.savez(out / "final.npz", *[p.detach().numpy() for p in model.parameters()])
elif mode == "inspect":
    model = mlp(dropout=0.25)
    opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=loom.optim.Adam, lr=0.01)
    state = dcp.read(dcp.latest(out / "ckpt"), keys=lambda k: k.startswith("optim/"))
    opt.load_sharded_state_dict(state["optim"])
    assert len(opt.state) == len(opt.owned_parameters()), (len(opt.state), len(opt.owned_parameters()))
    opt.consolidate_state_dict(to=0)
    if r == 0:
        full = opt.state_dict()["state"]
        np.savez(out / f"state-{n}.npz", **{f"{i}_{k}": v.numpy() for i, st in full.items()
                                            for k, v in st.items()})
print(f"rank {r}: ALL OK", flush=True)
