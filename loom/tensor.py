"""The lazy Tensor: PyTorch's API over the loom DAG.

Every op adds a node; nothing runs until a value is needed (`.numpy()`,
`.item()`, `.tolist()`, printing, `bool()`, `realize()`, `loom.synchronize()`)
or a pending chain grows past `LAZY_DEPTH_LIMIT`. Shape and dtype errors are
raised when the op is written, not when it runs.
"""
from __future__ import annotations

import math
import numbers
import os
import weakref
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import numpy as np

from loom import _naming, _upper
from loom import dtypes as dt
from loom.autograd.grad_mode import is_grad_enabled
from loom.errors import (AutogradError, DeviceError, DTypeError, LoomError, LoomIndexError, LoomTypeError,
                         LoomValueError, LoomZeroDivisionError, ShapeError, fmt_shape)
from loom.ir import graph as _graph_module
from loom.ir import ops as _ops
from loom.ir.node import Node
from loom.ir.ops import PRIMITIVES
from loom.runtime import realize as _realize
from loom.runtime import reference

if TYPE_CHECKING:
    from loom.device import Device

# A pending chain longer than this is realised where it stands, which bounds
# the memory a forgotten lazy graph can pin and the depth of graph walks.
LAZY_DEPTH_LIMIT = int(os.environ.get("LOOM_LAZY_DEPTH", "2000"))


# Frontends whose tensors give numpy() while requiring grad: each is a predicate on the tensor
# (loom.tf's: the tensor derives from a tf.Variable or a tape-watched tensor; TensorFlow tensors
# have no requires_grad, so TF programs call .numpy() on anything).
NUMPY_OF_GRAD_OK: list = []


class Context:
    """Backward record of one primitive application."""

    __slots__ = ("prim", "inputs", "attrs", "versions")

    def __init__(self, prim, inputs, attrs):
        self.prim = prim
        self.inputs = inputs
        self.attrs = attrs
        self.versions = tuple([t._vc.value for t in inputs])

    @property
    def name(self) -> str:
        return self.prim.name

    def __repr__(self) -> str:
        return f"<{_naming.grad_fn_name(self.name)} object at {id(self):#x}>"

    @property
    def next_functions(self) -> tuple:
        """PyTorch's view of the graph: per input, (its backward record or accumulator or None, 0)."""
        return tuple((_next_function(t), 0) for t in self.inputs)


class _AccumulateGrad:
    """What `next_functions` shows for a leaf that requires grad, as PyTorch's AccumulateGrad."""

    __slots__ = ("variable",)

    def __init__(self, variable) -> None:
        self.variable = variable

    next_functions: tuple = ()

    def name(self) -> str:
        return "torch::autograd::AccumulateGrad"

    def __repr__(self) -> str:
        return f"<AccumulateGrad object at {id(self):#x}>"


def _next_function(t):
    if not isinstance(t, Tensor):
        return None
    if t._ctx is not None:
        return t._ctx
    return _AccumulateGrad(t) if t.requires_grad else None


