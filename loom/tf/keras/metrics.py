"""`keras.metrics`: stateful metrics (update_state / result / reset_state) accumulated in NumPy."""
from __future__ import annotations

import numpy as np

import loom
from loom.errors import LoomValueError
from loom.tensor import Tensor as _Tensor
from loom.tf.keras import losses as _losses


def _np(x) -> np.ndarray:
    return x.numpy() if isinstance(x, _Tensor) else np.asarray(x)


class Metric:
    """Base of metrics: `update_state(...)` accumulates, `result()` reads, `reset_state()` clears."""

    def __init__(self, name=None, dtype=None) -> None:
        self.name = name or _default_name(type(self).__name__)
        self.reset_state()

    def reset_state(self) -> None:
        self.total, self.count = 0.0, 0.0

    reset_states = reset_state

    def update_state(self, *args, **kwargs) -> None:
        raise NotImplementedError

    def result(self) -> _Tensor:
        return loom.tensor(np.float32(self.total / self.count if self.count else 0.0))

    def __call__(self, *args, **kwargs) -> _Tensor:
        self.update_state(*args, **kwargs)
        return self.result()


def _default_name(cls: str) -> str:
    from loom.tf.keras.engine import _snake
    return _snake(cls)


class Mean(Metric):
    """The (weighted) mean of the values given to `update_state`."""

    def update_state(self, values, sample_weight=None) -> None:
        v = _np(values).astype(np.float64)
        if sample_weight is None:
            self.total += float(v.sum())
            self.count += float(v.size)
        else:
            w = np.broadcast_to(_np(sample_weight).astype(np.float64), v.shape) if v.ndim else \
                _np(sample_weight).astype(np.float64)
            self.total += float((v * w).sum())
            self.count += float(np.sum(w))


class Sum(Metric):
    """The running sum of the values."""

    def update_state(self, values, sample_weight=None) -> None:
        self.total += float(_np(values).sum())
        self.count = 1.0


class MeanMetricWrapper(Mean):
    """The mean over examples of a per-example function fn(y_true, y_pred)."""

    def __init__(self, fn, name=None, dtype=None, **kwargs) -> None:
        self.fn, self.kwargs = fn, kwargs
        super().__init__(name or getattr(fn, "__name__", "metric"))

    def update_state(self, y_true, y_pred, sample_weight=None) -> None:
        super().update_state(self.fn(y_true, y_pred, **self.kwargs), sample_weight)


def accuracy(y_true, y_pred):
    """1.0 where y_true equals y_pred, else 0.0."""
    yt, yp = _np(y_true), _np(y_pred)
    if yt.ndim == yp.ndim - 1:
        yt = yt[..., None]
    return loom.tensor((yt == yp).astype(np.float32))


def sparse_categorical_accuracy(y_true, y_pred):
    """1.0 where the integer label is the argmax of the prediction."""
    yt, yp = _np(y_true), _np(y_pred)
    if yt.ndim == yp.ndim and yt.shape[-1] == 1:
        yt = yt[..., 0]
    return loom.tensor((np.argmax(yp, -1) == yt.astype(np.int64)).astype(np.float32))


def categorical_accuracy(y_true, y_pred):
    """1.0 where the argmax of the one-hot target equals the argmax of the prediction."""
    return loom.tensor((np.argmax(_np(y_pred), -1) == np.argmax(_np(y_true), -1)).astype(np.float32))


def binary_accuracy(y_true, y_pred, threshold=0.5):
    """Per-example mean of (prediction > threshold) == target."""
    yt, yp = _np(y_true), _np(y_pred)
    if yt.ndim == yp.ndim - 1:
        yt = yt[..., None]
    return loom.tensor(((yp > threshold).astype(np.float32) == yt).astype(np.float32).mean(-1))


def top_k_categorical_accuracy(y_true, y_pred, k=5):
    """1.0 where the target class is among the k largest predictions."""
    yp = _np(y_pred)
    target = np.argmax(_np(y_true), -1)
    score = np.take_along_axis(yp, target[..., None], -1)
    return loom.tensor(((yp > score).sum(-1) < k).astype(np.float32))


class Accuracy(MeanMetricWrapper):
    """How often predictions equal labels exactly."""

    def __init__(self, name="accuracy", dtype=None) -> None:
        super().__init__(accuracy, name)


class SparseCategoricalAccuracy(MeanMetricWrapper):
    """How often the argmax prediction equals the integer label."""

    def __init__(self, name="sparse_categorical_accuracy", dtype=None) -> None:
        super().__init__(sparse_categorical_accuracy, name)


