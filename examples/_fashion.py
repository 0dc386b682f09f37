"""Fashion-MNIST for the example trainings, with scikit-learn's digits as the fallback.

The four Fashion-MNIST examples (MLP, CNN, ResNet, DCGAN) load their data here,
so the missing-data message, the fallback and the smoke-run subsets read the
same everywhere. Fashion-MNIST comes from ``--data DIR`` if given, else from
Debian's ``dataset-fashion-mnist`` package (``/usr/share/datasets/fashion-mnist``)
or loom's cache (``~/.cache/loom/data/FashionMNIST/raw``), where it is
downloaded (30 MB, checksummed) when missing unless ``--no-download`` is
given. When it cannot be had the examples say why and train on scikit-learn's
8x8 digits, scaled up to 28x28 (each pixel repeated 3x3, then 2 pixels of zero
border), unless ``--no-fallback`` is given.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
from _common import Timer, download_allowed, example_parser, fmt_seconds, plot_curves, progress

import loom
import loom.nn.functional as F
from loom.data import DataLoader, Dataset, RandomSampler, Subset
from loom.data import transforms as T
from loom.data.datasets import Digits, FashionMNIST

# Mean and standard deviation of the Fashion-MNIST training pixels (after ToTensor's scaling to [0, 1]).
MEAN, STD = 0.2860, 0.3530
normalize = T.Normalize((MEAN,), (STD,))


def fashion_parser(name: str, doc: str | None) -> argparse.ArgumentParser:
    """`_common.example_parser` with ``--data``, ``--download``/``--no-download`` and ``--no-fallback``."""
    p = example_parser(name, doc, None, "the folder holding the Fashion-MNIST *-ubyte.gz files (default: Debian's "
                       "/usr/share/datasets/fashion-mnist, then ~/.cache/loom/data/FashionMNIST/raw, downloading "
                       "there if missing)")
    p.add_argument("--no-fallback", action="store_true",
                   help="exit with an error instead of training on scikit-learn's digits when Fashion-MNIST is "
                        "missing")
    return p


@dataclass
class ImageData:
    """The train and test splits of a 28x28 grey-image classification set."""

    name: str
    train: Dataset
    test: Dataset
    classes: Sequence[str]


def _digit_to_28(img: np.ndarray) -> np.ndarray:
    """An 8x8 uint8 digit as a 28x28 image: each pixel repeated 3x3, then a 2-pixel zero border."""
    return np.pad(np.kron(img, np.ones((3, 3), img.dtype)), 2)


def load_images(root: str | Path | None = None, fallback: bool = True, download: bool | None = None) -> ImageData:
    """Fashion-MNIST ([1, 28, 28] float32 tensor in [0, 1], int label) pairs, found or downloaded.

    `root` None searches Debian's folder and loom's cache and downloads into
    the cache if needed; a `root` is used as it is, downloading into it only
    with ``download=True`` (`_common.download_allowed`).

    Normalise whole batches (``normalize(x)``, a `loom.data.transforms.Normalize`)
    rather than single images: every lazy op costs the same Python overhead
    whatever its size, so per-image Normalize would cost more than the MLP's step.

    If the data cannot be had this prints loom.data's message (the paths looked
    at, the URL, and that the Debian package ``dataset-fashion-mnist`` provides
    it), then either exits with status 2 (``fallback=False``) or returns
    scikit-learn's digits at 28x28 instead.

    Examples
    --------
    >>> data = load_images()  # doctest: +SKIP
    >>> len(data.train), len(data.test), data.train[0][0].shape
    (60000, 10000, loom.Size([1, 28, 28]))
    """
    to_tensor = T.ToTensor()
    allow = download_allowed(root, download)
    try:
        return ImageData("Fashion-MNIST", FashionMNIST(root, train=True, transform=to_tensor, download=allow),
                         FashionMNIST(root, train=False, transform=to_tensor, download=allow), FashionMNIST.classes)
    except FileNotFoundError as e:
        msg = f"Fashion-MNIST is not available. {e}"
        if not allow:
            msg += "\n(--download fetches it from the published mirrors.)"
    if not fallback:
        print(f"error: {msg}", file=sys.stderr)
        raise SystemExit(2)
    print(f"warning: {msg}\nFalling back to scikit-learn's 8x8 digits, scaled up to 28x28 (--no-fallback to refuse).",
          file=sys.stderr)
    digits = T.Compose([T.Lambda(_digit_to_28), to_tensor])
    return ImageData("digits (fallback)", Digits(train=True, transform=digits), Digits(train=False, transform=digits),
                     Digits.classes)


def head(ds: Dataset, n: int | None) -> Dataset:
    """The first `n` examples of `ds` (all of them for None)."""
    return ds if n is None or n >= len(ds) else Subset(ds, range(n))


# The splits of a --smoke run: a few batches, so every example runs in seconds.
SMOKE_TRAIN, SMOKE_TEST = 256, 128


def make_loaders(data: ImageData, batch_size: int, seed: int, smoke: bool = False,
                 samples_per_epoch: int | None = None, test_batch_size: int = 64) -> tuple[DataLoader, DataLoader]:
    """Shuffled training batches (`samples_per_epoch` images drawn afresh each epoch; all by default) and test batches.

    A smoke run keeps only the first SMOKE_TRAIN training and SMOKE_TEST test images.
    Test batches stay small for the conv nets: the reference interpreter allocates
    every intermediate afresh, and arrays above glibc's 32 MB mmap threshold come
    from new pages each time (a batch of 250 tested 2-3x slower per image than 64).
    """
    train, test = (head(data.train, SMOKE_TRAIN), head(data.test, SMOKE_TEST)) if smoke else (data.train, data.test)
    n = min(samples_per_epoch or len(train), len(train))
    sampler = RandomSampler(train, num_samples=n, generator=loom.Generator(seed))
    return DataLoader(train, batch_size=batch_size, sampler=sampler), DataLoader(test, batch_size=test_batch_size)


@loom.no_grad()
def accuracy(model: loom.nn.Module, loader) -> float:
    """Fraction of the loader's examples that `model` (put in eval mode) classifies correctly."""
    model.eval()
    correct = total = 0
    for x, y in loader:
        correct += int((model(normalize(x)).argmax(1) == y).sum().item())
        total += len(y)
    return correct / max(total, 1)


