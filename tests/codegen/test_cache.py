"""The kernel cache: structural keys, disk persistence across processes, racing builds, background builds,
and the reference fallback when the compiler is missing or fails."""
import hashlib
import json
import logging
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import loom
from loom.codegen import KernelCacheWarning, cache, clear_memory, get_kernel, reset_stats, run_reference, stats
from loom.ir import Graph

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def body(batch: int, d=loom.float32) -> Graph:
    """relu(x * w + b) summed over features, for a batch of `batch` rows."""
    g = Graph()
    x = g.add_input((batch, 6), d)
    w = g.add_input((6,), d)
    ww = g.add_node("expand", [g.add_node("reshape", [w], {"shape": (1, 6)})], {"shape": (batch, 6)})
    y = g.add_node("maximum", [g.add_node("mul", [x, ww]), g.add_constant(0, d, shape=(batch, 6))])
    g.outputs = [g.add_node("sum", [y], {"axes": (1,), "keepdim": False})]
    return g


def arrays(batch: int, d=np.float32):
    rng = np.random.default_rng(batch)
    return [rng.standard_normal((batch, 6)).astype(d), rng.standard_normal(6).astype(d)]


def run(k, g, xs):
    out = np.empty(g.outputs[0].shape, g.outputs[0].dtype.np)
    k(xs, out)
    return out


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """An empty cache directory, nothing in memory, counters at zero."""
    monkeypatch.setenv("LOOM_CACHE_DIR", str(tmp_path))
    clear_memory()
    reset_stats()
    yield tmp_path
    clear_memory()


def test_new_batch_size_compiles_nothing(fresh_cache):
    keys = set()
    for batch in (4, 9, 1, 128, 4):
        g = body(batch)
        k = get_kernel(g)
        assert k.ready
        keys.add(k.key)
        np.testing.assert_allclose(run(k, g, arrays(batch)), run_reference(g, arrays(batch)), rtol=1e-6)
    assert len(keys) == 1
    s = stats()
    assert s["builds"] == 1 and s["memory_hits"] == 4 and s["build_failures"] == 0
    assert get_kernel(body(3, loom.float64)).key not in keys  # Another dtype is another kernel.
    assert stats()["builds"] == 2