class CategoricalAccuracy(MeanMetricWrapper):
    """How often the argmax prediction equals the argmax of the one-hot label."""

    def __init__(self, name="categorical_accuracy", dtype=None) -> None:
        super().__init__(categorical_accuracy, name)


class BinaryAccuracy(MeanMetricWrapper):
    """How often thresholded predictions equal binary labels."""

    def __init__(self, name="binary_accuracy", dtype=None, threshold=0.5) -> None:
        super().__init__(binary_accuracy, name, threshold=threshold)


class TopKCategoricalAccuracy(MeanMetricWrapper):
    """How often the target is among the top k predictions."""

    def __init__(self, k=5, name="top_k_categorical_accuracy", dtype=None) -> None:
        super().__init__(top_k_categorical_accuracy, name, k=k)


def sparse_top_k_categorical_accuracy(y_true, y_pred, k=5):
    """1.0 where the integer label is among the k largest predictions."""
    yp = _np(y_pred)
    target = _np(y_true).astype(np.int64).reshape(yp.shape[:-1])
    score = np.take_along_axis(yp, target[..., None], -1)
    return loom.tensor(((yp > score).sum(-1) < k).astype(np.float32))


class SparseTopKCategoricalAccuracy(MeanMetricWrapper):
    """How often the integer label is among the top k predictions."""

    def __init__(self, k=5, name="sparse_top_k_categorical_accuracy", dtype=None) -> None:
        super().__init__(sparse_top_k_categorical_accuracy, name, k=k)


class SparseCategoricalCrossentropy(MeanMetricWrapper):
    """Mean cross-entropy of integer labels against predicted probabilities (or logits)."""

    def __init__(self, name="sparse_categorical_crossentropy", dtype=None, from_logits=False, axis=-1) -> None:
        super().__init__(_losses.sparse_categorical_crossentropy, name, from_logits=from_logits, axis=axis)


class CategoricalCrossentropy(MeanMetricWrapper):
    """Mean cross-entropy of one-hot labels against predicted probabilities (or logits)."""

    def __init__(self, name="categorical_crossentropy", dtype=None, from_logits=False, label_smoothing=0,
                 axis=-1) -> None:
        super().__init__(_losses.categorical_crossentropy, name, from_logits=from_logits,
                         label_smoothing=label_smoothing, axis=axis)


class BinaryCrossentropy(MeanMetricWrapper):
    """Mean binary cross-entropy."""

    def __init__(self, name="binary_crossentropy", dtype=None, from_logits=False, label_smoothing=0) -> None:
        super().__init__(_losses.binary_crossentropy, name, from_logits=from_logits,
                         label_smoothing=label_smoothing)


class R2Score(Metric):
    """Coefficient of determination 1 - SS_res / SS_tot, per output column then averaged ('uniform_average')."""

    def __init__(self, class_aggregation="uniform_average", num_regressors=0, name="r2_score", dtype=None) -> None:
        if class_aggregation not in ("uniform_average", "variance_weighted_average", None):
            raise LoomValueError(f"loom.tf.keras.metrics.R2Score: unknown class_aggregation {class_aggregation!r}")
        self.class_aggregation, self.num_regressors = class_aggregation, int(num_regressors)
        super().__init__(name)

    def reset_state(self) -> None:
        self._sums = None
        self._n = 0

    def update_state(self, y_true, y_pred, sample_weight=None) -> None:
        yt, yp = _np(y_true).astype(np.float64), _np(y_pred).astype(np.float64)
        yt = yt.reshape(len(yt), -1)
        yp = yp.reshape(len(yp), -1)
        w = np.ones((len(yt), 1)) if sample_weight is None else _np(sample_weight).astype(np.float64).reshape(-1, 1)
        add = np.stack([(w * yt).sum(0), (w * yt * yt).sum(0), (w * (yt - yp) ** 2).sum(0),
                        np.broadcast_to(w.sum(), yt.shape[1:])])
        self._sums = add if self._sums is None else self._sums + add
        self._n += yt.size  # Keras counts every element as a sample for the adjustment.

    def result(self) -> _Tensor:
        if self._sums is None:
            return loom.tensor(np.float32(0.0))
        s, ss, res, n = self._sums
        tot = ss - s * s / n
        r2 = np.where(tot == 0, 0.0, 1 - res / np.where(tot == 0, 1, tot))
        if self.class_aggregation == "uniform_average":
            r2 = r2.mean()
        elif self.class_aggregation == "variance_weighted_average":
            r2 = (r2 * tot).sum() / tot.sum()
        if self.num_regressors:
            r2 = 1 - (1 - r2) * (self._n - 1) / (self._n - self.num_regressors - 1)
        return loom.tensor(np.asarray(r2, np.float32))


