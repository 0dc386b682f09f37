"""The examples in loom.data's docstrings run and print what they say."""
import doctest
import importlib
import os

import numpy as np
import pytest

import loom
from loom.data import datasets

MODULES = ["loom.data", "loom.data.dataset", "loom.data.sampler", "loom.data.collate", "loom.data.dataloader",
           "loom.data.worker", "loom.data.records", "loom.data.pipeline", "loom.data.transforms", "loom.data.text",
           "loom.data._random", "loom.utils.data", "loom.data.datasets", "loom.data.download",
           "loom.data.distributed"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    if name == "loom.data.datasets":
        needed = [os.path.join(datasets.FASHION_MNIST_ROOT, "t10k-images-idx3-ubyte.gz"),
                  datasets.data_dir() / "tinyshakespeare" / "input.txt", datasets.data_dir() / "cora" / "cora.npz"]
        missing = [str(p) for p in needed if not os.path.exists(p)]
        if missing:
            pytest.skip(f"the dataset examples read {missing}, which are absent here")
    module = importlib.import_module(name)
    result = doctest.testmod(module, extraglobs={"loom": loom, "np": np},
                             optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
