/* libloomrt: load a `loom.jit.save` dump (manifest.json, graph.json, weights.safetensors, kernels/) and run
   it. Fused nodes call their generated kernels (shared objects built from the dumped C); the other nodes
   of an optimised inference graph are interpreted here: movement ops as strided copies, gather, matmul
   and conv2d through CBLAS (or plain loops without it), max_pool2d_index and check. Every value lives in
   its own 64-byte aligned, C-contiguous buffer allocated at load time from the graph's shapes. */
#define _GNU_SOURCE
#include "loomrt.h"
#include "loomrt_json.h"

#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXD 16
#define ERRLEN 1024

#ifdef LOOMRT_BLAS
void scipy_cblas_sgemm(int, int, int, int, int, int, float, const float *, int, const float *, int, float, float *,
                       int);
void scipy_cblas_dgemm(int, int, int, int, int, int, double, const double *, int, const double *, int, double,
                       double *, int);
void scipy_openblas_set_num_threads(int);
#endif

/* ---------------------------------------------------------------- dtypes */

enum { DT_BOOL, DT_U8, DT_I8, DT_I16, DT_I32, DT_I64, DT_F16, DT_BF16, DT_F32, DT_F64, DT_COUNT };
static const char *DT_NAME[DT_COUNT] = {"bool", "uint8", "int8", "int16", "int32", "int64",
                                        "float16", "bfloat16", "float32", "float64"};
static const char *DT_ST[DT_COUNT] = {"BOOL", "U8", "I8", "I16", "I32", "I64", "F16", "BF16", "F32", "F64"};
static const int DT_SIZE[DT_COUNT] = {1, 1, 1, 2, 4, 8, 2, 2, 4, 8};

static int dtype_code(const char *name) {
  for (int k = 0; k < DT_COUNT; k++)
    if (name && strcmp(name, DT_NAME[k]) == 0) return k;
  return -1;
}

/* ---------------------------------------------------------------- ops */

enum {
  OP_INPUT, OP_BUFFER, OP_CONST, OP_ARANGE, OP_RESHAPE, OP_PERMUTE, OP_EXPAND, OP_SLICE, OP_FLIP, OP_PAD,
  OP_GATHER, OP_MATMUL, OP_CONV2D, OP_MAXPOOL, OP_CHECK, OP_CAST, OP_FUSED, OP_ARGSORT, OP_SCATTER_ADD, OP_DIV, OP_FLOORDIV,
  OP_MOD, OP_COUNT
};
static const char *OP_NAME[OP_COUNT] = {"input", "buffer", "const", "arange", "reshape", "permute", "expand",
                                        "slice", "flip", "pad", "gather", "matmul", "conv2d",
                                        "max_pool2d_index", "check", "cast", "fused", "argsort", "scatter_add",
                                        "div", "floordiv", "mod"};

static int op_code(const char *name) {
  for (int k = 0; k < OP_COUNT; k++)
    if (strcmp(name, OP_NAME[k]) == 0) return k;
  return -1;
}

typedef struct {
  int dtype, ndim;
  int64_t shape[MAXD];
  int64_t numel;
  size_t nbytes;
  char *data;
  int owns;
} val;

typedef int32_t (*loom_call_t)(const char *, const int64_t *, int64_t);

typedef struct {            /* One movement op applied to a kernel input the generated code cannot index. */
  int op;
  const lj *attrs;
  val out;
} step;

typedef struct {
  int input, nsteps;
  step *steps;
} copyspec;

typedef struct {
  void *handle;
  loom_call_t call;
  int64_t *meta;
  int ncopies;
  copyspec *copies;
  char **cells;
  const char **refs;
} kernel;

typedef struct {
  int op;
  int64_t id;
  int nin;
  int *in;                  /* Indices into the node array. */
  const lj *attrs;
  val v;
  kernel *k;
  int is_static;            /* Depends only on weights and constants: computed once, at load time. */
} node;

struct loomrt_model {
  lj *manifest, *graph;
  node *nodes;
  int nnodes;
  int nuser, nout;
  int *user, *out;          /* Node indices of the user inputs and of the outputs. */
  char **user_names;
  int *user_set;
  int64_t nthreads;
  char err[ERRLEN];
};

static int set_err(char *err, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, ERRLEN, fmt, ap);
  va_end(ap);
  return -1;
}

/* ---------------------------------------------------------------- small helpers */

static char *read_file(const char *path, size_t *len, char *err) {
  FILE *f = fopen(path, "rb");
  if (!f) { set_err(err, "cannot open %s: %s", path, strerror(errno)); return NULL; }
  if (fseek(f, 0, SEEK_END) != 0) { fclose(f); set_err(err, "cannot read %s", path); return NULL; }
  long n = ftell(f);
  rewind(f);
  char *buf = malloc((size_t)(n > 0 ? n : 0) + 1);
  if (!buf) { fclose(f); set_err(err, "out of memory reading %s", path); return NULL; }
  if (n > 0 && fread(buf, 1, (size_t)n, f) != (size_t)n) {
    fclose(f); free(buf); set_err(err, "cannot read %s", path); return NULL;
  }
  fclose(f);
  buf[n > 0 ? n : 0] = 0;
  *len = (size_t)(n > 0 ? n : 0);
  return buf;
}

static char *join(const char *dir, const char *name) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char *p = malloc(n);
  if (p) snprintf(p, n, "%s/%s", dir, name);
  return p;
}

static lj *parse_file(const char *dir, const char *name, char *err) {
  char *path = join(dir, name);
  size_t len;
  char *text = path ? read_file(path, &len, err) : NULL;
  lj *doc = NULL;
  if (text) {
    char perr[256];
    doc = lj_parse(text, len, perr, sizeof perr);
    if (!doc) set_err(err, "%s: %s", path, perr);
  }
  free(text);
  free(path);
  return doc;
}

static int get_int(const lj *v, int64_t *out) {
  if (!v || v->type != LJ_INT || v->is_uint) return 0;
  *out = v->i;
  return 1;
}

/* An int list attr (`key` of attrs) into out[]; returns its length, -1 if missing or malformed. */
static int int_list(const lj *attrs, const char *key, int64_t *out, int cap) {
  const lj *v = lj_get(attrs, key);
  if (!v || v->type != LJ_ARR || (int)v->n > cap) return -1;
  for (size_t k = 0; k < v->n; k++)
    if (!get_int(&v->items[k], &out[k])) return -1;
  return (int)v->n;
}

/* A scalar attr value (int, float, bool or {"float": "inf" | "-inf" | "nan"}). */
static int scalar(const lj *v, int *is_int, int64_t *i, double *f) {
  if (!v) return 0;
  if (v->type == LJ_INT || v->type == LJ_BOOL) { *is_int = 1; *i = v->is_uint ? (int64_t)v->u : v->i; *f = (double)*i; return 1; }
  if (v->type == LJ_FLOAT) { *is_int = 0; *f = v->f; return 1; }
  const lj *s = lj_get(v, "float");
  if (v->type == LJ_OBJ && s && s->type == LJ_STR) {
    *is_int = 0;
    if (strcmp(s->s, "inf") == 0) *f = INFINITY;
    else if (strcmp(s->s, "-inf") == 0) *f = -INFINITY;
    else if (strcmp(s->s, "nan") == 0) *f = NAN;
    else return 0;
    return 1;
  }
  return 0;
}

static uint16_t f32_to_bf16(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  if (isnan(x)) return 0x7FC0;
  u += 0x7FFF + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}

/* Write a scalar converted to dtype `dt` at p; -1 for float16 (not rendered by this runtime). */
static int store(int dt, char *p, int is_int, int64_t i, double f) {
  switch (dt) {
    case DT_BOOL: *(uint8_t *)p = is_int ? i != 0 : f != 0; return 0;
    case DT_U8: *(uint8_t *)p = (uint8_t)(is_int ? i : (int64_t)f); return 0;
    case DT_I8: *(int8_t *)p = (int8_t)(is_int ? i : (int64_t)f); return 0;
    case DT_I16: *(int16_t *)p = (int16_t)(is_int ? i : (int64_t)f); return 0;
    case DT_I32: *(int32_t *)p = (int32_t)(is_int ? i : (int64_t)f); return 0;
    case DT_I64: *(int64_t *)p = is_int ? i : (int64_t)f; return 0;
    case DT_F32: *(float *)p = is_int ? (float)i : (float)f; return 0;
    case DT_F64: *(double *)p = is_int ? (double)i : f; return 0;
    case DT_BF16: { uint16_t b = f32_to_bf16(is_int ? (float)i : (float)f); memcpy(p, &b, 2); return 0; }
    default: return -1;
  }
}

static double load_f(int dt, const char *p) {
  switch (dt) {
    case DT_BOOL: case DT_U8: return *(const uint8_t *)p;
    case DT_I8: return *(const int8_t *)p;
    case DT_I16: return *(const int16_t *)p;
    case DT_I32: return *(const int32_t *)p;
    case DT_I64: return (double)*(const int64_t *)p;
    case DT_F32: return *(const float *)p;
    case DT_F64: return *(const double *)p;
    case DT_BF16: { uint16_t b; memcpy(&b, p, 2); uint32_t u = (uint32_t)b << 16; float x; memcpy(&x, &u, 4); return x; }
    default: return NAN;
  }
}