def fit(model: loom.nn.Module, optimizer: loom.optim.Optimizer, train_loader, test_loader, epochs: int,
        scheduler=None, desc: str = "train", progress_bar: bool = True, test_each_epoch: bool = True) -> dict:
    """Train a classifier with cross-entropy, testing after every epoch (or only the last); returns the history.

    The history holds the loss of every step (``step_loss``), the mean loss and
    wall time of every epoch (``epoch_loss``, ``epoch_seconds``, training only)
    and the test accuracy after it (``test_acc``). `scheduler`, if given, steps
    once per batch.
    """
    hist: dict[str, list] = {"step_loss": [], "epoch_loss": [], "epoch_steps": [], "epoch_seconds": [],
                             "test_acc": []}
    for epoch in range(1, epochs + 1):
        model.train()
        timer = Timer()
        losses = []
        bar = progress(train_loader, desc=f"{desc} epoch {epoch}/{epochs}", disable=not progress_bar)
        for x, y in bar:
            loss = F.cross_entropy(model(normalize(x)), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
            losses.append(loss.item())
            bar.set_postfix(loss=f"{losses[-1]:.3f}")
        bar.close()
        hist["epoch_seconds"].append(timer.elapsed())
        hist["step_loss"] += losses
        hist["epoch_steps"].append(len(losses))
        hist["epoch_loss"].append(float(np.mean(losses)))
        tested = ""
        if test_each_epoch or epoch == epochs:
            hist["test_acc"].append(accuracy(model, test_loader))
            tested = f", test accuracy {hist['test_acc'][-1]:.4f}"
        print(f"epoch {epoch}: train loss {hist['epoch_loss'][-1]:.4f}{tested}, "
              f"{fmt_seconds(hist['epoch_seconds'][-1])} training", flush=True)
    return hist


def plot_history(path: Path, hist: dict, title: str) -> Path:
    """The loss-curve PNG: the loss of every step and each epoch's mean (drawn at the epoch's last step)."""
    steps = np.arange(1, len(hist["step_loss"]) + 1)
    ends = np.cumsum(hist["epoch_steps"])
    return plot_curves(path, {"train loss (per step)": (steps, hist["step_loss"]),
                              "train loss (epoch mean)": (ends, hist["epoch_loss"])},
                       xlabel="step", ylabel="cross-entropy", title=title)


def write_metrics(out: Path, **metrics) -> Path:
    """Write `metrics.json` in `out` (the figures a run reports, read back by the tests)."""
    path = Path(out) / "metrics.json"
    path.write_text(json.dumps(metrics, indent=1))
    return path
