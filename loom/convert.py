"""Move PyTorch code and models to loom: a source converter and `from_torch` for live modules.

``python -m loom.convert src.py -o out.py`` rewrites a PyTorch program's
imports to loom's PyTorch namespace (``import torch`` becomes ``import
loom.torch as torch``, ``torchvision`` becomes ``loom.torch.vision``, ``from
torch.nn import functional as F`` keeps its names), so the rest of the
program runs as written, and lists every ``torch.*`` name the program uses
that loom does not provide, with its line. The output is written atomically;
the exit status is 1 when names are missing (the file is still written).

`from_torch(module)` builds the loom equivalent of a live ``torch.nn.Module``
made of PyTorch's own layers (containers, Linear, convolutions, norms,
activations, pooling, dropout, embeddings, recurrent layers, ...) and copies
its parameters and buffers. A module whose class PyTorch does not define (a
user's own ``forward``) cannot be carried over by value: the error names it
and points to the source converter.

Examples
--------
>>> print(convert_source("import torch\\nimport torch.nn as nn\\nx = torch.zeros(3)\\n").code, end="")
import loom.torch as torch
import loom.torch.nn as nn
x = torch.zeros(3)
"""
from __future__ import annotations

import argparse
import ast
import importlib
import io
import os
import sys
import tokenize
from dataclasses import dataclass, field
from typing import Any

from loom.errors import LoomError

__all__ = ["convert_source", "convert_file", "from_torch", "Conversion"]

_ROOTS = {"torch": "loom.torch", "torchvision": "loom.torch.vision"}


@dataclass
class Conversion:
    """The converted program and what could not be converted.

    Attributes
    ----------
    code : str
        The rewritten source.
    missing : list of (line, name)
        ``torch.*`` names the program uses that loom's namespace does not provide.
    rewritten : int
        Import statements rewritten.
    """

    code: str
    missing: list[tuple[int, str]] = field(default_factory=list)
    rewritten: int = 0


def _target(module: str) -> str | None:
    root = module.split(".")[0]
    if root not in _ROOTS:
        return None
    return _ROOTS[root] + module[len(root):]


def _resolves(dotted: str) -> bool:
    """Whether `dotted` (a loom.torch... path) names a module or an attribute chain that exists."""
    parts = dotted.split(".")
    for k in range(len(parts), 0, -1):
        mod_name = ".".join(parts[:k])
        try:
            obj: Any = importlib.import_module(mod_name)
        except ImportError:
            continue
        except Exception:  # A module that fails on import for other reasons is reported as missing.
            return False
        for attr in parts[k:]:
            try:
                obj = getattr(obj, attr)
            except Exception:
                return False
        return True
    return False


def convert_source(source: str) -> Conversion:
    """Rewrite `source`'s torch/torchvision imports to loom and find the names loom lacks."""
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        raise LoomError(f"loom.convert: the source does not parse: {e}") from None
    lines = source.splitlines(keepends=True)
    edits: list[tuple[int, int, str]] = []     # (first line, last line) -> replacement text
    aliases: dict[str, str] = {}                # local name -> loom module path it stands for
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            parts, changed = [], False
            for a in node.names:
                tgt = _target(a.name)
                if tgt is None:
                    parts.append(a.name + (f" as {a.asname}" if a.asname else ""))
                    continue
                changed = True
                local = a.asname or a.name.split(".")[0]
                if a.asname:
                    parts.append(f"{tgt} as {a.asname}")
                    aliases[local] = tgt
                elif "." in a.name:  # `import torch.nn` binds `torch`; keep that meaning.
                    parts.append(f"{tgt} as _loom_{a.name.replace('.', '_')}")
                    root = a.name.split(".")[0]
                    parts.append(f"{_ROOTS[root]} as {root}")
                    aliases[root] = _ROOTS[root]
                else:
                    parts.append(f"{tgt} as {a.name}")
                    aliases[a.name] = tgt
            if changed:
                edits.append((node.lineno, node.end_lineno or node.lineno, "import " + ", ".join(parts)))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            tgt = _target(node.module)
            if tgt is None:
                continue
            names = ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in node.names)
            edits.append((node.lineno, node.end_lineno or node.lineno, f"from {tgt} import {names}"))
            for a in node.names:
                if a.name != "*":
                    full = f"{tgt}.{a.name}"
                    aliases[a.asname or a.name] = full
    missing: list[tuple[int, str]] = []
    seen: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            chain = []
            cur: ast.AST = node
            while isinstance(cur, ast.Attribute):
                chain.append(cur.attr)
                cur = cur.value
            if isinstance(cur, ast.Name) and cur.id in aliases:
                chain.reverse()
                # Check the longest prefix that is a name of the namespace (methods of results are not).
                for k in range(len(chain), 0, -1):
                    cand = aliases[cur.id] + "." + ".".join(chain[:k])
                    if cand in seen:
                        break
                    if _resolves(cand):
                        seen.add(cand)
                        break
                else:
                    name = aliases[cur.id] + "." + chain[0]
                    if name not in seen:
                        seen.add(name)
                        missing.append((node.lineno, name.replace("loom.torch.vision", "torchvision")
                                        .replace("loom.torch", "torch")))
    for a in ast.walk(tree):
        if isinstance(a, ast.ImportFrom) and a.module and _target(a.module):
            for n in a.names:
                full = f"{_target(a.module)}.{n.name}"
                if n.name != "*" and not _resolves(full) and full not in seen:
                    seen.add(full)
                    missing.append((a.lineno, f"{a.module}.{n.name}"))
    out_lines = list(lines)
    for first, last, text in sorted(edits, reverse=True):
        indent = lines[first - 1][:len(lines[first - 1]) - len(lines[first - 1].lstrip())]
        ending = "\n" if lines[last - 1].endswith("\n") else ""
        comment = _trailing_comment(lines[last - 1])
        out_lines[first - 1:last] = [indent + text + (f"  {comment}" if comment else "") + ending]
    missing.sort()
    return Conversion("".join(out_lines), missing, len(edits))


