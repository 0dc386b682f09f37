/* A small strict JSON (RFC 8259) reader: integers stay 64-bit, nesting is bounded, errors carry offsets. */
#include "loomrt_json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LJ_MAX_DEPTH 200

typedef struct {
  const char *p, *end, *start;
  char *err;
  size_t errlen;
  int failed;
} parser;

static void fail(parser *ps, const char *what) {
  if (!ps->failed) snprintf(ps->err, ps->errlen, "JSON error at byte %ld: %s", (long)(ps->p - ps->start), what);
  ps->failed = 1;
}

static void skip_ws(parser *ps) {
  while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')) ps->p++;
}

static int parse_value(parser *ps, lj *out, int depth);

static int hex4(parser *ps, unsigned *cp) {
  if (ps->end - ps->p < 4) { fail(ps, "truncated \\u escape"); return 0; }
  unsigned v = 0;
  for (int k = 0; k < 4; k++) {
    char c = ps->p[k];
    v <<= 4;
    if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
    else { fail(ps, "bad \\u escape"); return 0; }
  }
  ps->p += 4;
  *cp = v;
  return 1;
}

static char *parse_string(parser *ps) {
  /* ps->p is at the opening quote. The decoded text is never longer than the encoded one. */
  const char *q = ++ps->p;
  size_t cap = 0;
  while (q < ps->end && *q != '"') { if (*q == '\\') q++; q++; cap++; }
  if (q >= ps->end) { fail(ps, "unterminated string"); return NULL; }
  char *s = malloc((size_t)(q - ps->p) + 1), *o = s;
  if (!s) { fail(ps, "out of memory"); return NULL; }
  while (ps->p < ps->end && *ps->p != '"') {
    unsigned char c = (unsigned char)*ps->p++;
    if (c < 0x20) { fail(ps, "control character in string"); free(s); return NULL; }
    if (c != '\\') { *o++ = (char)c; continue; }
    if (ps->p >= ps->end) break;
    char e = *ps->p++;
    switch (e) {
      case '"': *o++ = '"'; break;
      case '\\': *o++ = '\\'; break;
      case '/': *o++ = '/'; break;
      case 'b': *o++ = '\b'; break;
      case 'f': *o++ = '\f'; break;
      case 'n': *o++ = '\n'; break;
      case 'r': *o++ = '\r'; break;
      case 't': *o++ = '\t'; break;
      case 'u': {
        unsigned cp;
        if (!hex4(ps, &cp)) { free(s); return NULL; }
        if (cp >= 0xD800 && cp < 0xDC00 && ps->end - ps->p >= 6 && ps->p[0] == '\\' && ps->p[1] == 'u') {
          unsigned lo;
          ps->p += 2;
          if (!hex4(ps, &lo)) { free(s); return NULL; }
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
        if (cp < 0x80) *o++ = (char)cp;
        else if (cp < 0x800) { *o++ = (char)(0xC0 | (cp >> 6)); *o++ = (char)(0x80 | (cp & 63)); }
        else if (cp < 0x10000) {
          *o++ = (char)(0xE0 | (cp >> 12)); *o++ = (char)(0x80 | ((cp >> 6) & 63)); *o++ = (char)(0x80 | (cp & 63));
        } else {
          *o++ = (char)(0xF0 | (cp >> 18)); *o++ = (char)(0x80 | ((cp >> 12) & 63));
          *o++ = (char)(0x80 | ((cp >> 6) & 63)); *o++ = (char)(0x80 | (cp & 63));
        }
        break;
      }
      default: fail(ps, "bad escape in string"); free(s); return NULL;
    }
  }
  (void)cap;
  if (ps->p >= ps->end) { fail(ps, "unterminated string"); free(s); return NULL; }
  ps->p++;
  *o = 0;
  return s;
}

static int parse_number(parser *ps, lj *out) {
  const char *b = ps->p;
  int is_float = 0;
  if (ps->p < ps->end && *ps->p == '-') ps->p++;
  if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') { fail(ps, "bad number"); return 0; }
  while (ps->p < ps->end && ((*ps->p >= '0' && *ps->p <= '9') || *ps->p == '.' || *ps->p == 'e' || *ps->p == 'E'
                             || *ps->p == '+' || *ps->p == '-')) {
    if (*ps->p == '.' || *ps->p == 'e' || *ps->p == 'E') is_float = 1;
    ps->p++;
  }
  char buf[64];
  size_t n = (size_t)(ps->p - b);
  if (n >= sizeof buf) { fail(ps, "number too long"); return 0; }
  memcpy(buf, b, n);
  buf[n] = 0;
  char *endp;
  errno = 0;
  if (is_float) {
    out->type = LJ_FLOAT;
    out->f = strtod(buf, &endp);
  } else {
    out->type = LJ_INT;
    out->i = strtoll(buf, &endp, 10);
    if (errno == ERANGE && buf[0] != '-') {
      errno = 0;
      out->u = strtoull(buf, &endp, 10);
      out->is_uint = 1;
    }
    out->f = out->is_uint ? (double)out->u : (double)out->i;
  }
  if (*endp != 0 || errno == ERANGE) { fail(ps, "bad number"); return 0; }
  return 1;
}

static int parse_container(parser *ps, lj *out, int depth, int obj) {
  char close = obj ? '}' : ']';
  size_t cap = 4;
  ps->p++;
  out->type = obj ? LJ_OBJ : LJ_ARR;
  out->items = calloc(cap, sizeof(lj));
  if (obj) out->keys = calloc(cap, sizeof(char *));
  if (!out->items || (obj && !out->keys)) { fail(ps, "out of memory"); return 0; }
  skip_ws(ps);
  if (ps->p < ps->end && *ps->p == close) { ps->p++; return 1; }
  for (;;) {
    if (out->n == cap) {
      cap *= 2;
      lj *it = realloc(out->items, cap * sizeof(lj));
      if (!it) { fail(ps, "out of memory"); return 0; }
      out->items = it;
      memset(out->items + out->n, 0, (cap - out->n) * sizeof(lj));
      if (obj) {
        char **ks = realloc(out->keys, cap * sizeof(char *));
        if (!ks) { fail(ps, "out of memory"); return 0; }
        out->keys = ks;
      }
    }
    skip_ws(ps);
    if (obj) {
      if (ps->p >= ps->end || *ps->p != '"') { fail(ps, "expected a string key"); return 0; }
      char *k = parse_string(ps);
      if (!k) return 0;
      out->keys[out->n] = k;
      skip_ws(ps);
      if (ps->p >= ps->end || *ps->p != ':') { out->n++; out->items[out->n - 1].type = LJ_NULL; fail(ps, "expected ':'"); return 0; }
      ps->p++;
    }
    out->n++;
    if (!parse_value(ps, &out->items[out->n - 1], depth + 1)) return 0;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == ',') { ps->p++; continue; }
    if (ps->p < ps->end && *ps->p == close) { ps->p++; return 1; }
    fail(ps, obj ? "expected ',' or '}'" : "expected ',' or ']'");
    return 0;
  }
}

