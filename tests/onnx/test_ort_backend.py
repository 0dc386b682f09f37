"""The "onnxruntime" compiler plugin: loom.function(fn, backend="onnxruntime") against eager loom."""
from __future__ import annotations

import numpy as np
import pytest

import loom
import loom.nn as nn
from loom.compiler.plugins import available_plugins, get_plugin
from tests.onnx import _models

TOL = 1e-5


def test_plugin_is_registered_lazily():
    assert "onnxruntime" in available_plugins()
    from loom.compiler.plugins.ort import compile_graph
    assert get_plugin("onnxruntime") is compile_graph


@pytest.mark.parametrize("name", ["mlp", "cnn", "gpt", "lstm"])
def test_inference_matches_eager(name):
    model, make, _ = {n: (m, mk, i) for n, m, mk, i in _models.cases()}[name]
    model.eval()
    fn = loom.function(lambda x: model(x), backend="onnxruntime", warmup=0)
    with loom.no_grad():
        for batch in (2, 3, 2):
            x = make(batch, seed=batch)
            got = fn(x).numpy()
            expected = model(x).numpy()
            assert got.shape == expected.shape
            assert np.abs(got - expected).max() <= TOL
    assert fn.trace_count == 2  # One trace (and one ONNX Runtime session) per input shape.


def test_training_step_matches_eager():
    """Graphs with backward and optimizer updates run too (every primitive they use has an ONNX mapping)."""
    def build():
        loom.manual_seed(0)
        m = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
        return m, loom.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    x, y = _models.randn(6, 4), loom.from_numpy(np.arange(6) % 3)
    results = []
    for backend in ("reference", "onnxruntime"):
        model, opt = build()

        @loom.function(backend=backend)
        def step(x, y):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            return loss
        losses = [step(x, y).item() for _ in range(4)]
        results.append((losses, [p.detach().numpy().copy() for p in model.parameters()]))
    (ref_losses, ref_params), (losses, params) = results
    assert losses[-1] < losses[0]
    np.testing.assert_allclose(losses, ref_losses, atol=TOL)
    for a, b in zip(params, ref_params):
        np.testing.assert_allclose(a, b, atol=TOL)


def test_unsupported_primitive_is_refused_with_its_name():
    def count_down(x):
        return loom.while_loop(lambda v: v.sum() > 0, lambda v: v - 1, x)
    fn = loom.function(count_down, backend="onnxruntime", warmup=0)
    with pytest.raises(loom.LoomError, match=r"cannot lower the primitive\(s\) \['while_loop'\]"):
        fn(_models.randn(3))


def test_parity_suite_runs_on_this_backend(monkeypatch):
    """The parity harness takes this plugin as its trace backend (LOOM_TRACE_BACKEND=onnxruntime)."""
    from loom.compiler.plugins import ort as plugin
    from tests.parity.harness import Case, randn, run_case
    compiled = []
    original = plugin.OrtExecutable

    class Counted(original):
        def __init__(self, graph):
            compiled.append(graph)
            super().__init__(graph)
    monkeypatch.setattr(plugin, "OrtExecutable", Counted)
    monkeypatch.setenv("LOOM_TRACE_BACKEND", "onnxruntime")
    case = Case("softmax_logsumexp", lambda m, x: (x.softmax(-1), x.logsumexp(1), x.amax(0)), (randn(3, 5),))
    run_case(case, "traced")  # Forward and gradients against PyTorch.
    assert compiled, "the traced step did not go through the onnxruntime plugin"


def test_half_precision_is_refused():
    fn = loom.function(lambda x: (x * 2).sum(), backend="onnxruntime", warmup=0)
    with pytest.raises(loom.LoomError, match=r"does not run \['float16'\]"):
        fn(_models.randn(3).to(loom.float16))


