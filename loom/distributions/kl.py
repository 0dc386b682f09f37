"""`kl_divergence(p, q)` and the `register_kl` registry of closed forms, as `torch.distributions.kl`.

The implementation for a pair is the registered one whose classes are the most specific bases of
``type(p)`` and ``type(q)`` (nearest in their method resolution orders, p's first).

Examples
--------
>>> from loom.distributions import Normal, kl_divergence
>>> round(kl_divergence(Normal(0.0, 1.0), Normal(1.0, 2.0)).item(), 4)
0.4431
"""
from __future__ import annotations

import math

from loom import _api as loom
from loom.distributions.bernoulli import Bernoulli
from loom.distributions.beta import Beta
from loom.distributions.binomial import Binomial
from loom.distributions.categorical import Categorical
from loom.distributions.cauchy import Cauchy
from loom.distributions.dirichlet import Dirichlet
from loom.distributions.distribution import Distribution
from loom.distributions.exp_family import ExponentialFamily
from loom.distributions.exponential import Exponential
from loom.distributions.gamma import Gamma
from loom.distributions.geometric import Geometric
from loom.distributions.gumbel import Gumbel
from loom.distributions.half_normal import HalfNormal
from loom.distributions.independent import Independent
from loom.distributions.laplace import Laplace
from loom.distributions.lowrank_multivariate_normal import (LowRankMultivariateNormal, _lowrank_logdet,
                                                            _lowrank_mahalanobis)
from loom.distributions.multivariate_normal import MultivariateNormal, _batch_mahalanobis, _tril_inv
from loom.distributions.normal import Normal
from loom.distributions.one_hot_categorical import OneHotCategorical
from loom.distributions.pareto import Pareto
from loom.distributions.poisson import Poisson
from loom.distributions.transformed_distribution import TransformedDistribution
from loom.distributions.uniform import Uniform
from loom.distributions.utils import _sum_rightmost
from loom.errors import LoomError, LoomTypeError, LoomValueError
from loom.tensor import broadcast_shapes

__all__ = ["kl_divergence", "register_kl"]

_KL_REGISTRY: dict = {}
_KL_MEMOIZE: dict = {}
_EULER = 0.57721566490153286060


class KLNotImplementedError(LoomError, NotImplementedError):
    """No closed form of the KL divergence is registered for this pair of distribution types."""


def register_kl(type_p, type_q):
    """A decorator registering ``fn(p, q)`` as the KL divergence of (subclasses of) `type_p` from `type_q`.

    Examples
    --------
    >>> from loom.distributions import Distribution, register_kl, kl_divergence
    >>> class Point(Distribution):
    ...     arg_constraints = {}
    >>> @register_kl(Point, Point)
    ... def _kl_point_point(p, q):
    ...     return loom.tensor(0.0)
    >>> kl_divergence(Point(), Point()).item()
    0.0
    """
    if not (isinstance(type_p, type) and issubclass(type_p, Distribution)):
        raise LoomTypeError(f"loom.distributions.register_kl: expected type_p to be a Distribution subclass, got "
                            f"{type_p!r}")
    if not (isinstance(type_q, type) and issubclass(type_q, Distribution)):
        raise LoomTypeError(f"loom.distributions.register_kl: expected type_q to be a Distribution subclass, got "
                            f"{type_q!r}")

    def decorator(fn):
        _KL_REGISTRY[type_p, type_q] = fn
        _KL_MEMOIZE.clear()
        return fn
    return decorator


def _dispatch_kl(type_p, type_q):
    matches = [(p, q) for p, q in _KL_REGISTRY if issubclass(type_p, p) and issubclass(type_q, q)]
    if not matches:
        return None
    mro_p, mro_q = type_p.__mro__, type_q.__mro__
    left = min(matches, key=lambda m: (mro_p.index(m[0]), mro_q.index(m[1])))
    right = min(matches, key=lambda m: (mro_q.index(m[1]), mro_p.index(m[0])))
    if _KL_REGISTRY[left] is not _KL_REGISTRY[right]:
        import warnings
        warnings.warn(f"Ambiguous kl_divergence({type_p.__name__}, {type_q.__name__}). Please register_kl"
                      f"({left[0].__name__}, {right[1].__name__})", RuntimeWarning, stacklevel=3)
    return _KL_REGISTRY[left]


