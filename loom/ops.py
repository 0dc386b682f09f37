"""User-defined operations in C: `custom_op` compiles inline C into a primitive; `load_library` loads a .so of ops.

A custom op becomes a primitive of loom's IR like any other: eager code,
``loom.compile``d graphs and ``loom.function`` traces all record it as a node
and run its C function (the compiler treats it as an opaque library op: it is
never fused, constant-folded only when all its inputs are constants). Its
gradient is the ``backward`` function you give, written in loom ops (which may
call other custom ops), so gradients of any order work where ``backward`` is
itself differentiable.

The C function has this signature (the header `HEADER` is prepended to your
source, so ``loom_tensor`` and the dtype codes are defined)::

    int NAME(const loom_tensor *inputs, int64_t n_inputs, loom_tensor *out,
             const double *attrs, int64_t n_attrs, int64_t nthreads);

Inputs arrive C-contiguous; ``out`` is C-contiguous and already has the shape
your ``shape_fn`` gave. Return 0 on success; any other value raises a loom
error naming the op and the code. ``nthreads`` is ``loom.get_num_threads()``
(use it in ``#pragma omp parallel for num_threads(nthreads)``; the code is
compiled with OpenMP). float16/bfloat16 tensors arrive as float32 and the
result is rounded back, as loom's reference path computes them.

Examples
--------
>>> import loom
>>> square_plus = loom.ops.custom_op(
...     "doc_square_plus", lambda shape, alpha: shape, attrs=("alpha",),
...     cpu_source='''
... int doc_square_plus(const loom_tensor *in, int64_t n, loom_tensor *out,
...                     const double *attrs, int64_t n_attrs, int64_t nthreads) {
...     const float *x = in[0].data; float *y = out->data;
...     for (int64_t i = 0; i < loom_numel(out); i++) y[i] = x[i] * x[i] + (float)attrs[0];
...     return 0;
... }''',
...     backward=lambda g, inputs, output, alpha: (2 * inputs[0] * g,))
>>> x = loom.tensor([1.0, 2.0, 3.0], requires_grad=True)
>>> y = square_plus(x, alpha=0.5)
>>> y.tolist()
[1.5, 4.5, 9.5]
>>> y.sum().backward()
>>> x.grad.tolist()
[2.0, 4.0, 6.0]
"""
from __future__ import annotations

import ctypes
import json
import os
import re
import threading
from typing import Any, Callable, Sequence

import numpy as np

from loom import dtypes as dt
from loom.errors import DTypeError, LoomError, LoomTypeError, LoomValueError, ShapeError, fmt_shape
from loom.ir import ops as _ops

__all__ = ["custom_op", "load_library", "get", "CustomOp"]

HEADER = """#include <stdint.h>
#include <stddef.h>
#include <math.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
enum { LOOM_FLOAT32 = 0, LOOM_FLOAT64 = 1, LOOM_INT32 = 2, LOOM_INT64 = 3, LOOM_BOOL = 4, LOOM_UINT8 = 5,
       LOOM_INT8 = 6, LOOM_INT16 = 7 };
typedef struct { void *data; int64_t ndim; const int64_t *shape; int64_t dtype; } loom_tensor;
static inline int64_t loom_numel(const loom_tensor *t) {
    int64_t n = 1; for (int64_t i = 0; i < t->ndim; i++) n *= t->shape[i]; return n;
}
"""

_CODES = {np.dtype(np.float32): 0, np.dtype(np.float64): 1, np.dtype(np.int32): 2, np.dtype(np.int64): 3,
          np.dtype(np.bool_): 4, np.dtype(np.uint8): 5, np.dtype(np.int8): 6, np.dtype(np.int16): 7}
MAX_RANK = 16
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class _LoomTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("ndim", ctypes.c_int64), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("dtype", ctypes.c_int64)]


_ENTRY = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(_LoomTensor), ctypes.c_int64, ctypes.POINTER(_LoomTensor),
                          ctypes.POINTER(ctypes.c_double), ctypes.c_int64, ctypes.c_int64)
_SHAPE = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64, ctypes.POINTER(ctypes.c_int64),
                          ctypes.POINTER(ctypes.POINTER(ctypes.c_int64)), ctypes.POINTER(ctypes.c_double),
                          ctypes.POINTER(ctypes.c_int64))

_LOCK = threading.Lock()
_REGISTRY: dict[str, "CustomOp"] = {}


