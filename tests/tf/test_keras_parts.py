"""Keras losses, metrics, optimizers and single layers of loom.tf against TensorFlow's Keras."""
import numpy as np
import pytest

import loom.tf as ltf
from tests.tf.harness import real_tf

rng = np.random.default_rng(0)
PROBS = rng.dirichlet(np.ones(4), 6).astype(np.float32)
LOGITS = rng.standard_normal((6, 4)).astype(np.float32)
LABELS = rng.integers(0, 4, 6)
ONE_HOT = np.eye(4, dtype=np.float32)[LABELS]
REG_TRUE = rng.standard_normal((6, 3)).astype(np.float32)
REG_PRED = rng.standard_normal((6, 3)).astype(np.float32) * 2
BIN_TRUE = (rng.random((6, 1)) > 0.5).astype(np.float32)
BIN_PROB = rng.random((6, 1)).astype(np.float32)

LOSSES = {
    "sparse_probs": (lambda k: k.losses.SparseCategoricalCrossentropy(), LABELS, PROBS),
    "sparse_logits": (lambda k: k.losses.SparseCategoricalCrossentropy(from_logits=True), LABELS, LOGITS),
    "categorical_probs": (lambda k: k.losses.CategoricalCrossentropy(), ONE_HOT, PROBS),
    "categorical_logits_smoothing": (lambda k: k.losses.CategoricalCrossentropy(from_logits=True,
                                                                                label_smoothing=0.1), ONE_HOT, LOGITS),
    "binary_probs": (lambda k: k.losses.BinaryCrossentropy(), BIN_TRUE, BIN_PROB),
    "binary_logits": (lambda k: k.losses.BinaryCrossentropy(from_logits=True), BIN_TRUE, LOGITS[:, :1]),
    "mse": (lambda k: k.losses.MeanSquaredError(), REG_TRUE, REG_PRED),
    "mae": (lambda k: k.losses.MeanAbsoluteError(), REG_TRUE, REG_PRED),
    "huber": (lambda k: k.losses.Huber(delta=0.7), REG_TRUE, REG_PRED),
    "mse_rank_short_target": (lambda k: k.losses.MeanSquaredError(), REG_TRUE[:, 0], REG_PRED[:, :1]),
    "kld": (lambda k: k.losses.KLDivergence(), PROBS[::-1].copy(), PROBS),
    "hinge_01_labels": (lambda k: k.losses.Hinge(), BIN_TRUE, LOGITS[:, :1]),
    "squared_hinge": (lambda k: k.losses.SquaredHinge(), np.sign(REG_TRUE), REG_PRED),
    "categorical_hinge": (lambda k: k.losses.CategoricalHinge(), ONE_HOT, LOGITS),
    "log_cosh": (lambda k: k.losses.LogCosh(), REG_TRUE, REG_PRED),
    "poisson": (lambda k: k.losses.Poisson(), np.abs(REG_TRUE), np.abs(REG_PRED) + 0.1),
    "msle": (lambda k: k.losses.MeanSquaredLogarithmicError(), np.abs(REG_TRUE), np.abs(REG_PRED)),
    "mape": (lambda k: k.losses.MeanAbsolutePercentageError(), REG_TRUE, REG_PRED),
    "cosine_similarity": (lambda k: k.losses.CosineSimilarity(), REG_TRUE, REG_PRED),
}


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_loss_matches_keras(name):
    make, y_true, y_pred = LOSSES[name]
    want = float(make(real_tf.keras)(y_true, y_pred))
    got = float(make(ltf.keras)(y_true, y_pred))
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_loss_gradient_matches_keras():
    def grad(tf):
        p = tf.Variable(LOGITS)
        with tf.GradientTape() as tape:
            loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)(LABELS, p)
        return tape.gradient(loss, p).numpy()
    np.testing.assert_allclose(grad(ltf), grad(real_tf), rtol=1e-5, atol=1e-7)


