"""Training drivers: `Checkpointer` for a plain loop, and `fit`, that survive being killed.

A run that is killed (SIGKILL, a lost machine) and started again resumes
from its last checkpoint and ends bit-identical to a run that was never
interrupted. That needs every piece of state a step reads: the model's
parameters and buffers, the optimizer's state, the learning-rate scheduler,
the position in the data (the epoch, how many batches of it were used, and
the random state its shuffling was drawn from) and loom's random streams
(dropout masks, random transforms). `Checkpointer` saves all of them in one
safetensors file per checkpoint through `loom.save`, which writes atomically
(a kill mid-save leaves the previous checkpoint intact), and keeps the last
few.

The data position is kept without storing the data order: the checkpoint
holds the random state from just before the epoch's iterator was made and
the number of batches taken since; resuming makes the iterator again from
that state (so it shuffles identically) and skips the batches already used
(a `loom.data.DataLoader` without workers skips by index, loading nothing).
"""
from __future__ import annotations

import os
import re
import warnings
from typing import Any, Callable, Iterable, Iterator

from loom.errors import LoomError, LoomValueError, LoomWarning
from loom.io.checkpoint import load, save
from loom.tensor import Generator, default_generator

__all__ = ["Checkpointer", "fit"]

_FILE = re.compile(r"^step-(\d{8,})\.safetensors$")


def _generators(data: Any, extra: dict[str, Generator]) -> dict[str, Generator]:
    """Every loom Generator a step may draw from: the default one, the data's own, and the caller's."""
    found: dict[str, Generator] = {"default": default_generator}
    seen = {id(default_generator)}
    paths = ("generator", "sampler.generator", "batch_sampler.generator", "batch_sampler.sampler.generator",
             "sampler.sampler.generator")
    if data is not None:
        for path in paths:
            obj = data
            for part in path.split("."):
                obj = getattr(obj, part, None)
                if obj is None:
                    break
            if isinstance(obj, Generator) and id(obj) not in seen:
                seen.add(id(obj))
                found["data." + path] = obj
    for name, g in extra.items():
        if not isinstance(g, Generator):
            raise LoomValueError(f"loom.train.Checkpointer: generators[{name!r}] must be a loom.Generator, "
                                 f"got {type(g).__name__}")
        if id(g) not in seen:
            seen.add(id(g))
            found[name] = g
    return found


def _skip(it: Iterator, n: int) -> None:
    """Advance `it` by `n` items; a worker-less DataLoader iterator skips indices without loading."""
    if hasattr(it, "_sampler_iter") and hasattr(it, "_idx") and hasattr(it, "_fetcher"):
        for _ in range(n):
            next(it._sampler_iter)
            it._idx += 1
        return
    for _ in range(n):
        next(it)


class _DataCursor:
    """Where a re-iterable data source stands: epoch, batches taken in it, random state at its start."""

    def __init__(self, data: Iterable, generators: dict[str, Generator]):
        self.data = data
        self.generators = generators
        self.epoch = 0
        self.position = 0
        self.start_states: dict[str, Any] | None = None
        self._it: Iterator | None = None

    def _begin(self) -> None:
        self.start_states = {k: g.get_state() for k, g in self.generators.items()}
        self._it = iter(self.data)
        self.position = 0

    def next(self) -> Any:
        if self._it is None:
            self._begin()
        assert self._it is not None
        try:
            item = next(self._it)
        except StopIteration:
            if self.position == 0:
                raise LoomError("loom.train: the data source yielded no batch in a whole epoch") from None
            self.epoch += 1
            self._begin()
            item = next(self._it)
        self.position += 1
        return item

    def state(self) -> dict:
        return {"epoch": self.epoch, "position": self.position, "start_states": self.start_states}

    def restore(self, state: dict) -> None:
        self.epoch = int(state["epoch"])
        starts = state["start_states"]
        if starts is None:  # Saved before the first batch was taken.
            self._it, self.start_states, self.position = None, None, 0
            return
        for k, g in self.generators.items():
            if k in starts:
                g.set_state(starts[k])
        self._begin()
        assert self._it is not None
        _skip(self._it, int(state["position"]))
        self.position = int(state["position"])


