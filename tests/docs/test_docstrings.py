"""Every public name has a docstring, and the examples in the docstrings written for the docs run."""
import doctest
import importlib
import os
import sys

import numpy as np
import pytest

import loom
from loom import _docstrings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "docs", "_ext"))
import loom_api  # noqa: E402

# Objects whose docstrings were written with the docs site; each example must run as printed.
SOURCE_DOCUMENTED = ["loom.optim.lr_scheduler.ExponentialLR", "loom.optim.lr_scheduler.ConstantLR",
                     "loom.bench.cli.main", "loom.is_grad_enabled", "loom.set_default_dtype", "loom.device",
                     "loom.result_type", "loom.can_cast", "loom.onnx.export", "loom.onnx.load",
                     "loom.jit.save", "loom.jit.load", "loom.jit.build_runtime", "loom.jit.build_kernels",
                     "loom.train.Checkpointer", "loom.train.fit",
                     "loom.runtime.actors.pipeline"]


def _run_examples(obj, name: str) -> doctest.TestResults:
    """Run the examples of `obj`'s own docstring (a function, class or property)."""
    test = doctest.DocTestParser().get_doctest(obj.__doc__, {"loom": loom, "np": np}, name, None, 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    return runner.summarize(verbose=False)


@pytest.mark.parametrize("name", sorted(_docstrings.DOCS))
def test_attached_docstring_examples_run(name):
    obj = getattr(loom, name)
    assert obj.__doc__ == _docstrings.DOCS[name] or "Examples" in obj.__doc__
    result = _run_examples(obj, name)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("name", sorted(_docstrings.TENSOR_DOCS))
def test_tensor_member_docstring_examples_run(name):
    member = loom.Tensor.__dict__[name]
    assert member.__doc__ == _docstrings.TENSOR_DOCS[name] or "Examples" in member.__doc__
    result = _run_examples(member, f"Tensor.{name}")
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("name", SOURCE_DOCUMENTED)
def test_source_docstring_examples_run(name):
    modname, attr = name.rsplit(".", 1)
    obj = getattr(importlib.import_module(modname), attr)
    result = _run_examples(obj, name)
    assert result.attempted > 0 and result.failed == 0


def test_every_public_name_has_a_docstring():
    everything, missing = loom_api.report()
    assert len(everything) > 1000 and "loom.Tensor.shape" in everything
    assert missing == [], f"public names without a docstring: {missing}"


def test_coverage_check_finds_an_undocumented_name(monkeypatch):
    def undocumented_fn(x):
        return x
    monkeypatch.setattr(loom.linalg, "undocumented_fn", undocumented_fn, raising=False)
    monkeypatch.setattr(loom.linalg, "__all__", [*loom.linalg.__all__, "undocumented_fn"])
    assert loom_api.undocumented("loom.linalg") == ["loom.linalg.undocumented_fn"]
