"""The binomial distribution, with a vectorised sampler."""
from __future__ import annotations

from loom import _api as loom
from loom import dtypes as dt
from loom.distributions import constraints
from loom.distributions.bernoulli import _probs_or_logits
from loom.distributions.distribution import Distribution
from loom.distributions.utils import (_first_accepted, _known_range, _log_factorial, broadcast_all, lazy_property,
                                      logits_to_probs, probs_to_logits)
from loom.tensor import Size, Tensor

__all__ = ["Binomial"]

_INVERSION_TERMS = 64
_PROPOSALS = 12


def _inversion(n: Tensor, q: Tensor, terms: int) -> Tensor:
    """Binomial draws by inversion over k < terms (for n * q below 10: the tail past 64 is negligible)."""
    u = loom.rand(*q.shape, dtype=dt.float64)
    pmf = (n * loom.log1p(-q)).exp()
    odds = q / (1 - q)
    cdf = pmf
    k_small = loom.zeros_like(q)
    for k in range(1, terms):
        k_small = k_small + (cdf < u).to(dt.float64)
        pmf = pmf * (n - k + 1).clamp(min=0) / k * odds
        cdf = cdf + pmf
    return loom.minimum(k_small, n)


def _btrs(n: Tensor, q: Tensor) -> Tensor:
    """Binomial draws by Hormann's BTRS rejection (n * q >= 10, q <= 1/2), the exact log-pmf ratio as the
    final test: a fixed number of proposals per element, the first accepted one kept."""
    spq = (n * q * (1 - q)).sqrt()
    b = 1.15 + 2.53 * spq
    a = -0.0873 + 0.0248 * b + 0.01 * q
    c = n * q + 0.5
    alpha = (2.83 + 5.1 / b) * spq
    vr = 0.92 - 4.2 / b
    m = ((n + 1) * q).floor()
    log_r = (q / (1 - q)).log()
    uu = loom.rand(_PROPOSALS, *q.shape, dtype=dt.float64) - 0.5
    v = loom.rand(_PROPOSALS, *q.shape, dtype=dt.float64).clamp(min=1e-300)
    us = 0.5 - uu.abs()
    k = ((2 * a / us + b) * uu + c).floor()
    inside = (k >= 0) & (k <= n)
    ks = loom.minimum(k.clamp(min=0), n)
    fast = (us >= 0.07) & (v <= vr)
    log_ratio = (_log_factorial(m) + _log_factorial(n - m) - _log_factorial(ks) - _log_factorial(n - ks)
                 + (ks - m) * log_r)
    exact = (v * alpha / (a / (us * us) + b)).log() <= log_ratio
    return _first_accepted(ks, inside & (fast | exact))


def _binomial_sample(n: Tensor, p: Tensor) -> Tensor:
    """Binomial(n, p) draws: inversion where n * min(p, 1 - p) < 10, BTRS rejection above.

    Both branches run where the parameters are pending (in a trace); otherwise only the ones some
    element takes, with the inversion sized to the largest small mean.
    """
    d = p.dtype
    n, p = n.detach().to(dt.float64), p.detach().to(dt.float64)
    flip = p > 0.5
    q = loom.where(flip, 1 - p, p)  # <= 0.5; the count of the likelier outcome is n minus a draw with q.
    mean = n * q
    small = mean < 10
    known = _known_range(mean, small)
    terms = _INVERSION_TERMS if known is None else min(_INVERSION_TERMS, int(known[2] + 10 * known[2] ** 0.5) + 13)
    if known is not None and known[1]:
        k = _inversion(n, q, terms)
    elif known is not None and not known[0]:
        k = _btrs(n, q)
    else:
        k_small = _inversion(loom.where(small, n, loom.zeros_like(n)), loom.where(small, q, loom.zeros_like(q)),
                             terms)
        k_large = _btrs(loom.where(small, loom.full_like(n, 100.0), n), loom.where(small, loom.full_like(q, 0.5), q))
        k = loom.where(small, k_small, k_large)
    return loom.where(flip, n - k, k).to(d)


