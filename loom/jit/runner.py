"""`loom.jit.load`: run a dump through libloomrt from Python (ctypes), to check it or to serve it."""
from __future__ import annotations

import ctypes
import os
from typing import Any

import numpy as np

from loom import dtypes as dt
from loom.errors import LoomError, LoomValueError


def _bind(path: str) -> ctypes.CDLL:
    lib = ctypes.CDLL(path)
    p, i, s = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
    sig = {"loomrt_load": (p, [ctypes.c_char_p, ctypes.c_char_p, s]), "loomrt_free": (None, [p]),
           "loomrt_error": (ctypes.c_char_p, [p]), "loomrt_num_inputs": (i, [p]), "loomrt_num_outputs": (i, [p]),
           "loomrt_input_name": (ctypes.c_char_p, [p, i]), "loomrt_input_dtype": (ctypes.c_char_p, [p, i]),
           "loomrt_output_dtype": (ctypes.c_char_p, [p, i]),
           "loomrt_input_shape": (ctypes.POINTER(ctypes.c_int64), [p, i, ctypes.POINTER(i)]),
           "loomrt_output_shape": (ctypes.POINTER(ctypes.c_int64), [p, i, ctypes.POINTER(i)]),
           "loomrt_set_input": (i, [p, i, p, s]), "loomrt_run": (i, [p]),
           "loomrt_get_output": (p, [p, i, ctypes.POINTER(s)]), "loomrt_set_num_threads": (None, [p, i])}
    for name, (res, args) in sig.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    return lib


class CModel:
    """A dump loaded by libloomrt; calling it runs the C runtime. Create it with `loom.jit.load`.

    ``model.inputs`` lists (name, dtype name, shape) of each input the
    caller feeds, ``model.outputs`` (dtype name, shape) of each output.
    """

    def __init__(self, path: str, library: str):
        self._lib = _bind(library)
        err = ctypes.create_string_buffer(1024)
        handle = self._lib.loomrt_load(os.fspath(path).encode(), err, len(err))
        if not handle:
            raise LoomError(f"loom.jit.load: {err.value.decode(errors='replace')}")
        self._m: Any = handle

        def shape(fn, k):
            n = ctypes.c_int()
            ptr = fn(self._m, k, ctypes.byref(n))
            return tuple(int(ptr[d]) for d in range(n.value))
        lib = self._lib
        self.inputs = [(lib.loomrt_input_name(handle, k).decode(), lib.loomrt_input_dtype(handle, k).decode(),
                        shape(lib.loomrt_input_shape, k)) for k in range(lib.loomrt_num_inputs(handle))]
        self.outputs = [(lib.loomrt_output_dtype(handle, k).decode(), shape(lib.loomrt_output_shape, k))
                        for k in range(lib.loomrt_num_outputs(handle))]

    def _error(self) -> str:
        return self._lib.loomrt_error(self._m).decode(errors="replace")

    def __call__(self, *arrays) -> tuple[np.ndarray, ...]:
        """Run on one array (or loom tensor) per input, in order; a tuple of NumPy arrays (copies)."""
        if self._m is None:
            raise LoomError("loom.jit.CModel: the model was closed")
        if len(arrays) != len(self.inputs):
            raise LoomValueError(f"loom.jit.CModel: the dump takes {len(self.inputs)} input(s) "
                                 f"({', '.join(n for n, _, _ in self.inputs)}), got {len(arrays)}")
        for k, (a, (name, dname, shape)) in enumerate(zip(arrays, self.inputs)):
            a = a.numpy() if hasattr(a, "numpy") and not isinstance(a, np.ndarray) else a
            want = dt.from_name(dname).np
            arr = np.ascontiguousarray(a, dtype=want)
            if arr.shape != shape:
                raise LoomValueError(f"loom.jit.CModel: input {k} ({name}) must have shape {list(shape)}, got "
                                     f"{list(arr.shape)}")
            if self._lib.loomrt_set_input(self._m, k, arr.ctypes.data, arr.nbytes):
                raise LoomError(f"loom.jit.CModel: {self._error()}")
        if self._lib.loomrt_run(self._m):
            raise LoomError(f"loom.jit.CModel: {self._error()}")
        outs = []
        for k, (dname, shape) in enumerate(self.outputs):
            n = ctypes.c_size_t()
            ptr = self._lib.loomrt_get_output(self._m, k, ctypes.byref(n))
            outs.append(np.frombuffer(ctypes.string_at(ptr, n.value), dt.from_name(dname).np).reshape(shape).copy())
        return tuple(outs)

    def set_num_threads(self, n: int) -> None:
        """Threads for the kernels and the BLAS of this model."""
        self._lib.loomrt_set_num_threads(self._m, int(n))

    def close(self) -> None:
        """Free the model (also done when it is garbage collected)."""
        if getattr(self, "_m", None) is not None:
            self._lib.loomrt_free(self._m)
            self._m = None

    def __del__(self) -> None:
        self.close()


def load(path: str | os.PathLike, runtime=None) -> CModel:
    """Load a `loom.jit.save` dump with the C runtime (libloomrt, built on first use) and return it callable.

    Parameters
    ----------
    path : str or os.PathLike
        The dump directory.
    runtime : loom.jit.Runtime, optional
        A runtime from `build_runtime`; by default the cached build.

    Returns
    -------
    CModel
        ``model(*arrays)`` runs the dump and returns its outputs as NumPy arrays.

    Raises
    ------
    loom.errors.LoomError
        With libloomrt's message when the dump cannot be loaded.

    Examples
    --------
    >>> import loom, tempfile
    >>> net = loom.nn.Linear(3, 2).eval()
    >>> x = loom.ones(1, 3)
    >>> model = loom.jit.load(loom.jit.save(net, x, tempfile.mkdtemp()))
    >>> model.inputs
    [('input', 'float32', (1, 3))]
    >>> bool(abs(model(x)[0] - net(x).detach().numpy()).max() < 1e-6)
    True
    """
    if runtime is None:
        from loom.jit.builder import build_runtime

        runtime = build_runtime()
    return CModel(os.fspath(path), runtime.library)