class FBetaScore(Metric):
    """F-beta score per class from thresholded (or argmax, if threshold is None) predictions, aggregated by
    `average` (None, 'micro', 'macro' or 'weighted')."""

    def __init__(self, average=None, beta=1.0, threshold=None, name="fbeta_score", dtype=None) -> None:
        if average not in (None, "micro", "macro", "weighted"):
            raise LoomValueError(f"loom.tf.keras.metrics.{type(self).__name__}: average must be None, 'micro', "
                                 f"'macro' or 'weighted', got {average!r}")
        self.average, self.beta, self.threshold = average, float(beta), threshold
        super().__init__(name)

    def reset_state(self) -> None:
        self._tp = self._fp = self._fn = self._support = None

    def update_state(self, y_true, y_pred, sample_weight=None) -> None:
        yt, yp = _np(y_true).astype(np.float64), _np(y_pred).astype(np.float64)
        if self.threshold is None:
            pred = (yp == yp.max(-1, keepdims=True)).astype(np.float64)
        else:
            pred = (yp > self.threshold).astype(np.float64)
        w = 1.0 if sample_weight is None else _np(sample_weight).astype(np.float64).reshape(-1, 1)
        tp, fp, fn = (w * pred * yt).sum(0), (w * pred * (1 - yt)).sum(0), (w * (1 - pred) * yt).sum(0)
        sup = (w * yt).sum(0)
        if self._tp is None:
            self._tp, self._fp, self._fn, self._support = tp, fp, fn, sup
        else:
            self._tp, self._fp, self._fn = self._tp + tp, self._fp + fp, self._fn + fn
            self._support = self._support + sup

    def result(self) -> _Tensor:
        if self._tp is None:
            return loom.tensor(np.float32(0.0))
        tp, fp, fn = self._tp, self._fp, self._fn
        if self.average == "micro":
            tp, fp, fn = tp.sum(), fp.sum(), fn.sum()
        b2 = self.beta ** 2
        with np.errstate(divide="ignore", invalid="ignore"):
            prec = np.where(tp + fp > 0, tp / (tp + fp), 0.0)
            rec = np.where(tp + fn > 0, tp / (tp + fn), 0.0)
            f = np.where(b2 * prec + rec > 0, (1 + b2) * prec * rec / (b2 * prec + rec), 0.0)
        if self.average == "macro":
            f = f.mean()
        elif self.average == "weighted":
            f = (f * self._support).sum() / self._support.sum()
        return loom.tensor(np.asarray(f, np.float32))


class F1Score(FBetaScore):
    """F1 score (F-beta with beta 1)."""

    def __init__(self, average=None, threshold=None, name="f1_score", dtype=None) -> None:
        super().__init__(average, 1.0, threshold, name)


class MeanSquaredError(MeanMetricWrapper):
    """Mean squared error."""

    def __init__(self, name="mean_squared_error", dtype=None) -> None:
        super().__init__(_losses.mean_squared_error, name)


class MeanAbsoluteError(MeanMetricWrapper):
    """Mean absolute error."""

    def __init__(self, name="mean_absolute_error", dtype=None) -> None:
        super().__init__(_losses.mean_absolute_error, name)


class RootMeanSquaredError(MeanSquaredError):
    """sqrt of the mean squared error."""

    def __init__(self, name="root_mean_squared_error", dtype=None) -> None:
        super().__init__(name)

    def result(self) -> _Tensor:
        return loom.tensor(np.float32(np.sqrt(self.total / self.count if self.count else 0.0)))


