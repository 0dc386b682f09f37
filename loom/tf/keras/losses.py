"""`keras.losses`: cross-entropies, MSE, MAE, Huber, hinges, log-cosh, Poisson, MSLE, MAPE and cosine similarity
with Keras's clipping and mean-over-batch reduction."""
from __future__ import annotations

import loom
import loom.nn.functional as F
from loom.errors import LoomValueError
from loom.tensor import Tensor as _Tensor
from loom.tf._core import convert_to_tensor

EPSILON = 1e-7  # keras.backend.epsilon()


def _pair(y_true, y_pred):
    """Tensors of the same rank: a target one rank short gets a trailing axis (as Keras does)."""
    yp = convert_to_tensor(y_pred)
    yt = convert_to_tensor(y_true)
    if yt.ndim == yp.ndim - 1:
        yt = yt.unsqueeze(-1)
    elif yp.ndim == yt.ndim - 1:
        yp = yp.unsqueeze(-1)
    return yt.to(yp.dtype) if yt.dtype is not yp.dtype else yt, yp


def mean_squared_error(y_true, y_pred):
    """Per-example mean of (y_true - y_pred) ** 2 over the last axis."""
    yt, yp = _pair(y_true, y_pred)
    return ((yt - yp) ** 2).mean(-1)


def mean_absolute_error(y_true, y_pred):
    """Per-example mean of |y_true - y_pred| over the last axis."""
    yt, yp = _pair(y_true, y_pred)
    return loom.abs(yt - yp).mean(-1)


def huber(y_true, y_pred, delta=1.0):
    """Per-example Huber loss: quadratic within `delta`, linear outside."""
    yt, yp = _pair(y_true, y_pred)
    err = loom.abs(yp - yt)
    quad = loom.minimum(err, loom.full((), float(delta), dtype=err.dtype))
    return (0.5 * quad * quad + delta * (err - quad)).mean(-1)


def sparse_categorical_crossentropy(y_true, y_pred, from_logits=False, axis=-1, ignore_class=None):
    """Per-example cross-entropy of integer labels against probabilities (or logits)."""
    yp = convert_to_tensor(y_pred)
    yt = convert_to_tensor(y_true)
    if yt.ndim == yp.ndim and yt.shape[-1] == 1:
        yt = yt.squeeze(-1)
    if not from_logits:
        yp = loom.log(loom.clamp(yp, EPSILON, 1 - EPSILON))
    lp = F.log_softmax(yp, dim=axis)
    return -loom.take_along_dim(lp, yt.to(loom.int64).unsqueeze(-1), dim=-1).squeeze(-1)


def categorical_crossentropy(y_true, y_pred, from_logits=False, label_smoothing=0.0, axis=-1):
    """Per-example cross-entropy of one-hot (or soft) targets against probabilities (or logits)."""
    yp = convert_to_tensor(y_pred)
    yt = convert_to_tensor(y_true).to(yp.dtype)
    if label_smoothing:
        n = yp.shape[axis]
        yt = yt * (1.0 - label_smoothing) + label_smoothing / n
    if from_logits:
        return -(yt * F.log_softmax(yp, dim=axis)).sum(axis)
    p = yp / yp.sum(axis, keepdim=True)
    p = loom.clamp(p, EPSILON, 1 - EPSILON)
    return -(yt * loom.log(p)).sum(axis)


def binary_crossentropy(y_true, y_pred, from_logits=False, label_smoothing=0.0, axis=-1):
    """Per-example mean binary cross-entropy over the last axis."""
    yt, yp = _pair(y_true, y_pred)
    if label_smoothing:
        yt = yt * (1.0 - label_smoothing) + 0.5 * label_smoothing
    if from_logits:
        e = loom.relu(yp) - yp * yt + loom.log1p(loom.exp(-loom.abs(yp)))
    else:
        p = loom.clamp(yp, EPSILON, 1 - EPSILON)
        e = -(yt * loom.log(p) + (1 - yt) * loom.log(1 - p))
    return e.mean(axis)


