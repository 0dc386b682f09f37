"""One notion of a valid node: every primitive's attribute rule, enforced at every door.

For each primitive the table below names inputs, attrs it accepts and attrs it
must refuse. Each refusal is checked four ways: `Graph.add_node`, `from_json`
of a file holding the bad node, the Tensor layer's `apply` (what every public
op goes through), and the compiler given a graph whose node was edited behind
the Graph API's back (it must refuse before any pass or C kernel sees it).
"""
from __future__ import annotations

import json

import numpy as np
import pytest

import loom
from loom.codegen import cache as kernel_cache
from loom.errors import DTypeError, GraphError, LoomError, LoomIndexError, LoomTypeError, ShapeError
from loom.ir import PRIMITIVES, Graph, from_json, to_json
from loom.ir import serialize
from loom.tensor import apply

F32, I64, C64 = loom.float32, loom.int64, loom.complex64

UNARY = ["neg", "recip", "sqrt", "exp", "log", "log1p", "expm1", "sin", "cos", "tan", "tanh", "erf", "abs",
         "sign", "floor", "ceil", "round", "trunc"]
BINARY = ["add", "sub", "mul", "div", "pow", "maximum", "minimum", "floordiv", "mod", "atan2",
          "eq", "ne", "lt", "le", "gt", "ge"]
EXTRA = {"bogus": 1}

_GEO = {"stride": (1, 2), "padding": (1, 1, 0, 2), "dilation": (1, 1), "groups": 1}
_POOL = {"kernel_size": (2, 3), "stride": (2, 2), "padding": (1, 1, 0, 1), "dilation": (1, 1)}
_GEO1 = dict(_GEO, stride=(1, 1), padding=(0, 0, 0, 0))

