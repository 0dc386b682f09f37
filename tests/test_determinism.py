"""Bitwise determinism: the same program gives the same bits in every process, layout and tier.

The bug behind these tests: a small CNN's conv bias gradient took one of two
values from run to run. The oneDNN convolution library loaded in the
background, so thread timing decided which convolutions of a process ran on
NumPy and which on oneDNN; the two differ in their bits and in their output
layout (the NumPy path returns a transposed view), and NumPy's `np.sum`
follows the memory layout, so the bias gradient's sum over (N, H, W) added
in a different order. Now the library loads before the first convolution,
and every float sum adds in `loom.ir.summation`'s order, which the NumPy
reference and the C kernels share.
"""
from __future__ import annotations

import itertools
import os
import subprocess
import sys

import numpy as np
import pytest

import loom
import loom.nn as nn
from loom.codegen import conv as native_conv
from loom.codegen import get_kernel
from loom.ir import PRIMITIVES
from loom.ir.summation import BLOCK, LANES, ordered_sum, sequential_sum
from loom.runtime import reference

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

REPRO = r"""
import hashlib
import numpy as np
import loom, loom.nn as nn
loom.manual_seed(0)
m = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(16 * 28 * 28, 10))
rng = np.random.default_rng(1)
x = loom.tensor(rng.standard_normal((64, 1, 28, 28)).astype(np.float32))
y = loom.tensor(rng.integers(0, 10, (64,)))
loom.nn.functional.cross_entropy(m(x), y).backward()
for name, p in m.named_parameters():
    print(name, hashlib.sha1(p.grad.numpy().tobytes()).hexdigest())
"""


def _aligned_copies(x: np.ndarray) -> list[np.ndarray]:
    """`x` stored at several byte offsets from a 64-byte boundary, C-ordered and transposed."""
    out = []
    for off in range(0, 64, x.itemsize):
        buf = np.empty(x.nbytes + 128, np.uint8)
        start = (-buf.ctypes.data) % 64 + off
        y = buf[start:start + x.nbytes].view(x.dtype).reshape(x.shape)
        y[...] = x
        out.append(y)
    out.append(np.asfortranarray(x))
    out.append(np.ascontiguousarray(x.transpose(1, 0, *range(2, x.ndim))).transpose(1, 0, *range(2, x.ndim)))
    return out


def _values(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    # Magnitudes over six decades: an order change shows in the low bits.
    return (rng.standard_normal(shape) * 10.0 ** rng.integers(-3, 4, shape)).astype(dtype)


# ---------------------------------------------------------------- the order itself

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(5,), (3, 7), (2, 40), (2, 1030), (3, 2 * BLOCK + 37), (4, 3, 5, 6)])
def test_ordered_sum_is_its_definition(shape, dtype):
    """The vectorised NumPy sum gives the loop definition's bits (lanes, block folds, float64 across blocks)
    over every axis set, which also pins NumPy's add.reduce over a middle axis to one element at a time."""
    x = _values(shape, dtype)
    for r in range(1, x.ndim + 1):
        for axes in itertools.combinations(range(x.ndim), r):
            for keep in (False, True):
                got, want = ordered_sum(x, axes, keep), sequential_sum(x, axes, keep)
                assert got.shape == want.shape and got.tobytes() == want.tobytes(), (shape, axes, keep)


def test_ordered_sum_edges():
    """Empty reductions give +0, a sum of zeros is +0 whatever their signs, and rows of up to LANES add in
    one fold."""
    assert ordered_sum(np.zeros((0, 3), np.float32), (0,)).tolist() == [0.0, 0.0, 0.0]
    z = ordered_sum(np.full((2, 5), -0.0, np.float32), (1,))
    assert not np.signbit(z).any()
    x = np.array([1e8, 1.0, -1e8, 1.0], np.float32)  # Lanes 0..3: ((1e8 + -1e8) + (1 + 1)) = 2.
    assert ordered_sum(x, (0,)).item() == 2.0
    assert LANES & (LANES - 1) == 0 and BLOCK % LANES == 0


