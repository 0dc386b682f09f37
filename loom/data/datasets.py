"""Loaders for the data sets the examples train on: Fashion-MNIST, scikit-learn's digits, tinyshakespeare, Cora.

Each reads local files only (nothing is downloaded). Default locations:
Fashion-MNIST from Debian's `dataset-fashion-mnist` package
(`/usr/share/datasets/fashion-mnist`); tinyshakespeare and Cora from
`$LOOM_DATA_DIR` (default: the `shared/data` folder beside the repository,
described in its README).
"""
from __future__ import annotations

import gzip
import os
import struct
from pathlib import Path
from typing import Callable

import numpy as np

from loom.data.dataset import Dataset
from loom.data.text import CharTokenizer
from loom.errors import LoomError, LoomIndexError, LoomValueError
from loom.data.errors import LoomFileNotFoundError
from loom.tensor import Tensor, from_numpy

FASHION_MNIST_ROOT = "/usr/share/datasets/fashion-mnist"


def data_dir() -> Path:
    """`$LOOM_DATA_DIR`, or the `shared/data` folder next to the repository."""
    env = os.environ.get("LOOM_DATA_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[3] / "shared" / "data"


def _missing(path, what: str, hint: str) -> LoomFileNotFoundError:
    return LoomFileNotFoundError(f"loom.data.datasets: {what} not found at {os.fspath(path)!r}. {hint}")


_IDX_TYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: np.dtype(">i2"), 0x0C: np.dtype(">i4"), 0x0D: np.dtype(">f4"),
              0x0E: np.dtype(">f8")}


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read an IDX file (the MNIST format), gzip-compressed or not.

    Examples
    --------
    >>> read_idx("/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz").shape  # doctest: +SKIP
    (10000,)
    """
    path = os.fspath(path)
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in _IDX_TYPES:
        raise LoomError(f"loom.data.datasets.read_idx: {path} is not an IDX file (magic {data[:4].hex()})")
    ndim = data[3]
    dims = struct.unpack(f">{ndim}I", data[4:4 + 4 * ndim])
    dtype = np.dtype(_IDX_TYPES[data[2]])
    body = data[4 + 4 * ndim:]
    if len(body) != int(np.prod(dims)) * dtype.itemsize:
        raise LoomError(f"loom.data.datasets.read_idx: {path} holds {len(body)} data bytes, expected "
                        f"{int(np.prod(dims)) * dtype.itemsize} for shape {dims}; the file is truncated")
    return np.frombuffer(body, dtype).reshape(dims).astype(dtype.newbyteorder("="))


class FashionMNIST(Dataset):
    """Fashion-MNIST: 28x28 grey images of 10 clothing classes (60,000 train, 10,000 test).

    Parameters
    ----------
    root : str
        Folder holding the four `*-idx?-ubyte.gz` files. Default: Debian's
        `/usr/share/datasets/fashion-mnist` (package `dataset-fashion-mnist`).
    train : bool
        The training split (default) or the test split.
    transform, target_transform : callable, optional
        Applied to the image (a uint8 NumPy array [28, 28], as torchvision
        gives a PIL image) and to the int label.

    Attributes
    ----------
    data : Tensor
        uint8 [N, 28, 28].
    targets : Tensor
        int64 [N].
    classes : list of str

    Examples
    --------
    >>> ds = loom.data.datasets.FashionMNIST(train=False, transform=loom.data.transforms.ToTensor())
    >>> x, y = ds[0]
    >>> len(ds), x.shape, x.dtype, y
    (10000, loom.Size([1, 28, 28]), loom.float32, 9)
    """

    classes = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
               "Ankle boot"]

    def __init__(self, root: str | os.PathLike = FASHION_MNIST_ROOT, train: bool = True,
                 transform: Callable | None = None, target_transform: Callable | None = None) -> None:
        root = Path(root)
        split = "train" if train else "t10k"
        paths = [root / f"{split}-images-idx3-ubyte.gz", root / f"{split}-labels-idx1-ubyte.gz"]
        for p in paths:
            if not p.exists():
                raise _missing(p, "the Fashion-MNIST file", "Install the Debian package dataset-fashion-mnist "
                               "(apt-get install dataset-fashion-mnist) or pass root= the folder holding "
                               f"{paths[0].name} and {paths[1].name}.")
        self.root, self.train = root, train
        images, labels = read_idx(paths[0]), read_idx(paths[1]).astype(np.int64)
        if images.ndim != 3 or len(images) != len(labels):
            raise LoomError(f"loom.data.datasets.FashionMNIST: {paths[0]} has shape {images.shape} and {paths[1]} "
                            f"{labels.shape}; expected [N, 28, 28] images and N labels")
        self.images, self.labels = images, labels
        self.data: Tensor = from_numpy(images)
        self.targets: Tensor = from_numpy(labels)
        self.transform, self.target_transform = transform, target_transform

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int):
        img, target = self.images[index], int(self.labels[index])
        if self.transform is not None:
            img = self.transform(img)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return img, target


def _load_digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits as (pixels [N, 64] in 0..16, labels int64).

    Reads the CSV that scikit-learn ships without importing scikit-learn
    (whose import takes seconds); falls back to `load_digits` if the file moved.
    """
    import importlib.util
    spec = importlib.util.find_spec("sklearn")
    if spec is None:
        raise ImportError("loom.data.datasets.Digits: needs scikit-learn (pip install scikit-learn)")
    for root in spec.submodule_search_locations or []:
        path = Path(root) / "datasets" / "data" / "digits.csv.gz"
        if path.exists():
            table = np.loadtxt(path, delimiter=",")
            return table[:, :-1], table[:, -1].astype(np.int64)
    from sklearn.datasets import load_digits
    d = load_digits()
    return d.data, d.target.astype(np.int64)