static int64_t load_i(int dt, const char *p) {
  switch (dt) {
    case DT_I32: return *(const int32_t *)p;
    case DT_I64: return *(const int64_t *)p;
    case DT_I16: return *(const int16_t *)p;
    case DT_I8: return *(const int8_t *)p;
    default: return (int64_t)load_f(dt, p);
  }
}

static int is_float(int dt) { return dt == DT_F16 || dt == DT_BF16 || dt == DT_F32 || dt == DT_F64; }

static int alloc_val(val *v) {
  size_t n = (v->nbytes + 63) / 64 * 64;
  v->data = aligned_alloc(64, n ? n : 64);
  if (!v->data) return -1;
  memset(v->data, 0, n ? n : 64);
  v->owns = 1;
  return 0;
}

static void contiguous_strides(const val *v, int64_t *st) {
  int64_t s = DT_SIZE[v->dtype];
  for (int d = v->ndim - 1; d >= 0; d--) { st[d] = s; s *= v->shape[d]; }
}

/* Copy an nd block: shape[], with byte strides on both sides. */
static void copy_nd(int nd, const int64_t *shape, int64_t isz, const char *src, const int64_t *ss, char *dst,
                    const int64_t *ds) {
  if (nd == 0) { memcpy(dst, src, (size_t)isz); return; }
  if (nd == 1) {
    if (ss[0] == isz && ds[0] == isz) { memcpy(dst, src, (size_t)(shape[0] * isz)); return; }
    switch (isz) {
      case 1: for (int64_t i = 0; i < shape[0]; i++) dst[i * ds[0]] = src[i * ss[0]]; return;
      case 2: for (int64_t i = 0; i < shape[0]; i++) *(uint16_t *)(dst + i * ds[0]) = *(const uint16_t *)(src + i * ss[0]); return;
      case 4: for (int64_t i = 0; i < shape[0]; i++) *(uint32_t *)(dst + i * ds[0]) = *(const uint32_t *)(src + i * ss[0]); return;
      case 8: for (int64_t i = 0; i < shape[0]; i++) *(uint64_t *)(dst + i * ds[0]) = *(const uint64_t *)(src + i * ss[0]); return;
      default: for (int64_t i = 0; i < shape[0]; i++) memcpy(dst + i * ds[0], src + i * ss[0], (size_t)isz); return;
    }
  }
  for (int64_t i = 0; i < shape[0]; i++) copy_nd(nd - 1, shape + 1, isz, src + i * ss[0], ss + 1, dst + i * ds[0], ds + 1);
}

/* ---------------------------------------------------------------- movement */

static int movement(int op, const lj *attrs, const val *x, val *out, char *err) {
  int64_t isz = DT_SIZE[x->dtype], xs[MAXD], os[MAXD], ss[MAXD], a[MAXD], b[MAXD], c[MAXD];
  contiguous_strides(x, xs);
  contiguous_strides(out, os);
  int nd = x->ndim, n;
  int64_t off = 0;
  switch (op) {
    case OP_RESHAPE:
      memcpy(out->data, x->data, x->nbytes);
      return 0;
    case OP_PERMUTE:
      if (int_list(attrs, "perm", a, MAXD) != nd) return set_err(err, "permute: bad 'perm'");
      for (int d = 0; d < nd; d++) ss[d] = xs[a[d]];
      break;
    case OP_EXPAND:
      for (int d = 0; d < nd; d++) ss[d] = (x->shape[d] == 1 && out->shape[d] != 1) ? 0 : xs[d];
      break;
    case OP_SLICE:
      if (int_list(attrs, "starts", a, MAXD) != nd || int_list(attrs, "steps", c, MAXD) != nd)
        return set_err(err, "slice: bad 'starts' or 'steps'");
      for (int d = 0; d < nd; d++) { off += a[d] * xs[d]; ss[d] = c[d] * xs[d]; }
      break;
    case OP_FLIP:
      for (int d = 0; d < nd; d++) ss[d] = xs[d];
      n = int_list(attrs, "axes", a, MAXD);
      if (n < 0) return set_err(err, "flip: bad 'axes'");
      for (int k = 0; k < n; k++) {
        if (a[k] < 0 || a[k] >= nd) return set_err(err, "flip: axis %lld out of range", (long long)a[k]);
        off += (x->shape[a[k]] - 1) * xs[a[k]];
        ss[a[k]] = -xs[a[k]];
      }
      break;
    case OP_PAD: {
      const lj *pads = lj_get(attrs, "pads");
      int is_int = 1;
      int64_t iv = 0;
      double fv = 0;
      const lj *value = lj_get(attrs, "value");
      if (value && !scalar(value, &is_int, &iv, &fv)) return set_err(err, "pad: bad 'value'");
      if (!pads || pads->type != LJ_ARR || (int)pads->n != nd) return set_err(err, "pad: bad 'pads'");
      for (int d = 0; d < nd; d++) {
        const lj *pr = &pads->items[d];
        if (pr->type != LJ_ARR || pr->n != 2 || !get_int(&pr->items[0], &b[d]))
          return set_err(err, "pad: bad 'pads'");
      }
      char fill[8];
      if (store(out->dtype, fill, is_int, iv, fv) != 0) return set_err(err, "pad: dtype %s", DT_NAME[out->dtype]);
      for (int64_t e = 0; e < out->numel; e++) memcpy(out->data + e * isz, fill, (size_t)isz);
      int64_t doff = 0;
      for (int d = 0; d < nd; d++) doff += b[d] * os[d];
      copy_nd(nd, x->shape, isz, x->data, xs, out->data + doff, os);
      return 0;
    }
    default:
      return set_err(err, "not a movement op");
  }
  copy_nd(nd, out->shape, isz, x->data + off, ss, out->data, os);
  return 0;
}

/* ---------------------------------------------------------------- contractions */

static void gemm(int dt, int M, int N, int K, const char *A, int lda, const char *B, int ldb, char *C, int ldc) {
#ifdef LOOMRT_BLAS
  if (dt == DT_F32) {
    scipy_cblas_sgemm(101, 111, 111, M, N, K, 1.0f, (const float *)A, lda, (const float *)B, ldb, 0.0f, (float *)C, ldc);
    return;
  }
  if (dt == DT_F64) {
    scipy_cblas_dgemm(101, 111, 111, M, N, K, 1.0, (const double *)A, lda, (const double *)B, ldb, 0.0, (double *)C, ldc);
    return;
  }
#endif
#define LOOMRT_GEMM_LOOP(T)                                                              \
  do {                                                                                   \
    const T *a = (const T *)A, *b = (const T *)B;                                        \
    T *c = (T *)C;                                                                       \
    for (int i = 0; i < M; i++) {                                                        \
      for (int j = 0; j < N; j++) c[(int64_t)i * ldc + j] = 0;                           \
      for (int k = 0; k < K; k++) {                                                      \
        T aik = a[(int64_t)i * lda + k];                                                 \
        for (int j = 0; j < N; j++) c[(int64_t)i * ldc + j] += aik * b[(int64_t)k * ldb + j]; \
      }                                                                                  \
    }                                                                                    \
  } while (0)
  switch (dt) {
    case DT_F32: LOOMRT_GEMM_LOOP(float); break;
    case DT_F64: LOOMRT_GEMM_LOOP(double); break;
    case DT_I64: LOOMRT_GEMM_LOOP(int64_t); break;
    case DT_I32: LOOMRT_GEMM_LOOP(int32_t); break;
    default: break;
  }
#undef LOOMRT_GEMM_LOOP
}

static int matmul(const val *a, const val *b, val *out, char *err) {
  int nd = a->ndim;
  if (nd < 2 || b->ndim != nd) return set_err(err, "matmul: operands of rank %d and %d", a->ndim, b->ndim);
  int dt = out->dtype;
  if (dt != DT_F32 && dt != DT_F64 && dt != DT_I64 && dt != DT_I32)
    return set_err(err, "matmul: dtype %s is not supported by libloomrt", DT_NAME[dt]);
  int64_t M = a->shape[nd - 2], K = a->shape[nd - 1], N = b->shape[nd - 1], batch = 1, isz = DT_SIZE[dt];
  if (b->shape[nd - 2] != K) return set_err(err, "matmul: inner sizes %lld and %lld differ", (long long)K,
                                            (long long)b->shape[nd - 2]);
  for (int d = 0; d < nd - 2; d++) batch *= out->shape[d];
  if (K == 0) { memset(out->data, 0, out->nbytes); return 0; }
  for (int64_t i = 0; i < batch; i++)
    gemm(dt, (int)M, (int)N, (int)K, a->data + i * M * K * isz, (int)K, b->data + i * K * N * isz, (int)N,
         out->data + i * M * N * isz, (int)N);
  return 0;
}

