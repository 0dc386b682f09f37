"""Weight pruning by masks, as ``torch.nn.utils.prune``.

Pruning parameter ``name`` of a module moves it to ``name + "_orig"``, adds a
``name + "_mask"`` buffer, and recomputes ``name = orig * mask`` before every
forward (a forward pre-hook). Pruning the same parameter again prunes among
the entries still kept; `remove` makes the pruning permanent.

Examples
--------
>>> from loom.nn.utils import prune
>>> lin = loom.nn.Linear(4, 2)
>>> _ = prune.l1_unstructured(lin, "weight", amount=0.5)
>>> int((lin.weight == 0).sum()), sorted(n for n, _ in lin.named_buffers())
(4, ['weight_mask'])
"""
from __future__ import annotations

import numbers

import numpy as np

import loom
from loom.errors import LoomTypeError, LoomValueError
from loom.nn.parameter import Parameter

__all__ = ["BasePruningMethod", "Identity", "RandomUnstructured", "L1Unstructured", "LnStructured", "CustomFromMask",
           "identity", "random_unstructured", "l1_unstructured", "ln_structured", "global_unstructured",
           "custom_from_mask", "remove", "is_pruned"]


def _count(amount, n: int, op: str) -> int:
    """How many of `n` entries `amount` (a fraction in [0, 1] or a count) prunes."""
    if isinstance(amount, bool) or not isinstance(amount, numbers.Real):
        raise LoomTypeError(f"loom.nn.utils.prune.{op}: amount must be a float in [0, 1] or a non-negative int, "
                            f"got {amount!r}")
    if isinstance(amount, numbers.Integral):
        if amount < 0 or amount > n:
            raise LoomValueError(f"loom.nn.utils.prune.{op}: amount={amount} must be between 0 and the number of "
                                 f"parameters to prune ({n})")
        return int(amount)
    if not 0.0 <= amount <= 1.0:
        raise LoomValueError(f"loom.nn.utils.prune.{op}: amount={amount} should be a float in the range [0, 1]")
    return int(round(amount * n))


