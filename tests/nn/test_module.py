"""The Module API: registration, traversal, state_dict round trips and errors, modes, conversion,
hooks, containers and printing, checked against PyTorch where PyTorch defines the answer."""
from __future__ import annotations

import copy
from collections import OrderedDict

import numpy as np
import pytest
import torch

import loom
from loom import nn
from tests.nn.harness import to_loom_state


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 4)
        self.bn = nn.BatchNorm1d(4)
        self.register_buffer("scale", loom.ones(4))
        self.register_buffer("cache", loom.zeros(2), persistent=False)
        self.gain = nn.Parameter(loom.ones(1))

    def forward(self, x):
        return self.bn(self.fc(x)) * self.scale * self.gain


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()
        self.head = nn.Sequential(nn.ReLU(), nn.Linear(4, 2))

    def forward(self, x):
        return self.head(self.block(x))


# ---------------------------------------------------------------- Parameter

def test_parameter_is_a_tensor_that_requires_grad():
    p = nn.Parameter(loom.zeros(2, 3))
    assert isinstance(p, nn.Parameter) and isinstance(p, loom.Tensor)
    assert p.requires_grad and p.is_leaf
    assert not nn.Parameter(loom.zeros(2), requires_grad=False).requires_grad
    assert repr(p).startswith("Parameter containing:\ntensor([[0., 0., 0.],")
    assert repr(p).endswith("requires_grad=True)")
    y = p * 2
    assert type(y) is loom.Tensor and not isinstance(y, nn.Parameter)
    assert nn.Parameter().shape == (0,)


def test_parameter_drops_history_and_rejects_ints():
    x = loom.ones(3, requires_grad=True)
    p = nn.Parameter(x * 2)
    assert p.is_leaf and p.tolist() == [2.0, 2.0, 2.0]
    with pytest.raises(loom.AutogradError, match="floating point"):
        nn.Parameter(loom.tensor([1, 2]))
    with pytest.raises(TypeError, match="loom.Tensor"):
        nn.Parameter([1.0])


def test_parameter_deepcopy_is_independent():
    p = nn.Parameter(loom.ones(3))
    p.grad = loom.full((3,), 2.0)
    q = copy.deepcopy(p)
    assert isinstance(q, nn.Parameter) and q.requires_grad and q.grad.tolist() == [2.0] * 3
    with loom.no_grad():
        p.mul_(5)
    assert q.tolist() == [1.0, 1.0, 1.0]
    with pytest.raises(loom.LoomError, match="leaf"):
        copy.deepcopy(p * 2)


# ---------------------------------------------------------------- registration and traversal

def test_registration_by_assignment():
    m = Block()
    assert [n for n, _ in m.named_parameters()] == ["gain", "fc.weight", "fc.bias", "bn.weight", "bn.bias"]
    assert [n for n, _ in m.named_buffers()] == ["scale", "cache", "bn.running_mean", "bn.running_var",
                                                 "bn.num_batches_tracked"]
    assert [n for n, _ in m.named_children()] == ["fc", "bn"]
    assert [n for n, _ in m.named_modules()] == ["", "fc", "bn"]
    assert [n for n, _ in m.named_parameters(recurse=False)] == ["gain"]
    assert [n for n, _ in m.named_parameters(prefix="model")][0] == "model.gain"
    assert m.fc is m._modules["fc"] and m.scale is m._buffers["scale"]
    assert "fc" in dir(m) and "scale" in dir(m) and "gain" in dir(m)
    assert len(list(m.parameters())) == 5 and len(list(m.buffers())) == 5