METRICS = {
    "accuracy": (lambda k: k.metrics.Accuracy(), LABELS, np.argmax(PROBS, 1)),
    "sparse_categorical_accuracy": (lambda k: k.metrics.SparseCategoricalAccuracy(), LABELS, PROBS),
    "categorical_accuracy": (lambda k: k.metrics.CategoricalAccuracy(), ONE_HOT, PROBS),
    "binary_accuracy": (lambda k: k.metrics.BinaryAccuracy(), BIN_TRUE, BIN_PROB),
    "mse": (lambda k: k.metrics.MeanSquaredError(), REG_TRUE, REG_PRED),
    "mae": (lambda k: k.metrics.MeanAbsoluteError(), REG_TRUE, REG_PRED),
    "auc": (lambda k: k.metrics.AUC(), BIN_TRUE, BIN_PROB),
    "precision": (lambda k: k.metrics.Precision(), BIN_TRUE, BIN_PROB),
    "recall_threshold": (lambda k: k.metrics.Recall(thresholds=0.3), BIN_TRUE, BIN_PROB),
    "true_positives": (lambda k: k.metrics.TruePositives(), BIN_TRUE, BIN_PROB),
    "false_negatives": (lambda k: k.metrics.FalseNegatives(thresholds=0.7), BIN_TRUE, BIN_PROB),
}


@pytest.mark.parametrize("name", sorted(METRICS))
def test_metric_matches_keras_over_two_updates(name):
    make, y_true, y_pred = METRICS[name]
    results = []
    for k in (real_tf.keras, ltf.keras):
        m = make(k)
        m.update_state(y_true[:4], y_pred[:4])
        m.update_state(y_true[4:], y_pred[4:])
        first = float(m.result())
        m.reset_state()
        m.update_state(y_true[:3], y_pred[:3])
        results.append((first, float(m.result())))
    np.testing.assert_allclose(results[1], results[0], rtol=1e-5)


def test_mean_metric_weighted():
    for k in (real_tf.keras, ltf.keras):
        m = k.metrics.Mean()
        m.update_state([1.0, 2.0, 3.0])
        m.update_state([10.0], sample_weight=[3.0])
        assert abs(float(m.result()) - 36.0 / 6.0) < 1e-6


OPTIMIZERS = {
    "sgd": lambda k: k.optimizers.SGD(learning_rate=0.1),
    "sgd_momentum": lambda k: k.optimizers.SGD(learning_rate=0.05, momentum=0.9),
    "sgd_nesterov": lambda k: k.optimizers.SGD(learning_rate=0.05, momentum=0.8, nesterov=True),
    "adam": lambda k: k.optimizers.Adam(learning_rate=0.1),
    "adam_amsgrad": lambda k: k.optimizers.Adam(learning_rate=0.1, amsgrad=True),
    "adamw": lambda k: k.optimizers.AdamW(learning_rate=0.1, weight_decay=0.05),
    "rmsprop": lambda k: k.optimizers.RMSprop(learning_rate=0.05),
    "rmsprop_centered_momentum": lambda k: k.optimizers.RMSprop(learning_rate=0.05, momentum=0.5, centered=True),
    "adagrad": lambda k: k.optimizers.Adagrad(learning_rate=0.2),
    "adam_clipnorm": lambda k: k.optimizers.Adam(learning_rate=0.1, clipnorm=0.5),
    "sgd_global_clipnorm": lambda k: k.optimizers.SGD(learning_rate=0.1, global_clipnorm=0.3),
    "adamax": lambda k: k.optimizers.Adamax(learning_rate=0.1),
    "nadam": lambda k: k.optimizers.Nadam(learning_rate=0.1),
    "nadam_betas": lambda k: k.optimizers.Nadam(learning_rate=0.05, beta_1=0.8, beta_2=0.99),
}


