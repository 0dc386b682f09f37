"""loom.onnx.export: the example models exported with a dynamic batch, checked by onnx and run by onnxruntime.

Every model is exported once at batch 2, passes ``onnx.checker`` with
``full_check=True`` and runs in onnxruntime at two batch sizes with outputs
within 1e-5 of loom's. The GCN is exported with a dynamic edge count instead.
"""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import loom
import loom.nn as nn
from loom.ir.node import Node
from loom.onnx._export import IR_VERSION
from tests.onnx import _models

TOL = 1e-5


def ort_session(model: onnx.ModelProto) -> ort.InferenceSession:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def max_diff(a, b) -> float:
    return float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max())


CASES = {name: (model, make, input_name) for name, model, make, input_name in _models.cases()}


@pytest.mark.parametrize("name", sorted(CASES))
def test_export_runs_in_onnxruntime_at_two_batch_sizes(name, tmp_path):
    model, make, input_name = CASES[name]
    if name == "resnet":  # Give BatchNorm running statistics that are not the identity.
        model.train()
        with loom.no_grad():
            model(make(8, seed=3))
    model.eval()
    path = tmp_path / f"{name}.onnx"
    proto = loom.onnx.export(model, (make(2),), path, input_names=[input_name],
                             dynamic_axes={input_name: {0: "batch"}})
    saved = onnx.load(str(path))
    onnx.checker.check_model(saved, full_check=True)
    assert saved.ir_version == IR_VERSION == 10
    assert saved.opset_import[0].version == 17
    dim = saved.graph.input[0].type.tensor_type.shape.dim[0]
    assert dim.dim_param == "batch"
    assert saved.graph.output[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    # Weights are initializers named after the parameters.
    inits = {t.name for t in proto.graph.initializer}
    params = {n for n, _ in model.named_parameters()}
    assert params & inits, f"no parameter name among the initializers {sorted(inits)[:8]}"
    sess = ort_session(saved)
    for batch in (2, 5):
        x = make(batch, seed=batch)
        expected = model(x).detach().numpy()
        (got,) = sess.run(None, {input_name: x.numpy()})
        assert got.shape == expected.shape
        assert max_diff(got, expected) <= TOL, f"{name} at batch {batch}: {max_diff(got, expected)}"


def test_gcn_export_with_a_dynamic_edge_count():
    fn, args, names, adjacency = _models.gcn_case()
    dyn = {"adj_indices": {1: "edges"}, "adj_values": {0: "edges"}}
    proto = loom.onnx.export(fn, args, input_names=names, dynamic_axes=dyn)
    onnx.checker.check_model(proto, full_check=True)
    ops = {n.op_type for n in proto.graph.node}
    assert {"GatherElements", "ScatterElements"} <= ops
    sess = ort_session(proto)
    for n_edges in (20, 9):
        a_idx, a_val = adjacency(n_edges)
        feeds = [args[0], args[1], a_idx, a_val]
        expected = fn(*feeds).detach().numpy()
        (got,) = sess.run(None, {n: t.numpy() for n, t in zip(names, feeds)})
        assert max_diff(got, expected) <= TOL


def test_static_export_and_default_names():
    model = nn.Sequential(nn.Linear(4, 3), nn.Tanh()).eval()

    def two_outputs(x, y):
        return model(x), (x * y).sum(1)
    proto = loom.onnx.export(two_outputs, (_models.randn(2, 4), _models.randn(2, 4, seed=1)))
    assert [i.name for i in proto.graph.input] == ["x", "y"]
    assert [o.name for o in proto.graph.output] == ["output0", "output1"]
    assert [d.dim_value for d in proto.graph.input[0].type.tensor_type.shape.dim] == [2, 4]
    x, y = _models.randn(2, 4, seed=5), _models.randn(2, 4, seed=6)
    got = ort_session(proto).run(None, {"x": x.numpy(), "y": y.numpy()})
    for g, e in zip(got, two_outputs(x, y)):
        assert max_diff(g, e.detach().numpy()) <= TOL


def test_elementwise_and_integer_semantics_match_loom():
    def fn(x, k):
        a = (x.abs() + 1).log1p() + x.expm1() * x.trunc() - x.floor() / (x.ceil() + 10)
        b = (k // 3) * 2 + k % 3 - (k > 1).to(loom.int64)
        c = loom.where(x > 0, x.sign(), x.round()) + x.flip(1).cumsum(1)
        d = loom.atan2(x, x.flip(1)) + loom.fmod(x, 0.7) + x.remainder(-0.7) + x // 0.3
        return a, b, c, d, x.argsort(1), x.max(1).values, x.amin(1)
    x = loom.from_numpy(np.array([[-2.5, 1.5, 0.3, -0.7], [3.2, -4.1, 0.0, 2.2], [np.nan, 1.0, -0.0, 5.0]],
                                 np.float32))
    k = loom.from_numpy(np.array([[-7, 5, 0, 9], [4, -1, 2, -9], [3, 3, -3, 8]], np.int64))
    proto = loom.onnx.export(fn, (x, k), input_names=["x", "k"], dynamic_axes={"x": {0: "b"}, "k": {0: "b"}})
    onnx.checker.check_model(proto, full_check=True)
    got = ort_session(proto).run(None, {"x": x.numpy(), "k": k.numpy()})
    for k_out, (g, e) in enumerate(zip(got, fn(x, k))):
        e = e.numpy()
        assert g.dtype == e.dtype and g.shape == e.shape
        if k_out == 4:  # argsort: the row holding NaN may order differently (TopK); compare the others.
            g, e = g[:2], e[:2]
        np.testing.assert_allclose(g, e, rtol=1e-6, atol=TOL, err_msg=f"output {k_out}")  # NaN where loom has NaN.


def _count_down(x):
    """A data-dependent loop: a ``while_loop`` node, which has no ONNX mapping."""
    return loom.while_loop(lambda v: v.sum() > 0, lambda v: v - 1, x)


def test_unsupported_primitive_names_the_op_and_node():
    with pytest.raises(loom.LoomError, match=r"primitive 'while_loop' \(node %\d+"):
        loom.onnx.export(_count_down, (_models.randn(3),))


def test_graph_that_changes_with_the_batch_is_refused():
    def fn(x):
        return x.sum() if x.shape[0] == 2 else x.exp()  # Structure depends on the batch size.
    with pytest.raises(loom.LoomError, match="changes structure when a dynamic axis changes"):
        loom.onnx.export(fn, (_models.randn(2, 3),), input_names=["x"], dynamic_axes={"x": {0: "batch"}})


def test_modules_are_exported_in_eval_mode_and_random_draws_are_refused():
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5), nn.BatchNorm1d(4)).train()
    proto = loom.onnx.export(model, (_models.randn(3, 4),))
    assert model.training and all(m.training for m in model.modules())  # Modes restored.
    x = _models.randn(3, 4, seed=1)
    (got,) = ort_session(proto).run(None, {"input": x.numpy()})
    assert max_diff(got, model.eval()(x).detach().numpy()) <= TOL
    with pytest.raises(loom.LoomError, match="draws random numbers"):
        loom.onnx.export(lambda x: loom.nn.functional.dropout(x, 0.5, training=True), (_models.randn(2, 4),))


