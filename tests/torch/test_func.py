"""loom.func (torch.func) and torch.vmap against PyTorch's on the uses they are made for."""
import numpy as np
import pytest

import loom
import loom.func as func
import loom.torch as ltorch

torch = pytest.importorskip("torch")
tfunc = torch.func


def _both(*arrays):
    return [loom.tensor(a) for a in arrays], [torch.from_numpy(np.array(a)) for a in arrays]


def _close(got, want, rtol=1e-5, atol=1e-6):
    if isinstance(want, dict):
        assert set(got) == set(want)
        for k in want:
            _close(got[k], want[k], rtol, atol)
        return
    if isinstance(want, (tuple, list)):
        assert type(got) is type(want) and len(got) == len(want)
        for g, w in zip(got, want):
            _close(g, w, rtol, atol)
        return
    assert isinstance(got, loom.Tensor), type(got)
    assert tuple(got.shape) == tuple(want.shape), (got.shape, want.shape)
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=rtol, atol=atol)


def test_torch_names():
    import loom.torch.func as tf
    assert ltorch.vmap is func.vmap and ltorch.func.grad is func.grad and tf.vmap is func.vmap


def test_vmap_in_dims_out_dims_and_pytrees():
    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal(s).astype(np.float32) for s in [(3, 4), (4, 5), (4, 3)])
    (la, lb, lc), (ta, tb, tc) = _both(a, b, c)

    def f(x, y):
        return {"s": x * y["w"] + y["b"].sum(), "p": (x.exp(), x.sum())}

    def run(lib, vm, x, y, z):
        return vm(f, in_dims=(1, {"w": None, "b": 0}), out_dims=-1)(x, {"w": y[0, :3], "b": z})

    _close(run(loom, func.vmap, la, lb, lc), run(torch, tfunc.vmap, ta, tb, tc))
    _close(func.vmap(lambda x, y: x @ y, in_dims=(0, None), out_dims=1)(la, lb),
           tfunc.vmap(lambda x, y: x @ y, in_dims=(0, None), out_dims=1)(ta, tb))
    # Nested: an outer product by two maps, the inner one over the other argument.
    outer = func.vmap(func.vmap(lambda x, y: x * y, in_dims=(None, 0)), in_dims=(0, None))
    _close(outer(la[:, 0], lb[0]), torch.outer(ta[:, 0], tb[0]))
    # Negative dims and a list of inputs.
    _close(func.vmap(lambda xs: xs[0] + xs[1], in_dims=([-1, 0],))([la, lc]),
           tfunc.vmap(lambda xs: xs[0] + xs[1], in_dims=([-1, 0],))([ta, tc]))


def test_vmap_errors():
    x = loom.ones(3, 2)
    with pytest.raises(loom.LoomValueError, match="same size"):
        func.vmap(lambda a, b: a + b)(x, loom.ones(4, 2))
    with pytest.raises(loom.LoomValueError, match="no input is mapped"):
        func.vmap(lambda a: a, in_dims=None)(x)
    with pytest.raises(loom.LoomValueError, match="in_dim 2 .*has 2 dims|is 2 but the tensor has 2 dims"):
        func.vmap(lambda a: a, in_dims=2)(x)
    with pytest.raises(loom.LoomError, match="random op"):
        func.vmap(lambda a: a + loom.rand(2))(x)
    with pytest.raises(loom.LoomValueError, match="in_dims has 1 entries"):
        func.vmap(lambda a, b: a, in_dims=(0,))(x, x)


def test_vmap_randomness():
    x = loom.zeros(4, 3)
    diff = func.vmap(lambda a: a + loom.rand(3), randomness="different")(x)
    same = func.vmap(lambda a: a + loom.rand(3), randomness="same")(x)
    assert not np.allclose(diff[0].numpy(), diff[1].numpy())
    np.testing.assert_array_equal(same.numpy(), np.broadcast_to(same[0].numpy(), (4, 3)))


def _mlp_pair():
    loom.manual_seed(0)
    lm = loom.nn.Sequential(loom.nn.Linear(5, 8), loom.nn.Tanh(), loom.nn.Linear(8, 3))
    tm = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    with torch.no_grad():
        for (_, lp), (_, tp) in zip(lm.named_parameters(), tm.named_parameters()):
            tp.copy_(torch.from_numpy(lp.detach().numpy()))
    return lm, tm


