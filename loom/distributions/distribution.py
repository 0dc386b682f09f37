"""The `Distribution` base class: shapes, sampling and argument checks shared by every family."""
from __future__ import annotations

import warnings

from loom import _api as loom
from loom.distributions import constraints
from loom.distributions.utils import lazy_property
from loom.errors import LoomError, LoomTypeError, LoomValueError, ShapeError, fmt_shape
from loom.runtime import realize as _realize
from loom.tensor import Size, Tensor

__all__ = ["Distribution"]


def _tracing() -> bool:
    """Inside a `loom.function` trace, values are pending: they cannot be read to validate them."""
    return _realize.active_trace is not None


class Distribution:
    """The base of loom's probability distributions, with `torch.distributions.Distribution`'s interface.

    A distribution has a ``batch_shape`` (independent, differently parameterised copies) and an
    ``event_shape`` (the shape of one draw). ``sample(sample_shape)`` returns a Tensor of shape
    ``sample_shape + batch_shape + event_shape``; ``rsample`` does the same differentiably where
    ``has_rsample``. Random numbers come from loom's generator (`loom.manual_seed`).

    With ``validate_args`` (the default, as in PyTorch; `set_default_validate_args` changes it) the
    parameters are checked against ``arg_constraints`` at construction and the values given to
    ``log_prob``/``cdf`` against ``support``, raising a `loom.LoomValueError` naming the parameter,
    its shape and the constraint. Checks read the values, so they are skipped for values pending
    inside a `loom.function` trace.

    Parameters
    ----------
    batch_shape : tuple of int
    event_shape : tuple of int
    validate_args : bool, optional
        Check parameters and values (default: `Distribution`'s class default, True).

    Examples
    --------
    >>> d = loom.distributions.Normal(loom.zeros(3), 1.0)
    >>> d.batch_shape, d.event_shape
    (loom.Size([3]), loom.Size([]))
    >>> d.sample((2,)).shape
    loom.Size([2, 3])
    """

    has_rsample = False
    has_enumerate_support = False
    _validate_args = True

    @staticmethod
    def set_default_validate_args(value: bool) -> None:
        """Turn argument and value checks on or off for distributions created from now on.

        Examples
        --------
        >>> loom.distributions.Distribution.set_default_validate_args(True)
        """
        if value not in (True, False):
            raise LoomValueError(f"loom.distributions.Distribution.set_default_validate_args: expected a bool, "
                                 f"got {value!r}")
        Distribution._validate_args = value

    def __init__(self, batch_shape=Size(), event_shape=Size(), validate_args: bool | None = None) -> None:
        self._batch_shape = Size(batch_shape)
        self._event_shape = Size(event_shape)
        if validate_args is not None:
            self._validate_args = validate_args
        if self._validate_args and not _tracing():
            try:
                arg_constraints = self.arg_constraints
            except NotImplementedError:
                arg_constraints = {}
                warnings.warn(f"{type(self).__name__} does not define `arg_constraints`; define it, or set "
                              "validate_args=False, to skip the checks", stacklevel=2)
            for param, constraint in arg_constraints.items():
                if constraints.is_dependent(constraint):
                    continue
                if param not in self.__dict__ and isinstance(getattr(type(self), param, None), lazy_property):
                    continue  # Not given: derived from another parameter, which is checked.
                value = getattr(self, param)
                if not bool(constraint.check(value).all()):
                    raise LoomValueError(
                        f"loom.distributions.{type(self).__name__}: expected parameter {param} (Tensor of shape "
                        f"{fmt_shape(value.shape)}) to satisfy the constraint {constraint!r}, but found invalid "
                        f"values:\n{value}")

    def expand(self, batch_shape, _instance=None) -> "Distribution":
        """A new distribution with its batch dimensions broadcast to `batch_shape` (parameters are expanded views).

        Examples
        --------
        >>> loom.distributions.Normal(0.0, 1.0).expand((2, 3)).batch_shape
        loom.Size([2, 3])
        """
        raise NotImplementedError(f"loom.distributions.{type(self).__name__}.expand is not implemented")

    @property
    def batch_shape(self) -> Size:
        """The shape over which parameters are batched."""
        return self._batch_shape

    @property
    def event_shape(self) -> Size:
        """The shape of a single sample (without batching)."""
        return self._event_shape

    @property
    def arg_constraints(self) -> dict[str, constraints.Constraint]:
        """The constraint each parameter must satisfy, by name."""
        raise NotImplementedError(f"loom.distributions.{type(self).__name__} does not define arg_constraints")

    @property
    def support(self) -> constraints.Constraint:
        """The constraint the samples satisfy."""
        raise NotImplementedError(f"loom.distributions.{type(self).__name__} does not define support")

    @property
    def mean(self) -> Tensor:
        """The mean of the distribution."""
        raise NotImplementedError(f"loom.distributions.{type(self).__name__}.mean is not implemented")

    @property
    def mode(self) -> Tensor:
        """The mode of the distribution."""
        raise NotImplementedError(f"loom.distributions.{type(self).__name__}.mode is not implemented")

    @property
    def variance(self) -> Tensor:
        """The variance of the distribution."""
        raise NotImplementedError(f"loom.distributions.{type(self).__name__}.variance is not implemented")

    @property
    def stddev(self) -> Tensor:
        """The standard deviation of the distribution."""
        return self.variance.sqrt()

    def sample(self, sample_shape=Size()) -> Tensor:
        """Draw samples of shape ``sample_shape + batch_shape + event_shape`` (not differentiable)."""
        with loom.no_grad():
            return self.rsample(sample_shape)

    def rsample(self, sample_shape=Size()) -> Tensor:
        """Draw reparameterised samples, differentiable in the parameters (where ``has_rsample``)."""
        raise NotImplementedError(f"loom.distributions.{type(self).__name__} has no reparameterised sampler "
                                  "(rsample); use sample()")

    def sample_n(self, n: int) -> Tensor:
        """`n` samples: ``sample((n,))``."""
        warnings.warn("sample_n will be deprecated. Use .sample((n,)) instead", UserWarning, stacklevel=2)
        return self.sample(Size((n,)))

    def log_prob(self, value: Tensor) -> Tensor:
        """The log of the probability density (or mass) at `value`."""
        raise NotImplementedError(f"loom.distributions.{type(self).__name__}.log_prob is not implemented")

    def cdf(self, value: Tensor) -> Tensor:
        """The cumulative distribution function at `value`."""
        raise NotImplementedError(f"loom.distributions.{type(self).__name__}.cdf is not implemented")

    def icdf(self, value: Tensor) -> Tensor:
        """The inverse cumulative distribution function at `value`."""
        raise NotImplementedError(f"loom.distributions.{type(self).__name__}.icdf is not implemented")

    def enumerate_support(self, expand: bool = True) -> Tensor:
        """All values of a discrete support, along a new leading dimension."""
        raise NotImplementedError(f"loom.distributions.{type(self).__name__}.enumerate_support is not implemented")

    def entropy(self) -> Tensor:
        """The entropy, per batch element."""
        raise NotImplementedError(f"loom.distributions.{type(self).__name__}.entropy is not implemented")

    def perplexity(self) -> Tensor:
        """exp(entropy)."""
        return self.entropy().exp()

    def _extended_shape(self, sample_shape=Size()) -> Size:
        if not isinstance(sample_shape, (tuple, list, Size)):
            raise LoomTypeError(f"loom.distributions.{type(self).__name__}: sample_shape must be a tuple of ints, "
                                f"got {sample_shape!r}")
        return Size(tuple(sample_shape) + tuple(self._batch_shape) + tuple(self._event_shape))

    def _validate_sample(self, value) -> None:
        """Check `value`'s shape broadcasts with the distribution's and that it lies in the support."""
        name = f"loom.distributions.{type(self).__name__}"
        if not isinstance(value, Tensor):
            raise LoomTypeError(f"{name}: the value must be a Tensor, got {type(value).__name__}")
        n = len(self._event_shape)
        if value.ndim < n or tuple(value.shape[value.ndim - n:]) != tuple(self._event_shape):
            raise ShapeError(f"{name}: the value's rightmost dimensions {fmt_shape(value.shape)} must match the "
                             f"event shape {fmt_shape(self._event_shape)}")
        actual = tuple(value.shape)
        expected = tuple(self._batch_shape) + tuple(self._event_shape)
        for i, j in zip(reversed(actual), reversed(expected)):
            if i != 1 and j != 1 and i != j:
                raise ShapeError(f"{name}: the value's shape {fmt_shape(actual)} does not broadcast with "
                                 f"batch_shape + event_shape {fmt_shape(expected)}")
        if _tracing():
            return
        try:
            support = self.support
        except NotImplementedError:
            warnings.warn(f"{type(self).__name__} does not define `support`, so values cannot be validated",
                          stacklevel=2)
            return
        if not bool(support.check(value).all()):
            raise LoomValueError(f"{name}: expected value argument (Tensor of shape {fmt_shape(actual)}) to be "
                                 f"within the support ({support!r}) of the distribution, but found invalid "
                                 f"values:\n{value}")

    def _expand_params(self, cls, batch_shape, _instance, names):
        """`expand` for a family whose parameters `names` (those set) are batch_shape + a per-parameter tail."""
        new = self._get_checked_instance(cls, _instance)
        batch_shape = Size(batch_shape)
        for name in names:
            if name in self.__dict__:
                value = self.__dict__[name]
                tail = tuple(value.shape[len(self._batch_shape):])
                new.__dict__[name] = value.expand(*batch_shape, *tail)
        Distribution.__init__(new, batch_shape, self._event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def _get_checked_instance(self, cls, _instance=None):
        if _instance is None and type(self).__init__ != cls.__init__:
            raise LoomError(f"loom.distributions: subclass {type(self).__name__} of {cls.__name__} that defines a "
                            f"custom __init__ must also define a custom .expand()")
        return type(self).__new__(type(self)) if _instance is None else _instance

    def __repr__(self) -> str:
        names = [k for k in self.arg_constraints if k in self.__dict__]
        args = ", ".join(f"{p}: {self.__dict__[p].item() if self.__dict__[p].numel() == 1 else self.__dict__[p].size()}"
                         for p in names)
        return f"{type(self).__name__}({args})"