# op -> (input specs [(shape, dtype)], good attrs, [(bad attrs, regex the error must match)]).
# Each regex names the op and the attr; the refused value and the expectation follow in the message.
TABLE: dict[str, tuple[list, dict, list]] = {
    "const": ([], {"value": 1.5, "shape": (2, 3), "dtype": F32}, [
        ({"value": 1.5, "shape": (2.0, 3), "dtype": F32}, r"const: attr 'shape' is \(2\.0, 3\); expected a tuple "
                                                           "of non-negative ints"),
        ({"value": 1.5, "shape": (True, 3), "dtype": F32}, r"const: attr 'shape' is \(True, 3\)"),
        ({"value": 1.5, "shape": (-1, 3), "dtype": F32}, r"const: attr 'shape' is \(-1, 3\).*non-negative"),
        ({"value": 1.5, "shape": 3, "dtype": F32}, r"const: attr 'shape' is 3"),
        ({"value": "1", "shape": (2, 3), "dtype": F32}, r"const: attr 'value' is '1'; expected a number"),
        ({"value": float("nan"), "shape": (2, 3), "dtype": I64}, r"const: attr 'value' is nan; expected a finite"),
        ({"value": 1.5, "shape": (2, 3)}, r"const: needs attr 'dtype'"),
        ({"value": 1.5, "shape": (2, 3), "dtype": F32, "bogus": 1}, r"const: unknown attr\(s\) \['bogus'\]"),
    ]),
    "arange": ([], {"start": 0, "step": 2, "shape": (4,), "dtype": I64}, [
        ({"start": 0, "step": 2, "shape": (2, 2), "dtype": I64}, r"arange: attr 'shape' is \(2, 2\); expected 1 int"),
        ({"start": 0, "step": 2, "shape": (4.0,), "dtype": I64}, r"arange: attr 'shape' is \(4\.0,\)"),
        ({"start": float("inf"), "step": 2, "shape": (4,), "dtype": F32}, r"arange: attr 'start' is inf; "
                                                                           "expected a finite number"),
        ({"start": 0, "step": "2", "shape": (4,), "dtype": I64}, r"arange: attr 'step' is '2'"),
    ]),
    "rand": ([], {"seed": 7, "shape": (2, 3), "dtype": F32}, [
        ({"seed": -1, "shape": (2, 3), "dtype": F32}, r"rand: attr 'seed' is -1; expected an int in \[0, "),
        ({"seed": 1 << 64, "shape": (2, 3), "dtype": F32}, r"rand: attr 'seed' is 18446744073709551616"),
        ({"seed": 1.5, "shape": (2, 3), "dtype": F32}, r"rand: attr 'seed' is 1\.5; expected an int"),
        ({"seed": 7, "shape": (2, 3), "dtype": loom.int32}, r"rand: attr 'dtype' is loom\.int32; expected a "
                                                              "floating point dtype"),
        ({"seed": 7, "shape": (2.5,), "dtype": F32}, r"rand: attr 'shape' is \(2\.5,\)"),
    ]),
    "not": ([((2, 3), loom.bool)], {}, [(EXTRA, r"not: unknown attr\(s\) \['bogus'\]; not takes attrs none")]),
    "cast": ([((2, 3), F32)], {"dtype": I64}, [
        ({}, r"cast: needs attr 'dtype'"),
        ({"dtype": I64, "axes": (0,)}, r"cast: unknown attr\(s\) \['axes'\]"),
    ]),
    "where": ([((2, 3), loom.bool), ((2, 3), F32), ((2, 3), F32)], {}, [(EXTRA, r"where: unknown attr")]),
    "and": ([((2, 3), loom.bool)] * 2, {}, [(EXTRA, r"and: unknown attr")]),
    "or": ([((2, 3), I64)] * 2, {}, [(EXTRA, r"or: unknown attr")]),
    "xor": ([((2, 3), I64)] * 2, {}, [(EXTRA, r"xor: unknown attr")]),
    "reshape": ([((2, 3), F32)], {"shape": (3, 2)}, [
        ({"shape": (3.0, 2.0)}, r"reshape: attr 'shape' is \(3\.0, 2\.0\); expected a tuple of non-negative ints"),
        ({"shape": (True, 6)}, r"reshape: attr 'shape' is \(True, 6\)"),
        ({"shape": (-1, 6)}, r"reshape: attr 'shape' is \(-1, 6\); expected a tuple of non-negative ints"),
        ({"shape": "32"}, r"reshape: attr 'shape' is '32'"),
        ({"shape": (3, 2), "perm": (0, 1)}, r"reshape: unknown attr\(s\) \['perm'\]"),
    ]),
    "permute": ([((2, 3, 4), F32)], {"perm": (2, 0, 1)}, [
        ({"perm": (0, 0, 1)}, r"permute: attr 'perm' is \(0, 0, 1\); expected a permutation of 0\.\.2"),
        ({"perm": (0, 1)}, r"permute: attr 'perm' is \(0, 1\); expected 3 ints"),
        ({"perm": (0, 1, 3)}, r"permute: attr 'perm' is \(0, 1, 3\); expected a permutation"),
        ({"perm": (0.0, 1.0, 2.0)}, r"permute: attr 'perm' is \(0\.0, 1\.0, 2\.0\); expected a tuple of ints"),
    ]),
    "expand": ([((1, 3), F32)], {"shape": (4, 3)}, [
        ({"shape": (4.0, 3)}, r"expand: attr 'shape' is \(4\.0, 3\); expected a tuple of non-negative ints"),
        ({"shape": (4, 1, 3)}, r"expand: attr 'shape' is \(4, 1, 3\); expected 2 ints"),
        ({"shape": (-1, 3)}, r"expand: attr 'shape' is \(-1, 3\)"),
    ]),
    "pad": ([((2, 3), F32)], {"pads": ((1, 0), (0, 2)), "value": 0.5}, [
        ({"pads": ((1, 0),)}, r"pad: attr 'pads' is \(\(1, 0\),\); expected 2 \(low, high\) pairs"),
        ({"pads": ((1, 0), (0, -2))}, r"pad: attr 'pads' is \(\(1, 0\), \(0, -2\)\); expected 2 \(low, high\) "
                                      "pairs of non-negative ints"),
        ({"pads": ((1.0, 0), (0, 2))}, r"pad: attr 'pads' is \(\(1\.0, 0\), \(0, 2\)\)"),
        ({"pads": ((1, 0, 1), (0, 2))}, r"pad: attr 'pads' is \(\(1, 0, 1\), \(0, 2\)\)"),
        ({"pads": ((1, 0), (0, 2)), "value": "x"}, r"pad: attr 'value' is 'x'; expected a number"),
    ]),
    "slice": ([((4, 5), F32)], {"starts": (1, 0), "stops": (4, 5), "steps": (2, 1)}, [
        ({"starts": (1, 0), "stops": (4, 5), "steps": (0, 1)}, r"slice: attr 'steps' is \(0, 1\); expected "
                                                                 "positive steps"),
        ({"starts": (1.5, 0), "stops": (4, 5), "steps": (1, 1)}, r"slice: attr 'starts' is \(1\.5, 0\)"),
        ({"starts": (1, 0), "stops": (4, 6), "steps": (1, 1)}, r"slice: attr 'stops' is \(4, 6\); expected "
                                                                 r"0 <= stop <= 5 in dim 1"),
        ({"starts": (-1, 0), "stops": (4, 5), "steps": (1, 1)}, r"slice: attr 'starts' is \(-1, 0\)"),
        ({"starts": (1,), "stops": (4, 5), "steps": (1, 1)}, r"slice: attr 'starts' is \(1,\); expected 2 ints"),
        ({"starts": (1, 0), "stops": (4, 5)}, r"slice: needs attr 'steps'"),
    ]),
    "flip": ([((2, 3), F32)], {"axes": (1,)}, [
        ({"axes": (1, 1)}, r"flip: attr 'axes' is \(1, 1\); expected distinct axes"),
        ({"axes": (2,)}, r"flip: attr 'axes' is \(2,\): axis 2 out of range for shape \[2, 3\]"),
        ({"axes": (1.0,)}, r"flip: attr 'axes' is \(1\.0,\); expected a tuple of ints"),
    ]),
    "gather": ([((3, 4), F32), ((2, 4), I64)], {"axis": 0}, [
        ({"axis": 2}, r"gather: attr 'axis' is 2; expected an int in \[0, 2\)"),
        ({"axis": -1}, r"gather: attr 'axis' is -1; expected an int in \[0, 2\)"),
        ({"axis": 0.0}, r"gather: attr 'axis' is 0\.0; expected an int"),
        ({"axis": True}, r"gather: attr 'axis' is True; expected an int"),
        ({}, r"gather: needs attr 'axis'"),
    ]),
    "scatter_add": ([((3, 4), F32), ((2, 4), I64), ((2, 4), F32)], {"axis": 0}, [
        ({"axis": 5}, r"scatter_add: attr 'axis' is 5; expected an int in \[0, 2\)"),
        ({"axis": "0"}, r"scatter_add: attr 'axis' is '0'; expected an int"),
    ]),
    "matmul": ([((2, 3), F32), ((3, 4), F32)], {}, [
        ({"transpose_a": True}, r"matmul: unknown attr\(s\) \['transpose_a'\]; matmul takes attrs none"),
    ]),
    "conv2d": ([((2, 3, 7, 8), F32), ((4, 3, 3, 3), F32)], _GEO, [
        (dict(_GEO, stride=(0, 1)), r"conv2d: attr 'stride' is \(0, 1\); expected 2 ints >= 1"),
        (dict(_GEO, padding=(1, 1)), r"conv2d: attr 'padding' is \(1, 1\); expected a tuple of 4 ints"),
        (dict(_GEO, padding=(1, 1, -1, 0)), r"conv2d: attr 'padding' is \(1, 1, -1, 0\); expected 4 ints >= 0"),
        (dict(_GEO, dilation=(1.0, 1)), r"conv2d: attr 'dilation' is \(1\.0, 1\); expected a tuple of 2 ints"),
        (dict(_GEO, groups=0), r"conv2d: attr 'groups' is 0; expected an int in \[1, "),
        (dict(_GEO, groups=True), r"conv2d: attr 'groups' is True; expected an int"),
        (dict(_GEO, groups=2), r"conv2d: input \[2, 3, 7, 8\] has 3 channels.*groups=2 expects 6"),
        ({k: v for k, v in _GEO.items() if k != "stride"}, r"conv2d: needs attr 'stride'"),
        (dict(_GEO, bias=True), r"conv2d: unknown attr\(s\) \['bias'\]"),
        (dict(_GEO, padding=(0, 0, 0, 0), dilation=(4, 1)), r"conv2d: padded input size \(7, 8\) is smaller than"),
    ]),
    "conv2d_input_grad": ([((2, 4, 5, 6), F32), ((4, 3, 3, 3), F32)], dict(_GEO1, input_size=(7, 8)), [
        (dict(_GEO, input_size=(7,)), r"conv2d_input_grad: attr 'input_size' is \(7,\); expected a tuple of 2"),
        (dict(_GEO1, input_size=(9, 8)),
         r"conv2d_input_grad: output gradient \[2, 4, 5, 6\] does not match the convolution output \[2, 4, 7, 6\]"),
        (_GEO1, r"conv2d_input_grad: needs attr 'input_size'"),
    ]),
    "conv2d_weight_grad": ([((2, 3, 7, 8), F32), ((2, 4, 5, 6), F32)], dict(_GEO1, kernel_size=(3, 3)), [
        (dict(_GEO, kernel_size=(0, 3)), r"conv2d_weight_grad: attr 'kernel_size' is \(0, 3\); expected 2 ints >= 1"),
        (dict(_GEO1, kernel_size=(2, 2)), r"conv2d_weight_grad: output gradient \[2, 4, 5, 6\]"),
        (dict(_GEO1, kernel_size=(3, 3), groups=2),
         r"conv2d_weight_grad: 3 input channels do not split into groups=2"),
    ]),
    "max_pool2d_index": ([((2, 3, 7, 8), F32)], _POOL, [
        (dict(_POOL, kernel_size=(0, 2)), r"max_pool2d_index: attr 'kernel_size' is \(0, 2\); expected 2 ints >= 1"),
        (dict(_POOL, padding=(1, 1)), r"max_pool2d_index: attr 'padding' is \(1, 1\); expected a tuple of 4 ints"),
        (dict(_POOL, stride=2), r"max_pool2d_index: attr 'stride' is 2; expected a tuple of 2 ints"),
        (dict(_POOL, padding=(2, 2, 0, 0)), r"max_pool2d_index: windows of .* do not each cover an element"),
        ({k: v for k, v in _POOL.items() if k != "dilation"}, r"max_pool2d_index: needs attr 'dilation'"),
    ]),
    "check": ([((3,), I64)], {"user_op": "gather", "low": 0, "high": 3, "message": "bad {value}"}, [
        ({"low": 0, "high": 3}, r"check: needs attr 'message', which is missing"),
        ({"low": "0", "high": 3, "message": "m"}, r"check: attr 'low' is '0'; expected a number"),
        ({"low": 0, "high": 3, "message": "m", "error": "fatal"}, r"check: attr 'error' is 'fatal'"),
        ({"low": 0, "high": 3, "message": "m", "positive_rows": True}, r"check: attr 'rows_message' is None"),
        ({"low": 0, "high": 3, "message": 7}, r"check: attr 'message' is 7; expected a str"),
    ]),
    "qr": ([((4, 3), F32)], {"complete": False}, [
        ({}, r"qr: needs attr 'complete', which is missing"),
        ({"complete": 1}, r"qr: attr 'complete' is 1; expected a bool"),
    ]),
    "svd": ([((4, 3), F32)], {"full_matrices": True}, [
        ({"full_matrices": "no"}, r"svd: attr 'full_matrices' is 'no'; expected a bool"),
        ({"full_matrices": True, "driver": "gesvd"}, r"svd: unknown attr\(s\) \['driver'\]"),
    ]),
    "svdvals": ([((4, 3), F32)], {}, [(EXTRA, r"svdvals: unknown attr\(s\) \['bogus'\]")]),
    "eigh": ([((3, 3), F32)], {"upper": False}, [
        ({"upper": "L"}, r"eigh: attr 'upper' is 'L'; expected a bool"),
    ]),
    "eigvalsh": ([((3, 3), F32)], {"upper": True}, [({}, r"eigvalsh: needs attr 'upper'")]),
    "triangular_solve": ([((3, 3), F32), ((3, 2), F32)], {"upper": True, "unitriangular": False}, [
        ({"upper": True}, r"triangular_solve: needs attr 'unitriangular'"),
        ({"upper": None, "unitriangular": False}, r"triangular_solve: attr 'upper' is None; expected a bool"),
    ]),
    "matrix_exp": ([((3, 3), F32)], {}, [(EXTRA, r"matrix_exp: unknown attr\(s\) \['bogus'\]")]),
    "geqrf": ([((4, 3), F32)], {}, [(EXTRA, r"geqrf: unknown attr\(s\) \['bogus'\]")]),
    "argsort": ([((3, 4), F32)], {"axis": 1, "descending": True}, [
        ({"axis": 2}, r"argsort: attr 'axis' is 2; expected an int in \[0, 2\)"),
        ({"axis": 1, "descending": "yes"}, r"argsort: attr 'descending' is 'yes'; expected a bool"),
        ({"axis": 1, "stable": True}, r"argsort: unknown attr\(s\) \['stable'\]"),
    ]),
    "fft_c2c": ([((2, 4), C64)], {"axes": (1,), "forward": True}, [
        ({"axes": (2,), "forward": True}, r"fft_c2c: attr 'axes' is \(2,\): axis 2 out of range"),
        ({"axes": (), "forward": True}, r"fft_c2c: attr 'axes' is \(\); expected at least one axis"),
        ({"axes": (1,), "forward": 1}, r"fft_c2c: attr 'forward' is 1; expected a bool"),
        ({"axes": (1,)}, r"fft_c2c: needs attr 'forward'"),
    ]),
    "fft_r2c": ([((2, 4), F32)], {"axes": (0, 1)}, [
        ({"axes": (1, 1)}, r"fft_r2c: attr 'axes' is \(1, 1\); expected distinct axes"),
        ({"axes": (1,), "n": 4}, r"fft_r2c: unknown attr\(s\) \['n'\]"),
    ]),
    "fft_c2r": ([((2, 3), C64)], {"axes": (1,), "n": 4}, [
        ({"axes": (1,), "n": 0}, r"fft_c2r: attr 'n' is 0; expected an int in \[1, "),
        ({"axes": (1,), "n": 4.0}, r"fft_c2r: attr 'n' is 4\.0; expected an int"),
        ({"axes": (1,), "n": 6}, r"fft_c2r: a real signal of length n=6 has 4 frequencies along axis 1"),
    ]),
}
for _op in ("real", "imag", "conj"):
    TABLE[_op] = ([((2, 3), C64)], {}, [(EXTRA, rf"{_op}: unknown attr\(s\) \['bogus'\]")])
