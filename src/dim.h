/* dim.h — symbolic dimensions: exact integer polynomials over a graph's symbols (seq_len, batch, …).
 * A dim is a canonical sum of monomials, so equal expressions compare equal bytewise after em_dim_norm, and
 * a constant dim is one term of degree zero. Ceil-division that does not divide exactly becomes a derived
 * symbol of the symbol table, which keeps every dim a polynomial. */
#ifndef EM_DIM_H
#define EM_DIM_H

#include <stdint.h>

#include "base.h"

#define EM_MAX_SYMS 8
#define EM_MAX_TERMS 6
#define EM_SYM_NAME_MAX 48

typedef struct {
  int64_t coef;
  uint8_t pow[EM_MAX_SYMS];
} em_term;

typedef struct {
  int32_t n; /* number of terms; 0 is the constant 0 */
  em_term t[EM_MAX_TERMS];
} em_dim;

typedef struct {
  char name[EM_SYM_NAME_MAX];
  int64_t hint, min, max; /* hint < 0: none */
  int derived;            /* 1: value is ceil(num / den) */
  em_dim num;
  int64_t den;
} em_sym;

typedef struct {
  int n;
  em_sym s[EM_MAX_SYMS];
} em_symtab;

em_dim em_dim_const(int64_t c);
em_dim em_dim_sym(int i);
/* Returns 1 and sets *c when d has no symbols. */
int em_dim_is_const(const em_dim *d, int64_t *c);
int em_dim_eq(const em_dim *a, const em_dim *b);
/* Arithmetic results: 0, or one of these (the caller reports it with the node it was inferring). Every
 * coefficient is checked and kept within ±(2^63-1): a result beyond is an error, never a wrapped value. */
#define EM_DIM_ETERMS (-1)    /* more than EM_MAX_TERMS terms, or a power over 255 */
#define EM_DIM_EOVERFLOW (-2) /* a coefficient or value beyond 64 bits */
/* "too many terms" / "a value beyond 64 bits" for a nonzero result of the arithmetic below. */
const char *em_dim_strerror(int rc);
/* Nesting depth of parentheses, cdiv and unary minus that em_dim_parse accepts. */
#define EM_DIM_MAX_DEPTH 64
/* A symbol value that is not given (em_ref_bind then takes the hint). */
#define EM_SYM_UNBOUND INT64_MIN

int em_dim_add(const em_dim *a, const em_dim *b, em_dim *out);
int em_dim_sub(const em_dim *a, const em_dim *b, em_dim *out);
int em_dim_mul(const em_dim *a, const em_dim *b, em_dim *out);
/* a / b when b is a single monomial dividing every term of a exactly; else -1 (EM_DIM_ETERMS). */
int em_dim_divexact(const em_dim *a, const em_dim *b, em_dim *out);
/* ceil(a / c), c > 0: a constant or an exact division when possible, else a derived symbol added to st. */
em_status em_dim_cdiv(em_symtab *st, const em_dim *a, int64_t c, em_dim *out, char *err);

/* Evaluates d with vals[i] the value of symbol i (derived symbols are computed from the others). Wraps on
 * overflow without undefined behaviour: callers evaluate dims at a binding that em_dim_eval_checked (through
 * em_graph_check_binding) has accepted. */
int64_t em_dim_eval(const em_symtab *st, const em_dim *d, const int64_t *vals);
/* As em_dim_eval with every step checked: 0 and *out, or EM_DIM_EOVERFLOW. */
int em_dim_eval_checked(const em_symtab *st, const em_dim *d, const int64_t *vals, int64_t *out);
/* Writes the canonical text form ("16*seq_len+1", "cdiv(seq_len,64)"); returns buf. */
char *em_dim_format(const em_symtab *st, const em_dim *d, char *buf, int n);
/* Parses INT, NAME, + - *, parentheses and cdiv(expr,INT); names must be in st. Constants and every
 * intermediate result must fit 64 bits, and nesting is at most EM_DIM_MAX_DEPTH deep. */
em_status em_dim_parse(em_symtab *st, const char *s, em_dim *out, char *err);
/* Folds the dim into a structural hash (symbols by index, so names and hints never matter). */
uint64_t em_dim_hash(uint64_t h, const em_dim *d);

int em_symtab_find(const em_symtab *st, const char *name);
/* Adds a user symbol; hint < 0 means none; returns its index or -1 with err filled. */
int em_symtab_add(em_symtab *st, const char *name, int64_t hint, int64_t min, int64_t max, char *err);

#endif
