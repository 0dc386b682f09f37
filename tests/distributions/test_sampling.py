"""Samples from loom's generator have the right distribution (fixed seed, large draws), and rsample's
gradients are the reparameterisation gradients."""
import numpy as np
import pytest
import torch

import loom
import loom.distributions as D

N = 20000


def _ks(samples, cdf_values):
    """The Kolmogorov-Smirnov distance between the samples' empirical CDF and the true CDF at the samples."""
    order = np.argsort(samples)
    f = cdf_values[order]
    n = len(samples)
    return max(np.max(np.arange(1, n + 1) / n - f), np.max(f - np.arange(0, n) / n))


CONTINUOUS = [
    ("Normal", lambda: D.Normal(1.5, 2.0)),
    ("Uniform", lambda: D.Uniform(-1.0, 3.0)),
    ("Laplace", lambda: D.Laplace(0.5, 1.5)),
    ("Cauchy", lambda: D.Cauchy(-1.0, 0.5)),
    ("Exponential", lambda: D.Exponential(2.5)),
    ("Gumbel", lambda: D.Gumbel(1.0, 2.0)),
    ("HalfNormal", lambda: D.HalfNormal(1.5)),
    ("LogNormal", lambda: D.LogNormal(0.2, 0.7)),
    # In float64: in float32, 1.3% of Gamma(0.05) lies below the smallest normal number (where samples are
    # clamped, as in PyTorch).
    ("Gamma-0.05", lambda: D.Gamma(loom.tensor(0.05, dtype=loom.float64), 1.0)),
    ("Gamma-0.5", lambda: D.Gamma(0.5, 2.0)),
    ("Gamma-1", lambda: D.Gamma(1.0, 1.0)),
    ("Gamma-4", lambda: D.Gamma(4.0, 0.5)),
    ("Gamma-100", lambda: D.Gamma(100.0, 3.0)),
    ("Chi2", lambda: D.Chi2(3.0)),
    ("HalfCauchy", lambda: D.HalfCauchy(2.0)),
    ("Pareto", lambda: D.Pareto(1.0, 2.5)),
    ("Weibull", lambda: D.Weibull(2.0, 1.5)),
    ("InverseGamma", lambda: D.InverseGamma(3.0, 2.0)),
]


@pytest.mark.parametrize("name,make", CONTINUOUS, ids=[c[0] for c in CONTINUOUS])
def test_continuous_samples_follow_the_cdf(name, make):
    loom.manual_seed(0)
    d = make()
    x = d.sample((N,))
    assert tuple(x.shape) == (N,)
    xs = x.numpy().astype(np.float64)
    cdf = d.cdf(loom.tensor(xs, dtype=loom.float64)).numpy()
    assert _ks(xs, cdf) < 1.63 / np.sqrt(N)  # The 1% critical value.


MOMENTS = [
    ("Beta", lambda: D.Beta(loom.tensor([0.5, 2.0, 5.0]), loom.tensor([0.5, 3.0, 1.0]))),
    ("StudentT", lambda: D.StudentT(loom.tensor([5.0, 10.0]), loom.tensor([1.0, -2.0]), loom.tensor([2.0, 0.5]))),
    ("Dirichlet", lambda: D.Dirichlet(loom.tensor([0.3, 1.0, 4.0]))),
    ("MVN", lambda: D.MultivariateNormal(loom.tensor([1.0, -1.0, 0.0]),
                                         covariance_matrix=loom.tensor([[2.0, 0.5, 0.1], [0.5, 1.0, -0.3],
                                                                        [0.1, -0.3, 0.5]]))),
    ("LowRankMVN", lambda: D.LowRankMultivariateNormal(loom.tensor([0.0, 1.0]), loom.tensor([[1.0], [0.5]]),
                                                       loom.tensor([0.5, 0.2]))),
    ("Mixture", lambda: D.MixtureSameFamily(D.Categorical(probs=loom.tensor([0.2, 0.8])),
                                            D.Normal(loom.tensor([-2.0, 1.0]), loom.tensor([0.5, 1.0])))),
    ("Independent", lambda: D.Independent(D.Normal(loom.tensor([[0.0, 1.0]]), loom.tensor([[1.0, 2.0]])), 1)),
    ("FisherSnedecor", lambda: D.FisherSnedecor(loom.tensor([4.0, 10.0]), loom.tensor([12.0, 20.0]))),
    ("Kumaraswamy", lambda: D.Kumaraswamy(loom.tensor([0.5, 2.0]), loom.tensor([2.0, 3.0]))),
    ("Multinomial", lambda: D.Multinomial(10, probs=loom.tensor([0.1, 0.3, 0.6]))),
    ("NegativeBinomial", lambda: D.NegativeBinomial(loom.tensor([2.0, 30.0]), probs=loom.tensor([0.3, 0.6]))),
    ("RelaxedBernoulli", lambda: D.RelaxedBernoulli(loom.tensor(0.05), probs=loom.tensor([0.2, 0.7]))),
]