class Checkpointer:
    """Save a training run every N steps and resume it, bit-identically, after a crash or a kill.

    Parameters
    ----------
    directory : str
        Where checkpoints go, one file ``step-NNNNNNNN.safetensors`` each
        (created if missing).
    every : int
        `step` saves when the step number is a multiple of this.
    keep : int
        How many of the latest checkpoints to keep (older ones are deleted).
    model, optimizer, scheduler : objects with ``state_dict`` / ``load_state_dict``, optional
    data : a re-iterable data source, optional
        A `loom.data.DataLoader`, a sampler or any iterable that can be
        iterated again for each epoch. Take batches with `batches` so the
        position is known; shuffling is resumed from its random state.
    generators : dict of str to loom.Generator, optional
        Further generators the step draws from (the default generator and
        the data's own are found by themselves).
    **objects : objects with ``state_dict`` / ``load_state_dict``
        Anything else to save and restore (an EMA of the weights, a scaler).

    Examples
    --------
    >>> import tempfile
    >>> _ = loom.manual_seed(0)
    >>> model = loom.nn.Linear(2, 1)
    >>> opt = loom.optim.SGD(model.parameters(), lr=0.1)
    >>> ckpt = loom.train.Checkpointer(tempfile.mkdtemp(), every=2, model=model, optimizer=opt,
    ...                                data=[loom.ones(4, 2), loom.zeros(4, 2)])
    >>> step = ckpt.restore()          # 0: nothing saved yet
    >>> batches = ckpt.batches()
    >>> while step < 5:
    ...     x = next(batches)
    ...     opt.zero_grad()
    ...     model(x).pow(2).mean().backward()
    ...     opt.step()
    ...     step += 1
    ...     _ = ckpt.step(step)
    >>> [p.rsplit("/", 1)[-1] for p in ckpt.checkpoints()]
    ['step-00000002.safetensors', 'step-00000004.safetensors']
    >>> ckpt.restore()                  # A new process would resume from here.
    4
    """

    def __init__(self, directory: str, every: int, keep: int = 3, *, model: Any = None, optimizer: Any = None,
                 scheduler: Any = None, data: Iterable | None = None, generators: dict[str, Generator] | None = None,
                 **objects: Any) -> None:
        if not isinstance(every, int) or every < 1:
            raise LoomValueError(f"loom.train.Checkpointer: every must be a positive int, got {every!r}")
        if not isinstance(keep, int) or keep < 1:
            raise LoomValueError(f"loom.train.Checkpointer: keep must be a positive int, got {keep!r}")
        self.directory = os.fspath(directory)
        os.makedirs(self.directory, exist_ok=True)
        self.every = every
        self.keep = keep
        self.objects: dict[str, Any] = {}
        for name, obj in dict(model=model, optimizer=optimizer, scheduler=scheduler, **objects).items():
            if obj is None:
                continue
            if not (callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None))):
                raise LoomValueError(f"loom.train.Checkpointer: {name} ({type(obj).__name__}) has no "
                                     "state_dict/load_state_dict to save and restore it by")
            self.objects[name] = obj
        self.generators = _generators(data, generators or {})
        self.cursor = _DataCursor(data, self.generators) if data is not None else None
        self.last_saved: int | None = None

    # ------------------------------------------------------------ data

    def batches(self) -> Iterator:
        """The data's batches, epoch after epoch without end, from where the restored run stood."""
        if self.cursor is None:
            raise LoomValueError("loom.train.Checkpointer.batches: the checkpointer was made without data=")
        while True:
            yield self.cursor.next()

    @property
    def epoch(self) -> int:
        """The epoch the last batch taken belongs to (0-based)."""
        return self.cursor.epoch if self.cursor is not None else 0

    # ------------------------------------------------------------ saving

    def checkpoints(self) -> list[str]:
        """The checkpoint files in the directory, oldest first."""
        found = []
        for name in os.listdir(self.directory):
            m = _FILE.match(name)
            if m:
                found.append((int(m.group(1)), os.path.join(self.directory, name)))
        return [p for _, p in sorted(found)]

    def state_dict(self, step: int) -> dict:
        """Everything a resumed run needs, as one nested dict (what `save` writes)."""
        return {"step": int(step),
                "objects": {k: o.state_dict() for k, o in self.objects.items()},
                "rng": {k: g.get_state() for k, g in self.generators.items()},
                "data": self.cursor.state() if self.cursor is not None else None}

    def save(self, step: int) -> str:
        """Write a checkpoint of `step` now (atomically), drop all but the last `keep`; return its path."""
        path = os.path.join(self.directory, f"step-{int(step):08d}.safetensors")
        save(self.state_dict(step), path, metadata={"loom.train.step": str(int(step))})
        self.last_saved = int(step)
        for old in self.checkpoints()[:-self.keep]:
            try:
                os.remove(old)
            except FileNotFoundError:
                pass
        return path

    def step(self, step: int) -> str | None:
        """Call after finishing step number `step` (counting from 1): saves when `every` divides it."""
        if step % self.every == 0 and step != self.last_saved:
            return self.save(step)
        return None

    # ------------------------------------------------------------ resuming

    def load_state_dict(self, state: dict) -> int:
        """Put a saved state back into the model, optimizer, scheduler, data position and generators."""
        missing = [k for k in self.objects if k not in state["objects"]]
        if missing:
            raise LoomValueError(f"loom.train.Checkpointer: the checkpoint has no state for {missing}; it holds "
                                 f"{sorted(state['objects'])}")
        for k, o in self.objects.items():
            o.load_state_dict(state["objects"][k])
        if self.cursor is not None and state.get("data") is not None:
            self.cursor.restore(state["data"])
        # Last: repositioning the data drew from the generators.
        for k, g in self.generators.items():
            if k in state["rng"]:
                g.set_state(state["rng"][k])
        self.last_saved = int(state["step"])
        return int(state["step"])

    def restore(self) -> int:
        """Resume from the newest readable checkpoint; return the step to continue from (0 if none).

        A checkpoint that cannot be read (damaged on disk) is skipped with a
        warning in favour of the one before it.
        """
        for path in reversed(self.checkpoints()):
            try:
                state = load(path)
            except LoomError as e:
                warnings.warn(f"loom.train.Checkpointer: skipping unreadable checkpoint {path}: {e}",
                              LoomWarning, stacklevel=2)
                continue
            return self.load_state_dict(state)
        return 0


