"""Regressions from running TF2 tutorial-style programs under loom.tf and TensorFlow side by side.

Each test is a small user program (or the part of one that failed) checked
against real TensorFlow where the result is deterministic.
"""
import numpy as np
import pytest

import loom.tf as ltf
from loom.errors import LoomValueError
from tests.tf.harness import real_tf


def close(a, b, tol=1e-5):
    a = a.numpy() if hasattr(a, "numpy") else np.asarray(a)
    b = b.numpy() if hasattr(b, "numpy") else np.asarray(b)
    assert a.shape == b.shape, (a.shape, b.shape)
    np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), rtol=tol, atol=tol)


# ------------------------------------------------------------------ ops

@pytest.mark.parametrize("axis,batch_dims,ishape", [(1, 1, (2, 3)), (2, 1, (2, 2)), (2, 2, (2, 3, 2)), (1, -1, (2, 4))])
def test_gather_batch_dims(axis, batch_dims, ishape):
    rng = np.random.default_rng(0)
    p = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    hi = p.shape[axis]
    idx = rng.integers(0, hi, ishape).astype(np.int32)
    want = real_tf.gather(p, idx, axis=axis, batch_dims=batch_dims)
    close(ltf.gather(p, idx, axis=axis, batch_dims=batch_dims), want)


def test_slice_and_strided_slice():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    close(ltf.slice(x, [1, 0, 1], [1, -1, 2]), real_tf.slice(x, [1, 0, 1], [1, -1, 2]))
    args = ([0, 1, 0], [2, 3, 4], [1, 1, 2])
    for kw in ({}, {"begin_mask": 0b010}, {"end_mask": 0b001, "shrink_axis_mask": 0b100}):
        close(ltf.strided_slice(x, *args, **kw), real_tf.strided_slice(x, *args, **kw))


def test_integer_true_division_is_float64():
    a, b = np.array([7, 4], np.int32), np.array([2, 3], np.int32)
    out = ltf.math.truediv(a, b)
    want = real_tf.math.truediv(a, b)
    assert out.dtype.name == want.dtype.name == "float64"
    close(out, want)
    assert ltf.divide(np.int8(7), np.int8(2)).dtype.name == "float32"


def test_confusion_matrix():
    lab, pred = [0, 1, 2, 1, 1], [0, 2, 2, 1, 0]
    close(ltf.math.confusion_matrix(lab, pred), real_tf.math.confusion_matrix(lab, pred))
    out = ltf.math.confusion_matrix(lab, pred, num_classes=4, weights=[1.0, 2, 3, 4, 5], dtype=ltf.float32)
    close(out, real_tf.math.confusion_matrix(lab, pred, num_classes=4, weights=[1.0, 2, 3, 4, 5],
                                             dtype=real_tf.float32))
    with pytest.raises(LoomValueError, match="num_classes"):
        ltf.math.confusion_matrix([0, 3], [0, 1], num_classes=2)


# ------------------------------------------------------------------ keras

def _same_weights(models):
    ref = models[0].get_weights()
    for m in models[1:]:
        m.set_weights(ref)


def test_multi_output_compile_losses_weights_and_metrics():
    rng = np.random.default_rng(0)
    xa, xb = rng.random((16, 3), np.float32), rng.random((16, 2), np.float32)
    ya, yb = rng.random((16, 1), np.float32), rng.integers(0, 2, 16)

    def build(tf):
        a_in, b_in = tf.keras.Input((3,), name="a"), tf.keras.Input((2,), name="b")
        cat = tf.keras.layers.Concatenate()([a_in, b_in])
        o1 = tf.keras.layers.Dense(1, name="o1")(cat)
        o2 = tf.keras.layers.Dense(2, activation="softmax", name="o2")(cat)
        return tf.keras.Model([a_in, b_in], [o1, o2])
    models = [build(real_tf), build(ltf)]
    _same_weights(models)
    res = []
    for m in models:
        m.compile("sgd", loss=["mse", "sparse_categorical_crossentropy"], loss_weights=[1.0, 0.5],
                  metrics=[["mae"], ["accuracy"]])
        h = m.fit([xa, xb], [ya, yb], epochs=2, batch_size=4, verbose=0, shuffle=False).history
        m.compile("sgd", loss={"o1": "mse", "o2": "sparse_categorical_crossentropy"}, metrics={"o2": "accuracy"})
        ev = m.evaluate([xa, xb], {"o1": ya, "o2": yb}, verbose=0, return_dict=True)
        res.append((h, ev))
    (h_tf, ev_tf), (h_l, ev_l) = res
    assert sorted(h_tf) == sorted(h_l) == ["loss", "o1_loss", "o1_mae", "o2_accuracy", "o2_loss"]
    for k in h_tf:
        close(h_l[k], h_tf[k], 1e-4)
    assert sorted(ev_tf) == sorted(ev_l)
    for k in ev_tf:
        close(ev_l[k], ev_tf[k], 1e-4)


def test_multi_output_compile_errors_name_outputs():
    a = ltf.keras.Input((3,))
    m = ltf.keras.Model(a, [ltf.keras.layers.Dense(1, name="p")(a), ltf.keras.layers.Dense(1, name="q")(a)])
    m.compile("sgd", loss={"p": "mse", "z": "mse"})
    with pytest.raises(LoomValueError, match=r"\['z'\].*\['p', 'q'\]"):
        m.evaluate(np.ones((2, 3), np.float32), [np.ones((2, 1)), np.ones((2, 1))], verbose=0)
    m.compile("sgd", loss=["mse"])
    with pytest.raises(LoomValueError, match="1 entries but model"):
        m.evaluate(np.ones((2, 3), np.float32), [np.ones((2, 1)), np.ones((2, 1))], verbose=0)