class AUC(Metric):
    """Area under the ROC curve from `num_thresholds` thresholds (Keras's interpolation-free trapezoid)."""

    def __init__(self, num_thresholds=200, curve="ROC", name="auc", dtype=None, from_logits=False) -> None:
        self.num_thresholds, self.curve, self.from_logits = int(num_thresholds), curve.upper(), from_logits
        eps = 1e-7
        inner = [(i + 1) * 1.0 / (self.num_thresholds - 1) for i in range(self.num_thresholds - 2)]
        self.thresholds = np.array([0.0 - eps] + inner + [1.0 + eps])
        super().__init__(name)

    def reset_state(self) -> None:
        n = self.num_thresholds
        self.tp, self.fp, self.tn, self.fn = (np.zeros(n) for _ in range(4))

    def update_state(self, y_true, y_pred, sample_weight=None) -> None:
        yt = _np(y_true).reshape(-1).astype(bool)
        yp = _np(y_pred).reshape(-1).astype(np.float64)
        if self.from_logits:
            yp = 1 / (1 + np.exp(-yp))
        w = np.ones_like(yp) if sample_weight is None else np.broadcast_to(_np(sample_weight), yp.shape).reshape(-1)
        above = yp[None, :] > self.thresholds[:, None]
        self.tp += (above & yt).astype(float) @ w
        self.fp += (above & ~yt).astype(float) @ w
        self.fn += (~above & yt).astype(float) @ w
        self.tn += (~above & ~yt).astype(float) @ w

    def _interpolated_pr_auc(self) -> float:
        return _pr_auc(self.tp, self.fp, self.fn)

    def result(self) -> _Tensor:
        tpr = self.tp / np.maximum(self.tp + self.fn, 1e-12)
        fpr = self.fp / np.maximum(self.fp + self.tn, 1e-12)
        if self.curve == "PR":
            return loom.tensor(np.float32(self._interpolated_pr_auc()))
        else:
            x, y = fpr, tpr
        area = np.sum((x[:-1] - x[1:]) * (y[:-1] + y[1:]) / 2)
        return loom.tensor(np.float32(area))


def _ratio(a, b):
    """a / b, 0 where b is 0 (divide_no_nan)."""
    out = np.zeros_like(a, dtype=np.float64)
    np.divide(a, b, out=out, where=b != 0)
    return out


def _pr_auc(tp, fp, fn) -> float:
    """Keras's PR-AUC: precision interpolated linearly in the number of positives between thresholds
    (Davis & Goadrich), as `AUC(curve="PR")` computes with summation_method="interpolation"."""
    dtp = tp[:-1] - tp[1:]
    p = tp + fp
    dp = p[:-1] - p[1:]
    slope = _ratio(dtp, np.maximum(dp, 0))
    intercept = tp[1:] - slope * p[1:]
    both = (p[:-1] > 0) & (p[1:] > 0)
    safe = np.where(both, _ratio(p[:-1], np.maximum(p[1:], 0)), 1.0)
    inc = _ratio(slope * (dtp + intercept * np.log(safe)), np.maximum(tp[1:] + fn[1:], 0))
    return float(np.sum(inc))


class _Confusion(Metric):
    """Counts of one confusion-matrix cell per threshold (predictions above the threshold are positive)."""

    def __init__(self, thresholds=None, name=None, dtype=None) -> None:
        t = 0.5 if thresholds is None else thresholds
        self._single = not isinstance(t, (list, tuple, np.ndarray))
        self.thresholds = np.atleast_1d(np.asarray(t, dtype=np.float64))
        super().__init__(name)

    def reset_state(self) -> None:
        self.accumulator = np.zeros(self.thresholds.size)

    def _cells(self, y_true, y_pred, sample_weight):
        yt = _np(y_true).reshape(-1).astype(bool)
        yp = _np(y_pred).reshape(-1).astype(np.float64)
        w = np.ones_like(yp) if sample_weight is None else np.broadcast_to(_np(sample_weight), yp.shape).reshape(-1)
        above = yp[None, :] > self.thresholds[:, None]
        return above, yt, w

    def result(self) -> _Tensor:
        v = self.accumulator.astype(np.float32)
        return loom.tensor(v[0] if self._single else v)


class TruePositives(_Confusion):
    """Weighted count of positives predicted positive."""

    def update_state(self, y_true, y_pred, sample_weight=None) -> None:
        above, yt, w = self._cells(y_true, y_pred, sample_weight)
        self.accumulator += (above & yt).astype(float) @ w


class FalsePositives(_Confusion):
    """Weighted count of negatives predicted positive."""

    def update_state(self, y_true, y_pred, sample_weight=None) -> None:
        above, yt, w = self._cells(y_true, y_pred, sample_weight)
        self.accumulator += (above & ~yt).astype(float) @ w


class TrueNegatives(_Confusion):
    """Weighted count of negatives predicted negative."""

    def update_state(self, y_true, y_pred, sample_weight=None) -> None:
        above, yt, w = self._cells(y_true, y_pred, sample_weight)
        self.accumulator += (~above & ~yt).astype(float) @ w


