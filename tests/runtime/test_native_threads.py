"""One thread pool in native step programs: large GEMMs are cut across loom's own team, BLAS stays on one thread."""
import ctypes

import numpy as np
import pytest

import loom
from loom.codegen import driver as driver_mod
from loom.runtime import native, threads
from tests.codegen.helpers import persistent_sync_kernels


@pytest.fixture(scope="module", autouse=True)
def kernel_cache(request):
    with persistent_sync_kernels(request.config) as cache_dir:
        yield cache_dir


@pytest.fixture(autouse=True)
def _restore_threads(monkeypatch):
    # These tests look at the team each call runs on: no program picks one thread for being faster.
    monkeypatch.setenv("LOOM_ADAPT_THREADS", "0")
    old = loom.get_num_threads()
    yield
    loom.set_num_threads(old)


def _gemm_team() -> int:
    """Threads the driver's last GEMM record ran on (its test hook)."""
    drv = driver_mod.get_driver(wait=True)
    assert drv is not None, "the step driver was not built"
    fn = drv._lib.loom_last_gemm_team
    fn.restype = ctypes.c_int64
    return int(fn())


def _blas_threads() -> int:
    """The thread count the native program's BLAS library reports now."""
    fn = native.blas().lib.scipy_openblas_get_num_threads
    fn.restype = ctypes.c_int
    return int(fn())


def _run_at(fn, arrays, counts):
    """fn (a loom.function, built and run natively) at each thread count: [(result, GEMM team)]."""
    f = loom.function(fn)
    tensors = [loom.tensor(a) for a in arrays]
    f(*tensors)
    f(*tensors)
    assert next(iter(f._cache.values())).exe.wait(300)
    out = []
    for n in counts:
        loom.set_num_threads(n)
        out.append((f(*tensors).numpy().copy(), _gemm_team()))
    return out


def _matmul(a, b):
    return a @ b


def _matmul_ta(a, b):
    return a.transpose(-1, -2) @ b


def _matmul_tb(a, b):
    return a @ b.transpose(-1, -2)


def _linear_relu(a, b, bias):
    return (a @ b + bias).relu()


def _f32(rng, *shape):
    return rng.standard_normal(shape, dtype=np.float32)


def _t(x):
    return np.swapaxes(x, -1, -2)


# (step, its NumPy form, input shapes, dtype): rows of C cut into pieces (C tall, or wide with few rows), A and
# B stored transposed, batch items shared out, one batch item cut in pieces, float64 items shared out, a GEMM
# with its epilogue on row blocks.
CASES = {
    "rows": (_matmul, lambda a, b: a @ b, [(2048, 128), (128, 512)], np.float32),
    "wide": (_matmul, lambda a, b: a @ b, [(64, 1000), (1000, 3000)], np.float32),
    "a_transposed": (_matmul_ta, lambda a, b: _t(a) @ b, [(700, 513), (700, 300)], np.float32),
    "b_transposed": (_matmul_tb, lambda a, b: a @ _t(b), [(513, 700), (300, 700)], np.float32),
    "batch_items": (_matmul, lambda a, b: a @ b, [(4, 256, 300), (4, 300, 200)], np.float32),
    "batch_of_one": (_matmul, lambda a, b: a @ b, [(1, 513, 700), (1, 700, 129)], np.float32),
    "float64_batch": (_matmul, lambda a, b: a @ b, [(3, 300, 200), (3, 200, 257)], np.float64),
    "epilogue": (_linear_relu, lambda a, b, c: np.maximum(a @ b + c, 0), [(2048, 128), (128, 512), (512,)],
                 np.float32),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_gemm_split_is_bitwise_the_one_thread_result(case):
    step, numpy_step, shapes, dtype = CASES[case]
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype(dtype) for s in shapes]
    runs = _run_at(step, arrays, (1, 2, 3))
    # Each count reaches the driver's split (3 threads only from a run at 3 threads: the driver ran it).
    assert [team for _, team in runs] == [1, 2, 3]
    for got, _ in runs[1:]:
        np.testing.assert_array_equal(got, runs[0][0])
    # And the product itself is right (against float64 NumPy).
    want = numpy_step(*[a.astype(np.float64) for a in arrays])
    np.testing.assert_allclose(runs[0][0], want, rtol=1e-4 if dtype == np.float32 else 1e-10,
                               atol=1e-3 if dtype == np.float32 else 1e-10)


def test_float64_product_is_not_cut():
    """dgemm rounds some shapes differently in other row blocks: one float64 product stays one call."""
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((546, 217)), rng.standard_normal((546, 453))  # A shape that showed it.
    runs = _run_at(_matmul_ta, [a, b], (1, 3))
    assert [team for _, team in runs] == [1, 1]
    np.testing.assert_array_equal(runs[1][0], runs[0][0])


def test_blas_library_stays_on_one_thread():
    rng = np.random.default_rng(1)
    runs = _run_at(_matmul, [_f32(rng, 1024, 256), _f32(rng, 256, 512)], (3,))
    assert runs[0][1] == 3  # Split three ways by loom's team...
    assert _blas_threads() == 1  # ...each piece on a BLAS library that never starts threads of its own.


def test_small_product_runs_whole_on_one_thread():
    rng = np.random.default_rng(2)
    m = 64
    assert m * m * m < threads.gemm_par_min()
    runs = _run_at(_matmul, [_f32(rng, m, m), _f32(rng, m, m)], (2,))
    assert runs[0][1] == 1


