"""A small training run for the resume tests: dropout, shuffled mini-batches, Adam, a scheduler, checkpoints.

Usage: python _resume_script.py DIR STEPS KILL_AT OUT MODE   (KILL_AT -1: never; MODE loop or fit).
It SIGKILLs itself right after finishing step KILL_AT, as a crash would.
"""
import os
import signal
import sys

import numpy as np

import loom


def main() -> None:
    directory, steps, kill_at, out, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
    loom.manual_seed(1234)
    rng = np.random.default_rng(0)
    x = loom.tensor(rng.standard_normal((44, 6)).astype(np.float32))
    y = loom.tensor(rng.standard_normal((44, 2)).astype(np.float32))
    # 44 samples in batches of 8: 6 batches per epoch, the last one short; shuffled from loom's default generator.
    loader = loom.data.DataLoader(loom.data.TensorDataset(x, y), batch_size=8, shuffle=True)
    model = loom.nn.Sequential(loom.nn.Linear(6, 16), loom.nn.ReLU(), loom.nn.Dropout(0.3), loom.nn.Linear(16, 2))
    opt = loom.optim.Adam(model.parameters(), lr=0.01)
    sched = loom.optim.lr_scheduler.StepLR(opt, step_size=4, gamma=0.7)

    def kill_if_due(step: int) -> None:
        if step == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    if mode == "fit":
        loom.train.fit(model, loom.nn.functional.mse_loss, opt, loader, steps=steps, scheduler=sched,
                       checkpoint=directory, every=3, keep=2, on_step=lambda s, _: kill_if_due(s))
    else:
        ckpt = loom.train.Checkpointer(directory, every=3, keep=2, model=model, optimizer=opt, scheduler=sched,
                                       data=loader)
        step = ckpt.restore()
        if mode == "loop-reseed":   # The negative control: resumed with the wrong random stream.
            loom.manual_seed(5)
        batches = ckpt.batches()
        while step < steps:
            xb, yb = next(batches)
            opt.zero_grad()
            loss = loom.nn.functional.mse_loss(model(xb), yb)
            loss.backward()
            opt.step()
            sched.step()
            step += 1
            ckpt.step(step)
            kill_if_due(step)
    np.savez(out, **{k: v.numpy() for k, v in model.state_dict().items()},
             rng=loom.get_rng_state().numpy())


if __name__ == "__main__":
    main()
