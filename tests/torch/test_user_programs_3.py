"""Faults found by running PyTorch programs (VAE, seq2seq, schedulers, ...) under `import loom.torch as torch`.

Each test runs the same program under real PyTorch (the oracle) and under loom.torch and compares the results.
"""
import numpy as np
import pytest

import loom
import loom.torch as torch

real = pytest.importorskip("torch")


def _data(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_einsum_takes_the_sublist_form():
    a, b = _data((2, 3, 4)), _data((2, 4, 5), 1)
    for mod in (real, torch):
        ta, tb = mod.from_numpy(a), mod.from_numpy(b)
        got = [mod.einsum(ta, [0, 1, 2], tb, [0, 2, 3], [0, 1, 3]), mod.einsum(ta, [0, 1, 2], [2, 1]),
               mod.einsum(ta, [Ellipsis, 1], [Ellipsis]), mod.einsum(ta, [0, 1, 2])]
        if mod is real:
            want = [g.numpy() for g in got]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-5, atol=1e-5)
    with pytest.raises(loom.errors.LoomValueError, match="sublist dim"):
        torch.einsum(torch.ones(2), ["i"])


def test_view_as_another_dtype_reinterprets_the_bytes():
    for mod in (real, torch):
        x = mod.tensor([1.0, -2.0, 0.5, 3.0])
        got = [x.view(mod.int32), x.view(mod.uint8), x.view(mod.bfloat16).float(), x.view(mod.int16).view(mod.float32),
               mod.tensor([True, False]).view(mod.uint8), mod.ones(3, dtype=mod.bfloat16).view(mod.int16),
               x.view(2, 2).t().view(mod.int32), x.view(mod.float64)]
        got = [g.clone() for g in got]
        x.mul_(2)  # Values taken before the write keep the old bytes.
        got += [x.view(mod.int32)]
        if mod is real:
            want = [g.numpy() for g in got]
    for g, w in zip(got, want):
        assert g.numpy().dtype == w.dtype and np.array_equal(g.numpy(), w)
    with pytest.raises(loom.errors.ShapeError, match="multiple of 8"):
        torch.ones(3).view(torch.float64)
    with pytest.raises(loom.errors.ShapeError, match="non-contiguous"):
        torch.ones(2, 4).t().view(torch.float16)

    @loom.function
    def f(t):
        return t.view(loom.int32)
    with pytest.raises(loom.errors.LoomError, match="another dtype"):
        for _ in range(4):  # The first calls run eagerly (warm-up); then it traces.
            f(loom.ones(2))


def _init(model, mod, seed=0, scale=0.3):
    rng = np.random.default_rng(seed)
    with mod.no_grad():
        for _, p in model.named_parameters():
            p.copy_(mod.from_numpy((rng.standard_normal(tuple(p.shape)) * scale).astype(np.float32)))
    return model


def test_lstm_under_cpu_autocast_gives_the_lower_type_as_pytorch():
    got = {}
    for mod in (real, torch):
        lstm = _init(mod.nn.LSTM(3, 4, num_layers=2, bidirectional=True, batch_first=True), mod)
        gru = _init(mod.nn.GRU(3, 4), mod)
        x = mod.from_numpy(_data((2, 5, 3))).requires_grad_()
        with mod.autocast("cpu", dtype=mod.bfloat16):
            o, (h, c) = lstm(x)
            packed = mod.nn.utils.rnn.pack_padded_sequence(x, mod.tensor([5, 3]), batch_first=True)
            po, (ph, _) = lstm(packed)
            go, gh = gru(x)
        (o.float().sum() + c.float().sum()).backward()
        got[mod] = ([str(t.dtype) for t in (o, h, c, po.data, ph, go, gh, x.grad, lstm.weight_hh_l1.grad)],
                    [t.detach().float().numpy() for t in (o, h, c, x.grad)])
    assert got[torch][0] == got[real][0]
    for a, b in zip(got[torch][1], got[real][1]):
        np.testing.assert_allclose(a, b, rtol=0.05, atol=0.01)


