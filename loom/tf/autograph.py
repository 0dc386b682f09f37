"""AutoGraph: rewrite Python `if`/`while`/`for` over tensors into `loom.cond` / `loom.while_loop`.

As TensorFlow's AutoGraph does, `convert(fn)` parses `fn`'s source and turns
every control-flow statement into a call of a helper below, with the branches
and loop bodies as nested functions over the variables they assign. The
helpers decide at run time: a Python condition runs as Python (so `if
training:` stays an ordinary branch); a tensor condition outside a trace runs
eagerly; inside a `loom.function` trace it becomes `loom.cond` (both branches
traced, the result selected) or `loom.while_loop` (a data-dependent loop).
Statements the rewrite cannot express (`break`, `continue` or `return` inside
a converted loop, `return` in only one branch of an `if`) stay Python and raise
a clear loom error if their condition turns out to be a tensor during tracing.
"""
from __future__ import annotations

import ast
import inspect
import sys
import types
import textwrap
from typing import Any, Callable

import loom
from loom.errors import LoomError
from loom.function import tracing
from loom.tensor import Tensor

# ---------------------------------------------------------------- runtime helpers (ag__.*)


class Undefined:
    """The value of a variable that a branch or loop leaves unassigned."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<undefined variable {self.name!r}>"


def ld(getter: Callable[[], Any], name: str = "?") -> Any:
    """The variable's current value, or `Undefined` if it has none yet."""
    try:
        return getter()
    except NameError:
        return Undefined(name)


def _is_tensor_pred(value) -> bool:
    return isinstance(value, Tensor)


def py_bool(value, where: str) -> bool:
    """A condition of a statement AutoGraph left as Python; a tensor here must have a concrete value."""
    if isinstance(value, Tensor) and tracing():
        raise LoomError(f"loom.tf.function: this {where} has a tensor condition but contains break, continue "
                        "or return (or an else clause), which AutoGraph in loom does not convert; move the "
                        "early exit out of the statement (e.g. carry a flag variable) or compute the "
                        "condition outside tf.function")
    return bool(value)


def not_(value):
    """`not value`, elementwise for tensors."""
    return loom.logical_not(value) if isinstance(value, Tensor) else not value


def and_(*getters):
    """Short-circuit `a and b` for Python values, elementwise for tensors."""
    value = getters[0]()
    for g in getters[1:]:
        if isinstance(value, Tensor):
            value = loom.logical_and(value.to(loom.bool), _as_bool_tensor(g()))
        elif not value:
            return value
        else:
            value = g()
    return value


def or_(*getters):
    """Short-circuit `a or b` for Python values, elementwise for tensors."""
    value = getters[0]()
    for g in getters[1:]:
        if isinstance(value, Tensor):
            value = loom.logical_or(value.to(loom.bool), _as_bool_tensor(g()))
        elif value:
            return value
        else:
            value = g()
    return value


def _as_bool_tensor(v):
    return v.to(loom.bool) if isinstance(v, Tensor) else loom.tensor(bool(v))


def _to_tensor_like(value, like, name: str, what: str):
    """A Python number as a tensor (TF's dtypes), or `like`'s dtype when it is a tensor."""
    from loom.tf._core import convert_to_tensor
    if isinstance(value, Tensor):
        return value
    if isinstance(value, Undefined):
        raise LoomError(f"loom.tf.function: variable {name!r} must have a value before the {what} "
                        "(AutoGraph carries it through the converted statement)")
    if isinstance(value, (bool, int, float)):
        return convert_to_tensor(value, like.dtype if isinstance(like, Tensor) else None)
    hint = (" (a tf.TensorArray is a Python list in loom: loop with Python range() and tf.stack a list "
            "instead)" if type(value).__name__ == "TensorArray" else "")
    raise LoomError(f"loom.tf.function: variable {name!r} is a {type(value).__name__}; a {what} over a "
                    f"tensor condition can only carry tensors and Python numbers{hint}")


