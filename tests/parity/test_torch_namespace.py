"""Every parity case once more, with its body given `loom.torch` instead of `loom`.

The bodies are written against PyTorch's API; run with `loom.torch` they
resolve every name through PyTorch's namespace over loom (`torch.nn.functional`
included), so a name the torch frontend lacks, or one it maps to the wrong op,
fails here. Eager mode only: the execution modes are the loom suites' business.
"""
import importlib

import pytest

import loom.torch
from tests.parity.harness import run_case

MODULES = ["conv", "elementwise", "indexing", "linalg", "nn_functional", "numerics", "reduce", "shape", "sort",
           "views_inplace"]


def _cases():
    out = []
    for name in MODULES:
        try:
            mod = importlib.import_module(f"tests.parity.test_{name}")
        except ModuleNotFoundError as e:
            if e.name != f"tests.parity.test_{name}":
                raise
            continue
        out += [pytest.param(c, id=f"{name}-{c.name}") for c in getattr(mod, "CASES", [])]
    return out


@pytest.mark.parametrize("case", _cases())
def test_case_through_torch_names(case):
    run_case(case, "eager", lib=loom.torch)
