"""Pipeline parallelism (`loom.distributed.pipeline`): tests/distributed/scripts/pipeline.py under the launcher
trains an MLP cut into one stage per rank with GPipe and 1F1B and compares it with one-process training."""
import pytest

import loom
from loom.distributed.actor_pipeline import run_stages
from loom.distributed.pipeline import PipelineStage
from loom.runtime.actors import Plan
from tests.distributed.test_distributed import _ok, launch, needs_mpi


def _check(out: str, nproc: int) -> None:
    for r in range(nproc):
        assert f"rank {r}: ScheduleGPipe equals one process after 5 steps (peak live micro-batches 8)" in out
        # 1F1B: stage r of nproc holds at most nproc - r micro-batches (of 8) at once.
        assert f"rank {r}: Schedule1F1B equals one process after 5 steps (peak live micro-batches {nproc - r})" \
            in out
        assert f"rank {r}: ScheduleGPipe actors fired in the schedule's order" in out
        assert f"rank {r}: Schedule1F1B actors fired in the schedule's order" in out
        assert f"rank {r}: forward-only ok" in out and f"rank {r}: autocast ok" in out and f"rank {r}: errors ok" in out
        assert f"rank {r}: tuple with integer activations ok" in out
        assert f"rank {r}: a failing stage stops every rank ok" in out


@needs_mpi
def test_two_stage_pipeline_equals_one_process():
    _check(_ok(launch("pipeline.py")), 2)


@needs_mpi
@pytest.mark.slow
def test_four_stage_pipeline_equals_one_process():
    _check(_ok(launch("pipeline.py", nproc=4), nproc=4), 4)


def test_stage_needs_a_module():
    with pytest.raises(loom.errors.LoomError, match="submodule must be a loom.nn.Module"):
        PipelineStage(lambda x: x, 0, 1)


@pytest.mark.parametrize("schedule, want", [("1F1B", ["F0", "B0", "F1", "B1", "F2", "B2"]),
                                            ("GPipe", ["F0", "F1", "F2", "B0", "B1", "B2"])])
def test_one_stage_schedule_order_comes_from_registers(schedule, want):
    fired = []

    def forward(mb, received):
        assert received == mb   # The first stage gets its micro-batch's index.
        fired.append(f"F{mb}")
        return mb * 10

    def backward(mb, grads):
        assert grads is None    # The last stage starts the backward.
        fired.append(f"B{mb}")
    run_stages(None, 1, 3, forward, backward, schedule=schedule, timeout=30)
    assert fired == want


def test_run_stages_and_lookahead_errors():
    with pytest.raises(loom.errors.LoomError, match="schedule must be one of"):
        run_stages(None, 1, 2, lambda mb, v: v, schedule="interleaved")
    with pytest.raises(loom.errors.LoomError, match="2 stages on 1 ranks"):
        run_stages(None, 2, 2, lambda mb, v: v)
    plan = Plan("lookahead")
    src = plan.source("read", range(3), registers=2)
    with pytest.raises(loom.errors.LoomError, match="at least 3 registers"):
        plan.task("late", lambda v: v, [src], lookahead=[2])
    with pytest.raises(loom.errors.LoomError, match="one int >= 0 per input"):
        plan.task("late", lambda v: v, [src], lookahead=[1, 0])


def test_lookahead_holds_a_firing_until_later_values_arrive():
    plan = Plan("lookahead", track=True)
    src = plan.source("read", range(4), registers=3)
    plan.task("late", lambda v: v, [src], lookahead=[2])
    assert plan.run(timeout=30) == [0, 1, 2, 3]
    reads = [t for t, s, _ in plan.trace["read"] if s == "running"]   # Four values, then the end.
    starts = [t for t, s, _ in plan.trace["late"] if s == "running"]
    assert len(reads) == 5 and len(starts) == 4
    assert starts[0] > reads[2]   # The first firing waited until the third value was being read.


def test_status_names_the_values_a_lookahead_waits_for():
    import threading
    import time

    from loom.runtime.actors import status_text
    go = threading.Event()

    def reads():
        yield 1
        go.wait(10)
        yield 2
    plan = Plan("lookahead-status")
    plan.task("late", lambda v: v, [plan.source("read", reads(), registers=3)], lookahead=[2])
    got = []
    runner = threading.Thread(target=lambda: got.append(plan.run(timeout=20)))
    runner.start()
    try:
        deadline = time.monotonic() + 10
        while "2 more from read" not in status_text() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert "lookahead-status/late: waiting" in status_text() and "2 more from read" in status_text()
    finally:
        go.set()
        runner.join(20)
    assert got == [[1, 2]]


@needs_mpi
def test_gpt_pipeline_equals_one_process_on_2_ranks():
    out = _ok(launch("pipeline_gpt.py"))
    for r in range(2):
        for schedule in ("Schedule1F1B", "ScheduleGPipe"):
            assert f"rank {r}: {schedule} GPT equals one process after 3 steps" in out, out


@needs_mpi
@pytest.mark.slow
def test_gpt_pipeline_equals_one_process_on_4_ranks():
    out = _ok(launch("pipeline_gpt.py", nproc=4), nproc=4)
    assert "rank 3: Schedule1F1B GPT equals one process after 3 steps" in out, out