def test_autograd_graph_save_on_cpu_runs_and_saved_tensors_hooks_is_a_clear_error():
    grads = []
    for mod in (real, torch):
        x = mod.from_numpy(_data((3,))).requires_grad_()
        with mod.autograd.graph.save_on_cpu(pin_memory=False):
            y = (x.exp() * x).sum()
        with mod.autograd.graph.disable_saved_tensors_hooks("no hooks here"):
            y = y + (x * x).sum()
        y.backward()
        grads.append(x.grad.numpy())
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-5)
    with pytest.raises(loom.errors.AutogradError, match="saved_tensors_hooks: custom pack/unpack hooks"):
        with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
            pass


@pytest.mark.parametrize("shape,orthogonal_map", [((4, 3), None), ((3, 4), None), ((3, 3), None),
                                                  ((3, 3), "cayley"), ((5, 3), "matrix_exp")])
def test_orthogonal_parametrization_trains_as_pytorch(shape, orthogonal_map):
    got = {}
    for mod in (real, torch):
        m = _init(mod.nn.Linear(shape[1], shape[0]), mod)
        m = mod.nn.utils.parametrizations.orthogonal(m, orthogonal_map=orthogonal_map)
        opt = mod.optim.SGD(m.parameters(), lr=0.1)
        x = mod.from_numpy(_data((6, shape[1]), 1))
        w0 = m.weight.detach().clone()
        for _ in range(3):
            opt.zero_grad()
            (m(x) ** 2).sum().backward()
            opt.step()
        grad = m.parametrizations.weight.original.grad
        k = min(shape)  # Past the k-th row/column, grad follows the random completion of the basis.
        with mod.no_grad():
            m.weight = mod.from_numpy(_data(shape, 2))
        got[mod] = ([w0.numpy(), grad.numpy()[:k, :k],
                     m.weight.detach().numpy()], sorted(m.state_dict()))
    assert got[torch][1] == got[real][1]
    for a, b in zip(got[torch][0], got[real][0]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    with pytest.raises(loom.errors.LoomValueError, match="orthogonal_map must be one of"):
        torch.nn.utils.parametrizations.orthogonal(torch.nn.Linear(2, 2), orthogonal_map="qr")


def test_submodules_import_under_the_runner(tmp_path):
    # `from torch.nn.utils.parametrizations import ...` and friends failed with ModuleNotFoundError.
    import subprocess
    import sys
    from pathlib import Path
    script = tmp_path / "imports.py"
    script.write_text(
        "import torch\nimport torch.linalg\nfrom torch.profiler import profile\n"
        "from torch.nn.utils.parametrizations import orthogonal, weight_norm, spectral_norm\n"
        "from torch.nn.utils.parametrize import register_parametrization, remove_parametrizations\n"
        "from torch.nn.utils.clip_grad import clip_grad_norm_\nfrom torch.nn.utils.stateless import functional_call\n"
        "from torch.nn.utils.convert_parameters import parameters_to_vector\n"
        "from torch.nn.utils.fusion import fuse_conv_bn_eval\n"
        "from torch.nn.utils.weight_norm import weight_norm as wn\n"
        "from torch.autograd.function import Function, once_differentiable\n"
        "from torch.autograd.grad_mode import no_grad\nfrom torch.autograd.graph import save_on_cpu\n"
        "from torch.nn.attention import SDPBackend, sdpa_kernel\nfrom torch.serialization import add_safe_globals\n"
        "from torch.utils.hooks import RemovableHandle\nfrom torch.optim.adam import Adam\n"
        "from torch.optim.adamw import AdamW\nfrom torch.optim.sgd import SGD\n"
        "from torch.nn.modules.utils import _pair\nfrom torch.utils.data._utils.collate import default_collate\n"
        "from torch.nn.parameter import UninitializedParameter\n"
        "m = orthogonal(torch.nn.Linear(3, 3))\n"
        "print(torch.linalg.det(m.weight).abs().item() > 0.99, Function is torch.autograd.Function)\n")
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-m", "loom.torch", str(script)], capture_output=True, text=True,
                         cwd=tmp_path, env={"PYTHONPATH": str(root), "PATH": ""}, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True True"


class _Config:
    def __init__(self, lr):
        self.lr = lr


def test_serialization_safe_globals_let_a_weights_only_load_rebuild_a_class(tmp_path):
    import pickle
    got = {}
    for mod in (real, torch):
        path = tmp_path / f"{mod.__name__}.pt"
        mod.save({"cfg": _Config(0.5), "w": mod.arange(3.0)}, path)
        out = []
        with pytest.raises(pickle.UnpicklingError):  # PyTorch's weights_only refusal; programs catch it.
            mod.load(path)
        with mod.serialization.safe_globals([_Config]):
            r = mod.load(path, weights_only=True)
            out += [r["cfg"].lr, r["w"].tolist()]
        with pytest.raises(pickle.UnpicklingError):
            mod.load(path)
        mod.serialization.add_safe_globals([_Config])
        out += [_Config in mod.serialization.get_safe_globals(), mod.load(path)["cfg"].lr]
        mod.serialization.clear_safe_globals()
        out += [mod.serialization.get_safe_globals(), mod.load(path, weights_only=False)["cfg"].lr]
        got[mod] = out
    assert got[torch] == got[real]


def test_sdpa_kernel_picks_a_backend_and_attention_is_unchanged():
    q, k, v = (_data((1, 2, 3, 4), s) for s in range(3))
    outs = []
    for mod in (real, torch):
        from importlib import import_module
        att = import_module(mod.__name__ + ".nn.attention")
        tq, tk, tv = (mod.from_numpy(a) for a in (q, k, v))
        with att.sdpa_kernel([att.SDPBackend.MATH]):
            outs.append(mod.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=True).numpy())
        assert str(att.SDPBackend.FLASH_ATTENTION) == "SDPBackend.FLASH_ATTENTION"
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("variant", ["eval_no_grad", "inference_mode", "float_mask", "left_padded", "grad_enabled",
                                     "train", "odd_heads", "seq_first", "with_mask"])