def if_stmt(pred, true_fn, false_fn, values: tuple, names: tuple):
    """An `if` over the variables it assigns: Python, eager, or `loom.cond` inside a trace."""
    if not isinstance(pred, Tensor) or not tracing():
        return true_fn(*values) if bool(pred) else false_fn(*values)
    if pred.numel() != 1:
        raise LoomError(f"loom.tf.function: an if condition must hold one element, got shape {list(pred.shape)}")
    a = true_fn(*values)
    b = false_fn(*values)
    picked_a: list = []
    picked_b: list = []
    out: list = [None] * len(names)
    tensor_pos = []
    for k, (x, y, n) in enumerate(zip(a, b, names)):
        if isinstance(x, Undefined) or isinstance(y, Undefined):
            out[k] = x if isinstance(x, Undefined) else y  # Defined in one branch only: unusable after.
        elif isinstance(x, Tensor) or isinstance(y, Tensor):
            x = _to_tensor_like(x, y, n, "if statement")
            y = _to_tensor_like(y, x, n, "if statement")
            if x.dtype is not y.dtype:
                raise LoomError(f"loom.tf.function: variable {n!r} is {x.dtype.name} in one branch of an if "
                                f"and {y.dtype.name} in the other")
            picked_a.append(x)
            picked_b.append(y)
            tensor_pos.append(k)
        elif x is y or (isinstance(x, (int, float, bool, str)) and type(x) is type(y) and x == y):
            out[k] = x
        else:
            raise LoomError(f"loom.tf.function: variable {n!r} gets different Python values ({x!r} and {y!r}) "
                            "in the branches of an if over a tensor condition; make it a tensor")
    if tensor_pos:
        chosen = loom.cond(pred, lambda: tuple(picked_a), lambda: tuple(picked_b))
        for k, v in zip(tensor_pos, chosen):
            out[k] = v
    return tuple(out)


def while_stmt(cond_fn, body_fn, values: tuple, consts: tuple, names: tuple):
    """A `while` over its loop-carried variables: Python, eager, or `loom.while_loop` inside a trace.

    A variable with no value before the loop is local to each iteration (assigned before it is
    read, as TensorFlow's liveness analysis finds): it is not carried, and stays undefined after.
    """
    test = cond_fn(*values, *consts)
    if isinstance(test, Tensor):
        # As in TensorFlow's graph loop, numbers the loop carries become tensors.
        values = tuple(v if isinstance(v, Undefined) else _to_tensor_like(v, None, n, "while loop")
                       for v, n in zip(values, names))
    if not isinstance(test, Tensor) or not tracing():
        while bool(test):
            values = tuple(body_fn(*values, *consts))
            test = cond_fn(*values, *consts)
        return values
    live = [k for k, v in enumerate(values) if not isinstance(v, Undefined)]
    n_carried = len(live)
    tensor_consts = [k for k, c in enumerate(consts) if isinstance(c, Tensor)]

    def full(vs):
        v = list(values)
        for j, k in enumerate(live):
            v[k] = vs[j]
        cs = list(consts)
        for j, k in enumerate(tensor_consts):
            cs[k] = vs[n_carried + j]
        return v, cs

    def cond(*vs):
        v, c = full(vs)
        return _cond_value(cond_fn(*v, *c))

    def body(*vs):
        v, c = full(vs)
        new = body_fn(*v, *c)
        outs = []
        for k in live:
            x, old = new[k], v[k]
            outs.append(x if isinstance(x, Tensor) else _to_tensor_like(x, old, names[k], "while loop").to(old.dtype))
        return tuple(outs) + tuple(vs[n_carried:])
    carried = tuple(values[k] for k in live)
    result = loom.while_loop(cond, body, carried + tuple(consts[k] for k in tensor_consts))
    out = list(values)
    for j, k in enumerate(live):
        out[k] = result[j]
    return tuple(out)


def _cond_value(t):
    if not isinstance(t, Tensor):
        return loom.tensor(bool(t))
    return t.reshape(()).to(loom.bool)


class RangeSpec:
    """`tf.range(...)` as a `for` loop's iterable: bounds kept apart so the loop need not materialise it."""

    def __init__(self, start, limit=None, delta=1, dtype=None) -> None:
        if limit is None:
            start, limit = 0, start
        self.start, self.limit, self.delta, self.dtype = start, limit, delta, dtype

    def materialize(self):
        from loom.tf._core import range as tf_range
        return tf_range(self.start, self.limit, self.delta, dtype=self.dtype)


def range_spec(*args, **kwargs) -> RangeSpec:
    """The bounds of a `tf.range` a `for` loop iterates over."""
    kwargs.pop("name", None)
    return RangeSpec(*args, **kwargs)


def for_stmt(iterable, body_fn, values: tuple, consts: tuple, names: tuple):
    """A `for` loop: `tf.range` inside a trace becomes `loom.while_loop`; anything else iterates in Python."""
    if isinstance(iterable, RangeSpec):
        if not tracing():
            iterable = iterable.materialize()
        else:
            return _for_range(iterable, body_fn, values, consts, names)
    _check_not_dataset(iterable)
    for item in iterable:
        values = tuple(body_fn(item, *values, *consts))
    return values


