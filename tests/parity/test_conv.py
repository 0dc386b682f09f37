"""Parity of convolution, pooling and resampling (loom/functional/conv.py) with PyTorch."""
import numpy as np
import pytest

import loom
from loom.errors import DTypeError, ShapeError
from tests.parity.harness import Case, distinct, ints, randn, run_case


def F(m):
    return m.nn.functional


def ties(*shape, high=3):
    """Small integer values as floats: many equal maxima per pooling window."""
    return ints(*shape, low=0, high=high, dtype=np.float32)


def with_nans(*shape, count=3):
    """Distinct values with a few NaNs (pooling picks the last NaN of a window, as PyTorch's kernels)."""
    def make(rng):
        x = distinct(*shape)(rng)
        x.reshape(-1)[rng.choice(x.size, count, replace=False)] = np.nan
        return x
    return make


CONV = [
    Case("conv2d_bias", lambda m, x, w, b: F(m).conv2d(x, w, b), (randn(2, 3, 7, 8), randn(4, 3, 3, 3), randn(4))),
    Case("conv2d_stride2", lambda m, x, w: F(m).conv2d(x, w, stride=2), (randn(2, 3, 8, 9), randn(4, 3, 3, 3))),
    Case("conv2d_stride_pad_tuples", lambda m, x, w: F(m).conv2d(x, w, stride=(2, 1), padding=(1, 2)),
         (randn(2, 2, 7, 6), randn(3, 2, 3, 3))),
    Case("conv2d_same", lambda m, x, w, b: F(m).conv2d(x, w, b, padding="same"),
         (randn(2, 3, 6, 5), randn(4, 3, 3, 3), randn(4))),
    Case("conv2d_same_even_kernel_dilated", lambda m, x, w: F(m).conv2d(x, w, padding="same", dilation=(2, 1)),
         (randn(1, 2, 7, 6), randn(3, 2, 2, 4))),
    Case("conv2d_valid", lambda m, x, w: F(m).conv2d(x, w, padding="valid"), (randn(2, 2, 5, 5), randn(3, 2, 2, 2))),
    Case("conv2d_dilation2_pad", lambda m, x, w: F(m).conv2d(x, w, padding=2, dilation=2),
         (randn(2, 2, 6, 7), randn(3, 2, 3, 3))),
    Case("conv2d_stride_gt_kernel", lambda m, x, w: F(m).conv2d(x, w, stride=3),
         (randn(2, 2, 8, 8), randn(3, 2, 2, 2))),
    Case("conv2d_groups2", lambda m, x, w, b: F(m).conv2d(x, w, b, padding=1, groups=2),
         (randn(2, 4, 5, 5), randn(6, 2, 3, 3), randn(6))),
    Case("conv2d_depthwise", lambda m, x, w: F(m).conv2d(x, w, padding=1, groups=3),
         (randn(2, 3, 6, 6), randn(3, 1, 3, 3))),
    Case("conv2d_depthwise_multiplier", lambda m, x, w: F(m).conv2d(x, w, stride=2, groups=3),
         (randn(2, 3, 7, 7), randn(6, 1, 3, 3))),
    Case("conv2d_1x1", lambda m, x, w, b: F(m).conv2d(x, w, b), (randn(2, 5, 4, 3), randn(7, 5, 1, 1), randn(7))),
    Case("conv2d_1x1_stride2", lambda m, x, w: F(m).conv2d(x, w, stride=2), (randn(2, 3, 5, 5), randn(4, 3, 1, 1))),
    Case("conv2d_nonsquare", lambda m, x, w: F(m).conv2d(x, w, stride=(1, 2), padding=(0, 2)),
         (randn(2, 2, 6, 9), randn(3, 2, 2, 5))),
    Case("conv2d_noncontiguous", lambda m, x, w: F(m).conv2d(x.permute(0, 1, 3, 2), w.transpose(2, 3), padding=1),
         (randn(2, 3, 5, 6), randn(4, 3, 3, 2))),
    Case("conv2d_strided_view", lambda m, x, w: F(m).conv2d(x[:, ::2], w), (randn(2, 6, 5, 5), randn(2, 3, 3, 3))),
    Case("conv2d_batch1", lambda m, x, w: F(m).conv2d(x, w, padding=1), (randn(1, 3, 5, 5), randn(2, 3, 3, 3))),
    Case("conv2d_unbatched", lambda m, x, w, b: F(m).conv2d(x, w, b, padding=1),
         (randn(3, 5, 4), randn(2, 3, 3, 3), randn(2))),
    Case("conv2d_kernel_is_input", lambda m, x, w: F(m).conv2d(x, w), (randn(2, 2, 3, 4), randn(5, 2, 3, 4))),
    Case("conv2d_float64", lambda m, x, w: F(m).conv2d(x, w, stride=2, padding=1),
         (randn(2, 3, 6, 6, dtype=np.float64), randn(4, 3, 3, 3, dtype=np.float64))),
    Case("conv2d_second_order", lambda m, x, w, b: F(m).conv2d(x, w, b, stride=2, padding=1),
         (randn(1, 2, 5, 5), randn(3, 2, 3, 3), randn(3)), second_order=True),
    Case("conv2d_groups_second_order", lambda m, x, w: F(m).conv2d(x, w, groups=2, dilation=2) ** 2,
         (randn(1, 4, 6, 6), randn(2, 2, 2, 2)), second_order=True),
    # The conv2d library primitive (loom.ir.conv): its adjoints and their own backward rules.
    Case("conv2d_stride_dilation_groups_pad", lambda m, x, w, b: F(m).conv2d(x, w, b, stride=(2, 3), padding=(2, 1),
                                                                             dilation=(2, 1), groups=2),
         (randn(3, 4, 11, 10), randn(6, 2, 3, 2), randn(6))),
    Case("conv2d_depthwise_second_order", lambda m, x, w: F(m).conv2d(x, w, stride=2, padding=1, groups=3).tanh(),
         (randn(2, 3, 6, 5), randn(6, 1, 3, 3)), second_order=True),
    Case("conv2d_1x1_second_order", lambda m, x, w: F(m).conv2d(x, w) ** 2, (randn(2, 4, 3, 3), randn(5, 4, 1, 1)),
         second_order=True),
    Case("conv2d_unbatched_second_order", lambda m, x, w: F(m).conv2d(x, w, stride=(1, 2), padding=(1, 0)).sin(),
         (randn(2, 5, 6), randn(3, 2, 2, 3)), second_order=True),
    Case("conv2d_same_even_second_order", lambda m, x, w: F(m).conv2d(x, w, padding="same") * x[:, :1],
         (randn(1, 2, 5, 6), randn(2, 2, 2, 4)), second_order=True),
    Case("conv2d_float64_second_order", lambda m, x, w: F(m).conv2d(x, w, stride=2, dilation=2, padding=1).exp(),
         (randn(1, 2, 7, 6, dtype=np.float64), randn(3, 2, 2, 2, dtype=np.float64)), second_order=True),
    Case("conv2d_conv2d_chain", lambda m, x, w1, w2: F(m).conv2d(F(m).conv2d(x, w1, padding=1).relu(), w2, stride=2),
         (randn(2, 3, 8, 8), randn(4, 3, 3, 3), randn(5, 4, 3, 3))),
    Case("conv2d_float16", lambda m, x, w: F(m).conv2d(x.to(m.float16), w.to(m.float16), padding=1).float(),
         (randn(2, 3, 5, 5), randn(4, 3, 3, 3)), rtol=1e-2, atol=1e-2,
         reason="half-precision inputs and output (computed in float32 on both sides)"),
    Case("conv2d_bfloat16", lambda m, x, w: F(m).conv2d(x.to(m.bfloat16), w.to(m.bfloat16), stride=2).float(),
         (randn(2, 3, 6, 6), randn(4, 3, 3, 3)), rtol=3e-2, atol=3e-2,
         reason="bfloat16 inputs and output (computed in float32 on both sides)"),
    Case("conv1d_bias_stride_pad", lambda m, x, w, b: F(m).conv1d(x, w, b, stride=2, padding=1),
         (randn(2, 3, 9), randn(4, 3, 3), randn(4))),
    Case("conv1d_same_dilated", lambda m, x, w: F(m).conv1d(x, w, padding="same", dilation=3),
         (randn(2, 2, 10), randn(3, 2, 4))),
    Case("conv1d_groups", lambda m, x, w: F(m).conv1d(x, w, groups=3), (randn(2, 6, 7), randn(9, 2, 2))),
    Case("conv1d_unbatched", lambda m, x, w: F(m).conv1d(x, w), (randn(3, 8), randn(2, 3, 3))),
    Case("conv1d_second_order", lambda m, x, w: F(m).conv1d(x, w, padding=1).tanh(),
         (randn(2, 2, 6), randn(3, 2, 3)), second_order=True),
    Case("conv3d_stride_pad", lambda m, x, w, b: F(m).conv3d(x, w, b, stride=(1, 2, 2), padding=1),
         (randn(2, 2, 4, 5, 5), randn(3, 2, 3, 3, 3), randn(3))),
    Case("conv3d_groups_dilation", lambda m, x, w: F(m).conv3d(x, w, groups=2, dilation=(1, 2, 1)),
         (randn(1, 4, 3, 6, 4), randn(4, 2, 2, 2, 2))),
]

