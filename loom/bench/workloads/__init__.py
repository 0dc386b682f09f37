"""The benchmark workloads: one module per model, each defining every framework's variant.

A workload module holds a `Workload` called ``WORKLOAD``. Its model is written
once against a PyTorch-style API namespace (`Api`: ``lib``, ``nn``, ``F``),
which is how both loom and PyTorch users write it — so the loom and PyTorch
models are the same code, layer for layer, and cannot drift apart. JAX, which
has no modules, gets its own pure-function version (``jax_step``) over a dict
of parameters with the same names as the PyTorch state dict.

Every framework starts from the same weights: `init_arrays` draws each named
tensor from a NumPy generator seeded by the run seed and the tensor's name, so
it does not matter which framework asks first. Batches come from one seeded
NumPy generator (or from real data where it is cheap) and are converted to
each framework's tensors before timing starts.

Examples
--------
>>> from loom.bench.workloads import WORKLOADS, get
>>> sorted(WORKLOADS)
['cnn', 'gcn', 'gpt', 'mlp', 'mlp-infer', 'resnet']
>>> get("mlp").samples_per_step
128
"""
from __future__ import annotations

import importlib
import zlib
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Callable

import numpy as np

# Every framework variant the harness knows, in display order.
FRAMEWORKS = ("loom", "loom-function", "torch", "torch-compile", "jax")
LOOM_FRAMEWORKS = ("loom", "loom-function")
PEERS = ("torch", "torch-compile", "jax")

_MODULES = {"mlp": "mlp", "mlp-infer": "mlp_infer", "cnn": "cnn", "gpt": "gpt", "resnet": "resnet", "gcn": "gcn"}
WORKLOADS = tuple(_MODULES)


@dataclass
class Workload:
    """What one benchmark model is and how each framework runs it.

    Attributes
    ----------
    name : str
        The name used on the command line (``--models``).
    description : str
        One line for the report.
    samples_per_step : int
        Samples (tokens for language models, nodes for graphs) one step processes.
    unit : str
        What `samples_per_step` counts: ``"samples"``, ``"tokens"`` or ``"nodes"``.
    steps : int
        Default steps per timed block; ``quick_steps`` for ``--quick``.
    batches : callable(np.random.Generator) -> list of tuples of arrays
        The data, as NumPy arrays; steps cycle through the list.
    model : callable(Api) -> module
        Builds the model with a PyTorch-style API (loom or torch).
    optimizer : callable(Api, params) -> optimizer, or None for inference workloads
    loss : callable(Api, model, *batch) -> tensor
        The step's output: the training loss, or the model output for inference.
    jax_step : callable(jax, jnp) -> (init_state(params), step(state, *batch) -> (state, out)), or None
        The JAX version; None where the model has no clean JAX form here.
    param_shapes : callable() -> dict of name -> shape, or None
        The parameters of the JAX version (named as in the PyTorch state dict).
    train : bool
        Whether a step trains (forward, backward, optimizer update) or only infers.
    unavailable : callable() -> str or None
        Why the workload cannot run here (missing data), or None.
    """

    name: str
    description: str
    samples_per_step: int
    unit: str
    steps: int
    quick_steps: int
    batches: Callable[[np.random.Generator], list]
    model: Callable[[Any], Any]
    loss: Callable[..., Any]
    optimizer: Callable[[Any, Any], Any] | None = None
    jax_step: Callable[[Any, Any], tuple[Callable, Callable]] | None = None
    param_shapes: Callable[[], dict[str, tuple[int, ...]]] | None = None
    train: bool = True
    unavailable: Callable[[], str | None] = lambda: None

    def supports(self, framework: str) -> str | None:
        """None if `framework` has a variant of this workload, else the reason it has none."""
        if framework not in FRAMEWORKS:
            return f"unknown framework {framework!r}"
        missing = self.unavailable()
        if missing:
            return missing
        if framework == "jax" and self.jax_step is None:
            return f"no JAX variant of {self.name} (only models with a clean pure-function JAX form have one)"
        return None