@pytest.mark.parametrize("name,make", MOMENTS, ids=[m[0] for m in MOMENTS])
def test_sample_moments(name, make):
    loom.manual_seed(1)
    d = make()
    x = d.sample((N,))
    assert tuple(x.shape) == (N,) + tuple(d.batch_shape) + tuple(d.event_shape)
    xs = x.numpy().astype(np.float64)
    if name == "RelaxedBernoulli":  # At a low temperature the draws crowd at 0 and 1, with mean near probs.
        np.testing.assert_allclose(xs.mean(0), [0.2, 0.7], atol=0.02)
        assert ((xs > 0) & (xs < 1)).all()
        return
    mean, var = d.mean.numpy(), d.variance.numpy()
    se_mean = np.sqrt(var / N)
    assert (np.abs(xs.mean(0) - mean) < 5 * se_mean).all(), (xs.mean(0), mean)
    m4 = ((xs - mean) ** 4).mean(0)
    assert (np.abs(xs.var(0) - var) < 5 * np.sqrt(m4 / N) + 1e-9).all(), (xs.var(0), var)
    if name in ("MVN", "LowRankMVN"):
        cov = np.cov(xs.T)
        np.testing.assert_allclose(cov, d.covariance_matrix.numpy(), atol=0.05)


def _frequencies_match(xs, d, kmax):
    ks = np.arange(kmax + 1)
    pmf = np.exp(d.log_prob(loom.tensor(ks.astype(np.float64))).numpy())
    freq = np.bincount(xs.astype(np.int64), minlength=kmax + 1)[:kmax + 1] / len(xs)
    assert (np.abs(freq - pmf) < 5 * np.sqrt(pmf * (1 - pmf) / len(xs)) + 2.0 / len(xs)).all()


@pytest.mark.parametrize("rate", [0.1, 3.0, 9.9, 10.0, 30.0, 500.0])
def test_poisson_frequencies(rate):
    loom.manual_seed(2)
    d = D.Poisson(loom.tensor(rate, dtype=loom.float64))
    xs = d.sample((N,)).numpy()
    assert (xs == np.floor(xs)).all() and (xs >= 0).all()
    if rate <= 30:
        _frequencies_match(xs, d, int(rate + 6 * np.sqrt(rate) + 5))
    np.testing.assert_allclose(xs.mean(), rate, atol=5 * np.sqrt(rate / N))
    np.testing.assert_allclose(xs.var(), rate, rtol=0.05)


@pytest.mark.parametrize("n,p", [(5, 0.3), (20, 0.9), (100, 0.3), (1000, 0.5), (50, 0.05), (0, 0.4), (7, 1.0)])
def test_binomial_frequencies(n, p):
    loom.manual_seed(3)
    d = D.Binomial(loom.tensor(float(n), dtype=loom.float64), probs=loom.tensor(p, dtype=loom.float64))
    xs = d.sample((N,)).numpy()
    assert (xs >= 0).all() and (xs <= n).all() and (xs == np.floor(xs)).all()
    if n * p * (1 - p) > 0:
        _frequencies_match(xs, d, n if n <= 100 else 0)
        np.testing.assert_allclose(xs.mean(), n * p, atol=5 * np.sqrt(n * p * (1 - p) / N))
    else:
        assert (xs == n * p).all()


@pytest.mark.parametrize("make,kmax", [(lambda: D.Geometric(probs=loom.tensor(0.3, dtype=loom.float64)), 15),
                                       (lambda: D.Bernoulli(probs=loom.tensor(0.3, dtype=loom.float64)), 1),
                                       (lambda: D.Categorical(probs=loom.tensor([0.1, 0.2, 0.3, 0.4],
                                                                                dtype=loom.float64)), 3)])
def test_discrete_frequencies(make, kmax):
    loom.manual_seed(4)
    d = make()
    _frequencies_match(d.sample((N,)).numpy(), d, kmax)


def test_one_hot_categorical_samples_are_one_hot_with_the_right_frequencies():
    loom.manual_seed(5)
    d = D.OneHotCategorical(probs=loom.tensor([[0.7, 0.3], [0.1, 0.9]]))
    x = d.sample((N,)).numpy()
    assert x.shape == (N, 2, 2) and (x.sum(-1) == 1).all()
    np.testing.assert_allclose(x.mean(0), [[0.7, 0.3], [0.1, 0.9]], atol=0.015)


def test_the_seed_makes_samples_repeatable():
    d = D.Gamma(loom.tensor([0.5, 3.0]), 1.0)
    loom.manual_seed(7)
    a = d.sample((5,)).numpy()
    loom.manual_seed(7)
    b = d.sample((5,)).numpy()
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, d.sample((5,)).numpy())


def test_normal_rsample_gradient_is_the_reparameterisation():
    loom.manual_seed(0)
    loc = loom.tensor([1.0, 2.0], requires_grad=True)
    scale = loom.tensor([0.5, 3.0], requires_grad=True)
    x = D.Normal(loc, scale).rsample((100,))
    x.sum().backward()
    np.testing.assert_allclose(loc.grad.numpy(), [100.0, 100.0])
    eps = (x.detach() - loc.detach()) / scale.detach()
    np.testing.assert_allclose(scale.grad.numpy(), eps.sum(0).numpy(), rtol=1e-5)


