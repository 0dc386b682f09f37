"""Second round of TF2 user programs run under loom.tf and real TensorFlow side by side.

Each test is a small user program (or the part of one that diverged or crashed)
checked against real TensorFlow where the result is deterministic.
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


# ------------------------------------------------------------------ tf.data

def _window_pipelines(tf):
    ds = tf.data.Dataset.range(10)
    out = []
    for kw in [dict(size=3), dict(size=3, shift=2), dict(size=3, shift=1, drop_remainder=True),
               dict(size=2, shift=4, stride=2), dict(size=3, shift=2, stride=3)]:
        w = ds.window(**kw)
        out.append(([list(x.as_numpy_iterator()) for x in w], int(w.cardinality())))
    out.append([x.tolist() for x in ds.window(4, 1, drop_remainder=True).flat_map(lambda w: w.batch(4))
                .as_numpy_iterator()])
    xy = tf.data.Dataset.from_tensor_slices((np.arange(6.0, dtype=np.float32), np.arange(6)))
    pairs = xy.window(3, 2, drop_remainder=True).flat_map(
        lambda a, b: tf.data.Dataset.zip((a.batch(3), b.batch(3))))
    out.append([(a.tolist(), b.tolist()) for a, b in pairs.as_numpy_iterator()])
    d = tf.data.Dataset.from_tensor_slices({"a": [1, 2, 3]})
    out.append([{k: list(v.as_numpy_iterator()) for k, v in w.items()} for w in d.window(2)])
    series = tf.data.Dataset.from_tensor_slices(np.arange(12, dtype=np.float32))
    frames = series.window(5, shift=1, drop_remainder=True).flat_map(lambda win: win.batch(5))
    xy = frames.map(lambda f: (f[:-1], f[-1])).batch(4)
    out.append([(a.tolist(), b.tolist()) for a, b in xy.as_numpy_iterator()])
    return out


def test_dataset_window_and_flat_map_over_windows():
    """The time-series tutorial: window(5, shift=1), flat_map(batch), split into inputs and label."""
    for want, got in zip(_window_pipelines(real_tf), _window_pipelines(ltf)):
        assert got == want


# ------------------------------------------------------------------ printing and dtype rules

def test_dtypes_tensors_and_shapes_print_as_tensorflow():
    def texts(tf):
        v = tf.Variable([1.0, 2.0])
        return [repr(tf.float32), str(tf.int64), str(tf.constant(1).dtype), str(tf.constant([1.0, 2.0])),
                repr(tf.constant([1.0, 2.0])), str(tf.constant([[1, 2], [3, 4]])), repr(tf.constant([[1, 2], [3, 4]])),
                str(tf.constant(3.5)), repr(tf.constant(True)), str(tf.zeros((2, 0))),
                str(tf.ones((2, 3)).shape), repr(tf.ones((2, 3)).shape), str(v), repr(v)]
    assert texts(ltf) == texts(real_tf)


def _int_results(tf):
    a, b = tf.constant([7, -7]), tf.constant([2, 2])
    i8 = tf.constant([7, -7], tf.int8)
    return [a / b, a // b, a % b, a / 2, a // -2, a % -2, 2 / a, i8 / i8,
            tf.constant([7, -7], tf.int64) / 2, tf.constant([1.5, -2.5]) // 2.0, tf.constant([1.5, -2.5]) % 2.0, a * 2,
            2 - a, a ** 2, tf.constant([1.0, 2.0]) + np.array([1.0, 2.0]), tf.constant([1.0, 2.0]) + np.array([1, 2]),
            a + np.array([1.5, 2.0]), tf.constant([1.0, 2.0]) * np.float64(2), tf.constant([1.0, 2.0]) + [1, 2]]


def test_operator_dtypes_follow_tensorflow():
    """int32 / int32 is float64, // and % floor, NumPy operands take the tensor's dtype."""
    for got, want in zip(_int_results(ltf), _int_results(real_tf)):
        assert got.dtype.name == want.dtype.name
        close(got, want)


@pytest.mark.parametrize("expr", ["a + tf.constant([1.0, 2.0])", "a + 2.5", "a * 1.0",
                                  "a + tf.constant([1, 2], tf.int64)", "tf.add(a, tf.constant([1.0, 2.0]))",
                                  "tf.constant([1.0, 2.0]) + tf.constant([1.0, 2.0], tf.float64)",
                                  "tf.constant([1.0, 2.0]) / tf.constant(2)"])
