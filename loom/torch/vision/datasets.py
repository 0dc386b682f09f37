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

from pathlib import Path
from typing import Callable

import numpy as np

from loom.data import datasets as _D

try:
    from PIL import Image
except ImportError:  # Without Pillow, images are uint8 NumPy arrays.
    Image = None  # type: ignore[assignment]

__all__ = ["CIFAR10", "CIFAR100", "FashionMNIST", "MNIST", "VisionDataset"]


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
    (loom.Size([1, 28, 28]), 7)
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
