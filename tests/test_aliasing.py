"""PyTorch's storage semantics: aliases see in-place writes, autograd guards them, copies stay copies.

Each test runs the same program in PyTorch and in loom where PyTorch defines
the behaviour, so the expected values are PyTorch's own.
"""
import numpy as np
import pytest
import torch

import loom
import loom.nn as nn
from loom.errors import AutogradError, LoomError, ShapeError


def _both(program):
    """Run `program(lib)` with torch and with loom; return both results as nested lists."""
    out = []
    for lib in (torch, loom):
        r = program(lib)
        out.append(_plain(r))
    return out


def _plain(r):
    if isinstance(r, (list, tuple)):
        return [_plain(v) for v in r]
    if isinstance(r, (torch.Tensor, loom.Tensor)):
        return np.asarray(r.detach().numpy(), dtype=np.float64).round(5).tolist()
    return r


# ---------------------------------------------------------------- the defects the issue names

def test_hand_written_sgd_through_data_trains():
    def program(lib):
        lib.manual_seed(0)
        w = lib.tensor([[0.5, -1.0], [1.5, 2.0]], requires_grad=True)
        x = lib.tensor([[1.0, 2.0], [3.0, -1.0]])
        losses = []
        for _ in range(5):
            loss = ((x @ w) ** 2).mean()
            loss.backward()
            w.data.add_(w.grad, alpha=-0.05)  # The word-language-model trainer's update.
            w.grad.zero_()
            losses.append(loss.item())
        return w, losses
    torch_r, loom_r = _both(program)
    assert loom_r == torch_r
    assert loom_r[1][-1] < loom_r[1][0]


def test_state_dict_entries_alias_parameters_and_copy_loads_weights():
    model = nn.Sequential(nn.Linear(3, 2), nn.ReLU(), nn.Linear(2, 1))
    pretrained = {k: loom.full(tuple(v.shape), 0.25) for k, v in model.state_dict().items()}
    sd = model.state_dict()
    for k, v in pretrained.items():
        sd[k].copy_(v)  # How pretrained weights are loaded by hand.
    for p in model.parameters():
        assert np.all(p.detach().numpy() == 0.25)
    # And the other way: a parameter update is seen through a state_dict entry taken before it.
    with loom.no_grad():
        model[0].weight.mul_(2)
    assert np.all(sd["0.weight"].numpy() == 0.5)


@pytest.mark.parametrize("name", ["slice_fill", "view_mul", "t_add", "detach_zero", "select_copy",
                                  "diagonal_fill", "narrow_sub", "unsqueeze_mul", "expand_source"])
def test_writes_through_aliases_reach_the_base(name):
    programs = {
        "slice_fill": lambda lib, x: x[:2].fill_(0),
        "view_mul": lambda lib, x: x.view(3, 4).mul_(2),
        "t_add": lambda lib, x: x.t().add_(1),
        "detach_zero": lambda lib, x: x.detach().zero_(),
        "select_copy": lambda lib, x: x.select(1, 2).copy_(lib.tensor([7.0, 8.0, 9.0, 10.0])),
        "diagonal_fill": lambda lib, x: x.diagonal().fill_(-1),
        "narrow_sub": lambda lib, x: x.narrow(0, 1, 2).sub_(5),
        "unsqueeze_mul": lambda lib, x: x.unsqueeze(0)[0, 1:].mul_(3),
        "expand_source": lambda lib, x: x[0].add_(x[1]),
    }

    def program(lib):
        x = lib.arange(12.0).reshape(4, 3)
        programs[name](lib, x)
        return x
    torch_r, loom_r = _both(program)
    assert loom_r == torch_r


@pytest.mark.parametrize("init", ["zeros_", "ones_", "constant_", "normal_", "uniform_", "xavier_uniform_",
                                  "kaiming_normal_", "eye_"])
def test_nn_init_on_slices_writes_the_parameter(init):
    w = nn.Parameter(loom.full((6, 4), 9.0))
    part = w[2:4]
    args = {"constant_": (1.5,)}.get(init, ())
    getattr(nn.init, init)(part, *args)
    got = w.detach().numpy()
    assert np.all(got[:2] == 9.0) and np.all(got[4:] == 9.0)
    assert not np.all(got[2:4] == 9.0)
    np.testing.assert_array_equal(got[2:4], part.detach().numpy())