TABLE["complex"] = ([((2, 3), F32)] * 2, {}, [(EXTRA, r"complex: unknown attr\(s\) \['bogus'\]")])
for _op in UNARY:
    TABLE[_op] = ([((2, 3), F32)], {}, [(EXTRA, rf"{_op}: unknown attr\(s\) \['bogus'\]")])
for _op in BINARY:
    TABLE[_op] = ([((2, 3), F32)] * 2, {}, [({"axes": (0,)}, rf"{_op}: unknown attr\(s\) \['axes'\]")])
for _op in ("sum", "prod", "max", "min"):
    TABLE[_op] = ([((2, 3), F32)], {"axes": (1,), "keepdim": True}, [
        ({"axes": (1, 1), "keepdim": False}, rf"{_op}: attr 'axes' is \(1, 1\); expected distinct axes"),
        ({"axes": (2,)}, rf"{_op}: attr 'axes' is \(2,\): axis 2 out of range for shape \[2, 3\]"),
        ({"axes": (1.0,)}, rf"{_op}: attr 'axes' is \(1\.0,\); expected a tuple of ints"),
        ({"axes": 1}, rf"{_op}: attr 'axes' is 1; expected a tuple of ints"),
        ({"axes": (1,), "keepdim": 1}, rf"{_op}: attr 'keepdim' is 1; expected a bool"),
        ({"axis": (1,)}, rf"{_op}: needs attr 'axes'"),
    ])

