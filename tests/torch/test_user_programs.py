"""What a PyTorch user sees from loom.torch: names printed as PyTorch prints them, graph introspection, conversions.

Each test is a fault found by running tutorial-style PyTorch programs under `import loom.torch as torch`.
"""
import subprocess
import sys
from pathlib import Path

import pytest

import loom
import loom.torch as torch

ROOT = Path(__file__).resolve().parents[2]


def test_dtype_and_size_print_as_torch_in_a_torch_program():
    x = torch.ones(2, 3, dtype=torch.float64)
    assert str(x.dtype) == "torch.float64" and repr(torch.int64) == "torch.int64"
    assert f"{torch.bfloat16}" == "torch.bfloat16"
    assert str(x.shape) == "torch.Size([2, 3])"
    assert repr(x).endswith("dtype=torch.float64)")


def test_loom_program_keeps_loom_names(tmp_path):
    # A native program in the same interpreter state keeps loom's own spelling.
    script = tmp_path / "native.py"
    script.write_text("import loom\nx = loom.ones(2, dtype=loom.int32)\n"
                      "print(x.dtype, x.shape, repr(x), x.type())\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path,
                         env={"PYTHONPATH": str(ROOT), "PATH": ""}, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "loom.int32 loom.Size([2]) tensor([1, 1], dtype=loom.int32) loom.int32"


def test_tensor_type_gives_and_takes_legacy_type_names():
    x = torch.ones(2)
    assert x.type() == "torch.FloatTensor" and x.long().type() == "torch.LongTensor"
    assert x.type("torch.LongTensor").dtype is torch.int64
    assert x.type("torch.DoubleTensor").dtype is torch.float64
    assert x.type("torch.int8").dtype is torch.int8


def test_parameter_dict_repr_uses_legacy_type_names():
    pd = torch.nn.ParameterDict({"a": torch.nn.Parameter(torch.ones(2, 3))})
    assert "(a): Parameter containing: [torch.FloatTensor of size 2x3]" in repr(pd)


def test_grad_fn_prints_and_walks_like_pytorch():
    w = torch.ones(2, requires_grad=True)
    y = (w * 2).sum()
    assert repr(y).endswith("grad_fn=<SumBackward0>)")
    assert repr(y.grad_fn).startswith("<SumBackward0 object at 0x")
    (mul, k), = y.grad_fn.next_functions
    assert k == 0 and repr(mul).startswith("<MulBackward0 object")
    (acc, _), (const, _) = mul.next_functions
    assert repr(acc).startswith("<AccumulateGrad object") and acc.variable is w and const is None
    y.backward()
    assert repr(y.grad_fn).startswith("<SumBackward0 object")


def test_finfo_and_iinfo_print_as_pytorch():
    assert torch.finfo(torch.float32).resolution == 1e-06
    assert repr(torch.iinfo(torch.int32)) == "iinfo(min=-2.14748e+09, max=2.14748e+09, dtype=int32)"
    assert loom.float32 is torch.float32


def test_empty_parameter_list_is_a_value_error():
    # PyTorch raises ValueError; programs catch that.
    with pytest.raises(ValueError, match="empty parameter list"):
        torch.optim.SGD([], lr=0.1)


def test_jit_save_load_round_trips_a_traced_module(tmp_path):
    m = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Tanh())
    x = torch.randn(4, 3)
    traced = torch.jit.trace(m, x)
    torch.jit.save(traced, str(tmp_path / "m.pt"))
    loaded = torch.jit.load(str(tmp_path / "m.pt"), map_location="cpu")
    assert torch.equal(loaded(x), m(x))
    (tmp_path / "bad.pt").write_bytes(b"not a zip")
    with pytest.raises(RuntimeError, match="not a module saved by loom's torch.jit.save"):
        torch.jit.load(str(tmp_path / "bad.pt"))


def test_comparing_a_tensor_with_none_is_plain_identity():
    x = torch.ones(2)
    assert (x == None) is False and (x != None) is True  # noqa: E711
    assert x in [None, x] and [t for t in (None, x) if t != None] == [x]  # noqa: E711