@pytest.mark.parametrize("axes", [(0, 2, 3), (0,), (2, 3), (1,), (3,), (0, 1, 2, 3)])
def test_reference_sum_does_not_depend_on_layout_or_alignment(axes):
    """The reference `sum` primitive on the same values stored at any alignment or in any order: one result.
    (The conv bias gradient's sum over (N, H, W) changed with the layout its producer chose.)"""
    x = _values((8, 6, 9, 11), np.float32)
    impl = PRIMITIVES["sum"].impl
    results = {impl(c, {"axes": axes, "keepdim": False}).tobytes() for c in _aligned_copies(x)}
    assert len(results) == 1
    assert results == {ordered_sum(x, axes).tobytes()}


# ---------------------------------------------------------------- reference and kernel tiers

def _sum_graph(shape, axes, keep, dtype, perm=None, row=False):
    g = loom.ir.Graph()
    if perm is None:
        x = g.add_input(shape, dtype)
    else:
        stored = g.add_input(tuple(shape[p] for p in perm), dtype)
        x = g.add_node("permute", [stored], {"perm": tuple(perm.index(i) for i in range(len(shape)))})
    y = g.add_node("mul", [x, x])  # Exactly rounded on both tiers: only the summation order is under test.
    s = g.add_node("sum", [y], {"axes": axes, "keepdim": keep or row})
    g.outputs = [g.add_node("sub", [x, g.add_node("expand", [s], {"shape": shape})]) if row else s]
    return g


CASES = [  # shape, axes, keepdim, permuted input, row kernel
    ((16, 8, 28, 28), (0, 2, 3), False, None, False),   # The conv bias gradient's reduction.
    ((16, 8, 28, 28), (2,), True, None, False),          # Tiles of outputs (mode B), fewer rows than lanes.
    ((3, 5000), (0,), False, None, False),
    ((5000, 3), (0,), False, None, False),
    ((7, 2 * BLOCK + 37), (1,), False, None, False),     # Blocks, lanes and a tail.
    ((1, 3 * BLOCK + 5), (1,), False, None, False),      # Few outputs: no split across threads.
    ((40, 33, 3), (0, 2), True, (2, 1, 0), False),       # Strided (permuted) input.
    ((300, 1500), (1,), True, None, True),               # Row kernel (softmax's shape).
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", [loom.float32, loom.float64])
@pytest.mark.parametrize("shape, axes, keep, perm, row", CASES)
def test_kernel_sums_give_the_reference_bits(monkeypatch, shape, axes, keep, perm, row, dtype, threads):
    """A compiled kernel's float sum is the NumPy reference's bit for bit, at any thread count: the tier
    a call runs on (the reference until its kernel is built) never shows in the result."""
    monkeypatch.setenv("LOOM_CODEGEN_SYNC", "1")
    monkeypatch.setenv("LOOM_PAR_MIN", "1")  # Even small kernels split across the threads.
    g = _sum_graph(shape, axes, keep, dtype, perm, row)
    kernel = get_kernel(g)
    assert kernel.wait(120) and kernel.ready, kernel.fallback_reason
    a = _values(g.inputs[0].shape, dtype.np, seed=3)
    want = np.asarray(reference.run_subgraph(g, [a]))
    before = loom.get_num_threads()
    loom.set_num_threads(threads)
    try:
        for stored in _aligned_copies(a)[:3]:
            out = np.empty(g.outputs[0].shape, dtype.np)
            kernel([stored], out)
            assert out.tobytes() == want.tobytes()
    finally:
        loom.set_num_threads(before)


# ---------------------------------------------------------------- the convolution model

def _model_grads(compiled: bool) -> dict[str, bytes]:
    """The conv model's gradients under an MSE loss: no exp or log, whose libm and NumPy versions differ by
    an ulp, so every difference between the tiers would come from an order of additions."""
    loom.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 12 * 12, 10))
    rng = np.random.default_rng(1)
    x = loom.tensor(rng.standard_normal((16, 1, 12, 12)).astype(np.float32))
    y = loom.tensor(rng.standard_normal((16, 10)).astype(np.float32))

    def step(x, y):
        loss = loom.nn.functional.mse_loss(m(x), y)
        loss.backward()
        return loss
    (loom.function(step, warmup=0) if compiled else step)(x, y)
    return {name: p.grad.numpy().tobytes() for name, p in m.named_parameters()}


