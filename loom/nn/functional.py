"""PyTorch's `torch.nn.functional` names over loom's composite ops."""
import importlib as _importlib

from loom import _upper
from loom.functional.math import (  # noqa: F401
    celu, elu, gelu, hardsigmoid, hardswish, hardtanh, leaky_relu, logsigmoid, mish, relu, relu6, selu,
    sigmoid, silu, softplus, softsign, tanh, tanhshrink,
)
from loom.functional.shape import pad  # noqa: F401

# Public names of these modules are re-exported here (each module lists them in __all__).
for _name in ("nn", "conv", "indexing", "activation", "losses", "pooling", "sampling", "distance", "sparse",
              "grouped"):
    try:
        _mod = _importlib.import_module(f"loom.functional.{_name}")
    except ModuleNotFoundError as _e:
        if _e.name != f"loom.functional.{_name}":
            raise
        continue
    for _k in getattr(_mod, "NN_FUNCTIONAL", []):
        globals()[_k] = getattr(_mod, _k)


def multi_head_attention_forward(query, key, value, embed_dim_to_check: int, num_heads: int, in_proj_weight,
                                 in_proj_bias, bias_k, bias_v, add_zero_attn: bool, dropout_p: float,
                                 out_proj_weight, out_proj_bias, training: bool = True, key_padding_mask=None,
                                 need_weights: bool = True, attn_mask=None, use_separate_proj_weight: bool = False,
                                 q_proj_weight=None, k_proj_weight=None, v_proj_weight=None, static_k=None,
                                 static_v=None, average_attn_weights: bool = True, is_causal: bool = False):
    """Multi-head attention over sequence-first inputs, with `torch.nn.functional`'s signature.

    Returns (output (L, N, E), attention weights or None); see `loom.nn.MultiheadAttention`.
    """
    from loom.errors import LoomValueError, ShapeError
    if static_k is not None or static_v is not None:
        raise LoomValueError("loom.nn.functional.multi_head_attention_forward: static_k/static_v are not supported")
    if query.shape[-1] != embed_dim_to_check:
        raise ShapeError(f"loom.nn.functional.multi_head_attention_forward: was expecting embedding dimension of "
                         f"{embed_dim_to_check}, but got {query.shape[-1]}")
    _mha = _upper.multi_head_attention  # loom.nn.modules.transformer's, which builds on this module.
    return _mha(query, key, value, num_heads, in_proj_weight, in_proj_bias, bias_k, bias_v, add_zero_attn,
                dropout_p, out_proj_weight, out_proj_bias, training, key_padding_mask, need_weights, attn_mask,
                use_separate_proj_weight, q_proj_weight, k_proj_weight, v_proj_weight, average_attn_weights,
                is_causal)


def conv_tbc(input, weight, bias, pad: int = 0):  # noqa: F811 - PyTorch names the argument pad.
    """1-d convolution over (time, batch, channels) inputs with a (kernel, in, out) weight.

    Examples
    --------
    >>> loom.nn.functional.conv_tbc(loom.ones(5, 2, 3), loom.ones(3, 3, 4), loom.zeros(4)).shape
    loom.Size([3, 2, 4])
    """
    from loom.functional.conv import conv1d
    from loom.errors import ShapeError, fmt_shape
    if input.ndim != 3 or weight.ndim != 3 or weight.shape[1] != input.shape[2]:
        raise ShapeError(f"loom.nn.functional.conv_tbc: input {fmt_shape(input.shape)} must be (T, B, C_in) and "
                         f"weight {fmt_shape(weight.shape)} (K, C_in, C_out) with the same C_in")
    y = conv1d(input.permute(1, 2, 0), weight.permute(2, 1, 0), bias, padding=pad)
    return y.permute(2, 0, 1)


# PyTorch's __torch_function__ protocol helpers: loom tensors do not take part in it.
def has_torch_function(relevant_args) -> bool:
    """False: no loom value overrides PyTorch functions through __torch_function__."""
    return False


def has_torch_function_unary(arg) -> bool:
    """False (see `has_torch_function`)."""
    return False


def has_torch_function_variadic(*args) -> bool:
    """False (see `has_torch_function`)."""
    return False


def handle_torch_function(public_api, relevant_args, *args, **kwargs):
    """Only reachable when `has_torch_function` is true, which it never is in loom."""
    from loom.errors import LoomError
    raise LoomError("loom.nn.functional.handle_torch_function: loom tensors have no __torch_function__ overrides")


def boolean_dispatch(arg_name: str, arg_index: int, default: bool, if_true, if_false, module_name=None,
                     func_name=None):
    """A function calling `if_true` or `if_false` by the boolean argument `arg_name` (at `arg_index`)."""
    def fn(*args, **kwargs):
        flag = kwargs[arg_name] if arg_name in kwargs else args[arg_index] if arg_index < len(args) else default
        return if_true(*args, **kwargs) if flag else if_false(*args, **kwargs)
    if func_name is not None:
        fn.__name__ = func_name
    if module_name is not None:
        fn.__module__ = module_name
    return fn


def assert_int_or_pair(arg, arg_name: str, message: str) -> None:
    """Check that `arg` is an int or a pair of ints."""
    if not (isinstance(arg, int) or (isinstance(arg, (list, tuple)) and len(arg) == 2)):
        raise ValueError(message.format(arg_name))
