"""Layer parity with PyTorch: same weights (loaded from PyTorch's state_dict), same inputs,
same outputs, parameter and input gradients, and buffers, in train and eval mode."""
from __future__ import annotations

import numpy as np
import pytest

from tests.nn.harness import ModuleCase, check_module, const, ints, randn, uniform


def _seq(lib):
    nn = lib.nn
    return nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 3), nn.Tanh())


def _nested(lib):
    nn = lib.nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Conv2d(2, 4, 3, padding=1)
            self.bn = nn.BatchNorm2d(4)
            self.blocks = nn.ModuleList([nn.Conv2d(4, 4, 3, padding=1, bias=False) for _ in range(2)])
            self.heads = nn.ModuleDict({"cls": nn.Linear(4, 3), "reg": nn.Linear(4, 1)})
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.flat = nn.Flatten()

        def forward(self, x):
            x = lib.relu(self.bn(self.stem(x)))
            for b in self.blocks:
                x = x + lib.relu(b(x))
            x = self.flat(self.pool(x))
            return self.heads["cls"](x), self.heads["reg"](x)

    return Net()


LINEAR = [
    ModuleCase("linear", lambda lib: lib.nn.Linear(5, 3), (randn(4, 5),)),
    ModuleCase("linear_3d_input", lambda lib: lib.nn.Linear(5, 3), (randn(2, 4, 5),)),
    ModuleCase("linear_no_bias", lambda lib: lib.nn.Linear(5, 3, bias=False), (randn(4, 5),)),
    ModuleCase("linear_1d_input", lambda lib: lib.nn.Linear(5, 3), (randn(5),)),
    ModuleCase("bilinear", lambda lib: lib.nn.Bilinear(4, 5, 3), (randn(6, 4), randn(6, 5))),
    ModuleCase("bilinear_no_bias", lambda lib: lib.nn.Bilinear(4, 5, 3, bias=False), (randn(6, 4), randn(6, 5))),
    ModuleCase("identity", lambda lib: lib.nn.Identity(3, foo=1), (randn(3, 4),)),
    ModuleCase("sequential", _seq, (randn(4, 5),)),
    ModuleCase("sequential_slice", lambda lib: _seq(lib)[1:3], (randn(4, 8),)),
    ModuleCase("nested_module", _nested, (randn(3, 2, 5, 5),), steps=2),
]

