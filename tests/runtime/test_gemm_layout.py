"""Transposes as strides in the native step: views keep their source alive, producers write in their permute's layout,
and GEMM epilogues run right after their GEMM (loom.runtime.native, loom.codegen.gemm)."""
import numpy as np
import pytest

import loom
import loom.nn.functional as F
from loom import nn
from loom.runtime import native, reference
from tests.runtime.test_native import _check, _inputs, _kinds, _mlp_sgd_step, _python_path, _traced


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
    # Head split/merge and k^T are strides; a permute of a fused kernel's output is copied once (kernels
    # write row-major: their bits must not depend on the layout the plan gives them).
    assert kinds.count(native._COPY) <= 1
    assert native._PY not in kinds
    assert kinds.count(native._GEMM) >= 10


def test_producer_writes_in_its_permute_layout(monkeypatch):
    def fn(a, b, w):
        y = (a @ b).permute(0, 2, 1, 3)          # Head merge: the GEMM writes (b, t, h, d) directly.
        z = (a.exp() * 2.0).permute(0, 2, 1, 3)  # A kernel writes row-major; its permute is one copy.
        return y.reshape(10, 12) @ w, z.reshape(10, 12) @ w

    rng = np.random.default_rng(0)
    a, b, w = (loom.tensor(rng.standard_normal(s).astype(np.float32)) for s in ((2, 3, 5, 4), (2, 3, 4, 4), (12, 6)))
    exe = _traced(fn, a, b, w)
    _check(exe, monkeypatch, exact_vs_python=False)
    prog = exe._native
    strided = [s for s in exe._steps if s.node.op in ("matmul", "fused") and s.out in prog._locs
               and prog._locs[s.out].base == 0 and prog._locs[s.out].strides != native._contiguous(
                   prog._locs[s.out].shape, 4)]
    assert {s.node.op for s in strided} == {"matmul"}
    assert _kinds(exe).count(native._COPY) == 1


def _epilogue_kernels(exe):
    """(GEMM records, kernel records that run as a GEMM's epilogue) of the native table."""
    steps = exe._native._table[2]
    return sum(s.kind == native._GEMM for s in steps), sum(s.kind == native._KERNEL and s.pre is not None
                                                            for s in steps)


def test_epilogues_run_on_row_blocks(monkeypatch):
    monkeypatch.setenv("LOOM_GEMM_BLOCK_BYTES", "4096")  # 32 rows of 32 floats: blocks of 32, 32, 32, 4 rows.
    rng = np.random.default_rng(1)
    w = [loom.tensor(rng.standard_normal((24, 32)).astype(np.float32) * 0.3) for _ in range(6)]
    bias = loom.tensor(rng.standard_normal(32).astype(np.float32))

    def fn(x, r):
        heads = [
            F.relu(x @ w[0] + bias),             # Bias broadcast over rows, then an activation.
            F.gelu(x @ w[1]),
            (x @ w[2]).tanh() * 0.5,             # Activation and scaling.
            (x @ w[3]).sigmoid(),
            x @ w[4] + r,                        # Residual add.
            F.softmax((x @ w[5]) * 0.25, -1),    # Read by two kernels (max, then exp and sum): no epilogue.
        ]
        return tuple(heads)

    x = loom.tensor(rng.standard_normal((100, 24)).astype(np.float32))
    r = loom.tensor(rng.standard_normal((100, 32)).astype(np.float32))
    with loom.no_grad():
        exe = _traced(fn, x, r)
    _check(exe, monkeypatch, exact_vs_python=False)
    gemms, epilogues = _epilogue_kernels(exe)
    assert list(map(len, exe._native._chains.values())) == [1] * 5
    assert (gemms, epilogues) == (5 * 4 + 1, 5 * 4), "each GEMM and its kernel as 4 alternating row blocks"
    want = [np.maximum(x.numpy() @ w[0].numpy() + bias.numpy(), 0), None, None, None,
            x.numpy() @ w[4].numpy() + r.numpy(), None]
    got = exe(*[a.numpy() for a in (x, r, bias, *w)])  # The graph's inputs: the arguments, then captures.
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[4], want[4], rtol=1e-5, atol=1e-5)


def test_training_step_epilogues_match_python_path(monkeypatch):
    monkeypatch.setenv("LOOM_GEMM_BLOCK_BYTES", "2048")
    exe = _mlp_sgd_step(70, second_act=nn.GELU)
    _check(exe, monkeypatch, exact_vs_python=False)
    gemms, epilogues = _epilogue_kernels(exe)
    # Blocks of 32 rows (the least): 3 per 32-wide layer, for two forward bias adds and two activation gradients.
    assert epilogues >= 4 * 3, "forward bias adds and backward activation gradients run on row blocks"
    assert gemms > 8