def test_mixed_dtype_operators_raise_as_tensorflow(expr):
    for tf in (real_tf, ltf):
        a = tf.constant([7, -7])  # noqa: F841  (used by expr)
        with pytest.raises((tf.errors.InvalidArgumentError, TypeError)):
            eval(expr)
    a = ltf.constant([7, -7])
    with pytest.raises(ltf.errors.InvalidArgumentError, match="does not convert dtypes implicitly; cast one"):
        eval(expr, {"tf": ltf, "a": a})


# ------------------------------------------------------------------ keras text and lookup layers

def _text_outputs(tf):
    texts = ["The cat sat.", "the DOG sat!", "a cat, a dog; the end", "b a b a"]
    L = tf.keras.layers
    tv = L.TextVectorization(max_tokens=8)
    tv.adapt(texts)
    tv3 = L.TextVectorization(output_mode="multi_hot")
    tv3.adapt(texts)
    tv4 = L.TextVectorization(output_mode="count", ngrams=2)
    tv4.adapt(texts)
    tv5 = L.TextVectorization(ngrams=2, output_sequence_length=6)
    tv5.adapt(texts)
    tv7 = L.TextVectorization(split="character", standardize="lower")
    tv7.adapt(["abca", "Bd"])
    sl = L.StringLookup()
    sl.adapt(["b", "a", "b", "c", "a", "b"])
    il = L.IntegerLookup()
    il.adapt([5, 3, 5, 7, 3, 5])
    il4 = L.IntegerLookup(max_tokens=3, mask_token=0)
    il4.adapt(np.array([[1, 2, 2], [3, 3, 3]]))
    outs = [tv(texts), tv(["zebra cat"]), tv("the cat"),
            L.TextVectorization(output_sequence_length=3, vocabulary=["cat", "dog"])(np.array(["cat dog dog", "x"])),
            tv3(texts), tv4(texts[:2]), tv5(texts), tv7(["ab", "dz"]), sl(["a", "z", "b"]),
            sl(np.array([["a", "b"], ["c", "q"]])),
            L.StringLookup(vocabulary=["x", "y"], mask_token="")(["y", "", "q"]),
            L.StringLookup(vocabulary=["x", "y"], output_mode="one_hot")(["x", "q"]),
            L.StringLookup(vocabulary=["x", "y"], output_mode="multi_hot")([["x", "q"], ["y", "y"]]),
            L.StringLookup(vocabulary=["x", "y"], output_mode="count")([["x", "x"], ["y", "q"]]),
            il([5, 7, 9]), L.IntegerLookup(vocabulary=[10, 20], output_mode="multi_hot")(np.array([[10, 20, 30]])),
            L.IntegerLookup(vocabulary=[10, 20], invert=True)([0, 1, 2]), il4([0, 3, 2, 1]),
            L.StringLookup(vocabulary=["x", "y"], invert=True)(np.array([0, 1, 2]))]
    vocabs = [tv.get_vocabulary(), tv3.get_vocabulary(), tv4.get_vocabulary(), sl.get_vocabulary(),
              il.get_vocabulary(), il4.get_vocabulary(), tv.vocabulary_size()]
    return [np.asarray(o.numpy() if hasattr(o, "numpy") else o).tolist() for o in outs], vocabs


def test_text_vectorization_and_lookup_layers_match_keras():
    (got, got_vocab), (want, want_vocab) = _text_outputs(ltf), _text_outputs(real_tf)
    assert got == want
    assert got_vocab == want_vocab


def test_text_layers_explain_what_loom_does_not_do():
    with pytest.raises(LoomValueError, match="Hashing is not supported.*FarmHash"):
        ltf.keras.layers.Hashing(num_bins=4)
    with pytest.raises(LoomValueError, match="num_oov_indices=2 is not supported"):
        ltf.keras.layers.StringLookup(num_oov_indices=2)
    with pytest.raises(LoomValueError, match="no vocabulary"):
        ltf.keras.layers.StringLookup()(["a"])
    with pytest.raises(LoomValueError, match="cannot sit inside a functional model"):
        ltf.keras.layers.TextVectorization()(ltf.keras.Input((1,)))


# ------------------------------------------------------------------ ops

