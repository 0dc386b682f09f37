"""Keras lookup and text layers: `StringLookup`, `IntegerLookup`, `TextVectorization`.

loom tensors hold numbers, not strings: string inputs are Python strings,
lists of them or NumPy string arrays, and the layers return int64 loom tensors
(an inverted `StringLookup` returns a NumPy array of bytes, as TensorFlow's
string tensors give from `.numpy()`). Vocabularies built by `adapt` follow
Keras's order: most frequent first, ties broken by the token in descending
order, after the mask and OOV tokens. What Keras computes with FarmHash
(several OOV buckets, `Hashing`) is not reproduced and says so.
"""
from __future__ import annotations

import re
from collections import Counter

import numpy as np

import loom
from loom.errors import LoomValueError
from loom.tensor import Tensor
from loom.tf.keras.engine import KerasTensor, Layer

_PUNCTUATION = re.compile(r'[!"#$%&()\*\+,\-\./:;<=>?@\[\\\]^_`{|}~\']')
_OUTPUT_MODES = ("int", "one_hot", "multi_hot", "count")


def _values(data) -> np.ndarray:
    """An input batch as a NumPy array (str for text, int64 for integers)."""
    if isinstance(data, KerasTensor):
        raise LoomValueError("loom.tf.keras text/lookup layers run on concrete data: loom has no string tensors, "
                             "so they cannot sit inside a functional model; apply them to the data (or in "
                             "Dataset.map) before the model")
    if isinstance(data, Tensor):
        return data.numpy()
    if hasattr(data, "as_numpy_iterator"):  # A tf.data.Dataset.
        parts = [np.asarray(x).reshape(-1) for x in data.as_numpy_iterator()]
        return np.concatenate(parts) if parts else np.zeros(0)
    a = np.asarray(data)
    if a.dtype.kind in "SO":
        a = np.vectorize(lambda s: s.decode() if isinstance(s, bytes) else str(s), otypes=[str])(a) if a.size \
            else a.astype(str)
    return a


def _ordered(counts: Counter) -> list:
    """Tokens by descending count, ties by descending token (Keras's adapt order)."""
    return sorted(counts, key=lambda t: (counts[t], t), reverse=True)


