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


def test_functional_operators_on_keras_tensors_match_tf():
    """A transformer block written with `x + y`, scalar arithmetic and slicing on symbolic tensors."""
    x = np.random.default_rng(1).random((4, 6, 8), np.float32)

    def build(tf):
        inp = tf.keras.Input(shape=(6, 8))
        att = tf.keras.layers.MultiHeadAttention(num_heads=2, key_dim=4)(inp, inp)
        h = tf.keras.layers.LayerNormalization()(inp + att)
        ff = tf.keras.layers.Dense(8, activation="relu")(h)
        h = tf.keras.layers.LayerNormalization()(h + ff * 0.5)
        h = 1.0 - (-h) / 2.0
        first = h[:, 0, :]
        return tf.keras.Model(inp, tf.keras.layers.Dense(3)(first))
    m_tf, m_l = build(real_tf), build(ltf)
    m_l.set_weights(m_tf.get_weights())
    close(m_l(x), m_tf(x), 1e-4)
    close(m_l.predict(x, verbose=0), m_tf.predict(x, verbose=0), 1e-4)
    assert m_l.output_shape == m_tf.output_shape == (None, 3)


def test_model_build_and_output_shape():
    for tf in (real_tf, ltf):
        m = tf.keras.Sequential()
        m.add(tf.keras.layers.Dense(4, activation="tanh"))
        m.add(tf.keras.layers.Dense(1))
        m.build((None, 3))
        assert m.count_params() == 21
        assert tuple(m.output_shape) == (None, 1)

    class Sub(ltf.keras.Model):  # Keras 3 only marks it built; loom also creates the weights.
        def __init__(self):
            super().__init__()
            self.d = ltf.keras.layers.Dense(5)

        def call(self, x):
            return self.d(x)
    s = Sub()
    s.build((None, 2))
    assert s.count_params() == 15
    seq = ltf.keras.Sequential([ltf.keras.Input((8, 8, 1)), ltf.keras.layers.Conv2D(4, 3), ltf.keras.layers.Flatten()])
    seq.predict(np.zeros((5, 8, 8, 1), np.float32), verbose=0)
    assert seq.output_shape == (None, 144) and seq.layers[0].output_shape == (None, 6, 6, 4)


def test_backend_get_value_and_set_value():
    opt = ltf.keras.optimizers.Adam(0.01)
    assert np.isclose(ltf.keras.backend.get_value(opt.learning_rate), 0.01)
    v = ltf.Variable(1.0)
    ltf.keras.backend.set_value(v, 3.0)
    assert ltf.keras.backend.get_value(v) == 3.0


# ------------------------------------------------------------------ tf.train

def _ckpt_model(seed):
    m = ltf.keras.Sequential([ltf.keras.Input((3,)), ltf.keras.layers.Dense(4, activation="relu"),
                              ltf.keras.layers.Dense(1)])
    m.set_weights([np.random.default_rng(seed + k).standard_normal(w.shape).astype(np.float32)
                   for k, w in enumerate(m.get_weights())])
    return m


def _steps(model, opt, n):
    x = np.linspace(-1, 1, 24, dtype=np.float32).reshape(8, 3)
    y = x.sum(1, keepdims=True)
    for _ in range(n):
        with ltf.GradientTape() as tape:
            loss = ltf.reduce_mean(ltf.square(model(x) - y))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))