def _clamp_by_zero(x):
    return (x.clamp(min=0) + x - x.clamp(max=0)) / 2


class Binomial(Distribution):
    """The number of successes in `total_count` trials with success probability `probs` (or sigmoid(`logits`)).

    As `torch.distributions.Binomial`; `total_count` may be a Tensor (broadcast with the probabilities).

    Examples
    --------
    >>> from loom.distributions import Binomial
    >>> d = Binomial(10, probs=loom.tensor(0.3))
    >>> round(d.log_prob(loom.tensor(3.0)).item(), 4), round(d.mean.item(), 4), d.mode.item()
    (-1.3211, 3.0, 3.0)
    """

    arg_constraints = {"total_count": constraints.nonnegative_integer, "probs": constraints.unit_interval,
                       "logits": constraints.real}
    has_enumerate_support = True

    def __init__(self, total_count=1, probs=None, logits=None, validate_args: bool | None = None) -> None:
        _probs_or_logits("Binomial", probs, logits)
        if probs is not None:
            self.total_count, self.probs = broadcast_all(total_count, probs)
            self.total_count = self.total_count.to(self.probs.dtype)
            self._param = self.probs
        else:
            self.total_count, self.logits = broadcast_all(total_count, logits)
            self.total_count = self.total_count.to(self.logits.dtype)
            self._param = self.logits
        super().__init__(self._param.shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._expand_params(Binomial, batch_shape, _instance, ("total_count", "probs", "logits"))
        new._param = new.probs if "probs" in new.__dict__ else new.logits
        return new

    @constraints.dependent_property(is_discrete=True, event_dim=0)
    def support(self):
        return constraints.integer_interval(0, self.total_count)

    @property
    def mean(self):
        return self.total_count * self.probs

    @property
    def mode(self):
        return ((self.total_count + 1) * self.probs).floor().clamp(max=self.total_count)

    @property
    def variance(self):
        return self.total_count * self.probs * (1 - self.probs)

    @lazy_property
    def logits(self):
        return probs_to_logits(self.probs, is_binary=True)

    @lazy_property
    def probs(self):
        return logits_to_probs(self.logits, is_binary=True)

    @property
    def param_shape(self):
        return self._param.shape

    def sample(self, sample_shape=Size()):
        shape = self._extended_shape(sample_shape)
        with loom.no_grad():
            return _binomial_sample(self.total_count.expand(*shape), self.probs.expand(*shape))

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        n = self.total_count
        log_factorial_n = loom.lgamma(n + 1)
        log_factorial_k = loom.lgamma(value + 1)
        log_factorial_nmk = loom.lgamma(n - value + 1)
        # n * log(1 + exp(logits)), kept finite for large |logits|.
        normalize_term = (n * _clamp_by_zero(self.logits) + n * loom.log1p(loom.exp(-self.logits.abs()))
                          - log_factorial_n)
        return value * self.logits - log_factorial_k - log_factorial_nmk - normalize_term

    def _homogeneous_count(self, what: str) -> int:
        total = int(self.total_count.max().item())
        if int(self.total_count.min().item()) != total:
            raise NotImplementedError(f"loom.distributions.Binomial.{what}: an inhomogeneous total_count is not "
                                      "supported")
        return total

    def entropy(self):
        self._homogeneous_count("entropy")
        log_prob = self.log_prob(self.enumerate_support(False))
        return -(log_prob.exp() * log_prob).sum(0)

    def enumerate_support(self, expand: bool = True):
        total = self._homogeneous_count("enumerate_support")
        values = loom.arange(1 + total, dtype=self._param.dtype).reshape(-1, *([1] * len(self._batch_shape)))
        return values.expand(-1, *self._batch_shape) if expand else values
