"""Checkpoints: safetensors on disk, atomic writes, exact resumption."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import loom

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_round_trip_nested_state_and_every_dtype(tmp_path):
    state = {
        "model": {"w": loom.randn(3, 4), "b": loom.arange(5, dtype=loom.int32)},
        "half": loom.tensor([1.0, -2.5], dtype=loom.float16),
        "bf16": loom.tensor([1.0, 3.140625, float("nan")]).to(loom.bfloat16),
        "mask": loom.tensor([True, False]),
        "scalar": loom.tensor(2.5),
        "small": [loom.tensor(7, dtype=loom.int8), loom.tensor([1, 2], dtype=loom.uint8)],
        "opt": {"step": 12, "lr": 3e-4, "betas": (0.9, 0.999), "none": None, "inf": float("-inf"),
                "name": "adam", "nested": [1, [2, (3,)]]},
    }
    path = tmp_path / "ckpt.safetensors"
    loom.save(state, path)
    back = loom.load(path)
    assert back["opt"] == state["opt"]
    assert isinstance(back["opt"]["betas"], tuple)
    for key in ("half", "mask"):
        assert back[key].dtype is state[key].dtype
        np.testing.assert_array_equal(back[key].numpy(), state[key].numpy())
    assert back["scalar"].shape == () and back["scalar"].item() == 2.5
    assert back["bf16"].dtype is loom.bfloat16
    np.testing.assert_array_equal(back["bf16"].numpy(), state["bf16"].numpy())
    np.testing.assert_array_equal(back["model"]["w"].numpy(), state["model"]["w"].numpy())
    assert back["model"]["b"].dtype is loom.int32
    assert back["small"][0].item() == 7 and back["small"][1].dtype is loom.uint8


def test_file_is_readable_by_safetensors_and_torch(tmp_path):
    import safetensors.numpy
    import safetensors.torch
    import torch
    w = loom.randn(2, 3)
    path = str(tmp_path / "m.safetensors")
    loom.save({"layer": {"weight": w}, "step": 4}, path, metadata={"note": "hi"})
    np.testing.assert_array_equal(safetensors.numpy.load_file(path)["layer.weight"], w.numpy())
    # NumPy has no bfloat16, so safetensors' NumPy loader cannot read such files; PyTorch's can.
    loom.save({"layer": {"weight": w}, "b16": loom.ones(2).to(loom.bfloat16)}, path)
    tt = safetensors.torch.load_file(path)
    np.testing.assert_array_equal(tt["layer.weight"].numpy(), w.numpy())
    assert tt["b16"].dtype == torch.bfloat16 and tt["b16"].float().tolist() == [1.0, 1.0]
    # And the other way: a file written by PyTorch's safetensors loads as a dict of tensors.
    safetensors.torch.save_file({"x": torch.arange(4.0)}, str(tmp_path / "t.safetensors"))
    assert loom.load(tmp_path / "t.safetensors")["x"].tolist() == [0.0, 1.0, 2.0, 3.0]


def test_shared_tensor_is_stored_once_and_restored_twice(tmp_path):
    w = loom.randn(4)
    loom.save({"a": w, "b": w}, tmp_path / "s.safetensors")
    back = loom.load(tmp_path / "s.safetensors")
    assert back["a"] is back["b"]


def test_unsupported_object_fails_before_touching_the_previous_file(tmp_path):
    path = tmp_path / "c.safetensors"
    loom.save({"step": 1, "w": loom.ones(3)}, path)
    before = path.read_bytes()
    with pytest.raises(loom.LoomError, match="cannot store an object of type"):
        loom.save({"step": 2, "w": loom.zeros(3), "fn": object()}, path)
    assert path.read_bytes() == before
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".tmp-")]


def test_exception_during_write_leaves_previous_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "c.safetensors"
    loom.save({"step": 1}, path)
    before = path.read_bytes()

    def boom(*args, **kwargs):
        raise OSError("disk full")
    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(OSError, match="disk full"):
        loom.save({"step": 2, "w": loom.ones(1000)}, path)
    assert path.read_bytes() == before
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".tmp-")]


def test_load_errors_are_clear(tmp_path):
    with pytest.raises(FileNotFoundError, match="loom.load"):
        loom.load(tmp_path / "missing.safetensors")
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json")
    with pytest.raises(loom.LoomError, match="loom.load"):
        loom.load(bad)


SAVER = textwrap.dedent("""
    import sys
    import loom
    path = sys.argv[1]
    step = 0
    while True:
        step += 1
        # 48 MB per checkpoint: a kill usually lands in the middle of a write.
        loom.save({"step": step, "w": loom.full((12_000_000,), float(step))}, path)
        print(step, flush=True)