# Primitives whose rules are tested elsewhere in this file (graph inputs, constants, subgraph ops).
ONE = {"ranks": (0,)}
TABLE["all_reduce"] = ([((2, 3), F32)], {"reduction": "avg", **ONE}, [
    ({"reduction": "max", **ONE}, r"all_reduce: attr 'reduction' is 'max'; expected 'sum' or 'avg'"),
    ({"reduction": "sum", "ranks": ()}, r"all_reduce: attr 'ranks' is \(\); expected a non-empty tuple"),
    ({"reduction": "sum"}, r"all_reduce: needs attr 'ranks'")])
TABLE["all_gather"] = ([((2, 3), F32)], ONE, [({"ranks": (1, 1)}, r"all_gather: attr 'ranks' is \(1, 1\); expected "
                                                                  "distinct")])
TABLE["reduce_scatter"] = ([((1, 3), F32)], {"reduction": "sum", **ONE}, [
    ({"reduction": "sum", "ranks": (0, 1)}, r"reduce_scatter: the input must have one row per rank")])
TABLE["broadcast"] = ([((2, 3), F32)], {"src": 0, **ONE}, [
    ({"src": 2, **ONE}, r"broadcast: attr 'src' is 2; expected one of the group's global ranks \[0\]")])
TABLE["reduce"] = ([((2, 3), F32)], {"dst": 0, **ONE}, [({"dst": -1, **ONE}, r"reduce: attr 'dst' is -1")])
TABLE["all_to_all"] = ([((1, 3), F32)], ONE, [({"ranks": (0, 1)}, r"all_to_all: the input must have one row per")])
TABLE["send"] = ([((2, 3), F32)], {"dst": 0, "tag": 0, **ONE}, [
    ({"dst": 0, "tag": -2, **ONE}, r"send: attr 'tag' is -2"),
    ({"dst": 1, "tag": 0, **ONE}, r"send: attr 'dst' is 1; expected one of the group's global ranks")])