def test_whole_gemm_then_epilogue_when_blocks_are_off(monkeypatch):
    monkeypatch.setenv("LOOM_GEMM_BLOCK_BYTES", "0")
    rng = np.random.default_rng(2)
    w = loom.tensor(rng.standard_normal((8, 16)).astype(np.float32))

    def fn(x):
        return F.relu(x @ w + 1.0)

    with loom.no_grad():
        exe = _traced(fn, loom.tensor(rng.standard_normal((64, 8)).astype(np.float32)))
    _check(exe, monkeypatch, exact_vs_python=False)
    assert _epilogue_kernels(exe) == (1, 1)


@pytest.mark.parametrize("d", [loom.float16, loom.bfloat16], ids=lambda d: d.name)
def test_half_precision_step_runs_in_c(d, monkeypatch):
    rng = np.random.default_rng(3)
    w = loom.tensor(rng.standard_normal((24, 16)).astype(np.float32) * 0.2).to(d)
    v = loom.tensor(rng.standard_normal((2, 16, 8)).astype(np.float32) * 0.2).to(d)
    b = loom.tensor(rng.standard_normal(16).astype(np.float32)).to(d)

    def fn(x):
        h = F.relu(x @ w + b)                          # A GEMM, then a half kernel.
        return (h.reshape(2, 20, 16) @ v).sum(-1), x.t() @ h  # Batched; transposed operand.

    x = loom.tensor(rng.standard_normal((40, 24)).astype(np.float32)).to(d)
    with loom.no_grad():
        exe = _traced(fn, x)
    arrays = _inputs(exe)
    got = exe(*arrays)
    kinds = _kinds(exe)
    assert kinds.count(native._HGEMM) == 3 and native._KERNEL in kinds and native._PY not in kinds
    want = _python_path(exe, monkeypatch)(*arrays)
    for g, r in zip(got, want):
        g, r = (reference.to_compute(a, d).astype(np.float64) for a in (g, r))
        eps = 2.0 ** -10 if d is loom.float16 else 2.0 ** -7
        np.testing.assert_allclose(g, r, rtol=4 * eps, atol=4 * eps * np.abs(r).max())


def _chain_records(exe):
    """(probe records, epilogue block records) of the native table's GEMM epilogue chains."""
    steps = exe._native._table[2]
    return [s for s in steps if s.kind == native._KERNEL and s.skip > 0], [s for s in steps if s.skip < 0]


def _two_layer_step(opt_name):
    loom.manual_seed(0)
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 48))
    opt = loom.optim.SGD(model.parameters(), lr=0.01, momentum=0.9) if opt_name == "sgd" else \
        loom.optim.Adam(model.parameters(), lr=1e-3) if opt_name == "adam" else \
        loom.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)

    def step(x):
        opt.zero_grad()
        loss = (model(x) ** 2).mean()
        loss.backward()
        opt.step()
        return loss
    return step, model


@pytest.mark.parametrize("opt_name", ["sgd", "adam", "adamw"])
def test_optimizer_update_runs_on_its_weight_gradient_rows(opt_name, monkeypatch):
    monkeypatch.setenv("LOOM_GEMM_BLOCK_BYTES", "4096")
    monkeypatch.setattr(native, "_CHAIN_BLOCKS", True)  # (Off by default: see native._CHAIN_BLOCKS.)
    step, model = _two_layer_step(opt_name)
    exe = _traced(step, loom.randn(16, 20))
    _check(exe, monkeypatch, exact_vs_python=False)
    prog = exe._native
    weights = {tuple(p.shape) for p in model.parameters() if p.ndim == 2}
    # Per weight: its state and value updates (SGD: momentum buffer, weight; Adam: two moments, weight).
    chained = [chain for chain in prog._chains.values()
               if {tuple(prog._steps[j].node.shape) for j in chain} <= weights and len(chain) >= 2]
    assert len(chained) == 2
    assert all(len(chain) >= (2 if opt_name == "sgd" else 3) for chain in chained)
    probes, blocks = _chain_records(exe)
    assert len(probes) >= sum(len(c) for c in chained)
    assert len(blocks) > len(probes), "each member runs on several row blocks"