""")


def test_kill_during_save_leaves_a_complete_checkpoint(tmp_path):
    path = tmp_path / "ckpt.safetensors"
    script = tmp_path / "saver.py"
    script.write_text(SAVER)
    env = dict(os.environ, PYTHONPATH=ROOT)
    rng = np.random.default_rng(0)
    for _ in range(3):
        proc = subprocess.Popen([sys.executable, str(script), str(path)], stdout=subprocess.PIPE, env=env)
        try:
            first = proc.stdout.readline()  # One complete checkpoint exists.
            assert first.strip(), "the saving process died before its first checkpoint"
            time.sleep(float(rng.uniform(0.05, 0.6)))
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        back = loom.load(path)
        w = back["w"].numpy()
        assert w.shape == (12_000_000,)
        assert np.all(w == float(back["step"])), "checkpoint mixes two saves"


TRAINER = textwrap.dedent("""
    import sys
    import numpy as np
    import loom
    total, path, resume = int(sys.argv[1]), sys.argv[2], sys.argv[3] == "resume"
    stop = int(sys.argv[4]) if len(sys.argv) > 4 else None
    rng = np.random.default_rng(0)
    x = loom.tensor(rng.standard_normal((32, 8)).astype(np.float32))
    y = loom.tensor(rng.standard_normal((32, 2)).astype(np.float32))
    loom.manual_seed(123)
    w1 = (loom.randn(8, 16) * 0.3).requires_grad_()
    w2 = (loom.randn(16, 2) * 0.3).requires_grad_()
    opt = loom.optim.Adam([w1, w2], lr=0.01)
    sched = loom.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
    start = 0
    if resume:
        ck = loom.load(path)
        with loom.no_grad():
            w1.copy_(ck["w1"]); w2.copy_(ck["w2"])
        opt.load_state_dict(ck["opt"])
        sched.load_state_dict(ck["sched"])
        loom.set_rng_state(ck["rng"])
        start = ck["step"]
    for step in range(start, total):
        noise = loom.randn(32, 16) * 0.1          # Uses the random stream every step.
        h = loom.tanh(x @ w1 + noise)
        loss = ((h @ w2 - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if stop is not None and step + 1 == stop:
            loom.save({"w1": w1, "w2": w2, "opt": opt.state_dict(), "sched": sched.state_dict(),
                       "rng": loom.get_rng_state(), "step": step + 1}, path)
            sys.exit(0)
    np.save(sys.argv[2] + ".final.npy", np.concatenate([w1.detach().numpy().ravel(), w2.detach().numpy().ravel()]))
""")


def test_resumed_run_ends_exactly_like_an_uninterrupted_one(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(TRAINER)
    env = dict(os.environ, PYTHONPATH=ROOT)
    full, part = str(tmp_path / "full"), str(tmp_path / "part")
    run = lambda *a: subprocess.run([sys.executable, str(script), *a], env=env, check=True, timeout=300)
    run("10", full, "fresh")
    run("10", part, "fresh", "4")      # Stops after step 4 with a checkpoint.
    run("10", part, "resume")           # A new process picks it up.
    a, b = np.load(full + ".final.npy"), np.load(part + ".final.npy")
    np.testing.assert_array_equal(a, b)