TABLE["recv"] = ([((), F32)], {"src": 0, "tag": 0, "shape": (2,), "dtype": F32, **ONE}, [
    ({"src": 0, "tag": 0, "shape": (2,), "dtype": "f", **ONE}, r"(recv: attr 'dtype' is 'f'|unknown dtype name 'f')"),
    ({"src": 0, "tag": 0, "shape": (-2,), "dtype": F32, **ONE}, r"recv: attr 'shape' is \(-2,\)")])
SPECIAL = {"input", "buffer", "fused", "while_loop", "storage"}  # storage: tests/runtime/test_storage.py
# The fused library primitives: attention (loom.ir.attention) and the row kernels (loom.ir.rows).
_QKV = [((2, 3, 4), F32)] * 3
for _op, _ins in (("attention", _QKV), ("attention_grad", _QKV + [((2, 3, 5), F32)] * 2)):
    TABLE[_op] = (_ins, {"causal": True, "scale": 0.5}, [
        ({"causal": True}, rf"{_op}: needs attr 'scale'"),
        ({"causal": 1, "scale": 0.5}, rf"{_op}: attr 'causal' is 1; expected a bool"),
        ({"causal": False, "scale": float("inf")}, rf"{_op}: attr 'scale' is inf; expected a finite"),
        ({"causal": False, "scale": True}, rf"{_op}: attr 'scale' is True; expected a finite"),
        ({"causal": False, "scale": 0.5, "dropout": 0.1}, rf"{_op}: unknown attr\(s\) \['dropout'\]"),
    ])
