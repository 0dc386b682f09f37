"""tf.data pipelines: loom.tf's element sequences against TensorFlow's."""
import numpy as np
import pytest

import loom.tf as ltf
from tests.tf.harness import real_tf


def elements(ds) -> list:
    """A dataset's elements as nested lists of (dtype name, value) pairs."""
    def conv(v):
        if isinstance(v, dict):
            return {k: conv(x) for k, x in v.items()}
        if isinstance(v, (tuple, list)):
            return [conv(x) for x in v]
        a = np.asarray(v.numpy())
        return (v.dtype.name, a.tolist())
    return [conv(e) for e in ds]


X = np.arange(20, dtype=np.float32).reshape(10, 2)
Y = np.arange(10, dtype=np.int64) % 3


PIPELINES = {
    "slices_tuple_batch": lambda tf: tf.data.Dataset.from_tensor_slices((X, Y)).batch(4),
    "slices_dict_map": lambda tf: tf.data.Dataset.from_tensor_slices({"a": X, "b": Y}).map(
        lambda d: {"a": d["a"] * 2.0, "b": d["b"] + 1}),
    "slices_list_default_dtypes": lambda tf: tf.data.Dataset.from_tensor_slices([1.5, 2.5, 3.5]),
    "slices_int_list": lambda tf: tf.data.Dataset.from_tensor_slices([[1, 2], [3, 4]]),
    "from_tensors": lambda tf: tf.data.Dataset.from_tensors((X[:2], Y[:2])),
    "range_map_filter": lambda tf: tf.data.Dataset.range(12).map(lambda x: x * x,
                                                                  num_parallel_calls=tf.data.AUTOTUNE).filter(
        lambda x: x % 2 == 0),
    "range_args": lambda tf: tf.data.Dataset.range(3, 15, 4),
    "batch_drop_remainder": lambda tf: tf.data.Dataset.range(10).batch(3, drop_remainder=True),
    "repeat_take_skip": lambda tf: tf.data.Dataset.range(4).repeat(3).skip(2).take(7),
    "repeat_then_batch": lambda tf: tf.data.Dataset.range(5).repeat(2).batch(4),
    "zip_enumerate": lambda tf: tf.data.Dataset.zip((tf.data.Dataset.range(3), tf.data.Dataset.range(10, 15))
                                                    ).enumerate(start=5),
    "map_tuple_args": lambda tf: tf.data.Dataset.from_tensor_slices((X, Y)).map(
        lambda x, y: (tf.reduce_sum(x), tf.cast(y, tf.float32))).batch(3),
    "cache_prefetch": lambda tf: tf.data.Dataset.range(6).map(lambda x: x + 1).cache().prefetch(tf.data.AUTOTUNE),
    "unbatch": lambda tf: tf.data.Dataset.from_tensor_slices(X).batch(3).unbatch(),
    "concatenate": lambda tf: tf.data.Dataset.range(3).concatenate(tf.data.Dataset.range(7, 9)),
}


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_pipeline_elements_match_tensorflow(name):
    build = PIPELINES[name]
    assert elements(build(ltf)) == elements(build(real_tf))


@pytest.mark.parametrize("name", ["slices_tuple_batch", "range_map_filter", "batch_drop_remainder",
                                  "repeat_take_skip", "zip_enumerate", "concatenate", "cache_prefetch"])
def test_cardinality_matches_tensorflow(name):
    build = PIPELINES[name]
    assert int(build(ltf).cardinality()) == int(build(real_tf).cardinality())


def test_infinite_repeat_cardinality_and_take():
    ds = ltf.data.Dataset.range(3).repeat()
    assert int(ds.cardinality()) == ltf.data.INFINITE_CARDINALITY == int(real_tf.data.INFINITE_CARDINALITY)
    assert [int(x) for x in ds.take(7)] == [0, 1, 2, 0, 1, 2, 0]


def test_as_numpy_iterator():
    ds = ltf.data.Dataset.from_tensor_slices((X, Y)).batch(5)
    got = list(ds.as_numpy_iterator())
    want = list(real_tf.data.Dataset.from_tensor_slices((X, Y)).batch(5).as_numpy_iterator())
    for (gx, gy), (wx, wy) in zip(got, want):
        assert isinstance(gx, np.ndarray)
        np.testing.assert_array_equal(gx, wx)
        np.testing.assert_array_equal(gy, wy)


def test_shuffle_is_a_seeded_permutation_within_the_buffer():
    def order(ds):
        return [int(x) for x in ds]
    ds = ltf.data.Dataset.range(50).shuffle(10, seed=3)
    first, second = order(ds), order(ds)
    assert sorted(first) == list(range(50)) and first != list(range(50))
    assert first != second  # reshuffle_each_iteration=True by default.
    # A buffer of 10 can emit element k only after reading it: position of k >= k - 9.
    assert all(pos >= k - 9 for pos, k in enumerate(first))
    fixed = ltf.data.Dataset.range(50).shuffle(10, seed=3, reshuffle_each_iteration=False)
    assert order(fixed) == order(fixed)
    assert order(ltf.data.Dataset.range(50).shuffle(10, seed=3)) == first  # The seed fixes the sequence.


def test_errors():
    with pytest.raises(ValueError, match="same first dimension"):
        ltf.data.Dataset.from_tensor_slices((X, Y[:3]))
    with pytest.raises(ValueError, match="buffer_size"):
        ltf.data.Dataset.range(3).shuffle(0)
