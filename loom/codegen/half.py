"""float16 and bfloat16 in generated kernels: load half, compute in float32, store half.

`widen` rewrites a fused body before `loom.codegen.c` renders it: every op on
half-precision values computes in float32 from float32 operands and rounds
its result to half (a cast to half and back), as the reference does op by op,
so a kernel gives the reference's values, not merely close ones. Inputs (and
views of them) are widened where first used, and the output is stored half.
Reductions of half values accumulate in float32 and round once. Only inputs,
views of them and casts carry half dtypes in the rewritten body; the rest of
the code generator sees float32.

In C, float16 is ``_Float16`` where the compiler has it (conversions by the
F16C instructions under ``-march=native``) and bit conversions otherwise;
bfloat16 is its 16 bits, widened by a shift and narrowed with
round-to-nearest-even (NaN stays a quiet NaN), as `loom.dtypes.f32_to_bf16`.
"""
from __future__ import annotations

import numpy as np

from loom import dtypes as dt
from loom.ir import ops
from loom.ir.graph import Graph
from loom.ir.node import Node
from loom.runtime import reference

HALF = (dt.float16, dt.bfloat16)
CTYPES = {dt.float16: "loom_f16", dt.bfloat16: "uint16_t"}
_VIEWS = frozenset({"reshape", "permute", "expand", "slice", "flip"})

HELPERS = r"""
#ifdef __FLT16_MAX__
typedef _Float16 loom_f16;
static inline float loom_f16_f32(loom_f16 h) { return (float)h; }
static inline loom_f16 loom_f32_f16(float f) { return (loom_f16)f; }
#else
typedef uint16_t loom_f16;
static inline float loom_f16_f32(loom_f16 h) {
  uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
  if (e == 0x1f) u = s | 0x7f800000u | (m << 13);
  else if (e) u = s | ((e + 112u) << 23) | (m << 13);
  else if (!m) u = s;
  else { float f = (float)m * 5.9604644775390625e-8f; memcpy(&u, &f, 4); u |= s; }
  float f; memcpy(&f, &u, 4); return f;
}
static inline loom_f16 loom_f32_f16(float f) {
  uint32_t u; memcpy(&u, &f, 4);
  uint32_t s = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (loom_f16)(s | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return (loom_f16)(s | 0x7c00u);            /* Rounds to infinity. */
  if (a < 0x38800000u) {                                           /* Subnormal or zero. */
    float g; memcpy(&g, &a, 4);
    return (loom_f16)(s | (uint32_t)nearbyintf(g * 16777216.0f));
  }
  uint32_t r = a + 0xc8000fffu + ((a >> 13) & 1u);                  /* Rebias, round to nearest even. */
  return (loom_f16)(s | (r >> 13));
}
#endif
static inline float loom_bf16_f32(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }
static inline uint16_t loom_f32_bf16(float f) {
  uint32_t u; memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
"""


def cast_expr(src: dt.DType, dst: dt.DType, x: str) -> str | None:
    """The C conversion between a half dtype and float32 (the only ones `widen` leaves), or None."""
    if src is dt.float32 and dst in HALF:
        return f"loom_f32_{'f16' if dst is dt.float16 else 'bf16'}({x})"
    if src in HALF and dst is dt.float32:
        return f"loom_{'f16' if src is dt.float16 else 'bf16'}_f32({x})"
    return None


def widen(body: Graph) -> Graph:
    """`body` computing in float32 where it computed in half precision (the same body if it has none)."""
    order = body.topological_order()
    if not any(n.dtype in HALF for n in order):
        return body
    g = Graph()
    new: dict[Node, Node] = {}
    for p in body.inputs:
        new[p] = g.add_input(tuple(p.shape), p.dtype)
    wide: dict[Node, Node] = {}

    def f32(x: Node) -> Node:
        if x.dtype not in HALF:
            return x
        if x not in wide:
            wide[x] = g.add_node("cast", [x], {"dtype": dt.float32})
        return wide[x]

    for n in order:
        if n in new:
            continue
        ins = [new[i] for i in n.inputs]
        if n.op in _VIEWS and ins[0].dtype in HALF:
            new[n] = g.add_node(n.op, ins, dict(n.attrs))  # Views of a half input stay half: leaves load half.
        elif n.op == "const" and n.dtype in HALF:
            value = reference.to_compute(np.asarray(ops.PRIMITIVES["const"].impl(dict(n.attrs, shape=()))),
                                         n.dtype)
            new[n] = g.add_node("const", [], dict(n.attrs, value=float(value), dtype=dt.float32))
        elif n.op == "cast" and n.dtype not in HALF:
            x = f32(ins[0])
            new[n] = x if x.dtype is n.dtype else g.add_node("cast", [x], dict(n.attrs))
        elif n.op == "cast":  # To half: round, then go on in float32.
            x = f32(ins[0])
            if x.dtype is not dt.float32 and x.dtype.np.itemsize <= 2 and x.dtype.np.kind in "biu":
                x = g.add_node("cast", [x], {"dtype": dt.float32})  # Exact: one rounding, as NumPy's.
            new[n] = f32(g.add_node("cast", [x], dict(n.attrs)))  # (Others: `cast_expr` refuses them.)
        else:
            x = g.add_node(n.op, [f32(x) for x in ins], dict(n.attrs))
            if n.dtype in HALF:  # Computed in float32, rounded to half as the reference rounds each op.
                x = f32(g.add_node("cast", [x], {"dtype": n.dtype}))
            new[n] = x
    out = new[body.outputs[0]]
    want = body.outputs[0].dtype
    if out.dtype is not want:
        if out in wide.values() and out.inputs[0].dtype is want:
            out = out.inputs[0]  # The body ends in a cast to half: its rounding is the output's.
        else:
            out = g.add_node("cast", [out], {"dtype": want})
    g.outputs = [out]
    return g
