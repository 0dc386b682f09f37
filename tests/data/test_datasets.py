"""Dataset loaders of the examples: Fashion-MNIST (Debian package), scikit-learn digits, tinyshakespeare, Cora."""
import collections
import gzip
import hashlib
import importlib.util
import io
import os
import pickle
import tarfile
from pathlib import Path

import numpy as np
import pytest

import loom
import loom.data as ld
from loom.data import datasets as D
from loom.data import download as dl
from loom.data.transforms import ToTensor
from tests.data._loopback import serve

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
    gz = tmp_path / "x-idx1-ubyte.gz"
    gz.write_bytes(gzip.compress(p.read_bytes())[:-9])  # A download cut short.
    with pytest.raises(loom.LoomError, match="damaged"):
        D.read_idx(gz)


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


# Downloads and layouts, served by a loopback HTTP server in place of the published URLs.

def idx_bytes(arr: np.ndarray) -> bytes:
    """An IDX file (uint8 data) for `arr`."""
    return bytes([0, 0, 8, arr.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in arr.shape) + arr.tobytes()


def fake_mnist(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, dict[str, bytes]]:
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, n, dtype=np.uint8)
    files = {}
    for split in ("train", "t10k"):
        files[f"{split}-images-idx3-ubyte.gz"] = gzip.compress(idx_bytes(images))
        files[f"{split}-labels-idx1-ubyte.gz"] = gzip.compress(idx_bytes(labels))
    return images, labels, files


def point_resources(monkeypatch, name: str, base: str, files: dict[str, bytes]) -> None:
    """Make RESOURCES[name] download `files` from `base` with their true SHA-256."""
    table = {f: dl.Resource(f, (f"{base}/{f}",), sha256=hashlib.sha256(b).hexdigest(), size=len(b))
             for f, b in files.items()}
    monkeypatch.setitem(D.RESOURCES, name, table)


def test_mnist_download_into_torchvision_layout_then_cached(tmp_path, monkeypatch):
    images, labels, files = fake_mnist(5)
    with serve(files) as (srv, base):
        point_resources(monkeypatch, "MNIST", base, files)
        with pytest.raises(FileNotFoundError, match="download=True") as e:
            D.MNIST(tmp_path, train=False)
        assert str(tmp_path / "MNIST" / "raw" / "t10k-images-idx3-ubyte.gz") in str(e.value)
        ds = D.MNIST(tmp_path, train=False, download=True)
        assert sorted(p.name for p in (tmp_path / "MNIST" / "raw").iterdir() if not p.name.startswith(".")) == [
            "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"]
        assert np.array_equal(ds.images, images) and [ds[i][1] for i in range(5)] == labels.tolist()
        n = len(srv.requests)
        D.MNIST(tmp_path, train=False, download=True)
        assert len(srv.requests) == n == 2


def test_mnist_reads_flat_and_uncompressed_files(tmp_path):
    images, labels, files = fake_mnist(3, seed=1)
    (tmp_path / "train-images-idx3-ubyte").write_bytes(gzip.decompress(files["train-images-idx3-ubyte.gz"]))
    (tmp_path / "train-labels-idx1-ubyte.gz").write_bytes(files["train-labels-idx1-ubyte.gz"])
    ds = D.MNIST(tmp_path)
    assert np.array_equal(ds.data.numpy(), images) and ds.targets.tolist() == labels.tolist()


