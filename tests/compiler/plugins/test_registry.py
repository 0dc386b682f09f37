"""The plugin registry: registering, looking up, lazy built-ins, clear errors (no jax needed)."""
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import loom
from loom.compiler import plugins
from loom.compiler.plugins import available_plugins, get_plugin, register_plugin

DOC = Path(__file__).resolve().parents[3] / "docs" / "plugins.md"


@pytest.fixture(autouse=True)
def private_registry(monkeypatch):
    """Each test registers into a copy, so plugins never leak between tests."""
    monkeypatch.setattr(plugins, "_PLUGINS", dict(plugins._PLUGINS))
    monkeypatch.setattr(plugins, "_LAZY", dict(plugins._LAZY))


def _reference(graph):
    return lambda *arrays: tuple(np.array(t._array()) for t in graph.run(*arrays))


def test_register_get_and_list():
    assert "xla" in available_plugins()
    assert register_plugin("mine", _reference) is _reference
    assert get_plugin("mine") is _reference and "mine" in available_plugins()
    with pytest.raises(loom.LoomError, match="already registered; pass override=True"):
        register_plugin("mine", _reference)

    @register_plugin("mine", override=True)
    def other(graph):
        return _reference(graph)
    assert get_plugin("mine") is other


@pytest.mark.parametrize("name,factory,match", [
    ("c", _reference, "built-in loom backend"),
    ("reference", _reference, "built-in loom backend"),
    ("", _reference, "non-empty str"),
    ("bad", 42, "must be callable"),
])
def test_bad_registrations(name, factory, match):
    with pytest.raises(loom.LoomError, match=match):
        register_plugin(name, factory)


def test_unknown_backend_names_what_exists():
    @loom.function(backend="no_such_compiler", warmup=0)
    def f(x):
        return x * 2

    with pytest.raises(loom.LoomError) as e:
        f(loom.ones(2))
    msg = str(e.value)
    assert msg.startswith("loom.function: unknown backend 'no_such_compiler'")
    assert "'c'" in msg and "'reference'" in msg and "'xla'" in msg and "register_plugin" in msg


def test_missing_library_says_what_to_install():
    # A process where jax cannot be imported (as on a machine without it).
    code = ("import sys; sys.modules['jax'] = None\n"
            "import loom\n"
            "from loom.compiler.plugins import get_plugin\n"
            "try:\n"
            "    get_plugin('xla')\n"
            "except loom.LoomError as e:\n"
            "    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[3]).stdout
    assert "the 'xla' plugin needs the package 'jax', which is not installed" in out
    assert "pip install jax==0.10.2" in out


def test_lazy_plugin_with_a_missing_package(monkeypatch):
    monkeypatch.setitem(plugins._LAZY, "fake", ("loom_fake_compiler_pkg.plugin", "make", "loom_fake_compiler_pkg",
                                                "pip install loom-fake-compiler"))
    with pytest.raises(loom.LoomError, match="needs the package 'loom_fake_compiler_pkg'.*pip install loom-fake"):
        get_plugin("fake")


def test_a_plugin_receives_the_traced_graph_and_its_input_specs():
    seen = []

    def spy(graph):
        seen.append(graph)
        return _reference(graph)

    register_plugin("spy", spy)
    w = loom.tensor([1.0, 2.0], requires_grad=True)

    @loom.function(backend="spy", warmup=0)
    def f(x, scale):
        return (w * x).sum() * scale

    out = f(loom.tensor([3.0, 4.0]), 2)
    assert out.item() == 22.0
    assert len(seen) == 1
    specs = [(tuple(n.shape), n.dtype) for n in seen[0].inputs]
    assert specs == [((2,), loom.float32), ((2,), loom.float32)], "the argument, then the external parameter"
    assert [(tuple(o.shape), o.dtype) for o in seen[0].outputs] == [((), loom.float32)]
    f(loom.tensor([1.0, 1.0]), 2)
    assert len(seen) == 1, "replays reuse the compiled callable"


def test_the_documented_example_plugin_runs():
    text = DOC.read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    example = next(b for b in blocks if "register_plugin" in b)
    scope: dict = {}
    exec(compile(example, str(DOC), "exec"), scope)  # noqa: S102 - the doc's own example, asserting its result.
    assert "numpy_interpreter" in available_plugins()
    body = example[example.index("def numpy_interpreter"):example.index("return run") + len("return run")]
    assert len(body.splitlines()) <= 20, "the example plugin stays short"
