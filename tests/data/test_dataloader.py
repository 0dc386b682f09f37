"""DataLoader: PyTorch parity of batching, workers equal to no workers, and failures that surface instead of hanging."""
import multiprocessing as mp
import os
import signal
import time

import numpy as np
import pytest
import torch
import torch.utils.data as tud

import loom
import loom.data as ld


def _rows(batches):
    """Batches of (x, y) as nested lists."""
    return [[t.tolist() for t in b] for b in batches]


def _no_children():
    deadline = time.monotonic() + 3
    while mp.active_children() and time.monotonic() < deadline:
        time.sleep(0.02)
    return mp.active_children() == []


class Squares(ld.Dataset):
    def __init__(self, n=23):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return {"x": np.full(3, i, np.float32), "y": i * i}


class Faulty(ld.Dataset):
    """Misbehaves at index `at`: raise, os._exit, or SIGKILL itself."""

    def __init__(self, how, at=5, n=12):
        self.how, self.at, self.n = how, at, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == self.at:
            if self.how == "raise":
                raise KeyError(f"bad example {i}")
            if self.how == "exit":
                os._exit(7)
            if self.how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            if self.how == "sleep":
                time.sleep(30)
        return i


class Stream(ld.IterableDataset):
    """Yields 0..n-1, split between workers by get_worker_info()."""

    def __init__(self, n):
        self.n = n

    def __iter__(self):
        info = ld.get_worker_info()
        if info is None:
            return iter(range(self.n))
        return iter(range(info.id, self.n, info.num_workers))

    def __len__(self):
        return self.n


class TorchStream(tud.IterableDataset):
    """Stream for torch.utils.data, the reference."""

    def __init__(self, n):
        self.n = n

    def __iter__(self):
        info = tud.get_worker_info()
        if info is None:
            return iter(range(self.n))
        return iter(range(info.id, self.n, info.num_workers))

    def __len__(self):
        return self.n


@pytest.mark.parametrize("batch_size,drop_last", [(1, False), (4, False), (4, True), (5, True), (30, False)])
def test_sequential_batches_match_torch(batch_size, drop_last):
    x = np.arange(46, dtype=np.float32).reshape(23, 2)
    y = np.arange(23)
    ours = ld.DataLoader(ld.TensorDataset(loom.tensor(x), loom.tensor(y)), batch_size=batch_size, drop_last=drop_last)
    ref = tud.DataLoader(tud.TensorDataset(torch.tensor(x), torch.tensor(y)), batch_size=batch_size,
                         drop_last=drop_last)
    assert len(ours) == len(ref)
    assert _rows(ours) == _rows(ref)


def test_samplers_and_collate_fn_match_torch():
    data = list(range(10))
    bs = [[3, 1], [0], [9, 8, 7]]
    assert [b.tolist() for b in ld.DataLoader(data, batch_sampler=bs)] == \
        [b.tolist() for b in tud.DataLoader(data, batch_sampler=bs)]
    assert [b.tolist() for b in ld.DataLoader(data, sampler=[4, 2, 6], batch_size=2)] == \
        [b.tolist() for b in tud.DataLoader(data, sampler=[4, 2, 6], batch_size=2)]
    assert list(ld.DataLoader(data, batch_size=3, collate_fn=sum)) == list(tud.DataLoader(data, batch_size=3,
                                                                                          collate_fn=sum))
    # batch_size=None: no batching, default_convert per example.
    nob = list(ld.DataLoader([np.arange(2), np.arange(2) + 5], batch_size=None))
    assert [b.tolist() for b in nob] == [[0, 1], [5, 6]] and isinstance(nob[0], loom.Tensor)
    dict_batches = list(ld.DataLoader(Squares(5), batch_size=2))
    assert dict_batches[2]["y"].tolist() == [16] and dict_batches[0]["x"].shape == (2, 3)


@pytest.mark.parametrize("kwargs", [
    dict(shuffle=True, sampler=[0, 1]), dict(batch_sampler=[[0]], batch_size=2), dict(batch_sampler=[[0]],
                                                                                       drop_last=True),
    dict(batch_size=None, drop_last=True), dict(num_workers=-1), dict(timeout=-1), dict(prefetch_factor=2),
    dict(persistent_workers=True)])
def test_argument_errors_match_torch(kwargs):
    with pytest.raises(ValueError):
        tud.DataLoader(list(range(4)), **kwargs)
    with pytest.raises(loom.LoomValueError):  # A LoomError that is also the ValueError torch raises.
        ld.DataLoader(list(range(4)), **kwargs)


