"""Counter-based random numbers: reproducible, independent of realisation order, well distributed."""
import math

import numpy as np
import pytest

import loom

N = 100_000

SAMPLERS = {
    "rand": lambda: loom.rand(4, 5),
    "rand_float64": lambda: loom.rand(7, dtype=loom.float64),
    "randn": lambda: loom.randn(3, 3),
    "randint": lambda: loom.randint(-5, 5, (10,)),
    "randint_high_only": lambda: loom.randint(7, (3, 2)),
    "bernoulli": lambda: loom.bernoulli(loom.full((12,), 0.3)),
    "randperm": lambda: loom.randperm(20),
    "normal_scalars": lambda: loom.normal(2.0, 3.0, size=(6,)),
    "normal_tensors": lambda: loom.normal(loom.arange(4.0), loom.full((4,), 0.5)),
    "rand_like": lambda: loom.rand_like(loom.ones(2, 3)),
    "randn_like": lambda: loom.randn_like(loom.ones(3, dtype=loom.float64)),
    "multinomial": lambda: loom.multinomial(loom.tensor([0.1, 0.2, 0.7]), 5, replacement=True),
    "uniform_": lambda: loom.empty(5).uniform_(-1, 1),
    "normal_": lambda: loom.empty(5).normal_(0.0, 2.0),
    "exponential_": lambda: loom.empty(5).exponential_(),
    "bernoulli_": lambda: loom.empty(6).bernoulli_(0.5),
    "random_": lambda: loom.empty(6, dtype=loom.int64).random_(0, 100),
}


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_manual_seed_reproduces_a_sequence(name):
    draw = SAMPLERS[name]
    loom.manual_seed(1234)
    first = [draw().tolist() for _ in range(3)]
    loom.manual_seed(1234)
    second = [draw().tolist() for _ in range(3)]
    assert first == second
    assert first[0] != first[1] or name == "bernoulli_"  # Consecutive calls are independent streams.


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_different_seeds_differ(name):
    loom.manual_seed(1)
    a = SAMPLERS[name]().tolist()
    loom.manual_seed(2)
    b = SAMPLERS[name]().tolist()
    assert a != b


def test_values_do_not_depend_on_realisation_order():
    loom.manual_seed(7)
    a, b = loom.randn(100), loom.rand(100)
    b_first = b.tolist()
    a_second = a.tolist()
    loom.manual_seed(7)
    a2, b2 = loom.randn(100), loom.rand(100)
    assert a2.tolist() == a_second and b2.tolist() == b_first


def test_values_do_not_depend_on_laziness():
    loom.manual_seed(3)
    chained = (loom.rand(50) * 2 + 1).exp()
    loom.manual_seed(3)
    eager = loom.rand(50).realize()
    assert chained.tolist() == (eager * 2 + 1).exp().tolist()


def test_values_depend_only_on_key_and_index():
    loom.manual_seed(5)
    flat = loom.rand(6).tolist()
    loom.manual_seed(5)
    assert loom.rand(2, 3).reshape(-1).tolist() == flat


def test_rand_statistics():
    loom.manual_seed(0)
    u = loom.rand(N).numpy().astype(np.float64)
    assert u.min() >= 0.0 and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 4 * math.sqrt(1 / 12 / N)
    assert abs(u.var() - 1 / 12) < 0.002
    counts = np.histogram(u, bins=20, range=(0, 1))[0]
    chi2 = ((counts - N / 20) ** 2 / (N / 20)).sum()
    assert chi2 < 45  # 19 degrees of freedom: p < 0.001 above ~43.8.


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_rand_stays_below_one_in_every_float_type(dtype):
    loom.manual_seed(0)
    u = loom.rand(200_000, dtype=getattr(loom, dtype)).float().numpy()
    assert u.min() >= 0.0 and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 0.01


def test_randn_statistics():
    loom.manual_seed(0)
    z = loom.randn(N).numpy().astype(np.float64)
    assert abs(z.mean()) < 4 / math.sqrt(N)
    assert abs(z.std() - 1.0) < 0.01
    assert abs(((z - z.mean()) ** 3).mean()) < 0.05  # Skewness.
    assert abs(((z - z.mean()) ** 4).mean() / z.var() ** 2 - 3.0) < 0.1  # Kurtosis.
    assert 0.68 < (np.abs(z) < 1).mean() < 0.685


def test_normal_statistics():
    loom.manual_seed(1)
    x = loom.normal(2.0, 3.0, size=(N,)).numpy()
    assert abs(x.mean() - 2.0) < 0.05 and abs(x.std() - 3.0) < 0.03
    m = loom.normal(loom.full((N,), -1.0), loom.full((N,), 0.5)).numpy()
    assert abs(m.mean() + 1.0) < 0.01 and abs(m.std() - 0.5) < 0.01


def test_randint_bounds_and_uniformity():
    loom.manual_seed(2)
    r = loom.randint(-3, 4, (N,)).numpy()
    assert r.dtype == np.int64 and r.min() == -3 and r.max() == 3
    counts = np.bincount(r + 3)
    assert counts.min() > N / 7 * 0.95 and counts.max() < N / 7 * 1.05
    assert loom.randint(0, 2 ** 40, (1000,)).numpy().max() > 2 ** 39
    assert loom.randint(5, (10,), dtype=loom.int8).dtype is loom.int8


