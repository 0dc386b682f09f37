"""`python -m loom.torch.coverage`: which of PyTorch's CPU-meaningful public names loom.torch provides.

Compares `loom.torch`'s namespaces with the installed PyTorch's (`torch`,
`torch.Tensor`, `torch.nn`, `torch.nn.functional`, `torch.optim`,
`torch.utils.data`) and prints, per namespace, the share of names present and
the missing ones. A name counts when it is public (no leading underscore) and
CPU-meaningful: the explicit EXCLUDE patterns below drop GPU/accelerator
internals, TorchScript and C++ binding types, quantized and sparse storage,
symbolic-shape helpers, and names a module merely imported from elsewhere
(`typing.Optional`, `math`) or documentation strings.

Examples
--------
$ python -m loom.torch.coverage             # table and missing names
$ python -m loom.torch.coverage --summary   # table only
"""
from __future__ import annotations

import argparse
import importlib
import re
import types

# Each pattern drops names that are not meaningful for a CPU program, with the reason beside it.
EXCLUDE = [
    (r"^(Stream|Event)$|cuda|cudnn|miopen|mkldnn|fbgemm|vulkan|xpu|mps|mtia|hpu|ipu|xla|maia|_nested|nested_|record_stream",
     "GPU/accelerator or vendor-library internals"),
    (r"^(q_|qint|quint|qscheme|quantize|quantized|dequantize|fake_quant|int_repr|is_quantized|per_channel|"
     r"per_tensor|choose_qparams|fused_moving_avg)", "quantized tensors"),
    (r"sparse|^(coalesce|is_coalesced|indices|values|crow_indices|col_indices|ccol_indices|row_indices|"
     r"dense_dim|to_dense|smm|hsmm|dsmm|spmm|hspmm|saddmm|sspaddmm)$|_copy$", "sparse storage and view-copy "
     "variants for export"),
    (r"^(sym_|Sym|bits|bit$|int[1-7]$|uint[1-7]$|float8_|float4_)", "symbolic shapes, sub-byte (`bit` is uint1) "
     "and float8 dtypes"),
    (r"Storage|storage|data_ptr|^(set_|is_set_to|untyped_storage|share_memory_|is_shared|from_file|"
     r"module_load|dim_order)$", "raw storage"),
    (r"^(TYPE_CHECKING|USE_|ScalingType|SwizzleType)|_notes$|^(Tag|AVG|SUM|PRIVATE_OPS|DispatchKey|DisableTorchFunction|AggregationType|classproperty|"
     r"import_ir_module|merge_type_from_type_comment|parse_ir|parse_schema|parse_type_comment|unify_type_list|"
     r"compiled_with_cxx11_abi|has_|autocast_(in|de)crement_nesting|init_num_threads|"
     r"prepare_multiprocessing_environment|profiler_allow|thread_safe_generator|slice_inverse|wait|fork|"
     r"handle_torch_function|has_torch_function|boolean_dispatch|assert_int_or_pair|"
     r"native_|_with_distance_loss|grouped_mm|scaled_mm|scaled_grouped_mm|linear_cross_entropy|"
     r"Broadcasting|Container|common_types|factory_kwargs|intrinsic|qat|quantizable|"
     r"DataChunk|DFIterDataPipe|IterDataPipe|MapDataPipe|datapipes|functional_datapipe|graph|graph_settings|"
     r"guaranteed_datapipes_determinism|non_deterministic|runtime_validation|argument_validation)",
     "PyTorch internals: dispatcher, TorchScript, profiler and datapipe plumbing"),
]
_EXCLUDE = re.compile("|".join(f"(?:{p})" for p, _ in EXCLUDE))

# Submodules of `torch` that CPU programs import; the others (fx, jit internals, onnx, ...) are not counted.
MODULES_COUNTED = {"nn", "optim", "utils", "cuda", "backends", "amp", "autograd", "distributed", "linalg",
                   "fft", "special", "random", "cpu", "mps", "accelerator", "distributions", "jit", "version",
                   "functional", "testing", "hub"}

NAMESPACES = [  # (PyTorch's, loom's)
    ("torch", "loom.torch"),
    ("torch.Tensor", "loom.torch.Tensor"),
    ("torch.nn", "loom.torch.nn"),
    ("torch.nn.functional", "loom.torch.nn.functional"),
    ("torch.optim", "loom.torch.optim"),
    ("torch.utils.data", "loom.torch.utils.data"),
]


def _resolve(path: str):
    """A module or an attribute path such as `torch.Tensor`."""
    parts = path.split(".")
    for k in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:k]))
        except ImportError:
            continue
        for p in parts[k:]:
            obj = getattr(obj, p)
        return obj
    raise ImportError(path)


def _counted(ns, name: str, is_module_ns: bool) -> bool:
    if name.startswith("_") or _EXCLUDE.search(name):
        return False
    try:
        obj = getattr(ns, name)
    except Exception:
        return False
    if isinstance(obj, str):
        return False  # Documentation strings.
    if type(obj).__module__ == "pybind11_builtins":
        return False  # C++ binding types: TorchScript IR, futures, dispatcher tags.
    if isinstance(obj, types.ModuleType):
        return is_module_ns and obj.__name__.startswith("torch.") and name in MODULES_COUNTED
    if is_module_ns:
        origin = getattr(obj, "__module__", None) or ""
        if isinstance(obj, type) and origin.startswith(("torch._C", "torch.jit", "torch._jit", "torch.classes")):
            return False  # TorchScript and C++ binding types.
        if origin.split(".")[0] in ("typing", "collections", "dataclasses", "abc", "enum", "builtins"):
            return False  # Names the module imported from the standard library.
    return True


def compare() -> list[tuple[str, int, list[str]]]:
    """For each namespace: (name, number of counted PyTorch names, the ones loom.torch lacks)."""
    rows = []
    for theirs, ours in NAMESPACES:
        t_ns, l_ns = _resolve(theirs), _resolve(ours)
        is_mod = isinstance(t_ns, types.ModuleType)
        names = sorted(n for n in dir(t_ns) if _counted(t_ns, n, is_mod))
        missing = [n for n in names if not hasattr(l_ns, n)]
        rows.append((theirs, len(names), missing))
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m loom.torch.coverage", description=__doc__.split("\n")[0])
    parser.add_argument("--summary", action="store_true", help="print the table only")
    args = parser.parse_args(argv)
    rows = compare()
    total = sum(n for _, n, _ in rows)
    have = sum(n - len(m) for _, n, m in rows)
    print(f"{'namespace':22} {'present':>9} {'counted':>8} {'coverage':>9}")
    for name, n, missing in rows:
        print(f"{name:22} {n - len(missing):9d} {n:8d} {100.0 * (n - len(missing)) / max(n, 1):8.1f}%")
    print(f"{'all':22} {have:9d} {total:8d} {100.0 * have / max(total, 1):8.1f}%")
    if not args.summary:
        for name, _, missing in rows:
            if missing:
                print(f"\nmissing from {name} ({len(missing)}):")
                print("  " + " ".join(missing))


if __name__ == "__main__":
    main()
