"""Module parity: build a layer in PyTorch and in loom, share the weights, compare everything.

`check_module(case)` builds `case.make(torch)` and `case.make(loom)`, checks that
the state_dict keys (and order) are identical, loads PyTorch's state_dict into
loom's module through `load_state_dict`, then for each mode (train/eval) runs
the same inputs through both and compares the outputs, the gradients of every
parameter and float input for a shared random cotangent, and the buffers after
the forward pass (BatchNorm's running statistics).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np
import torch

import loom
from tests.parity.harness import _flatten, assert_close


@dataclasses.dataclass
class ModuleCase:
    """make(lib) -> module (lib is torch or loom); inputs: arrays or callables of a NumPy Generator.

    call(module, *inputs) runs the module (default: module(*inputs)). modes: which of
    "train"/"eval" to compare. rtol/atol: tolerances for outputs and gradients (say why in
    `reason` when loosened). steps: forward passes per mode (BatchNorm statistics).
    """

    name: str
    make: Callable[[Any], Any]
    inputs: tuple = ()
    call: Callable[..., Any] | None = None
    modes: tuple[str, ...] = ("train", "eval")
    rtol: float = 1e-4
    atol: float = 1e-5
    reason: str = ""
    grad: bool = True
    steps: int = 1

    def __str__(self) -> str:
        return self.name


def randn(*shape, scale: float = 1.0):
    return lambda rng: (rng.standard_normal(shape) * scale).astype(np.float32)


def ints(low: int, high: int, *shape):
    return lambda rng: rng.integers(low, high, size=shape).astype(np.int64)


def uniform(low: float, high: float, *shape):
    return lambda rng: rng.uniform(low, high, size=shape).astype(np.float32)


def const(value):
    """An input passed as is (a bool mask array, a Python value)."""
    return lambda rng: value


def to_loom_state(sd) -> dict:
    return {k: loom.tensor(v.detach().numpy()) for k, v in sd.items()}


def build_pair(case: ModuleCase):
    torch.manual_seed(0)
    tm = case.make(torch)
    lm = case.make(loom)
    t_keys, l_keys = list(tm.state_dict()), list(lm.state_dict())
    assert l_keys == t_keys, f"{case.name}: state_dict keys {l_keys} but PyTorch has {t_keys}"
    result = lm.load_state_dict(to_loom_state(tm.state_dict()))
    assert not result.missing_keys and not result.unexpected_keys
    return tm, lm


def _make_inputs(lib, arrays):
    out = []
    for a in arrays:
        if isinstance(a, np.ndarray):
            t = torch.from_numpy(np.array(a)) if lib is torch else loom.tensor(np.array(a))
            if a.dtype.kind == "f":
                t.requires_grad_(True)
            out.append(t)
        else:
            out.append(a)
    return out


def _tensors(out, lib_tensor) -> list:
    return [o for o in _flatten(out) if isinstance(o, lib_tensor)]


def check_module(case: ModuleCase, seed: int = 0) -> None:
    """Compare one module case between PyTorch and loom (see the module docstring)."""
    tm, lm = build_pair(case)
    rng = np.random.default_rng(seed)
    arrays = [x(rng) if callable(x) else x for x in case.inputs]
    call = case.call or (lambda m, *xs: m(*xs))
    for mode in case.modes:
        tm.train(mode == "train")
        lm.train(mode == "train")
        assert lm.training == (mode == "train")
        for step in range(case.steps):
            what = f"{case.name} [{mode}, step {step}]"
            t_in, l_in = _make_inputs(torch, arrays), _make_inputs(loom, arrays)
            t_out, l_out = call(tm, *t_in), call(lm, *l_in)
            t_flat, l_flat = _flatten(t_out), _flatten(l_out)
            assert len(t_flat) == len(l_flat), f"{what}: {len(l_flat)} outputs, PyTorch gives {len(t_flat)}"
            for k, (lo, to) in enumerate(zip(l_flat, t_flat)):
                if to is None:
                    assert lo is None, f"{what}: output {k} should be None"
                    continue
                assert_close(what, lo, to, case.rtol, case.atol, f"output {k}")
            for (name, lb), (_, tb) in zip(lm.named_buffers(), tm.named_buffers()):
                assert_close(what, lb, tb, case.rtol, case.atol, f"buffer {name} after forward")
            if not case.grad:
                continue
            pairs = [(lo, to) for lo, to in zip(l_flat, t_flat)
                     if isinstance(to, torch.Tensor) and to.requires_grad]
            if not pairs:
                continue
            cots = [rng.standard_normal(tuple(to.shape)).astype(np.float32) for _, to in pairs]
            t_params = [p for _, p in tm.named_parameters() if p.requires_grad]
            l_named = [(n, p) for n, p in lm.named_parameters() if p.requires_grad]
            t_leaves = t_params + [t for t in t_in if isinstance(t, torch.Tensor) and t.requires_grad]
            l_leaves = [p for _, p in l_named] + [t for t in l_in if isinstance(t, loom.Tensor) and t.requires_grad]
            names = [n for n, _ in l_named] + [f"input {i}" for i, t in enumerate(l_in)
                                                 if isinstance(t, loom.Tensor) and t.requires_grad]
            t_grads = torch.autograd.grad([to for _, to in pairs], t_leaves, [torch.from_numpy(c) for c in cots],
                                          allow_unused=True)
            l_grads = loom.autograd.grad([lo for lo, _ in pairs], l_leaves, [loom.tensor(c) for c in cots],
                                         allow_unused=True)
            for name, lg, tg in zip(names, l_grads, t_grads):
                if tg is None:
                    assert lg is None or float(np.abs(lg.numpy()).max(initial=0)) == 0.0, \
                        f"{what}: PyTorch gives no gradient for {name}, loom a nonzero one"
                    continue
                assert lg is not None, f"{what}: loom gives no gradient for {name}"
                assert_close(what, lg, tg, case.rtol, case.atol, f"gradient of {name}")