def test_per_sample_gradients_of_an_mlp():
    lm, tm = _mlp_pair()
    rng = np.random.default_rng(1)
    (lx, ly), (tx, ty) = _both(rng.standard_normal((6, 5)).astype(np.float32), rng.integers(0, 3, 6))

    def make(lib, f, model):
        def loss(params, x, y):
            out = f.functional_call(model, params, (x.unsqueeze(0),))
            return lib.nn.functional.cross_entropy(out, y.unsqueeze(0))
        return f.vmap(f.grad(loss), in_dims=(None, 0, 0))

    lp = {k: v.detach() for k, v in lm.named_parameters()}
    tp = {k: v.detach() for k, v in tm.named_parameters()}
    got, want = make(loom, func, lm)(lp, lx, ly), make(torch, tfunc, tm)(tp, tx, ty)
    _close(got, want, rtol=1e-4, atol=1e-6)
    assert got["0.weight"].shape == (6, 8, 5) and not got["0.weight"].requires_grad


def test_grad_argnums_aux_and_value():
    rng = np.random.default_rng(2)
    (la, lb), (ta, tb) = _both(*(rng.standard_normal(4).astype(np.float64) for _ in range(2)))

    def f(x, y):
        return (x.sin() * y).sum(), x.cos()

    _close(func.grad(f, argnums=(0, 1), has_aux=True)(la, lb), tfunc.grad(f, argnums=(0, 1), has_aux=True)(ta, tb))
    _close(func.grad_and_value(lambda x, y: f(x, y)[0], argnums=1)(la, lb),
           tfunc.grad_and_value(lambda x, y: f(x, y)[0], argnums=1)(ta, tb))
    # Third derivative by nesting.
    g3 = func.grad(func.grad(func.grad(lambda x: x.sin() * x)))
    t3 = tfunc.grad(tfunc.grad(tfunc.grad(lambda x: x.sin() * x)))
    _close(g3(la[0]), t3(ta[0]))
    with pytest.raises(loom.LoomValueError, match="one element"):
        func.grad(lambda x: x * 2)(la)


def test_grad_keeps_the_graph_to_closed_over_leaves():
    w = loom.tensor(3.0, requires_grad=True)
    g = func.grad(lambda x: (x * w) ** 2)(loom.tensor(2.0))  # d/dx = 2 x w^2 = 36
    assert g.requires_grad and g.item() == 36.0
    g.backward()
    assert w.grad.item() == 24.0  # d/dw of 2 x w^2 = 4 x w


def test_vjp_and_jvp():
    rng = np.random.default_rng(3)
    (lx, lv), (tx, tv) = _both(rng.standard_normal((3, 2)), rng.standard_normal((3, 2)))

    def f(x):
        return x.exp() * x.sum(0), x.tanh()

    lo, lfn = func.vjp(f, lx)
    to, tfn = tfunc.vjp(f, tx)
    _close(lo, to)
    _close(lfn((lv, lv * 2)), tfn((tv, tv * 2)))
    _close(lfn((lv, lv)), tfn((tv, tv)))  # Callable more than once.
    _close(func.jvp(f, (lx,), (lv,)), tfunc.jvp(f, (tx,), (tv,)))
    _close(func.jvp(lambda a, b: a * b, (lx, lv), (lv, lx)), tfunc.jvp(lambda a, b: a * b, (tx, tv), (tv, tx)))


def test_jacobians_and_hessian():
    rng = np.random.default_rng(4)
    (lx, ly), (tx, ty) = _both(rng.standard_normal(3), rng.standard_normal((2, 3)))

    def f(x, y):
        return (y @ x.sin()).exp(), x * y

    for lf, tf in [(func.jacrev, tfunc.jacrev), (func.jacfwd, tfunc.jacfwd)]:
        _close(lf(f)(lx, ly), tf(f)(tx, ty))
        _close(lf(f, argnums=(0, 1))(lx, ly), tf(f, argnums=(0, 1))(tx, ty))
        _close(lf(lambda p: p["a"] * p["b"].sum())({"a": lx, "b": ly}),
               tf(lambda p: p["a"] * p["b"].sum())({"a": tx, "b": ty}))

    def scalar(x, y):
        return (x.sin() * (y ** 2).sum(0)).sum() + (x ** 3).prod()

    _close(func.hessian(scalar)(lx, ly), tfunc.hessian(scalar)(tx, ty))
    _close(func.hessian(scalar, argnums=(0, 1))(lx, ly), tfunc.hessian(scalar, argnums=(0, 1))(tx, ty))
    # A batch of Jacobians.
    _close(func.vmap(func.jacrev(lambda x: x.sin() * x.sum()))(ly), tfunc.vmap(tfunc.jacrev(
        lambda x: x.sin() * x.sum()))(ty))