CONV = [
    ModuleCase("conv1d", lambda lib: lib.nn.Conv1d(3, 4, 3), (randn(2, 3, 10),)),
    ModuleCase("conv1d_stride_pad", lambda lib: lib.nn.Conv1d(3, 4, 3, stride=2, padding=1), (randn(2, 3, 10),)),
    ModuleCase("conv1d_same_dilated", lambda lib: lib.nn.Conv1d(2, 4, 4, padding="same", dilation=2),
               (randn(2, 2, 9),)),
    ModuleCase("conv1d_reflect", lambda lib: lib.nn.Conv1d(2, 2, 3, padding=2, padding_mode="reflect"),
               (randn(1, 2, 8),)),
    ModuleCase("conv1d_unbatched", lambda lib: lib.nn.Conv1d(3, 4, 3), (randn(3, 10),)),
    ModuleCase("conv2d", lambda lib: lib.nn.Conv2d(3, 6, 3, padding=1), (randn(2, 3, 7, 7),)),
    ModuleCase("conv2d_stride_groups", lambda lib: lib.nn.Conv2d(4, 6, (3, 2), stride=2, groups=2),
               (randn(2, 4, 8, 7),)),
    ModuleCase("conv2d_dilation_no_bias", lambda lib: lib.nn.Conv2d(2, 3, 3, dilation=2, bias=False),
               (randn(1, 2, 9, 9),)),
    ModuleCase("conv2d_same_even_kernel", lambda lib: lib.nn.Conv2d(2, 3, 4, padding="same"), (randn(1, 2, 6, 6),)),
    ModuleCase("conv2d_valid", lambda lib: lib.nn.Conv2d(2, 3, 3, padding="valid"), (randn(1, 2, 6, 6),)),
    ModuleCase("conv2d_circular", lambda lib: lib.nn.Conv2d(2, 3, 3, padding=1, padding_mode="circular"),
               (randn(1, 2, 5, 6),)),
    ModuleCase("conv2d_replicate", lambda lib: lib.nn.Conv2d(2, 3, 3, padding=(1, 2), padding_mode="replicate"),
               (randn(1, 2, 5, 6),)),
    ModuleCase("conv3d", lambda lib: lib.nn.Conv3d(2, 3, 2, padding=1), (randn(1, 2, 3, 4, 4),)),
    ModuleCase("conv_transpose1d", lambda lib: lib.nn.ConvTranspose1d(3, 2, 3, stride=2), (randn(2, 3, 5),)),
    ModuleCase("conv_transpose2d", lambda lib: lib.nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1,
                                                                        output_padding=1), (randn(2, 4, 4, 4),)),
    ModuleCase("conv_transpose2d_groups_dilation", lambda lib: lib.nn.ConvTranspose2d(4, 6, 2, groups=2, dilation=2),
               (randn(1, 4, 3, 3),)),
    ModuleCase("conv_transpose2d_output_size", lambda lib: lib.nn.ConvTranspose2d(4, 2, 3, stride=2, padding=1),
               (randn(1, 4, 4, 4),), call=lambda m, x: m(x, output_size=[8, 8])),
    ModuleCase("conv_transpose3d", lambda lib: lib.nn.ConvTranspose3d(2, 2, 2, stride=2), (randn(1, 2, 2, 3, 3),)),
    ModuleCase("conv_transpose2d_no_bias", lambda lib: lib.nn.ConvTranspose2d(2, 2, 3, bias=False),
               (randn(1, 2, 4, 4),)),
]

NORM = [
    ModuleCase("batchnorm1d", lambda lib: lib.nn.BatchNorm1d(4), (randn(8, 4, scale=2.0),), steps=2),
    ModuleCase("batchnorm1d_3d", lambda lib: lib.nn.BatchNorm1d(4), (randn(3, 4, 5),), steps=2),
    ModuleCase("batchnorm1d_momentum_none", lambda lib: lib.nn.BatchNorm1d(4, momentum=None), (randn(6, 4),),
               steps=3),
    ModuleCase("batchnorm1d_no_affine", lambda lib: lib.nn.BatchNorm1d(4, affine=False, momentum=0.3),
               (randn(6, 4),), steps=2),
    ModuleCase("batchnorm1d_no_running_stats", lambda lib: lib.nn.BatchNorm1d(4, track_running_stats=False),
               (randn(6, 4),)),
    ModuleCase("batchnorm2d", lambda lib: lib.nn.BatchNorm2d(3), (randn(4, 3, 5, 5),), steps=2),
    ModuleCase("batchnorm2d_eps", lambda lib: lib.nn.BatchNorm2d(3, eps=1e-2, momentum=0.5),
               (randn(2, 3, 4, 4),), steps=2),
    ModuleCase("batchnorm3d", lambda lib: lib.nn.BatchNorm3d(2), (randn(2, 2, 3, 3, 3),)),
    ModuleCase("layernorm", lambda lib: lib.nn.LayerNorm(6), (randn(3, 4, 6),)),
    ModuleCase("layernorm_2d_shape", lambda lib: lib.nn.LayerNorm([4, 6], eps=1e-3), (randn(3, 4, 6),)),
    ModuleCase("layernorm_no_affine", lambda lib: lib.nn.LayerNorm(6, elementwise_affine=False), (randn(3, 6),)),
    ModuleCase("layernorm_no_bias", lambda lib: lib.nn.LayerNorm(6, bias=False), (randn(3, 6),)),
    ModuleCase("groupnorm", lambda lib: lib.nn.GroupNorm(2, 6), (randn(3, 6, 4, 4),)),
    ModuleCase("groupnorm_no_affine", lambda lib: lib.nn.GroupNorm(3, 6, affine=False), (randn(2, 6, 5),)),
    ModuleCase("rmsnorm", lambda lib: lib.nn.RMSNorm(6), (randn(3, 6),)),
    ModuleCase("rmsnorm_eps_2d", lambda lib: lib.nn.RMSNorm([2, 6], eps=1e-3), (randn(3, 2, 6),)),
]

