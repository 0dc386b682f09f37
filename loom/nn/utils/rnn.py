"""Sequence batching helpers: padding (`pad_sequence`) and packing (`PackedSequence`, `pack_padded_sequence`,
`pad_packed_sequence`, ...), as `torch.nn.utils.rnn`.

A PackedSequence holds the time steps of variable-length sequences back to back
(longest first), as PyTorch's does; the recurrent layers accept it. Lengths fix
shapes, so they must be known values (a list or an already computed tensor).
"""
from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np

from loom import dtypes as dt
from loom.errors import LoomValueError, ShapeError, fmt_shape
from loom.functional.shape import cat, pad, stack
from loom.tensor import Tensor, tensor, zeros


def pad_sequence(sequences: Sequence[Tensor], batch_first: bool = False, padding_value: float = 0.0,
                 padding_side: str = "right") -> Tensor:
    """Stack variable-length (L_i, *) tensors into (L_max, B, *) (or (B, L_max, *)), padding with `padding_value`.

    Examples
    --------
    >>> a, b = loom.ones(3, 2), loom.ones(1, 2)
    >>> loom.nn.utils.rnn.pad_sequence([a, b], batch_first=True).shape
    loom.Size([2, 3, 2])
    """
    if padding_side not in ("left", "right"):
        raise ValueError(f"loom.nn.utils.rnn.pad_sequence: padding_side must be 'left' or 'right', got "
                         f"{padding_side!r}")
    seqs = list(sequences)
    if not seqs:
        raise ShapeError("loom.nn.utils.rnn.pad_sequence: received an empty list of sequences")
    trailing = tuple(seqs[0].shape[1:])
    for k, s in enumerate(seqs):
        if s.ndim == 0 or tuple(s.shape[1:]) != trailing:
            raise ShapeError(f"loom.nn.utils.rnn.pad_sequence: sequence {k} has shape {fmt_shape(s.shape)}, "
                             f"expected (L, {', '.join(map(str, trailing))})")
    longest = max(s.shape[0] for s in seqs)
    padded = []
    for s in seqs:
        extra = longest - s.shape[0]
        lo, hi = (extra, 0) if padding_side == "left" else (0, extra)
        padded.append(pad(s, [0, 0] * len(trailing) + [lo, hi], value=padding_value) if extra else s)
    return stack(padded, 0 if batch_first else 1)


def unpad_sequence(padded_sequences: Tensor, lengths, batch_first: bool = False) -> list[Tensor]:
    """Undo `pad_sequence` (right padding): the list of (lengths[i], *) sequences."""
    x = padded_sequences if batch_first else padded_sequences.transpose(0, 1)
    return [x[i, :int(n)] for i, n in enumerate(lengths)]


def _lengths(lengths, op: str) -> np.ndarray:
    if isinstance(lengths, Tensor):
        lengths = lengths.detach().numpy()
    arr = np.asarray(lengths, dtype=np.int64).reshape(-1)
    if arr.size and arr.min() <= 0:
        raise LoomValueError(f"loom.nn.utils.rnn.{op}: every sequence length must be positive, got {arr.tolist()}")
    return arr


def invert_permutation(permutation: Tensor | None) -> Tensor | None:
    """The permutation that undoes `permutation` (None stays None)."""
    if permutation is None:
        return None
    p = permutation.detach().numpy()
    inv = np.empty_like(p)
    inv[p] = np.arange(p.size)
    return tensor(inv)


class PackedSequence(NamedTuple):
    """Variable-length sequences packed time step by time step (see `pack_padded_sequence`).

    data: (sum of lengths, *) rows; batch_sizes: how many sequences are still running at each time step;
    sorted_indices / unsorted_indices: the permutation to longest-first order and back (None if none).
    """

    data: Tensor
    batch_sizes: Tensor
    sorted_indices: Tensor | None = None
    unsorted_indices: Tensor | None = None

    def to(self, *args, **kwargs) -> PackedSequence:
        """The same packing with `data` converted by `Tensor.to`."""
        return self._replace(data=self.data.to(*args, **kwargs))

    def float(self) -> PackedSequence:
        return self.to(dt.float32)

    def double(self) -> PackedSequence:
        return self.to(dt.float64)

    def cpu(self) -> PackedSequence:
        return self

    @property
    def is_cuda(self) -> bool:
        return False

    def is_pinned(self) -> bool:
        return False


def _sorted(lengths: np.ndarray, enforce_sorted: bool, op: str) -> np.ndarray | None:
    if enforce_sorted:
        if np.any(np.diff(lengths) > 0):
            raise LoomValueError(f"loom.nn.utils.rnn.{op}: `lengths` array must be sorted in decreasing order when "
                                 f"`enforce_sorted` is True (got {lengths.tolist()}); pass enforce_sorted=False to "
                                 "pack unsorted sequences")
        return None
    return np.argsort(-lengths, kind="stable")


