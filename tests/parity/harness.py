"""One harness for op parity: the same test body runs in PyTorch and in loom.

A case is a body `fn(lib, *tensors)` written once against the PyTorch API; `lib`
is `torch` or `loom`. The harness builds both libraries' inputs from the same
NumPy arrays, runs the body in each, and compares outputs, first-order
gradients (for a shared random cotangent) and, when asked, second-order
gradients. The execution mode of loom's side is a parameter: a mode is a
function that takes the body (already bound to loom) and returns a callable
with the same signature, so the compiler's compiled and traced modes plug in
through `MODES` without touching a case.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np

import loom

try:
    import torch
except ImportError:  # pragma: no cover - the parity suite needs the test extra
    torch = None

# Execution modes of loom's side. Later issues register "compiled" and "traced".
MODES: dict[str, Callable[[Callable], Callable]] = {
    "eager": lambda fn: fn,
}

DEFAULT_TOL = {
    "float32": (1e-4, 1e-5),
    "float64": (1e-7, 1e-9),
    "float16": (1e-2, 1e-3),
    "bfloat16": (2e-2, 1e-2),
}


@dataclasses.dataclass
class Case:
    """One parity case.

    name: unique id. body: fn(lib, *tensors). inputs: NumPy arrays (or callables
    of an np.random.Generator returning them). grad: compare first-order
    gradients of float inputs. second_order: also compare gradients of the
    gradient. rtol/atol: override the dtype defaults; say why in `reason`.
    grad_inputs: indices of the inputs that require grad (default: every float).
    """

    name: str
    body: Callable[..., Any]
    inputs: tuple = ()
    grad: bool = True
    second_order: bool = False
    rtol: float | None = None
    atol: float | None = None
    reason: str = ""
    grad_inputs: tuple[int, ...] | None = None
    modes: tuple[str, ...] | None = None  # None: every registered mode.

    def __str__(self) -> str:
        return self.name


def _materialise(inputs, seed: int):
    rng = np.random.default_rng(seed)
    return [x(rng) if callable(x) else x for x in inputs]


def _flatten(out) -> list:
    if isinstance(out, (list, tuple)):
        items = []
        for o in out:
            items.extend(_flatten(o))
        return items
    return [out]


def _to_numpy(v):
    if torch is not None and isinstance(v, torch.Tensor):
        v = v.detach()
        if v.dtype == torch.bfloat16:
            v = v.float()
        if v._is_zerotensor():  # PyTorch's lazily-zero gradients (e.g. of sign).
            return np.zeros(tuple(v.shape), dtype=_to_numpy(torch.zeros((), dtype=v.dtype)).dtype)
        return v.numpy()
    if isinstance(v, loom.Tensor):
        return v.detach().numpy()
    return np.asarray(v)


def _dtype_name(v) -> str:
    if torch is not None and isinstance(v, torch.Tensor):
        return str(v.dtype).split(".")[-1]
    if isinstance(v, loom.Tensor):
        return v.dtype.name
    return type(v).__name__


def _tolerance(case: Case, dtype_name: str, order: int = 0) -> tuple[float, float]:
    rtol, atol = DEFAULT_TOL.get(dtype_name, (0.0, 0.0))
    if order:  # Gradients accumulate more rounding than forward values.
        rtol, atol = rtol * 10, atol * 10
    return (case.rtol if case.rtol is not None else rtol, case.atol if case.atol is not None else atol)


def assert_close(name: str, got, want, rtol: float, atol: float, what: str) -> None:
    """Compare one loom value with PyTorch's, with dtype, shape and value checks."""
    gd, wd = _dtype_name(got), _dtype_name(want)
    if isinstance(want, (bool, int, float)) and not isinstance(want, np.generic):
        assert type(got) is type(want) or isinstance(got, type(want)), \
            f"{name}: {what} is {type(got).__name__}, PyTorch gives {type(want).__name__}"
        if isinstance(want, float):
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=f"{name}: {what}")
        else:
            assert got == want, f"{name}: {what} {got!r} != PyTorch {want!r}"
        return
    assert gd == wd, f"{name}: {what} dtype {gd} but PyTorch gives {wd}"
    g, w = _to_numpy(got), _to_numpy(want)
    assert g.shape == w.shape, f"{name}: {what} shape {g.shape} but PyTorch gives {w.shape}"
    if g.dtype.kind in "biu":
        np.testing.assert_array_equal(g, w, err_msg=f"{name}: {what}")
    else:
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol,
                                   equal_nan=True, err_msg=f"{name}: {what}")


def _make(lib, arrays, grad_idx):
    out = []
    for k, a in enumerate(arrays):
        if not isinstance(a, np.ndarray):
            out.append(a)
            continue
        if lib is torch:
            t = torch.from_numpy(np.array(a))
        else:
            t = loom.tensor(np.array(a))
        if k in grad_idx:
            t.requires_grad_(True)
        out.append(t)
    return out


def _grad(lib, outputs, inputs, cotangents, create_graph):
    if lib is torch:
        return torch.autograd.grad(outputs, inputs, cotangents, create_graph=create_graph,
                                   allow_unused=True)
    return loom.autograd.grad(outputs, inputs, cotangents, create_graph=create_graph, allow_unused=True)