def test_checkpoint_restores_model_and_optimizer_slots_into_fresh_objects(tmp_path):
    model, opt = _ckpt_model(0), ltf.keras.optimizers.Adam(0.05)
    step = ltf.Variable(0, dtype=ltf.int64)
    ckpt = ltf.train.Checkpoint(step=step, model=model, optimizer=opt)
    _steps(model, opt, 2)
    step.assign_add(2)
    path = ckpt.save(str(tmp_path / "ckpt"))
    assert path.endswith("ckpt-1") and (tmp_path / "ckpt-1.index").exists()
    assert ltf.train.latest_checkpoint(str(tmp_path)) == path
    _steps(model, opt, 3)
    want = model.get_weights()

    model2, opt2 = _ckpt_model(7), ltf.keras.optimizers.Adam(0.05)
    step2 = ltf.Variable(0, dtype=ltf.int64)
    ckpt2 = ltf.train.Checkpoint(step=step2, model=model2, optimizer=opt2)
    ckpt2.restore(ltf.train.latest_checkpoint(str(tmp_path))).assert_consumed()
    assert int(step2.numpy()) == 2 and int(opt2.iterations.numpy()) == 2
    _steps(model2, opt2, 3)
    for a, b in zip(model2.get_weights(), want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert ckpt2.restore(None) is not None
    with pytest.raises(LoomValueError, match="no checkpoint at"):
        ckpt2.restore(str(tmp_path / "nothing"))


def test_checkpoint_manager_keeps_the_newest(tmp_path):
    v = ltf.Variable([1.0, 2.0])
    ckpt = ltf.train.Checkpoint(v=v)
    mgr = ltf.train.CheckpointManager(ckpt, str(tmp_path / "m"), max_to_keep=2)
    assert mgr.latest_checkpoint is None
    paths = []
    for _ in range(3):
        v.assign_add([1.0, 1.0])
        paths.append(mgr.save())
    assert mgr.checkpoints == paths[1:] and mgr.latest_checkpoint == paths[-1]
    assert not (tmp_path / "m" / "ckpt-1.index").exists()
    ckpt.restore(paths[1])
    np.testing.assert_array_equal(v.numpy(), [3.0, 4.0])
    again = ltf.train.CheckpointManager(ckpt, str(tmp_path / "m"), max_to_keep=2)
    assert again.latest_checkpoint == paths[-1]
    p = ckpt.write(str(tmp_path / "plain"))
    v.assign([0.0, 0.0])
    ckpt.read(p)
    np.testing.assert_array_equal(v.numpy(), [3.0, 4.0])


# ------------------------------------------------------------------ keras.datasets

def test_keras_datasets_read_the_cache_and_explain_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    import urllib.request

    def offline(*a, **k):
        raise OSError("Name or service not known")
    monkeypatch.setattr(urllib.request, "urlopen", offline)
    with pytest.raises(LoomValueError, match=r"mnist.npz is not in the cache.*copy the file Keras downloads to "
                                             + str(tmp_path / "datasets" / "mnist.npz")):
        ltf.keras.datasets.mnist.load_data()
    rng = np.random.default_rng(0)
    arrays = {"x_train": rng.integers(0, 255, (4, 28, 28), dtype=np.uint8), "y_train": np.arange(4, dtype=np.uint8),
              "x_test": rng.integers(0, 255, (2, 28, 28), dtype=np.uint8), "y_test": np.arange(2, dtype=np.uint8)}
    np.savez(tmp_path / "datasets" / "mnist.npz", **arrays)
    (x, y), (xt, yt) = ltf.keras.datasets.mnist.load_data()
    np.testing.assert_array_equal(x, arrays["x_train"])
    np.testing.assert_array_equal(yt, arrays["y_test"])
    with pytest.raises(LoomValueError, match="imdb.load_data: this dataset is not provided"):
        ltf.keras.datasets.imdb.load_data(num_words=100)


# ------------------------------------------------------------------ tapes, variables, TensorArray

def test_jacobian_on_a_non_persistent_tape_and_batch_jacobian():
    x = np.array([[1.0, 2.0], [3.0, -1.0]], np.float32)
    res = []
    for tf in (real_tf, ltf):
        xs = tf.constant(x)
        with tf.GradientTape() as t:
            t.watch(xs)
            ys = tf.concat([xs ** 2, xs * 3], axis=1)
        jac = t.jacobian(ys, xs)
        with tf.GradientTape() as t:
            t.watch(xs)
            ys = tf.stack([tf.sin(xs[:, 0]) * xs[:, 1], xs[:, 0] ** 2, xs[:, 1]], axis=1)
        bj = t.batch_jacobian(ys, xs)
        res.append((jac, bj))
    close(res[1][0], res[0][0])
    close(res[1][1], res[0][1])
    xs = ltf.constant(x)
    with ltf.GradientTape() as t:
        t.watch(xs)
        ys = xs * 2
    t.jacobian(ys, xs)
    with pytest.raises(Exception, match="only compute gradients once"):
        t.gradient(ys, xs)


def test_variable_sliced_assign_and_scatter_nd_update():
    res = []
    for tf in (real_tf, ltf):
        v = tf.Variable(tf.zeros((2, 3)))
        v[0, 1].assign(5.0)
        v[1, :].assign([1.0, 2.0, 3.0])
        w = tf.Variable([1, 2, 3, 4])
        w.scatter_nd_update([[0], [2]], [10, 30])
        w.scatter_nd_add([[1]], [5])
        w.scatter_nd_sub([[3]], [1])
        u = tf.Variable([1.0, 2.0])
        with tf.GradientTape() as tape:
            y = u[1] * 3.0
        res.append((v.numpy(), w.numpy(), tape.gradient(y, u).numpy()))
    for a, b in zip(*res):
        close(b, a)


def test_tensor_array_eager_and_in_unrolled_tf_function():
    res = []
    for tf in (real_tf, ltf):
        ta = tf.TensorArray(tf.float32, size=0, dynamic_size=True)
        for i in range(4):
            ta = ta.write(i, tf.cast(i, tf.float32) ** 2 * tf.ones([2]))
        fixed = tf.TensorArray(tf.int32, size=3).unstack(tf.constant([[1, 2], [3, 4], [5, 6]]))

        @tf.function
        def f(x):
            arr = tf.TensorArray(tf.float32, size=3)
            for i in range(3):
                arr = arr.write(i, x * i)
            return arr.stack()
        res.append((ta.stack(), ta.size(), ta.concat(), ta.read(2), ta.gather([3, 1]), fixed.read(1),
                    f(tf.constant(1.0)), f(tf.constant(2.0)), f(tf.constant(3.0))))
    for a, b in zip(*res):
        close(b, a)
    arr = ltf.TensorArray(ltf.float32, size=2)
    with pytest.raises(LoomValueError, match="out of range.*dynamic_size=True"):
        arr.write(2, 1.0)
    with pytest.raises(LoomValueError, match="holds float32"):
        arr.write(0, ltf.constant(1))


# ------------------------------------------------------------------ tf.data

def _elements(ds):
    out = []
    for e in ds.as_numpy_iterator():
        e = e if isinstance(e, tuple) else (e,)
        out.append([np.asarray(t).tolist() for t in e])
    return out


def test_dataset_transformations_match_tf():
    def pipelines(tf):
        ds = tf.data.Dataset.range(1, 6)
        return [
            ds.interleave(lambda x: tf.data.Dataset.from_tensors(x).repeat(x), cycle_length=2, block_length=2),
            ds.interleave(lambda x: tf.data.Dataset.range(x), cycle_length=3),
            ds.flat_map(lambda x: tf.data.Dataset.range(x)),
            ds.take_while(lambda x: x < 4),
            ds.map(lambda n: tf.range(n)).padded_batch(2),
            ds.map(lambda n: (tf.range(n), n)).padded_batch(3, padded_shapes=([6], []), padding_values=(
                tf.constant(-1, tf.int64), tf.constant(0, tf.int64)), drop_remainder=True),
            tf.data.Dataset.from_tensor_slices({"a": [1, 2], "b": [3.0, 4.0]}).map(lambda d: d["a"] * 2),
            tf.data.Dataset.from_tensors([1, 2, 3]),
            ds.with_options(tf.data.Options()),
        ]
    for a, b in zip(pipelines(real_tf), pipelines(ltf)):
        assert _elements(b) == _elements(a)
    for tf in (real_tf, ltf):
        assert int(tf.data.Dataset.range(5).reduce(tf.constant(0, tf.int64), lambda s, x: s + x)) == 10
    with pytest.raises(LoomValueError, match="must return a Dataset"):
        list(ltf.data.Dataset.range(2).flat_map(lambda x: x * 2))


def test_embedding_mask_zero_masks_recurrent_layers_and_pooling_as_keras():
    toks = np.array([[1, 2, 3, 0, 0, 0], [4, 5, 6, 7, 8, 9], [3, 0, 0, 0, 0, 0], [2, 2, 0, 0, 0, 0]])
    y = np.array([0, 1, 1, 0])

    def build(tf):
        L = tf.keras.layers
        inp = tf.keras.Input((6,), dtype="int32")
        e = L.Embedding(10, 4, mask_zero=True)(inp)
        h = L.Bidirectional(L.LSTM(3, return_sequences=True))(e)
        a = L.GRU(2)(h)
        b = L.GlobalAveragePooling1D()(L.Dense(2)(L.SimpleRNN(2, return_sequences=True)(e)))
        return tf.keras.Model(inp, L.Dense(1)(L.Concatenate()([a, b])))
    models = [build(real_tf), build(ltf)]
    rng = np.random.default_rng(3)
    models[0].set_weights([rng.uniform(-0.5, 0.5, w.shape).astype(np.float32) for w in models[0].get_weights()])
    _same_weights(models)
    close(models[1](toks), models[0](toks), 1e-4)
    hist = []
    for m, tf in zip(models, (real_tf, ltf)):
        m.compile(optimizer=tf.keras.optimizers.Adam(1e-2), loss=tf.keras.losses.BinaryCrossentropy(from_logits=True))
        hist.append(m.fit(toks, y, epochs=3, batch_size=2, shuffle=False, verbose=0).history["loss"])
    close(hist[1], hist[0], 1e-4)
    mask = ltf.keras.layers.Embedding(10, 2, mask_zero=True).compute_mask(ltf.constant(toks))
    np.testing.assert_array_equal(mask.numpy(), toks != 0)


def test_functional_layer_order_matches_keras():
    def build(tf):
        L = tf.keras.layers
        i1, i2 = tf.keras.Input((3,)), tf.keras.Input((3,))
        a = L.Dense(2, name="a")(i1)
        b = L.Dense(2, name="b")(i2)
        c = L.Dense(2, name="c")(a)
        return tf.keras.Model([i1, i2], L.Add(name="add")([c, b]))
    names = [[type(x).__name__ + ("" if type(x).__name__ == "InputLayer" else x.name) for x in build(tf).layers]
             for tf in (real_tf, ltf)]
    assert names[0] == names[1] == ["InputLayer", "Densea", "InputLayer", "Densec", "Denseb", "Addadd"]


def test_separable_depthwise_and_causal_convolutions_match_keras():
    rng = np.random.default_rng(4)
    x2 = rng.random((2, 6, 6, 3), np.float32)
    x1 = rng.random((2, 10, 3), np.float32)

    def build(tf):
        L = tf.keras.layers
        a = tf.keras.Sequential([tf.keras.Input((6, 6, 3)), L.SeparableConv2D(4, 3, padding="same", depth_multiplier=2),
                                 L.DepthwiseConv2D(3, strides=2, activation="relu")])
        b = tf.keras.Sequential([tf.keras.Input((10, 3)), L.Conv1D(4, 3, padding="causal", dilation_rate=2),
                                 L.Conv1D(2, 2, padding="causal")])
        return a, b
    (a_tf, b_tf), (a_l, b_l) = build(real_tf), build(ltf)
    assert [w.shape for w in a_l.get_weights()] == [w.shape for w in a_tf.get_weights()]
    for m_tf, m_l in ((a_tf, a_l), (b_tf, b_l)):
        m_tf.set_weights([rng.uniform(-1, 1, w.shape).astype(np.float32) for w in m_tf.get_weights()])
        m_l.set_weights(m_tf.get_weights())
    close(a_l(x2), a_tf(x2), 1e-4)
    close(b_l(x1), b_tf(x1), 1e-4)


def test_more_metrics_and_to_categorical_match_keras():
    yp = np.random.default_rng(5).random((6, 3), np.float32)
    lab = np.array([0, 1, 2, 1, 0, 2])
    for make, args in [(lambda tf: tf.keras.metrics.SparseTopKCategoricalAccuracy(k=2), (lab, yp)),
                       (lambda tf: tf.keras.metrics.SparseCategoricalCrossentropy(from_logits=True), (lab, yp)),
                       (lambda tf: tf.keras.metrics.CategoricalCrossentropy(), (np.eye(3)[lab], yp)),
                       (lambda tf: tf.keras.metrics.BinaryCrossentropy(from_logits=True), (np.round(yp), yp))]:
        vals = []
        for tf in (real_tf, ltf):
            m = make(tf)
            m.update_state(*args)
            vals.append(float(m.result()))
        assert np.isclose(vals[0], vals[1], rtol=1e-5), (make, vals)
    a, b = real_tf.keras.utils.to_categorical([0, 2, 1], 3), ltf.keras.utils.to_categorical([0, 2, 1], 3)
    assert a.dtype == b.dtype and np.array_equal(a, b)


def test_normalization_layer_adapt_matches_keras():
    data = np.random.default_rng(8).random((20, 3), np.float32) * 5
    outs = []
    for tf in (real_tf, ltf):
        norm = tf.keras.layers.Normalization()
        norm.adapt(data)
        scalar = tf.keras.layers.Normalization(input_shape=[1], axis=None)
        scalar.adapt(data[:, 0])
        model = tf.keras.Sequential([scalar, tf.keras.layers.Dense(1, kernel_initializer="ones")])
        from_ds = tf.keras.layers.Normalization()
        from_ds.adapt(tf.data.Dataset.from_tensor_slices(data).batch(7))
        given = tf.keras.layers.Normalization(mean=2.0, variance=4.0, invert=True)
        outs.append([norm(np.ones((2, 3), np.float32)), model(data[:4, :1]), from_ds(data[:2]),
                     given(np.array([[1.0], [4.0]], np.float32))])
    for a, b in zip(*outs):
        close(b, a, 1e-4)


def test_fit_class_weight_unweighted_metrics_and_steps_per_epoch_continue_the_dataset():
    rng = np.random.default_rng(0)
    x = rng.random((40, 4), np.float32)
    y = (x[:, 0] > 0.7).astype(np.int64)
    sw = np.linspace(0.5, 1.5, 40).astype(np.float32)
    init = None
    hists = []
    for tf in (real_tf, ltf):
        def make():
            m = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(3, activation="relu"),
                                     tf.keras.layers.Dense(1, activation="sigmoid")])
            m.set_weights(init)
            m.compile(optimizer=tf.keras.optimizers.RMSprop(0.01), loss="binary_crossentropy",
                      metrics=["accuracy"], weighted_metrics=["accuracy", "mse"])
            return m
        if init is None:
            probe = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(3), tf.keras.layers.Dense(1)])
            init = probe.get_weights()
        h = [make().fit(x, y, epochs=2, batch_size=10, class_weight={0: 0.5, 1: 3.0}, verbose=0,
                        shuffle=False).history,
             make().fit(x, y, sample_weight=sw, epochs=2, batch_size=10, verbose=0, shuffle=False).history,
             make().fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(8).repeat(), steps_per_epoch=3, epochs=3,
                        verbose=0).history]
        hists.append(h)
    for a, b in zip(*hists):
        assert sorted(a) == sorted(b) == ["accuracy", "loss", "mse", "weighted_accuracy"]
        for k in a:
            close(b[k], a[k], 1e-4)
    m = ltf.keras.Sequential([ltf.keras.Input((4,)), ltf.keras.layers.Dense(1)])
    m.compile("sgd", "mse")
    with pytest.raises(LoomValueError, match=r"no weight for class\(es\) \[1\]"):
        m.fit(x, y, class_weight={0: 1.0}, verbose=0)


