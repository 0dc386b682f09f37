"""`keras.Model` (functional and subclassed), `keras.Sequential`, and the compile/fit/evaluate/predict loop."""
from __future__ import annotations

import numpy as np

import loom
from loom.errors import LoomTypeError, LoomValueError
from loom.tensor import Tensor
from loom.tf.keras import callbacks as cbks
from loom.tf.keras import losses as losses_mod
from loom.tf.keras import metrics as metrics_mod
from loom.tf.keras import optimizers as optimizers_mod
from loom.tf.keras.engine import InputLayer, KerasTensor, Layer, _map_nest, _to_input
from loom.tf.tape import GradientTape


def _np_struct(x):
    """Inputs/targets as NumPy (float64 to float32, as Keras casts them); None stays None."""
    if x is None:
        return None
    if isinstance(x, (list, tuple)):
        return [_np_struct(v) for v in x]
    if isinstance(x, dict):
        return {k: _np_struct(v) for k, v in x.items()}
    a = x.numpy() if isinstance(x, Tensor) else np.asarray(x)
    return a.astype(np.float32) if a.dtype == np.float64 else a


def _first_len(x) -> int:
    while isinstance(x, (list, tuple, dict)):
        x = list(x.values())[0] if isinstance(x, dict) else x[0]
    return len(x)


def _take(x, idx):
    if x is None:
        return None
    if isinstance(x, list):
        return [_take(v, idx) for v in x]
    if isinstance(x, dict):
        return {k: _take(v, idx) for k, v in x.items()}
    return loom.tensor(np.ascontiguousarray(x[idx]))


class _CompileMetrics(metrics_mod.Metric):
    """The compiled metrics as one metric (Keras 3's `compile_metrics`), built from the first targets."""

    def __init__(self, model) -> None:
        self._model = model
        super().__init__(name="compile_metrics")

    def reset_state(self) -> None:
        for m in self._model._metric_objs or []:
            m.reset_state()

    def update_state(self, y_true, y_pred, sample_weight=None) -> None:
        model = self._model
        model._ensure_metrics(y_true, y_pred)
        n_plain = model.__dict__.get("_n_unweighted", len(model._metric_objs))
        for k, m in enumerate(model._metric_objs):
            m.update_state(y_true, y_pred.detach() if isinstance(y_pred, Tensor) else y_pred,
                           sample_weight if k >= n_plain else None)

    def result(self) -> dict:
        return {m.name: m.result() for m in (self._model._metric_objs or [])}


def _class_weights(class_weight: dict, y: np.ndarray, sample_weight):
    """Per-example weights from `class_weight` by each target's class (integer or one-hot labels)."""
    labels = np.argmax(y, -1) if y.ndim > 1 and y.shape[-1] > 1 else y.reshape(len(y), -1)[:, 0]
    labels = np.round(labels).astype(np.int64)
    missing = sorted(set(labels.tolist()) - set(int(k) for k in class_weight))
    if missing:
        raise LoomValueError(f"loom.tf.keras.Model.fit: class_weight has no weight for class(es) {missing}")
    w = np.array([class_weight[int(c)] for c in labels], np.float32)
    if sample_weight is not None:
        w = w * _np_struct(sample_weight).astype(np.float32).reshape(len(w), -1)[:, 0]
    return w


def _unpack(data):
    """(x, y, sample_weight) from a batch element as Keras accepts it."""
    if isinstance(data, tuple):
        if len(data) == 1:
            return data[0], None, None
        if len(data) == 2:
            return data[0], data[1], None
        return data[0], data[1], data[2]
    return data, None, None


