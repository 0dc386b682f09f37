"""Keras programs run through TensorFlow and through loom.tf from the same initial weights: losses match.

Each program is written once against `tf` (the real TensorFlow or `loom.tf`);
the test builds the model in both, copies TensorFlow's initial weights into
loom's, trains both for 20 optimizer steps and compares the per-epoch losses
and metrics Keras reports.
"""
import numpy as np
import pytest

import loom.tf as ltf
from loom.errors import LoomValueError
from tests.tf.harness import real_tf


@pytest.fixture(scope="module")
def digits():
    from sklearn.datasets import load_digits
    d = load_digits()
    x = (d.images[:128] / 16.0).astype(np.float32)
    return x, d.target[:128].astype(np.int64)


def copy_weights(src, dst):
    """TensorFlow's initial weights into loom's model, layer by layer."""
    assert len(src.layers) == len(dst.layers), ([type(s).__name__ for s in src.layers],
                                                [type(d).__name__ for d in dst.layers])
    for s, d in zip(src.layers, dst.layers):
        assert type(s).__name__ == type(d).__name__
        d.set_weights(s.get_weights())


def run_both(build, train, *data):
    tf_model = build(real_tf)
    loom_model = build(ltf)
    copy_weights(tf_model, loom_model)
    for a, b in zip(tf_model.get_weights(), loom_model.get_weights()):
        np.testing.assert_array_equal(a, b)
    return train(real_tf, tf_model, *data), train(ltf, loom_model, *data), tf_model, loom_model


def assert_history_close(got, want, rtol=1e-4):
    assert sorted(got) == sorted(want), (sorted(got), sorted(want))
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=rtol, atol=1e-6, err_msg=k)


# ---------------------------------------------------------------- programs

def build_cnn(tf):
    return tf.keras.Sequential([
        tf.keras.Input(shape=(8, 8, 1)),
        tf.keras.layers.Conv2D(8, 3, padding="same", activation="relu"),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Conv2D(12, (2, 2), strides=1, padding="valid"),
        tf.keras.layers.BatchNormalization(),
        tf.keras.layers.ReLU(),
        tf.keras.layers.AveragePooling2D(pool_size=2, padding="same"),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dropout(0.0),
        tf.keras.layers.Dense(10),
    ])