def test_reassignment_moves_between_kinds_and_del():
    m = Block()
    m.gain = None  # A parameter slot may hold None.
    assert "gain" in m._parameters and m.gain is None
    with pytest.raises(TypeError, match="cannot assign 'loom.Tensor' as parameter 'gain'"):
        m.gain = loom.ones(1)
    m.scale = loom.full((4,), 3.0)  # A buffer slot takes any tensor.
    assert m._buffers["scale"].tolist() == [3.0] * 4
    with pytest.raises(TypeError, match="child module 'fc'"):
        m.fc = loom.ones(1)
    m.fc = nn.Linear(3, 4, bias=False)
    assert m.fc.bias is None
    m.extra = nn.Parameter(loom.zeros(1))
    assert "extra" in m._parameters
    del m.extra
    assert "extra" not in m._parameters
    with pytest.raises(AttributeError, match="'Block' object has no attribute 'extra'"):
        _ = m.extra
    m.steps = nn.Buffer(loom.zeros(()), persistent=False)
    assert "steps" in m._buffers and "steps" not in m.state_dict()


def test_register_errors():
    m = nn.Module()
    with pytest.raises(KeyError, match=r'contain "\."'):
        m.register_buffer("a.b", loom.zeros(1))
    with pytest.raises(KeyError, match="empty"):
        m.register_parameter("", None)
    with pytest.raises(TypeError, match="loom.nn.Parameter or None"):
        m.register_parameter("w", loom.zeros(1))
    with pytest.raises(TypeError, match="loom.Tensor or None"):
        m.register_buffer("b", [1.0])
    m.plain = 3
    with pytest.raises(KeyError, match="already exists"):
        m.register_buffer("plain", loom.zeros(1))
    with pytest.raises(TypeError, match="is not a Module subclass"):
        m.add_module("x", 3)

    class Early(nn.Module):
        def __init__(self):
            self.w = nn.Parameter(loom.zeros(1))
            super().__init__()

    with pytest.raises(AttributeError, match="before Module.__init__"):
        Early()