def test_ensembling_with_stacked_module_state():
    loom.manual_seed(5)
    lms = [loom.nn.Linear(4, 2) for _ in range(3)]
    tms = [torch.nn.Linear(4, 2) for _ in range(3)]
    with torch.no_grad():
        for lm, tm in zip(lms, tms):
            tm.weight.copy_(torch.from_numpy(lm.weight.detach().numpy()))
            tm.bias.copy_(torch.from_numpy(lm.bias.detach().numpy()))
    (lx,), (tx,) = _both(np.random.default_rng(5).standard_normal((7, 4)).astype(np.float32))
    lp, lb = func.stack_module_state(lms)
    tp, tb = tfunc.stack_module_state(tms)

    def run(f, base, p, b, x):
        return f.vmap(lambda pp, bb, xx: f.functional_call(base, (pp, bb), (xx,)), in_dims=(0, 0, None))(p, b, x)

    _close(run(func, lms[0], lp, lb, lx), run(tfunc, tms[0], tp, tb, tx))


# ---------------------------------------------------------------- the batched replay and its fallback

@pytest.fixture
def replay_log(monkeypatch):
    """Which vmap calls ran as one batched replay (True) and which fell back to per-sample calls (False)."""
    from loom import _batching
    log = []
    real = _batching.batched_call

    def spy(*args, **kwargs):
        out = real(*args, **kwargs)
        log.append(out is not None)
        return out
    monkeypatch.setattr(_batching, "batched_call", spy)
    return log


OPS = [
    ("softmax_layer_norm", lambda lib, x: lib.nn.functional.layer_norm(x.softmax(-1), (x.shape[-1],))),
    ("sort_cumsum_flip", lambda lib, x: x.sort(-1).values.cumsum(0).flip(0)),
    ("argmax_gather", lambda lib, x: x.gather(1, x.argmax(1, keepdim=True))),
    ("index_where_pad", lambda lib, x: lib.nn.functional.pad(lib.where(x > 0, x, x * x)[1:, ::2], (1, 2))),
    ("reductions_to_0d", lambda lib, x: (x.sum(), x.amax(0), x.var(), x.norm(), x.sum().exp().sum())),
    ("matmul_einsum", lambda lib, x: (x @ x.T, lib.einsum("ij,kj->ik", x, x.exp()))),
    ("conv2d_mapped_weight",
     lambda lib, x: lib.nn.functional.conv2d(x.reshape(1, 1, 3, 4), x[:2, :2].view(1, 1, 2, 2))),
    # A custom C op has no batching rule: per-sample calls, the same values.
    ("igamma_falls_back", lambda lib, x: lib.igamma(x.abs() + 0.5, x.abs())),
    ("scatter_add_cat", lambda lib, x: lib.cat([x, lib.zeros(3, 4).scatter_add(0, (x > 0).long(), x)], 1)),
]


@pytest.mark.parametrize("name,fn", OPS, ids=[n for n, _ in OPS])
def test_batched_replay_matches_pytorch(name, fn, replay_log):
    a = np.random.default_rng(7).standard_normal((5, 3, 4)).astype(np.float32)
    (lx,), (tx,) = _both(a)
    _close(func.vmap(lambda x: fn(loom, x))(lx), tfunc.vmap(lambda x: fn(torch, x))(tx), rtol=1e-4, atol=1e-5)
    assert replay_log == [not name.endswith("falls_back")]


def test_per_sample_gradients_run_as_one_replay(replay_log):
    lm, _ = _mlp_pair()
    params = {k: v.detach() for k, v in lm.named_parameters()}
    x, y = loom.randn(8, 5), loom.randint(0, 3, (8,))

    def loss(p, xi, yi):
        return loom.nn.functional.cross_entropy(func.functional_call(lm, p, (xi.unsqueeze(0),)), yi.unsqueeze(0))
    fast = func.vmap(func.grad(loss), in_dims=(None, 0, 0))(params, x, y)
    slow = {k: loom.stack([func.grad(loss)(params, x[i], y[i])[k] for i in range(8)]) for k in params}
    _close(fast, {k: torch.from_numpy(v.numpy()) for k, v in slow.items()}, rtol=1e-5, atol=1e-6)
    assert replay_log == [True]