def test_transformer_encoder_zeroes_padded_positions_in_inference_as_pytorch(variant):
    outs = []
    heads = 1 if variant == "odd_heads" else 2
    for mod in (real, torch):
        layer = mod.nn.TransformerEncoderLayer(8, heads, 16, dropout=0.0, batch_first=variant != "seq_first")
        enc = _init(mod.nn.TransformerEncoder(layer, 2, norm=mod.nn.LayerNorm(8)), mod)
        enc.train(variant == "train")
        x = mod.from_numpy(_data((3, 5, 8)))
        pad = mod.tensor([[False] * 5, [False] * 3 + [True] * 2, [False] * 4 + [True]])
        if variant == "left_padded":
            pad = mod.tensor([[False] * 5, [True] * 2 + [False] * 3, [False] * 4 + [True]])
        if variant == "float_mask":
            pad = mod.zeros(3, 5).masked_fill(pad, float("-inf"))
        if variant == "seq_first":
            x = x.transpose(0, 1)
        kw = {"mask": mod.zeros(5, 5)} if variant == "with_mask" else {}
        ctx = mod.inference_mode() if variant == "inference_mode" else \
            mod.enable_grad() if variant in ("grad_enabled", "train") else mod.no_grad()
        with ctx:
            outs.append(enc(x, src_key_padding_mask=pad, **kw).detach().numpy())
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-4, atol=1e-5)


