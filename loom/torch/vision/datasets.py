"""torchvision.datasets over loom: MNIST, FashionMNIST, CIFAR10, CIFAR100 with torchvision's signature and layout.

``MNIST(root, train=True, transform=None, target_transform=None,
download=False)``: the files live in ``root/MNIST/raw`` (``root/FashionMNIST/raw``,
``root/cifar-10-batches-py``), as torchvision puts them, so a folder
torchvision downloaded into is read as it is. Items are ``(image, int label)``;
the image is a PIL image (mode "L" for MNIST, "RGB" for CIFAR) as torchvision
gives, or, without Pillow, a uint8 NumPy array (HW or HWC) that every
`loom.torch.vision.transforms` transform accepts. Downloads are checksummed
and resumable (`loom.data.download`).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from loom.data import datasets as _D
from loom.data.dataset import Dataset
from loom.data.errors import LoomFileNotFoundError
from loom.errors import LoomError, LoomIndexError

try:
    from PIL import Image
except ImportError:  # Without Pillow, images are uint8 NumPy arrays.
    Image = None  # type: ignore[assignment]

__all__ = ["CIFAR10", "CIFAR100", "DatasetFolder", "FakeData", "FashionMNIST", "ImageFolder", "MNIST", "VisionDataset"]


def _to_image(arr: np.ndarray):
    return Image.fromarray(arr) if Image is not None else arr


class VisionDataset:
    """What the torchvision data sets share here: `root`, the transforms, PIL items and torchvision's repr."""

    images: np.ndarray
    root: Path
    train: bool
    transform: Callable | None

    def _item(self, img: np.ndarray, target: int, transform: Callable | None, target_transform: Callable | None):
        img = _to_image(img)
        if transform is not None:
            img = transform(img)
        if target_transform is not None:
            target = target_transform(target)
        return img, target

    def __repr__(self) -> str:
        lines = [f"Dataset {type(self).__name__}", f"    Number of datapoints: {len(self)}",  # type: ignore[arg-type]
                 f"    Root location: {self.root}", f"    Split: {'Train' if self.train else 'Test'}"]
        if self.transform is not None:
            lines.append(f"    StandardTransform\nTransform: {self.transform!r}")
        return "\n".join(lines)


class MNIST(VisionDataset, _D.MNIST):
    """torchvision.datasets.MNIST: 28x28 handwritten digits; `data` uint8 [N, 28, 28], `targets` int64 [N].

    Parameters
    ----------
    root : str
        Folder holding `MNIST/raw/` (the four `*-ubyte[.gz]` files).
    train : bool
        60,000 training or 10,000 test images.
    transform, target_transform : callable, optional
    download : bool
        Fetch missing files from the published mirrors into `root/MNIST/raw`.

    Examples
    --------
    >>> from loom.torch.vision import datasets, transforms
    >>> ds = datasets.MNIST("data", train=False, download=True, transform=transforms.ToTensor())  # doctest: +SKIP
    >>> ds[0][0].shape, ds[0][1]  # doctest: +SKIP
    (torch.Size([1, 28, 28]), 7)
    """

    def __init__(self, root, train: bool = True, transform: Callable | None = None,
                 target_transform: Callable | None = None, download: bool = False) -> None:
        _D.MNIST.__init__(self, root, train=train, download=download)
        self.transform, self.target_transform = transform, target_transform

    @property
    def raw_folder(self) -> str:
        return str(self.root / type(self).__name__ / "raw")

    @property
    def class_to_idx(self) -> dict[str, int]:
        return {c: i for i, c in enumerate(self.classes)}

    def __getitem__(self, index: int):
        return self._item(self.images[index], int(self.labels[index]), self.transform, self.target_transform)