def _array_ops(tf):
    x = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    return [tf.gather_nd(tf.reshape(tf.range(12), (2, 3, 2)), [[1], [0]], batch_dims=1),
            tf.gather_nd(tf.reshape(tf.range(24), (2, 3, 4)), [[[0, 1], [2, 3]], [[1, 1], [0, 0]]], batch_dims=1),
            tf.boolean_mask(x, [True, False], axis=1), tf.boolean_mask(tf.ones((2, 3, 2)), [[True, False, True]] * 2),
            tf.tensor_scatter_nd_max(tf.ones((4,)), [[0], [3]], [5.0, 0.0]),
            tf.tensor_scatter_nd_min(tf.ones((2, 2)), [[0, 1], [1, 0]], [-1.0, 3.0]),
            tf.tensor_scatter_nd_sub(tf.ones((4,)), [[1], [1]], [1.0, 2.0]),
            tf.math.cumulative_logsumexp([1.0, 2.0, 3.0]), tf.math.cumulative_logsumexp([1.0, 2.0, 3.0], exclusive=True,
                                                                                      reverse=True),
            tf.math.polyval([1.0, 2.0, 3.0], tf.constant([2.0, -1.0])), tf.unique_with_counts([1, 1, 2, 7, 2, 2]).count,
            tf.searchsorted([1, 3, 5], [2, 6]), tf.searchsorted([[1, 3], [2, 4]], [[3], [3]], side="right"),
            tf.histogram_fixed_width([0.0, 1.0, 2.0, 5.0, -3.0], [0.0, 5.0], nbins=5),
            tf.reverse_sequence([[1, 2, 3], [4, 5, 6]], [2, 3], seq_axis=1, batch_axis=0),
            tf.dtypes.saturate_cast([300.0, -5.0], tf.uint8),
            tf.ragged.constant([[1, 2], [3], []]).to_tensor(),
            tf.RaggedTensor.from_row_lengths([1, 2, 3], [2, 1]).row_lengths(),
            tf.RaggedTensor.from_value_rowids([1.0, 2.0, 3.0], [0, 0, 2]).to_tensor(default_value=-1.0),
            tf.ragged.constant([[1, 2], [3]]).row_splits, tf.ragged.constant([[1, 2], [3]])[0],
            tf.ragged.map_flat_values(tf.square, tf.ragged.constant([[1.0, 2.0], [3.0]])).to_tensor()]


def test_array_ops_batch_dims_masks_scatters_and_ragged_basics():
    for got, want in zip(_array_ops(ltf), _array_ops(real_tf)):
        assert got.dtype.name == want.dtype.name
        close(got, want)
    r = ltf.ragged.constant([[1, 2], [3]])
    assert r.to_list() == real_tf.ragged.constant([[1, 2], [3]]).to_list() and r.shape.as_list() == [2, None]


def test_unsupported_names_raise_loom_errors_and_tf_string_is_explained():
    from loom.errors import LoomError
    with pytest.raises(LoomError, match="tf.math.no_such_op is not supported by loom.tf"):
        ltf.math.no_such_op()
    with pytest.raises(LoomError, match="tf.keras.layers.NoSuchLayer is not supported"):
        ltf.keras.layers.NoSuchLayer()
    assert not hasattr(ltf, "no_such_function")
    assert str(ltf.string) == str(real_tf.string) and repr(ltf.string) == repr(real_tf.string)
    with pytest.raises(LoomError, match="string tensors.*TextVectorization"):
        ltf.constant(["a", "b"])
    with pytest.raises(LoomError, match=r"string tensors \(tf.string\) are not supported"):
        ltf.zeros((2,), dtype=ltf.string)


def test_random_generator_split_and_reset():
    g = ltf.random.Generator.from_seed(5)
    a, b = g.split(2)
    assert not np.array_equal(a.normal((4,)).numpy(), b.normal((4,)).numpy())
    g.reset_from_seed(1)
    first = g.uniform((3,)).numpy()
    g.reset_from_seed(1)
    np.testing.assert_array_equal(g.uniform((3,)).numpy(), first)
    assert g.make_seeds(3).shape.as_list() == [2, 3]


# ------------------------------------------------------------------ keras layers and fit

