"""One harness for op parity: the same test body runs in PyTorch and in loom.

A case is a body `fn(lib, *tensors)` written once against the PyTorch API; `lib`
is `torch` or `loom`. The harness builds both libraries' inputs from the same
NumPy arrays, runs the body in each, and compares outputs, first-order
gradients (for a shared random cotangent) and, when asked, second-order
gradients. The execution mode of loom's side is a parameter: the harness puts
loom's whole computation of a case (outputs, gradients, second-order
gradients) in one function and a mode runs it — eagerly, through the compiler
(`loom.backend("compiled")`), traced by `loom.function`, or traced and run
on the actor runtime (``runtime="actors"``, with the slow tests) — so every
case holds every mode to the same results without being rewritten.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable

import numpy as np

import loom

try:
    import torch
except ImportError:  # pragma: no cover - the parity suite needs the test extra
    torch = None

DEFAULT_TOL = {
    "float32": (1e-4, 1e-5),
    "float64": (1e-7, 1e-9),
    "float16": (1e-2, 1e-3),
    "bfloat16": (2e-2, 1e-2),
    "complex64": (1e-4, 1e-5),
    "complex128": (1e-7, 1e-9),
}


@dataclasses.dataclass
class Case:
    """One parity case.

    name: unique id. body: fn(lib, *tensors). inputs: NumPy arrays (or callables
    of an np.random.Generator returning them). grad: compare first-order
    gradients of float inputs. second_order: also compare gradients of the
    gradient. rtol/atol: override the dtype defaults; say why in `reason`.
    grad_inputs: indices of the inputs that require grad (default: every float).
    traceable: False where the output shape depends on the data.
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
    # False for ops whose output shape depends on data (nonzero, unique, boolean masks): under
    # loom.function they must raise loom's clear error instead of returning a result.
    traceable: bool = True

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
        v = v.resolve_conj().resolve_neg()  # PyTorch's lazy conjugate and negative views.
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
        wide = np.complex128 if w.dtype.kind == "c" else np.float64
        np.testing.assert_allclose(g.astype(wide), w.astype(wide), rtol=rtol, atol=atol,
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


def _loom_side(case: Case, n_in: int, diff_idx: list[int], grad_pos: list[int], v_pos: list[int], lib=loom):
    """The whole loom computation of a case as one function of (inputs, cotangents, vs).

    It returns the flat outputs, the first-order gradients and the second-order
    ones, so an execution mode (eager, compiled, traced) runs all of it. `lib` is
    the namespace the body gets: `loom`, or `loom.torch` (PyTorch's names over loom).
    """
    n_cot = len(diff_idx)

    def fn(*args):
        xs = list(args[:n_in])
        cots = list(args[n_in:n_in + n_cot])
        vs = list(args[n_in + n_cot:])
        flat = _flatten(case.body(lib, *xs))
        if not grad_pos or not diff_idx:
            return flat, [], []
        g_in = [xs[k] for k in grad_pos]
        grads = list(_grad(loom, [flat[i] for i in diff_idx], g_in, cots, case.second_order))
        if not v_pos:
            return flat, grads, []
        live = [(grads[k], v) for k, v in zip(v_pos, vs) if grads[k] is not None and grads[k].requires_grad]
        if not live:
            return flat, grads, [None] * len(g_in)
        second = list(_grad(loom, [g for g, _ in live], g_in, [v for _, v in live], False))
        return flat, grads, second
    return fn


def _run_eager(fn, args):
    return fn(*args)


def _realize_all(result):
    loom.realize(*[t for t in _flatten(result) if isinstance(t, loom.Tensor)])
    return result


class _SyncKernels:
    """Build C kernels before their first call, so the compiled modes really run generated code."""

    def __enter__(self):
        self.saved = os.environ.get("LOOM_CODEGEN_SYNC")
        os.environ["LOOM_CODEGEN_SYNC"] = "1"

    def __exit__(self, *exc):
        if self.saved is None:
            os.environ.pop("LOOM_CODEGEN_SYNC", None)
        else:
            os.environ["LOOM_CODEGEN_SYNC"] = self.saved
        return False


def _run_compiled(fn, args):
    with loom.backend("compiled"), _SyncKernels():
        return _realize_all(fn(*args))


def _run_traced(fn, args):
    traced = loom.function(fn, backend=os.environ.get("LOOM_TRACE_BACKEND", "c"))
    traced(*args)              # Warm-up call: eager.
    with _SyncKernels():
        return traced(*args)   # Traced, compiled and replayed.


def _run_actors(fn, args):
    """loom.function on the actor runtime: the graph partitioned into branch tasks.

    One call runs small branches in the caller's thread, as the compiler decides; with
    ``LOOM_PARITY_ACTORS_PARALLEL=1`` every branch runs on its own actor thread.
    """
    from loom.compiler import partition

    saved = partition.PARALLEL_MIN_WORK
    if os.environ.get("LOOM_PARITY_ACTORS_PARALLEL", "0") != "0":
        partition.PARALLEL_MIN_WORK = 0
    traced = loom.function(fn, runtime="actors")
    try:
        traced(*args)
        with _SyncKernels():
            return traced(*args)
    finally:
        partition.PARALLEL_MIN_WORK = saved
        traced.close()


# Execution modes of loom's side: each runs the case's whole loom computation.
MODES: dict[str, Callable[[Callable, list], Any]] = {
    "eager": _run_eager,
    "compiled": _run_compiled,
    "traced": _run_traced,
    "actors": _run_actors,   # A slow mode (pytest -m slow), or alone: LOOM_PARITY_MODES=actors.
    # loom.function through the JAX/XLA plugin: the first call eager, the second traced and run by XLA.
    "xla": lambda fn, args: [f(*args) for f in [loom.function(fn, backend="xla")] for _ in range(2)][-1],
}


def _check_grads(case: Case, got, want, what: str, order: int) -> None:
    for k, (lg, tg) in enumerate(zip(got, want)):
        if tg is None or lg is None:
            for v in (tg, lg):
                if v is not None:
                    assert float(np.abs(_to_numpy(v)).max(initial=0)) == 0.0, \
                        f"{case.name}: one side gives no {what} for input {k}, the other a nonzero one"
            continue
        rtol, atol = _tolerance(case, _dtype_name(tg), order=order)
        assert_close(case.name, lg, tg, rtol, atol, f"{what} of input {k}")


def _noise(rng, shape, dtype) -> np.ndarray:
    """A random cotangent of `shape` and `dtype` (with an imaginary part when `dtype` is complex)."""
    out = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        out = out + 1j * rng.standard_normal(shape)
    return np.asarray(out).astype(dtype)  # (A 0-d complex sum is a NumPy scalar, not an array.)


def run_case(case: Case, mode: str = "eager", seed: int = 0, lib=None) -> None:
    """Run `case` in PyTorch and in loom (under `mode`) and compare everything it defines.

    `lib` is the namespace loom's side of the body gets (default `loom`; `loom.torch` runs the same
    body through PyTorch's names).
    """
    assert torch is not None, "the parity suite needs torch (pip install -e .[test])"
    arrays = _materialise(case.inputs, seed)
    float_idx = [k for k, a in enumerate(arrays) if isinstance(a, np.ndarray) and a.dtype.kind in "fc"]
    grad_idx = sorted(set(case.grad_inputs if case.grad_inputs is not None else float_idx)) if case.grad else []

    # PyTorch first: it decides which outputs are differentiable and the cotangents' shapes.
    t_in = _make(torch, arrays, set(grad_idx))
    t_flat = _flatten(case.body(torch, *t_in))
    diff_idx = [i for i, to in enumerate(t_flat)
                if isinstance(to, torch.Tensor) and to.requires_grad
                and (to.dtype.is_floating_point or to.dtype.is_complex)] \
        if grad_idx else []
    rng = np.random.default_rng(seed + 1)
    cots = [_noise(rng, tuple(t_flat[i].shape), _to_numpy(t_flat[i]).dtype) for i in diff_idx]
    t_grads, t_second, vs, v_pos = [], [], [], []
    if diff_idx:
        t_inputs = [t_in[k] for k in grad_idx]
        t_grads = list(_grad(torch, [t_flat[i] for i in diff_idx], t_inputs,
                             [torch.from_numpy(c) for c in cots], case.second_order))
        if case.second_order:
            v_pos = [k for k, tg in enumerate(t_grads) if tg is not None and tg.requires_grad]
            vs = [_noise(rng, tuple(t_grads[k].shape), _to_numpy(t_grads[k]).dtype) for k in v_pos]
            if v_pos:
                t_second = list(_grad(torch, [t_grads[k] for k in v_pos], t_inputs,
                                      [torch.from_numpy(v) for v in vs], False))

    l_in = _make(loom, arrays, set(grad_idx))
    fn = _loom_side(case, len(l_in), diff_idx, grad_idx, v_pos, loom if lib is None else lib)
    args = l_in + [loom.tensor(c) for c in cots] + [loom.tensor(v) for v in vs]
    if mode in ("traced", "xla", "actors") and not case.traceable:
        import pytest
        with pytest.raises(loom.LoomError, match="loom.function: a traced function read the value"):
            MODES[mode](fn, args)
        return
    l_flat, l_grads, l_second = MODES[mode](fn, args)

    assert len(t_flat) == len(l_flat), f"{case.name}: {len(l_flat)} outputs, PyTorch gives {len(t_flat)}"
    for k, (lo, to) in enumerate(zip(l_flat, t_flat)):
        rtol, atol = _tolerance(case, _dtype_name(to))
        assert_close(case.name, lo, to, rtol, atol, f"output {k}")
    if diff_idx:
        for k, (lg, tg) in enumerate(zip(l_grads, t_grads)):
            if tg is not None:
                assert lg is not None, f"{case.name}: loom gives no gradient for input {k}"
        _check_grads(case, l_grads, t_grads, "gradient", 1)
    if t_second:
        _check_grads(case, l_second, t_second, "second-order gradient", 2)


# ---------------------------------------------------------------- input helpers

def randn(*shape, dtype=np.float32):
    """An input maker: standard normal values of `shape`."""
    return lambda rng: rng.standard_normal(shape).astype(dtype)


def crandn(*shape, dtype=np.complex64):
    """An input maker: complex values with standard normal real and imaginary parts."""
    return lambda rng: (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


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