CONV_TRANSPOSE = [
    Case("conv_transpose2d_basic", lambda m, x, w, b: F(m).conv_transpose2d(x, w, b),
         (randn(2, 3, 4, 5), randn(3, 2, 3, 3), randn(2))),
    Case("conv_transpose2d_stride2_outpad", lambda m, x, w: F(m).conv_transpose2d(x, w, stride=2, padding=1,
                                                                                  output_padding=1),
         (randn(2, 3, 4, 4), randn(3, 4, 3, 3))),
    Case("conv_transpose2d_groups_dilation", lambda m, x, w, b: F(m).conv_transpose2d(
        x, w, b, stride=(2, 3), padding=(1, 0), output_padding=(1, 2), groups=2, dilation=(2, 1)),
         (randn(2, 4, 3, 4), randn(4, 3, 3, 2), randn(6))),
    Case("conv_transpose2d_depthwise", lambda m, x, w: F(m).conv_transpose2d(x, w, stride=2, groups=3),
         (randn(1, 3, 3, 3), randn(3, 1, 2, 2))),
    Case("conv_transpose2d_large_padding", lambda m, x, w: F(m).conv_transpose2d(x, w, padding=2),
         (randn(2, 2, 5, 5), randn(2, 3, 3, 3))),
    Case("conv_transpose2d_stride_gt_kernel", lambda m, x, w: F(m).conv_transpose2d(x, w, stride=3),
         (randn(1, 2, 3, 3), randn(2, 2, 2, 2))),
    Case("conv_transpose2d_unbatched", lambda m, x, w: F(m).conv_transpose2d(x, w, stride=2),
         (randn(2, 3, 3), randn(2, 3, 2, 2))),
    Case("conv_transpose2d_second_order", lambda m, x, w: F(m).conv_transpose2d(x, w, stride=2, padding=1),
         (randn(1, 2, 3, 3), randn(2, 2, 3, 3)), second_order=True),
    Case("conv_transpose2d_outpad_ge_stride", lambda m, x, w: F(m).conv_transpose2d(x, w, dilation=2, output_padding=1),
         (randn(1, 2, 3, 4), randn(2, 3, 2, 2))),
    Case("conv_transpose2d_float16", lambda m, x, w: F(m).conv_transpose2d(x.to(m.float16), w.to(m.float16),
                                                                           stride=2).float(),
         (randn(1, 2, 3, 3), randn(2, 3, 3, 3)), rtol=1e-2, atol=1e-2,
         reason="half-precision inputs and output (computed in float32 on both sides)"),
    Case("conv_transpose1d_stride3_outpad2", lambda m, x, w, b: F(m).conv_transpose1d(x, w, b, stride=3,
                                                                                      output_padding=2),
         (randn(2, 3, 5), randn(3, 2, 4), randn(2))),
    Case("conv_transpose3d", lambda m, x, w: F(m).conv_transpose3d(x, w, stride=2, padding=(0, 1, 0)),
         (randn(1, 2, 2, 3, 3), randn(2, 2, 2, 3, 2))),
]

