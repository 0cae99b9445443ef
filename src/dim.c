/* dim.c — canonical integer polynomials for symbolic dims: arithmetic, parsing, printing, evaluation. */
#include "dim.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int term_degree(const em_term *t) {
  int d = 0;
  for (int i = 0; i < EM_MAX_SYMS; i++) d += t->pow[i];
  return d;
}

/* Order: higher degree first, then by powers of lower-numbered symbols; the constant term last. */
static int term_cmp(const void *pa, const void *pb) {
  const em_term *a = pa, *b = pb;
  int da = term_degree(a), db = term_degree(b);
  if (da != db) return db - da;
  for (int i = 0; i < EM_MAX_SYMS; i++)
    if (a->pow[i] != b->pow[i]) return (int)b->pow[i] - (int)a->pow[i];
  return 0;
}

static int same_mono(const em_term *a, const em_term *b) { return !memcmp(a->pow, b->pow, EM_MAX_SYMS); }

const char *em_dim_strerror(int rc) {
  return rc == EM_DIM_EOVERFLOW ? "a value beyond 64 bits" : "too many terms";
}

/* Merges like terms, drops zeros and sorts; in is a scratch list of up to cap terms. */
static int norm_terms(em_term *in, int n, em_dim *out) {
  qsort(in, (size_t)n, sizeof *in, term_cmp);
  em_dim d;
  memset(&d, 0, sizeof d);
  for (int i = 0; i < n;) {
    em_term acc = in[i];
    int j = i + 1;
    while (j < n && same_mono(&in[j], &acc))
      if (__builtin_add_overflow(acc.coef, in[j++].coef, &acc.coef)) return EM_DIM_EOVERFLOW;
    /* coefficients are kept in [-(2^63-1), 2^63-1]: every one can be negated and printed as a literal
     * that parses back (2^63 itself is not a literal) */
    if (acc.coef == INT64_MIN) return EM_DIM_EOVERFLOW;
    if (acc.coef != 0) {
      if (d.n == EM_MAX_TERMS) return EM_DIM_ETERMS;
      d.t[d.n++] = acc;
    }
    i = j;
  }
  *out = d;
  return 0;
}

em_dim em_dim_const(int64_t c) {
  em_dim d;
  memset(&d, 0, sizeof d);
  if (c) {
    d.n = 1;
    d.t[0].coef = c;
  }
  return d;
}

em_dim em_dim_sym(int i) {
  em_dim d = em_dim_const(1);
  d.t[0].pow[i] = 1;
  return d;
}

int em_dim_is_const(const em_dim *d, int64_t *c) {
  if (d->n == 0) {
    if (c) *c = 0;
    return 1;
  }
  if (d->n == 1 && term_degree(&d->t[0]) == 0) {
    if (c) *c = d->t[0].coef;
    return 1;
  }
  return 0;
}

int em_dim_eq(const em_dim *a, const em_dim *b) {
  if (a->n != b->n) return 0;
  for (int i = 0; i < a->n; i++)
    if (a->t[i].coef != b->t[i].coef || !same_mono(&a->t[i], &b->t[i])) return 0;
  return 1;
}

static int add_scaled(const em_dim *a, const em_dim *b, int64_t sb, em_dim *out) {
  em_term buf[2 * EM_MAX_TERMS];
  int n = 0;
  for (int i = 0; i < a->n; i++) buf[n++] = a->t[i];
  for (int i = 0; i < b->n; i++) {
    buf[n] = b->t[i];
    if (__builtin_mul_overflow(b->t[i].coef, sb, &buf[n].coef)) return EM_DIM_EOVERFLOW;
    n++;
  }
  return norm_terms(buf, n, out);
}

int em_dim_add(const em_dim *a, const em_dim *b, em_dim *out) { return add_scaled(a, b, 1, out); }
int em_dim_sub(const em_dim *a, const em_dim *b, em_dim *out) { return add_scaled(a, b, -1, out); }

