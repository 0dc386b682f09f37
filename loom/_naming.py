"""The namespace ("loom" or "torch") user-facing names print in, read from the code that asks.

One loom process can serve a native program (`import loom`) and a PyTorch
program (`import loom.torch as torch`) at once, and the same dtype object is
`loom.float32` to the first and `torch.float32` to the second. A repr cannot be
told who asked, so it looks: the first calling frame outside loom's files whose module
has imported loom decides, by whether it imported `loom.torch` (or one of its
submodules, or runs with `torch` resolved to it by `python -m loom.torch`).
"""
from __future__ import annotations

import os
import sys
from types import ModuleType

# PyTorch's legacy tensor type names (`x.type()`, `torch.typename`), by dtype name.
TORCH_TYPE_NAMES = {"float32": "FloatTensor", "float64": "DoubleTensor", "float16": "HalfTensor",
                    "bfloat16": "BFloat16Tensor", "int64": "LongTensor", "int32": "IntTensor",
                    "int16": "ShortTensor", "int8": "CharTensor", "uint8": "ByteTensor", "bool": "BoolTensor"}

_MAX_DEPTH = 64
_LOOM_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep  # Frames of loom's own code never decide.


def _is_loom(name: str) -> bool:
    return name == "loom" or name.startswith("loom.")


def _is_torch(name: str) -> bool:
    return name == "loom.torch" or name.startswith("loom.torch.")


def _is_tf(name: str) -> bool:
    return name == "loom.tf" or name.startswith("loom.tf.")


def _decide(g: dict) -> str | None:
    """"torch", "tf" or "loom" when the module with globals `g` imported that frontend, else None."""
    seen_loom = seen_tf = False
    for v in list(g.values()):
        if isinstance(v, ModuleType):
            name = v.__name__
            if _is_torch(name):
                return "torch"
            seen_tf = seen_tf or _is_tf(name)
            seen_loom = seen_loom or _is_loom(name)
    return "tf" if seen_tf else "loom" if seen_loom else None


# How a frontend prints a tensor: {"tf": fn(tensor, is_repr) -> str}, registered by the frontend.
TENSOR_TEXT: dict = {}


def namespace() -> str:
    """"torch" or "tf" when the code asking for a name is a loom.torch or loom.tf program, "loom" otherwise."""
    f = sys._getframe(1)
    for _ in range(_MAX_DEPTH):
        if f is None:
            break
        if not f.f_code.co_filename.startswith(_LOOM_DIR):
            # A function's own `import loom.torch as torch` first, then its module's imports.
            found = (_decide(f.f_locals) if f.f_locals is not f.f_globals else None) or _decide(f.f_globals)
            if found is not None:
                return found
        f = f.f_back
    torch = sys.modules.get("torch")  # `python -m loom.torch script.py`: `torch` is loom.torch.
    return "torch" if isinstance(torch, ModuleType) and _is_torch(torch.__name__) else "loom"


def operator_caller(skip_file: str) -> str | None:
    """The frontend ("tf", "torch", "loom") of the user code that applied an operator, None for loom's own code.

    Frames of `skip_file` (the operator's own module) are passed over; the first other frame decides.
    """
    f = sys._getframe(2)
    while f is not None and f.f_code.co_filename == skip_file:
        f = f.f_back
    if f is None or f.f_code.co_filename.startswith(_LOOM_DIR):
        return None
    return (_decide(f.f_locals) if f.f_locals is not f.f_globals else None) or _decide(f.f_globals)


_GRAD_FN_NAMES = {"matmul": "Mm", "reshape": "View"}


def grad_fn_name(prim: str) -> str:
    """A backward record's name: "MulBackward", and PyTorch's "MulBackward0" to a loom.torch program."""
    if namespace() != "torch":
        return f"{prim.capitalize()}Backward"
    name = _GRAD_FN_NAMES.get(prim) or "".join(p.capitalize() for p in prim.split("_"))
    return f"{name}Backward0"
