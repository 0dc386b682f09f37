"""Resolve `import torch` (and `torchvision`) to loom for this process: an import hook.

A meta-path finder placed before the normal ones answers `torch` and every
`torch.X` with `loom.torch` and `loom.torch.X` (`torchvision` with
`loom.torch.vision`): the module object is loom's, registered under both names,
so `import torch.nn as nn` and `from torch.utils.data import DataLoader` work.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

ALIASES = {"torch": "loom.torch", "torchvision": "loom.torch.vision"}


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec):
        return importlib.import_module(self.target)

    def exec_module(self, module) -> None:
        pass  # Already executed under its loom name.


class TorchAliasFinder(importlib.abc.MetaPathFinder):
    """Finds `torch[.X]` as `loom.torch[.X]` and `torchvision[.X]` as `loom.torch.vision[.X]`."""

    def find_spec(self, fullname: str, path=None, target=None):
        head, _, rest = fullname.partition(".")
        if head not in ALIASES:
            return None
        real = ALIASES[head] + ("." + rest if rest else "")
        try:
            found = importlib.util.find_spec(real)
        except ModuleNotFoundError:
            found = None
        if found is None:  # Never fall through to a real PyTorch: it would mix with loom's modules.
            raise ModuleNotFoundError(f"No module named {fullname!r}: loom runs this script in place of PyTorch "
                                      f"and {real} does not exist (yet)", name=fullname)
        spec = importlib.util.spec_from_loader(fullname, _AliasLoader(real))
        return spec


def install() -> None:
    """Make `torch` and `torchvision` imports in this process resolve to loom."""
    for name in [n for n in sys.modules if n.partition(".")[0] in ALIASES]:
        del sys.modules[name]  # A real PyTorch imported earlier must not answer later imports.
    if not any(isinstance(f, TorchAliasFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, TorchAliasFinder())
