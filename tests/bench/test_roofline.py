"""loom.bench.roofline: FLOP counts of graphs and workloads, the sgemm rate, and the harness's columns."""
from __future__ import annotations

import loom
from loom.bench import roofline


def _graph_mlp(batch: int, sizes: tuple[int, ...]):
    g = loom.ir.Graph()
    h = g.add_input((batch, sizes[0]), loom.float32)
    for k in range(len(sizes) - 1):
        w = g.add_input((sizes[k], sizes[k + 1]), loom.float32)
        h = g.add_node("tanh", [g.add_node("matmul", [h, w])])
    g.outputs = [g.add_node("sum", [h], {"axes": (0, 1), "keepdim": False})]
    return g


def test_count_flops_of_a_hand_built_graph():
    g = _graph_mlp(4, (8, 3, 2))
    f = roofline.count_flops(g)
    assert f["matmul"] == 2 * 4 * 8 * 3 + 2 * 4 * 3 * 2
    assert f["other"] == 4 * 3 + 4 * 2 + 4 * 2  # two tanh outputs, one sum over 8 elements
    assert f["total"] == f["matmul"] + f["other"]


def test_movement_and_batched_matmul():
    g = loom.ir.Graph()
    a = g.add_input((5, 2, 3), loom.float32)
    b = g.add_input((5, 3, 4), loom.float32)
    t = g.add_node("permute", [b], {"perm": (0, 2, 1)})
    g.outputs = [g.add_node("matmul", [a, g.add_node("permute", [t], {"perm": (0, 2, 1)})])]
    assert roofline.count_flops(g) == {"matmul": 2 * 5 * 2 * 4 * 3, "other": 0, "total": 2 * 5 * 2 * 4 * 3}


def test_mlp_workload_flops_match_the_formula():
    # 784-256-256-10 at batch 128: forward, weight grads of every layer, input grads of layers 2 and 3.
    macs = 784 * 256 + 256 * 256 + 256 * 10
    expected = 2 * 128 * (2 * macs + 256 * 256 + 256 * 10)
    assert roofline.step_flops("mlp")["matmul"] == expected


def test_sgemm_rate_is_measured_and_annotation_uses_it():
    rate = roofline.sgemm_gflops(1, size=128, runs=3)
    assert rate > 0.01
    rows = [{"model": "mlp", "status": "ok", "median_ms": 2.0}, {"model": "mlp", "status": "failed"},
            {"model": "gpt", "status": "ok", "median_ms": 1.0}]
    roofline.annotate(rows, {"sgemm_gflops": 100.0, "flops": {"mlp": {"total": 4e8, "matmul": 3e8}}})
    assert rows[0]["gflops"] == 200.0 and rows[0]["sgemm_fraction"] == 2.0
    assert rows[1]["flops_per_step"] == 4e8 and "gflops" not in rows[1]
    assert "flops_per_step" not in rows[2]


def test_convolution_and_its_adjoints_cost_the_same():
    g = loom.ir.Graph()
    x = g.add_input((2, 3, 8, 8), loom.float32)
    w = g.add_input((4, 3, 3, 3), loom.float32)
    attrs = {"stride": (1, 1), "padding": (1, 1, 1, 1), "dilation": (1, 1), "groups": 1}
    y = g.add_node("conv2d", [x, w], attrs)
    gx = g.add_node("conv2d_input_grad", [y, w], dict(attrs, input_size=(8, 8)))
    gw = g.add_node("conv2d_weight_grad", [x, y], dict(attrs, kernel_size=(3, 3)))
    g.outputs = [gx, gw]
    forward = 2 * (2 * 4 * 8 * 8) * (3 * 3 * 3)
    assert roofline.count_flops(g)["matmul"] == 3 * forward