def test_fallbacks_keep_per_sample_semantics(replay_log):
    x = loom.tensor([[1.0, 2.0], [3.0, 4.0]])
    # A value read from data: the trace cannot stand for every sample.
    assert func.vmap(lambda r: r * r.max().item())(x).tolist() == [[2.0, 4.0], [12.0, 16.0]]
    # In-place writes reach the caller's tensor, as per-sample calls make them.
    y = x.clone()
    func.vmap(lambda r: r.add_(1))(y)
    assert y.tolist() == [[2.0, 3.0], [4.0, 5.0]]
    # A closed-over tensor that requires grad: gradients flow through vmap's result.
    w = loom.tensor([1.0, -1.0], requires_grad=True)
    func.vmap(lambda r: (r * w).sum())(x).sum().backward()
    assert w.grad.tolist() == [4.0, 6.0]
    assert replay_log == [False, False, False]
    # Randomness in the replay: one draw per sample or one shared.
    d = func.vmap(lambda r: r * 0 + loom.rand(()), randomness="different")(loom.zeros(64, 1))
    s = func.vmap(lambda r: r * 0 + loom.rand(()), randomness="same")(loom.zeros(64, 1))
    assert len(set(d.reshape(-1).tolist())) == 64 and len(set(s.reshape(-1).tolist())) == 1
    with pytest.raises(loom.LoomError, match="random op"):
        func.vmap(lambda r: r + loom.rand(()))(x)
    assert replay_log[3:] == [True, True]


def test_convolutions_batch_in_the_replay(replay_log):
    rng = np.random.default_rng(11)
    lnet = loom.nn.Sequential(loom.nn.Conv2d(2, 4, 3, padding=1, groups=2), loom.nn.MaxPool2d(2, 1),
                              loom.nn.Conv2d(4, 3, 2, stride=1), loom.nn.Flatten(), loom.nn.Linear(12, 2))
    tnet = torch.nn.Sequential(torch.nn.Conv2d(2, 4, 3, padding=1, groups=2), torch.nn.MaxPool2d(2, 1),
                               torch.nn.Conv2d(4, 3, 2, stride=1), torch.nn.Flatten(), torch.nn.Linear(12, 2))
    with torch.no_grad():
        for lp, tp in zip(lnet.parameters(), tnet.parameters()):
            tp.copy_(torch.from_numpy(lp.detach().numpy()))
    (lx, ly), (tx, ty) = _both(rng.standard_normal((5, 2, 4, 4)).astype(np.float32), rng.integers(0, 2, 5))

    def make(lib, f, net):
        def loss(p, x, y):
            return lib.nn.functional.cross_entropy(f.functional_call(net, p, (x.unsqueeze(0),)), y.unsqueeze(0))
        return f.vmap(f.grad(loss), in_dims=(None, 0, 0))

    lp = {k: v.detach() for k, v in lnet.named_parameters()}
    tp = {k: v.detach() for k, v in tnet.named_parameters()}
    _close(make(loom, func, lnet)(lp, lx, ly), make(torch, tfunc, tnet)(tp, tx, ty), rtol=1e-4, atol=1e-5)
    # Mapped weights (an ensemble of convolutions) over shared and over mapped inputs.
    (lw, lxs), (tw, txs) = _both(rng.standard_normal((3, 4, 1, 3, 3)).astype(np.float32),
                                 rng.standard_normal((3, 2, 2, 5, 5)).astype(np.float32))
    for dims in [(0, None), (0, 0)]:
        lx_, tx_ = (lxs, txs) if dims[1] is not None else (lxs[0], txs[0])
        got = func.vmap(lambda w, x: loom.nn.functional.conv2d(x, w, groups=2), in_dims=dims)(lw, lx_)
        want = tfunc.vmap(lambda w, x: torch.nn.functional.conv2d(x, w, groups=2), in_dims=dims)(tw, tx_)
        _close(got, want, rtol=1e-4, atol=1e-5)
    assert replay_log == [True, True, True]


def _ln_loss(lib, x, w, b):
    return (lib.nn.functional.layer_norm(x, (6,), w, b) ** 2 * x).sum()


def _ce_loss(lib, x, t):
    return lib.nn.functional.cross_entropy(x * x, t, reduction="sum")


def _sdpa_loss(lib, q, k, v):
    return (lib.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True) ** 2).sum()


ROW_CASES = [  # (name, loss, in_dims, per-sample shapes or int targets, the fused primitives the replay batches)
    ("layer_norm_mapped_affine", _ln_loss, (0, 0, 0), [(4, 2, 3, 6), (4, 6), (4, 6)],
     {"layer_norm", "layer_norm_grad"}),
    ("layer_norm_shared_affine", _ln_loss, (0, None, None), [(4, 5, 6), (6,), (6,)],
     {"layer_norm", "layer_norm_grad"}),
    ("layer_norm_one_row_mapped_weight", _ln_loss, (0, 0, None), [(3, 6), (3, 6), (6,)],
     {"layer_norm", "layer_norm_grad"}),
    ("cross_entropy_rows", _ce_loss, (0, 0), [(4, 5, 7), 7], {"cross_entropy_rows", "cross_entropy_rows_grad"}),
    ("attention_causal", _sdpa_loss, (0, 0, 0), [(3, 2, 5, 4), (3, 2, 5, 4), (3, 2, 5, 4)],
     {"attention", "attention_grad"}),
]


