"""Groups, channels and placements created and destroyed in a loop leak no MPI communicator and no thread, and
init_process_group works again after destroy_process_group; prints one line per check, 'ALL OK' at the end.

Leaks are seen two ways: loom's own count (`live_communicators`) and Open MPI's communicator table, whose
Fortran handle for a fresh communicator (``py2f``) grows with every communicator left allocated."""
import threading

import numpy as np

import loom
import loom.distributed as dist
from loom.distributed import comm, sbp
from loom.distributed.process_group import live_communicators
from mpi4py import MPI

CYCLES = 25


def fresh_handle() -> int:
    """The high-water mark of Open MPI's communicator table: the largest slot of 32 new communicators (freed
    slots are reused first, so a communicator left allocated in each cycle pushes it up)."""
    made = [MPI.COMM_WORLD.Dup() for _ in range(32)]
    h = max(c.py2f() for c in made)
    for c in made:
        c.Free()
    return h


def summed(group=None) -> float:
    t = loom.ones(3) * (dist.get_rank() + 1)
    dist.all_reduce(t, group=group)
    return float(t.numpy()[0])


dist.init_process_group()
r, n = dist.get_rank(), dist.get_world_size()
want = n * (n + 1) / 2
threads0 = threading.active_count()
live0 = live_communicators()
assert live0 == 1, live0  # The default group.


def cycle() -> None:
    g = dist.new_group(list(range(n)))
    assert summed(g) == want
    solo = dist.new_group([0])
    chan = comm.channel(tuple(range(n)), "test")
    got = comm.all_reduce(np.ones(2, np.float32), "sum", tuple(range(n)), chan)
    assert got[0] == n
    mesh = sbp.placement(shape=(n // 2, 2)) if n % 2 == 0 else sbp.placement()
    x = sbp.from_full(loom.arange(8, dtype=loom.float32).reshape(4, 2), mesh,
                      (sbp.split(0),) * mesh.ndim if mesh.ndim == 1 else (sbp.split(0), sbp.split(1)))
    np.testing.assert_allclose(x.full().numpy(), np.arange(8, dtype=np.float32).reshape(4, 2))
    mesh.destroy()
    dist.destroy_process_group(chan)
    assert chan not in dist.GroupMember.WORLD._children
    dist.destroy_process_group(solo)
    dist.destroy_process_group(g)


cycle()
handle1 = fresh_handle()
for _ in range(CYCLES - 1):
    cycle()
assert live_communicators() == live0, (live_communicators(), live0)
assert fresh_handle() == handle1, (fresh_handle(), handle1)
assert threading.active_count() == threads0, threading.enumerate()
print(f"rank {r}: {CYCLES} group cycles leak nothing ok", flush=True)

g = dist.new_group(list(range(n)))
dist.destroy_process_group(g)
try:
    dist.all_reduce(loom.ones(2), group=g)
    raise SystemExit("a destroyed group ran a collective")
except dist.DistributedError as e:
    assert "destroyed" in str(e), e
print(f"rank {r}: destroyed group refuses ok", flush=True)

for k in range(CYCLES):
    dist.new_group(list(range(n)))              # Left to destroy_process_group() to free.
    comm.channel(tuple(range(n)), "test")
    dist.destroy_process_group()
    assert not dist.is_initialized() and live_communicators() == 0, live_communicators()
    dist.init_process_group()
    assert dist.get_rank() == r and dist.get_world_size() == n
    assert summed() == want
    if k == 0:
        handle1 = fresh_handle()
assert fresh_handle() == handle1
assert live_communicators() == 1 and threading.active_count() == threads0
print(f"rank {r}: {CYCLES} init/destroy cycles ok", flush=True)
dist.destroy_process_group()
print(f"rank {r}: ALL OK", flush=True)
