"""API reference for loom's public names, and the docstring coverage check.

``.. loom-api:: loom.optim`` documents every public name of a module (its
``__all__``, else what it exports that is defined in loom), grouped by the
module that defines it. When the build ends, every public name of every module
in `PUBLIC_MODULES` must have a docstring and appear in the reference; if not,
the build fails with the list (``python docs/_ext/loom_api.py`` prints the same
list without Sphinx).
"""
from __future__ import annotations

import functools
import importlib
import inspect
import re
import sys
import types

# The modules whose public names make up loom's documented API.
PUBLIC_MODULES = [
    "loom", "loom.nn", "loom.nn.functional", "loom.nn.init", "loom.nn.utils", "loom.optim",
    "loom.optim.lr_scheduler", "loom.data", "loom.autograd", "loom.ops", "loom.profiler", "loom.runtime",
    "loom.train", "loom.compiler",
    "loom.io", "loom.onnx", "loom.jit", "loom.quantization", "loom.linalg", "loom.fft", "loom.func",
    "loom.distributions", "loom.distributions.constraints", "loom.distributions.transforms",
    "loom.ir", "loom.bench", "loom.bench.cli", "loom.bench.stats", "loom.bench.report", "loom.bench.compile_probe",
    "loom.distributed", "loom.distributed.nn.functional", "loom.distributed.checkpoint", "loom.distributed.optim",
    "loom.distributed.sbp", "loom.distributed.tensor_parallel", "loom.distributed.simulator",
    "loom.distributed.pipeline",
    "loom.nn.parallel",
    "loom.tf", "loom.tf.math", "loom.tf.linalg", "loom.tf.nn", "loom.tf.random", "loom.tf.data", "loom.tf.keras",
    "loom.tf.keras.layers",
    "loom.tf.keras.losses", "loom.tf.keras.metrics", "loom.tf.keras.optimizers", "loom.tf.keras.callbacks",
    "loom.tf.keras.initializers", "loom.tf.keras.activations",
]


def _is_loom_value(obj) -> bool:
    mod = getattr(obj, "__module__", None) or type(obj).__module__
    return isinstance(mod, str) and mod.split(".")[0] == "loom"


def public_names(modname: str) -> list[str]:
    """A module's public names: ``__all__`` if it has one, else the non-module names it holds that loom defines."""
    mod = importlib.import_module(modname)
    names = getattr(mod, "__all__", None)
    if names is None:
        names = [n for n in vars(mod) if not n.startswith("_") and _is_loom_value(getattr(mod, n))]
        names.sort()
    return [n for n in names if not isinstance(getattr(mod, n), types.ModuleType)]


def kind(obj) -> str:
    """'class', 'function' (anything with a signature and a docstring of its own) or 'data'."""
    if inspect.isclass(obj):
        return "class"
    return "function" if inspect.isroutine(obj) else "data"


def own_doc(obj) -> str:
    """The docstring written for this object (a class's own, not an inherited one)."""
    if inspect.isclass(obj):
        doc = obj.__dict__.get("__doc__")
    elif kind(obj) == "data":
        return ""
    else:
        doc = getattr(obj, "__doc__", None)
    return (doc or "").strip()


def undocumented(modname: str) -> list[str]:
    """Public callables of ``modname`` without a docstring (data names are checked against the reference)."""
    mod = importlib.import_module(modname)
    return [f"{modname}.{n}" for n in public_names(modname)
            if kind(getattr(mod, n)) != "data" and not own_doc(getattr(mod, n))]