def test_iterable_dataset_options_and_len():
    with pytest.raises(ValueError):
        ld.DataLoader(Stream(4), shuffle=True)
    with pytest.raises(ValueError):
        ld.DataLoader(Stream(4), sampler=[0])
    assert len(ld.DataLoader(Stream(10), batch_size=4)) == len(tud.DataLoader(TorchStream(10), batch_size=4)) == 3
    assert len(ld.DataLoader(Stream(10), batch_size=4, drop_last=True)) == 2
    assert [b.tolist() for b in ld.DataLoader(Stream(5), batch_size=2)] == [[0, 1], [2, 3], [4]]
    loader = ld.DataLoader(Stream(5))
    with pytest.raises(ValueError, match="should not be set"):
        loader.batch_size = 3


def test_shuffle_reproducible_with_manual_seed_generator_and_seed():
    ds = ld.TensorDataset(loom.arange(30))

    def epoch(loader):
        return [b[0].tolist() for b in loader]

    loom.manual_seed(11)
    loader = ld.DataLoader(ds, batch_size=7, shuffle=True)
    a1, a2 = epoch(loader), epoch(loader)
    loom.manual_seed(11)
    b1, b2 = epoch(loader), epoch(loader)
    assert a1 == b1 and a2 == b2 and a1 != a2
    assert sorted(sum(a1, [])) == list(range(30))
    s1 = ld.DataLoader(ds, batch_size=7, shuffle=True, seed=4)
    s2 = ld.DataLoader(ds, batch_size=7, shuffle=True, seed=4)
    assert epoch(s1) == epoch(s2) and epoch(s1) == epoch(s2)
    g = ld.DataLoader(ds, batch_size=7, shuffle=True, generator=loom.Generator(4))
    assert epoch(g) == epoch(ld.DataLoader(ds, batch_size=7, shuffle=True, seed=4))
    assert epoch(ld.DataLoader(ds, batch_size=7, shuffle=True, seed=5)) != epoch(ld.DataLoader(ds, batch_size=7,
                                                                                               shuffle=True, seed=4))
    with pytest.raises(ValueError):
        ld.DataLoader(ds, generator=loom.Generator(0), seed=1)


class Augmented(ld.Dataset):
    """Random augmentation from loom.data.transforms' default generator."""

    def __len__(self):
        return 16

    def __getitem__(self, i):
        img = np.arange(8, dtype=np.float32).reshape(1, 2, 4) + i
        return ld.transforms.RandomHorizontalFlip()(ld.transforms.RandomCrop(2, padding=1)(img))


def test_workers_equal_single_process_including_random_transforms():
    runs = []
    for nw in (0, 1, 3):
        loader = ld.DataLoader(Augmented(), batch_size=3, shuffle=True, num_workers=nw, seed=9)
        runs.append([[b.tolist() for b in loader] for _ in range(2)])
    assert runs[0] == runs[1] == runs[2]
    assert runs[0][0] != runs[0][1]
    assert _no_children()


def test_workers_map_style_order_prefetch_and_in_order_false():
    loader = ld.DataLoader(Squares(23), batch_size=4, num_workers=2, prefetch_factor=1)
    ys = [b["y"].tolist() for b in loader]
    assert ys == [[i * i for i in range(k, min(k + 4, 23))] for k in range(0, 23, 4)]
    loose = ld.DataLoader(Squares(23), batch_size=4, num_workers=2, in_order=False)
    assert sorted(sum((b["y"].tolist() for b in loose), [])) == [i * i for i in range(23)]
    assert _no_children()


def test_iterable_dataset_with_workers_sharded_like_torch():
    ours = [b.tolist() for b in ld.DataLoader(Stream(11), batch_size=2, num_workers=2)]
    ref = [b.tolist() for b in tud.DataLoader(TorchStream(11), batch_size=2, num_workers=2)]
    assert ours == ref
    ours = [b.tolist() for b in ld.DataLoader(Stream(11), batch_size=2, num_workers=3, drop_last=True)]
    ref = [b.tolist() for b in tud.DataLoader(TorchStream(11), batch_size=2, num_workers=3, drop_last=True)]
    assert ours == ref
    assert _no_children()


def _record_worker(worker_id):
    info = ld.get_worker_info()
    assert info.id == worker_id and info.num_workers == 2


