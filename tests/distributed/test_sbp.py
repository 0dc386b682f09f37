"""Global tensors with placement and split/broadcast/partial_sum signatures, and tensor parallelism built on them.

The multi-process checks are scripts in tests/distributed/scripts: sbp.py (boxing between every pair of
signatures with gradients, matmul signature rules, data parallelism as split(0) x broadcast, tensor-parallel MLP
and attention against one process), sbp_ops.py (the MLP and GPT ops under the rule table, moves between
placements), sbp_mesh.py (a 2x2 mesh: nd boxing, a data + tensor parallel MLP, moves between 1-D and 2-D
placements) autoparallel.py (the pass's choices, and its plans run on the ranks against one process) and
autoparallel_gpt.py (a whole GPT training step planned and run on the ranks against one process).
"""
import pytest

import loom
from loom.distributed import sbp as S
from loom.distributed.sbp import _bounds
from tests.distributed.test_distributed import _ok, launch, needs_mpi


@needs_mpi
def test_global_tensors_and_tensor_parallel_layers_on_2_ranks():
    out = _ok(launch("sbp.py"))
    for what in ("boxing", "matmul", "data parallel", "tensor-parallel MLP", "tensor-parallel attention",
                 "vocabulary-parallel embedding"):
        assert f"rank 1: {what} ok" in out, what


@needs_mpi
@pytest.mark.slow
def test_global_tensors_and_tensor_parallel_layers_on_4_ranks():
    _ok(launch("sbp.py", nproc=4), nproc=4)


@needs_mpi
def test_mlp_and_gpt_ops_follow_the_rule_table_on_2_ranks():
    out = _ok(launch("sbp_ops.py"))
    for what in ("linear", "embedding", "layer_norm softmax reshape transpose", "cross_entropy",
                 "boxing into legal signatures", "crossing placements"):
        assert f"rank 1: {what} ok" in out, what


@needs_mpi
@pytest.mark.slow
def test_mlp_and_gpt_ops_on_4_ranks():
    _ok(launch("sbp_ops.py", nproc=4), nproc=4)


@needs_mpi
@pytest.mark.slow  # Four oversubscribed processes on 2 cores: about 25 s under load, most of it start-up.
def test_2x2_mesh_data_and_tensor_parallel_mlp_on_4_ranks():
    out = _ok(launch("sbp_mesh.py", nproc=4), nproc=4)
    for what in ("nd boxing", "2x2 data + tensor parallel MLP", "crossing placements", "2x2 auto-parallel plan"):
        assert f"rank 3: {what} ok" in out, what


@needs_mpi
def test_autoparallel_chooses_and_its_plans_equal_one_process_on_2_ranks():
    out = _ok(launch("autoparallel.py"))
    assert "data parallel chosen ok" in out and "model parallel chosen ok" in out, out
    assert "collectives inserted" in out and "predicted step" in out, out


@needs_mpi
@pytest.mark.slow  # Planning a 516-node step and running it node by node: about 30 s under load.
def test_autoparallel_gpt_step_equals_one_process_on_2_ranks():
    out = _ok(launch("autoparallel_gpt.py"))
    assert "equals one process ok" in out, out


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


@needs_mpi
def test_gradients_cross_placements_eager_and_traced_equal_one_process_on_2_ranks():
    out = _ok(launch("placement_grad.py"))
    for what in ("one rank to another", "one rank to all ranks and back", "back and forth",
                 "unused and no_grad moves", "traced step"):
        assert f"rank 1: {what} ok" in out, what


@needs_mpi
@pytest.mark.slow  # Four oversubscribed processes on 2 cores.
def test_gradients_cross_disjoint_and_2d_placements_on_4_ranks():
    out = _ok(launch("placement_grad.py", nproc=4), nproc=4)
    assert "rank 3: two ranks to two others ok" in out and "rank 3: into and out of a 2 x 2 mesh ok" in out, out


@needs_mpi
def test_boxing_inside_loom_function_equals_eager_on_2_ranks():
    out = _ok(launch("traced_boxing.py"))
    assert "rank 1: traced boxing equals eager and dense ok" in out, out
    assert "rank 0: traced step holds all_gather all_reduce reduce_scatter all_to_all ok" in out, out


@needs_mpi
@pytest.mark.slow
def test_boxing_inside_loom_function_on_4_ranks_and_a_2x2_mesh():
    out = _ok(launch("traced_boxing.py", nproc=4), nproc=4)
    assert "rank 3: 2x2 mesh traced boxing ok" in out, out
