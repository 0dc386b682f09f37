"""Constraints: the sets a distribution's parameters and values live in, as `torch.distributions.constraints`.

A constraint's ``check(value)`` is a boolean Tensor saying, per sample (after reducing its `event_dim`
rightmost dimensions), whether `value` lies in the set.

Examples
--------
>>> from loom.distributions import constraints
>>> constraints.positive.check(loom.tensor([1.0, -1.0])).tolist()
[True, False]
>>> constraints.simplex.check(loom.tensor([0.25, 0.75])).item()
True
"""
from __future__ import annotations

import numpy as np

from loom import _api as loom
from loom.tensor import Tensor

__all__ = ["Constraint", "boolean", "cat", "corr_cholesky", "dependent", "dependent_property", "greater_than",
           "greater_than_eq", "independent", "integer_interval", "interval", "half_open_interval", "is_dependent",
           "less_than", "lower_cholesky", "lower_triangular", "MixtureSameFamilyConstraint", "multinomial",
           "nonnegative", "nonnegative_integer", "one_hot", "positive", "positive_semidefinite",
           "positive_definite", "positive_integer", "real", "real_vector", "simplex", "square", "stack",
           "symmetric", "unit_interval"]


def _t(v) -> Tensor:
    return v if isinstance(v, Tensor) else loom.tensor(v)


def _all_last(ok: Tensor, n: int) -> Tensor:
    """`ok` reduced by `all` over its `n` rightmost dimensions."""
    for _ in range(n):
        ok = ok.all(-1)
    return ok


def _is_integer(v: Tensor) -> Tensor:
    return v == v.floor() if v.dtype.is_floating_point else loom.ones_like(v, dtype=loom.bool)


class Constraint:
    """A region a value may lie in; ``check(value)`` tests membership.

    Attributes ``is_discrete`` (the set is countable) and ``event_dim`` (how many rightmost
    dimensions make one event, reduced in ``check``) are as in PyTorch.

    Examples
    --------
    >>> from loom.distributions import constraints
    >>> constraints.interval(0.0, 2.0).check(loom.tensor([1.0, 3.0])).tolist()
    [True, False]
    """

    is_discrete = False
    event_dim = 0

    def check(self, value) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__}.check")

    def __repr__(self) -> str:
        return type(self).__name__.lstrip("_") + "()"


class _Dependent(Constraint):
    """A placeholder for a support that depends on other parameters; it cannot be checked."""

    def __init__(self, *, is_discrete=NotImplemented, event_dim=NotImplemented) -> None:
        self._is_discrete, self._event_dim = is_discrete, event_dim

    @property
    def is_discrete(self):  # type: ignore[override]
        if self._is_discrete is NotImplemented:
            raise NotImplementedError("loom.distributions: this dependent constraint's is_discrete is unknown")
        return self._is_discrete

    @property
    def event_dim(self):  # type: ignore[override]
        if self._event_dim is NotImplemented:
            raise NotImplementedError("loom.distributions: this dependent constraint's event_dim is unknown")
        return self._event_dim

    def __call__(self, *, is_discrete=NotImplemented, event_dim=NotImplemented):
        return _Dependent(is_discrete=self._is_discrete if is_discrete is NotImplemented else is_discrete,
                          event_dim=self._event_dim if event_dim is NotImplemented else event_dim)

    def check(self, value):
        raise ValueError("loom.distributions: cannot check a dependent constraint (it depends on parameters)")


def is_dependent(constraint) -> bool:
    """Whether `constraint` is a dependent placeholder (left unchecked in argument validation).

    Examples
    --------
    >>> from loom.distributions import constraints
    >>> constraints.is_dependent(constraints.dependent), constraints.is_dependent(constraints.real)
    (True, False)
    """
    return isinstance(constraint, _Dependent)


class dependent_property(property, _Dependent):  # noqa: N801 (PyTorch's name)
    """A property whose value is a constraint depending on the instance (a support with parameters).

    Examples
    --------
    >>> from loom.distributions import constraints
    >>> class D:
    ...     @constraints.dependent_property(is_discrete=False, event_dim=0)
    ...     def support(self):
    ...         return constraints.positive
    >>> D().support
    Positive()
    """

    def __init__(self, fn=None, *, is_discrete=NotImplemented, event_dim=NotImplemented) -> None:
        property.__init__(self, fn)
        _Dependent.__init__(self, is_discrete=is_discrete, event_dim=event_dim)

    def __call__(self, fn):  # type: ignore[override]
        return dependent_property(fn, is_discrete=self._is_discrete, event_dim=self._event_dim)