SPARSE_DROPOUT = [
    ModuleCase("embedding", lambda lib: lib.nn.Embedding(10, 4), (ints(0, 10, 3, 5),)),
    ModuleCase("embedding_padding_idx", lambda lib: lib.nn.Embedding(10, 4, padding_idx=0),
               (const(np.array([[0, 3, 0], [9, 3, 1]])),)),
    ModuleCase("embedding_negative_padding_idx", lambda lib: lib.nn.Embedding(6, 3, padding_idx=-1),
               (const(np.array([5, 2, 5])),)),
    ModuleCase("embedding_scale_grad_by_freq", lambda lib: lib.nn.Embedding(6, 3, scale_grad_by_freq=True),
               (const(np.array([1, 1, 4, 1])),)),
    ModuleCase("dropout_eval", lambda lib: lib.nn.Dropout(0.5), (randn(4, 5),), modes=("eval",)),
    ModuleCase("dropout_p0_train", lambda lib: lib.nn.Dropout(0.0), (randn(4, 5),)),
    ModuleCase("dropout2d_eval", lambda lib: lib.nn.Dropout2d(0.3), (randn(2, 3, 4, 4),), modes=("eval",)),
    ModuleCase("dropout3d_eval", lambda lib: lib.nn.Dropout3d(0.3), (randn(1, 2, 2, 3, 3),), modes=("eval",)),
    ModuleCase("dropout1d_eval", lambda lib: lib.nn.Dropout1d(0.3), (randn(2, 3, 4),), modes=("eval",)),
    ModuleCase("alpha_dropout_eval", lambda lib: lib.nn.AlphaDropout(0.3), (randn(2, 3),), modes=("eval",)),
]

ACT = [ModuleCase(f"act_{name}", make, (randn(3, 4, 5, scale=2.0),)) for name, make in [
    ("relu", lambda lib: lib.nn.ReLU()),
    ("relu6", lambda lib: lib.nn.ReLU6()),
    ("leaky_relu", lambda lib: lib.nn.LeakyReLU(0.2)),
    ("gelu", lambda lib: lib.nn.GELU()),
    ("gelu_tanh", lambda lib: lib.nn.GELU(approximate="tanh")),
    ("silu", lambda lib: lib.nn.SiLU()),
    ("mish", lambda lib: lib.nn.Mish()),
    ("tanh", lambda lib: lib.nn.Tanh()),
    ("sigmoid", lambda lib: lib.nn.Sigmoid()),
    ("logsigmoid", lambda lib: lib.nn.LogSigmoid()),
    ("elu", lambda lib: lib.nn.ELU(alpha=0.5)),
    ("celu", lambda lib: lib.nn.CELU(alpha=2.0)),
    ("selu", lambda lib: lib.nn.SELU()),
    ("softplus", lambda lib: lib.nn.Softplus(beta=2.0, threshold=3.0)),
    ("hardtanh", lambda lib: lib.nn.Hardtanh(-2.0, 1.5)),
    ("hardsigmoid", lambda lib: lib.nn.Hardsigmoid()),
    ("hardswish", lambda lib: lib.nn.Hardswish()),
    ("softsign", lambda lib: lib.nn.Softsign()),
    ("tanhshrink", lambda lib: lib.nn.Tanhshrink()),
    ("softmax_dim1", lambda lib: lib.nn.Softmax(dim=1)),
    ("softmax_dim_neg1", lambda lib: lib.nn.Softmax(dim=-1)),
    ("log_softmax", lambda lib: lib.nn.LogSoftmax(dim=1)),
    ("softmin", lambda lib: lib.nn.Softmin(dim=2)),
    ("glu", lambda lib: lib.nn.GLU(dim=0) if False else lib.nn.GLU(dim=1)),
]] + [
    ModuleCase("act_glu_last", lambda lib: lib.nn.GLU(), (randn(3, 6),)),
    ModuleCase("act_relu_inplace", lambda lib: lib.nn.Sequential(lib.nn.Linear(4, 4), lib.nn.ReLU(inplace=True)),
               (randn(3, 4),)),
    ModuleCase("act_softmax_implicit_dim", lambda lib: lib.nn.Softmax(), (randn(3, 4),)),
]

