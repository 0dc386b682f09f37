"""loom.onnx.load: models written by PyTorch's own ONNX exporter run on loom, match torch, and fine-tune.

The exporter is torch's TorchScript-based one (``dynamo=False``, offline, no
onnxscript needed), with a dynamic batch axis; each imported model is checked
at two batch sizes against torch's outputs.
"""
from __future__ import annotations

import io
import warnings

import numpy as np
import onnx
import pytest

import loom
from tests.onnx import _models

torch = pytest.importorskip("torch")
tnn = torch.nn

TOL = 1e-5


def torch_export(model, args, names) -> bytes:
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # The legacy exporter's deprecation notice.
        torch.onnx.export(model.eval(), args, f, dynamo=False, input_names=names, opset_version=17,
                          dynamic_axes={n: {0: "batch"} for n in names})
    return f.getvalue()


class TorchAttention(tnn.Module):
    """Embeddings, LayerNorm, causal multi-head attention through SDPA, GELU (erf) and a head."""

    def __init__(self, vocab=11, d=16, heads=2):
        super().__init__()
        self.emb, self.pos = tnn.Embedding(vocab, d), tnn.Embedding(8, d)
        self.ln, self.qkv, self.head = tnn.LayerNorm(d), tnn.Linear(d, 3 * d), tnn.Linear(d, vocab)
        self.heads = heads

    def forward(self, idx):
        b, t = idx.shape
        x = self.ln(self.emb(idx) + self.pos(torch.arange(t)))
        q, k, v = self.qkv(x).reshape(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        y = tnn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.head(tnn.functional.gelu(y.transpose(1, 2).reshape(b, t, -1))).log_softmax(-1)


class TorchEncoder(tnn.Module):
    """nn.TransformerEncoderLayer (norm first, GELU) with a causal float mask built from Trilu."""

    def __init__(self, vocab=11, d=16):
        super().__init__()
        self.emb = tnn.Embedding(vocab, d)
        self.layer = tnn.TransformerEncoderLayer(d, 2, 32, dropout=0.0, batch_first=True, activation="gelu",
                                                 norm_first=True)
        self.head = tnn.Linear(d, vocab)

    def forward(self, idx):
        t = idx.shape[1]
        mask = torch.triu(torch.full((t, t), float("-inf")), 1)
        return self.head(self.layer(self.emb(idx), src_mask=mask))


class TorchLSTM(tnn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = tnn.LSTM(5, 6, batch_first=True)
        self.fc = tnn.Linear(6, 3)

    def forward(self, x):
        y, _ = self.lstm(x)
        return self.fc(y[:, -1])


def _with_stats(net, k):
    """`net` with BatchNorm statistics (module `k`) that are not the identity."""
    net[k].running_mean.uniform_(-0.5, 0.5)
    net[k].running_var.uniform_(0.5, 2.0)
    return net


def _cnn():
    # In eval mode torch's exporter folds this BatchNorm into the conv before it.
    return _with_stats(tnn.Sequential(tnn.Conv2d(1, 4, 3, padding=1), tnn.BatchNorm2d(4), tnn.ReLU(), tnn.MaxPool2d(2),
                                      tnn.Conv2d(4, 6, 3, stride=2), tnn.ReLU(), tnn.AvgPool2d(2), tnn.Conv2d(6, 6, 1),
                                      tnn.AdaptiveAvgPool2d(1), tnn.Flatten(), tnn.Dropout(0.2), tnn.Linear(6, 3)), 1)


def _float(shape):
    return lambda b, seed: torch.from_numpy(np.random.default_rng(seed).standard_normal((b, *shape))
                                            .astype(np.float32))


def _ids(b, seed):
    return torch.from_numpy(np.random.default_rng(seed).integers(0, 11, (b, 8)))


CASES = {
    "mlp": (lambda: _with_stats(tnn.Sequential(tnn.Linear(4, 8), tnn.BatchNorm1d(8), tnn.GELU(), tnn.Linear(8, 8),
                                               tnn.Tanh(), tnn.Linear(8, 3), tnn.Softmax(-1)), 1), _float((4,))),
    "cnn": (_cnn, _float((1, 12, 12))),
    "attention": (TorchAttention, _ids),
    "encoder": (TorchEncoder, _ids),
    "lstm": (TorchLSTM, _float((4, 5))),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_torch_exported_model_matches_torch(name):
    torch.manual_seed(0)
    build, make = CASES[name]
    model = build().eval()
    module = loom.onnx.load(torch_export(model, (make(2, 0),), ["x"]))
    for batch in (2, 3):
        x = make(batch, batch)
        with torch.no_grad():
            expected = model(x).numpy()
        got = module(loom.from_numpy(x.numpy())).detach().numpy()
        assert got.shape == expected.shape
        assert np.abs(got - expected).max() <= TOL, f"{name} at batch {batch}"


def test_torch_exported_ops_are_the_listed_ones():
    torch.manual_seed(0)
    ops = set()
    for build, make in CASES.values():
        ops |= {n.op_type for n in onnx.load_from_string(torch_export(build(), (make(2, 0),), ["x"])).graph.node}
    # The operators the brief lists that torch's exporter emits for these models.
    assert {"Gemm", "MatMul", "Conv", "MaxPool", "GlobalAveragePool", "AveragePool", "LayerNormalization", "Gather",
            "Softmax", "LSTM", "Reshape", "Transpose", "Shape", "Slice", "Erf", "Concat", "BatchNormalization",
            "Flatten", "Tanh", "Relu", "Unsqueeze", "Squeeze", "Add", "Mul", "Div", "Sqrt"} <= ops


def test_fine_tune_one_step():
    torch.manual_seed(0)
    build, make = CASES["mlp"]
    module = loom.onnx.load(torch_export(build(), (make(2, 0),), ["x"]))
    params = list(module.parameters())
    assert len(params) == 8 and all(p.requires_grad for p in params)  # 3 Linear (w, b) + BatchNorm scale, bias.
    assert len(list(module.buffers())) == 2  # BatchNorm's running statistics stay buffers.
    x = loom.from_numpy(make(8, 1).numpy())
    y = loom.from_numpy(np.arange(8) % 3)
    opt = loom.optim.SGD(params, lr=0.1)
    losses = []
    for _ in range(2):
        opt.zero_grad()
        loss = loom.nn.functional.cross_entropy(module(x), y)
        loss.backward()
        assert all(p.grad is not None and np.isfinite(p.grad.numpy()).all() for p in params)
        opt.step()
        losses.append(loss.item())
    assert losses[1] < losses[0]


def test_imported_model_runs_under_loom_function():
    torch.manual_seed(0)
    build, make = CASES["attention"]
    model = build().eval()
    module = loom.onnx.load(torch_export(model, (make(2, 0),), ["x"]))
    step = loom.function(lambda idx: module(idx), warmup=0)
    x = make(3, 7)
    with torch.no_grad():
        expected = model(x).numpy()
    with loom.no_grad():
        got = step(loom.from_numpy(x.numpy())).numpy()
    assert np.abs(got - expected).max() <= TOL and step.trace_count == 1


ROUND_TRIP = {name: (model, make, input_name) for name, model, make, input_name in _models.cases()}


@pytest.mark.parametrize("name", sorted(ROUND_TRIP))
def test_loom_export_round_trip(name, tmp_path):
    """A loom model exported by loom.onnx and read back by loom.onnx.load computes the same."""
    model, make, input_name = ROUND_TRIP[name]
    model.eval()
    path = tmp_path / f"{name}.onnx"
    loom.onnx.export(model, (make(2),), path, input_names=[input_name], dynamic_axes={input_name: {0: "batch"}})
    module = loom.onnx.load(path)
    x = make(3, seed=4)
    assert np.abs(module(x).detach().numpy() - model(x).detach().numpy()).max() <= TOL


def test_unsupported_operator_names_it_and_its_node():
    vi = onnx.helper.make_tensor_value_info
    node = onnx.helper.make_node("Hardmax", ["x"], ["y"], name="the_hardmax")
    graph = onnx.helper.make_graph([node], "g", [vi("x", 1, [2, 3])], [vi("y", 1, [2, 3])])
    with pytest.raises(loom.LoomError, match=r"\['Hardmax'\] \(first: node 'the_hardmax'\)"):
        loom.onnx.load(onnx.helper.make_model(graph))


def test_missing_file():
    with pytest.raises(loom.LoomError, match="no file at"):
        loom.onnx.load("/nonexistent/model.onnx")