for _op in ("layer_norm", "layer_norm_grad"):
    TABLE[_op] = ([((3, 4), F32), ((4,), F32), ((3, 4) if _op.endswith("grad") else (4,), F32)], {"eps": 1e-5}, [
        ({}, rf"{_op}: needs attr 'eps'"),
        ({"eps": -1e-5}, rf"{_op}: attr 'eps' is -1e-05; expected a finite float >= 0"),
        ({"eps": float("nan")}, rf"{_op}: attr 'eps' is nan; expected a finite"),
        ({"eps": "1e-5"}, rf"{_op}: attr 'eps' is '1e-5'; expected a"),
        ({"eps": 1e-5, **EXTRA}, rf"{_op}: unknown attr\(s\) \['bogus'\]"),
    ])
TABLE["cross_entropy_rows"] = ([((3, 4), F32), ((3,), I64)], {}, [
    (EXTRA, r"cross_entropy_rows: unknown attr\(s\) \['bogus'\]")])
TABLE["cross_entropy_rows_grad"] = ([((3, 4), F32), ((3,), I64), ((3,), F32)], {}, [
    ({"reduction": "mean"}, r"cross_entropy_rows_grad: unknown attr\(s\) \['reduction'\]")])
CASES = [(op, k) for op in sorted(TABLE) for k in range(len(TABLE[op][2]))]


def _build(op):
    ins, good, _ = TABLE[op]
    g = Graph()
    nodes = [g.add_input(shape, d) for shape, d in ins]
    return g, nodes


def _arrays(op):
    rng = np.random.default_rng(0)
    out = []
    for shape, d in TABLE[op][0]:
        if d is loom.bool:
            out.append(rng.integers(0, 2, shape).astype(bool))
        elif d is I64:
            out.append(rng.integers(0, 2, shape).astype(np.int64))
        else:
            out.append(rng.uniform(0.5, 2.0, shape).astype(d.np))
    return out


def test_every_primitive_has_an_attribute_rule_and_a_table_entry():
    """A primitive added without a rule, or without refusals here, fails this test."""
    import loom.compiler  # noqa: F401  (registers "fused")
    import loom.function  # noqa: F401  (registers "while_loop")

    missing_rule = sorted(op for op, p in PRIMITIVES.items() if p.check_attrs is None)
    assert missing_rule == []
    # Ops a user registers at run time (`loom.custom_op`, kind "custom") are not loom's primitives.
    builtin = {op for op, p in PRIMITIVES.items() if p.kind != "custom"}
    assert sorted(builtin - SPECIAL - set(TABLE)) == []


@pytest.mark.parametrize("op", sorted(TABLE))
def test_good_attrs_pass_every_door(op):
    g, nodes = _build(op)
    good = TABLE[op][1]
    node = g.add_node(op, nodes, good)
    g.outputs = [node]
    h = from_json(to_json(g))
    assert [n.op for n in h] == [n.op for n in g]
    tensors = [loom.tensor(a) for a in _arrays(op)]
    out = apply(op, tensors, dict(good))
    assert tuple(out.shape) == tuple(node.shape) and out.dtype is node.dtype