def test_continuous_bernoulli_matches_pytorch_in_and_outside_the_taylor_region():
    got = []
    for mod in (real, torch):
        D = mod.distributions
        p = mod.tensor([0.1, 0.3, 0.4995, 0.5, 0.7, 0.95], requires_grad=True)
        d = D.ContinuousBernoulli(probs=p)
        v = mod.tensor([0.2, 0.9, 0.5, 0.1, 0.6, 0.99])
        lp = d.log_prob(v)
        (lp.sum() + d.mean.sum() + d.entropy().sum()).backward()
        logits = mod.tensor([-2.0, 0.0, 0.001, 3.0], requires_grad=True)
        d2 = D.ContinuousBernoulli(logits=logits)
        lp2 = d2.log_prob(mod.tensor([0.3, 0.3, 0.7, 0.8]))
        lp2.sum().backward()
        got.append([t.detach().numpy() for t in (lp, d.mean, d.variance, d.cdf(v), d.icdf(v), d.entropy(), p.grad,
                                                 lp2, logits.grad, d2.probs)]
                   + [tuple(d.rsample((3,)).shape), tuple(d2.expand(mod.Size([2, 4])).batch_shape)])
    for a, b in zip(got[1], got[0]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["SGD", "Adam", "RMSprop", "Adagrad", "Adadelta", "Adamax", "NAdam", "RAdam",
                                  "ASGD", "LBFGS"])
def test_optimizer_defaults_print_as_pytorch(name):
    # PyTorch's defaults are the int 0 (`weight_decay: 0` in the printed optimizer), not 0.0.
    got = []
    for mod in (real, torch):
        opt = getattr(mod.optim, name)([mod.nn.Parameter(mod.ones(2))], **({"lr": 0.1} if name == "SGD" else {}))
        got.append((repr(opt), sorted((k, repr(v)) for k, v in opt.param_groups[0].items() if k != "params")))
    assert got[1] == got[0]


def test_error_types_programs_catch_are_pytorchs():
    for mod in (real, torch):
        with pytest.raises(ValueError, match="only one element tensors"):
            int(mod.ones(2))
        with pytest.raises(ValueError, match="only one element tensors"):
            float(mod.ones(2, 1))
        assert int(mod.tensor([3.7])) == 3 and float(mod.tensor([[2.5]])) == 2.5
        with pytest.raises(ValueError):
            mod.optim.SGD([mod.nn.Parameter(mod.ones(1))], lr=-1)
        with pytest.raises(ValueError):
            mod.optim.Adam([mod.nn.Parameter(mod.ones(1))], betas=(0.9, 1.5))


def test_special_bessel_and_scipy_names_match_pytorch():
    got = []
    for mod in (real, torch):
        S = mod.special
        x = mod.tensor([-30.0, -3.0, -0.5, 0.0, 0.7, 2.0, 14.9, 15.1, 40.0, 80.0, 500.0], requires_grad=True)
        outs = [S.i0e(x), S.i1(x[:9]), S.i1e(x), S.modified_bessel_i1(x[1:7]), S.modified_bessel_i0(x[1:7])]
        (outs[0].sum() + outs[1].sum() + outs[2].sum()).backward()  # Through x = 0 too (I_1 is odd).
        y = mod.tensor([-3.0, -1.0, 0.0, 0.5, 3.0, 7.9, 8.1, 20.0, 1e4], dtype=mod.float64)
        outs += [x.grad, S.ndtri(mod.tensor([0.001, 0.1, 0.5, 0.9, 0.999])), S.erfcx(y), S.erfcx(y.float()),
                 S.gammaln(mod.tensor([0.5, 3.0])), S.psi(mod.tensor([0.5, 3.0])), S.multigammaln(mod.tensor([2.5]), 2),
                 S.gammainc(mod.tensor([2.0]), mod.tensor([1.5])), S.gammaincc(mod.tensor([2.0]), mod.tensor([1.5])),
                 S.i1(mod.tensor([3, 4]))]
        got.append([t.detach().numpy() for t in outs])
    for a, b in zip(got[1], got[0]):
        assert a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6)