class Tensor:
    """An n-dimensional array that records how it was computed.

    Examples
    --------
    >>> import loom
    >>> x = loom.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    >>> (x * x).sum().backward()
    >>> x.grad.tolist()
    [[2.0, 4.0], [6.0, 8.0]]
    """

    __slots__ = ("_node", "requires_grad", "_grad", "_ctx", "_vc", "_retains_grad",
                 "_hooks", "_alias", "_past", "_root", "_path", "_vdiff", "_layout", "_views",
                 "__weakref__", "__dict__")
    __array_priority__ = 1000  # NumPy defers mixed operators to loom.

    def __init__(self, *args, dtype=None, device=None, requires_grad: bool = False) -> None:
        """PyTorch's legacy constructor: `Tensor(2, 3)` is a 2x3 tensor of zeros, `Tensor(data)` copies `data`.

        Both give the default float dtype unless `dtype` is given (`loom.tensor` infers it from the data).
        """
        _check_device(device, "Tensor")
        d = dt.as_dtype(dtype) if dtype is not None else dt.get_default_dtype()
        if len(args) == 1 and isinstance(args[0], Size):
            args = tuple(args[0])
        if all(isinstance(a, (int, np.integer)) and not isinstance(a, (bool, np.bool_)) for a in args):
            node = _node_from_data(np.zeros(_shape_arg(args, "Tensor") if args else (0,), np.float32), d)
        elif len(args) == 1 and not isinstance(args[0], (numbers.Number, np.bool_)):
            node = _node_from_data(args[0], d)
        else:
            raise LoomTypeError(f"loom.Tensor: expected sizes (ints) or one sequence of data, got "
                                f"{', '.join(type(a).__name__ for a in args)}; use loom.tensor(value) for a "
                                "0-d tensor")
        self._init(node)
        if requires_grad:
            self.requires_grad_(True)

    def _init(self, node: Node, ctx: Context | None = None, requires_grad: bool = False) -> None:
        self._node = node
        self._ctx = ctx
        self.requires_grad = requires_grad
        self._grad: Tensor | None = None
        self._vc = _upper.alias.VersionCounter()
        self._retains_grad = False
        self._hooks: list | None = None
        self._alias: np.ndarray | None = None
        # Earlier values of a non-leaf changed in place, by version: ops that read the tensor
        # before the change route their gradient into the history of the value they read.
        self._past: dict[int, Tensor] | None = None
        # Storage sharing (loom/alias.py): the root alias of the storage, the movement steps
        # from its value to this tensor's, whether writes are differentiable, the strides and
        # offset PyTorch would report, and (on a root) weak references to its aliases.
        self._root: Tensor | None = None
        self._path: tuple = ()
        self._vdiff = False
        self._layout: tuple | None = None
        self._views: list | None = None

    @classmethod
    def _wrap(cls, node: Node, ctx: Context | None = None, requires_grad: bool = False) -> Tensor:
        t = cls.__new__(cls)
        t._init(node, ctx, requires_grad)
        return t

    @property
    def _version(self) -> int:
        """In-place writes seen by this tensor's storage (shared by its views, as in PyTorch)."""
        return self._vc.value

    @property
    def grad(self) -> Tensor | None:
        """The accumulated gradient (None until a backward pass reaches this tensor)."""
        return self._grad

    @grad.setter
    def grad(self, value: Tensor | None) -> None:
        if value is not None and not isinstance(value, Tensor):
            raise LoomTypeError(f"loom: .grad must be a Tensor or None, got {type(value).__name__}")
        if value is not None and tuple(value.shape) != tuple(self.shape):
            raise ShapeError(f"loom: assigned grad has shape {fmt_shape(value.shape)} but the tensor has "
                             f"shape {fmt_shape(self.shape)}")
        if _realize.active_trace is not None:
            _realize.active_trace.on_grad(self, self._grad, value)
        self._grad = value

    # ------------------------------------------------------------ metadata
    @property
    def shape(self) -> Size:
        return Size(self._node.shape)

    def size(self, dim: int | None = None):
        if dim is None:
            return Size(self._node.shape)
        return self._node.shape[normalize_dim(dim, self.ndim, "size")]

    @property
    def dtype(self) -> dt.DType:
        return self._node.dtype

    @property
    def device(self) -> Device:
        from loom.device import Device
        return Device(self._node.device)

    @property
    def ndim(self) -> int:
        return len(self._node.shape)

    def dim(self) -> int:
        return self.ndim

    def numel(self) -> int:
        return math.prod(self._node.shape)

    nelement = numel

    def element_size(self) -> int:
        return self.dtype.itemsize

    @property
    def is_leaf(self) -> bool:
        return self._ctx is None

    @property
    def grad_fn(self):
        return self._ctx

    def is_floating_point(self) -> bool:
        return self.dtype.is_floating_point

    @property
    def is_cuda(self) -> bool:
        return False

    # Other devices PyTorch can report; this build of loom runs on the cpu only.
    is_xpu = is_mps = is_meta = is_ipu = is_xla = is_mtia = is_maia = is_vulkan = is_cuda
    # Storage kinds loom does not have: every tensor is dense, strided and unquantized.
    is_sparse = is_sparse_csr = is_quantized = is_mkldnn = is_nested = is_cuda

    @property
    def is_cpu(self) -> bool:
        """True: every loom tensor lives on the cpu."""
        return True

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        """Bytes of all elements (numel * itemsize)."""
        return self.numel() * self.dtype.itemsize

    @property
    def retains_grad(self) -> bool:
        """Whether `retain_grad()` was called on this non-leaf tensor."""
        return self._retains_grad

    def ndimension(self) -> int:
        """The number of dims (PyTorch's older spelling of `dim()`)."""
        return self.ndim

    def get_device(self) -> int:
        """-1, the index PyTorch gives a cpu tensor."""
        return -1

    def is_signed(self) -> bool:
        """Whether the dtype holds negative values (False for bool and uint8)."""
        return self.dtype.is_signed

    def is_complex(self) -> bool:
        """Whether the dtype is complex (complex64 or complex128)."""
        return self.dtype.is_complex

    def is_conj(self) -> bool:
        """False: loom's `conj` computes the conjugate, so no tensor carries a pending conjugation bit."""
        return False

    def is_neg(self) -> bool:
        """False: loom has no lazy negation bit."""
        return False

    def is_inference(self) -> bool:
        """False: loom's inference_mode makes ordinary tensors."""
        return False

    def is_distributed(self) -> bool:
        """False: loom.distributed is not available yet."""
        return False

    def is_nonzero(self) -> bool:
        """Whether the single element is nonzero (an error for more than one element)."""
        if self.numel() != 1:
            raise LoomError(f"loom.Tensor.is_nonzero: a tensor with {self.numel()} elements (shape "
                            f"{fmt_shape(self.shape)}) has no single truth value")
        return bool(self.item() != 0)

    def is_same_size(self, other: Tensor) -> bool:
        """Whether `other` has this tensor's shape."""
        return tuple(self.shape) == tuple(other.shape)

    def pin_memory(self, device=None) -> Tensor:
        """This tensor: pinning only matters for copies to a GPU, which this build does not have."""
        return self

    def is_pinned(self, device=None) -> bool:
        """False: no pinned host memory without a GPU."""
        return False

    def share_memory_(self) -> Tensor:
        """This tensor (loom's worker processes receive tensors by value)."""
        return self

    def is_shared(self) -> bool:
        """False: loom tensors are not in shared memory."""
        return False

    def xpu(self, device=None, non_blocking: bool = False) -> Tensor:
        """This tensor on an Intel GPU; this build has none, so it raises DeviceError."""
        _check_device("xpu", "Tensor.xpu")
        return self

    # ------------------------------------------------------------ new tensors like this one
    def new_tensor(self, data, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
        """A new leaf holding a copy of `data`, of this tensor's dtype unless `dtype` is given."""
        src = data.detach() if isinstance(data, Tensor) else data
        return tensor(src, dtype=dtype or self.dtype, device=device, requires_grad=requires_grad)

    def new_full(self, size, fill_value, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
        """A tensor of `size` filled with `fill_value`, of this tensor's dtype unless `dtype` is given."""
        return full(size, fill_value, dtype=dtype or self.dtype, device=device, requires_grad=requires_grad)

    def new_zeros(self, *size, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
        """Zeros of `size`, of this tensor's dtype unless `dtype` is given."""
        return zeros(*size, dtype=dtype or self.dtype, device=device, requires_grad=requires_grad)

    def new_ones(self, *size, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
        """Ones of `size`, of this tensor's dtype unless `dtype` is given."""
        return ones(*size, dtype=dtype or self.dtype, device=device, requires_grad=requires_grad)

    def new_empty(self, *size, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
        """A tensor of `size` (zero-filled), of this tensor's dtype unless `dtype` is given."""
        return empty(*size, dtype=dtype or self.dtype, device=device, requires_grad=requires_grad)

    def new_empty_strided(self, size, stride, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
        """As `new_empty`; loom chooses the strides itself."""
        return empty(*size, dtype=dtype or self.dtype, device=device, requires_grad=requires_grad)

    def new(self, *args, device=None) -> Tensor:
        """Legacy `x.new(2, 3)` / `x.new(data)`: a new tensor of this tensor's dtype."""
        return Tensor(*args, dtype=self.dtype, device=device)

    @property
    def node(self) -> Node:
        """The IR node this tensor currently refers to."""
        return self._node

    # ------------------------------------------------------------ realisation
    def realize(self) -> Tensor:
        """Compute this tensor's pending graph now; returns self."""
        if self._node.buffer is None:
            _realize.realize_value([self._node])
        return self

    def _array(self) -> np.ndarray:
        """The value as stored (bfloat16 stays as its uint16 bits)."""
        self.realize()
        return self._node.buffer

    def numpy(self, force: bool = False) -> np.ndarray:
        """The value as a NumPy array, sharing memory where the layout allows."""
        if self.requires_grad and not force and not any(ok(self) for ok in NUMPY_OF_GRAD_OK):
            raise LoomError("loom.Tensor.numpy: can't call numpy() on a tensor that requires grad; "
                            "use tensor.detach().numpy()")
        if self.dtype is dt.bfloat16:
            return dt.bf16_to_f32(self._array())
        a = self._shared_array()
        if self._alias is None and self._root is None and not self.requires_grad:
            # As in PyTorch the array and the tensor share memory from now on: a later in-place op on
            # the tensor writes into the array too (the from_numpy machinery, `_commit`).
            self._alias = a
            self.__dict__["_alias_exported"] = True
            reference.share_external(a)
        return a

    def _shared_array(self) -> np.ndarray:
        """The stored value as a writable array in one memory block, fit to hand out."""
        a = self._array()
        # A view of another value's memory (a reshape, a clone) must not let writes through
        # the returned array reach that value: it gets a private copy, unless the memory is
        # the user's own array (loom.from_numpy), which is meant to be shared.
        borrowed = a.base is not None and self._alias is None
        if borrowed or not a.flags.writeable or not (a.flags.c_contiguous or a.flags.f_contiguous):
            a = np.array(a)  # A private, writable copy becomes the stored value.
            self._node.buffer = a
        return a

    def __array__(self, dtype=None, copy=None):
        a = self.numpy(force=True)
        return a.astype(dtype) if dtype is not None else a

    def item(self):
        if self.numel() != 1:
            raise LoomError(f"loom.Tensor.item: a tensor with {self.numel()} elements "
                            f"(shape {fmt_shape(self.shape)}) cannot be converted to a Python scalar")
        return self.numpy(force=True).reshape(()).item()

    def tolist(self):
        return self.numpy(force=True).tolist()

    def __bool__(self) -> bool:
        if self.numel() != 1:
            raise LoomError(f"loom.Tensor.__bool__: the truth value of a tensor with {self.numel()} elements "
                            f"(shape {fmt_shape(self.shape)}) is ambiguous; use .any() or .all()")
        return bool(self.item())

    def __float__(self) -> float:
        return float(self._one_scalar("float"))

    def __int__(self) -> int:
        return int(self._one_scalar("int"))

    def _one_scalar(self, to: str):
        if self.numel() != 1:  # ValueError, as PyTorch's.
            raise LoomValueError(f"loom: only one element tensors can be converted to Python scalars ({to}() of "
                                 f"a {self.dtype.name}{fmt_shape(self.shape)} tensor)")
        return self.item()

    def __index__(self) -> int:
        if self.dtype.category != 1 or self.numel() != 1:
            raise LoomTypeError(f"loom: only integer tensors of a single element can be used as an index, "
                            f"got {self.dtype.name}{fmt_shape(self.shape)}")
        return int(self.item())

    def __len__(self) -> int:
        if self.ndim == 0:
            raise LoomTypeError("loom.Tensor.__len__: len() of a 0-d tensor")
        return self._node.shape[0]

    def __iter__(self):
        if self.ndim == 0:
            raise LoomTypeError("loom.Tensor.__iter__: iteration over a 0-d tensor")
        return (self[i] for i in range(self._node.shape[0]))

    def __hash__(self) -> int:
        return id(self)

    def __repr__(self) -> str:
        text = _naming.TENSOR_TEXT.get(_naming.namespace()) if _naming.TENSOR_TEXT else None
        if text is not None:  # A frontend's own format (TensorFlow's "<tf.Tensor: ...>").
            return text(self, True)
        a = self._array()
        if self.dtype is dt.bfloat16:
            a = dt.bf16_to_f32(a)
        kind = "complex" if self.dtype.is_complex else "float" if self.dtype.is_floating_point else "int"
        suffixes = []
        if a.size == 0:
            body = "[]"
            if a.ndim != 1:
                suffixes.append(f"size={tuple(a.shape)}")
            if self.dtype is not dt.get_default_dtype():
                suffixes.append(f"dtype={self.dtype!r}")
        else:
            body = _format_array(a, kind, indent=len("tensor("))
            if self.dtype not in (dt.get_default_dtype(), dt.to_complex(dt.get_default_dtype()), dt.int64, dt.bool_):
                suffixes.append(f"dtype={self.dtype!r}")
        if self._ctx is not None and self.requires_grad:
            suffixes.append(f"grad_fn=<{_naming.grad_fn_name(self._ctx.name)}>")
        elif self.requires_grad:
            suffixes.append("requires_grad=True")
        return _add_suffixes("tensor(" + body, suffixes, len("tensor("))

    def __str__(self) -> str:
        text = _naming.TENSOR_TEXT.get(_naming.namespace()) if _naming.TENSOR_TEXT else None
        return text(self, False) if text is not None else self.__repr__()

    def __format__(self, spec: str) -> str:
        if self.numel() == 1 and spec:
            return format(self.item(), spec)
        return repr(self)

    # ------------------------------------------------------------ DLPack
    def __dlpack__(self, *args, **kwargs):
        """Export without copying (bfloat16 included); see `loom.from_dlpack`."""
        if self.requires_grad:
            raise AutogradError("loom.Tensor.__dlpack__: can't export a tensor that requires grad; "
                                "use tensor.detach()")
        capsule = self._shared_array().__dlpack__(*args, **kwargs)
        if self.dtype is dt.bfloat16:
            from loom import dlpack
            dlpack.retag(capsule, dlpack.KDL_BFLOAT)
        return capsule

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU, device 0.

    # ------------------------------------------------------------ autograd
    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        if requires_grad and not self.dtype.is_differentiable:
            raise AutogradError(f"loom.requires_grad_: only floating point and complex tensors can require gradients, "
                                f"got {self.dtype.name}{fmt_shape(self.shape)}")
        if not requires_grad and self._ctx is not None:
            raise AutogradError("loom: requires_grad_(False) is only allowed on leaf tensors; "
                                "use .detach() for a non-leaf")
        self.requires_grad = requires_grad
        return self

    def detach(self) -> Tensor:
        """A tensor sharing this one's storage, with no history (writes to it are seen here)."""
        t = _upper.alias.alias(self, differentiable=False)
        t._owner = self.__dict__.get("_owner") or weakref.ref(self)  # Traces bind values to the original.
        return t

    def detach_(self) -> Tensor:
        self._ctx = None
        self.requires_grad = False
        return self

    @property
    def data(self) -> Tensor:
        """This tensor's storage without history; as in PyTorch, writes to it are not versioned."""
        t = _upper.alias.alias(self, differentiable=False, share_version=False)
        t._owner = self.__dict__.get("_owner") or weakref.ref(self)
        return t

    @data.setter
    def data(self, value: Tensor) -> None:
        if not isinstance(value, Tensor):
            raise LoomTypeError(f"loom: .data must be set to a Tensor, got {type(value).__name__}")
        if value is self:
            return
        old = self._node
        # Like PyTorch, the tensor now uses `value`'s storage; its former aliases keep the old one.
        if self._root is not None:
            _upper.alias.unlink(self)
        elif self._views:
            _upper.alias.rehome(self)
        self._node = value._node
        self._alias = None
        self._vc.value += 1
        if value._root is None and not value._views and value._alias is None:
            _upper.alias.link(self, value, (), None, differentiable=False, share_version=False)
        else:
            _upper.alias.link(value, self, (), _upper.alias.layout_of(value), differentiable=False,
                              share_version=False)
        if _realize.active_trace is not None:
            _realize.active_trace.on_mutate(self, old)

    def retain_grad(self) -> None:
        if not self.requires_grad:
            raise AutogradError("loom.retain_grad: the tensor does not require grad")
        self._retains_grad = True

    def register_hook(self, hook):
        """Call `hook(grad)` when this tensor's gradient is computed; it may return a new gradient."""
        if not self.requires_grad:
            raise AutogradError("loom.register_hook: cannot register a hook on a tensor that "
                                "does not require grad")
        if self._hooks is None:
            self._hooks = []
        self._hooks.append(hook)
        return _HookHandle(self._hooks, hook)

    def backward(self, gradient: Tensor | None = None, retain_graph: bool | None = None,
                 create_graph: bool = False, inputs: Sequence[Tensor] | None = None) -> None:
        """Accumulate d(self)/d(leaf) into the `.grad` of every leaf that requires grad."""
        _upper.backward([self], [gradient] if gradient is not None else None, retain_graph=retain_graph,
                        create_graph=create_graph, inputs=inputs)

    # ------------------------------------------------------------ conversion
    def to(self, *args, **kwargs) -> Tensor:
        """`to(dtype)`, `to(device)`, `to(device, dtype)` or `to(other)`; a no-op returns self."""
        dtype = kwargs.get("dtype")
        device = kwargs.get("device")
        for a in args:
            if isinstance(a, Tensor):
                dtype, device = a.dtype, a.device
            elif isinstance(a, (dt.DType, type)) or _is_dtype_like(a):
                dtype = a
            elif isinstance(a, str) or type(a).__name__ == "device" or hasattr(a, "index") and hasattr(a, "type"):
                device = a
            elif a is not None:
                raise LoomTypeError(f"loom.Tensor.to: expected a dtype, a device or a tensor, got "
                                    f"{type(a).__name__} {a!r}")
        if device is not None:
            from loom.device import device as _device
            dev = _device(device)
            if dev.type != "cpu":
                raise DeviceError(f"loom.Tensor.to: device {dev} is not available; "
                                  "this build of loom runs on the cpu")
        if dtype is None or dt.as_dtype(dtype) is self.dtype:
            return self.clone() if kwargs.get("copy") else self  # copy=True: a new tensor, as PyTorch.
        dtype = dt.as_dtype(dtype)
        if self.dtype.is_complex and not dtype.is_complex and dtype is not dt.bool_:
            import warnings
            from loom.errors import LoomWarning
            warnings.warn(f"loom.to: casting complex values to {dtype.name} discards the imaginary part (as "
                          "PyTorch warns); use .real to take it explicitly", LoomWarning, stacklevel=2)
        return apply("cast", (self,), {"dtype": dtype})

    def type(self, dtype=None, non_blocking: bool = False):
        if dtype is None:
            if _naming.namespace() == "torch":  # PyTorch's legacy type name, "torch.FloatTensor".
                return f"torch.{_naming.TORCH_TYPE_NAMES.get(self.dtype.name, self.dtype.name)}"
            return f"loom.{self.dtype.name}"
        legacy = getattr(dtype, "dtype", None)
        if isinstance(dtype, type) and isinstance(legacy, dt.DType):
            dtype = legacy  # A legacy tensor type such as torch.LongTensor (loom.torch).
        elif isinstance(dtype, str):  # "torch.LongTensor", "torch.int64" or "int64".
            short = dtype.rpartition(".")[2]
            names = {v: k for k, v in _naming.TORCH_TYPE_NAMES.items()}
            dtype = dt.from_name(names.get(short, short))
        return self.to(dtype)

    def type_as(self, other: Tensor) -> Tensor:
        return self.to(other.dtype)

    def float(self) -> Tensor:
        return self.to(dt.float32)

    def double(self) -> Tensor:
        return self.to(dt.float64)

    def half(self) -> Tensor:
        return self.to(dt.float16)

    def bfloat16(self) -> Tensor:
        return self.to(dt.bfloat16)

    def int(self) -> Tensor:
        return self.to(dt.int32)

    def long(self) -> Tensor:
        return self.to(dt.int64)

    def short(self) -> Tensor:
        return self.to(dt.int16)

    def char(self) -> Tensor:
        return self.to(dt.int8)

    def byte(self) -> Tensor:
        return self.to(dt.uint8)

    def bool(self) -> Tensor:
        return self.to(dt.bool_)

    def cpu(self) -> Tensor:
        return self

    def cuda(self, device=None, non_blocking: bool = False) -> Tensor:
        """This tensor on a CUDA device; this build of loom has none, so it raises DeviceError."""
        _check_device("cuda" if device is None else (f"cuda:{device}" if isinstance(device, int) else device),
                      "Tensor.cuda")
        return self

    def contiguous(self, memory_format=None) -> Tensor:
        """This tensor if its elements are in row-major order in its storage, else a copy that is."""
        return self if _upper.alias.is_contiguous(self) else self.clone()

    def is_contiguous(self, memory_format=None) -> bool:
        return _upper.alias.is_contiguous(self)

    def stride(self, dim: int | None = None):
        """Steps in elements between neighbours along each dim, as PyTorch reports them."""
        strides = _upper.alias.layout_of(self)[0]
        return strides if dim is None else strides[normalize_dim(dim, self.ndim, "stride")]

    def storage_offset(self) -> int:
        return _upper.alias.layout_of(self)[1]

    def data_ptr(self) -> int:
        """An address-like integer: equal for tensors that start at the same element of one storage.

        loom's storages are values, not fixed memory, so this is a token built from the storage's owner
        and the offset, good for PyTorch's idioms (`a.data_ptr() == b.data_ptr()`, de-duplicating tied
        parameters), not for pointer arithmetic.
        """
        owner = self._root if self._root is not None else self
        return (id(owner) << 32) + self.storage_offset() * self.dtype.itemsize

    @property
    def _base(self) -> Tensor | None:
        """The tensor whose storage this view shares (None for a tensor that is not a view)."""
        return self._root

    def _is_view(self) -> bool:
        return self._root is not None

    def as_strided(self, size, stride, storage_offset: int | None = None) -> Tensor:
        """A view of this tensor's storage with the given sizes and strides (in elements)."""
        return _upper.alias.as_strided(self, size, stride, storage_offset)

    def clone(self, memory_format=None) -> Tensor:
        """A copy that is its own node (gradient flows through)."""
        return apply("reshape", (self,), {"shape": tuple(self.shape)})

    def __deepcopy__(self, memo: dict) -> Tensor:
        """An independent leaf with its own storage (copying the node graph would duplicate node ids)."""
        import copy
        if self._ctx is not None:
            raise LoomError("loom.Tensor.__deepcopy__: only leaf tensors (created by the user, not by an "
                            "op that records history) support deepcopy; deepcopy t.detach() instead")
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        buf = np.array(self._array(), copy=True)
        new._init(Node("buffer", (), {}, tuple(self.shape), self.dtype, buffer=buf), None, self.requires_grad)
        new.grad = copy.deepcopy(self.grad, memo)
        for k, v in self._public_state().items():
            setattr(new, k, copy.deepcopy(v, memo))
        return new

    def __reduce_ex__(self, protocol):
        """Pickle by value (the realised array); history is not pickled, as in PyTorch."""
        return (_rebuild_tensor, (type(self), np.array(self._array()), self.dtype.name, self.requires_grad,
                                  self._public_state()))

    def _public_state(self) -> dict:
        """User attributes a copy carries over (private bookkeeping such as `_owner` stays behind)."""
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}

    # ------------------------------------------------------------ in place
    def _check_inplace(self, op: str) -> None:
        if self.requires_grad and self._ctx is None and is_grad_enabled():
            raise AutogradError(f"loom.{op}: a leaf tensor that requires grad "
                                f"({self.dtype.name}{fmt_shape(self.shape)}) cannot be modified "
                                "in place; wrap the update in `with loom.no_grad():` or use an "
                                "out-of-place op")

    def _snapshot(self) -> Tensor:
        t = Tensor._wrap(self._node, self._ctx, self.requires_grad)
        t._vc = _upper.alias.VersionCounter(self._vc.value)
        t._owner = self.__dict__.get("_owner") or weakref.ref(self)  # Traces bind values to the original.
        return t

    def _assign(self, result: Tensor, op: str, snapshot: Tensor | None = None) -> Tensor:
        """Make `result` this tensor's new value (PyTorch's in-place ops, done functionally).

        `snapshot` is this tensor's current value as `_snapshot` made it, if the caller has one.
        A write through a view becomes a new value of the storage's root, which every alias
        then re-derives its value from (loom/alias.py).
        """
        if not isinstance(result, Tensor):
            result = as_tensor_like(result, self)
        shape_op = op in _SHAPE_CHANGING
        if shape_op and self._alias is not None and self.__dict__.pop("_alias_exported", False):
            self._alias = None  # An array from .numpy() keeps the old shape; only from_numpy memory must fit.
        if tuple(result.shape) != tuple(self.shape) and (not shape_op or self._alias is not None):
            raise ShapeError(f"loom.{op}: the result of shape {fmt_shape(result.shape)} cannot be "
                             f"written in place into a tensor of shape {fmt_shape(self.shape)}")
        if result.dtype is not self.dtype:
            if result.dtype.category > self.dtype.category:
                raise DTypeError(f"loom.{op}: result type {result.dtype.name} can't be cast to the "
                                 f"in-place output type {self.dtype.name}")
            result = result.to(self.dtype)
        if self._root is not None and not shape_op:
            _upper.alias.check_writable(self, op)
            root = self._root
            new, snap = _upper.alias.root_value_with(self, result)
            root._commit(new, op, snap, self._vc, self._vdiff)
            if not self._vdiff and is_grad_enabled() and result.requires_grad:
                # A detached alias written with a value that requires grad gets that history itself.
                self._node, self._ctx, self.requires_grad = result._node, result._ctx, True
            return self
        old = self._node
        self._commit(result, op, snapshot, self._vc, True, rederive=not shape_op)
        if shape_op:
            _upper.alias.reshaped_in_place(self, old)
        return self

    def _commit(self, result: Tensor, op: str, snapshot: Tensor | None, vc, differentiable: bool,
                rederive: bool = True) -> None:
        """Give this tensor (a storage root, or a view changing its own shape) the value `result`."""
        if self.requires_grad and self._ctx is not None and vc is self._vc:
            snapshot = snapshot if snapshot is not None else self._snapshot()
            if self._past is None:
                self._past = {}
            self._past[vc.value] = snapshot
        if self._views:
            _upper.alias.snapshot_group(self, vc)
        if is_grad_enabled() and differentiable:
            if result.requires_grad and result._ctx is None:
                # A leaf copied in: route the gradient to it through an identity node.
                result = apply("reshape", (result,), {"shape": tuple(result.shape)})
            elif self.requires_grad and not result.requires_grad and tuple(result.shape) == tuple(self.shape):
                # As in PyTorch the tensor still requires grad; its old value gets a zero gradient.
                keep = const(True, tuple(self.shape), dt.bool_)
                result = apply("where", (keep, result, snapshot if snapshot is not None else self._snapshot()), {})
            self._ctx = result._ctx
            self.requires_grad = result.requires_grad
        # Otherwise (no_grad, or a write through .data or detach()) the history is kept,
        # as for a parameter updated by an optimiser.
        old = self._node
        self._node = result._node
        vc.value += 1
        if _realize.active_trace is not None:
            _realize.active_trace.on_mutate(self, old)
        elif self._ctx is None and not self.requires_grad and result._node.buffer is None:
            _note_written(self)
        if self._alias is not None:
            # Memory shared with a NumPy array: the write must be visible there too, while
            # every other loom value that read the old contents keeps them.
            self.realize()
            if old.buffer is self._alias:
                old.buffer = np.array(self._alias)
            np.copyto(self._alias, self._node.buffer)
            self._node = Node("buffer", (), {}, self._node.shape, self.dtype, buffer=self._alias)
        if rederive and self._views:
            _upper.alias.rederive_all(self)

    def _inplace(self, op: str, fn, *args, **kwargs) -> Tensor:
        self._check_inplace(op)
        snapshot = self._snapshot()
        result = fn(snapshot, *args, **kwargs)
        if self.dtype.is_complex and isinstance(result, Tensor) and result.dtype.category == 2:
            raise DTypeError(f"loom.{op}: in-place {op[:-1]} is not supported for complex tensors (its result "
                             f"is {result.dtype.name}); use the out-of-place {op[:-1]}")
        return self._assign(result, op, snapshot)

    def copy_(self, src, non_blocking: bool = False) -> Tensor:
        self._check_inplace("copy_")
        src = src if isinstance(src, Tensor) else tensor(src, dtype=self.dtype)
        src = src.to(self.dtype)
        return self._assign(broadcast_to(src, self.shape, "copy_"), "copy_")

    def zero_(self) -> Tensor:
        return self.fill_(0)

    # ------------------------------------------------------------ random fills (in place)
    def _fill_random(self, op: str, make) -> Tensor:
        self._check_inplace(op)
        if not self.dtype.is_floating_point and op != "random_":
            raise DTypeError(f"loom.{op}: expected a floating point tensor, got {self.dtype.name}"
                             f"{fmt_shape(self.shape)}")
        return self._assign(make().to(self.dtype), op)

    def uniform_(self, a: float = 0.0, b: float = 1.0, generator: Generator | None = None) -> Tensor:
        """Fill with samples from the uniform distribution on [a, b).

        Examples
        --------
        >>> w = loom.empty(3).uniform_(-1, 1)
        """
        return self._fill_random("uniform_", lambda: rand(*self.shape, dtype=_rand_dtype(self.dtype),
                                                          generator=generator) * (b - a) + a)

    def normal_(self, mean: float = 0.0, std: float = 1.0, generator: Generator | None = None) -> Tensor:
        """Fill with samples from the normal distribution N(mean, std**2)."""
        return self._fill_random("normal_", lambda: randn(*self.shape, dtype=_rand_dtype(self.dtype),
                                                          generator=generator) * std + mean)

    def exponential_(self, lambd: float = 1.0, generator: Generator | None = None) -> Tensor:
        """Fill with samples from the exponential distribution of rate `lambd`."""
        def make():
            u = _rand_node(tuple(self.shape), dt.float64, generator)
            return (-(1.0 - u).log()) * (1.0 / lambd)  # 1 - u is in (0, 1]: the log is finite.
        return self._fill_random("exponential_", make)

    def cauchy_(self, median: float = 0.0, sigma: float = 1.0, generator: Generator | None = None) -> Tensor:
        """Fill with samples from the Cauchy distribution (inverse CDF of a uniform sample)."""
        def make():
            u = _rand_node(tuple(self.shape), dt.float64, generator)
            return ((u - 0.5) * math.pi).tan() * sigma + median
        return self._fill_random("cauchy_", make)

    def log_normal_(self, mean: float = 1.0, std: float = 2.0, generator: Generator | None = None) -> Tensor:
        """Fill with exp of samples from N(mean, std**2)."""
        return self._fill_random("log_normal_", lambda: (randn(*self.shape, dtype=dt.float64, generator=generator)
                                                          * std + mean).exp())

    def geometric_(self, p: float, generator: Generator | None = None) -> Tensor:
        """Fill with the number of Bernoulli(p) trials up to the first success (1, 2, ...)."""
        if not 0 < p <= 1:
            raise LoomValueError(f"loom.geometric_: p must be in (0, 1], got {p}")
        self._check_inplace("geometric_")

        def make():
            u = _rand_node(tuple(self.shape), dt.float64, generator)
            if p == 1:
                return full(tuple(self.shape), 1.0, dtype=dt.float64)
            return ((1.0 - u).log() / math.log1p(-p)).ceil().clamp(min=1.0)  # 1 - u is in (0, 1].
        return self._assign(make().to(self.dtype), "geometric_")

    def bernoulli_(self, p=0.5, generator: Generator | None = None) -> Tensor:
        """Fill with 1 where a uniform sample is below `p` (a number or a broadcastable tensor), else 0."""
        def make():
            u = _rand_node(tuple(self.shape), dt.float64, generator)
            return u < (p.detach().to(dt.float64) if isinstance(p, Tensor) else float(p))
        self._check_inplace("bernoulli_")
        return self._assign(make().to(self.dtype), "bernoulli_")

    def random_(self, low: int = 0, high: int | None = None, generator: Generator | None = None) -> Tensor:
        """Fill with integers drawn uniformly from [low, high) (`random_(high)` means [0, high))."""
        if high is None:
            low, high = 0, low
            if high == 0:
                raise LoomValueError("loom.random_: give an upper bound, e.g. random_(10)")
        return self._fill_random("random_", lambda: randint(low, high, tuple(self.shape), dtype=dt.int64,
                                                            generator=generator))

    def bernoulli(self, p=None, generator: Generator | None = None) -> Tensor:
        """Samples 0/1 with probability `self` (or `p`) of a 1, elementwise."""
        if p is None:
            return bernoulli(self, generator=generator)
        return bernoulli(full(tuple(self.shape), float(p), dtype=self.dtype), generator=generator)

    def fill_(self, value) -> Tensor:
        self._check_inplace("fill_")
        if isinstance(value, Tensor):
            return self._assign(broadcast_to(value.to(self.dtype), self.shape, "fill_"), "fill_")
        return self._assign(full(self.shape, value, dtype=self.dtype), "fill_")

    def __iadd__(self, other):
        return self._inplace("add_", lambda s: s + other)

    def __isub__(self, other):
        return self._inplace("sub_", lambda s: s - other)

    def __imul__(self, other):
        return self._inplace("mul_", lambda s: s * other)

    def __itruediv__(self, other):
        return self._inplace("div_", lambda s: s / other)

    def __ifloordiv__(self, other):
        return self._inplace("floor_divide_", lambda s: s // other)

    def __imod__(self, other):
        return self._inplace("remainder_", lambda s: s % other)

    def __ipow__(self, other):
        return self._inplace("pow_", lambda s: s ** other)

    def __iand__(self, other):
        return self._inplace("bitwise_and_", lambda s: s & other)

    def __ior__(self, other):
        return self._inplace("bitwise_or_", lambda s: s | other)

    def __ixor__(self, other):
        return self._inplace("bitwise_xor_", lambda s: s ^ other)

    def __imatmul__(self, other):
        return self._inplace("matmul_", lambda s: s @ other)

    # ------------------------------------------------------------ operators
    def __add__(self, other):
        return binary("add", self, other)

    def __radd__(self, other):
        return binary("add", other, self)

    def __sub__(self, other):
        return binary("sub", self, other)

    def __rsub__(self, other):
        return binary("sub", other, self)

    def __mul__(self, other):
        return binary("mul", self, other)

    def __rmul__(self, other):
        return binary("mul", other, self)

    def __truediv__(self, other):
        return binary("div", self, other)

    def __rtruediv__(self, other):
        return binary("div", other, self)

    def __floordiv__(self, other):
        return binary("floordiv", self, other)

    def __rfloordiv__(self, other):
        return binary("floordiv", other, self)

    def __mod__(self, other):
        return binary("mod", self, other)

    def __rmod__(self, other):
        return binary("mod", other, self)

    def __pow__(self, other):
        return binary("pow", self, other)

    def __rpow__(self, other):
        return binary("pow", other, self)

    def __matmul__(self, other):
        return _upper.matmul(self, other)

    def __rmatmul__(self, other):
        return _upper.matmul(as_tensor_like(other, self), self)

    def __neg__(self):
        if self.dtype is dt.bool_:
            raise DTypeError("loom.neg: negation of a bool tensor is not supported; use ~ or logical_not")
        return apply("neg", (self,), {})

    def __pos__(self):
        return self

    def __abs__(self):
        return apply("abs", (self,), {}) if self.dtype is not dt.bool_ else self

    def __invert__(self):
        if self.dtype.category >= 2:
            raise DTypeError(f"loom.bitwise_not: expected an integer or bool tensor, got {self.dtype.name}")
        return apply("not", (self,), {})

    def __and__(self, other):
        return binary("and", self, other)

    __rand__ = __and__

    def __or__(self, other):
        return binary("or", self, other)

    __ror__ = __or__

    def __xor__(self, other):
        return binary("xor", self, other)

    __rxor__ = __xor__

    def _shift_factor(self, other, op: str):
        """2 ** other for an integer shift amount (a Python int or an integer tensor)."""
        if self.dtype.category >= 2 or (isinstance(other, Tensor) and other.dtype.category >= 2) \
                or isinstance(other, float):
            other_t = other.dtype.name if isinstance(other, Tensor) else type(other).__name__
            raise DTypeError(f"loom.{op}: shifts take integer operands, got {self.dtype.name} and {other_t}")
        if isinstance(other, Tensor):
            return 2 ** other
        if int(other) < 0:
            raise LoomValueError(f"loom.{op}: negative shift count {int(other)}")
        return 1 << int(other)

    def __lshift__(self, other):
        return self * self._shift_factor(other, "bitwise_left_shift")

    def __rshift__(self, other):
        return self // self._shift_factor(other, "bitwise_right_shift")

    def __rlshift__(self, other):
        return tensor(other, dtype=self.dtype) << self

    def __rrshift__(self, other):
        return tensor(other, dtype=self.dtype) >> self

    def __ilshift__(self, other):
        return self._inplace("bitwise_left_shift_", lambda s: s << other)

    def __irshift__(self, other):
        return self._inplace("bitwise_right_shift_", lambda s: s >> other)

    def __eq__(self, other):  # type: ignore[override]
        if other is None:  # `t == None` is False and `t != None` True, as in PyTorch (identity comparison).
            return NotImplemented
        return binary("eq", self, other)

    def __ne__(self, other):  # type: ignore[override]
        if other is None:
            return NotImplemented
        return binary("ne", self, other)

    def __lt__(self, other):
        return binary("lt", self, other)

    def __le__(self, other):
        return binary("le", self, other)

    def __gt__(self, other):
        return binary("gt", self, other)

    def __ge__(self, other):
        return binary("ge", self, other)

    def __getitem__(self, index):
        return _upper.getitem(self, index)

    def __setitem__(self, index, value) -> None:
        self._inplace("setitem", lambda s: _upper.index_put_functional(s, index, value))


# ================================================================ printing (PyTorch's layout)

PRINT_OPTIONS: dict[str, Any] = {"precision": 4, "threshold": 1000, "edgeitems": 3, "linewidth": 80,
                                 "sci_mode": None}


def set_printoptions(precision: int | None = None, threshold: int | None = None,
                     edgeitems: int | None = None, linewidth: int | None = None,
                     sci_mode: bool | None = None, profile: str | None = None) -> None:
    """Set how tensors print, as `torch.set_printoptions`.

    Examples
    --------
    >>> loom.set_printoptions(precision=2)
    >>> loom.tensor([1.2345])
    tensor([1.23])
    >>> loom.set_printoptions(profile="default")
    """
    if profile is not None:
        presets = {"default": (4, 1000, 3, 80), "short": (2, 1000, 2, 80), "full": (4, math.inf, 3, 80)}
        if profile not in presets:
            raise LoomValueError(f"loom.set_printoptions: unknown profile {profile!r}; expected one of "
                             f"{sorted(presets)}")
        PRINT_OPTIONS.update(zip(("precision", "threshold", "edgeitems", "linewidth"), presets[profile]))
        PRINT_OPTIONS["sci_mode"] = None
    for key, value in (("precision", precision), ("threshold", threshold), ("edgeitems", edgeitems),
                       ("linewidth", linewidth)):
        if value is not None:
            PRINT_OPTIONS[key] = value
    PRINT_OPTIONS["sci_mode"] = sci_mode


class _ValueFormat:
    """One number format for all printed elements of a tensor, chosen as PyTorch chooses it."""

    def __init__(self, values: np.ndarray, floating: bool) -> None:
        self.floating, self.int_mode, self.sci, self.width = floating, True, False, 1
        p = PRINT_OPTIONS["precision"]
        flat = values.reshape(-1)
        if not floating:
            self.width = max(len(str(v)) for v in flat.tolist())
            return
        flat = flat.astype(np.float64)
        finite = flat[np.isfinite(flat) & (flat != 0)]
        if finite.size:
            lo, hi = float(np.abs(finite).min()), float(np.abs(finite).max())
            self.int_mode = bool(np.all(finite == np.ceil(finite)))
            self.sci = hi / lo > 1000.0 or hi > 1.0e8 or (not self.int_mode and lo < 1.0e-4)
            if self.sci:
                self.width = max(len(f"{v:.{p}e}") for v in finite.tolist())
            elif self.int_mode:
                self.width = max(len(f"{v:.0f}") + 1 for v in finite.tolist())
            else:
                self.width = max(len(f"{v:.{p}f}") for v in finite.tolist())
        if PRINT_OPTIONS["sci_mode"] is not None:
            self.sci = PRINT_OPTIONS["sci_mode"]

    def __call__(self, v) -> str:
        p = PRINT_OPTIONS["precision"]
        if not self.floating:
            s = str(v)
        elif self.sci:
            s = f"{v:.{p}e}"
        elif self.int_mode:
            s = f"{v:.0f}" + ("" if math.isinf(v) or math.isnan(v) else ".")
        else:
            s = f"{v:.{p}f}"
        return s.rjust(self.width)


def _summarized(a: np.ndarray, edge: int) -> np.ndarray:
    for ax in range(a.ndim):
        if a.shape[ax] > 2 * edge:
            a = np.concatenate([a.take(range(edge), ax), a.take(range(a.shape[ax] - edge, a.shape[ax]), ax)], ax)
    return a


class _ComplexFormat:
    """PyTorch's complex layout: the real parts in one format, the signed imaginary parts in another."""

    def __init__(self, values: np.ndarray) -> None:
        self.re, self.im = _ValueFormat(values.real, True), _ValueFormat(values.imag, True)
        self.width = self.re.width + self.im.width + 1  # The "j" (PyTorch counts no sign).

    def __call__(self, v) -> str:
        im = (self.im(v.imag) + "j").lstrip()
        return self.re(v.real) + (im if im[0] in "+-" else "+" + im)


def _format_array(a: np.ndarray, kind: str, indent: int) -> str:
    """The bracketed body of a tensor's repr (`kind`: "int", "float" or "complex"), laid out like PyTorch's."""
    edge = PRINT_OPTIONS["edgeitems"]
    summarize = a.size > PRINT_OPTIONS["threshold"]
    shown = _summarized(a, edge) if summarize else a
    fmt = _ComplexFormat(shown) if kind == "complex" else _ValueFormat(shown, kind == "float")

    def rows(x: np.ndarray, ind: int) -> str:
        if x.ndim == 0:
            return fmt(x.item())
        n = x.shape[0]
        cut = summarize and n > 2 * edge
        if x.ndim == 1:
            vals = x.tolist()
            items = [fmt(v) for v in vals[:edge]] + [" ..."] + [fmt(v) for v in vals[-edge:]] if cut \
                else [fmt(v) for v in vals]
            per_line = max(1, int((PRINT_OPTIONS["linewidth"] - ind) // (fmt.width + 2)))
            lines = [", ".join(items[i:i + per_line]) for i in range(0, len(items), per_line)]
            return "[" + (",\n" + " " * (ind + 1)).join(lines) + "]"
        idx = list(range(edge)) + [None] + list(range(n - edge, n)) if cut else list(range(n))
        parts = ["..." if i is None else rows(x[i], ind + 1) for i in idx]
        return "[" + ("," + "\n" * (x.ndim - 1) + " " * (ind + 1)).join(parts) + "]"

    return rows(a, indent)


def _add_suffixes(text: str, suffixes: list[str], indent: int) -> str:
    parts = [text]
    last = len(text) - text.rfind("\n") + 1
    for s in suffixes:
        if last + len(s) + 2 > PRINT_OPTIONS["linewidth"]:
            parts.append(",\n" + " " * indent + s)
            last = indent + len(s)
        else:
            parts.append(", " + s)
            last += len(s) + 2
    return "".join(parts) + ")"


class Size(tuple):
    """A shape: a tuple of ints that prints like PyTorch's."""

    def numel(self) -> int:
        return math.prod(self)

    def as_list(self) -> list:
        """The dimensions as a list (TensorFlow's `TensorShape.as_list`)."""
        return list(self)

    @property
    def rank(self) -> int:
        """The number of dimensions (TensorFlow's `TensorShape.rank`)."""
        return len(self)

    ndims = rank  # TensorFlow's older spelling.

    def num_elements(self) -> int:
        """The number of elements (TensorFlow's `TensorShape.num_elements`)."""
        return math.prod(self)

    def __repr__(self) -> str:
        ns = _naming.namespace()
        return f"TensorShape({list(self)})" if ns == "tf" else f"{ns}.Size({list(self)})"

    def __str__(self) -> str:
        return str(tuple(self)) if _naming.namespace() == "tf" else self.__repr__()  # TensorFlow prints (2, 3).


class _HookHandle:
    def __init__(self, hooks: list, hook) -> None:
        self._hooks, self._hook = hooks, hook

    def remove(self) -> None:
        if self._hook in self._hooks:
            self._hooks.remove(self._hook)


# ================================================================ applying primitives

# In-place ops that may change a tensor's shape (PyTorch's in-place view ops).
_SHAPE_CHANGING = frozenset({"squeeze_", "unsqueeze_", "transpose_", "t_", "swapaxes_", "swapdims_"})


def apply(op: str, inputs: Sequence[Tensor], attrs: dict) -> Tensor:
    """Add one primitive node; record backward history when grad mode asks for it."""
    # The hot path of eager mode (every op of every step): comprehensions and loops, not generators.
    prim = PRIMITIVES[op]
    if _realize.active_trace is not None:
        _realize.active_trace.on_read(inputs)
    nodes = tuple([t._node for t in inputs])
    if prim.check_attrs is not None:  # The one attribute gate every node passes (see loom.ir.ops).
        prim.check_attrs(nodes, attrs)
    shape, dtype = prim.infer(nodes, attrs) if op != "buffer" else (attrs["shape"], attrs["dtype"])
    node = Node(op, nodes, attrs, tuple(shape), dtype, nodes[0].device if nodes else "cpu")
    ctx = None
    requires = False
    if prim.vjp is not None and dtype.category >= 2 and is_grad_enabled():
        for t in inputs:
            if t.requires_grad:
                ctx = Context(prim, tuple(inputs), attrs)
                requires = True
                break
    out = _TENSOR_NEW(Tensor)
    out._init(node, ctx, requires)
    if node.depth > LAZY_DEPTH_LIMIT or (prim.kind == "collective" and len(attrs["ranks"]) > 1):
        # A collective among ranks runs when the program reaches it (outside traces): every rank talks in
        # program order.
        _realize.realize_barrier([node])
    return out


_ops._APPLY = apply
_TENSOR_NEW = Tensor.__new__

# State without history written in place and not yet computed (BatchNorm's running statistics, step
# counters): nothing reads it within a step, so its pending chain, and the per-step values it reads, would
# grow until the lazy depth limit. The optimizer's step barrier computes it with the parameters
# (`take_written`). By id; an entry goes when its tensor does.
_WRITTEN: dict[int, weakref.ref] = {}


def _note_written(t: Tensor) -> None:
    key = id(t)
    if key not in _WRITTEN:
        def forget(_ref: weakref.ref, key: int = key) -> None:
            _WRITTEN.pop(key, None)
        _WRITTEN[key] = weakref.ref(t, forget)


def take_written() -> list[Tensor]:
    """The live tensors written in place since the last call whose new value is still pending (and forget them)."""
    if not _WRITTEN:
        return []
    refs = list(_WRITTEN.values())  # A copy first: a collection while we read may run the callbacks.
    _WRITTEN.clear()
    out = []
    for r in refs:
        t = r()
        if t is not None and t._node.buffer is None:
            out.append(t)
    return out


def _is_dtype_like(a) -> bool:
    if isinstance(a, str):
        return a in dt._BY_NAME
    # Other libraries' dtype objects (NumPy's, PyTorch's) are all of a class named `dtype`.
    return isinstance(a, (np.dtype, dt.DType)) or type(a).__name__ == "dtype"


def _rebuild_tensor(cls, array: np.ndarray, dtype_name: str, requires_grad: bool, state: dict) -> Tensor:
    """Unpickle a Tensor (see Tensor.__reduce_ex__): a leaf holding `array`."""
    t = cls.__new__(cls)
    t._init(Node("buffer", (), {}, tuple(array.shape), dt.from_name(dtype_name), buffer=array), None, requires_grad)
    t.__dict__.update(state)
    return t


def _node_from_data(data, dtype=None) -> Node:
    """A buffer node holding a copy of `data` (nested lists, scalars, arrays, tensors)."""
    if isinstance(data, Tensor):
        arr = np.array(data.numpy(force=True))
        src = data.dtype
    else:
        arr, src = _to_numpy(data)
    d = dt.check_computable(dt.as_dtype(dtype) if dtype is not None else src, "tensor")
    if arr.dtype.kind == "c" and d.category < 3:
        raise DTypeError(f"loom.tensor: cannot store complex values in a {d.name} tensor; use a complex dtype")
    if d is dt.bfloat16:
        store = dt.f32_to_bf16(np.asarray(arr, np.float32))
    elif d.category == 1 and arr.dtype.kind == "f":
        store = np.trunc(arr).astype(d.np)  # Toward zero, as PyTorch converts floats to ints.
    else:
        store = np.array(arr, dtype=d.np, copy=True)
    return Node("buffer", (), {}, tuple(store.shape), d, buffer=store)


def _to_numpy(data) -> tuple[np.ndarray, dt.DType]:
    """`data` as an array (floats may still be float64) and the dtype PyTorch infers for it."""
    if isinstance(data, (np.ndarray, np.generic)):
        return np.asarray(data), dt.from_numpy(data.dtype)
    if isinstance(data, numbers.Number):
        d = _element_dtype(type(data))
        return np.array(data, _WIDE.get(d.category, d.np)), d
    if isinstance(data, range):  # Any sequence builds a tensor in PyTorch: `tensor(range(3))`.
        data = list(data)
    if isinstance(data, (list, tuple)):
        flat = _flatten_nested(data)
        if any(isinstance(v, Tensor) for v in flat):
            data = _nested_values(data)
            flat = _flatten_nested(data)
        if not flat:
            d = dt.get_default_dtype()
            return np.zeros(np.shape(data), np.float64), d
        d = None
        for ty in {type(v) for v in flat}:
            e = dt.from_numpy(ty) if issubclass(ty, np.generic) else _element_dtype(ty)
            d = e if d is None else dt.promote_pair(d, e)
        for v in flat:
            if isinstance(v, np.ndarray):
                e = dt.from_numpy(v.dtype)
                d = e if d is None else dt.promote_pair(d, e)
        try:
            return np.array(data, dtype=_WIDE.get(d.category, d.np)), d
        except (ValueError, TypeError) as e:
            raise ShapeError(f"loom.tensor: cannot build a tensor from a ragged or mixed nested "
                             f"sequence (every level must have one length): {e}") from None
    if hasattr(data, "__array__") or hasattr(data, "__dlpack__"):
        arr = np.asarray(data)
        return arr, dt.from_numpy(arr.dtype)
    raise LoomTypeError(f"loom.tensor: cannot build a tensor from an object of type {type(data).__name__}")


# Python floats and complex numbers are read in double precision, then stored in the tensor's dtype.
_WIDE = {2: np.float64, 3: np.complex128}


def _element_dtype(ty: type) -> dt.DType:
    if ty is np.ndarray:
        return dt.bool_  # The lowest type: the arrays' own dtypes are promoted in separately.
    if issubclass(ty, bool):
        return dt.bool_
    if issubclass(ty, numbers.Integral):
        return dt.int64
    if issubclass(ty, numbers.Real):
        return dt.get_default_dtype()
    if issubclass(ty, numbers.Complex):
        return dt.to_complex(dt.get_default_dtype())
    raise LoomTypeError(f"loom.tensor: cannot build a tensor from an element of type {ty.__name__}")


def _flatten_nested(data) -> list:
    out: list = []
    stack = [data]
    while stack:
        v = stack.pop()
        if isinstance(v, (list, tuple)):
            stack.extend(v)
        else:
            out.append(v)
    return out


def _nested_values(data):
    if isinstance(data, (list, tuple)):
        return [_nested_values(v) for v in data]
    if isinstance(data, Tensor):
        return data.tolist()
    return data


# ================================================================ broadcasting and promotion

def broadcast_shapes(*shapes, op: str = "broadcast") -> tuple[int, ...]:
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(-ndim, 0):
        size = 1
        for s in shapes:
            if len(s) >= -i:
                d = s[i]
                if d != 1:
                    if size != 1 and size != d:
                        raise ShapeError(f"loom.{op}: shapes " + " and ".join(fmt_shape(x) for x in shapes)
                                         + f" cannot be broadcast together: dim {i} has sizes {size} and {d}")
                    size = d
        out.append(size)
    return tuple(out)


def broadcast_to(t: Tensor, shape, op: str = "expand") -> Tensor:
    # Every bias add of an eager step passes here: the node's shape tuple, not `t.shape` (a new Size).
    shape = tuple(shape)
    have = tuple(t._node.shape)
    if have == shape:
        return t
    lead = len(shape) - len(have)
    if lead < 0:
        raise ShapeError(f"loom.{op}: cannot broadcast {fmt_shape(have)} to the smaller rank "
                         f"shape {fmt_shape(shape)}")
    for s, d in zip(have, shape[lead:]):
        if s != d and s != 1:
            raise ShapeError(f"loom.{op}: cannot broadcast {fmt_shape(have)} to {fmt_shape(shape)}")
    if lead:
        have = (1,) * lead + have
        t = apply("reshape", (t,), {"shape": have})
    if have != shape:
        t = apply("expand", (t,), {"shape": shape})
    return t


def broadcast_operand(t: Tensor, shape: tuple, op: str) -> Tensor:
    """`t` broadcast to `shape` as an operand of an elementwise op (never a view the user sees).

    A pending splat (a scalar of a composite or a backward rule) becomes the same splat at the
    new shape: one node instead of a reshape and an expand, with the same values.
    """
    node = t._node
    if node.op == "const" and node.shape != shape and t._ctx is None and not t.requires_grad:
        n = len(shape) - len(node.shape)
        if n >= 0 and all(s == 1 or s == d for s, d in zip(node.shape, shape[n:])):
            return apply("const", (), {**node.attrs, "shape": shape})
    return broadcast_to(t, shape, op)


def const(value, shape=(), dtype=None) -> Tensor:
    d = dt.as_dtype(dtype) if dtype is not None else dt.scalar_dtype(value)
    if isinstance(value, (complex, np.complexfloating)):
        if d.category < 3:
            raise DTypeError(f"loom: cannot convert the complex scalar {value!r} to {d.name}")
        part = dt.to_real(d)
        return apply("complex", (const(value.real, shape, part), const(value.imag, shape, part)), {})
    if d.category == 1 and isinstance(value, float):
        if math.isfinite(value):
            value = int(value)
    if d is dt.bool_:
        value = bool(value)
    return apply("const", (), {"value": value, "shape": tuple(shape), "dtype": d})


def as_tensor_like(value, like: Tensor | None = None) -> Tensor:
    if isinstance(value, Tensor):
        return value
    if isinstance(value, (numbers.Number, np.bool_, np.number)):
        d = dt.result_type(like, value) if like is not None else dt.scalar_dtype(value)
        return const(value.item() if isinstance(value, np.generic) else value, (), d)
    return tensor(value)


_FLOAT_RESULT = {"div"}
_COMPARE = {"eq", "ne", "lt", "le", "gt", "ge"}


# Ops whose float operands of one dtype and shape (or a float tensor and a Python number) need no
# promotion, broadcasting or checks: `binary` applies them at once (most ops of an eager step).
_FAST_BINARY = frozenset({"add", "sub", "mul", "div", "pow", "maximum", "minimum",
                          "eq", "ne", "lt", "le", "gt", "ge"})


# Frontend rules `rule(op, a, b) -> Tensor | None` consulted by `binary` off its fast path; the first
# non-None result is the answer (loom.tf registers TensorFlow's dtype rules for its programs' operators).
BINARY_RULES: list = []


def binary(op: str, a, b) -> Tensor:
    """Broadcast, promote and apply a binary primitive (PyTorch's semantics)."""
    if op in _FAST_BINARY:
        if isinstance(a, Tensor):
            na = a._node
            if na.dtype.is_floating_point:
                if isinstance(b, Tensor):
                    nb = b._node
                    if nb.dtype is na.dtype and nb.device == na.device:
                        if nb.shape == na.shape:
                            return apply(op, (a, b), {})
                        # One float dtype, two shapes (a bias add): broadcast only.
                        shape = broadcast_shapes(na.shape, nb.shape, op=op)
                        return apply(op, (broadcast_operand(a, shape, op), broadcast_operand(b, shape, op)), {})
                elif type(b) is float or type(b) is int:
                    return apply(op, (a, const(b, na.shape, na.dtype)), {})
        elif (type(a) is float or type(a) is int) and isinstance(b, Tensor) and b._node.dtype.is_floating_point:
            return apply(op, (const(a, b._node.shape, b._node.dtype), b), {})
    for rule in BINARY_RULES:  # A frontend's own semantics (TensorFlow: no implicit promotion).
        out = rule(op, a, b)
        if out is not None:
            return out
    ta, tb = isinstance(a, Tensor), isinstance(b, Tensor)
    if not ta and not _scalar_like(a):
        a = tensor(a)
        ta = True
    if not tb and not _scalar_like(b):
        b = tensor(b)
        tb = True
    d = dt.result_type(a, b)
    if op in _FLOAT_RESULT and d.category < 2:
        d = dt.get_default_dtype()
    if d.category == 3 and op not in _ops.COMPLEX_ELEMENTWISE:
        raise DTypeError(f"loom.{_pub(op)}: not supported for complex dtype {d.name} (got {_describe(a)} and "
                         f"{_describe(b)})")
    if op in ("and", "or", "xor") and d.category >= 2:
        raise DTypeError(f"loom.bitwise_{op}: expected integer or bool operands, got "
                         f"{_describe(a)} and {_describe(b)}")
    if op == "sub" and any(isinstance(v, (bool, np.bool_)) or isinstance(v, Tensor) and v.dtype is dt.bool_
                           for v in (a, b)):
        raise DTypeError(f"loom.sub: subtraction with a bool operand is not supported (got {_describe(a)} "
                         f"and {_describe(b)}); to invert a mask use ~ or logical_not")
    if op == "pow" and d.category == 1 and not tb and not isinstance(b, (bool, np.bool_)):
        info = np.iinfo(d.np)  # type: ignore[type-var]  # d is an integer type here.
        if b < 0:
            raise LoomValueError(f"loom.pow: integers to negative integer powers are not allowed "
                            f"({_describe(a)} ** {b}); use a float base")
        if b > info.max:
            raise LoomValueError(f"loom.pow: exponent {b} cannot be converted to {d.name} without overflow")
    if op in ("floordiv", "mod") and d.category == 1 and _has_zero_divisor(b):
        raise LoomZeroDivisionError(f"loom.{_pub(op)}: integer division by zero ({_describe(a)} by {b!r})")
    shape = broadcast_shapes(tuple(a.shape) if ta else (), tuple(b.shape) if tb else (), op=_pub(op))
    if ta and tb and a._node.device != b._node.device:
        raise LoomError(f"loom.{op}: tensors on different devices: {a.device} and {b.device}")
    ca = broadcast_operand(a if a.dtype is d else a.to(d), shape, _pub(op)) if ta else const(_scalar_value(a), shape, d)
    cb = broadcast_operand(b if b.dtype is d else b.to(d), shape, _pub(op)) if tb else const(_scalar_value(b), shape, d)
    if op in ("add", "mul") and d is dt.bool_:
        op = "or" if op == "add" else "and"
    return apply(op, (ca, cb), {})


def _has_zero_divisor(b) -> bool:
    if isinstance(b, Tensor):
        return False  # Values unknown until run: the reference path checks them then.
    return b == 0


_PUBLIC = {"floordiv": "floor_divide", "mod": "remainder", "and": "bitwise_and", "or": "bitwise_or",
           "xor": "bitwise_xor"}


def _pub(op: str) -> str:
    return _PUBLIC.get(op, op)


def _scalar_like(v) -> bool:
    return isinstance(v, (numbers.Number, np.bool_, np.number))


def _scalar_value(v):
    return v.item() if isinstance(v, np.generic) else v


def _describe(v) -> str:
    if isinstance(v, Tensor):
        return f"{v.dtype.name}{fmt_shape(v.shape)}"
    return f"{type(v).__name__} {v!r}"


def unary(op: str, x: Tensor, float_op: bool = True) -> Tensor:
    """Apply an elementwise primitive; integer inputs of float ops compute in the default float."""
    if not isinstance(x, Tensor):
        x = tensor(x)
    if float_op and x.dtype.category < 2:
        x = x.to(dt.get_default_dtype())
    return apply(op, (x,), {})


def normalize_dim(dim: int, ndim: int, op: str = "op") -> int:
    n = max(ndim, 1)
    if not isinstance(dim, (int, np.integer)) or isinstance(dim, bool):
        raise LoomTypeError(f"loom.{op}: dim must be an int, got {type(dim).__name__}")
    if not -n <= dim < n:
        raise LoomIndexError(f"loom.{op}: dimension out of range (expected to be in range of "
                             f"[{-n}, {n - 1}], but got {dim})")
    return int(dim) % n


def normalize_dims(dim, ndim: int, op: str = "op") -> tuple[int, ...]:
    """Dims as sorted non-negative ints; None means all dims."""
    if dim is None:
        return tuple(range(ndim))
    if isinstance(dim, (list, tuple)):
        if len(dim) == 0:
            return tuple(range(ndim))
        dims = [normalize_dim(d, ndim, op) for d in dim]
        if len(set(dims)) != len(dims):
            raise LoomError(f"loom.{op}: dim {list(dim)} appears multiple times in the list of dims")
        if ndim == 0:
            return ()
        return tuple(sorted(dims))
    d = normalize_dim(dim, ndim, op)
    return (d,) if ndim else ()


# ================================================================ creation

def _shape_arg(size, op: str) -> tuple[int, ...]:
    if len(size) == 1 and isinstance(size[0], (tuple, list, Size)):
        size = tuple(size[0])
    out = []
    for s in size:
        if isinstance(s, Tensor):
            s = int(s.item())
        if not isinstance(s, (int, np.integer)) or isinstance(s, bool):
            raise LoomTypeError(f"loom.{op}: size must be a sequence of ints, got {size!r}")
        if s < 0:
            raise ShapeError(f"loom.{op}: negative dimension {s} in size {list(size)}")
        out.append(int(s))
    return tuple(out)


def _check_device(device, op: str) -> None:
    if device is not None:
        from loom.device import device as _device
        dev = _device(device)
        if dev.type != "cpu":
            raise DeviceError(f"loom.{op}: device {dev} is not available; this build of loom runs on the cpu")


def _finish(t: Tensor, requires_grad: bool) -> Tensor:
    if requires_grad:
        t = t.detach() if t._ctx is not None else t
        t.requires_grad_(True)
    return t


def tensor(data, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A new leaf tensor holding a copy of `data`.

    Examples
    --------
    >>> loom.tensor([1, 2, 3]).dtype
    loom.int64
    """
    _check_device(device, "tensor")
    t = Tensor._wrap(_node_from_data(data, dtype))
    return _finish(t, requires_grad)


def as_tensor(data, dtype=None, device=None) -> Tensor:
    if isinstance(data, Tensor):
        return data.to(dtype) if dtype is not None else data
    if isinstance(data, np.ndarray) and dtype is None:
        return from_numpy(data)
    return tensor(data, dtype=dtype, device=device)


def from_numpy(array: np.ndarray) -> Tensor:
    """A tensor that shares memory with `array`.

    Writes to the array show in the tensor (and in values computed from it later:
    loom is lazy, so an op written before the write but realised after it sees
    the new contents), and in-place ops on the tensor write into the array.

    Examples
    --------
    >>> a = np.zeros(3, np.float32)
    >>> t = loom.from_numpy(a)
    >>> t.add_(1)
    tensor([1., 1., 1.])
    >>> a
    array([1., 1., 1.], dtype=float32)
    """
    if not isinstance(array, np.ndarray):
        raise LoomTypeError(f"loom.from_numpy: expected np.ndarray, got {type(array).__name__}")
    return _share(array, dt.from_numpy(array.dtype))


def _share(array: np.ndarray, d: dt.DType) -> Tensor:
    t = Tensor._wrap(Node("buffer", (), {}, tuple(array.shape), d, buffer=array))
    t._alias = array
    reference.share_external(array)
    return t


def from_dlpack(obj) -> Tensor:
    """Zero-copy import of a DLPack producer (NumPy arrays, other frameworks' CPU tensors).

    The tensor shares memory with `obj` as `loom.from_numpy` does; bfloat16 is
    supported although NumPy has no such type.

    Examples
    --------
    >>> a = np.arange(3.0)
    >>> t = loom.from_dlpack(a)
    >>> a[0] = 7.0
    >>> t.tolist()
    [7.0, 1.0, 2.0]
    """
    if isinstance(obj, Tensor):
        return obj
    from loom.dlpack import BFloat16AsUInt16
    producer = BFloat16AsUInt16(obj)
    array = np.from_dlpack(producer)
    if producer.was_bfloat16:
        return _share(array, dt.bfloat16)
    return from_numpy(array)


def full(size, fill_value, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    _check_device(device, "full")
    size = _shape_arg(size if isinstance(size, (tuple, list, Size)) else (size,), "full")
    if isinstance(fill_value, Tensor):
        fill_value = fill_value.item()
    d = dt.as_dtype(dtype) if dtype is not None else dt.scalar_dtype(fill_value)
    t = const(fill_value, size, d)
    return _finish(t, requires_grad)


def zeros(*size, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    _check_device(device, "zeros")
    return full(_shape_arg(size, "zeros"), 0.0, dtype=dtype or dt.get_default_dtype(), device=device,
                requires_grad=requires_grad)


def ones(*size, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    _check_device(device, "ones")
    return full(_shape_arg(size, "ones"), 1.0, dtype=dtype or dt.get_default_dtype(), device=device,
                requires_grad=requires_grad)


def empty(*size, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    _check_device(device, "empty")
    return zeros(*size, dtype=dtype, device=device, requires_grad=requires_grad)


def _like(x: Tensor, dtype):
    return x.shape, (dt.as_dtype(dtype) if dtype is not None else x.dtype)


def zeros_like(x: Tensor, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    _check_device(device, "zeros_like")
    shape, d = _like(x, dtype)
    return full(shape, 0, dtype=d, requires_grad=requires_grad)


def ones_like(x: Tensor, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    _check_device(device, "ones_like")
    shape, d = _like(x, dtype)
    return full(shape, 1, dtype=d, requires_grad=requires_grad)


def empty_like(x: Tensor, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    _check_device(device, "empty_like")
    return zeros_like(x, dtype=dtype, requires_grad=requires_grad)


def full_like(x: Tensor, fill_value, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    _check_device(device, "full_like")
    shape, d = _like(x, dtype)
    return full(shape, fill_value, dtype=d, requires_grad=requires_grad)


def arange(start, end=None, step=1, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """Values from `start` to `end` (exclusive) by `step`, as `torch.arange`.

    The length is ``ceil((end - start) / step)``; the dtype is int64 when every
    bound is an int, else the default float.

    Examples
    --------
    >>> loom.arange(1, 2.5, 0.5).tolist()
    [1.0, 1.5, 2.0]
    >>> loom.arange(5, 0, -2).tolist()
    [5, 3, 1]
    """
    _check_device(device, "arange")
    if end is None:
        start, end = 0, start
    vals = [v.item() if isinstance(v, Tensor) else v for v in (start, end, step)]
    for name, v in zip(("start", "end", "step"), vals):
        if not isinstance(v, numbers.Real) or isinstance(v, float) and not math.isfinite(v):
            raise LoomValueError(f"loom.arange: {name} must be a finite number, got {v!r}")
    start, end, step = vals
    if step == 0:
        raise LoomValueError(f"loom.arange: step must be nonzero (start={start}, end={end})")
    if (end - start) * step < 0:
        raise LoomValueError(f"loom.arange: upper bound and step are inconsistent: start={start}, "
                        f"end={end}, step={step} (a {'positive' if step > 0 else 'negative'} step "
                        f"needs end {'>=' if step > 0 else '<='} start)")
    if dtype is None:
        is_float = any(isinstance(v, float) for v in vals)
        d = dt.get_default_dtype() if is_float else dt.int64
    else:
        d = dt.as_dtype(dtype)
    if d is dt.int64:
        # PyTorch truncates the bounds to int64 first and counts in integers.
        start, end, step = int(start), int(end), int(step)
        if step == 0:
            raise LoomValueError("loom.arange: step must be nonzero after truncation to int64")
        n = max(0, -((start - end) // step))
    else:
        n = max(0, math.ceil((end - start) / step))
        if d.category < 2:
            start, step = int(start), int(step)
    t = apply("arange", (), {"start": start, "step": step, "shape": (n,), "dtype": d})
    return _finish(t, requires_grad)


def linspace(start, end, steps: int, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """`steps` values evenly spaced from `start` to `end` inclusive, as `torch.linspace`.

    Computed as PyTorch does: the step in the output's precision, the first
    half counted up from `start` and the second half down from `end`.

    Examples
    --------
    >>> loom.linspace(0, 1, 5).tolist()
    [0.0, 0.25, 0.5, 0.75, 1.0]
    """
    _check_device(device, "linspace")
    d = dt.as_dtype(dtype) if dtype is not None else dt.get_default_dtype()
    if not isinstance(steps, (int, np.integer)) or steps < 0:
        raise LoomValueError(f"loom.linspace: number of steps must be a non-negative int, got {steps!r}")
    start, end = (v.item() if isinstance(v, Tensor) else v for v in (start, end))
    if d.is_floating_point:
        cd = np.float64 if d is dt.float64 else np.float32
        s, e = cd(start), cd(end)
    else:
        cd, s, e = np.float64, np.float64(int(start)), np.float64(int(end))
    if steps <= 1:
        vals = np.full(steps, s, np.float64)
    else:
        step = np.float64(cd((e - s) / cd(steps - 1)))
        k = np.arange(steps, dtype=np.float64)
        vals = np.where(k < steps // 2, _fma(step, k, s), _fma(-step, steps - 1 - k, e))
    if d.category < 2:
        vals = np.trunc(vals)
    return tensor(vals, dtype=d, requires_grad=requires_grad)


def _fma(a, b, c) -> np.ndarray:
    """a * b + c rounded once (float64), as the fused multiply-add of PyTorch's compiled kernels."""
    a, b = np.broadcast_arrays(np.float64(a), np.asarray(b, np.float64))
    p = a * b
    split = 134217729.0  # 2**27 + 1: Veltkamp splitting makes the product's error exact.
    ah = a * split - (a * split - a)
    bh = b * split - (b * split - b)
    al, bl = a - ah, b - bh
    perr = ((ah * bh - p) + ah * bl + al * bh) + al * bl
    total = p + np.float64(c)
    z = total - p
    serr = (p - (total - z)) + (np.float64(c) - z)
    return total + (serr + perr)


def logspace(start, end, steps: int, base: float = 10.0, dtype=None, device=None,
             requires_grad: bool = False) -> Tensor:
    _check_device(device, "logspace")
    d = dt.as_dtype(dtype) if dtype is not None else dt.get_default_dtype()
    vals = np.logspace(float(start), float(end), steps, base=base, dtype=np.float64)
    return tensor(vals, dtype=d, requires_grad=requires_grad)


def eye(n: int, m: int | None = None, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    _check_device(device, "eye")
    m = n if m is None else m
    if n < 0 or m < 0:
        raise ShapeError(f"loom.eye: sizes must be non-negative, got n={n}, m={m}")
    d = dt.as_dtype(dtype) if dtype is not None else dt.get_default_dtype()
    rows = arange(n).reshape(n, 1).expand(n, m)
    cols = arange(m).reshape(1, m).expand(n, m)
    return _finish((rows == cols).to(d), requires_grad)


# ================================================================ random numbers

_MASK64 = (1 << 64) - 1


class Generator:
    """Counter-based random state: each random op takes the next key, values depend only on (key, index)."""

    def __init__(self, seed: int = 0) -> None:
        self.manual_seed(seed)

    def manual_seed(self, seed: int) -> Generator:
        self._seed = int(seed) & _MASK64
        self._counter = 0
        return self

    def initial_seed(self) -> int:
        return self._seed

    def next_key(self) -> int:
        key = int(_ops.mix64(np.array([self._seed ^ (self._counter * 0xD1B54A32D192ED03 & _MASK64)],
                                      dtype=np.uint64))[0])
        self._counter += 1
        return key

    def get_state(self) -> Tensor:
        # A 64-bit unsigned seed is kept as the int64 with the same bits; set_state masks it back.
        seed = self._seed - (1 << 64) if self._seed >= 1 << 63 else self._seed
        return tensor([seed, self._counter], dtype=dt.int64)

    def set_state(self, state) -> None:
        seed, counter = (int(v) for v in (state.tolist() if isinstance(state, Tensor) else state))
        self._seed, self._counter = seed & _MASK64, counter


default_generator = Generator(int.from_bytes(os.urandom(8), "little"))


def manual_seed(seed: int) -> Generator:
    """Seed loom's random numbers; the same seed gives the same values in every mode."""
    return default_generator.manual_seed(seed)


def seed() -> int:
    s = int.from_bytes(os.urandom(8), "little")
    default_generator.manual_seed(s)
    return s


def initial_seed() -> int:
    return default_generator.initial_seed()


def get_rng_state() -> Tensor:
    return default_generator.get_state()


def set_rng_state(state) -> None:
    default_generator.set_state(state)


def _rand_dtype(d: dt.DType) -> dt.DType:
    """The float type to sample in for a tensor of dtype `d` (integers sample in the default float)."""
    return d if d.is_floating_point else dt.get_default_dtype()


def _rand_node(shape, d: dt.DType, generator: Generator | None) -> Tensor:
    gen = generator or default_generator
    rd = d if d.is_floating_point else dt.float64
    return apply("rand", (), {"shape": tuple(shape), "seed": gen.next_key(), "dtype": rd})


def rand(*size, dtype=None, generator=None, device=None, requires_grad: bool = False) -> Tensor:
    """Uniform samples in [0, 1)."""
    _check_device(device, "rand")
    d = dt.as_dtype(dtype) if dtype is not None else dt.get_default_dtype()
    if d.is_complex:  # Both parts uniform in [0, 1), as PyTorch.
        part = dt.to_real(dt.check_computable(d, "rand"))
        shape = _shape_arg(size, "rand")
        z = apply("complex", (rand(shape, dtype=part, generator=generator),
                              rand(shape, dtype=part, generator=generator)), {})
        return _finish(z, requires_grad)
    if not d.is_floating_point:
        raise DTypeError(f"loom.rand: expected a floating point dtype, got {d.name}")
    return _finish(_rand_node(_shape_arg(size, "rand"), d, generator), requires_grad)


def randn(*size, dtype=None, generator=None, device=None, requires_grad: bool = False) -> Tensor:
    """Standard normal samples (Box-Muller over two counter-based uniform streams)."""
    _check_device(device, "randn")
    d = dt.as_dtype(dtype) if dtype is not None else dt.get_default_dtype()
    if d.is_complex:  # Parts of variance 1/2 each, so that E|z|^2 = 1, as PyTorch.
        part = dt.to_real(dt.check_computable(d, "randn"))
        shape = _shape_arg(size, "randn")
        re = randn(shape, dtype=part, generator=generator) * math.sqrt(0.5)
        im = randn(shape, dtype=part, generator=generator) * math.sqrt(0.5)
        return _finish(apply("complex", (re, im), {}), requires_grad)
    if not d.is_floating_point:
        raise DTypeError(f"loom.randn: expected a floating point dtype, got {d.name}")
    shape = _shape_arg(size, "randn")
    cd = dt.float64 if d is dt.float64 else dt.float32
    u = _rand_node((2,) + shape, cd, generator)
    n = len(shape)
    u1 = apply("slice", (u,), {"starts": [0] * (n + 1), "stops": [1] + list(shape), "steps": [1] * (n + 1)})
    u2 = apply("slice", (u,), {"starts": [1] + [0] * n, "stops": [2] + list(shape), "steps": [1] * (n + 1)})
    u1 = 1.0 - u1.reshape(shape)  # In (0, 1], so the log is finite.
    u2 = u2.reshape(shape)
    z = (u1.log() * -2.0).sqrt() * (u2 * (2.0 * math.pi)).cos()
    return _finish(z.to(d), requires_grad)


def randint(low, high=None, size=None, dtype=None, generator=None, device=None,
            requires_grad: bool = False) -> Tensor:
    _check_device(device, "randint")
    if size is None and isinstance(high, (tuple, list, Size)):
        low, high, size = 0, low, high  # randint(high, size), as torch.
    if high is None:
        low, high = 0, low
    if size is None:
        raise LoomTypeError("loom.randint: missing the size argument")
    if high <= low:
        raise LoomValueError(f"loom.randint: expected low < high, got low={low}, high={high}")
    d = dt.as_dtype(dtype) if dtype is not None else dt.int64
    shape = _shape_arg(tuple(size) if isinstance(size, (tuple, list, Size)) else (size,), "randint")
    u = _rand_node(shape, dt.float64, generator)
    return ((u * float(high - low)).floor() + float(low)).to(d)


def rand_like(x: Tensor, dtype=None, **kw) -> Tensor:
    return rand(*x.shape, dtype=dtype or x.dtype, **kw)


def randn_like(x: Tensor, dtype=None, **kw) -> Tensor:
    return randn(*x.shape, dtype=dtype or x.dtype, **kw)


def randint_like(x: Tensor, low, high=None, dtype=None, **kw) -> Tensor:
    return randint(low, high, x.shape, dtype=dtype or x.dtype, **kw)


def bernoulli(p: Tensor, generator=None) -> Tensor:
    """1 with probability p, elementwise."""
    u = _rand_node(p.shape, p.dtype if p.dtype.is_floating_point else dt.float32, generator)
    return (u < p.detach()).to(p.dtype)


def normal(mean=0.0, std=1.0, size=None, generator=None, dtype=None) -> Tensor:
    if isinstance(mean, Tensor) or isinstance(std, Tensor):
        shape = broadcast_shapes(tuple(getattr(mean, "shape", ())), tuple(getattr(std, "shape", ())))
        return randn(*shape, generator=generator) * std + mean
    return randn(*_shape_arg(size if isinstance(size, (tuple, list)) else (size,), "normal"),
                 generator=generator, dtype=dtype) * std + mean


def multinomial(probs: Tensor, num_samples: int, replacement: bool = False, generator=None) -> Tensor:
    """Sample category indices from each row of (unnormalised) `probs`."""
    p = probs.detach()
    if p.ndim not in (1, 2):
        raise ShapeError(f"loom.multinomial: expected a 1-d or 2-d tensor, got {fmt_shape(p.shape)}")
    p = _upper.check(p, "multinomial", "loom.multinomial: probability tensor contains either inf, nan or element < 0, "
              "got {value} (expected 0 <= probability < inf)", low=0.0, high=math.inf, error="value",
              positive_rows=True, rows_message="loom.multinomial: invalid multinomial distribution (sum of "
              "probabilities <= 0): a row sums to {value}").to(dt.float64)
    rows = p.reshape(-1, p.shape[-1]) if p.ndim == 2 else p.reshape(1, -1)
    if not replacement and num_samples > rows.shape[1]:
        raise LoomError(f"loom.multinomial: cannot draw {num_samples} samples without replacement "
                        f"from {rows.shape[1]} categories")
    if replacement:
        cdf = rows.cumsum(-1)
        cdf = cdf / cdf[:, -1:]
        u = _rand_node((rows.shape[0], num_samples), dt.float64, generator)
        idx = (cdf.unsqueeze(1) <= u.unsqueeze(2)).to(dt.int64).sum(-1)
        idx = idx.clamp(max=rows.shape[1] - 1)
    else:
        # Gumbel top-k: exact sampling without replacement.
        u = _rand_node(tuple(rows.shape), dt.float64, generator)
        keys = rows.log() - (-(u.clamp(min=1e-300)).log()).log()
        idx = keys.topk(num_samples, dim=-1).indices
    return idx if p.ndim == 2 else idx.reshape(num_samples)


def randperm(n: int, dtype=None, generator=None, device=None) -> Tensor:
    _check_device(device, "randperm")
    u = _rand_node((n,), dt.float64, generator)
    idx = apply("argsort", (u,), {"axis": 0, "descending": False})
    return idx.to(dt.as_dtype(dtype) if dtype is not None else dt.int64)


def synchronize(*tensors: Tensor) -> None:
    """Realise the given tensors (all work is synchronous on the reference path)."""
    nodes = [t._node for t in tensors if isinstance(t, Tensor)]
    if nodes:
        _realize.realize_barrier(nodes)


def realize(*tensors: Tensor) -> None:
    """Compute several pending tensors in one pass, sharing their common subgraph."""
    synchronize(*tensors)


def is_tensor(obj) -> bool:
    return isinstance(obj, Tensor)


def numel(t: Tensor) -> int:
    return t.numel()


def iter_tensors(items: Iterable) -> list[Tensor]:
    return [t for t in items if isinstance(t, Tensor)]


_graph_module.bind_frontend(Tensor, tensor)
