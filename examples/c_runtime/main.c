/* Run a loom dump from C: load it, feed .npy inputs, print the outputs (and optionally save them as .npy).

   Build (one line, see README.md):  python -m loom.jit --out build/loomrt --example examples/c_runtime/main.c
   Run:                              build/loomrt/loomrt_run DUMP_DIR input0.npy [input1.npy ...] [--out DIR]
                                     [--repeat N]  (time N more runs, print the median)

   Exit status: 0 on success, 1 on any error (the message goes to stderr). */
#include <loomrt.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const struct { const char *dtype, *descr; } DESCR[] = {
  {"float32", "<f4"}, {"float64", "<f8"}, {"int64", "<i8"}, {"int32", "<i4"}, {"int16", "<i2"},
  {"int8", "|i1"}, {"uint8", "|u1"}, {"bool", "|b1"}, {"float16", "<f2"}, {"bfloat16", "<u2"}};

static const char *descr_of(const char *dtype) {
  for (size_t k = 0; k < sizeof DESCR / sizeof DESCR[0]; k++)
    if (strcmp(DESCR[k].dtype, dtype) == 0) return DESCR[k].descr;
  return NULL;
}

/* Read a C-order .npy file; returns its data (malloc'd) and fills descr, shape, ndim, nbytes. */
static char *read_npy(const char *path, char *descr, int64_t *shape, int *ndim, size_t *nbytes, char *err) {
  FILE *f = fopen(path, "rb");
  if (!f) { snprintf(err, 512, "cannot open %s", path); return NULL; }
  unsigned char head[10];
  char *text = NULL, *data = NULL;
  if (fread(head, 1, 10, f) != 10 || memcmp(head, "\x93NUMPY", 6) != 0) {
    snprintf(err, 512, "%s is not a .npy file", path);
    goto out;
  }
  size_t hl = head[6] == 1 ? (size_t)(head[8] | head[9] << 8) : 0;
  if (head[6] != 1) {
    unsigned char more[2];
    if (fread(more, 1, 2, f) != 2) { snprintf(err, 512, "%s: truncated header", path); goto out; }
    hl = (size_t)head[8] | (size_t)head[9] << 8 | (size_t)more[0] << 16 | (size_t)more[1] << 24;
  }
  text = calloc(1, hl + 1);
  if (!text || fread(text, 1, hl, f) != hl) { snprintf(err, 512, "%s: truncated header", path); goto out; }
  char *d = strstr(text, "'descr'"), *fo = strstr(text, "'fortran_order'"), *sh = strstr(text, "'shape'");
  if (!d || !fo || !sh || sscanf(d, "'descr': '%7[^']'", descr) != 1) {
    snprintf(err, 512, "%s: unreadable header %s", path, text);
    goto out;
  }
  if (strstr(fo, "True")) { snprintf(err, 512, "%s: Fortran-order arrays are not supported", path); goto out; }
  char *p = strchr(sh, '(');
  *ndim = 0;
  size_t count = 1;
  while (p && *p && *p != ')') {
    p++;
    while (*p == ' ') p++;
    if (*p == ')') break;
    shape[*ndim] = strtoll(p, &p, 10);
    count *= (size_t)shape[(*ndim)++];
    while (*p == ' ') p++;
    if (*p != ',' && *p != ')') { snprintf(err, 512, "%s: bad shape in header", path); goto out; }
    if (*ndim >= 16) break;
  }
  size_t item = (size_t)atoi(descr + 2);
  *nbytes = count * item;
  data = malloc(*nbytes ? *nbytes : 1);
  if (!data || fread(data, 1, *nbytes, f) != *nbytes) {
    snprintf(err, 512, "%s: truncated data (expected %zu bytes)", path, *nbytes);
    free(data);
    data = NULL;
  }
out:
  free(text);
  fclose(f);
  return data;
}

static int write_npy(const char *path, const char *descr, const int64_t *shape, int ndim, const void *data, size_t n) {
  char dict[512], shp[256] = "";
  size_t at = 0;
  for (int d = 0; d < ndim; d++) at += (size_t)snprintf(shp + at, sizeof shp - at, "%lld,%s", (long long)shape[d], ndim > 1 && d < ndim - 1 ? " " : "");
  if (ndim > 1) shp[at - 1] = 0;  /* No trailing comma except for rank 1. */
  int len = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, shp);
  int pad = 64 - (10 + len + 1) % 64;
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  unsigned short hl = (unsigned short)(len + pad + 1);
  fwrite("\x93NUMPY\x01\x00", 1, 8, f);
  fputc(hl & 255, f);
  fputc(hl >> 8, f);
  fwrite(dict, 1, (size_t)len, f);
  for (int k = 0; k < pad; k++) fputc(' ', f);
  fputc('\n', f);
  fwrite(data, 1, n, f);
  return fclose(f);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static void print_output(const loomrt_model *m, int k, const void *data) {
  int nd;
  const int64_t *shape = loomrt_output_shape(m, k, &nd);
  const char *dtype = loomrt_output_dtype(m, k);
  int64_t n = 1;
  printf("output %d: %s[", k, dtype);
  for (int d = 0; d < nd; d++) { printf(d ? ", %lld" : "%lld", (long long)shape[d]); n *= shape[d]; }
  printf("]");
  for (int64_t i = 0; i < n && i < 8; i++) {
    if (strcmp(dtype, "float32") == 0) printf(" %.6g", ((const float *)data)[i]);
    else if (strcmp(dtype, "float64") == 0) printf(" %.9g", ((const double *)data)[i]);
    else if (strcmp(dtype, "int64") == 0) printf(" %lld", (long long)((const int64_t *)data)[i]);
    else if (strcmp(dtype, "int32") == 0) printf(" %d", ((const int32_t *)data)[i]);
  }
  printf(n > 8 ? " ...\n" : "\n");
}

