"""`tf.train`: `Checkpoint`, `CheckpointManager` and `latest_checkpoint` over NumPy archives.

A checkpoint holds the values of the objects given to `tf.train.Checkpoint`
(variables, Keras layers and models, Keras optimizers with their slots,
`tf.Module`s and nested checkpoints). It is written as `<prefix>.index` (a
NumPy `.npz` archive; loom's format, not TensorFlow's) next to a `checkpoint`
file naming the latest one, as TensorFlow does, so `latest_checkpoint` and
`os.path.exists(path + ".index")` work.

Examples
--------
>>> import os, tempfile
>>> import loom.tf as tf
>>> v = tf.Variable(3.0)
>>> ckpt = tf.train.Checkpoint(v=v)
>>> path = ckpt.save(os.path.join(tempfile.mkdtemp(), "ckpt"))
>>> _ = v.assign(0.0)
>>> _ = ckpt.restore(path)
>>> float(v.numpy())
3.0
"""
from __future__ import annotations

import glob as _glob
import os
import re

import numpy as np

from loom.errors import LoomValueError
from loom.tensor import Tensor
from loom.tf._core import Variable

_INDEX = ".index"


def _is_optimizer(obj) -> bool:
    from loom.tf.keras.optimizers import Optimizer
    return isinstance(obj, Optimizer)


def _variables_of(obj) -> list:
    """The variables `obj` holds, in a fixed order (optimizers excluded: their slots follow their variables)."""
    from loom.tf.control import Module
    from loom.tf.keras.engine import Layer
    if isinstance(obj, Tensor):
        return [obj]
    if isinstance(obj, Layer):
        return list(obj.weights)
    if isinstance(obj, Module):
        return list(obj.variables)
    if isinstance(obj, Checkpoint):
        return [v for _, child in obj._children() for v in _variables_of(child)]
    if isinstance(obj, (list, tuple)):
        return [v for child in obj for v in _variables_of(child)]
    if isinstance(obj, dict):
        return [v for k in sorted(obj) for v in _variables_of(obj[k])]
    return []


class CheckpointLoadStatus:
    """What `Checkpoint.restore` returns: the assertion methods TensorFlow programs call on it."""

    def __init__(self, missing: list, unused: list) -> None:
        self._missing, self._unused = missing, unused

    def assert_consumed(self) -> CheckpointLoadStatus:
        if self._missing or self._unused:
            raise LoomValueError(f"loom.tf.train.Checkpoint.restore: not every value matched; objects without a "
                                 f"saved value: {self._missing}, saved values unused: {self._unused}")
        return self

    def assert_existing_objects_matched(self) -> CheckpointLoadStatus:
        if self._missing:
            raise LoomValueError(f"loom.tf.train.Checkpoint.restore: objects without a saved value: {self._missing}")
        return self

    def assert_nontrivial_match(self) -> CheckpointLoadStatus:
        return self

    def expect_partial(self) -> CheckpointLoadStatus:
        return self

    def run_restore_ops(self, session=None) -> None:
        """Nothing to run: values are restored eagerly."""