def kl_divergence(p: Distribution, q: Distribution):
    """KL(p || q) = E_p[log p(x) - log q(x)], per batch element, from the registered closed forms.

    Raises a `NotImplementedError` (a `loom.LoomError`) when no form is registered for the pair.

    Examples
    --------
    >>> from loom.distributions import Bernoulli, kl_divergence
    >>> round(kl_divergence(Bernoulli(0.3), Bernoulli(0.5)).item(), 4)
    0.0823
    """
    key = (type(p), type(q))
    fn = _KL_MEMOIZE.get(key)
    if fn is None:
        fn = _dispatch_kl(*key)
        _KL_MEMOIZE[key] = fn
    if fn is None:
        raise KLNotImplementedError(f"loom.distributions.kl_divergence: no KL divergence is registered for "
                                    f"p={type(p).__name__}, q={type(q).__name__} (see register_kl)")
    return fn(p, q)


def _inf_like(t):
    return loom.full_like(t, math.inf)


def _where_inf(cond, t):
    return loom.where(cond, _inf_like(t), t)


def _x_log_x(t):
    return loom.xlogy(t, t)  # 0 at 0.


def _softplus(x):
    return loom.nn.functional.softplus(x)


# ------------------------------------------------------------------------- same family

@register_kl(Bernoulli, Bernoulli)
def _kl_bernoulli_bernoulli(p, q):
    t1 = p.probs * (_softplus(-q.logits) - _softplus(-p.logits))
    t1 = loom.where(p.probs == 0, loom.zeros_like(t1), _where_inf(q.probs == 0, t1))
    t2 = (1 - p.probs) * (_softplus(q.logits) - _softplus(p.logits))
    t2 = loom.where(p.probs == 1, loom.zeros_like(t2), _where_inf(q.probs == 1, t2))
    return t1 + t2


@register_kl(Beta, Beta)
def _kl_beta_beta(p, q):
    sum_p = p.concentration1 + p.concentration0
    sum_q = q.concentration1 + q.concentration0
    t1 = loom.lgamma(q.concentration1) + loom.lgamma(q.concentration0) + loom.lgamma(sum_p)
    t2 = loom.lgamma(p.concentration1) + loom.lgamma(p.concentration0) + loom.lgamma(sum_q)
    t3 = (p.concentration1 - q.concentration1) * loom.digamma(p.concentration1)
    t4 = (p.concentration0 - q.concentration0) * loom.digamma(p.concentration0)
    t5 = (sum_q - sum_p) * loom.digamma(sum_p)
    return t1 - t2 + t3 + t4 + t5


@register_kl(Binomial, Binomial)
def _kl_binomial_binomial(p, q):
    if bool((p.total_count < q.total_count).any()):
        raise KLNotImplementedError("loom.distributions.kl_divergence(Binomial, Binomial) is implemented only "
                                    "for p.total_count >= q.total_count")
    kl = p.total_count * (p.probs * (p.logits - q.logits) + (-p.probs).log1p() - (-q.probs).log1p())
    return _where_inf(p.total_count > q.total_count, kl)


@register_kl(Categorical, Categorical)
def _kl_categorical_categorical(p, q):
    t = p.probs * (p.logits - q.logits)
    t = loom.where(p.probs == 0, loom.zeros_like(t), _where_inf(q.probs == 0, t))
    return t.sum(-1)


@register_kl(OneHotCategorical, OneHotCategorical)
def _kl_onehotcategorical_onehotcategorical(p, q):
    return _kl_categorical_categorical(p._categorical, q._categorical)


@register_kl(Cauchy, Cauchy)
def _kl_cauchy_cauchy(p, q):
    t1 = ((p.scale + q.scale).pow(2) + (p.loc - q.loc).pow(2)).log()
    t2 = (4 * p.scale * q.scale).log()
    return t1 - t2