class FalseNegatives(_Confusion):
    """Weighted count of positives predicted negative."""

    def update_state(self, y_true, y_pred, sample_weight=None) -> None:
        above, yt, w = self._cells(y_true, y_pred, sample_weight)
        self.accumulator += (~above & yt).astype(float) @ w


class Precision(_Confusion):
    """TP / (TP + FP) of binary (or multi-label) predictions above `thresholds` (0.5)."""

    def __init__(self, thresholds=None, top_k=None, class_id=None, name=None, dtype=None) -> None:
        if top_k is not None or class_id is not None:
            raise LoomValueError("loom.tf.keras.metrics.Precision: top_k and class_id are not supported")
        super().__init__(thresholds, name)

    def reset_state(self) -> None:
        self.tp = np.zeros(self.thresholds.size)
        self.fp = np.zeros(self.thresholds.size)

    def update_state(self, y_true, y_pred, sample_weight=None) -> None:
        above, yt, w = self._cells(y_true, y_pred, sample_weight)
        self.tp += (above & yt).astype(float) @ w
        self.fp += (above & ~yt).astype(float) @ w

    def result(self) -> _Tensor:
        d = self.tp + self.fp
        v = np.where(d > 0, self.tp / np.where(d > 0, d, 1), 0.0).astype(np.float32)
        return loom.tensor(v[0] if self._single else v)


class Recall(Precision):
    """TP / (TP + FN) of binary (or multi-label) predictions above `thresholds` (0.5)."""

    def reset_state(self) -> None:
        self.tp = np.zeros(self.thresholds.size)
        self.fn = np.zeros(self.thresholds.size)

    def update_state(self, y_true, y_pred, sample_weight=None) -> None:
        above, yt, w = self._cells(y_true, y_pred, sample_weight)
        self.tp += (above & yt).astype(float) @ w
        self.fn += (~above & yt).astype(float) @ w

    def result(self) -> _Tensor:
        d = self.tp + self.fn
        v = np.where(d > 0, self.tp / np.where(d > 0, d, 1), 0.0).astype(np.float32)
        return loom.tensor(v[0] if self._single else v)


_NAMES = {
    "precision": Precision, "recall": Recall,
    "accuracy": Accuracy, "acc": Accuracy, "sparse_categorical_accuracy": SparseCategoricalAccuracy,
    "categorical_accuracy": CategoricalAccuracy, "binary_accuracy": BinaryAccuracy, "mse": MeanSquaredError,
    "mean_squared_error": MeanSquaredError, "mae": MeanAbsoluteError, "mean_absolute_error": MeanAbsoluteError,
    "auc": AUC, "rmse": RootMeanSquaredError, "root_mean_squared_error": RootMeanSquaredError,
    "top_k_categorical_accuracy": TopKCategoricalAccuracy,
    "sparse_top_k_categorical_accuracy": SparseTopKCategoricalAccuracy,
    "sparse_categorical_crossentropy": SparseCategoricalCrossentropy,
    "categorical_crossentropy": CategoricalCrossentropy, "binary_crossentropy": BinaryCrossentropy,
    "r2_score": R2Score, "f1_score": F1Score,
}


def get(identifier, y_true=None, y_pred=None) -> Metric:
    """A metric object; 'accuracy' picks binary, sparse or categorical accuracy from the shapes, as Keras."""
    if isinstance(identifier, Metric):
        return identifier
    if isinstance(identifier, type):
        return identifier()
    if isinstance(identifier, str):
        key = identifier.lower()
        if key in ("accuracy", "acc") and y_pred is not None:
            yp_shape = tuple(y_pred.shape)
            yt_shape = tuple(y_true.shape)
            if yp_shape[-1] == 1:
                m: Metric = BinaryAccuracy(name=identifier)
            elif len(yt_shape) < len(yp_shape) or yt_shape[-1] == 1:
                m = SparseCategoricalAccuracy(name=identifier)
            else:
                m = CategoricalAccuracy(name=identifier)
            return m
        if key not in _NAMES:
            raise LoomValueError(f"loom.tf.keras.metrics.get: unknown metric {identifier!r}; known: {sorted(_NAMES)}")
        m = _NAMES[key]()
        m.name = identifier
        return m
    if callable(identifier):
        return MeanMetricWrapper(identifier)
    raise LoomValueError(f"loom.tf.keras.metrics.get: cannot use {identifier!r} as a metric")


from loom.tf._unsupported import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr("loom.tf.keras.metrics", "tf.keras.metrics")
