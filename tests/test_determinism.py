"""Bitwise determinism: the same program gives the same bits in every process, layout and tier.

The bug behind these tests: a small CNN's conv bias gradient took one of two
values from run to run. The oneDNN convolution library loaded in the
background, so thread timing decided which convolutions of a process ran on
NumPy and which on oneDNN; the two differ in their bits and in their output
layout (the NumPy path returns a transposed view), and NumPy's `np.sum`
follows the memory layout, so the bias gradient's sum over (N, H, W) added
in a different order. Now the library loads before the first convolution,
and the NumPy reference sums (and row kernels) read their operand in C order
whatever layout it arrived in.

The C kernels keep their own (vectorised, thread-count-independent) order, so
the compiled tier is checked against the reference within the parity
tolerances, not bit for bit (tests/parity).
"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import loom
from loom.codegen import conv as native_conv
from loom.ir import PRIMITIVES

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


@pytest.mark.parametrize("axes", [(0, 2, 3), (0,), (2, 3), (1,), (3,), (0, 1, 2, 3)])
def test_reference_sum_does_not_depend_on_layout_or_alignment(axes):
    """The reference `sum` primitive on the same values stored at any alignment or in any order: one result.
    (The conv bias gradient's sum over (N, H, W) changed with the layout its producer chose.)"""
    x = _values((8, 6, 9, 11), np.float32)
    impl = PRIMITIVES["sum"].impl
    results = {impl(c, {"axes": axes, "keepdim": False}).tobytes() for c in _aligned_copies(x)}
    assert len(results) == 1
    assert results == {np.sum(np.ascontiguousarray(x), axis=axes).tobytes()}


# ---------------------------------------------------------------- the convolution model

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