def test_conv_library_is_decided_before_the_first_convolution():
    """The first convolution finds the native library loaded (or known missing), never still building:
    which path a convolution takes must not depend on a build thread's timing."""
    native_conv.reset()
    try:
        x = loom.tensor(np.ones((1, 1, 6, 6), np.float32))
        w = loom.tensor(np.ones((2, 1, 3, 3), np.float32))
        loom.nn.functional.conv2d(x, w, padding=1).numpy()
        assert native_conv.CONV.state["status"] in ("ready", "failed")
    finally:
        native_conv.reset()


def test_conv_bias_grad_is_the_same_in_eager_and_compiled_tiers(monkeypatch):
    """Eager (the NumPy reference path) and `loom.function` (compiled at its first call, every kernel built
    before it runs) give the conv model's gradients bit for bit, the conv bias gradient (a sum over N, H, W
    in a C kernel) included."""
    monkeypatch.setenv("LOOM_CODEGEN_SYNC", "1")
    from loom.codegen import cache
    builds = cache.stats()
    eager = _model_grads(False)
    compiled = _model_grads(True)
    after = cache.stats()
    assert after["builds"] + after["disk_hits"] + after["memory_hits"] > \
        builds["builds"] + builds["disk_hits"] + builds["memory_hits"]  # Kernels ran.
    assert compiled.keys() == eager.keys()
    for name in eager:
        assert compiled[name] == eager[name], name


def _run_repro(env: dict) -> str:
    return subprocess.run([sys.executable, "-c", REPRO], cwd=ROOT, env=env, capture_output=True, text=True,
                          check=True, timeout=300).stdout


def test_gradients_are_the_same_in_fresh_processes(tmp_path):
    """The bug's repro in fresh processes: a cold kernel cache (the conv library built in that process) and
    two warm ones started together give every gradient, the conv bias's included, bit for bit."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               LOOM_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("LOOM_CODEGEN_SYNC", None)
    first = _run_repro(env)
    procs = [subprocess.Popen([sys.executable, "-c", REPRO], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in outs]
    assert len(first.splitlines()) == 4 and "0.bias" in first
    for out, _ in outs:
        assert out == first


def test_row_references_do_not_depend_on_layout():
    """layer_norm and cross-entropy rows (and their backwards) on the NumPy path: the same bits for C- and
    Fortran-ordered operands (their row sums and means followed the memory layout)."""
    from loom.ir import rows
    rng = np.random.default_rng(0)
    x, gy = _values((64, 40), np.float32), rng.standard_normal((64, 40)).astype(np.float32)
    w, t, g = rng.standard_normal(40).astype(np.float32), rng.integers(0, 40, 64), x[:, 0].copy()
    xf, gyf, eps = np.asfortranarray(x), np.asfortranarray(gy), {"eps": 1e-5}
    pairs = [(rows.reference_ln(x, w, w, eps), rows.reference_ln(xf, w, w, eps)),
             (rows.reference_ln_grad(x, w, gy, eps), rows.reference_ln_grad(xf, w, gyf, eps)),
             (rows.reference_ce(x, t, {}), rows.reference_ce(xf, t, {})),
             (rows.reference_ce_grad(x, t, g, {}), rows.reference_ce_grad(xf, t, g, {}))]
    for a, b in pairs:
        assert a.tobytes() == b.tobytes()
