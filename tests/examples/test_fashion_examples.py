"""Smoke runs of the Fashion-MNIST examples (MLP, CNN, ResNet, DCGAN) and their missing-data handling.

Each example runs as a user would run it, in a subprocess with ``--smoke`` (a
few batches of a small split). The tests check that it finishes, prints its
final metric, writes its PNG(s) and that its training loss went down. When
Debian's Fashion-MNIST is not installed the examples fall back to
scikit-learn's digits, so the smoke runs pass either way.
"""
from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run_example(name: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ)  # Default settings, as a user runs them: loom owns its threads.
    return subprocess.run([sys.executable, str(EXAMPLES / f"{name}.py"), *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=EXAMPLES.parent)


def example_module(name: str):
    """Import an example's module (its folder on sys.path, for `_common`)."""
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    return __import__(name)


def smoke(name: str, out: Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    # --no-download: the suite never fetches; without Debian's Fashion-MNIST the examples fall back to digits.
    proc = run_example(name, "--smoke", "--no-progress", "--no-download", "--out", str(out), *extra)
    assert proc.returncode == 0, f"{name} --smoke failed:\n{proc.stdout}\n{proc.stderr}"
    return proc, json.loads((out / "metrics.json").read_text())


def assert_png(path: Path) -> None:
    assert path.is_file(), f"{path} was not written"
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 2000, f"{path} is not a plausible PNG ({len(data)} bytes)"


def assert_classifier_run(proc: subprocess.CompletedProcess, metrics: dict, out: Path) -> None:
    m = re.search(r"test accuracy (\d\.\d{4}) on (\d+) ", proc.stdout)
    assert m, f"no final test accuracy in the output:\n{proc.stdout}"
    acc, n_test = float(m.group(1)), int(m.group(2))
    assert n_test == 128 and acc == pytest.approx(metrics["test_accuracy"], abs=1e-4)
    assert acc > 0.2, f"accuracy {acc} after the smoke run is no better than chance (0.1)"
    losses = metrics["epoch_loss"]
    assert len(losses) >= 2 and all(math.isfinite(v) for v in metrics["step_loss"])
    assert losses[-1] < losses[0], f"training loss did not decrease over the smoke run: {losses}"
    assert_png(out / "loss.png")


def test_fashion_mlp_smoke(tmp_path):
    proc, metrics = smoke("fashion_mlp", tmp_path)
    assert "MLP 784-256-256-10" in proc.stdout
    assert_classifier_run(proc, metrics, tmp_path)
    assert metrics["epochs"] == 3 and len(metrics["test_acc"]) == 3


def test_fashion_cnn_smoke(tmp_path):
    proc, metrics = smoke("fashion_cnn", tmp_path)
    assert_classifier_run(proc, metrics, tmp_path)
    assert (tmp_path / "model.safetensors").is_file()


def test_fashion_resnet_smoke(tmp_path):
    proc, metrics = smoke("fashion_resnet", tmp_path)
    assert_classifier_run(proc, metrics, tmp_path)
    assert "ms per training image" in proc.stdout and metrics["seconds_per_epoch"] > 0


def test_dcgan_fashion_smoke(tmp_path):
    proc, metrics = smoke("dcgan_fashion", tmp_path)
    assert re.search(r"loss D \d+\.\d+, loss G \d+\.\d+", proc.stdout), proc.stdout
    assert metrics["steps"] == 8
    loss_d = np.array(metrics["loss_d"])
    assert len(loss_d) == 8 and np.isfinite(loss_d).all() and np.isfinite(metrics["loss_g"]).all()
    # The discriminator learns fast at first: its loss falls from about 2 ln 2 = 1.39.
    assert loss_d[-3:].mean() < loss_d[:3].mean(), f"discriminator loss did not decrease: {loss_d}"
    assert_png(tmp_path / "samples.png")
    assert_png(tmp_path / "loss.png")
    from PIL import Image
    with Image.open(tmp_path / "samples.png") as img:  # 8x8 tiles of 28 px, 2 px apart, drawn 4x larger.
        assert img.size == (4 * (8 * 30 + 2), 4 * (8 * 30 + 2))


@pytest.mark.parametrize("name", ["fashion_mlp", "fashion_cnn", "fashion_resnet", "dcgan_fashion"])
def test_missing_data_without_fallback_fails_clearly(tmp_path, name):
    missing = tmp_path / "no-such-dir"
    proc = run_example(name, "--no-fallback", "--data", str(missing), "--out", str(tmp_path / "out"), timeout=120)
    assert proc.returncode != 0
    assert str(missing) in proc.stderr and "dataset-fashion-mnist" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out" / "metrics.json").exists()


def test_missing_file_is_named(tmp_path):
    (tmp_path / "train-images-idx3-ubyte.gz").write_bytes(b"")
    proc = run_example("fashion_mlp", "--no-fallback", "--data", str(tmp_path), timeout=120)
    assert proc.returncode != 0
    assert str(tmp_path / "train-labels-idx1-ubyte.gz") in proc.stderr and "dataset-fashion-mnist" in proc.stderr


def test_missing_data_falls_back_to_digits(tmp_path):
    missing = tmp_path / "no-such-dir"
    proc, metrics = smoke("fashion_mlp", tmp_path / "out", "--data", str(missing))
    assert str(missing) in proc.stderr and "dataset-fashion-mnist" in proc.stderr
    assert "digits" in proc.stderr and metrics["data"] == "digits (fallback)"
    assert_classifier_run(proc, metrics, tmp_path / "out")


def test_fresh_clone_downloads_fashion_mnist_into_the_cache(tmp_path, monkeypatch):
    """With no local copy, `load_images()` downloads (here from a loopback server) into LOOM_DATA_HOME."""
    import gzip
    import hashlib

    from loom.data import datasets as D
    from loom.data.download import Resource
    from tests.data._loopback import serve

    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (3, 28, 28), dtype=np.uint8)
    labels = np.array([1, 2, 3], np.uint8)

    def idx(a):
        return gzip.compress(bytes([0, 0, 8, a.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in a.shape)
                             + a.tobytes())

    files = {f"{s}-{k}": idx(a) for s in ("train", "t10k")
             for k, a in (("images-idx3-ubyte.gz", images), ("labels-idx1-ubyte.gz", labels))}
    fashion = example_module("_fashion")
    monkeypatch.setenv("LOOM_DATA_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(D.FashionMNIST, "default_dirs", (str(tmp_path / "no-debian"),))
    with serve(files) as (srv, base):
        monkeypatch.setitem(D.RESOURCES, "FashionMNIST", {
            f: Resource(f, (f"{base}/{f}",), sha256=hashlib.sha256(b).hexdigest()) for f, b in files.items()})
        with pytest.raises(SystemExit):  # --no-download and nothing on disk: a clear exit, no request.
            fashion.load_images(None, fallback=False, download=False)
        assert srv.requests == []
        data = fashion.load_images(None, fallback=False)
    assert data.name == "Fashion-MNIST" and len(data.train) == 3 and data.train[2][1] == 3
    assert (tmp_path / "cache" / "FashionMNIST" / "raw" / "t10k-labels-idx1-ubyte.gz").is_file()