int main(int argc, char **argv) {
  const char *dump = NULL, *outdir = NULL, *inputs[64];
  int ninputs = 0, repeat = 0;
  for (int k = 1; k < argc; k++) {
    if (strcmp(argv[k], "--out") == 0 && k + 1 < argc) outdir = argv[++k];
    else if (strcmp(argv[k], "--repeat") == 0 && k + 1 < argc) repeat = atoi(argv[++k]);
    else if (!dump) dump = argv[k];
    else if (ninputs < 64) inputs[ninputs++] = argv[k];
  }
  if (!dump) {
    fprintf(stderr, "usage: %s DUMP_DIR input0.npy [input1.npy ...] [--out DIR] [--repeat N]\n", argv[0]);
    return 1;
  }
  char err[1024];
  loomrt_model *m = loomrt_load(dump, err, sizeof err);
  if (!m) { fprintf(stderr, "error: %s\n", err); return 1; }
  int status = 1;
  if (ninputs != loomrt_num_inputs(m)) {
    fprintf(stderr, "error: the dump takes %d input(s), got %d:", loomrt_num_inputs(m), ninputs);
    for (int k = 0; k < loomrt_num_inputs(m); k++) {
      int nd;
      const int64_t *s = loomrt_input_shape(m, k, &nd);
      fprintf(stderr, " %s (%s, rank %d, first dim %lld)", loomrt_input_name(m, k), loomrt_input_dtype(m, k), nd,
              (long long)(nd ? s[0] : 0));
    }
    fprintf(stderr, "\n");
    goto done;
  }
  for (int k = 0; k < ninputs; k++) {
    char descr[8] = "";
    int64_t shape[16];
    int nd;
    size_t nbytes;
    char *data = read_npy(inputs[k], descr, shape, &nd, &nbytes, err);
    if (!data) { fprintf(stderr, "error: %s\n", err); goto done; }
    const char *want = descr_of(loomrt_input_dtype(m, k));
    if (!want || strcmp(want, descr) != 0) {
      fprintf(stderr, "error: %s holds '%s', input %d ('%s') is %s\n", inputs[k], descr, k, loomrt_input_name(m, k),
              loomrt_input_dtype(m, k));
      free(data);
      goto done;
    }
    int rc = loomrt_set_input(m, k, data, nbytes);
    free(data);
    if (rc) { fprintf(stderr, "error: %s\n", loomrt_error(m)); goto done; }
  }
  if (loomrt_run(m)) { fprintf(stderr, "error: %s\n", loomrt_error(m)); goto done; }
  if (repeat > 0) {
    double *us = malloc(sizeof(double) * (size_t)repeat);
    if (!us) goto done;
    for (int r = 0; r < repeat; r++) {
      double t0 = now_us();
      int rc = loomrt_run(m);
      us[r] = now_us() - t0;
      if (rc) { fprintf(stderr, "error: %s\n", loomrt_error(m)); free(us); goto done; }
    }
    qsort(us, (size_t)repeat, sizeof(double), cmp_double);
    printf("runs: %d, median %.1f us, min %.1f us\n", repeat, us[repeat / 2], us[0]);
    free(us);
  }
  for (int k = 0; k < loomrt_num_outputs(m); k++) {
    size_t n;
    const void *data = loomrt_get_output(m, k, &n);
    if (!data) { fprintf(stderr, "error: %s\n", loomrt_error(m)); goto done; }
    print_output(m, k, data);
    if (outdir) {
      char path[4096];
      int nd;
      const int64_t *shape = loomrt_output_shape(m, k, &nd);
      snprintf(path, sizeof path, "%s/output%d.npy", outdir, k);
      if (write_npy(path, descr_of(loomrt_output_dtype(m, k)), shape, nd, data, n)) {
        fprintf(stderr, "error: cannot write %s\n", path);
        goto done;
      }
    }
  }
  status = 0;
done:
  loomrt_free(m);
  return status;
}
