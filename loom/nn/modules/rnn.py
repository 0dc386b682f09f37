"""Recurrent layers: RNN, LSTM and GRU (multi-layer, bidirectional, batch_first) and their cells.

Parameter names, shapes, gate order and initialisation follow PyTorch
(`weight_ih_l0`, `weight_hh_l0_reverse`, ...; LSTM gates i, f, g, o; GRU gates
r, z, n), so PyTorch state_dicts load directly. The input projection of every
time step is one matmul; the recurrence runs step by step.
"""
from __future__ import annotations

import math
import numbers
import warnings

from loom import autocast as _autocast
from loom.errors import LoomError, ShapeError, fmt_shape
from loom.tensor import _check_device
from loom.functional.math import relu, sigmoid, tanh, where
from loom.functional.shape import cat, stack
from loom.nn import functional as F
from loom.nn import init
from loom.nn.module import Module
from loom.nn.parameter import Parameter
from loom.tensor import Tensor, empty, zeros

_GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}


def _lstm_step(x_proj: Tensor, state, w_hh: Tensor, b_hh: Tensor | None, w_hr: Tensor | None):
    """One LSTM step from the precomputed input projection; returns (h, (h, c))."""
    h, c = state
    gates = x_proj + F.linear(h, w_hh, b_hh)
    i, f, g, o = gates.chunk(4, -1)
    c = sigmoid(f) * c + sigmoid(i) * tanh(g)
    h = sigmoid(o) * tanh(c)
    if w_hr is not None:
        h = F.linear(h, w_hr)
    return h, (h, c)


def _gru_step(x_proj: Tensor, h: Tensor, w_hh: Tensor, b_hh: Tensor | None):
    """One GRU step: n = tanh(x_n + r * (W_hn h + b_hn)), h' = (1 - z) * n + z * h."""
    i_r, i_z, i_n = x_proj.chunk(3, -1)
    h_r, h_z, h_n = F.linear(h, w_hh, b_hh).chunk(3, -1)
    r = sigmoid(i_r + h_r)
    z = sigmoid(i_z + h_z)
    n = tanh(i_n + r * h_n)
    h = n + z * (h - n)
    return h, h


def _rnn_step(x_proj: Tensor, h: Tensor, w_hh: Tensor, b_hh: Tensor | None, relu_: bool):
    h = x_proj + F.linear(h, w_hh, b_hh)
    h = relu(h) if relu_ else tanh(h)
    return h, h


