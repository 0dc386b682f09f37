"""loom.utils.checkpoint under loom.function: the recomputation survives the passes and shrinks the arena."""
import warnings

import numpy as np
import pytest

import loom
from loom.bench.workloads import api
from loom.bench.workloads import gpt as gpt_workload
from loom.utils.checkpoint import checkpoint
from tests.compiler.test_memory_budget import _arena, _assert_same, small_gpt  # noqa: F401

LAYERS, WIDTH, BATCH = 6, 128, 256


def _mlp(ckpt: bool):
    """Six Linear+ReLU layers, checkpointed two at a time (or plainly), trained by SGD."""
    loom.manual_seed(0)
    layers = [loom.nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS)]
    params = [p for lin in layers for p in lin.parameters()]
    opt = loom.optim.SGD(params, lr=0.01)

    def pair(h, a, b):
        return b(a(h).relu()).relu()

    def step(x, y):
        opt.zero_grad()
        h = x
        for k in range(0, LAYERS, 2):
            h = checkpoint(pair, h, layers[k], layers[k + 1], use_reentrant=False) if ckpt else \
                pair(h, layers[k], layers[k + 1])
        loss = ((h - y) ** 2).mean()
        loss.backward()
        opt.step()
        return loss
    return params, step


def _data():
    rng = np.random.default_rng(0)
    return [tuple(loom.tensor(rng.standard_normal((BATCH, WIDTH)).astype(np.float32)) for _ in range(2))
            for _ in range(2)]


def _train(build, data, steps, traced):
    params, step = build()
    fn = loom.function(step) if traced else step
    losses = [fn(*data[k % len(data)]).detach().numpy().copy() for k in range(steps)]
    return losses, [p.detach().numpy().copy() for p in params], fn


def _count(fn, op):
    (entry,) = fn._cache.values()
    return sum(1 for n in entry.exe.graph if n.op == op)


def test_checkpointed_mlp_under_function_recomputes_and_plans_a_smaller_arena_bit_identically():
    data = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", loom.LoomWarning)
        eager = _train(lambda: _mlp(False), data, 4, traced=False)
        eager_ckpt = _train(lambda: _mlp(True), data, 4, traced=False)
        plain = _train(lambda: _mlp(False), data, 4, traced=True)
        ckpt = _train(lambda: _mlp(True), data, 4, traced=True)
    # Checkpointing changes no bit, eagerly or traced. (The traced step and the eager one differ in the last
    # bit of one loss with or without checkpoints: the compiled kernels' own rounding, not checkpointing's.)
    for (losses, params, _), want in ((eager_ckpt, eager), (ckpt, plain)):
        _assert_same(losses, want[0])
        _assert_same(params, want[1])
    plain_fn, ckpt_fn = plain[2], ckpt[2]
    # Forward 6 matmuls, backward 6 weight and 5 input gradients; each checkpointed pair runs its 2 again.
    assert _count(plain_fn, "matmul") == 17 and _count(ckpt_fn, "matmul") == 17 + LAYERS
    # Each layer keeps its input and ReLU output for the backward (two 128 KiB values) without checkpoints;
    # with them only the three segments' inputs are kept, and a segment's inside lives during its backward.
    small, full = _arena(ckpt_fn), _arena(plain_fn)
    assert small <= 0.6 * full, (small, full)
    assert loom.compiler.explain(ckpt_fn).memory.arena_bytes == small
    assert loom.compiler.explain(plain_fn).memory.arena_bytes == full


def test_recomputation_is_kept_apart_only_where_the_trace_marked_it():
    """CSE still merges a plain repeated computation, and a recomputation with itself."""
    from loom.compiler.passes.cse import cse
    g = loom.ir.Graph()
    x = g.add_input((4,), "float32")
    a, b, c, d = (g.add_node("exp", [x]) for _ in range(4))
    g.outputs = [g.add_node("add", [g.add_node("add", [a, b]), g.add_node("add", [c, d])])]
    g.meta["recompute"] = {c: 1, d: 1}
    out = cse(g)
    assert sum(1 for n in out if n.op == "exp") == 2   # a and b merged, c and d merged, the two kept apart.


def test_a_recomputed_node_that_simplify_rewrites_stays_apart_from_its_forward_twin():
    from loom.compiler.passes.cse import cse
    from loom.compiler.passes.simplify import simplify
    g = loom.ir.Graph()
    x = g.add_input((2, 3, 4), "float32")

    def chain():   # Two permutes that simplify composes into one new permute.
        return g.add_node("permute", [g.add_node("permute", [x], {"perm": (1, 0, 2)})], {"perm": (0, 2, 1)})
    fwd, rec = chain(), chain()
    g.outputs = [g.add_node("add", [g.add_node("exp", [fwd]), g.add_node("exp", [rec])])]
    g.meta["recompute"] = {rec: 1, rec.inputs[0]: 1}
    out = cse(simplify(g))
    permutes = [n for n in out if n.op == "permute"]
    assert len(permutes) == 2 and all(len(n.inputs) == 1 and n.inputs[0] is x for n in permutes)
    assert sum(1 for n in permutes if n in out.meta["recompute"]) == 1


def _gpt_step(ckpt: bool):
    a = api("loom")
    loom.manual_seed(0)
    model = gpt_workload.model(a)
    opt = gpt_workload.optimizer(a, model.parameters())

    def forward(idx):
        x = model.tok(idx) + model.pos(loom.arange(idx.shape[1]))
        for block in model.blocks:
            x = checkpoint(block, x, use_reentrant=False) if ckpt else block(x)
        return model.head(model.ln_f(x))

    def step(x, y):
        opt.zero_grad()
        loss = loom.nn.functional.cross_entropy(forward(x).reshape(-1, gpt_workload.VOCAB), y.reshape(-1))
        loss.backward()
        opt.step()
        return loss
    return list(model.parameters()), step


def test_checkpointed_gpt_blocks_under_function_plan_a_smaller_arena_bit_identically(small_gpt):  # noqa: F811
    _, data = small_gpt
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", loom.LoomWarning)
        eager = _train(lambda: _gpt_step(False), data, 3, traced=False)
        eager_ckpt = _train(lambda: _gpt_step(True), data, 3, traced=False)
        plain = _train(lambda: _gpt_step(False), data, 3, traced=True)
        ckpt = _train(lambda: _gpt_step(True), data, 3, traced=True)
    for (losses, params, _), want in ((eager_ckpt, eager), (ckpt, plain)):
        _assert_same(losses, want[0])
        _assert_same(params, want[1])
    assert _count(ckpt[2], "matmul") > _count(plain[2], "matmul")
    assert _arena(ckpt[2]) < _arena(plain[2]), (_arena(ckpt[2]), _arena(plain[2]))


@pytest.mark.parametrize("offload", ["never", "auto"])
def test_checkpoints_and_a_memory_budget_together_stay_bit_identical(offload):
    data = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", loom.LoomWarning)
        plain = _train(lambda: _mlp(False), data, 3, traced=True)
        params, step = _mlp(True)
        fn = loom.function(step, memory_budget=int(_arena(plain[2]) * 0.6) + 2**20, offload=offload)
        losses = [fn(*data[k % len(data)]).detach().numpy().copy() for k in range(3)]
    _assert_same(losses, plain[0])
    _assert_same([p.detach().numpy().copy() for p in params], plain[1])
    assert _count(fn, "matmul") >= 17 + LAYERS