def test_random_generators_stateless_and_distributions():
    a = ltf.random.stateless_uniform([4], seed=[1, 2])
    np.testing.assert_array_equal(a.numpy(), ltf.random.stateless_uniform([4], seed=[1, 2]).numpy())
    assert not np.array_equal(a.numpy(), ltf.random.stateless_uniform([4], seed=[1, 3]).numpy())
    assert ltf.random.stateless_normal([2, 3], seed=(5, 6)).shape.as_list() == [2, 3]
    g1, g2 = ltf.random.Generator.from_seed(3), ltf.random.Generator.from_seed(3)
    np.testing.assert_array_equal(g1.normal([3]).numpy(), g2.normal([3]).numpy())
    assert g1.uniform([5], maxval=4, dtype=ltf.int32).dtype.name == "int32"
    ltf.random.set_seed(0)
    p = ltf.random.poisson([4000], 3.0)
    g = ltf.random.gamma([4000], 2.0, beta=4.0)
    assert p.dtype.name == "float32" and abs(float(ltf.reduce_mean(p)) - 3.0) < 0.15
    assert g.shape.as_list() == [4000] and abs(float(ltf.reduce_mean(g)) - 0.5) < 0.03
    with pytest.raises(LoomValueError, match="pair of integers"):
        ltf.random.stateless_uniform([2], seed=[1])