def test_von_mises_log_prob_and_moments_match_pytorch_and_samples_follow_them():
    got = []
    for mod in (real, torch):
        loc = mod.tensor([0.0, 1.0, -2.0, 3.0], requires_grad=True)
        k = mod.tensor([2.0, 0.5, 0.05, 10.0], requires_grad=True)
        d = mod.distributions.VonMises(loc, k)
        lp = d.log_prob(mod.tensor([0.5, -1.0, 2.0, 3.1]))
        lp.sum().backward()
        got.append([t.detach().numpy() for t in (lp, loc.grad, k.grad, d.mean, d.variance)])
    for a, b in zip(got[1], got[0]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    torch.manual_seed(0)
    d = torch.distributions.VonMises(torch.tensor(0.5), torch.tensor(4.0))
    s = d.sample((20000,))
    assert bool(((s >= -np.pi) & (s < np.pi)).all())
    c, sn = s.cos().mean().item(), s.sin().mean().item()
    assert abs(np.arctan2(sn, c) - 0.5) < 0.02 and abs((1 - np.hypot(c, sn)) - d.variance.item()) < 0.01


def test_a_dataloader_iterator_has_the_loaders_length():
    # `tqdm(iter(loader))` and `len(it)` in training loops ask the iterator for its length.
    lengths = []
    for mod in (real, torch):
        U = mod.utils.data
        ds = U.TensorDataset(mod.arange(14.0).view(7, 2), mod.arange(7))

        class Stream(U.IterableDataset):
            def __iter__(self):
                return iter(range(5))
        got = [len(iter(U.DataLoader(ds, batch_size=2))), len(iter(U.DataLoader(ds, batch_size=2, drop_last=True))),
               len(iter(U.DataLoader(ds, batch_size=3, num_workers=2)))]
        with pytest.raises(TypeError):
            len(iter(U.DataLoader(Stream(), batch_size=2)))
        lengths.append(got)
    assert lengths[1] == lengths[0] == [4, 3, 3]


def test_a_device_is_a_context_manager_for_the_default_device():
    shapes = []
    for mod in (real, torch):
        with mod.device("cpu") as d:
            lin = mod.nn.Linear(3, 2)
            t = mod.ones(2)
        shapes.append((str(d), lin.weight.device.type, t.device.type, tuple(lin.to_empty(device="cpu").weight.shape)))
    assert shapes[1] == shapes[0]
    with pytest.raises(loom.errors.DeviceError, match="meta is not available"):
        with torch.device("meta"):
            pass


def test_linalg_eig_and_linalg_error_as_pytorch():
    a = _data((2, 4, 4))
    got = []
    for mod in (real, torch):
        r = mod.linalg.eig(mod.from_numpy(a))
        w64 = mod.linalg.eigvals(mod.from_numpy(a).double())
        # Eigenvectors are unique up to a phase: compare A v = lambda v and unit norms.
        v, w = r.eigenvectors, r.eigenvalues
        residual = (mod.from_numpy(a).to(v.dtype) @ v - v * w.unsqueeze(-2)).abs().max().item()
        got.append((type(r).__name__, str(w.dtype), str(w64.dtype), w.numpy(), residual < 1e-4,
                    np.allclose(v.abs().pow(2).sum(-2).numpy(), 1.0, atol=1e-5)))
        for bad in (lambda: mod.linalg.inv(mod.zeros(2, 2)), lambda: mod.linalg.cholesky(-mod.eye(2)),
                    lambda: mod.linalg.solve(mod.zeros(2, 2), mod.ones(2))):
            with pytest.raises(mod.linalg.LinAlgError):
                bad().tolist()  # loom is lazy: the check runs where the value is read.
    (n1, d1, e1, w1, ok1, u1), (n0, d0, e0, w0, ok0, u0) = got[1], got[0]
    assert (n1, d1, e1, ok1, u1) == (n0, d0, e0, ok0, u0) == ("linalg_eig", "torch.complex64", "torch.complex128",
                                                               True, True)
    np.testing.assert_allclose(np.sort_complex(w1.ravel()), np.sort_complex(w0.ravel()), rtol=1e-4, atol=1e-5)
    with pytest.raises(loom.errors.AutogradError, match="no gradient"):
        torch.linalg.eig(torch.ones(2, 2, requires_grad=True))