class RNNBase(Module):
    """The parameters and the layer/direction loop shared by RNN, LSTM and GRU."""

    def __init__(self, mode: str, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 proj_size: int = 0, device=None, dtype=None) -> None:
        super().__init__()
        _check_device(device, f"nn.{type(self).__name__}")
        name = f"loom.nn.{type(self).__name__}"
        if not isinstance(dropout, numbers.Number) or isinstance(dropout, bool) or not 0 <= dropout <= 1:
            raise ValueError(f"{name}: dropout should be a number in range [0, 1] representing the probability "
                             f"of an element being zeroed, got {dropout}")
        if dropout > 0 and num_layers == 1:
            warnings.warn(f"dropout option adds dropout after all but last recurrent layer, so non-zero dropout "
                          f"expects num_layers greater than 1, but got dropout={dropout} and "
                          f"num_layers={num_layers}", stacklevel=3)
        if not isinstance(hidden_size, int) or hidden_size <= 0:
            raise ValueError(f"{name}: hidden_size must be a positive integer, got {hidden_size}")
        if not isinstance(num_layers, int) or num_layers <= 0:
            raise ValueError(f"{name}: num_layers must be a positive integer, got {num_layers}")
        if proj_size and mode != "LSTM":
            raise ValueError(f"{name}: proj_size argument is only supported for LSTM, not RNN or GRU")
        if proj_size < 0:
            raise ValueError(f"{name}: proj_size should be a positive integer or zero to disable projections")
        if proj_size >= hidden_size:
            raise ValueError(f"{name}: proj_size has to be smaller than hidden_size")
        self.mode = mode
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bias = bias
        self.batch_first = batch_first
        self.dropout = float(dropout)
        self.bidirectional = bidirectional
        self.proj_size = proj_size
        num_directions = 2 if bidirectional else 1
        gate_size = _GATES[mode] * hidden_size
        real_hidden = proj_size if proj_size > 0 else hidden_size
        self._flat_weights_names: list[str] = []
        for layer in range(num_layers):
            for direction in range(num_directions):
                layer_input = input_size if layer == 0 else real_hidden * num_directions
                suffix = "_reverse" if direction == 1 else ""
                shapes = [(f"weight_ih_l{layer}{suffix}", (gate_size, layer_input)),
                          (f"weight_hh_l{layer}{suffix}", (gate_size, real_hidden))]
                if bias:
                    shapes += [(f"bias_ih_l{layer}{suffix}", (gate_size,)),
                               (f"bias_hh_l{layer}{suffix}", (gate_size,))]
                if proj_size > 0:
                    shapes.append((f"weight_hr_l{layer}{suffix}", (proj_size, hidden_size)))
                for pname, shape in shapes:
                    setattr(self, pname, Parameter(empty(shape, dtype=dtype)))
                    self._flat_weights_names.append(pname)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for w in self.parameters():
            init.uniform_(w, -stdv, stdv)

    @property
    def all_weights(self) -> list[list[Parameter]]:
        """Each layer/direction's parameters, in PyTorch's order."""
        per = len(self._flat_weights_names) // (self.num_layers * (2 if self.bidirectional else 1))
        names = self._flat_weights_names
        return [[getattr(self, n) for n in names[i:i + per]] for i in range(0, len(names), per)]

    def _weights(self, layer: int, direction: int):
        suffix = "_reverse" if direction == 1 else ""
        get = self._parameters.get
        return (get(f"weight_ih_l{layer}{suffix}"), get(f"weight_hh_l{layer}{suffix}"),
                get(f"bias_ih_l{layer}{suffix}"), get(f"bias_hh_l{layer}{suffix}"),
                get(f"weight_hr_l{layer}{suffix}"))

    def _check_input(self, input: Tensor) -> None:
        name = f"loom.nn.{type(self).__name__}"
        if not isinstance(input, Tensor):
            raise TypeError(f"{name}: expected a loom.Tensor or PackedSequence input, got {type(input).__name__}")
        if input.ndim not in (2, 3):
            raise ShapeError(f"{name}: expected input to be 2-d (L, H_in) or 3-d, got {input.ndim}-d input of "
                             f"shape {fmt_shape(input.shape)}")
        if input.shape[0 if input.ndim == 2 or not self.batch_first else 1] == 0:
            raise ShapeError(f"{name}: expected a sequence of at least one step, got input of shape "
                             f"{fmt_shape(input.shape)}")
        if input.shape[-1] != self.input_size:
            raise ShapeError(f"{name}: input.size(-1) must be equal to input_size. Expected {self.input_size}, "
                             f"got {input.shape[-1]}")

    def _check_hidden(self, h: Tensor, expected: tuple, what: str) -> None:
        if tuple(h.shape) != expected:
            raise ShapeError(f"loom.nn.{type(self).__name__}: expected {what} size {expected}, got "
                             f"{list(h.shape)}")

    def _step(self, x_proj: Tensor, state, w_hh, b_hh, w_hr):
        if self.mode == "LSTM":
            return _lstm_step(x_proj, state, w_hh, b_hh, w_hr)
        if self.mode == "GRU":
            return _gru_step(x_proj, state, w_hh, b_hh)
        return _rnn_step(x_proj, state, w_hh, b_hh, self.mode == "RNN_RELU")

    def _run(self, input: Tensor, hx, lengths=None):
        """Sequence-first input (L, N, H_in) and per-(layer, direction) states -> (output, final states).

        With `lengths` (one per batch element, from a PackedSequence), steps past a sequence's end leave its
        state unchanged and output zeros, so the final states are those at each sequence's last step.
        """
        num_directions = 2 if self.bidirectional else 1
        seq_len = input.shape[0]
        layer_input = input
        masks = None
        if lengths is not None:
            from loom.tensor import tensor as _tensor
            masks = [_tensor((lengths > t).reshape(-1, 1)) for t in range(seq_len)]
        finals = []
        for layer in range(self.num_layers):
            outs = []
            for direction in range(num_directions):
                w_ih, w_hh, b_ih, b_hh, w_hr = self._weights(layer, direction)
                proj = F.linear(layer_input, w_ih, b_ih)  # Every time step at once.
                state = hx[layer * num_directions + direction]
                steps: list = [None] * seq_len
                order = range(seq_len - 1, -1, -1) if direction == 1 else range(seq_len)
                for t in order:
                    out_t, new_state = self._step(proj[t], state, w_hh, b_hh, w_hr)
                    if masks is not None:
                        keep = masks[t]
                        if isinstance(new_state, tuple):
                            new_state = tuple(where(keep, a, b) for a, b in zip(new_state, state))
                        else:
                            new_state = where(keep, new_state, state)
                        out_t = where(keep, out_t, out_t.detach() * 0.0)
                    steps[t], state = out_t, new_state
                outs.append(stack(steps))
                finals.append(state)
            layer_input = outs[0] if num_directions == 1 else cat(outs, dim=2)
            if self.dropout > 0 and self.training and layer < self.num_layers - 1:
                layer_input = F.dropout(layer_input, self.dropout, True)
        return layer_input, finals

    def _prepare(self, input: Tensor):
        """(sequence-first batched input, batched flag, batch size)."""
        self._check_input(input)
        batched = input.ndim == 3
        if not batched:
            input = input.unsqueeze(1)
        elif self.batch_first:
            input = input.transpose(0, 1)
        return input, batched, input.shape[1]

    def _finish(self, output: Tensor, batched: bool) -> Tensor:
        if not batched:
            return output.squeeze(1)
        return output.transpose(0, 1) if self.batch_first else output

    def _hidden(self, hx: Tensor | None, batched: bool, batch: int, size: int, dtype, what: str) -> Tensor:
        num = self.num_layers * (2 if self.bidirectional else 1)
        if hx is None:
            return zeros(num, batch, size, dtype=dtype)
        if batched and hx.ndim != 3:
            raise ShapeError(f"loom.nn.{type(self).__name__}: for batched 3-d input, {what} should also be 3-d "
                             f"but got {hx.ndim}-d tensor")
        if not batched:
            if hx.ndim != 2:
                raise ShapeError(f"loom.nn.{type(self).__name__}: for unbatched 2-d input, {what} should also "
                                 f"be 2-d but got {hx.ndim}-d tensor")
            hx = hx.unsqueeze(1)
        self._check_hidden(hx, (num, batch, size), what)
        return hx

    def _unpack(self, input):
        """A PackedSequence as (sequence-first padded input, lengths); any other input as (input, None)."""
        from loom.nn.utils.rnn import PackedSequence, pad_packed_sequence
        if not isinstance(input, PackedSequence):
            return input, None
        padded, lengths = pad_packed_sequence(input)
        if padded.shape[-1] != self.input_size:
            raise ShapeError(f"loom.nn.{type(self).__name__}: input.size(-1) must be equal to input_size. Expected "
                             f"{self.input_size}, got {padded.shape[-1]}")
        return padded, lengths.numpy()

    def _repack(self, output: Tensor, lengths, like):
        """The padded output packed as the input PackedSequence `like` was."""
        from loom.nn.utils.rnn import pack_padded_sequence
        return pack_padded_sequence(output, lengths, enforce_sorted=like.sorted_indices is None)

    def _forward_single_state(self, input: Tensor, hx: Tensor | None):
        """RNN's and GRU's forward: one hidden state per layer and direction."""
        padded, lengths = self._unpack(input)
        if lengths is not None:
            h0 = self._hidden(hx, True, padded.shape[1], self.hidden_size, padded.dtype, "hx")
            out, finals = self._run(padded, [h0[i] for i in range(h0.shape[0])], lengths)
            return self._repack(out, lengths, input), stack(finals)
        x, batched, batch = self._prepare(input)
        h0 = self._hidden(hx, batched, batch, self.hidden_size, x.dtype, "hx")
        out, finals = self._run(x, [h0[i] for i in range(h0.shape[0])])
        h_n = stack(finals)
        return self._finish(out, batched), (h_n if batched else h_n.squeeze(1))

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size != 0:
            s += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if self.batch_first is not False:
            s += f", batch_first={self.batch_first}"
        if self.dropout != 0:
            s += f", dropout={self.dropout}"
        if self.bidirectional is not False:
            s += f", bidirectional={self.bidirectional}"
        return s