class CustomOp:
    """A registered custom op: call it on tensors (and its attributes as keywords) to apply it.

    Attributes
    ----------
    name : str
        The primitive's name in graphs (``loom.ir``) and errors.
    attrs : tuple of str
        Names of the numeric attributes, in the order the C function gets them.
    """

    def __init__(self, name: str, fn: Callable, shape_fn: Callable, dtype_fn: Callable | None,
                 backward: Callable | None, attrs: Sequence[str], lib: Any):
        self.name = name
        self.attrs = tuple(attrs)
        self._fn = fn
        self._shape_fn = shape_fn
        self._dtype_fn = dtype_fn
        self._backward = backward
        self._lib = lib   # Keeps the shared object loaded for as long as the op exists.
        _ops.register(name, "custom", -1, self._infer, self._impl,
                      self._vjp if backward is not None else None, self._check_attrs)

    def __repr__(self) -> str:
        return f"<loom.ops.CustomOp {self.name} attrs={list(self.attrs)}>"

    def __call__(self, *inputs, **attrs):
        from loom.tensor import Tensor, apply
        for k, t in enumerate(inputs):
            if not isinstance(t, Tensor):
                raise LoomTypeError(f"loom.ops.{self.name}: input {k} must be a loom Tensor, got {type(t).__name__}")
        return apply(self.name, tuple(inputs), self._attrs(attrs))

    def _attrs(self, given: dict) -> dict:
        unknown = sorted(set(given) - set(self.attrs))
        missing = [a for a in self.attrs if a not in given]
        if unknown or missing:
            raise LoomTypeError(f"loom.ops.{self.name}: takes attrs {list(self.attrs)}; "
                                + (f"unknown {unknown}" if unknown else f"missing {missing}"))
        return {a: given[a] for a in self.attrs}

    def _check_attrs(self, inputs, attrs) -> None:
        if set(attrs) != set(self.attrs):
            raise LoomValueError(f"loom.ops.{self.name}: attrs must be {list(self.attrs)}, got {sorted(attrs)}")
        for a in self.attrs:
            v = attrs[a]
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
                raise LoomTypeError(f"loom.ops.{self.name}: attr {a!r} must be a number, got {type(v).__name__}")

    def _infer(self, inputs, attrs):
        shapes = [tuple(i.shape) for i in inputs]
        try:
            shape = self._shape_fn(*shapes, **attrs)
        except LoomError:
            raise
        except Exception as e:
            raise ShapeError(f"loom.ops.{self.name}: shape_fn failed for input shapes "
                             f"{', '.join(fmt_shape(s) for s in shapes)}: {type(e).__name__}: {e}") from None
        if (not isinstance(shape, (tuple, list)) or not all(isinstance(d, (int, np.integer)) and d >= 0
                                                             for d in shape)):
            raise ShapeError(f"loom.ops.{self.name}: shape_fn must return a tuple of non-negative ints, "
                             f"got {shape!r}")
        if len(shape) > MAX_RANK:
            raise ShapeError(f"loom.ops.{self.name}: output rank {len(shape)} exceeds {MAX_RANK}")
        if self._dtype_fn is not None:
            dtype = dt.as_dtype(self._dtype_fn(*[i.dtype for i in inputs]))
        elif inputs:
            dtype = inputs[0].dtype
        else:
            dtype = dt.get_default_dtype()
        for k, i in enumerate(inputs):
            if i.dtype.np not in _CODES and i.dtype.name not in ("float16", "bfloat16"):
                raise DTypeError(f"loom.ops.{self.name}: input {k} has dtype {i.dtype.name}, which custom ops "
                                 f"do not take (supported: {sorted(d.name for d in _CODES)} and float16/bfloat16)")
        return tuple(int(d) for d in shape), dtype

    def _impl(self, *arrays_and_attrs):
        *arrays, attrs = arrays_and_attrs
        arrays = [np.ascontiguousarray(a) for a in arrays]
        shape, dtype = self._infer([_Spec(a) for a in arrays], attrs)
        out_dtype = np.dtype(np.float32) if dtype.name in ("float16", "bfloat16") else dtype.np
        out = np.zeros(shape, out_dtype)
        keep = []
        ins = (_LoomTensor * max(1, len(arrays)))()
        for k, a in enumerate(arrays):
            sh = np.array(a.shape or (1,), np.int64)[:a.ndim] if a.ndim else np.zeros(1, np.int64)
            keep.append(sh)
            ins[k] = _LoomTensor(a.ctypes.data, a.ndim, sh.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)),
                                 _CODES[a.dtype])
        osh = np.array(out.shape, np.int64) if out.ndim else np.zeros(1, np.int64)
        o = _LoomTensor(out.ctypes.data, out.ndim, osh.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)),
                        _CODES[out.dtype])
        vals = np.array([float(attrs[a]) for a in self.attrs] or [0.0], np.float64)
        from loom.runtime import threads
        rc = self._fn(ins, len(arrays), ctypes.byref(o), vals.ctypes.data_as(ctypes.POINTER(ctypes.c_double)),
                      len(self.attrs), threads.get_num_threads())
        if rc != 0:
            desc = ", ".join(f"{a.dtype}{fmt_shape(a.shape)}" for a in arrays)
            raise LoomError(f"loom.ops.{self.name}: the C function returned error code {rc} (inputs: {desc})")
        return out

    def _vjp(self, g, *args):
        inputs, out, attrs = args[:-2], args[-2], args[-1]
        grads = self._backward(g, tuple(inputs), out, **attrs)
        if not isinstance(grads, (tuple, list)):
            grads = (grads,)
        if len(grads) != len(inputs):
            raise LoomError(f"loom.ops.{self.name}: backward returned {len(grads)} gradients for "
                            f"{len(inputs)} inputs")
        return tuple(grads)


