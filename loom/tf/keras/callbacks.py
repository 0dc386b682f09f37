"""`keras.callbacks`: History, ModelCheckpoint, EarlyStopping, LearningRateScheduler, ReduceLROnPlateau,
TerminateOnNaN, CSVLogger, LambdaCallback and the progress bar."""
from __future__ import annotations

import sys

import numpy as np

from loom.errors import LoomValueError


class Callback:
    """Base of callbacks: hooks called by `fit`, `evaluate` and `predict`."""

    def __init__(self) -> None:
        self.model = None
        self.params: dict = {}

    def set_model(self, model) -> None:
        self.model = model

    def set_params(self, params) -> None:
        self.params = params

    def on_train_begin(self, logs=None): ...
    def on_train_end(self, logs=None): ...
    def on_epoch_begin(self, epoch, logs=None): ...
    def on_epoch_end(self, epoch, logs=None): ...
    def on_train_batch_begin(self, batch, logs=None): ...
    def on_train_batch_end(self, batch, logs=None): ...
    def on_test_begin(self, logs=None): ...
    def on_test_end(self, logs=None): ...
    def on_test_batch_begin(self, batch, logs=None): ...
    def on_test_batch_end(self, batch, logs=None): ...
    def on_predict_begin(self, logs=None): ...
    def on_predict_end(self, logs=None): ...


class History(Callback):
    """Records every epoch's logs in `history` (name -> list) and the epoch numbers in `epoch`."""

    def __init__(self) -> None:
        super().__init__()
        self.history: dict = {}
        self.epoch: list = []

    def on_train_begin(self, logs=None) -> None:
        self.epoch = []

    def on_epoch_end(self, epoch, logs=None) -> None:
        self.epoch.append(epoch)
        for k, v in (logs or {}).items():
            self.history.setdefault(k, []).append(v)


class TensorBoard(Callback):
    """Per-epoch logs under `log_dir`, as Keras's TensorBoard callback lays them out (`train/`, `validation/`).

    loom writes no TensorBoard event files (that needs TensorFlow's protobuf
    records): each directory gets `scalars.jsonl`, one JSON object per epoch
    (`{"epoch": 0, "loss": ...}`), which pandas or any plotting tool reads.
    The histogram, image and profiling options are accepted and ignored.
    """

    def __init__(self, log_dir="logs", histogram_freq=0, write_graph=True, write_images=False,
                 write_steps_per_second=False, update_freq="epoch", profile_batch=0, embeddings_freq=0,
                 embeddings_metadata=None) -> None:
        super().__init__()
        self.log_dir = str(log_dir)

    def _write(self, sub: str, record: dict) -> None:
        import json
        import os
        d = os.path.join(self.log_dir, sub)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "scalars.jsonl"), "a") as f:
            f.write(json.dumps(record) + "\n")

    def on_epoch_end(self, epoch, logs=None) -> None:
        logs = {k: float(v) for k, v in (logs or {}).items()}
        train = {k: v for k, v in logs.items() if not k.startswith("val_")}
        val = {k[4:]: v for k, v in logs.items() if k.startswith("val_")}
        self._write("train", {"epoch": int(epoch), **train})
        if val:
            self._write("validation", {"epoch": int(epoch), **val})


class LambdaCallback(Callback):
    """A callback from functions: on_epoch_begin/end(epoch, logs), on_batch_begin/end(batch, logs), ..."""

    def __init__(self, on_epoch_begin=None, on_epoch_end=None, on_batch_begin=None, on_batch_end=None,
                 on_train_begin=None, on_train_end=None, **kwargs) -> None:
        super().__init__()
        if on_epoch_begin is not None:
            self.on_epoch_begin = on_epoch_begin
        if on_epoch_end is not None:
            self.on_epoch_end = on_epoch_end
        if on_batch_begin is not None:
            self.on_train_batch_begin = on_batch_begin
        if on_batch_end is not None:
            self.on_train_batch_end = on_batch_end
        if on_train_begin is not None:
            self.on_train_begin = on_train_begin
        if on_train_end is not None:
            self.on_train_end = on_train_end
        for k, fn in kwargs.items():
            setattr(self, k, fn)


def _monitor_op(mode: str, monitor: str):
    if mode not in ("auto", "min", "max"):
        raise LoomValueError(f"loom.tf.keras.callbacks: mode must be 'auto', 'min' or 'max', got {mode!r}")
    if mode == "max" or (mode == "auto" and ("acc" in monitor or monitor.startswith("fmeasure")
                                             or "auc" in monitor)):
        return np.greater, -np.inf
    return np.less, np.inf


