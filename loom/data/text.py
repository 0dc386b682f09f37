"""Text tokenisation: characters (a vocabulary built from a corpus) and UTF-8 bytes (a fixed vocabulary of 256)."""
from __future__ import annotations

import json
import os
import tempfile
from typing import Iterable

import numpy as np

from loom.errors import LoomError, LoomValueError


def _ids(ids) -> list[int]:
    """Token ids from a list, a NumPy array or a loom Tensor."""
    if hasattr(ids, "tolist"):
        ids = ids.tolist()
    if isinstance(ids, int):
        return [ids]
    return [int(i) for i in ids]


def _write_json(path: str | os.PathLike, obj: dict) -> None:
    """Write JSON atomically (temp file, fsync, rename)."""
    path = os.fspath(path)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=".tok-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(obj, f, ensure_ascii=False)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def _read_json(path: str | os.PathLike, kind: str) -> dict:
    with open(path, encoding="utf-8") as f:
        obj = json.load(f)
    if not isinstance(obj, dict) or obj.get("type") != kind:
        raise LoomError(f"loom.data.text: {os.fspath(path)} is not a saved {kind} tokenizer "
                        f"(type {obj.get('type') if isinstance(obj, dict) else None!r})")
    return obj


class CharTokenizer:
    """One token per distinct character of a corpus (sorted by code point).

    Parameters
    ----------
    text : str, optional
        The corpus to take the characters from.
    vocab : iterable of str, optional
        The characters, in id order (instead of `text`).

    Attributes
    ----------
    vocab : list of str
    stoi : dict str -> int
    itos : dict int -> str

    Examples
    --------
    >>> tok = loom.data.text.CharTokenizer("hello")
    >>> tok.vocab, tok.encode("hole"), tok.decode([3, 2, 0])
    (['e', 'h', 'l', 'o'], [1, 3, 2, 0], 'ole')
    """

    def __init__(self, text: str | None = None, vocab: Iterable[str] | None = None) -> None:
        if (text is None) == (vocab is None):
            raise LoomValueError("loom.data.text.CharTokenizer: give exactly one of text or vocab")
        chars = sorted(set(text)) if text is not None else list(vocab)  # type: ignore[arg-type]
        if any(not isinstance(c, str) or len(c) != 1 for c in chars) or len(set(chars)) != len(chars):
            raise LoomValueError("loom.data.text.CharTokenizer: vocab must be distinct single characters")
        self.vocab: list[str] = chars
        self.stoi = {c: i for i, c in enumerate(chars)}
        self.itos = dict(enumerate(chars))

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def __len__(self) -> int:
        return len(self.vocab)

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`; a character outside the vocabulary raises ValueError."""
        try:
            return [self.stoi[c] for c in text]
        except KeyError as e:
            raise LoomValueError(f"loom.data.text.CharTokenizer.encode: character {e.args[0]!r} is not in the "
                                 f"vocabulary of {len(self.vocab)} characters") from None

    def encode_array(self, text: str) -> np.ndarray:
        """`encode` as an int64 array, fast for whole corpora."""
        codes = np.frombuffer(text.encode("utf-32-le"), dtype="<u4")
        table = np.full(max(map(ord, self.vocab), default=0) + 1, -1, np.int64)
        table[[ord(c) for c in self.vocab]] = np.arange(len(self.vocab))
        out = np.where(codes < len(table), table[np.minimum(codes, len(table) - 1)], -1)
        if np.any(out < 0):
            bad = chr(int(codes[np.argmax(out < 0)]))
            raise LoomValueError(f"loom.data.text.CharTokenizer.encode: character {bad!r} is not in the vocabulary of "
                                 f"{len(self.vocab)} characters")
        return out

    def decode(self, ids) -> str:
        """The text of token ids (a list, NumPy array or loom Tensor)."""
        ids = _ids(ids)
        try:
            return "".join(self.itos[i] for i in ids)
        except KeyError as e:
            raise LoomValueError(f"loom.data.text.CharTokenizer.decode: id {e.args[0]} is outside the vocabulary "
                                 f"(size {len(self.vocab)})") from None

    def save(self, path: str | os.PathLike) -> None:
        """Write the vocabulary as JSON: {"type": "char", "vocab": [...]}."""
        _write_json(path, {"type": "char", "vocab": self.vocab})

    @classmethod
    def load(cls, path: str | os.PathLike) -> CharTokenizer:
        """Read a tokenizer written by `save`."""
        return cls(vocab=_read_json(path, "char")["vocab"])

    def __eq__(self, other) -> bool:
        return isinstance(other, CharTokenizer) and self.vocab == other.vocab

    def __repr__(self) -> str:
        return f"CharTokenizer(vocab_size={len(self.vocab)})"


class ByteTokenizer:
    """UTF-8 bytes as tokens: vocabulary 256, every string round-trips.

    Parameters
    ----------
    errors : str
        How `decode` treats byte sequences that are not valid UTF-8 (as
        `bytes.decode`). Default: "replace".

    Examples
    --------
    >>> tok = loom.data.text.ByteTokenizer()
    >>> tok.encode("hé"), tok.decode(tok.encode("hé")), tok.vocab_size
    ([104, 195, 169], 'hé', 256)
    """

    vocab_size = 256

    def __init__(self, errors: str = "replace") -> None:
        self.errors = errors

    def __len__(self) -> int:
        return 256

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def encode_array(self, text: str) -> np.ndarray:
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int64)

    def decode(self, ids) -> str:
        ids = _ids(ids)
        if any(not 0 <= i < 256 for i in ids):
            raise LoomValueError(f"loom.data.text.ByteTokenizer.decode: ids must be in [0, 256), got "
                                 f"{[i for i in ids if not 0 <= i < 256][:5]}")
        return bytes(ids).decode("utf-8", errors=self.errors)

    def save(self, path: str | os.PathLike) -> None:
        _write_json(path, {"type": "byte", "errors": self.errors})

    @classmethod
    def load(cls, path: str | os.PathLike) -> ByteTokenizer:
        return cls(errors=_read_json(path, "byte").get("errors", "replace"))

    def __repr__(self) -> str:
        return "ByteTokenizer(vocab_size=256)"