@pytest.mark.parametrize("name", ["mish", "hard_silu", "hard_swish"])
def test_keras3_activations_by_name(name):
    x = np.linspace(-4, 4, 9).astype(np.float32)
    close(ltf.keras.activations.get(name)(ltf.constant(x)), real_tf.keras.activations.get(name)(x))
    layer = ltf.keras.layers.Dense(2, activation=name)
    assert layer(np.ones((1, 3), np.float32)).shape.as_list() == [1, 2]


def test_optimizer_get_config_round_trips():
    for tf in (real_tf, ltf):
        opt = tf.keras.optimizers.SGD(0.1, momentum=0.9, nesterov=True)
        cfg = opt.get_config()
        assert np.isclose(cfg["learning_rate"], 0.1) and cfg["momentum"] == 0.9 and cfg["nesterov"] is True
        again = tf.keras.optimizers.SGD.from_config(cfg)
        assert np.isclose(float(again.learning_rate), 0.1) and again.get_config()["momentum"] == 0.9


def test_image_preprocessing_layers_match_keras_geometry():
    x = np.random.default_rng(0).random((2, 8, 8, 3), np.float32)
    outs = []
    for tf in (real_tf, ltf):
        L = tf.keras.layers
        outs.append([
            L.Resizing(4, 6)(x), L.Resizing(4, 4, crop_to_aspect_ratio=True)(x[:, :, :6]), L.CenterCrop(4, 5)(x),
            L.RandomRotation((0.25, 0.25), interpolation="nearest")(x, training=True),
            L.RandomRotation((0.1, 0.1))(x, training=True),
            L.RandomTranslation((0.25, 0.25), (-0.125, -0.125), fill_mode="constant")(x, training=True),
            L.RandomZoom((0.5, 0.5), fill_mode="constant", interpolation="nearest")(x, training=True),
            L.RandomZoom((-0.3, -0.3), fill_mode="wrap")(x, training=True),
        ])
    for a, b in zip(*outs):
        close(b, a, 1e-4)
    aug = ltf.keras.Sequential([ltf.keras.layers.RandomFlip("horizontal", input_shape=(8, 8, 3)),
                                ltf.keras.layers.RandomRotation(0.1), ltf.keras.layers.RandomContrast(0.2)])
    np.testing.assert_array_equal(aug(x, training=False).numpy(), x)
    assert not np.allclose(aug(x).numpy(), x)  # A direct call augments, as Keras 3.
    model = ltf.keras.Sequential([ltf.keras.Input((8, 8, 3)), aug, ltf.keras.layers.Flatten(),
                                  ltf.keras.layers.Dense(2)])
    np.testing.assert_allclose(model.predict(x, verbose=0), model(x, training=False).numpy(), rtol=1e-6)
    with pytest.raises(LoomValueError, match="fill_mode"):
        ltf.keras.layers.RandomZoom(0.1, fill_mode="mirror")