# Section titles for the modules that define the names re-exported by `loom`.
TITLES = {
    "loom.tensor": "Tensors, creation and random numbers",
    "loom.dtypes": "Data types",
    "loom.errors": "Errors",
    "loom.device": "Devices",
    "loom.autograd.grad_mode": "Gradient modes",
    "loom.autograd.tape": "Gradient tape",
    "loom.functional.math": "Pointwise math and activations",
    "loom.functional.reduce": "Reductions",
    "loom.functional.shape": "Shapes and views",
    "loom.functional.indexing": "Indexing, gathering and scattering",
    "loom.functional.linalg": "Linear algebra",
    "loom.functional.decomp": "Matrix factorisations (PyTorch's torch.* spellings; see loom.linalg)",
    "loom.functional.nn": "Neural-network functions",
    "loom.functional.conv": "Convolution and pooling",
    "loom.functional.complex": "Complex numbers",
    "loom.functional.spectral": "Short-time Fourier transforms",
    "loom.function": "Tracing: loom.function",
    "loom.runtime.realize": "Execution backend",
    "loom.io.checkpoint": "Checkpoints",
    "loom.io.torch_format": "PyTorch checkpoints",
    "loom": "Type promotion and other helpers",
}


def _defining_module(obj, default: str) -> str:
    if kind(obj) == "data":
        return type(obj).__module__ if _is_loom_value(obj) else default
    return getattr(obj, "__module__", None) or default


def _data_line(modname: str, name: str, obj) -> list[str]:
    doc = DATA_DOCS.get(f"{modname}.{name}") or ""
    if type(obj).__name__ == "DType":
        doc = f"The ``{obj.name}`` dtype" + ("." if obj.name == name else f" (PyTorch's alias ``loom.{name}``).")
    lines = [f".. py:data:: {name}", f"   :module: {modname}", ""]
    if doc:
        lines += ["   " + doc, ""]
    return lines


# What a public non-callable value is (these have no docstring of their own).
DATA_DOCS = {
    "loom.default_generator": "The global :class:`loom.Generator` used by random functions without `generator=`.",
    "loom.compiler.PASSES": "Registered compiler passes by name: ``{name: Pass}`` (see :func:`register_pass`).",
    "loom.ir.PRIMITIVES": "The primitive op table: ``{name: Primitive}`` with each op's shape/dtype rule, "
                          "NumPy reference and backward rule (`loom/ir/ops.py`).",
}


def owner(obj, exported_by: list[str]) -> str:
    """The page that documents an object exported by several modules; the other pages link to it.

    The most specific exporting package that defines it (`loom.autograd` for
    `loom.autograd.tape.GradientTape`); else `loom.nn.functional` for the
    functions PyTorch keeps there (`relu`, `cross_entropy`); else `loom`.
    """
    defining = getattr(obj, "__module__", "") or ""
    prefixed = [m for m in exported_by if m != "loom" and (defining == m or defining.startswith(m + "."))]
    if prefixed:
        return max(prefixed, key=len)
    for preferred in ("loom.nn.functional", "loom"):
        if preferred in exported_by:
            return preferred
    return exported_by[0]


@functools.cache
def _exporters() -> dict[int, list[str]]:
    found: dict[int, list[str]] = {}
    for m in PUBLIC_MODULES:
        mod = importlib.import_module(m)
        for n in public_names(m):
            obj = getattr(mod, n)
            if kind(obj) != "data":
                found.setdefault(id(obj), []).append(m)
    return found


def _home(modname: str, obj) -> str | None:
    """Where ``obj`` is documented in full, when that is not ``modname``."""
    if kind(obj) == "data":
        return None
    home = owner(obj, _exporters().get(id(obj), [modname]))
    if home == modname:
        return None
    name = next(n for n in public_names(home) if getattr(importlib.import_module(home), n) is obj)
    return f"{home}.{name}"