class _Spec:
    """Shape and dtype of a NumPy array, as `CustomOp._infer` reads them from nodes."""

    def __init__(self, a: np.ndarray):
        self.shape = a.shape
        self.dtype = dt.as_dtype(a.dtype)


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not _NAME.match(name):
        raise LoomValueError(f"loom.ops: op name {name!r} must be a C identifier")
    existing = _ops.PRIMITIVES.get(name)
    if existing is not None and name not in _REGISTRY:
        raise LoomValueError(f"loom.ops: {name!r} is a built-in primitive; choose another name")


def _build(source: str, what: str) -> ctypes.CDLL:
    """Compile `source` through loom's kernel cache (hash-checked, private directory) and load it."""
    from loom.codegen import build, cache, trust
    cc_id = build.compiler_id()
    if cc_id is None:
        raise LoomError(f"loom.ops: {what} needs a C compiler; {build.compiler()!r} was not found (set LOOM_CC)")
    root = cache._root()
    if root is None:
        raise LoomError(f"loom.ops: {what}: no kernel cache directory is safe to use (see KernelCacheWarning)")
    key = cache.kernel_key("loom-custom-op\n" + source, False, cc_id)
    path = os.path.join(root, "kernels", key[:2], key + ".so")
    try:
        with trust.locked(os.path.dirname(path), exclusive=False):
            trust.verify(path, root)
            return ctypes.CDLL(path)
    except (FileNotFoundError, trust.Untrusted, OSError):
        pass
    trust.private_subdir(root, "kernels", key[:2])
    try:
        build.compile_shared(source, path, False)
    except build.BuildError as e:
        raise LoomError(f"loom.ops: compiling {what} failed:\n{e}") from None
    with trust.locked(os.path.dirname(path), exclusive=False):
        trust.verify(path, root)
        return ctypes.CDLL(path)


def custom_op(name: str, shape_fn: Callable | None = None, *, cpu_source: str, backward: Callable | None = None,
              attrs: Sequence[str] = (), dtype_fn: Callable | None = None, entry: str | None = None) -> CustomOp:
    """Compile the C function in `cpu_source` and register it as the primitive `name`.

    Parameters
    ----------
    name : str
        A C identifier; the op's name in graphs and errors.
    shape_fn : callable(*input_shapes, **attrs) -> tuple of int, optional
        The output shape; default: the first input's shape.
    cpu_source : str
        C source defining ``int ENTRY(const loom_tensor *, int64_t, loom_tensor *, const double *, int64_t,
        int64_t)`` (see the module docstring). It is compiled once, at this call, and cached on disk.
    backward : callable, optional
        ``backward(grad, inputs, output, **attrs)`` returns a tuple of gradients, one per input
        (None for ones without), in loom ops. Without it the op is not
        differentiable and its output does not require grad.
    attrs : sequence of str
        Names of numeric attributes passed as keywords when calling the op.
    dtype_fn : callable(*input_dtypes) -> dtype, optional
        The output dtype; default: the first input's.
    entry : str, optional
        The C function's name, if not `name`.

    Returns
    -------
    CustomOp
        Call it on tensors: ``op(x, y, alpha=1.0)``.
    """
    _check_name(name)
    entry = entry or name
    lib = _build(HEADER + "\n" + cpu_source, f"custom op {name}")
    try:
        fn = _ENTRY((entry, lib))
    except AttributeError:
        raise LoomError(f"loom.ops: custom op {name}: the source defines no function {entry!r}") from None
    with _LOCK:
        op = CustomOp(name, fn, shape_fn or (lambda *shapes, **_: shapes[0]), dtype_fn, backward, attrs, lib)
        _REGISTRY[name] = op
    return op