def get(name: str) -> Workload:
    """The `Workload` called `name` (see `WORKLOADS`)."""
    if name not in _MODULES:
        raise ValueError(f"loom.bench: unknown model {name!r}; choose from {', '.join(WORKLOADS)}")
    return importlib.import_module(f"loom.bench.workloads.{_MODULES[name]}").WORKLOAD


def api(framework: str) -> SimpleNamespace:
    """The PyTorch-style namespace a model is written against: ``lib``, ``nn``, ``F``, ``tensor``.

    ``tensor(array)`` turns a NumPy array into the framework's tensor.
    """
    if framework.startswith("loom"):
        import loom
        import loom.nn
        import loom.nn.functional
        return SimpleNamespace(name="loom", lib=loom, nn=loom.nn, F=loom.nn.functional, optim=loom.optim,
                               tensor=lambda a: loom.from_numpy(_contiguous(a)))
    if framework.startswith("torch"):
        import torch
        import torch.nn
        import torch.nn.functional
        return SimpleNamespace(name="torch", lib=torch, nn=torch.nn, F=torch.nn.functional, optim=torch.optim,
                               tensor=lambda a: torch.from_numpy(_contiguous(a)))
    raise ValueError(f"loom.bench: {framework} has no PyTorch-style API")


def _contiguous(a: np.ndarray) -> np.ndarray:
    """A C-contiguous array of the same shape (np.ascontiguousarray would make 0-d arrays 1-d)."""
    return a if a.flags.c_contiguous else a.copy()


def init_array(name: str, shape: tuple[int, ...], seed: int, dtype=np.float32) -> np.ndarray:
    """The initial value of the state-dict entry `name`, identical for every framework.

    Normalisation weights and running variances start at one, biases, running
    means and counters at zero, and every other tensor of rank >= 2 uniformly
    in +-1/sqrt(fan_in) (PyTorch's default bound for Linear and Conv layers).

    Examples
    --------
    >>> a = init_array("fc.weight", (4, 3), seed=0)
    >>> bool((abs(a) <= 3 ** -0.5).all()), a.dtype.name
    (True, 'float32')
    >>> init_array("bn.running_var", (2,), seed=0).tolist()
    [1.0, 1.0]
    """
    leaf = name.rsplit(".", 1)[-1]
    if leaf == "num_batches_tracked":
        return np.zeros(shape, np.int64)
    if leaf in ("running_mean", "bias"):
        return np.zeros(shape, dtype)
    if leaf == "running_var" or (leaf == "weight" and len(shape) == 1):
        return np.ones(shape, dtype)
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else int(shape[0])
    bound = 1.0 / np.sqrt(max(fan_in, 1))
    return rng.uniform(-bound, bound, size=shape).astype(dtype)


def init_state(shapes: dict[str, tuple[tuple[int, ...], Any]], seed: int) -> dict[str, np.ndarray]:
    """`init_array` for every (name -> (shape, numpy dtype)) entry; integer entries start at zero."""
    out = {}
    for k, (shape, d) in shapes.items():
        d = np.dtype(d)
        out[k] = init_array(k, tuple(shape), seed, d) if d.kind == "f" else np.zeros(shape, d)
    return out


def load_initial_state(a: SimpleNamespace, model, seed: int) -> None:
    """Give a loom or torch model the shared initial weights of `seed`."""
    sd = model.state_dict()
    shapes = {k: (tuple(v.shape), _np_dtype(v)) for k, v in sd.items()}
    arrays = init_state(shapes, seed)
    model.load_state_dict({k: a.tensor(v) for k, v in arrays.items()})


def _np_dtype(t) -> np.dtype:
    name = str(t.dtype).replace("torch.", "").replace("loom.", "")
    return np.dtype({"float32": np.float32, "float64": np.float64, "int64": np.int64}.get(name, np.float32))


def synthetic_images(rng: np.random.Generator, n: int, batch: int, shape: tuple[int, ...],
                     classes: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """`n` batches of standard-normal float32 images and int64 labels."""
    return [(rng.standard_normal((batch, *shape), dtype=np.float32),
             rng.integers(0, classes, size=batch, dtype=np.int64)) for _ in range(n)]
