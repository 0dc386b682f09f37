"""Op parity between loom.tf and TensorFlow: one body `fn(tf, *tensors)` runs in both.

The body is written once against TensorFlow's API; `tf` is the real
TensorFlow or `loom.tf`. Both sides get the same NumPy inputs, compute the
outputs and, for float inputs, the gradient of sum(output * cotangent) through
their own `GradientTape`. loom's side (outputs and tape gradients) runs under
the parity suite's execution modes (eager, compiled, traced by loom.function).
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as real_tf  # noqa: E402  (the oracle; imported once per test process)

import loom  # noqa: E402
import loom.tf as ltf  # noqa: E402
from tests.parity.harness import MODES  # noqa: E402


@dataclasses.dataclass
class Case:
    """One op case: `body(tf, *inputs)`; inputs are arrays or callables of an np.random.Generator."""

    name: str
    body: Callable[..., Any]
    inputs: tuple = ()
    grad: bool = True
    rtol: float = 1e-5
    atol: float = 1e-5
    traceable: bool = True

    def __str__(self) -> str:
        return self.name


def flat(out) -> list:
    if isinstance(out, (list, tuple)):
        return [x for o in out for x in flat(o)]
    return [out]


def to_np(v) -> np.ndarray:
    if isinstance(v, loom.Tensor):
        return v.detach().numpy()
    if hasattr(v, "numpy"):
        return v.numpy()
    return np.asarray(v)


def dtype_name(v) -> str:
    if isinstance(v, loom.Tensor):
        return v.dtype.name
    return v.dtype.name


def _tf_side(case, arrays, grad_idx, cots):
    xs = [real_tf.constant(a) if isinstance(a, np.ndarray) else a for a in arrays]
    with real_tf.GradientTape() as tape:
        for k in grad_idx:
            tape.watch(xs[k])
        outs = flat(case.body(real_tf, *xs))
        target = None
        if cots is not None:
            for o, c in zip(outs, cots):
                if c is not None:
                    term = real_tf.cast(real_tf.reduce_sum(o * c), real_tf.float64)
                    target = term if target is None else target + term
    grads = tape.gradient(target, [xs[k] for k in grad_idx]) if target is not None else []
    return outs, grads


def _loom_side(case, arrays, grad_idx, cots, mode):
    tensor_pos = [k for k, a in enumerate(arrays) if isinstance(a, np.ndarray)]
    cot_list = [c for c in (cots or []) if c is not None]

    def fn(*args):
        xs = list(arrays)
        for k, t in zip(tensor_pos, args[:len(tensor_pos)]):
            xs[k] = t
        cs = list(args[len(tensor_pos):])
        with ltf.GradientTape() as tape:
            for k in grad_idx:
                tape.watch(xs[k])
            outs = flat(case.body(ltf, *xs))
            target = None
            if cots is not None:
                it = iter(cs)
                for o, c in zip(outs, cots):
                    if c is not None:
                        term = ltf.cast(ltf.reduce_sum(o * next(it)), ltf.float64)
                        target = term if target is None else target + term
        grads = tape.gradient(target, [xs[k] for k in grad_idx]) if target is not None else []
        return outs, grads
    args = [loom.tensor(np.array(arrays[k])) for k in tensor_pos] + [loom.tensor(c) for c in cot_list]
    return MODES[mode](fn, args)


def run_case(case: Case, mode: str = "eager", seed: int = 0) -> None:
    """Run `case` in TensorFlow and in loom.tf (under `mode`) and compare outputs and tape gradients."""
    if mode != "eager" and not case.traceable:
        return
    rng = np.random.default_rng(seed)
    arrays = [x(rng) if callable(x) else x for x in case.inputs]
    float_idx = [k for k, a in enumerate(arrays) if isinstance(a, np.ndarray) and a.dtype.kind == "f"]
    grad_idx = float_idx if case.grad else []
    t_outs, _ = _tf_side(case, arrays, [], None)
    cots = None
    if grad_idx:
        crng = np.random.default_rng(seed + 1)
        cots = [crng.standard_normal(tuple(o.shape)).astype(o.dtype.as_numpy_dtype)
                if o.dtype.is_floating else None for o in t_outs]
        if all(c is None for c in cots):
            cots, grad_idx = None, []
    t_outs, t_grads = _tf_side(case, arrays, grad_idx, cots)
    l_outs, l_grads = _loom_side(case, arrays, grad_idx, cots, mode)
    assert len(l_outs) == len(t_outs), f"{case.name}: {len(l_outs)} outputs, TensorFlow gives {len(t_outs)}"
    for k, (lo, to) in enumerate(zip(l_outs, t_outs)):
        compare(f"{case.name} output {k}", lo, to, case.rtol, case.atol)
    for k, (lg, tg) in enumerate(zip(l_grads, t_grads)):
        if tg is None or lg is None:
            other = lg if tg is None else tg
            assert other is None or not np.any(to_np(other)), f"{case.name}: gradient {k} is None on one side only"
            continue
        if hasattr(tg, "values") and hasattr(tg, "indices"):  # IndexedSlices from gathers.
            tg = real_tf.convert_to_tensor(tg)
        compare(f"{case.name} gradient {k}", lg, tg, case.rtol * 10, case.atol * 10)


def compare(what: str, got, want, rtol: float, atol: float) -> None:
    """dtype, shape and values of a loom result against TensorFlow's."""
    assert dtype_name(got) == dtype_name(want), f"{what}: dtype {dtype_name(got)}, TensorFlow {dtype_name(want)}"
    g, w = to_np(got), to_np(want)
    assert g.shape == w.shape, f"{what}: shape {g.shape}, TensorFlow {w.shape}"
    if g.dtype.kind in "biu":
        np.testing.assert_array_equal(g, w, err_msg=what)
    else:
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol, err_msg=what)
