"""Datasets, samplers and collation: PyTorch parity where results are deterministic, properties elsewhere."""
import collections
import time
import warnings

import numpy as np
import pytest
import torch
import torch.utils.data as tud

import loom
import loom.data as ld


def _plain(x):
    """A comparable structure of nested torch/loom values: tensors become (dtype name, nested list)."""
    if isinstance(x, torch.Tensor):
        return ("tensor", str(x.dtype).split(".")[-1], x.tolist())
    if isinstance(x, loom.Tensor):
        return ("tensor", x.dtype.name, x.tolist())
    if isinstance(x, dict):
        return ("dict", {k: _plain(v) for k, v in x.items()})
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return ("namedtuple", type(x).__name__, [_plain(v) for v in x])
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, [_plain(v) for v in x])
    return x


Point = collections.namedtuple("Point", "x y")

COLLATE_BATCHES = {
    "ints": [1, 2, 3],
    "floats": [0.5, 1.5],
    "bools": [True, False],
    "strings": ["a", "bc"],
    "bytes": [b"a", b"b"],
    "np_arrays": [np.arange(3, dtype=np.float32), np.ones(3, np.float32)],
    "np_int_arrays": [np.arange(4, dtype=np.int32).reshape(2, 2)] * 3,
    "np_scalars": [np.float64(1.5), np.float64(2.0)],
    "np_int16_scalars": [np.int16(3), np.int16(4)],
    "tuples": [(1, 2.0, "a"), (3, 4.0, "b")],
    "lists": [[1, 2], [3, 4]],
    "dicts": [{"x": np.zeros(2, np.float32), "y": 1}, {"x": np.ones(2, np.float32), "y": 0}],
    "nested": [{"a": [(1, {"b": 2.0})]}, {"a": [(3, {"b": 4.0})]}],
    "namedtuples": [Point(1, 2.0), Point(3, 4.0)],
}


@pytest.mark.parametrize("name", sorted(COLLATE_BATCHES))
def test_default_collate_matches_torch(name):
    batch = COLLATE_BATCHES[name]
    assert _plain(ld.default_collate(batch)) == _plain(tud.default_collate(batch))


def test_default_collate_tensors_stack_and_grad():
    a = [loom.tensor([1.0, 2.0]), loom.tensor([3.0, 4.0])]
    out = ld.default_collate(a)
    assert out.shape == (2, 2) and out.dtype is loom.float32 and out.tolist() == [[1, 2], [3, 4]]
    w = loom.tensor([1.0, 1.0], requires_grad=True)
    out = ld.default_collate([w * 2, w * 3])
    out.sum().backward()
    assert w.grad.tolist() == [5.0, 5.0]
    bf = ld.default_collate([loom.ones(2, dtype=loom.bfloat16)] * 2)
    assert bf.dtype is loom.bfloat16 and bf.shape == (2, 2)


def test_default_collate_errors():
    with pytest.raises(loom.ShapeError, match="equal size"):
        ld.default_collate([loom.zeros(2), loom.zeros(3)])
    with pytest.raises(RuntimeError, match="equal size"):
        ld.default_collate([[1, 2], [3]])
    with pytest.raises(TypeError):
        ld.default_collate([object(), object()])
    with pytest.raises(TypeError):
        ld.default_collate([np.array(["a"]), np.array(["b"])])


@pytest.mark.parametrize("value", [np.arange(3), np.float32(2.5), {"a": np.ones(2)}, (np.zeros(1), "s"), [1, 2],
                                   "text", 7, Point(np.zeros(1), 1)])
def test_default_convert_matches_torch(value):
    assert _plain(ld.default_convert(value)) == _plain(tud.default_convert(value))


def test_sequential_and_batch_sampler_match_torch():
    for n in (0, 1, 7, 10):
        assert list(ld.SequentialSampler(range(n))) == list(tud.SequentialSampler(range(n)))
        for bs in (1, 3, 5, 11):
            for drop in (False, True):
                ours = ld.BatchSampler(ld.SequentialSampler(range(n)), bs, drop)
                ref = tud.BatchSampler(tud.SequentialSampler(range(n)), bs, drop)
                assert list(ours) == list(ref) and len(ours) == len(ref)


@pytest.mark.parametrize("args", [(0, False), (-1, False), (True, False), (2, "yes"), (2.0, False)])
def test_batch_sampler_validation_matches_torch(args):
    with pytest.raises(ValueError):
        tud.BatchSampler(range(3), *args)
    with pytest.raises(loom.LoomValueError):
        ld.BatchSampler(range(3), *args)


def test_random_sampler_reproducible_and_fresh_per_epoch():
    s = ld.RandomSampler(range(20))
    loom.manual_seed(3)
    a1, a2 = list(s), list(s)
    loom.manual_seed(3)
    b1, b2 = list(s), list(s)
    assert a1 == b1 and a2 == b2 and a1 != a2
    assert sorted(a1) == list(range(20))
    g1, g2 = ld.RandomSampler(range(20), generator=loom.Generator(5)), ld.RandomSampler(range(20),
                                                                                           generator=loom.Generator(5))
    assert list(g1) == list(g2)
    np_gen = ld.RandomSampler(range(20), generator=np.random.default_rng(0))
    assert sorted(np_gen) == list(range(20))