class RNN(RNNBase):
    """Elman RNN: h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh) (or relu).

    Examples
    --------
    >>> rnn = loom.nn.RNN(10, 20, 2)
    >>> out, h = rnn(loom.randn(5, 3, 10))
    >>> out.shape, h.shape
    (loom.Size([5, 3, 20]), loom.Size([2, 3, 20]))
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, nonlinearity: str = "tanh",
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 device=None, dtype=None, proj_size: int = 0) -> None:
        if nonlinearity == "tanh":
            mode = "RNN_TANH"
        elif nonlinearity == "relu":
            mode = "RNN_RELU"
        else:
            raise ValueError(f"loom.nn.RNN: unknown nonlinearity '{nonlinearity}'; select from 'tanh' or 'relu'")
        self.nonlinearity = nonlinearity
        super().__init__(mode, input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         proj_size, dtype=dtype)
        _check_device(device, f"nn.{type(self).__name__}")

    def forward(self, input: Tensor, hx: Tensor | None = None):
        """(output (L, N, D * H_out), h_n (D * num_layers, N, H_out))."""
        return self._forward_single_state(input, hx)


class LSTM(RNNBase):
    """Long short-term memory, gates in PyTorch's order (input, forget, cell, output).

    Parameters
    ----------
    input_size, hidden_size : int
    num_layers : int
    bias : bool
    batch_first : bool
        (N, L, H_in) input and output instead of (L, N, H_in).
    dropout : float
        Dropout on the outputs of every layer but the last (training only).
    bidirectional : bool
    proj_size : int
        If > 0, project h to this size (LSTM with projections).

    `forward(input, (h_0, c_0))` returns `output, (h_n, c_n)`.

    Examples
    --------
    >>> lstm = loom.nn.LSTM(10, 20, num_layers=2, batch_first=True)
    >>> out, (h, c) = lstm(loom.randn(3, 5, 10))
    >>> out.shape, h.shape, c.shape
    (loom.Size([3, 5, 20]), loom.Size([2, 3, 20]), loom.Size([2, 3, 20]))
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, proj_size: int = 0,
                 device=None, dtype=None) -> None:
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         proj_size, dtype=dtype)
        _check_device(device, f"nn.{type(self).__name__}")

    def forward(self, input: Tensor, hx: tuple[Tensor, Tensor] | None = None):
        padded, lengths = self._unpack(input)
        if lengths is not None:
            x, batched, batch = padded, True, padded.shape[1]
        else:
            x, batched, batch = self._prepare(input)
        real_hidden = self.proj_size if self.proj_size > 0 else self.hidden_size
        if hx is not None and (not isinstance(hx, (tuple, list)) or len(hx) != 2):
            raise LoomError("loom.nn.LSTM: hx must be a tuple (h_0, c_0)")
        h0 = self._hidden(None if hx is None else hx[0], batched, batch, real_hidden, x.dtype, "hidden[0]")
        c0 = self._hidden(None if hx is None else hx[1], batched, batch, self.hidden_size, x.dtype, "hidden[1]")
        num = h0.shape[0]
        out, finals = self._run(x, [(h0[i], c0[i]) for i in range(num)], lengths)
        h_n = stack([h for h, _ in finals])
        c_n = stack([c for _, c in finals])
        if lengths is not None:
            return self._repack(out, lengths, input), (h_n, c_n)
        # PyTorch's CPU autocast runs a padded LSTM in the lower type (packed ones, GRU and the cells in float32).
        out, h_n, c_n = _autocast.lower(out, h_n, c_n)
        if not batched:
            h_n, c_n = h_n.squeeze(1), c_n.squeeze(1)
        return self._finish(out, batched), (h_n, c_n)


