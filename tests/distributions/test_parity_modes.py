"""Log-densities, entropies, CDFs and KL divergences agree with PyTorch in every loom execution mode
(eager, compiled, traced by loom.function), gradients included, through the shared parity harness.

The compiled mode generates and builds C kernels for graphs full of lgamma/digamma expansions (tens of
seconds per case on a cold kernel cache), so its cases are marked slow; eager and traced run by default.
"""
import os

import numpy as np
import pytest

import loom.distributions  # noqa: F401 (makes `loom.distributions` an attribute for the bodies)
from tests.parity.harness import Case, positive, randn, run_case, uniform


def _simplex(*shape):
    def make(rng):
        p = rng.uniform(0.1, 1.0, shape).astype(np.float32)
        return p / p.sum(-1, keepdims=True)
    return make


def _spd(n):
    def make(rng):
        a = rng.standard_normal((n, n)).astype(np.float32)
        return a @ a.T + n * np.eye(n, dtype=np.float32)
    return make


CASES = [
    Case("Normal.log_prob", lambda m, loc, scale, x: m.distributions.Normal(loc, scale).log_prob(x),
         (randn(3), positive(3, low=0.5), randn(2, 3)), second_order=True),
    Case("Normal.cdf+icdf", lambda m, loc, scale, u: (m.distributions.Normal(loc, scale).cdf(u),
                                                      m.distributions.Normal(loc, scale).icdf(u)),
         (randn(3), positive(3, low=0.5), uniform(2, 3, low=0.1, high=0.9))),
    Case("Laplace.log_prob+entropy", lambda m, loc, scale, x: (m.distributions.Laplace(loc, scale).log_prob(x),
                                                               m.distributions.Laplace(loc, scale).entropy()),
         (randn(3), positive(3, low=0.5), randn(2, 3))),
    Case("Gamma.log_prob+entropy", lambda m, c, r, x: (m.distributions.Gamma(c, r).log_prob(x),
                                                       m.distributions.Gamma(c, r).entropy()),
         (positive(3, low=0.5, high=4.0), positive(3, low=0.5), positive(2, 3, low=0.2))),
    Case("Beta.log_prob", lambda m, a, b, x: m.distributions.Beta(a, b).log_prob(x),
         (positive(3, low=0.5, high=4.0), positive(3, low=0.5, high=4.0), uniform(2, 3, low=0.1, high=0.9))),
    Case("StudentT.log_prob", lambda m, df, x: m.distributions.StudentT(df).log_prob(x),
         (positive(3, low=1.0, high=6.0), randn(2, 3))),
    Case("Categorical.entropy", lambda m, logits: m.distributions.Categorical(logits=logits).entropy(),
         (randn(3, 4),)),
    Case("Dirichlet.log_prob", lambda m, c, x: m.distributions.Dirichlet(c).log_prob(x),
         (positive(2, 4, low=0.5, high=3.0), _simplex(2, 4))),
    Case("MultivariateNormal.log_prob",
         lambda m, loc, cov, x: m.distributions.MultivariateNormal(loc, covariance_matrix=cov).log_prob(x),
         (randn(3), _spd(3), randn(2, 3)), rtol=1e-4, atol=1e-4,
         reason="float32 Cholesky and inverse of a 3x3 matrix: rounding differs from LAPACK's"),
    Case("kl(Normal, Normal)", lambda m, a, b, c, d: m.distributions.kl_divergence(
        m.distributions.Normal(a, b), m.distributions.Normal(c, d)),
         (randn(3), positive(3, low=0.5), randn(3), positive(3, low=0.5))),
    Case("kl(Gamma, Gamma)", lambda m, a, b, c, d: m.distributions.kl_divergence(
        m.distributions.Gamma(a, b), m.distributions.Gamma(c, d)),
         (positive(3, low=0.5), positive(3, low=0.5), positive(3, low=0.5), positive(3, low=0.5))),
    Case("TransformedDistribution.log_prob", lambda m, loc, scale, y: m.distributions.TransformedDistribution(
        m.distributions.Normal(loc, scale), [m.distributions.transforms.SigmoidTransform()]).log_prob(y),
         (randn(3), positive(3, low=0.5), uniform(2, 3, low=0.1, high=0.9))),
]


_MODES = [m for m in os.environ.get("LOOM_PARITY_MODES", "eager,compiled,traced").split(",") if m]
PARAMS = [pytest.param(case, m, id=f"{m}-{case}", marks=[pytest.mark.slow] if m == "compiled" else [])
          for m in _MODES for case in CASES]


@pytest.mark.parametrize("case,parity_mode", PARAMS)
def test_distribution_parity(case, parity_mode):
    run_case(case, parity_mode)
