"""A run SIGKILLed mid-training and resumed from its checkpoint ends bit-identical to an uninterrupted run."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import numpy as np
import pytest

import loom

SCRIPT = os.path.join(os.path.dirname(__file__), "_resume_script.py")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _start(directory, steps, kill_at, out, mode) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen([sys.executable, SCRIPT, str(directory), str(steps), str(kill_at), str(out), mode],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _runs(*runs) -> list[subprocess.CompletedProcess]:
    """The runs, each in its own process, all at once (they use separate directories); their results."""
    procs = [_start(*r) for r in runs]
    done = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        done.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
    return done


@pytest.mark.parametrize("mode", ["loop", "fit"])
def test_resume_after_sigkill_is_bit_identical(tmp_path, mode):
    steps = 17   # Nearly three epochs of 6 batches: the kill lands mid-epoch.
    first = [(tmp_path / "whole", steps, -1, tmp_path / "whole.npz", mode),
             (tmp_path / "run", steps, 8, tmp_path / "killed.npz", mode)]
    if mode == "loop":   # The negative control's killed run (see the end).
        first.append((tmp_path / "neg", steps, 8, tmp_path / "neg.npz", mode))
    whole, killed, *neg = _runs(*first)
    assert whole.returncode == 0, whole.stderr
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert not (tmp_path / "killed.npz").exists()
    # The kill came after step 8; the last checkpoint is step 6, the one before step 3 (keep=2).
    assert sorted(os.listdir(tmp_path / "run")) == ["step-00000003.safetensors", "step-00000006.safetensors"]
    second = [(tmp_path / "run", steps, -1, tmp_path / "resumed.npz", mode)]
    if mode == "loop":
        second.append((tmp_path / "neg", steps, -1, tmp_path / "wrong.npz", "loop-reseed"))
    resumed, *wrong = _runs(*second)
    assert resumed.returncode == 0, resumed.stderr
    a, b = np.load(tmp_path / "whole.npz"), np.load(tmp_path / "resumed.npz")
    assert sorted(a.files) == sorted(b.files)
    for k in a.files:
        assert a[k].tobytes() == b[k].tobytes(), k
    assert sorted(os.listdir(tmp_path / "run"))[-1] == "step-00000015.safetensors"
    if mode == "loop":
        # The comparison can fail: resuming with a different random stream (dropout) ends elsewhere.
        assert neg[0].returncode == -signal.SIGKILL, neg[0].stderr
        assert wrong[0].returncode == 0, wrong[0].stderr
        c = np.load(tmp_path / "wrong.npz")
        assert any(a[k].tobytes() != c[k].tobytes() for k in a.files if k != "rng")


def _setup(directory, shuffle_seed=0):
    loom.manual_seed(7)
    data = loom.data.DataLoader(loom.data.TensorDataset(loom.arange(10).float()), batch_size=3, shuffle=True,
                                seed=shuffle_seed)
    model = loom.nn.Linear(1, 1)
    opt = loom.optim.SGD(model.parameters(), lr=0.1)
    return data, loom.train.Checkpointer(directory, every=2, keep=3, model=model, optimizer=opt, data=data)


def test_data_order_resumes_mid_epoch_with_its_own_generator(tmp_path):
    data, ckpt = _setup(tmp_path)
    batches = ckpt.batches()
    seen = []
    for step in range(1, 7):
        seen.append(next(batches)[0].tolist())
        ckpt.step(step)
    later = [next(batches)[0].tolist() for _ in range(5)]
    # A fresh process state: new objects, the default generator moved on, then restore from step 6.
    loom.manual_seed(99)
    data2, ckpt2 = _setup(tmp_path)
    assert ckpt2.restore() == 6
    assert ckpt2.epoch == 1
    again = ckpt2.batches()
    assert [next(again)[0].tolist() for _ in range(5)] == later
    # The first epoch covered each sample once.
    assert sorted(v for b in seen[:4] for v in b) == [float(i) for i in range(10)]


def test_keep_restore_fallback_and_errors(tmp_path):
    data, ckpt = _setup(tmp_path)
    for step in range(1, 9):
        ckpt.step(step)
    assert [os.path.basename(p) for p in ckpt.checkpoints()] == [
        "step-00000004.safetensors", "step-00000006.safetensors", "step-00000008.safetensors"]
    with open(ckpt.checkpoints()[-1], "r+b") as f:   # Damage the newest file.
        f.seek(200)
        f.write(b"\xff\xff\xff\xff")
    _, ckpt2 = _setup(tmp_path)
    with pytest.warns(loom.LoomWarning, match="skipping unreadable checkpoint .*step-00000008"):
        assert ckpt2.restore() == 6
    with pytest.raises(loom.LoomValueError, match="every must be a positive int"):
        loom.train.Checkpointer(tmp_path, every=0)
    with pytest.raises(loom.LoomValueError, match="model .*has no state_dict"):
        loom.train.Checkpointer(tmp_path, every=1, model=object())
    with pytest.raises(loom.LoomValueError, match="made without data="):
        next(loom.train.Checkpointer(tmp_path / "x", every=1).batches())
    with pytest.raises(loom.LoomError, match="yielded no batch in a whole epoch"):
        next(loom.train.Checkpointer(tmp_path / "y", every=1, data=[]).batches())
