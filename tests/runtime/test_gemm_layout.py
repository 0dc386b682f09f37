"""Transposes as strides in the native step: views keep their source alive, producers write in their permute's layout,
and GEMM epilogues run right after their GEMM (loom.runtime.native, loom.codegen.gemm)."""
import numpy as np

import loom
import loom.nn.functional as F
from loom import nn
from loom.runtime import native
from tests.runtime.test_native import _check, _kinds, _traced


def _attention_step():
    """A one-block causal self-attention training step: head split and merge, q @ k^T, weight gradients."""
    loom.manual_seed(0)
    B, T, C, H = 2, 8, 16, 4
    qkv, proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
    opt = loom.optim.SGD(list(qkv.parameters()) + list(proj.parameters()), lr=0.1)
    mask = loom.tensor(np.tril(np.ones((T, T), bool)))

    def step(x):
        opt.zero_grad()
        q, k, v = qkv(x).reshape(B, T, 3, H, C // H).permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-2, -1)) * (1.0 / (C // H) ** 0.5)
        att = F.softmax(att.masked_fill(~mask, float("-inf")), -1)
        y = (att @ v).permute(0, 2, 1, 3).reshape(B, T, C)
        loss = (proj(y) ** 2).mean()
        loss.backward()
        opt.step()
        return loss
    return step, loom.randn(B, T, C)


def test_attention_step_has_no_copy_steps(monkeypatch):
    step, x = _attention_step()
    exe = _traced(step, x)
    _check(exe, monkeypatch, exact_vs_python=False)
    kinds = _kinds(exe)
    assert native._COPY not in kinds, "head split/merge and k^T are strides, not copies"
    assert native._PY not in kinds
    assert kinds.count(native._GEMM) >= 10


def test_producer_writes_in_its_permute_layout(monkeypatch):
    def fn(a, b, w):
        y = (a @ b).permute(0, 2, 1, 3)          # Head merge: the GEMM writes (b, t, h, d) directly.
        z = (a.exp() * 2.0).permute(0, 2, 1, 3)  # A kernel writes in the permuted layout too.
        return y.reshape(10, 12) @ w, z.reshape(10, 12) @ w

    rng = np.random.default_rng(0)
    a, b, w = (loom.tensor(rng.standard_normal(s).astype(np.float32)) for s in ((2, 3, 5, 4), (2, 3, 4, 4), (12, 6)))
    exe = _traced(fn, a, b, w)
    _check(exe, monkeypatch, exact_vs_python=False)
    prog = exe._native
    strided = [s for s in exe._steps if s.node.op in ("matmul", "fused") and s.out in prog._locs
               and prog._locs[s.out].base == 0 and prog._locs[s.out].strides != native._contiguous(
                   prog._locs[s.out].shape, 4)]
    assert {s.node.op for s in strided} == {"matmul", "fused"}
    assert native._COPY not in _kinds(exe)