def fit(model: Any, loss_fn: Callable, optimizer: Any, data: Iterable, steps: int, *, scheduler: Any = None,
        checkpoint: Checkpointer | str | None = None, every: int = 100, keep: int = 3,
        on_step: Callable[[int, float], Any] | None = None) -> list[float]:
    """Train `model` for `steps` optimizer steps, checkpointing and resuming by itself.

    Each step takes the next batch of `data` (epoch after epoch), computes
    ``loss_fn(model(x), y)`` for a batch ``(x, y)`` (or ``loss_fn(model(batch))``
    for any other batch), back-propagates, steps the optimizer and then the
    scheduler. With `checkpoint` (a `Checkpointer`, or a directory that gets
    one saving every `every` steps and keeping `keep`), the run first resumes
    from the newest checkpoint, so calling `fit` again after a crash or a kill
    finishes the run as if it had never stopped: same parameters, bit for bit.

    Parameters
    ----------
    model : loom.nn.Module
    loss_fn : callable
    optimizer : loom.optim.Optimizer
    data : re-iterable of batches (a `loom.data.DataLoader`)
    steps : int
        The total number of steps of the run (not the number left).
    scheduler : learning-rate scheduler, optional
        Stepped once per step.
    checkpoint : Checkpointer or str, optional
    every, keep : int
        For a `checkpoint` given as a directory.
    on_step : callable, optional
        ``on_step(step, loss)`` after each step (logging).

    Returns
    -------
    list of float
        The loss of each step this call ran.

    Examples
    --------
    >>> import tempfile
    >>> _ = loom.manual_seed(0)
    >>> model = loom.nn.Linear(3, 1)
    >>> opt = loom.optim.SGD(model.parameters(), lr=0.1)
    >>> data = [(loom.ones(2, 3), loom.zeros(2, 1))]
    >>> folder = tempfile.mkdtemp()
    >>> losses = loom.train.fit(model, loom.nn.functional.mse_loss, opt, data, steps=4, checkpoint=folder, every=2)
    >>> len(losses), losses[-1] < losses[0]
    (4, True)
    >>> loom.train.fit(model, loom.nn.functional.mse_loss, opt, data, steps=4, checkpoint=folder, every=2)
    []
    """
    if not isinstance(steps, int) or steps < 0:
        raise LoomValueError(f"loom.train.fit: steps must be an int >= 0, got {steps!r}")
    if isinstance(checkpoint, (str, os.PathLike)):
        checkpoint = Checkpointer(checkpoint, every=every, keep=keep, model=model, optimizer=optimizer,
                                  scheduler=scheduler, data=data)
    if checkpoint is not None:
        if checkpoint.cursor is None or checkpoint.cursor.data is not data:
            raise LoomValueError("loom.train.fit: the Checkpointer must be made with data= the same data fit "
                                 "trains on, so the data position is saved and resumed")
        step = checkpoint.restore()
        batches = checkpoint.batches()
    else:
        step = 0
        batches = Checkpointer.batches(_Bare(data))  # type: ignore[arg-type]
    if hasattr(model, "train"):
        model.train()
    losses = []
    while step < steps:
        batch = next(batches)
        optimizer.zero_grad()
        if isinstance(batch, (tuple, list)) and len(batch) == 2:
            loss = loss_fn(model(batch[0]), batch[1])
        else:
            loss = loss_fn(model(batch))
        loss.backward()
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        step += 1
        value = float(loss.item())
        losses.append(value)
        if on_step is not None:
            on_step(step, value)
        if checkpoint is not None:
            checkpoint.step(step)
    return losses


class _Bare:
    """Just the data cursor, for `fit` without checkpoints."""

    def __init__(self, data: Iterable):
        self.cursor = _DataCursor(data, {})