def binary_focal_crossentropy(y_true, y_pred, apply_class_balancing=False, alpha=0.25, gamma=2.0,
                              from_logits=False, label_smoothing=0.0, axis=-1):
    """Per-example mean of (1 - p_t) ** gamma times the binary cross-entropy (optionally alpha-balanced)."""
    yt, yp = _pair(y_true, y_pred)
    if label_smoothing:
        yt = yt * (1.0 - label_smoothing) + 0.5 * label_smoothing
    if from_logits:
        yp = loom.sigmoid(yp)
    p = loom.clamp(yp, EPSILON, 1 - EPSILON)
    bce = -(yt * loom.log(p) + (1 - yt) * loom.log(1 - p))
    p_t = yt * yp + (1 - yt) * (1 - yp)
    out = (1.0 - p_t) ** gamma * bce
    if apply_class_balancing:
        out = (yt * alpha + (1 - yt) * (1 - alpha)) * out
    return out.mean(axis)


def kl_divergence(y_true, y_pred):
    """Per-example sum of y_true * log(y_true / y_pred) (both clipped to [eps, 1])."""
    yt, yp = _pair(y_true, y_pred)
    yt = loom.clamp(yt, EPSILON, 1.0)
    yp = loom.clamp(yp, EPSILON, 1.0)
    return (yt * loom.log(yt / yp)).sum(-1)


mse = MSE = mean_squared_error
mae = MAE = mean_absolute_error
kld = kl_divergence


class Loss:
    """A loss object: per-example losses reduced by mean over the batch ('sum_over_batch_size')."""

    def __init__(self, reduction="sum_over_batch_size", name=None) -> None:
        if reduction not in ("sum_over_batch_size", "sum", "none", None, "mean"):
            raise LoomValueError(f"loom.tf.keras.losses: unknown reduction {reduction!r}")
        self.reduction = reduction
        self.name = name or type(self).__name__

    def call(self, y_true, y_pred) -> _Tensor:
        raise NotImplementedError

    def __call__(self, y_true, y_pred, sample_weight=None) -> _Tensor:
        per = self.call(y_true, y_pred)
        if sample_weight is not None:
            w = convert_to_tensor(sample_weight).to(per.dtype)
            while w.ndim > per.ndim:
                w = w.squeeze(-1)
            per = per * w
        if self.reduction in ("none", None):
            return per
        if self.reduction == "sum":
            return per.sum()
        return per.sum() / max(per.numel(), 1)


class LossFunctionWrapper(Loss):
    """A loss object around a per-example loss function."""

    def __init__(self, fn, reduction="sum_over_batch_size", name=None, **kwargs) -> None:
        super().__init__(reduction, name or getattr(fn, "__name__", "loss"))
        self.fn, self.kwargs = fn, kwargs

    def call(self, y_true, y_pred):
        return self.fn(y_true, y_pred, **self.kwargs)


class SparseCategoricalCrossentropy(LossFunctionWrapper):
    """Cross-entropy of integer labels; `from_logits=True` when the model outputs logits."""

    def __init__(self, from_logits=False, ignore_class=None, reduction="sum_over_batch_size",
                 name="sparse_categorical_crossentropy", **kwargs) -> None:
        super().__init__(sparse_categorical_crossentropy, reduction, name, from_logits=from_logits)


class CategoricalCrossentropy(LossFunctionWrapper):
    """Cross-entropy of one-hot targets."""

    def __init__(self, from_logits=False, label_smoothing=0.0, axis=-1, reduction="sum_over_batch_size",
                 name="categorical_crossentropy", **kwargs) -> None:
        super().__init__(categorical_crossentropy, reduction, name, from_logits=from_logits,
                         label_smoothing=label_smoothing, axis=axis)


class BinaryCrossentropy(LossFunctionWrapper):
    """Binary cross-entropy of 0/1 targets."""

    def __init__(self, from_logits=False, label_smoothing=0.0, axis=-1, reduction="sum_over_batch_size",
                 name="binary_crossentropy", **kwargs) -> None:
        super().__init__(binary_crossentropy, reduction, name, from_logits=from_logits,
                         label_smoothing=label_smoothing, axis=axis)


