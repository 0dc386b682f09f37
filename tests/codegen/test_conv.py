"""The native convolution library (loom.codegen.conv): agrees with the NumPy reference, falls back when
oneDNN is missing, runs on loom's thread count, and serves the executor."""
import os

import numpy as np
import pytest

import loom
from loom.codegen import conv as native
from loom.ir import Graph
from loom.ir import conv as ref
from loom.runtime import threads
from loom.runtime.executor import Executable

HAVE_DNNL = os.path.exists("/usr/include/oneapi/dnnl/dnnl.h")

GEOMETRIES = [  # x shape, w shape, stride, padding (top, bottom, left, right), dilation, groups
    ((2, 3, 7, 8), (4, 3, 3, 3), (1, 1), (0, 0, 0, 0), (1, 1), 1),
    ((3, 4, 11, 9), (6, 2, 3, 2), (2, 1), (1, 2, 0, 1), (2, 1), 2),
    ((2, 6, 6, 6), (6, 1, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 6),      # depthwise
    ((2, 3, 7, 7), (6, 1, 3, 3), (2, 2), (0, 0, 0, 0), (1, 1), 3),      # depthwise, multiplier 2
    ((2, 5, 4, 3), (7, 5, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1),      # 1x1
    ((1, 2, 5, 6), (3, 2, 2, 4), (1, 1), (0, 1, 1, 2), (1, 1), 1),      # 'same' with an even kernel
    ((2, 2, 8, 8), (3, 2, 2, 2), (3, 3), (0, 0, 0, 0), (1, 1), 1),      # stride > kernel
    ((4, 32, 12, 12), (16, 32, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),
]


def _calls(rng, xs, ws, stride, padding, dilation, groups):
    attrs = {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    gy = rng.standard_normal(ref.reference_conv2d(x, w, attrs).shape).astype(np.float32)
    return [("conv2d", x, w, attrs), ("conv2d_input_grad", gy, w, dict(attrs, input_size=xs[2:])),
            ("conv2d_weight_grad", x, gy, dict(attrs, kernel_size=ws[2:]))]


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=lambda g: "x".join(map(str, g[1])) + f"-g{g[5]}-s{g[2][0]}")
def test_native_matches_reference(geometry):
    assert native.available(timeout=300) == HAVE_DNNL, native._state["error"]
    rng = np.random.default_rng(0)
    for op, a, b, attrs in _calls(rng, *geometry):
        want = ref.REFERENCE[op](a, b, attrs)
        for blocked in (False, True):  # oneDNN on plain layouts, and on its own blocked ones.
            got = native.run(op, a, b, attrs, blocked=blocked)
            if not HAVE_DNNL:
                assert got is None
                continue
            assert got.shape == want.shape and got.dtype == np.float32
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max(), err_msg=op)
            # Into a given output, and from non-contiguous inputs.
            out = np.full(want.shape, np.nan, np.float32)
            assert native.run(op, np.asfortranarray(a), b[..., ::-1][..., ::-1], attrs, out, blocked=blocked) is out
            np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4 * np.abs(want).max(), err_msg=op)


def test_shape_classes_pick_the_measured_winner():
    geo = {"stride": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1), "groups": 1}
    assert native.choose("conv2d", (32, 1, 3, 3), geo) == "reference"  # One input channel: NumPy wins forward.
    assert native.choose("conv2d_weight_grad", (32, 1, 3, 3), geo) == "blocked"
    assert native.choose("conv2d", (128, 64, 1, 1), geo) == "plain"
    assert native.choose("conv2d", (64, 32, 3, 3), geo) == "blocked"
    assert native.choose("conv2d", (128, 1, 3, 3), dict(geo, groups=128)) == "blocked"  # Depthwise.
    padded, strided = dict(geo, padding=(1, 1, 1, 1)), dict(geo, stride=(2, 2))
    assert native.choose("conv2d", (16, 1, 3, 3), padded) == "plain"  # NumPy's im2col would pad with a copy.
    for op in ("conv2d", "conv2d_input_grad", "conv2d_weight_grad"):  # Strided 1x1 (a ResNet shortcut).
        assert native.choose(op, (32, 16, 1, 1), strided) == "plain"
    assert native.choose("conv2d", (32, 16, 3, 3), dict(padded, stride=(2, 2))) == "blocked"
    x, w = np.ones((2, 1, 6, 6), np.float32), np.ones((4, 1, 3, 3), np.float32)
    assert native.run("conv2d", x, w, geo) is None  # The caller takes the NumPy path...
    y = loom.nn.functional.conv2d(loom.tensor(x), loom.tensor(w)).numpy()
    np.testing.assert_array_equal(y, np.full((2, 4, 4, 4), 9, np.float32))  # ...and gets the same numbers.


