"""Layers of `loom.nn`, one file per family (as `torch.nn.modules`)."""
from loom.nn.module import Module
from loom.nn.modules.activation import (
    CELU, ELU, GELU, GLU, SELU, Hardsigmoid, Hardswish, Hardtanh, LeakyReLU, LogSigmoid, LogSoftmax, Mish, PReLU,
    ReLU, ReLU6, Sigmoid, SiLU, Softmax, Softmin, Softplus, Softsign, Tanh, Tanhshrink,
)
from loom.nn.modules.container import ModuleDict, ModuleList, ParameterDict, ParameterList, Sequential
from loom.nn.modules.conv import Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
from loom.nn.modules.dropout import AlphaDropout, Dropout, Dropout1d, Dropout2d, Dropout3d
from loom.nn.modules.flatten import Flatten, Unflatten
from loom.nn.modules.linear import Bilinear, Identity, Linear
from loom.nn.modules.loss import (
    BCELoss, BCEWithLogitsLoss, CrossEntropyLoss, HuberLoss, KLDivLoss, L1Loss, MSELoss, NLLLoss, SmoothL1Loss,
)
from loom.nn.modules.norm import BatchNorm1d, BatchNorm2d, BatchNorm3d, GroupNorm, LayerNorm, RMSNorm
from loom.nn.modules.pooling import (
    AdaptiveAvgPool1d, AdaptiveAvgPool2d, AdaptiveAvgPool3d, AdaptiveMaxPool1d, AdaptiveMaxPool2d, AvgPool1d,
    AvgPool2d, AvgPool3d, MaxPool1d, MaxPool2d, MaxPool3d,
)
from loom.nn.modules.rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell, RNNCellBase
from loom.nn.modules.sparse import Embedding
from loom.nn.modules.transformer import (
    MultiheadAttention, Transformer, TransformerDecoder, TransformerDecoderLayer, TransformerEncoder,
    TransformerEncoderLayer,
)

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
]