def train_cnn(tf, model, x, y):
    model.compile(optimizer=tf.keras.optimizers.Adam(learning_rate=3e-3),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    hist = model.fit(x[..., None], y, batch_size=64, epochs=10, shuffle=False, verbose=0)
    return hist.history


def build_mlp(tf):
    model = tf.keras.Sequential()
    model.add(tf.keras.layers.Flatten(input_shape=(8, 8)))
    model.add(tf.keras.layers.Dense(32, activation="tanh"))
    model.add(tf.keras.layers.LayerNormalization())
    model.add(tf.keras.layers.Dense(10, activation="softmax"))
    return model


def train_mlp(tf, model, x, y):
    model.compile(optimizer=tf.keras.optimizers.SGD(learning_rate=0.1, momentum=0.9, nesterov=True),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    hist = model.fit(x, y, batch_size=32, epochs=5, validation_split=0.25, shuffle=False, verbose=0)
    ev = model.evaluate(x, y, batch_size=50, verbose=0)
    return dict(hist.history, evaluate=ev, predict=model.predict(x[:5], verbose=0))


def build_sequence_model(tf):
    tokens = tf.keras.Input(shape=(6,), dtype="int32")
    h = tf.keras.layers.Embedding(200, 8)(tokens)
    h = tf.keras.layers.LSTM(8, return_sequences=True)(h)
    a = tf.keras.layers.MultiHeadAttention(num_heads=2, key_dim=4)(h, h)
    h = tf.keras.layers.LayerNormalization()(tf.keras.layers.Add()([h, a]))
    pooled = tf.keras.layers.GlobalAveragePooling1D()(h)
    last = tf.keras.layers.LSTM(4)(h)
    joined = tf.keras.layers.Concatenate()([pooled, last])
    out = tf.keras.layers.Dense(1)(joined)
    return tf.keras.Model(tokens, out)


def train_sequence_model(tf, model, x, y):
    model.compile(optimizer=tf.keras.optimizers.RMSprop(learning_rate=1e-2),
                  loss=tf.keras.losses.BinaryCrossentropy(from_logits=True))
    return model.fit(x, y, batch_size=16, epochs=10, shuffle=False, verbose=0).history


def build_regression(tf):
    inp = tf.keras.Input(shape=(5,))
    h = tf.keras.layers.Dense(16, activation="relu")(inp)
    h = tf.keras.layers.BatchNormalization(momentum=0.9)(h)
    out = tf.keras.layers.Dense(2)(h)
    return tf.keras.Model(inputs=inp, outputs=out)


def train_regression(tf, model, x, y):
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(20)
    model.compile(optimizer=tf.keras.optimizers.AdamW(learning_rate=1e-2, weight_decay=0.01), loss="mse",
                  metrics=["mae"])
    hist = model.fit(ds, epochs=10, verbose=0)
    return dict(hist.history, huber=float(tf.keras.losses.Huber()(y, model.predict(x, verbose=0))))


# ---------------------------------------------------------------- tests

def test_sequential_cnn_on_digits_matches_tensorflow(digits):
    x, y = digits
    want, got, _, _ = run_both(build_cnn, train_cnn, x, y)
    assert len(got["loss"]) == 10  # 10 epochs of 2 steps: 20 Adam steps.
    assert_history_close(got, want)


def test_mlp_sgd_nesterov_validation_split_matches_tensorflow(digits):
    x, y = digits
    want, got, _, _ = run_both(build_mlp, train_mlp, x, y)
    np.testing.assert_allclose(got.pop("predict"), want.pop("predict"), rtol=1e-4, atol=1e-6)
    assert_history_close(got, want)


def test_functional_embedding_lstm_attention_matches_tensorflow():
    rng = np.random.default_rng(0)
    # No token repeats within a batch: TensorFlow hands Embedding's gradient to the optimizer as
    # IndexedSlices, and Keras's RMSprop/Adam square those per occurrence (a sum of squares where a
    # dense gradient gives the square of the sum); loom's gradients are dense.
    x = np.concatenate([rng.permutation(200)[:96].reshape(16, 6) for _ in range(2)]).astype(np.int32)
    y = (x.sum(1) % 2).astype(np.float32)[:, None]
    want, got, _, _ = run_both(build_sequence_model, train_sequence_model, x, y)
    assert_history_close(got, want, rtol=2e-4)


def test_functional_batchnorm_adamw_on_dataset_matches_tensorflow():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((40, 5)).astype(np.float32)
    y = np.stack([x[:, 0] * 2 - x[:, 1], x[:, 2] * x[:, 3]], 1).astype(np.float32)
    want, got, tf_model, loom_model = run_both(build_regression, train_regression, x, y)
    assert_history_close(got, want)
    for a, b in zip(tf_model.get_weights(), loom_model.get_weights()):  # Moving statistics included.
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)


def custom_loop(tf, x, y, weights=None):
    class Affine(tf.keras.layers.Layer):
        def __init__(self, units):
            super().__init__()
            self.units = units

        def build(self, input_shape):
            self.w = self.add_weight(shape=(input_shape[-1], self.units), initializer="glorot_uniform",
                                     trainable=True)
            self.b = self.add_weight(shape=(self.units,), initializer="zeros", trainable=True)

        def call(self, inputs):
            return tf.matmul(inputs, self.w) + self.b

    class Net(tf.keras.Model):
        def __init__(self):
            super().__init__()
            self.hidden = Affine(16)
            self.drop = tf.keras.layers.Dropout(0.0)
            self.out = tf.keras.layers.Dense(10)

        def call(self, inputs, training=False):
            h = tf.nn.relu(self.hidden(inputs))
            return self.out(self.drop(h, training=training))

    model = Net()
    model(x[:1])
    if weights is not None:
        model.set_weights(weights)
    initial = model.get_weights()
    opt = tf.keras.optimizers.Adam(learning_rate=1e-2)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    acc = tf.keras.metrics.SparseCategoricalAccuracy()

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            logits = model(xb, training=True)
            loss = loss_fn(yb, logits)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss, logits

    losses = []
    for i in range(20):
        lo = (i % 4) * 32
        loss, logits = step(x[lo:lo + 32], y[lo:lo + 32])
        acc.update_state(y[lo:lo + 32], logits)
        losses.append(float(loss))
    return initial, losses, float(acc.result()), int(opt.iterations.numpy())


def test_subclassed_model_custom_tf_function_loop_matches_tensorflow(digits):
    x, y = digits
    x = x.reshape(len(x), -1)
    init, want, want_acc, want_it = custom_loop(real_tf, x, y)
    _, got, got_acc, got_it = custom_loop(ltf, x, y, weights=init)
    np.testing.assert_allclose(got, want, rtol=1e-4)
    assert abs(got_acc - want_acc) < 1e-6 and got_it == want_it == 20


# ---------------------------------------------------------------- loom-side behaviour

def test_defaults_glorot_uniform_and_zero_bias():
    ltf.random.set_seed(0)
    layer = ltf.keras.layers.Dense(300)
    layer(ltf.ones((1, 200)))
    k = layer.kernel.numpy()
    limit = np.sqrt(6 / (200 + 300))
    assert np.abs(k).max() <= limit and np.abs(k).max() > 0.95 * limit
    assert abs(k.std() - limit / np.sqrt(3)) < 0.01 * limit * 3
    assert not layer.bias.numpy().any()
    bn = ltf.keras.layers.BatchNormalization()
    assert bn.momentum == 0.99 and bn.epsilon == 1e-3
    assert ltf.keras.optimizers.Adam().epsilon == 1e-7


def test_callbacks_history_checkpoint_early_stopping_lambda(tmp_path, digits, capsys):
    x, y = digits
    x = x.reshape(len(x), -1)
    model = ltf.keras.Sequential([ltf.keras.Input(shape=(64,)), ltf.keras.layers.Dense(10)])
    model.compile("adam", ltf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    seen = []
    ckpt = tmp_path / "best.weights"
    stop = ltf.keras.callbacks.EarlyStopping(monitor="loss", patience=0, min_delta=10.0)
    cbs = [ltf.keras.callbacks.ModelCheckpoint(str(ckpt), monitor="loss", save_best_only=True),
           ltf.keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: seen.append((epoch, logs["loss"]))),
           stop]
    hist = model.fit(x, y, epochs=6, batch_size=64, callbacks=cbs, verbose=1)
    out = capsys.readouterr().out
    assert "Epoch 1/6" in out and "2/2 [" in out and "loss:" in out
    # min_delta=10 means no epoch improves on the first: training stops after the second.
    assert hist.epoch == [0, 1] and stop.stopped_epoch == 1 and len(seen) == 2
    assert ckpt.exists()
    restored = ltf.keras.Sequential([ltf.keras.Input(shape=(64,)), ltf.keras.layers.Dense(10)])
    restored.load_weights(str(ckpt))
    # The second epoch improved the loss, so the checkpoint holds the final weights.
    assert hist.history["loss"][1] < hist.history["loss"][0]
    for a, b in zip(restored.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_save_load_weights_roundtrip_and_summary(tmp_path, capsys):
    model = build_cnn(ltf)
    path = tmp_path / "w.ckpt"
    model.save_weights(str(path))
    other = build_cnn(ltf)
    other.load_weights(str(path))
    for a, b in zip(model.get_weights(), other.get_weights()):
        np.testing.assert_array_equal(a, b)
    model.summary()
    out = capsys.readouterr().out
    assert "conv2d" in out and "Total params" in out
    assert f"{model.count_params():,}" in out


def test_dropout_and_batchnorm_follow_training_flag():
    ltf.random.set_seed(0)
    x = ltf.ones((64, 4))
    drop = ltf.keras.layers.Dropout(0.5)
    assert (drop(x).numpy() == 1).all()
    y = drop(x, training=True).numpy()
    assert set(np.unique(y).tolist()) == {0.0, 2.0}
    bn = ltf.keras.layers.BatchNormalization()
    data = ltf.random.normal((32, 4), mean=3.0)
    bn(data, training=True)
    np.testing.assert_allclose(bn.moving_mean.numpy(), 0.01 * data.numpy().mean(0), rtol=1e-4)
    assert len(bn.trainable_weights) == 2 and len(bn.non_trainable_weights) == 2


def test_compile_errors_are_clear():
    model = ltf.keras.Sequential([ltf.keras.layers.Dense(1)])
    with pytest.raises(ValueError, match="compile"):
        model.fit(np.ones((2, 2)), np.ones((2, 1)), verbose=0)
    model.compile(optimizer="sgd", loss="mse")
    with pytest.raises(ValueError, match="class_weight"):
        model.fit(np.ones((2, 2)), np.ones((2, 1)), class_weight={0: 1.0}, verbose=0)
    with pytest.raises(ValueError, match="unknown optimizer"):
        model.compile(optimizer="nonsense", loss="mse")
    with pytest.raises(ValueError, match="unknown loss"):
        model.compile(optimizer="sgd", loss="nonsense")


def test_unsupported_layer_arguments_raise_instead_of_being_ignored():
    with pytest.raises(TypeError, match="kernel_constraint"):
        ltf.keras.layers.Conv2D(3, 3, kernel_constraint=lambda w: w)  # Dense has constraints now.
    with pytest.raises(ValueError, match="recurrent_dropout"):
        ltf.keras.layers.LSTM(3, recurrent_dropout=0.2)
    with pytest.raises(ValueError, match="recurrent_dropout"):
        ltf.keras.layers.GRU(3, dropout=0.1)
    ltf.keras.layers.Dense(3, kernel_constraint=None)  # Keras's defaults are accepted.


def _fit_with_callbacks(tf, make_callbacks, log_dir):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 4)).astype(np.float32)
    y = (x @ np.array([1.0, -1.0, 2.0, 0.5], np.float32))[:, None]
    model = tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(1, kernel_initializer="ones")])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.05), loss="mse")
    hist = model.fit(x, y, batch_size=32, epochs=8, verbose=0, shuffle=False, validation_data=(x[:8], y[:8] * 3),
                     callbacks=make_callbacks(tf, log_dir))
    return {k: np.array(v, np.float64) for k, v in hist.history.items()}, model.get_weights()[0]