def pack_padded_sequence(input: Tensor, lengths, batch_first: bool = False,
                         enforce_sorted: bool = True) -> PackedSequence:
    """Pack a padded (T, B, *) (or (B, T, *)) batch of sequences with the given lengths.

    Examples
    --------
    >>> x = loom.arange(12.0).reshape(4, 3, 1)
    >>> p = loom.nn.utils.rnn.pack_padded_sequence(x, [2, 4, 1], enforce_sorted=False)
    >>> p.data.flatten().tolist(), p.batch_sizes.tolist()
    ([1.0, 0.0, 2.0, 4.0, 3.0, 7.0, 10.0], [3, 2, 1, 1])
    """
    op = "pack_padded_sequence"
    x = input.transpose(0, 1) if batch_first else input
    lens = _lengths(lengths, op)
    t_max, b = x.shape[0], x.shape[1]
    if lens.size != b:
        raise ShapeError(f"loom.nn.utils.rnn.{op}: {lens.size} lengths for a batch of {b} sequences "
                         f"(input {fmt_shape(input.shape)})")
    if lens.size and lens.max() > t_max:
        raise LoomValueError(f"loom.nn.utils.rnn.{op}: a length of {lens.max()} exceeds the {t_max} time steps of "
                             f"input {fmt_shape(input.shape)}")
    order = _sorted(lens, enforce_sorted, op)
    perm = order if order is not None else np.arange(b)
    sorted_lens = lens[perm]
    batch_sizes = np.array([(sorted_lens > t).sum() for t in range(int(sorted_lens.max(initial=0)))], np.int64)
    rows = np.concatenate([t * b + perm[:n] for t, n in enumerate(batch_sizes)]) if batch_sizes.size else \
        np.zeros(0, np.int64)
    data = x.reshape([t_max * b] + list(x.shape[2:])).index_select(0, tensor(rows.astype(np.int64)))
    if order is None:
        return PackedSequence(data, tensor(batch_sizes), None, None)
    sorted_idx = tensor(order.astype(np.int64))
    return PackedSequence(data, tensor(batch_sizes), sorted_idx, invert_permutation(sorted_idx))


def _layout(sequence: PackedSequence):
    """(batch_sizes, lengths in original order, sorted order) of a PackedSequence as NumPy arrays."""
    bs = sequence.batch_sizes.detach().numpy().astype(np.int64)
    b = int(bs[0]) if bs.size else 0
    sorted_lens = np.array([(bs > k).sum() for k in range(b)], np.int64)
    perm = sequence.sorted_indices.detach().numpy() if sequence.sorted_indices is not None else np.arange(b)
    lens = np.empty(b, np.int64)
    lens[perm] = sorted_lens
    return bs, lens, perm


def pad_packed_sequence(sequence: PackedSequence, batch_first: bool = False, padding_value: float = 0.0,
                        total_length: int | None = None) -> tuple[Tensor, Tensor]:
    """Undo `pack_padded_sequence`: (padded batch, lengths), in the original batch order.

    Examples
    --------
    >>> x = loom.arange(6.0).reshape(3, 2)
    >>> p = loom.nn.utils.rnn.pack_padded_sequence(x, [3, 1])
    >>> y, lens = loom.nn.utils.rnn.pad_packed_sequence(p)
    >>> y.tolist(), lens.tolist()
    ([[0.0, 1.0], [2.0, 0.0], [4.0, 0.0]], [3, 1])
    """
    bs, lens, perm = _layout(sequence)
    b, t_max = lens.size, int(bs.size)
    if total_length is not None:
        if total_length < t_max:
            raise LoomValueError(f"loom.nn.utils.rnn.pad_packed_sequence: total_length {total_length} is shorter "
                                 f"than the longest sequence ({t_max})")
        t_max = total_length
    data = sequence.data
    n = data.shape[0]
    # Position of each padded (t, b) cell in data, or n (an extra padding row) past the sequence's end.
    where_at = np.full((t_max, b), n, np.int64)
    offset = 0
    for t, count in enumerate(bs):
        where_at[t, perm[:count]] = offset + np.arange(count)
        offset += count
    filler = zeros(*([1] + list(data.shape[1:])), dtype=data.dtype) + padding_value
    padded = cat([data, filler], 0).index_select(0, tensor(where_at.reshape(-1)))
    padded = padded.reshape([t_max, b] + list(data.shape[1:]))
    if batch_first:
        padded = padded.transpose(0, 1)
    return padded, tensor(lens)


def pack_sequence(sequences: Sequence[Tensor], enforce_sorted: bool = True) -> PackedSequence:
    """Pack a list of (L_i, *) sequences.

    Examples
    --------
    >>> p = loom.nn.utils.rnn.pack_sequence([loom.ones(3), loom.ones(2)])
    >>> p.batch_sizes.tolist()
    [2, 2, 1]
    """
    lengths = [s.shape[0] for s in sequences]
    return pack_padded_sequence(pad_sequence(sequences), lengths, enforce_sorted=enforce_sorted)


def unpack_sequence(packed_sequences: PackedSequence) -> list[Tensor]:
    """Undo `pack_sequence`: the list of (L_i, *) sequences."""
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths.tolist(), batch_first=True)