def test_pieces_stay_large_enough():
    """Every piece of a cut product has at least 2^21 multiply-adds (OpenBLAS's small-matrix path stays out)."""
    rng = np.random.default_rng(3)
    M, K, N = 512, 128, 96  # 2^22.6 multiply-adds: three pieces would have 160 rows (2^20.9), two have 256.
    assert threads.gemm_par_min() <= M * K * N
    runs = _run_at(_matmul, [_f32(rng, M, K), _f32(rng, K, N)], (1, 4))
    assert [team for _, team in runs] == [1, 2]
    np.testing.assert_array_equal(runs[1][0], runs[0][0])
    # 17 rows are two tiles, 16 rows and 1: the 1-row piece would be too small, so the product stays whole.
    runs = _run_at(_matmul, [_f32(rng, 17, 512), _f32(rng, 512, 512)], (1, 2))
    assert 17 * 512 * 512 >= threads.gemm_par_min()
    assert [team for _, team in runs] == [1, 1]
    np.testing.assert_array_equal(runs[1][0], runs[0][0])


def test_gemm_par_min_reads_the_environment(monkeypatch):
    monkeypatch.setattr(threads, "_gemm_par_min", None)
    monkeypatch.setenv("LOOM_GEMM_PAR_MIN", "12345")
    assert threads.gemm_par_min() == 12345
    monkeypatch.setattr(threads, "_gemm_par_min", None)
    monkeypatch.setenv("LOOM_GEMM_PAR_MIN", "many")
    assert threads.gemm_par_min() == threads.GEMM_PAR_MIN_DEFAULT
    monkeypatch.setattr(threads, "_gemm_par_min", None)


def test_epilogue_blocks_hold_a_share_per_thread(monkeypatch):
    """GEMM epilogue row blocks are sized per thread (each block is cut across the team): fewer team starts."""
    from loom.codegen import gemm

    monkeypatch.delenv("LOOM_GEMM_BLOCK_BYTES", raising=False)
    for n in (1, 2, 3):
        loom.set_num_threads(n)
        assert gemm.block_bytes() == n * gemm.BLOCK_BYTES_DEFAULT
    loom.set_num_threads(2)
    assert gemm.block_rows(2048, 512, 4) == 2 * gemm.BLOCK_BYTES_DEFAULT // (512 * 4) == 256
    monkeypatch.setenv("LOOM_GEMM_BLOCK_BYTES", "4096")  # Set explicitly: taken as it is.
    assert gemm.block_bytes() == 4096


def _mlp_step_exe(batch=64):
    loom.manual_seed(0)
    model = loom.nn.Sequential(loom.nn.Linear(32, 128), loom.nn.ReLU(), loom.nn.Linear(128, 10))
    opt = loom.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step(x, y):
        opt.zero_grad()
        loss = loom.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss
    f = loom.function(step)
    x, y = loom.randn(batch, 32), loom.tensor(np.arange(batch) % 10)
    f(x, y)
    f(x, y)
    exe = next(iter(f._cache.values())).exe
    assert exe.wait(300)
    return exe, [a.numpy() for a in (x, y)]


def test_programs_pick_one_thread_or_the_team_by_their_walks(monkeypatch):
    """At 2 threads a program whose bits do not depend on the count tries each team size three times, then
    runs on the faster and tries the other every `_TEAM_EXPLORE` calls; every call gives the same bits."""
    monkeypatch.setenv("LOOM_ADAPT_THREADS", "1")
    loom.set_num_threads(2)
    exe, _ = _mlp_step_exe()
    prog = exe._native
    assert prog._team_max >= 2
    arrays = [np.asarray(a).copy() for a in _inputs_of(exe)]
    prog._team_time.clear()  # Forget the calls that built it.
    teams = []
    real = prog._walk
    monkeypatch.setattr(prog, "_walk", lambda *a: (teams.append(a[-1]), real(*a))[1])
    first = exe(*arrays)
    outs = [exe(*arrays) for _ in range(2 * native._TEAM_EXPLORE)]
    assert teams[:6] == [2, 1, 2, 1, 2, 1]
    assert set(teams[6:]) == {1, 2}, "the faster team runs, the other one is tried again"
    assert min(teams[6:].count(1), teams[6:].count(2)) <= 3
    for out in outs:
        for a, b in zip(out, first):
            np.testing.assert_array_equal(a, b)


def test_a_split_reduction_keeps_the_programs_team(monkeypatch):
    """A sum of many elements into fewer outputs than threads is split across them (its bits depend on the
    count): that program always runs on loom's count."""
    monkeypatch.setenv("LOOM_ADAPT_THREADS", "1")
    loom.set_num_threads(2)
    f = loom.function(lambda x: (x * 2.0).sum())
    x = loom.randn(512, 512)
    f(x)
    f(x)
    exe = next(iter(f._cache.values())).exe
    assert exe.wait(300)
    assert exe._native._team_max < 2
    assert exe._native._pick_team(2) == 2


def _inputs_of(exe):
    rng = np.random.default_rng(0)
    out = []
    for n in exe._inputs:
        d = n.dtype.np
        out.append(rng.standard_normal(n.shape).astype(d) if d.kind == "f" else
                   (np.arange(int(np.prod(n.shape))) % 10).reshape(n.shape).astype(d))
    return out