def _attention_outputs(tf):
    rng = np.random.default_rng(0)
    q, v, k = (rng.random(s, np.float32) for s in [(2, 3, 4), (2, 5, 4), (2, 5, 4)])
    vm = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    qm = np.array([[1, 1, 0], [1, 1, 1]], bool)
    L = tf.keras.layers
    res = []
    for make, args, kw in [(lambda: L.Attention(), [q, v], {}),
                           (lambda: L.Attention(use_scale=True), [q, v, k], {"mask": [qm, vm]}),
                           (lambda: L.Attention(score_mode="concat"), [q, v], {"use_causal_mask": True}),
                           (lambda: L.Attention(), [q, v], {"return_attention_scores": True, "mask": [None, vm]}),
                           (lambda: L.AdditiveAttention(), [q, v], {}),
                           (lambda: L.AdditiveAttention(use_scale=False), [q, v, k], {"mask": [qm, vm]})]:
        layer = make()
        layer(args, **kw)
        layer.set_weights([np.full(w.shape, 0.7, np.float32) for w in layer.get_weights()])
        out = layer(args, **kw)
        res += list(out) if isinstance(out, tuple) else [out]
    iq, iv = tf.keras.Input((3, 4)), tf.keras.Input((5, 4))
    model = tf.keras.Model([iq, iv], L.GlobalAveragePooling1D()(L.Attention()([iq, iv])))
    res.append(model.predict([q, v], verbose=0))
    return res


def test_attention_and_additive_attention_layers_match_keras():
    for got, want in zip(_attention_outputs(ltf), _attention_outputs(real_tf)):
        close(got, want, 1e-5)


def test_model_checkpoint_saves_a_loadable_model_with_early_stopping_and_lr_schedules(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.random((32, 4), np.float32)
    y = (x.sum(1, keepdims=True) > 2).astype(np.float32)
    res = []
    for tf in (real_tf, ltf):
        m = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(8, activation="relu"),
                                 tf.keras.layers.Dense(1, activation="sigmoid")])
        m.set_weights([np.random.default_rng(i).standard_normal(w.shape).astype(np.float32) * 0.3
                       for i, w in enumerate(m.get_weights())])
        m.compile(tf.keras.optimizers.SGD(0.1), "binary_crossentropy", metrics=["accuracy"])
        path = str(tmp_path / f"best_{tf.__name__}.keras")
        cbs = [tf.keras.callbacks.EarlyStopping(monitor="val_loss", patience=1, restore_best_weights=True),
               tf.keras.callbacks.ModelCheckpoint(path, save_best_only=True, monitor="val_loss"),
               tf.keras.callbacks.LearningRateScheduler(lambda e, lr: lr * 0.5),
               tf.keras.callbacks.ReduceLROnPlateau(monitor="loss", patience=1, factor=0.5)]
        h = m.fit(x, y, validation_data=(x[:8], y[:8]), epochs=4, batch_size=8, verbose=0, shuffle=False,
                  callbacks=cbs)
        res.append((h.history, tf.keras.models.load_model(path).predict(x[:4], verbose=0)))
    (h_tf, p_tf), (h_l, p_l) = res
    assert sorted(h_l) == sorted(h_tf)
    for k in h_tf:
        close(h_l[k], h_tf[k], 1e-4)
    close(p_l, p_tf, 1e-4)


def _dtype_name(d):
    return getattr(d, "name", d)


def _mixed_program(tf):
    tf.keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        d = tf.keras.layers.Dense(2)
        y = d(np.ones((1, 3), np.float32))
        p = tf.keras.mixed_precision.global_policy()
        facts = [_dtype_name(y.dtype), _dtype_name(d.kernel.dtype), d.compute_dtype, d.variable_dtype, repr(p),
                 p.compute_dtype, repr(d.dtype_policy)]
        m = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(2, kernel_initializer="ones"),
                                 tf.keras.layers.Activation("softmax", dtype="float32")])
        x = np.linspace(0, 1, 12, dtype=np.float32).reshape(4, 3)
        facts.append(_dtype_name(m(x).dtype))
        m.compile(tf.keras.optimizers.SGD(0.5), "mse")
        h = m.fit(x, np.eye(2, dtype=np.float32)[[0, 1, 0, 1]], verbose=0, epochs=3, batch_size=2, shuffle=False)
        facts.append(type(m.optimizer).__name__)
        opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD(0.1))
        with tf.GradientTape() as t:
            loss = tf.reduce_sum(d(np.ones((1, 3), np.float32)))
            scaled = opt.scale_loss(loss)
        grads = t.gradient(scaled, d.trainable_variables)
        facts.append([_dtype_name(g.dtype) for g in grads])
        k0 = np.array(d.kernel.numpy())
        opt.apply_gradients(zip(grads, d.trainable_variables))
        return facts, h.history["loss"], np.array(d.kernel.numpy()) - k0
    finally:
        tf.keras.mixed_precision.set_global_policy("float32")


