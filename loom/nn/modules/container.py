"""Containers: Sequential, ModuleList, ModuleDict, ParameterList and ParameterDict."""
from __future__ import annotations

import operator
from collections import OrderedDict
from typing import Any, Iterable, Iterator, Mapping

from loom.errors import LoomIndexError
from loom.nn.module import Module, _addindent
from loom.nn.parameter import Parameter
from loom.tensor import Tensor


def _index(idx: Any, n: int, kind: str) -> int:
    """`idx` as a non-negative position in a container of length `n`."""
    idx = operator.index(idx)
    if not -n <= idx < n:
        raise LoomIndexError(f"loom.nn.{kind}: index {idx} is out of range (length {n})")
    return idx % n


class _IndexedModules(Module):
    """Modules stored under the keys "0", "1", ...: the shared half of Sequential and ModuleList."""

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(list(self._modules.values()))

    def _key(self, idx: int) -> str:
        return list(self._modules)[_index(idx, len(self), type(self).__name__)]

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return self._from_items(list(self._modules.items())[idx])
        return self._modules[self._key(idx)]

    def __setitem__(self, idx: int, module: Module) -> None:
        setattr(self, self._key(idx), module)

    def __delitem__(self, idx) -> None:
        keys = list(self._modules)
        targets = keys[idx] if isinstance(idx, slice) else [self._key(idx)]
        for k in targets:
            del self._modules[k]
        self._renumber()

    def _renumber(self) -> None:
        values = list(self._modules.values())
        self._modules.clear()
        for i, m in enumerate(values):
            self._modules[str(i)] = m

    def append(self, module: Module):
        """Add `module` at the end; returns self."""
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules: Iterable[Module]):
        """Append each of `modules`; returns self."""
        if isinstance(modules, Module) and not isinstance(modules, _IndexedModules):
            raise TypeError(f"loom.nn.{type(self).__name__}.extend: should be called with an iterable, "
                            f"but got {type(modules).__name__}")
        for m in list(modules):
            self.append(m)
        return self

    def insert(self, index: int, module: Module) -> None:
        """Put `module` before position `index`."""
        values = list(self._modules.values())
        n = len(values)
        index = operator.index(index)
        if not -n <= index <= n:
            raise LoomIndexError(f"loom.nn.{type(self).__name__}.insert: index {index} is out of range "
                                 f"(length {n})")
        values.insert(index if index >= 0 else index + n, module)
        self._modules.clear()
        for i, m in enumerate(values):
            self.add_module(str(i), m)

    def pop(self, key=-1) -> Module:
        m = self[key]
        del self[key]
        return m

    def __iadd__(self, other):
        return self.extend(other)

    def __add__(self, other):
        if not isinstance(other, type(self)):
            raise TypeError(f"loom.nn.{type(self).__name__}: add operator supports only objects of "
                            f"{type(self).__name__} class, but {type(other).__name__} is given")
        out = self._from_items([])
        for m in list(self) + list(other):
            out.append(m)
        return out

    def __dir__(self):
        return [k for k in super().__dir__() if not k.isdigit()]


class Sequential(_IndexedModules):
    """Modules applied in order, each to the previous one's output.

    Build it from modules (`Sequential(a, b)`, keyed "0", "1", ...) or from an
    OrderedDict of names to modules. Index, slice, `len`, `append`, `insert`,
    `extend`, `pop` and `del` work as on a list.

    Examples
    --------
    >>> net = loom.nn.Sequential(loom.nn.Linear(4, 8), loom.nn.ReLU(), loom.nn.Linear(8, 2))
    >>> net(loom.randn(3, 4)).shape, len(net), type(net[1:]).__name__
    (loom.Size([3, 2]), 3, 'Sequential')
    """

    def __init__(self, *args) -> None:
        super().__init__()
        if len(args) == 1 and isinstance(args[0], OrderedDict):
            for key, module in args[0].items():
                self.add_module(key, module)
        else:
            for idx, module in enumerate(args):
                self.add_module(str(idx), module)

    @classmethod
    def _from_items(cls, items) -> Sequential:
        return cls(OrderedDict(items))

    def __mul__(self, other: int) -> Sequential:
        if not isinstance(other, int) or other <= 0:
            raise ValueError(f"loom.nn.Sequential: non-positive multiplication factor {other}")
        out = Sequential()
        for _ in range(other):
            for m in self:
                out.append(m)
        return out

    __rmul__ = __mul__

    def forward(self, input):
        for module in self:
            input = module(input)
        return input


class ModuleList(_IndexedModules):
    """A list of modules whose parameters are registered (it has no forward of its own).

    Examples
    --------
    >>> layers = loom.nn.ModuleList([loom.nn.Linear(4, 4) for _ in range(3)])
    >>> len(list(layers.parameters()))
    6
    """

    def __init__(self, modules: Iterable[Module] | None = None) -> None:
        super().__init__()
        if modules is not None:
            self.extend(modules)

    @classmethod
    def _from_items(cls, items) -> ModuleList:
        return cls([m for _, m in items])

    def __repr__(self) -> str:
        reprs = [repr(m) for m in self]
        if not reprs:
            return self._get_name() + "()"
        blocks: list[list] = []  # [start, end, repr] runs of identical modules.
        for i, r in enumerate(reprs):
            if blocks and blocks[-1][2] == r:
                blocks[-1][1] = i
            else:
                blocks.append([i, i, r])
        lines = []
        for start, end, r in blocks:
            head = f"({start})" if start == end else f"({start}-{end}): {end - start + 1} x"
            lines.append(_addindent(f"{head}: {r}" if start == end else f"{head} {r}", 2))
        return self._get_name() + "(\n  " + "\n  ".join(lines) + "\n)"