class Digits(Dataset):
    """scikit-learn's 1,797 8x8 handwritten digits, as uint8 images in [0, 255].

    The original pixel values 0..16 are scaled by 255/16 and rounded, so the
    same transforms as for Fashion-MNIST apply (`ToTensor` gives [0, 1]).

    Parameters
    ----------
    train : bool or None
        None: all 1,797 images; True: the first 1,437 (80%); False: the last 360.
    transform, target_transform : callable, optional

    Examples
    --------
    >>> ds = loom.data.datasets.Digits()
    >>> x, y = ds[0]
    >>> len(ds), x.shape, x.dtype, y
    (1797, (8, 8), dtype('uint8'), 0)
    """

    classes = [str(i) for i in range(10)]

    def __init__(self, train: bool | None = None, transform: Callable | None = None,
                 target_transform: Callable | None = None) -> None:
        pixels, labels = _load_digits()
        images = np.rint(pixels.reshape(-1, 8, 8) * (255.0 / 16.0)).astype(np.uint8)
        cut = int(len(labels) * 0.8)
        if train is True:
            images, labels = images[:cut], labels[:cut]
        elif train is False:
            images, labels = images[cut:], labels[cut:]
        self.images, self.labels = np.ascontiguousarray(images), np.ascontiguousarray(labels)
        self.data: Tensor = from_numpy(self.images)
        self.targets: Tensor = from_numpy(self.labels)
        self.transform, self.target_transform = transform, target_transform

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int):
        img, target = self.images[index], int(self.labels[index])
        if self.transform is not None:
            img = self.transform(img)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return img, target