class GRU(RNNBase):
    """Gated recurrent unit, gates in PyTorch's order (reset, update, new).

    `forward(input, h_0)` returns `output, h_n`.

    Examples
    --------
    >>> gru = loom.nn.GRU(10, 20, num_layers=2)
    >>> out, h = gru(loom.randn(5, 3, 10))
    >>> out.shape, h.shape
    (loom.Size([5, 3, 20]), loom.Size([2, 3, 20]))
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, device=None,
                 dtype=None, proj_size: int = 0) -> None:
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional,
                         proj_size, dtype=dtype)
        _check_device(device, f"nn.{type(self).__name__}")

    def forward(self, input: Tensor, hx: Tensor | None = None):
        """(output (L, N, D * H_out), h_n (D * num_layers, N, H_out))."""
        return self._forward_single_state(input, hx)


class RNNCellBase(Module):
    """One time step of an RNN, LSTM or GRU, with parameters weight_ih, weight_hh, bias_ih, bias_hh."""

    _gates = 1

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None, dtype=None) -> None:
        super().__init__()
        _check_device(device, f"nn.{type(self).__name__}")
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.bias = bias
        g = self._gates * hidden_size
        self.weight_ih = Parameter(empty((g, input_size), dtype=dtype))
        self.weight_hh = Parameter(empty((g, hidden_size), dtype=dtype))
        if bias:
            self.bias_ih = Parameter(empty(g, dtype=dtype))
            self.bias_hh = Parameter(empty(g, dtype=dtype))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    reset_parameters = RNNBase.reset_parameters

    def _batch(self, input: Tensor) -> tuple[Tensor, bool]:
        if input.ndim not in (1, 2):
            raise ShapeError(f"loom.nn.{type(self).__name__}: expected input to be 1-d or 2-d, got "
                             f"{input.ndim}-d tensor of shape {fmt_shape(input.shape)}")
        return (input, True) if input.ndim == 2 else (input.unsqueeze(0), False)

    def _state(self, hx: Tensor | None, x: Tensor, batched: bool) -> Tensor:
        if hx is None:
            return zeros(x.shape[0], self.hidden_size, dtype=x.dtype)
        return hx if batched else hx.unsqueeze(0)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if getattr(self, "nonlinearity", "tanh") != "tanh":
            s += f", nonlinearity={self.nonlinearity}"
        return s


class RNNCell(RNNCellBase):
    """h' = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh) (or relu)."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, nonlinearity: str = "tanh",
                 device=None, dtype=None) -> None:
        super().__init__(input_size, hidden_size, bias, dtype=dtype)
        _check_device(device, f"nn.{type(self).__name__}")
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"loom.nn.RNNCell: unknown nonlinearity: {nonlinearity}")
        self.nonlinearity = nonlinearity

    def forward(self, input: Tensor, hx: Tensor | None = None) -> Tensor:
        x, batched = self._batch(input)
        h = self._state(hx, x, batched)
        h, _ = _rnn_step(F.linear(x, self.weight_ih, self.bias_ih), h, self.weight_hh, self.bias_hh,
                         self.nonlinearity == "relu")
        return h if batched else h.squeeze(0)