class EarlyStopping(Callback):
    """Stop training when `monitor` has not improved by `min_delta` for `patience` epochs."""

    def __init__(self, monitor="val_loss", min_delta=0, patience=0, verbose=0, mode="auto", baseline=None,
                 restore_best_weights=False, start_from_epoch=0) -> None:
        super().__init__()
        self.monitor, self.patience, self.verbose = monitor, int(patience), verbose
        self.baseline, self.restore_best_weights = baseline, restore_best_weights
        self.start_from_epoch = start_from_epoch
        self.op, _ = _monitor_op(mode, monitor)
        self.min_delta = abs(min_delta) if self.op is np.greater else -abs(min_delta)
        self.stopped_epoch = 0

    def on_train_begin(self, logs=None) -> None:
        self.wait = 0
        self.stopped_epoch = 0
        self.best = None
        self.best_weights = None
        self.best_epoch = 0

    def on_epoch_end(self, epoch, logs=None) -> None:
        current = (logs or {}).get(self.monitor)
        if current is None or epoch < self.start_from_epoch:
            return
        if self.restore_best_weights and self.best_weights is None:
            self.best_weights = self.model.get_weights()
        self.wait += 1
        if self.best is None or self.op(current - self.min_delta, self.best):
            self.best, self.best_epoch = current, epoch
            if self.restore_best_weights:
                self.best_weights = self.model.get_weights()
            if self.baseline is None or self.op(current - self.min_delta, self.baseline):
                self.wait = 0
            return
        if self.wait >= self.patience and epoch > 0:
            self.stopped_epoch = epoch
            self.model.stop_training = True
            if self.restore_best_weights and self.best_weights is not None:
                self.model.set_weights(self.best_weights)
            if self.verbose:
                print(f"Epoch {epoch + 1}: early stopping")


class LearningRateScheduler(Callback):
    """Set the optimizer's learning rate at each epoch's start to ``schedule(epoch, lr)`` (or ``schedule(epoch)``)."""

    def __init__(self, schedule, verbose=0) -> None:
        super().__init__()
        self.schedule, self.verbose = schedule, verbose

    def on_epoch_begin(self, epoch, logs=None) -> None:
        opt = self.model.optimizer
        try:
            lr = self.schedule(epoch, float(opt.learning_rate))
        except TypeError:  # A schedule of the epoch alone.
            lr = self.schedule(epoch)
        if hasattr(lr, "numpy"):
            lr = lr.numpy()
        if not isinstance(lr, (float, int, np.floating, np.integer)) and np.ndim(lr) != 0:
            raise LoomValueError(f"loom.tf.keras.callbacks.LearningRateScheduler: the schedule must return a float, "
                                 f"got {lr!r}")
        opt.learning_rate = float(lr)
        if self.verbose:
            print(f"\nEpoch {epoch + 1}: LearningRateScheduler setting learning rate to {float(lr)}.")

    def on_epoch_end(self, epoch, logs=None) -> None:
        if logs is not None:
            logs["learning_rate"] = float(self.model.optimizer.learning_rate)


class ReduceLROnPlateau(Callback):
    """Multiply the learning rate by `factor` when `monitor` has not improved by `min_delta` for `patience`
    epochs (then wait `cooldown` epochs), never below `min_lr`."""

    def __init__(self, monitor="val_loss", factor=0.1, patience=10, verbose=0, mode="auto", min_delta=1e-4,
                 cooldown=0, min_lr=0.0, **kwargs) -> None:
        super().__init__()
        if factor >= 1.0:
            raise LoomValueError(f"loom.tf.keras.callbacks.ReduceLROnPlateau: factor must be < 1.0, got {factor}")
        self.monitor, self.factor, self.patience, self.verbose = monitor, float(factor), int(patience), verbose
        self.min_delta, self.cooldown, self.min_lr = float(min_delta), int(cooldown), float(min_lr)
        self.mode = mode
        self._reset()

    def _reset(self) -> None:
        op, best = _monitor_op(self.mode, self.monitor)
        if op is np.greater:
            self.monitor_op = lambda a, b: np.greater(a, b + self.min_delta)
        else:
            self.monitor_op = lambda a, b: np.less(a, b - self.min_delta)
        self.best, self.cooldown_counter, self.wait = best, 0, 0

    def on_train_begin(self, logs=None) -> None:
        self._reset()

    def on_epoch_end(self, epoch, logs=None) -> None:
        logs = logs if logs is not None else {}
        opt = self.model.optimizer
        logs["learning_rate"] = float(opt.learning_rate)
        current = logs.get(self.monitor)
        if current is None:
            return
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.wait = 0
        if self.monitor_op(current, self.best):
            self.best, self.wait = current, 0
        elif self.cooldown_counter <= 0:
            self.wait += 1
            if self.wait >= self.patience:
                old = float(opt.learning_rate)
                if old > np.float32(self.min_lr):
                    new = max(old * self.factor, self.min_lr)
                    opt.learning_rate = new
                    if self.verbose:
                        print(f"\nEpoch {epoch + 1}: ReduceLROnPlateau reducing learning rate to {new}.")
                    self.cooldown_counter, self.wait = self.cooldown, 0