static int parse_value(parser *ps, lj *out, int depth) {
  if (depth > LJ_MAX_DEPTH) { fail(ps, "nesting too deep"); return 0; }
  skip_ws(ps);
  if (ps->p >= ps->end) { fail(ps, "unexpected end of document"); return 0; }
  char c = *ps->p;
  if (c == '{' || c == '[') return parse_container(ps, out, depth, c == '{');
  if (c == '"') {
    out->type = LJ_STR;
    out->s = parse_string(ps);
    return out->s != NULL;
  }
  if (c == '-' || (c >= '0' && c <= '9')) return parse_number(ps, out);
  static const struct { const char *word; int type; int val; } words[] = {
    {"true", LJ_BOOL, 1}, {"false", LJ_BOOL, 0}, {"null", LJ_NULL, 0}};
  for (int k = 0; k < 3; k++) {
    size_t n = strlen(words[k].word);
    if ((size_t)(ps->end - ps->p) >= n && memcmp(ps->p, words[k].word, n) == 0) {
      out->type = words[k].type;
      out->i = words[k].val;
      ps->p += n;
      return 1;
    }
  }
  fail(ps, "unexpected character");
  return 0;
}

static void free_inner(lj *v) {
  if (v->type == LJ_STR) free(v->s);
  if (v->type == LJ_ARR || v->type == LJ_OBJ) {
    for (size_t k = 0; k < v->n; k++) {
      free_inner(&v->items[k]);
      if (v->keys) free(v->keys[k]);
    }
    free(v->items);
    free(v->keys);
  }
}

void lj_free(lj *v) {
  if (!v) return;
  free_inner(v);
  free(v);
}

lj *lj_parse(const char *text, size_t len, char *err, size_t errlen) {
  parser ps = {text, text + len, text, err, errlen, 0};
  lj *v = calloc(1, sizeof(lj));
  if (!v) { snprintf(err, errlen, "out of memory"); return NULL; }
  if (parse_value(&ps, v, 0)) {
    skip_ws(&ps);
    if (ps.p != ps.end) fail(&ps, "trailing characters after the document");
  }
  if (ps.failed) { lj_free(v); return NULL; }
  return v;
}

const lj *lj_get(const lj *obj, const char *key) {
  if (!obj || obj->type != LJ_OBJ) return NULL;
  for (size_t k = 0; k < obj->n; k++)
    if (strcmp(obj->keys[k], key) == 0) return &obj->items[k];
  return NULL;
}

double lj_num(const lj *v) {
  if (!v) return 0;
  if (v->type == LJ_INT || v->type == LJ_FLOAT) return v->f;
  if (v->type == LJ_BOOL) return (double)v->i;
  return 0;
}
