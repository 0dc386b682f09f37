"""Native step programs: a compiled graph run from C gives the executor's results, in every tier."""
import threading

import numpy as np
import pytest

import loom
import loom.nn as nn
import loom.nn.functional as F
from loom.codegen import driver as driver_mod
from loom.runtime import native
from loom.runtime.executor import Executable
from tests.codegen.helpers import persistent_sync_kernels


@pytest.fixture(scope="module", autouse=True)
def kernel_cache(request):
    with persistent_sync_kernels(request.config) as cache_dir:
        yield cache_dir


def _traced(fn, *args):
    """The Executable loom.function builds for fn(*args), with every kernel and the driver built."""
    f = loom.function(fn)
    f(*args)
    f(*args)
    exe = next(iter(f._cache.values())).exe
    assert exe.wait(300)
    return exe


def _compiled(fn, *args):
    """The Executable for fn traced on arrays shaped like `args` (each a graph input)."""
    return _traced(fn, *[loom.tensor(a) for a in args])


def _inputs(exe, seed=0):
    rng = np.random.default_rng(seed)
    arrays = []
    for n in exe._inputs:
        d = n.dtype.np
        if d.kind == "f":
            arrays.append(rng.standard_normal(n.shape).astype(d))
        elif d.kind == "b":
            arrays.append(rng.integers(0, 2, n.shape).astype(d))
        else:
            arrays.append(rng.integers(0, 3, n.shape).astype(d))
    return arrays


def _python_path(exe, monkeypatch):
    """The same graph and plan on the executor's own Python loop (LOOM_NATIVE=0)."""
    monkeypatch.setenv("LOOM_NATIVE", "0")
    ref = Executable(exe.graph, exe.plan)
    monkeypatch.delenv("LOOM_NATIVE")
    assert ref._native is None
    assert ref.wait(300)
    return ref


def _python_tier(exe, arrays, monkeypatch):
    """The native program's results while its driver is not built (every step run from Python)."""
    with monkeypatch.context() as m:
        m.setattr(driver_mod, "get_driver", lambda wait=False: None)
        return exe(*arrays)


def _same(got, want, exact=True):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        if exact:
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-6)


def _check(exe, monkeypatch, exact_vs_python=True, seed=0):
    """Native == its Python tier bit for bit; == the executor's Python path (bitwise if `exact_vs_python`)."""
    assert exe._native is not None
    arrays = _inputs(exe, seed)
    got = exe(*arrays)
    assert exe._native._fast is not None
    _same(got, _python_tier(exe, arrays, monkeypatch))
    _same(got, _python_path(exe, monkeypatch)(*arrays), exact_vs_python)
    return exe, arrays, got


def _kinds(exe):
    return [s.kind for s in exe._native._table[2]]


def _mlp_sgd_step(batch, second_act=nn.ReLU):
    """The Executable of a 20-32-32-5 MLP's SGD-momentum training step on `batch` rows."""
    loom.manual_seed(0)
    model = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 32), second_act(), nn.Linear(32, 5))
    opt = loom.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return _traced(step, loom.randn(batch, 20), loom.tensor(np.arange(batch) % 5))


def test_mlp_train_step_matches_python_path(monkeypatch):
    exe = _mlp_sgd_step(16)
    _check(exe, monkeypatch, exact_vs_python=False)
    kinds = _kinds(exe)
    assert kinds.count(native._GEMM) == 8, "3 forward GEMMs, 3 weight gradients, 2 input gradients"
    assert native._KERNEL in kinds
    assert "native segments" in repr(exe) and exe._native.segments() >= 1