class LSTMCell(RNNCellBase):
    """One LSTM step: `forward(input, (h, c))` returns `(h', c')`.

    Examples
    --------
    >>> cell = loom.nn.LSTMCell(10, 20)
    >>> h, c = cell(loom.randn(3, 10))
    >>> h.shape
    loom.Size([3, 20])
    """

    _gates = 4

    def forward(self, input: Tensor, hx: tuple[Tensor, Tensor] | None = None):
        x, batched = self._batch(input)
        h = self._state(None if hx is None else hx[0], x, batched)
        c = self._state(None if hx is None else hx[1], x, batched)
        _, (h, c) = _lstm_step(F.linear(x, self.weight_ih, self.bias_ih), (h, c), self.weight_hh, self.bias_hh,
                               None)
        return (h, c) if batched else (h.squeeze(0), c.squeeze(0))


class GRUCell(RNNCellBase):
    """One GRU step: `forward(input, h)` returns h'."""

    _gates = 3

    def forward(self, input: Tensor, hx: Tensor | None = None) -> Tensor:
        x, batched = self._batch(input)
        h = self._state(hx, x, batched)
        h, _ = _gru_step(F.linear(x, self.weight_ih, self.bias_ih), h, self.weight_hh, self.bias_hh)
        return h if batched else h.squeeze(0)
