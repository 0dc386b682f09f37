"""`Module`: the base class of every layer, with PyTorch's registration, state and hook API."""
from __future__ import annotations

import copy
import itertools
from collections import OrderedDict, namedtuple
from typing import Any, Callable, Iterator, TypeVar

from loom import _structure
from loom.runtime import realize as _realize
from loom import dtypes as dt
from loom.autograd.grad_mode import no_grad
from loom.errors import DeviceError, LoomError, fmt_shape
from loom.nn.parameter import Buffer, Parameter
from loom.tensor import Tensor


class _IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    """What `load_state_dict` returns: the keys it did not find and the ones it did not use."""

    def __repr__(self) -> str:
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


class RemovableHandle:
    """Removes the hook it was returned for; also a context manager that removes it on exit."""

    _ids = itertools.count()

    def __init__(self, *hook_dicts: dict) -> None:
        self.id = next(RemovableHandle._ids)
        self._dicts = hook_dicts

    def remove(self) -> None:
        for d in self._dicts:
            d.pop(self.id, None)

    def __enter__(self) -> RemovableHandle:
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


def _addindent(s: str, n: int) -> str:
    lines = s.split("\n")
    if len(lines) == 1:
        return s
    return lines[0] + "\n" + "\n".join(" " * n + line for line in lines[1:])


def _check_name(kind: str, name: Any) -> None:
    """The checks PyTorch makes on a parameter, buffer or submodule name."""
    if not isinstance(name, str):
        raise TypeError(f"loom.nn.Module.register_{kind}: {kind} name should be a string, "
                        f"got {type(name).__name__}")
    if "." in name:
        raise KeyError(f"loom.nn.Module.register_{kind}: {kind} name can't contain \".\", got {name!r}")
    if name == "":
        raise KeyError(f"loom.nn.Module.register_{kind}: {kind} name can't be empty string \"\"")