class TinyShakespeare(Dataset):
    """tinyshakespeare as character tokens, for next-character prediction.

    Parameters
    ----------
    path : str, optional
        The `input.txt`. Default: `$LOOM_DATA_DIR/tinyshakespeare/input.txt`.
    block_size : int
        Context length of each example. Default: 128.
    train : bool or None
        True: the first 90% of the text (the customary split); False: the
        rest; None: all of it.

    Attributes
    ----------
    text : str
        The whole corpus.
    tokenizer : CharTokenizer
        Built from the whole corpus (65 characters), so both splits share it.
    ids : numpy.ndarray
        int64 token ids of this split.

    Each example is `(x, y)`: int64 arrays of `block_size` ids, y shifted by one.

    Examples
    --------
    >>> ds = loom.data.datasets.TinyShakespeare(block_size=8)
    >>> x, y = ds[0]
    >>> ds.tokenizer.decode(x), ds.tokenizer.vocab_size
    ('First Ci', 65)
    """

    def __init__(self, path: str | os.PathLike | None = None, block_size: int = 128,
                 train: bool | None = True) -> None:
        path = Path(path) if path is not None else data_dir() / "tinyshakespeare" / "input.txt"
        if not path.exists():
            raise _missing(path, "the tinyshakespeare text", "Pass path= the input.txt of karpathy/char-rnn's "
                           "data/tinyshakespeare, or set LOOM_DATA_DIR.")
        if block_size < 1:
            raise LoomValueError(f"loom.data.datasets.TinyShakespeare: block_size should be positive, got {block_size}")
        self.path = path
        self.text = path.read_text(encoding="utf-8")
        self.tokenizer = CharTokenizer(self.text)
        ids = self.tokenizer.encode_array(self.text)
        cut = int(len(ids) * 0.9)
        self.ids = ids[:cut] if train is True else ids[cut:] if train is False else ids
        self.block_size = block_size
        if len(self.ids) <= block_size:
            raise LoomValueError(f"loom.data.datasets.TinyShakespeare: the split has {len(self.ids)} characters, not "
                                 f"more than block_size={block_size}")

    def __len__(self) -> int:
        return len(self.ids) - self.block_size

    def __getitem__(self, index: int):
        if not -len(self) <= index < len(self):
            raise LoomIndexError(f"loom.data.datasets.TinyShakespeare: index {index} out of range for {len(self)}")
        index %= len(self)
        chunk = self.ids[index:index + self.block_size + 1]
        return chunk[:-1], chunk[1:]


class Cora:
    """The Cora citation graph with the standard Planetoid split, from the `cora.npz` described in the data README.

    Attributes
    ----------
    features : numpy.ndarray
        float32 [2708, 1433] binary bag-of-words.
    labels : numpy.ndarray
        int64 [2708], 7 classes.
    edges : numpy.ndarray
        int64 [2, 5278], each undirected edge once, no self loops.
    train_idx, val_idx, test_idx : numpy.ndarray
        int64 node indices (140 / 500 / 1,000).

    Examples
    --------
    >>> g = loom.data.datasets.Cora()
    >>> g.num_nodes, g.num_features, g.num_classes, g.edges.shape
    (2708, 1433, 7, (2, 5278))
    """

    _KEYS = ("features", "labels", "edges", "train_idx", "val_idx", "test_idx")

    def __init__(self, path: str | os.PathLike | None = None) -> None:
        path = Path(path) if path is not None else data_dir() / "cora" / "cora.npz"
        if not path.exists():
            raise _missing(path, "the Cora graph (cora.npz)", "Pass path= a cora.npz as docs/data.md "
                           "describes, or set LOOM_DATA_DIR.")
        self.path = path
        with np.load(path, allow_pickle=False) as z:
            missing = [k for k in self._KEYS if k not in z.files]
            if missing:
                raise LoomError(f"loom.data.datasets.Cora: {path} lacks the arrays {missing}")
            for k in self._KEYS:
                setattr(self, k, z[k])
        self.num_nodes, self.num_features = self.features.shape
        self.num_classes = int(self.labels.max()) + 1

    def gcn_edges(self, self_loops: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """Both directions of every edge (plus self loops) and the GCN weights 1/sqrt(deg_i deg_j).

        Returns `(index, weight)`: int64 [2, E] (row = target, col = source) and
        float32 [E], the entries of D^-1/2 (A + I) D^-1/2 (Kipf & Welling).
        """
        src, dst = self.edges
        rows = [dst, src]
        cols = [src, dst]
        if self_loops:
            loop = np.arange(self.num_nodes)
            rows.append(loop)
            cols.append(loop)
        row, col = np.concatenate(rows), np.concatenate(cols)
        deg = np.bincount(row, minlength=self.num_nodes).astype(np.float64)
        inv = np.where(deg > 0, 1.0 / np.sqrt(np.maximum(deg, 1)), 0.0)
        return np.stack([row, col]), (inv[row] * inv[col]).astype(np.float32)