@register_kl(Dirichlet, Dirichlet)
def _kl_dirichlet_dirichlet(p, q):
    sum_p = p.concentration.sum(-1)
    sum_q = q.concentration.sum(-1)
    t1 = loom.lgamma(sum_p) - loom.lgamma(sum_q)
    t2 = (loom.lgamma(p.concentration) - loom.lgamma(q.concentration)).sum(-1)
    t3 = p.concentration - q.concentration
    t4 = loom.digamma(p.concentration) - loom.digamma(sum_p).unsqueeze(-1)
    return t1 - t2 + (t3 * t4).sum(-1)


@register_kl(Exponential, Exponential)
def _kl_exponential_exponential(p, q):
    rate_ratio = q.rate / p.rate
    return -rate_ratio.log() + rate_ratio - 1


@register_kl(ExponentialFamily, ExponentialFamily)
def _kl_expfamily_expfamily(p, q):
    if type(p) is not type(q):
        raise KLNotImplementedError("loom.distributions.kl_divergence: the Bregman form between two exponential "
                                    "families needs both distributions of the same type, got "
                                    f"{type(p).__name__} and {type(q).__name__}")
    p_nparams = [np_.detach().requires_grad_() for np_ in p._natural_params]
    q_nparams = q._natural_params
    with loom.enable_grad():
        lg_normal = p._log_normalizer(*p_nparams)
        gradients = loom.autograd.grad(lg_normal.sum(), p_nparams, create_graph=True)
    result = q._log_normalizer(*q_nparams) - lg_normal
    for pnp, qnp, g in zip(p_nparams, q_nparams, gradients):
        result = result - _sum_rightmost((qnp - pnp) * g, len(q.event_shape))
    return result


@register_kl(Gamma, Gamma)
def _kl_gamma_gamma(p, q):
    t1 = q.concentration * (p.rate / q.rate).log()
    t2 = loom.lgamma(q.concentration) - loom.lgamma(p.concentration)
    t3 = (p.concentration - q.concentration) * loom.digamma(p.concentration)
    t4 = (q.rate - p.rate) * (p.concentration / p.rate)
    return t1 + t2 + t3 + t4


@register_kl(Gumbel, Gumbel)
def _kl_gumbel_gumbel(p, q):
    ct1 = p.scale / q.scale
    ct2 = q.loc / q.scale
    ct3 = p.loc / q.scale
    t1 = -ct1.log() - ct2 + ct3
    t2 = ct1 * _EULER
    t3 = (ct2 + loom.lgamma(1 + ct1) - ct3).exp()
    return t1 + t2 + t3 - (1 + _EULER)


@register_kl(Geometric, Geometric)
def _kl_geometric_geometric(p, q):
    return -p.entropy() - loom.log1p(-q.probs) / p.probs - q.logits


@register_kl(HalfNormal, HalfNormal)
def _kl_halfnormal_halfnormal(p, q):
    return _kl_normal_normal(p.base_dist, q.base_dist)


@register_kl(Laplace, Laplace)
def _kl_laplace_laplace(p, q):
    scale_ratio = p.scale / q.scale
    loc_abs_diff = (p.loc - q.loc).abs()
    t1 = -scale_ratio.log()
    t2 = loc_abs_diff / q.scale
    t3 = scale_ratio * (-loc_abs_diff / p.scale).exp()
    return t1 + t2 + t3 - 1


def _check_events(p, q):
    if tuple(p.event_shape) != tuple(q.event_shape):
        raise LoomValueError(f"loom.distributions.kl_divergence: KL between multivariate normals with different "
                             f"event shapes {tuple(p.event_shape)} and {tuple(q.event_shape)} is not defined")


def _trace_xxt(x):
    """The trace of X X^T over the last two dimensions."""
    return x.pow(2).reshape(*x.shape[:-2], -1).sum(-1)


@register_kl(MultivariateNormal, MultivariateNormal)
def _kl_multivariatenormal_multivariatenormal(p, q):
    _check_events(p, q)
    Lp, Lq = p._unbroadcasted_scale_tril, q._unbroadcasted_scale_tril
    half_term1 = (Lq.diagonal(dim1=-2, dim2=-1).log().sum(-1) - Lp.diagonal(dim1=-2, dim2=-1).log().sum(-1))
    term2 = _trace_xxt(_tril_inv(Lq) @ Lp)
    term3 = _batch_mahalanobis(Lq, q.loc - p.loc)
    return half_term1 + 0.5 * (term2 + term3 - p.event_shape[0])