def _for_range(spec: RangeSpec, body_fn, values, consts, names):
    from loom.tf._core import convert_to_tensor
    d = spec.dtype
    bounds = [b if isinstance(b, Tensor) else convert_to_tensor(b, d) for b in (spec.start, spec.limit, spec.delta)]
    dtype = bounds[0].dtype if d is None else d
    start, limit, delta = (b.to(dtype).reshape(()) for b in bounds)
    n = len(values)

    def cond_fn(i, lim, dl, *rest):
        up = loom.logical_and(dl > 0, i < lim)
        down = loom.logical_and(dl < 0, i > lim)
        return loom.logical_or(up, down)

    def body_fn2(i, lim, dl, *rest):
        new = body_fn(i, *rest[:n], *rest[n:])
        return (i + dl, lim, dl) + tuple(new)
    out = while_stmt(cond_fn, body_fn2, (start, limit, delta) + tuple(values), tuple(consts),
                     ("<range index>", "<range limit>", "<range delta>") + tuple(names))
    return tuple(out[3:])


# ---------------------------------------------------------------- the source transform


def _stores(nodes) -> list[str]:
    """Names a list of statements assigns, in order of first assignment (not inside nested scopes)."""
    found: list[str] = []

    def visit(node):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.append(node.name)
            return
        if isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            return
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            found.append(node.id)
        for child in ast.iter_child_nodes(node):
            visit(child)
    for n in nodes:
        visit(n)
    return list(dict.fromkeys(n for n in found if not n.startswith("ag__") or n == "ag__retval"))


def _loads(nodes) -> list[str]:
    found: list[str] = []
    for n in nodes:
        for node in ast.walk(n):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                found.append(node.id)
    return list(dict.fromkeys(found))


def _escapes(stmts, loop: bool) -> bool:
    """Whether `stmts` hold a return (or, for a loop body, a break/continue of this loop)."""
    def visit(node, in_loop):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            return False
        if isinstance(node, ast.Return):
            return True
        if isinstance(node, (ast.Break, ast.Continue)) and not in_loop:
            return loop
        inner = in_loop or isinstance(node, (ast.For, ast.While, ast.AsyncFor))
        return any(visit(c, inner) for c in ast.iter_child_nodes(node))
    return any(visit(s, False) for s in stmts)


def _has_return(stmts) -> bool:
    return _escapes(stmts, loop=False)


def _ends_in_return(stmts) -> bool:
    return bool(stmts) and isinstance(stmts[-1], ast.Return) and not _has_return(stmts[:-1])


def _expr(src: str) -> ast.expr:
    return ast.parse(src, mode="eval").body


def _ld_tuple(names) -> ast.expr:
    elts = [_expr(f"ag__.ld(lambda: {n}, {n!r})") for n in names]
    return ast.Tuple(elts=elts, ctx=ast.Load())


def _names_tuple(names, ctx) -> ast.expr:
    return ast.Tuple(elts=[ast.Name(id=n, ctx=ctx()) for n in names], ctx=ctx())


def _args(names) -> ast.arguments:
    return ast.arguments(posonlyargs=[], args=[ast.arg(arg=n) for n in names], vararg=None, kwonlyargs=[],
                         kw_defaults=[], kwarg=None, defaults=[])


def _def(name: str, params, body, returns) -> ast.FunctionDef:
    body = list(body) or [ast.Pass()]
    body.append(ast.Return(value=returns))
    return ast.FunctionDef(name=name, args=_args(params), body=body, decorator_list=[], returns=None,
                           type_params=[])