UNFOLD = [
    Case("unfold", lambda m, x: F(m).unfold(x, (2, 3), dilation=(1, 2), padding=1, stride=2), (randn(2, 3, 6, 7),)),
    Case("unfold_unbatched", lambda m, x: F(m).unfold(x, 2), (randn(2, 4, 4),)),
    Case("fold", lambda m, c: F(m).fold(c, (7, 8), (2, 3), dilation=(1, 2), padding=1, stride=2),
         (randn(2, 12, 12),)),
    Case("fold_overlap", lambda m, c: F(m).fold(c, 4, 2), (randn(1, 8, 9),)),
]

POOL = [
    Case("max_pool2d_k2", lambda m, x: F(m).max_pool2d(x, 2), (distinct(2, 3, 6, 6),)),
    Case("max_pool2d_k3_s2_p1_ceil", lambda m, x: F(m).max_pool2d(x, 3, 2, 1, ceil_mode=True),
         (distinct(2, 2, 8, 7),)),
    Case("max_pool2d_dilation_indices", lambda m, x: F(m).max_pool2d(x, (2, 3), 1, (1, 0), dilation=2,
                                                                     return_indices=True),
         (distinct(2, 2, 7, 8),)),
    Case("max_pool2d_ceil_indices", lambda m, x: F(m).max_pool2d(x, 2, 2, ceil_mode=True, return_indices=True),
         (distinct(1, 2, 5, 7),)),
    Case("max_pool2d_ties", lambda m, x: F(m).max_pool2d(x, 2, return_indices=True), (ties(2, 2, 6, 6),)),
    Case("max_pool2d_ties_overlap", lambda m, x: F(m).max_pool2d(x, 3, 1, 1, return_indices=True),
         (ties(2, 2, 5, 5, high=2),)),
    Case("max_pool2d_nan", lambda m, x: F(m).max_pool2d(x, 2, 1, return_indices=True),
         (with_nans(1, 2, 4, 4, count=6),)),
    Case("max_pool2d_unbatched_noncontiguous", lambda m, x: F(m).max_pool2d(x.transpose(1, 2), (3, 2), (2, 1)),
         (distinct(2, 6, 7),)),
    Case("max_pool2d_neg_inf_windows", lambda m, x: F(m).max_pool2d(x, 3, 2, 1, return_indices=True),
         (lambda rng: np.where(rng.random((1, 2, 6, 5)) < 0.7, -np.inf, distinct(1, 2, 6, 5)(rng)).astype(np.float32),),
         grad=False),
    Case("max_pool2d_float64_second_order", lambda m, x: F(m).max_pool2d(x, (2, 3), (1, 2), (1, 1)) ** 2,
         (distinct(1, 2, 5, 7, dtype=np.float64),), second_order=True),
    Case("max_pool2d_bfloat16", lambda m, x: F(m).max_pool2d(x.to(m.bfloat16), 2).float(), (distinct(2, 2, 4, 6),)),
    Case("max_pool1d_unbatched_dilated", lambda m, x: F(m).max_pool1d(x, 2, 1, 1, dilation=2, return_indices=True),
         (distinct(3, 9),)),
    Case("max_pool1d_pad_ceil", lambda m, x: F(m).max_pool1d(x, 3, 2, 1, ceil_mode=True, return_indices=True),
         (distinct(2, 3, 10),)),
    Case("max_pool3d", lambda m, x: F(m).max_pool3d(x, 2, (1, 2, 2), padding=(0, 1, 1)), (distinct(1, 2, 3, 5, 4),)),
    Case("avg_pool2d", lambda m, x: F(m).avg_pool2d(x, 2), (randn(2, 3, 6, 6),)),
    Case("avg_pool2d_pad_exclude", lambda m, x: F(m).avg_pool2d(x, 3, 2, 1, count_include_pad=False),
         (randn(2, 2, 7, 6),)),
    Case("avg_pool2d_ceil_include_pad", lambda m, x: F(m).avg_pool2d(x, 3, 2, 1, ceil_mode=True),
         (randn(2, 2, 6, 8),)),
    Case("avg_pool2d_ceil_exclude", lambda m, x: F(m).avg_pool2d(x, (2, 3), (2, 2), (1, 1), ceil_mode=True,
                                                                 count_include_pad=False),
         (randn(1, 2, 5, 6),)),
    Case("avg_pool2d_divisor_override", lambda m, x: F(m).avg_pool2d(x, 2, 1, 1, divisor_override=3),
         (randn(2, 2, 4, 5),)),
    Case("avg_pool1d_pad_ceil", lambda m, x: F(m).avg_pool1d(x, 4, 3, 2, ceil_mode=True), (randn(2, 3, 9),)),
    Case("avg_pool3d", lambda m, x: F(m).avg_pool3d(x, (2, 2, 3), padding=(1, 0, 1)), (randn(1, 2, 4, 4, 6),)),
    Case("avg_pool2d_second_order", lambda m, x: F(m).avg_pool2d(x, 2).pow(3), (randn(1, 2, 4, 4),),
         second_order=True),
    Case("adaptive_avg_pool2d_divisible", lambda m, x: F(m).adaptive_avg_pool2d(x, 2), (randn(2, 3, 4, 6),)),
    Case("adaptive_avg_pool2d_uneven", lambda m, x: F(m).adaptive_avg_pool2d(x, (3, 4)), (randn(2, 2, 7, 5),)),
    Case("adaptive_avg_pool2d_upsample_none", lambda m, x: F(m).adaptive_avg_pool2d(x, (5, None)),
         (randn(1, 2, 3, 4),)),
    Case("adaptive_avg_pool2d_global", lambda m, x: F(m).adaptive_avg_pool2d(x, 1), (randn(2, 3, 5, 5),)),
    Case("adaptive_avg_pool1d", lambda m, x: F(m).adaptive_avg_pool1d(x, 4), (randn(2, 3, 10),)),
    Case("adaptive_avg_pool3d", lambda m, x: F(m).adaptive_avg_pool3d(x, (2, 3, 2)), (randn(1, 2, 3, 5, 4),)),
    Case("adaptive_max_pool2d_uneven", lambda m, x: F(m).adaptive_max_pool2d(x, (3, 4), return_indices=True),
         (distinct(2, 2, 7, 5),)),
    Case("adaptive_max_pool2d_ties", lambda m, x: F(m).adaptive_max_pool2d(x, 3, return_indices=True),
         (ties(1, 2, 5, 5),)),
    Case("adaptive_max_pool1d_nan", lambda m, x: F(m).adaptive_max_pool1d(x, 4, return_indices=True),
         (with_nans(2, 3, 7, count=8),)),
    Case("adaptive_max_pool1d", lambda m, x: F(m).adaptive_max_pool1d(x, 3), (distinct(2, 3, 8),)),
]


