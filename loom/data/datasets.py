"""Data sets to train on: MNIST, Fashion-MNIST, CIFAR-10/100, tinyshakespeare, Cora, scikit-learn's digits.

Each is found locally or, with ``download=True``, downloaded from its
published URL (checksummed, resumable, with a progress bar; see
`loom.data.download`) into the cache folder ``~/.cache/loom/data``
(``$LOOM_DATA_HOME``). A folder given as `root` is searched both directly
and in torchvision's layout (``root/MNIST/raw``, ``root/cifar-10-batches-py``),
so files torchvision downloaded are found; downloads into `root` use that
layout too. Other places searched: Debian's ``dataset-fashion-mnist`` package
(``/usr/share/datasets/fashion-mnist``) and ``$LOOM_DATA_DIR`` (default: the
``shared/data`` folder beside the repository) for tinyshakespeare and Cora.
When nothing is found and downloading is off or fails, the error lists every
path looked at and the URL. ``docs/data.md`` describes files and formats.
"""
from __future__ import annotations

import dataclasses
import gzip
import os
import pickle
import shutil
import struct
import tarfile
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np

from loom.data.dataset import Dataset
from loom.data.download import Resource, data_home, fetch
from loom.data.text import CharTokenizer
from loom.errors import LoomError, LoomIndexError, LoomValueError
from loom.tensor import Tensor, from_numpy

FASHION_MNIST_ROOT = "/usr/share/datasets/fashion-mnist"