def _optimize(tf, make):
    w = tf.Variable([[1.0, -2.0], [0.5, 3.0]])
    b = tf.Variable([0.3, -0.1])
    opt = make(tf.keras)
    x = tf.constant([[1.0, 2.0], [-1.0, 0.5], [0.3, 0.3]])
    for _ in range(6):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum((tf.matmul(x, w) + b - 1.0) ** 2)
        grads = tape.gradient(loss, [w, b])
        opt.apply_gradients(zip(grads, [w, b]))
    return [w.numpy(), b.numpy(), int(opt.iterations.numpy())]


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optimizer_matches_keras(name):
    want = _optimize(real_tf, OPTIMIZERS[name])
    got = _optimize(ltf, OPTIMIZERS[name])
    rtol = 1e-4 if name.startswith("nadam") else 1e-5  # Nadam's momentum-schedule product rounds differently.
    np.testing.assert_allclose(got[0], want[0], rtol=rtol, atol=1e-6)
    np.testing.assert_allclose(got[1], want[1], rtol=rtol, atol=1e-6)
    assert got[2] == want[2] == 6


LAYERS = {
    "conv2d_same_strided": (lambda k: k.layers.Conv2D(4, 3, strides=2, padding="same", activation="relu"),
                            (2, 7, 7, 3)),
    "conv1d": (lambda k: k.layers.Conv1D(3, 2, padding="same"), (2, 5, 4)),
    "global_avg_pool": (lambda k: k.layers.GlobalAveragePooling2D(), (2, 4, 4, 3)),
    "global_max_pool": (lambda k: k.layers.GlobalMaxPooling2D(), (2, 4, 4, 3)),
    "max_pool_strided": (lambda k: k.layers.MaxPool2D(pool_size=3, strides=2, padding="same"), (1, 7, 6, 2)),
    "reshape": (lambda k: k.layers.Reshape((3, -1)), (2, 6, 2)),
    "activation": (lambda k: k.layers.Activation("gelu"), (2, 5)),
    "leaky_relu": (lambda k: k.layers.LeakyReLU(), (2, 5)),
    "softmax": (lambda k: k.layers.Softmax(), (2, 5)),
    "dense_3d": (lambda k: k.layers.Dense(3, activation="sigmoid"), (2, 4, 5)),
    "batchnorm_inference": (lambda k: k.layers.BatchNormalization(), (4, 3)),
    "zero_padding": (lambda k: k.layers.ZeroPadding2D(((1, 0), (2, 1))), (1, 3, 3, 2)),
    "mha_causal": (lambda k: k.layers.MultiHeadAttention(2, 3, value_dim=2), (2, 4, 5)),
    "gru": (lambda k: k.layers.GRU(4, return_sequences=True), (2, 5, 3)),
    "gru_last_backwards": (lambda k: k.layers.GRU(3, go_backwards=True), (2, 5, 3)),
    "simple_rnn": (lambda k: k.layers.SimpleRNN(4, return_sequences=True), (2, 5, 3)),
    "lstm_backwards": (lambda k: k.layers.LSTM(3, go_backwards=True, return_sequences=True), (2, 4, 3)),
    "upsampling": (lambda k: k.layers.UpSampling2D((2, 3)), (1, 2, 3, 2)),
}


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_layer_forward_matches_keras(name):
    make, shape = LAYERS[name]
    x = rng.standard_normal(shape).astype(np.float32)
    tf_layer, loom_layer = make(real_tf.keras), make(ltf.keras)
    extra = {"use_causal_mask": True} if name == "mha_causal" else {}
    args = (x, x) if name == "mha_causal" else (x,)
    if name.startswith(("gru", "simple_rnn")):  # Random biases, so the bias layout is checked too.
        tf_layer(*args)
        tf_layer.set_weights([w + rng.standard_normal(w.shape).astype(np.float32) * 0.1
                              for w in tf_layer.get_weights()])
    want = tf_layer(*args, **extra).numpy()
    loom_layer(*args, **extra)
    loom_layer.set_weights(tf_layer.get_weights())
    got = loom_layer(*args, **extra).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def _merge_model(tf):
    k, lay = tf.keras, tf.keras.layers
    inp = k.Input(shape=(5,))
    h = lay.Dense(6, activation="relu", kernel_initializer="ones")(inp)
    g = lay.Dense(6, kernel_initializer=k.initializers.Constant(-0.3))(inp)
    merged = lay.concatenate([lay.add([h, g]), lay.subtract([h, g]), lay.multiply([h, g]), lay.average([h, g]),
                              lay.maximum([h, g]), lay.minimum([h, g]), lay.dot([h, g], axes=1),
                              lay.dot([h, g], axes=1, normalize=True)])
    return k.Model(inputs=inp, outputs=lay.Dense(2, kernel_initializer="ones")(merged))


