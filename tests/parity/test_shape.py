"""Parity of movement ops: views, joins, splits, tiling, padding, diagonals."""
import numpy as np
import pytest

import loom
from loom.errors import LoomError, LoomIndexError, ShapeError
from tests.parity.harness import Case, bools, ints, randn, run_case


def special(*shape):
    """Floats that include -0.0, +-inf and NaN, which a join must pass through unchanged."""
    def make(rng):
        a = rng.standard_normal(shape).astype(np.float32).ravel()
        k = min(4, a.size)
        a[:k] = [-0.0, np.inf, -np.inf, np.nan][:k]
        return a.reshape(shape)
    return make


CASES = [
    # Views.
    Case("reshape_infer", lambda m, x: x.reshape(4, -1) * 2, (randn(2, 3, 4),), second_order=True),
    Case("reshape_noncontig", lambda m, x: x.t().reshape(-1), (randn(3, 5),)),
    Case("reshape_zero_size", lambda m, x: (x.reshape(3, 0, 2), x.reshape(-1, 3)), (randn(0, 6),)),
    Case("reshape_0d", lambda m, x: x.reshape(1, 1), (randn(),)),
    Case("view_tuple", lambda m, x: x.view((6, 4)), (randn(2, 3, 4),)),
    Case("view_as", lambda m, x, y: x.view_as(y), (randn(12), randn(3, 4))),
    Case("reshape_as", lambda m, x, y: x.reshape_as(y), (randn(2, 6), randn(4, 3))),
    Case("permute_neg", lambda m, x: x.permute(-1, 0, 1) * 1.5, (randn(2, 3, 4),), second_order=True),
    Case("permute_int", lambda m, x: m.permute(x, (2, 0, 1)), (ints(2, 3, 4),)),
    Case("transpose_neg", lambda m, x: x.transpose(-1, -3), (randn(2, 3, 4),)),
    Case("swapaxes", lambda m, x: m.swapaxes(x, 0, 2), (randn(2, 3, 4),)),
    Case("t_1d_and_2d", lambda m, x, y: (x.t(), y.t()), (randn(5), randn(2, 3))),
    Case("T_property", lambda m, x: x.T, (randn(2, 3),)),
    Case("mT_batched", lambda m, x: x.mT.exp(), (randn(2, 3, 4),)),
    Case("adjoint", lambda m, x: x.adjoint(), (randn(2, 3, 4),)),
    Case("movedim_multi", lambda m, x: m.movedim(x, (0, 1), (-1, 0)), (randn(2, 3, 4, 5),)),
    Case("moveaxis_single", lambda m, x: x.moveaxis(-1, 0), (randn(2, 3, 4),)),
    Case("expand_neg1_lead", lambda m, x: x.expand(2, -1, 4) * 3, (randn(3, 1),), second_order=True),
    Case("expand_noncontig", lambda m, x: x[:, ::2].expand(5, 2, 3), (randn(2, 6),)),
    Case("expand_zero", lambda m, x: x.expand(0, 3), (randn(1, 3),)),
    Case("expand_as", lambda m, x, y: x.expand_as(y), (randn(4), randn(3, 4))),
    Case("broadcast_tensors", lambda m, a, b, c: m.broadcast_tensors(a, b, c),
         (randn(3, 1), randn(4), randn(2, 1, 1))),
    Case("broadcast_to", lambda m, a: m.broadcast_to(a, (2, 3, 4)), (randn(3, 1),)),
    Case("squeeze_all", lambda m, x: x.squeeze(), (randn(1, 3, 1, 2),)),
    Case("squeeze_dim_noop", lambda m, x: (x.squeeze(1), x.squeeze(-2)), (randn(1, 3, 1, 2),)),
    Case("squeeze_tuple", lambda m, x: x.squeeze((0, -2, 1)), (randn(1, 3, 1, 2),)),
    Case("squeeze_0d", lambda m, x: (x.squeeze(), x.squeeze(0), x.squeeze(-1)), (randn(),)),
    Case("unsqueeze_neg", lambda m, x: (x.unsqueeze(-1), x.unsqueeze(0), x.unsqueeze(-3)), (randn(2, 3),)),
    Case("unsqueeze_0d", lambda m, x: x.unsqueeze(-1), (randn(),)),
    Case("flatten_range", lambda m, x: (x.flatten(), x.flatten(1), x.flatten(-3, -2)), (randn(2, 3, 4, 5),)),
    Case("flatten_0d", lambda m, x: x.flatten(), (randn(),)),
    Case("unflatten_infer", lambda m, x: x.unflatten(1, (2, -1)), (randn(3, 8),)),
    Case("unflatten_neg", lambda m, x: m.unflatten(x, -1, (2, 2, 2)), (randn(3, 8),)),
    Case("ravel_noncontig", lambda m, x: x.permute(1, 0).ravel(), (randn(3, 4),)),
    Case("narrow", lambda m, x: (x.narrow(1, 2, 3), x.narrow(-1, -3, 2)), (randn(2, 6),), second_order=True),
    Case("select_neg", lambda m, x: (x.select(1, -1), m.select(x, 0, 1)), (randn(2, 3, 4),)),
    Case("clone_contiguous", lambda m, x: (x.t().clone() * 2, x.t().contiguous() + 1), (randn(3, 4),),
         second_order=True),
    Case("inplace_same_shape", lambda m, x: (x.clone().t_(), x.clone().tril_(-1), x.clone().triu_(1),
                                             x.clone().transpose_(0, 1).squeeze_()), (randn(3, 3),)),
    Case("clone_int", lambda m, x: x.clone(), (ints(5),)),
    # Joins.
    Case("cat_dim1", lambda m, a, b: m.cat([a, b], 1), (randn(2, 3), randn(2, 5)), second_order=True),
    Case("cat_neg_dim_three", lambda m, a, b, c: m.cat((a, b, c), -2),
         (randn(2, 1, 3), randn(2, 4, 3), randn(2, 2, 3))),
    Case("cat_special_values", lambda m, a, b: m.cat([a, b]), (special(6), special(5))),
    Case("cat_neg_zero_sign", lambda m, a, b: 1.0 / m.cat([a, b]), (special(3), special(4)), grad=False),
    Case("cat_promote_int_float", lambda m, a, b: m.cat([a, b]), (ints(3), randn(2))),
    Case("cat_promote_bool_int32", lambda m, a, b: m.cat([a, b]), (bools(3), ints(2, dtype=np.int32))),
    Case("cat_promote_f32_f64", lambda m, a, b: m.cat([a, b], 1), (randn(2, 2), randn(2, 3, dtype=np.float64))),
    Case("cat_bool", lambda m, a, b: m.cat([a, b]), (bools(4), bools(3))),
    Case("cat_skip_empty_1d", lambda m, a, b: m.cat([a, b]), (randn(0), randn(2, 3))),
    Case("cat_zero_size", lambda m, a, b: m.cat([a, b], 1), (randn(2, 0), randn(2, 3))),
    Case("cat_noncontig", lambda m, a, b: m.cat([a.t(), b[:, ::2]]), (randn(3, 2), randn(4, 6))),
    Case("cat_many_parts", lambda m, *xs: m.cat(xs, 1), tuple(randn(2, k) for k in (1, 3, 2, 1, 4, 2, 1))),
    Case("cat_single_copies", lambda m, a: m.cat([a]) * 2, (randn(2, 3),)),
    Case("cat_promote_int8_uint8", lambda m, a, b: m.cat([a, b]), (ints(3, dtype=np.int8), ints(2, dtype=np.uint8))),
    Case("cat_bool_float", lambda m, a, b: m.cat([a, b]), (bools(3), randn(2))),
    Case("cat_half_bfloat16", lambda m, a, b: (m.cat([a.to(m.bfloat16), b.to(m.bfloat16)]),
                                               m.cat([a.half(), b.half()], 0)), (special(4), randn(3))),
    Case("concat_alias", lambda m, a, b: m.concat([a, b], 0), (randn(1, 3), randn(2, 3))),
    Case("stack_dims", lambda m, a, b: (m.stack([a, b]), m.stack([a, b], -1), m.stack([a, b], 1)),
         (randn(2, 3), randn(2, 3)), second_order=True),
    Case("stack_int", lambda m, a, b: m.stack([a, b]), (ints(3), ints(3))),
    Case("hstack", lambda m, a, b, c, d: (m.hstack([a, b]), m.hstack([c, d])),
         (randn(3), randn(2), randn(2, 1), randn(2, 3))),
    Case("vstack", lambda m, a, b, c: m.vstack([a, b, c]), (randn(3), randn(2, 3), randn(3))),
    Case("dstack", lambda m, a, b: m.dstack([a, b]), (randn(3), randn(3))),
    Case("column_stack", lambda m, a, b: m.column_stack([a, b]), (randn(3), randn(3, 2))),
    # Splits.
    Case("split_int_uneven", lambda m, x: x.split(2, 1), (randn(3, 5),), second_order=True),
    Case("split_sections", lambda m, x: m.split(x, [1, 0, 3], -1), (randn(2, 4),)),
    Case("split_zero_size", lambda m, x: x.split(2), (randn(0, 3),)),
    Case("tensor_split_sections", lambda m, x: (x.tensor_split(3), x.tensor_split(4, 1)), (randn(7, 3),)),
    Case("tensor_split_indices", lambda m, x: (x.tensor_split([1, 4]), x.tensor_split((2, -1, 9))),
         (randn(6, 2),)),
    Case("chunk_uneven", lambda m, x: (x.chunk(3), x.chunk(4), x.chunk(6, -1)), (randn(5, 6),)),
    Case("chunk_more_than_size", lambda m, x: x.chunk(10), (randn(3, 2),)),
    Case("chunk_zero_size", lambda m, x: x.chunk(3), (randn(0, 2),)),
    Case("unbind_stack_roundtrip", lambda m, x: m.stack(x.unbind(1), 0) * 2, (randn(3, 4),), second_order=True),
    Case("unbind_neg", lambda m, x: (x.unbind(), x.unbind(-1)), (randn(2, 3),)),
    # Tiling.
    Case("repeat", lambda m, x: (x.repeat(2, 3), x.repeat(2, 1, 3)), (randn(2, 3),), second_order=True),
    Case("repeat_zero", lambda m, x: x.repeat(0, 2), (randn(2, 3),)),
    Case("repeat_bool", lambda m, x: x.repeat(2), (bools(3),)),
    Case("tile_short_dims", lambda m, x: (x.tile((2,)), x.tile((2, 1, 2))), (randn(2, 3),)),
    Case("repeat_interleave_int", lambda m, x: (x.repeat_interleave(2), x.repeat_interleave(3, dim=-1)),
         (randn(2, 3),)),
    Case("repeat_interleave_tensor", lambda m, x: m.repeat_interleave(x, m.tensor([1, 0, 2]), dim=1),
         (randn(2, 3),)),
    Case("repeat_interleave_counts", lambda m: m.repeat_interleave(m.tensor([2, 0, 3])), ()),
    # Flips and rolls.
    Case("flip_multi", lambda m, x: (x.flip(0, -1), m.flip(x, [1])), (randn(2, 3, 4),)),
    Case("fliplr_flipud", lambda m, x: (x.fliplr(), x.flipud()), (randn(3, 4),)),
    Case("roll_flat", lambda m, x: (x.roll(2), x.roll(-7)), (randn(3, 4),)),
    Case("roll_dims", lambda m, x: (x.roll(1, 0), x.roll((-1, 5), (1, -1)), x.roll(-2, -2)),
         (randn(2, 3, 4),), second_order=True),
    Case("roll_int", lambda m, x: x.roll((1, 2), (0, 1)), (ints(3, 4),)),
    Case("rot90", lambda m, x: tuple(m.rot90(x, k, (0, 1)) for k in (-1, 0, 1, 2, 3, 5)), (randn(2, 3),)),
    Case("rot90_dims", lambda m, x: (x.rot90(1, (2, 0)), x.rot90(-1, (-1, -2))), (randn(2, 3, 4),)),
    # Triangles.
    Case("tril_triu", lambda m, x: (x.tril(), x.triu(), x.tril(-1), x.triu(2), x.tril(5), x.triu(-4)),
         (randn(3, 4),), second_order=True),
    Case("tril_batched_noncontig", lambda m, x: (x.mT.tril(1), x.mT.triu(-1)), (randn(2, 4, 3),)),
    Case("tril_special", lambda m, x: (x.reshape(2, 3).tril(), x.reshape(2, 3).triu()), (special(6),)),
    Case("tril_int_bool", lambda m, a, b: (a.tril(), b.triu(1)), (ints(3, 3), bools(3, 3))),
    # Padding.
    Case("pad_constant", lambda m, x: (m.nn.functional.pad(x, (1, 2)),
                                       m.nn.functional.pad(x, (0, 1, 2, 0), value=-1.5)),
         (randn(2, 3),), second_order=True),
    Case("pad_negative_crop", lambda m, x: m.nn.functional.pad(x, (-1, 2, 1, -2)), (randn(4, 5),)),
    Case("pad_int", lambda m, x: m.nn.functional.pad(x, (1, 1), value=7), (ints(2, 3),)),
    Case("pad_reflect", lambda m, x: (m.nn.functional.pad(x, (2, 1), mode="reflect"),
                                      m.nn.functional.pad(x, (1, 2, 2, 1), mode="reflect")),
         (randn(1, 3, 4),), second_order=True),
    Case("pad_replicate", lambda m, x: m.nn.functional.pad(x, (2, 1, 0, 3), mode="replicate"), (randn(1, 2, 3),)),
    Case("pad_circular", lambda m, x: m.nn.functional.pad(x, (2, 1, 1, 2), mode="circular"), (randn(1, 1, 3, 4),)),
    # Diagonals.
    Case("diagonal", lambda m, x: (x.diagonal(), x.diagonal(1), x.diagonal(-2), x.diagonal(9)), (randn(4, 3),),
         second_order=True),
    Case("diagonal_dims", lambda m, x: (x.diagonal(0, 0, 2), m.diagonal(x, -1, -1, 0)), (randn(3, 2, 4),)),
    Case("diagonal_int", lambda m, x: x.diagonal(1), (ints(3, 4),)),
    Case("diag_1d_offsets", lambda m, x: (m.diag(x), m.diag(x, 1), m.diag(x, -2)), (special(3),),
         second_order=True),
    Case("diag_2d", lambda m, x: (x.diag(), x.diag(2), x.diag(-1)), (randn(3, 4),)),
    Case("diag_int", lambda m, x: m.diag(x, -1), (ints(3),)),
    Case("diag_embed", lambda m, x: (m.diag_embed(x), m.diag_embed(x, 1), m.diag_embed(x, -1, 0, 2)),
         (randn(2, 3),), second_order=True),
    Case("diag_embed_dims", lambda m, x: m.diag_embed(x, 2, -1, 1), (randn(2, 3, 2),)),
    Case("diagonal_special", lambda m, x: 1.0 / x.reshape(3, 3).diagonal(), (special(9),), grad=False),
    Case("diag_embed_neg_zero", lambda m, x: 1.0 / m.diag_embed(x, -1), (special(2),), grad=False),
    Case("diag_embed_zero_size", lambda m, x: m.diag_embed(x, 1), (randn(2, 0),)),
    Case("diag_embed_special", lambda m, x: m.diag_embed(x), (special(4),)),
    # Grids.
    Case("meshgrid_ij", lambda m, a, b, c: m.meshgrid(a, b, c, indexing="ij"), (randn(2), randn(3), randn(4))),
    Case("meshgrid_xy_two", lambda m, a, b: m.meshgrid(a, b, indexing="xy"), (randn(2), randn(3))),
    Case("meshgrid_xy_three", lambda m, a, b, c: m.meshgrid([a, b, c], indexing="xy"),
         (randn(2), randn(3), randn(4))),
    Case("meshgrid_int_0d", lambda m, a, b: m.meshgrid(a, b, indexing="xy"), (ints(3), ints())),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_parity(case, mode):
    run_case(case, mode)


# ---------------------------------------------------------------- errors

def test_reshape_bad_size():
    with pytest.raises(ShapeError, match=r"loom\.reshape: shape \[4, 4\] is invalid for input of size 12"):
        loom.zeros(3, 4).reshape(4, 4)
    with pytest.raises(ShapeError, match="only one dimension can be inferred"):
        loom.zeros(3, 4).reshape(-1, -1)
    with pytest.raises(ShapeError, match=r"loom\.reshape: shape \[-1, 0\].*ambiguous"):
        loom.zeros(0, 4).reshape(-1, 0)


def test_expand_incompatible():
    with pytest.raises(ShapeError, match=r"loom\.expand: the expanded size 4 must match the existing size 3"):
        loom.zeros(3, 1).expand(4, 2)
    with pytest.raises(ShapeError, match=r"loom\.expand: the number of sizes 1"):
        loom.zeros(3, 1).expand(3)
    with pytest.raises(ShapeError, match=r"-1 is not allowed for the new leading dim"):
        loom.zeros(3).expand(-1, 3)


def test_cat_mismatched():
    with pytest.raises(ShapeError, match=r"loom\.cat: sizes of tensors must match except in dim 1.*\[3, 2\]"):
        loom.cat([loom.zeros(2, 2), loom.zeros(3, 2)], 1)
    with pytest.raises(ShapeError, match=r"loom\.cat: tensors must have the same number of dimensions"):
        loom.cat([loom.zeros(2, 2), loom.zeros(2, 2, 1)])
    with pytest.raises(ShapeError, match="zero-dimensional"):
        loom.cat([loom.tensor(1.0), loom.tensor(2.0)])
    with pytest.raises(LoomError, match="non-empty"):
        loom.cat([])
    with pytest.raises(LoomIndexError, match=r"loom\.cat: dimension out of range"):
        loom.cat([loom.zeros(2, 2)], 2)


def test_stack_mismatched():
    with pytest.raises(ShapeError, match=r"loom\.stack: all tensors must have one shape.*\[2, 3\]"):
        loom.stack([loom.zeros(2, 2), loom.zeros(2, 3)])


def test_permute_wrong_dims():
    with pytest.raises(ShapeError, match=r"loom\.permute: number of dims 2 does not match the rank 3"):
        loom.zeros(2, 3, 4).permute(1, 0)
    with pytest.raises(ShapeError, match=r"loom\.permute: repeated dim"):
        loom.zeros(2, 3, 4).permute(0, 1, -2)
    with pytest.raises(LoomIndexError, match=r"loom\.permute: dimension out of range"):
        loom.zeros(2, 3).permute(0, 2)


def test_squeeze_unsqueeze_out_of_range():
    with pytest.raises(LoomIndexError, match=r"loom\.squeeze: dimension out of range .*\[-2, 1\].* 2\)"):
        loom.zeros(2, 1).squeeze(2)
    with pytest.raises(LoomIndexError, match=r"loom\.squeeze: dimension out of range"):
        loom.zeros(2, 1).squeeze((0, -3))
    with pytest.raises(LoomIndexError, match=r"loom\.unsqueeze: dimension out of range .*\[-3, 2\].* 3\)"):
        loom.zeros(2, 1).unsqueeze(3)
    with pytest.raises(LoomIndexError, match=r"loom\.unsqueeze: dimension out of range"):
        loom.zeros(2, 1).unsqueeze(-4)


def test_split_and_chunk_errors():
    with pytest.raises(ShapeError, match=r"loom\.split: sections \[1, 1\] do not add up to dim 0 of size 3"):
        loom.zeros(3).split([1, 1])
    with pytest.raises(ShapeError, match=r"loom\.chunk: chunks must be positive"):
        loom.zeros(3).chunk(0)
    with pytest.raises(ShapeError, match=r"loom\.narrow: start 2 \+ length 3 exceeds"):
        loom.zeros(4).narrow(0, 2, 3)
    with pytest.raises(LoomIndexError, match=r"loom\.select: index 3 is out of range"):
        loom.zeros(3, 2).select(0, 3)


def test_misc_errors():
    with pytest.raises(ShapeError, match=r"loom\.t: expects a tensor with <= 2 dims"):
        loom.zeros(2, 3, 4).t()
    with pytest.raises(ShapeError, match=r"loom\.tril: expected a tensor with at least 2 dims"):
        loom.zeros(3).tril()
    with pytest.raises(ShapeError, match=r"loom\.pad: reflect padding"):
        loom.nn.functional.pad(loom.zeros(1, 3), (3, 0), mode="reflect")
    with pytest.raises(ShapeError, match=r"loom\.diagonal: dim1 and dim2 cannot be identical"):
        loom.zeros(3, 3).diagonal(0, 1, -1)
    with pytest.raises(ShapeError, match=r"loom\.diag: expected a 1-d or 2-d tensor"):
        loom.diag(loom.zeros(2, 2, 2))
    with pytest.raises(ShapeError, match=r"loom\.meshgrid: expected 0-d or 1-d tensors"):
        loom.meshgrid(loom.zeros(2, 2), loom.zeros(2), indexing="ij")
    with pytest.raises(ShapeError, match=r"loom\.rot90: expected two distinct dims"):
        loom.zeros(2, 2).rot90(1, (0, 0))
    with pytest.raises(ShapeError, match=r"loom\.roll: shifts \[1, 2\] and dims \[0\]"):
        loom.zeros(2, 2).roll((1, 2), 0)
    with pytest.raises(ShapeError, match=r"loom\.fliplr: expected a tensor with at least 2 dims"):
        loom.zeros(3).fliplr()


def test_clone_is_a_copy_and_contiguous_copies_only_when_needed():
    x = loom.arange(6).reshape(2, 3)
    y = x.clone()
    y.add_(1)
    assert x.tolist() == [[0, 1, 2], [3, 4, 5]]
    assert y.tolist() == [[1, 2, 3], [4, 5, 6]]
    assert x.is_contiguous() and x.contiguous() is x
    t = x.t()
    assert not t.is_contiguous() and t.stride() == (1, 3)
    c = t.contiguous()
    assert c.is_contiguous() and c.tolist() == t.tolist()
    c.zero_()  # A copy: the transposed view and its base keep their values.
    assert x.tolist() == [[0, 1, 2], [3, 4, 5]]