def test_bernoulli_statistics():
    loom.manual_seed(3)
    p = loom.full((N,), 0.3)
    b = loom.bernoulli(p).numpy()
    assert set(np.unique(b)) <= {0.0, 1.0}
    assert abs(b.mean() - 0.3) < 4 * math.sqrt(0.21 / N)
    edges = loom.bernoulli(loom.tensor([0.0, 1.0] * 50)).numpy()
    assert edges.tolist() == [0.0, 1.0] * 50


def test_randperm_is_a_permutation():
    loom.manual_seed(4)
    perms = [loom.randperm(50).tolist() for _ in range(3)]
    for p in perms:
        assert sorted(p) == list(range(50))
    assert perms[0] != perms[1]
    assert loom.randperm(0).tolist() == []
    assert loom.randperm(5, dtype=loom.int32).dtype is loom.int32


def test_multinomial_frequencies():
    loom.manual_seed(5)
    draws = loom.multinomial(loom.tensor([0.2, 0.3, 0.5]), 30_000, replacement=True).numpy()
    freq = np.bincount(draws, minlength=3) / 30_000
    np.testing.assert_allclose(freq, [0.2, 0.3, 0.5], atol=0.015)
    no_repeat = loom.multinomial(loom.tensor([[1.0, 1.0, 1.0, 1.0]]), 4).tolist()[0]
    assert sorted(no_repeat) == [0, 1, 2, 3]


def test_inplace_fills_statistics():
    loom.manual_seed(6)
    u = loom.empty(N).uniform_(-2.0, 3.0).numpy()
    assert u.min() >= -2.0 and u.max() < 3.0 and abs(u.mean() - 0.5) < 0.03
    e = loom.empty(N).exponential_(2.0).numpy()
    assert e.min() >= 0 and abs(e.mean() - 0.5) < 0.01
    r = loom.empty(N, dtype=loom.int64).random_(3, 7).numpy()
    assert r.min() == 3 and r.max() == 6


def test_inplace_fill_refuses_a_leaf_that_requires_grad():
    w = loom.empty(3, requires_grad=True)
    with pytest.raises(loom.AutogradError, match="loom.uniform_"):
        w.uniform_()
    with loom.no_grad():
        w.normal_()
    assert w.requires_grad and w.is_leaf


def test_generator_objects_are_independent_of_the_default():
    g1, g2 = loom.Generator(42), loom.Generator(42)
    loom.manual_seed(0)
    a = loom.rand(5, generator=g1).tolist()
    loom.rand(5)  # Advances only the default generator.
    assert loom.rand(5, generator=g2).tolist() == a
    assert g1.initial_seed() == 42
    assert loom.Generator(43).manual_seed(42).initial_seed() == 42


def test_get_and_set_rng_state():
    loom.manual_seed(9)
    loom.rand(3)
    state = loom.get_rng_state()
    after = [loom.randn(4).tolist(), loom.randint(0, 10, (4,)).tolist()]
    loom.set_rng_state(state)
    assert [loom.randn(4).tolist(), loom.randint(0, 10, (4,)).tolist()] == after
    g = loom.Generator(1)
    saved = g.get_state()
    x = loom.rand(3, generator=g).tolist()
    g.set_state(saved)
    assert loom.rand(3, generator=g).tolist() == x


def test_seed_and_initial_seed():
    s = loom.seed()
    assert loom.initial_seed() == s
    loom.manual_seed(11)
    assert loom.initial_seed() == 11


def test_random_shapes_and_dtypes():
    assert loom.rand(2, 3).shape == (2, 3) and loom.rand((2, 3)).shape == (2, 3)
    assert loom.randn(()).shape == () and loom.rand(0).shape == (0,)
    assert loom.randn(4, dtype=loom.float64).dtype is loom.float64
    assert loom.rand(3, dtype=loom.bfloat16).dtype is loom.bfloat16
    assert loom.randn(3, requires_grad=True).requires_grad
    assert loom.randint(0, 3, (2,)).dtype is loom.int64


def test_dropout_masks_are_reproducible():
    x = loom.ones(1000)
    loom.manual_seed(8)
    a = loom.nn.functional.dropout(x, 0.5, training=True).tolist()
    loom.manual_seed(8)
    b = loom.nn.functional.dropout(x, 0.5, training=True).tolist()
    assert a == b
    kept = np.array(a) != 0
    assert 0.45 < kept.mean() < 0.55 and set(np.unique(np.array(a))) <= {0.0, 2.0}


def test_rng_state_round_trips_for_every_64_bit_seed():
    for s in (0, 1, 2**63 - 1, 2**63, 2**64 - 1):
        loom.manual_seed(s)
        state = loom.get_rng_state()
        a = loom.rand(3).tolist()
        loom.set_rng_state(state)
        assert loom.rand(3).tolist() == a
    for _ in range(20):
        loom.seed()  # A random 64-bit seed: half of them are above the int64 range.
        state = loom.get_rng_state()
        a = loom.rand(2).tolist()
        loom.set_rng_state(state)
        assert loom.rand(2).tolist() == a
