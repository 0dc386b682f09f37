"""RecordPipeline: deterministic order under a seed whatever the process timing, chunk/example shuffling,
exact resume, bounded memory, and failures that surface as LoomError."""
import json
import multiprocessing as mp
import os
import signal
import time

import numpy as np
import pytest

import loom
import loom.data as ld
from loom.data import transforms as T
from loom.data.pipeline import example_order

N = 60


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    prefix = tmp_path_factory.mktemp("pipe") / "d"
    with ld.RecordWriter(prefix, examples_per_shard=25) as w:  # Shards of 25, 25, 10 examples.
        for i in range(N):
            img = np.arange(16, dtype=np.float32).reshape(4, 4, 1) + i  # HWC, as NumPy images are.
            w.write({"i": i, "img": img})
    return str(prefix)


def _no_children():
    deadline = time.monotonic() + 3
    while mp.active_children() and time.monotonic() < deadline:
        time.sleep(0.02)
    return mp.active_children() == []


def _ids(pipe):
    return [b["i"].tolist() for b in pipe]


def test_sequential_without_shuffle_and_len(shards):
    pipe = ld.RecordPipeline(shards, batch_size=8)
    out = _ids(pipe)
    assert sum(out, []) == list(range(N)) and len(out) == len(pipe) == 8 and out[-1] == list(range(56, 60))
    dropped = ld.RecordPipeline(shards, batch_size=8, drop_last=True)
    assert len(dropped) == 7 and sum(_ids(dropped), []) == list(range(56))
    assert _no_children()


def test_same_seed_same_batches_for_any_worker_count_other_seed_differs(shards):
    runs = [_ids(ld.RecordPipeline(shards, batch_size=7, shuffle=True, seed=3, chunk_size=5, shuffle_buffer=10,
                                   num_transform_workers=w)) for w in (0, 1, 3)]
    assert runs[0] == runs[1] == runs[2]
    assert sorted(sum(runs[0], [])) == list(range(N)) and sum(runs[0], []) != list(range(N))
    other = _ids(ld.RecordPipeline(shards, batch_size=7, shuffle=True, seed=4, chunk_size=5, shuffle_buffer=10))
    assert other != runs[0] and sorted(sum(other, [])) == list(range(N))
    assert _no_children()


def test_chunk_shuffling_moves_whole_chunks(shards):
    pipe = ld.RecordPipeline(shards, batch_size=N, shuffle="chunks", chunk_size=5, num_transform_workers=0)
    order = _ids(pipe)[0]
    runs = [order[k:k + 5] for k in range(0, N, 5)]
    # Shards of 25/25/10 records cut into chunks of 5: every run is one chunk, in record order.
    assert all(r == list(range(r[0], r[0] + 5)) and r[0] % 5 == 0 for r in runs)
    assert order != list(range(N))
    second = _ids(pipe)[0]
    assert second != order and sorted(second) == list(range(N))  # The next epoch has its own permutation.


def test_example_shuffle_buffer_is_local_and_seeded(shards):
    order = sum(_ids(ld.RecordPipeline(shards, batch_size=10, shuffle="examples", shuffle_buffer=8,
                                       num_transform_workers=0)), [])
    assert sorted(order) == list(range(N)) and order != list(range(N))
    # An example cannot leave the buffer before it entered: output j comes from the first j + 8 of the stream.
    assert all(v <= j + 8 for j, v in enumerate(order))
    counts = [25, 25, 10]
    ref = example_order(counts, 0, 0, False, True, 256, 8)
    assert [s * 25 + r for s, r in ref] == order


def test_epochs_set_epoch_and_positions(shards):
    pipe = ld.RecordPipeline(shards, batch_size=16, shuffle=True, chunk_size=5, shuffle_buffer=6,
                             num_transform_workers=1)
    e0 = _ids(pipe)
    assert pipe.position() == {"epoch": 1, "examples": 0}
    e1 = _ids(pipe)
    assert e0 != e1
    pipe.set_epoch(0)
    assert _ids(pipe) == e0
    pipe.set_epoch(1)
    it = iter(pipe)
    next(it)
    del it
    pipe.set_epoch(1)  # Same epoch: keeps the position inside it.
    assert pipe.position() == {"epoch": 1, "examples": 16}
    assert _ids(pipe) == e1[1:]
    assert _no_children()


@pytest.mark.parametrize("workers,k", [(2, 3), (0, 1), (2, 0), (1, 8)])
def test_resume_from_position_equals_uninterrupted_run(shards, workers, k):
    kw = dict(batch_size=7, shuffle=True, seed=11, chunk_size=4, shuffle_buffer=9, num_transform_workers=workers,
              transform=_augment)
    full = [[b[0].tolist(), b[1].tolist()] for b in ld.RecordPipeline(shards, **kw)]
    pipe = ld.RecordPipeline(shards, **kw)
    it = iter(pipe)
    head = [[b[0].tolist(), b[1].tolist()] for b in (next(it) for _ in range(k))]
    pos = json.loads(json.dumps(pipe.position()))
    del it
    rest = [[b[0].tolist(), b[1].tolist()] for b in ld.RecordPipeline(shards, start_position=pos, **kw)]
    assert head + rest == full
    assert _no_children()