@pytest.mark.parametrize("name,loss,dims,shapes,ops", ROW_CASES, ids=[c[0] for c in ROW_CASES])
def test_fused_row_primitives_batch_in_the_replay(name, loss, dims, shapes, ops, replay_log, monkeypatch):
    """Per-sample gradients through layer_norm, cross_entropy and attention: one batched replay of the fused
    primitives and their gradients (mapped or shared weights), equal to PyTorch's."""
    from loom import _batching
    seen = set()
    real = _batching._rule
    monkeypatch.setattr(_batching, "_rule", lambda node, args, b: seen.add(node.op) or real(node, args, b))
    rng = np.random.default_rng(13)
    arrays = [rng.integers(0, s, shapes[0][:2]) if isinstance(s, int) else rng.standard_normal(s).astype(np.float32)
              for s in shapes]
    for d, a in zip(dims, arrays):
        if d is None:  # A shared operand has no mapped dim.
            assert a.ndim == 1
    argnums = tuple(i for i, s in enumerate(shapes) if not isinstance(s, int))
    lts, tts = _both(*arrays)
    got = func.vmap(func.grad_and_value(lambda *a: loss(loom, *a), argnums=argnums), in_dims=dims)(*lts)
    want = tfunc.vmap(tfunc.grad_and_value(lambda *a: loss(torch, *a), argnums=argnums), in_dims=dims)(*tts)
    _close(got, want, rtol=1e-4, atol=1e-4)
    assert replay_log == [True]
    assert ops <= seen, seen


def test_jacrev_rows_replay_as_one_pass(replay_log):
    rng = np.random.default_rng(12)
    (lx, lw), (tx, tw) = _both(rng.standard_normal(4), rng.standard_normal((3, 4)))
    _close(func.jacrev(lambda x, w: (w @ x.sin()).tanh(), argnums=(0, 1))(lx, lw),
           tfunc.jacrev(lambda x, w: (w @ x.sin()).tanh(), argnums=(0, 1))(tx, tw))
    assert replay_log == [True]


def _autograd_functional_program(tor):
    """What a PyTorch user computes with torch.autograd.functional: single and tuple inputs and outputs."""
    af = tor.autograd.functional
    rng = np.random.default_rng(3)
    x = tor.tensor(rng.standard_normal(3).astype(np.float32))
    y = tor.tensor(rng.standard_normal((2, 3)).astype(np.float32))
    v3 = tor.tensor(rng.standard_normal(3).astype(np.float32))

    def f(a):
        return a.sin() * a
    def g(a, b):
        return (b @ a).exp(), a.sum() * b
    def s(a, b):
        return (b @ a.pow(2)).sum() + a.prod()
    return [af.jacobian(f, x), af.jacobian(g, (x, y)), af.hessian(lambda a: (a ** 3).sum() * a[0], x),
            af.hessian(s, (x, y)), af.vjp(f, x, v3), af.vjp(g, (x, y), (tor.ones(2), tor.ones(2, 3))),
            af.jvp(f, x, v3), af.jvp(g, (x, y), (v3, y)), af.hvp(lambda a: (a ** 3).sum(), x, v3),
            af.vhp(s, (x, y), (v3, y))]


def test_autograd_functional_matches_torch():
    _close(list(_autograd_functional_program(ltorch)), list(_autograd_functional_program(torch)), rtol=1e-4,
           atol=1e-5)


def test_autograd_functional_create_graph_differentiates_through():
    def program(tor):
        x = tor.tensor([0.5, -1.0, 2.0], requires_grad=True)
        jac = tor.autograd.functional.jacobian(lambda a: a ** 3, x, create_graph=True)
        jac.sum().backward()
        return x.grad
    _close(program(ltorch), program(torch))


def test_autograd_profiler_names_are_loom_profiler():
    with ltorch.autograd.profiler.profile(enabled=True, record_shapes=True) as prof:
        with ltorch.autograd.profiler.record_function("my_block"):
            (ltorch.ones(2, 3) * 2).sum().item()
    assert "my_block" in prof.key_averages().table()
