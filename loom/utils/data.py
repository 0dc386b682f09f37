"""`loom.utils.data` is `loom.data`, under PyTorch's `torch.utils.data` name.

The module and its submodules are the same objects as `loom.data`'s (no
second copy of any class), so `loom.utils.data.transforms is loom.data.transforms`.

Examples
--------
>>> from loom.utils.data import DataLoader
>>> DataLoader is loom.data.DataLoader
True
"""
import importlib
import pkgutil
import sys

import loom.data as _data

for _info in pkgutil.iter_modules(_data.__path__):
    sys.modules[f"{__name__}.{_info.name}"] = importlib.import_module(f"loom.data.{_info.name}")
sys.modules[__name__] = _data