def rst_for(modname: str, group: bool) -> list[str]:
    mod = importlib.import_module(modname)
    names = public_names(modname)
    sections: dict[str, list[str]] = {}
    for n in names:
        obj = getattr(mod, n)
        key = _defining_module(obj, modname) if group else ""
        sections.setdefault(key, []).append(n)
    lines: list[str] = []
    order = list(TITLES) if group else [""]
    keys = [k for k in order if k in sections] + sorted(k for k in sections if k not in order)
    for key in keys:
        if group:
            title = TITLES.get(key, key)
            lines += [title, "-" * len(title), ""]
        for n in sections[key]:
            obj = getattr(mod, n)
            k = kind(obj)
            home = _home(modname, obj)
            if home is not None:
                role = "class" if k == "class" else "func"
                lines += [f".. py:{'class' if k == 'class' else 'function'}:: {n}", f"   :module: {modname}", "",
                          f"   Same as :{role}:`{home}`.", ""]
            elif k == "data":
                lines += _data_line(modname, n, obj)
            elif k == "class" and obj.__name__ != n:
                # Autodoc shows a class under another name only as "alias of"; give its summary instead.
                summary = inspect.getdoc(obj).split("\n\n")[0].replace("\n", " ")
                real = f"{obj.__module__}.{obj.__name__}"
                # No :canonical: (the class's own autodoc entry registers that name; two would clash).
                lines += [f".. py:class:: {n}", f"   :module: {modname}", "",
                          f"   {summary} PyTorch's spelling of `{real}`.", ""]
            elif k == "class":
                lines += [f".. autoclass:: {modname}::{n}", "   :members:", ""]
            else:
                lines += [f".. autofunction:: {modname}::{n}", ""]
    return lines


_CODE = re.compile(r"(``.+?``|`[^`]+`)")
_KEEP = re.compile(r"(\\.|(?<![\w*])\*\*[^*\s][^*]*?\*\*(?![\w*])|(?<![\w*])\*[^*\s][^*]*?\*(?![\w*]))")


def _escape_text(text: str) -> str:
    out = []
    for i, part in enumerate(_KEEP.split(text)):
        if i % 2:
            out.append(part)
        else:
            part = part.replace("|", "\\|").replace("*", "\\*")
            out.append(re.sub(r"(?<=\w)_(?=\W|$)", r"\\_", part))
    return "".join(out)


def _escape_line(line: str) -> str:
    field = re.match(r"\s*:[^:]+:", line)
    head, rest = (line[:field.end()], line[field.end():]) if field else ("", line)
    parts = _CODE.split(rest)
    return head + "".join(p if i % 2 else _escape_text(p) for i, p in enumerate(parts))


def _escape_plain_text(app, what, name, obj, options, lines):
    """Docstrings are plain text with `code` spans: keep their |x|, a*b and name_ from meaning reST markup."""
    literal_indent = None  # Inside a literal block or directive opened at this indent.
    in_doctest = False
    for i, line in enumerate(lines):
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if not stripped:
            in_doctest = False
            continue
        if literal_indent is not None and indent > literal_indent:
            continue
        literal_indent = None
        if stripped.startswith(">>>") or in_doctest:
            in_doctest = True
            continue
        if stripped.startswith(".. "):
            literal_indent = indent
            continue
        lines[i] = _escape_line(line)
        if stripped.endswith("::"):
            literal_indent = indent
    return lines


_PARAM = re.compile(r"^\*{0,2}\w+(, ?\*{0,2}\w+)*( ?: .*)?$")
_FIELD_SECTIONS = {"Parameters", "Returns", "Yields", "Raises", "Attributes", "Other Parameters"}


def _notes_after_parameters(app, what, name, obj, options, lines):
    """A prose paragraph after a Parameters list is a note, not more parameters: give it a Notes heading."""
    section = None
    i = 0
    while i < len(lines):
        line = lines[i]
        if i + 1 < len(lines) and line.strip() and set(lines[i + 1].strip()) == {"-"}:
            section = line.strip()
            i += 2
            continue
        if section in _FIELD_SECTIONS and line.strip() and not line[0].isspace() and not _PARAM.match(line) \
                and i > 0 and not lines[i - 1].strip():
            lines[i:i] = ["Notes", "-----"]
            section = "Notes"
            i += 2
        i += 1
    return lines