def run_case(case: Case, mode: str = "eager", seed: int = 0) -> None:
    """Run `case` in PyTorch and in loom (under `mode`) and compare everything it defines."""
    assert torch is not None, "the parity suite needs torch (pip install -e .[test])"
    arrays = _materialise(case.inputs, seed)
    float_idx = [k for k, a in enumerate(arrays) if isinstance(a, np.ndarray) and a.dtype.kind == "f"]
    grad_idx = set(case.grad_inputs if case.grad_inputs is not None else float_idx) if case.grad else set()

    t_in = _make(torch, arrays, grad_idx)
    t_out = case.body(torch, *t_in)
    l_in = _make(loom, arrays, grad_idx)
    l_fn = MODES[mode](lambda *xs: case.body(loom, *xs))
    l_out = l_fn(*l_in)

    t_flat, l_flat = _flatten(t_out), _flatten(l_out)
    assert len(t_flat) == len(l_flat), f"{case.name}: {len(l_flat)} outputs, PyTorch gives {len(t_flat)}"
    for k, (lo, to) in enumerate(zip(l_flat, t_flat)):
        rtol, atol = _tolerance(case, _dtype_name(to))
        assert_close(case.name, lo, to, rtol, atol, f"output {k}")

    if not grad_idx:
        return
    diff = [(lo, to) for lo, to in zip(l_flat, t_flat)
            if isinstance(to, torch.Tensor) and to.requires_grad and to.dtype.is_floating_point]
    if not diff:
        return
    rng = np.random.default_rng(seed + 1)
    cots = [rng.standard_normal(tuple(to.shape)).astype(_to_numpy(to).dtype) for _, to in diff]
    t_inputs = [t_in[k] for k in sorted(grad_idx)]
    l_inputs = [l_in[k] for k in sorted(grad_idx)]
    t_grads = _grad(torch, [to for _, to in diff], t_inputs, [torch.from_numpy(c) for c in cots],
                    case.second_order)
    l_grads = _grad(loom, [lo for lo, _ in diff], l_inputs, [loom.tensor(c) for c in cots],
                    case.second_order)
    for k, (lg, tg) in enumerate(zip(l_grads, t_grads)):
        if tg is None:
            if lg is not None:
                assert float(np.abs(_to_numpy(lg)).max(initial=0)) == 0.0, \
                    f"{case.name}: PyTorch gives no gradient for input {k}, loom a nonzero one"
            continue
        assert lg is not None, f"{case.name}: loom gives no gradient for input {k}"
        rtol, atol = _tolerance(case, _dtype_name(tg), order=1)
        assert_close(case.name, lg, tg, rtol, atol, f"gradient of input {k}")

    if not case.second_order:
        return
    # Second order: gradient of <grad, v> with respect to the inputs.
    pairs = [(lg, tg) for lg, tg in zip(l_grads, t_grads) if tg is not None and tg.requires_grad]
    if not pairs:
        return
    vs = [rng.standard_normal(tuple(tg.shape)).astype(_to_numpy(tg).dtype) for _, tg in pairs]
    t2 = _grad(torch, [tg for _, tg in pairs], t_inputs, [torch.from_numpy(v) for v in vs], False)
    # A loom gradient with no history is constant: its second-order gradient is zero.
    live = [(lg, v) for (lg, _), v in zip(pairs, vs) if lg.requires_grad]
    if live:
        l2 = _grad(loom, [lg for lg, _ in live], l_inputs, [loom.tensor(v) for _, v in live], False)
    else:
        l2 = (None,) * len(l_inputs)
    for k, (lg, tg) in enumerate(zip(l2, t2)):
        if tg is None or lg is None:
            for v in (tg, lg):
                if v is not None:
                    assert float(np.abs(_to_numpy(v)).max(initial=0)) == 0.0, \
                        f"{case.name}: one side gives no second-order gradient for input {k}, the other a nonzero one"
            continue
        rtol, atol = _tolerance(case, _dtype_name(tg), order=2)
        assert_close(case.name, lg, tg, rtol, atol, f"second-order gradient of input {k}")


# ---------------------------------------------------------------- input helpers

def randn(*shape, dtype=np.float32):
    """An input maker: standard normal values of `shape`."""
    return lambda rng: rng.standard_normal(shape).astype(dtype)


def uniform(*shape, low=-1.0, high=1.0, dtype=np.float32):
    return lambda rng: rng.uniform(low, high, shape).astype(dtype)


def positive(*shape, low=0.1, high=2.0, dtype=np.float32):
    return lambda rng: rng.uniform(low, high, shape).astype(dtype)


def ints(*shape, low=0, high=10, dtype=np.int64):
    return lambda rng: rng.integers(low, high, shape).astype(dtype)


def bools(*shape, p=0.5):
    return lambda rng: rng.random(shape) < p


def distinct(*shape, dtype=np.float32):
    """Values with no ties (for max/sort/argmax, whose gradients route by position)."""
    n = int(np.prod(shape)) if shape else 1
    return lambda rng: (rng.permutation(n).reshape(shape).astype(dtype) * 0.37 - n * 0.1)