def test_primitive_uses_native_and_can_be_turned_off(monkeypatch):
    rng = np.random.default_rng(1)
    x, w = loom.tensor(rng.standard_normal((2, 3, 6, 6)).astype(np.float32)), loom.randn(4, 3, 3, 3)
    calls = []
    real = native.run
    monkeypatch.setattr(native, "run", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    y = loom.nn.functional.conv2d(x, w, padding=1).numpy()
    assert calls == ["conv2d"]
    monkeypatch.setenv("LOOM_NATIVE_CONV", "0")
    y_ref = loom.nn.functional.conv2d(x, w, padding=1).numpy()
    assert calls == ["conv2d"]
    np.testing.assert_allclose(y, y_ref, rtol=1e-5, atol=1e-5)


@pytest.fixture
def fresh_native():
    native.reset()
    yield
    native.reset()


def test_missing_onednn_falls_back_to_numpy(fresh_native, monkeypatch, tmp_path):
    monkeypatch.setenv("LOOM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(native.CONV, "libs", ("-lloom_no_such_library",))  # As on a machine without libdnnl.
    from loom.codegen import cache
    cache.clear_memory()
    try:
        assert not native.available(timeout=300)
        assert native._state["error"]
        x, w = np.ones((1, 2, 5, 5), np.float32), np.ones((3, 2, 3, 3), np.float32)
        attrs = {"stride": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1), "groups": 1}
        assert native.run("conv2d", x, w, attrs) is None
        y = loom.nn.functional.conv2d(loom.tensor(x), loom.tensor(w)).numpy()
        np.testing.assert_array_equal(y, np.full((1, 3, 3, 3), 18, np.float32))
    finally:
        cache.clear_memory()


def test_thread_count_and_failed_status(fresh_native, monkeypatch):
    seen = []

    def fake(kind, nthreads, p, a, b, out):
        seen.append((kind, nthreads))
        return 3  # A oneDNN error status: run() must hand back None and the caller use NumPy.
    native._state.update(status="ready", fn={"loom_conv2d": fake})
    old = loom.get_num_threads()
    loom.set_num_threads(3)
    try:
        x, w = np.ones((1, 2, 5, 5), np.float32), np.ones((3, 2, 3, 3), np.float32)
        attrs = {"stride": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1), "groups": 1}
        assert native.run("conv2d", x, w, attrs) is None
        monkeypatch.setattr(threads, "_blas_par_min", 1)  # Every call counts as large now.
        assert native.run("conv2d_weight_grad", x, np.ones((1, 3, 3, 3), np.float32),
                          dict(attrs, kernel_size=(3, 3))) is None
    finally:
        loom.set_num_threads(old)
    # Small convolutions on one thread, large ones on loom's count (kinds + 4: blocked layouts).
    assert seen == [(4, 1), (6, 3)]


