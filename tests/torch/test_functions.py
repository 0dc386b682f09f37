"""loom.torch's own functions: windows, torch.X twins of Tensor methods, in-place names, special, testing."""
import numpy as np
import pytest

import loom
import loom.torch as torch

pt = pytest.importorskip("torch")


@pytest.mark.parametrize("name,kwargs", [("hann_window", {}), ("hamming_window", {"periodic": False}),
                                         ("blackman_window", {}), ("bartlett_window", {"periodic": False}),
                                         ("kaiser_window", {"periodic": True, "beta": 5.0}),
                                         ("kaiser_window", {"periodic": False})])
def test_windows_match_pytorch(name, kwargs):
    for n in (0, 1, 7):
        got = getattr(torch, name)(n, **kwargs)
        want = getattr(pt, name)(n, **kwargs)
        assert got.dtype is torch.float32
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6, err_msg=f"{name}({n})")


def test_tensor_method_twins_and_inplace_names():
    x = torch.tensor([-1.0, 0.5, 2.0])
    assert torch.clone(x).tolist() == x.tolist() and torch.detach(x) is not x
    y = x.clone()
    assert torch.abs_(y) is y and y.tolist() == [1.0, 0.5, 2.0]
    z = torch.tensor([-1.0, 1.0])
    torch.selu_(z)
    np.testing.assert_allclose(z.numpy(), pt.selu(pt.tensor([-1.0, 1.0])).numpy(), rtol=1e-6)
    w = torch.tensor([-2.0, 3.0])
    assert torch.nn.functional.relu_(w) is w and w.tolist() == [0.0, 3.0]
    assert torch.fill(x, 2.0).tolist() == [2.0] * 3 and torch.nn.functional.Tensor is torch.Tensor
    with pytest.raises(AttributeError):
        _ = torch.no_such_function_


def test_random_fills_have_their_distributions():
    torch.manual_seed(0)
    x = torch.empty(20000, dtype=torch.float64)
    assert abs(x.cauchy_(2.0, 0.5).median().item() - 2.0) < 0.05
    assert abs(x.log_normal_(0.0, 0.5).log().std().item() - 0.5) < 0.02
    g = x.geometric_(0.25)
    assert abs(g.mean().item() - 4.0) < 0.1 and g.min().item() == 1.0 and torch.equal(g, g.floor())
    with pytest.raises(loom.LoomValueError):
        x.geometric_(0.0)
    with pytest.raises(loom.AutogradError):
        torch.ones(2, requires_grad=True).cauchy_()


def test_special_matches_pytorch():
    v = np.linspace(-3, 3, 13).astype(np.float32)
    for name in ("ndtr", "log_ndtr", "expit", "entr"):
        got = getattr(torch.special, name)(torch.tensor(v)).numpy()
        want = getattr(pt.special, name)(pt.tensor(v)).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=name)
    np.testing.assert_allclose(torch.special.xlog1py(torch.tensor(v), torch.tensor(v + 3.5)).numpy(),
                               pt.special.xlog1py(pt.tensor(v), pt.tensor(v + 3.5)).numpy(), rtol=1e-5)


def test_testing_assert_close():
    torch.testing.assert_close(torch.ones(2), torch.ones(2) + 1e-7)
    torch.testing.assert_close({"a": [torch.tensor(1)]}, {"a": [torch.tensor(1)]})
    with pytest.raises(AssertionError, match="not close"):
        torch.testing.assert_close(torch.ones(2), torch.ones(2) + 1e-3)
    with pytest.raises(AssertionError, match="dtype"):
        torch.testing.assert_close(torch.ones(2), torch.ones(2, dtype=torch.float64))


def test_small_creation_functions():
    assert torch.range(0, 1, 0.25).tolist() == [0.0, 0.25, 0.5, 0.75, 1.0]
    buf = bytearray(np.arange(3, dtype=np.float32).tobytes())
    t = torch.frombuffer(buf, dtype=torch.float32)
    assert t.tolist() == [0.0, 1.0, 2.0]
    assert torch.empty_strided((2, 3), (3, 1)).shape == (2, 3)
    assert torch.get_device_module() is torch.cpu and torch.get_device_module("cuda") is torch.cuda
    a = np.from_dlpack(_Capsule(torch.to_dlpack(torch.arange(3.0))))
    assert a.tolist() == [0.0, 1.0, 2.0]


class _Capsule:
    """Hands a bare DLPack capsule to NumPy."""

    def __init__(self, capsule):
        self.capsule = capsule

    def __dlpack__(self, **kwargs):
        return self.capsule

    def __dlpack_device__(self):
        return (1, 0)


def test_coverage_script_reports(capsys):
    from loom.torch import coverage
    rows = {name: (n, missing) for name, n, missing in coverage.compare()}
    n, missing = rows["torch.Tensor"]
    assert n > 400 and "new_zeros" not in missing and "pin_memory" not in missing
    assert "cuda" not in " ".join(missing)  # GPU internals are excluded.
    coverage.main(["--summary"])
    out = capsys.readouterr().out
    assert "torch.nn.functional" in out and "%" in out