def test_import_loom_imports_no_onnx():
    import subprocess
    import sys
    code = "import sys, loom, loom.onnx; assert not {'onnx', 'onnxruntime'} & set(sys.modules), sys.modules.keys()"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=str(_models.EXAMPLES.parent))
    assert proc.returncode == 0, proc.stderr


def test_missing_onnx_package_is_named(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "onnx", None)  # Makes `import onnx` raise ImportError.
    with pytest.raises(loom.LoomError, match=r"needs the 'onnx' package .*pip install"):
        loom.onnx.export(nn.Linear(2, 2), (_models.randn(1, 2),))


def test_bad_arguments():
    model = nn.Linear(4, 2)
    with pytest.raises(loom.LoomError, match="not an input"):
        loom.onnx.export(model, (_models.randn(2, 4),), dynamic_axes={"y": {0: "batch"}})
    with pytest.raises(loom.LoomError, match="opset must be an int"):
        loom.onnx.export(model, (_models.randn(2, 4),), opset=9)
    with pytest.raises(loom.LoomError, match="out of range"):
        loom.onnx.export(model, (_models.randn(2, 4),), input_names=["x"], dynamic_axes={"x": {2: "b"}})


def test_conv2d_primitive_maps_to_onnx_conv():
    """A ``conv2d`` library primitive (if loom's IR grows one) lowers to ONNX Conv."""
    from loom import dtypes as dt
    from loom.onnx._export import IR_VERSION
    from loom.onnx._lower import Lowering

    x = Node("input", (), {}, (2, 4, 9, 9), dt.float32)
    w = Node("input", (), {}, (6, 2, 3, 3), dt.float32)
    conv = Node("conv2d", (x, w), {"stride": (2, 2), "padding": (1, 1), "dilation": 1, "groups": 2},
                (2, 6, 5, 5), dt.float32)
    lw = Lowering(17)
    out = lw.node(conv, ["x", "w"])
    (node,) = lw.nodes
    assert node.op_type == "Conv"
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    assert attrs == {"strides": [2, 2], "pads": [1, 1, 1, 1], "dilations": [1, 1], "group": 2}
    vi = onnx.helper.make_tensor_value_info
    graph = onnx.helper.make_graph(lw.nodes, "conv", [vi("x", 1, [2, 4, 9, 9]), vi("w", 1, [6, 2, 3, 3])],
                                   [vi(out, 1, [2, 6, 5, 5])])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    model.ir_version = IR_VERSION
    xs, ws = _models.randn(2, 4, 9, 9), _models.randn(6, 2, 3, 3, seed=1)
    (got,) = ort_session(model).run(None, {"x": xs.numpy(), "w": ws.numpy()})
    expected = loom.nn.functional.conv2d(xs, ws, stride=2, padding=1, groups=2).numpy()
    assert max_diff(got, expected) <= TOL


