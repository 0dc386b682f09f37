"""C for the driver's data-dependent steps: gather, scatter_add, pad and ``check``.

These steps read index or value data that is only known when the step runs,
so they are not fused kernels; the driver (`loom.codegen.driver`) runs them
from its plan table with the records `loom.runtime.native` writes:

- gather ``[5, ndim, itemsize, index width, axis size, x axis stride, x base, x off, index base, index off,
  out base, out off, (size, x stride, index stride, out stride) per dim]`` (the x stride of the gather
  axis is 0: the index gives that coordinate);
- scatter_add ``[6, ndim, dtype, index width, axis size, out axis stride, base base, base off, index base,
  index off, src base, src off, out base, out off, copy ndim, (size, index stride, src stride, out stride)
  per dim, (size, base stride, out stride) per copy dim]`` (dtype 0 float32, 1 float64, 2 int32, 3 int64);
- pad ``[7, ndim, itemsize, fill bits, count, src base, src off, dst base, dst off, interior byte offset,
  (size, src stride, dst stride) per dim]``;
- check ``[8, code, compare, flags, low, high, ignore, count, row length, src base, src off, dst base,
  dst off]`` (code: the input's element type; compare 0 in int64, 1 in double, 2 in float; flags 1
  closed, 2 ignore, 4 positive rows; bounds as int64, or as double bits);
- sparse-dense product ``[10, dtype, E, F, x rows, out rows, (base, off, stride 0, stride 1) of x,
  (base, off, stride 0, stride 1, width) of the column index, (base, off, stride 0, stride 1) of the weights,
  (base, off, stride 0, stride 1, width) of the row index, base base, base off, (base, off, stride 0,
  stride 1) of out, copy ndim, (size, base stride, out stride) per copy dim, final ndim, final base, final
  off, (size, out stride, final stride) per final dim]``: a gather of x's rows, a product with the weights
  and a scatter-add of the products into out's rows (the message passing of a graph layer,
  ``index_add(0, rows, x.index_select(0, cols) * w)``) in one pass over the E x F products, none of them
  stored (dtype 0 float32, 1 float64). With a final ndim above 0, "out" is scratch memory copied to the
  final place at the end (the planned output may share memory with x, dead once the gather has read it).

A step that finds a bad index or value writes nothing it did not own and
returns 1: the driver stops there and Python reruns the step, which raises
loom's own error for it (the same text in every tier). Indices are signed
4- or 8-byte integers; negative ones count from the end, as in NumPy.
Scatter-add adds in C order, as ``np.add.at`` does, so its sums are the
reference's bit for bit.
"""