int em_dim_mul(const em_dim *a, const em_dim *b, em_dim *out) {
  em_term buf[EM_MAX_TERMS * EM_MAX_TERMS];
  int n = 0;
  for (int i = 0; i < a->n; i++)
    for (int j = 0; j < b->n; j++) {
      em_term t;
      if (__builtin_mul_overflow(a->t[i].coef, b->t[j].coef, &t.coef)) return EM_DIM_EOVERFLOW;
      for (int k = 0; k < EM_MAX_SYMS; k++) {
        int p = a->t[i].pow[k] + b->t[j].pow[k];
        if (p > 255) return EM_DIM_ETERMS;
        t.pow[k] = (uint8_t)p;
      }
      buf[n++] = t;
    }
  return norm_terms(buf, n, out);
}

int em_dim_divexact(const em_dim *a, const em_dim *b, em_dim *out) {
  if (b->n != 1 || b->t[0].coef == 0) return -1;
  const em_term *m = &b->t[0];
  em_term buf[EM_MAX_TERMS];
  for (int i = 0; i < a->n; i++) {
    if (m->coef == -1 && a->t[i].coef == INT64_MIN) return EM_DIM_EOVERFLOW; /* the one quotient beyond 64 bits */
    if (a->t[i].coef % m->coef) return -1;
    buf[i].coef = a->t[i].coef / m->coef;
    for (int k = 0; k < EM_MAX_SYMS; k++) {
      if (a->t[i].pow[k] < m->pow[k]) return -1;
      buf[i].pow[k] = (uint8_t)(a->t[i].pow[k] - m->pow[k]);
    }
  }
  return norm_terms(buf, a->n, out);
}

em_status em_dim_cdiv(em_symtab *st, const em_dim *a, int64_t c, em_dim *out, char *err) {
  if (c <= 0) return em_fail(err, EM_EINPUT, "ceil-division by %lld", (long long)c);
  int64_t v;
  if (em_dim_is_const(a, &v)) {
    /* ceil without forming v + c - 1, which can pass INT64_MAX */
    int64_t q = v / c;
    if (v % c > 0) q++;
    *out = em_dim_const(q);
    return EM_OK;
  }
  em_dim cd = em_dim_const(c);
  if (em_dim_divexact(a, &cd, out) == 0) return EM_OK;
  for (int i = 0; i < st->n; i++)
    if (st->s[i].derived && st->s[i].den == c && em_dim_eq(&st->s[i].num, a)) {
      *out = em_dim_sym(i);
      return EM_OK;
    }
  if (st->n == EM_MAX_SYMS) return em_fail(err, EM_EINPUT, "more than %d symbols", EM_MAX_SYMS);
  em_sym *s = &st->s[st->n];
  memset(s, 0, sizeof *s);
  char tmp[EM_SYM_NAME_MAX * 2];
  em_dim_format(st, a, tmp, sizeof tmp);
  snprintf(s->name, sizeof s->name, "cdiv(%s,%lld)", tmp, (long long)c);
  s->hint = -1;
  s->min = 0;
  s->max = INT64_MAX;
  s->derived = 1;
  s->num = *a;
  s->den = c;
  *out = em_dim_sym(st->n++);
  return EM_OK;
}

/* Checked b^e. */
static int ipow_checked(int64_t b, int e, int64_t *out) {
  int64_t r = 1;
  while (e-- > 0)
    if (__builtin_mul_overflow(r, b, &r)) return EM_DIM_EOVERFLOW;
  *out = r;
  return 0;
}