@pytest.mark.parametrize("alpha", [0.05, 0.7, 2.0, 30.0, 600.0])
def test_gamma_rsample_gradient_matches_torch(alpha):
    loom.manual_seed(0)
    a = loom.tensor(np.full(2000, alpha), requires_grad=True)
    x = D.Gamma(a, 1.0).rsample()
    x.sum().backward()
    expected = torch._standard_gamma_grad(torch.full((2000,), alpha, dtype=torch.float64),
                                          torch.tensor(x.detach().numpy()))
    # torch's approximation is good to about 1e-3 relative (loom's series/fraction to about 1e-7).
    np.testing.assert_allclose(a.grad.numpy(), expected.numpy(), rtol=2e-3, atol=1e-30)


def test_gamma_rsample_gradient_is_the_implicit_one():
    """d x / d alpha = -(d F / d alpha) / f, with F differentiated by loom's autograd through gammainc."""
    from loom.distributions.gamma import _gammainc
    loom.manual_seed(1)
    a = loom.tensor(np.array([0.3, 1.0, 4.0, 50.0]), requires_grad=True)
    x = D.Gamma(a, 1.0).rsample()
    (g,) = loom.autograd.grad(x.sum(), [a])
    a2 = loom.tensor(a.detach().numpy(), requires_grad=True)
    F = _gammainc(a2, x.detach())
    (dF,) = loom.autograd.grad(F.sum(), [a2])
    f = D.Gamma(a2.detach(), 1.0).log_prob(x.detach()).exp()
    np.testing.assert_allclose(g.numpy(), (-dF / f).numpy(), rtol=1e-6)


@pytest.mark.parametrize("make,param,d_mean", [
    (lambda p: D.Gamma(p, 2.0), 3.0, lambda p: 1 / 2.0),
    (lambda p: D.Chi2(p), 3.0, lambda p: 1.0),
    (lambda p: D.Beta(p, 2.0), 1.5, lambda p: 2.0 / (p + 2.0) ** 2),
    (lambda p: D.Dirichlet(loom.stack([p, loom.tensor(1.0, dtype=loom.float64), loom.tensor(2.0,
                                       dtype=loom.float64)])), 0.8, lambda p: 3.0 / (p + 3.0) ** 2),
])
def test_rsample_gradients_of_the_mean(make, param, d_mean):
    """The Monte-Carlo average of d x / d theta estimates d E[x] / d theta."""
    loom.manual_seed(2)
    p = loom.tensor(param, dtype=loom.float64, requires_grad=True)
    x = make(p).rsample((N,))
    first = x if x.ndim == 1 else x[:, 0]
    first.mean().backward()
    np.testing.assert_allclose(p.grad.item(), d_mean(param), rtol=0.05)


def test_student_t_rsample_is_differentiable_in_every_parameter():
    loom.manual_seed(3)
    df = loom.tensor(4.0, dtype=loom.float64, requires_grad=True)
    loc = loom.tensor(1.0, dtype=loom.float64, requires_grad=True)
    scale = loom.tensor(2.0, dtype=loom.float64, requires_grad=True)
    x = D.StudentT(df, loc, scale).rsample((N,))
    ((x - 1.0) ** 2).mean().backward()  # E = scale^2 df / (df - 2).
    np.testing.assert_allclose(scale.grad.item(), 2 * 2.0 * 4.0 / 2.0, rtol=0.1)
    np.testing.assert_allclose(df.grad.item(), 4.0 * -2.0 / 4.0, rtol=0.25)
    assert abs(loc.grad.item()) < 0.2


def test_relaxed_one_hot_categorical_rsample():
    loom.manual_seed(4)
    logits = loom.tensor([0.0, 1.0, 2.0], requires_grad=True)
    d = D.RelaxedOneHotCategorical(loom.tensor(0.1), logits=logits)
    x = d.rsample((N,))
    np.testing.assert_allclose(x.detach().sum(-1).numpy(), 1.0, rtol=1e-5)
    np.testing.assert_allclose(x.detach().mean(0).numpy(), torch.softmax(torch.tensor([0.0, 1.0, 2.0]), 0).numpy(),
                               atol=0.02)
    x[:, 2].mean().backward()
    assert logits.grad[2].item() > 0


def test_gamma_rsample_has_no_second_derivative_rather_than_a_wrong_one():
    a = loom.tensor([2.0], dtype=loom.float64, requires_grad=True)
    x = D.Gamma(a, 1.0).rsample()
    (g,) = loom.autograd.grad(x.sum(), [a], create_graph=True)
    assert g.item() > 0
    with pytest.raises(loom.AutogradError, match="does not require grad"):
        loom.autograd.grad(g.sum(), [a])


def test_log_factorial_of_the_rejection_samplers():
    import math
    from loom.distributions.utils import _log_factorial
    k = np.concatenate([np.arange(0.0, 100.0), np.logspace(2, 7, 50)])
    want = np.array([math.lgamma(v + 1) for v in k])
    got = _log_factorial(loom.tensor(k, dtype=loom.float64)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)
