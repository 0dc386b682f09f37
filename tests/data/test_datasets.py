"""Dataset loaders of the examples: Fashion-MNIST (Debian package), scikit-learn digits, tinyshakespeare, Cora."""
import importlib.util
import os

import numpy as np
import pytest

import loom
import loom.data as ld
from loom.data import datasets as D
from loom.data.transforms import ToTensor

FMNIST = D.FASHION_MNIST_ROOT
needs_fmnist = pytest.mark.skipif(not os.path.exists(os.path.join(FMNIST, "t10k-images-idx3-ubyte.gz")),
                                  reason=f"Debian package dataset-fashion-mnist is not installed ({FMNIST} absent)")


@needs_fmnist
def test_fashion_mnist_shapes_dtypes_and_loader():
    test = D.FashionMNIST(train=False)
    assert len(test) == 10000 and test.data.shape == (10000, 28, 28) and test.data.dtype is loom.uint8
    assert test.targets.dtype is loom.int64 and sorted(set(test.labels.tolist())) == list(range(10))
    img, label = test[0]
    assert img.shape == (28, 28) and img.dtype == np.uint8 and isinstance(label, int) and len(test.classes) == 10
    assert np.bincount(test.labels).tolist() == [1000] * 10
    test.transform = ToTensor()
    x, y = next(iter(ld.DataLoader(test, batch_size=16)))
    assert x.shape == (16, 1, 28, 28) and x.dtype is loom.float32 and y.dtype is loom.int64
    assert 0.0 <= x.min().item() and x.max().item() <= 1.0
    np.testing.assert_allclose(x[0, 0].numpy(), test.images[0] / np.float32(255))


def test_fashion_mnist_missing_names_path_and_package(tmp_path):
    with pytest.raises(FileNotFoundError) as e:
        D.FashionMNIST(root=tmp_path)
    assert str(tmp_path) in str(e.value) and "dataset-fashion-mnist" in str(e.value)


def test_read_idx_rejects_truncated_files(tmp_path):
    p = tmp_path / "x-idx1-ubyte"
    p.write_bytes(bytes([0, 0, 8, 1]) + (5).to_bytes(4, "big") + b"\x01\x02")
    with pytest.raises(loom.LoomError, match="truncated"):
        D.read_idx(p)
    p.write_bytes(bytes([0, 0, 8, 1]) + (2).to_bytes(4, "big") + b"\x01\x02")
    assert D.read_idx(p).tolist() == [1, 2]


@pytest.mark.skipif(importlib.util.find_spec("sklearn") is None, reason="scikit-learn is not installed")
def test_digits_splits():
    full, train, test = D.Digits(), D.Digits(train=True), D.Digits(train=False)
    assert (len(full), len(train), len(test)) == (1797, 1437, 360)
    assert np.array_equal(np.concatenate([train.images, test.images]), full.images)
    assert np.bincount(full.labels).tolist() == [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]
    img, label = full[0]
    assert img.shape == (8, 8) and img.dtype == np.uint8 and img.max() <= 255 and label == 0
    assert ToTensor()(img).shape == (1, 8, 8)


def test_tiny_shakespeare(tmp_path):
    p = tmp_path / "input.txt"
    p.write_text("First Citizen:\nBefore we proceed any further, hear me speak.\n" * 20, encoding="utf-8")
    ds = D.TinyShakespeare(p, block_size=8)
    x, y = ds[0]
    assert ds.tokenizer.decode(x) == "First Ci" and ds.tokenizer.decode(y) == "irst Cit"
    assert len(ds) == len(ds.ids) - 8 and x.dtype == np.int64
    val = D.TinyShakespeare(p, block_size=8, train=False)
    assert len(val.ids) + len(ds.ids) == len(ds.text) and val.tokenizer == ds.tokenizer
    with pytest.raises(FileNotFoundError, match="tinyshakespeare"):
        D.TinyShakespeare(tmp_path / "missing.txt")


def test_cora(tmp_path):
    path = D.data_dir() / "cora" / "cora.npz"
    if not path.exists():
        path = tmp_path / "cora.npz"
        np.savez(path, features=np.eye(4, 3, dtype=np.float32), labels=np.array([0, 1, 2, 1]),
                 edges=np.array([[0, 1], [1, 2]]), train_idx=np.array([0]), val_idx=np.array([1]),
                 test_idx=np.array([2, 3]))
    g = D.Cora(path)
    assert g.features.dtype == np.float32 and g.labels.dtype == np.int64 and g.edges.shape[0] == 2
    assert g.num_nodes == len(g.labels) == g.features.shape[0]
    index, weight = g.gcn_edges()
    assert index.shape == (2, 2 * g.edges.shape[1] + g.num_nodes) and weight.dtype == np.float32
    # D^-1/2 (A + I) D^-1/2: symmetric, and the self-loop weight of node i is 1 / deg(i).
    forward = sorted(zip(index[0].tolist(), index[1].tolist(), weight.tolist()))
    backward = sorted(zip(index[1].tolist(), index[0].tolist(), weight.tolist()))
    assert forward == backward
    deg = np.bincount(index[0], minlength=g.num_nodes)
    loops = index[0] == index[1]
    np.testing.assert_allclose(weight[loops], 1.0 / deg[index[0][loops]], rtol=1e-6)
    bad = tmp_path / "bad.npz"
    np.savez(bad, features=np.zeros((1, 1)))
    with pytest.raises(loom.LoomError, match="lacks"):
        D.Cora(bad)
    with pytest.raises(FileNotFoundError, match="cora"):
        D.Cora(tmp_path / "none.npz")
