"""The optimiser base: parameter groups, per-parameter state, state_dict round trips."""
from __future__ import annotations

import collections
import copy
import functools
from typing import Any, Iterable

import numpy as np

from loom import _api as loom
from loom import _structure
from loom.errors import LoomError, LoomValueError
from loom.optim import foreach
from loom.tensor import Tensor, take_written


class _Required:
    def __repr__(self) -> str:
        return "<required parameter>"


required = _Required()


_IMPL_FLAGS = {"foreach": None, "fused": None, "capturable": False, "differentiable": False}


def implementation_flags(*flags: str):
    """Class decorator: the optimiser takes PyTorch's implementation choices `flags` (of `foreach=`, `fused=`,
    `capturable=`, `differentiable=`) as keywords. loom has one implementation, so they change nothing
    but show in the parameter groups as in PyTorch; `differentiable=True` is refused."""
    def decorate(cls: type) -> type:
        init = cls.__init__

        @functools.wraps(init)
        def __init__(self, *args, **kwargs):
            given = {k: kwargs.pop(k) for k in flags if k in kwargs}
            if given.get("differentiable"):
                raise LoomValueError(f"loom.optim.{cls.__name__}: differentiable=True (autograd through the "
                                     "optimizer step) is not supported; loom's step is not differentiated")
            init(self, *args, **kwargs)
            for k in flags:
                value = given.get(k, self.defaults.get(k, _IMPL_FLAGS[k]))
                self.defaults[k] = value
                for g in self.param_groups:
                    if k in given or k not in g:
                        g[k] = value

        cls.__init__ = __init__  # type: ignore[method-assign]
        return cls
    return decorate


def _own_rule(cls: type) -> bool:
    """Whether the class giving `cls` its `_update_arrays` also gives it `_update` (no subclass changed the rule)."""
    for c in cls.__mro__:
        if "_update" in c.__dict__ or "_update_arrays" in c.__dict__:
            return "_update" in c.__dict__ and "_update_arrays" in c.__dict__
    return False