def test_mixed_float16_policy_dtypes_loss_scaling_and_fit():
    (f_l, h_l, dk_l), (f_tf, h_tf, dk_tf) = _mixed_program(ltf), _mixed_program(real_tf)
    assert f_l == f_tf
    close(h_l, h_tf, 2e-3)
    close(dk_l, dk_tf, 1e-3)
    assert ltf.keras.layers.Dense(2).compute_dtype == "float32"


# ------------------------------------------------------------------ tf.function under an outer tape

def _tape_over_function(tf):
    model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(4, activation="tanh"),
                                 tf.keras.layers.Dense(2)])
    model.set_weights([np.full(w.shape, 0.1 * (i + 1), np.float32) for i, w in enumerate(model.get_weights())])
    w = tf.Variable([[1.0], [2.0], [3.0]])
    counter = tf.Variable(0.0)

    @tf.function
    def f(x, scale):
        return tf.reduce_sum(model(x) ** 2) * scale + tf.reduce_sum(tf.matmul(x, w))

    @tf.function
    def g(x):
        return x * x, {"s": tf.reduce_sum(tf.sin(x))}

    @tf.function
    def h(x):
        counter.assign_add(1.0)
        return tf.reduce_sum(x * w[:, 0])
    res = []
    for i in range(3):
        x = tf.constant(np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3) * (i + 1))
        with tf.GradientTape(persistent=True) as t:
            t.watch(x)
            y = f(x, 2.0)
            a, b = g(x)
            z = tf.reduce_sum(a) + b["s"]
            u = h(x)
        res += [y, *t.gradient(y, model.trainable_variables + [w, x]), t.gradient(z, x), t.gradient(u, w), u]
    return res + [counter], f


def test_tf_function_is_differentiable_under_an_outer_tape_by_compiled_replay():
    (got, f), (want, _) = _tape_over_function(ltf), _tape_over_function(real_tf)
    for a, b in zip(got, want):
        close(a, b, 1e-4)
    # The later calls replayed the compiled function and its compiled vector-Jacobian product.
    assert f.experimental_get_tracing_count() == 1 and f._vjp_traced.trace_count == 1


def _custom_loop_with_metrics(tf):
    """The TF2 custom-training tutorial: a tf.function step that updates Keras metrics."""
    rng = np.random.default_rng(0)
    x, y = rng.random((32, 4), np.float32), rng.integers(0, 3, 32)
    m = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(8, activation="relu"),
                             tf.keras.layers.Dense(3)])
    m.set_weights([np.random.default_rng(i).standard_normal(w.shape).astype(np.float32) * 0.3
                   for i, w in enumerate(m.get_weights())])
    opt = tf.keras.optimizers.Adam(0.01)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    acc, mean = tf.keras.metrics.SparseCategoricalAccuracy(), tf.keras.metrics.Mean()

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as t:
            logits = m(xb, training=True)
            loss = loss_fn(yb, logits)
        grads = t.gradient(loss, m.trainable_variables)
        opt.apply_gradients(zip(grads, m.trainable_variables))
        acc.update_state(yb, logits)
        mean.update_state(loss)
        return loss
    out = []
    for _ in range(3):
        for xb, yb in tf.data.Dataset.from_tensor_slices((x, y)).batch(8):
            step(xb, yb)
        out += [mean.result(), acc.result()]
        mean.reset_state()
        acc.reset_state()
    return out + m.get_weights() + [opt.iterations]


def test_tf_function_step_updating_keras_metrics_matches_tf():
    with pytest.warns(Warning, match="runs eagerly instead"):
        got = _custom_loop_with_metrics(ltf)
    for a, b in zip(got, _custom_loop_with_metrics(real_tf)):
        close(a, b, 1e-4)


def _regularized_and_named(tf):
    x = np.random.default_rng(0).random((8, 4), np.float32)
    m = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(
        3, kernel_regularizer=tf.keras.regularizers.l2(0.1), activity_regularizer=tf.keras.regularizers.l1(0.01))])
    m.set_weights([np.full(w.shape, 0.2, np.float32) for w in m.get_weights()])
    m(x)
    auc = tf.keras.metrics.AUC(curve="PR")
    auc.update_state([0, 1, 1, 0, 1], np.array([0.2, 0.8, 0.4, 0.6, 0.9], np.float32))
    return [float(tf.add_n(m.losses)), len(m.losses), float(auc.result())], [w.name for w in m.weights], \
        [w.path.split("/")[-1] for w in m.weights]


