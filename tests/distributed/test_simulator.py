"""The data-parallel simulator (`loom.distributed.simulator`): its model, and its check against DLPerf."""
import pytest

import loom
from loom.distributed import simulator as sim
from tests.distributed.test_distributed import _ok, launch, needs_mpi


def test_reference_models_have_their_published_parameter_counts():
    assert sim.RESNET50.params == 25_557_032  # torchvision's resnet50, the v1.5 layout.
    assert 109_000_000 < sim.BERT_BASE.params < 111_000_000  # BERT-base with its pre-training heads: ~110M.


def test_ring_allreduce_cost():
    link = sim.Link(latency=1e-5, bandwidth=1e9)
    assert link.allreduce(1e9, 1) == 0.0
    assert link.allreduce(1e9, 2) == pytest.approx(2 * 1e-5 + 1.0)
    assert link.allreduce(1e9, 4) == pytest.approx(6 * 1e-5 + 1.5)


def test_overlap_hides_communication_behind_the_backward_pass():
    slow = sim.Cluster("slow", intra=sim.Link(1e-5, 1e9), inter=sim.Link(1e-5, 1e9), max_gpus_per_node=8)
    hidden = sim.simulate(sim.RESNET50, slow, 1, 8)
    exposed = sim.simulate(sim.RESNET50, slow, 1, 8, overlap=False)
    assert exposed.exposed_comm == pytest.approx(exposed.comm_time)
    assert hidden.exposed_comm < exposed.exposed_comm and hidden.step_time < exposed.step_time
    one = sim.simulate(sim.RESNET50, slow, 1, 1)
    assert one.speedup == 1.0 and one.exposed_comm == 0.0


def test_predictions_are_within_10_percent_of_dlperf():
    for model, name in ((sim.RESNET50, "resnet50"), (sim.BERT_BASE, "bert-base")):
        ref = sim.DLPERF[name]
        for nodes, gpus in ((1, 8), (2, 8), (4, 8)):
            got = sim.simulate(model, sim.V100_CLUSTER, nodes, gpus).speedup
            want = ref[(nodes, gpus)] / ref[(1, 1)]
            assert abs(got - want) / want < 0.10, (name, nodes, gpus, got, want)
    # The figure the issue names: DLPerf's ResNet-50 float32 on 32 V100s, 31.21x (97.5% efficiency).
    got = sim.simulate(sim.RESNET50, sim.V100_CLUSTER, 4, 8).speedup
    assert abs(got - 31.21) / 31.21 < 0.10, got


def test_bad_configurations_are_refused():
    with pytest.raises(loom.LoomError, match="does not fit"):
        sim.simulate(sim.RESNET50, sim.V100_CLUSTER, 1, 16)


def test_command_line_prints_the_table(capsys):
    assert sim.main([]) == 0
    out = capsys.readouterr().out
    assert "resnet50     32" in out and "DLPerf" in out and "30.43x" in out


@needs_mpi
def test_measure_allreduce_fits_a_link_on_2_ranks():
    out = _ok(launch("allreduce_link.py"))
    assert "bandwidth" in out
