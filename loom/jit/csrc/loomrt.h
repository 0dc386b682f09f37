/* libloomrt: run a graph dumped by `loom.jit.save` without Python.

   A dump is a directory holding manifest.json, graph.json (the loom.graph
   format, docs/graph-format.md), weights.safetensors and kernels/ (the
   generated C of every fused kernel and its compiled shared object).

   Every function reports failure by its return value (NULL or -1) and a
   message: loomrt_load writes it into the caller's buffer, the others keep
   it in the model (loomrt_error). Nothing aborts the process. */
#ifndef LOOMRT_H
#define LOOMRT_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct loomrt_model loomrt_model;

/* Load the dump in directory `dir`; NULL on failure with the reason in err[0..errlen). */
loomrt_model *loomrt_load(const char *dir, char *err, size_t errlen);
void loomrt_free(loomrt_model *m);
/* The last error message of `m` ("" if none). */
const char *loomrt_error(const loomrt_model *m);

/* The graph's user inputs (the weights are loaded from the dump) and its outputs. */
int loomrt_num_inputs(const loomrt_model *m);
int loomrt_num_outputs(const loomrt_model *m);
const char *loomrt_input_name(const loomrt_model *m, int i);
/* dtype names as in the graph format: "float32", "int64", ... */
const char *loomrt_input_dtype(const loomrt_model *m, int i);
const char *loomrt_output_dtype(const loomrt_model *m, int i);
/* The shape; *ndim receives the rank. NULL for an index out of range. */
const int64_t *loomrt_input_shape(const loomrt_model *m, int i, int *ndim);
const int64_t *loomrt_output_shape(const loomrt_model *m, int i, int *ndim);
size_t loomrt_input_nbytes(const loomrt_model *m, int i);

/* Copy `nbytes` bytes (row-major, little-endian, the input's dtype and shape) into input `i`; 0 or -1. */
int loomrt_set_input(loomrt_model *m, int i, const void *data, size_t nbytes);
/* Run the graph on the inputs set; 0 or -1. */
int loomrt_run(loomrt_model *m);
/* Output `i` of the last run (row-major); *nbytes receives its size. NULL on error. Valid until the next run. */
const void *loomrt_get_output(loomrt_model *m, int i, size_t *nbytes);

/* Threads handed to the generated kernels (default: $LOOM_NUM_THREADS, else 1). */
void loomrt_set_num_threads(loomrt_model *m, int n);

#ifdef __cplusplus
}
#endif
#endif