class Model(Layer):
    """A layer with training: `compile`, `fit`, `evaluate`, `predict`, `summary`, weight files.

    Build one functionally (``keras.Model(inputs, outputs)``) or by subclassing
    (define layers in ``__init__`` and the forward pass in ``call``).

    Examples
    --------
    >>> import loom.tf as tf
    >>> inp = tf.keras.Input(shape=(4,))
    >>> out = tf.keras.layers.Dense(2)(inp)
    >>> model = tf.keras.Model(inp, out)
    >>> model(tf.ones((3, 4))).shape.as_list()
    [3, 2]
    """

    @classmethod
    def from_config(cls, config: dict, custom_objects=None):
        """Not available for models: loom.tf does not rebuild a model from a config."""
        _no_model_config(f"{cls.__name__}.from_config")

    def to_json(self, **kwargs) -> str:
        """Not available: loom.tf does not serialise a model's architecture."""
        _no_model_config("Model.to_json")

    def __init__(self, *args, **kwargs) -> None:
        inputs = kwargs.pop("inputs", None)
        outputs = kwargs.pop("outputs", None)
        if len(args) >= 1:
            inputs = args[0]
        if len(args) >= 2:
            outputs = args[1]
        super().__init__(**kwargs)
        self.stop_training = False
        self.compiled = False
        self.optimizer = None
        self.history = None
        self._functional = inputs is not None
        if self._functional:
            if outputs is None:
                raise LoomValueError("loom.tf.keras.Model: give both inputs and outputs for a functional model")
            self._inputs_struct = inputs
            self._outputs_struct = outputs
            self._graph_layers = self._collect_layers(inputs, outputs)
            for layer in self._graph_layers:
                if layer not in self._layers:
                    self._layers.append(layer)
            self.built = True

    # ------------------------------------------------------------ functional graph

    @staticmethod
    def _collect_layers(inputs, outputs) -> list:
        """The graph's layers in Keras's order: deepest first (inputs), ties in order of discovery from the
        outputs."""
        input_ids = {id(kt) for kt in _leaves(inputs)}
        op_index: dict[int, int] = {}
        layers: dict[int, Layer] = {}
        nodes: list = []  # (node key, layer, parent node keys), each after its parents.
        finished: set = set()

        def info(kt):
            if kt.history is None:
                layer = getattr(kt, "_input_layer", None)
                return layer, ("input", id(kt)), []
            layer, args, a2, kw, _ = kt.history
            parents = [v for v in _leaves((args, a2, kw)) if isinstance(v, KerasTensor)]
            return layer, (id(layer), id(args)), parents

        def visit(kt) -> object:
            layer, key, parents = info(kt)
            if layer is None:
                return None
            if key in finished:
                return key
            if id(layer) not in op_index:
                op_index[id(layer)] = len(op_index)
                layers[id(layer)] = layer
            parent_keys = []
            if id(kt) not in input_ids:
                parent_keys = [k for k in (visit(p) for p in parents) if k is not None]
            finished.add(key)
            nodes.append((key, layer, parent_keys))
            return key
        for kt in _leaves(outputs):
            if isinstance(kt, KerasTensor):
                visit(kt)
        for kt in _leaves(inputs):  # An input no output depends on is still a layer of the model.
            if isinstance(kt, KerasTensor):
                visit(kt)
        node_depth: dict = {}
        op_depth: dict[int, int] = {}
        for key, layer, parent_keys in reversed(nodes):
            d = max(node_depth.setdefault(key, 0), op_depth.get(id(layer), 0))
            op_depth[id(layer)] = node_depth[key] = d
            for pk in parent_keys:
                node_depth[pk] = max(d + 1, node_depth.get(pk, 0))
        order = sorted(layers, key=lambda i: (-op_depth[i], op_index[i]))
        return [layers[i] for i in order]

    def _run_graph(self, inputs, training):
        memo: dict[int, object] = {}
        given = _leaves(inputs) if isinstance(inputs, (list, tuple, dict)) else [inputs]
        if isinstance(self._inputs_struct, dict) and isinstance(inputs, dict):
            given = [inputs[k] for k in self._inputs_struct]
        want = _leaves(self._inputs_struct)
        if len(given) != len(want):
            raise LoomValueError(f"loom.tf.keras.Model {self.name!r}: expects {len(want)} inputs, got {len(given)}")
        for kt, v in zip(want, given):
            memo[id(kt)] = _to_input(v)

        def ev(obj):
            if isinstance(obj, KerasTensor):
                if id(obj) in memo:
                    return memo[id(obj)]
                layer, a, args, kw, index = obj.history
                out = layer(_map_nest(ev, a), *_map_nest(ev, args), **{k: _map_nest(ev, v) for k, v in kw.items()},
                            training=training)
                outs = _leaves(out)
                for j, o in enumerate(outs):
                    memo[(id(layer), id(obj.history), j)] = o
                memo[id(obj)] = outs[index]
                return outs[index]
            return obj
        return _map_nest(ev, self._outputs_struct)

    def _maybe_build(self, inputs) -> None:
        self.built = True  # A model's layers build themselves on the first call.

    def build(self, input_shape) -> None:
        """Create the weights by running the model once on zeros of `input_shape` (None: batch of 1)."""
        if self._functional or self.built:
            self.built = True
            return
        shapes = input_shape
        if isinstance(shapes, (list, tuple)) and shapes and isinstance(shapes[0], (list, tuple)):
            dummy = [loom.zeros(*[1 if d is None else int(d) for d in s]) for s in shapes]
        else:
            dummy = loom.zeros(*[1 if d is None else int(d) for d in shapes])
        with loom.no_grad():
            Layer.__call__(self, dummy, training=False)
        self.built = True

    @property
    def output_shape(self):
        if self._functional:
            return _map_nest(lambda kt: kt.shape, self._outputs_struct)
        return self._out_shape

    def call(self, inputs, training=None, mask=None):
        if not self._functional:
            raise NotImplementedError(f"loom.tf.keras.Model {self.name!r}: subclasses must define call()")
        return self._run_graph(inputs, training)

    @property
    def layers(self) -> list:
        return list(self._layers)

    def get_layer(self, name=None, index=None) -> Layer:
        """The layer called `name` (or at `index`)."""
        if index is not None:
            return self.layers[index]
        for layer in self.layers:
            if layer.name == name:
                return layer
        raise LoomValueError(f"loom.tf.keras.Model.get_layer: no layer named {name!r}")

    @property
    def inputs(self):
        return _leaves(self._inputs_struct) if self._functional else None

    @property
    def outputs(self):
        return _leaves(self._outputs_struct) if self._functional else None

    # ------------------------------------------------------------ compile and steps

    def compile(self, optimizer="rmsprop", loss=None, metrics=None, loss_weights=None, weighted_metrics=None,
                run_eagerly=False, steps_per_execution=1, jit_compile="auto", **kwargs) -> None:
        """Set the optimizer, loss and metrics `fit`/`evaluate` use (names or objects).

        A model with several outputs takes a list (in output order) or a dict (by
        output layer name) of losses, `loss_weights` and metrics, as Keras; the
        logs then also hold each output's loss (`<output>_loss`) and metrics
        (`<output>_<metric>`).
        """
        self.optimizer = optimizers_mod.get(optimizer)
        from loom.tf.keras import mixed_precision
        if mixed_precision.global_policy().name == "mixed_float16" and \
                not isinstance(self.optimizer, mixed_precision.LossScaleOptimizer):
            self.optimizer = mixed_precision.LossScaleOptimizer(self.optimizer)  # As Keras under mixed_float16.
        self.loss = loss
        self._multi_spec = None
        if isinstance(loss, (list, tuple, dict)):
            self._loss_obj = None
            self._multi_spec = (loss, loss_weights, metrics)
        else:
            self._loss_obj = losses_mod.get(loss)
        self._multi: dict | None = None
        self._metric_specs = list(metrics or []) if self._multi_spec is None else []
        # As Keras 3, `metrics` ignore sample weights (and class_weight); `weighted_metrics` use them.
        self._weighted_specs = list(weighted_metrics or []) if self._multi_spec is None else []
        if weighted_metrics and self._multi_spec is not None:
            raise LoomValueError("loom.tf.keras.Model.compile: weighted_metrics are not supported for a model "
                                 "with several outputs")
        self._metric_objs: list | None = None
        self._loss_tracker = metrics_mod.Mean(name="loss")
        self.compiled = True

    # ------------------------------------------------------------ several outputs

    def _output_names(self) -> list:
        if self._functional:
            names = []
            for k, kt in enumerate(_leaves(self._outputs_struct)):
                hist = getattr(kt, "history", None)
                names.append(hist[0].name if hist is not None else f"output_{k}")
            if isinstance(self._outputs_struct, dict):
                return list(self._outputs_struct)
            return names
        return None

    def _per_output(self, spec, names, what):
        """`spec` (a list in output order or a dict by output name) as one entry per output."""
        if isinstance(spec, dict):
            unknown = sorted(set(spec) - set(names))
            if unknown:
                raise LoomValueError(f"loom.tf.keras.Model.compile: {what} names {unknown} are not outputs of "
                                     f"model {self.name!r}; its outputs are {names}")
            return [spec.get(n) for n in names]
        spec = list(spec)
        if len(spec) != len(names):
            raise LoomValueError(f"loom.tf.keras.Model.compile: {what} has {len(spec)} entries but model "
                                 f"{self.name!r} has {len(names)} outputs {names}")
        return spec

    def _setup_multi(self, y_pred) -> dict:
        if self._multi is not None:
            return self._multi
        loss, weights, metrics = self._multi_spec
        names = self._output_names()
        if names is None:
            names = list(y_pred) if isinstance(y_pred, dict) else [f"output_{k + 1}" for k in range(len(y_pred))]
        losses = self._per_output(loss, names, "loss")
        w = [1.0] * len(names) if weights is None else [1.0 if v is None else float(v)
                                                         for v in self._per_output(weights, names, "loss_weights")]
        if metrics is None:
            mets: list = [[] for _ in names]
        elif isinstance(metrics, dict) or (isinstance(metrics, (list, tuple)) and len(metrics) == len(names)
                                           and all(isinstance(m, (list, tuple)) or m is None for m in metrics)):
            mets = [[] if m is None else (list(m) if isinstance(m, (list, tuple)) else [m])
                    for m in self._per_output(metrics, names, "metrics")]
        else:
            raise LoomValueError(f"loom.tf.keras.Model.compile: model {self.name!r} has outputs {names}; give "
                                 "metrics as a dict by output name or a list with one list of metrics per output")
        self._multi = {"names": names, "losses": [None if v is None else losses_mod.get(v) for v in losses],
                       "weights": w, "metric_specs": mets, "metrics": None,
                       "trackers": [metrics_mod.Mean(name=f"{n}_loss") for n in names]}
        return self._multi

    def _as_list(self, v, names):
        if isinstance(v, dict):
            missing = [n for n in names if n not in v]
            if missing:
                raise LoomValueError(f"loom.tf.keras.Model {self.name!r}: targets/outputs dict lacks {missing}")
            return [v[n] for n in names]
        if isinstance(v, (list, tuple)):
            if len(v) != len(names):
                raise LoomValueError(f"loom.tf.keras.Model {self.name!r}: got {len(v)} targets/outputs for "
                                     f"{len(names)} outputs {names}")
            return list(v)
        raise LoomValueError(f"loom.tf.keras.Model {self.name!r}: the model has outputs {names}; give one target "
                             f"per output (a list or a dict by output name), got {type(v).__name__}")

    def _multi_losses(self, y, y_pred, sample_weight) -> list:
        m = self._setup_multi(y_pred)
        ys, ps = self._as_list(y, m["names"]), self._as_list(y_pred, m["names"])
        return [None if fn is None else fn(t, p, sample_weight) for fn, t, p in zip(m["losses"], ys, ps)]

    @property
    def metrics(self) -> list:
        if not self.compiled:
            return []
        out = [self._loss_tracker]
        if self._multi is not None:
            out += [t for t, fn in zip(self._multi["trackers"], self._multi["losses"]) if fn is not None]
            out += [mt for per in (self._multi["metrics"] or []) for mt in per]
        if self._metric_objs is None and (self._metric_specs or self.__dict__.get("_weighted_specs")):
            # Before the first batch the compiled metrics are not built yet (their kind depends on the
            # targets' shapes): a custom train_step updating `self.metrics` reaches them through this.
            return out + [_CompileMetrics(self)]
        return out + list(self._metric_objs or [])

    @property
    def metrics_names(self) -> list:
        return [m.name for m in self.metrics]

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """The compiled loss of `y_pred` against `y` plus any losses layers added."""
        if self._multi_spec is not None:
            parts = self._multi_losses(y, y_pred, sample_weight)
            self._last_parts = parts
            loss = None
            for w, part in zip(self._multi["weights"], parts):
                if part is not None:
                    loss = part * w if loss is None else loss + part * w
        else:
            if self._loss_obj is None:
                raise LoomValueError(f"loom.tf.keras.Model {self.name!r}: compile() with a loss before training")
            loss = self._loss_obj(y, y_pred, sample_weight)
        for extra in self.losses:
            loss = loss + extra
        return loss

    def _logs(self) -> dict:
        out: dict = {}
        for m in self.metrics:
            r = m.result()
            if isinstance(r, dict):
                out.update({k: float(v) for k, v in r.items()})
            else:
                out[m.name] = float(r)
        return out

    def train_step(self, data) -> dict:
        """One optimization step on a batch: forward, loss, gradients, update, metrics."""
        x, y, sw = _unpack(data)
        with GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(x, y, y_pred, sw)
        variables = self.trainable_variables
        grads = tape.gradient(self.optimizer.scale_loss(loss), variables)
        self.optimizer.apply_gradients(zip(grads, variables))
        return self._update_metrics(x, y, y_pred, sw, loss)

    def test_step(self, data) -> dict:
        """Loss and metrics on a batch, without updating weights."""
        x, y, sw = _unpack(data)
        y_pred = self(x, training=False)
        loss = self.compute_loss(x, y, y_pred, sw, training=False)
        return self._update_metrics(x, y, y_pred, sw, loss)

    def _update_metrics(self, x, y, y_pred, sw, loss) -> dict:
        n = _first_len(x.numpy() if isinstance(x, Tensor) else x)
        self._loss_tracker.update_state(loss.detach().numpy(), sample_weight=n)
        if self._multi_spec is not None:
            self._update_multi(y, y_pred, sw)
            return self._logs()
        self._ensure_metrics(y, y_pred)
        n_plain = self.__dict__.get("_n_unweighted", len(self._metric_objs))
        for k, m in enumerate(self._metric_objs):
            m.update_state(y, y_pred.detach(), sw if k >= n_plain else None)
        return self._logs()

    def _ensure_metrics(self, y, y_pred) -> None:
        if self._metric_objs is None:
            plain = [metrics_mod.get(m, y, y_pred) for m in self._metric_specs]
            names = {m.name for m in plain}
            weighted = []
            for spec in self._weighted_specs:
                m = metrics_mod.get(spec, y, y_pred)
                if m in plain:
                    raise LoomValueError(f"loom.tf.keras.Model.compile: metric object {m.name!r} is in both "
                                         "metrics and weighted_metrics; give each its own object")
                if m.name in names:
                    m.name = "weighted_" + m.name
                weighted.append(m)
            self._n_unweighted = len(plain)
            self._metric_objs = plain + weighted

    def _update_multi(self, y, y_pred, sw) -> None:
        m = self._setup_multi(y_pred)
        ys, ps = self._as_list(y, m["names"]), self._as_list(y_pred, m["names"])
        parts = getattr(self, "_last_parts", None) or [None] * len(ys)
        for tracker, part in zip(m["trackers"], parts):
            if part is not None:
                tracker.update_state(part.detach().numpy(), sample_weight=_first_len(ys[0]))
        self._last_parts = None
        if m["metrics"] is None:
            m["metrics"] = []
            for name, specs, t, p in zip(m["names"], m["metric_specs"], ys, ps):
                objs = [metrics_mod.get(spec, _to_input(t), p) for spec in specs]
                for o in objs:
                    o.name = f"{name}_{o.name}"
                m["metrics"].append(objs)
        for objs, t, p in zip(m["metrics"], ys, ps):
            for o in objs:
                o.update_state(t, p.detach(), sw)

    def predict_step(self, data):
        """The model's outputs on a batch of inputs."""
        x, _, _ = _unpack(data)
        return self(x, training=False)

    def _reset_metrics(self) -> None:
        for m in self.metrics:
            m.reset_state()

    reset_metrics = _reset_metrics

    # ------------------------------------------------------------ data

    def _batches(self, x, y, sw, batch_size, shuffle, steps=None):
        """A function giving one epoch's iterator of batches, and the number of steps (None if unknown)."""
        from loom.tf.data import Dataset
        if isinstance(x, Dataset):
            card = x._card
            shared: list = [None]

            def epoch_ds():
                # With a step count, one iterator runs on across epochs (as Keras), so a repeated dataset
                # continues where the last epoch stopped; a new one starts only once it is exhausted.
                it = shared[0] if steps is not None and shared[0] is not None else iter(x)
                shared[0] = it if steps is not None else None
                k = 0
                while steps is None or k < steps:
                    try:
                        el = next(it)
                    except StopIteration:
                        shared[0] = None
                        break
                    yield el if isinstance(el, tuple) else (el,)
                    k += 1
            return epoch_ds, (steps if steps is not None else (card if card >= 0 else None))
        if not isinstance(x, (np.ndarray, Tensor, list, tuple, dict)):
            raise LoomTypeError(f"loom.tf.keras.Model: x must be an array, a tensor, a list/dict of them or a "
                                f"tf.data.Dataset, got {type(x).__name__}")
        xa, ya, wa = _np_struct(x), _np_struct(y), _np_struct(sw)
        n = _first_len(xa)
        bs = int(batch_size or 32)
        nsteps = -(-n // bs)

        def epoch():
            order = np.random.permutation(n) if shuffle else np.arange(n)
            for s in range(nsteps):
                idx = order[s * bs:(s + 1) * bs]
                batch = (_take(xa, idx), _take(ya, idx))
                if wa is not None:
                    batch = batch + (_take(wa, idx),)
                yield batch
        return epoch, nsteps

    # ------------------------------------------------------------ fit / evaluate / predict

    def fit(self, x=None, y=None, batch_size=None, epochs=1, verbose="auto", callbacks=None, validation_split=0.0,
            validation_data=None, shuffle=True, class_weight=None, sample_weight=None, initial_epoch=0,
            steps_per_epoch=None, validation_steps=None, validation_batch_size=None, validation_freq=1, **kwargs):
        """Train for `epochs` epochs; returns the `History` (per-epoch loss, metrics, val_ metrics)."""
        if not self.compiled:
            raise LoomValueError(f"loom.tf.keras.Model.fit: compile() model {self.name!r} first")
        verbose = 1 if verbose == "auto" else int(verbose)
        if class_weight is not None:
            from loom.tf.data import Dataset
            if isinstance(x, Dataset) or isinstance(y, (list, tuple, dict)):
                raise LoomValueError("loom.tf.keras.Model.fit: class_weight needs array inputs and a single "
                                     "target; pass per-example weights (sample_weight) instead")
            sample_weight = _class_weights(class_weight, _np_struct(y), sample_weight)
        if validation_split and validation_data is None:
            from loom.tf.data import Dataset
            if isinstance(x, Dataset):
                raise LoomValueError("loom.tf.keras.Model.fit: validation_split needs array inputs, not a Dataset")
            xa, ya = _np_struct(x), _np_struct(y)
            n = _first_len(xa)
            cut = int(n * (1.0 - validation_split))
            split = (lambda a: (_slice(a, slice(0, cut)), _slice(a, slice(cut, None))))
            (x, vx), (y, vy) = split(xa), split(ya)
            validation_data = (vx, vy)
        epoch_iter, steps = self._batches(x, y, sample_weight, batch_size, shuffle, steps_per_epoch)
        history = cbks.History()
        # As Keras, History comes after the user's callbacks, so it records what they add to the logs.
        cb_list = list(callbacks or []) + [history]
        if verbose:
            cb_list.append(cbks.ProgbarLogger(verbose))
        params = {"epochs": epochs, "steps": steps, "verbose": verbose}
        for cb in cb_list:
            cb.set_model(self)
            cb.set_params(params)
        self.stop_training = False
        self.history = history
        for cb in cb_list:
            cb.on_train_begin()
        logs: dict = {}
        for epoch in range(initial_epoch, epochs):
            self._reset_metrics()
            for cb in cb_list:
                cb.on_epoch_begin(epoch)
            for step, batch in enumerate(epoch_iter()):
                for cb in cb_list:
                    cb.on_train_batch_begin(step)
                logs = self.train_step(batch)
                for cb in cb_list:
                    cb.on_train_batch_end(step, logs)
                if self.stop_training:
                    break
            logs = self._logs()
            if validation_data is not None and (epoch + 1) % validation_freq == 0:
                vd = validation_data
                val = self.evaluate(vd if not isinstance(vd, tuple) else vd[0],
                                    None if not isinstance(vd, tuple) else vd[1],
                                    batch_size=validation_batch_size or batch_size, verbose=0, return_dict=True,
                                    steps=validation_steps)
                logs.update({"val_" + k: v for k, v in val.items()})
            for cb in cb_list:
                cb.on_epoch_end(epoch, logs)
            if self.stop_training:
                break
        for cb in cb_list:
            cb.on_train_end(logs)
        return history

    def evaluate(self, x=None, y=None, batch_size=None, verbose="auto", sample_weight=None, steps=None,
                 callbacks=None, return_dict=False, **kwargs):
        """Loss and metrics over the data: a number, a list [loss, *metrics], or a dict with `return_dict`."""
        if not self.compiled:
            raise LoomValueError(f"loom.tf.keras.Model.evaluate: compile() model {self.name!r} first")
        epoch_iter, nsteps = self._batches(x, y, sample_weight, batch_size, False, steps)
        verbose = 1 if verbose == "auto" else int(verbose)
        bar = cbks.Progbar(nsteps, verbose=verbose)
        self._reset_metrics()
        logs: dict = {}
        k = 0
        for k, batch in enumerate(epoch_iter(), 1):
            with loom.no_grad():
                logs = self.test_step(batch)
            bar.update(k, list(logs.items()))
        if verbose == 1:
            bar.update(k, list(logs.items()), finalize=True)
        logs = self._logs()
        if return_dict:
            return logs
        values = list(logs.values())
        return values[0] if len(values) == 1 else values

    def predict(self, x, batch_size=None, verbose="auto", steps=None, callbacks=None, **kwargs):
        """The model's outputs for `x`, batched, as NumPy arrays."""
        epoch_iter, _ = self._batches(x, None, None, batch_size, False, steps)
        outs = []
        for batch in epoch_iter():
            with loom.no_grad():
                outs.append(_map_nest(lambda t: t.numpy(), self.predict_step(batch)))
        if isinstance(outs[0], (list, tuple)):
            return [np.concatenate([o[j] for o in outs]) for j in range(len(outs[0]))]
        return np.concatenate(outs)

    def train_on_batch(self, x, y=None, sample_weight=None, return_dict=False):
        """One training step on one batch; returns the loss (and metrics)."""
        self._reset_metrics()
        batch = (_take(_np_struct(x), slice(None)), _take(_np_struct(y), slice(None)))
        logs = self.train_step(batch)
        return logs if return_dict else (list(logs.values()) if len(logs) > 1 else logs["loss"])

    def test_on_batch(self, x, y=None, sample_weight=None, return_dict=False):
        """Loss (and metrics) on one batch."""
        self._reset_metrics()
        with loom.no_grad():
            logs = self.test_step((_take(_np_struct(x), slice(None)), _take(_np_struct(y), slice(None))))
        return logs if return_dict else (list(logs.values()) if len(logs) > 1 else logs["loss"])

    def predict_on_batch(self, x):
        """The model's outputs on one batch, as NumPy."""
        with loom.no_grad():
            return self(_take(_np_struct(x), slice(None)), training=False).numpy()

    # ------------------------------------------------------------ weights and summary

    def save_weights(self, filepath, overwrite=True, **kwargs) -> None:
        """Write every weight (in `weights` order) to `filepath` in loom's checkpoint format."""
        loom.save({f"{k:05d}": w.detach() for k, w in enumerate(self.weights)}, str(filepath))

    def save(self, filepath, overwrite=True, **kwargs) -> None:
        """Write the whole model (layers, weights, compile state) to `filepath` for `keras.models.load_model`.

        The file is loom's format (a pickle of the model), not Keras's zip: it
        round-trips within loom.tf only.
        """
        save_model(self, filepath, overwrite=overwrite)

    def load_weights(self, filepath, skip_mismatch=False, **kwargs) -> None:
        """Read weights written by `save_weights` into this (built) model."""
        state = loom.load(str(filepath))
        self.set_weights([state[k].numpy() for k in sorted(state)])

    def summary(self, line_length=None, print_fn=None, **kwargs) -> None:
        """Print each layer's name, type, output shape and parameter count, and the totals."""
        out = print_fn or print
        rows = [(f"{layer.name} ({type(layer).__name__})", str(layer.output_shape), layer.count_params())
                for layer in self.layers]
        w = [max([len("Layer (type)")] + [len(r[0]) for r in rows]) + 2,
             max([len("Output Shape")] + [len(r[1]) for r in rows]) + 2, 12]
        line = "─" * sum(w)
        out(f'Model: "{self.name}"')
        out(line)
        out("Layer (type)".ljust(w[0]) + "Output Shape".ljust(w[1]) + "Param #".rjust(w[2]))
        out(line)
        for name, shape, n in rows:
            out(name.ljust(w[0]) + shape.ljust(w[1]) + f"{n:,}".rjust(w[2]))
        out(line)
        total = self.count_params()
        trainable = int(sum(v.numel() for v in self.trainable_weights))
        out(f" Total params: {total:,}")
        out(f" Trainable params: {trainable:,}")
        out(f" Non-trainable params: {total - trainable:,}")


def _slice(a, s):
    if isinstance(a, list):
        return [_slice(v, s) for v in a]
    if isinstance(a, dict):
        return {k: _slice(v, s) for k, v in a.items()}
    return None if a is None else a[s]


def _leaves(obj) -> list:
    if isinstance(obj, dict):
        return [x for v in obj.values() for x in _leaves(v)]
    if isinstance(obj, (list, tuple)):
        return [x for v in obj for x in _leaves(v)]
    return [obj]


def _no_model_config(what: str):
    raise LoomValueError(f"loom.tf.keras: {what} is not supported (loom.tf models do not serialise their "
                         "architecture to a config); use keras.models.clone_model, or model.save and "
                         "keras.models.load_model")


class Sequential(Model):
    """A stack of layers, each feeding the next.

    Examples
    --------
    >>> import loom.tf as tf
    >>> model = tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(3, activation="relu"),
    ...                              tf.keras.layers.Dense(1)])
    >>> model.count_params()
    19
    """

    def __init__(self, layers=None, name=None, **kwargs) -> None:
        super().__init__(name=name, **kwargs)
        self._input_kt = None
        for layer in layers or []:
            self.add(layer)

    def add(self, layer) -> None:
        """Append a layer (or a `keras.Input`, which fixes the input shape and builds the model)."""
        if isinstance(layer, KerasTensor):
            self._input_kt = layer
            self._build_from(layer.shape, layer.dtype)
            return
        if isinstance(layer, InputLayer):
            self._input_kt = layer.output
            self._build_from(layer.batch_shape, layer.output.dtype)
            return
        if not isinstance(layer, Layer):
            raise LoomTypeError(f"loom.tf.keras.Sequential.add: expected a Layer, got {type(layer).__name__}")
        self._layers.append(layer)
        if self._input_kt is not None:
            self._build_from(self._input_kt.shape, self._input_kt.dtype)
        elif len(self._layers) == 1 and layer._input_shape_arg is not None:
            self._input_kt = KerasTensor(layer._input_shape_arg)
            self._build_from(self._input_kt.shape, self._input_kt.dtype)

    def _build_from(self, shape, dtype) -> None:
        if not self._layers:
            return
        x = loom.zeros(*[1 if s is None else s for s in shape], dtype=dtype)
        with loom.no_grad():
            for layer in self._layers:
                if not layer.built or layer._out_shape is None:
                    x = layer(x, training=False)
                else:
                    x = layer(x, training=False)
        for layer in self._layers:
            if isinstance(layer._out_shape, tuple):
                layer._out_shape = (None,) + tuple(layer._out_shape[1:])
        self.built = True

    def pop(self) -> Layer:
        """Remove and return the last layer."""
        return self._layers.pop()

    def build(self, input_shape=None) -> None:
        """Build every layer for inputs of `input_shape` (the batch dimension may be None)."""
        if input_shape is None:
            if self._input_kt is None:
                raise LoomValueError(f"loom.tf.keras.Sequential {self.name!r}: build() needs an input_shape (or "
                                     "start the model with keras.Input)")
            input_shape = self._input_kt.shape
        self._input_kt = KerasTensor(tuple(input_shape))
        self._build_from(self._input_kt.shape, self._input_kt.dtype)

    @property
    def output_shape(self):
        return self._layers[-1].output_shape if self._layers else None

    def call(self, inputs, training=None, mask=None):
        x = inputs
        for layer in self._layers:
            x = layer(x, training=training)
        return x


def save_model(model, filepath, overwrite=True, **kwargs) -> None:
    """Write `model` (layers, weights, compile state) to `filepath` in loom's format (see `Model.save`)."""
    import os
    import pickle
    path = str(filepath)
    if not overwrite and os.path.exists(path):
        raise LoomValueError(f"loom.tf.keras.models.save_model: {path} exists and overwrite=False")
    try:
        data = pickle.dumps(model, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, AttributeError, TypeError) as e:
        raise LoomValueError(f"loom.tf.keras.models.save_model: the model cannot be saved whole ({e}); a "
                             "lambda or local function in a layer, loss or metric cannot be stored. Save the "
                             "weights with model.save_weights(path) and rebuild the model in code") from e
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def load_model(filepath, custom_objects=None, compile=True, safe_mode=True):  # noqa: A002
    """A model written by `Model.save` / `save_model` (loom's format), ready to predict and, if it was
    compiled, to train."""
    import pickle
    path = str(filepath)
    with open(path, "rb") as f:
        head = f.read(2)
        f.seek(0)
        if head == b"PK":
            raise LoomValueError(f"loom.tf.keras.models.load_model: {path} is a Keras zip archive; loom.tf reads "
                                 "only models saved by loom.tf's model.save (rebuild the model and use "
                                 "load_weights for weights)")
        model = pickle.load(f)
    if not isinstance(model, Model):
        raise LoomValueError(f"loom.tf.keras.models.load_model: {path} holds a {type(model).__name__}, not a model")
    return model


def clone_model(model, input_tensors=None, clone_function=None, call_function=None, recursive=False, **kwargs):
    """A new, uncompiled model with `model`'s architecture and freshly initialised weights (as Keras's)."""
    import copy
    if clone_function is not None or call_function is not None or input_tensors is not None:
        raise LoomValueError("loom.tf.keras.models.clone_model: input_tensors, clone_function and call_function "
                             "are not supported; clone the model as it is")
    new = copy.deepcopy(model)
    for w in new.weights:
        spec = w.__dict__.get("_keras_init")
        if spec is not None:
            init, shape, dtype = spec
            w.assign(init(shape, dtype))
    for attr in ("optimizer", "loss", "compiled_loss", "compiled_metrics"):
        if attr in new.__dict__:
            object.__setattr__(new, attr, None)
    return new


from loom.tf._unsupported import module_getattr as _module_getattr  # noqa: E402

__getattr__ = _module_getattr("loom.tf.keras.models", "tf.keras.models")