def test_executable_checks_its_inputs():
    g = loom.ir.Graph()
    x = g.add_input((3,), loom.float32)
    g.outputs = [g.add_node("exp", [x]), x]
    run = get_plugin("onnxruntime")(g)
    a = np.array([0.0, 1.0, 2.0], np.float32)
    out, same = run(a)
    np.testing.assert_allclose(out, np.exp(a), rtol=1e-6)
    assert same is not a and np.array_equal(same, a)  # A returned input is a copy.
    with pytest.raises(loom.GraphError, match="expects float32"):
        run(np.zeros(4, np.float32))
    with pytest.raises(loom.GraphError, match="takes 1 inputs"):
        run(a, a)


def test_missing_onnxruntime_names_the_install(monkeypatch):
    import sys

    from loom.compiler import plugins
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # `import onnxruntime` raises ImportError.
    monkeypatch.delitem(sys.modules, "loom.compiler.plugins.ort", raising=False)
    monkeypatch.setattr(plugins, "_PLUGINS", {k: v for k, v in plugins._PLUGINS.items() if k != "onnxruntime"})
    monkeypatch.setitem(plugins._LAZY, "onnxruntime", ("loom.compiler.plugins.ort", "compile_graph", "onnx",
                                                       "pip install 'loom-dl[onnx]'"))
    with pytest.raises(loom.LoomError, match=r"'onnxruntime' plugin needs .*pip install 'loom-dl\[onnx\]'"):
        get_plugin("onnxruntime")


@pytest.mark.parametrize("stride,padding,output_padding", [(1, 0, 0), (2, 1, 1), (3, 2, 0)])
def test_transposed_conv_and_pool_primitives_lower_to_onnx(stride, padding, output_padding):
    """conv2d_input_grad (conv_transpose2d) -> ConvTranspose and max_pool2d_index -> MaxPool indices."""
    rng = np.random.default_rng(stride)
    x = loom.tensor(rng.standard_normal((2, 4, 7, 9)).astype(np.float32))
    w = loom.tensor(rng.standard_normal((4, 3, 3, 3)).astype(np.float32))

    def f(x, w):
        y = loom.nn.functional.conv_transpose2d(x, w, stride=stride, padding=padding,
                                                output_padding=output_padding)
        return loom.nn.functional.max_pool2d(y, 3, stride=2, padding=1, ceil_mode=True)
    got = loom.function(f, backend="onnxruntime", warmup=0)(x, w)
    want = f(x, w)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("stride,padding,dilation", [(1, 0, 1), (2, 1, 1), (2, (1, 2), 2), (3, 2, 1)])
def test_conv_weight_gradient_lowers_so_cnn_training_runs_on_onnxruntime(stride, padding, dilation):
    """conv2d_weight_grad -> Conv of the transposed operands: a CNN's training step runs on the ORT backend."""
    rng = np.random.default_rng(stride)
    x = loom.tensor(rng.standard_normal((3, 4, 11, 9)).astype(np.float32))
    w0 = rng.standard_normal((5, 4, 3, 3)).astype(np.float32)

    def step(x, w):
        y = loom.nn.functional.conv2d(x, w, stride=stride, padding=padding, dilation=dilation)
        loss = (y.tanh() ** 2).mean()
        return loom.autograd.grad(loss, w)[0]
    w = loom.tensor(w0, requires_grad=True)
    got = loom.function(step, backend="onnxruntime", warmup=0)(x, w)
    want = step(x, loom.tensor(w0, requires_grad=True))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-5)


def test_grouped_conv_weight_gradient_is_refused_by_name():
    x = loom.randn(2, 4, 6, 6)
    w = loom.randn(4, 2, 3, 3, requires_grad=True)

    def step(x, w):
        return loom.autograd.grad(loom.nn.functional.conv2d(x, w, groups=2).sum(), w)[0]
    with pytest.raises(loom.LoomError, match="conv2d_weight_grad with groups=2"):
        loom.function(step, backend="onnxruntime", warmup=0)(x, w)