class Checkpoint:
    """Save and restore the values of the objects given as keyword arguments.

    `save(prefix)` numbers the files (`prefix-1`, `prefix-2`, ...) and returns
    the path; `write(path)` writes exactly `path`; `restore(path)` / `read(path)`
    assign the saved values back (`restore(None)` does nothing, as TensorFlow).
    """

    def __init__(self, root=None, **kwargs) -> None:
        object.__setattr__(self, "_objects", dict(kwargs))
        if root is not None:
            self._objects["root"] = root
        object.__setattr__(self, "save_counter", Variable(0, trainable=False, dtype="int64", name="save_counter"))

    def __getattr__(self, name: str):
        objs = self.__dict__.get("_objects", {})
        if name in objs:
            return objs[name]
        raise AttributeError(f"loom.tf.train.Checkpoint has no attribute {name!r}")

    def __setattr__(self, name: str, value) -> None:
        if name.startswith("_") or name == "save_counter":
            object.__setattr__(self, name, value)
        else:
            self._objects[name] = value

    def _children(self) -> list:
        return sorted(self._objects.items())

    # ------------------------------------------------------------ state

    def _state(self) -> dict:
        out: dict = {}
        all_vars = _variables_of(self)
        index = {id(v): k for k, v in enumerate(all_vars)}
        self._collect(out, "", index)
        return out

    def _collect(self, out: dict, prefix: str, index: dict) -> None:
        for name, obj in self._children():
            key = f"{prefix}{name}"
            if isinstance(obj, Checkpoint):
                obj._collect(out, key + "/", index)
            elif _is_optimizer(obj):
                out[f"{key}/iterations"] = obj.iterations.numpy()
                out[f"{key}/steps_done"] = np.asarray(obj._steps_done)
                for vid, slots in obj._slots.items():
                    if vid not in index:
                        continue  # A slot of a variable this checkpoint does not hold cannot be matched on restore.
                    for sname, s in slots.items():
                        out[f"{key}/slot/{index[vid]}/{sname}"] = s.numpy()
            else:
                for k, v in enumerate(_variables_of(obj)):
                    out[f"{key}/{k}"] = v.detach().numpy()

    def _assign(self, saved: dict, prefix: str, index: list, missing: list, used: set) -> None:
        for name, obj in self._children():
            key = f"{prefix}{name}"
            if isinstance(obj, Checkpoint):
                obj._assign(saved, key + "/", index, missing, used)
            elif _is_optimizer(obj):
                self._assign_optimizer(obj, key, saved, index, missing, used)
            else:
                for k, v in enumerate(_variables_of(obj)):
                    val = saved.get(f"{key}/{k}")
                    if val is None:
                        missing.append(f"{key}/{k}")
                        continue
                    used.add(f"{key}/{k}")
                    if tuple(val.shape) != tuple(v.shape):
                        raise LoomValueError(f"loom.tf.train.Checkpoint.restore: {key}/{k} was saved with shape "
                                             f"{list(val.shape)}, the variable has shape {list(v.shape)}")
                    v.assign(val)

    @staticmethod
    def _assign_optimizer(opt, key, saved, index, missing, used) -> None:
        if f"{key}/iterations" not in saved:
            missing.append(f"{key}/iterations")
            return
        used.update({f"{key}/iterations", f"{key}/steps_done"})
        opt.iterations.assign(saved[f"{key}/iterations"])
        opt._steps_done = int(saved[f"{key}/steps_done"])
        pat = re.compile(re.escape(key) + r"/slot/(\d+)/(.+)$")
        for name, val in saved.items():
            m = pat.match(name)
            if m is None:
                continue
            k, sname = int(m.group(1)), m.group(2)
            if k >= len(index):
                continue
            used.add(name)
            var = index[k]
            slot = opt._slot(var, sname)
            slot.assign(val)

    # ------------------------------------------------------------ files

    def write(self, file_prefix, options=None) -> str:
        """Write the values to `file_prefix` (plus '.index'); returns `file_prefix`."""
        path = os.fspath(file_prefix)
        d = os.path.dirname(path)
        if d:
            os.makedirs(d, exist_ok=True)
        tmp = path + _INDEX + ".tmp"
        with open(tmp, "wb") as f:
            np.savez(f, **self._state())
        os.replace(tmp, path + _INDEX)
        return path

    def save(self, file_prefix, options=None) -> str:
        """Write a numbered checkpoint `<file_prefix>-<n>` and record it as the directory's latest."""
        self.save_counter.assign_add(1)
        path = self.write(f"{os.fspath(file_prefix)}-{int(self.save_counter.numpy())}")
        _record_latest(os.path.dirname(path) or ".", path, None)
        return path

    def read(self, save_path, options=None) -> CheckpointLoadStatus:
        """Assign the values saved at `save_path` (as written by `write` or `save`)."""
        return self.restore(save_path)

    def restore(self, save_path, options=None) -> CheckpointLoadStatus:
        """Assign the values saved at `save_path` to the tracked objects (None: nothing to restore)."""
        if save_path is None:
            return CheckpointLoadStatus([], [])
        path = os.fspath(save_path)
        if os.path.isdir(path):
            latest = latest_checkpoint(path)
            if latest is None:
                raise LoomValueError(f"loom.tf.train.Checkpoint.restore: directory {path} holds no checkpoint")
            path = latest
        if not os.path.exists(path + _INDEX):
            raise LoomValueError(f"loom.tf.train.Checkpoint.restore: no checkpoint at {path} (expected the file "
                                 f"{path + _INDEX}); loom.tf reads checkpoints written by loom.tf only")
        with np.load(path + _INDEX) as z:
            saved = {k: z[k] for k in z.files}
        missing: list = []
        used: set = set()
        self._assign(saved, "", _variables_of(self), missing, used)
        return CheckpointLoadStatus(missing, sorted(set(saved) - used))