class _Converter:
    """Rewrites one function body; `locals_` are its parameters and assigned names."""

    def __init__(self, locals_: set[str]) -> None:
        self.locals = locals_
        self.count = 0

    def _fresh(self, kind: str) -> str:
        self.count += 1
        return f"ag__{kind}_{self.count}"

    def test(self, node: ast.expr) -> ast.expr:
        """Boolean operators in a condition become AutoGraph's tensor-aware ones."""
        if isinstance(node, ast.BoolOp):
            fn = "and_" if isinstance(node.op, ast.And) else "or_"
            lambdas = [ast.Lambda(args=_args([]), body=self.test(v)) for v in node.values]
            return ast.Call(func=_expr(f"ag__.{fn}"), args=lambdas, keywords=[])
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return ast.Call(func=_expr("ag__.not_"), args=[self.test(node.operand)], keywords=[])
        return node

    def block(self, stmts: list) -> list:
        stmts = list(stmts)
        # `if c: return a` followed by more code ending in a return: the rest is the else branch.
        for i, s in enumerate(stmts):
            if (isinstance(s, ast.If) and not s.orelse and _ends_in_return(s.body) and i + 1 < len(stmts)
                    and _ends_in_return(stmts[i + 1:])):
                s.orelse = stmts[i + 1:]
                stmts = stmts[:i + 1]
                break
        out: list = []
        for s in stmts:
            out.extend(self.stmt(s))
        return out

    def stmt(self, s) -> list:
        if isinstance(s, ast.AugAssign) and isinstance(s.target, ast.Name):
            # TensorFlow tensors are immutable: `x += 1` rebinds x, it never writes through an alias.
            value = ast.BinOp(left=ast.Name(s.target.id, ast.Load()), op=s.op, right=s.value)
            return [ast.Assign(targets=[ast.Name(s.target.id, ast.Store())], value=value)]
        if isinstance(s, ast.If):
            return self.if_(s)
        if isinstance(s, ast.While):
            return self.while_(s)
        if isinstance(s, ast.For):
            return self.for_(s)
        if isinstance(s, (ast.With, ast.AsyncWith)):
            s.body = self.block(s.body)
        elif isinstance(s, ast.Try):
            s.body = self.block(s.body)
            s.orelse = self.block(s.orelse)
            s.finalbody = self.block(s.finalbody)
            for h in s.handlers:
                h.body = self.block(h.body)
        return [s]

    def _python_if(self, s: ast.If) -> list:
        s.test = ast.Call(func=_expr("ag__.py_bool"), args=[self.test(s.test), ast.Constant("if statement")],
                          keywords=[])
        s.body = self.block(s.body)
        s.orelse = self.block(s.orelse)
        return [s]

    def if_(self, s: ast.If) -> list:
        body, orelse = self.block(s.body), self.block(s.orelse)
        tail: list = []
        if _ends_in_return(body) and _ends_in_return(orelse):
            # Both branches return: each assigns the result and one return follows the if.
            body = body[:-1] + [ast.Assign(targets=[ast.Name("ag__retval", ast.Store())],
                                           value=body[-1].value or ast.Constant(None))]
            orelse = orelse[:-1] + [ast.Assign(targets=[ast.Name("ag__retval", ast.Store())],
                                               value=orelse[-1].value or ast.Constant(None))]
            tail = [ast.Return(value=ast.Name("ag__retval", ast.Load()))]
        if _has_return(body) or _has_return(orelse) or _escapes(body + orelse, loop=True):
            s.body, s.orelse = body, orelse
            return self._python_if(s)
        names = _stores(body + orelse)
        t, f = self._fresh("if_true"), self._fresh("if_false")
        ret = _names_tuple(names, ast.Load)
        call = ast.Call(func=_expr("ag__.if_stmt"),
                        args=[self.test(s.test), ast.Name(t, ast.Load()), ast.Name(f, ast.Load()),
                              _ld_tuple(names), ast.Constant(tuple(names))], keywords=[])
        return [_def(t, names, body, ret), _def(f, names, orelse, ret),
                ast.Assign(targets=[_names_tuple(names, ast.Store)], value=call)] + tail

    def _loop_names(self, target_names, test_and_body) -> tuple[list[str], list[str]]:
        carried = [n for n in _stores(test_and_body) if n not in target_names]
        consts = [n for n in _loads(test_and_body)
                  if n in self.locals and n not in carried and n not in target_names]
        return carried, consts

    def while_(self, s: ast.While) -> list:
        body = self.block(s.body)
        if s.orelse or _escapes(body, loop=True):
            s.test = ast.Call(func=_expr("ag__.py_bool"), args=[self.test(s.test), ast.Constant("while loop")],
                              keywords=[])
            s.body = body
            s.orelse = self.block(s.orelse)
            return [s]
        carried, consts = self._loop_names([], [s.test] + body)
        c, b = self._fresh("while_cond"), self._fresh("while_body")
        cond_def = _def(c, carried + consts, [], self.test(s.test))
        body_def = _def(b, carried + consts, body, _names_tuple(carried, ast.Load))
        call = ast.Call(func=_expr("ag__.while_stmt"),
                        args=[ast.Name(c, ast.Load()), ast.Name(b, ast.Load()), _ld_tuple(carried),
                              _ld_tuple(consts), ast.Constant(tuple(carried))], keywords=[])
        return [cond_def, body_def, ast.Assign(targets=[_names_tuple(carried, ast.Store)], value=call)]

    def for_(self, s: ast.For) -> list:
        body = self.block(s.body)
        if s.orelse or _escapes(body, loop=True) or not isinstance(s.target, ast.Name):
            s.body = body
            s.orelse = self.block(s.orelse)
            it = s.iter
            s.iter = ast.Call(func=_expr("ag__.py_iter"), args=[it], keywords=[])
            return [s]
        target = s.target.id
        it = s.iter
        if (isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr == "range"
                and isinstance(it.func.value, (ast.Name, ast.Attribute))):
            it = ast.Call(func=_expr("ag__.range_spec"), args=it.args, keywords=it.keywords)
        carried, consts = self._loop_names([target], body)
        b = self._fresh("for_body")
        body_def = _def(b, [target] + carried + consts, body, _names_tuple(carried, ast.Load))
        call = ast.Call(func=_expr("ag__.for_stmt"),
                        args=[it, ast.Name(b, ast.Load()), _ld_tuple(carried), _ld_tuple(consts),
                              ast.Constant(tuple(carried))], keywords=[])
        return [body_def, ast.Assign(targets=[_names_tuple(carried, ast.Store)], value=call)]


