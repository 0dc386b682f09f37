"""MultiheadAttention and the Transformer encoder/decoder stacks, with PyTorch's parameter names."""
from __future__ import annotations

import copy
import math
from typing import Callable

from loom import _upper
from loom import dtypes as dt
from loom.tensor import _check_device
from loom.errors import LoomError, ShapeError, fmt_shape
from loom.nn import functional as F
from loom.nn import init
from loom.nn.module import Module
from loom.nn.modules.container import ModuleList
from loom.nn.modules.dropout import Dropout
from loom.nn.modules.linear import Linear
from loom.nn.modules.norm import LayerNorm
from loom.nn.parameter import Parameter
from loom.tensor import Tensor, arange, empty


class NonDynamicallyQuantizableLinear(Linear):
    """A Linear (the class name PyTorch gives MultiheadAttention's output projection)."""


def _float_mask(mask: Tensor | None, name: str, dtype) -> Tensor | None:
    """A bool mask (True = do not attend) as an additive float mask (-inf there, 0 elsewhere)."""
    if mask is None:
        return None
    if mask.dtype is dt.bool_:
        return _where(mask, float("-inf"), 0.0).to(dtype)
    if not mask.dtype.is_floating_point:
        raise LoomError(f"loom.nn.MultiheadAttention: only bool and floating types of {name} are supported, "
                        f"got {mask.dtype.name}")
    return mask.to(dtype)


def _where(cond: Tensor, a, b) -> Tensor:
    from loom.functional.math import where
    return where(cond, a, b)