@register_kl(LowRankMultivariateNormal, LowRankMultivariateNormal)
def _kl_lowrankmvn_lowrankmvn(p, q):
    _check_events(p, q)
    term1 = (_lowrank_logdet(q._unbroadcasted_cov_factor, q._unbroadcasted_cov_diag, q._capacitance_tril)
             - _lowrank_logdet(p._unbroadcasted_cov_factor, p._unbroadcasted_cov_diag, p._capacitance_tril))
    term3 = _lowrank_mahalanobis(q._unbroadcasted_cov_factor, q._unbroadcasted_cov_diag, q.loc - p.loc,
                                 q._capacitance_tril)
    # tr(Sigma_q^-1 Sigma_p), with Sigma_q^-1 = D^-1 - D^-1 W C^-1 W^T D^-1 and Sigma_p = Wp Wp^T + Dp.
    term2 = _lowrank_trace(q, p.covariance_matrix)
    return 0.5 * (term1 + term2 + term3 - p.event_shape[0])


def _lowrank_trace(q, sigma):
    """tr(Sigma_q^-1 sigma) for a low-rank q and a full matrix `sigma`."""
    return (q.precision_matrix * sigma).reshape(*broadcast_shapes(tuple(q.precision_matrix.shape),
                                                                       tuple(sigma.shape))[:-2], -1).sum(-1)


@register_kl(MultivariateNormal, LowRankMultivariateNormal)
def _kl_multivariatenormal_lowrankmvn(p, q):
    _check_events(p, q)
    term1 = (_lowrank_logdet(q._unbroadcasted_cov_factor, q._unbroadcasted_cov_diag, q._capacitance_tril)
             - 2 * p._unbroadcasted_scale_tril.diagonal(dim1=-2, dim2=-1).log().sum(-1))
    term3 = _lowrank_mahalanobis(q._unbroadcasted_cov_factor, q._unbroadcasted_cov_diag, q.loc - p.loc,
                                 q._capacitance_tril)
    term2 = _lowrank_trace(q, p.covariance_matrix)
    return 0.5 * (term1 + term2 + term3 - p.event_shape[0])


@register_kl(LowRankMultivariateNormal, MultivariateNormal)
def _kl_lowrankmvn_multivariatenormal(p, q):
    _check_events(p, q)
    Lq = q._unbroadcasted_scale_tril
    term1 = (2 * Lq.diagonal(dim1=-2, dim2=-1).log().sum(-1)
             - _lowrank_logdet(p._unbroadcasted_cov_factor, p._unbroadcasted_cov_diag, p._capacitance_tril))
    term3 = _batch_mahalanobis(Lq, q.loc - p.loc)
    Lq_inv = _tril_inv(Lq)
    term21 = _trace_xxt(Lq_inv @ p._unbroadcasted_cov_factor)
    term22 = _trace_xxt(Lq_inv * p._unbroadcasted_cov_diag.sqrt().unsqueeze(-2))
    return 0.5 * (term1 + term21 + term22 + term3 - p.event_shape[0])


@register_kl(Normal, Normal)
def _kl_normal_normal(p, q):
    var_ratio = (p.scale / q.scale).pow(2)
    t1 = ((p.loc - q.loc) / q.scale).pow(2)
    return 0.5 * (var_ratio + t1 - 1 - var_ratio.log())


@register_kl(Pareto, Pareto)
def _kl_pareto_pareto(p, q):
    scale_ratio = p.scale / q.scale
    alpha_ratio = q.alpha / p.alpha
    result = q.alpha * scale_ratio.log() - alpha_ratio.log() + alpha_ratio - 1
    return _where_inf(p.scale < q.scale, result)


@register_kl(Poisson, Poisson)
def _kl_poisson_poisson(p, q):
    return p.rate * (p.rate.log() - q.rate.log()) - (p.rate - q.rate)


@register_kl(TransformedDistribution, TransformedDistribution)
def _kl_transformed_transformed(p, q):
    if p.transforms != q.transforms:
        raise KLNotImplementedError("loom.distributions.kl_divergence: transformed distributions with different "
                                    "transforms")
    if tuple(p.event_shape) != tuple(q.event_shape):
        raise KLNotImplementedError("loom.distributions.kl_divergence: transformed distributions with different "
                                    "event shapes")
    return kl_divergence(p.base_dist, q.base_dist)