def test_traced_training_through_native_equals_eager():
    def run(traced):
        loom.manual_seed(0)
        model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
        opt = loom.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

        def step(x, y):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            return loss
        fn = loom.function(step) if traced else step
        rng = np.random.default_rng(1)
        losses = [fn(loom.tensor(rng.standard_normal((8, 6)).astype(np.float32)),
                     loom.tensor(rng.integers(0, 3, 8))).item() for _ in range(5)]
        return losses, [p.detach().numpy().copy() for p in model.parameters()]
    el, ep = run(False)
    tl, tp = run(True)
    np.testing.assert_allclose(tl, el, rtol=1e-5)
    for a, b in zip(tp, ep):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_cnn_like_graph(monkeypatch):
    loom.manual_seed(0)
    conv = nn.Conv2d(2, 4, 3, padding=1)
    head = nn.Linear(4 * 4 * 4, 3)

    def fwd(x):
        h = F.relu(conv(x))
        h = F.max_pool2d(h, 2)
        return F.log_softmax(head(h.reshape(h.shape[0], -1)), 1)

    exe = _traced(fwd, loom.randn(2, 2, 8, 8))
    _check(exe, monkeypatch, exact_vs_python=False)
    kinds = _kinds(exe)
    assert native._KERNEL in kinds and native._GEMM in kinds
    assert native._COPY not in kinds, "the planner keeps a view's source alive: no view is copied"
    assert len(exe._native._virtual) > 0, "its views cost nothing"


def test_reference_only_ops_split_segments(monkeypatch):
    def fn(x, i):
        h = (x * 2.0).exp()
        g = loom.gather(h, 1, i)            # Reference-only: a Python step between native segments.
        s = h.argsort(1).to(loom.float32)   # Another one.
        return (g.sum(1, keepdim=True) + h * 0.5 - s).tanh()

    exe = _compiled(fn, np.ones((4, 6), np.float32), np.zeros((4, 2), np.int64))
    _check(exe, monkeypatch)
    kinds = _kinds(exe)
    assert native._PY in kinds and native._KERNEL in kinds
    assert exe._native.segments() >= 1


def test_factorisation_primitives_run_as_python_steps(monkeypatch):
    """Library primitives with no native kernel (QR, eigh, a triangular solve) run from Python inside the program."""
    def fn(a, s):
        q, r = loom.linalg.qr(a.exp())
        lam = loom.linalg.eigvalsh(s @ s.mT)
        x = loom.linalg.solve_triangular(r + 3 * loom.eye(3), q.mT, upper=True)
        return (x * 2.0).tanh().sum(1) + lam

    exe = _compiled(fn, np.ones((5, 3), np.float64), np.ones((3, 3), np.float64))
    _check(exe, monkeypatch)
    kinds = _kinds(exe)
    assert native._PY in kinds and native._KERNEL in kinds
    assert {"qr", "eigvalsh", "triangular_solve"} <= {n.op for n in exe.graph}


def test_transposed_operands_are_strides_not_copies(monkeypatch):
    def fn(a, b, c):
        return (a.T @ b, a @ c.T, (b.T @ a).T, (a * 2.0).sum(0, keepdim=True).reshape(-1))

    exe = _compiled(fn, np.ones((5, 3), np.float32), np.ones((5, 4), np.float32), np.ones((6, 3), np.float32))
    _check(exe, monkeypatch, exact_vs_python=False)
    kinds = _kinds(exe)
    gemms = [s for s in exe._native._table[2] if s.kind == native._GEMM]
    assert len(gemms) >= 2
    assert {(g.gemm[1], g.gemm[2]) for g in gemms} >= {(1, 0), (0, 1)}, "transposes read from strides"
    assert native._COPY not in kinds and native._PY not in kinds, \
        "operand transposes are strides; (b.T @ a).T and the reshaped sum are written into their outputs"


def test_batched_matmul(monkeypatch):
    def fn(a, b):
        return (a @ b, a @ a.transpose(1, 2), (a.transpose(1, 2) @ a).exp(),
                a.reshape(3, 1, 4, 5) @ b.reshape(3, 1, 5, 2))

    exe = _compiled(fn, np.ones((3, 4, 5), np.float32), np.ones((3, 5, 2), np.float32))
    _check(exe, monkeypatch, exact_vs_python=False)
    gemms = [s for s in exe._native._table[2] if s.kind == native._GEMM]
    assert gemms and all(g.gemm[12] for g in gemms), "every product loops over its batch in C"


def test_float64(monkeypatch):
    def fn(a, b):
        return ((a @ b).sin() * 3.0).sum(0)

    exe = _compiled(fn, np.ones((4, 5)), np.ones((5, 6)))
    assert exe._inputs[0].dtype is loom.float64
    _check(exe, monkeypatch, exact_vs_python=False)
    assert native._GEMM in _kinds(exe)


