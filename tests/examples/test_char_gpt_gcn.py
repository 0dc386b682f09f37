"""The char-level GPT and GCN-on-Cora examples: smoke runs, missing data, and their building blocks.

The smoke runs start each example as a user would (a subprocess with
``--smoke``) and check that it finishes, prints its final metrics, writes its
loss curve and that its training loss went down. The in-process tests check
the pieces the full runs rely on: the sparse-dense product against a dense
one (values and gradients), the normalised adjacency, the GPT's causality and
its checkpoint round trip.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import loom

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DATA = Path(os.environ.get("LOOM_DATA_DIR", "/work/shared/data"))
CORA = DATA / "cora" / "cora.npz"
SHAKESPEARE = DATA / "tinyshakespeare" / "input.txt"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

needs_cora = pytest.mark.skipif(not CORA.is_file(), reason=f"Cora data not at {CORA}")
needs_shakespeare = pytest.mark.skipif(not SHAKESPEARE.is_file(), reason=f"tinyshakespeare not at {SHAKESPEARE}")


def run_example(name: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(EXAMPLES / f"{name}.py"), *args], capture_output=True,
                          text=True, timeout=timeout, cwd=EXAMPLES.parent)


def smoke(name: str, out: Path, data: Path) -> str:
    proc = run_example(name, "--smoke", "--no-progress", "--out", str(out), "--data", str(data))
    assert proc.returncode == 0, f"{name} --smoke failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def assert_png(path: Path) -> None:
    assert path.is_file(), f"{path} was not written"
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 2000, f"{path} is not a plausible PNG ({len(data)} bytes)"


def train_loss_drop(stdout: str) -> tuple[float, float]:
    m = re.search(r"train loss (\d+\.\d+) -> (\d+\.\d+)", stdout)
    assert m, f"no 'train loss A -> B' line in the output:\n{stdout}"
    return float(m.group(1)), float(m.group(2))


def example_module(name: str):
    """Import an example as a module (its folder on sys.path, for `_common`)."""
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    return __import__(name)


# ---------------------------------------------------------------- smoke runs

@needs_cora
def test_gcn_cora_smoke(tmp_path):
    out = smoke("gcn_cora", tmp_path, CORA)
    assert "cora: 2708 nodes, 5278 edges, 1433 features, 140/500/1000 train/val/test" in out
    first, last = train_loss_drop(out)
    assert last < first - 0.03, f"GCN training loss did not go down over the smoke run: {first} -> {last}"
    m = re.search(r"final: test accuracy median (\d\.\d{4})", out)
    assert m, f"no final test accuracy in the output:\n{out}"
    # Seven classes, the largest about 30% of the test nodes: a few epochs must already beat that.
    assert float(m.group(1)) > 0.35
    assert_png(tmp_path / "loss.png")


@needs_shakespeare
def test_char_gpt_smoke(tmp_path):
    out = smoke("char_gpt", tmp_path, SHAKESPEARE)
    assert "vocab 65" in out
    first, last = train_loss_drop(out)
    assert first == pytest.approx(np.log(65), abs=0.3), "an untrained model should predict ~uniformly"
    assert last < first - 0.3, f"GPT training loss did not go down over the smoke run: {first} -> {last}"
    m = re.search(r"final: val loss (\d+\.\d+) after (\d+) steps", out)
    assert m and int(m.group(2)) == 30 and float(m.group(1)) < first
    evals = [float(v) for v in re.findall(r"val loss (\d+\.\d+)  lr", out)]
    assert len(evals) == 4 and evals[-1] < evals[0], f"validation loss did not go down: {evals}"
    sample = re.search(r"--- sample \(temperature 0\.8\) ---\n(.*)\n---", out, re.S)
    assert sample and len(sample.group(1)) == 1 + 20, "expected the prompt plus 20 sampled characters"
    assert_png(tmp_path / "loss.png")

    # The checkpoint holds the vocabulary and config and loads back into a fresh model.
    gpt = example_module("char_gpt")
    ckpt = loom.load(tmp_path / "char_gpt.safetensors")
    assert len(ckpt["chars"]) == 65 and ckpt["step"] == 30
    cfg = ckpt["config"]
    model = gpt.CharGPT(65, cfg["context"], cfg["d_model"], cfg["layers"], cfg["heads"], cfg["dropout"])
    model.load_state_dict(ckpt["model"])
    np.testing.assert_array_equal(model.tok.weight.detach().numpy(), ckpt["model"]["tok.weight"].numpy())


# ---------------------------------------------------------------- missing data

@pytest.mark.parametrize("name", ["gcn_cora", "char_gpt"])
def test_missing_data_path_is_named(tmp_path, name):
    missing = tmp_path / "nowhere" / "data.file"
    proc = run_example(name, "--data", str(missing), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2, proc.stderr
    assert str(missing) in proc.stderr and "--data" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists(), "nothing should be written when the data is missing"


# ---------------------------------------------------------------- building blocks

def test_spmm_matches_dense_product_and_gradients():
    gcn = example_module("gcn_cora")
    rng = np.random.default_rng(0)
    n_rows, n_cols, feats, nnz = 5, 4, 3, 9
    idx = np.stack([rng.integers(0, n_rows, nnz), rng.integers(0, n_cols, nnz)])
    idx[:, 1] = idx[:, 0]  # A duplicate entry: its values add up.
    vals = rng.standard_normal(nnz).astype(np.float32)
    dense = rng.standard_normal((n_cols, feats)).astype(np.float32)
    weights = rng.standard_normal((n_rows, feats)).astype(np.float32)
    s = np.zeros((n_rows, n_cols), np.float32)
    np.add.at(s, (idx[0], idx[1]), vals)

    v = loom.tensor(vals, requires_grad=True)
    d = loom.tensor(dense, requires_grad=True)
    out = gcn.spmm(loom.tensor(idx), v, d, n_rows)
    np.testing.assert_allclose(out.detach().numpy(), s @ dense, rtol=1e-5, atol=1e-6)
    (out * loom.tensor(weights)).sum().backward()
    np.testing.assert_allclose(d.grad.numpy(), s.T @ weights, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(v.grad.numpy(), (weights[idx[0]] * dense[idx[1]]).sum(1), rtol=1e-5, atol=1e-6)


def test_normalized_adjacency_is_symmetric_normalisation_with_self_loops():
    gcn = example_module("gcn_cora")
    edges = np.array([[0, 0, 1, 3], [1, 2, 2, 4]])
    n = 6  # Node 5 is isolated: only its self loop.
    idx, vals = gcn.normalized_adjacency(edges, n)
    got = np.zeros((n, n))
    np.add.at(got, (idx[0], idx[1]), vals)
    a = np.eye(n)
    a[edges[0], edges[1]] = a[edges[1], edges[0]] = 1
    d = a.sum(1) ** -0.5
    np.testing.assert_allclose(got, d[:, None] * a * d[None, :], rtol=1e-6)
    assert idx.shape == (2, 2 * edges.shape[1] + n)


def test_char_gpt_is_causal_and_shapes():
    gpt = example_module("char_gpt")
    loom.manual_seed(0)
    model = gpt.CharGPT(vocab=11, context=8, d_model=16, n_layers=2, n_heads=2, dropout=0.0).eval()
    assert model.head.weight is model.tok.weight, "output layer should be tied to the token embedding"
    x = np.array([[1, 2, 3, 4, 5, 6, 7, 8]])
    y = x.copy()
    y[0, 5] = 0  # Change position 5: logits before it must not move, from it on they must.
    with loom.no_grad():
        a, b = model(loom.tensor(x)).numpy(), model(loom.tensor(y)).numpy()
    assert a.shape == (1, 8, 11)
    np.testing.assert_allclose(a[:, :5], b[:, :5], rtol=1e-5, atol=1e-6)
    assert np.abs(a[:, 5:] - b[:, 5:]).max() > 1e-4


def test_char_vocab_and_lr_schedule():
    gpt = example_module("char_gpt")
    vocab = gpt.CharVocab("hello world")
    assert vocab.chars == [" ", "d", "e", "h", "l", "o", "r", "w"]
    assert vocab.decode(vocab.encode("lower")) == "lower"
    np.testing.assert_array_equal(vocab.encode("dew"), [1, 2, 7])
    with pytest.raises(ValueError, match="outside the vocabulary: 'xz'"):
        vocab.encode("zex")
    f = gpt.lr_schedule(warmup=10, total=110, floor=0.1)
    assert f(0) == pytest.approx(0.1) and f(9) == pytest.approx(1.0) and f(10) == pytest.approx(1.0)
    assert f(60) == pytest.approx(0.55) and f(110) == pytest.approx(0.1) and f(500) == pytest.approx(0.1)
