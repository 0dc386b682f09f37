"""`keras.datasets`: MNIST, Fashion-MNIST and CIFAR-10 read from Keras's download cache.

`load_data()` reads the files Keras keeps in `$KERAS_HOME/datasets` (default
`~/.keras/datasets`), downloading them from Keras's URLs first if they are
missing. Offline, it says which file to put where. The other Keras datasets
are not provided and say so.
"""
from __future__ import annotations

import gzip
import os
import pickle
import tarfile
import types
import urllib.request

import numpy as np

from loom.errors import LoomValueError

_BASE = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/"


def _cache_dir() -> str:
    return os.path.join(os.environ.get("KERAS_HOME", os.path.join(os.path.expanduser("~"), ".keras")), "datasets")


def _fetch(api: str, rel: str, url: str) -> str:
    """The cached file `rel` under the datasets cache, downloaded from `url` if missing."""
    path = os.path.join(_cache_dir(), rel)
    if os.path.exists(path):
        return path
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".part"
    try:
        with urllib.request.urlopen(url, timeout=30) as resp, open(tmp, "wb") as f:
            while chunk := resp.read(1 << 20):
                f.write(chunk)
    except OSError as e:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise LoomValueError(f"loom.tf.keras.datasets.{api}.load_data: {rel} is not in the cache and downloading "
                             f"{url} failed ({e}). Offline, copy the file Keras downloads to {path} and call "
                             "load_data() again") from None
    os.replace(tmp, path)
    return path


def _mnist_load_data(path="mnist.npz"):
    f = _fetch("mnist", path, _BASE + "mnist.npz")
    with np.load(f, allow_pickle=False) as z:
        return (z["x_train"], z["y_train"]), (z["x_test"], z["y_test"])


def _idx(path: str, offset: int) -> np.ndarray:
    with gzip.open(path, "rb") as f:
        return np.frombuffer(f.read(), np.uint8, offset=offset)


def _fashion_load_data():
    names = ["train-labels-idx1-ubyte.gz", "train-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz",
             "t10k-images-idx3-ubyte.gz"]
    files = [_fetch("fashion_mnist", os.path.join("fashion-mnist", n), _BASE + "fashion-mnist/" + n) for n in names]
    y_train, y_test = _idx(files[0], 8), _idx(files[2], 8)
    x_train = _idx(files[1], 16).reshape(len(y_train), 28, 28)
    x_test = _idx(files[3], 16).reshape(len(y_test), 28, 28)
    return (x_train, y_train), (x_test, y_test)


def _cifar_batch(path: str):
    with open(path, "rb") as f:
        d = pickle.load(f, encoding="bytes")
    x = np.asarray(d[b"data"], np.uint8).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    return x, np.asarray(d[b"labels"], np.uint8).reshape(-1, 1)


def _cifar10_load_data():
    root = os.path.join(_cache_dir(), "cifar-10-batches-py")
    if not os.path.isdir(root):
        arc = _fetch("cifar10", "cifar-10-batches-py.tar.gz", "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz")
        with tarfile.open(arc) as t:
            t.extractall(_cache_dir(), filter="data")
    parts = [_cifar_batch(os.path.join(root, f"data_batch_{i}")) for i in range(1, 6)]
    x_test, y_test = _cifar_batch(os.path.join(root, "test_batch"))
    return (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])), (x_test, y_test)


def _missing(name: str):
    def load_data(*args, **kwargs):
        raise LoomValueError(f"loom.tf.keras.datasets.{name}.load_data: this dataset is not provided by loom.tf "
                             "(mnist, fashion_mnist and cifar10 are); load the arrays with NumPy and pass them "
                             "to model.fit")
    return load_data


mnist = types.SimpleNamespace(load_data=_mnist_load_data)
fashion_mnist = types.SimpleNamespace(load_data=_fashion_load_data)
cifar10 = types.SimpleNamespace(load_data=_cifar10_load_data)
cifar100 = types.SimpleNamespace(load_data=_missing("cifar100"))
imdb = types.SimpleNamespace(load_data=_missing("imdb"), get_word_index=_missing("imdb"))
reuters = types.SimpleNamespace(load_data=_missing("reuters"), get_word_index=_missing("reuters"))
boston_housing = types.SimpleNamespace(load_data=_missing("boston_housing"))
california_housing = types.SimpleNamespace(load_data=_missing("california_housing"))