@pytest.mark.parametrize("make_callbacks", [
    lambda tf, d: [tf.keras.callbacks.LearningRateScheduler(lambda e, lr: lr * 0.5 if e >= 2 else lr)],
    lambda tf, d: [tf.keras.callbacks.LearningRateScheduler(lambda e: 0.1 / (e + 1))],
    lambda tf, d: [tf.keras.callbacks.ReduceLROnPlateau(monitor="val_loss", factor=0.5, patience=1, cooldown=1,
                                                        min_lr=0.01)],
    lambda tf, d: [tf.keras.callbacks.ReduceLROnPlateau(monitor="loss", factor=0.2, patience=0, min_delta=10.0)],
    lambda tf, d: [tf.keras.callbacks.CSVLogger(str(d / "log.csv")), tf.keras.callbacks.TerminateOnNaN()],
], ids=["lr_scheduler_two_args", "lr_scheduler_epoch_only", "plateau_val_loss_cooldown", "plateau_loss", "csv"])
def test_learning_rate_callbacks_and_csv_logger_match_tensorflow(make_callbacks, tmp_path):
    (tmp_path / "tf").mkdir()
    (tmp_path / "loom").mkdir()
    want, w_want = _fit_with_callbacks(real_tf, make_callbacks, tmp_path / "tf")
    got, w_got = _fit_with_callbacks(ltf, make_callbacks, tmp_path / "loom")
    assert sorted(got) == sorted(want)  # History records the learning_rate the callbacks log.
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-4)
    np.testing.assert_allclose(w_got, w_want, rtol=1e-4)
    if (tmp_path / "tf" / "log.csv").exists():
        rows = [line.split(",") for line in (tmp_path / "loom" / "log.csv").read_text().splitlines()]
        want_rows = [line.split(",") for line in (tmp_path / "tf" / "log.csv").read_text().splitlines()]
        assert rows[0] == want_rows[0] and len(rows) == len(want_rows)
        np.testing.assert_allclose(np.array(rows[1:], float), np.array(want_rows[1:], float), rtol=1e-4)