@register_kl(Uniform, Uniform)
def _kl_uniform_uniform(p, q):
    result = ((q.high - q.low) / (p.high - p.low)).log()
    return _where_inf((q.low > p.low) | (q.high < p.high), result)


@register_kl(Independent, Independent)
def _kl_independent_independent(p, q):
    if p.reinterpreted_batch_ndims != q.reinterpreted_batch_ndims:
        raise KLNotImplementedError("loom.distributions.kl_divergence: Independent distributions with different "
                                    "reinterpreted_batch_ndims")
    return _sum_rightmost(kl_divergence(p.base_dist, q.base_dist), p.reinterpreted_batch_ndims)


# ------------------------------------------------------------------------- across families

@register_kl(Bernoulli, Poisson)
def _kl_bernoulli_poisson(p, q):
    return -p.entropy() - (p.probs * q.rate.log() - q.rate)


@register_kl(Beta, Exponential)
def _kl_beta_exponential(p, q):
    return -p.entropy() - q.rate.log() + q.rate * (p.concentration1 / (p.concentration1 + p.concentration0))


@register_kl(Beta, Gamma)
def _kl_beta_gamma(p, q):
    t1 = -p.entropy()
    t2 = loom.lgamma(q.concentration) - q.concentration * q.rate.log()
    t3 = (q.concentration - 1) * (loom.digamma(p.concentration1)
                                  - loom.digamma(p.concentration1 + p.concentration0))
    t4 = q.rate * p.concentration1 / (p.concentration1 + p.concentration0)
    return t1 + t2 - t3 + t4


@register_kl(Beta, Normal)
def _kl_beta_normal(p, q):
    e_beta = p.concentration1 / (p.concentration1 + p.concentration0)
    var_normal = q.scale.pow(2)
    t1 = -p.entropy()
    t2 = 0.5 * (var_normal * 2 * math.pi).log()
    t3 = (e_beta * (1 - e_beta) / (p.concentration1 + p.concentration0 + 1) + e_beta.pow(2)) * 0.5
    t4 = q.loc * e_beta
    t5 = q.loc.pow(2) * 0.5
    return t1 + t2 + (t3 - t4 + t5) / var_normal


@register_kl(Beta, Uniform)
def _kl_beta_uniform(p, q):
    result = -p.entropy() + (q.high - q.low).log()
    return _where_inf((q.low > 0) | (q.high < 1), result)


@register_kl(Exponential, Gamma)
def _kl_exponential_gamma(p, q):
    ratio = q.rate / p.rate
    t1 = -q.concentration * ratio.log()
    return t1 + ratio + loom.lgamma(q.concentration) + q.concentration * _EULER - (1 + _EULER)


@register_kl(Exponential, Gumbel)
def _kl_exponential_gumbel(p, q):
    scale_rate_prod = p.rate * q.scale
    loc_scale_ratio = q.loc / q.scale
    t1 = scale_rate_prod.log() - 1
    t2 = loc_scale_ratio.exp() * scale_rate_prod / (scale_rate_prod + 1)
    t3 = scale_rate_prod.reciprocal()
    return t1 - loc_scale_ratio + t2 + t3


@register_kl(Exponential, Normal)
def _kl_exponential_normal(p, q):
    var_normal = q.scale.pow(2)
    rate_sqr = p.rate.pow(2)
    t1 = 0.5 * (rate_sqr * var_normal * 2 * math.pi).log()
    t2 = rate_sqr.reciprocal()
    t3 = q.loc / p.rate
    t4 = q.loc.pow(2) * 0.5
    return t1 - 1 + (t2 - t3 + t4) / var_normal


@register_kl(Gamma, Exponential)
def _kl_gamma_exponential(p, q):
    return -p.entropy() - q.rate.log() + q.rate * (p.concentration / p.rate)