def test_shared_parameters_and_modules_deduplicate():
    lin = nn.Linear(2, 2)
    net = nn.Sequential(lin, nn.ReLU(), lin)
    assert len(list(net.parameters())) == 2
    assert [n for n, _ in net.named_modules()] == ["", "0", "1"]
    assert [n for n, _ in net.named_modules(remove_duplicate=False)] == ["", "0", "1", "2"]
    assert len(list(net.named_parameters(remove_duplicate=False))) == 4
    tnet = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU())
    tnet.append(tnet[0])
    assert list(net.state_dict()) == list(tnet.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias"]


def test_get_submodule_parameter_buffer():
    net = Net()
    assert net.get_submodule("block.fc") is net.block.fc
    assert net.get_submodule("") is net
    assert net.get_parameter("head.1.weight") is net.head[1].weight
    assert net.get_buffer("block.bn.running_mean") is net.block.bn.running_mean
    with pytest.raises(AttributeError, match="has no attribute `nope`"):
        net.get_submodule("block.nope")
    with pytest.raises(AttributeError, match="is not an nn.Module"):
        net.get_submodule("block.scale.x")
    with pytest.raises(AttributeError, match="is not a parameter"):
        net.get_parameter("block.scale")


def test_forward_missing():
    with pytest.raises(NotImplementedError, match="forward"):
        nn.Module()(loom.zeros(1))


# ---------------------------------------------------------------- state_dict

def test_state_dict_keys_order_and_detached():
    net = Net()
    sd = net.state_dict()
    assert list(sd) == ["block.gain", "block.scale", "block.fc.weight", "block.fc.bias", "block.bn.weight",
                        "block.bn.bias", "block.bn.running_mean", "block.bn.running_var",
                        "block.bn.num_batches_tracked", "head.1.weight", "head.1.bias"]
    assert isinstance(sd, OrderedDict)
    assert all(not v.requires_grad and v.is_leaf for v in sd.values())
    assert not isinstance(sd["block.gain"], nn.Parameter)
    kv = net.state_dict(keep_vars=True)
    assert kv["block.gain"] is net.block.gain
    assert list(net.state_dict(prefix="m."))[0] == "m.block.gain"


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_state_dict_keys_match_torch_for_composite_model():
    def make(lib):
        n = lib.nn
        return n.Sequential(OrderedDict(conv=n.Conv2d(1, 2, 3), bn=n.BatchNorm2d(2), flat=n.Flatten(),
                                        rnn=n.ModuleDict({"gru": n.GRU(2, 3)}),
                                        attn=n.MultiheadAttention(4, 2, kdim=3, vdim=3),
                                        enc=n.TransformerEncoder(n.TransformerEncoderLayer(4, 2, 8), 2),
                                        emb=n.Embedding(5, 4), ln=n.LayerNorm(4), loss=n.BCEWithLogitsLoss(
                                            pos_weight=lib.ones(3))))
    assert list(make(loom).state_dict()) == list(make(torch).state_dict())


def test_round_trip_copies_in_place():
    a, b = Net(), Net()
    with loom.no_grad():
        a.block.bn.running_mean.add_(1.5)
    params_before = {n: p for n, p in b.named_parameters()}
    result = b.load_state_dict(a.state_dict())
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert repr(result) == "<All keys matched successfully>"
    for n, p in b.named_parameters():
        assert p is params_before[n]  # Same Parameter objects, new values.
        assert p.requires_grad and p.is_leaf
        np.testing.assert_array_equal(p.detach().numpy(), a.get_parameter(n).detach().numpy())
    np.testing.assert_array_equal(b.block.bn.running_mean.numpy(), a.block.bn.running_mean.numpy())
    x = loom.randn(5, 3)
    b.eval()
    a.eval()
    np.testing.assert_array_equal(a(x).detach().numpy(), b(x).detach().numpy())
    # Training after loading still reaches the parameters.
    b.train()
    b(x).sum().backward()
    assert b.block.fc.weight.grad is not None


def test_load_numpy_values_and_dtype_cast():
    m = nn.Linear(2, 2)
    m.load_state_dict({"weight": np.eye(2, dtype=np.float64), "bias": np.zeros(2, dtype=np.float32)})
    assert m.weight.dtype is loom.float32 and m.weight.tolist() == [[1.0, 0.0], [0.0, 1.0]]


def test_load_state_dict_strict_errors_list_everything():
    m = Net()
    sd = m.state_dict()
    del sd["block.fc.bias"]
    sd["block.fc.extra"] = loom.zeros(1)
    sd["nothing.here"] = loom.zeros(1)
    sd["head.1.weight"] = loom.zeros(5, 4)
    with pytest.raises(loom.LoomError) as err:
        m.load_state_dict(sd)
    msg = str(err.value)
    assert "Error(s) in loading state_dict for Net" in msg
    assert 'Missing key(s) in state_dict: "block.fc.bias"' in msg
    assert '"block.fc.extra"' in msg and '"nothing.here"' in msg and "Unexpected key(s)" in msg
    assert "size mismatch for head.1.weight: copying a param with shape [5, 4] from checkpoint, the shape in " \
           "current model is [2, 4]" in msg


def test_load_state_dict_non_strict():
    m = Net()
    sd = m.state_dict()
    del sd["block.scale"]
    sd["block.other"] = loom.zeros(1)
    result = m.load_state_dict(sd, strict=False)
    assert result.missing_keys == ["block.scale"]
    assert result.unexpected_keys == ["block.other"]
    assert result == (["block.scale"], ["block.other"])
    sd["head.1.bias"] = loom.zeros(7)
    with pytest.raises(loom.LoomError, match=r"size mismatch for head.1.bias.*\[7\].*\[2\]"):
        m.load_state_dict(sd, strict=False)  # Shape mismatches raise even when not strict.


def test_load_torch_state_dict_and_back():
    tm = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2))
    lm = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))
    tm(torch.randn(8, 3))  # Move the running statistics away from their initial values.
    lm.load_state_dict(to_loom_state(tm.state_dict()))
    back = {k: torch.from_numpy(np.array(v.numpy())) for k, v in lm.state_dict().items()}
    tm2 = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2))
    tm2.load_state_dict(back)
    for (k, v), (_, w) in zip(tm.state_dict().items(), tm2.state_dict().items()):
        assert torch.equal(v, w), k