class Optimizer:
    """Base class of loom's optimisers, with PyTorch's interface.

    Parameters
    ----------
    params : iterable of Tensors or of dicts (parameter groups with their own options)
    defaults : dict of the optimiser's options, used where a group does not set one
    """

    def __init__(self, params: Iterable, defaults: dict[str, Any]) -> None:
        self.defaults = defaults
        # A defaultdict(dict) keyed by parameter, as PyTorch's: `opt.state[p]` is {} before p's first step.
        self.state: collections.defaultdict[Tensor, dict[str, Any]] = collections.defaultdict(dict)
        self.param_groups: list[dict[str, Any]] = []
        if isinstance(params, Tensor):
            raise TypeError(f"loom.optim.{type(self).__name__}: params must be an iterable of Tensors "
                            "or dicts, got a single Tensor")
        groups = list(params)
        if not groups:
            raise LoomValueError(f"loom.optim.{type(self).__name__}: got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for g in groups:
            self.add_param_group(g)

    def add_param_group(self, group: dict[str, Any]) -> None:
        params = group["params"]
        params = [params] if isinstance(params, Tensor) else list(params)
        for p in params:
            if not isinstance(p, Tensor):
                raise TypeError(f"loom.optim.{type(self).__name__}: can only optimise Tensors, "
                                f"got {type(p).__name__}")
            if not p.is_leaf:
                raise LoomValueError(f"loom.optim.{type(self).__name__}: can't optimise a non-leaf Tensor")
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in seen for p in params):
            raise LoomValueError(f"loom.optim.{type(self).__name__}: some parameters appear in more than "
                            "one parameter group")
        full = {"params": params}
        for k, v in self.defaults.items():
            if k in group:
                full[k] = group[k]
            elif v is required:
                raise LoomValueError(f"loom.optim.{type(self).__name__}: parameter group didn't specify a "
                                f"value of required optimization parameter {k}")
            else:
                full[k] = v
        for k, v in group.items():
            full.setdefault(k, v)
        self.param_groups.append(full)
        _structure.changed(self)  # A traced step that updated the old groups traces again.

    def zero_grad(self, set_to_none: bool = True) -> None:
        _structure.note(self)
        for g in self.param_groups:
            for p in g["params"]:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    p.grad = loom.zeros_like(p.grad)

    @staticmethod
    def _dyn(group: dict, key: str, index: int | None = None):
        """A numeric hyperparameter, read afresh on every call of a traced step."""
        from loom.function import dynamic_scalar
        from loom import dtypes as dt
        if index is None:
            return dynamic_scalar(lambda: group[key], dt.float64)
        return dynamic_scalar(lambda: group[key][index], dt.float64)

    @staticmethod
    def _static(group: dict, key: str):
        """Whether a hyperparameter is set: it shapes the computation, so a traced step retraces when it flips."""
        from loom.function import static_value
        return static_value(lambda: bool(group[key]))

    def _params_with_grad(self, group):
        return [p for p in group["params"] if p.grad is not None]

    def _finish_step(self) -> None:
        """Compute every updated parameter and state tensor in one pass (a step barrier)."""
        pending = []
        for g in self.param_groups:
            for p in g["params"]:
                pending.append(p)
                for v in self.state.get(p, {}).values():
                    if isinstance(v, Tensor):
                        pending.append(v)
        pending.extend(take_written())  # Module state the step updated (BatchNorm's running statistics).
        loom.realize(*pending)

    def step(self, closure=None):
        _structure.note(self)
        loss = None
        if closure is not None:
            with loom.enable_grad():
                loss = closure()
        with loom.no_grad():
            for group in self.param_groups:
                params = self._params_with_grad(group)
                if params and self._foreach_step(params, group):
                    continue
                for p in params:
                    g = p.grad
                    if self._static(group, "maximize"):
                        g = -g
                    if p.dtype.is_complex:
                        self._update_complex(p, g, group, self.state[p])
                        continue
                    self._update(p, g, group, self.state[p])
        self._finish_step()
        return loss

    # Keys of a group that `_update_arrays` reads; each must be a Python number (or a tuple of them).
    _foreach_keys: tuple[str, ...] = ()

    def _foreach_step(self, params: list[Tensor], group: dict) -> bool:
        """Update `params` on their arrays in one pass (loom/optim/foreach.py); False: use the graph path."""
        if not self._foreach_keys or not foreach.available() or not _own_rule(type(self)):
            return False
        for k in self._foreach_keys:
            v = group[k]
            if not all(type(x) in (int, float, bool) for x in (v if type(v) is tuple else (v,))):
                return False
        if not foreach.eligible(params, lambda p: self.state.get(p, {})):
            return False
        foreach.realize_all(params + [p._grad for p in params]
                            + [v for p in params for v in self.state.get(p, {}).values() if isinstance(v, Tensor)])
        for p in params:
            g = foreach.value(p._grad)
            if group["maximize"]:
                g = np.negative(g)
            self._update_arrays(p, g, group, self.state[p])
        return True

    def _update_arrays(self, p: Tensor, grad: np.ndarray, group: dict, state: dict) -> None:
        """`_update` on realised arrays with the same arithmetic (see loom/optim/foreach.py)."""
        raise NotImplementedError(f"{type(self).__name__} lists _foreach_keys but defines no _update_arrays")

    def _update(self, p: Tensor, grad: Tensor, group: dict, state: dict) -> None:
        raise NotImplementedError(f"{type(self).__name__} must define _update")

    def _update_complex(self, p: Tensor, grad: Tensor, group: dict, state: dict) -> None:
        """Update a complex parameter as its (real, imag) pairs, as PyTorch: the adaptive rules see each
        part's square, never g * g. State tensors stay complex, as PyTorch keeps them."""
        from loom.functional.complex import view_as_complex, view_as_real
        pairs = view_as_real(p)
        held = {k: view_as_real(v) if isinstance(v, Tensor) and v.dtype.is_complex else v for k, v in state.items()}
        self._update(pairs, view_as_real(grad), group, held)
        p.copy_(view_as_complex(pairs))
        for k, v in held.items():
            old = state.get(k)
            if isinstance(old, Tensor) and old.dtype.is_complex:
                old.copy_(view_as_complex(v))
            elif isinstance(v, Tensor) and tuple(v.shape) == tuple(pairs.shape) and v.dtype is pairs.dtype:
                state[k] = view_as_complex(v)  # A state tensor the rule just made, shaped like the pairs.
            else:
                state[k] = v

    # ------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """State and groups with parameters replaced by their index, as PyTorch lays it out."""
        index: dict[int, int] = {}
        groups = []
        for g in self.param_groups:
            packed = {k: v for k, v in g.items() if k != "params"}
            packed["params"] = []
            for p in g["params"]:
                index.setdefault(id(p), len(index))
                packed["params"].append(index[id(p)])
            groups.append(packed)
        state = {}
        for g in self.param_groups:
            for p in g["params"]:
                if p in self.state:
                    state[index[id(p)]] = {k: (v.detach() if isinstance(v, Tensor) else v)
                                           for k, v in self.state[p].items()}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups):
            raise LoomError(f"loom.optim.load_state_dict: the state has {len(groups)} parameter groups, "
                            f"the optimizer {len(self.param_groups)}")
        params = []
        for mine, theirs in zip(self.param_groups, groups):
            if len(mine["params"]) != len(theirs["params"]):
                raise LoomError("loom.optim.load_state_dict: a parameter group's size differs from the "
                                f"saved one ({len(mine['params'])} vs {len(theirs['params'])})")
            params.extend(zip(theirs["params"], mine["params"]))
        by_index = {}
        for idx, p in params:
            by_index[int(idx)] = p
        self.state = collections.defaultdict(dict)
        _structure.changed(self)  # New state tensors: a traced step that read the old ones traces again.
        for idx, st in state_dict["state"].items():
            p = by_index[int(idx)]
            restored = {}
            for k, v in st.items():
                if isinstance(v, Tensor):
                    if k != "step" and v.dtype.is_floating_point:
                        v = v.to(p.dtype)
                    v = loom.tensor(v.numpy(force=True), dtype=v.dtype) if v.is_leaf else v.detach()
                restored[k] = v
            self.state[p] = restored
        for mine, theirs in zip(self.param_groups, groups):
            for k, v in theirs.items():
                if k != "params":
                    mine[k] = copy.deepcopy(v)

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__} ("]
        for i, g in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            for k in sorted(k for k in g if k != "params"):
                lines.append(f"    {k}: {g[k]}")
        lines.append(")")
        return "\n".join(lines)