def _trailing_comment(line: str) -> str:
    try:
        for tok in tokenize.generate_tokens(io.StringIO(line).readline):
            if tok.type == tokenize.COMMENT:
                return tok.string
    except (tokenize.TokenError, IndentationError):
        pass
    return ""


def convert_file(src: str, dst: str) -> Conversion:
    """`convert_source` on the file `src`, writing the result to `dst` atomically."""
    with open(src, encoding="utf-8") as f:
        conv = convert_source(f.read())
    tmp = f"{dst}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(conv.code)
    os.replace(tmp, dst)
    return conv


# ---------------------------------------------------------------- live modules

def _ctor_args(m) -> tuple[tuple, dict]:
    """The constructor arguments of a PyTorch layer, read from its attributes."""
    name = type(m).__name__
    d = m.__dict__
    if name == "Linear":
        return (m.in_features, m.out_features), {"bias": m.bias is not None}
    if name in ("Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d"):
        kw = {"stride": m.stride, "padding": m.padding, "dilation": m.dilation, "groups": m.groups,
              "bias": m.bias is not None, "padding_mode": m.padding_mode}
        if name.startswith("ConvTranspose"):
            kw["output_padding"] = m.output_padding
        return (m.in_channels, m.out_channels, m.kernel_size), kw
    if name in ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d"):
        return (m.num_features,), {"eps": m.eps, "momentum": m.momentum, "affine": m.affine,
                                   "track_running_stats": m.track_running_stats}
    if name == "LayerNorm":
        return (m.normalized_shape,), {"eps": m.eps, "elementwise_affine": m.elementwise_affine,
                                       "bias": getattr(m, "bias", None) is not None}
    if name == "GroupNorm":
        return (m.num_groups, m.num_channels), {"eps": m.eps, "affine": m.affine}
    if name == "Embedding":
        return (m.num_embeddings, m.embedding_dim), {"padding_idx": m.padding_idx, "max_norm": m.max_norm,
                                                      "scale_grad_by_freq": m.scale_grad_by_freq}
    if name in ("LSTM", "GRU", "RNN"):
        kw = {"num_layers": m.num_layers, "bias": m.bias, "batch_first": m.batch_first, "dropout": m.dropout,
              "bidirectional": m.bidirectional}
        if name == "RNN":
            kw["nonlinearity"] = m.nonlinearity
        if name == "LSTM" and getattr(m, "proj_size", 0):
            kw["proj_size"] = m.proj_size
        return (m.input_size, m.hidden_size), kw
    if name in ("Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout"):
        return (m.p,), {}
    if name in ("MaxPool1d", "MaxPool2d", "MaxPool3d"):
        return (m.kernel_size,), {"stride": m.stride, "padding": m.padding, "dilation": m.dilation,
                                  "ceil_mode": m.ceil_mode, "return_indices": m.return_indices}
    if name in ("AvgPool1d", "AvgPool2d", "AvgPool3d"):
        kw = {"stride": m.stride, "padding": m.padding, "ceil_mode": m.ceil_mode,
              "count_include_pad": m.count_include_pad}
        if name != "AvgPool1d":
            kw["divisor_override"] = m.divisor_override
        return (m.kernel_size,), kw
    if name.startswith("Adaptive") and "Pool" in name:
        return (m.output_size,), {}
    if name == "Flatten":
        return (), {"start_dim": m.start_dim, "end_dim": m.end_dim}
    if name in ("LeakyReLU",):
        return (m.negative_slope,), {}
    if name in ("ELU", "CELU"):
        return (), {"alpha": m.alpha}
    if name in ("Softmax", "LogSoftmax", "Softmin"):
        return (), {"dim": m.dim}
    if name == "GELU":
        return (), {"approximate": m.approximate}
    if name in ("Hardtanh",):
        return (m.min_val, m.max_val), {}
    if name == "Softplus":
        return (), {"beta": m.beta, "threshold": m.threshold}
    if name == "PReLU":
        return (), {"num_parameters": m.num_parameters}
    if name == "Upsample":
        return (), {"size": m.size, "scale_factor": m.scale_factor, "mode": m.mode, "align_corners": m.align_corners}
    if name == "Identity":
        return (), {}
    if name == "MultiheadAttention":
        return (m.embed_dim, m.num_heads), {"dropout": m.dropout, "bias": m.in_proj_bias is not None,
                                            "batch_first": m.batch_first, "kdim": m.kdim, "vdim": m.vdim}
    # Layers without hyper-parameters (ReLU, Tanh, Sigmoid, SiLU, ...).
    if not any(k for k in d if not k.startswith("_") and k not in ("training", "inplace")):
        return (), {}
    raise LoomError(f"loom.from_torch: no rule to read the settings of torch.nn.{name}; rebuild it with "
                    f"loom.nn.{name}(...) and load its state_dict")


