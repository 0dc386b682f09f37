"""Global tensors with placement and split/broadcast/partial_sum signatures, and tensor parallelism built on them.

The multi-process checks are in tests/distributed/scripts/sbp.py (boxing between every pair of signatures with
gradients, matmul signature rules, data parallelism as split(0) x broadcast, tensor-parallel MLP and attention
against one process).
"""
import pytest

import loom
from loom.distributed import sbp as S
from loom.distributed.sbp import _bounds
from tests.distributed.test_distributed import _ok, launch, needs_mpi


@needs_mpi
def test_global_tensors_and_tensor_parallel_layers_on_2_ranks():
    out = _ok(launch("sbp.py"))
    for what in ("boxing", "matmul", "data parallel", "tensor-parallel MLP", "tensor-parallel attention"):
        assert f"rank 1: {what} ok" in out, what


@needs_mpi
@pytest.mark.slow
def test_global_tensors_and_tensor_parallel_layers_on_4_ranks():
    _ok(launch("sbp.py", nproc=4), nproc=4)


def test_signatures_compare_and_print():
    assert S.split(0) == S.split(0) and S.split(0) != S.split(1) and S.broadcast != S.partial_sum
    assert [repr(s) for s in (S.split(1), S.broadcast, S.partial_sum)] == ["split(1)", "broadcast", "partial_sum"]
    assert len({S.split(0), S.split(0), S.broadcast}) == 2
    with pytest.raises(loom.LoomError, match="dim must be an int"):
        S.split(1.5)


def test_uneven_splits_give_the_first_ranks_one_more():
    assert _bounds(5, 2) == [(0, 3), (3, 5)]
    assert _bounds(8, 4) == [(0, 2), (2, 4), (4, 6), (6, 8)]
    assert _bounds(7, 3) == [(0, 3), (3, 5), (5, 7)]


def test_placement_needs_a_process_group():
    with pytest.raises(loom.distributed.DistributedError, match="init_process_group"):
        S.placement()