class BinaryFocalCrossentropy(LossFunctionWrapper):
    """Binary cross-entropy down-weighting easy examples by (1 - p_t) ** gamma (Lin et al.)."""

    def __init__(self, apply_class_balancing=False, alpha=0.25, gamma=2.0, from_logits=False, label_smoothing=0.0,
                 axis=-1, reduction="sum_over_batch_size", name="binary_focal_crossentropy", **kwargs) -> None:
        super().__init__(binary_focal_crossentropy, reduction, name, apply_class_balancing=apply_class_balancing,
                         alpha=alpha, gamma=gamma, from_logits=from_logits, label_smoothing=label_smoothing,
                         axis=axis)


class MeanSquaredError(LossFunctionWrapper):
    """Mean of squared errors."""

    def __init__(self, reduction="sum_over_batch_size", name="mean_squared_error", **kwargs) -> None:
        super().__init__(mean_squared_error, reduction, name)


class MeanAbsoluteError(LossFunctionWrapper):
    """Mean of absolute errors."""

    def __init__(self, reduction="sum_over_batch_size", name="mean_absolute_error", **kwargs) -> None:
        super().__init__(mean_absolute_error, reduction, name)


class Huber(LossFunctionWrapper):
    """Huber loss with threshold `delta` (1.0)."""

    def __init__(self, delta=1.0, reduction="sum_over_batch_size", name="huber_loss", **kwargs) -> None:
        super().__init__(huber, reduction, name, delta=delta)


class KLDivergence(LossFunctionWrapper):
    """Kullback-Leibler divergence."""

    def __init__(self, reduction="sum_over_batch_size", name="kl_divergence", **kwargs) -> None:
        super().__init__(kl_divergence, reduction, name)


def hinge(y_true, y_pred):
    """Per-example mean of max(1 - y_true * y_pred, 0); 0/1 labels become -1/1."""
    yt, yp = _pair(y_true, y_pred)
    yt = loom.where((yt == 0) | (yt == 1), 2.0 * yt - 1.0, yt)
    return loom.clamp(1.0 - yt * yp, min=0.0).mean(-1)


def squared_hinge(y_true, y_pred):
    """Per-example mean of max(1 - y_true * y_pred, 0) ** 2; 0/1 labels become -1/1."""
    yt, yp = _pair(y_true, y_pred)
    yt = loom.where((yt == 0) | (yt == 1), 2.0 * yt - 1.0, yt)
    return (loom.clamp(1.0 - yt * yp, min=0.0) ** 2).mean(-1)


def categorical_hinge(y_true, y_pred):
    """Per-example max(neg - pos + 1, 0) with pos the true class's score and neg the best other one."""
    yt, yp = _pair(y_true, y_pred)
    pos = (yt * yp).sum(-1)
    neg = ((1.0 - yt) * yp).amax(-1)
    return loom.clamp(neg - pos + 1.0, min=0.0)


def log_cosh(y_true, y_pred):
    """Per-example mean of log(cosh(y_pred - y_true)), computed stably."""
    yt, yp = _pair(y_true, y_pred)
    x = yp - yt
    return (x + F.softplus(-2.0 * x) - 0.6931471805599453).mean(-1)


def poisson(y_true, y_pred):
    """Per-example mean of y_pred - y_true * log(y_pred + epsilon)."""
    yt, yp = _pair(y_true, y_pred)
    return (yp - yt * loom.log(yp + EPSILON)).mean(-1)


def mean_squared_logarithmic_error(y_true, y_pred):
    """Per-example mean of (log(1 + y_true) - log(1 + y_pred)) ** 2 (inputs clipped at epsilon)."""
    yt, yp = _pair(y_true, y_pred)
    a = loom.log(loom.clamp(yp, min=EPSILON) + 1.0)
    b = loom.log(loom.clamp(yt, min=EPSILON) + 1.0)
    return ((a - b) ** 2).mean(-1)


def mean_absolute_percentage_error(y_true, y_pred):
    """Per-example 100 * mean of |y_true - y_pred| / max(|y_true|, epsilon)."""
    yt, yp = _pair(y_true, y_pred)
    return 100.0 * (loom.abs(yt - yp) / loom.clamp(loom.abs(yt), min=EPSILON)).mean(-1)


def cosine_similarity(y_true, y_pred, axis=-1):
    """Per-example negative cosine similarity of y_true and y_pred along `axis` (-1 is best)."""
    yt, yp = _pair(y_true, y_pred)
    return -(F.normalize(yt, dim=axis, eps=1e-12) * F.normalize(yp, dim=axis, eps=1e-12)).sum(axis)