class FashionMNIST(MNIST):
    """torchvision.datasets.FashionMNIST: 28x28 clothing images, files in `root/FashionMNIST/raw`.

    Examples
    --------
    >>> from loom.torch.vision import datasets
    >>> len(datasets.FashionMNIST("data", train=False, download=True))  # doctest: +SKIP
    10000
    """

    name = _D.FashionMNIST.name
    classes = _D.FashionMNIST.classes
    hint = _D.FashionMNIST.hint


class CIFAR10(VisionDataset, _D.CIFAR10):
    """torchvision.datasets.CIFAR10: 32x32 RGB images; `data` uint8 [N, 32, 32, 3], `targets` list of int.

    Parameters
    ----------
    root : str
        Folder holding `cifar-10-batches-py/` or `cifar-10-python.tar.gz`.
    train, transform, target_transform, download
        As torchvision.

    Examples
    --------
    >>> from loom.torch.vision import datasets
    >>> ds = datasets.CIFAR10("data", train=False, download=True)  # doctest: +SKIP
    >>> ds[0][0].size, ds.classes[ds[0][1]]  # doctest: +SKIP
    ((32, 32), 'cat')
    """

    def __init__(self, root, train: bool = True, transform: Callable | None = None,
                 target_transform: Callable | None = None, download: bool = False) -> None:
        _D.CIFAR10.__init__(self, root, train=train, download=download)
        self.transform, self.target_transform = transform, target_transform

    def __getitem__(self, index: int):
        return self._item(self.data[index], self.targets[index], self.transform, self.target_transform)


class CIFAR100(CIFAR10):
    """torchvision.datasets.CIFAR100: as CIFAR10 with the 100 fine labels; files in `root/cifar-100-python`.

    Examples
    --------
    >>> from loom.torch.vision import datasets
    >>> len(datasets.CIFAR100("data", download=True).classes)  # doctest: +SKIP
    100
    """

    name = _D.CIFAR100.name
    folder = _D.CIFAR100.folder
    archive = _D.CIFAR100.archive
    train_files = _D.CIFAR100.train_files
    test_files = _D.CIFAR100.test_files
    meta_file, meta_key, label_key = _D.CIFAR100.meta_file, _D.CIFAR100.meta_key, _D.CIFAR100.label_key


IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def pil_loader(path: str):
    """Open an image file as an RGB PIL image (needs Pillow)."""
    if Image is None:
        raise LoomError(f"loom.torch.vision.datasets: reading {path} needs Pillow (pip install pillow)")
    with open(path, "rb") as f:
        return Image.open(f).convert("RGB")


default_loader = pil_loader


class DatasetFolder(Dataset):
    """Samples in `root/<class>/**/<file>`, classes the sorted sub-folder names (torchvision.datasets.DatasetFolder).

    Parameters
    ----------
    root : str
    loader : callable
        path -> sample.
    extensions : tuple of str, optional
        The file name endings kept (case-insensitive); or give `is_valid_file`.
    transform, target_transform : callable, optional
    is_valid_file : callable, optional
        path -> bool.
    allow_empty : bool
        Accept class folders without any file. Default: False.

    Attributes
    ----------
    classes : list of str
    class_to_idx : dict
    samples : list of (path, class index)
    targets : list of int
    """

    def __init__(self, root, loader: Callable, extensions: Sequence[str] | None = None,
                 transform: Callable | None = None, target_transform: Callable | None = None,
                 is_valid_file: Callable[[str], bool] | None = None, allow_empty: bool = False) -> None:
        self.root = os.fspath(os.path.expanduser(root))
        if (extensions is None) == (is_valid_file is None):
            raise LoomError("loom.torch.vision.datasets.DatasetFolder: give either extensions or is_valid_file")
        if is_valid_file is None:
            ends = tuple(e.lower() for e in extensions or ())
            is_valid_file = lambda p: p.lower().endswith(ends)  # noqa: E731
        if not os.path.isdir(self.root):
            raise LoomFileNotFoundError(f"loom.torch.vision.datasets.{type(self).__name__}: {self.root!r} is not a "
                                        "folder")
        self.classes = sorted(e.name for e in os.scandir(self.root) if e.is_dir())
        if not self.classes:
            raise LoomFileNotFoundError(f"loom.torch.vision.datasets.{type(self).__name__}: no class folder in "
                                        f"{self.root!r} (expected root/<class>/<files>)")
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
        self.samples: list[tuple[str, int]] = []
        empty = []
        for c in self.classes:
            before = len(self.samples)
            for folder, _, files in sorted(os.walk(os.path.join(self.root, c), followlinks=True)):
                for name in sorted(files):
                    path = os.path.join(folder, name)
                    if is_valid_file(path):
                        self.samples.append((path, self.class_to_idx[c]))
            if len(self.samples) == before:
                empty.append(c)
        if empty and not allow_empty:
            what = f"extensions {tuple(extensions)}" if extensions is not None else "is_valid_file"
            raise LoomFileNotFoundError(f"loom.torch.vision.datasets.{type(self).__name__}: no valid file (by "
                                        f"{what}) for the classes {empty} in {self.root!r}")
        self.imgs = self.samples
        self.targets = [t for _, t in self.samples]
        self.loader, self.extensions = loader, extensions
        self.transform, self.target_transform = transform, target_transform

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int):
        path, target = self.samples[index]
        sample = self.loader(path)
        if self.transform is not None:
            sample = self.transform(sample)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return sample, target


