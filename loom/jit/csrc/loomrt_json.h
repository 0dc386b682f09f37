/* A small strict JSON reader for libloomrt: a document becomes a tree of `lj` values. */
#ifndef LOOMRT_JSON_H
#define LOOMRT_JSON_H
#include <stddef.h>
#include <stdint.h>

enum { LJ_NULL, LJ_BOOL, LJ_INT, LJ_FLOAT, LJ_STR, LJ_ARR, LJ_OBJ };

typedef struct lj {
  int type;
  int is_uint;          /* LJ_INT above INT64_MAX: the value is in u. */
  int64_t i;
  uint64_t u;
  double f;
  char *s;              /* LJ_STR: NUL-terminated UTF-8. */
  size_t n;             /* LJ_ARR / LJ_OBJ: number of items. */
  struct lj *items;     /* LJ_ARR / LJ_OBJ values. */
  char **keys;          /* LJ_OBJ keys. */
} lj;

/* Parse `text` (length `len`); NULL on error with a message (and byte offset) in err. */
lj *lj_parse(const char *text, size_t len, char *err, size_t errlen);
void lj_free(lj *v);
/* The member `key` of an object, or NULL. */
const lj *lj_get(const lj *obj, const char *key);
/* A number as double (ints converted); 0 for other types. */
double lj_num(const lj *v);
#endif