def test_numpy_shared_memory_sees_writes_through_views():
    a = np.zeros((3, 4), dtype=np.float32)
    t = loom.from_numpy(a)
    t[1].fill_(2.0)
    t.t()[3].add_(1.0)
    expected = np.zeros((3, 4), dtype=np.float32)
    expected[1] = 2.0
    expected[:, 3] += 1.0
    np.testing.assert_array_equal(a, expected)


def test_a_view_sees_a_later_write_to_its_base_and_siblings():
    x = loom.zeros(3, 3)
    row, col, diag = x[1], x[:, 2], x.diagonal()
    x.add_(1)
    row.mul_(5)
    assert row.tolist() == [5.0, 5.0, 5.0]
    assert col.tolist() == [1.0, 5.0, 1.0]
    assert diag.tolist() == [1.0, 5.0, 1.0]
    assert x.tolist() == [[1.0, 1.0, 1.0], [5.0, 5.0, 5.0], [1.0, 1.0, 1.0]]


# ---------------------------------------------------------------- copies stay copies

@pytest.mark.parametrize("name", ["clone", "contiguous_of_t", "reshape_of_t", "flatten_of_t", "advanced_index",
                                  "mask_index", "negative_step_slice_via_flip", "stack_one", "cat_one",
                                  "repeat_ones", "tile_ones", "float_to_double", "contiguous_of_contiguous",
                                  "reshape_contiguous", "index_select"])
def test_aliasing_of_each_op_matches_pytorch(name):
    ops = {
        "clone": lambda lib, x: x.clone(),
        "contiguous_of_t": lambda lib, x: x.t().contiguous(),
        "reshape_of_t": lambda lib, x: x.t().reshape(-1),
        "flatten_of_t": lambda lib, x: x.t().flatten(),
        "advanced_index": lambda lib, x: x[[0, 2]],
        "mask_index": lambda lib, x: x[x > 3],
        "negative_step_slice_via_flip": lambda lib, x: lib.flip(x, [0]),
        "stack_one": lambda lib, x: lib.stack([x]),
        "cat_one": lambda lib, x: lib.cat([x]),
        "repeat_ones": lambda lib, x: x.repeat(1, 1),
        "tile_ones": lambda lib, x: x.tile((1, 1)),
        "float_to_double": lambda lib, x: x.double(),
        "contiguous_of_contiguous": lambda lib, x: x.contiguous(),
        "reshape_contiguous": lambda lib, x: x.reshape(2, 6),
        "index_select": lambda lib, x: x.index_select(0, lib.tensor([1, 2])),
    }

    def program(lib):
        x = lib.arange(12.0).reshape(4, 3)
        y = ops[name](lib, x)
        y.fill_(-7)
        return x, y
    torch_r, loom_r = _both(program)
    assert loom_r == torch_r


def test_strides_and_contiguity_match_pytorch():
    def program(lib):
        x = lib.zeros(4, 6)
        views = [x.t(), x[1:, ::2], x.diagonal(1), x.unsqueeze(1), x[2], x.view(2, 12), x.expand(3, 4, 6),
                 x.as_strided((3, 2), (1, 5), 2), x.t()[1:3]]
        return [[list(v.stride()), v.storage_offset(), v.is_contiguous()] for v in views]
    torch_r, loom_r = _both(program)
    assert loom_r == torch_r


def test_view_of_non_viewable_layout_raises_like_pytorch():
    x = loom.zeros(3, 4)
    with pytest.raises(ShapeError, match=r"loom\.view: view size \[12\] is not compatible .*use \.reshape"):
        x.t().view(12)
    assert x.t().reshape(12).shape == (12,)


# ---------------------------------------------------------------- autograd's guards

def test_version_counter_is_shared_by_views_but_not_by_data():
    x = loom.zeros(4)
    v, d, data = x[1:], x.detach(), x.data
    assert x._version == 0
    v.add_(1)
    assert (x._version, v._version, d._version) == (1, 1, 1)
    data.add_(1)  # `.data` writes are not versioned, as in PyTorch.
    assert x._version == 1
    assert x.tolist() == [1.0, 2.0, 2.0, 2.0]