logcosh = log_cosh
msle = mean_squared_logarithmic_error
mape = mean_absolute_percentage_error


class Hinge(LossFunctionWrapper):
    """Hinge loss of -1/1 (or 0/1) labels."""

    def __init__(self, reduction="sum_over_batch_size", name="hinge", **kwargs) -> None:
        super().__init__(hinge, reduction, name)


class SquaredHinge(LossFunctionWrapper):
    """Squared hinge loss of -1/1 (or 0/1) labels."""

    def __init__(self, reduction="sum_over_batch_size", name="squared_hinge", **kwargs) -> None:
        super().__init__(squared_hinge, reduction, name)


class CategoricalHinge(LossFunctionWrapper):
    """Hinge loss of one-hot targets."""

    def __init__(self, reduction="sum_over_batch_size", name="categorical_hinge", **kwargs) -> None:
        super().__init__(categorical_hinge, reduction, name)


class LogCosh(LossFunctionWrapper):
    """log(cosh(error))."""

    def __init__(self, reduction="sum_over_batch_size", name="log_cosh", **kwargs) -> None:
        super().__init__(log_cosh, reduction, name)


class Poisson(LossFunctionWrapper):
    """Poisson negative log-likelihood (without the constant)."""

    def __init__(self, reduction="sum_over_batch_size", name="poisson", **kwargs) -> None:
        super().__init__(poisson, reduction, name)


class MeanSquaredLogarithmicError(LossFunctionWrapper):
    """Mean squared error of log(1 + x)."""

    def __init__(self, reduction="sum_over_batch_size", name="mean_squared_logarithmic_error", **kwargs) -> None:
        super().__init__(mean_squared_logarithmic_error, reduction, name)


class MeanAbsolutePercentageError(LossFunctionWrapper):
    """Mean absolute error in percent of the target."""

    def __init__(self, reduction="sum_over_batch_size", name="mean_absolute_percentage_error", **kwargs) -> None:
        super().__init__(mean_absolute_percentage_error, reduction, name)


class CosineSimilarity(LossFunctionWrapper):
    """Negative cosine similarity along `axis`."""

    def __init__(self, axis=-1, reduction="sum_over_batch_size", name="cosine_similarity", **kwargs) -> None:
        super().__init__(cosine_similarity, reduction, name, axis=axis)


_NAMES = {
    "sparse_categorical_crossentropy": SparseCategoricalCrossentropy,
    "categorical_crossentropy": CategoricalCrossentropy, "binary_crossentropy": BinaryCrossentropy,
    "mse": MeanSquaredError, "mean_squared_error": MeanSquaredError, "mae": MeanAbsoluteError,
    "mean_absolute_error": MeanAbsoluteError, "huber": Huber, "huber_loss": Huber, "kld": KLDivergence,
    "kl_divergence": KLDivergence, "hinge": Hinge, "squared_hinge": SquaredHinge,
    "categorical_hinge": CategoricalHinge, "log_cosh": LogCosh, "logcosh": LogCosh, "poisson": Poisson,
    "msle": MeanSquaredLogarithmicError, "mean_squared_logarithmic_error": MeanSquaredLogarithmicError,
    "mape": MeanAbsolutePercentageError, "mean_absolute_percentage_error": MeanAbsolutePercentageError,
    "cosine_similarity": CosineSimilarity, "binary_focal_crossentropy": BinaryFocalCrossentropy,
}


def get(identifier):
    """A loss object from a name, a Loss, a class or a per-example function."""
    if identifier is None:
        return None
    if isinstance(identifier, str):
        key = identifier.lower()
        if key not in _NAMES:
            raise LoomValueError(f"loom.tf.keras.losses.get: unknown loss {identifier!r}; known: {sorted(_NAMES)}")
        return _NAMES[key]()
    if isinstance(identifier, type):
        return identifier()
    if isinstance(identifier, Loss):
        return identifier
    if callable(identifier):
        return LossFunctionWrapper(identifier)
    raise LoomValueError(f"loom.tf.keras.losses.get: cannot use {identifier!r} as a loss")


from loom.tf._unsupported import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr("loom.tf.keras.losses", "tf.keras.losses")
