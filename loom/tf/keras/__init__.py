"""`tf.keras` over loom: layers, Sequential/functional/subclassed models, losses, metrics, optimizers, callbacks.

Examples
--------
>>> import loom.tf as tf
>>> model = tf.keras.Sequential([tf.keras.Input(shape=(3,)), tf.keras.layers.Dense(1)])
>>> model.compile(optimizer="sgd", loss="mse")
>>> history = model.fit(tf.ones((4, 3)), tf.zeros((4, 1)), epochs=2, verbose=0)
>>> len(history.history["loss"])
2
"""
from loom.tf.keras import activations, callbacks, initializers, layers, losses, metrics, optimizers  # noqa: F401
from loom.tf.keras.engine import Input, KerasTensor, Layer, clear_session  # noqa: F401
from loom.tf.keras.models import Model, Sequential  # noqa: F401
from loom.tf.keras import backend, datasets, models, utils  # noqa: E402,F401
from loom.tf.keras import regularizers  # noqa: E402,F401
from loom.tf.keras import mixed_precision  # noqa: E402,F401
from loom.tf.keras import constraints  # noqa: E402,F401


from loom.tf._unsupported import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr("loom.tf.keras", "tf.keras")