def test_extra_state_round_trip():
    class WithExtra(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(1, 1)
            self.note = "a"

        def get_extra_state(self):
            return {"note": self.note}

        def set_extra_state(self, state):
            self.note = state["note"]

    a, b = WithExtra(), WithExtra()
    a.note = "saved"
    sd = a.state_dict()
    assert list(sd) == ["_extra_state", "lin.weight", "lin.bias"]
    b.load_state_dict(sd)
    assert b.note == "saved"


# ---------------------------------------------------------------- modes and conversion

def test_train_eval_propagate():
    net = Net()
    assert all(m.training for m in net.modules())
    assert net.eval() is net
    assert not any(m.training for m in net.modules())
    net.train()
    assert all(m.training for m in net.modules())
    net.block.train(False)
    assert net.training and not net.block.bn.training and net.head.training
    with pytest.raises(ValueError, match="boolean"):
        net.train("yes")


def test_dropout_follows_mode():
    loom.manual_seed(1)
    d = nn.Dropout(0.25)
    x = loom.ones(4000)
    y = d(x).numpy()
    assert set(np.unique(y).tolist()) <= {0.0, float(np.float32(1.0 / 0.75))}
    assert abs((y == 0).mean() - 0.25) < 0.03
    d.eval()
    np.testing.assert_array_equal(d(x).numpy(), x.numpy())
    with pytest.raises(ValueError, match="between 0 and 1"):
        nn.Dropout(1.5)


def test_to_dtype_keeps_parameter_objects():
    net = Net()
    w = net.block.fc.weight
    net.block.fc.weight.grad = loom.ones(4, 3)
    assert net.to(loom.float64) is net
    assert net.block.fc.weight is w and isinstance(w, nn.Parameter) and w.requires_grad
    assert w.dtype is loom.float64 and w.grad.dtype is loom.float64
    assert net.block.bn.running_var.dtype is loom.float64
    assert net.block.bn.num_batches_tracked.dtype is loom.int64  # Integer buffers keep their dtype.
    assert net(loom.randn(4, 3, dtype=loom.float64)).dtype is loom.float64
    net.float()
    assert w.dtype is loom.float32
    assert net.half().block.scale.dtype is loom.float16
    assert net.double().block.gain.dtype is loom.float64
    net.to(dtype=loom.float32)
    net.to("cpu")
    net.to(loom.zeros(1, dtype=loom.float64))
    assert w.dtype is loom.float64
    with pytest.raises(loom.LoomError, match="not available"):
        net.to("cuda")
    with pytest.raises(TypeError, match="floating point"):
        net.to(loom.int32)


def test_apply_zero_grad_requires_grad():
    net = Net()
    seen = []
    assert net.apply(lambda m: seen.append(type(m).__name__)) is net
    assert seen == ["Linear", "BatchNorm1d", "Block", "ReLU", "Linear", "Sequential", "Net"]
    net(loom.randn(4, 3)).sum().backward()
    assert all(p.grad is not None for p in net.parameters())
    net.zero_grad(set_to_none=False)
    assert all(p.grad is not None and float(p.grad.abs().sum()) == 0.0 for p in net.parameters())
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())
    net.requires_grad_(False)
    assert not any(p.requires_grad for p in net.parameters())


def test_deepcopy_module_is_independent():
    a = Net()
    b = copy.deepcopy(a)
    assert b.block.fc.weight is not a.block.fc.weight
    assert isinstance(b.block.fc.weight, nn.Parameter)
    with loom.no_grad():
        b.block.fc.weight.zero_()
    assert float(a.block.fc.weight.abs().sum()) > 0
    x = loom.randn(4, 3)
    c = copy.deepcopy(a)
    np.testing.assert_array_equal(a(x).detach().numpy(), c(x).detach().numpy())


# ---------------------------------------------------------------- hooks