POOL = [
    ModuleCase("maxpool2d", lambda lib: lib.nn.MaxPool2d(2), (randn(2, 3, 6, 6),)),
    ModuleCase("maxpool2d_stride_pad_ceil", lambda lib: lib.nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True),
               (randn(1, 2, 8, 7),)),
    ModuleCase("maxpool2d_dilation", lambda lib: lib.nn.MaxPool2d(2, stride=1, dilation=2), (randn(1, 2, 6, 6),)),
    ModuleCase("maxpool2d_indices", lambda lib: lib.nn.MaxPool2d(2, return_indices=True), (randn(1, 2, 4, 6),)),
    ModuleCase("maxpool1d", lambda lib: lib.nn.MaxPool1d(3, stride=2), (randn(2, 3, 9),)),
    ModuleCase("avgpool2d", lambda lib: lib.nn.AvgPool2d(2), (randn(2, 3, 6, 6),)),
    ModuleCase("avgpool2d_pad_exclude", lambda lib: lib.nn.AvgPool2d(3, 2, 1, count_include_pad=False),
               (randn(1, 2, 7, 7),)),
    ModuleCase("avgpool2d_ceil_divisor", lambda lib: lib.nn.AvgPool2d(2, ceil_mode=True, divisor_override=3),
               (randn(1, 2, 5, 5),)),
    ModuleCase("avgpool1d", lambda lib: lib.nn.AvgPool1d(2), (randn(2, 3, 8),)),
    ModuleCase("adaptive_avgpool2d", lambda lib: lib.nn.AdaptiveAvgPool2d((2, 3)), (randn(2, 3, 7, 8),)),
    ModuleCase("adaptive_avgpool2d_1", lambda lib: lib.nn.AdaptiveAvgPool2d(1), (randn(2, 3, 5, 5),)),
    ModuleCase("adaptive_avgpool2d_none", lambda lib: lib.nn.AdaptiveAvgPool2d((None, 2)), (randn(1, 2, 3, 5),)),
    ModuleCase("adaptive_avgpool1d", lambda lib: lib.nn.AdaptiveAvgPool1d(3), (randn(2, 3, 7),)),
    ModuleCase("adaptive_maxpool2d", lambda lib: lib.nn.AdaptiveMaxPool2d((2, 2)), (randn(1, 2, 5, 5),)),
    ModuleCase("maxpool3d", lambda lib: lib.nn.MaxPool3d(2, stride=1), (randn(1, 2, 3, 4, 4),)),
    ModuleCase("avgpool3d", lambda lib: lib.nn.AvgPool3d(2, padding=1), (randn(1, 2, 3, 4, 4),)),
    ModuleCase("adaptive_avgpool3d", lambda lib: lib.nn.AdaptiveAvgPool3d((1, 2, 3)), (randn(1, 2, 3, 5, 5),)),
    ModuleCase("adaptive_maxpool1d", lambda lib: lib.nn.AdaptiveMaxPool1d(3, return_indices=True), (randn(2, 3, 7),)),
    ModuleCase("flatten", lambda lib: lib.nn.Flatten(), (randn(2, 3, 4, 5),)),
    ModuleCase("flatten_range", lambda lib: lib.nn.Flatten(0, 2), (randn(2, 3, 4, 5),)),
    ModuleCase("unflatten", lambda lib: lib.nn.Unflatten(1, (3, 4)), (randn(2, 12),)),
]

