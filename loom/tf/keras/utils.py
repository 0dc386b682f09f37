"""`keras.utils`: one-hot labels, sequence padding, seeding and normalization helpers."""
from __future__ import annotations

import random as _py_random

import numpy as np

from loom.tf import random as _random


def to_categorical(y, num_classes=None, dtype="float64") -> np.ndarray:
    """One-hot rows for integer labels `y` (float64 NumPy, as Keras 3)."""
    a = np.asarray(y, dtype=np.int64)
    if a.ndim > 1 and a.shape[-1] == 1:
        a = a[..., 0]
    n = int(num_classes) if num_classes is not None else int(a.max()) + 1
    out = np.zeros(a.shape + (n,), dtype=dtype)
    np.put_along_axis(out, a[..., None], 1, axis=-1)
    return out


def set_random_seed(seed: int) -> None:
    """Seed Python, NumPy and loom.tf's random numbers."""
    _py_random.seed(seed)
    np.random.seed(seed)
    _random.set_seed(seed)


def normalize(x, axis=-1, order=2):
    """`x` divided by its `order`-norm along `axis`: a NumPy array keeps its float dtype (integers become
    float64), other input (lists, tensors) gives a float32 tensor, as Keras's."""
    if isinstance(x, np.ndarray):
        a = x if x.dtype.kind == "f" else x.astype(np.float64)
    else:
        a = np.asarray(x.numpy() if hasattr(x, "numpy") else x, dtype=np.float32)
    n = np.linalg.norm(a, ord=order, axis=axis, keepdims=True)
    out = (a / np.where(n == 0, 1, n)).astype(a.dtype)
    if isinstance(x, np.ndarray):
        return out
    import loom
    return loom.tensor(out)


def pad_sequences(sequences, maxlen=None, dtype="int32", padding="pre", truncating="pre", value=0.0) -> np.ndarray:
    """A [len(sequences), maxlen] array of the sequences, padded with `value` and truncated to `maxlen`
    ('pre': at the start, 'post': at the end), as `keras.utils.pad_sequences`."""
    if padding not in ("pre", "post") or truncating not in ("pre", "post"):
        from loom.errors import LoomValueError
        raise LoomValueError(f"loom.tf.keras.utils.pad_sequences: padding and truncating must be 'pre' or 'post', "
                             f"got padding={padding!r}, truncating={truncating!r}")
    seqs = [np.asarray(s) for s in sequences]
    n = max((len(s) for s in seqs), default=0) if maxlen is None else int(maxlen)
    tail = next((s.shape[1:] for s in seqs if len(s)), ())
    out = np.full((len(seqs), n) + tuple(tail), value, dtype=dtype)
    for i, s in enumerate(seqs):
        if not len(s) or n == 0:
            continue
        s = s[-n:] if truncating == "pre" else s[:n]
        if padding == "post":
            out[i, :len(s)] = s
        else:
            out[i, -len(s):] = s
    return out


from loom.tf._unsupported import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr("loom.tf.keras.utils", "tf.keras.utils")