def test_forward_hooks_modify_and_remove():
    m = nn.Linear(2, 2)
    calls = []
    h1 = m.register_forward_pre_hook(lambda mod, args: (args[0] * 0,))
    h2 = m.register_forward_hook(lambda mod, args, out: calls.append(out.shape) or out + 1)
    y = m(loom.randn(3, 2))
    np.testing.assert_allclose(y.detach().numpy(), (m.bias + 1).detach().numpy()[None].repeat(3, 0), rtol=1e-6)
    assert calls == [(3, 2)]
    h1.remove()
    h2.remove()
    h2.remove()  # Removing twice is harmless.
    x = loom.randn(3, 2)
    np.testing.assert_array_equal(m(x).detach().numpy(), (x @ m.weight.t() + m.bias).detach().numpy())
    assert calls == [(3, 2)]


def test_hook_order_kwargs_and_context_manager():
    m = nn.Identity()
    order = []
    m.register_forward_hook(lambda mod, a, o: order.append("second"))
    m.register_forward_hook(lambda mod, a, o: order.append("first"), prepend=True)
    with m.register_forward_pre_hook(lambda mod, a, kw: ((a[0] + 1,), kw), with_kwargs=True):
        assert m(loom.tensor(1.0)).item() == 2.0
    assert m(loom.tensor(1.0)).item() == 1.0
    assert order == ["first", "second"] * 2
    seen = {}
    m2 = nn.Identity()
    m2.register_forward_hook(lambda mod, a, kw, o: seen.update(kw), with_kwargs=True)

    class Kw(nn.Module):
        def forward(self, x, scale=1.0):
            return x * scale

    k = Kw()
    k.register_forward_hook(lambda mod, a, kw, o: seen.update(kw), with_kwargs=True)
    assert k(loom.tensor(2.0), scale=3.0).item() == 6.0
    assert seen == {"scale": 3.0}


def test_always_call_hook_runs_on_error():
    class Boom(nn.Module):
        def forward(self, x):
            raise RuntimeError("boom")

    m = Boom()
    seen = []
    m.register_forward_hook(lambda mod, a, o: seen.append(o), always_call=True)
    with pytest.raises(RuntimeError, match="boom"):
        m(loom.zeros(1))
    assert seen == [None]


def test_hooks_match_torch_semantics():
    for lib in (torch, loom):
        m = lib.nn.Linear(2, 2)
        outs = []
        m.register_forward_pre_hook(lambda mod, args: args[0] * 2)  # A non-tuple result is wrapped.
        m.register_forward_hook(lambda mod, args, out: outs.append(float(args[0].sum())))
        m(lib.ones(1, 2))
        assert outs == [4.0]


# ---------------------------------------------------------------- containers

def test_sequential_list_ops():
    a, b, c = nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 3)
    s = nn.Sequential(a, b)
    assert len(s) == 2 and s[0] is a and s[-1] is b
    assert isinstance(s[0:1], nn.Sequential) and s[0:1][0] is a
    s.append(c)
    assert s[2] is c and list(s) == [a, b, c]
    assert s(loom.randn(4, 2)).shape == (4, 3)
    s.insert(1, nn.Tanh())
    assert [type(m).__name__ for m in s] == ["Linear", "Tanh", "ReLU", "Linear"]
    del s[1]
    assert list(s._modules) == ["0", "1", "2"] and s[1] is b
    assert s.pop(1) is b and len(s) == 2
    s[1] = nn.Sigmoid()
    assert isinstance(s[1], nn.Sigmoid)
    s.extend([nn.Identity()])
    assert len(s) == 3
    with pytest.raises(IndexError, match="out of range"):
        s[5]
    named = nn.Sequential(OrderedDict(first=nn.Linear(1, 1), act=nn.ReLU()))
    assert list(named.state_dict()) == ["first.weight", "first.bias"] and named.act is named[1]
    assert len(nn.Sequential(nn.ReLU()) + nn.Sequential(nn.Tanh())) == 2