class _IndexLookup(Layer):
    """Shared body of StringLookup and IntegerLookup: token -> index (or back, with `invert`)."""

    _kind = "StringLookup"

    def __init__(self, max_tokens=None, num_oov_indices=1, mask_token=None, oov_token="[UNK]", vocabulary=None,
                 invert=False, output_mode="int", sparse=False, pad_to_max_tokens=False, **kwargs) -> None:
        for k in ("encoding", "vocabulary_dtype", "idf_weights"):
            kwargs.pop(k, None)
        super().__init__(**kwargs)
        if output_mode not in _OUTPUT_MODES:
            raise LoomValueError(f"loom.tf.keras.layers.{self._kind}: output_mode must be one of {_OUTPUT_MODES}, "
                                 f"got {output_mode!r} (tf_idf is not supported)")
        if int(num_oov_indices) > 1:
            raise LoomValueError(f"loom.tf.keras.layers.{self._kind}: num_oov_indices={num_oov_indices} is not "
                                 "supported (Keras hashes OOV tokens into buckets with FarmHash); use 0 or 1")
        if sparse:
            raise LoomValueError(f"loom.tf.keras.layers.{self._kind}: sparse=True is not supported (loom has no "
                                 "sparse tensors)")
        self.max_tokens = max_tokens
        self.num_oov_indices = int(num_oov_indices)
        self.mask_token, self.oov_token = mask_token, oov_token
        self.invert, self.output_mode, self.pad_to_max_tokens = bool(invert), output_mode, bool(pad_to_max_tokens)
        self._tokens: list = []
        self._index = {t: i for i, t in enumerate(self._specials())}
        self._has_vocab = False
        if vocabulary is not None:
            self.set_vocabulary(vocabulary)

    def _specials(self) -> list:
        mask = [self.mask_token] if self.mask_token is not None and self.output_mode == "int" else []
        return mask + [self.oov_token] * self.num_oov_indices

    def _token(self, t):
        return t

    def set_vocabulary(self, vocabulary, idf_weights=None) -> None:
        """Use `vocabulary` (a list or a file with one token a line), without the special tokens."""
        if isinstance(vocabulary, str):
            with open(vocabulary, encoding="utf-8") as f:
                vocabulary = [line.rstrip("\n") for line in f]
        tokens = [self._token(t) for t in _values(vocabulary).reshape(-1).tolist()]
        specials = {self.mask_token, self.oov_token}
        if any(t in specials for t in tokens if t is not None):
            raise LoomValueError(f"loom.tf.keras.layers.{self._kind}: the vocabulary must not contain the mask or "
                                 f"OOV token ({self.mask_token!r}, {self.oov_token!r})")
        if len(set(tokens)) != len(tokens):
            raise LoomValueError(f"loom.tf.keras.layers.{self._kind}: the vocabulary has repeated tokens")
        self._tokens, self._has_vocab = tokens, True
        self._index = {t: i for i, t in enumerate(self.get_vocabulary())}

    def _adapt_tokens(self, tokens) -> None:
        counts = Counter(tokens)
        for s in (self.mask_token, self.oov_token):
            counts.pop(s, None)
        order = _ordered(counts)
        if self.max_tokens is not None:
            order = order[:max(0, int(self.max_tokens) - len(self._specials()))]
        self.set_vocabulary(order)

    def adapt(self, data, batch_size=None, steps=None) -> None:
        """Build the vocabulary from `data` (an array, list or Dataset), most frequent tokens first."""
        self._adapt_tokens([self._token(t) for t in _values(data).reshape(-1).tolist()])

    def get_vocabulary(self, include_special_tokens: bool = True) -> list:
        """The tokens by index (mask and OOV tokens first unless `include_special_tokens=False`)."""
        wrap = np.int64 if self._kind == "IntegerLookup" else np.str_  # As Keras's NumPy-typed tokens.
        return (self._specials() if include_special_tokens else []) + [wrap(t) for t in self._tokens]

    def vocabulary_size(self) -> int:
        """The number of indices the layer produces (special tokens included)."""
        return len(self._specials()) + len(self._tokens)

    def _lookup(self, a: np.ndarray) -> np.ndarray:
        if not self._has_vocab:
            raise LoomValueError(f"loom.tf.keras.layers.{self._kind}: no vocabulary; pass vocabulary= or call "
                                 "adapt() first")
        index = self._index
        oov = len(self._specials()) - 1 if self.num_oov_indices else None
        flat = []
        for t in a.reshape(-1).tolist():
            t = self._token(t)
            if self.mask_token is not None and t == self.mask_token:
                flat.append(0)
            elif t in index and index[t] >= len(self._specials()):
                flat.append(index[t])
            elif oov is None:
                raise LoomValueError(f"loom.tf.keras.layers.{self._kind}: token {t!r} is not in the vocabulary "
                                     "and num_oov_indices=0")
            else:
                flat.append(oov)
        return np.asarray(flat, np.int64).reshape(a.shape)

    def _encode(self, idx: np.ndarray, ragged_lengths=None):
        if self.output_mode == "int":
            return loom.tensor(idx)
        depth = int(self.max_tokens) if self.pad_to_max_tokens and self.max_tokens else self.vocabulary_size()
        if self.output_mode == "one_hot":
            out = np.zeros(idx.shape + (depth,), np.int64)
            np.put_along_axis(out, idx[..., None], 1, axis=-1)
            return loom.tensor(out)
        rows = idx.reshape(idx.shape[0], -1) if idx.ndim > 1 else idx.reshape(1, -1)
        out = np.zeros((rows.shape[0], depth), np.int64)
        for r, row in enumerate(rows):
            n = row.size if ragged_lengths is None else ragged_lengths[r]
            np.add.at(out[r], row[:n], 1)
        if self.output_mode == "multi_hot":
            out = (out > 0).astype(np.int64)
        return loom.tensor(out if idx.ndim > 1 or ragged_lengths is not None else out[0])

    def _invert(self, idx: np.ndarray):
        vocab = self.get_vocabulary()
        oov = self.oov_token
        return [vocab[i] if 0 <= i < len(vocab) else oov for i in idx.reshape(-1).tolist()]

    def __call__(self, inputs, *args, **kwargs):
        # Not Layer.__call__: string inputs must not be converted to (numeric) tensors.
        return self.call(inputs)

    def call(self, inputs):
        a = _values(inputs)
        if self.invert:
            return self._inverted(a)
        return self._encode(self._lookup(a))


class StringLookup(_IndexLookup):
    """Map strings to int64 indices from a vocabulary (given or `adapt`ed), as `tf.keras.layers.StringLookup`.

    Examples
    --------
    >>> import loom.tf as tf
    >>> lookup = tf.keras.layers.StringLookup(vocabulary=["a", "b"])
    >>> lookup(["b", "z", "a"]).numpy().tolist()
    [2, 0, 1]
    """

    _kind = "StringLookup"

    def _token(self, t):
        return t.decode() if isinstance(t, bytes) else t

    def _inverted(self, a):
        words = [str(w).encode() for w in self._invert(np.asarray(a, np.int64))]
        return np.asarray(words, dtype=object).reshape(np.shape(a))


class IntegerLookup(_IndexLookup):
    """Map integers to int64 indices from a vocabulary, as `tf.keras.layers.IntegerLookup` (OOV token -1).

    Examples
    --------
    >>> import loom.tf as tf
    >>> lookup = tf.keras.layers.IntegerLookup(vocabulary=[10, 20])
    >>> lookup([20, 7]).numpy().tolist()
    [2, 0]
    """

    _kind = "IntegerLookup"

    def __init__(self, max_tokens=None, num_oov_indices=1, mask_token=None, oov_token=-1, vocabulary=None,
                 **kwargs) -> None:
        super().__init__(max_tokens=max_tokens, num_oov_indices=num_oov_indices, mask_token=mask_token,
                         oov_token=oov_token, vocabulary=vocabulary, **kwargs)

    def _token(self, t):
        return int(t)

    def _inverted(self, a):
        return loom.tensor(np.asarray(self._invert(np.asarray(a, np.int64)), np.int64).reshape(np.shape(a)))


