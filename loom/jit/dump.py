"""`loom.jit.save`: trace a function for inference, optimise it and write a dump the C runtime loads.

A dump is a directory:

- ``manifest.json``: ``{"format": "loom.dump", "version": 1, ...}``: which
  graph inputs the caller feeds and which come from the weights file, the
  outputs, and one entry per fused kernel (its shared object and the
  precomputed int64 argument block its ``loom_call`` takes for the dump's
  shapes, see `loom.codegen.kernel`);
- ``graph.json``: the optimised graph in the loom graph format
  (docs/graph-format.md), readable by `loom.ir.load`;
- ``weights.safetensors``: the parameters and buffers the function read;
- ``kernels/kN.c`` and ``kernels/kN.so``: the generated C of every fused
  kernel and its build (rebuilt by ``python -m loom.jit
  --kernels DIR``).
"""
from __future__ import annotations

import inspect
import json
import os
import shutil
import struct
import tempfile
from typing import Any, Callable

import numpy as np

from loom import dtypes as dt
from loom.errors import LoomError, LoomValueError
from loom.functional import library_ops as _library_ops

FORMAT = "loom.dump"
VERSION = 1
GRAPH_FILE = "graph.json"
WEIGHTS_FILE = "weights.safetensors"
MANIFEST_FILE = "manifest.json"

# The primitives libloomrt runs outside fused kernels (mirrors OP_NAME in csrc/loomrt.c).
RUNTIME_OPS = frozenset({"input", "buffer", "const", "arange", "reshape", "permute", "expand", "slice", "flip",
                         "pad", "gather", "matmul", "conv2d", "max_pool2d_index", "check", "cast", "fused", "argsort",
                         "scatter_add", "div", "floordiv", "mod"})
_SAFETENSORS_DTYPE = {dt.bool_: "BOOL", dt.uint8: "U8", dt.int8: "I8", dt.int16: "I16", dt.int32: "I32",
                      dt.int64: "I64", dt.float16: "F16", dt.bfloat16: "BF16", dt.float32: "F32", dt.float64: "F64"}