static int conv2d(const val *x, const val *w, const lj *attrs, val *out, char *err) {
  int64_t st[2], pad[4], dil[2], groups;
  if (int_list(attrs, "stride", st, 2) != 2 || int_list(attrs, "padding", pad, 4) != 4 ||
      int_list(attrs, "dilation", dil, 2) != 2 || !get_int(lj_get(attrs, "groups"), &groups) || groups < 1)
    return set_err(err, "conv2d: bad attrs");
  int dt = out->dtype;
  if (dt != DT_F32 && dt != DT_F64) return set_err(err, "conv2d: dtype %s is not supported", DT_NAME[dt]);
  int64_t N = x->shape[0], C = x->shape[1], H = x->shape[2], W = x->shape[3];
  int64_t O = w->shape[0], Cg = w->shape[1], kh = w->shape[2], kw = w->shape[3];
  int64_t Ho = out->shape[2], Wo = out->shape[3], Og = O / groups, isz = DT_SIZE[dt];
  int64_t rows = Cg * kh * kw, cols = Ho * Wo;
  if (Cg * groups != C) return set_err(err, "conv2d: %lld channels do not match weight (%lld x %lld groups)",
                                       (long long)C, (long long)Cg, (long long)groups);
  char *col = malloc((size_t)(rows * cols * isz) + 1);
  if (!col) return set_err(err, "conv2d: out of memory");
  for (int64_t n = 0; n < N; n++) {
    for (int64_t g = 0; g < groups; g++) {
      for (int64_t c = 0; c < Cg; c++)
        for (int64_t i = 0; i < kh; i++)
          for (int64_t j = 0; j < kw; j++) {
            char *row = col + ((c * kh + i) * kw + j) * cols * isz;
            const char *plane = x->data + ((n * C + g * Cg + c) * H * W) * isz;
            for (int64_t oh = 0; oh < Ho; oh++) {
              int64_t h = oh * st[0] - pad[0] + i * dil[0];
              for (int64_t ow = 0; ow < Wo; ow++) {
                int64_t ww = ow * st[1] - pad[2] + j * dil[1];
                char *dst = row + (oh * Wo + ow) * isz;
                if (h < 0 || h >= H || ww < 0 || ww >= W) memset(dst, 0, (size_t)isz);
                else memcpy(dst, plane + (h * W + ww) * isz, (size_t)isz);
              }
            }
          }
      gemm(dt, (int)Og, (int)cols, (int)rows, w->data + g * Og * rows * isz, (int)rows, col, (int)cols,
           out->data + ((n * O + g * Og) * cols) * isz, (int)cols);
    }
  }
  free(col);
  return 0;
}

/* PyTorch's rule: padding never, the first maximum, the last NaN, the first element of an all -inf window. */
static int max_pool_index(const val *x, const lj *attrs, val *out, char *err) {
  int64_t ks[2], st[2], dil[2], pad[4];
  if (int_list(attrs, "kernel_size", ks, 2) != 2 || int_list(attrs, "stride", st, 2) != 2 ||
      int_list(attrs, "dilation", dil, 2) != 2 || int_list(attrs, "padding", pad, 4) != 4)
    return set_err(err, "max_pool2d_index: bad attrs");
  if (!is_float(x->dtype)) return set_err(err, "max_pool2d_index: dtype %s", DT_NAME[x->dtype]);
  int64_t NC = x->shape[0] * x->shape[1], H = x->shape[2], W = x->shape[3], Ho = out->shape[2], Wo = out->shape[3];
  int64_t isz = DT_SIZE[x->dtype];
  int64_t *o = (int64_t *)out->data;
  for (int64_t p = 0; p < NC; p++) {
    const char *plane = x->data + p * H * W * isz;
    for (int64_t oh = 0; oh < Ho; oh++)
      for (int64_t ow = 0; ow < Wo; ow++) {
        int64_t best = -1;
        double bv = 0;
        for (int64_t i = 0; i < ks[0]; i++) {
          int64_t h = oh * st[0] - pad[0] + i * dil[0];
          if (h < 0 || h >= H) continue;
          for (int64_t j = 0; j < ks[1]; j++) {
            int64_t w = ow * st[1] - pad[2] + j * dil[1];
            if (w < 0 || w >= W) continue;
            double v = load_f(x->dtype, plane + (h * W + w) * isz);
            if (best < 0 || isnan(v) || v > bv) { best = h * W + w; bv = v; }
            if (isnan(v)) bv = v;
          }
        }
        if (best < 0) return set_err(err, "max_pool2d_index: a window holds only padding");
        *o++ = best;
      }
  }
  return 0;
}

static int gather(const val *x, const val *idx, const lj *attrs, val *out, char *err) {
  int64_t axis, xs[MAXD], pos[MAXD] = {0};
  if (!get_int(lj_get(attrs, "axis"), &axis) || axis < 0 || axis >= x->ndim) return set_err(err, "gather: bad 'axis'");
  if (idx->dtype != DT_I64 && idx->dtype != DT_I32) return set_err(err, "gather: index dtype %s", DT_NAME[idx->dtype]);
  contiguous_strides(x, xs);
  int64_t isz = DT_SIZE[x->dtype], size = x->shape[axis];
  int nd = out->ndim;
  for (int64_t e = 0; e < out->numel; e++) {
    int64_t i = load_i(idx->dtype, idx->data + e * DT_SIZE[idx->dtype]);
    if (i < -size || i >= size)
      return set_err(err, "gather: index %lld is out of range for axis %lld of size %lld", (long long)i,
                     (long long)axis, (long long)size);
    if (i < 0) i += size;
    int64_t off = 0;
    for (int d = 0; d < nd; d++) off += (d == axis ? i : pos[d]) * xs[d];
    memcpy(out->data + e * isz, x->data + off, (size_t)isz);
    for (int d = nd - 1; d >= 0; d--) { if (++pos[d] < out->shape[d]) break; pos[d] = 0; }
  }
  return 0;
}

static void format_value(char *buf, size_t n, int dt, double f, int64_t i) {
  if (!is_float(dt)) snprintf(buf, n, "%lld", (long long)i);
  else if (isnan(f)) snprintf(buf, n, "nan");
  else if (isinf(f)) snprintf(buf, n, f > 0 ? "inf" : "-inf");
  else snprintf(buf, n, "%.9g", f);
}

static void fill_message(char *err, const char *text, const char *value) {
  const char *at = strstr(text, "{value}");
  if (!at) { snprintf(err, ERRLEN, "%s", text); return; }
  snprintf(err, ERRLEN, "%.*s%s%s", (int)(at - text), text, value, at + 7);
}

static int check(const val *x, const lj *attrs, val *out, char *err) {
  int li, hi_, ii = 0;
  int64_t lo_i, hi_i, ig_i = 0;
  double lo, hi, ig = 0;
  const lj *ignore = lj_get(attrs, "ignore"), *closed = lj_get(attrs, "closed"), *rows = lj_get(attrs, "positive_rows");
  const lj *msg = lj_get(attrs, "message"), *kind = lj_get(attrs, "error");
  if (!scalar(lj_get(attrs, "low"), &li, &lo_i, &lo) || !scalar(lj_get(attrs, "high"), &hi_, &hi_i, &hi) ||
      !msg || msg->type != LJ_STR)
    return set_err(err, "check: bad attrs");
  int has_ignore = ignore && ignore->type != LJ_NULL && scalar(ignore, &ii, &ig_i, &ig);
  int is_closed = closed && closed->type == LJ_BOOL && closed->i;
  const char *what = kind && kind->type == LJ_STR && strcmp(kind->s, "value") == 0 ? "ValueError" : "IndexError";
  int64_t isz = DT_SIZE[x->dtype];
  char text[64];
  int flt = is_float(x->dtype);
  for (int64_t e = 0; e < x->numel; e++) {
    const char *p = x->data + e * isz;
    int inside;
    double f = 0;
    int64_t i = 0;
    if (flt) {
      f = load_f(x->dtype, p);
      inside = f >= lo && (is_closed ? f <= hi : f < hi);
      if (has_ignore) inside = inside || f == ig;
    } else {
      i = load_i(x->dtype, p);
      inside = (li ? i >= lo_i : (double)i >= lo) && (hi_ ? (is_closed ? i <= hi_i : i < hi_i)
                                                           : (is_closed ? (double)i <= hi : (double)i < hi));
      if (has_ignore) inside = inside || (ii ? i == ig_i : (double)i == ig);
    }
    if (!inside) {
      char body[ERRLEN];
      format_value(text, sizeof text, x->dtype, f, i);
      fill_message(body, msg->s, text);
      return set_err(err, "%s: %s", what, body);
    }
  }
  if (rows && rows->type == LJ_BOOL && rows->i && x->ndim) {
    const lj *rmsg = lj_get(attrs, "rows_message");
    int64_t n = x->shape[x->ndim - 1], nrows = n ? x->numel / n : 0;
    for (int64_t r = 0; r < nrows; r++) {
      double s = 0;
      for (int64_t k = 0; k < n; k++) s += load_f(x->dtype, x->data + (r * n + k) * isz);
      if (!(s > 0)) {
        char body[ERRLEN];
        format_value(text, sizeof text, flt ? x->dtype : DT_I64, s, (int64_t)s);
        fill_message(body, rmsg && rmsg->type == LJ_STR ? rmsg->s : "a row does not sum above 0: {value}", text);
        return set_err(err, "%s: %s", what, body);
      }
    }
  }
  if (out->data != x->data) memcpy(out->data, x->data, x->nbytes);
  return 0;
}