def load_library(path: str, backward: dict[str, Callable] | None = None) -> dict[str, CustomOp]:
    """Load a shared object of ops and register each one it declares; returns {name: CustomOp}.

    The library exports ``const char *loom_ops_manifest(void)`` returning a JSON
    list with one object per op: ``name``, ``entry`` (the compute function, with
    the signature in the module docstring), ``shape`` (``"same"`` for the
    first input's shape, or the name of a C function ``int64_t f(int64_t n_inputs,
    const int64_t *ndims, const int64_t *const *shapes, const double *attrs,
    int64_t *out_shape)`` returning the output rank), optional ``attrs`` (list of
    names) and ``dtype`` (a dtype name; default the first input's). Gradients
    are given from Python: ``backward={"op_name": fn}`` (see `custom_op`).
    The library runs with your process's rights: load only libraries you trust.
    """
    path = os.fspath(path)
    try:
        lib = ctypes.CDLL(os.path.abspath(path))
    except OSError as e:
        raise LoomError(f"loom.ops.load_library: cannot load {path}: {e}") from None
    try:
        manifest_fn = lib.loom_ops_manifest
    except AttributeError:
        raise LoomError(f"loom.ops.load_library: {path} exports no loom_ops_manifest function") from None
    manifest_fn.restype = ctypes.c_char_p
    try:
        entries = json.loads(manifest_fn().decode())
    except (ValueError, UnicodeDecodeError, AttributeError) as e:
        raise LoomError(f"loom.ops.load_library: {path}: loom_ops_manifest did not return a JSON list: {e}") from None
    if not isinstance(entries, list):
        raise LoomError(f"loom.ops.load_library: {path}: the manifest must be a JSON list of op objects")
    backward = backward or {}
    loaded = {}
    for spec in entries:
        if not isinstance(spec, dict) or "name" not in spec:
            raise LoomError(f"loom.ops.load_library: {path}: manifest entry {spec!r} has no name")
        name = spec["name"]
        _check_name(name)
        try:
            fn = _ENTRY((spec.get("entry", name), lib))
        except AttributeError:
            raise LoomError(f"loom.ops.load_library: {path}: op {name}: no function "
                            f"{spec.get('entry', name)!r}") from None
        op_attrs = tuple(spec.get("attrs", ()))
        shape_spec = spec.get("shape", "same")
        if shape_spec == "same":
            shape_fn = (lambda *shapes, **_: shapes[0])
        else:
            try:
                c_shape = _SHAPE((shape_spec, lib))
            except AttributeError:
                raise LoomError(f"loom.ops.load_library: {path}: op {name}: no shape function "
                                f"{shape_spec!r}") from None
            shape_fn = _c_shape_fn(name, c_shape, op_attrs)
        dtype_fn = None
        if "dtype" in spec:
            out_dtype = dt.as_dtype(spec["dtype"])
            dtype_fn = (lambda *_, _d=out_dtype: _d)
        with _LOCK:
            op = CustomOp(name, fn, shape_fn, dtype_fn, backward.get(name), op_attrs, lib)
            _REGISTRY[name] = op
        loaded[name] = op
    return loaded


def _c_shape_fn(name: str, c_shape, op_attrs: tuple) -> Callable:
    def shape_fn(*shapes, **attrs):
        ndims = np.array([len(s) for s in shapes] or [0], np.int64)
        rows = [np.array(s or (0,), np.int64) for s in shapes]
        ptrs = (ctypes.POINTER(ctypes.c_int64) * max(1, len(rows)))(
            *[r.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)) for r in rows])
        vals = np.array([float(attrs[a]) for a in op_attrs] or [0.0], np.float64)
        out = np.zeros(MAX_RANK, np.int64)
        rank = c_shape(len(shapes), ndims.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)), ptrs,
                       vals.ctypes.data_as(ctypes.POINTER(ctypes.c_double)),
                       out.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)))
        if rank < 0 or rank > MAX_RANK:
            raise ShapeError(f"loom.ops.{name}: the shape function rejected input shapes "
                             f"{', '.join(fmt_shape(s) for s in shapes)} (returned {rank})")
        return tuple(int(d) for d in out[:rank])
    return shape_fn


def get(name: str) -> CustomOp:
    """The registered custom op `name`."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise LoomValueError(f"loom.ops: no custom op named {name!r}; registered: {sorted(_REGISTRY)}") from None
