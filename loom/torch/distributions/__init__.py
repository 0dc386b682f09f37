"""`torch.distributions`: loom.distributions under PyTorch's name.

Its submodules answer under PyTorch's names too (`torch.distributions.normal`,
`torch.distributions.constraints`, `torch.distributions.kl`, ...): they are
loom.distributions' own modules, registered here.
"""
import importlib as _importlib
import pkgutil as _pkgutil
import sys as _sys

import loom.distributions as _distributions
from loom.distributions import *  # noqa: F401,F403
from loom.distributions import __all__  # noqa: F401
from loom.torch._forward import install as _install

for _info in _pkgutil.iter_modules(_distributions.__path__):
    _module = _importlib.import_module(f"loom.distributions.{_info.name}")
    _sys.modules.setdefault(f"{__name__}.{_info.name}", _module)
    globals().setdefault(_info.name, _module)

_install(globals(), "loom.distributions")