def multi_head_attention_forward(query: Tensor, key: Tensor, value: Tensor, num_heads: int,
                                 in_proj_weight: Tensor | None, in_proj_bias: Tensor | None,
                                 bias_k: Tensor | None, bias_v: Tensor | None, add_zero_attn: bool,
                                 dropout_p: float, out_proj_weight: Tensor, out_proj_bias: Tensor | None,
                                 training: bool = True, key_padding_mask: Tensor | None = None,
                                 need_weights: bool = True, attn_mask: Tensor | None = None,
                                 use_separate_proj_weight: bool = False, q_proj_weight: Tensor | None = None,
                                 k_proj_weight: Tensor | None = None, v_proj_weight: Tensor | None = None,
                                 average_attn_weights: bool = True, is_causal: bool = False):
    """Multi-head attention over sequence-first inputs, as `torch.nn.functional.multi_head_attention_forward`.

    query (L, N, E) or (L, E); key/value (S, N, E_k/E_v) or (S, E_k/E_v). Returns
    (output (L, N, E), weights (N, L, S) averaged over heads, or (N, H, L, S), or None).
    """
    op = "loom.nn.functional.multi_head_attention_forward"
    batched = query.ndim == 3
    if query.ndim not in (2, 3) or key.ndim != query.ndim or value.ndim != query.ndim:
        raise ShapeError(f"{op}: query, key and value must all be 3-d (L, N, E) or all 2-d (L, E), got "
                         f"{fmt_shape(query.shape)}, {fmt_shape(key.shape)} and {fmt_shape(value.shape)}")
    if not batched:
        query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
        if key_padding_mask is not None:
            key_padding_mask = key_padding_mask.unsqueeze(0)
    tgt_len, bsz, embed_dim = query.shape
    src_len = key.shape[0]
    if key.shape[:2] != value.shape[:2]:
        raise ShapeError(f"{op}: key shape {fmt_shape(key.shape)} does not match value shape "
                         f"{fmt_shape(value.shape)}")
    if embed_dim % num_heads != 0:
        raise ShapeError(f"{op}: embed_dim {embed_dim} not divisible by num_heads {num_heads}")
    head_dim = embed_dim // num_heads
    if is_causal and attn_mask is None:
        raise LoomError(f"{op}: need attn_mask if specifying the is_causal hint")
    attn_mask = _float_mask(attn_mask, "attn_mask", query.dtype)
    key_padding_mask = _float_mask(key_padding_mask, "key_padding_mask", query.dtype)

    if use_separate_proj_weight:
        w_q, w_k, w_v = q_proj_weight, k_proj_weight, v_proj_weight
    else:
        w_q, w_k, w_v = in_proj_weight.chunk(3)
    b_q, b_k, b_v = in_proj_bias.chunk(3) if in_proj_bias is not None else (None, None, None)
    q = F.linear(query, w_q, b_q)
    k = F.linear(key, w_k, b_k)
    v = F.linear(value, w_v, b_v)

    if attn_mask is not None:
        if attn_mask.ndim == 2:
            if tuple(attn_mask.shape) != (tgt_len, src_len):
                raise ShapeError(f"{op}: the shape of the 2-d attn_mask is {fmt_shape(attn_mask.shape)}, "
                                 f"but should be {fmt_shape((tgt_len, src_len))}")
            attn_mask = attn_mask.unsqueeze(0)
        elif attn_mask.ndim == 3:
            if tuple(attn_mask.shape) != (bsz * num_heads, tgt_len, src_len):
                raise ShapeError(f"{op}: the shape of the 3-d attn_mask is {fmt_shape(attn_mask.shape)}, "
                                 f"but should be {fmt_shape((bsz * num_heads, tgt_len, src_len))}")
        else:
            raise ShapeError(f"{op}: attn_mask's dimension {attn_mask.ndim} is not supported")
    if key_padding_mask is not None and tuple(key_padding_mask.shape) != (bsz, src_len):
        raise ShapeError(f"{op}: expected key_padding_mask of shape {fmt_shape((bsz, src_len))}, got "
                         f"{fmt_shape(key_padding_mask.shape)}")

    if bias_k is not None and bias_v is not None:
        from loom.functional.shape import cat
        k = cat([k, bias_k.expand(1, bsz, embed_dim)])
        v = cat([v, bias_v.expand(1, bsz, embed_dim)])
        if attn_mask is not None:
            attn_mask = F.pad(attn_mask, (0, 1))
        if key_padding_mask is not None:
            key_padding_mask = F.pad(key_padding_mask, (0, 1))

    # (L, N, E) -> (N * H, L, head_dim)
    q = q.reshape(tgt_len, bsz * num_heads, head_dim).transpose(0, 1)
    k = k.reshape(k.shape[0], bsz * num_heads, head_dim).transpose(0, 1)
    v = v.reshape(v.shape[0], bsz * num_heads, head_dim).transpose(0, 1)

    if add_zero_attn:
        k = F.pad(k, (0, 0, 0, 1))
        v = F.pad(v, (0, 0, 0, 1))
        if attn_mask is not None:
            attn_mask = F.pad(attn_mask, (0, 1))
        if key_padding_mask is not None:
            key_padding_mask = F.pad(key_padding_mask, (0, 1))

    src_len = k.shape[1]
    if key_padding_mask is not None:
        kpm = key_padding_mask.reshape(bsz, 1, 1, src_len).expand(bsz, num_heads, 1, src_len)
        kpm = kpm.reshape(bsz * num_heads, 1, src_len)
        attn_mask = kpm if attn_mask is None else attn_mask + kpm
    if not training:
        dropout_p = 0.0

    if need_weights:
        scores = (q * math.sqrt(1.0 / head_dim)) @ k.transpose(-2, -1)
        if attn_mask is not None:
            scores = scores + attn_mask
        weights = F.softmax(scores, dim=-1)
        if dropout_p > 0.0:
            weights = F.dropout(weights, p=dropout_p)
        out = (weights @ v).transpose(0, 1).reshape(tgt_len * bsz, embed_dim)
        out = F.linear(out, out_proj_weight, out_proj_bias).reshape(tgt_len, bsz, -1)
        weights = weights.reshape(bsz, num_heads, tgt_len, src_len)
        if average_attn_weights:
            weights = weights.mean(dim=1)
        if not batched:
            out, weights = out.squeeze(1), weights.squeeze(0)
        return out, weights
    if attn_mask is not None:
        attn_mask = attn_mask.reshape(bsz, num_heads, -1, src_len) if attn_mask.shape[0] != 1 \
            else attn_mask.unsqueeze(0)
    q = q.reshape(bsz, num_heads, tgt_len, head_dim)
    k = k.reshape(bsz, num_heads, src_len, head_dim)
    v = v.reshape(bsz, num_heads, src_len, head_dim)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask, dropout_p)
    out = out.permute(2, 0, 1, 3).reshape(bsz * tgt_len, embed_dim)
    out = F.linear(out, out_proj_weight, out_proj_bias).reshape(tgt_len, bsz, -1)
    if not batched:
        out = out.squeeze(1)
    return out, None