class BasePruningMethod:
    """A way to compute a mask: subclasses define `compute_mask(t, default_mask)` (NumPy arrays in and out)."""

    PRUNING_TYPE = "unstructured"

    def compute_mask(self, t: np.ndarray, default_mask: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    @classmethod
    def apply(cls, module, name: str, *args, importance_scores=None, **kwargs):
        method = cls(*args, **kwargs)
        _apply_mask(module, name, lambda t, mask: method.compute_mask(t, mask), importance_scores)
        return method


class Identity(BasePruningMethod):
    """Prunes nothing (a mask of ones)."""

    def compute_mask(self, t, default_mask):
        return default_mask.copy()


class RandomUnstructured(BasePruningMethod):
    """Prune `amount` of the kept entries, chosen at random."""

    def __init__(self, amount) -> None:
        self.amount = amount

    def compute_mask(self, t, default_mask):
        mask = default_mask.copy()
        kept = np.flatnonzero(mask.reshape(-1))
        k = _count(self.amount, kept.size, "random_unstructured")
        if k:
            scores = loom.rand(kept.size).numpy()
            mask.reshape(-1)[kept[np.argsort(scores, kind="stable")[:k]]] = 0
        return mask


class L1Unstructured(BasePruningMethod):
    """Prune `amount` of the kept entries with the smallest absolute value."""

    def __init__(self, amount) -> None:
        self.amount = amount

    def compute_mask(self, t, default_mask):
        mask = default_mask.copy()
        kept = np.flatnonzero(mask.reshape(-1))
        k = _count(self.amount, kept.size, "l1_unstructured")
        if k:
            mag = np.abs(t.reshape(-1)[kept])
            mask.reshape(-1)[kept[np.argsort(mag, kind="stable")[:k]]] = 0
        return mask


class LnStructured(BasePruningMethod):
    """Prune `amount` of the slices along `dim` with the smallest `n`-norm."""

    PRUNING_TYPE = "structured"

    def __init__(self, amount, n, dim: int = -1) -> None:
        self.amount, self.n, self.dim = amount, n, dim

    def compute_mask(self, t, default_mask):
        dim = self.dim % t.ndim
        slices = t.shape[dim]
        k = _count(self.amount, slices, "ln_structured")
        flat = np.moveaxis(t * default_mask, dim, 0).reshape(slices, -1)
        norms = np.linalg.norm(flat, axis=1) if self.n in ("fro", "nuc") else np.linalg.norm(flat, ord=self.n, axis=1)
        mask = default_mask.copy()
        if k:
            drop = np.argsort(norms, kind="stable")[:k]
            index = [slice(None)] * t.ndim
            index[dim] = drop
            mask[tuple(index)] = 0
        return mask


class CustomFromMask(BasePruningMethod):
    """Prune where the given `mask` is 0."""

    def __init__(self, mask) -> None:
        self.mask = np.asarray(mask.numpy() if isinstance(mask, loom.Tensor) else mask)

    def compute_mask(self, t, default_mask):
        return default_mask * self.mask.astype(default_mask.dtype)


def _recompute(module, name: str):
    orig = getattr(module, name + "_orig")
    mask = getattr(module, name + "_mask")
    return orig * mask.to(orig.dtype)


def _apply_mask(module, name: str, compute, importance_scores=None) -> None:
    hooks = module.__dict__.setdefault("_prune_hooks", {})
    if name in hooks:  # Pruned before: prune among the entries still kept.
        orig = getattr(module, name + "_orig")
        old = getattr(module, name + "_mask").numpy()
    else:
        orig = getattr(module, name, None)
        if not isinstance(orig, loom.Tensor) or name not in module._parameters:
            raise LoomValueError(f"loom.nn.utils.prune: module {type(module).__name__} has no parameter {name!r} "
                                 "to prune")
        old = np.ones(tuple(orig.shape), dtype=np.float32)
    scores = orig if importance_scores is None else importance_scores
    if tuple(scores.shape) != tuple(orig.shape):
        raise LoomValueError(f"loom.nn.utils.prune: importance_scores of shape {list(scores.shape)} must match "
                             f"{name} of shape {list(orig.shape)}")
    mask = compute(scores.detach().numpy(), old).astype(np.float32)
    if name not in hooks:
        del module._parameters[name]
        module.register_parameter(name + "_orig", orig if isinstance(orig, Parameter) else Parameter(orig))
        hooks[name] = module.register_forward_pre_hook(lambda mod, args: _set(mod, name))
    module.register_buffer(name + "_mask", loom.tensor(mask, dtype=getattr(module, name + "_orig").dtype))
    _set(module, name)


def _set(module, name: str) -> None:
    object.__setattr__(module, name, _recompute(module, name))


def identity(module, name: str):
    """Apply a mask of ones to parameter `name` (reparametrise it without pruning)."""
    Identity.apply(module, name)
    return module


def random_unstructured(module, name: str, amount):
    """Prune `amount` (fraction or count) of `name`'s kept entries at random."""
    RandomUnstructured.apply(module, name, amount)
    return module


def l1_unstructured(module, name: str, amount, importance_scores=None):
    """Prune `amount` (fraction or count) of `name`'s kept entries with the smallest magnitude."""
    L1Unstructured.apply(module, name, amount, importance_scores=importance_scores)
    return module


def ln_structured(module, name: str, amount, n, dim: int, importance_scores=None):
    """Prune `amount` of `name`'s slices along `dim` with the smallest `n`-norm."""
    LnStructured.apply(module, name, amount, n, dim, importance_scores=importance_scores)
    return module


def custom_from_mask(module, name: str, mask):
    """Prune `name` where `mask` is 0."""
    CustomFromMask.apply(module, name, mask)
    return module


def global_unstructured(parameters, pruning_method, importance_scores=None, **kwargs) -> None:
    """Prune the (module, name) pairs in `parameters` together: the mask is computed over all their entries."""
    params = list(parameters)
    if pruning_method not in (L1Unstructured, RandomUnstructured):
        raise LoomValueError("loom.nn.utils.prune.global_unstructured: pruning_method must be L1Unstructured or "
                             f"RandomUnstructured, got {pruning_method!r}")
    importance_scores = importance_scores or {}
    tensors, masks = [], []
    for module, name in params:
        pruned = name in module.__dict__.get("_prune_hooks", {})
        t = importance_scores.get((module, name), getattr(module, name + "_orig") if pruned else getattr(module, name))
        tensors.append(t.detach().numpy().reshape(-1))
        masks.append(getattr(module, name + "_mask").numpy().reshape(-1) if pruned
                     else np.ones(t.numel(), np.float32))
    flat_mask = pruning_method(**kwargs).compute_mask(np.concatenate(tensors), np.concatenate(masks))
    start = 0
    for (module, name), t in zip(params, tensors):
        part = flat_mask[start:start + t.size]
        start += t.size
        custom_from_mask(module, name, part.reshape(tuple(getattr(module, name).shape)))


def remove(module, name: str):
    """Make the pruning of `name` permanent: `name` becomes a plain parameter holding orig * mask."""
    hooks = module.__dict__.get("_prune_hooks", {})
    if name not in hooks:
        raise LoomValueError(f"loom.nn.utils.prune.remove: parameter {name!r} of {type(module).__name__} was not "
                             "pruned")
    weight = _recompute(module, name).detach()
    hooks.pop(name).remove()
    del module._parameters[name + "_orig"]
    del module._buffers[name + "_mask"]
    module.__dict__.pop(name, None)
    module.register_parameter(name, Parameter(weight))
    return module


def is_pruned(module) -> bool:
    """Whether `module` or any of its submodules has a pruned parameter."""
    return any(m.__dict__.get("_prune_hooks") for m in module.modules())
