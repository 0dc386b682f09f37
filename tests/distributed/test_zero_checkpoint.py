"""ZeRO-1 (`loom.distributed.optim`) and distributed checkpoints (`loom.distributed.checkpoint`).

The multi-process tests run tests/distributed/scripts/zero_resume.py under the launcher; the rest run in
this process (a checkpoint without a process group is one rank's).
"""
import os
import re

import numpy as np
import pytest

import loom
import loom.distributed.checkpoint as dcp
from loom.distributed.optim import ZeroRedundancyOptimizer, _partition
from tests.distributed.test_distributed import _ok, launch, needs_mpi


@needs_mpi
def test_zero_with_ddp_equals_adam_in_one_process_and_shards_the_state(tmp_path):
    out = _ok(launch("zero_resume.py", "equal", str(tmp_path)))
    # Two ranks' lines may land on one (their prints share a pipe): find each, not each line.
    owned = [int(k) for k in re.findall(r"rank \d+: owns (\d+) parameters", out)]
    assert sorted(owned) == [1, 5], out  # 6 parameters split by size: the 32x16 weight alone on one rank.


@needs_mpi
def test_sigkilled_rank_resumes_bit_identical_from_the_distributed_checkpoint(tmp_path):
    whole, broken = tmp_path / "whole", tmp_path / "broken"
    whole.mkdir()
    broken.mkdir()
    _ok(launch("zero_resume.py", "train", str(whole)))
    killed = launch("zero_resume.py", "train", str(broken), "10")  # Rank 1 SIGKILLs itself after step 10.
    assert killed.returncode != 0 and "rank 1" in killed.stderr, killed.stdout + killed.stderr
    assert os.path.basename(dcp.latest(broken / "ckpt")) == "step-000008"
    assert not (broken / "final.npz").exists()
    out = _ok(launch("zero_resume.py", "train", str(broken)))
    assert "rank 0: resumed from step 8" in out and "rank 1: resumed from step 8" in out, out
    a, b = np.load(whole / "final.npz"), np.load(broken / "final.npz")
    assert sorted(a) == sorted(b)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    # A checkpoint written by 2 ranks loads on 1 and on 2, to the same full optimizer state.
    _ok(launch("zero_resume.py", "inspect", str(whole), nproc=1), nproc=1)
    _ok(launch("zero_resume.py", "inspect", str(whole)))
    one, two = np.load(whole / "state-1.npz"), np.load(whole / "state-2.npz")
    assert sorted(one) == sorted(two) and len(one) == 18
    for k in one:
        np.testing.assert_array_equal(one[k], two[k])


def test_partition_balances_elements_largest_first():
    assert _partition([512, 32, 16, 16, 3, 200], 2) == [0, 1, 1, 1, 1, 1]
    assert _partition([4, 4, 4, 4], 2) == [0, 1, 0, 1]
    assert _partition([5, 1], 1) == [0, 0]


def test_zero_without_a_process_group_is_the_wrapped_optimizer():
    loom.manual_seed(0)
    a = loom.nn.Linear(4, 3)
    b = loom.nn.Linear(4, 3)
    b.load_state_dict(a.state_dict())
    za = ZeroRedundancyOptimizer(a.parameters(), optimizer_class=loom.optim.AdamW, lr=0.05, weight_decay=0.1)
    ob = loom.optim.AdamW(b.parameters(), lr=0.05, weight_decay=0.1)
    sched = loom.optim.lr_scheduler.StepLR(za, step_size=2, gamma=0.5)
    sched_b = loom.optim.lr_scheduler.StepLR(ob, step_size=2, gamma=0.5)
    x = loom.randn(8, 4)
    for _ in range(5):
        for m, o, s in ((a, za, sched), (b, ob, sched_b)):
            o.zero_grad()
            m(x).pow(2).mean().backward()
            o.step()
            s.step()
    for p, q in zip(a.parameters(), b.parameters()):
        np.testing.assert_array_equal(p.detach().numpy(), q.detach().numpy())
    za.consolidate_state_dict()
    full = za.state_dict()
    assert full["param_groups"][0]["lr"] == ob.state_dict()["param_groups"][0]["lr"] == 0.0125
    fresh = ZeroRedundancyOptimizer(loom.nn.Linear(4, 3).parameters(), optimizer_class=loom.optim.AdamW, lr=1.0)
    fresh.load_state_dict(full)
    np.testing.assert_array_equal(fresh.sharded_state_dict()["state"][0]["exp_avg"].numpy(),
                                  full["state"][0]["exp_avg"].numpy())
    assert fresh.param_groups[0]["lr"] == 0.0125


def test_zero_refuses_bad_arguments():
    p = [loom.nn.Parameter(loom.ones(2))]
    with pytest.raises(loom.LoomError, match="optimizer_class must be a loom.optim.Optimizer"):
        ZeroRedundancyOptimizer(p, optimizer_class=dict, lr=0.1)
    with pytest.raises(loom.LoomError, match="overlap_with_ddp"):
        ZeroRedundancyOptimizer(p, optimizer_class=loom.optim.SGD, overlap_with_ddp=True, lr=0.1)
    with pytest.raises(loom.LoomError, match="empty parameter list"):
        ZeroRedundancyOptimizer([], optimizer_class=loom.optim.SGD, lr=0.1)