class Module:
    """Base class for all neural network modules; subclasses define `forward`.

    Parameters, buffers and submodules assigned as attributes are registered,
    so `parameters()`, `state_dict()`, `train()`/`eval()` and `to()` see them.

    Examples
    --------
    >>> class MLP(loom.nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.fc1 = loom.nn.Linear(4, 8)
    ...         self.fc2 = loom.nn.Linear(8, 2)
    ...     def forward(self, x):
    ...         return self.fc2(loom.relu(self.fc1(x)))
    >>> [k for k, _ in MLP().named_parameters()]
    ['fc1.weight', 'fc1.bias', 'fc2.weight', 'fc2.bias']
    """

    training: bool
    # PyTorch's class attributes: whether __init__ forwards extra arguments to a super class (never here),
    # the legacy pickling flag, and the state_dict destination type variable.
    call_super_init: bool = False
    dump_patches: bool = False
    T_destination = TypeVar("T_destination", bound=dict)

    def __init__(self, *args, **kwargs) -> None:
        if args or kwargs:
            raise TypeError(f"loom.nn.Module.__init__() got unexpected arguments {args!r} {kwargs!r}")
        setattr_ = object.__setattr__
        setattr_(self, "training", True)
        setattr_(self, "_parameters", {})
        setattr_(self, "_buffers", {})
        setattr_(self, "_non_persistent_buffers_set", set())
        setattr_(self, "_modules", {})
        setattr_(self, "_forward_pre_hooks", OrderedDict())
        setattr_(self, "_forward_pre_hooks_with_kwargs", {})
        setattr_(self, "_forward_hooks", OrderedDict())
        setattr_(self, "_forward_hooks_with_kwargs", {})
        setattr_(self, "_forward_hooks_always_called", {})

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"loom.nn.Module: module [{type(self).__name__}] is missing the "
                                  "required \"forward\" function")

    # ------------------------------------------------------------ registration
    def register_parameter(self, name: str, param: Parameter | None) -> None:
        """Add a parameter (or a None placeholder) under `name`."""
        if "_parameters" not in self.__dict__:
            raise AttributeError("loom.nn.Module: cannot assign parameter before Module.__init__() call")
        _check_name("parameter", name)
        if hasattr(self, name) and name not in self._parameters:
            raise KeyError(f"loom.nn.Module.register_parameter: attribute '{name}' already exists")
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"loom.nn.Module.register_parameter: cannot assign '{_typename(param)}' object "
                            f"to parameter '{name}' (loom.nn.Parameter or None required)")
        self._parameters[name] = param
        _structure.changed(self)

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """Add a buffer: state that is not a parameter (e.g. BatchNorm's running mean).

        Persistent buffers are saved in the state_dict; non-persistent ones are not.
        """
        if "_buffers" not in self.__dict__:
            raise AttributeError("loom.nn.Module: cannot assign buffer before Module.__init__() call")
        _check_name("buffer", name)
        if hasattr(self, name) and name not in self._buffers:
            raise KeyError(f"loom.nn.Module.register_buffer: attribute '{name}' already exists")
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"loom.nn.Module.register_buffer: cannot assign '{_typename(tensor)}' object "
                            f"to buffer '{name}' (loom.Tensor or None required)")
        self._buffers[name] = tensor
        _structure.changed(self)
        if persistent:
            self._non_persistent_buffers_set.discard(name)
        else:
            self._non_persistent_buffers_set.add(name)

    def add_module(self, name: str, module: Module | None) -> None:
        """Add a child module under `name` (reachable as an attribute)."""
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"loom.nn.Module.add_module: {_typename(module)} is not a Module subclass")
        _check_name("module", name)
        if hasattr(self, name) and name not in self._modules:
            raise KeyError(f"loom.nn.Module.add_module: attribute '{name}' already exists")
        self._modules[name] = module
        _structure.changed(self)

    def register_module(self, name: str, module: Module | None) -> None:
        """Alias of `add_module`."""
        self.add_module(name, module)

    def __setattr__(self, name: str, value: Any) -> None:
        d = self.__dict__
        params = d.get("_parameters")

        def remove_from(*dicts):
            for x in dicts:
                if x is not None and name in x:
                    if isinstance(x, set):
                        x.discard(name)
                    else:
                        del x[name]

        if isinstance(value, Parameter):
            if params is None:
                raise AttributeError("loom.nn.Module: cannot assign parameters before Module.__init__() call")
            remove_from(d, d.get("_buffers"), d.get("_modules"), d.get("_non_persistent_buffers_set"))
            self.register_parameter(name, value)
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(f"loom.nn.Module: cannot assign '{_typename(value)}' as parameter '{name}' "
                                "(loom.nn.Parameter or None expected)")
            self.register_parameter(name, value)
        elif isinstance(value, Module):
            modules = d.get("_modules")
            if modules is None:
                raise AttributeError("loom.nn.Module: cannot assign module before Module.__init__() call")
            remove_from(d, params, d.get("_buffers"), d.get("_non_persistent_buffers_set"))
            modules[name] = value
            _structure.changed(self)
        elif d.get("_modules") is not None and name in d["_modules"]:
            if value is not None:
                raise TypeError(f"loom.nn.Module: cannot assign '{_typename(value)}' as child module "
                                f"'{name}' (loom.nn.Module or None expected)")
            d["_modules"][name] = value
            _structure.changed(self)
        elif isinstance(value, Buffer) or (d.get("_buffers") is not None and name in d["_buffers"]):
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"loom.nn.Module: cannot assign '{_typename(value)}' as buffer '{name}' "
                                "(loom.Tensor or None expected)")
            if isinstance(value, Buffer):
                persistent = value.persistent
            else:
                persistent = name not in self._non_persistent_buffers_set
            remove_from(d, params, d.get("_modules"))
            self.register_buffer(name, value, persistent)
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> Any:
        d = self.__dict__
        for key in ("_parameters", "_buffers", "_modules"):
            store = d.get(key)
            if store is not None and name in store:
                return store[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name: str) -> None:
        if name in self._parameters:
            del self._parameters[name]
        elif name in self._buffers:
            del self._buffers[name]
            self._non_persistent_buffers_set.discard(name)
        elif name in self._modules:
            del self._modules[name]
        else:
            object.__delattr__(self, name)
            return
        _structure.changed(self)

    def __dir__(self):
        keys = set(super().__dir__()) | set(self._parameters) | set(self._buffers) | set(self._modules)
        return sorted(k for k in keys if not k[0].isdigit())

    # ------------------------------------------------------------ traversal
    def _named_members(self, get_members, prefix: str = "", recurse: bool = True,
                       remove_duplicate: bool = True):
        memo: set[int] = set()
        modules = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) if recurse \
            else [(prefix, self)]
        for module_prefix, module in modules:
            for k, v in get_members(module):
                if v is None or (remove_duplicate and id(v) in memo):
                    continue
                if remove_duplicate:
                    memo.add(id(v))
                yield (module_prefix + ("." if module_prefix else "") + k, v)

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        """This module's parameters (and its descendants' when `recurse`), each once."""
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_parameters(self, prefix: str = "", recurse: bool = True,
                         remove_duplicate: bool = True) -> Iterator[tuple[str, Parameter]]:
        """(dotted name, parameter) pairs, in registration order.

        Examples
        --------
        >>> [n for n, _ in loom.nn.Linear(2, 3).named_parameters()]
        ['weight', 'bias']
        """
        yield from self._named_members(lambda m: m._parameters.items(), prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def named_buffers(self, prefix: str = "", recurse: bool = True,
                      remove_duplicate: bool = True) -> Iterator[tuple[str, Tensor]]:
        """(dotted name, buffer) pairs, persistent or not."""
        yield from self._named_members(lambda m: m._buffers.items(), prefix, recurse, remove_duplicate)

    def children(self) -> Iterator[Module]:
        for _, m in self.named_children():
            yield m

    def named_children(self) -> Iterator[tuple[str, Module]]:
        """Direct submodules, each once."""
        memo: set[int] = set()
        for name, m in self._modules.items():
            if m is not None and id(m) not in memo:
                memo.add(id(m))
                yield name, m

    def modules(self) -> Iterator[Module]:
        for _, m in self.named_modules():
            yield m

    def named_modules(self, memo: set | None = None, prefix: str = "",
                      remove_duplicate: bool = True) -> Iterator[tuple[str, Module]]:
        """This module and every descendant, depth first, each once unless `remove_duplicate=False`."""
        if memo is None:
            memo = set()
        if remove_duplicate:
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, m in self._modules.items():
            if m is None:
                continue
            sub = prefix + ("." if prefix else "") + name
            yield from m.named_modules(memo, sub, remove_duplicate)

    def get_submodule(self, target: str) -> Module:
        """The submodule at dotted path `target` ("" is this module)."""
        if target == "":
            return self
        mod: Module = self
        for item in target.split("."):
            if not hasattr(mod, item):
                raise AttributeError(f"loom.nn.Module.get_submodule: {mod._get_name()} has no attribute "
                                     f"`{item}`")
            mod = getattr(mod, item)
            if not isinstance(mod, Module):
                raise AttributeError(f"loom.nn.Module.get_submodule: `{item}` is not an nn.Module")
        return mod

    def set_submodule(self, target: str, module: Module, strict: bool = False) -> None:
        """Put `module` at dotted path `target` (with `strict`, only where a submodule already is).

        Examples
        --------
        >>> net = loom.nn.Sequential(loom.nn.Linear(2, 2), loom.nn.ReLU())
        >>> net.set_submodule("1", loom.nn.Tanh())
        >>> type(net[1]).__name__
        'Tanh'
        """
        if target == "":
            raise ValueError("loom.nn.Module.set_submodule: cannot set the submodule without a target name")
        if not isinstance(module, Module):
            raise TypeError(f"loom.nn.Module.set_submodule: {_typename(module)} is not an nn.Module")
        path, _, name = target.rpartition(".")
        parent = self.get_submodule(path)
        if strict and not isinstance(parent._modules.get(name), Module):
            raise AttributeError(f"loom.nn.Module.set_submodule: {parent._get_name()} has no submodule `{name}`")
        if not strict and hasattr(parent, name) and name not in parent._modules:
            raise AttributeError(f"loom.nn.Module.set_submodule: `{name}` of {parent._get_name()} is not an "
                                 "nn.Module")
        setattr(parent, name, module)

    def _get_member(self, target: str, kind: str, store: str):
        module_path, _, name = target.rpartition(".")
        mod = self.get_submodule(module_path)
        if not hasattr(mod, name):
            raise AttributeError(f"loom.nn.Module.get_{kind}: {mod._get_name()} has no attribute `{name}`")
        if name not in getattr(mod, store):
            raise AttributeError(f"loom.nn.Module.get_{kind}: `{name}` is not a {kind}")
        return getattr(mod, store)[name]

    def get_parameter(self, target: str) -> Parameter:
        """The parameter at dotted path `target`, e.g. ``"encoder.0.weight"``."""
        return self._get_member(target, "parameter", "_parameters")

    def get_buffer(self, target: str) -> Tensor:
        """The buffer at dotted path `target`."""
        return self._get_member(target, "buffer", "_buffers")

    # ------------------------------------------------------------ state
    def state_dict(self, *args, destination: dict | None = None, prefix: str = "",
                   keep_vars: bool = False) -> OrderedDict:
        """Parameters and persistent buffers by dotted name, in registration order, detached.

        Examples
        --------
        >>> list(loom.nn.BatchNorm1d(3).state_dict())
        ['weight', 'bias', 'running_mean', 'running_var', 'num_batches_tracked']
        """
        if args:  # PyTorch's deprecated positional form: (destination, prefix, keep_vars).
            destination, prefix, keep_vars = (list(args) + [destination, prefix, keep_vars][len(args):])[:3]
        if destination is None:
            destination = OrderedDict()
        for hook in list(self._hooks_of("_state_dict_pre_hooks").values()):
            hook(self, prefix, keep_vars)
        for name, p in self._parameters.items():
            if p is not None:
                destination[prefix + name] = p if keep_vars else p.detach()
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistent_buffers_set:
                destination[prefix + name] = b if keep_vars else b.detach()
        extra = getattr(type(self), "get_extra_state", None)
        if extra is not Module.get_extra_state:
            destination[prefix + "_extra_state"] = self.get_extra_state()
        for name, m in self._modules.items():
            if m is not None:
                m.state_dict(destination=destination, prefix=prefix + name + ".", keep_vars=keep_vars)
        for hook in list(self._hooks_of("_state_dict_hooks").values()):
            result = hook(self, destination, prefix, {})
            if result is not None:
                destination = result
        return destination

    def _hooks_of(self, kind: str) -> OrderedDict:
        """The hook table `kind`, made on first use (modules unpickled from older loom lack it)."""
        d = self.__dict__.get(kind)
        if d is None:
            d = OrderedDict()
            object.__setattr__(self, kind, d)
        return d

    def _add_hook(self, kind: str, hook: Callable, prepend: bool = False) -> RemovableHandle:
        table = self._hooks_of(kind)
        handle = RemovableHandle(table)
        table[handle.id] = hook
        if prepend:
            table.move_to_end(handle.id, last=False)
        return handle

    def register_state_dict_pre_hook(self, hook: Callable) -> RemovableHandle:
        """Call `hook(module, prefix, keep_vars)` before `state_dict` collects this module's entries."""
        return self._add_hook("_state_dict_pre_hooks", hook)

    def register_state_dict_post_hook(self, hook: Callable) -> RemovableHandle:
        """Call `hook(module, state_dict, prefix, local_metadata)` after `state_dict` collected this module;
        it may edit the dict in place."""
        return self._add_hook("_state_dict_hooks", hook)

    def register_load_state_dict_pre_hook(self, hook: Callable) -> RemovableHandle:
        """Call `hook(module, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
        error_msgs)` before this module's entries are loaded; it may edit `state_dict` in place."""
        return self._add_hook("_load_state_dict_pre_hooks", hook)

    def register_load_state_dict_post_hook(self, hook: Callable) -> RemovableHandle:
        """Call `hook(module, incompatible_keys)` after `load_state_dict`; it may edit the key lists in place."""
        return self._add_hook("_load_state_dict_post_hooks", hook)

    def get_extra_state(self) -> Any:
        """Override (with `set_extra_state`) to save non-tensor state in the state_dict."""
        raise RuntimeError("loom.nn.Module.get_extra_state: reached the base implementation; "
                           "override it in the subclass")

    def set_extra_state(self, state: Any) -> None:
        raise RuntimeError("loom.nn.Module.set_extra_state: reached the base implementation; "
                           "override it in the subclass")

    def _load_from_state_dict(self, state_dict: dict, prefix: str, strict: bool, missing: list,
                              errors: list) -> None:
        """Copy this module's own entries from `state_dict`; note what is missing or mis-shaped."""
        local = {k: v for k, v in self._parameters.items() if v is not None}
        local.update({k: v for k, v in self._buffers.items()
                      if v is not None and k not in self._non_persistent_buffers_set})
        for name, param in local.items():
            key = prefix + name
            if key not in state_dict:
                missing.append(key)
                continue
            value = _as_tensor(state_dict[key], key, errors)
            if value is None:
                continue
            if tuple(value.shape) != tuple(param.shape):
                errors.append(f"size mismatch for {key}: copying a param with shape "
                              f"{fmt_shape(value.shape)} from checkpoint, the shape in current model is "
                              f"{fmt_shape(param.shape)}.")
                continue
            with no_grad():
                # A private copy: the model and the loaded dict never share storage.
                param.copy_(copy.deepcopy(value.detach()))
        extra_key = prefix + "_extra_state"
        has_extra = getattr(type(self), "set_extra_state", None) is not Module.set_extra_state
        if has_extra:
            if extra_key in state_dict:
                self.set_extra_state(state_dict[extra_key])
            elif strict:
                missing.append(extra_key)

    def load_state_dict(self, state_dict: dict, strict: bool = True, assign: bool = False) -> _IncompatibleKeys:
        """Copy `state_dict`'s values into this module's parameters and buffers, in place.

        Parameters
        ----------
        state_dict : dict
            Name -> tensor (or NumPy array), as `state_dict()` returns.
        strict : bool
            Raise when keys are missing or unexpected. Shape mismatches always raise.
        assign : bool
            Accepted for PyTorch compatibility; values are always copied into the existing tensors.

        Returns
        -------
        (missing_keys, unexpected_keys) named tuple.

        Examples
        --------
        >>> a, b = loom.nn.Linear(2, 2), loom.nn.Linear(2, 2)
        >>> b.load_state_dict(a.state_dict())
        <All keys matched successfully>
        """
        if not hasattr(state_dict, "keys") or not hasattr(state_dict, "__getitem__"):
            raise TypeError(f"loom.nn.Module.load_state_dict: expected state_dict to be dict-like, "
                            f"got {type(state_dict).__name__}")
        missing: list[str] = []
        errors: list[str] = []
        pre_unexpected: list[str] = []
        if any(m.__dict__.get("_load_state_dict_pre_hooks") for m in self.modules()):
            state_dict = OrderedDict(state_dict)  # Hooks may edit it; the caller's dict stays as it was.
        for name, module in self.named_modules(remove_duplicate=False):
            prefix = name + "." if name else ""
            for hook in list(module._hooks_of("_load_state_dict_pre_hooks").values()):
                hook(module, state_dict, prefix, {}, strict, missing, pre_unexpected, errors)
            module._load_from_state_dict(state_dict, prefix, strict, missing, errors)
        missing = list(dict.fromkeys(missing))
        unexpected = [k for k in state_dict.keys() if not isinstance(k, str) or not self._claims(k)]
        unexpected += [k for k in pre_unexpected if k not in unexpected]
        result = _IncompatibleKeys(missing, unexpected)
        for module in self.modules():
            for hook in list(module._hooks_of("_load_state_dict_post_hooks").values()):
                hook(module, result)
        if strict:
            if unexpected:
                errors.insert(0, "Unexpected key(s) in state_dict: " + ", ".join(f'"{k}"' for k in unexpected)
                              + ".")
            if missing:
                errors.insert(0, "Missing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in missing) + ".")
        if errors:
            raise LoomError(f"loom.nn.Module.load_state_dict: Error(s) in loading state_dict for "
                            f"{self._get_name()}:\n\t" + "\n\t".join(errors))
        return result

    def _claims(self, key: str) -> bool:
        """Whether `key` names a parameter, persistent buffer or extra state of this module tree."""
        module_path, _, name = key.rpartition(".")
        try:
            mod = self.get_submodule(module_path)
        except AttributeError:
            return False
        if name == "_extra_state":
            return getattr(type(mod), "set_extra_state", None) is not Module.set_extra_state
        return (mod._parameters.get(name) is not None or
                (mod._buffers.get(name) is not None and name not in mod._non_persistent_buffers_set))

    # ------------------------------------------------------------ modes and conversion
    def train(self, mode: bool = True) -> Module:
        """Set training mode on this module and every descendant; returns self."""
        if not isinstance(mode, bool):
            raise ValueError(f"loom.nn.Module.train: training mode is expected to be boolean, got {mode!r}")
        self.training = mode
        for m in self.children():
            m.train(mode)
        return self

    def eval(self) -> Module:
        """Evaluation mode (`train(False)`): dropout off, BatchNorm uses running statistics."""
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset every parameter's gradient: to None (default) or to zeros."""
        for p in self.parameters():
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                p.grad = p.grad.detach().zero_()

    def apply(self, fn: Callable[[Module], None]) -> Module:
        """Call `fn` on every submodule (children first) and on self; returns self.

        Examples
        --------
        >>> def init(m):
        ...     if isinstance(m, loom.nn.Linear):
        ...         loom.nn.init.zeros_(m.weight)
        >>> net = loom.nn.Sequential(loom.nn.Linear(2, 2)).apply(init)
        >>> net[0].weight.abs().sum().item()
        0.0
        """
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    def _apply(self, fn: Callable[[Tensor], Tensor]) -> Module:
        """Replace every parameter's and buffer's value by `fn(value)`, keeping the Parameter objects."""
        for m in self.children():
            m._apply(fn)
        for p in self._parameters.values():
            if p is None:
                continue
            new = fn(p.detach())
            if new is not p and new._node is not p._node:
                p.data = new
            if p.grad is not None:
                p.grad = fn(p.grad.detach())
        for b in self._buffers.values():
            if b is not None:
                new = fn(b.detach())
                if new._node is not b._node:
                    b.data = new
        return self

    def to_empty(self, *, device=None, recurse: bool = True) -> Module:
        """Give every parameter and buffer new, uninitialised storage of the same shape and dtype."""
        from loom.tensor import empty
        if device is not None:
            from loom.device import device as _device
            if _device(device).type != "cpu":
                raise DeviceError(f"loom.nn.Module.to_empty: device {device!r} is not available in this build")
        mods = self.modules() if recurse else [self]
        for m in mods:
            for t in list(m._parameters.values()) + list(m._buffers.values()):
                if t is not None:
                    t.data = empty(tuple(t.shape), dtype=t.dtype)
        return self

    def to(self, *args, **kwargs) -> Module:
        """Cast floating-point parameters and buffers: `to(dtype)`, `to(device)`, `to(tensor)`.

        Integer and bool tensors keep their dtype, as in PyTorch.

        Examples
        --------
        >>> loom.nn.Linear(2, 2).to(loom.float64).weight.dtype
        loom.float64
        """
        dtype = kwargs.pop("dtype", None)
        device = kwargs.pop("device", None)
        kwargs.pop("non_blocking", None)
        if kwargs:
            raise TypeError(f"loom.nn.Module.to: unexpected keyword arguments {sorted(kwargs)}")
        for a in args:
            if isinstance(a, Tensor):
                dtype, device = a.dtype, a.device
            elif isinstance(a, dt.DType) or (isinstance(a, str) and a in dt._BY_NAME):
                dtype = a
            elif isinstance(a, bool):  # The non_blocking positional flag.
                continue
            elif a is not None:
                device = a
        if device is not None:
            from loom.device import device as _device
            dev = _device(device)
            if dev.type != "cpu":
                raise DeviceError(f"loom.nn.Module.to: device {dev} is not available; this build of loom "
                                "runs on the cpu")
        if dtype is None:
            return self
        dtype = dt.as_dtype(dtype)
        if not dtype.is_floating_point:
            raise TypeError(f"loom.nn.Module.to: only floating point dtypes are accepted, got {dtype.name}")
        return self._apply(lambda t: t.to(dtype) if t.dtype.is_floating_point else t)

    def float(self) -> Module:
        return self.to(dt.float32)

    def double(self) -> Module:
        return self.to(dt.float64)

    def half(self) -> Module:
        return self.to(dt.float16)

    def bfloat16(self) -> Module:
        return self.to(dt.bfloat16)

    def type(self, dst_type) -> Module:
        """Cast every parameter and buffer (integer ones too) to `dst_type`."""
        dst = dt.as_dtype(dst_type)
        return self._apply(lambda t: t.to(dst))

    def cpu(self) -> Module:
        return self

    def cuda(self, device=None) -> Module:
        return self.to("cuda" if device is None else f"cuda:{device}" if isinstance(device, int) else device)

    def _unavailable(self, kind: str, device=None) -> Module:
        raise DeviceError(f"loom.nn.Module.{kind}: loom has no {kind} backend; modules run on the cpu (or cuda)")

    def xpu(self, device=None) -> Module:
        """Move to an Intel GPU: not available in loom (raises DeviceError, as PyTorch does without one)."""
        return self._unavailable("xpu", device)

    def ipu(self, device=None) -> Module:
        """Move to a Graphcore IPU: not available in loom (raises DeviceError)."""
        return self._unavailable("ipu", device)

    def mtia(self, device=None) -> Module:
        """Move to an MTIA device: not available in loom (raises DeviceError)."""
        return self._unavailable("mtia", device)

    def share_memory(self) -> Module:
        return self

    # ------------------------------------------------------------ hooks and calling
    def register_forward_pre_hook(self, hook: Callable, *, prepend: bool = False,
                                  with_kwargs: bool = False) -> RemovableHandle:
        """Call `hook(module, args)` before `forward`; a non-None result replaces the args.

        With ``with_kwargs=True`` the hook is `hook(module, args, kwargs)` and returns
        `(args, kwargs)` or None.
        """
        handle = RemovableHandle(self._forward_pre_hooks, self._forward_pre_hooks_with_kwargs)
        self._forward_pre_hooks[handle.id] = hook
        if with_kwargs:
            self._forward_pre_hooks_with_kwargs[handle.id] = True
        if prepend:
            self._forward_pre_hooks.move_to_end(handle.id, last=False)
        return handle

    def register_forward_hook(self, hook: Callable, *, prepend: bool = False, with_kwargs: bool = False,
                              always_call: bool = False) -> RemovableHandle:
        """Call `hook(module, args, output)` after `forward`; a non-None result replaces the output.

        Examples
        --------
        >>> m = loom.nn.Identity()
        >>> h = m.register_forward_hook(lambda mod, args, out: out * 2)
        >>> m(loom.tensor(3.0)).item()
        6.0
        >>> h.remove()
        """
        handle = RemovableHandle(self._forward_hooks, self._forward_hooks_with_kwargs,
                                 self._forward_hooks_always_called)
        self._forward_hooks[handle.id] = hook
        if with_kwargs:
            self._forward_hooks_with_kwargs[handle.id] = True
        if always_call:
            self._forward_hooks_always_called[handle.id] = True
        if prepend:
            self._forward_hooks.move_to_end(handle.id, last=False)
        return handle

    def register_full_backward_hook(self, hook: Callable, prepend: bool = False) -> RemovableHandle:
        """Call `hook(module, grad_input, grad_output)` once the gradients of the module's tensor inputs are
        computed; a non-None result replaces grad_input.

        grad_input holds one entry per positional tensor argument (None where it needs no gradient).
        A replacement reaches the gradient of the input whose gradient arrived last, so it is exact for
        modules with one tensor input (the common case).

        Examples
        --------
        >>> lin, seen = loom.nn.Linear(3, 2), []
        >>> h = lin.register_full_backward_hook(lambda m, gi, go: seen.append((gi[0].shape, go[0].shape)))
        >>> lin(loom.randn(4, 3, requires_grad=True)).sum().backward()
        >>> seen
        [(loom.Size([4, 3]), loom.Size([4, 2]))]
        """
        return self._add_hook("_backward_hooks", hook, prepend)

    def register_full_backward_pre_hook(self, hook: Callable, prepend: bool = False) -> RemovableHandle:
        """Call `hook(module, grad_output)` when the gradients of the module's outputs are known; a non-None
        result replaces grad_output (exactly for single-output modules)."""
        return self._add_hook("_backward_pre_hooks", hook, prepend)

    def register_backward_hook(self, hook: Callable) -> RemovableHandle:
        """The deprecated non-full backward hook; loom calls it as `register_full_backward_hook` does."""
        return self._add_hook("_backward_hooks", hook)

    def _with_backward_hooks(self, args: tuple, call: Callable):
        """Run `call(*args)` with identity markers on tensor inputs and outputs whose gradient hooks feed the
        module's backward hooks."""
        full = list(self._hooks_of("_backward_hooks").values())
        pre = list(self._hooks_of("_backward_pre_hooks").values())
        tensor_args = [k for k, a in enumerate(args) if isinstance(a, Tensor)]
        marked = [k for k in tensor_args if args[k].requires_grad and args[k].dtype.is_floating_point]
        grad_in: dict[int, Any] = {}
        state: dict[str, Any] = {"out": None, "in_left": len(marked)}
        args = tuple(a * 1.0 if k in marked else a for k, a in enumerate(args))

        def inputs_done():
            gi = tuple(grad_in.get(k) for k in tensor_args)
            result = None
            for hook in full:
                new = hook(self, gi, state["out"])
                if new is not None:
                    gi = result = tuple(new)
            return result

        def on_input(k):
            def fire(g):
                grad_in[k] = g
                state["in_left"] -= 1
                if state["in_left"] == 0:
                    new = inputs_done()
                    if new is not None:
                        return new[tensor_args.index(k)]
                return None
            return fire

        for k in marked:
            args[k].register_hook(on_input(k))
        output = call(*args)
        flat = list(output) if isinstance(output, (tuple, list)) else [output]
        live = [i for i, o in enumerate(flat) if isinstance(o, Tensor) and o.requires_grad]
        grad_out: dict[int, Any] = {}
        left = {"n": len(live)}

        def on_output(i):
            def fire(g):
                grad_out[i] = g
                left["n"] -= 1
                if left["n"]:
                    return None
                go = tuple(grad_out.get(j) for j in range(len(flat)))
                replaced = None
                for hook in pre:
                    new = hook(self, go)
                    if new is not None:
                        go = replaced = tuple(new)
                state["out"] = go
                if not marked and full:
                    inputs_done()
                return None if replaced is None else replaced[i]
            return fire

        for i in live:
            flat[i] = flat[i] * 1.0
            flat[i].register_hook(on_output(i))
        if isinstance(output, tuple):
            return type(output)(flat) if not hasattr(output, "_fields") else type(output)(*flat)
        if isinstance(output, list):
            return flat
        return flat[0]

    def _call_impl(self, *args, **kwargs):
        if _realize.active_trace is not None:
            _structure.note(self)  # A traced step holds while this module's parameters stay the same.
        if self.__dict__.get("_backward_hooks") or self.__dict__.get("_backward_pre_hooks"):
            from loom.autograd.grad_mode import is_grad_enabled
            if is_grad_enabled():
                return self._with_backward_hooks(args, lambda *a: self._call_forward(*a, **kwargs))
        return self._call_forward(*args, **kwargs)

    def _call_forward(self, *args, **kwargs):
        if not self._forward_pre_hooks and not self._forward_hooks:
            return self.forward(*args, **kwargs)
        for hid, hook in list(self._forward_pre_hooks.items()):
            if hid in self._forward_pre_hooks_with_kwargs:
                result = hook(self, args, kwargs)
                if result is not None:
                    if not (isinstance(result, tuple) and len(result) == 2):
                        raise LoomError("loom.nn.Module: a forward pre-hook registered with_kwargs=True must "
                                        f"return None or an (args, kwargs) tuple, got {_typename(result)}")
                    args, kwargs = result
            else:
                result = hook(self, args)
                if result is not None:
                    args = result if isinstance(result, tuple) else (result,)
        called = False
        try:
            output = self.forward(*args, **kwargs)
            for hid, hook in list(self._forward_hooks.items()):
                called = True
                if hid in self._forward_hooks_with_kwargs:
                    result = hook(self, args, kwargs, output)
                else:
                    result = hook(self, args, output)
                if result is not None:
                    output = result
            return output
        except Exception:
            if not called:
                for hid, hook in list(self._forward_hooks.items()):
                    if hid in self._forward_hooks_always_called:
                        try:
                            if hid in self._forward_hooks_with_kwargs:
                                hook(self, args, kwargs, None)
                            else:
                                hook(self, args, None)
                        except Exception:
                            pass
            raise

    __call__ = _call_impl

    # ------------------------------------------------------------ printing
    def extra_repr(self) -> str:
        """The text inside this module's parentheses in `repr`; override in subclasses."""
        return ""

    def _get_name(self) -> str:
        return type(self).__name__

    def __repr__(self) -> str:
        extra = self.extra_repr()
        extra_lines = extra.split("\n") if extra else []
        child_lines = [f"({key}): " + _addindent(repr(m), 2) for key, m in self._modules.items()]
        lines = extra_lines + child_lines
        main = self._get_name() + "("
        if lines:
            if len(extra_lines) == 1 and not child_lines:
                main += extra_lines[0]
            else:
                main += "\n  " + "\n  ".join(lines) + "\n"
        return main + ")"

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        for key, default in (("_forward_pre_hooks_with_kwargs", {}), ("_forward_hooks_with_kwargs", {}),
                             ("_forward_hooks_always_called", {}), ("_non_persistent_buffers_set", set())):
            if key not in self.__dict__:
                self.__dict__[key] = default


def _typename(v: Any) -> str:
    if isinstance(v, Tensor):
        return "loom.Tensor"
    t = type(v)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__name__}"


def _as_tensor(value: Any, key: str, errors: list) -> Tensor | None:
    """A state_dict value as a Tensor (NumPy arrays are accepted), or None with an error noted."""
    if isinstance(value, Tensor):
        return value
    try:
        import numpy as np
        if isinstance(value, np.ndarray):
            from loom.tensor import tensor
            return tensor(value)
    except ImportError:  # pragma: no cover
        pass
    errors.append(f"while copying the parameter named \"{key}\", expected loom.Tensor or a NumPy array from "
                  f"the checkpoint but received {type(value).__name__}")
    return None
