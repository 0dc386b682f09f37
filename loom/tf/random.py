"""`tf.random`: seeded random tensors drawn from loom's counter-based generator.

Values differ from TensorFlow's (different generators); distributions, shapes,
dtypes and reproducibility under `set_seed` follow TensorFlow.
"""
from __future__ import annotations

import loom
from loom.tensor import Generator as _Generator, Tensor as _Tensor
from loom.tf._core import _ints, as_dtype, convert_to_tensor as _t, float32 as _float32

_global_seed: list = [None]
_op_counts: dict = {}


def set_seed(seed: int) -> None:
    """Seed every later random op (and Keras initializers), as `tf.random.set_seed`."""
    _global_seed[0] = int(seed)
    _op_counts.clear()
    loom.manual_seed(int(seed))


def _gen(seed):
    """A generator for an op-level `seed` (its own stream), else loom's global one."""
    if seed is None:
        return None
    n = _op_counts.get(seed, 0)
    _op_counts[seed] = n + 1
    base = 0 if _global_seed[0] is None else _global_seed[0]
    return _Generator((int(seed) * 1000003 + base * 7919 + n) & 0xFFFFFFFF)


def normal(shape, mean=0.0, stddev=1.0, dtype=_float32, seed=None, name=None) -> _Tensor:
    """Normal samples of `shape` with `mean` and `stddev`."""
    d = as_dtype(dtype)
    return loom.randn(*_ints(shape), dtype=d, generator=_gen(seed)) * stddev + mean


def uniform(shape, minval=0, maxval=None, dtype=_float32, seed=None, name=None) -> _Tensor:
    """Uniform samples in [minval, maxval) (maxval 1 for floats; required for ints)."""
    d = as_dtype(dtype)
    if not d.is_floating_point:
        if maxval is None:
            raise loom.LoomValueError("loom.tf.random.uniform: integer dtypes need maxval")
        return loom.randint(int(minval), int(maxval), tuple(_ints(shape)), dtype=d, generator=_gen(seed))
    hi = 1.0 if maxval is None else maxval
    return loom.rand(*_ints(shape), dtype=d, generator=_gen(seed)) * (hi - minval) + minval


def truncated_normal(shape, mean=0.0, stddev=1.0, dtype=_float32, seed=None, name=None) -> _Tensor:
    """Normal samples redrawn until within two standard deviations of the mean."""
    d = as_dtype(dtype)
    g = _gen(seed)
    x = loom.randn(*_ints(shape), dtype=d, generator=g)
    for _ in range(8):
        bad = loom.abs(x) > 2
        if not bool(bad.any()):
            break
        x = loom.where(bad, loom.randn(*x.shape, dtype=d, generator=g), x)
    return loom.clamp(x, -2.0, 2.0) * stddev + mean


def shuffle(value, seed=None, name=None) -> _Tensor:
    """`value` with its first dimension randomly permuted."""
    v = _t(value)
    perm = loom.randperm(v.shape[0], generator=_gen(seed))
    return loom.index_select(v, 0, perm)


def categorical(logits, num_samples, dtype=None, seed=None, name=None) -> _Tensor:
    """Samples of class indices (int64) from unnormalised log-probabilities, one row per batch entry."""
    p = loom.softmax(_t(logits), dim=-1)
    out = loom.multinomial(p, int(num_samples), replacement=True, generator=_gen(seed))
    return out.to(as_dtype(dtype) if dtype is not None else loom.int64)


def _stateless_gen(seed):
    s = _ints(seed.numpy().reshape(-1).tolist() if isinstance(seed, _Tensor) else seed)
    if len(s) != 2:
        raise loom.LoomValueError(f"loom.tf.random.stateless_*: seed must be a pair of integers, got {s}")
    return _Generator(((s[0] & 0xFFFFFFFF) * 2654435761 + (s[1] & 0xFFFFFFFF)) & 0xFFFFFFFFFFFF)


def stateless_normal(shape, seed, mean=0.0, stddev=1.0, dtype=_float32, name=None, alg=None) -> _Tensor:
    """Normal samples that depend only on the `seed` pair."""
    return loom.randn(*_ints(shape), dtype=as_dtype(dtype), generator=_stateless_gen(seed)) * stddev + mean


def stateless_uniform(shape, seed, minval=0, maxval=None, dtype=_float32, name=None, alg=None) -> _Tensor:
    """Uniform samples in [minval, maxval) that depend only on the `seed` pair."""
    d = as_dtype(dtype)
    g = _stateless_gen(seed)
    if not d.is_floating_point:
        if maxval is None:
            raise loom.LoomValueError("loom.tf.random.stateless_uniform: integer dtypes need maxval")
        return loom.randint(int(minval), int(maxval), tuple(_ints(shape)), dtype=d, generator=g)
    hi = 1.0 if maxval is None else maxval
    return loom.rand(*_ints(shape), dtype=d, generator=g) * (hi - minval) + minval