def test_tensorboard_callback_writes_per_epoch_scalars(tmp_path):
    import json
    m = ltf.keras.Sequential([ltf.keras.Input((3,)), ltf.keras.layers.Dense(1)])
    m.compile("sgd", "mse", metrics=["mae"])
    x = np.ones((8, 3), np.float32)
    tb = ltf.keras.callbacks.TensorBoard(log_dir=str(tmp_path / "logs"), histogram_freq=1)
    h = m.fit(x, np.zeros((8, 1)), validation_split=0.25, epochs=2, verbose=0, callbacks=[tb])
    train = [json.loads(line) for line in open(tmp_path / "logs" / "train" / "scalars.jsonl")]
    val = [json.loads(line) for line in open(tmp_path / "logs" / "validation" / "scalars.jsonl")]
    assert [r["epoch"] for r in train] == [0, 1] and np.allclose([r["loss"] for r in train], h.history["loss"])
    assert np.allclose([r["mae"] for r in val], h.history["val_mae"])


def test_r2_and_f1_scores_match_keras():
    rng = np.random.default_rng(9)
    yt, yp = rng.random((6, 3), np.float32), rng.random((6, 3), np.float32)
    lab = np.round(yt)
    sw = np.linspace(0.5, 2, 6).astype(np.float32)
    cases = [(lambda tf: tf.keras.metrics.R2Score(), (yt, yp), {}),
             (lambda tf: tf.keras.metrics.R2Score(class_aggregation=None), (yt, yp), {"sample_weight": sw}),
             (lambda tf: tf.keras.metrics.R2Score(num_regressors=1), (yt, yp), {}),
             (lambda tf: tf.keras.metrics.F1Score(average="macro", threshold=0.5), (lab, yp), {}),
             (lambda tf: tf.keras.metrics.F1Score(average="micro", threshold=0.4), (lab, yp), {"sample_weight": sw}),
             (lambda tf: tf.keras.metrics.F1Score(), (np.eye(3)[[0, 1, 2, 1, 0, 2]], yp), {}),
             (lambda tf: tf.keras.metrics.FBetaScore(average="weighted", beta=2.0, threshold=0.5), (lab, yp), {})]
    for make, args, kw in cases:
        vals = []
        for tf in (real_tf, ltf):
            m = make(tf)
            m.update_state(*[a[:3] for a in args], **{k: v[:3] for k, v in kw.items()})
            m.update_state(*[a[3:] for a in args], **{k: v[3:] for k, v in kw.items()})
            vals.append(np.asarray(m.result()))
        close(vals[1], vals[0], 1e-5)