static int cast(const val *x, val *out, char *err) {
  int64_t si = DT_SIZE[x->dtype], di = DT_SIZE[out->dtype];
  for (int64_t e = 0; e < x->numel; e++) {
    const char *p = x->data + e * si;
    int ok = is_float(x->dtype) ? store(out->dtype, out->data + e * di, 0, 0, load_f(x->dtype, p))
                                : store(out->dtype, out->data + e * di, 1, load_i(x->dtype, p), 0);
    if (ok != 0) return set_err(err, "cast: dtype %s is not supported", DT_NAME[out->dtype]);
  }
  return 0;
}

/* One element of a row being sorted: the value (as double or int64) and its position. */
typedef struct { double f; int64_t i, pos; } sort_item;

/* Stable (ties by position); NaN is the largest value: last ascending, first descending. No shared state,
   so models may run in several threads. */
static int cmp_float_c(const sort_item *a, const sort_item *b) {
  int an = isnan(a->f), bn = isnan(b->f);
  if (an || bn) return an && bn ? 0 : (an ? 1 : -1);
  return a->f < b->f ? -1 : a->f > b->f;
}
static int cmp_int_c(const sort_item *a, const sort_item *b) { return a->i < b->i ? -1 : a->i > b->i; }
static int by_pos(const sort_item *a, const sort_item *b) { return (a->pos > b->pos) - (a->pos < b->pos); }
#define LOOMRT_CMP(name, base, sign)                            \
  static int name(const void *pa, const void *pb) {              \
    int c = sign base((const sort_item *)pa, (const sort_item *)pb); \
    return c ? c : by_pos((const sort_item *)pa, (const sort_item *)pb); \
  }
LOOMRT_CMP(cmp_float_asc, cmp_float_c, +)
LOOMRT_CMP(cmp_float_desc, cmp_float_c, -)
LOOMRT_CMP(cmp_int_asc, cmp_int_c, +)
LOOMRT_CMP(cmp_int_desc, cmp_int_c, -)
#undef LOOMRT_CMP

static int argsort(const val *x, const lj *attrs, val *out, char *err) {
  int64_t axis, xs[MAXD];
  const lj *desc = lj_get(attrs, "descending");
  if (x->ndim == 0) { *(int64_t *)out->data = 0; return 0; }
  if (!get_int(lj_get(attrs, "axis"), &axis) || axis < 0 || axis >= x->ndim) return set_err(err, "argsort: bad 'axis'");
  contiguous_strides(x, xs);
  int64_t n = x->shape[axis], isz = DT_SIZE[x->dtype], step = xs[axis] / isz, rows = n ? x->numel / n : 0;
  int64_t inner = step;
  sort_item *items = malloc((size_t)(n ? n : 1) * sizeof(sort_item));
  if (!items) return set_err(err, "argsort: out of memory");
  int descending = desc && desc->type == LJ_BOOL && desc->i, flt = is_float(x->dtype);
  int (*cmp)(const void *, const void *) = flt ? (descending ? cmp_float_desc : cmp_float_asc)
                                               : (descending ? cmp_int_desc : cmp_int_asc);
  for (int64_t r = 0; r < rows; r++) {
    int64_t base = (r / inner) * n * inner + r % inner;  /* Flat index of the row's first element. */
    for (int64_t k = 0; k < n; k++) {
      const char *p = x->data + (base + k * step) * isz;
      items[k].pos = k;
      if (flt) items[k].f = load_f(x->dtype, p); else items[k].i = load_i(x->dtype, p);
    }
    qsort(items, (size_t)n, sizeof(sort_item), cmp);
    for (int64_t k = 0; k < n; k++) ((int64_t *)out->data)[base + k * step] = items[k].pos;
  }
  free(items);
  return 0;
}

static int scatter_add(const val *base, const val *idx, const val *src, const lj *attrs, val *out, char *err) {
  int64_t axis, os[MAXD], ss[MAXD], pos[MAXD] = {0};
  if (!get_int(lj_get(attrs, "axis"), &axis) || axis < 0 || axis >= (base->ndim ? base->ndim : 1))
    return set_err(err, "scatter_add: bad 'axis'");
  if (idx->dtype != DT_I64 && idx->dtype != DT_I32) return set_err(err, "scatter_add: index dtype %s", DT_NAME[idx->dtype]);
  memcpy(out->data, base->data, base->nbytes);
  contiguous_strides(out, os);
  contiguous_strides(src, ss);
  int nd = idx->ndim, dt = out->dtype;
  int64_t size = base->ndim ? base->shape[axis] : 1, isz = DT_SIZE[dt];
  for (int64_t e = 0; e < idx->numel; e++) {
    int64_t i = load_i(idx->dtype, idx->data + e * DT_SIZE[idx->dtype]);
    if (i < 0 || i >= size)  /* As loom's scatter_add: no negative indices. */
      return set_err(err, "scatter_add: index %lld is out of range for axis %lld of size %lld (expected 0 <= index "
                     "< %lld)", (long long)i, (long long)axis, (long long)size, (long long)size);
    int64_t oo = 0, so = 0;
    for (int d = 0; d < nd; d++) { oo += (d == axis ? i : pos[d]) * os[d]; so += pos[d] * ss[d]; }
    char *o = out->data + oo;
    const char *v = src->data + so;
    switch (dt) {
      case DT_F32: *(float *)o += *(const float *)v; break;
      case DT_F64: *(double *)o += *(const double *)v; break;
      case DT_I64: *(int64_t *)o = (int64_t)((uint64_t) * (int64_t *)o + (uint64_t) * (const int64_t *)v); break;
      case DT_I32: *(int32_t *)o = (int32_t)((uint32_t) * (int32_t *)o + (uint32_t) * (const int32_t *)v); break;
      default: return set_err(err, "scatter_add: dtype %s is not supported", DT_NAME[dt]);
    }
    (void)isz;
    for (int d = nd - 1; d >= 0; d--) { if (++pos[d] < idx->shape[d]) break; pos[d] = 0; }
  }
  return 0;
}

/* Integer div (floors, as loom's), floordiv and mod (the divisor's sign): the fusion pass leaves them out of
   kernels because a zero divisor is an error, reported here as loom reports it. */
static int int_division(int op, const val *x, const val *y, val *out, char *err) {
  int dt = out->dtype;
  if (is_float(dt) || dt == DT_BOOL)
    return set_err(err, "%s: dtype %s is not supported outside kernels", OP_NAME[op], DT_NAME[dt]);
  int64_t isz = DT_SIZE[dt];
  for (int64_t e = 0; e < out->numel; e++) {
    int64_t a = load_i(dt, x->data + e * isz), b = load_i(dt, y->data + e * isz), q, r;
    if (b == 0)
      return set_err(err, "ZeroDivisionError: loom.%s: integer division by zero (the %s divisor holds 0)",
                     op == OP_MOD ? "remainder" : op == OP_DIV ? "div" : "floor_divide", DT_NAME[dt]);
    if (b == -1) { q = (int64_t)(0 - (uint64_t)a); r = 0; }  /* INT64_MIN / -1 wraps, as in NumPy. */
    else {
      q = a / b; r = a % b;
      if (r != 0 && ((r < 0) != (b < 0))) { q -= 1; r += b; }
    }
    store(dt, out->data + e * isz, 1, op == OP_MOD ? r : q, 0);
  }
  return 0;
}

/* ---------------------------------------------------------------- loading */

static int read_val(const lj *jn, val *v, char *err, const char *where) {
  const lj *shape = lj_get(jn, "shape"), *dtype = lj_get(jn, "dtype");
  if (!shape || shape->type != LJ_ARR || !dtype || dtype->type != LJ_STR)
    return set_err(err, "%s: needs \"shape\" and \"dtype\"", where);
  v->dtype = dtype_code(dtype->s);
  if (v->dtype < 0) return set_err(err, "%s: unknown dtype '%s'", where, dtype->s);
  if ((int)shape->n > MAXD) return set_err(err, "%s: rank %d is above libloomrt's limit of %d", where,
                                           (int)shape->n, MAXD);
  v->ndim = (int)shape->n;
  v->numel = 1;
  for (int d = 0; d < v->ndim; d++) {
    if (!get_int(&shape->items[d], &v->shape[d]) || v->shape[d] < 0)
      return set_err(err, "%s: shape must hold non-negative integers", where);
    v->numel *= v->shape[d];
  }
  v->nbytes = (size_t)v->numel * (size_t)DT_SIZE[v->dtype];
  return 0;
}

static int find_node(const loomrt_model *m, int upto, int64_t id) {
  for (int k = 0; k < upto; k++)
    if (m->nodes[k].id == id) return k;
  return -1;
}