def _numpy_rng(seed):
    """A NumPy generator seeded from loom's stream (for distributions loom has no primitive for)."""
    word = loom.randint(0, 2 ** 31 - 1, (1,), generator=_gen(seed)).item()
    return __import__("numpy").random.default_rng(int(word))


def poisson(shape, lam, dtype=_float32, seed=None, name=None) -> _Tensor:
    """Poisson samples of shape `shape + lam.shape`."""
    import numpy as np
    lam_a = np.asarray(_t(lam).numpy(), np.float64)
    out = _numpy_rng(seed).poisson(lam_a, size=tuple(_ints(shape)) + lam_a.shape)
    return loom.tensor(out.astype(as_dtype(dtype).np))


def gamma(shape, alpha, beta=None, dtype=_float32, seed=None, name=None) -> _Tensor:
    """Gamma samples (shape `alpha`, rate `beta`) of shape `shape + broadcast(alpha, beta).shape`."""
    import numpy as np
    a = np.asarray(_t(alpha).numpy(), np.float64)
    b = np.ones_like(a) if beta is None else np.asarray(_t(beta).numpy(), np.float64)
    a, b = np.broadcast_arrays(a, b)
    out = _numpy_rng(seed).gamma(a, 1.0 / b, size=tuple(_ints(shape)) + a.shape)
    return loom.tensor(out.astype(as_dtype(dtype).np))


class Generator:
    """`tf.random.Generator`: a random stream of its own (`from_seed`, `normal`, `uniform`, ...)."""

    def __init__(self, seed: int) -> None:
        self._gen = _Generator(int(seed) & 0xFFFFFFFFFFFF)

    @classmethod
    def from_seed(cls, seed, alg=None) -> Generator:
        return cls(seed)

    @classmethod
    def from_non_deterministic_state(cls, alg=None) -> Generator:
        import os
        return cls(int.from_bytes(os.urandom(6), "little"))

    def reset_from_seed(self, seed) -> None:
        """Restart the stream from `seed`."""
        self._gen = _Generator(int(seed) & 0xFFFFFFFFFFFF)

    def make_seeds(self, count=1) -> _Tensor:
        """`count` fresh seed pairs (an int64 [2, count] tensor) for the stateless ops."""
        return loom.randint(0, 2 ** 62, (2, int(count)), dtype=loom.int64, generator=self._gen)

    def split(self, count=1) -> list:
        """`count` new independent generators seeded from this one's stream."""
        seeds = loom.randint(0, 2 ** 47, (int(count),), dtype=loom.int64, generator=self._gen).numpy()
        return [Generator(int(s)) for s in seeds]

    def normal(self, shape, mean=0.0, stddev=1.0, dtype=_float32, name=None) -> _Tensor:
        return loom.randn(*_ints(shape), dtype=as_dtype(dtype), generator=self._gen) * stddev + mean

    def uniform(self, shape, minval=0, maxval=None, dtype=_float32, name=None) -> _Tensor:
        d = as_dtype(dtype)
        if not d.is_floating_point:
            if maxval is None:
                raise loom.LoomValueError("loom.tf.random.Generator.uniform: integer dtypes need maxval")
            return loom.randint(int(minval), int(maxval), tuple(_ints(shape)), dtype=d, generator=self._gen)
        hi = 1.0 if maxval is None else maxval
        return loom.rand(*_ints(shape), dtype=d, generator=self._gen) * (hi - minval) + minval

    def truncated_normal(self, shape, mean=0.0, stddev=1.0, dtype=_float32, name=None) -> _Tensor:
        x = loom.randn(*_ints(shape), dtype=as_dtype(dtype), generator=self._gen)
        for _ in range(8):
            bad = loom.abs(x) > 2
            if not bool(bad.any()):
                break
            x = loom.where(bad, loom.randn(*x.shape, dtype=x.dtype, generator=self._gen), x)
        return loom.clamp(x, -2.0, 2.0) * stddev + mean


_global_generator: list = []


def get_global_generator() -> Generator:
    """The one generator seeded from the global seed (created on first use)."""
    if not _global_generator:
        _global_generator.append(Generator(0 if _global_seed[0] is None else _global_seed[0]))
    return _global_generator[0]


from loom.tf._unsupported import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr("loom.tf.random", "tf.random")