def test_activity_regularizer_keras3_weight_names_and_pr_auc():
    (v_l, n_l, p_l), (v_tf, n_tf, p_tf) = _regularized_and_named(ltf), _regularized_and_named(real_tf)
    close(v_l, v_tf, 1e-5)
    assert n_l == n_tf == ["kernel", "bias"] and p_l == p_tf


def test_binary_focal_crossentropy_matches_keras():
    yt = np.array([[0.0, 1.0], [1.0, 0.0], [1.0, 1.0]], np.float32)
    yp = np.array([[0.2, 0.8], [0.6, 0.4], [0.3, 0.9]], np.float32)
    for kw in [{}, {"apply_class_balancing": True, "alpha": 0.4, "gamma": 1.5}, {"from_logits": True},
               {"label_smoothing": 0.1}]:
        got = ltf.keras.losses.BinaryFocalCrossentropy(**kw)(yt, yp)
        close(got, real_tf.keras.losses.BinaryFocalCrossentropy(**kw)(yt, yp), 1e-5)
    m = ltf.keras.Sequential([ltf.keras.Input((2,)), ltf.keras.layers.Dense(2, activation="sigmoid")])
    m.compile("sgd", loss="binary_focal_crossentropy")
    assert np.isfinite(m.evaluate(yp, yt, verbose=0))


def test_tf_print_writes_to_stderr_as_tensorflow(capsys):
    import sys
    ltf.print(ltf.constant([1, 2]), "x")
    ltf.print("to stdout", output_stream=sys.stdout)
    out, err = capsys.readouterr()
    assert err == "[1 2] x\n" and out == "to stdout\n"


def test_custom_layer_config_round_trip_and_model_config_is_a_clear_error():
    class Scale(ltf.keras.layers.Layer):
        def __init__(self, factor, **kwargs):
            super().__init__(**kwargs)
            self.factor = factor

        def call(self, x):
            return x * self.factor

        def get_config(self):
            return {**super().get_config(), "factor": self.factor}
    layer = Scale(3.0, name="scale")
    again = Scale.from_config(layer.get_config())
    assert again.factor == 3.0 and again.name == "scale"
    close(again(np.ones((1, 2), np.float32)), np.full((1, 2), 3.0))
    m = ltf.keras.Sequential([ltf.keras.Input((2,)), ltf.keras.layers.Dense(1)])
    with pytest.raises(LoomValueError, match="Sequential.from_config is not supported.*clone_model"):
        ltf.keras.Sequential.from_config(m.get_config())
    with pytest.raises(LoomValueError, match="Model.to_json is not supported"):
        m.to_json()


def test_masking_layer_feeds_its_mask_to_an_rnn():
    x = np.array([[[1, 2], [3, 4], [0, 0], [0, 0]], [[1, 1], [0, 0], [0, 0], [0, 0]]], np.float32)
    outs = []
    for tf in (real_tf, ltf):
        m = tf.keras.Sequential([tf.keras.Input((4, 2)), tf.keras.layers.Masking(mask_value=0.0),
                                 tf.keras.layers.SimpleRNN(2)])
        m.set_weights([np.random.default_rng(i).standard_normal(w.shape).astype(np.float32) * 0.3
                       for i, w in enumerate(m.get_weights())])
        outs.append((m(x), tf.keras.layers.Masking()(x)))
    close(outs[1][0], outs[0][0])
    close(outs[1][1], outs[0][1])


def test_keras_utils_normalize_dtypes():
    for x in [np.array([[3.0, 4.0]]), np.array([[3, 4]]), np.array([[3.0, 4.0]], np.float32), [[3.0, 4.0]]]:
        got, want = ltf.keras.utils.normalize(x), real_tf.keras.utils.normalize(x)
        assert type(got).__name__ == "ndarray" if isinstance(x, np.ndarray) else hasattr(got, "numpy")
        assert np.dtype(getattr(got.dtype, "name", got.dtype)) == np.dtype(getattr(want.dtype, "name", want.dtype))
        close(got, want)


