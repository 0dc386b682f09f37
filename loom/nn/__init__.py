"""Neural-network building blocks, as `torch.nn`: Module, Parameter, layers, losses, init and utils.

`loom.nn.functional` holds the PyTorch-named ops the layers call.

Examples
--------
>>> net = loom.nn.Sequential(loom.nn.Linear(4, 8), loom.nn.ReLU(), loom.nn.Linear(8, 2))
>>> net(loom.randn(3, 4)).shape
loom.Size([3, 2])
"""
from loom.nn import functional, init  # noqa: F401
from loom.nn.module import Module
from loom.nn.modules import *  # noqa: F401,F403
from loom.nn.modules import __all__ as _modules_all
from loom.nn.parameter import Buffer, Parameter
from loom.nn import utils  # noqa: E402,F401
from loom.nn import parallel  # noqa: E402,F401

__all__ = (["functional", "init", "utils", "parallel", "Module", "Parameter", "Buffer"]
           + [n for n in _modules_all if n != "Module"])