LOSS = [
    ModuleCase("cross_entropy", lambda lib: lib.nn.CrossEntropyLoss(), (randn(6, 5), ints(0, 5, 6))),
    ModuleCase("cross_entropy_weight_ignore_smooth",
               lambda lib: lib.nn.CrossEntropyLoss(weight=lib.tensor([1.0, 2.0, 0.5, 1.5, 1.0]), ignore_index=2,
                                                   label_smoothing=0.1),
               (randn(6, 5), const(np.array([0, 2, 4, 1, 2, 3])))),
    ModuleCase("cross_entropy_sum_spatial", lambda lib: lib.nn.CrossEntropyLoss(reduction="sum"),
               (randn(2, 4, 3, 3), ints(0, 4, 2, 3, 3))),
    ModuleCase("cross_entropy_none", lambda lib: lib.nn.CrossEntropyLoss(reduction="none"),
               (randn(5, 3), ints(0, 3, 5))),
    ModuleCase("cross_entropy_probs", lambda lib: lib.nn.CrossEntropyLoss(), (randn(4, 3), uniform(0, 1, 4, 3))),
    ModuleCase("nll", lambda lib: lib.nn.NLLLoss(), (randn(6, 5), ints(0, 5, 6))),
    ModuleCase("nll_weight", lambda lib: lib.nn.NLLLoss(weight=lib.tensor([1.0, 0.2, 3.0])),
               (randn(6, 3), ints(0, 3, 6))),
    ModuleCase("mse", lambda lib: lib.nn.MSELoss(), (randn(4, 3), randn(4, 3))),
    ModuleCase("mse_sum", lambda lib: lib.nn.MSELoss(reduction="sum"), (randn(4, 3), randn(4, 3))),
    ModuleCase("l1", lambda lib: lib.nn.L1Loss(), (randn(4, 3), randn(4, 3))),
    ModuleCase("l1_none", lambda lib: lib.nn.L1Loss(reduction="none"), (randn(4, 3), randn(4, 3))),
    ModuleCase("bce", lambda lib: lib.nn.BCELoss(), (uniform(0.05, 0.95, 4, 3), uniform(0, 1, 4, 3))),
    ModuleCase("bce_weight", lambda lib: lib.nn.BCELoss(weight=lib.tensor([0.5, 1.0, 2.0])),
               (uniform(0.05, 0.95, 4, 3), uniform(0, 1, 4, 3))),
    ModuleCase("bce_with_logits", lambda lib: lib.nn.BCEWithLogitsLoss(), (randn(4, 3), uniform(0, 1, 4, 3))),
    ModuleCase("bce_with_logits_pos_weight",
               lambda lib: lib.nn.BCEWithLogitsLoss(pos_weight=lib.tensor([1.0, 3.0, 0.5]), reduction="sum"),
               (randn(4, 3), uniform(0, 1, 4, 3))),
    ModuleCase("smooth_l1", lambda lib: lib.nn.SmoothL1Loss(beta=0.5), (randn(4, 3), randn(4, 3))),
    ModuleCase("huber", lambda lib: lib.nn.HuberLoss(delta=0.5), (randn(4, 3), randn(4, 3))),
    ModuleCase("kl_div_batchmean", lambda lib: lib.nn.KLDivLoss(reduction="batchmean"),
               (randn(4, 3), uniform(0.1, 1, 4, 3))),
]

CASES = LINEAR + CONV + NORM + SPARSE_DROPOUT + ACT + POOL + LOSS


@pytest.mark.parametrize("case", CASES, ids=str)
def test_layer_parity(case):
    check_module(case)
