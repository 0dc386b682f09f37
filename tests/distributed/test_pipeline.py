"""Pipeline parallelism (`loom.distributed.pipeline`): tests/distributed/scripts/pipeline.py under the launcher
trains an MLP cut into one stage per rank with GPipe and 1F1B and compares it with one-process training."""
import pytest

import loom
from loom.distributed.pipeline import PipelineStage
from tests.distributed.test_distributed import _ok, launch, needs_mpi


def _check(out: str, nproc: int) -> None:
    for r in range(nproc):
        assert f"rank {r}: ScheduleGPipe equals one process after 5 steps (peak live micro-batches 8)" in out
        # 1F1B: stage r of nproc holds at most nproc - r micro-batches (of 8) at once.
        assert f"rank {r}: Schedule1F1B equals one process after 5 steps (peak live micro-batches {nproc - r})" \
            in out
        assert f"rank {r}: forward-only ok" in out and f"rank {r}: errors ok" in out
        assert f"rank {r}: tuple with integer activations ok" in out


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