int em_dim_eval_checked(const em_symtab *st, const em_dim *d, const int64_t *vals, int64_t *out) {
  int64_t sum = 0;
  for (int i = 0; i < d->n; i++) {
    int64_t t = d->t[i].coef;
    for (int k = 0; k < EM_MAX_SYMS; k++) {
      if (!d->t[i].pow[k]) continue;
      int64_t v = vals[k], p;
      if (st && k < st->n && st->s[k].derived) {
        int64_t num;
        if (em_dim_eval_checked(st, &st->s[k].num, vals, &num)) return EM_DIM_EOVERFLOW;
        v = num / st->s[k].den;
        if (num % st->s[k].den > 0) v++;
      }
      if (ipow_checked(v, d->t[i].pow[k], &p) || __builtin_mul_overflow(t, p, &t)) return EM_DIM_EOVERFLOW;
    }
    if (__builtin_add_overflow(sum, t, &sum)) return EM_DIM_EOVERFLOW;
  }
  *out = sum;
  return 0;
}

/* Unsigned arithmetic: wraps where the checked form would refuse, never undefined. */
int64_t em_dim_eval(const em_symtab *st, const em_dim *d, const int64_t *vals) {
  uint64_t sum = 0;
  for (int i = 0; i < d->n; i++) {
    uint64_t t = (uint64_t)d->t[i].coef;
    for (int k = 0; k < EM_MAX_SYMS; k++) {
      if (!d->t[i].pow[k]) continue;
      int64_t v = vals[k];
      if (st && k < st->n && st->s[k].derived) {
        int64_t num = em_dim_eval(st, &st->s[k].num, vals);
        v = num / st->s[k].den;
        if (num % st->s[k].den > 0) v++;
      }
      for (int p = 0; p < d->t[i].pow[k]; p++) t *= (uint64_t)v;
    }
    sum += t;
  }
  return (int64_t)sum;
}

char *em_dim_format(const em_symtab *st, const em_dim *d, char *buf, int n) {
  int o = 0;
  buf[0] = 0;
  if (d->n == 0) {
    snprintf(buf, (size_t)n, "0");
    return buf;
  }
  for (int i = 0; i < d->n && o < n; i++) {
    const em_term *t = &d->t[i];
    int64_t c = t->coef;
    int deg = term_degree(t);
    if (i > 0) o += snprintf(buf + o, (size_t)(n - o), c < 0 ? "-" : "+");
    else if (c < 0) o += snprintf(buf + o, (size_t)(n - o), "-");
    uint64_t ac = c < 0 ? 0 - (uint64_t)c : (uint64_t)c; /* INT64_MIN has no signed magnitude */
    int first = 1;
    if (ac != 1 || deg == 0) {
      o += snprintf(buf + o, (size_t)(n - o), "%llu", (unsigned long long)ac);
      first = 0;
    }
    for (int k = 0; k < EM_MAX_SYMS && o < n; k++)
      for (int p = 0; p < t->pow[k] && o < n; p++) {
        const char *nm = st && k < st->n ? st->s[k].name : "?";
        o += snprintf(buf + o, (size_t)(n - o), "%s", first ? "" : "*");
        first = 0;
        if (o < n && st && k < st->n && st->s[k].derived) {
          /* from its definition, not its name: the name is cut at EM_SYM_NAME_MAX, the text must parse back */
          o += snprintf(buf + o, (size_t)(n - o), "cdiv(");
          if (o < n) em_dim_format(st, &st->s[k].num, buf + o, n - o);
          if (o < n) o += (int)strlen(buf + o);
          if (o < n) o += snprintf(buf + o, (size_t)(n - o), ",%lld)", (long long)st->s[k].den);
        } else if (o < n) {
          o += snprintf(buf + o, (size_t)(n - o), "%s", nm);
        }
      }
  }
  return buf;
}

uint64_t em_dim_hash(uint64_t h, const em_dim *d) {
  h = em_fnv1a(h, &d->n, sizeof d->n);
  for (int i = 0; i < d->n; i++) {
    h = em_fnv1a(h, &d->t[i].coef, sizeof d->t[i].coef);
    h = em_fnv1a(h, d->t[i].pow, EM_MAX_SYMS);
  }
  return h;
}