def _arg_names(fn: Callable, n: int) -> list[str]:
    """The names of the function's first `n` parameters (``forward``'s for a module), else arg0, arg1..."""
    target = getattr(fn, "forward", fn)
    try:
        params = [p.name for p in inspect.signature(target).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    return [params[k] if k < len(params) else f"arg{k}" for k in range(n)]


def _weight_names(fn: Callable) -> dict[int, str]:
    """id(tensor) -> its name in the module (parameters and buffers), when `fn` is a module."""
    names: dict[int, str] = {}
    for method in ("named_parameters", "named_buffers"):
        getter = getattr(fn, method, None)
        if callable(getter):
            for name, t in getter():
                names.setdefault(id(t), name)
    return names


def write_safetensors(path: str, tensors: dict[str, tuple[np.ndarray, dt.DType]]) -> None:
    """Write stored-form arrays (bfloat16 as uint16 bits) as a safetensors file, tensors in the given order."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt", "writer": "loom.jit.save"}}
    blobs, pos = [], 0
    for name, (array, d) in tensors.items():
        raw = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": _SAFETENSORS_DTYPE[d], "shape": list(array.shape),
                        "data_offsets": [pos, pos + len(raw)]}
        blobs.append(raw)
        pos += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # The data starts 8-byte aligned.
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def _trace(fn: Callable, args: tuple, level: int):
    """Trace `fn` on `args` with gradients off; the traced graph (returned values only) and its entry."""
    from loom.autograd.grad_mode import no_grad
    from loom.function import Function
    from loom.tensor import Tensor

    for k, a in enumerate(args):
        if isinstance(a, np.ndarray):
            raise LoomValueError(f"loom.jit.save: example argument {k} is a NumPy array; pass loom tensors "
                                 "(loom.from_numpy wraps one)")
    if not any(isinstance(a, Tensor) for a in args):
        raise LoomValueError("loom.jit.save: example_args holds no loom tensor: the dump would have no inputs")
    # Detached: an argument's .grad would otherwise be traced as one more input.
    args = tuple(a.detach() if isinstance(a, Tensor) else a for a in args)
    traced = Function(fn, level=level, backend="reference", warmup=0)
    with no_grad(), _library_ops.decomposed():  # The C runtime runs the small primitive set.
        entry = traced._trace(args, {})
    if entry.rands:
        raise LoomError(f"loom.jit.save: the function draws {len(entry.rands)} random tensor(s) (dropout in "
                        "training mode?); call model.eval() first: a dump is for deterministic inference")
    if entry.scalars:
        raise LoomError("loom.jit.save: the function reads run-time Python scalars (loom.dynamic_scalar); a dump "
                        "cannot feed them")
    if entry.n_returned == 0:
        raise LoomError("loom.jit.save: the function returns no tensor")
    graph = entry.graph
    if graph is None:
        raise LoomError("loom.jit.save: internal error: the trace produced no graph")
    graph.outputs = list(graph.outputs)[:entry.n_returned]  # In-place updates (running stats) are not dumped.
    return graph, entry


def _kernel_entry(node, kernel_dir: str, built: dict[str, dict], compile_kernels: bool) -> dict:
    """Render, build and plan one fused node's kernel; the manifest entry."""
    from loom.codegen import build, cache
    from loom.codegen.c import Unsupported, render
    from loom.codegen.kernel import Kernel
    from loom.ir.serialize import _encode

    body = node.attrs["body"]
    if any(n.dtype.name in ("float16", "bfloat16") for n in body):
        # The in-process kernels compute half precision since loom.codegen.half; libloomrt has no half type.
        ops = sorted({n.op for n in body if n.op != "input"})
        raise LoomError(f"loom.jit.save: a fused kernel ({', '.join(ops)}, output {node.dtype.name}"
                        f"{list(node.shape)}) cannot be generated as C: output dtype {node.dtype.name} "
                        "(the standalone C runtime computes float32, float64 and integers; cast the model "
                        "to float32 first)")
    try:
        spec = render(body)
    except Unsupported as e:
        ops = sorted({n.op for n in body if n.op != "input"})
        raise LoomError(f"loom.jit.save: a fused kernel ({', '.join(ops)}, output {node.dtype.name}"
                        f"{list(node.shape)}) cannot be generated as C: {e}") from None
    use_mvec = bool(spec.uses_mvec and build.mvec_available())
    ident = f"{use_mvec}\n{spec.source}"
    if ident not in built:
        stem = f"k{len(built)}"
        with open(os.path.join(kernel_dir, stem + ".c"), "w") as f:
            f.write(spec.source)
        built[ident] = {"source": f"kernels/{stem}.c", "library": f"kernels/{stem}.so", "mvec": use_mvec}
        if compile_kernels:
            k = cache.get_kernel(body)
            k.wait()
            if k.ready and os.path.exists(k._lib.path):
                shutil.copyfile(k._lib.path, os.path.join(kernel_dir, stem + ".so"))
            else:
                build_kernel(kernel_dir, stem, use_mvec)
    arrays = [np.empty(i.shape, i.dtype.np) for i in node.inputs]
    out = np.empty(node.shape, node.dtype.np)
    plan = Kernel(body, spec, None)._plan(arrays, out)
    if plan.meta is None:
        raise LoomError("loom.jit.save: internal error: a kernel has no argument plan for C-contiguous operands")
    meta = [int(v) for v in plan.meta]
    meta[0] = meta[1] = 0  # The runtime passes a table of pointers to data-pointer cells (see loom_call).
    copies = [{"input": int(k), "steps": [{"op": m.op, "attrs": {a: _encode(v, f"{m.op} attr {a}")
                                                                 for a, v in sorted(m.attrs.items())},
                                           "shape": list(m.shape), "dtype": m.dtype.name} for m in chain]}
              for k, chain in plan.copies]
    return {"node": None, **built[ident], "meta": meta, "copies": copies}


def build_kernel(kernel_dir: str, stem: str, use_mvec: bool) -> None:
    """Compile ``kernels/<stem>.c`` to ``kernels/<stem>.so`` with loom's kernel flags."""
    from loom.codegen import build

    with open(os.path.join(kernel_dir, stem + ".c")) as f:
        source = f.read()
    try:
        build.compile_shared(source, os.path.join(kernel_dir, stem + ".so"), use_mvec)
    except build.BuildError as e:
        raise LoomError(f"loom.jit: building kernel {stem} failed: {e}") from None
    for extra in (stem + ".so.sha256",):
        path = os.path.join(kernel_dir, extra)
        if os.path.exists(path):
            os.unlink(path)


def save(fn: Callable, example_args: Any, path: str | os.PathLike, *, level: int = 3,
         compile_kernels: bool = True) -> str:
    """Trace `fn` for inference and write a dump that the C runtime (libloomrt) runs without Python.

    The function is traced once on `example_args` with gradients off, the
    graph is optimised by the compiler (pruning, CSE, constant folding,
    simplification, fusion) and written with its weights and the generated
    C of its fused kernels. The dump is specialised to the example shapes
    and dtypes, and its kernels are built for this machine (``-march=native``).

    Parameters
    ----------
    fn : callable
        A function or `loom.nn.Module` taking tensors and returning a tensor
        or a tuple/list of tensors. Tensors it reads that are not arguments
        (parameters, buffers) become the dump's weights; call ``model.eval()``
        first (a dump cannot draw random numbers).
    example_args : loom.Tensor or tuple
        The arguments to trace with (a single tensor or a tuple of them;
        non-tensor values are baked in).
    path : str or os.PathLike
        The directory to write (created; files of an earlier dump in it are
        replaced).
    level : int
        The compiler's optimisation level (`loom.compiler.optimize`).
    compile_kernels : bool
        Build the kernels' shared objects now (default). Without it only
        their C is written; ``python -m loom.jit --kernels
        PATH`` builds them later.

    Returns
    -------
    str
        The dump directory.

    Raises
    ------
    loom.errors.LoomError
        If the function draws random numbers, returns no tensor, or its
        optimised graph holds an op or kernel libloomrt cannot run.

    Examples
    --------
    >>> import loom, os, tempfile
    >>> net = loom.nn.Sequential(loom.nn.Linear(4, 8), loom.nn.ReLU(), loom.nn.Linear(8, 2)).eval()
    >>> folder = loom.jit.save(net, loom.randn(3, 4), tempfile.mkdtemp())
    >>> sorted(os.listdir(folder))
    ['graph.json', 'kernels', 'manifest.json', 'weights.safetensors']
    >>> [n.op for n in loom.ir.load(os.path.join(folder, "graph.json"))][-3:]
    ['fused', 'matmul', 'fused']
    """
    from loom.compiler.pipeline import optimize
    from loom.ir.serialize import to_json

    from loom.function import Function

    if isinstance(fn, Function):  # A loom.function-compiled function: trace its Python body.
        fn = fn.fn
    args = tuple(example_args) if isinstance(example_args, (tuple, list)) else (example_args,)
    graph, entry = _trace(fn, args, level)
    optimized, _ = optimize(graph, level)
    unsupported = sorted({n.op for n in optimized if n.op not in RUNTIME_OPS or (
        n.op in ("div", "floordiv", "mod") and (n.dtype.is_floating_point or n.dtype is dt.bool_))})
    if unsupported:
        raise LoomError(f"loom.jit.save: the optimised graph holds {', '.join(unsupported)}, which libloomrt does "
                        f"not run (it runs {', '.join(sorted(RUNTIME_OPS))})")
    folder = os.fspath(path)
    kernel_dir = os.path.join(folder, "kernels")
    try:
        os.makedirs(kernel_dir, exist_ok=True)
        for name in os.listdir(kernel_dir):
            os.unlink(os.path.join(kernel_dir, name))
    except OSError as e:
        raise LoomError(f"loom.jit.save: cannot write the dump directory {folder}: {e}") from None

    # Graph inputs: the tensor arguments (in order, then their .grad: none without gradients), then the
    # tensors the function read (weights), named after the module's parameters where it is one.
    n_args = entry.n_args
    arg_names = _arg_names(fn, len(args))
    tensor_positions = [k for k, a in enumerate(args) if hasattr(a, "_array")]
    weight_names = _weight_names(fn)
    roles: list[dict[str, Any]] = []
    weights: dict[str, tuple[np.ndarray, dt.DType]] = {}
    used: set[str] = set()
    weight_of = {}
    for k, (ref, _, d) in enumerate(entry.externals):
        t = ref()
        key = weight_names.get(id(t), f"ext{k}")
        while key in used:
            key += "_"
        used.add(key)
        weight_of[f"ext{k}"] = (key, t, d)
    for node in optimized.inputs:
        if node.name in weight_of:
            key, t, d = weight_of[node.name]
            roles.append({"kind": "weight", "key": key, "name": node.name})
            weights[key] = (np.asarray(t._array()), d)
        else:
            pos = int(node.name[3:]) if node.name and node.name.startswith("arg") else -1
            if not 0 <= pos < n_args:
                raise LoomError(f"loom.jit.save: internal error: graph input {node.name!r} is neither an argument "
                                "nor a weight")
            roles.append({"kind": "input", "name": arg_names[tensor_positions[pos]], "dtype": node.dtype.name,
                          "shape": list(node.shape)})

    built: dict[str, dict] = {}
    kernels = []
    ids = {n: k for k, n in enumerate(optimized)}  # to_json numbers nodes in this order.
    for n in optimized:
        if n.op == "fused":
            item = _kernel_entry(n, kernel_dir, built, compile_kernels)
            item["node"] = ids[n]
            kernels.append(item)
    from loom._api import __version__
    from loom.codegen import build

    manifest = {"format": FORMAT, "version": VERSION, "graph": GRAPH_FILE, "weights": WEIGHTS_FILE,
                "inputs": roles,
                "outputs": [{"name": f"output{k}", "dtype": o.dtype.name, "shape": list(o.shape)}
                            for k, o in enumerate(optimized.outputs)],
                "kernels": kernels, "loom_version": __version__, "compiler": build.compiler_id()}
    _write_text(os.path.join(folder, GRAPH_FILE), to_json(optimized))
    write_safetensors(os.path.join(folder, WEIGHTS_FILE), weights)
    _write_text(os.path.join(folder, MANIFEST_FILE), _manifest_text(manifest))
    return folder


def _manifest_text(manifest: dict) -> str:
    """One key per line, one input, output or kernel per line: readable and diff-friendly."""
    lines = []
    for key, value in manifest.items():
        if isinstance(value, list) and value:
            items = ",\n  ".join(json.dumps(v) for v in value)
            lines.append(f' "{key}": [\n  {items}]')
        else:
            lines.append(f" {json.dumps(key)}: {json.dumps(value)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def _write_text(path: str, text: str) -> None:
    """Write through a temporary file renamed over `path`, so a reader never sees half a file."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
