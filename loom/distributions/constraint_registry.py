"""`biject_to` and `transform_to`: transforms from unconstrained space onto a constraint's set.

``biject_to(c)`` is a bijection (for reparameterising an optimisation variable or a density);
``transform_to(c)`` may be cheaper and not bijective (the simplex uses a softmax). As
`torch.distributions.constraint_registry`.

Examples
--------
>>> from loom.distributions import biject_to, constraints
>>> t = biject_to(constraints.interval(0.0, 2.0))
>>> round(t(loom.tensor(0.0)).item(), 4)
1.0
"""
from __future__ import annotations

from loom.distributions import constraints
from loom.distributions.transforms import (AffineTransform, ComposeTransform, ExpTransform, IndependentTransform,
                                           SigmoidTransform, SoftmaxTransform, StickBreakingTransform,
                                           identity_transform)
from loom.errors import LoomError, LoomTypeError

__all__ = ["ConstraintRegistry", "biject_to", "transform_to"]


class _NoTransform(LoomError, NotImplementedError):
    """No transform is registered for a constraint."""


class ConstraintRegistry:
    """A registry from constraint types to factories ``factory(constraint) -> Transform``.

    Examples
    --------
    >>> from loom.distributions import constraints
    >>> from loom.distributions.constraint_registry import ConstraintRegistry
    >>> from loom.distributions.transforms import ExpTransform
    >>> reg = ConstraintRegistry()
    >>> _ = reg.register(constraints.positive, lambda c: ExpTransform())
    >>> reg(constraints.positive)
    ExpTransform()
    """

    def __init__(self) -> None:
        self._registry: dict = {}

    def register(self, constraint, factory=None):
        """Register `factory` for `constraint` (an instance or a Constraint subclass); usable as a decorator."""
        if factory is None:
            return lambda f: self.register(constraint, f)
        if isinstance(constraint, constraints.Constraint):
            constraint = type(constraint)
        if not (isinstance(constraint, type) and issubclass(constraint, constraints.Constraint)):
            raise LoomTypeError(f"loom.distributions: expected a Constraint subclass or instance, got {constraint!r}")
        self._registry[constraint] = factory
        return factory

    def __call__(self, constraint):
        try:
            factory = self._registry[type(constraint)]
        except KeyError:
            raise _NoTransform(f"loom.distributions: cannot transform {type(constraint).__name__} constraints "
                               "(no transform is registered for them)") from None
        return factory(constraint)


biject_to = ConstraintRegistry()
transform_to = ConstraintRegistry()


@biject_to.register(constraints.real)
@transform_to.register(constraints.real)
def _transform_to_real(constraint):
    return identity_transform


@biject_to.register(constraints.independent)
def _biject_to_independent(constraint):
    base = biject_to(constraint.base_constraint)
    return IndependentTransform(base, constraint.reinterpreted_batch_ndims)


@transform_to.register(constraints.independent)
def _transform_to_independent(constraint):
    base = transform_to(constraint.base_constraint)
    return IndependentTransform(base, constraint.reinterpreted_batch_ndims)


@biject_to.register(constraints.positive)
@biject_to.register(constraints.nonnegative)
@transform_to.register(constraints.positive)
@transform_to.register(constraints.nonnegative)
def _transform_to_positive(constraint):
    return ExpTransform()


@biject_to.register(constraints.greater_than)
@biject_to.register(constraints.greater_than_eq)
@transform_to.register(constraints.greater_than)
@transform_to.register(constraints.greater_than_eq)
def _transform_to_greater_than(constraint):
    return ComposeTransform([ExpTransform(), AffineTransform(constraint.lower_bound, 1)])


@biject_to.register(constraints.less_than)
@transform_to.register(constraints.less_than)
def _transform_to_less_than(constraint):
    return ComposeTransform([ExpTransform(), AffineTransform(constraint.upper_bound, -1)])


@biject_to.register(constraints.interval)
@biject_to.register(constraints.half_open_interval)
@transform_to.register(constraints.interval)
@transform_to.register(constraints.half_open_interval)
def _transform_to_interval(constraint):
    lower, upper = constraint.lower_bound, constraint.upper_bound
    if isinstance(lower, (int, float)) and isinstance(upper, (int, float)) and lower == 0 and upper == 1:
        return SigmoidTransform()
    return ComposeTransform([SigmoidTransform(), AffineTransform(lower, upper - lower)])


@biject_to.register(constraints.simplex)
def _biject_to_simplex(constraint):
    return StickBreakingTransform()


@transform_to.register(constraints.simplex)
def _transform_to_simplex(constraint):
    return SoftmaxTransform()