def test_conv1d_transpose_and_separable_conv1d_match_keras():
    x = np.random.default_rng(0).random((2, 7, 3), np.float32)
    outs = []
    for tf in (real_tf, ltf):
        L = tf.keras.layers
        res = []
        for layer in [L.Conv1DTranspose(2, 3), L.Conv1DTranspose(2, 3, strides=2, padding="same"),
                      L.Conv1DTranspose(4, 2, strides=3), L.SeparableConv1D(2, 3),
                      L.SeparableConv1D(4, 3, strides=2, padding="same", depth_multiplier=2)]:
            layer(x)
            layer.set_weights([np.random.default_rng(i).standard_normal(w.shape).astype(np.float32) * 0.3
                               for i, w in enumerate(layer.get_weights())])
            res.append(layer(x))
        outs.append(res)
    for got, want in zip(outs[1], outs[0]):
        close(got, want, 1e-4)


def _more_datasets(tf):
    return [
        [x.tolist() for x in tf.data.Dataset.from_generator(
            lambda: iter([[1, 2], [3, 4]]), output_signature=tf.TensorSpec((2,), tf.int32)).as_numpy_iterator()],
        [(a.tolist(), b.tolist()) for a, b in tf.data.Dataset.from_generator(
            lambda: iter([([1.0], 2), ([3.0], 4)]), output_types=(tf.float32, tf.int64)).as_numpy_iterator()],
        [int(x) for x in tf.data.Dataset.range(4).scan(tf.constant(0, tf.int64),
                                                       lambda s, x: (s + x, s * 10 + x)).as_numpy_iterator()],
        sorted(int(x) for x in tf.data.Dataset.sample_from_datasets(
            [tf.data.Dataset.range(3), tf.data.Dataset.range(5, 8)], seed=0).as_numpy_iterator()),
        [int(x) for x in tf.data.Dataset.choose_from_datasets(
            [tf.data.Dataset.range(3), tf.data.Dataset.range(10, 13)],
            tf.data.Dataset.from_tensor_slices(tf.constant([0, 1, 0, 1], tf.int64))).as_numpy_iterator()],
        [int(x) for x in tf.data.Dataset.counter(2, 3).take(3).as_numpy_iterator()],
        [int(x) for x in tf.data.Dataset.from_tensor_slices([1, 1, 2, 1, 3]).unique().as_numpy_iterator()],
        int(tf.data.Dataset.from_tensors(5).get_single_element()),
        [tf.TensorShape([None, 3]).as_list(), str(tf.TensorShape([None, 3])), tf.TensorShape([2, 3]).num_elements(),
         tf.TensorShape([None, 3]).num_elements(), tf.ones((2, 3)).shape.ndims, tf.ones((2, 3)).shape.num_elements()],
    ]


def test_more_dataset_sources_and_transformations_match_tf():
    for got, want in zip(_more_datasets(ltf), _more_datasets(real_tf)):
        assert got == want
    from loom.errors import LoomError
    with pytest.raises(LoomError, match="tf.data.Dataset.rebatch is not supported"):
        ltf.data.Dataset.range(3).rebatch(2)
    with pytest.raises(LoomValueError, match="exactly one"):
        ltf.data.Dataset.range(3).get_single_element()


def _constrained(tf):
    x = np.random.default_rng(0).random((8, 3), np.float32)
    y = np.random.default_rng(1).random((8, 2), np.float32)
    C = tf.keras.constraints
    m = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(4, kernel_constraint=C.MaxNorm(0.5)),
                             tf.keras.layers.Dense(2, kernel_constraint="non_neg",
                                                   bias_constraint=C.MinMaxNorm(0.1, 0.2, axis=0)),
                             tf.keras.layers.Dense(2, kernel_constraint=C.UnitNorm(axis=1))])
    m.set_weights([np.random.default_rng(i).standard_normal(w.shape).astype(np.float32)
                   for i, w in enumerate(m.get_weights())])
    m.compile(tf.keras.optimizers.SGD(0.1), "mse")
    m.fit(x, y, epochs=2, batch_size=4, verbose=0, shuffle=False)
    v = tf.Variable([1.0, -2.0], constraint=lambda z: tf.clip_by_value(z, 0.0, 1.0))
    tf.keras.optimizers.SGD(1.0).apply_gradients([(tf.constant([-1.0, 1.0]), v)])
    return m.get_weights() + [v]


def test_weight_constraints_are_applied_after_each_update():
    for got, want in zip(_constrained(ltf), _constrained(real_tf)):
        close(got, want, 1e-4)