class ImageFolder(DatasetFolder):
    """Images in `root/<class>/**/<image>` (jpg, png, ...) as RGB PIL images (torchvision.datasets.ImageFolder).

    Examples
    --------
    >>> from loom.torch.vision import datasets
    >>> ds = datasets.ImageFolder("photos")  # doctest: +SKIP
    >>> ds.classes, ds[0][0].mode  # doctest: +SKIP
    (['cat', 'dog'], 'RGB')
    """

    def __init__(self, root, transform: Callable | None = None, target_transform: Callable | None = None,
                 loader: Callable = default_loader, is_valid_file: Callable[[str], bool] | None = None,
                 allow_empty: bool = False) -> None:
        super().__init__(root, loader, IMG_EXTENSIONS if is_valid_file is None else None, transform,
                         target_transform, is_valid_file, allow_empty)


class FakeData(Dataset):
    """Random images and labels, as torchvision.datasets.FakeData; item `i` is the same on every call.

    The image is uint8 noise (a PIL image; an array without Pillow) and the
    label an int below `num_classes`, both drawn from a NumPy generator seeded
    with ``i + random_offset`` (torchvision draws from torch's, so the values differ).

    Examples
    --------
    >>> from loom.torch.vision import datasets, transforms
    >>> ds = datasets.FakeData(size=4, image_size=(3, 8, 6), transform=transforms.ToTensor())
    >>> x, y = ds[0]
    >>> len(ds), x.shape, 0 <= y < 10
    (4, torch.Size([3, 8, 6]), True)
    """

    def __init__(self, size: int = 1000, image_size: Sequence[int] = (3, 224, 224), num_classes: int = 10,
                 transform: Callable | None = None, target_transform: Callable | None = None,
                 random_offset: int = 0) -> None:
        self.size, self.image_size, self.num_classes = int(size), tuple(image_size), int(num_classes)
        self.transform, self.target_transform, self.random_offset = transform, target_transform, random_offset

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int):
        if not 0 <= index < self.size:
            raise LoomIndexError(f"loom.torch.vision.datasets.FakeData: index {index} out of range for {self.size}")
        rng = np.random.default_rng(index + self.random_offset)
        c, h, w = self.image_size
        img = rng.integers(0, 256, (h, w, c), dtype=np.uint8)
        target = int(rng.integers(0, self.num_classes))
        img = _to_image(img[:, :, 0] if c == 1 else img)
        if self.transform is not None:
            img = self.transform(img)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return img, target