def _standardize(text: str, how) -> str:
    if how is None:
        return text
    if how in ("lower_and_strip_punctuation", "lower"):
        text = text.lower()
    if how in ("lower_and_strip_punctuation", "strip_punctuation"):
        text = _PUNCTUATION.sub("", text)
    return text


def _split(text: str, how) -> list:
    if how is None:
        return [text]
    if how == "whitespace":
        return text.split()
    return list(text)  # "character"


def _ngrams(tokens: list, n) -> list:
    if n is None:
        return tokens
    widths = range(1, int(n) + 1) if isinstance(n, int) else [int(w) for w in n]
    return [" ".join(tokens[i:i + w]) for w in widths for i in range(len(tokens) - w + 1)]


class TextVectorization(_IndexLookup):
    """Standardize, split and index text, as `tf.keras.layers.TextVectorization` (int, multi_hot, count).

    Examples
    --------
    >>> import loom.tf as tf
    >>> vec = tf.keras.layers.TextVectorization(output_sequence_length=4)
    >>> vec.adapt(["the cat sat", "the dog"])
    >>> vec(["The dog sat!"]).numpy().tolist()
    [[2, 4, 3, 0]]
    """

    _kind = "TextVectorization"

    def __init__(self, max_tokens=None, standardize="lower_and_strip_punctuation", split="whitespace", ngrams=None,
                 output_mode="int", output_sequence_length=None, pad_to_max_tokens=False, vocabulary=None,
                 **kwargs) -> None:
        if callable(standardize) or callable(split):
            raise LoomValueError("loom.tf.keras.layers.TextVectorization: callable standardize/split functions are "
                                 "not supported (they take string tensors); give one of the built-in names")
        if standardize not in (None, "lower_and_strip_punctuation", "lower", "strip_punctuation"):
            raise LoomValueError(f"loom.tf.keras.layers.TextVectorization: unknown standardize {standardize!r}")
        if split not in (None, "whitespace", "character"):
            raise LoomValueError(f"loom.tf.keras.layers.TextVectorization: unknown split {split!r}")
        if output_mode == "one_hot":
            raise LoomValueError("loom.tf.keras.layers.TextVectorization: output_mode must be 'int', 'multi_hot' or "
                                 "'count' ('tf_idf' is not supported)")
        self.standardize, self.split, self.ngrams = standardize, split, ngrams
        self.output_sequence_length = None if output_sequence_length is None else int(output_sequence_length)
        super().__init__(max_tokens=max_tokens, mask_token="" if output_mode == "int" else None,
                         vocabulary=vocabulary, output_mode=output_mode, pad_to_max_tokens=pad_to_max_tokens,
                         **kwargs)

    def _texts(self, data) -> list:
        a = _values(data)
        if a.ndim == 2 and a.shape[1] == 1:
            a = a[:, 0]
        if a.dtype.kind not in "US":
            raise LoomValueError(f"loom.tf.keras.layers.TextVectorization: expected strings, got {a.dtype} data")
        return [_ngrams(_split(_standardize(s, self.standardize), self.split), self.ngrams)
                for s in a.reshape(-1).tolist()]

    def adapt(self, data, batch_size=None, steps=None) -> None:
        """Build the vocabulary from the tokens of `data` (strings), most frequent first."""
        self._adapt_tokens([t for toks in self._texts(data) for t in toks])

    def call(self, inputs):
        texts = self._texts(inputs)
        single = np.ndim(_values(inputs)) == 0
        if self.output_mode != "int":
            lengths = [len(t) for t in texts]
            width = max(lengths, default=0)
            idx = np.zeros((len(texts), width), np.int64)
            for r, toks in enumerate(texts):
                if toks:
                    idx[r, :len(toks)] = self._lookup(np.asarray(toks, dtype=object))
            out = self._encode(idx, lengths)
            return out[0] if single else out
        width = self.output_sequence_length or max((len(t) for t in texts), default=0)
        idx = np.zeros((len(texts), width), np.int64)
        for r, toks in enumerate(texts):
            toks = toks[:width]
            if toks:
                idx[r, :len(toks)] = self._lookup(np.asarray(toks, dtype=object))
        return loom.tensor(idx[0] if single else idx)


class Hashing(Layer):
    """`tf.keras.layers.Hashing` is not available: Keras buckets with FarmHash64, which loom does not reproduce."""

    def __init__(self, num_bins, *args, **kwargs) -> None:
        raise LoomValueError("loom.tf.keras.layers.Hashing is not supported: Keras's bucket of a value comes from "
                             "TensorFlow's FarmHash64 fingerprint, which loom does not reproduce; use IntegerLookup or "
                             "StringLookup with a vocabulary, or bucket integers yourself (tf.math.floormod(x, "
                             "num_bins))")