class ModuleDict(Module):
    """A dict of modules whose parameters are registered; keeps insertion order.

    Examples
    --------
    >>> d = loom.nn.ModuleDict({"enc": loom.nn.Linear(2, 2), "act": loom.nn.ReLU()})
    >>> list(d.keys()), "enc" in d
    (['enc', 'act'], True)
    """

    def __init__(self, modules: Mapping[str, Module] | Iterable | None = None) -> None:
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key: str) -> Module:
        return self._modules[key]

    def __setitem__(self, key: str, module: Module) -> None:
        self.add_module(key, module)

    def __delitem__(self, key: str) -> None:
        del self._modules[key]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def __contains__(self, key: str) -> bool:
        return key in self._modules

    def clear(self) -> None:
        self._modules.clear()

    def pop(self, key: str) -> Module:
        v = self[key]
        del self[key]
        return v

    def keys(self):
        return self._modules.keys()

    def items(self):
        return self._modules.items()

    def values(self):
        return self._modules.values()

    def update(self, modules) -> None:
        """Add (or replace) modules from a mapping or an iterable of (key, module) pairs."""
        items = modules.items() if isinstance(modules, (Mapping, ModuleDict)) else modules
        for j, item in enumerate(items):
            if not isinstance(item, (tuple, list)) or len(item) != 2:
                raise ValueError(f"loom.nn.ModuleDict.update: element #{j} should be a (key, module) pair, "
                                 f"got {item!r}")
            self[item[0]] = item[1]


def _as_parameter(value: Any) -> Any:
    return Parameter(value) if isinstance(value, Tensor) and not isinstance(value, Parameter) else value


class ParameterList(Module):
    """A list of parameters, registered under "0", "1", ...; plain tensors become Parameters.

    Examples
    --------
    >>> ps = loom.nn.ParameterList([loom.zeros(2), loom.ones(3)])
    >>> [n for n, _ in ps.named_parameters()]
    ['0', '1']
    """

    def __init__(self, values: Iterable | None = None) -> None:
        super().__init__()
        self._size = 0
        if values is not None:
            self.extend(values)

    def __len__(self) -> int:
        return self._size

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return ParameterList([self[i] for i in range(len(self))[idx]])
        return getattr(self, str(_index(idx, len(self), "ParameterList")))

    def __setitem__(self, idx: int, param) -> None:
        setattr(self, str(_index(idx, len(self), "ParameterList")), _as_parameter(param))

    def __iter__(self):
        return iter(self[i] for i in range(len(self)))

    def __iadd__(self, values):
        return self.extend(values)

    def append(self, value) -> ParameterList:
        self._size += 1
        setattr(self, str(self._size - 1), _as_parameter(value))
        return self

    def extend(self, values: Iterable) -> ParameterList:
        for v in list(values):
            self.append(v)
        return self

    def extra_repr(self) -> str:
        lines = []
        for i, p in enumerate(self):
            if isinstance(p, Tensor):
                kind = "Parameter" if isinstance(p, Parameter) else "Tensor"
                lines.append(f"  ({i}): {kind} containing: [{p.dtype!r} of size {'x'.join(map(str, p.shape))}]")
            else:
                lines.append(f"  ({i}): Object of type: {type(p).__name__}")
        return "\n".join(lines)


class ParameterDict(Module):
    """A dict of parameters, registered under their keys; plain tensors become Parameters.

    Examples
    --------
    >>> pd = loom.nn.ParameterDict({"scale": loom.ones(2)})
    >>> isinstance(pd["scale"], loom.nn.Parameter)
    True
    """

    def __init__(self, parameters: Mapping | Iterable | None = None) -> None:
        super().__init__()
        self._keys: dict[str, None] = {}
        if parameters is not None:
            self.update(parameters)

    def __getitem__(self, key: str):
        return getattr(self, key)

    def __setitem__(self, key: str, value) -> None:
        self._keys[key] = None
        setattr(self, key, _as_parameter(value))

    def __delitem__(self, key: str) -> None:
        del self._keys[key]
        delattr(self, key)

    def __len__(self) -> int:
        return len(self._keys)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __contains__(self, key: str) -> bool:
        return key in self._keys

    def keys(self):
        return self._keys.keys()

    def items(self):
        return [(k, self[k]) for k in self._keys]

    def values(self):
        return [self[k] for k in self._keys]

    def pop(self, key: str):
        v = self[key]
        del self[key]
        return v

    def update(self, parameters) -> None:
        items = parameters.items() if isinstance(parameters, (Mapping, ParameterDict)) else parameters
        for k, v in items:
            self[k] = v

    def extra_repr(self) -> str:
        return "\n".join(f"  ({k}): Parameter containing: [{v.type()} of size {'x'.join(map(str, v.shape))}]"
                         for k, v in self.items())


class Container(Module):
    """The deprecated `nn.Container`: a Module whose keyword arguments become its children."""

    def __init__(self, **kwargs) -> None:
        super().__init__()
        import warnings
        warnings.warn("nn.Container is deprecated. All of it's functionality is now implemented in nn.Module. "
                      "Subclass that instead.", DeprecationWarning, stacklevel=2)
        for key, value in kwargs.items():
            self.add_module(key, value)