def from_torch(module: Any):
    """A loom module equivalent to the PyTorch module `module`, with its parameters and buffers copied.

    Supported: PyTorch's containers (Sequential, ModuleList, ModuleDict) and its
    own layers. The result is in the same train/eval mode. A user-defined
    module class raises `LoomError` naming it (its ``forward`` is PyTorch code;
    convert its source with ``python -m loom.convert``).
    """
    import numpy as np

    from loom import _api as loom
    import loom.nn as lnn
    try:
        import torch
    except ImportError:
        raise LoomError("loom.from_torch: PyTorch is not installed; save the model's state_dict with torch.save "
                        "and load it with loom.io.torch_load instead") from None
    if not isinstance(module, torch.nn.Module):
        raise LoomError(f"loom.from_torch: expected a torch.nn.Module, got {type(module).__name__}")

    def build(m):
        cls = type(m)
        name = cls.__name__
        if not cls.__module__.startswith("torch.nn"):
            raise LoomError(f"loom.from_torch: {cls.__module__}.{name} is not one of PyTorch's own layers, so its "
                            "forward cannot be carried over; convert its source with `python -m loom.convert "
                            "file.py -o out.py` and load the weights with load_state_dict")
        if name == "Sequential":
            return lnn.Sequential(*[build(c) for c in m])
        if name == "ModuleList":
            return lnn.ModuleList([build(c) for c in m])
        if name == "ModuleDict":
            return lnn.ModuleDict({k: build(c) for k, c in m.items()})
        target = getattr(lnn, name, None)
        if target is None:
            raise LoomError(f"loom.from_torch: loom.nn has no {name}")
        args, kw = _ctor_args(m)
        if "inplace" in m.__dict__:
            kw["inplace"] = m.inplace
        return target(*args, **kw)

    out = build(module)
    state = {k: loom.tensor(np.array(v.detach().cpu().numpy())) if v.dtype != torch.bfloat16 else
             loom.tensor(v.detach().float().numpy()).to(loom.bfloat16) for k, v in module.state_dict().items()}
    missing, unexpected = out.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise LoomError(f"loom.from_torch: the converted module's state does not match PyTorch's: missing "
                        f"{list(missing)}, unexpected {list(unexpected)}")
    out.train(module.training)
    for (_, lm), (_, tm) in zip(out.named_modules(), module.named_modules()):
        lm.training = tm.training
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m loom.convert",
                                description="Rewrite a PyTorch program to run on loom; list what loom lacks.")
    p.add_argument("src", help="the PyTorch program (.py)")
    p.add_argument("-o", "--output", help="where to write the converted program (default: SRC with _loom.py)")
    args = p.parse_args(argv)
    dst = args.output or os.path.splitext(args.src)[0] + "_loom.py"
    try:
        conv = convert_file(args.src, dst)
    except (OSError, LoomError) as e:
        print(f"loom.convert: {e}", file=sys.stderr)
        return 2
    print(f"loom.convert: wrote {dst} ({conv.rewritten} import statement(s) rewritten)")
    if conv.missing:
        print(f"loom.convert: {len(conv.missing)} name(s) the program uses are not in loom yet:")
        for line, name in conv.missing:
            print(f"  line {line}: {name}")
        return 1
    print("loom.convert: every torch name the program uses is provided by loom")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