def test_functional_merge_helpers_and_dot_match_keras():
    x = rng.standard_normal((4, 5)).astype(np.float32)
    a = rng.standard_normal((2, 3, 4)).astype(np.float32)
    b = rng.standard_normal((2, 5, 4)).astype(np.float32)
    want = [_merge_model(real_tf)(x).numpy(), real_tf.keras.layers.Dot(axes=(2, 2))([a, b]).numpy()]
    got = [_merge_model(ltf)(x).numpy(), ltf.keras.layers.Dot(axes=(2, 2))([ltf.constant(a), ltf.constant(b)]).numpy()]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def _with_weights(layer, x, seed):
    layer(x)
    g = np.random.default_rng(seed)
    layer.set_weights([g.standard_normal(w.shape).astype(np.float32) * 0.3 for w in layer.get_weights()])
    out = layer(x)
    return [np.asarray(o) for o in out] if isinstance(out, (list, tuple)) else [np.asarray(out)]


def _sequence_and_image_layers(tf):
    lay = tf.keras.layers
    seq = np.random.default_rng(1).standard_normal((2, 7, 3)).astype(np.float32)
    img = np.random.default_rng(2).standard_normal((2, 5, 4, 3)).astype(np.float32)
    out = [lay.MaxPooling1D(2)(seq), lay.MaxPooling1D(3, strides=2, padding="same")(seq),
           lay.AveragePooling1D(2, padding="same")(seq), lay.GlobalMaxPooling1D()(seq),
           lay.RepeatVector(3)(seq[:, 0]), lay.Permute((3, 1, 2))(img)]
    out = [np.asarray(o) for o in out]
    for k, s, p in [(3, 2, "same"), (3, 2, "valid"), (2, 3, "valid"), (2, 3, "same"), ((3, 2), (2, 1), "same")]:
        out += _with_weights(lay.Conv2DTranspose(2, k, strides=s, padding=p), img, 5)
    out += _with_weights(lay.TimeDistributed(lay.Dense(4)), seq, 6)
    for mode in ("concat", "ave"):
        out += _with_weights(lay.Bidirectional(lay.LSTM(4, return_sequences=True), merge_mode=mode), seq, 7)
    out += _with_weights(lay.Bidirectional(lay.GRU(3)), seq, 8)
    out += _with_weights(lay.Bidirectional(lay.LSTM(2, return_sequences=True, return_state=True)), seq, 9)
    return out


def test_pooling1d_conv2d_transpose_time_distributed_bidirectional_match_keras():
    want, got = _sequence_and_image_layers(real_tf), _sequence_and_image_layers(ltf)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_pad_sequences_and_snake_case_initializers_match_keras():
    seqs = [[1, 2, 3], [4, 5], [6, 7, 8, 9, 10], []]
    for kwargs in ({}, {"maxlen": 4, "padding": "post", "truncating": "post", "value": -1}, {"maxlen": 2}):
        np.testing.assert_array_equal(ltf.keras.utils.pad_sequences(seqs, **kwargs),
                                      real_tf.keras.utils.pad_sequences(seqs, **kwargs))
    for name, args in [("zeros", {}), ("constant", {"value": 0.5}), ("glorot_uniform", {"seed": 1}),
                       ("he_normal", {"seed": 1}), ("orthogonal", {}), ("variance_scaling", {"scale": 2.0})]:
        got = np.asarray(getattr(ltf.keras.initializers, name)(**args)((40, 30)))
        want = np.asarray(getattr(real_tf.keras.initializers, name)(**args)((40, 30)))
        assert got.shape == want.shape
        np.testing.assert_allclose(got.std(), want.std(), rtol=0.15, atol=1e-6)