@register_kl(Gamma, Gumbel)
def _kl_gamma_gumbel(p, q):
    beta_scale_prod = p.rate * q.scale
    loc_scale_ratio = q.loc / q.scale
    c = p.concentration
    t1 = (c - 1) * loom.digamma(c) - loom.lgamma(c) - c
    t2 = beta_scale_prod.log() + c / beta_scale_prod
    t3 = loc_scale_ratio.exp() * (1 + beta_scale_prod.reciprocal()).pow(-c) - loc_scale_ratio
    return t1 + t2 + t3


@register_kl(Gamma, Normal)
def _kl_gamma_normal(p, q):
    var_normal = q.scale.pow(2)
    beta_sqr = p.rate.pow(2)
    c = p.concentration
    t1 = 0.5 * (beta_sqr * var_normal * 2 * math.pi).log() - c - loom.lgamma(c)
    t2 = 0.5 * (c.pow(2) + c) / beta_sqr
    t3 = q.loc * c / p.rate
    t4 = 0.5 * q.loc.pow(2)
    return t1 + (c - 1) * loom.digamma(c) + (t2 - t3 + t4) / var_normal


@register_kl(Gumbel, Normal)
def _kl_gumbel_normal(p, q):
    param_ratio = p.scale / q.scale
    t1 = (param_ratio / math.sqrt(2 * math.pi)).log()
    t2 = (math.pi * param_ratio * 0.5).pow(2) / 3
    t3 = ((p.loc + p.scale * _EULER - q.loc) / q.scale).pow(2) * 0.5
    return -t1 + t2 + t3 - (_EULER + 1)


@register_kl(Laplace, Normal)
def _kl_laplace_normal(p, q):
    var_normal = q.scale.pow(2)
    scale_sqr_var_ratio = p.scale.pow(2) / var_normal
    t1 = 0.5 * (2 * scale_sqr_var_ratio / math.pi).log()
    t2 = 0.5 * p.loc.pow(2)
    t3 = p.loc * q.loc
    t4 = 0.5 * q.loc.pow(2)
    return -t1 + scale_sqr_var_ratio + (t2 - t3 + t4) / var_normal - 1


@register_kl(Normal, Gumbel)
def _kl_normal_gumbel(p, q):
    mean_scale_ratio = p.loc / q.scale
    var_scale_sqr_ratio = (p.scale / q.scale).pow(2)
    loc_scale_ratio = q.loc / q.scale
    t1 = var_scale_sqr_ratio.log() * 0.5
    t2 = mean_scale_ratio - loc_scale_ratio
    t3 = (-mean_scale_ratio + 0.5 * var_scale_sqr_ratio + loc_scale_ratio).exp()
    return -t1 + t2 + t3 - (0.5 * (1 + math.log(2 * math.pi)))


@register_kl(Normal, Laplace)
def _kl_normal_laplace(p, q):
    loc_diff = p.loc - q.loc
    scale_ratio = p.scale / q.scale
    loc_diff_scale_ratio = loc_diff / p.scale
    t1 = scale_ratio.log()
    t2 = math.sqrt(2 / math.pi) * p.scale * (-0.5 * loc_diff_scale_ratio.pow(2)).exp()
    t3 = loc_diff * loom.erf(math.sqrt(0.5) * loc_diff_scale_ratio)
    return -t1 + (t2 + t3) / q.scale - (0.5 * (1 + math.log(0.5 * math.pi)))


@register_kl(Uniform, Beta)
def _kl_uniform_beta(p, q):
    common = p.high - p.low
    t1 = common.log()
    t2 = (q.concentration1 - 1) * (_x_log_x(p.high) - _x_log_x(p.low) - common) / common
    t3 = (q.concentration0 - 1) * (_x_log_x(1 - p.high) - _x_log_x(1 - p.low) + common) / common
    t4 = (loom.lgamma(q.concentration1) + loom.lgamma(q.concentration0)
          - loom.lgamma(q.concentration1 + q.concentration0))
    return _where_inf((p.high > 1) | (p.low < 0), t3 + t4 - t1 - t2)


@register_kl(Uniform, Exponential)
def _kl_uniform_exponential(p, q):
    result = q.rate * (p.high + p.low) / 2 - ((p.high - p.low) * q.rate).log()
    return _where_inf(p.low < 0, result)