SOURCE = r"""
#define LOOM_IDX(p, w) ((w) == 8 ? *(const int64_t *)(p) : (int64_t)*(const int32_t *)(p))

#define LOOM_GATHER(T)                                                                                  \
static int loom_gather_##T(int64_t nd, const int64_t *d, int64_t iw, int64_t size, int64_t axs,         \
                           const char *x, const char *ix, char *o) {                                   \
  int64_t n = d[0], xs = d[1], is = d[2], os = d[3];                                                    \
  if (nd == 1 && is == 0) {  /* One index for the whole run (an embedding's row): a row copy. */         \
    int64_t v = LOOM_IDX(ix, iw);                                                                       \
    if (v < -size || v >= size) return 1;                                                               \
    if (v < 0) v += size;                                                                               \
    const char *xr = x + v * axs;                                                                       \
    if (xs == (int64_t)sizeof(T) && os == (int64_t)sizeof(T)) memmove(o, xr, (size_t)n * sizeof(T));    \
    else for (int64_t i = 0; i < n; i++) *(T *)(o + i * os) = *(const T *)(xr + i * xs);                \
    return 0;                                                                                           \
  }                                                                                                     \
  if (nd == 1) {                                                                                        \
    for (int64_t i = 0; i < n; i++) {                                                                   \
      int64_t v = LOOM_IDX(ix + i * is, iw);                                                            \
      if (v < -size || v >= size) return 1;                                                             \
      if (v < 0) v += size;                                                                             \
      *(T *)(o + i * os) = *(const T *)(x + i * xs + v * axs);                                          \
    }                                                                                                   \
    return 0;                                                                                           \
  }                                                                                                     \
  for (int64_t i = 0; i < n; i++)                                                                       \
    if (loom_gather_##T(nd - 1, d + 4, iw, size, axs, x + i * xs, ix + i * is, o + i * os)) return 1;   \
  return 0;                                                                                             \
}
LOOM_GATHER(uint8_t)
LOOM_GATHER(uint16_t)
LOOM_GATHER(uint32_t)
LOOM_GATHER(uint64_t)

static int loom_gather(const int64_t *r, char *const *base) {
  int64_t nd = r[1], isz = r[2], iw = r[3], size = r[4], axs = r[5];
  const char *x = base[r[6]] + r[7], *ix = base[r[8]] + r[9];
  char *o = base[r[10]] + r[11];
  const int64_t *d = r + 12;
  switch (isz) {
    case 1: return loom_gather_uint8_t(nd, d, iw, size, axs, x, ix, o);
    case 2: return loom_gather_uint16_t(nd, d, iw, size, axs, x, ix, o);
    case 4: return loom_gather_uint32_t(nd, d, iw, size, axs, x, ix, o);
    default: return loom_gather_uint64_t(nd, d, iw, size, axs, x, ix, o);
  }
}

/* Whether every index of a (size, index stride, ...) * nd block lies in [-size, size). */
static int loom_index_ok(int64_t nd, const int64_t *d, int64_t iw, int64_t size, const char *ix) {
  int64_t n = d[0], is = d[1];
  if (nd == 1) {
    for (int64_t i = 0; i < n; i++) {
      int64_t v = LOOM_IDX(ix + i * is, iw);
      if (v < -size || v >= size) return 0;
    }
    return 1;
  }
  for (int64_t i = 0; i < n; i++)
    if (!loom_index_ok(nd - 1, d + 4, iw, size, ix + i * is)) return 0;
  return 1;
}

#define LOOM_SCATTER(T)                                                                                 \
static void loom_scatter_##T(int64_t nd, const int64_t *d, int64_t iw, int64_t size, int64_t oas,       \
                             const char *ix, const char *s, char *o) {                                 \
  int64_t n = d[0], is = d[1], ss = d[2], os = d[3];                                                    \
  if (nd == 1 && is == 0 && ss == (int64_t)sizeof(T) && os == (int64_t)sizeof(T)) {                     \
    /* One index for a contiguous run (an embedding's gradient row): a vector add, each element's sum  \
       in the same order as element by element. */                                                     \
    int64_t v = LOOM_IDX(ix, iw);                                                                       \
    if (v < 0) v += size;                                                                               \
    T *restrict orow = (T *)(o + v * oas);                                                              \
    const T *restrict srow = (const T *)s;                                                              \
    if ((const char *)(orow + n) <= s || (const char *)(srow + n) <= (const char *)orow) {              \
      for (int64_t i = 0; i < n; i++) orow[i] += srow[i];                                               \
      return;                                                                                           \
    }                                                                                                   \
  }                                                                                                     \
  if (nd == 1) {                                                                                        \
    for (int64_t i = 0; i < n; i++) {                                                                   \
      int64_t v = LOOM_IDX(ix + i * is, iw);                                                            \
      if (v < 0) v += size;                                                                             \
      *(T *)(o + i * os + v * oas) += *(const T *)(s + i * ss);                                         \
    }                                                                                                   \
    return;                                                                                             \
  }                                                                                                     \
  for (int64_t i = 0; i < n; i++)                                                                       \
    loom_scatter_##T(nd - 1, d + 4, iw, size, oas, ix + i * is, s + i * ss, o + i * os);                \
}
LOOM_SCATTER(float)
LOOM_SCATTER(double)
LOOM_SCATTER(int32_t)
LOOM_SCATTER(int64_t)

static int loom_scatter_add(const int64_t *r, char *const *base) {
  int64_t nd = r[1], code = r[2], iw = r[3], size = r[4], oas = r[5], cnd = r[14];
  const char *b = base[r[6]] + r[7], *ix = base[r[8]] + r[9], *s = base[r[10]] + r[11];
  char *o = base[r[12]] + r[13];
  const int64_t *d = r + 15, *cd = r + 15 + 4 * nd;
  if (!loom_index_ok(nd, d, iw, size, ix)) return 1;  /* Before anything is written: out may be base. */
  if (b != o) loom_copy(cnd, code == 1 || code == 3 ? 8 : 4, cd, (char *)b, o);
  switch (code) {
    case 0: loom_scatter_float(nd, d, iw, size, oas, ix, s, o); break;
    case 1: loom_scatter_double(nd, d, iw, size, oas, ix, s, o); break;
    case 2: loom_scatter_int32_t(nd, d, iw, size, oas, ix, s, o); break;
    default: loom_scatter_int64_t(nd, d, iw, size, oas, ix, s, o); break;
  }
  return 0;
}

#define LOOM_SPMM(T)                                                                                    \
static void loom_spmm_##T(const int64_t *r, const char *x, const char *ci, const char *w, const char *ri,  \
                          char *o) {                                                                    \
  int64_t E = r[2], F = r[3], xn = r[4], on = r[5], xs0 = r[8], xs1 = r[9], cs0 = r[12], cs1 = r[13];    \
  int64_t cw = r[14], ws0 = r[17], ws1 = r[18], rs0 = r[21], rs1 = r[22], rw = r[23];                    \
  int64_t os0 = r[28], os1 = r[29], isz = (int64_t)sizeof(T);                                            \
  int rows = cs1 == 0 && rs1 == 0, dense = xs1 == isz && os1 == isz;                                     \
  for (int64_t e = 0; e < E; e++) {                                                                     \
    const char *cp = ci + e * cs0, *rp = ri + e * rs0, *wp = w + e * ws0;                               \
    if (rows) {                                                                                         \
      int64_t c = LOOM_IDX(cp, cw), t = LOOM_IDX(rp, rw);                                               \
      if (c < 0) c += xn;                                                                               \
      if (t < 0) t += on;                                                                               \
      const char *xr = x + c * xs0;                                                                     \
      char *orow = o + t * os0;                                                                         \
      if (dense && ws1 == 0) {                                                                          \
        const T *xv = (const T *)xr, wv = *(const T *)wp;                                               \
        T *ov = (T *)orow;                                                                              \
        for (int64_t f = 0; f < F; f++) { T m = xv[f] * wv; ov[f] += m; }                               \
      } else {                                                                                          \
        for (int64_t f = 0; f < F; f++) {                                                               \
          T m = *(const T *)(xr + f * xs1) * *(const T *)(wp + f * ws1);                                \
          *(T *)(orow + f * os1) += m;                                                                  \
        }                                                                                               \
      }                                                                                                 \
    } else {                                                                                            \
      for (int64_t f = 0; f < F; f++) {                                                                 \
        int64_t c = LOOM_IDX(cp + f * cs1, cw), t = LOOM_IDX(rp + f * rs1, rw);                         \
        if (c < 0) c += xn;                                                                             \
        if (t < 0) t += on;                                                                             \
        T m = *(const T *)(x + c * xs0 + f * xs1) * *(const T *)(wp + f * ws1);                         \
        *(T *)(o + t * os0 + f * os1) += m;                                                             \
      }                                                                                                 \
    }                                                                                                   \
  }                                                                                                     \
}
LOOM_SPMM(float)
LOOM_SPMM(double)

/* Whether every index of an E x F index block (strides s0, s1) lies in [-size, size). */
static int loom_index2_ok(const char *ix, int64_t E, int64_t F, int64_t s0, int64_t s1, int64_t iw,
                          int64_t size) {
  int64_t nf = s1 == 0 ? 1 : F;
  for (int64_t e = 0; e < E; e++)
    for (int64_t f = 0; f < nf; f++) {
      int64_t v = LOOM_IDX(ix + e * s0 + f * s1, iw);
      if (v < -size || v >= size) return 0;
    }
  return 1;
}

/* Products summed in the order of the unfused steps (each rounded, then added in C order of the index, as
   np.add.at does), so the bits are theirs. A bad index stops it before anything is written. */
static int loom_spmm(const int64_t *r, char *const *base) {
  int64_t code = r[1], E = r[2], F = r[3];
  const char *x = base[r[6]] + r[7], *ci = base[r[10]] + r[11], *w = base[r[15]] + r[16];
  const char *ri = base[r[19]] + r[20], *b = base[r[24]] + r[25];
  char *o = base[r[26]] + r[27];
  if (!loom_index2_ok(ci, E, F, r[12], r[13], r[14], r[4]) || !loom_index2_ok(ri, E, F, r[21], r[22], r[23], r[5]))
    return 1;
  int64_t isz = code == 1 ? 8 : 4, cnd = r[30];
  const int64_t *fin = r + 31 + 3 * cnd;  /* [ndim, dst base, dst off, (size, src stride, dst stride) per dim] */
  if (b != o) loom_copy(cnd, isz, r + 31, (char *)b, o);
  if (code == 1) loom_spmm_double(r, x, ci, w, ri, o);
  else loom_spmm_float(r, x, ci, w, ri, o);
  if (fin[0] > 0) loom_copy(fin[0], isz, fin + 3, o, base[fin[1]] + fin[2]);
  return 0;
}

static void loom_fill(char *dst, int64_t n, int64_t isz, int64_t bits) {
  if (bits == 0) { memset(dst, 0, (size_t)(n * isz)); return; }
  switch (isz) {
    case 1: memset(dst, (int)(bits & 0xff), (size_t)n); return;
    case 2: for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = (uint16_t)bits; return;
    case 4: for (int64_t i = 0; i < n; i++) ((uint32_t *)dst)[i] = (uint32_t)bits; return;
    default: for (int64_t i = 0; i < n; i++) ((uint64_t *)dst)[i] = (uint64_t)bits; return;
  }
}

static void loom_pad(const int64_t *r, char *const *base) {
  int64_t nd = r[1], isz = r[2];
  char *dst = base[r[7]] + r[8];
  loom_fill(dst, r[4], isz, r[3]);
  loom_copy(nd, isz, r + 10, base[r[5]] + r[6], dst + r[9]);
}

static int64_t loom_load_i(int64_t code, const char *p) {
  switch (code) {
    case 2: return *(const int8_t *)p;
    case 3: return *(const int16_t *)p;
    case 4: return *(const int32_t *)p;
    case 5: return *(const int64_t *)p;
    case 6: return *(const uint8_t *)p;
    case 7: return *(const uint16_t *)p;
    default: return *(const uint32_t *)p;
  }
}

static double loom_bits_d(int64_t bits) { double v; memcpy(&v, &bits, 8); return v; }

/* A check node: every element in [low, high) ([low, high] when closed) or equal to ignore, and with
   positive rows, some element of every last-axis row inside and above 0 (low >= 0 there). */
static int loom_check(const int64_t *r, char *const *base) {
  int64_t code = r[1], cmp = r[2], flags = r[3], count = r[7], row = r[8];
  int closed = flags & 1, has_ignore = flags & 2, rows = flags & 4;
  const char *x = base[r[9]] + r[10];
  char *o = base[r[11]] + r[12];
  int64_t isz = code == 0 || code == 4 || code == 8 ? 4 : code == 1 || code == 5 ? 8
              : code == 3 || code == 7 ? 2 : 1;
  int any = 0;
  for (int64_t i = 0; i < count; i++) {
    const char *p = x + i * isz;
    int inside, positive;
    if (cmp == 0) {
      int64_t v = loom_load_i(code, p);
      inside = v >= r[4] && (closed ? v <= r[5] : v < r[5]);
      if (has_ignore && v == r[6]) inside = 1;
      positive = inside && v > 0;
    } else if (cmp == 1) {
      double v = code == 1 ? *(const double *)p : code == 0 ? (double)*(const float *)p
                                                             : (double)loom_load_i(code, p);
      double lo = loom_bits_d(r[4]), hi = loom_bits_d(r[5]);
      inside = v >= lo && (closed ? v <= hi : v < hi);
      if (has_ignore && v == loom_bits_d(r[6])) inside = 1;
      positive = inside && v > 0;
    } else {
      float v = *(const float *)p;
      float lo = (float)loom_bits_d(r[4]), hi = (float)loom_bits_d(r[5]);
      inside = v >= lo && (closed ? v <= hi : v < hi);
      if (has_ignore && v == (float)loom_bits_d(r[6])) inside = 1;
      positive = inside && v > 0;
    }
    if (!inside) return 1;
    if (rows) {
      any |= positive;
      if ((i + 1) % row == 0) {
        if (!any) return 1;
        any = 0;
      }
    }
  }
  if (o != x) memcpy(o, x, (size_t)(count * isz));
  return 0;
}
"""
