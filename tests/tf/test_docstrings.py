"""The examples in loom.tf's docstrings run as printed."""
import doctest
import importlib

import pytest

MODULES = ["loom.tf", "loom.tf._core", "loom.tf.tape", "loom.tf.function", "loom.tf.data", "loom.tf.keras",
           "loom.tf.keras.engine", "loom.tf.keras.models", "loom.tf.control",
           "loom.tf.debugging", "loom.tf.image", "loom.tf.train", "loom.tf.tensor_array"]


@pytest.mark.parametrize("modname", MODULES)
def test_docstring_examples_run(modname):
    mod = importlib.import_module(modname)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    tests = [t for t in finder.find(mod, modname) if t.examples]
    for t in tests:
        runner.run(t)
    result = runner.summarize(verbose=False)
    assert result.attempted > 0 and result.failed == 0
