"""Random chains of elementwise, reduce and movement ops: loom against a NumPy oracle, gradients against torch.

Each step of a chain is an `Op`: one body written against the PyTorch API (run
with loom and with torch) and its NumPy oracle beside it. Hypothesis draws the
input shape and dtype, then one op at a time among those that fit the current
shape, so every chain is valid by construction.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import loom


@dataclasses.dataclass
class Op:
    name: str
    body: Callable  # body(lib, x) with lib torch or loom
    oracle: Callable  # oracle(x) on NumPy arrays
    shape: tuple

    def __repr__(self) -> str:
        return self.name


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


# Smooth (or kink-at-zero-only) unary functions with bounded outputs, so long chains stay finite.
UNARY = {
    "tanh": (lambda m, x: m.tanh(x), np.tanh),
    "sin": (lambda m, x: m.sin(x), np.sin),
    "cos": (lambda m, x: m.cos(x), np.cos),
    "sigmoid": (lambda m, x: m.sigmoid(x), _sigmoid),
    "neg": (lambda m, x: -x, np.negative),
    "abs": (lambda m, x: m.abs(x), np.abs),
    "relu": (lambda m, x: m.relu(x), lambda x: np.maximum(x, 0)),
    "square": (lambda m, x: x * x * 0.5, lambda x: x * x * 0.5),
    "exp_tanh": (lambda m, x: m.exp(m.tanh(x)), lambda x: np.exp(np.tanh(x))),
    "log1p_sq": (lambda m, x: m.log1p(x * x), lambda x: np.log1p(x * x)),
    "affine": (lambda m, x: x * 0.75 - 0.25, lambda x: x * 0.75 - 0.25),
    "clamp": (lambda m, x: m.clamp(x, -0.8, 0.9), lambda x: np.clip(x, -0.8, 0.9)),
    "sqrt_soft": (lambda m, x: m.sqrt(x * x + 1.0), lambda x: np.sqrt(x * x + 1.0)),
}

BINARY = {
    "add": (lambda m, x, y: x + y, np.add),
    "sub": (lambda m, x, y: x - y, np.subtract),
    "mul": (lambda m, x, y: x * y, np.multiply),
    "div": (lambda m, x, y: x / (m.abs(y) + 1.0), lambda x, y: x / (np.abs(y) + 1.0)),
    "maximum": (lambda m, x, y: m.maximum(x, y), np.maximum),
    "minimum": (lambda m, x, y: m.minimum(x, y), np.minimum),
    "where": (lambda m, x, y: m.where(x > y, x, y * 0.5), lambda x, y: np.where(x > y, x, y * 0.5)),
}

REDUCE = {
    "sum": (lambda m, x, d, k: x.sum(dim=d, keepdim=k), lambda x, d, k: np.sum(x, axis=d, keepdims=k)),
    "mean": (lambda m, x, d, k: x.mean(dim=d, keepdim=k), lambda x, d, k: np.mean(x, axis=d, keepdims=k)),
    "amax": (lambda m, x, d, k: m.amax(x, dim=d, keepdim=k), lambda x, d, k: np.max(x, axis=d, keepdims=k)),
    "amin": (lambda m, x, d, k: m.amin(x, dim=d, keepdim=k), lambda x, d, k: np.min(x, axis=d, keepdims=k)),
}

MAX_NUMEL = 256


def _factorizations(n: int, parts: int) -> list[tuple]:
    if parts == 1:
        return [(n,)]
    out = []
    for f in range(1, n + 1):
        if n % f == 0:
            out += [(f,) + rest for rest in _factorizations(n // f, parts - 1)]
    return out


@st.composite
def unary_op(draw, shape):
    name = draw(st.sampled_from(sorted(UNARY)))
    body, oracle = UNARY[name]
    return Op(name, body, oracle, shape)


@st.composite
def binary_op(draw, shape, seed):
    """The other operand broadcasts: a suffix of the shape with some dims set to 1, or extra leading dims."""
    name = draw(st.sampled_from(sorted(BINARY)))
    body, oracle = BINARY[name]
    keep = draw(st.integers(0, len(shape)))
    other = [1 if draw(st.booleans()) else s for s in shape[len(shape) - keep:]]
    lead = [] if int(np.prod(shape)) * 3 > MAX_NUMEL else draw(st.lists(st.integers(1, 3), max_size=1))
    other_shape = tuple(lead + [1] * (len(shape) - keep) + other) if lead else tuple(other)
    flip = draw(st.booleans())
    y = np.random.default_rng(seed).standard_normal(other_shape)
    out_shape = tuple(np.broadcast_shapes(shape, other_shape))

    def lib_body(m, x, y=y, flip=flip):
        yt = (torch.tensor(y, dtype=x.dtype) if m is torch else loom.tensor(y, dtype=x.dtype))
        return body(m, yt, x) if flip else body(m, x, yt)

    def np_oracle(x, y=y, flip=flip):
        y = y.astype(x.dtype)
        return oracle(y, x) if flip else oracle(x, y)
    return Op(f"{name}{'_r' if flip else ''}{other_shape}", lib_body, np_oracle, out_shape)


@st.composite
def reduce_op(draw, shape):
    name = draw(st.sampled_from(sorted(REDUCE)))
    body, oracle = REDUCE[name]
    ndim = len(shape)
    dims = tuple(sorted(draw(st.sets(st.integers(0, ndim - 1), min_size=1, max_size=ndim))))
    if name in ("amax", "amin") and any(shape[d] == 0 for d in dims):
        name, (body, oracle) = "sum", REDUCE["sum"]
    keepdim = draw(st.booleans())
    negative = draw(st.booleans())
    lib_dims = tuple(d - ndim for d in dims) if negative else dims
    out_shape = tuple(1 if i in dims else s for i, s in enumerate(shape)) if keepdim else \
        tuple(s for i, s in enumerate(shape) if i not in dims)
    return Op(f"{name}{lib_dims}{'k' if keepdim else ''}", lambda m, x: body(m, x, lib_dims, keepdim),
              lambda x: np.asarray(oracle(x, dims, keepdim)), out_shape)


@st.composite
def movement_op(draw, shape):
    ndim, numel = len(shape), int(np.prod(shape))
    kinds = ["reshape"]
    if ndim >= 1:
        kinds += ["permute", "slice", "flip", "pad"]
    if numel * 2 <= MAX_NUMEL:
        kinds.append("expand")
    kind = draw(st.sampled_from(kinds))
    if kind == "reshape":
        if numel == 0:
            target = draw(st.sampled_from([(0,), (1, 0), (0, 3), (2, 0, 1)]))
        else:
            parts = draw(st.integers(0 if numel == 1 else 1, 4))
            target = draw(st.sampled_from(_factorizations(numel, parts))) if parts else ()
        if target and numel and draw(st.booleans()):
            i = draw(st.integers(0, len(target) - 1))
            lib_target = target[:i] + (-1,) + target[i + 1:]
        else:
            lib_target = target
        return Op(f"reshape{lib_target}", lambda m, x: x.reshape(lib_target), lambda x: x.reshape(target), target)
    if kind == "permute":
        perm = tuple(draw(st.permutations(range(ndim))))
        return Op(f"permute{perm}", lambda m, x: x.permute(*perm), lambda x: np.transpose(x, perm),
                  tuple(shape[p] for p in perm))
    if kind == "slice":
        d = draw(st.integers(0, ndim - 1))
        n = shape[d]
        start = draw(st.integers(-n, n)) if n else 0
        stop = draw(st.integers(-n, n)) if n else 0
        step = draw(st.integers(1, 3))
        idx = (slice(None),) * d + (slice(start, stop, step),)
        out = np.empty(shape)[idx].shape
        return Op(f"slice(d{d},{start}:{stop}:{step})", lambda m, x: x[idx], lambda x: x[idx], out)
    if kind == "flip":
        dims = tuple(draw(st.sets(st.integers(0, ndim - 1), min_size=1)))
        return Op(f"flip{dims}", lambda m, x: m.flip(x, dims), lambda x: np.flip(x, dims), shape)
    if kind == "pad":
        k = draw(st.integers(1, min(ndim, 2)))
        pads = [draw(st.integers(0, 2)) for _ in range(2 * k)]
        value = draw(st.sampled_from([0.0, 1.5]))
        if int(np.prod([s + pads[2 * (ndim - 1 - i)] + pads[2 * (ndim - 1 - i) + 1] if i >= ndim - k else s
                        for i, s in enumerate(shape)])) > MAX_NUMEL:
            pads = [0] * (2 * k)
        np_pads = [(0, 0)] * (ndim - k) + [(pads[2 * j], pads[2 * j + 1]) for j in reversed(range(k))]
        out = tuple(s + lo + hi for s, (lo, hi) in zip(shape, np_pads))
        return Op(f"pad{pads}={value}", lambda m, x: m.nn.functional.pad(x, pads, value=value),
                  lambda x: np.pad(x, np_pads, constant_values=value), out)
    # expand: grow size-1 dims and maybe add a leading one.
    lead = draw(st.lists(st.integers(1, 2), max_size=1))
    grown = [draw(st.integers(1, 3)) if s == 1 else s for s in shape]
    target = tuple(lead + grown)
    lib_target = tuple(lead + [-1 if g == s and draw(st.booleans()) else g for g, s in zip(grown, shape)])
    return Op(f"expand{lib_target}", lambda m, x: x.expand(lib_target),
              lambda x: np.broadcast_to(x, target), target)


@st.composite
def chains(draw):
    """(input shape, dtype, seed, ops): 1 to 6 ops, each fitting the shape the previous one left."""
    ndim = draw(st.integers(0, 4))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=ndim, max_size=ndim)))
    if ndim and draw(st.integers(0, 9)) == 0:
        shape = shape[:-1] + (0,)  # Sometimes a zero-size tensor.
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    seed = draw(st.integers(0, 2 ** 31 - 1))
    ops, cur = [], shape
    for k in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["unary", "binary", "movement"] + (["reduce"] if cur else [])))
        if kind == "unary":
            op = draw(unary_op(cur))
        elif kind == "binary":
            op = draw(binary_op(cur, seed + k))
        elif kind == "reduce":
            op = draw(reduce_op(cur))
        else:
            op = draw(movement_op(cur))
        ops.append(op)
        cur = op.shape
    return shape, dtype, seed, ops


def run_chain(lib, x, ops):
    for op in ops:
        x = op.body(lib, x)
    return x


@settings(max_examples=200, derandomize=True, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(chains())
def test_random_chain_matches_numpy_and_torch(chain):
    shape, dtype, seed, ops = chain
    out_shape = ops[-1].shape
    x_np = np.random.default_rng(seed).standard_normal(shape).astype(dtype)

    # Forward: loom against the NumPy oracle.
    want = x_np
    for op in ops:
        want = np.asarray(op.oracle(want))
    got = run_chain(loom, loom.tensor(x_np), ops)
    assert tuple(got.shape) == want.shape == out_shape, f"shape {tuple(got.shape)} vs oracle {want.shape}: {ops}"
    assert got.dtype.name == np.dtype(dtype).name
    rtol, atol = (2e-5, 2e-6) if dtype == np.float32 else (1e-12, 1e-13)
    np.testing.assert_allclose(got.numpy(), want, rtol=rtol, atol=atol, err_msg=f"chain {ops}")

    # Backward: the gradient of a weighted sum of the output, against torch.
    w = np.random.default_rng(seed + 1).standard_normal(out_shape).astype(dtype)
    tx = torch.tensor(x_np, requires_grad=True)
    (run_chain(torch, tx, ops) * torch.tensor(w)).sum().backward()
    lx = loom.tensor(x_np, requires_grad=True)
    (run_chain(loom, lx, ops) * loom.tensor(w)).sum().backward()
    np.testing.assert_allclose(lx.grad.numpy(), tx.grad.numpy(), rtol=rtol * 10, atol=atol * 10,
                               err_msg=f"gradient of chain {ops}")