def test_gpt_with_dynamic_batch_and_time():
    """Sizes like batch * time (the GPT's token rows) are fitted as products of the symbols."""
    model = CASES["gpt"][0].eval()
    proto = loom.onnx.export(model, (_models.tokens(2, context=5),), input_names=["idx"],
                             dynamic_axes={"idx": {0: "batch", 1: "time"}})
    onnx.checker.check_model(proto, full_check=True)
    assert [d.dim_param for d in proto.graph.input[0].type.tensor_type.shape.dim] == ["batch", "time"]
    sess = ort_session(proto)
    for batch, time in ((2, 5), (3, 8), (1, 2)):
        x = _models.tokens(batch, context=time, seed=batch)
        (got,) = sess.run(None, {"idx": x.numpy()})
        assert max_diff(got, model(x).detach().numpy()) <= TOL


def test_example_batch_of_one_and_axes_as_a_list():
    model = nn.Linear(4, 3).eval()
    proto = loom.onnx.export(model, (_models.randn(1, 4),), input_names=["x"], dynamic_axes={"x": [0]})
    assert proto.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "x_dim0"
    x = _models.randn(4, 4, seed=2)
    (got,) = ort_session(proto).run(None, {"x": x.numpy()})
    assert max_diff(got, model(x).detach().numpy()) <= TOL


def test_size_not_multilinear_in_the_axes_is_refused():
    def outer(x):
        b, t = x.shape
        return (x.unsqueeze(2) * x.unsqueeze(1)).reshape(b, t * t)  # t * t: quadratic in the time axis.
    with pytest.raises(loom.LoomError, match="not a multilinear function of the dynamic axes"):
        loom.onnx.export(outer, (_models.randn(2, 3),), input_names=["x"], dynamic_axes={"x": {1: "time"}})


@pytest.mark.parametrize("native_conv", [True, False])
def test_convolutions_as_conv_nodes_or_as_loom_decomposition(native_conv):
    """Convs and max pools become ONNX Conv / MaxPool either way: recorded whole while tracing (native_conv),
    or from loom's own conv2d / max_pool2d_index primitives (native_conv=False)."""
    from loom.ir.ops import PRIMITIVES

    model = nn.Sequential(nn.Conv2d(3, 4, 3, stride=2, padding=1), nn.ReLU(), nn.MaxPool2d(3, 2, padding=1,
                                                                                          ceil_mode=True),
                          nn.Conv2d(4, 6, (1, 3), dilation=(1, 2), groups=2, bias=False), nn.Flatten()).eval()
    x = _models.randn(2, 3, 15, 21)
    proto = loom.onnx.export(model, (x,), input_names=["x"], dynamic_axes={"x": {0: "batch"}},
                             native_conv=native_conv)
    onnx.checker.check_model(proto, full_check=True)
    ops = {n.op_type for n in proto.graph.node}
    assert {"Conv", "MaxPool"} <= ops
    assert not {"onnx_conv", "onnx_maxpool"} & set(PRIMITIVES)  # Registered only while tracing.
    sess = ort_session(proto)
    for batch in (2, 3):
        xb = _models.randn(batch, 3, 15, 21, seed=batch)
        (got,) = sess.run(None, {"x": xb.numpy()})
        assert max_diff(got, model(xb).detach().numpy()) <= TOL


def test_batch_size_used_as_a_number():
    """A mean over the dynamic axis divides by its size, computed at run time."""
    def centre(x):
        return x - x.mean(0, keepdim=True)
    proto = loom.onnx.export(centre, (_models.randn(3, 4),), input_names=["x"], dynamic_axes={"x": {0: "b"}})
    sess = ort_session(proto)
    for batch in (3, 7):
        x = _models.randn(batch, 4, seed=batch)
        (got,) = sess.run(None, {"x": x.numpy()})
        assert max_diff(got, centre(x).numpy()) <= TOL
