"""Views crossed with in-place writes: every alias sees a write through any other, as in PyTorch.

Each case clones its input into a non-leaf, takes a view of it, writes through
the view (or through the base) and returns both; the harness compares values
and gradients with PyTorch in every execution mode (eager, compiled, traced).
"""
import numpy as np
import pytest

from tests.parity.harness import Case, randn, run_case

# View ops PyTorch defines as views, applied to a (4, 6) tensor.
VIEWS = {
    "slice": lambda v: v[1:3],
    "slice_step": lambda v: v[:, ::2],
    "int_index": lambda v: v[2],
    "index_none_ellipsis": lambda v: v[None, ..., 1],
    "view": lambda v: v.view(6, 4),
    "view_flat": lambda v: v.view(-1),
    "reshape_viewable": lambda v: v.reshape(2, 12),
    "transpose": lambda v: v.transpose(0, 1),
    "t": lambda v: v.t(),
    "T": lambda v: v.T,
    "mT": lambda v: v.mT,
    "permute": lambda v: v.view(2, 2, 6).permute(2, 0, 1),
    "movedim": lambda v: v.movedim(0, 1),
    "select": lambda v: v.select(1, 3),
    "narrow": lambda v: v.narrow(1, 2, 3),
    "unsqueeze": lambda v: v.unsqueeze(1),
    "squeeze": lambda v: v[1:2].squeeze(0),
    "flatten": lambda v: v.flatten(),
    "unflatten": lambda v: v.unflatten(1, (2, 3)),
    "diagonal": lambda v: v.diagonal(),
    "diagonal_offset": lambda v: v.diagonal(2),
    "diagonal_neg_offset": lambda v: v.diagonal(-1),
    "as_strided": lambda v: v.as_strided((3, 2), (6, 2), 1),
    "unbind": lambda v: v.unbind(1)[4],
    "split": lambda v: v.split(2, dim=1)[1],
    "chunk": lambda v: v.chunk(2, 0)[1],
    "view_of_view": lambda v: v[1:].t()[2],
    "transpose_then_slice": lambda v: v.t()[1:4, ::2],
}

# In-place writes, given the view and a 0-d tensor `w`.
WRITES = {
    "mul_": lambda m, v, w: v.mul_(2.0),
    "add_tensor": lambda m, v, w: v.add_(w),
    "fill_": lambda m, v, w: v.fill_(0.5),
    "zero_": lambda m, v, w: v.zero_(),
    "copy_": lambda m, v, w: v.copy_(w.expand(v.shape) * 3),
    "setitem": lambda m, v, w: v.__setitem__(..., w * w),
    "clamp_": lambda m, v, w: v.clamp_(-0.3, 0.3),
    "iadd": lambda m, v, w: v.__iadd__(w * 2),
}


# PyTorch's autograd refuses in-place writes to the outputs of functions returning several views,
# so with those the write happens under no_grad (they share storage all the same).
MULTI_OUTPUT = {"unbind", "split", "chunk"}


def _write_case(view_name: str, write_name: str) -> Case:
    view, write = VIEWS[view_name], WRITES[write_name]

    def body(m, x, w):
        y = x * 1.0  # A non-leaf that owns the storage.
        v = view(y)
        if view_name in MULTI_OUTPUT:
            with m.no_grad():
                write(m, v, w)
            return y, v.detach() * 1.0
        write(m, v, w)
        return y, v, y.sum() * v.sum()
    return Case(f"{view_name}-{write_name}", body, (randn(4, 6), randn()))


CASES = [_write_case(v, w) for v in VIEWS for w in ("mul_", "add_tensor", "copy_")]
CASES += [_write_case(v, w) for v in ("slice", "t", "diagonal", "select", "view_of_view", "as_strided")
          for w in WRITES if w not in ("mul_", "add_tensor", "copy_")]


def _base_write_case(view_name: str) -> Case:
    view = VIEWS[view_name]

    def body(m, x, w):
        y = x * 1.0
        v = view(y)
        y.mul_(w)  # A write to the base is seen through the view taken before it.
        return (v.detach() if view_name in MULTI_OUTPUT else v) * 1.0, y
    return Case(f"{view_name}-base_write", body, (randn(4, 6), randn()))


CASES += [_base_write_case(v) for v in VIEWS]


def _sibling_case(name: str, first, second) -> Case:
    def body(m, x, w):
        y = x * 1.0
        a, b = first(y), second(y)
        a.add_(w)
        b.mul_(3.0)
        return y, a * 1.0, b * 1.0
    return Case(name, body, (randn(4, 6), randn()))


CASES += [
    _sibling_case("siblings_row_and_column", lambda v: v[1], lambda v: v[:, 2]),
    _sibling_case("siblings_t_and_diagonal", lambda v: v.t(), lambda v: v.diagonal()),
    _sibling_case("siblings_overlapping_slices", lambda v: v[:3, 1:], lambda v: v[2:, :4]),
    _sibling_case("siblings_detach_and_view", lambda v: v.detach()[0], lambda v: v.view(24)),
    Case("detach_zero_is_seen_by_base", lambda m, x: [y for y in [x * 2.0] if y.detach()[1].zero_() is not None][0],
         (randn(4, 6),)),
    Case("setitem_through_two_level_view",
         lambda m, x, w: [y for y in [x * 1.0] if y.t()[1:3].__setitem__((0, 1), w) is None][0],
         (randn(4, 6), randn())),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_views_inplace(case, mode):
    run_case(case, mode)


def test_every_view_op_is_crossed_with_every_write():
    names = {c.name for c in CASES}
    for v in VIEWS:
        for w in ("mul_", "add_tensor", "copy_"):
            assert f"{v}-{w}" in names
    for w in WRITES:
        assert f"slice-{w}" in names
    assert np.unique([c.name for c in CASES]).size == len(CASES)