def test_module_list_and_dict():
    ml = nn.ModuleList([nn.Linear(1, 1) for _ in range(3)])
    ml.append(nn.ReLU())
    ml += [nn.Tanh()]
    assert len(ml) == 5 and isinstance(ml[1:3], nn.ModuleList) and len(ml[1:3]) == 2
    assert [n for n, _ in ml.named_parameters()] == ["0.weight", "0.bias", "1.weight", "1.bias", "2.weight",
                                                     "2.bias"]
    ml.insert(0, nn.Identity())
    assert isinstance(ml[0], nn.Identity) and isinstance(ml[1], nn.Linear)
    assert repr(nn.ModuleList([nn.ReLU(), nn.ReLU(), nn.Tanh()])) == \
        repr(torch.nn.ModuleList([torch.nn.ReLU(), torch.nn.ReLU(), torch.nn.Tanh()]))
    md = nn.ModuleDict({"a": nn.Linear(1, 2)})
    md["b"] = nn.ReLU()
    md.update([("c", nn.Tanh())])
    assert list(md) == ["a", "b", "c"] and "b" in md and len(md) == 3
    assert md.pop("b").__class__ is nn.ReLU and list(md.keys()) == ["a", "c"]
    assert [n for n, _ in md.named_parameters()] == ["a.weight", "a.bias"]


def test_parameter_list_and_dict():
    pl = nn.ParameterList([loom.zeros(2), nn.Parameter(loom.ones(3))])
    pl.append(loom.ones(1))
    assert len(pl) == 3 and all(isinstance(p, nn.Parameter) for p in pl)
    assert [n for n, _ in pl.named_parameters()] == ["0", "1", "2"]
    pd = nn.ParameterDict({"w": loom.ones(2)})
    pd["b"] = loom.zeros(1)
    assert list(pd.keys()) == ["w", "b"] and isinstance(pd["b"], nn.Parameter)
    assert [n for n, _ in pd.named_parameters()] == ["w", "b"]


# ---------------------------------------------------------------- printing

def _zoo(lib):
    n = lib.nn
    return n.Sequential(
        n.Conv2d(3, 8, 3, stride=2, padding=1, bias=False), n.BatchNorm2d(8), n.ReLU(inplace=True), n.MaxPool2d(2),
        n.AvgPool2d(3, 2, 1), n.AdaptiveAvgPool2d((1, 1)), n.Flatten(), n.Dropout(0.2), n.Linear(8, 4),
        n.LayerNorm(4), n.GroupNorm(2, 4), n.LeakyReLU(0.1), n.GELU(), n.Softmax(dim=-1),
        n.Embedding(10, 3, padding_idx=0), n.LSTM(4, 5, num_layers=2, batch_first=True),
        n.GRU(3, 4, bidirectional=True), n.MultiheadAttention(8, 2),
        n.ModuleList([n.Linear(2, 2) for _ in range(3)] + [n.ReLU()]), n.ModuleDict({"a": n.Tanh()}),
        n.TransformerEncoderLayer(8, 2, 16), n.ConvTranspose2d(4, 2, 3, stride=2, output_padding=1),
        n.Conv1d(2, 3, 3, padding="same", padding_mode="reflect"), n.Unflatten(1, (2, 2)), n.CrossEntropyLoss(),
        n.BatchNorm1d(3, momentum=None, affine=False), n.Identity(), n.Bilinear(2, 3, 4), n.ELU(), n.Softplus(),
        n.Hardtanh(), n.RNN(2, 3, nonlinearity="relu"), n.LSTMCell(2, 3), n.Dropout2d(), n.RMSNorm(3),
        n.Transformer(8, 2, 1, 1, 16))


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_repr_matches_torch():
    assert repr(_zoo(loom)) == repr(_zoo(torch))