class _IndependentConstraint(Constraint):
    """`base` with `reinterpreted_batch_ndims` more rightmost dimensions treated as one event."""

    def __init__(self, base_constraint: Constraint, reinterpreted_batch_ndims: int) -> None:
        self.base_constraint, self.reinterpreted_batch_ndims = base_constraint, reinterpreted_batch_ndims

    @property
    def is_discrete(self):  # type: ignore[override]
        return self.base_constraint.is_discrete

    @property
    def event_dim(self):  # type: ignore[override]
        return self.base_constraint.event_dim + self.reinterpreted_batch_ndims

    def check(self, value):
        return _all_last(self.base_constraint.check(value), self.reinterpreted_batch_ndims)

    def __repr__(self) -> str:
        return f"Independent({self.base_constraint!r}, {self.reinterpreted_batch_ndims})"


class MixtureSameFamilyConstraint(Constraint):
    """The support of a MixtureSameFamily: the component's, checked with the component dimension removed."""

    def __init__(self, base_constraint: Constraint) -> None:
        self.base_constraint = base_constraint

    @property
    def is_discrete(self):  # type: ignore[override]
        return self.base_constraint.is_discrete

    @property
    def event_dim(self):  # type: ignore[override]
        return self.base_constraint.event_dim

    def check(self, value):
        value = _t(value)
        result = self.base_constraint.check(value.unsqueeze(-1 - self.event_dim))
        keep = value.ndim - self.event_dim
        return result.reshape(*result.shape[:keep], -1).all(-1)


class _Boolean(Constraint):
    is_discrete = True

    def check(self, value):
        value = _t(value)
        return (value == 0) | (value == 1)


class _OneHot(Constraint):
    is_discrete = True
    event_dim = 1

    def check(self, value):
        value = _t(value)
        return ((value == 0) | (value == 1)).all(-1) & (value.sum(-1) == 1)


class _IntegerInterval(Constraint):
    """Integers in [lower_bound, upper_bound]."""

    is_discrete = True

    def __init__(self, lower_bound, upper_bound) -> None:
        self.lower_bound, self.upper_bound = lower_bound, upper_bound

    def check(self, value):
        value = _t(value)
        return _is_integer(value) & (value >= self.lower_bound) & (value <= self.upper_bound)

    def __repr__(self) -> str:
        return f"IntegerInterval(lower_bound={self.lower_bound}, upper_bound={self.upper_bound})"


class _IntegerGreaterThan(Constraint):
    is_discrete = True

    def __init__(self, lower_bound) -> None:
        self.lower_bound = lower_bound

    def check(self, value):
        value = _t(value)
        return _is_integer(value) & (value >= self.lower_bound)

    def __repr__(self) -> str:
        return f"IntegerGreaterThan(lower_bound={self.lower_bound})"


class _Real(Constraint):
    def check(self, value):
        value = _t(value)
        return value == value  # False only for NaN.


class _GreaterThan(Constraint):
    """Reals above `lower_bound` (strictly)."""

    def __init__(self, lower_bound) -> None:
        self.lower_bound = lower_bound

    def check(self, value):
        return self.lower_bound < _t(value)

    def __repr__(self) -> str:
        return f"GreaterThan(lower_bound={self.lower_bound})"


class _GreaterThanEq(_GreaterThan):
    """Reals at or above `lower_bound`."""

    def check(self, value):
        return self.lower_bound <= _t(value)

    def __repr__(self) -> str:
        return f"GreaterThanEq(lower_bound={self.lower_bound})"


class _Positive(_GreaterThan):
    def __init__(self) -> None:
        super().__init__(0.0)

    def __repr__(self) -> str:
        return "Positive()"


class _LessThan(Constraint):
    """Reals below `upper_bound` (strictly)."""

    def __init__(self, upper_bound) -> None:
        self.upper_bound = upper_bound

    def check(self, value):
        return _t(value) < self.upper_bound

    def __repr__(self) -> str:
        return f"LessThan(upper_bound={self.upper_bound})"


class _Interval(Constraint):
    """Reals in the closed interval [lower_bound, upper_bound]."""

    def __init__(self, lower_bound, upper_bound) -> None:
        self.lower_bound, self.upper_bound = lower_bound, upper_bound

    def check(self, value):
        value = _t(value)
        return (self.lower_bound <= value) & (value <= self.upper_bound)

    def __repr__(self) -> str:
        return f"Interval(lower_bound={self.lower_bound}, upper_bound={self.upper_bound})"


class _HalfOpenInterval(_Interval):
    """Reals in the half-open interval [lower_bound, upper_bound)."""

    def check(self, value):
        value = _t(value)
        return (self.lower_bound <= value) & (value < self.upper_bound)

    def __repr__(self) -> str:
        return f"HalfOpenInterval(lower_bound={self.lower_bound}, upper_bound={self.upper_bound})"


class _Simplex(Constraint):
    event_dim = 1

    def check(self, value):
        value = _t(value)
        return (value >= 0).all(-1) & ((value.sum(-1) - 1).abs() < 1e-6)