class TerminateOnNaN(Callback):
    """Stop training as soon as a batch's loss is NaN or infinite."""

    def on_train_batch_end(self, batch, logs=None) -> None:
        loss = (logs or {}).get("loss")
        if loss is not None and not np.isfinite(float(loss)):
            print(f"Batch {batch}: Invalid loss, terminating training")
            self.model.stop_training = True


class CSVLogger(Callback):
    """Write each epoch's logs to the CSV file `filename` (a header of ``epoch`` and the sorted log names)."""

    def __init__(self, filename, separator=",", append=False) -> None:
        super().__init__()
        self.filename, self.sep, self.append = str(filename), separator, append
        self._file = None
        self._keys = None

    def on_train_begin(self, logs=None) -> None:
        import os
        self._has_header = self.append and os.path.exists(self.filename) and os.path.getsize(self.filename) > 0
        self._file = open(self.filename, "a" if self.append else "w", newline="")
        self._keys = None

    def on_epoch_end(self, epoch, logs=None) -> None:
        logs = dict(logs or {})
        if self._keys is None:
            self._keys = sorted(logs)
            if not self._has_header:
                self._file.write(self.sep.join(["epoch", *self._keys]) + "\n")
        row = [str(epoch)] + [str(logs.get(k, "NA")) for k in self._keys]
        self._file.write(self.sep.join(row) + "\n")
        self._file.flush()

    def on_train_end(self, logs=None) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class ModelCheckpoint(Callback):
    """Save the model (or only its weights) after each epoch (or only when `monitor` improves, with `save_best_only`).

    `filepath` may hold format fields such as ``{epoch:02d}`` and ``{val_loss:.2f}``;
    the weights are written in loom's checkpoint format.
    """

    def __init__(self, filepath, monitor="val_loss", verbose=0, save_best_only=False, save_weights_only=False,
                 mode="auto", save_freq="epoch", initial_value_threshold=None) -> None:
        super().__init__()
        self.filepath, self.monitor, self.verbose = str(filepath), monitor, verbose
        self.save_best_only, self.save_weights_only = save_best_only, save_weights_only
        self.op, self.best = _monitor_op(mode, monitor)
        if initial_value_threshold is not None:
            self.best = initial_value_threshold

    def on_epoch_end(self, epoch, logs=None) -> None:
        logs = logs or {}
        path = self.filepath.format(epoch=epoch + 1, **logs)
        if self.save_best_only:
            current = logs.get(self.monitor)
            if current is None or not self.op(current, self.best):
                return
            if self.verbose:
                print(f"Epoch {epoch + 1}: {self.monitor} improved from {self.best:.5f} to {current:.5f}, "
                      f"saving model to {path}")
            self.best = current
        if not self.save_weights_only and path.endswith(".keras"):
            self.model.save(path)  # The whole model, for keras.models.load_model.
        else:
            self.model.save_weights(path)


class Progbar:
    """Keras's progress bar: `n/N [=====>....] - loss: 0.1234` updated in place on one line."""

    def __init__(self, target, width=30, verbose=1, stream=None) -> None:
        self.target, self.width, self.verbose = target, width, verbose
        self.stream = stream or sys.stdout

    def update(self, current, values=None, finalize=False) -> None:
        if self.verbose != 1:
            return
        metrics = " - ".join(f"{k}: {v:.4f}" for k, v in (values or []))
        if self.target:
            frac = min(current / self.target, 1.0)
            done = int(self.width * frac)
            bar = "=" * max(done - 1, 0) + (">" if done < self.width else "=") + "." * (self.width - done)
            line = f"{current}/{self.target} [{bar}]"
        else:
            line = f"{current}/Unknown"
        self.stream.write("\r" + line + (" - " + metrics if metrics else ""))
        if finalize:
            self.stream.write("\n")
        self.stream.flush()


class ProgbarLogger(Callback):
    """Prints the progress bar (verbose=1) or one line per epoch (verbose=2) during `fit`."""

    def __init__(self, verbose=1) -> None:
        super().__init__()
        self.verbose = verbose

    def on_epoch_begin(self, epoch, logs=None) -> None:
        self.epochs = self.params.get("epochs", 1)
        if self.verbose:
            print(f"Epoch {epoch + 1}/{self.epochs}")
        self.bar = Progbar(self.params.get("steps"), verbose=self.verbose)

    def on_train_batch_end(self, batch, logs=None) -> None:
        self.bar.update(batch + 1, list((logs or {}).items()))

    def on_epoch_end(self, epoch, logs=None) -> None:
        if self.verbose == 1:
            self.bar.update(self.params.get("steps") or 0, list((logs or {}).items()), finalize=True)
        elif self.verbose == 2:
            print(" - ".join(f"{k}: {v:.4f}" for k, v in (logs or {}).items()))


from loom.tf._unsupported import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr("loom.tf.keras.callbacks", "tf.keras.callbacks")