def test_terminate_on_nan_stops_training():
    model = ltf.keras.Sequential([ltf.keras.Input(shape=(1,)), ltf.keras.layers.Dense(1)])
    model.compile(optimizer=ltf.keras.optimizers.SGD(1e30), loss="mse")
    x = np.full((8, 1), 1e20, np.float32)
    hist = model.fit(x, x, batch_size=2, epochs=5, verbose=0, callbacks=[ltf.keras.callbacks.TerminateOnNaN()])
    assert len(hist.history["loss"]) == 1


def test_model_save_and_load_model_round_trip_and_keep_training(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 3)).astype(np.float32)
    y = rng.integers(0, 2, 16)
    inp = ltf.keras.Input(shape=(3,))
    out = ltf.keras.layers.Dense(2, activation="softmax")(ltf.keras.layers.Dense(4, activation="relu")(inp))
    for model in (ltf.keras.Sequential([ltf.keras.Input(shape=(3,)), ltf.keras.layers.Dense(2)]),
                  ltf.keras.Model(inputs=inp, outputs=out)):
        model.compile(optimizer="adam", loss=ltf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.fit(x, y, epochs=1, verbose=0)
        model.save(tmp_path / "m.keras")
        loaded = ltf.keras.models.load_model(tmp_path / "m.keras")
        np.testing.assert_allclose(loaded.predict(x, verbose=0), model.predict(x, verbose=0))
        a = model.fit(x, y, epochs=1, verbose=0, shuffle=False).history["loss"]
        b = loaded.fit(x, y, epochs=1, verbose=0, shuffle=False).history["loss"]
        np.testing.assert_allclose(b, a, rtol=1e-6)  # The optimizer state was saved too.
    lam = ltf.keras.Sequential([ltf.keras.Input(shape=(3,)), ltf.keras.layers.Lambda(lambda t: t * 2)])
    with pytest.raises(LoomValueError, match="cannot be saved whole"):
        lam.save(tmp_path / "lam.keras")


def test_deepcopy_of_variables_and_models_and_clone_model():
    import copy
    v = ltf.Variable([1.0, 2.0], name="v")
    w = copy.deepcopy(v)
    w.assign([5.0, 5.0])
    assert v.numpy().tolist() == [1.0, 2.0] and w.name == "v:0" and w.trainable and isinstance(w, ltf.Variable)
    model = ltf.keras.Sequential([ltf.keras.Input(shape=(3,)), ltf.keras.layers.Dense(4),
                                  ltf.keras.layers.BatchNormalization(), ltf.keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    model.fit(np.ones((4, 3), np.float32), np.ones((4, 1), np.float32), verbose=0)
    x = np.random.default_rng(0).random((2, 3)).astype(np.float32)
    twin = copy.deepcopy(model)  # A target network, as RL programs make one.
    np.testing.assert_allclose(twin(x).numpy(), model(x).numpy())
    clone = ltf.keras.models.clone_model(model)
    fresh = [not np.allclose(a, b) for a, b in zip(model.get_weights(), clone.get_weights())]
    assert fresh[0] and fresh[6]  # Kernels are drawn afresh; zeros/ones initialised weights match by value.
    clone.set_weights(model.get_weights())
    np.testing.assert_allclose(clone(x).numpy(), model(x).numpy())