@pytest.mark.parametrize("op,k", CASES)
def test_add_node_refuses_bad_attrs(op, k):
    bad, match = TABLE[op][2][k]
    g, nodes = _build(op)
    before = to_json(g)
    with pytest.raises(GraphError, match=match):
        g.add_node(op, nodes, dict(bad))
    assert to_json(g) == before


@pytest.mark.parametrize("op,k", CASES)
def test_from_json_refuses_bad_attrs(op, k):
    bad, match = TABLE[op][2][k]
    g, nodes = _build(op)
    g.outputs = [g.add_node(op, nodes, TABLE[op][1])]
    doc = json.loads(to_json(g))
    entry = next(e for e in doc["nodes"] if e["op"] == op)
    entry["attrs"] = {key: serialize._encode(v, key) for key, v in bad.items()}
    with pytest.raises(GraphError, match=rf"loom\.from_json: node \d+ \({op}\): .*" + match):
        from_json(json.dumps(doc, allow_nan=False))


@pytest.mark.parametrize("op,k", CASES)
def test_tensor_apply_refuses_bad_attrs(op, k):
    """The Tensor layer (every public op ends in `apply`) runs the same rule."""
    bad, match = TABLE[op][2][k]
    tensors = [loom.tensor(a) for a in _arrays(op)]
    with pytest.raises(LoomError, match=match):
        apply(op, tensors, dict(bad))


@pytest.mark.parametrize("op,k", CASES)
def test_compiler_refuses_a_node_edited_behind_the_graphs_back(op, k):
    """A graph whose node's attrs were overwritten directly never reaches a pass or a C kernel."""
    bad, match = TABLE[op][2][k]
    g, nodes = _build(op)
    node = g.add_node(op, nodes, TABLE[op][1])
    g.outputs = [g.add_node("cast", [node], {"dtype": loom.float64})]
    node.attrs = dict(bad)
    builds = kernel_cache.stats()["builds"] + kernel_cache.stats()["disk_hits"]
    with pytest.raises(GraphError, match=match):
        loom.compiler.compile(g)
    with pytest.raises(GraphError, match=match):
        g.verify()
    assert kernel_cache.stats()["builds"] + kernel_cache.stats()["disk_hits"] == builds


def test_error_classes_say_what_kind_of_mistake():
    g = Graph()
    x = g.add_input((2, 3), F32)
    with pytest.raises(LoomIndexError):
        g.add_node("sum", [x], {"axes": (2,)})
    with pytest.raises(ShapeError):
        g.add_node("reshape", [x], {"shape": (-1, 6)})
    with pytest.raises(DTypeError):
        g.add_node("rand", [], {"seed": 1, "shape": (2,), "dtype": loom.int32})
    with pytest.raises(LoomTypeError):
        apply("sum", [loom.ones(2, 3)], {"axes": (1.0,)})
    with pytest.raises(DTypeError, match=r"cast: attr 'dtype' is 'float64'; expected a loom dtype"):
        apply("cast", [loom.ones(2, 3)], {"dtype": "float64"})  # The Tensor layer takes loom dtypes only.


def test_duplicated_reduction_axes_are_refused_before_any_kernel():
    """The bug this gate closes: sum over axes (1, 1) computed 4x the sum in C while the reference raised."""
    g = Graph()
    x = g.add_input((3, 4), F32)
    s = g.add_node("sum", [x], {"axes": (1,), "keepdim": False})
    g.outputs = [s]
    run = loom.compiler.compile(g)
    np.testing.assert_array_equal(run(np.ones((3, 4), np.float32))[0], [4.0, 4.0, 4.0])
    s.attrs = {"axes": (1, 1), "keepdim": False}
    with pytest.raises(GraphError, match=r"distinct axes"):
        loom.compiler.compile(g)
    with pytest.raises(GraphError, match=r"distinct axes"):
        g.add_node("sum", [x], {"axes": (1, 1), "keepdim": False})