int em_symtab_find(const em_symtab *st, const char *name) {
  for (int i = 0; i < st->n; i++)
    if (!strcmp(st->s[i].name, name)) return i;
  return -1;
}

int em_symtab_add(em_symtab *st, const char *name, int64_t hint, int64_t min, int64_t max, char *err) {
  size_t len = strlen(name);
  if (len == 0 || len >= EM_SYM_NAME_MAX || !(isalpha((unsigned char)name[0]) || name[0] == '_')) {
    em_fail(err, EM_EINPUT, "symbol name '%s' must be an identifier of at most %d characters", name,
            EM_SYM_NAME_MAX - 1);
    return -1;
  }
  for (size_t i = 0; i < len; i++)
    if (!isalnum((unsigned char)name[i]) && name[i] != '_') {
      em_fail(err, EM_EINPUT, "symbol name '%s' must be an identifier", name);
      return -1;
    }
  if (em_symtab_find(st, name) >= 0) {
    em_fail(err, EM_EINPUT, "symbol '%s' is declared twice", name);
    return -1;
  }
  if (st->n == EM_MAX_SYMS) {
    em_fail(err, EM_EINPUT, "more than %d symbols", EM_MAX_SYMS);
    return -1;
  }
  if (min < 0) {
    em_fail(err, EM_EINPUT, "symbol '%s': min %lld is negative (a size is at least 0)", name, (long long)min);
    return -1;
  }
  if (min > max || (hint >= 0 && (hint < min || hint > max))) {
    em_fail(err, EM_EINPUT, "symbol '%s': hint %lld outside [min %lld, max %lld]", name, (long long)hint,
            (long long)min, (long long)max);
    return -1;
  }
  em_sym *s = &st->s[st->n];
  memset(s, 0, sizeof *s);
  memcpy(s->name, name, len + 1);
  s->hint = hint;
  s->min = min;
  s->max = max;
  return st->n++;
}

/* ---- parser: expr := term (('+'|'-') term)* ; term := factor ('*' factor)* ;
 *      factor := INT | NAME | '-' factor | '(' expr ')' | 'cdiv(' expr ',' INT ')' */

typedef struct {
  em_symtab *st;
  const char *s, *p;
  char *err;
  em_status rc;
  int depth; /* open parentheses, cdiv calls and unary minus signs around the current factor */
} parser;

static void skipws(parser *ps) {
  while (*ps->p == ' ') ps->p++;
}

static int perr(parser *ps, const char *what) {
  if (ps->rc == EM_OK) {
    /* the expression is quoted up to 64 bytes: a line, not a page */
    size_t len = strlen(ps->s);
    ps->rc = em_fail(ps->err, EM_EINPUT, "dim expression '%.64s%s': %s at offset %d", ps->s, len > 64 ? "…" : "", what,
                     (int)(ps->p - ps->s));
  }
  return -1;
}

/* Reports a nonzero arithmetic result of the dim functions. */
static int parith(parser *ps, int rc) {
  return perr(ps, rc == EM_DIM_EOVERFLOW ? "a value beyond 64 bits (sizes must fit a signed 64-bit integer)"
                                         : "too many terms");
}

static int parse_expr(parser *ps, em_dim *out);

static int parse_factor_at(parser *ps, em_dim *out);

/* Every recursion of the grammar passes here, so the C stack is bounded by EM_DIM_MAX_DEPTH frames. */
static int parse_factor(parser *ps, em_dim *out) {
  if (ps->depth >= EM_DIM_MAX_DEPTH) {
    char m[96];
    snprintf(m, sizeof m, "nesting deeper than %d levels", EM_DIM_MAX_DEPTH);
    return perr(ps, m);
  }
  ps->depth++;
  int rc = parse_factor_at(ps, out);
  ps->depth--;
  return rc;
}