def test_custom_train_step_updates_compiled_metrics_through_self_metrics():
    """Keras 3's 'customizing what happens in fit' guide: loop over self.metrics in train_step."""
    x = np.random.default_rng(0).random((32, 4), np.float32)
    y = np.random.default_rng(1).random((32, 1), np.float32)
    hists = []
    for tf in (real_tf, ltf):
        class CustomModel(tf.keras.Model):
            def train_step(self, data):
                x, y = data
                with tf.GradientTape() as tape:
                    y_pred = self(x, training=True)
                    loss = self.compute_loss(y=y, y_pred=y_pred)
                grads = tape.gradient(loss, self.trainable_variables)
                self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
                for metric in self.metrics:
                    if metric.name == "loss":
                        metric.update_state(loss)
                    else:
                        metric.update_state(y, y_pred)
                return {m.name: m.result() for m in self.metrics}
        inputs = tf.keras.Input(shape=(4,))
        model = CustomModel(inputs, tf.keras.layers.Dense(1)(inputs))
        model.set_weights([np.full((4, 1), 0.3, np.float32), np.zeros(1, np.float32)])
        model.compile(optimizer="adam", loss="mse", metrics=["mae"])
        hists.append(model.fit(x, y, epochs=3, batch_size=8, verbose=0, shuffle=False).history)
    assert sorted(hists[0]) == sorted(hists[1]) == ["loss", "mae"]
    for k in hists[0]:
        close(hists[1][k], hists[0][k], 1e-5)