def test_checkpoint_round_trip_keeps_nesting_ints_lists_and_dtypes(tmp_path):
    state = {"model": {"w": loom.randn(3, 2), "b": loom.zeros(2, dtype=loom.float64)},
             "optim": {"state": {0: {"step": loom.tensor(3.0), "m": loom.ones(2)}, 5: {}},
                       "param_groups": [{"lr": 0.1, "betas": [0.9, 0.99], "params": [0, 5]}]},
             "step": 12, "name": "run-a", "none": None, "half": loom.ones(2, dtype=loom.bfloat16)}
    dcp.save(state, tmp_path / "c")
    got = dcp.read(tmp_path / "c")
    assert got["step"] == 12 and got["name"] == "run-a" and got["none"] is None
    assert got["optim"]["param_groups"] == [{"lr": 0.1, "betas": [0.9, 0.99], "params": [0, 5]}]
    assert sorted(got["optim"]["state"]) == [0, 5] and got["optim"]["state"][5] == {}
    assert got["model"]["b"].dtype is loom.float64 and got["half"].dtype is loom.bfloat16
    np.testing.assert_array_equal(got["model"]["w"].numpy(), state["model"]["w"].numpy())
    into = {"model": {"w": loom.zeros(3, 2), "b": loom.ones(2, dtype=loom.float64)}, "step": 0}
    dcp.load(into, tmp_path / "c")
    assert into["step"] == 12
    np.testing.assert_array_equal(into["model"]["w"].numpy(), state["model"]["w"].numpy())


def test_interrupted_save_is_not_a_checkpoint(tmp_path):
    dcp.save({"step": 4}, tmp_path / "step-000004")
    dcp.save({"step": 8}, tmp_path / "step-000008")
    os.unlink(tmp_path / "step-000008" / dcp.MANIFEST)  # What a save killed before its manifest leaves.
    assert os.path.basename(dcp.latest(tmp_path)) == "step-000004"
    with pytest.raises(loom.LoomError, match="no manifest.json, so it is not a complete checkpoint"):
        dcp.read(tmp_path / "step-000008")
    assert dcp.latest(tmp_path / "nowhere") is None


def test_load_errors_name_the_key_and_shapes(tmp_path):
    dcp.save({"w": loom.ones(2, 3), "n": 1}, tmp_path / "c")
    with pytest.raises(loom.LoomError, match=r"key 'w' has shape \[2, 3\] in the checkpoint and \[3, 2\]"):
        dcp.load({"w": loom.zeros(3, 2)}, tmp_path / "c")
    with pytest.raises(loom.LoomError, match=r"1 key\(s\) of the state are not in .*'extra'"):
        dcp.load({"w": loom.zeros(2, 3), "extra": 1}, tmp_path / "c")
    with pytest.raises(loom.LoomError, match="cannot store object"):
        dcp.save({"w": object()}, tmp_path / "d")
    with pytest.raises(loom.LoomError, match="no checkpoint folder"):
        dcp.read(tmp_path / "missing")


def test_a_corrupted_rank_file_is_refused(tmp_path):
    dcp.save({"w": loom.arange(1000.0)}, tmp_path / "c")
    f = tmp_path / "c" / "rank-00000-of-00001.safetensors"
    data = bytearray(f.read_bytes())
    data[-10] ^= 0xFF
    f.write_bytes(bytes(data))
    with pytest.raises(loom.LoomError, match="(?i)crc|checksum|corrupt"):
        dcp.read(tmp_path / "c")


@needs_mpi
@pytest.mark.slow  # Three launches, one of 4 ranks: about 40 s on the loaded 2-core machine.
def test_training_saved_on_2_ranks_resumes_on_4_and_equals_one_process(tmp_path):
    # Data parallel with the global batch split evenly: any world size computes the same step (to rounding), so
    # 3 steps on 2 ranks then 3 on 4 (resumed from the checkpoint the 2 wrote) equal 6 steps in one process.
    whole, split = tmp_path / "whole", tmp_path / "split"
    whole.mkdir()
    split.mkdir()
    _ok(launch("resume_world.py", str(whole), "0", "6", nproc=1), nproc=1)
    _ok(launch("resume_world.py", str(split), "0", "3"))
    out = _ok(launch("resume_world.py", str(split), "3", "6", nproc=4), nproc=4)
    assert "rank 3: resumed at step 3 on 4 ranks" in out, out
    a, b = np.load(whole / "final-6-1.npz"), np.load(split / "final-6-4.npz")
    assert sorted(a) == sorted(b) and len(a) == 4
    for k in a:
        np.testing.assert_allclose(b[k], a[k], rtol=0, atol=1e-6)


def test_checkpoint_takes_pytorchs_storage_writer_and_reader(tmp_path):
    state = {"w": loom.arange(4.0), "step": 3}
    dcp.save(state_dict=state, storage_writer=dcp.FileSystemWriter(tmp_path / "c", thread_count=2))
    into = {"w": loom.zeros(4), "step": 0}
    dcp.load(into, storage_reader=dcp.FileSystemReader(tmp_path / "c"), no_dist=True)
    assert into["step"] == 3 and into["w"].tolist() == [0.0, 1.0, 2.0, 3.0]
    with pytest.raises(loom.LoomError, match="say where the checkpoint is"):
        dcp.save(state)
    with pytest.raises(loom.LoomError, match="differ; give one of them"):
        dcp.load(into, tmp_path / "other", storage_reader=dcp.FileSystemReader(tmp_path / "c"))
    with pytest.raises(loom.LoomError, match="must be a loom.distributed.checkpoint.FileSystemWriter"):
        dcp.save(state, storage_writer=str(tmp_path / "c"))
    with pytest.raises(loom.LoomError, match="custom planners are not supported"):
        dcp.save(state, tmp_path / "d", planner=object())