def test_pickle_module_round_trip():
    import pickle
    net = Net()
    net(loom.randn(4, 3))  # Running statistics move; parameters stay lazy-initialised values.
    back = pickle.loads(pickle.dumps(net))
    assert isinstance(back.block.fc.weight, nn.Parameter) and back.block.fc.weight.requires_grad
    for (k, v), (_, w) in zip(net.state_dict().items(), back.state_dict().items()):
        np.testing.assert_array_equal(v.numpy(), w.numpy(), err_msg=k)
    assert "cache" in back.block._non_persistent_buffers_set


def test_layer_argument_errors():
    with pytest.raises(ValueError, match=r"expected 4D input \(got 3D input\)"):
        nn.BatchNorm2d(3)(loom.randn(2, 3, 4))
    with pytest.raises(ValueError, match=r"expected 2D or 3D input \(got 4D input\)"):
        nn.BatchNorm1d(3)(loom.randn(2, 3, 4, 4))
    with pytest.raises(ValueError, match="in_channels .* divisible by groups"):
        nn.Conv2d(3, 6, 3, groups=2)
    with pytest.raises(ValueError, match="strided"):
        nn.Conv2d(3, 6, 3, stride=2, padding="same")
    with pytest.raises(ValueError, match="padding_mode"):
        nn.Conv1d(3, 6, 3, padding_mode="mirror")
    with pytest.raises(ValueError, match="valid sizes range from 7 to 8"):
        nn.ConvTranspose2d(2, 2, 3, stride=2, padding=1)(loom.randn(1, 2, 4, 4), output_size=(9, 9))
    with pytest.raises(ValueError, match="divisible by num_groups"):
        nn.GroupNorm(4, 6)
    with pytest.raises(ValueError, match="padding_idx"):
        nn.Embedding(5, 2, padding_idx=5)
    with pytest.raises(TypeError, match="unflattened_size"):
        nn.Unflatten(1, 3)


def test_embedding_from_pretrained_and_max_norm():
    w = loom.tensor([[1.0, 0.0], [3.0, 4.0], [0.0, 0.5]])
    emb = nn.Embedding.from_pretrained(w)
    assert not emb.weight.requires_grad and emb(loom.tensor([1])).tolist() == [[3.0, 4.0]]
    assert nn.Embedding.from_pretrained(w, freeze=False).weight.requires_grad
    tw = torch.tensor(w.numpy())
    temb = torch.nn.Embedding.from_pretrained(tw.clone(), max_norm=1.0)
    lemb = nn.Embedding.from_pretrained(loom.tensor(w.numpy()), max_norm=1.0)
    idx = [1, 2, 1]
    np.testing.assert_allclose(lemb(loom.tensor(idx)).numpy(), temb(torch.tensor(idx)).numpy(), rtol=1e-6)
    np.testing.assert_allclose(lemb.weight.numpy(), temb.weight.numpy(), rtol=1e-6)  # Renormalised in place.


def test_loaded_values_do_not_share_storage_with_the_dict():
    m = nn.Linear(3, 1)
    arr = np.array([[1.0, 2.0, 3.0]], dtype=np.float32)
    sd = {"weight": loom.from_numpy(arr), "bias": loom.tensor([0.0])}
    m.load_state_dict(sd)
    arr[0, 0] = 9.0  # Writing to the source after loading leaves the model unchanged.
    assert m.weight.tolist() == [[1.0, 2.0, 3.0]]
    m.weight.detach().numpy()[0, 1] = 7.0
    assert sd["weight"].tolist() == [[9.0, 2.0, 3.0]]


def test_dropout2d_zeroes_whole_channels_in_training():
    loom.manual_seed(3)
    d = nn.Dropout2d(0.5)
    y = d(loom.ones(8, 16, 3, 3)).numpy().reshape(8, 16, 9)
    per_channel = y.min(-1) == y.max(-1)
    assert per_channel.all()  # Each channel is all zeros or all 2.0.
    assert set(np.unique(y).tolist()) == {0.0, 2.0}
    assert np.array_equal(d.eval()(loom.ones(2, 3, 2, 2)).numpy(), np.ones((2, 3, 2, 2), np.float32))