def test_resume_at_epoch_end_starts_next_epoch(shards):
    kw = dict(batch_size=20, shuffle=True, chunk_size=5, shuffle_buffer=4, num_transform_workers=0)
    pipe = ld.RecordPipeline(shards, **kw)
    _ids(pipe)
    second = _ids(pipe)
    assert _ids(ld.RecordPipeline(shards, start_position={"epoch": 1, "examples": 0}, **kw)) == second
    with pytest.raises(ValueError):
        ld.RecordPipeline(shards, start_position={"epoch": 0})
    with pytest.raises(ValueError):
        ld.RecordPipeline(shards, start_position={"epoch": 0, "examples": N + 1})
    with pytest.raises(ValueError):
        ld.RecordPipeline(shards, shuffle="sometimes")


def _augment(ex):
    img = T.RandomHorizontalFlip()(T.RandomCrop(4, padding=1)(ex["img"]))
    return img, ex["i"]


def test_random_transforms_reproducible_across_worker_counts(shards):
    runs = []
    for w in (0, 2):
        pipe = ld.RecordPipeline(shards, transform=_augment, batch_size=12, seed=5, num_transform_workers=w)
        runs.append([b[0].tolist() for b in pipe])
    assert runs[0] == runs[1]
    flat = np.array(runs[0]).reshape(N, 4, 4)
    assert not all(np.array_equal(flat[i], np.arange(16).reshape(4, 4) + i) for i in range(N))  # Something moved.


def _fail_on_7(ex):
    if ex["i"] == 7:
        raise ValueError("cannot transform example 7")
    return ex["i"]


def test_transform_error_surfaces(shards):
    for w in (0, 2):
        t = time.monotonic()
        with pytest.raises(loom.LoomError, match="ValueError") as e:
            list(ld.RecordPipeline(shards, transform=_fail_on_7, batch_size=4, num_transform_workers=w))
        assert "cannot transform example 7" in str(e.value) and "d-00000-of-00003.lrec, record 7" in str(e.value)
        assert time.monotonic() - t < 10
    assert _no_children()


def _exit_on_9(ex):
    if ex["i"] == 9:
        os._exit(3)
    return ex["i"]


def _kill_on_9(ex):
    if ex["i"] == 9:
        os.kill(os.getpid(), signal.SIGKILL)
    return ex["i"]


def _quiet_exit_on_9(ex):
    if ex["i"] == 9:
        os._exit(0)
    return ex["i"]


@pytest.mark.parametrize("fn,msg", [(_exit_on_9, "exit code 3"), (_kill_on_9, "SIGKILL"),
                                    (_quiet_exit_on_9, "exit code 0")])
def test_dead_transformer_surfaces(shards, fn, msg):
    t = time.monotonic()
    with pytest.raises(loom.LoomError, match=msg):
        list(ld.RecordPipeline(shards, transform=fn, batch_size=4, num_transform_workers=2, queue_size=4))
    assert time.monotonic() - t < 10
    assert _no_children()


def test_killed_reader_surfaces(shards):
    pipe = ld.RecordPipeline(shards, batch_size=2, queue_size=2, num_transform_workers=1)
    it = iter(pipe)
    next(it)
    reader = [p for p in mp.active_children() if p.name == "loom-record-reader"]
    assert len(reader) == 1
    os.kill(reader[0].pid, signal.SIGKILL)
    with pytest.raises(loom.LoomError, match=r"record reader \(pid \d+\) was killed by signal SIGKILL"):
        for _ in it:
            pass
    assert _no_children()


def test_corrupt_record_surfaces_with_file_and_record(tmp_path):
    with ld.RecordWriter(tmp_path / "c", num_shards=1) as w:
        for i in range(10):
            w.write({"i": i, "pad": "x" * 50})
    r = ld.RecordReader(w.files[0])
    data = bytearray(open(w.files[0], "rb").read())
    data[int(r.offsets[6]) + 60] ^= 1
    open(w.files[0], "wb").write(data)
    for workers in (0, 2):
        with pytest.raises(loom.LoomError, match=r"c-00000-of-00001\.lrec: record 6 .*CRC32 mismatch"):
            list(ld.RecordPipeline(tmp_path / "c", batch_size=3, num_transform_workers=workers))
    assert _no_children()


def _mark(ex, folder):
    open(os.path.join(folder, str(ex["i"])), "w").close()
    return ex["i"]


class _Marker:
    """A picklable transform that leaves a file per example it processed."""

    def __init__(self, folder):
        self.folder = folder

    def __call__(self, ex):
        return _mark(ex, self.folder)


def test_back_pressure_bounds_work_in_flight(shards, tmp_path):
    pipe = ld.RecordPipeline(shards, transform=_Marker(str(tmp_path)), batch_size=1, queue_size=3,
                             num_transform_workers=2)
    it = iter(pipe)
    assert next(it).tolist() == [0]
    time.sleep(0.5)
    done = len(os.listdir(tmp_path))
    assert 1 <= done <= 1 + 3  # At most queue_size examples beyond those consumed.
    assert [next(it).tolist() for _ in range(3)] == [[1], [2], [3]]
    del it
    assert _no_children()


def test_timeout(tmp_path):
    with ld.RecordWriter(tmp_path / "t") as w:
        w.write({"i": 0})
    with pytest.raises(loom.LoomError, match="timed out after 0.3 seconds"):
        list(ld.RecordPipeline(tmp_path / "t", transform=_sleepy, timeout=0.3, num_transform_workers=1))
    assert _no_children()


def _sleepy(ex):
    time.sleep(20)
    return ex