def _schedules(tf):
    s = tf.keras.optimizers.schedules
    return [s.PiecewiseConstantDecay([3, 7], [0.1, 0.05, 0.01]), s.InverseTimeDecay(0.1, 5, 0.5),
            s.InverseTimeDecay(0.1, 5, 0.5, staircase=True), s.PolynomialDecay(0.1, 10, 0.001, power=2.0),
            s.PolynomialDecay(0.1, 4, 0.01, cycle=True), s.CosineDecay(0.1, 10, alpha=0.1),
            s.CosineDecay(0.0, 8, warmup_target=0.2, warmup_steps=4),
            s.CosineDecayRestarts(0.1, 3, t_mul=2.0, m_mul=0.8, alpha=0.05), s.CosineDecayRestarts(0.1, 3, t_mul=1.0)]


def test_learning_rate_schedules_match_keras():
    want = np.array([[float(s(i)) for i in range(16)] for s in _schedules(real_tf)])
    got = np.array([[float(s(i)) for i in range(16)] for s in _schedules(ltf)])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    opt = ltf.keras.optimizers.SGD(ltf.keras.optimizers.schedules.PiecewiseConstantDecay([0], [0.5, 0.25]))
    v = ltf.Variable([1.0])
    for _ in range(2):
        opt.apply_gradients([(ltf.constant([1.0]), v)])
    np.testing.assert_allclose(v.numpy(), [1.0 - 0.5 - 0.25])


def _simple_layers(tf):
    lay = tf.keras.layers
    rng = np.random.default_rng(3)
    seq = rng.standard_normal((2, 7, 4)).astype(np.float32)
    img = rng.standard_normal((2, 5, 6, 4)).astype(np.float32)
    out = [lay.ELU(0.5)(seq), lay.Identity()(seq), lay.GaussianNoise(0.5)(seq), lay.GaussianDropout(0.3)(seq),
           lay.SpatialDropout1D(0.5)(seq), lay.SpatialDropout2D(0.5)(img), lay.Cropping1D((1, 2))(seq),
           lay.Cropping2D(((1, 0), (2, 1)))(img), lay.Cropping2D(1)(img), lay.UpSampling1D(3)(seq),
           lay.ZeroPadding1D((2, 1))(seq)]
    out = [np.asarray(o) for o in out]
    for layer, x in [(lay.PReLU(), seq), (lay.PReLU(shared_axes=[1, 2]), img), (lay.GroupNormalization(2), img),
                     (lay.GroupNormalization(4, scale=False), seq)]:
        out += _with_weights(layer, x, 11)
    return out


def test_simple_layers_match_keras_and_noise_layers_act_while_training():
    want, got = _simple_layers(real_tf), _simple_layers(ltf)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    x = ltf.ones((64, 8, 16))
    noisy = ltf.keras.layers.GaussianNoise(0.5)(x, training=True).numpy()
    assert abs(noisy.std() - 0.5) < 0.05 and abs(noisy.mean() - 1.0) < 0.05
    dropped = ltf.keras.layers.SpatialDropout1D(0.5)(x, training=True).numpy()
    per_channel = dropped.std(axis=1)  # A dropped channel is zero at every step, a kept one is 2 everywhere.
    assert np.all(per_channel == 0) and set(np.unique(dropped)) == {0.0, 2.0}


def test_precision_recall_with_threshold_lists_and_weights_match_keras():
    rng = np.random.default_rng(4)
    y_true = (rng.random((10, 1)) > 0.5).astype(np.float32)
    y_pred = rng.random((10, 1)).astype(np.float32)
    weights = np.arange(10.0)
    for make in (lambda k: k.metrics.Precision(thresholds=[0.3, 0.7]),
                 lambda k: k.metrics.Recall(thresholds=[0.2, 0.5]),
                 lambda k: k.metrics.TrueNegatives(thresholds=[0.1, 0.9]), lambda k: k.metrics.FalsePositives()):
        got, want = make(ltf.keras), make(real_tf.keras)
        for m in (got, want):
            m.update_state(y_true, y_pred, sample_weight=weights)
        np.testing.assert_allclose(np.asarray(got.result()), np.asarray(want.result()), rtol=1e-6)