def _interp(mode, align=None, **kw):
    return lambda m, x: F(m).interpolate(x, mode=mode, align_corners=align, **kw)


INTERP = [
    Case("nearest_scale2", _interp("nearest", scale_factor=2), (randn(2, 2, 3, 4),)),
    Case("nearest_size_up", _interp("nearest", size=(5, 7)), (randn(1, 2, 3, 4),)),
    Case("nearest_size_down", _interp("nearest", size=(2, 3)), (randn(1, 2, 5, 7),)),
    Case("nearest_scale_nonint_2d", _interp("nearest", scale_factor=(2.1, 1.7)), (randn(1, 2, 5, 5),)),
    Case("nearest_1d_scale", _interp("nearest", scale_factor=1.7), (randn(2, 3, 5),)),
    Case("nearest_recompute", _interp("nearest", scale_factor=2.1, recompute_scale_factor=True), (randn(1, 2, 5),)),
    Case("nearest_exact", _interp("nearest-exact", scale_factor=(1.19, 2.19)), (randn(1, 2, 5, 5),)),
    Case("nearest_3d", _interp("nearest", size=(2, 5, 7)), (randn(1, 2, 3, 4, 5),)),
    Case("nearest_uint8", _interp("nearest", scale_factor=1.5), (ints(1, 2, 4, 4, dtype=np.uint8),), grad=False),
    Case("bilinear_up_size", _interp("bilinear", size=(7, 9)), (randn(2, 2, 4, 5),)),
    Case("bilinear_up_align", _interp("bilinear", True, size=(7, 9)), (randn(2, 2, 4, 5),)),
    Case("bilinear_down_scale", _interp("bilinear", scale_factor=0.6), (randn(1, 2, 8, 7),)),
    Case("bilinear_down_align", _interp("bilinear", True, size=(3, 2)), (randn(1, 2, 8, 7),)),
    Case("bilinear_scale_tuple", _interp("bilinear", scale_factor=(1.5, 2.3)), (randn(1, 3, 4, 3),)),
    Case("bilinear_same_size_scale", _interp("bilinear", scale_factor=1.1), (randn(1, 2, 5, 5),)),
    Case("bilinear_noncontiguous", lambda m, x: F(m).interpolate(x.permute(0, 1, 3, 2), scale_factor=2,
                                                                 mode="bilinear"), (randn(1, 2, 3, 4),)),
    Case("linear", _interp("linear", scale_factor=2.5), (randn(2, 3, 4),)),
    Case("linear_align", _interp("linear", True, size=7), (randn(2, 3, 4),)),
    Case("bicubic", _interp("bicubic", size=(7, 5)), (randn(1, 2, 4, 4),), rtol=1e-4, atol=2e-5,
         reason="four-tap weights that sum to 1 with cancellation"),
    Case("bicubic_align", _interp("bicubic", True, scale_factor=1.5), (randn(1, 2, 4, 5),), rtol=1e-4, atol=2e-5,
         reason="four-tap weights that sum to 1 with cancellation"),
    Case("trilinear", _interp("trilinear", scale_factor=(1.5, 2, 0.7)), (randn(1, 2, 3, 3, 5),)),
    Case("area", _interp("area", size=(3, 4)), (randn(1, 2, 7, 5),)),
    Case("upsample_bilinear_alias", lambda m, x: F(m).upsample_bilinear(x, size=(5, 6)), (randn(1, 2, 3, 4),)),
    Case("bilinear_second_order", lambda m, x: F(m).interpolate(x, scale_factor=2, mode="bilinear").sin(),
         (randn(1, 1, 3, 3),), second_order=True),
]

