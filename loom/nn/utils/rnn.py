"""Sequence batching helpers (`pad_sequence`, `unpad_sequence`); PackedSequence is not supported."""
from __future__ import annotations

from typing import Sequence

from loom.errors import ShapeError, fmt_shape
from loom.functional.shape import pad, stack
from loom.tensor import Tensor


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