def test_elementwise_only_graph_is_bitwise(monkeypatch):
    def fn(a, b):
        h = a.exp() - b.amax(1, keepdim=True)
        return (h * 0.5).sum(1), h.T * 2.0, h.reshape(-1)

    exe = _compiled(fn, np.ones((6, 7), np.float32), np.ones((6, 7), np.float32))
    _check(exe, monkeypatch, exact_vs_python=True)


def test_integer_division_by_zero_raises_as_python_path(monkeypatch):
    def fn(a, b):
        return (a // b) + 1

    exe = _compiled(fn, np.ones(8, np.int32), np.ones(8, np.int32))
    a = np.arange(8, dtype=np.int32)
    ok = exe(a, np.full(8, 3, np.int32))
    np.testing.assert_array_equal(ok[0], a // 3 + 1)
    b = np.ones(8, np.int32)
    b[5] = 0
    ref = _python_path(exe, monkeypatch)
    with pytest.raises(loom.LoomError) as want:
        ref(a, b)
    with pytest.raises(type(want.value)) as got:
        exe(a, b)
    assert str(got.value) == str(want.value)
    np.testing.assert_array_equal(exe(a, np.full(8, 3, np.int32))[0], ok[0])  # Still usable after the error.


def test_non_contiguous_and_misaligned_inputs(monkeypatch):
    def fn(a, b):
        return (a @ b).relu() + a.sum(1, keepdim=True)

    exe = _compiled(fn, np.ones((4, 5), np.float32), np.ones((5, 3), np.float32))
    ref = _python_path(exe, monkeypatch)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((5, 4)).astype(np.float32).T       # A transposed view.
    b = rng.standard_normal((5, 6)).astype(np.float32)[:, ::2]   # A strided view.
    _same(exe(a, b), ref(a, b))
    raw = np.zeros(4 * 5 * 4 + 1, np.uint8)[1:].view(np.float32).reshape(4, 5)  # Misaligned data.
    raw[...] = a
    _same(exe(raw, np.ascontiguousarray(b)), ref(raw, np.ascontiguousarray(b)), exact=False)


def test_outputs_are_fresh_arrays_per_call():
    def fn(a):
        return (a * 2.0).exp(), a.T

    exe = _compiled(fn, np.ones((3, 4), np.float32))
    x = np.ones((3, 4), np.float32)
    r1 = exe(x)
    r2 = exe(x)
    for p, q in zip(r1, r2):
        assert not np.shares_memory(p, q)
        assert p.flags.c_contiguous and p.flags.writeable
    assert not np.shares_memory(r1[1], x)
    np.testing.assert_array_equal(r1[1], x.T)


def test_large_outputs_are_recycled_only_once_unreferenced():
    def fn(a):
        return (a * 2.0).exp(), a + 1.0

    x = np.full((256, 128), 0.5, np.float32)  # 128 KiB outputs: above native._RECYCLE_BYTES.
    exe = _compiled(fn, x)
    prog = exe._native
    assert prog is not None and x.nbytes >= native._RECYCLE_BYTES
    kept = exe(x)
    first = [o.__array_interface__["data"][0] for o in exe(x)]  # Dropped at once.
    again = exe(x)
    assert [o.__array_interface__["data"][0] for o in again] == first  # The dropped arrays came back.
    for k in kept:
        assert not any(np.shares_memory(k, o) for o in again)  # Still referenced: never reused.
    view = again[1][:3]
    del again
    third = exe(x * 0.0)
    assert not np.shares_memory(view, third[1])  # A view keeps its base out of the pool.
    np.testing.assert_array_equal(view, np.full((3, 128), 1.5, np.float32))
    np.testing.assert_array_equal(kept[0], np.exp(x * 2.0))
    np.testing.assert_array_equal(third[1], np.ones_like(x))


def test_concurrent_calls_from_threads(monkeypatch):
    def fn(a, b):
        h = (a @ b).relu()
        return (h @ b.T).tanh().sum(1), h * 3.0

    exe = _compiled(fn, np.ones((16, 32), np.float32), np.ones((32, 32), np.float32))
    rng = np.random.default_rng(0)
    cases = [(rng.standard_normal((16, 32)).astype(np.float32), rng.standard_normal((32, 32)).astype(np.float32))
             for _ in range(4)]
    want = [exe(*c) for c in cases]
    errors = []

    def worker(k):
        try:
            for _ in range(30):
                got = exe(*cases[k])
                for g, w in zip(got, want[k]):
                    if not np.array_equal(g, w):
                        errors.append(k)
        except Exception as e:  # Reported below.
            errors.append(repr(e))

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors == []


def test_loom_native_0_turns_it_off(monkeypatch):
    monkeypatch.setenv("LOOM_NATIVE", "0")
    exe = _compiled(lambda a: a.exp() + 1.0, np.ones(3, np.float32))
    assert exe._native is None and "native off" in repr(exe)
    np.testing.assert_allclose(exe(np.zeros(3, np.float32))[0], [2.0, 2.0, 2.0])


def test_views_kept_when_their_source_memory_is_reused(monkeypatch):
    # A permuted value read long after its source's arena slot was reused must be copied, not aliased.
    def fn(a):
        t = (a * 2.0).exp().T
        u = (a + 1.0).tanh() * (a - 1.0).sin()
        v = (u * u).cos() + u.sum(0, keepdim=True)
        return (t * 3.0).sum(1) + v.sum(0)

    exe = _compiled(fn, np.ones((5, 5), np.float32))
    _check(exe, monkeypatch, exact_vs_python=True)


def test_kernel_refusal_is_rerun_from_python(monkeypatch):
    # A misaligned arena makes every kernel return -2: each such step reruns from Python (on copies) and
    # stays there; the results do not change.
    def fn(a, b):
        h = (a * 2.0).exp() + b
        return (h.sum(1, keepdim=True) * h).tanh() @ b.T

    exe = _compiled(fn, np.ones((6, 6), np.float32), np.ones((6, 6), np.float32))
    arrays = _inputs(exe)
    want = exe(*arrays)
    assert not exe._native._forced
    made = native._Ctx.__init__

    def misaligned(self, nbytes, buffer=None):  # (A buffer from the function's arena pool is left unused.)
        made(self, nbytes + 64)
        self.arena = self.arena[1:1 + max(nbytes, 1)]

    monkeypatch.setattr(native._Ctx, "__init__", misaligned)
    exe._native._ctxs.clear()
    _same(exe(*arrays), want)
    assert exe._native._forced, "the refused kernels now run from Python"
    _same(exe(*arrays), want)


def test_portable_pointer_table_path(monkeypatch):
    # Where CPython's and NumPy's struct offsets are not known, the driver gets a table of data pointers.
    from loom.codegen import kernel as kernel_mod

    def fn(a, b):
        return (a @ b).exp() * 2.0, a.T

    exe = _compiled(fn, np.ones((3, 4), np.float32), np.ones((4, 5), np.float32))
    arrays = _inputs(exe)
    want = exe(*arrays)
    monkeypatch.setattr(kernel_mod, "_ABI", None)
    exe._native._ctxs.clear()
    got = exe(*arrays)
    assert exe._native._ctxs[0].ctl[0] == 0 and exe._native._ctxs[0].ctl[1] == 0
    _same(got, want)


def test_kernel_still_building_runs_from_python_until_built(monkeypatch):
    def fn(a):
        return ((a * 2.0).exp() + 1.0).sum(1), (a - 3.0).tanh() @ a.T

    exe = _compiled(fn, np.ones((5, 5), np.float32))
    arrays = _inputs(exe)
    want = exe(*arrays)
    ref = _python_path(exe, monkeypatch)  # Shares the kernel libraries (and so their state) with exe.
    lib = next(k for k in exe.kernels if k._lib is not None)._lib
    monkeypatch.setattr(lib, "state", "pending")  # As while its build runs: Kernel.run takes the reference path.
    lib.done.clear()
    exe._native._fast = None
    try:
        got = exe(*arrays)
        kinds = _kinds(exe)
        assert native._PY in kinds and native._KERNEL in kinds and exe._native._fast is None
        _same(got, ref(*arrays))
    finally:
        lib.done.set()
    monkeypatch.setattr(lib, "state", "ready")
    _same(exe(*arrays), want)
    assert native._PY not in _kinds(exe) and exe._native._fast is not None