def _record_latest(directory: str, path: str, all_paths) -> None:
    rel = os.path.relpath(path, directory)
    lines = [f'model_checkpoint_path: "{rel}"']
    for p in all_paths or [path]:
        lines.append(f'all_model_checkpoint_paths: "{os.path.relpath(p, directory)}"')
    with open(os.path.join(directory, "checkpoint"), "w") as f:
        f.write("\n".join(lines) + "\n")


def latest_checkpoint(checkpoint_dir, latest_filename=None) -> str | None:
    """The path of the newest checkpoint saved in `checkpoint_dir`, or None."""
    d = os.fspath(checkpoint_dir)
    state = os.path.join(d, latest_filename or "checkpoint")
    if not os.path.exists(state):
        return None
    with open(state) as f:
        for line in f:
            m = re.match(r'model_checkpoint_path:\s*"(.*)"', line.strip())
            if m:
                p = m.group(1)
                p = p if os.path.isabs(p) else os.path.join(d, p)
                return p if os.path.exists(p + _INDEX) else None
    return None


class CheckpointManager:
    """Numbered checkpoints of `checkpoint` in `directory`, keeping the newest `max_to_keep`."""

    def __init__(self, checkpoint, directory, max_to_keep, keep_checkpoint_every_n_hours=None,
                 checkpoint_name="ckpt", step_counter=None, checkpoint_interval=None, init_fn=None) -> None:
        self._checkpoint = checkpoint
        self._directory = os.fspath(directory)
        self._max = max_to_keep
        self._prefix = os.path.join(self._directory, checkpoint_name)
        os.makedirs(self._directory, exist_ok=True)
        pat = re.compile(re.escape(checkpoint_name) + r"-(\d+)\.index$")
        found = []
        for f in _glob.glob(os.path.join(_glob.escape(self._directory), checkpoint_name + "-*.index")):
            m = pat.search(os.path.basename(f))
            if m:
                found.append((int(m.group(1)), f[:-len(_INDEX)]))
        self._paths = [p for _, p in sorted(found)]

    @property
    def directory(self) -> str:
        return self._directory

    @property
    def checkpoints(self) -> list:
        return list(self._paths)

    @property
    def latest_checkpoint(self) -> str | None:
        return self._paths[-1] if self._paths else None

    def save(self, checkpoint_number=None, check_interval=True, options=None) -> str:
        """Write the next numbered checkpoint and delete the oldest beyond `max_to_keep`."""
        ck = self._checkpoint
        if checkpoint_number is None:
            ck.save_counter.assign_add(1)
            n = int(ck.save_counter.numpy())
        else:
            n = int(checkpoint_number.numpy() if isinstance(checkpoint_number, Tensor) else checkpoint_number)
        path = ck.write(f"{self._prefix}-{n}")
        self._paths = [p for p in self._paths if p != path] + [path]
        if self._max is not None:
            while len(self._paths) > self._max:
                old = self._paths.pop(0)
                if os.path.exists(old + _INDEX):
                    os.remove(old + _INDEX)
        _record_latest(self._directory, path, self._paths)
        return path


from loom.tf._unsupported import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr("loom.tf.train", "tf.train")