static int b64(int c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

static int decode_buffer(const lj *jn, val *v, char *err, int64_t id) {
  const lj *buf = lj_get(jn, "buffer"), *data = lj_get(buf, "data");
  if (!data || data->type != LJ_STR) return set_err(err, "graph.json: buffer node %lld has no data", (long long)id);
  size_t len = strlen(data->s), o = 0;
  if (len % 4) return set_err(err, "graph.json: buffer node %lld: data is not base64", (long long)id);
  for (size_t k = 0; k < len; k += 4) {
    int q[4];
    for (int j = 0; j < 4; j++) q[j] = data->s[k + j] == '=' ? 0 : b64(data->s[k + j]);
    if (q[0] < 0 || q[1] < 0 || q[2] < 0 || q[3] < 0)
      return set_err(err, "graph.json: buffer node %lld: data is not base64", (long long)id);
    unsigned trip = (unsigned)(q[0] << 18 | q[1] << 12 | q[2] << 6 | q[3]);
    unsigned char bytes[3] = {(unsigned char)(trip >> 16), (unsigned char)(trip >> 8), (unsigned char)trip};
    int nb = 3 - (data->s[k + 3] == '=') - (data->s[k + 2] == '=');
    for (int j = 0; j < nb; j++) {
      if (o >= v->nbytes) return set_err(err, "graph.json: buffer node %lld holds more than %zu bytes",
                                         (long long)id, v->nbytes);
      v->data[o++] = (char)bytes[j];
    }
  }
  if (o != v->nbytes)
    return set_err(err, "graph.json: buffer node %lld holds %zu bytes, its shape needs %zu", (long long)id, o, v->nbytes);
  return 0;
}

static int fill_source(node *nd, char *err) {
  if (nd->op == OP_CONST) {
    int is_int;
    int64_t i;
    double f;
    char one[8];
    if (!scalar(lj_get(nd->attrs, "value"), &is_int, &i, &f) || store(nd->v.dtype, one, is_int, i, f) != 0)
      return set_err(err, "graph.json: const node %lld: unsupported value or dtype", (long long)nd->id);
    for (int64_t e = 0; e < nd->v.numel; e++) memcpy(nd->v.data + e * DT_SIZE[nd->v.dtype], one, (size_t)DT_SIZE[nd->v.dtype]);
  } else {  /* arange: computed in float64 (int64 for integer dtypes). */
    int si, ti;
    int64_t s_i, t_i;
    double s_f, t_f;
    if (!scalar(lj_get(nd->attrs, "start"), &si, &s_i, &s_f) || !scalar(lj_get(nd->attrs, "step"), &ti, &t_i, &t_f))
      return set_err(err, "graph.json: arange node %lld: bad start/step", (long long)nd->id);
    for (int64_t e = 0; e < nd->v.numel; e++) {
      char *p = nd->v.data + e * DT_SIZE[nd->v.dtype];
      int r = is_float(nd->v.dtype) ? store(nd->v.dtype, p, 0, 0, s_f + t_f * (double)e)
                                    : store(nd->v.dtype, p, 1, s_i + t_i * e, 0);
      if (r) return set_err(err, "graph.json: arange node %lld: dtype %s", (long long)nd->id, DT_NAME[nd->v.dtype]);
    }
  }
  return 0;
}

/* Check a node's stored shape and dtype against its inputs and attrs, so the interpreter never reads or
   writes outside a buffer; the message says what was expected. */
static int validate(const loomrt_model *m, const node *nd, char *err, const char *where) {
  const val *o = &nd->v, *x = nd->nin > 0 ? &m->nodes[nd->in[0]].v : NULL, *y = nd->nin > 1 ? &m->nodes[nd->in[1]].v : NULL;
  int64_t a[MAXD], b[MAXD], c[MAXD];
  int nd_ = x ? x->ndim : 0;
#define NEED(cond, ...) do { if (!(cond)) return set_err(err, __VA_ARGS__); } while (0)
  switch (nd->op) {
    case OP_INPUT: case OP_BUFFER: case OP_CONST: case OP_ARANGE: case OP_FUSED: return 0;
    case OP_RESHAPE: case OP_CHECK: case OP_CAST:
      NEED(o->numel == x->numel, "%s: %s of %lld elements gives %lld", where, OP_NAME[nd->op], (long long)x->numel,
           (long long)o->numel);
      NEED(nd->op == OP_CAST || o->dtype == x->dtype, "%s: dtype %s differs from its input's %s", where,
           DT_NAME[o->dtype], DT_NAME[x->dtype]);
      return 0;
    default: break;
  }
  if (nd->op <= OP_PAD || nd->op == OP_GATHER)
    NEED(o->dtype == x->dtype && o->ndim == nd_, "%s: %s must keep its input's dtype %s and rank %d", where,
         OP_NAME[nd->op], DT_NAME[x->dtype], nd_);
  switch (nd->op) {
    case OP_PERMUTE: {
      int seen[MAXD] = {0};
      NEED(int_list(nd->attrs, "perm", a, MAXD) == nd_, "%s: 'perm' must list %d axes", where, nd_);
      for (int d = 0; d < nd_; d++) {
        NEED(a[d] >= 0 && a[d] < nd_ && !seen[a[d]]++, "%s: 'perm' is not a permutation", where);
        NEED(o->shape[d] == x->shape[a[d]], "%s: shape does not follow 'perm'", where);
      }
      return 0;
    }
    case OP_EXPAND:
      for (int d = 0; d < nd_; d++)
        NEED(o->shape[d] == x->shape[d] || x->shape[d] == 1, "%s: cannot expand dim %d of size %lld to %lld", where, d,
             (long long)x->shape[d], (long long)o->shape[d]);
      return 0;
    case OP_SLICE:
      NEED(int_list(nd->attrs, "starts", a, MAXD) == nd_ && int_list(nd->attrs, "stops", b, MAXD) == nd_ &&
           int_list(nd->attrs, "steps", c, MAXD) == nd_, "%s: 'starts', 'stops', 'steps' need %d entries", where, nd_);
      for (int d = 0; d < nd_; d++) {
        NEED(a[d] >= 0 && b[d] <= x->shape[d] && a[d] <= x->shape[d] && b[d] >= 0 && c[d] > 0,
             "%s: slice [%lld:%lld:%lld] is outside dim %d of size %lld", where, (long long)a[d], (long long)b[d],
             (long long)c[d], d, (long long)x->shape[d]);
        int64_t n = b[d] > a[d] ? (b[d] - a[d] + c[d] - 1) / c[d] : 0;
        NEED(o->shape[d] == n, "%s: dim %d should have %lld elements", where, d, (long long)n);
      }
      return 0;
    case OP_FLIP:
      for (int d = 0; d < nd_; d++) NEED(o->shape[d] == x->shape[d], "%s: flip keeps the shape", where);
      return 0;
    case OP_PAD: {
      const lj *pads = lj_get(nd->attrs, "pads");
      NEED(pads && pads->type == LJ_ARR && (int)pads->n == nd_, "%s: 'pads' needs %d pairs", where, nd_);
      for (int d = 0; d < nd_; d++) {
        const lj *pr = &pads->items[d];
        NEED(pr->type == LJ_ARR && pr->n == 2 && get_int(&pr->items[0], &a[d]) && get_int(&pr->items[1], &b[d]) &&
             a[d] >= 0 && b[d] >= 0 && o->shape[d] == x->shape[d] + a[d] + b[d], "%s: bad pads for dim %d", where, d);
      }
      return 0;
    }
    case OP_GATHER:
      NEED(y->ndim == nd_, "%s: index rank %d differs from the input's %d", where, y->ndim, nd_);
      NEED(get_int(lj_get(nd->attrs, "axis"), &a[0]) && a[0] >= 0 && a[0] < nd_, "%s: bad 'axis'", where);
      for (int d = 0; d < nd_; d++) {
        NEED(o->shape[d] == y->shape[d], "%s: shape must be the index's", where);
        NEED(d == a[0] || y->shape[d] <= x->shape[d], "%s: index dim %d (%lld) is larger than the input's (%lld)",
             where, d, (long long)y->shape[d], (long long)x->shape[d]);
      }
      return 0;
    case OP_MATMUL:
      NEED(nd_ >= 2 && y->ndim == nd_ && o->ndim == nd_ && x->dtype == y->dtype && o->dtype == x->dtype,
           "%s: operands must share rank (>= 2) and dtype", where);
      for (int d = 0; d < nd_ - 2; d++)
        NEED(x->shape[d] == y->shape[d] && o->shape[d] == x->shape[d], "%s: batch dims differ", where);
      NEED(x->shape[nd_ - 1] == y->shape[nd_ - 2] && o->shape[nd_ - 2] == x->shape[nd_ - 2] &&
           o->shape[nd_ - 1] == y->shape[nd_ - 1], "%s: [.., %lld, %lld] @ [.., %lld, %lld] shapes do not fit", where,
           (long long)x->shape[nd_ - 2], (long long)x->shape[nd_ - 1], (long long)y->shape[nd_ - 2],
           (long long)y->shape[nd_ - 1]);
      return 0;
    case OP_CONV2D: {
      int64_t st[2], pad[4], dil[2], g;
      NEED(nd_ == 4 && y->ndim == 4 && o->ndim == 4 && x->dtype == y->dtype && o->dtype == x->dtype,
           "%s: conv2d takes 4-d operands of one dtype", where);
      NEED(int_list(nd->attrs, "stride", st, 2) == 2 && int_list(nd->attrs, "padding", pad, 4) == 4 &&
           int_list(nd->attrs, "dilation", dil, 2) == 2 && get_int(lj_get(nd->attrs, "groups"), &g) && g >= 1 &&
           st[0] > 0 && st[1] > 0 && dil[0] > 0 && dil[1] > 0 && pad[0] >= 0 && pad[1] >= 0 && pad[2] >= 0 &&
           pad[3] >= 0, "%s: bad conv2d attrs", where);
      int64_t ho = (x->shape[2] + pad[0] + pad[1] - dil[0] * (y->shape[2] - 1) - 1) / st[0] + 1;
      int64_t wo = (x->shape[3] + pad[2] + pad[3] - dil[1] * (y->shape[3] - 1) - 1) / st[1] + 1;
      NEED(y->shape[1] * g == x->shape[1] && y->shape[0] % g == 0 && o->shape[0] == x->shape[0] &&
           o->shape[1] == y->shape[0] && o->shape[2] == ho && o->shape[3] == wo, "%s: shapes do not fit conv2d", where);
      return 0;
    }
    case OP_ARGSORT:
      NEED(o->dtype == DT_I64 && o->numel == x->numel && o->ndim == nd_, "%s: argsort gives int64 of its input's shape",
           where);
      for (int d = 0; d < nd_; d++) NEED(o->shape[d] == x->shape[d], "%s: argsort keeps the shape", where);
      return 0;
    case OP_SCATTER_ADD: {
      const val *src = &m->nodes[nd->in[2]].v;
      NEED(o->dtype == x->dtype && src->dtype == x->dtype && o->ndim == nd_ && y->ndim == nd_ && src->ndim == nd_,
           "%s: scatter_add takes base, index and src of one rank, base and src of one dtype", where);
      NEED(get_int(lj_get(nd->attrs, "axis"), &a[0]) && a[0] >= 0 && (a[0] < nd_ || nd_ == 0), "%s: bad 'axis'", where);
      for (int d = 0; d < nd_; d++)
        NEED(o->shape[d] == x->shape[d] && y->shape[d] <= src->shape[d] && (d == a[0] || y->shape[d] <= x->shape[d]),
             "%s: index dim %d (%lld) does not fit base (%lld) and src (%lld)", where, d, (long long)y->shape[d],
             (long long)x->shape[d], (long long)src->shape[d]);
      return 0;
    }
    case OP_DIV: case OP_FLOORDIV: case OP_MOD:
      NEED(y->dtype == x->dtype && o->dtype == x->dtype && y->numel == x->numel && o->numel == x->numel,
           "%s: %s takes two operands of one shape and dtype", where, OP_NAME[nd->op]);
      return 0;
    case OP_MAXPOOL:
      NEED(nd_ == 4 && o->ndim == 4 && o->dtype == DT_I64 && o->shape[0] == x->shape[0] && o->shape[1] == x->shape[1],
           "%s: max_pool2d_index maps (N, C, H, W) to int64 (N, C, Ho, Wo)", where);
      return 0;
    default:
      return 0;
  }
#undef NEED
}

static int load_nodes(loomrt_model *m, char *err) {
  const lj *g = m->graph, *fmt = lj_get(g, "format"), *ver = lj_get(g, "version"), *nodes = lj_get(g, "nodes");
  int64_t version;
  if (!fmt || fmt->type != LJ_STR || strcmp(fmt->s, "loom.graph") != 0)
    return set_err(err, "graph.json: not a loom graph (\"format\" must be \"loom.graph\")");
  if (!get_int(ver, &version)) return set_err(err, "graph.json: \"version\" must be an integer");
  if (version != 1)
    return set_err(err, "graph.json: format version %lld is not supported (libloomrt reads version 1)", (long long)version);
  if (!nodes || nodes->type != LJ_ARR) return set_err(err, "graph.json: \"nodes\" must be a list");
  m->nnodes = (int)nodes->n;
  m->nodes = calloc(nodes->n ? nodes->n : 1, sizeof(node));
  if (!m->nodes) return set_err(err, "out of memory");
  for (int k = 0; k < m->nnodes; k++) {
    const lj *jn = &nodes->items[k], *op = lj_get(jn, "op"), *ins = lj_get(jn, "inputs");
    node *nd = &m->nodes[k];
    char where[96];
    if (!get_int(lj_get(jn, "id"), &nd->id)) return set_err(err, "graph.json: node %d has no integer id", k);
    snprintf(where, sizeof where, "graph.json: node %lld", (long long)nd->id);
    if (!op || op->type != LJ_STR || !ins || ins->type != LJ_ARR) return set_err(err, "%s: needs \"op\" and \"inputs\"", where);
    nd->op = op_code(op->s);
    if (nd->op < 0)
      return set_err(err, "%s: op '%s' is not supported by libloomrt (it runs optimised inference graphs: fused "
                     "kernels, movement, gather, scatter_add, matmul, conv2d, max_pool2d_index, argsort, check, cast, "
                     "integer div/floordiv/mod, sources)", where, op->s);
    nd->attrs = lj_get(jn, "attrs");
    if (read_val(jn, &nd->v, err, where)) return -1;
    nd->nin = (int)ins->n;
    nd->in = calloc(ins->n ? ins->n : 1, sizeof(int));
    if (!nd->in) return set_err(err, "out of memory");
    for (int j = 0; j < nd->nin; j++) {
      int64_t id;
      if (!get_int(&ins->items[j], &id) || (nd->in[j] = find_node(m, k, id)) < 0)
        return set_err(err, "%s: input %d does not name an earlier node", where, j);
    }
    static const int arity[OP_COUNT] = {0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 2, 2, 2, 1, 1, 1, -1, 1, 3, 2, 2, 2};
    if (arity[nd->op] >= 0 && nd->nin != arity[nd->op])
      return set_err(err, "%s: %s takes %d inputs, got %d", where, OP_NAME[nd->op], arity[nd->op], nd->nin);
    if (validate(m, nd, err, where)) return -1;
    if (nd->op == OP_RESHAPE || nd->op == OP_CHECK) {
      nd->v.data = m->nodes[nd->in[0]].v.data;  /* Views of the same bytes. */
      continue;
    }
    if (alloc_val(&nd->v)) return set_err(err, "%s: out of memory for %zu bytes", where, nd->v.nbytes);
    if (nd->op == OP_BUFFER && decode_buffer(jn, &nd->v, err, nd->id)) return -1;
    if ((nd->op == OP_CONST || nd->op == OP_ARANGE) && fill_source(nd, err)) return -1;
  }
  return 0;
}

/* safetensors: u64 little-endian header length, a JSON header, then the raw little-endian data. */
static int load_weights(loomrt_model *m, const char *dir, const char *fname, const lj *roles, char *err) {
  char *path = join(dir, fname);
  size_t len;
  char *raw = path ? read_file(path, &len, err) : NULL;
  int rc = -1;
  lj *head = NULL;
  if (!raw) goto done;
  if (len < 8) { set_err(err, "%s: truncated (%zu bytes, a safetensors file starts with an 8-byte length)", path, len); goto done; }
  uint64_t hl = 0;
  for (int k = 7; k >= 0; k--) hl = hl << 8 | (unsigned char)raw[k];
  if (hl > len - 8) { set_err(err, "%s: truncated: the header says %llu bytes, the file has %zu after the length",
                              path, (unsigned long long)hl, len - 8); goto done; }
  char perr[256];
  head = lj_parse(raw + 8, (size_t)hl, perr, sizeof perr);
  if (!head || head->type != LJ_OBJ) { set_err(err, "%s: bad header: %s", path, head ? "not an object" : perr); goto done; }
  const char *data = raw + 8 + hl;
  size_t dlen = len - 8 - (size_t)hl;
  const lj *inputs = lj_get(m->graph, "inputs");
  for (size_t k = 0; k < roles->n; k++) {
    const lj *r = &roles->items[k], *kind = lj_get(r, "kind"), *key = lj_get(r, "key");
    if (!kind || kind->type != LJ_STR || strcmp(kind->s, "weight") != 0) continue;
    if (!key || key->type != LJ_STR) { set_err(err, "manifest.json: input %zu: a weight needs a \"key\"", k); goto done; }
    int64_t id;
    int ni = get_int(&inputs->items[k], &id) ? find_node(m, m->nnodes, id) : -1;
    val *v = &m->nodes[ni].v;
    const lj *t = lj_get(head, key->s);
    if (!t) { set_err(err, "%s: no tensor named '%s'", path, key->s); goto done; }
    const lj *dt = lj_get(t, "dtype"), *shape = lj_get(t, "shape"), *offs = lj_get(t, "data_offsets");
    int64_t b, e;
    if (!dt || dt->type != LJ_STR || strcmp(dt->s, DT_ST[v->dtype]) != 0) {
      set_err(err, "%s: tensor '%s' is %s, the graph needs %s", path, key->s, dt && dt->type == LJ_STR ? dt->s : "?",
              DT_ST[v->dtype]);
      goto done;
    }
    int same = shape && shape->type == LJ_ARR && (int)shape->n == v->ndim;
    for (int d = 0; same && d < v->ndim; d++) { int64_t s; same = get_int(&shape->items[d], &s) && s == v->shape[d]; }
    if (!same) { set_err(err, "%s: tensor '%s' does not have the graph's shape", path, key->s); goto done; }
    if (!offs || offs->type != LJ_ARR || offs->n != 2 || !get_int(&offs->items[0], &b) || !get_int(&offs->items[1], &e) ||
        b < 0 || e < b || (size_t)(e - b) != v->nbytes) {
      set_err(err, "%s: tensor '%s' has bad data_offsets", path, key->s);
      goto done;
    }
    if ((size_t)e > dlen) {
      set_err(err, "%s: truncated: tensor '%s' ends at byte %lld of the data, which holds %zu", path, key->s,
              (long long)e, dlen);
      goto done;
    }
    memcpy(v->data, data + b, v->nbytes);
  }
  rc = 0;
done:
  lj_free(head);
  free(raw);
  free(path);
  return rc;
}

static int load_kernels(loomrt_model *m, const char *dir, const lj *kernels, char *err) {
  if (!kernels || kernels->type != LJ_ARR) return set_err(err, "manifest.json: \"kernels\" must be a list");
  for (size_t k = 0; k < kernels->n; k++) {
    const lj *jk = &kernels->items[k], *lib = lj_get(jk, "library"), *meta = lj_get(jk, "meta"), *copies = lj_get(jk, "copies");
    int64_t id;
    int ni = get_int(lj_get(jk, "node"), &id) ? find_node(m, m->nnodes, id) : -1;
    if (ni < 0 || m->nodes[ni].op != OP_FUSED) return set_err(err, "manifest.json: kernel %zu does not name a fused node", k);
    if (!lib || lib->type != LJ_STR || !meta || meta->type != LJ_ARR || !copies || copies->type != LJ_ARR)
      return set_err(err, "manifest.json: kernel %zu needs \"library\", \"meta\" and \"copies\"", k);
    node *nd = &m->nodes[ni];
    kernel *kn = nd->k = calloc(1, sizeof(kernel));
    if (!kn) return set_err(err, "out of memory");
    char *path = join(dir, lib->s);
    kn->handle = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
    if (!kn->handle) {
      set_err(err, "kernel library %s cannot be loaded: %s (rebuild it with: python -m loom.jit "
              "--kernels %s)", path ? path : lib->s, dlerror(), dir);
      free(path);
      return -1;
    }
    free(path);
    kn->call = (loom_call_t)dlsym(kn->handle, "loom_call");
    if (!kn->call) return set_err(err, "kernel library %s has no entry point loom_call", lib->s);
    kn->meta = malloc((meta->n ? meta->n : 1) * sizeof(int64_t));
    if (!kn->meta) return set_err(err, "out of memory");
    for (size_t j = 0; j < meta->n; j++)
      if (!get_int(&meta->items[j], &kn->meta[j])) return set_err(err, "manifest.json: kernel %zu: bad meta", k);
    kn->ncopies = (int)copies->n;
    kn->copies = calloc(copies->n ? copies->n : 1, sizeof(copyspec));
    int nobj = 1 + nd->nin + kn->ncopies;
    kn->cells = calloc((size_t)nobj, sizeof(char *));
    kn->refs = calloc((size_t)nobj, sizeof(char *));
    if (!kn->copies || !kn->cells || !kn->refs) return set_err(err, "out of memory");
    if (meta->n < 4 || kn->meta[3] != nobj)
      return set_err(err, "manifest.json: kernel %zu: meta describes %lld objects, the node has %d", k,
                     (long long)(meta->n >= 4 ? kn->meta[3] : -1), nobj);
    for (int c = 0; c < kn->ncopies; c++) {
      const lj *jc = &copies->items[c], *steps = lj_get(jc, "steps");
      int64_t input;
      copyspec *cs = &kn->copies[c];
      if (!get_int(lj_get(jc, "input"), &input) || input < 0 || input >= nd->nin || !steps || steps->type != LJ_ARR)
        return set_err(err, "manifest.json: kernel %zu: bad copy %d", k, c);
      cs->input = (int)input;
      cs->nsteps = (int)steps->n;
      cs->steps = calloc(steps->n ? steps->n : 1, sizeof(step));
      if (!cs->steps) return set_err(err, "out of memory");
      for (int s = 0; s < cs->nsteps; s++) {
        const lj *js = &steps->items[s], *op = lj_get(js, "op");
        step *st = &cs->steps[s];
        st->op = op && op->type == LJ_STR ? op_code(op->s) : -1;
        if (st->op < OP_RESHAPE || st->op > OP_PAD) return set_err(err, "manifest.json: kernel %zu: bad copy step", k);
        st->attrs = lj_get(js, "attrs");
        if (read_val(js, &st->out, err, "manifest.json: copy step") || alloc_val(&st->out)) return -1;
      }
    }
  }
  for (int k = 0; k < m->nnodes; k++)
    if (m->nodes[k].op == OP_FUSED && !m->nodes[k].k)
      return set_err(err, "manifest.json: fused node %lld has no kernel", (long long)m->nodes[k].id);
  return 0;
}

static int run_static(loomrt_model *m, char *err);

loomrt_model *loomrt_load(const char *dir, char *err, size_t errlen) {
  char msg[ERRLEN] = "";
  loomrt_model *m = calloc(1, sizeof(loomrt_model));
  if (!m) { snprintf(err, errlen, "out of memory"); return NULL; }
  const char *env = getenv("LOOM_NUM_THREADS");
  m->nthreads = env && atoi(env) > 0 ? atoi(env) : 1;
#ifdef LOOMRT_BLAS
  scipy_openblas_set_num_threads((int)m->nthreads);
#endif
  const lj *fmt, *ver, *graph_name, *weights_name, *roles, *outs, *ins;
  int64_t version;
  m->manifest = parse_file(dir, "manifest.json", msg);
  if (!m->manifest) goto fail;
  fmt = lj_get(m->manifest, "format");
  ver = lj_get(m->manifest, "version");
  if (!fmt || fmt->type != LJ_STR || strcmp(fmt->s, "loom.dump") != 0) {
    set_err(msg, "%s/manifest.json: not a loom dump (\"format\" must be \"loom.dump\")", dir);
    goto fail;
  }
  if (!get_int(ver, &version) || version != 1) {
    set_err(msg, "%s/manifest.json: dump version %lld is not supported (libloomrt reads version 1)", dir,
            (long long)(get_int(ver, &version) ? version : -1));
    goto fail;
  }
  graph_name = lj_get(m->manifest, "graph");
  weights_name = lj_get(m->manifest, "weights");
  roles = lj_get(m->manifest, "inputs");
  if (!graph_name || graph_name->type != LJ_STR || !weights_name || weights_name->type != LJ_STR || !roles ||
      roles->type != LJ_ARR) {
    set_err(msg, "%s/manifest.json: needs \"graph\", \"weights\" and \"inputs\"", dir);
    goto fail;
  }
  m->graph = parse_file(dir, graph_name->s, msg);
  if (!m->graph) goto fail;
  if (load_nodes(m, msg)) {
    char inner[ERRLEN];
    snprintf(inner, sizeof inner, "%s", msg);
    set_err(msg, "%s/%s", dir, inner);  /* Its messages start with "graph.json: ". */
    goto fail;
  }
  ins = lj_get(m->graph, "inputs");
  outs = lj_get(m->graph, "outputs");
  if (!ins || ins->type != LJ_ARR || !outs || outs->type != LJ_ARR || ins->n != roles->n) {
    set_err(msg, "%s/%s: \"inputs\" and \"outputs\" must be lists, one manifest entry per input", dir, graph_name->s);
    goto fail;
  }
  m->user = calloc(ins->n + 1, sizeof(int));
  m->user_names = calloc(ins->n + 1, sizeof(char *));
  m->user_set = calloc(ins->n + 1, sizeof(int));
  m->out = calloc(outs->n + 1, sizeof(int));
  if (!m->user || !m->user_names || !m->user_set || !m->out) { set_err(msg, "out of memory"); goto fail; }
  for (size_t k = 0; k < ins->n; k++) {
    int64_t id;
    int ni = get_int(&ins->items[k], &id) ? find_node(m, m->nnodes, id) : -1;
    if (ni < 0 || m->nodes[ni].op != OP_INPUT) {
      set_err(msg, "%s/%s: inputs[%zu] is not an input node", dir, graph_name->s, k);
      goto fail;
    }
    const lj *kind = lj_get(&roles->items[k], "kind"), *name = lj_get(&roles->items[k], "name");
    if (!kind || kind->type != LJ_STR) { set_err(msg, "manifest.json: input %zu has no \"kind\"", k); goto fail; }
    if (strcmp(kind->s, "input") == 0) {
      m->user_names[m->nuser] = name && name->type == LJ_STR ? name->s : "";
      m->user[m->nuser++] = ni;
    } else if (strcmp(kind->s, "weight") != 0) {
      set_err(msg, "manifest.json: input %zu: kind '%s' (expected \"input\" or \"weight\")", k, kind->s);
      goto fail;
    }
  }
  for (size_t k = 0; k < outs->n; k++) {
    int64_t id;
    int ni = get_int(&outs->items[k], &id) ? find_node(m, m->nnodes, id) : -1;
    if (ni < 0) { set_err(msg, "%s/%s: outputs[%zu] names no node", dir, graph_name->s, k); goto fail; }
    m->out[m->nout++] = ni;
  }
  if (load_weights(m, dir, weights_name->s, roles, msg)) goto fail;
  if (load_kernels(m, dir, lj_get(m->manifest, "kernels"), msg)) goto fail;
  if (run_static(m, msg)) goto fail;
  return m;
fail:
  snprintf(err, errlen, "%s", msg);
  loomrt_free(m);
  return NULL;
}

void loomrt_free(loomrt_model *m) {
  if (!m) return;
  for (int k = 0; k < m->nnodes; k++) {
    node *nd = &m->nodes[k];
    if (nd->v.owns) free(nd->v.data);
    free(nd->in);
    if (nd->k) {
      for (int c = 0; c < nd->k->ncopies; c++) {
        for (int s = 0; s < nd->k->copies[c].nsteps; s++) free(nd->k->copies[c].steps[s].out.data);
        free(nd->k->copies[c].steps);
      }
      free(nd->k->copies);
      free(nd->k->meta);
      free(nd->k->cells);
      free(nd->k->refs);
      if (nd->k->handle) dlclose(nd->k->handle);
      free(nd->k);
    }
  }
  free(m->nodes);
  free(m->user);
  free(m->user_names);
  free(m->user_set);
  free(m->out);
  lj_free(m->graph);
  lj_free(m->manifest);
  free(m);
}

/* ---------------------------------------------------------------- running */

static int run_kernel(loomrt_model *m, node *nd) {
  kernel *kn = nd->k;
  int o = 0;
  kn->cells[o++] = nd->v.data;
  for (int j = 0; j < nd->nin; j++) kn->cells[o++] = m->nodes[nd->in[j]].v.data;
  for (int c = 0; c < kn->ncopies; c++) {
    const copyspec *cs = &kn->copies[c];
    const val *src = &m->nodes[nd->in[cs->input]].v;
    for (int s = 0; s < cs->nsteps; s++) {
      if (movement(cs->steps[s].op, cs->steps[s].attrs, src, &cs->steps[s].out, m->err)) return -1;
      src = &cs->steps[s].out;
    }
    kn->cells[o++] = src->data;
  }
  for (int j = 0; j < o; j++) kn->refs[j] = (const char *)&kn->cells[j];
  int32_t rc = kn->call((const char *)kn->refs, kn->meta, m->nthreads);
  if (rc != 0)
    return set_err(m->err, "fused node %lld: its kernel returned %d (%s)", (long long)nd->id, rc,
                   rc > 0 ? "an integer division by zero" : rc == -1 ? "output overlaps an input" : "misaligned data");
  return 0;
}

static int exec_node(loomrt_model *m, node *nd) {
  const val *a = nd->nin > 0 ? &m->nodes[nd->in[0]].v : NULL, *b = nd->nin > 1 ? &m->nodes[nd->in[1]].v : NULL;
  int rc = 0;
  switch (nd->op) {
    case OP_INPUT: case OP_BUFFER: case OP_CONST: case OP_ARANGE: case OP_RESHAPE: break;
    case OP_PERMUTE: case OP_EXPAND: case OP_SLICE: case OP_FLIP: case OP_PAD:
      rc = movement(nd->op, nd->attrs, a, &nd->v, m->err); break;
    case OP_GATHER: rc = gather(a, b, nd->attrs, &nd->v, m->err); break;
    case OP_MATMUL: rc = matmul(a, b, &nd->v, m->err); break;
    case OP_CONV2D: rc = conv2d(a, b, nd->attrs, &nd->v, m->err); break;
    case OP_MAXPOOL: rc = max_pool_index(a, nd->attrs, &nd->v, m->err); break;
    case OP_CHECK: rc = check(a, nd->attrs, &nd->v, m->err); break;
    case OP_CAST: rc = cast(a, &nd->v, m->err); break;
    case OP_FUSED: rc = run_kernel(m, nd); break;
    case OP_ARGSORT: rc = argsort(a, nd->attrs, &nd->v, m->err); break;
    case OP_DIV: case OP_FLOORDIV: case OP_MOD: rc = int_division(nd->op, a, b, &nd->v, m->err); break;
    case OP_SCATTER_ADD: rc = scatter_add(a, b, &m->nodes[nd->in[2]].v, nd->attrs, &nd->v, m->err); break;
    default: rc = set_err(m->err, "op %d cannot run", nd->op);
  }
  if (rc) {
    char inner[ERRLEN];
    snprintf(inner, sizeof inner, "%s", m->err);
    return set_err(m->err, "node %lld (%s): %s", (long long)nd->id, OP_NAME[nd->op], inner);
  }
  return 0;
}

/* Mark the nodes that depend only on weights and constants, and compute them (once, at load time). */
static int run_static(loomrt_model *m, char *err) {
  for (int k = 0; k < m->nnodes; k++) {
    node *nd = &m->nodes[k];
    if (nd->op == OP_INPUT) {
      nd->is_static = 1;
      for (int u = 0; u < m->nuser; u++) nd->is_static &= m->user[u] != k;
      continue;
    }
    nd->is_static = 1;
    for (int j = 0; j < nd->nin; j++) nd->is_static &= m->nodes[nd->in[j]].is_static;
    if (nd->is_static && nd->nin > 0 && exec_node(m, nd)) {
      snprintf(err, ERRLEN, "%s", m->err);
      return -1;
    }
  }
  return 0;
}

int loomrt_run(loomrt_model *m) {
  if (!m) return -1;
  m->err[0] = 0;
  for (int k = 0; k < m->nuser; k++)
    if (!m->user_set[k]) return set_err(m->err, "input %d ('%s') was not set (loomrt_set_input)", k, m->user_names[k]);
  for (int k = 0; k < m->nnodes; k++)
    if (!m->nodes[k].is_static && exec_node(m, &m->nodes[k])) return -1;
  return 0;
}

/* ---------------------------------------------------------------- the small API */

const char *loomrt_error(const loomrt_model *m) { return m ? m->err : "no model"; }
int loomrt_num_inputs(const loomrt_model *m) { return m ? m->nuser : 0; }
int loomrt_num_outputs(const loomrt_model *m) { return m ? m->nout : 0; }

static const val *in_val(const loomrt_model *m, int i) {
  return m && i >= 0 && i < m->nuser ? &m->nodes[m->user[i]].v : NULL;
}

static const val *out_val(const loomrt_model *m, int i) {
  return m && i >= 0 && i < m->nout ? &m->nodes[m->out[i]].v : NULL;
}

const char *loomrt_input_name(const loomrt_model *m, int i) { return in_val(m, i) ? m->user_names[i] : NULL; }
const char *loomrt_input_dtype(const loomrt_model *m, int i) { return in_val(m, i) ? DT_NAME[in_val(m, i)->dtype] : NULL; }
const char *loomrt_output_dtype(const loomrt_model *m, int i) { return out_val(m, i) ? DT_NAME[out_val(m, i)->dtype] : NULL; }
size_t loomrt_input_nbytes(const loomrt_model *m, int i) { return in_val(m, i) ? in_val(m, i)->nbytes : 0; }

const int64_t *loomrt_input_shape(const loomrt_model *m, int i, int *ndim) {
  const val *v = in_val(m, i);
  if (!v) return NULL;
  if (ndim) *ndim = v->ndim;
  return v->shape;
}

const int64_t *loomrt_output_shape(const loomrt_model *m, int i, int *ndim) {
  const val *v = out_val(m, i);
  if (!v) return NULL;
  if (ndim) *ndim = v->ndim;
  return v->shape;
}

int loomrt_set_input(loomrt_model *m, int i, const void *data, size_t nbytes) {
  if (!m) return -1;
  const val *v = in_val(m, i);
  if (!v) return set_err(m->err, "loomrt_set_input: input %d out of range (the graph takes %d)", i, m->nuser);
  if (nbytes != v->nbytes)
    return set_err(m->err, "loomrt_set_input: input %d ('%s') needs %zu bytes (%s, %lld elements), got %zu", i,
                   m->user_names[i], v->nbytes, DT_NAME[v->dtype], (long long)v->numel, nbytes);
  if (nbytes) memcpy(v->data, data, nbytes);
  m->user_set[i] = 1;
  return 0;
}

const void *loomrt_get_output(loomrt_model *m, int i, size_t *nbytes) {
  if (!m) return NULL;
  const val *v = out_val(m, i);
  if (!v) { set_err(m->err, "loomrt_get_output: output %d out of range (the graph has %d)", i, m->nout); return NULL; }
  if (nbytes) *nbytes = v->nbytes;
  return v->data;
}

void loomrt_set_num_threads(loomrt_model *m, int n) {
  if (!m) return;
  m->nthreads = n > 0 ? n : 1;
#ifdef LOOMRT_BLAS
  scipy_openblas_set_num_threads((int)m->nthreads);
#endif
}
