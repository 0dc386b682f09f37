"""Probability distributions with PyTorch's interface (`torch.distributions`), sampled with loom's generator.

Each distribution has a ``batch_shape`` and an ``event_shape``; ``sample``/``rsample`` draw from loom's
random stream (`loom.manual_seed` makes runs repeatable; the numbers differ from PyTorch's), and
``log_prob``, ``cdf``, ``entropy``, ``mean``, ``variance`` and `kl_divergence` are differentiable loom
expressions.

Examples
--------
>>> import loom.distributions as D
>>> _ = loom.manual_seed(0)
>>> loc = loom.tensor([0.0, 1.0], requires_grad=True)
>>> d = D.Normal(loc, 1.0)
>>> x = d.rsample((1000,))
>>> x.shape
loom.Size([1000, 2])
>>> d.log_prob(loom.tensor([0.0, 0.0])).sum().backward()
>>> loc.grad.tolist()
[0.0, -1.0]
"""
from loom.distributions import constraints, transforms
from loom.distributions.bernoulli import Bernoulli
from loom.distributions.beta import Beta
from loom.distributions.binomial import Binomial
from loom.distributions.categorical import Categorical
from loom.distributions.cauchy import Cauchy
from loom.distributions.chi2 import Chi2
from loom.distributions.constraint_registry import biject_to, transform_to
from loom.distributions.continuous_bernoulli import ContinuousBernoulli
from loom.distributions.dirichlet import Dirichlet
from loom.distributions.distribution import Distribution
from loom.distributions.exp_family import ExponentialFamily
from loom.distributions.exponential import Exponential
from loom.distributions.fishersnedecor import FisherSnedecor
from loom.distributions.gamma import Gamma
from loom.distributions.geometric import Geometric
from loom.distributions.gumbel import Gumbel
from loom.distributions.half_cauchy import HalfCauchy
from loom.distributions.half_normal import HalfNormal
from loom.distributions.independent import Independent
from loom.distributions.inverse_gamma import InverseGamma
from loom.distributions.kl import kl_divergence, register_kl
from loom.distributions.kumaraswamy import Kumaraswamy
from loom.distributions.laplace import Laplace
from loom.distributions.log_normal import LogNormal
from loom.distributions.logistic_normal import LogisticNormal
from loom.distributions.lowrank_multivariate_normal import LowRankMultivariateNormal
from loom.distributions.mixture_same_family import MixtureSameFamily
from loom.distributions.multinomial import Multinomial
from loom.distributions.multivariate_normal import MultivariateNormal
from loom.distributions.negative_binomial import NegativeBinomial
from loom.distributions.normal import Normal
from loom.distributions.one_hot_categorical import OneHotCategorical, OneHotCategoricalStraightThrough
from loom.distributions.pareto import Pareto
from loom.distributions.poisson import Poisson
from loom.distributions.relaxed_bernoulli import RelaxedBernoulli
from loom.distributions.relaxed_categorical import RelaxedOneHotCategorical
from loom.distributions.student_t import StudentT
from loom.distributions.transformed_distribution import TransformedDistribution
from loom.distributions.transforms import (AbsTransform, AffineTransform, ComposeTransform,
                                           CumulativeDistributionTransform, ExpTransform, IndependentTransform,
                                           PowerTransform, ReshapeTransform, SigmoidTransform, SoftmaxTransform,
                                           SoftplusTransform, StickBreakingTransform, TanhTransform, Transform,
                                           identity_transform)
from loom.distributions.uniform import Uniform
from loom.distributions.von_mises import VonMises
from loom.distributions.weibull import Weibull

__all__ = ["Bernoulli", "Beta", "Binomial", "Categorical", "Cauchy", "Chi2", "ContinuousBernoulli", "Dirichlet",
           "Distribution",
           "Exponential", "ExponentialFamily", "Gamma", "Geometric", "Gumbel", "HalfCauchy", "HalfNormal",
           "Independent", "InverseGamma", "Multinomial", "NegativeBinomial", "Pareto", "Weibull", "FisherSnedecor",
           "Kumaraswamy", "LogisticNormal",
           "Laplace", "LogNormal", "LowRankMultivariateNormal", "MixtureSameFamily", "MultivariateNormal", "Normal",
           "OneHotCategorical", "OneHotCategoricalStraightThrough", "Poisson", "RelaxedBernoulli",
           "RelaxedOneHotCategorical", "StudentT", "TransformedDistribution", "Uniform", "VonMises", "biject_to",
           "kl_divergence", "register_kl", "transform_to", "AbsTransform", "AffineTransform", "ComposeTransform",
           "CumulativeDistributionTransform", "ExpTransform", "IndependentTransform", "PowerTransform",
           "ReshapeTransform", "SigmoidTransform", "SoftplusTransform", "TanhTransform", "SoftmaxTransform",
           "StickBreakingTransform", "Transform", "identity_transform", "constraints", "transforms"]