def py_iter(iterable):
    """The iterable of a `for` AutoGraph left as Python (a `tf.range` here must have concrete bounds)."""
    if isinstance(iterable, RangeSpec):
        if tracing():
            raise LoomError("loom.tf.function: this for loop over tf.range contains break, continue or "
                            "return (or an else clause), which AutoGraph in loom does not convert; carry a "
                            "flag variable instead, or loop over Python's range")
        return iterable.materialize()
    _check_not_dataset(iterable)
    return iterable


def _check_not_dataset(iterable) -> None:
    """A dataset read during a trace would be baked into the graph as constants: refuse it."""
    from loom.tf.data import Dataset
    if isinstance(iterable, Dataset) and tracing():
        raise LoomError("loom.tf.function: iterating a tf.data.Dataset inside tf.function is not supported "
                        "(the trace would freeze its elements); iterate outside and pass each batch as an "
                        "argument")


def _has_control_flow(fdef) -> bool:
    return any(isinstance(n, (ast.If, ast.While, ast.For, ast.AugAssign)) for n in ast.walk(fdef))


def convert(fn: Callable) -> Callable:
    """`fn` with its control flow rewritten by AutoGraph; `fn` itself when it has none or no source."""
    if getattr(fn, "__name__", "") == "<lambda>" or not hasattr(fn, "__code__"):
        return fn
    try:
        src = textwrap.dedent(inspect.getsource(fn))
        tree = ast.parse(src)
    except (OSError, TypeError, SyntaxError, IndentationError):
        return fn
    fdef = tree.body[0] if tree.body else None
    if not isinstance(fdef, ast.FunctionDef) or not _has_control_flow(fdef):
        return fn
    if any(isinstance(n, (ast.Global, ast.Nonlocal, ast.Yield, ast.YieldFrom)) for n in ast.walk(fdef)):
        return fn
    fdef.decorator_list = []
    a = fdef.args
    params = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs] + \
        [x.arg for x in (a.vararg, a.kwarg) if x is not None]
    conv = _Converter(set(params) | set(_stores(fdef.body)))
    fdef.body = conv.block(fdef.body)
    freevars = list(fn.__code__.co_freevars)
    if "__class__" in freevars and params:
        # Zero-argument super() would see a branch function's first argument: spell it out.
        for node in ast.walk(fdef):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super" \
                    and not node.args:
                node.args = [ast.Name("__class__", ast.Load()), ast.Name(params[0], ast.Load())]
    factory = ast.FunctionDef(name="ag__factory", args=_args(["ag__"] + freevars),
                              body=[fdef, ast.Return(value=ast.Name(fdef.name, ast.Load()))],
                              decorator_list=[], returns=None, type_params=[])
    module = ast.fix_missing_locations(ast.Module(body=[factory], type_ignores=[]))
    code = compile(module, f"<autograph {fn.__qualname__}>", "exec")
    factory_code = next(c for c in code.co_consts if isinstance(c, types.CodeType))
    inner = next(c for c in factory_code.co_consts if isinstance(c, types.CodeType) and c.co_name == fdef.name)
    # The converted function shares the original's closure cells, so later rebinding is seen.
    cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or ()))
    cells["ag__"] = types.CellType(sys.modules[__name__])
    new = types.FunctionType(inner, fn.__globals__, fn.__name__, None,
                             tuple(cells[name] for name in inner.co_freevars))
    new.__defaults__ = fn.__defaults__
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__wrapped__ = fn
    return new
