"""device="cuda" never silently gives a CPU tensor: without a GPU every way of asking raises DeviceError."""
import inspect

import pytest

import loom
import loom.nn as nn
from loom.errors import DeviceError

FACTORIES = {
    "tensor": lambda d: loom.tensor([1.0], device=d),
    "as_tensor": lambda d: loom.as_tensor([1.0], device=d),
    "zeros": lambda d: loom.zeros(2, device=d),
    "ones": lambda d: loom.ones(2, device=d),
    "empty": lambda d: loom.empty(2, device=d),
    "full": lambda d: loom.full((2,), 1.0, device=d),
    "arange": lambda d: loom.arange(3, device=d),
    "linspace": lambda d: loom.linspace(0, 1, 3, device=d),
    "logspace": lambda d: loom.logspace(0, 1, 3, device=d),
    "eye": lambda d: loom.eye(2, device=d),
    "rand": lambda d: loom.rand(2, device=d),
    "randn": lambda d: loom.randn(2, device=d),
    "randint": lambda d: loom.randint(0, 3, (2,), device=d),
    "randperm": lambda d: loom.randperm(3, device=d),
    "zeros_like": lambda d: loom.zeros_like(loom.zeros(2), device=d),
    "ones_like": lambda d: loom.ones_like(loom.zeros(2), device=d),
    "empty_like": lambda d: loom.empty_like(loom.zeros(2), device=d),
    "full_like": lambda d: loom.full_like(loom.zeros(2), 1.0, device=d),
    "rand_like": lambda d: loom.rand_like(loom.zeros(2), device=d),
    "randn_like": lambda d: loom.randn_like(loom.zeros(2), device=d),
    "randint_like": lambda d: loom.randint_like(loom.zeros(2), 3, device=d),
    "Tensor.to": lambda d: loom.zeros(2).to(d),
    "Tensor.cuda": lambda d: loom.zeros(2).cuda(),
    "Module.to": lambda d: nn.Linear(2, 2).to(d),
    "Module.cuda": lambda d: nn.Linear(2, 2).cuda(),
}


@pytest.mark.parametrize("name", sorted(FACTORIES))
@pytest.mark.parametrize("device", ["cuda", "cuda:0", loom.device("cuda", 1)])
def test_cuda_request_raises(name, device):
    with pytest.raises(DeviceError, match=r"loom\.\S+: device cuda(:\d)? is not available"):
        FACTORIES[name](device)


def _module_classes_with_device():
    for name in dir(nn):
        cls = getattr(nn, name)
        if isinstance(cls, type) and issubclass(cls, nn.Module) and "device" in inspect.signature(cls).parameters:
            yield name


ARGS = {"Embedding": (5, 3), "EmbeddingBag": (5, 3), "Bilinear": (2, 2, 2), "PReLU": (),
        "MultiheadAttention": (4, 2), "Transformer": (), "TransformerEncoderLayer": (4, 2),
        "TransformerDecoderLayer": (4, 2), "LSTM": (2, 3), "GRU": (2, 3), "RNN": (2, 3), "LSTMCell": (2, 3),
        "GRUCell": (2, 3), "RNNCell": (2, 3), "RNNBase": ("LSTM", 2, 3), "LayerNorm": (3,), "GroupNorm": (1, 2),
        "RMSNorm": (3,), "AdaptiveLogSoftmaxWithLoss": (8, 10, [4])}


@pytest.mark.parametrize("name", sorted(_module_classes_with_device()))
def test_every_module_with_a_device_argument_refuses_cuda(name):
    cls = getattr(nn, name)
    args = ARGS.get(name)
    if args is None:
        args = (2, 2, 1) if "Conv" in name else (2,) if "Norm" in name or "Instance" in name else (2, 2)
    cls(*args)  # The same arguments build on the cpu...
    with pytest.raises(DeviceError, match=rf"loom\.nn\.{name}: device cuda is not available"):
        cls(*args, device="cuda")  # ...and refuse cuda by name.


def test_cpu_is_accepted_everywhere():
    assert loom.zeros(2, device="cpu").device == loom.device("cpu")
    assert nn.Linear(2, 2, device="cpu").weight.device.type == "cpu"
