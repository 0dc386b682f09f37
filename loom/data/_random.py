"""Where loom.data's randomness comes from: NumPy generators seeded from loom's generators."""
from __future__ import annotations

import numpy as np

from loom.tensor import Generator, default_generator
from loom.errors import LoomTypeError


def numpy_rng(generator=None, opname: str = "loom.data") -> np.random.Generator:
    """A NumPy Generator for one draw (an epoch's permutation, a split).

    A loom `Generator` (or the default one, seeded by `loom.manual_seed`) gives
    one 64-bit key per call, so consecutive epochs differ and a reseed replays
    them; a NumPy Generator is used as it is.
    """
    if generator is None:
        return np.random.default_rng(default_generator.next_key())
    if isinstance(generator, Generator):
        return np.random.default_rng(generator.next_key())
    if isinstance(generator, np.random.Generator):
        return generator
    raise LoomTypeError(f"{opname}: generator must be a loom.Generator or a numpy.random.Generator, "
                        f"got {type(generator).__name__}")


def seed_from(generator=None, opname: str = "loom.data") -> int:
    """A 63-bit seed drawn from `generator` (as `numpy_rng`), for worker and pipeline seeding."""
    if generator is None or isinstance(generator, Generator):
        return (generator or default_generator).next_key() >> 1
    return int(numpy_rng(generator, opname).integers(0, 2 ** 63 - 1))


# The generator that random transforms draw from when they were not given one.
# DataLoader workers and pipeline transformers install a generator seeded per
# batch or per example, so results do not depend on which process did the work.
_current: list[np.random.Generator] = [np.random.default_rng()]


def get_rng() -> np.random.Generator:
    """The NumPy Generator random transforms use by default (see `use_rng`)."""
    return _current[-1]


class use_rng:
    """Make `rng` the default randomness of loom.data.transforms inside a `with` block.

    Examples
    --------
    >>> from loom.data.transforms import RandomHorizontalFlip, use_rng
    >>> with use_rng(np.random.default_rng(0)):
    ...     a = RandomHorizontalFlip()(np.arange(4).reshape(1, 1, 4))
    """

    def __init__(self, rng: np.random.Generator | int) -> None:
        self.rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)

    def __enter__(self) -> np.random.Generator:
        _current.append(self.rng)
        return self.rng

    def __exit__(self, *exc) -> None:
        _current.pop()


def manual_seed(seed: int) -> None:
    """Reseed the default randomness of loom.data.transforms (outside any `use_rng` block)."""
    _current[0] = np.random.default_rng(seed)
