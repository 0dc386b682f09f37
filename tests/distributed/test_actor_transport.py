"""Actors across processes (loom.runtime.transport): placement rules in one process, and on 2 ranks through
tests/distributed/scripts/actor_pipeline.py (a placed plan, a two-stage model pipelined over 4 micro-batches
forward and in training, equal to one process; a failure on one rank stopping both)."""
import re
import subprocess
import sys

import pytest

from loom.errors import LoomError
from loom.runtime import transport
from loom.runtime.actors import Plan
from tests.distributed.test_distributed import ROOT, _env, _ok, launch, needs_mpi


class _Loopback(transport.Transport):
    """Two 'ranks' in one process: what rank 0 sends is delivered to rank 1's actors and back."""

    def __init__(self, rank, hub):
        import threading
        self.rank, self.hub, self.size = rank, hub, 2
        self.lock, self.early, self.deliver = threading.Lock(), [], None
        hub[rank] = self

    def send(self, rank, actor, message):
        other = self.hub[rank]
        with other.lock:   # Held until the other side serves (its plan may start later).
            if other.deliver is None:
                other.early.append((actor, message))
                return
        other.deliver(actor, message)

    def serve(self, deliver, peers):
        with self.lock:
            for actor, message in self.early:
                deliver(actor, message)
            self.early, self.deliver = [], deliver

    def finish(self, timeout=None):
        pass


def _plan(t):
    plan = Plan("two", transport=t)
    src = plan.source("read", iter(range(6)), rank=0)
    sq = plan.task("square", lambda v: v * v, [src], registers=2, rank=0)
    plan.task("plus", lambda v: v + 1, [sq], registers=2, rank=1)
    return plan


def test_two_ranks_exchange_registers_through_one_interface():
    import threading
    hub = {}
    plans = [_plan(_Loopback(0, hub)), _plan(_Loopback(1, hub))]
    results = {}
    threads = [threading.Thread(target=lambda k=k: results.__setitem__(k, plans[k].run(timeout=10))) for k in (0, 1)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(20)
    assert results == {0: {}, 1: [1, 2, 5, 10, 17, 26]}


def test_placement_rules():
    plan = Plan("p")
    src = plan.source("read", iter(range(3)), rank=1)
    with pytest.raises(LoomError, match="has no rank .* but reads tasks placed on ranks"):
        plan.task("t", lambda v: v, [src])
    with pytest.raises(LoomError, match="rank must be an int >= 0"):
        plan.task("u", lambda v: v, [src], rank=-1)
    plan.task("v", lambda v: v, [src], rank=0)
    with pytest.raises(LoomError, match=r"placed on ranks \[0, 1\] but the plan has no transport"):
        plan.run(timeout=5)


def test_the_runtime_does_not_import_mpi4py():
    code = "import sys, loom.runtime.transport, loom.runtime.actors; print('mpi4py' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_env(), capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.strip() == "False", out.stdout + out.stderr


@needs_mpi
def test_two_stage_pipeline_across_ranks_equals_one_process():
    out = _ok(launch("actor_pipeline.py"))
    for line in ("rank 1: placed plan equals one process ok", "rank 0: registers sent ok",
                 "rank 1: loom.function stages pipelined over 4 micro-batches equal one process ok",
                 "rank 0: loom.function stages placed on 2 ranks equal one process (every rank gets the outputs) ok",
                 "rank 1: loom.function stages placed on 2 ranks equal one process (every rank gets the outputs) ok",
                 "rank 0: pipelined training grad W0 equals one process ok",
                 "rank 1: pipelined training grad W1 equals one process ok",
                 "rank 1: pipelined training loss equals one process ok",
                 "rank 0: placed training step 2 loss equals one process ok",
                 "rank 1: placed training step weights equal one process ok",
                 "rank 0: placed training step weights equal one process ok",
                 "rank 0: failure stops both ranks ok", "rank 1: failure stops both ranks ok"):
        assert line in out, line


@needs_mpi
def test_gradient_all_reduce_tasks_overlap_backward_and_equal_one_process():
    out = _ok(launch("overlap.py"))
    for r in (0, 1):
        assert f"rank {r}: data parallel grads equal one process over 4 steps ok" in out
        assert re.search(rf"rank {r}: [1-8] of 8 all-reduces overlapped a backward task ok", out), out
        assert f"rank {r}: the collective tasks' channels freed with their plan ok" in out, out