class _Multinomial(Constraint):
    """Non-negative integer count vectors summing to at most `upper_bound`."""

    is_discrete = True
    event_dim = 1

    def __init__(self, upper_bound) -> None:
        self.upper_bound = upper_bound

    def check(self, value):
        value = _t(value)
        return (value >= 0).all(-1) & (value.sum(-1) <= self.upper_bound)


class _LowerTriangular(Constraint):
    event_dim = 2

    def check(self, value):
        value = _t(value)
        return (value.tril() == value).reshape(*value.shape[:-2], -1).all(-1)


class _LowerCholesky(Constraint):
    event_dim = 2

    def check(self, value):
        value = _t(value)
        lower = (value.tril() == value).reshape(*value.shape[:-2], -1).all(-1)
        return lower & (value.diagonal(dim1=-2, dim2=-1) > 0).all(-1)


class _CorrCholesky(Constraint):
    event_dim = 2

    def check(self, value):
        value = _t(value)
        tol = 10 * float(np.finfo(value.dtype.np).eps) * value.shape[-1]
        unit_rows = ((value * value).sum(-1).sqrt() - 1).abs() <= tol
        return _LowerCholesky().check(value) & unit_rows.all(-1)


class _Square(Constraint):
    event_dim = 2

    def check(self, value):
        value = _t(value)
        return loom.full(value.shape[:-2], value.shape[-2] == value.shape[-1], dtype=loom.bool)


class _Symmetric(_Square):
    def check(self, value):
        value = _t(value)
        if value.shape[-2] != value.shape[-1]:
            return super().check(value)
        close = (value - value.transpose(-2, -1)).abs() <= 1e-6 * (1 + value.abs())
        return close.reshape(*value.shape[:-2], -1).all(-1)


def _eigenvalues_min(value: Tensor) -> np.ndarray:
    """The smallest eigenvalue of each symmetric matrix in `value` (computed with NumPy: value checks only)."""
    return np.linalg.eigvalsh(value.detach().numpy().astype(np.float64)).min(-1)


class _PositiveSemidefinite(_Symmetric):
    def check(self, value):
        value = _t(value)
        sym = super().check(value)
        return sym & loom.tensor(_eigenvalues_min(value) >= 0)


class _PositiveDefinite(_Symmetric):
    def check(self, value):
        value = _t(value)
        sym = super().check(value)
        return sym & loom.tensor(_eigenvalues_min(value) > 0)


class _Cat(Constraint):
    """Constraints `cseq` applied to consecutive pieces (of `lengths`) along `dim`."""

    def __init__(self, cseq, dim: int = 0, lengths=None) -> None:
        self.cseq, self.dim = list(cseq), dim
        self.lengths = list(lengths) if lengths is not None else [1] * len(self.cseq)

    @property
    def is_discrete(self):  # type: ignore[override]
        return any(c.is_discrete for c in self.cseq)

    @property
    def event_dim(self):  # type: ignore[override]
        return max(c.event_dim for c in self.cseq)

    def check(self, value):
        value = _t(value)
        pieces, start = [], 0
        for c, n in zip(self.cseq, self.lengths):
            pieces.append(c.check(value.narrow(self.dim, start, n)))
            start += n
        return loom.cat(pieces, self.dim)


class _Stack(Constraint):
    """Constraints `cseq` applied to the slices of `dim`."""

    def __init__(self, cseq, dim: int = 0) -> None:
        self.cseq, self.dim = list(cseq), dim

    @property
    def is_discrete(self):  # type: ignore[override]
        return any(c.is_discrete for c in self.cseq)

    @property
    def event_dim(self):  # type: ignore[override]
        return max(c.event_dim for c in self.cseq)

    def check(self, value):
        value = _t(value)
        return loom.stack([c.check(value.select(self.dim, i)) for i, c in enumerate(self.cseq)], self.dim)


dependent = _Dependent()
boolean = _Boolean()
one_hot = _OneHot()
nonnegative_integer = _IntegerGreaterThan(0)
positive_integer = _IntegerGreaterThan(1)
integer_interval = _IntegerInterval
real = _Real()
real_vector = _IndependentConstraint(real, 1)
positive = _Positive()
nonnegative = _GreaterThanEq(0.0)
greater_than = _GreaterThan
greater_than_eq = _GreaterThanEq
less_than = _LessThan
multinomial = _Multinomial
unit_interval = _Interval(0.0, 1.0)
interval = _Interval
half_open_interval = _HalfOpenInterval
simplex = _Simplex()
lower_triangular = _LowerTriangular()
lower_cholesky = _LowerCholesky()
corr_cholesky = _CorrCholesky()
square = _Square()
symmetric = _Symmetric()
positive_semidefinite = _PositiveSemidefinite()
positive_definite = _PositiveDefinite()
cat = _Cat
stack = _Stack
independent = _IndependentConstraint