@pytest.mark.parametrize("low", [torch.bfloat16, torch.float16])
def test_norms_keep_a_low_precision_input_dtype_and_compute_in_float32(low):
    # PyTorch's BatchNorm/GroupNorm/LayerNorm (fp32 parameters) on a bf16 input, as under CPU autocast, give bf16.
    F = torch.nn.functional
    x = torch.randn(3, 4, 5, 5).to(low)
    xf = x.float()
    cases = [
        lambda t: F.batch_norm(t, torch.zeros(4), torch.ones(4), torch.rand(4), torch.rand(4), training=True),
        lambda t: F.batch_norm(t, torch.zeros(4), torch.ones(4), torch.rand(4), torch.rand(4), training=False),
        lambda t: F.instance_norm(t, weight=torch.ones(4), bias=torch.zeros(4)),
        lambda t: F.group_norm(t, 2, torch.ones(4), torch.zeros(4)),
        lambda t: F.layer_norm(t, (5,), torch.ones(5), torch.zeros(5)),
        lambda t: F.rms_norm(t, (5,), torch.ones(5), eps=1e-6),
    ]
    for k, fn in enumerate(cases):
        torch.manual_seed(k)
        y = fn(x)
        torch.manual_seed(k)
        want = fn(xf).to(low)
        assert y.dtype is low, (k, y.dtype)
        assert torch.equal(y, want), k
    bn = torch.nn.BatchNorm2d(4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        h = bn(torch.nn.Conv2d(4, 4, 1)(xf))
    assert h.dtype is torch.bfloat16 and bn.running_mean.dtype is torch.float32
    h.float().sum().backward()
    assert bn.weight.grad.dtype is torch.float32


def test_values_indices_results_are_named_and_print_as_torch_return_types():
    x = torch.tensor([[1.0, 3.0], [2.0, 0.0]])
    r = x.max(dim=1)
    assert type(r).__name__ == "max" and r._fields == ("values", "indices")
    assert repr(r) == "torch.return_types.max(\nvalues=tensor([3., 2.]),\nindices=tensor([1, 0]))"
    v, i = torch.sort(x[0], descending=True)
    assert repr(torch.sort(x[0])).startswith("torch.return_types.sort(\nvalues=") and i.tolist() == [1, 0]
    for op, res in (("min", x.min(0)), ("topk", x.topk(1)), ("kthvalue", x.kthvalue(1)),
                    ("median", x.median(1)), ("mode", x.mode(1)), ("cummax", x.cummax(0))):
        assert type(res).__name__ == op and isinstance(res, tuple)
    import pickle
    back = pickle.loads(pickle.dumps(r))
    assert type(back).__name__ == "max" and torch.equal(back.values, r.values)


def test_torch_nn_modules_files_resolve(tmp_path):
    assert torch.nn.modules.module.Module is torch.nn.Module
    assert torch.nn.modules.batchnorm._BatchNorm is loom.nn.modules.norm._BatchNorm

    class Scaled(torch.nn.modules.loss._Loss):
        def forward(self, a, b):
            return ((a - b) ** 2).sum() if self.reduction == "sum" else ((a - b) ** 2).mean()

    assert Scaled(reduction="sum")(torch.ones(2), torch.zeros(2)).item() == 2.0
    script = tmp_path / "lib.py"
    script.write_text("from torch.nn.modules.module import Module\nfrom torch.nn.modules.conv import _ConvNd\n"
                      "import torch.nn.modules.normalization as N\nimport torch\n"
                      "assert Module is torch.nn.Module and N.LayerNorm is torch.nn.LayerNorm\nprint('ok')\n")
    out = subprocess.run([sys.executable, "-m", "loom.torch", str(script)], capture_output=True, text=True,
                         cwd=tmp_path, env={"PYTHONPATH": str(ROOT), "PATH": ""}, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_calculate_gain_of_linear_layers_is_the_int_one():
    gains = [torch.nn.init.calculate_gain(n) for n in ("linear", "conv2d", "sigmoid")]
    assert gains == [1, 1, 1] and all(type(g) is int for g in gains)


def test_names_follow_an_import_made_inside_a_function(tmp_path):
    script = tmp_path / "fn.py"
    script.write_text("def main():\n    import loom.torch as torch\n    x = torch.ones(2)\n"
                      "    print(x.dtype, x.shape)\n\nmain()\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path,
                         env={"PYTHONPATH": str(ROOT), "PATH": ""}, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "torch.float32 torch.Size([2])"


def test_tensor_from_a_range():
    t = torch.tensor(range(3))
    assert t.dtype is torch.int64 and t.tolist() == [0, 1, 2]
    assert torch.tensor(range(1, 7, 2), dtype=torch.float32).tolist() == [1.0, 3.0, 5.0]


def test_optimizers_take_pytorchs_implementation_flags():
    def params():
        return [torch.nn.Parameter(torch.ones(2))]
    opt = torch.optim.AdamW(params(), lr=1e-3, fused=True, foreach=False)
    g = opt.param_groups[0]
    assert g["fused"] is True and g["foreach"] is False and g["capturable"] is False and g["differentiable"] is False
    sgd = torch.optim.SGD(params(), lr=0.1, foreach=True)
    assert set(sgd.param_groups[0]) >= {"foreach", "fused", "differentiable"}
    torch.optim.RMSprop(params(), capturable=False, foreach=None)
    with pytest.raises(TypeError):
        torch.optim.NAdam(params(), fused=True)  # PyTorch's NAdam has no fused implementation either.
    with pytest.raises(ValueError, match="differentiable=True"):
        torch.optim.SGD(params(), lr=0.1, differentiable=True)


def test_adam_decoupled_weight_decay_is_adamw():
    a, b = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(3))
    oa = torch.optim.Adam([a], lr=0.1, weight_decay=0.5, decoupled_weight_decay=True)
    ob = torch.optim.AdamW([b], lr=0.1, weight_decay=0.5)
    for p, o in ((a, oa), (b, ob)):
        for _ in range(3):
            o.zero_grad()
            (p * torch.tensor([1.0, -2.0, 3.0])).sum().backward()
            o.step()
    assert torch.equal(a, b) and oa.param_groups[0]["decoupled_weight_decay"] is True


def test_to_with_copy_true_returns_a_new_tensor():
    x = torch.ones(3, requires_grad=True)
    assert x.to(torch.float32) is x and x.to("cpu") is x
    for y in (x.to(torch.float32, copy=True), x.to("cpu", copy=True), x.to(copy=True)):
        assert y is not x and torch.equal(y, x) and y.grad_fn is not None
    y = x.detach().to(torch.float32, copy=True)
    y.add_(1)
    assert x.tolist() == [1.0, 1.0, 1.0]


def test_data_ptr_tells_shared_storage_apart():
    a = torch.arange(6.0)
    v = a.view(2, 3)
    assert a.data_ptr() == v.data_ptr() == a[:].data_ptr()
    assert a[1:].data_ptr() == a.data_ptr() + 4 and a.clone().data_ptr() != a.data_ptr()
    enc = torch.nn.Embedding(5, 3)
    dec = torch.nn.Linear(3, 5, bias=False)
    dec.weight = enc.weight
    params = list(enc.parameters()) + list(dec.parameters())
    assert len({p.data_ptr() for p in params}) == 1


def test_bad_parameter_lists_are_value_errors():
    w = torch.nn.Parameter(torch.ones(2))
    with pytest.raises(ValueError, match="non-leaf"):
        torch.optim.SGD([torch.ones(2, requires_grad=True) * 2], lr=0.1)
    with pytest.raises(ValueError, match="more than one parameter group"):
        torch.optim.SGD([{"params": [w]}, {"params": [w]}], lr=0.1)
    with pytest.raises(ValueError, match="required optimization parameter lr"):
        torch.optim.Optimizer([w], {"lr": torch.optim.optimizer.required})


def test_avg_pool1d_stores_and_prints_one_tuples():
    p = torch.nn.AvgPool1d(3)
    assert repr(p) == "AvgPool1d(kernel_size=(3,), stride=(3,), padding=(0,))"
    assert torch.nn.AvgPool1d(2, stride=1, padding=1)(torch.arange(4.0).view(1, 1, 4)).tolist() == \
        [[[0.0, 0.5, 1.5, 2.5, 1.5]]]


def test_torch_compiler_and_dynamo_controls():
    torch._dynamo.reset()
    torch.compiler.reset()
    torch._dynamo.config.suppress_errors = True
    seen = []

    @torch.compile
    def f(a):
        seen.append(torch.compiler.is_compiling())
        return a * 2

    for _ in range(3):
        assert f(torch.ones(2)).tolist() == [2.0, 2.0]
    assert seen[0] is False and True in seen and torch.compiler.is_compiling() is False
    assert torch.compiler.disable(f) is f
    assert torch._dynamo.optimize("inductor")(lambda a: a + 1)(torch.zeros(1)).tolist() == [1.0]


def test_numpy_bridge_follows_in_place_ops_on_the_tensor():
    # PyTorch's "Bridge with NumPy" tutorial: a change in the tensor reflects in the NumPy array.
    t = torch.ones(5)
    n = t.numpy()
    t.add_(1)
    assert n.tolist() == [2.0] * 5
    n[0] = 9.0
    assert t.tolist() == [9.0, 2.0, 2.0, 2.0, 2.0]
    y = t * 2  # A pending value reading the old contents keeps them.
    t.mul_(10)
    assert y.tolist() == [18.0, 4.0, 4.0, 4.0, 4.0] and n.tolist() == [90.0, 20.0, 20.0, 20.0, 20.0]
    v = t[1:3]
    v.zero_()
    assert n.tolist() == [90.0, 0.0, 0.0, 20.0, 20.0]
    t.unsqueeze_(0)  # Metadata change: allowed, and the array keeps its shape.
    assert tuple(t.shape) == (1, 5) and n.shape == (5,)


def test_functions_take_pytorchs_out_keyword():
    # From PyTorch's tensors tutorial: `torch.matmul(tensor, tensor.T, out=y3)`.
    t = torch.ones(4, 4)
    t[:, 1] = 0
    y3 = torch.rand_like(t)
    assert torch.matmul(t, t.T, out=y3) is y3 and y3.tolist() == (t @ t.T).tolist()
    z3 = torch.rand_like(t)
    torch.mul(t, t, out=z3)
    assert torch.equal(z3, t * t)
    grown = torch.empty(0)
    torch.cat([t, t], out=grown)  # PyTorch resizes a wrongly shaped out.
    assert tuple(grown.shape) == (8, 4)
    values, indices = torch.zeros(4), torch.zeros(4, dtype=torch.long)
    r = torch.max(t, 1, out=(values, indices))
    assert r.values is values and values.tolist() == [1.0] * 4 and type(r).__name__ == "max"
    with pytest.raises(TypeError, match="can't be cast"):
        torch.add(t, 1, out=torch.zeros(4, 4, dtype=torch.long))
    assert torch.add is torch.add and torch.add.__name__ == "add"


def test_prelu_runs_in_bfloat16_under_cpu_autocast():
    m = torch.nn.PReLU(3)
    x = torch.randn(2, 3, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = m(x)
    assert y.dtype is torch.bfloat16 and m(x).dtype is torch.float32
    assert torch.allclose(y.float(), m(x), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("shape,kw", [((1, 2, 8, 8), {"size": (3, 3)}), ((2, 1, 10, 7), {"size": (4, 5)}),
                                      ((1, 1, 5, 5), {"size": (9, 7)}), ((1, 1, 9, 9), {"scale_factor": 0.37})])
def test_interpolate_antialias_matches_pytorch(mode, shape, kw):
    import numpy as np
    real = pytest.importorskip("torch")
    a = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    x, rx = torch.from_numpy(a.copy()).requires_grad_(), real.from_numpy(a.copy()).requires_grad_()
    y = torch.nn.functional.interpolate(x, mode=mode, antialias=True, **kw)
    ry = real.nn.functional.interpolate(rx, mode=mode, antialias=True, **kw)
    w = np.random.default_rng(1).standard_normal(tuple(ry.shape)).astype(np.float32)
    (y * torch.from_numpy(w)).sum().backward()
    (ry * real.from_numpy(w)).sum().backward()
    np.testing.assert_allclose(y.detach().numpy(), ry.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(x.grad.numpy(), rx.grad.numpy(), rtol=1e-4, atol=1e-5)