static int parse_factor_at(parser *ps, em_dim *out) {
  skipws(ps);
  const char *p = ps->p;
  if (*p == '-') {
    ps->p++;
    em_dim f, m1 = em_dim_const(-1);
    if (parse_factor(ps, &f)) return -1;
    int rc = em_dim_mul(&f, &m1, out);
    return rc ? parith(ps, rc) : 0;
  }
  if (*p == '(') {
    ps->p++;
    if (parse_expr(ps, out)) return -1;
    skipws(ps);
    if (*ps->p != ')') return perr(ps, "expected ')'");
    ps->p++;
    return 0;
  }
  if (isdigit((unsigned char)*p)) {
    int64_t v = 0;
    for (; isdigit((unsigned char)*ps->p); ps->p++)
      if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, *ps->p - '0', &v)) {
        ps->p = p;
        return perr(ps, "an integer beyond 64 bits (at most 9223372036854775807)");
      }
    *out = em_dim_const(v);
    return 0;
  }
  if (isalpha((unsigned char)*p) || *p == '_') {
    const char *q = p;
    while (isalnum((unsigned char)*q) || *q == '_') q++;
    char name[EM_SYM_NAME_MAX];
    if (q - p >= EM_SYM_NAME_MAX) return perr(ps, "name too long");
    memcpy(name, p, (size_t)(q - p));
    name[q - p] = 0;
    ps->p = q;
    if (!strcmp(name, "cdiv")) {
      skipws(ps);
      if (*ps->p != '(') return perr(ps, "expected '(' after cdiv");
      ps->p++;
      em_dim a;
      if (parse_expr(ps, &a)) return -1;
      skipws(ps);
      if (*ps->p != ',') return perr(ps, "expected ',' in cdiv");
      ps->p++;
      em_dim c;
      if (parse_expr(ps, &c)) return -1;
      int64_t cv;
      if (!em_dim_is_const(&c, &cv) || cv <= 0) return perr(ps, "cdiv divisor must be a positive integer");
      skipws(ps);
      if (*ps->p != ')') return perr(ps, "expected ')'");
      ps->p++;
      char e2[EM_ERR_MAX];
      if (em_dim_cdiv(ps->st, &a, cv, out, e2)) return perr(ps, e2);
      return 0;
    }
    int i = em_symtab_find(ps->st, name);
    if (i < 0) {
      char m[EM_ERR_MAX];
      snprintf(m, sizeof m, "unbound symbol '%s' (declare it under \"symbols\")", name);
      ps->p = p;
      return perr(ps, m);
    }
    *out = em_dim_sym(i);
    return 0;
  }
  return perr(ps, *p ? "unexpected character" : "unexpected end");
}

static int parse_term(parser *ps, em_dim *out) {
  if (parse_factor(ps, out)) return -1;
  for (;;) {
    skipws(ps);
    if (*ps->p != '*') return 0;
    ps->p++;
    em_dim f;
    if (parse_factor(ps, &f)) return -1;
    int rc = em_dim_mul(out, &f, out);
    if (rc) return parith(ps, rc);
  }
}

static int parse_expr(parser *ps, em_dim *out) {
  if (parse_term(ps, out)) return -1;
  for (;;) {
    skipws(ps);
    char c = *ps->p;
    if (c != '+' && c != '-') return 0;
    ps->p++;
    em_dim t;
    if (parse_term(ps, &t)) return -1;
    int rc = c == '+' ? em_dim_add(out, &t, out) : em_dim_sub(out, &t, out);
    if (rc) return parith(ps, rc);
  }
}

em_status em_dim_parse(em_symtab *st, const char *s, em_dim *out, char *err) {
  parser ps = {st, s, s, err, EM_OK, 0};
  if (parse_expr(&ps, out)) return ps.rc;
  skipws(&ps);
  if (*ps.p) {
    perr(&ps, "trailing text");
    return ps.rc;
  }
  return EM_OK;
}
