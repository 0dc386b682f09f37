"""Processes killed while sending large messages: the DataLoader and the record pipeline raise, never hang."""
import contextlib
import faulthandler
import multiprocessing as mp
import os
import random
import signal
import threading
import time

import numpy as np
import pytest

import loom
import loom.data as ld

BIG = 16 * 2**20  # Bytes per batch: far more than a pipe holds, so a kill lands mid-message.


def _no_children(wait=3.0):
    deadline = time.monotonic() + wait
    while mp.active_children() and time.monotonic() < deadline:
        time.sleep(0.02)
    return mp.active_children() == []


class _Hang(Exception):
    """Raised by the watchdog alarm in the main thread: the code under test blocked."""


@contextlib.contextmanager
def _watchdog(seconds):
    """Fail (not hang) if the body runs past `seconds`; past twice that, dump tracebacks and exit."""
    def on_alarm(signum, frame):
        raise _Hang(f"no result within {seconds} s: the main process is blocked")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    faulthandler.dump_traceback_later(2 * seconds + 10, exit=True)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        faulthandler.cancel_dump_traceback_later()


class BigBatches(ld.Dataset):
    """Endless 16 MB examples."""

    def __len__(self):
        return 10**6

    def __getitem__(self, i):
        return np.full(BIG // 8, i, np.float64)


def _first(batch):
    return batch[0]


def _kill_later(pid, delay, sig=signal.SIGKILL):
    """Send `sig` to `pid` after `delay` seconds from a thread; returns a list that gets the time just before."""
    sent = []

    def fire():
        time.sleep(delay)
        sent.append(time.monotonic())
        os.kill(pid, sig)

    threading.Thread(target=fire, daemon=True).start()
    return sent


def _kill_trials(n, seed):
    """`n` loaders with 2 workers streaming 16 MB batches; SIGKILL a random worker at a random moment in each.

    Returns (seconds from the kill to the error, for each trial). Fails on a hang or on a wrong error.
    """
    rng = random.Random(seed)
    delays = []
    with _watchdog(10 + 6 * n):
        for trial in range(n):
            loader = ld.DataLoader(BigBatches(), batch_size=1, num_workers=2, timeout=5, collate_fn=_first)
            it = iter(loader)
            wid = rng.randrange(2)
            pid = it._workers[wid].pid
            sent = _kill_later(pid, rng.uniform(0.0, 0.4))
            with pytest.raises(loom.LoomError) as e:
                for batch in it:
                    assert batch.nbytes == BIG
            raised = time.monotonic()
            msg = str(e.value)
            assert f"DataLoader worker {wid} (pid {pid}) was killed by signal SIGKILL" in msg, (trial, msg)
            assert sent, (trial, "raised before the kill was sent", msg)
            delays.append(raised - sent[0])
            del it, loader
            assert _no_children(), (trial, mp.active_children())
    return delays


def test_killed_while_sending_16mb_batches_raises_within_2s():
    delays = _kill_trials(10, seed=0)
    assert max(delays) < 2.0, delays


@pytest.mark.slow
def test_fifty_kills_while_sending_16mb_batches_no_hang():
    delays = _kill_trials(50, seed=1)
    print(f"\n50 kills: max {max(delays):.3f} s, median {sorted(delays)[25]:.3f} s from SIGKILL to LoomError")
    assert max(delays) < 2.0, delays


def test_exit_code_named_for_a_worker_that_exits():
    loader = ld.DataLoader(ExitAt(3), batch_size=1, num_workers=2)
    with _watchdog(20), pytest.raises(loom.LoomError) as e:
        list(loader)
    assert "DataLoader worker 1 (pid" in str(e.value) and "exited unexpectedly with exit code 5" in str(e.value)
    assert _no_children()


class ExitAt(ld.Dataset):
    def __init__(self, at):
        self.at = at

    def __len__(self):
        return 8

    def __getitem__(self, i):
        if i == self.at:
            os._exit(5)
        return i


def test_timeout_honoured_for_a_worker_stopped_mid_message():
    """A live worker frozen (SIGSTOP) half-way through a 16 MB batch: `timeout` must fire, not a blocked read."""
    loader = ld.DataLoader(BigBatches(), batch_size=1, num_workers=1, timeout=1.0, collate_fn=_first)
    it = iter(loader)
    pid = it._workers[0].pid
    with _watchdog(20):
        next(it)
        sent = _kill_later(pid, 0.05, signal.SIGSTOP)
        with pytest.raises(loom.LoomError, match=r"timed out after 1\.0 seconds waiting for batch") as e:
            for _ in it:
                pass
    assert sent and time.monotonic() - sent[0] < 3.0, str(e.value)
    del it
    assert _no_children()


class Slow(ld.Dataset):
    def __init__(self, pause):
        self.pause = pause

    def __len__(self):
        return 4

    def __getitem__(self, i):
        time.sleep(self.pause)
        return i


def test_timeout_bounds_each_batch_not_the_epoch():
    # Batches every 0.3 s pass a 1 s timeout; 1.5 s per batch does not.
    assert [b.tolist() for b in ld.DataLoader(Slow(0.3), num_workers=1, timeout=1.0)] == [[0], [1], [2], [3]]
    t = time.monotonic()
    with _watchdog(20), pytest.raises(loom.LoomError, match=r"timed out after 1\.0 seconds"):
        list(ld.DataLoader(Slow(1.5), num_workers=1, timeout=1.0))
    assert 0.9 <= time.monotonic() - t < 3.0
    assert _no_children()


def test_deleting_the_iterator_stops_workers_blocked_on_a_full_pipe():
    loader = ld.DataLoader(BigBatches(), batch_size=1, num_workers=2, collate_fn=_first)
    it = iter(loader)
    next(it)
    time.sleep(0.3)  # Workers now block writing batches nobody reads.
    t = time.monotonic()
    del it
    assert _no_children() and time.monotonic() - t < 3.0


# ---------------------------------------------------------------- record pipeline

@pytest.fixture(scope="module")
def big_shards(tmp_path_factory):
    prefix = tmp_path_factory.mktemp("big") / "b"
    with ld.RecordWriter(prefix, num_shards=2) as w:
        for i in range(2000):
            w.write({"i": i})
    return prefix


def _inflate(ex):
    """4 MB per example, so a transformer spends its time writing to the batcher."""
    return np.full(2**19, ex["i"], np.float64)


def _children(prefix):
    return {p.name: p.pid for p in mp.active_children() if p.name.startswith(prefix)}


@pytest.mark.parametrize("victim", ["loom-record-transform-0", "loom-record-transform-1", "loom-record-reader"])
def test_pipeline_process_killed_mid_stream_raises_within_2s(big_shards, victim):
    rng = random.Random(victim)
    with _watchdog(60):
        for trial in range(3):  # Each kill lands at a random moment of a stream of 4 MB examples.
            pipe = ld.RecordPipeline(big_shards, transform=_inflate, batch_size=1, num_transform_workers=2,
                                     queue_size=8, timeout=5, collate_fn=_first)
            it = iter(pipe)
            next(it)
            pid = _children(victim)[victim]
            sent = _kill_later(pid, rng.uniform(0.0, 0.3))
            with pytest.raises(loom.LoomError) as e:
                for _ in it:
                    pass
            raised = time.monotonic()
            what = "record reader" if victim.endswith("reader") else f"transform worker {victim[-1]}"
            assert f"{what} (pid {pid}) was killed by signal SIGKILL" in str(e.value), (trial, str(e.value))
            assert sent and raised - sent[0] < 2.0, (trial, raised - sent[0])
            del it
            assert _no_children()


def test_pipeline_timeout_for_a_transformer_stopped_mid_message(big_shards):
    pipe = ld.RecordPipeline(big_shards, transform=_inflate, batch_size=1, num_transform_workers=1, queue_size=8,
                             timeout=1.0, collate_fn=_first)
    it = iter(pipe)
    with _watchdog(20):
        next(it)
        pid = _children("loom-record-transform-0")["loom-record-transform-0"]
        sent = _kill_later(pid, 0.05, signal.SIGSTOP)
        with pytest.raises(loom.LoomError, match=r"timed out after 1\.0 seconds waiting for example"):
            for _ in it:
                pass
    assert sent and time.monotonic() - sent[0] < 3.0
    del it
    assert _no_children()