def test_optimizer_update_runs_right_after_its_weight_gradient(monkeypatch):
    """By default a chain of several kernels runs whole, each right after the GEMM (no probes, no blocks)."""
    monkeypatch.setenv("LOOM_GEMM_BLOCK_BYTES", "4096")
    step, model = _two_layer_step("adamw")
    exe = _traced(step, loom.randn(16, 20))
    _check(exe, monkeypatch, exact_vs_python=False)
    prog = exe._native
    table = prog._table[2]
    for k, chain in prog._chains.items():
        if len(chain) < 2:
            continue
        early = prog._hoisted.get(k, ())
        at = [i for i, s in enumerate(table) if s.st is prog._steps[k]]
        assert len(at) == 1, "the GEMM runs whole"
        order = [prog._steps.index(s.st) for s in table[at[0] - len(early):at[0] + 1 + len(chain)]]
        assert order == [*early, k, *chain]
    assert any(len(c) >= 3 for c in prog._chains.values()), "AdamW's moments and weight follow its gradient"
    assert _chain_records(exe) == ([], [])


@pytest.mark.parametrize("opt_name", ["sgd", "adamw"])
def test_chained_updates_train_as_eager_does(opt_name, monkeypatch):
    """Donated parameters and optimizer state updated on row blocks: loom.function's training == eager's."""
    monkeypatch.setenv("LOOM_GEMM_BLOCK_BYTES", "4096")
    monkeypatch.setattr(native, "_CHAIN_BLOCKS", True)

    def run(traced):
        step, model = _two_layer_step(opt_name)
        fn = loom.function(step) if traced else step
        rng = np.random.default_rng(1)
        losses = [fn(loom.tensor(rng.standard_normal((16, 20)).astype(np.float32))).item() for _ in range(6)]
        if traced:
            assert any(len(c) >= 2 for c in next(iter(fn._cache.values())).exe._native._chains.values())
        return losses, [p.detach().numpy().copy() for p in model.parameters()]
    el, ep = run(False)
    tl, tp = run(True)
    np.testing.assert_allclose(tl, el, rtol=1e-5)
    for a, b in zip(tp, ep):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_refused_probe_runs_the_chain_from_python(monkeypatch):
    """A chain member that refuses the call (here: a forged alignment) does so in its probe, before any block
    ran; Python runs the GEMM and the members whole, the walk skips the blocks, and the chain stays unblocked."""
    monkeypatch.setenv("LOOM_GEMM_BLOCK_BYTES", "4096")
    monkeypatch.setattr(native, "_CHAIN_BLOCKS", True)
    step, _ = _two_layer_step("sgd")
    exe = _traced(step, loom.randn(16, 20))
    exe, arrays, got = _check(exe, monkeypatch, exact_vs_python=False)
    prog = exe._native
    probes, _ = _chain_records(exe)
    table = prog._table
    k = table[2].index(probes[0])
    meta_ptr = int(table[0][table[0][4 + k] + 2])
    (meta,) = [m for m in table[3] if m.ctypes.data == meta_ptr]
    meta[4 + 2 * int(meta[2]) + 3] = 2**31 - 1  # The output's alignment: no pointer meets it (-2).
    again = exe(*arrays)
    for g, w in zip(again, got):
        np.testing.assert_array_equal(g, w)
    assert prog._steps.index(probes[0].st) in prog._forced
    assert exe(*arrays) is not None and prog._fast is not None
    assert not any(s.skip and s.st is probes[0].st for s in prog._table[2]), "the refused member runs whole"


def test_epilogue_reading_its_gemm_transposed_waits_for_the_whole_gemm(monkeypatch):
    """A kernel reading its GEMM's C across rows (a transpose) would read rows not computed yet: it runs after
    the whole GEMM, not on row blocks (`gemm.reads_within_rows`)."""
    monkeypatch.setenv("LOOM_GEMM_BLOCK_BYTES", "4096")
    rng = np.random.default_rng(4)
    w = loom.tensor(rng.standard_normal((64, 64)).astype(np.float32))

    def fn(x):
        return (x @ w).t() * 2.0 + 1.0

    with loom.no_grad():
        exe = _traced(fn, loom.tensor(rng.standard_normal((64, 64)).astype(np.float32)))
    _check(exe, monkeypatch, exact_vs_python=False)
    x2 = rng.standard_normal((64, 64)).astype(np.float32)
    np.testing.assert_allclose(exe(x2, w.numpy())[0], (x2 @ w.numpy()).T * 2 + 1, rtol=1e-5, atol=1e-5)
    assert _epilogue_kernels(exe) == (1, 0)