def test_random_sampler_num_samples_and_replacement():
    s = ld.RandomSampler(range(4), num_samples=10, generator=loom.Generator(0))
    out = list(s)
    assert len(out) == len(s) == 10
    assert sorted(out[:4]) == sorted(out[4:8]) == [0, 1, 2, 3] and len(set(out[8:])) == 2
    r = list(ld.RandomSampler(range(3), replacement=True, num_samples=50, generator=loom.Generator(0)))
    assert len(r) == 50 and set(r) <= {0, 1, 2} and len(set(r)) == 3
    with pytest.raises(ValueError):
        ld.RandomSampler(range(3), num_samples=0)
    with pytest.raises(TypeError):
        ld.RandomSampler(range(3), replacement=1)
    with pytest.raises(ValueError):
        ld.RandomSampler([])


def test_subset_and_weighted_samplers():
    s = ld.SubsetRandomSampler([10, 20, 30], generator=loom.Generator(1))
    assert sorted(s) == [10, 20, 30] and len(s) == 3
    w = ld.WeightedRandomSampler([0.0, 1.0, 3.0], 4000, generator=loom.Generator(0))
    counts = np.bincount(list(w), minlength=3)
    assert counts[0] == 0 and 0.2 < counts[1] / 4000 < 0.3
    nr = list(ld.WeightedRandomSampler(loom.tensor([1.0, 1.0, 1.0, 0.0]), 3, replacement=False,
                                       generator=loom.Generator(0)))
    assert sorted(nr) == [0, 1, 2]
    with pytest.raises(ValueError, match="non-zero"):
        ld.WeightedRandomSampler([1.0, 0.0], 2, replacement=False)
    with pytest.raises(ValueError, match="1d"):
        ld.WeightedRandomSampler([[1.0]], 2)


def test_tensor_concat_subset_datasets():
    x, y = loom.arange(12.0).reshape(6, 2), loom.arange(6)
    ds = ld.TensorDataset(x, y)
    assert len(ds) == 6 and ds[2][0].tolist() == [4.0, 5.0] and ds[2][1].item() == 2
    with pytest.raises(ValueError, match="mismatch"):
        ld.TensorDataset(x, loom.arange(5))
    cat = ds + ds
    assert isinstance(cat, ld.ConcatDataset) and len(cat) == 12 and cat[7][1].item() == 1
    assert cat[-1][1].item() == 5 and cat.cumulative_sizes == [6, 12]
    with pytest.raises(ValueError):
        cat[-13]
    with pytest.raises(IndexError):
        cat[12]
    ref = tud.ConcatDataset([list(range(3)), list(range(10, 12))])
    ours = ld.ConcatDataset([list(range(3)), list(range(10, 12))])
    assert [ours[i] for i in range(-5, 5)] == [ref[i] for i in range(-5, 5)]
    sub = ld.Subset(list(range(100, 110)), [9, 0, 5])
    assert [sub[i] for i in range(3)] == [109, 100, 105] and sub.__getitems__([2, 0]) == [105, 109]
    stack = ld.StackDataset(a=[1, 2], b=["x", "y"])
    assert stack[1] == {"a": 2, "b": "y"} and len(stack) == 2


def test_chain_dataset():
    class R(ld.IterableDataset):
        def __init__(self, n):
            self.n = n

        def __iter__(self):
            return iter(range(self.n))

        def __len__(self):
            return self.n

    chain = R(2) + R(3)
    assert isinstance(chain, ld.ChainDataset) and list(chain) == [0, 1, 0, 1, 2] and len(chain) == 5
    with pytest.raises(TypeError):
        ld.ConcatDataset([R(2)])


def test_random_split_lengths_fractions_and_reproducibility():
    parts = ld.random_split(range(10), [3, 7], generator=loom.Generator(0))
    assert [len(p) for p in parts] == [3, 7]
    assert sorted(list(parts[0]) + list(parts[1])) == list(range(10))
    again = ld.random_split(range(10), [3, 7], generator=loom.Generator(0))
    assert list(again[0]) == list(parts[0])
    # Fractions: floor, then the remainder dealt round-robin, exactly as torch computes the sizes.
    for fracs in ([0.5, 0.5], [0.3, 0.3, 0.4], [0.1, 0.2, 0.7], [1 / 3] * 3):
        for n in (10, 11, 7):
            ours = [len(p) for p in ld.random_split(range(n), fracs, generator=loom.Generator(0))]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ref = [len(p) for p in tud.random_split(range(n), fracs, generator=torch.Generator().manual_seed(0))]
            assert ours == ref
    with pytest.raises(ValueError, match="sum of input lengths"):
        ld.random_split(range(10), [3, 3])
    with pytest.raises(ValueError):
        ld.random_split(range(10), [1.5, -0.5])
    with pytest.warns(UserWarning, match="Length of split at index 1 is 0"):
        ld.random_split(range(2), [0.9, 0.1], generator=loom.Generator(0))