class MultiheadAttention(Module):
    """Attention from queries to keys/values over `num_heads` heads, as `torch.nn.MultiheadAttention`.

    Parameters
    ----------
    embed_dim, num_heads : int
    dropout : float
        Dropout on the attention weights (training only).
    bias : bool
        Biases in the input and output projections.
    add_bias_kv, add_zero_attn : bool
        Append a learned bias (or zeros) to the key/value sequences.
    kdim, vdim : int, optional
        Key/value feature sizes (default embed_dim; separate projection weights when they differ).
    batch_first : bool
        Inputs and outputs are (N, L, E) instead of (L, N, E).

    Parameters are named `in_proj_weight`, `in_proj_bias`, `out_proj.weight`,
    `out_proj.bias` (or `q_proj_weight`, ... when kdim/vdim differ), so
    PyTorch state_dicts load directly.

    Examples
    --------
    >>> mha = loom.nn.MultiheadAttention(16, 4, batch_first=True)
    >>> x = loom.randn(2, 5, 16)
    >>> out, w = mha(x, x, x)
    >>> out.shape, w.shape
    (loom.Size([2, 5, 16]), loom.Size([2, 5, 5]))
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim: int | None = None,
                 vdim: int | None = None, batch_first: bool = False, device=None, dtype=None) -> None:
        super().__init__()
        _check_device(device, f"nn.{type(self).__name__}")
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"loom.nn.MultiheadAttention: embed_dim and num_heads must be greater than 0, got "
                             f"embed_dim={embed_dim} and num_heads={num_heads} instead")
        if embed_dim % num_heads != 0:
            raise ValueError(f"loom.nn.MultiheadAttention: embed_dim ({embed_dim}) must be divisible by "
                             f"num_heads ({num_heads})")
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.batch_first = batch_first
        self.head_dim = embed_dim // num_heads
        if not self._qkv_same_embed_dim:
            self.q_proj_weight = Parameter(empty((embed_dim, embed_dim), dtype=dtype))
            self.k_proj_weight = Parameter(empty((embed_dim, self.kdim), dtype=dtype))
            self.v_proj_weight = Parameter(empty((embed_dim, self.vdim), dtype=dtype))
            self.register_parameter("in_proj_weight", None)
        else:
            self.in_proj_weight = Parameter(empty((3 * embed_dim, embed_dim), dtype=dtype))
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(empty(3 * embed_dim, dtype=dtype))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = NonDynamicallyQuantizableLinear(embed_dim, embed_dim, bias=bias, dtype=dtype)
        if add_bias_kv:
            self.bias_k = Parameter(empty((1, 1, embed_dim), dtype=dtype))
            self.bias_v = Parameter(empty((1, 1, embed_dim), dtype=dtype))
        else:
            self.bias_k = self.bias_v = None
        self.add_zero_attn = add_zero_attn
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            init.xavier_uniform_(self.q_proj_weight)
            init.xavier_uniform_(self.k_proj_weight)
            init.xavier_uniform_(self.v_proj_weight)
        if self.in_proj_bias is not None:
            init.constant_(self.in_proj_bias, 0.0)
            init.constant_(self.out_proj.bias, 0.0)
        if self.bias_k is not None:
            init.xavier_normal_(self.bias_k)
        if self.bias_v is not None:
            init.xavier_normal_(self.bias_v)

    def forward(self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Tensor | None = None,
                need_weights: bool = True, attn_mask: Tensor | None = None, average_attn_weights: bool = True,
                is_causal: bool = False):
        """(output, attention weights or None).

        key_padding_mask (N, S): True (or -inf) marks keys to ignore. attn_mask
        (L, S) or (N * num_heads, L, S): True (or -inf) forbids attending; float
        values are added to the scores. Weights are averaged over heads unless
        `average_attn_weights=False`.
        """
        batched = query.ndim == 3
        if self.batch_first and batched:
            query, key, value = (x.transpose(1, 0) for x in (query, key, value))
        out, weights = multi_head_attention_forward(
            query, key, value, self.num_heads, self.in_proj_weight, self.in_proj_bias, self.bias_k,
            self.bias_v, self.add_zero_attn, self.dropout, self.out_proj.weight, self.out_proj.bias,
            training=self.training, key_padding_mask=key_padding_mask, need_weights=need_weights,
            attn_mask=attn_mask, use_separate_proj_weight=not self._qkv_same_embed_dim,
            q_proj_weight=self.q_proj_weight, k_proj_weight=self.k_proj_weight, v_proj_weight=self.v_proj_weight,
            average_attn_weights=average_attn_weights, is_causal=is_causal)
        if self.batch_first and batched:
            out = out.transpose(1, 0)
        return out, weights


def _get_activation_fn(activation: str | Callable) -> Callable:
    if callable(activation):
        return activation
    if activation == "relu":
        return F.relu
    if activation == "gelu":
        return F.gelu
    raise LoomError(f"loom.nn: activation should be relu/gelu, not {activation}")


def _get_clones(module: Module, n: int) -> ModuleList:
    return ModuleList([copy.deepcopy(module) for _ in range(n)])


def generate_square_subsequent_mask(sz: int, dtype=None) -> Tensor:
    """An (sz, sz) causal mask: 0 on and below the diagonal, -inf above.

    Examples
    --------
    >>> loom.nn.Transformer.generate_square_subsequent_mask(3).tolist()
    [[0.0, -inf, -inf], [0.0, 0.0, -inf], [0.0, 0.0, 0.0]]
    """
    d = dtype if dtype is not None else dt.get_default_dtype()
    future = arange(sz).reshape(1, sz) > arange(sz).reshape(sz, 1)
    return _where(future, float("-inf"), 0.0).to(d)


class TransformerEncoderLayer(Module):
    """Self-attention then a feed-forward block, each with residual, dropout and LayerNorm.

    Parameters
    ----------
    d_model, nhead : int
    dim_feedforward : int
        Hidden size of the feed-forward block. Default: 2048.
    dropout : float
        Default: 0.1.
    activation : "relu", "gelu" or a callable
    layer_norm_eps : float
    batch_first : bool
        (N, L, E) inputs instead of (L, N, E).
    norm_first : bool
        Pre-norm (LayerNorm before each block) instead of post-norm.
    bias : bool

    Examples
    --------
    >>> layer = loom.nn.TransformerEncoderLayer(d_model=16, nhead=4, dim_feedforward=32, batch_first=True)
    >>> layer(loom.randn(2, 7, 16)).shape
    loom.Size([2, 7, 16])
    """

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: str | Callable = "relu", layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device=None, dtype=None) -> None:
        super().__init__()
        _check_device(device, f"nn.{type(self).__name__}")
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first,
                                            dtype=dtype)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, dtype=dtype)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, dtype=dtype)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.activation = _get_activation_fn(activation)

    def forward(self, src: Tensor, src_mask: Tensor | None = None, src_key_padding_mask: Tensor | None = None,
                is_causal: bool = False) -> Tensor:
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            x = x + self._ff_block(self.norm2(x))
        else:
            x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
            x = self.norm2(x + self._ff_block(x))
        return x

    def _sa_block(self, x: Tensor, attn_mask, key_padding_mask, is_causal: bool) -> Tensor:
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask, need_weights=False,
                           is_causal=is_causal)[0]
        return self.dropout1(x)

    def _ff_block(self, x: Tensor) -> Tensor:
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))


class TransformerDecoderLayer(Module):
    """Self-attention, cross-attention to `memory`, then feed-forward; each with residual and LayerNorm.

    Examples
    --------
    >>> layer = loom.nn.TransformerDecoderLayer(16, 4, dim_feedforward=32, batch_first=True)
    >>> layer(loom.randn(2, 5, 16), loom.randn(2, 7, 16)).shape
    loom.Size([2, 5, 16])
    """

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: str | Callable = "relu", layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device=None, dtype=None) -> None:
        super().__init__()
        _check_device(device, f"nn.{type(self).__name__}")
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first,
                                            dtype=dtype)
        self.multihead_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                                 batch_first=batch_first, dtype=dtype)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, dtype=dtype)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, dtype=dtype)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.norm3 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.dropout3 = Dropout(dropout)
        self.activation = _get_activation_fn(activation)

    def forward(self, tgt: Tensor, memory: Tensor, tgt_mask: Tensor | None = None,
                memory_mask: Tensor | None = None, tgt_key_padding_mask: Tensor | None = None,
                memory_key_padding_mask: Tensor | None = None, tgt_is_causal: bool = False,
                memory_is_causal: bool = False) -> Tensor:
        x = tgt
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal)
            x = x + self._mha_block(self.norm2(x), memory, memory_mask, memory_key_padding_mask,
                                    memory_is_causal)
            x = x + self._ff_block(self.norm3(x))
        else:
            x = self.norm1(x + self._sa_block(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal))
            x = self.norm2(x + self._mha_block(x, memory, memory_mask, memory_key_padding_mask,
                                               memory_is_causal))
            x = self.norm3(x + self._ff_block(x))
        return x

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal: bool) -> Tensor:
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask, is_causal=is_causal,
                           need_weights=False)[0]
        return self.dropout1(x)

    def _mha_block(self, x, mem, attn_mask, key_padding_mask, is_causal: bool) -> Tensor:
        x = self.multihead_attn(x, mem, mem, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                                is_causal=is_causal, need_weights=False)[0]
        return self.dropout2(x)

    def _ff_block(self, x: Tensor) -> Tensor:
        return self.dropout3(self.linear2(self.dropout(self.activation(self.linear1(x)))))


class TransformerEncoder(Module):
    """`num_layers` copies of `encoder_layer` applied in turn, then an optional final norm.

    In inference (eval mode, no grad) with a right-padded `src_key_padding_mask` and
    no `mask`, the padded positions come out as zeros (before `norm`), as from
    PyTorch's nested-tensor fast path; otherwise they are computed like the others.

    Examples
    --------
    >>> layer = loom.nn.TransformerEncoderLayer(d_model=16, nhead=4, dim_feedforward=32)
    >>> enc = loom.nn.TransformerEncoder(layer, num_layers=2)
    >>> enc(loom.randn(7, 2, 16)).shape
    loom.Size([7, 2, 16])
    """

    def __init__(self, encoder_layer: Module, num_layers: int, norm: Module | None = None,
                 enable_nested_tensor: bool = True, mask_check: bool = True) -> None:
        super().__init__()
        self.layers = _get_clones(encoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm
        self.enable_nested_tensor = enable_nested_tensor
        self.mask_check = mask_check

    def forward(self, src: Tensor, mask: Tensor | None = None, src_key_padding_mask: Tensor | None = None,
                is_causal: bool | None = None) -> Tensor:
        out = src
        for mod in self.layers:
            out = mod(out, src_mask=mask, src_key_padding_mask=src_key_padding_mask, is_causal=bool(is_causal))
        if self._nested_fast_path(src, mask, src_key_padding_mask):
            pad = src_key_padding_mask if src_key_padding_mask.dtype is dt.bool_ else src_key_padding_mask != 0
            # PyTorch packs only right-padded batches (each row's padding at its end) into a nested tensor.
            right_padded = (pad[:, 1:] | ~pad[:, :-1]).all()
            out = out.masked_fill((pad & right_padded).unsqueeze(-1), 0.0)
        if self.norm is not None:
            out = self.norm(out)
        return out


    def _nested_fast_path(self, src: Tensor, mask, src_key_padding_mask) -> bool:
        """Whether PyTorch would run this call on nested tensors (so its padded positions come out as zeros)."""
        from loom import autocast as _autocast
        from loom.autograd.grad_mode import is_grad_enabled
        first = self.layers[0] if len(self.layers) else None
        if (not self.enable_nested_tensor or not isinstance(first, TransformerEncoderLayer) or first.training
                or src_key_padding_mask is None or mask is not None or src.ndim != 3 or _autocast.is_enabled()):
            return False
        attn, act = first.self_attn, first.activation
        act_name = getattr(act, "__name__", type(act).__name__).lower()
        if (first.norm_first or not attn.batch_first or not attn._qkv_same_embed_dim or attn.in_proj_bias is None
                or act_name not in ("relu", "gelu") or first.norm1.eps != first.norm2.eps or attn.num_heads % 2):
            return False
        return not (is_grad_enabled() and (src.requires_grad or any(p.requires_grad for p in first.parameters())))


class TransformerDecoder(Module):
    """`num_layers` copies of `decoder_layer` applied in turn, then an optional final norm."""

    def __init__(self, decoder_layer: Module, num_layers: int, norm: Module | None = None) -> None:
        super().__init__()
        self.layers = _get_clones(decoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, tgt: Tensor, memory: Tensor, tgt_mask: Tensor | None = None,
                memory_mask: Tensor | None = None, tgt_key_padding_mask: Tensor | None = None,
                memory_key_padding_mask: Tensor | None = None, tgt_is_causal: bool | None = None,
                memory_is_causal: bool = False) -> Tensor:
        out = tgt
        for mod in self.layers:
            out = mod(out, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                      tgt_key_padding_mask=tgt_key_padding_mask, memory_key_padding_mask=memory_key_padding_mask,
                      tgt_is_causal=bool(tgt_is_causal), memory_is_causal=memory_is_causal)
        if self.norm is not None:
            out = self.norm(out)
        return out


class Transformer(Module):
    """The encoder-decoder Transformer of "Attention Is All You Need", as `torch.nn.Transformer`.

    Examples
    --------
    >>> model = loom.nn.Transformer(d_model=16, nhead=4, num_encoder_layers=1, num_decoder_layers=1,
    ...                             dim_feedforward=32, batch_first=True)
    >>> model(loom.randn(2, 6, 16), loom.randn(2, 4, 16)).shape
    loom.Size([2, 4, 16])
    """

    def __init__(self, d_model: int = 512, nhead: int = 8, num_encoder_layers: int = 6,
                 num_decoder_layers: int = 6, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: str | Callable = "relu", custom_encoder: Module | None = None,
                 custom_decoder: Module | None = None, layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device=None, dtype=None) -> None:
        super().__init__()
        _check_device(device, f"nn.{type(self).__name__}")
        if custom_encoder is not None:
            self.encoder = custom_encoder
        else:
            layer = TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                                            batch_first, norm_first, bias, dtype=dtype)
            self.encoder = TransformerEncoder(layer, num_encoder_layers,
                                              LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype))
        if custom_decoder is not None:
            self.decoder = custom_decoder
        else:
            layer = TransformerDecoderLayer(d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                                            batch_first, norm_first, bias, dtype=dtype)
            self.decoder = TransformerDecoder(layer, num_decoder_layers,
                                              LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype))
        self._reset_parameters()
        self.d_model = d_model
        self.nhead = nhead
        self.batch_first = batch_first

    def _reset_parameters(self) -> None:
        for p in self.parameters():
            if p.ndim > 1:
                init.xavier_uniform_(p)

    def forward(self, src: Tensor, tgt: Tensor, src_mask=None, tgt_mask=None, memory_mask=None,
                src_key_padding_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None,
                src_is_causal: bool | None = None, tgt_is_causal: bool | None = None,
                memory_is_causal: bool = False) -> Tensor:
        batch_dim = 0 if self.batch_first else 1
        if src.ndim == 3 and src.shape[batch_dim] != tgt.shape[batch_dim]:
            raise ShapeError("loom.nn.Transformer: the batch number of src and tgt must be equal, got "
                             f"{fmt_shape(src.shape)} and {fmt_shape(tgt.shape)}")
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise ShapeError(f"loom.nn.Transformer: the feature number of src and tgt must be equal to d_model "
                             f"({self.d_model}), got {fmt_shape(src.shape)} and {fmt_shape(tgt.shape)}")
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask,
                              is_causal=src_is_causal)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask, tgt_is_causal=tgt_is_causal,
                            memory_is_causal=memory_is_causal)

    generate_square_subsequent_mask = staticmethod(generate_square_subsequent_mask)


_upper.register(multi_head_attention=multi_head_attention_forward)  # loom.nn.functional's.