class WhoAmI(ld.Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        info = ld.get_worker_info()
        return np.array([info.id, info.seed, os.getpid()])


def test_worker_info_seeds_and_init_fn():
    loader = ld.DataLoader(WhoAmI(), batch_size=1, num_workers=2, worker_init_fn=_record_worker, seed=0)
    rows = [b[0].tolist() for b in loader]
    assert [r[0] for r in rows] == [0, 1, 0, 1]
    assert rows[1][1] == rows[0][1] + 1 and rows[0][2] != rows[1][2] and rows[0][2] != os.getpid()


def _bad_init(worker_id):
    raise RuntimeError("init failed")


def test_worker_init_fn_error():
    with pytest.raises(loom.LoomError, match="worker_init_fn") as e:
        list(ld.DataLoader(list(range(4)), num_workers=2, worker_init_fn=_bad_init))
    assert "init failed" in str(e.value)
    assert _no_children()


def test_worker_exception_surfaces_with_traceback():
    t = time.monotonic()
    with pytest.raises(loom.LoomError) as e:
        list(ld.DataLoader(Faulty("raise"), batch_size=2, num_workers=2))
    msg = str(e.value)
    assert "KeyError" in msg and "bad example 5" in msg and "worker 0" in msg and "Traceback" in msg
    assert "__getitem__" in msg and isinstance(e.value.__cause__, KeyError)
    assert time.monotonic() - t < 10 and _no_children()


@pytest.mark.parametrize("how,code", [("exit", "exit code 7"), ("kill", "SIGKILL")])
def test_worker_death_surfaces_quickly(how, code):
    t = time.monotonic()
    with pytest.raises(loom.LoomError, match="exited unexpectedly") as e:
        list(ld.DataLoader(Faulty(how), batch_size=2, num_workers=2))
    assert code in str(e.value) and "pid" in str(e.value) and "worker 0" in str(e.value)
    assert time.monotonic() - t < 10 and _no_children()


def test_timeout():
    t = time.monotonic()
    with pytest.raises(loom.LoomError, match="timed out after 0.5 seconds"):
        list(ld.DataLoader(Faulty("sleep", at=0), batch_size=1, num_workers=1, timeout=0.5))
    assert time.monotonic() - t < 8 and _no_children()


def test_workers_stop_on_break_del_and_main_loop_exception():
    loader = ld.DataLoader(Squares(40), batch_size=2, num_workers=2)
    it = iter(loader)
    next(it)
    assert len(mp.active_children()) == 2
    del it
    assert _no_children()
    for _ in loader:
        break
    assert _no_children()

    def train():
        for i, _ in enumerate(loader):
            if i == 2:
                raise ArithmeticError("user code failed")

    with pytest.raises(ArithmeticError):
        train()
    assert _no_children()


def test_persistent_workers_reuse_processes_across_epochs():
    loader = ld.DataLoader(WhoAmI(), batch_size=2, num_workers=2, persistent_workers=True)
    pids1 = {int(p) for b in loader for p in b[:, 2].tolist()}
    it = iter(loader)
    next(it)  # Leave an epoch early: the next epoch must not see its stale batches.
    pids2 = {int(p) for b in loader for p in b[:, 2].tolist()}
    assert pids1 == pids2 and len(pids1) == 2
    assert len([b for b in loader]) == 2
    ys = ld.DataLoader(Squares(9), batch_size=2, num_workers=2, persistent_workers=True)
    assert [b["y"].tolist() for b in ys] == [b["y"].tolist() for b in ys]
    del loader, it, ys
    import gc
    gc.collect()
    assert _no_children()


class Touch(ld.Dataset):
    """Leaves a file per fetched example, to count how far the workers ran ahead."""

    def __init__(self, folder):
        self.folder = folder

    def __len__(self):
        return 40

    def __getitem__(self, i):
        open(os.path.join(self.folder, str(i)), "w").close()
        return i


def test_prefetch_bounds_batches_in_flight(tmp_path):
    loader = ld.DataLoader(Touch(str(tmp_path)), batch_size=2, num_workers=2, prefetch_factor=2)
    it = iter(loader)
    assert next(it).tolist() == [0, 1]
    time.sleep(0.4)
    # One batch consumed; at most prefetch_factor * num_workers = 4 more batches (8 examples) fetched.
    assert 2 <= len(os.listdir(tmp_path)) <= 2 + 8
    del it
    assert _no_children()


def test_unpicklable_batch_is_an_error_not_a_hang():
    loader = ld.DataLoader(list(range(4)), batch_size=2, num_workers=1, collate_fn=lambda b: (lambda: b))
    with pytest.raises(loom.LoomError, match="pickling batch"):
        list(loader)
    assert _no_children()