def test_dataset_base_classes_raise():
    with pytest.raises(NotImplementedError):
        ld.Dataset()[0]
    with pytest.raises(NotImplementedError):
        iter(ld.IterableDataset())
    assert ld.get_worker_info() is None


def test_tensor_dataset_batch_fetch_equals_per_example():
    x = loom.arange(24.0).reshape(6, 2, 2)
    y = loom.arange(6)
    ds = ld.TensorDataset(x, y)
    fast = ds.__getitems__([4, 0, 5])
    slow = [ds[i] for i in [4, 0, 5]]
    assert [[t.tolist() for t in ex] for ex in fast] == [[t.tolist() for t in ex] for ex in slow]
    assert [t.shape for t in fast[0]] == [(2, 2), ()] and fast[0][1].dtype is loom.int64
    w = loom.ones(3, 2, requires_grad=True)
    batch = ld.default_collate(ld.TensorDataset(w * 2).__getitems__([0, 2]))
    batch[0].sum().backward()
    assert w.grad.tolist() == [[2.0, 2.0], [0.0, 0.0], [2.0, 2.0]]
    arrays = ld.TensorDataset(np.arange(4), np.arange(4) * 10).__getitems__([3, 1])
    assert [tuple(int(v) for v in ex) for ex in arrays] == [(3, 30), (1, 10)]


def _first(sampler, k):
    it = iter(sampler)
    return [next(it) for _ in range(k)]


def _peak_bytes(fn):
    import tracemalloc
    tracemalloc.start()
    try:
        start = time.perf_counter()
        out = fn()
        elapsed = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return out, peak, elapsed


@pytest.mark.parametrize("make", [
    lambda g: ld.RandomSampler(range(1000), replacement=True, num_samples=10**10, generator=g),
    lambda g: ld.RandomSampler(range(1000), replacement=False, num_samples=10**10, generator=g),
    lambda g: ld.WeightedRandomSampler([1.0, 2.0, 0.0, 4.0], 10**10, generator=g),
], ids=["random-replacement", "random-permutations", "weighted"])
def test_huge_num_samples_is_drawn_lazily_and_reproducibly(make):
    # PyTorch draws such samplers lazily; 10**10 int64 indices would be 74.5 GiB.
    out, peak, elapsed = _peak_bytes(lambda: _first(make(loom.Generator(7)), 50))
    assert peak < 2_000_000, f"iterating 50 indices allocated {peak} bytes"
    assert elapsed < 2.0
    assert len(out) == 50 and all(isinstance(i, int) and 0 <= i < 1000 for i in out)
    assert out == _first(make(loom.Generator(7)), 50)
    assert out != _first(make(loom.Generator(8)), 50)
    assert len(make(None)) == 10**10


def test_chunked_replacement_draws_cover_chunk_boundaries():
    r = list(ld.RandomSampler(range(5), replacement=True, num_samples=3000, generator=loom.Generator(1)))
    assert len(r) == 3000 and set(r) == set(range(5))
    assert r == list(ld.RandomSampler(range(5), replacement=True, num_samples=3000, generator=loom.Generator(1)))
    w = list(ld.WeightedRandomSampler([0.0, 1.0, 3.0], 3000, generator=loom.Generator(0)))
    assert len(w) == 3000 and set(w) == {1, 2}
    assert 0.7 < w.count(2) / 3000 < 0.8


def test_sampler_takes_its_generator_key_when_iteration_starts():
    g = loom.Generator(4)
    s = ld.RandomSampler(range(10), replacement=True, num_samples=10, generator=g)
    it = iter(s)  # The key is drawn here, before the first index, as an eager draw would.
    key_after = loom.Generator(4)
    key_after.next_key()
    assert g.next_key() == key_after.next_key()
    assert len(list(it)) == 10


def test_dataloader_over_a_huge_replacement_sampler_starts_at_once():
    # A GPT trainer's pattern: an "infinite" sampler behind a DataLoader.
    ds = ld.TensorDataset(loom.arange(100.0))
    sampler = ld.RandomSampler(ds, replacement=True, num_samples=10**10, generator=loom.Generator(3))
    loader = ld.DataLoader(ds, sampler=sampler, batch_size=4)
    start = time.perf_counter()
    batches = [b[0].tolist() for b, _ in zip(loader, range(3))]
    assert time.perf_counter() - start < 2.0
    assert len(loader) == 10**10 // 4 and all(len(b) == 4 for b in batches)
    assert batches == [b[0].tolist() for b, _ in zip(ld.DataLoader(ds, sampler=ld.RandomSampler(
        ds, replacement=True, num_samples=10**10, generator=loom.Generator(3)), batch_size=4), range(3))]
