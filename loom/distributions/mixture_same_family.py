"""`MixtureSameFamily`: a categorical mixture of components from one batched distribution."""
from __future__ import annotations

from loom import _api as loom
from loom.distributions import constraints
from loom.distributions.categorical import Categorical
from loom.distributions.distribution import Distribution
from loom.errors import LoomTypeError, LoomValueError
from loom.tensor import Size

__all__ = ["MixtureSameFamily"]


class MixtureSameFamily(Distribution):
    """A mixture whose weights are `mixture_distribution` (a Categorical over K) and whose components are
    the K batch entries of `component_distribution`'s rightmost batch dimension, as torch's.

    Examples
    --------
    >>> from loom.distributions import Categorical, MixtureSameFamily, Normal
    >>> mix = Categorical(probs=loom.tensor([0.3, 0.7]))
    >>> d = MixtureSameFamily(mix, Normal(loom.tensor([-1.0, 1.0]), loom.tensor([1.0, 0.5])))
    >>> round(d.mean.item(), 4), round(d.log_prob(loom.tensor(0.0)).item(), 4)
    (0.4, -1.9093)
    """

    arg_constraints: dict = {}
    has_rsample = False

    def __init__(self, mixture_distribution, component_distribution, validate_args: bool | None = None) -> None:
        name = "loom.distributions.MixtureSameFamily"
        if not isinstance(mixture_distribution, Categorical):
            raise LoomTypeError(f"{name}: the mixture distribution must be a Categorical, got "
                                f"{type(mixture_distribution).__name__}")
        if not isinstance(component_distribution, Distribution):
            raise LoomTypeError(f"{name}: the component distribution must be a Distribution, got "
                                f"{type(component_distribution).__name__}")
        mdbs = tuple(mixture_distribution.batch_shape)
        cdbs = tuple(component_distribution.batch_shape[:-1])
        for a, b in zip(reversed(mdbs), reversed(cdbs)):
            if a != 1 and b != 1 and a != b:
                raise LoomValueError(f"{name}: the mixture batch shape {mdbs} is not compatible with the component "
                                     f"batch shape {cdbs} (without its last, component, dimension)")
        km = mixture_distribution.logits.shape[-1]
        kc = component_distribution.batch_shape[-1] if len(component_distribution.batch_shape) else None
        if km != kc:
            raise LoomValueError(f"{name}: the mixture has {km} components, but the component distribution's last "
                                 f"batch dimension has size {kc}")
        self._mixture_distribution = mixture_distribution
        self._component_distribution = component_distribution
        self._num_component = km
        self._event_ndims = len(component_distribution.event_shape)
        super().__init__(cdbs, component_distribution.event_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(MixtureSameFamily, _instance)
        batch_shape = Size(batch_shape)
        new._component_distribution = self._component_distribution.expand(
            tuple(batch_shape) + (self._num_component,))
        new._mixture_distribution = self._mixture_distribution.expand(batch_shape)
        new._num_component = self._num_component
        new._event_ndims = self._event_ndims
        Distribution.__init__(new, batch_shape, self._event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @constraints.dependent_property
    def support(self):
        return constraints.MixtureSameFamilyConstraint(self._component_distribution.support)

    @property
    def mixture_distribution(self):
        return self._mixture_distribution

    @property
    def component_distribution(self):
        return self._component_distribution

    def _pad(self, x):
        return x.unsqueeze(-1 - self._event_ndims)

    def _pad_mixture_dimensions(self, x):
        dist_batch_ndims = len(self.batch_shape)
        cat_batch_ndims = len(self.mixture_distribution.batch_shape)
        pad_ndims = 0 if cat_batch_ndims == 1 else dist_batch_ndims - cat_batch_ndims
        xs = tuple(x.shape)
        return x.reshape(*xs[:-1], *([1] * pad_ndims), *xs[-1:], *([1] * self._event_ndims))

    @property
    def mean(self):
        probs = self._pad_mixture_dimensions(self.mixture_distribution.probs)
        return (probs * self.component_distribution.mean).sum(-1 - self._event_ndims)

    @property
    def variance(self):
        probs = self._pad_mixture_dimensions(self.mixture_distribution.probs)
        dim = -1 - self._event_ndims
        mean_cond_var = (probs * self.component_distribution.variance).sum(dim)
        var_cond_mean = (probs * (self.component_distribution.mean - self._pad(self.mean)).pow(2)).sum(dim)
        return mean_cond_var + var_cond_mean

    def cdf(self, x):
        x = self._pad(x)
        return (self.component_distribution.cdf(x) * self.mixture_distribution.probs).sum(-1)

    def log_prob(self, x):
        if self._validate_args:
            self._validate_sample(x)
        x = self._pad(x)
        log_prob_x = self.component_distribution.log_prob(x)
        log_mix_prob = loom.log_softmax(self.mixture_distribution.logits, -1)
        return (log_prob_x + log_mix_prob).logsumexp(-1)

    def sample(self, sample_shape=Size()):
        with loom.no_grad():
            sample_len, batch_len = len(sample_shape), len(self.batch_shape)
            gather_dim = sample_len + batch_len
            es = tuple(self.event_shape)
            mix_sample = self.mixture_distribution.sample(sample_shape)
            mix_shape = tuple(mix_sample.shape)
            comp_samples = self.component_distribution.sample(sample_shape)
            index = mix_sample.reshape(*mix_shape, 1, *([1] * len(es))).expand(*mix_shape, 1, *es)
            return comp_samples.gather(gather_dim, index).squeeze(gather_dim)

    def __repr__(self) -> str:
        return (f"MixtureSameFamily(\n  {self.mixture_distribution},\n  {self.component_distribution})")