@register_kl(Uniform, Gamma)
def _kl_uniform_gamma(p, q):
    common = p.high - p.low
    c = q.concentration
    t1 = common.log()
    t2 = loom.lgamma(c) - c * q.rate.log()
    t3 = (1 - c) * (_x_log_x(p.high) - _x_log_x(p.low) - common) / common
    t4 = q.rate * (p.high + p.low) / 2
    return _where_inf(p.low < 0, -t1 + t2 + t3 + t4)


@register_kl(Uniform, Gumbel)
def _kl_uniform_gumbel(p, q):
    common = q.scale / (p.high - p.low)
    high_loc_diff = (p.high - q.loc) / q.scale
    low_loc_diff = (p.low - q.loc) / q.scale
    t1 = common.log() + 0.5 * (high_loc_diff + low_loc_diff)
    t2 = common * ((-high_loc_diff).exp() - (-low_loc_diff).exp())
    return t1 - t2


@register_kl(Uniform, Normal)
def _kl_uniform_normal(p, q):
    common = p.high - p.low
    t1 = (math.sqrt(math.pi * 2) * q.scale / common).log()
    t2 = common.pow(2) / 12
    t3 = ((p.high + p.low - 2 * q.loc) / 2).pow(2)
    return t1 + 0.5 * (t2 + t3) / q.scale.pow(2)


@register_kl(Pareto, Exponential)
def _kl_pareto_exponential(p, q):
    scale_rate_prod = p.scale * q.rate
    t1 = (p.alpha / scale_rate_prod).log()
    t2 = p.alpha.reciprocal()
    t3 = p.alpha * scale_rate_prod / (p.alpha - 1)
    return _where_inf(p.alpha <= 1, t1 - t2 + t3 - 1)


@register_kl(Pareto, Gamma)
def _kl_pareto_gamma(p, q):
    common = p.scale.log() + p.alpha.reciprocal()
    t1 = p.alpha.log() - common
    t2 = loom.lgamma(q.concentration) - q.concentration * q.rate.log()
    t3 = (1 - q.concentration) * common
    t4 = q.rate * p.alpha * p.scale / (p.alpha - 1)
    return _where_inf(p.alpha <= 1, t1 + t2 + t3 + t4 - 1)


@register_kl(Pareto, Normal)
def _kl_pareto_normal(p, q):
    var_normal = 2 * q.scale.pow(2)
    common = p.scale / (p.alpha - 1)
    t1 = (math.sqrt(2 * math.pi) * q.scale * p.alpha / p.scale).log()
    t2 = p.alpha.reciprocal()
    t3 = p.alpha * common.pow(2) / (p.alpha - 2)
    t4 = (p.alpha * common - q.loc).pow(2)
    return _where_inf(p.alpha <= 2, t1 - t2 + (t3 + t4) / var_normal - 1)


@register_kl(Uniform, Pareto)
def _kl_uniform_pareto(p, q):
    width = p.high - p.low
    t1 = (q.alpha * q.scale.pow(q.alpha) * width).log()
    t2 = (_x_log_x(p.high) - _x_log_x(p.low) - width) / width
    return _where_inf(p.low < q.scale, t2 * (q.alpha + 1) - t1)


def _infinite(p, q):
    """Where p has mass outside q's support, the divergence is infinite."""
    params = [v for v in p.__dict__.values() if isinstance(v, loom.Tensor) and v.dtype.is_floating_point]
    like = params[0].expand(*p.batch_shape) if params else loom.zeros(*p.batch_shape)
    return _inf_like(like)


for _p, _q in [(Exponential, Beta), (Exponential, Uniform), (Gamma, Beta), (Gamma, Uniform), (Gumbel, Beta),
               (Gumbel, Exponential), (Gumbel, Gamma), (Gumbel, Uniform), (Laplace, Beta), (Laplace, Exponential),
               (Laplace, Gamma), (Laplace, Uniform), (Normal, Beta), (Normal, Exponential), (Normal, Gamma),
               (Normal, Uniform), (Poisson, Bernoulli), (Poisson, Binomial), (Beta, Pareto), (Exponential, Pareto),
               (Gamma, Pareto), (Gumbel, Pareto), (Laplace, Pareto), (Normal, Pareto), (Pareto, Beta),
               (Pareto, Uniform)]:
    register_kl(_p, _q)(_infinite)