def test_float_shapes_are_refused_and_int_like_numpy_values_accepted():
    g = Graph()
    x = g.add_input((2, 3), F32)
    with pytest.raises(GraphError, match=r"attr 'shape' is \(3\.0, 2\.0\)"):
        g.add_node("reshape", [x], {"shape": (3.0, 2.0)})
    y = g.add_node("reshape", [x], {"shape": (np.int64(3), np.int32(2))})
    assert y.attrs["shape"] == (3, 2) and all(type(s) is int for s in y.attrs["shape"])
    t = apply("reshape", [loom.ones(2, 3)], {"shape": [np.int64(3), 2]})  # Lists and NumPy ints are fine.
    assert tuple(t.shape) == (3, 2)


def test_input_and_buffer_attrs():
    g = Graph()
    with pytest.raises(GraphError, match=r"shape"):
        g.add_input((2.0, 3), F32)
    with pytest.raises(GraphError, match=r"shape"):
        g.add_input((-2, 3), F32)
    with pytest.raises(GraphError):
        g.add_input((2, 3), "not-a-dtype")
    c = g.add_constant(np.zeros((2, 3), np.float32))
    g.outputs = [c]
    c.attrs = {"shape": (2.0, 3), "dtype": F32}
    with pytest.raises(GraphError, match=r"buffer: attr 'shape' is \(2\.0, 3\)"):
        g.verify()
    c.attrs = {"shape": (2, 3), "dtype": F32, "value": 1}
    with pytest.raises(GraphError, match=r"buffer: unknown attr\(s\) \['value'\]"):
        g.verify()
    doc = json.loads(to_json(Graph()))
    doc["nodes"] = [{"id": 0, "op": "input", "inputs": [], "attrs": {"shape": [2.5], "dtype": {"dtype": "float32"}},
                     "shape": [2], "dtype": "float32", "device": "cpu", "name": None}]
    doc["inputs"] = [0]
    with pytest.raises(GraphError):
        from_json(json.dumps(doc))


def test_subgraph_primitives_check_their_attrs():
    import loom.compiler.fuse  # noqa: F401
    import loom.function  # noqa: F401

    g = Graph()
    x = g.add_input((3,), F32)
    with pytest.raises(GraphError, match=r"fused: attr 'body' is 3; expected a loom\.ir\.Graph"):
        g.add_node("fused", [x], {"body": 3})
    with pytest.raises(GraphError, match=r"fused: needs attr 'body'"):
        g.add_node("fused", [x], {})
    body = Graph()
    body.outputs = [body.add_node("neg", [body.add_input((3,), F32)])]
    assert g.add_node("fused", [x], {"body": body}).shape == (3,)
    with pytest.raises(GraphError, match=r"while_loop: attr 'index' is 1; expected an int in \[0, 1\)"):
        g.add_node("while_loop", [x], {"cond": body, "body": body, "index": 1})
    with pytest.raises(GraphError, match=r"while_loop: attr 'cond' is None; expected a loom\.ir\.Graph"):
        g.add_node("while_loop", [x], {"cond": None, "body": body, "index": 0})


def test_public_ops_still_build_their_nodes():
    """The public ops that build each attribute-carrying primitive pass the gate (and compute)."""
    x = loom.arange(12, dtype=loom.float32).reshape(3, 4)
    checks = [
        (x.sum((0, 1)), 66.0), (x.amax(1).sum(), 3 + 7 + 11), (x.permute(1, 0)[3, 2].item(), 11.0),
        (x.flip(0)[0, 0].item(), 8.0), (x[1:, ::2].sum(), 4 + 6 + 8 + 10),
        (loom.nn.functional.pad(x, (1, 1)).sum(), 66.0), (x.argsort(1, descending=True)[0, 0].item(), 3),
        (x.gather(1, loom.tensor([[0], [1], [2]])).sum(), 0 + 5 + 10),
        (loom.full((2, 2), 3.0).sum(), 12.0), (loom.rand(5).shape[0], 5), (x.to(loom.int64).sum().item(), 66),
    ]
    for got, want in checks:
        assert float(got.item() if isinstance(got, loom.Tensor) else got) == float(want)


def test_pad_of_a_0d_value_takes_no_pads_and_runs():
    """A 0-d input has no dims, so pads is empty; the reference path used to raise NumPy's TypeError."""
    g = Graph()
    x = g.add_input((), F32)
    g.outputs = [g.add_node("pad", [x], {"pads": (), "value": 1.0})]
    assert g.run(np.float32(2.5))[0].item() == 2.5
    assert loom.compiler.compile(g)(np.array(2.5, np.float32))[0].item() == 2.5
    with pytest.raises(GraphError, match=r"pad: attr 'pads' is \(\(0, 0\),\); expected 0 \(low, high\) pairs"):
        g.add_node("pad", [x], {"pads": ((0, 0),)})