def setup(app):
    from docutils import nodes
    from docutils.parsers.rst import Directive, directives
    from docutils.statemachine import StringList
    from sphinx.util.nodes import nested_parse_with_titles

    class LoomApi(Directive):
        required_arguments = 1
        option_spec = {"group": directives.flag}

        def run(self):
            modname = self.arguments[0]
            lines = rst_for(modname, "group" in self.options)
            node = nodes.section() if "group" in self.options else nodes.container()
            node.document = self.state.document
            nested_parse_with_titles(self.state, StringList(lines, source=f"<loom-api {modname}>"), node)
            return node.children

    class CommandHelp(Directive):
        """The ``--help`` text of a module's argparse ``parser()``, so the page shows the real options."""
        required_arguments = 1

        def run(self):
            import os
            os.environ["COLUMNS"] = "100"
            text = importlib.import_module(self.arguments[0]).parser().format_help()
            return [nodes.literal_block(text, text, language="text")]

    class Run(Directive):
        """Run the (self-contained) code at build time and show it with what it printed."""
        has_content = True

        def run(self):
            import contextlib
            import io
            import traceback

            code = "\n".join(self.content)
            out = io.StringIO()
            try:
                with contextlib.redirect_stdout(out):
                    exec(compile(code, f"<loom-run in {self.state.document.current_source}>", "exec"), {})
            except Exception:
                raise self.error("loom-run: the code failed:\n" + traceback.format_exc()) from None
            text = out.getvalue().rstrip("\n")
            return [nodes.literal_block(code, code, language="python"),
                    nodes.literal_block(text, text, language="text")]

    app.add_directive("loom-api", LoomApi)
    app.add_directive("loom-run", Run)
    app.connect("autodoc-process-docstring", _notes_after_parameters, priority=400)  # Before napoleon.
    app.connect("autodoc-process-docstring", _escape_plain_text, priority=900)  # After it.
    app.add_directive("loom-command-help", CommandHelp)
    app.connect("build-finished", _check_coverage)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}


# Classes whose public methods and properties are part of the checked API, not only the class itself.
MEMBER_CLASSES = ["loom.Tensor"]


def public_members(clsname: str) -> list[str]:
    """The public methods and properties of a class (inherited from `object` aside)."""
    modname, name = clsname.rsplit(".", 1)
    cls = getattr(importlib.import_module(modname), name)
    out = []
    for n in sorted(dir(cls)):
        if n.startswith("_") or hasattr(object, n):
            continue
        member = inspect.getattr_static(cls, n)
        if isinstance(member, (property, staticmethod, classmethod)) or inspect.isfunction(member):
            out.append(n)
    return out


def undocumented_members(clsname: str) -> list[str]:
    modname, name = clsname.rsplit(".", 1)
    cls = getattr(importlib.import_module(modname), name)
    return [f"{clsname}.{n}" for n in public_members(clsname)
            if not (getattr(inspect.getattr_static(cls, n), "__doc__", None) or "").strip()]


def report() -> tuple[list[str], list[str]]:
    """(all public names, those without a docstring)."""
    everything, missing = [], []
    for m in PUBLIC_MODULES:
        everything += [f"{m}.{n}" for n in public_names(m)]
        missing += undocumented(m)
    for c in MEMBER_CLASSES:
        everything += [f"{c}.{n}" for n in public_members(c)]
        missing += undocumented_members(c)
    return everything, missing


def _check_coverage(app, exception):
    if exception is not None or app.builder.name not in ("html", "dirhtml", "singlehtml"):
        return
    from sphinx.errors import ExtensionError

    everything, missing = report()
    objects = app.env.get_domain("py").objects
    members = tuple(f"{c}." for c in MEMBER_CLASSES)
    absent = [n for n in everything if n not in objects and not n.startswith(members)]
    problems = [f"  no docstring: {n}" for n in missing] + [f"  not in the API reference: {n}" for n in absent]
    if problems:
        raise ExtensionError(f"loom docs coverage: {len(problems)} public name(s) undocumented:\n" +
                             "\n".join(problems))
    print(f"loom docs coverage: all {len(everything)} public names documented")


if __name__ == "__main__":
    import os
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    everything, missing = report()
    for n in missing:
        print(n)
    print(f"{len(everything) - len(missing)} of {len(everything)} public names have a docstring", file=sys.stderr)
    sys.exit(1 if missing else 0)