def data_dir() -> Path:
    """`$LOOM_DATA_DIR`, or the `shared/data` folder next to the repository."""
    env = os.environ.get("LOOM_DATA_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[3] / "shared" / "data"


# The published files. SHA-256 values are the ones published for these exact files by several independent projects
# (e.g. TensorFlow Datasets for Fashion-MNIST, Keras for CIFAR-10); only tinyshakespeare's could be recomputed here,
# from an original copy. MD5s are torchvision's published values, checked only where no SHA-256 is known. Sizes are
# the published byte counts. docs/data.md lists what is verified how.
_MNIST_URLS = ("https://ossci-datasets.s3.amazonaws.com/mnist/", "https://storage.googleapis.com/cvdf-datasets/mnist/",
               "http://yann.lecun.com/exdb/mnist/")
_FASHION_URLS = ("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
                 "https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/data/fashion/")
_PLANETOID_URLS = ("https://raw.githubusercontent.com/kimiyoung/planetoid/master/data/",
                   "https://github.com/kimiyoung/planetoid/raw/master/data/")


def _files(bases: tuple[str, ...], table: dict[str, tuple]) -> dict[str, Resource]:
    return {name: Resource(name, tuple(b + name for b in bases), *info) for name, info in table.items()}


RESOURCES: dict[str, dict[str, Resource]] = {
    "MNIST": _files(_MNIST_URLS, {
        "train-images-idx3-ubyte.gz": ("440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
                                       "f68b3c2dcbeaaa9fbdd348bbdeb94873", 9912422),
        "train-labels-idx1-ubyte.gz": ("3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
                                       "d53e105ee54ea40749a09fcbcd1e9432", 28881),
        "t10k-images-idx3-ubyte.gz": ("8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
                                      "9fb629c4189551a2d022fa330f9573f3", 1648877),
        "t10k-labels-idx1-ubyte.gz": ("f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
                                      "ec29112dd5afa0611ce80d1b7f02629c", 4542)}),
    # Debian's dataset-fashion-mnist holds the same images re-gzipped, so its files do not match these bytes.
    "FashionMNIST": _files(_FASHION_URLS, {
        "train-images-idx3-ubyte.gz": ("3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84",
                                       "8d4fb7e6c68d591d4c3dfef9ec88bf0d", 26421880),
        "train-labels-idx1-ubyte.gz": ("a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845",
                                       "25c81989df183df01b3e8a0aad5dffbe", 29515),
        "t10k-images-idx3-ubyte.gz": ("346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073",
                                      "bef4ecab320f06d8554ea6380940ec79", 4422102),
        "t10k-labels-idx1-ubyte.gz": ("67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5",
                                      "bb300cfdad3c16e7a12a480ee83cd310", 5148)}),
    "CIFAR10": _files(("https://www.cs.toronto.edu/~kriz/",), {
        "cifar-10-python.tar.gz": ("6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce",
                                   "c58f30108f718f92721af3b95e74349a", 170498071)}),
    # No published SHA-256 found for CIFAR-100: its MD5 (on the CIFAR page and in torchvision) is checked.
    "CIFAR100": _files(("https://www.cs.toronto.edu/~kriz/",), {
        "cifar-100-python.tar.gz": (None, "eb9058c3a382ffc7106e4002c42a8d85", None)}),
    # SHA-256 recomputed here from an original copy; the same value is published by many projects.
    "TinyShakespeare": _files(("https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/",), {
        "input.txt": ("86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
                      "6fb458f1232090904fb40fe944165e91", 1115394)}),
    # Planetoid publishes no checksums: these files are fetched unverified (with a warning).
    "Cora": _files(_PLANETOID_URLS, {f"ind.cora.{k}": (None, None, None)
                                     for k in ("x", "y", "tx", "ty", "allx", "ally", "graph", "test.index")}),
}


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
    try:
        with opener(path, "rb") as f:
            data = f.read()
    except (EOFError, gzip.BadGzipFile) as e:
        raise LoomError(f"loom.data.datasets.read_idx: {path} is damaged ({e}); delete it and download it again, "
                        "or pass a folder holding a good copy") from e
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


def _split_files(train: bool) -> tuple[str, str]:
    split = "train" if train else "t10k"
    return f"{split}-images-idx3-ubyte.gz", f"{split}-labels-idx1-ubyte.gz"


def _find_idx(name: str, root, train: bool, download: bool, default_dirs: list[Path], hint: str) -> list[Path]:
    """The images and labels files of a split: in `root` (flat or root/<name>/raw) or the defaults, else downloaded."""
    dirs = [Path(root).expanduser(), Path(root).expanduser() / name / "raw"] if root is not None else \
        default_dirs + [data_home() / name / "raw"]
    target = (Path(root).expanduser() if root is not None else data_home()) / name / "raw"
    paths = []
    for filename in _split_files(train):
        res = RESOURCES[name][filename]
        # torchvision keeps the decompressed file beside the .gz; either is fine.
        candidates = [d / f for d in dirs for f in (filename, filename.removesuffix(".gz"))]
        paths.append(fetch(res, candidates, target if download else None, f"the {name} file", hint))
    return paths


class _IDXImages(Dataset):
    """Shared body of MNIST and Fashion-MNIST: uint8 [N, 28, 28] images and int64 labels from IDX files."""

    name = ""
    classes: list[str] = []
    default_dirs: tuple[str, ...] = ()
    hint = ""

    def __init__(self, root: str | os.PathLike | None = None, train: bool = True,
                 transform: Callable | None = None, target_transform: Callable | None = None,
                 download: bool = False) -> None:
        paths = _find_idx(self.name, root, train, download, [Path(d) for d in self.default_dirs], self.hint)
        self.root = Path(root) if root is not None else paths[0].parent
        self.train = train
        images, labels = read_idx(paths[0]), read_idx(paths[1]).astype(np.int64)
        if images.ndim != 3 or len(images) != len(labels):
            raise LoomError(f"loom.data.datasets.{type(self).__name__}: {paths[0]} has shape {images.shape} and "
                            f"{paths[1]} {labels.shape}; expected [N, H, W] images and N labels")
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


class FashionMNIST(_IDXImages):
    """Fashion-MNIST: 28x28 grey images of 10 clothing classes (60,000 train, 10,000 test).

    Parameters
    ----------
    root : str, optional
        Folder holding the four `*-idx?-ubyte.gz` files, directly or in
        torchvision's `root/FashionMNIST/raw`. Default: Debian's
        `/usr/share/datasets/fashion-mnist` (package `dataset-fashion-mnist`),
        then the cache `~/.cache/loom/data/FashionMNIST/raw`.
    train : bool
        The training split (default) or the test split.
    transform, target_transform : callable, optional
        Applied to the image (a uint8 NumPy array [28, 28], as torchvision
        gives a PIL image) and to the int label.
    download : bool
        Download missing files from the published mirrors into
        `root/FashionMNIST/raw` (or the cache). Default: False.

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

    name = "FashionMNIST"
    classes = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
               "Ankle boot"]
    default_dirs = (FASHION_MNIST_ROOT,)
    hint = ("Or install the Debian package dataset-fashion-mnist (apt-get install dataset-fashion-mnist), or pass "
            "root= the folder holding the *-ubyte.gz files (or root/FashionMNIST/raw).")


class MNIST(_IDXImages):
    """MNIST: 28x28 grey images of handwritten digits (60,000 train, 10,000 test).

    The same parameters and attributes as `FashionMNIST`; files are looked
    for in `root` (directly or in `root/MNIST/raw`), else in the cache
    `~/.cache/loom/data/MNIST/raw`, and downloaded with ``download=True``.

    Examples
    --------
    >>> ds = loom.data.datasets.MNIST("~/data", train=False, download=True)  # doctest: +SKIP
    >>> len(ds), ds[0][0].shape, ds[0][1]  # doctest: +SKIP
    (10000, (28, 28), 7)
    """

    name = "MNIST"
    classes = ["0 - zero", "1 - one", "2 - two", "3 - three", "4 - four", "5 - five", "6 - six", "7 - seven",
               "8 - eight", "9 - nine"]
    hint = "Or pass root= a folder holding the *-ubyte.gz files (or root/MNIST/raw)."


class _SafeUnpickler(pickle.Unpickler):
    """Unpickles only NumPy arrays, plain containers and SciPy CSR matrices (as `_CSR`): never arbitrary classes."""

    _ALLOWED = {("collections", "defaultdict"), ("builtins", "list"), ("builtins", "dict"), ("builtins", "set"),
                ("builtins", "object"), ("copyreg", "_reconstructor"), ("_codecs", "encode")}

    def find_class(self, module: str, name: str):
        module = {"__builtin__": "builtins", "copy_reg": "copyreg"}.get(module, module)  # Python 2 pickles.
        if (module, name) in self._ALLOWED:
            return super().find_class(module, name)
        if module.split(".")[0] == "numpy":
            if name == "_reconstruct":
                return np.ndarray.__reduce__(np.empty(0))[0]
            if name == "scalar":
                return np.float64(0).__reduce__()[0]
            if name in ("ndarray", "dtype"):
                return getattr(np, name)
        if module.startswith("scipy.sparse") and name == "csr_matrix":
            return _CSR
        raise pickle.UnpicklingError(f"loom.data.datasets: refusing to unpickle {module}.{name} (only arrays and "
                                     "containers are allowed)")


class _CSR:
    """The state of a pickled scipy.sparse.csr_matrix, enough to make it dense without SciPy."""

    data: np.ndarray
    indices: np.ndarray
    indptr: np.ndarray

    def toarray(self) -> np.ndarray:
        rows, cols = self.__dict__.get("_shape") or self.__dict__["shape"]  # Older SciPy stored `shape`.
        out = np.zeros((rows, cols), self.data.dtype)
        row_of = np.repeat(np.arange(rows), np.diff(self.indptr))
        out[row_of, self.indices] = self.data
        return out


def _unpickle(path: Path):
    with open(path, "rb") as f:
        return _SafeUnpickler(f, encoding="latin1").load()


def _extract(archive: Path, dest: Path, folder: str) -> Path:
    """Unpack `archive` (a .tar.gz holding `folder`) into dest/folder, via a temporary folder renamed into place."""
    dest.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=dest, prefix=f".{folder}."))
    try:
        with tarfile.open(archive, "r:gz") as tar:
            bad = [m.name for m in tar.getmembers()
                   if m.name.startswith(("/", "\\")) or ".." in Path(m.name).parts or not (m.isfile() or m.isdir())]
            if bad:
                raise LoomError(f"loom.data.datasets: {archive} holds unsafe members {bad[:3]}; not unpacking it")
            # The "data" filter where this Python has it (3.11.4+), the checks above where it has not.
            tar.extractall(tmp, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
        if not (tmp / folder).is_dir():
            raise LoomError(f"loom.data.datasets: {archive} does not hold the folder {folder}/")
        if not (dest / folder).exists():
            os.replace(tmp / folder, dest / folder)
        else:  # A partial earlier unpacking: complete it file by file.
            for src in sorted((tmp / folder).rglob("*")):
                if src.is_file():
                    out = dest / folder / src.relative_to(tmp / folder)
                    out.parent.mkdir(parents=True, exist_ok=True)
                    os.replace(src, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest / folder


class CIFAR10(Dataset):
    """CIFAR-10: 32x32 colour images of 10 classes (50,000 train, 10,000 test), from the "python version".

    Parameters
    ----------
    root : str, optional
        Folder holding `cifar-10-batches-py/` (torchvision's layout) or the
        `cifar-10-python.tar.gz` archive. Default: the cache
        `~/.cache/loom/data`.
    train : bool
        The five training batches (default) or the test batch.
    transform, target_transform : callable, optional
        Applied to the image (uint8 NumPy array [32, 32, 3], HWC) and to the label.
    download : bool
        Download (170 MB, SHA-256 checked) and unpack the archive into `root`
        if the batches are absent. Default: False.

    Attributes
    ----------
    data : numpy.ndarray
        uint8 [N, 32, 32, 3], as torchvision's `data`.
    targets : list of int
    classes : list of str

    Examples
    --------
    >>> ds = loom.data.datasets.CIFAR10("~/data", train=False, download=True)  # doctest: +SKIP
    >>> len(ds), ds[0][0].shape, ds.classes[ds[0][1]]  # doctest: +SKIP
    (10000, (32, 32, 3), 'cat')
    """

    name = "CIFAR10"
    folder = "cifar-10-batches-py"
    archive = "cifar-10-python.tar.gz"
    train_files = [f"data_batch_{i}" for i in range(1, 6)]
    test_files = ["test_batch"]
    meta_file, meta_key, label_key = "batches.meta", "label_names", "labels"

    def __init__(self, root: str | os.PathLike | None = None, train: bool = True,
                 transform: Callable | None = None, target_transform: Callable | None = None,
                 download: bool = False) -> None:
        self.root = Path(root).expanduser() if root is not None else data_home()
        self.train = train
        folder = self.root / self.folder
        names = self.train_files if train else self.test_files
        if not all((folder / n).is_file() for n in names + [self.meta_file]):
            res = RESOURCES[self.name][self.archive]
            archive = fetch(res, [self.root / self.archive], self.root if download else None,
                            f"the {self.name} archive",
                            f"(Looked for the unpacked batches in {folder} first.) Or pass root= the folder holding "
                            f"{self.folder}/ or {self.archive}.")
            folder = _extract(archive, self.root, self.folder)
        images, labels = [], []  # type: tuple[list[np.ndarray], list[int]]
        for n in names:
            batch = _unpickle(folder / n)
            images.append(np.asarray(batch["data"], np.uint8).reshape(-1, 3, 32, 32))
            labels.extend(int(v) for v in batch[self.label_key])
        self.data = np.ascontiguousarray(np.concatenate(images).transpose(0, 2, 3, 1))
        self.targets = labels
        self.classes = [str(c) for c in _unpickle(folder / self.meta_file)[self.meta_key]]
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
        self.transform, self.target_transform = transform, target_transform

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int):
        img, target = self.data[index], self.targets[index]
        if self.transform is not None:
            img = self.transform(img)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return img, target


class CIFAR100(CIFAR10):
    """CIFAR-100: as `CIFAR10` with 100 fine classes (`targets`); the archive's MD5 is checked (no SHA-256 found).

    Examples
    --------
    >>> ds = loom.data.datasets.CIFAR100("~/data", download=True)  # doctest: +SKIP
    >>> len(ds), len(ds.classes)  # doctest: +SKIP
    (50000, 100)
    """

    name = "CIFAR100"
    folder = "cifar-100-python"
    archive = "cifar-100-python.tar.gz"
    train_files = ["train"]
    test_files = ["test"]
    meta_file, meta_key, label_key = "meta", "fine_label_names", "fine_labels"


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
        The `input.txt`. Default: `$LOOM_DATA_DIR/tinyshakespeare/input.txt`,
        then the cache `~/.cache/loom/data/tinyshakespeare/input.txt`.
    block_size : int
        Context length of each example. Default: 128.
    train : bool or None
        True: the first 90% of the text (the customary split); False: the
        rest; None: all of it.
    download : bool
        Download the text (1.1 MB, SHA-256 checked) to `path` (or the cache)
        when it is absent. Default: False.

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
                 train: bool | None = True, download: bool = False) -> None:
        path = self.locate(path, download)
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

    @staticmethod
    def locate(path: str | os.PathLike | None = None, download: bool = False) -> Path:
        """The `input.txt` this class would read (found or downloaded), without reading it."""
        if path is not None:
            candidates, target = [Path(path).expanduser()], Path(path).expanduser().parent
        else:
            candidates = [data_dir() / "tinyshakespeare" / "input.txt", data_home() / "tinyshakespeare" / "input.txt"]
            target = data_home() / "tinyshakespeare"
        res = dataclasses.replace(RESOURCES["TinyShakespeare"]["input.txt"], filename=candidates[0].name)
        return fetch(res, candidates, target if download else None,
                     "the tinyshakespeare text", "Or pass path= the input.txt of karpathy/char-rnn's "
                     "data/tinyshakespeare, or set LOOM_DATA_DIR.")

    def __len__(self) -> int:
        return len(self.ids) - self.block_size

    def __getitem__(self, index: int):
        if not -len(self) <= index < len(self):
            raise LoomIndexError(f"loom.data.datasets.TinyShakespeare: index {index} out of range for {len(self)}")
        index %= len(self)
        chunk = self.ids[index:index + self.block_size + 1]
        return chunk[:-1], chunk[1:]


class Cora:
    """The Cora citation graph with the standard Planetoid split, from the `cora.npz` described in docs/data.md.

    Parameters
    ----------
    path : str, optional
        A `cora.npz` (or a folder holding one). Default:
        `$LOOM_DATA_DIR/cora/cora.npz`, then `~/.cache/loom/data/cora/cora.npz`.
        When it is absent, the Planetoid files `ind.cora.*` beside it (or in
        its `raw/` folder) are converted into it (`planetoid_to_npz`).
    download : bool
        Download the Planetoid files (kimiyoung/planetoid on GitHub; no
        published checksums, so they are not verified) when needed. Default: False.

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

    def __init__(self, path: str | os.PathLike | None = None, download: bool = False) -> None:
        path = self.locate(path, download)
        self.path = path
        with np.load(path, allow_pickle=False) as z:
            missing = [k for k in self._KEYS if k not in z.files]
            if missing:
                raise LoomError(f"loom.data.datasets.Cora: {path} lacks the arrays {missing}")
            for k in self._KEYS:
                setattr(self, k, z[k])
        self.num_nodes, self.num_features = self.features.shape
        self.num_classes = int(self.labels.max()) + 1

    @staticmethod
    def locate(path: str | os.PathLike | None = None, download: bool = False) -> Path:
        """The `cora.npz` this class would read (found, converted or downloaded and converted), without reading it."""
        if path is not None:
            path = Path(path).expanduser()
            candidates = [path / "cora.npz" if path.is_dir() else path]
        else:
            candidates = [data_dir() / "cora" / "cora.npz", data_home() / "cora" / "cora.npz"]
        found = next((c for c in candidates if c.is_file()), None)
        if found is None:
            out = candidates[-1]
            raw = out.parent / "raw"
            looked = ", ".join(str(c) for c in candidates)
            hint = (f"(Looked for the converted graph at {looked} first.) The Planetoid files are converted into "
                    f"{out}. Or pass path= a cora.npz as docs/data.md describes, or set LOOM_DATA_DIR.")
            files = [fetch(res, [raw / name, out.parent / name], raw if download else None,
                           "the Cora graph (cora.npz or the Planetoid ind.cora.* files)", hint)
                     for name, res in RESOURCES["Cora"].items()]
            found = planetoid_to_npz(files[0].parent, out)
        return found

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


def planetoid_to_npz(folder: str | os.PathLike, out: str | os.PathLike, name: str = "cora") -> Path:
    """Convert the Planetoid files `ind.<name>.*` (Yang et al. 2016) into the `cora.npz` arrays; return `out`.

    The conversion is the customary one (Kipf & Welling's `load_data`): the
    features and labels are `allx` then `tx` (test rows put at the node ids
    listed in `test.index`); training nodes are the first `len(y)` (140),
    validation the next 500, test the ids in `test.index` (sorted); `graph` (an
    adjacency dict) gives each undirected edge once (smaller id first, sorted),
    without self loops. The pickles are read by a restricted unpickler (arrays,
    containers and SciPy CSR matrices only; SciPy need not be installed). The
    file is written to a temporary name and renamed into place.

    Examples
    --------
    >>> planetoid_to_npz("~/planetoid/data", "/tmp/cora.npz")  # doctest: +SKIP
    PosixPath('/tmp/cora.npz')
    """
    folder, out = Path(folder).expanduser(), Path(out).expanduser()

    def load(key):
        obj = _unpickle(folder / f"ind.{name}.{key}")
        return obj.toarray() if isinstance(obj, _CSR) else np.asarray(obj) if key not in ("graph",) else obj

    x, y, tx, ty, allx, ally, graph = (load(k) for k in ("x", "y", "tx", "ty", "allx", "ally", "graph"))
    test_ids = np.array([int(v) for v in (folder / f"ind.{name}.test.index").read_text().split()], np.int64)
    features = np.concatenate([allx, tx]).astype(np.float32)
    onehot = np.concatenate([ally, ty])
    if len(test_ids) != len(tx) or test_ids.max() >= len(features) or len(y) != len(x):
        raise LoomError(f"loom.data.datasets.planetoid_to_npz: {folder} holds {len(tx)} test rows for "
                        f"{len(test_ids)} test ids (max {test_ids.max()}) and {len(features)} nodes; the files do "
                        "not belong together")
    order = np.arange(len(features))
    order[test_ids] = np.arange(len(allx), len(features))  # Row of the stacked arrays that holds node i.
    features, onehot = features[order], onehot[order]
    edges = {(min(int(a), int(b)), max(int(a), int(b))) for a, nbrs in graph.items() for b in nbrs if int(a) != int(b)}
    arrays = {
        "features": features,
        "labels": onehot.argmax(1).astype(np.int64),
        "edges": np.array(sorted(edges), np.int64).reshape(-1, 2).T.copy(),
        "train_idx": np.arange(len(y), dtype=np.int64),
        "val_idx": np.arange(len(y), len(y) + 500, dtype=np.int64),
        "test_idx": np.sort(test_ids),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".part")
    with open(tmp, "wb") as f:
        np.savez(f, **arrays)
    os.replace(tmp, out)
    return out
