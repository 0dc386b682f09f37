"""Layers of `loom.nn`, one file per family (as `torch.nn.modules`)."""
from loom.nn.module import Module
from loom.nn.modules.activation import (
    CELU, ELU, GELU, GLU, SELU, Hardshrink, Hardsigmoid, Hardswish, Hardtanh, LeakyReLU, LogSigmoid, LogSoftmax,
    Mish, PReLU, ReLU, ReLU6, RReLU, Sigmoid, SiLU, Softmax, Softmax2d, Softmin, Softplus, Softshrink, Softsign,
    Tanh, Tanhshrink, Threshold,
)
from loom.nn.modules.adaptive import AdaptiveLogSoftmaxWithLoss
from loom.nn.modules.container import Container, ModuleDict, ModuleList, ParameterDict, ParameterList, Sequential
from loom.nn.modules.conv import Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
from loom.nn.modules.distance import CosineSimilarity, PairwiseDistance
from loom.nn.modules.dropout import AlphaDropout, Dropout, Dropout1d, Dropout2d, Dropout3d, FeatureAlphaDropout
from loom.nn.modules.flatten import Flatten, Unflatten
from loom.nn.modules.fold import Fold, Unfold
from loom.nn.modules.lazy import (
    LazyBatchNorm1d, LazyBatchNorm2d, LazyBatchNorm3d, LazyConv1d, LazyConv2d, LazyConv3d, LazyConvTranspose1d,
    LazyConvTranspose2d, LazyConvTranspose3d, LazyInstanceNorm1d, LazyInstanceNorm2d, LazyInstanceNorm3d, LazyLinear,
    LazyModuleMixin, UninitializedBuffer, UninitializedParameter,
)
from loom.nn.modules.linear import Bilinear, Identity, Linear
from loom.nn.modules.loss import (
    BCELoss, BCEWithLogitsLoss, CosineEmbeddingLoss, CrossEntropyLoss, CTCLoss, GaussianNLLLoss, HingeEmbeddingLoss,
    HuberLoss, KLDivLoss, L1Loss, LinearCrossEntropyLoss, LinearCrossEntropyOptions, MarginRankingLoss, MSELoss,
    MultiLabelMarginLoss, MultiLabelSoftMarginLoss, MultiMarginLoss, NLLLoss, NLLLoss2d, PoissonNLLLoss,
    SmoothL1Loss, SoftMarginLoss, TripletMarginLoss, TripletMarginWithDistanceLoss,
)
from loom.nn.modules.norm import (
    BatchNorm1d, BatchNorm2d, BatchNorm3d, CrossMapLRN2d, GroupNorm, InstanceNorm1d, InstanceNorm2d, InstanceNorm3d,
    LayerNorm, LocalResponseNorm, RMSNorm, SyncBatchNorm,
)
from loom.nn.modules.padding import (
    CircularPad1d, CircularPad2d, CircularPad3d, ConstantPad1d, ConstantPad2d, ConstantPad3d, ReflectionPad1d,
    ReflectionPad2d, ReflectionPad3d, ReplicationPad1d, ReplicationPad2d, ReplicationPad3d, ZeroPad1d, ZeroPad2d,
    ZeroPad3d,
)
from loom.nn.modules.parallel import DataParallel
from loom.nn.modules.pixelshuffle import ChannelShuffle, PixelShuffle, PixelUnshuffle
from loom.nn.modules.pooling import (
    AdaptiveAvgPool1d, AdaptiveAvgPool2d, AdaptiveAvgPool3d, AdaptiveMaxPool1d, AdaptiveMaxPool2d, AdaptiveMaxPool3d,
    AvgPool1d, AvgPool2d, AvgPool3d, FractionalMaxPool2d, FractionalMaxPool3d, LPPool1d, LPPool2d, LPPool3d,
    MaxPool1d, MaxPool2d, MaxPool3d, MaxUnpool1d, MaxUnpool2d, MaxUnpool3d,
)
from loom.nn.modules.rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell, RNNCellBase
from loom.nn.modules.sparse import Embedding, EmbeddingBag
from loom.nn.modules.transformer import (
    MultiheadAttention, Transformer, TransformerDecoder, TransformerDecoderLayer, TransformerEncoder,
    TransformerEncoderLayer,
)
from loom.nn.modules.upsampling import Upsample, UpsamplingBilinear2d, UpsamplingNearest2d

