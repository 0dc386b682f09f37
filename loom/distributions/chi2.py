"""The chi-squared distribution."""
from __future__ import annotations

from loom.distributions import constraints
from loom.distributions.gamma import Gamma
from loom.distributions.utils import broadcast_all

__all__ = ["Chi2"]


class Chi2(Gamma):
    """The chi-squared distribution with `df` degrees of freedom: Gamma(df / 2, 1 / 2), as `torch.distributions.Chi2`.

    Examples
    --------
    >>> from loom.distributions import Chi2
    >>> d = Chi2(4.0)
    >>> d.mean.item(), d.variance.item(), round(d.log_prob(loom.tensor(2.0)).item(), 4)
    (4.0, 8.0, -1.6931)
    """

    arg_constraints = {"df": constraints.positive}

    def __init__(self, df, validate_args: bool | None = None) -> None:
        (df,) = broadcast_all(df)
        super().__init__(0.5 * df, 0.5, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Chi2, _instance)
        return super().expand(batch_shape, new)

    @property
    def df(self):
        """The degrees of freedom."""
        return self.concentration * 2