def test_in_place_on_a_view_of_a_leaf_that_requires_grad_raises():
    w = loom.ones(4, requires_grad=True)
    with pytest.raises(AutogradError, match=r"loom\.mul_: a view of a leaf tensor that requires grad"):
        w[:2].mul_(2)
    with pytest.raises(AutogradError, match="leaf tensor that requires grad"):
        w.add_(1)
    with loom.no_grad():
        w[:2].mul_(2)  # Allowed, as in PyTorch.
    assert w.tolist() == [2.0, 2.0, 1.0, 1.0]


def test_modifying_a_saved_tensor_through_an_alias_raises_at_backward():
    for alias in (lambda y: y.detach(), lambda y: y[1:], lambda y: y.t()):
        x = loom.ones(3, 3, requires_grad=True)
        y = x * 2
        z = (y * y).sum()
        with loom.no_grad():
            alias(y).add_(1)
        with pytest.raises(AutogradError, match="modified by an in-place operation"):
            z.backward()


def test_in_place_through_data_is_not_seen_by_autograd():
    def program(lib):
        x = lib.tensor([1.0, 2.0, 3.0], requires_grad=True)
        y = x * 2
        z = (y * y).sum()
        y.data.mul_(10)  # PyTorch does not version .data: the backward reads the new value.
        z.backward()
        return x.grad
    torch_r, loom_r = _both(program)
    assert loom_r == torch_r


def test_writing_an_expanded_view_raises():
    x = loom.zeros(3)
    with pytest.raises(LoomError, match=r"more than one element of the written-to tensor .* refers to a single"):
        x.expand(2, 3).add_(1)
    with pytest.raises(LoomError, match="more than one element"):
        x.as_strided((2, 2), (0, 1)).fill_(1)


def test_gradient_through_writes_into_views_matches_pytorch():
    def program(lib):
        x = lib.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], requires_grad=True)
        s = lib.tensor(0.5, requires_grad=True)
        y = x * 3.0
        y[:, 1].mul_(s)
        y.t()[0].add_(x[:, 1] * s)
        loss = (y * y).sum()
        loss.backward()
        return x.grad, s.grad, y
    torch_r, loom_r = _both(program)
    np.testing.assert_allclose(np.array(loom_r[0]), np.array(torch_r[0]), rtol=1e-5)
    np.testing.assert_allclose(loom_r[1], torch_r[1], rtol=1e-5)
    np.testing.assert_allclose(np.array(loom_r[2]), np.array(torch_r[2]), rtol=1e-5)


def test_data_assignment_rebinds_storage():
    def program(lib):
        p = lib.zeros(3)
        old_view = p[1:]
        new = lib.ones(3)
        p.data = new
        new.add_(1)  # p now uses new's storage...
        old_view.fill_(5)  # ...and the old view keeps the old storage.
        return p, new, old_view
    torch_r, loom_r = _both(program)
    assert loom_r == torch_r


# ---------------------------------------------------------------- loom.function

@pytest.mark.parametrize("backend", ["reference", "c"])
def test_traced_writes_through_views_match_eager(backend):
    def run(traced):
        lin = nn.Linear(4, 3)
        with loom.no_grad():
            lin.weight.copy_(loom.arange(12.0).reshape(3, 4) / 10)
            lin.bias.fill_(0.1)
        sd = lin.state_dict()  # Aliases taken before the step.
        row = lin.weight[1]

        def step(x, buf):
            out = lin(x).sum()
            with loom.no_grad():
                lin.weight[:, 0].mul_(0.5)   # A write through a view of a parameter.
                lin.bias.t().add_(1.0)
            buf[1:].add_(out.detach())       # A write through a view of an argument.
            buf.view(2, 2)[0].mul_(2.0)
            return out
        fn = loom.function(step, backend=backend) if traced else step
        buf = loom.zeros(4)
        base = loom.zeros(2, 4)
        arg = base[1]  # The argument itself is a view: the write must reach `base`.
        results = []
        for _ in range(4):
            results.append(fn(loom.ones(2, 4), buf).item())
            fn(loom.ones(2, 4), arg)
        return results, buf.tolist(), base.tolist(), sd["weight"].tolist(), sd["bias"].tolist(), row.tolist()
    eager, traced = run(False), run(True)
    np.testing.assert_allclose(np.array(eager[0]), np.array(traced[0]), rtol=1e-5)
    for a, b in zip(eager[1:], traced[1:]):
        np.testing.assert_allclose(np.array(a), np.array(b), rtol=1e-5)