__all__ = [
    "Module", "Identity", "Linear", "Bilinear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d",
    "ConvTranspose3d", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "LayerNorm", "GroupNorm", "RMSNorm",
    "Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "Embedding", "ReLU", "ReLU6", "LeakyReLU",
    "PReLU", "ELU", "CELU", "SELU", "GELU", "SiLU", "Mish", "Tanh", "Sigmoid", "LogSigmoid", "Hardtanh",
    "Hardsigmoid", "Hardswish", "Softplus", "Softsign", "Tanhshrink", "Softmax", "LogSoftmax", "Softmin", "GLU",
    "MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d", "AvgPool2d", "AvgPool3d", "AdaptiveAvgPool1d",
    "AdaptiveAvgPool2d", "AdaptiveAvgPool3d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "Flatten", "Unflatten",
    "Sequential", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict", "MultiheadAttention",
    "TransformerEncoderLayer", "TransformerEncoder", "TransformerDecoderLayer", "TransformerDecoder",
    "Transformer", "RNNBase", "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell",
    "CrossEntropyLoss", "NLLLoss", "MSELoss", "L1Loss", "BCELoss", "BCEWithLogitsLoss", "SmoothL1Loss",
    "HuberLoss", "KLDivLoss",
    # Added for torch.nn parity (issue 12).
    "Hardshrink", "Softshrink", "Threshold", "RReLU", "Softmax2d", "CosineSimilarity", "PairwiseDistance",
    "FeatureAlphaDropout", "Fold", "Unfold", "NLLLoss2d", "PoissonNLLLoss", "GaussianNLLLoss", "MarginRankingLoss",
    "HingeEmbeddingLoss", "CosineEmbeddingLoss", "SoftMarginLoss", "MultiLabelSoftMarginLoss", "MultiLabelMarginLoss",
    "MultiMarginLoss", "TripletMarginLoss", "TripletMarginWithDistanceLoss", "CTCLoss", "SyncBatchNorm",
    "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "LocalResponseNorm", "CrossMapLRN2d", "ConstantPad1d",
    "ConstantPad2d", "ConstantPad3d", "ZeroPad1d", "ZeroPad2d", "ZeroPad3d", "ReflectionPad1d", "ReflectionPad2d",
    "ReflectionPad3d", "ReplicationPad1d", "ReplicationPad2d", "ReplicationPad3d", "CircularPad1d", "CircularPad2d",
    "CircularPad3d", "PixelShuffle", "PixelUnshuffle", "ChannelShuffle", "AdaptiveMaxPool3d", "LPPool1d", "LPPool2d",
    "LPPool3d", "MaxUnpool1d", "MaxUnpool2d", "MaxUnpool3d", "FractionalMaxPool2d", "FractionalMaxPool3d",
    "EmbeddingBag", "Upsample", "UpsamplingNearest2d", "UpsamplingBilinear2d", "LazyLinear", "LazyConv1d",
    "LazyConv2d", "LazyConv3d", "LazyConvTranspose1d", "LazyConvTranspose2d", "LazyConvTranspose3d",
    "LazyBatchNorm1d", "LazyBatchNorm2d", "LazyBatchNorm3d", "LazyInstanceNorm1d", "LazyInstanceNorm2d",
    "LazyInstanceNorm3d", "LazyModuleMixin", "UninitializedParameter", "UninitializedBuffer",
    "AdaptiveLogSoftmaxWithLoss", "Container", "DataParallel", "LinearCrossEntropyLoss", "LinearCrossEntropyOptions",
]