CASES = CONV + CONV_TRANSPOSE + UNFOLD + POOL + INTERP


@pytest.mark.parametrize("case", CASES, ids=str)
def test_parity(case, mode):
    run_case(case, mode)


def test_ops_are_lazy():
    x = loom.randn(1, 2, 6, 6, requires_grad=True)
    y = loom.nn.functional.conv2d(x, loom.randn(3, 2, 3, 3), padding=1)
    z = loom.nn.functional.interpolate(loom.nn.functional.max_pool2d(y, 2), scale_factor=2, mode="bilinear")
    assert y.node.buffer is None and z.node.buffer is None
    assert tuple(z.shape) == (1, 3, 6, 6)


LF = loom.nn.functional
ERRORS = [
    ("conv2d rank", ShapeError, r"loom\.conv2d: .*\[2, 5\]",
     lambda: LF.conv2d(loom.randn(2, 5), loom.randn(1, 1, 1, 1))),
    ("conv2d weight rank", ShapeError, r"loom\.conv2d: .*weight.*\[4, 3, 3\]",
     lambda: LF.conv2d(loom.randn(1, 3, 5, 5), loom.randn(4, 3, 3))),
    ("conv2d channels", ShapeError, r"loom\.conv2d: .*\[4, 3, 1, 1\].*\[1, 4, 5, 5\].*3 channels",
     lambda: LF.conv2d(loom.randn(1, 4, 5, 5), loom.randn(4, 3, 1, 1))),
    ("conv2d groups vs out channels", ShapeError, r"loom\.conv2d: given groups=3.*\[4, 2, 1, 1\]",
     lambda: LF.conv2d(loom.randn(1, 6, 5, 5), loom.randn(4, 2, 1, 1), groups=3)),
    ("conv2d groups vs in channels", ShapeError, r"loom\.conv2d: .*groups=2.*\[1, 5, 5, 5\]",
     lambda: LF.conv2d(loom.randn(1, 5, 5, 5), loom.randn(4, 2, 1, 1), groups=2)),
    ("conv2d zero groups", ShapeError, r"loom\.conv2d: groups",
     lambda: LF.conv2d(loom.randn(1, 2, 5, 5), loom.randn(4, 2, 1, 1), groups=0)),
    ("conv2d kernel too large", ShapeError, r"loom\.conv2d: padded input size .*\(2 x 2\).*\(3 x 3\)",
     lambda: LF.conv2d(loom.randn(1, 3, 2, 2), loom.randn(4, 3, 3, 3))),
    ("conv2d dilated kernel too large", ShapeError, r"loom\.conv2d: .*\(5 x 5\)",
     lambda: LF.conv2d(loom.randn(1, 1, 4, 4), loom.randn(1, 1, 3, 3), dilation=2)),
    ("conv2d zero stride", ShapeError, r"loom\.conv2d: non-positive stride",
     lambda: LF.conv2d(loom.randn(1, 3, 5, 5), loom.randn(4, 3, 1, 1), stride=0)),
    ("conv1d negative padding", ShapeError, r"loom\.conv1d: negative padding",
     lambda: LF.conv1d(loom.randn(1, 3, 5), loom.randn(4, 3, 1), padding=-1)),
    ("conv2d same strided", ShapeError, r"loom\.conv2d: padding='same'",
     lambda: LF.conv2d(loom.randn(1, 3, 5, 5), loom.randn(4, 3, 3, 3), stride=2, padding="same")),
    ("conv2d bad padding string", ValueError, r"loom\.conv2d: padding",
     lambda: LF.conv2d(loom.randn(1, 3, 5, 5), loom.randn(4, 3, 3, 3), padding="full")),
    ("conv2d bias shape", ShapeError, r"loom\.conv2d: .*bias.*\[4\].*\[3\]",
     lambda: LF.conv2d(loom.randn(1, 3, 5, 5), loom.randn(4, 3, 3, 3), loom.randn(3))),
    ("conv2d stride tuple length", ShapeError, r"loom\.conv2d: stride",
     lambda: LF.conv2d(loom.randn(1, 3, 5, 5), loom.randn(4, 3, 3, 3), stride=(1, 1, 1))),
    ("conv2d dtype", DTypeError, r"loom\.conv2d: .*float32.*float64",
     lambda: LF.conv2d(loom.randn(1, 3, 5, 5), loom.randn(4, 3, 3, 3, dtype=loom.float64))),
    ("conv3d rank", ShapeError, r"loom\.conv3d: .*4-d \(unbatched\).*\[3, 5, 5\]",
     lambda: LF.conv3d(loom.randn(3, 5, 5), loom.randn(4, 3, 1, 1, 1))),
    ("conv_transpose2d channels", ShapeError, r"loom\.conv_transpose2d: .*\[3, 2, 3, 3\].*\[1, 4, 5, 5\]",
     lambda: LF.conv_transpose2d(loom.randn(1, 4, 5, 5), loom.randn(3, 2, 3, 3))),
    ("conv_transpose2d output_padding", ShapeError, r"loom\.conv_transpose2d: output padding",
     lambda: LF.conv_transpose2d(loom.randn(1, 3, 5, 5), loom.randn(3, 2, 3, 3), stride=2, output_padding=2)),
    ("conv_transpose2d groups", ShapeError, r"loom\.conv_transpose2d: .*groups=2",
     lambda: LF.conv_transpose2d(loom.randn(1, 3, 5, 5), loom.randn(3, 2, 3, 3), groups=2)),
    ("conv_transpose2d empty output", ShapeError, r"loom\.conv_transpose2d: .*non-positive output",
     lambda: LF.conv_transpose2d(loom.randn(1, 3, 1, 1), loom.randn(3, 2, 1, 1), padding=1)),
    ("max_pool2d padding", ShapeError, r"loom\.max_pool2d: pad should be at most half",
     lambda: LF.max_pool2d(loom.randn(1, 1, 7, 7), 3, padding=2)),
    ("max_pool2d output too small", ShapeError, r"loom\.max_pool2d: output size is too small.*\[1, 1, 2, 2\]",
     lambda: LF.max_pool2d(loom.randn(1, 1, 2, 2), 3)),
    ("max_pool2d rank", ShapeError, r"loom\.max_pool2d: .*\[4, 4\]", lambda: LF.max_pool2d(loom.randn(4, 4), 2)),
    ("max_pool1d zero stride", ShapeError, r"loom\.max_pool1d: non-positive stride",
     lambda: LF.max_pool1d(loom.randn(1, 1, 6), 2, 0)),
    ("avg_pool2d padding", ShapeError, r"loom\.avg_pool2d: pad",
     lambda: LF.avg_pool2d(loom.randn(1, 1, 7, 7), 2, padding=2)),
    ("adaptive_avg_pool2d size", ShapeError, r"loom\.adaptive_avg_pool2d: output_size",
     lambda: LF.adaptive_avg_pool2d(loom.randn(1, 1, 7, 7), (1, 2, 3))),
    ("adaptive_max_pool2d zero", ShapeError, r"loom\.adaptive_max_pool2d: output_size",
     lambda: LF.adaptive_max_pool2d(loom.randn(1, 1, 7, 7), 0)),
    ("interpolate size and scale", ValueError, r"loom\.interpolate: exactly one",
     lambda: LF.interpolate(loom.randn(1, 1, 4, 4), size=2, scale_factor=2)),
    ("interpolate mode rank", ShapeError, r"loom\.interpolate: mode 'bilinear' needs a 4-d input.*\[1, 1, 4\]",
     lambda: LF.interpolate(loom.randn(1, 1, 4), size=2, mode="bilinear")),
    ("interpolate align nearest", ValueError, r"loom\.interpolate: align_corners",
     lambda: LF.interpolate(loom.randn(1, 1, 4), size=2, align_corners=True)),
    ("interpolate unknown mode", ValueError, r"loom\.interpolate: unknown mode",
     lambda: LF.interpolate(loom.randn(1, 1, 4), size=2, mode="cubic")),
    ("interpolate rank", ShapeError, r"loom\.interpolate: .*\[4, 4\]", lambda: LF.interpolate(loom.randn(4, 4), 2)),
    ("interpolate size length", ShapeError, r"loom\.interpolate: .*size \[2, 2, 2\]",
     lambda: LF.interpolate(loom.randn(1, 1, 4, 4), size=(2, 2, 2))),
    ("interpolate empty output", ShapeError, r"loom\.interpolate: output size \[0\]",
     lambda: LF.interpolate(loom.randn(1, 1, 1), scale_factor=0.5)),
    ("fold blocks", ShapeError, r"loom\.fold: .*\[2, 12, 20\]",
     lambda: LF.fold(loom.randn(2, 12, 20), (7, 8), (2, 3), stride=2)),
    ("fold channels", ShapeError, r"loom\.fold: .*divisible",
     lambda: LF.fold(loom.randn(2, 10, 9), 4, 2)),
    ("unfold kernel too large", ShapeError, r"loom\.unfold: .*\(5 x 5\)",
     lambda: LF.unfold(loom.randn(1, 1, 4, 4), 5)),
]


@pytest.mark.parametrize("name,error,match,call", ERRORS, ids=[e[0] for e in ERRORS])
def test_errors(name, error, match, call):
    with pytest.raises(error, match=match):
        call()