def test_executor_runs_conv_steps_into_the_plan():
    from loom.compiler import compile as compile_graph
    g = Graph()
    x, w = g.add_input((2, 3, 9, 9), loom.float32), g.add_input((4, 3, 3, 3), loom.float32)
    geo = {"stride": (2, 2), "padding": (1, 1, 1, 1), "dilation": (1, 1), "groups": 1}
    y = g.add_node("conv2d", [x, w], geo)
    gx = g.add_node("conv2d_input_grad", [g.add_node("tanh", [y]), w], dict(geo, input_size=(9, 9)))
    gw = g.add_node("conv2d_weight_grad", [g.add_node("exp", [gx]), y], dict(geo, kernel_size=(3, 3)))
    g.outputs = [g.add_node("sum", [gw], {"axes": (0, 1, 2, 3)}), gx]
    rng = np.random.default_rng(2)
    args = [rng.standard_normal(n.shape).astype(np.float32) for n in g.inputs]
    want = Executable(g)(*args)
    exe = compile_graph(g)
    assert exe.plan is not None and sum(st.node.op.startswith("conv2d") for st in exe._steps) == 3
    got = exe(*args)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_native_pool_index_matches_numpy(dtype):
    assert native.POOL.available(timeout=300), native.POOL.state["error"]
    rng = np.random.default_rng(3)
    cases = [  # x shape, kernel, stride, padding (top, bottom, left, right), dilation
        ((2, 3, 8, 8), (2, 2), (2, 2), (0, 0, 0, 0), (1, 1)),
        ((2, 2, 7, 6), (3, 3), (2, 2), (1, 2, 1, 1), (1, 1)),    # ceil-mode style high padding
        ((1, 2, 7, 8), (2, 3), (1, 1), (1, 1, 0, 0), (2, 2)),
        ((1, 1, 1, 9), (1, 3), (1, 2), (0, 0, 1, 1), (1, 1)),    # a 1-d pool as 2-d
    ]
    for xs, k, s, p, d in cases:
        attrs = {"kernel_size": k, "stride": s, "padding": p, "dilation": d}
        for fill in (None, np.nan, -np.inf):
            x = rng.permutation(np.prod(xs)).reshape(xs).astype(dtype)
            if fill is not None:  # NaN: the last of a window wins; -inf windows: their first real element.
                x[rng.random(xs) < 0.5] = fill
            shape = xs[:2] + ref._pool_out(xs, attrs)
            np.testing.assert_array_equal(native.max_pool2d_index(x, attrs, shape), ref.pool_index(x, attrs))


_THREADS_SCRIPT = r"""
import sys, threading
import numpy as np
sys.path.insert(0, sys.argv[1])
from loom.codegen import conv as native
from loom.ir import conv as ref
from tests.codegen.test_conv import GEOMETRIES, _calls

assert native.available(timeout=300), native._state["error"]
rng = np.random.default_rng(0)
for k in range(24):  # Each round in a fresh thread that exits before the next: primitives outlive it.
    xs, ws, stride, padding, dilation, groups = GEOMETRIES[k % len(GEOMETRIES)]
    calls = _calls(rng, xs, ws, stride, padding, dilation, groups)
    errors = []
    def body():
        for op, a, b, attrs in calls:
            for blocked in (False, True):
                got = native.run(op, a, b, attrs, blocked=blocked)
                want = ref.REFERENCE[op](a, b, attrs)
                if not np.allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max()):
                    errors.append((k, op, blocked))
    t = threading.Thread(target=body)
    t.start()
    t.join()
    assert not errors, errors
print("threads ok")
"""


@pytest.mark.skipif(not HAVE_DNNL, reason="needs oneDNN (libdnnl-dev), which .ci/run installs")
def test_primitives_outlive_the_threads_that_made_and_ran_them():
    """oneDNN's own scratchpads are per thread; with loom's (user) scratchpads a cached primitive stays valid
    after the thread that created or ran it exits. Run in a subprocess: the failure this guards against
    was a segmentation fault."""
    import subprocess
    import sys
    from pathlib import Path
    root = str(Path(__file__).resolve().parents[2])
    proc = subprocess.run([sys.executable, "-c", _THREADS_SCRIPT, root], cwd=root, capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, LOOM_CODEGEN_SYNC="1"))
    assert proc.returncode == 0 and "threads ok" in proc.stdout, (proc.returncode, proc.stdout, proc.stderr[-2000:])


def test_geometry_is_worked_out_once_per_shape():
    """A step repeats every convolution: its output shape, C parameters and layout choice are kept per geometry."""
    assert native.available(timeout=300) == HAVE_DNNL, native._state["error"]
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((2, 4, 7, 7)).astype(np.float32), rng.standard_normal((6, 4, 3, 3)).astype(np.float32)
    geo = {"stride": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1), "groups": 1}
    native._GEOMETRY.clear()
    for attrs in (geo, dict(geo), dict(geo, padding=(1, 1, 1, 1)), dict(geo, stride=(2, 2))):
        got = native.run("conv2d", x, w, attrs)
        if not HAVE_DNNL:
            assert got is None
            continue
        np.testing.assert_allclose(got, ref.reference_conv2d(x, w, attrs), rtol=1e-4, atol=1e-4)
    assert len(native._GEOMETRY) == (3 if HAVE_DNNL else 0)  # Equal attrs share an entry; others have their own.