def test_fashion_mnist_download_uses_cache_folder(tmp_path, monkeypatch):
    images, labels, files = fake_mnist(4, seed=2)
    monkeypatch.setenv("LOOM_DATA_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(D.FashionMNIST, "default_dirs", (str(tmp_path / "debian"),))
    with serve(files) as (srv, base):
        point_resources(monkeypatch, "FashionMNIST", base, files)
        ds = D.FashionMNIST(download=True)
    assert (tmp_path / "cache" / "FashionMNIST" / "raw" / "train-images-idx3-ubyte.gz").is_file()
    assert np.array_equal(ds.images, images) and ds.classes[0] == "T-shirt/top"


def cifar_archive(folder: str, files: dict[str, dict]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, obj in files.items():
            data = pickle.dumps(obj, protocol=2)
            info = tarfile.TarInfo(f"{folder}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_cifar10_download_extract_and_layout(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    batches = {f"data_batch_{i}": {"data": rng.integers(0, 256, (2, 3072), dtype=np.uint8), "labels": [i, 9 - i]}
               for i in range(1, 6)}
    batches["test_batch"] = {"data": rng.integers(0, 256, (3, 3072), dtype=np.uint8), "labels": [0, 1, 2]}
    batches["batches.meta"] = {"label_names": [f"class{i}" for i in range(10)]}
    archive = cifar_archive("cifar-10-batches-py", batches)
    with serve({"cifar-10-python.tar.gz": archive}) as (srv, base):
        point_resources(monkeypatch, "CIFAR10", base, {"cifar-10-python.tar.gz": archive})
        with pytest.raises(FileNotFoundError, match="cifar-10-python.tar.gz"):
            D.CIFAR10(tmp_path)
        train = D.CIFAR10(tmp_path, download=True)
        test = D.CIFAR10(tmp_path, train=False)  # Found unpacked: no request.
        assert len(srv.requests) == 1
    assert (tmp_path / "cifar-10-batches-py" / "test_batch").is_file()
    assert train.data.shape == (10, 32, 32, 3) and train.targets == [1, 8, 2, 7, 3, 6, 4, 5, 5, 4]
    raw = batches["test_batch"]["data"][2].reshape(3, 32, 32)
    img, label = test[2]
    assert label == 2 and img.dtype == np.uint8 and np.array_equal(img, raw.transpose(1, 2, 0))
    assert test.classes[3] == "class3" and not list(tmp_path.glob(".cifar*"))
    (tmp_path / "cifar-10-batches-py" / "data_batch_3").unlink()  # A damaged unpacking is completed from the archive.
    assert D.CIFAR10(tmp_path).targets == train.targets


def test_cifar_archive_with_unsafe_members_is_not_unpacked(tmp_path):
    (tmp_path / "cifar-10-python.tar.gz").write_bytes(cifar_archive("../escape", {"test_batch": {}}))
    with pytest.raises(loom.LoomError, match="unsafe"):
        D.CIFAR10(tmp_path, train=False)
    assert not (tmp_path.parent / "escape").exists()


def test_cifar100_fine_labels(tmp_path):
    rng = np.random.default_rng(1)
    folder = tmp_path / "cifar-100-python"
    folder.mkdir()
    for name, n in (("train", 4), ("test", 2)):
        obj = {"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8), "fine_labels": list(range(n)),
               "coarse_labels": [0] * n}
        (folder / name).write_bytes(pickle.dumps(obj, protocol=2))
    (folder / "meta").write_bytes(pickle.dumps({"fine_label_names": [f"c{i}" for i in range(100)]}))
    ds = D.CIFAR100(tmp_path, train=False)
    assert len(ds) == 2 and ds[1][1] == 1 and len(ds.classes) == 100


def test_unpickler_refuses_arbitrary_classes(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    for name in ["test_batch", "batches.meta"]:
        (folder / name).write_bytes(pickle.dumps({"data": loom.data.Subset([1], [0])}))
    with pytest.raises(pickle.UnpicklingError, match="refusing"):
        D.CIFAR10(tmp_path, train=False)


def test_tiny_shakespeare_download(tmp_path, monkeypatch):
    text = b"First Citizen:\nSpeak, speak.\n" * 50
    monkeypatch.setenv("LOOM_DATA_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("LOOM_DATA_DIR", str(tmp_path / "shared"))
    with serve({"input.txt": text}) as (srv, base):
        point_resources(monkeypatch, "TinyShakespeare", base, {"input.txt": text})
        with pytest.raises(FileNotFoundError) as e:
            D.TinyShakespeare()
        assert str(tmp_path / "shared" / "tinyshakespeare" / "input.txt") in str(e.value)
        ds = D.TinyShakespeare(block_size=4, download=True)
        assert ds.path == tmp_path / "cache" / "tinyshakespeare" / "input.txt" and ds.text == text.decode()
        mine = D.TinyShakespeare(tmp_path / "mine" / "shakespeare.txt", block_size=4, download=True)
        assert mine.path.name == "shakespeare.txt" and mine.text == ds.text


def test_tiny_shakespeare_published_checksum_matches_the_shared_copy():
    path = D.data_dir() / "tinyshakespeare" / "input.txt"
    if not path.exists():
        path = Path("/work/shared/data/tinyshakespeare/input.txt")
    if not path.exists():
        pytest.skip("no copy of tinyshakespeare here")
    res = D.RESOURCES["TinyShakespeare"]["input.txt"]
    assert dl.file_digest(path) == res.sha256 and path.stat().st_size == res.size


def planetoid_files(g: dict, test_order: np.ndarray) -> dict[str, bytes]:
    """The Planetoid `ind.cora.*` files (pickles, as its repository ships them) for a graph in the cora.npz layout."""
    import scipy.sparse as sp
    n_train = len(g["train_idx"])
    n_all = len(g["labels"]) - len(test_order)
    onehot = np.eye(int(g["labels"].max()) + 1)[g["labels"]]
    feats = g["features"]
    adj = {i: [] for i in range(len(g["labels"]))}
    for a, b in g["edges"].T:
        adj[int(a)].append(int(b))
        adj[int(b)].append(int(a))
    adj[0].append(0)  # A self loop, which the conversion drops.
    objs = {"x": sp.csr_matrix(feats[:n_train]), "y": onehot[:n_train], "allx": sp.csr_matrix(feats[:n_all]),
            "ally": onehot[:n_all], "tx": sp.csr_matrix(feats[test_order]), "ty": onehot[test_order],
            "graph": collections.defaultdict(list, adj)}
    files = {f"ind.cora.{k}": pickle.dumps(v, protocol=2) for k, v in objs.items()}
    files["ind.cora.test.index"] = "\n".join(str(i) for i in test_order).encode()
    return files


def small_graph() -> dict:
    rng = np.random.default_rng(0)
    n = 520 + 6
    return {"features": (rng.random((n, 5)) < 0.3).astype(np.float32), "labels": rng.integers(0, 3, n),
            "edges": np.array([[0, 1, 2, 520], [1, 2, 525, 523]]), "train_idx": np.arange(3),
            "val_idx": np.arange(3, 503), "test_idx": np.arange(520, 526)}


def test_cora_download_and_planetoid_conversion(tmp_path, monkeypatch):
    pytest.importorskip("scipy")
    g = small_graph()
    g["train_idx"] = np.arange(3)
    files = planetoid_files(g, np.array([523, 520, 525, 521, 524, 522]))
    monkeypatch.setenv("LOOM_DATA_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("LOOM_DATA_DIR", str(tmp_path / "shared"))
    with serve(files) as (srv, base):
        point_resources(monkeypatch, "Cora", base, files)
        with pytest.raises(FileNotFoundError, match="download=True"):
            D.Cora()
        c = D.Cora(download=True)
    assert c.path == tmp_path / "cache" / "cora" / "cora.npz"
    np.testing.assert_array_equal(c.features, g["features"])
    np.testing.assert_array_equal(c.labels, g["labels"])
    assert c.edges.tolist() == [[0, 1, 2, 520], [1, 2, 525, 523]]
    assert c.train_idx.tolist() == [0, 1, 2] and c.val_idx.tolist() == list(range(3, 503))
    assert c.test_idx.tolist() == list(range(520, 526))


def test_cora_conversion_reproduces_the_shared_npz(tmp_path):
    pytest.importorskip("scipy")
    path = Path("/work/shared/data/cora/cora.npz")
    if not path.exists():
        pytest.skip("no shared cora.npz here")
    with np.load(path) as z:
        g = {k: z[k] for k in z.files}
    test_order = np.random.default_rng(0).permutation(g["test_idx"])
    for name, data in planetoid_files(g, test_order).items():
        (tmp_path / name).write_bytes(data)
    D.planetoid_to_npz(tmp_path, tmp_path / "out.npz")
    with np.load(tmp_path / "out.npz") as z:
        for k in g:
            np.testing.assert_array_equal(z[k], g[k], err_msg=k)