def _script(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


_CHILD = """
import json, os, sys, time
import numpy as np
sys.path.insert(0, {root!r})
from tests.codegen.test_cache import body, arrays, run
from loom.codegen import get_kernel, stats, run_reference
go = os.environ.get("GO_FILE")
while go and not os.path.exists(go):
    time.sleep(0.001)
g = body(5)
k = get_kernel(g)
ok = bool(np.allclose(run(k, g, arrays(5)), run_reference(g, arrays(5)), rtol=1e-6))
print(json.dumps(dict(stats(), ready=k.ready, ok=ok, key=k.key)))
"""


def _child_env(cache_dir, **extra):
    env = dict(os.environ, LOOM_CACHE_DIR=str(cache_dir), LOOM_CODEGEN_SYNC="1", PYTHONPATH=ROOT)
    env.update(extra)
    return env


def test_cache_persists_across_processes(tmp_path):
    first = subprocess.run(_script(_CHILD.format(root=ROOT)), env=_child_env(tmp_path), capture_output=True,
                           text=True, timeout=600)
    assert first.returncode == 0, first.stderr
    a = json.loads(first.stdout.strip().splitlines()[-1])
    assert a["builds"] == 1 and a["ready"] and a["ok"]
    second = subprocess.run(_script(_CHILD.format(root=ROOT)), env=_child_env(tmp_path), capture_output=True,
                            text=True, timeout=600)
    assert second.returncode == 0, second.stderr
    b = json.loads(second.stdout.strip().splitlines()[-1])
    assert b["builds"] == 0 and b["disk_hits"] == 1 and b["ready"] and b["ok"] and b["key"] == a["key"]
    assert os.path.exists(os.path.join(tmp_path, "kernels", a["key"][:2], a["key"] + ".c"))


def test_concurrent_builds_of_one_kernel_race_safely(tmp_path):
    """Processes released at the same instant all build the same kernel into one directory."""
    go = tmp_path / "go"
    procs = [subprocess.Popen(_script(_CHILD.format(root=ROOT)), env=_child_env(tmp_path / "cache", GO_FILE=str(go)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    go.write_text("")
    results = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert all(r["ready"] and r["ok"] for r in results)
    assert len({r["key"] for r in results}) == 1
    assert sum(r["builds"] for r in results) >= 1
    files = [f for _, _, fs in os.walk(tmp_path / "cache") for f in fs]
    assert not [f for f in files if ".tmp" in f], files  # No temporary left behind.
    key = results[0]["key"]
    assert sorted(files) == [key + ".c", key + ".so", key + ".so.sha256"]
    assert all(r["untrusted"] == 0 for r in results)  # No process saw a library that its index did not describe.
    lib = os.path.join(tmp_path, "cache", "kernels", key[:2], key + ".so")
    with open(lib, "rb") as f, open(lib + ".sha256") as idx:
        assert idx.read().strip() == hashlib.sha256(f.read()).hexdigest()
    last = subprocess.run(_script(_CHILD.format(root=ROOT)), env=_child_env(tmp_path / "cache"),
                          capture_output=True, text=True, timeout=600)
    assert json.loads(last.stdout.strip().splitlines()[-1])["disk_hits"] == 1


def test_background_build_results_before_and_after_ready(fresh_cache, monkeypatch):
    monkeypatch.setenv("LOOM_CODEGEN_SYNC", "0")
    calls = []
    real = cache.Kernel.run.__globals__["run_reference"]
    monkeypatch.setitem(cache.Kernel.run.__globals__, "run_reference", lambda *a: calls.append(1) or real(*a))
    g = body(33)
    k = get_kernel(g)
    assert not k.ready  # A build takes far longer than returning.
    before = run(k, g, arrays(33))
    assert calls == [1]  # That call ran the body on the reference path.
    assert k.wait(600) and k.ready
    after = run(k, g, arrays(33))
    assert calls == [1]  # This one ran the compiled kernel.
    np.testing.assert_allclose(before, after, rtol=1e-6)
    np.testing.assert_allclose(after, run_reference(g, arrays(33)), rtol=1e-6)
    assert stats()["builds"] == 1


def test_missing_compiler_falls_back_and_warns_once(fresh_cache, monkeypatch, caplog):
    monkeypatch.setenv("LOOM_CC", "/nonexistent/bin/gcc-loom-test")
    monkeypatch.setattr(cache, "_WARNED", set())
    with caplog.at_level(logging.WARNING, logger="loom.codegen"):
        for batch in (3, 4):
            g = body(batch)
            k = get_kernel(g)
            assert not k.ready and "no C compiler" in k.fallback_reason
            np.testing.assert_allclose(run(k, g, arrays(batch)), run_reference(g, arrays(batch)))
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "not found" in warnings[0].getMessage()


def test_failing_compiler_falls_back_and_warns_once(fresh_cache, monkeypatch, caplog, tmp_path):
    fake = tmp_path / "badcc"
    fake.write_text("#!/bin/sh\ncase \"$*\" in *-dump*) echo 12.2.0;; *) echo 'internal compiler error' >&2; "
                    "exit 1;; esac\n")
    fake.chmod(0o755)
    monkeypatch.setenv("LOOM_CC", str(fake))
    monkeypatch.setattr(cache, "_WARNED", set())
    with caplog.at_level(logging.WARNING, logger="loom.codegen"):
        for d in (loom.float32, loom.float64):
            g = body(2, d)
            k = get_kernel(g)
            assert k.failed and not k.ready and k.fallback_reason is None
            xs = arrays(2, d.np)
            np.testing.assert_allclose(run(k, g, xs), run_reference(g, xs))
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "internal compiler error" in warnings[0].getMessage()
    assert stats()["build_failures"] == 2


def test_damaged_cache_file_is_rebuilt(fresh_cache, monkeypatch):
    """A file at the kernel's path that loom did not build is not loaded but replaced by a build."""
    from loom.codegen import build, render
    g = body(2)
    spec = render(g)
    key = cache.kernel_key(spec.source, spec.uses_mvec and build.mvec_available(), build.compiler_id())
    path = cache.kernel_path(key)
    os.makedirs(os.path.dirname(path))
    with open(path, "wb") as f:
        f.write(b"not a shared object")
    monkeypatch.setattr(cache, "_WARNED", set())
    with pytest.warns(KernelCacheWarning, match="no hash index"):
        k = get_kernel(g)
    assert k.key == key and stats()["builds"] == 1
    assert k.ready
    np.testing.assert_allclose(run(k, g, arrays(2)), run_reference(g, arrays(2)), rtol=1e-6)


def test_codegen_can_be_switched_off(monkeypatch):
    monkeypatch.setenv("LOOM_CODEGEN", "0")
    k = get_kernel(body(2))
    assert not k.ready and "LOOM_CODEGEN=0" in k.fallback_reason
    assert run(k, body(2), arrays(2)).shape == (2,)


def test_kernel_source_is_structural():
    """Sizes are arguments: the same structure at two sizes renders the same C text."""
    assert get_kernel(body(2)).source == get_kernel(body(77)).source
    assert "loom_kernel" in get_kernel(body(2)).source
