/* test_ir.c — symbolic dims, op schemas, inference and the structural hash, in C. */
#include <string.h>

#include "graph.h"
#include "unit.h"

static em_dim P(em_symtab *st, const char *s) {
  em_dim d;
  char err[EM_ERR_MAX];
  if (em_dim_parse(st, s, &d, err)) {
    fprintf(stderr, "    parse '%s': %s\n", s, err);
    return em_dim_const(-999);
  }
  return d;
}

static const char *F(em_symtab *st, em_dim d) {
  static char buf[4][128];
  static int k;
  k = (k + 1) % 4;
  return em_dim_format(st, &d, buf[k], 128);
}

TEST(dim_arith_canonical) {
  em_symtab st = {0};
  char err[EM_ERR_MAX];
  CHECK(em_symtab_add(&st, "s", 512, 1, 4096, err) == 0);
  CHECK(em_symtab_add(&st, "b", 2, 1, 64, err) == 1);
  CHECK(!strcmp(F(&st, P(&st, "s*16")), "16*s"));
  CHECK(!strcmp(F(&st, P(&st, "16*s + 4 - 4")), "16*s"));
  CHECK(!strcmp(F(&st, P(&st, "(s+1)*(s-1)")), "s*s-1"));
  CHECK(!strcmp(F(&st, P(&st, "b*s*2 + 3")), "2*s*b+3"));
  CHECK(!strcmp(F(&st, P(&st, "-s")), "-s"));
  em_dim a = P(&st, "2*s*b"), b = P(&st, "b*s*2");
  CHECK(em_dim_eq(&a, &b));
  int64_t c;
  em_dim z = P(&st, "s-s+7");
  CHECK(em_dim_is_const(&z, &c) && c == 7);
  em_dim q;
  em_dim m = P(&st, "2*s");
  CHECK(em_dim_divexact(&a, &m, &q) == 0 && !strcmp(F(&st, q), "b"));
  em_dim three = em_dim_const(3);
  CHECK(em_dim_divexact(&a, &three, &q) == -1);
  int64_t vals[EM_MAX_SYMS] = {7, 3};
  em_dim e = P(&st, "(s+1)*(s-1)");
  CHECK(em_dim_eval(&st, &e, vals) == 48);
}

TEST(dim_cdiv_derived_symbol) {
  em_symtab st = {0};
  char err[EM_ERR_MAX];
  em_symtab_add(&st, "s", 512, 1, 4096, err);
  em_dim s = em_dim_sym(0), out, out2;
  CHECK(em_dim_cdiv(&st, &s, 64, &out, err) == EM_OK);
  CHECK(st.n == 2 && st.s[1].derived);
  CHECK(em_dim_cdiv(&st, &s, 64, &out2, err) == EM_OK && st.n == 2 && em_dim_eq(&out, &out2)); /* reused */
  int64_t vals[EM_MAX_SYMS] = {65};
  CHECK(em_dim_eval(&st, &out, vals) == 2);
  vals[0] = 64;
  CHECK(em_dim_eval(&st, &out, vals) == 1);
  em_dim c = em_dim_const(130);
  CHECK(em_dim_cdiv(&st, &c, 64, &out, err) == EM_OK && em_dim_is_const(&out, NULL) && out.t[0].coef == 3);
}

TEST(dim_parse_errors) {
  em_symtab st = {0};
  char err[EM_ERR_MAX];
  em_symtab_add(&st, "s", 8, 1, 64, err);
  em_dim d;
  CHECK(em_dim_parse(&st, "n+1", &d, err) == EM_EINPUT && strstr(err, "unbound symbol 'n'"));
  CHECK(em_dim_parse(&st, "s+", &d, err) == EM_EINPUT);
  CHECK(em_dim_parse(&st, "s)", &d, err) == EM_EINPUT && strstr(err, "trailing"));
  CHECK(em_dim_parse(&st, "cdiv(s,0)", &d, err) == EM_EINPUT);
  CHECK(em_symtab_add(&st, "s", 8, 1, 64, err) < 0 && strstr(err, "twice"));
  CHECK(em_symtab_add(&st, "9x", 8, 1, 64, err) < 0);
  CHECK(em_symtab_add(&st, "t", 100, 1, 64, err) < 0 && strstr(err, "outside"));
  CHECK(em_symtab_add(&st, "u", 8, -5, 64, err) < 0 && strstr(err, "min -5 is negative"));
}

/* issue 21: "9223372036854775807*9223372036854775807" parsed as 1 (the product wrapped); every constant,
 * sum and product is checked, and a wrap is an error naming the expression. */
TEST(dim_overflow_is_an_error) {
  em_symtab st = {0};
  char err[EM_ERR_MAX];
  em_symtab_add(&st, "s", 8, 1, 64, err);
  em_dim d;
  const char *bad[] = {"9223372036854775807*9223372036854775807", "9223372036854775808", "99999999999999999999999",
                       "9223372036854775807+1", "-9223372036854775807-2", "4611686018427387904*2",
                       "3037000500*3037000500", "9223372036854775807*s+9223372036854775807*s",
                       "(s+1)*9223372036854775807*2", "-(-9223372036854775807-1)", "cdiv(9223372036854775807*2,3)"};
  for (int i = 0; i < (int)(sizeof bad / sizeof bad[0]); i++) {
    err[0] = 0;
    int rc = em_dim_parse(&st, bad[i], &d, err);
    CHECK(rc == EM_EINPUT && (strstr(err, "beyond 64 bits") != NULL));
    if (rc != EM_EINPUT) fprintf(stderr, "    '%s' parsed as %s\n", bad[i], F(&st, d));
  }
  /* the extremes that fit are kept exactly and printed without overflow */
  CHECK(!strcmp(F(&st, P(&st, "9223372036854775807")), "9223372036854775807"));
  CHECK(!strcmp(F(&st, P(&st, "-9223372036854775807")), "-9223372036854775807"));
  CHECK(em_dim_parse(&st, "-9223372036854775807-1", &d, err) == EM_EINPUT); /* -2^63 could not print back */
  CHECK(!strcmp(F(&st, P(&st, "3037000499*3037000499")), "9223372030926249001"));
  em_dim a = em_dim_const(INT64_MAX), b = em_dim_const(2), o;
  CHECK(em_dim_mul(&a, &b, &o) == EM_DIM_EOVERFLOW && em_dim_add(&a, &a, &o) == EM_DIM_EOVERFLOW);
  em_dim mn = em_dim_const(INT64_MIN), m1 = em_dim_const(-1);
  CHECK(em_dim_sub(&b, &mn, &o) == EM_DIM_EOVERFLOW && em_dim_divexact(&mn, &m1, &o) == EM_DIM_EOVERFLOW);
  CHECK(em_dim_cdiv(&st, &a, 2, &o, err) == EM_OK && o.t[0].coef == INT64_MAX / 2 + 1); /* no v + c - 1 */
  /* evaluation at a binding is checked: s^3 at s = 2^22 is 2^66 */
  em_dim cube = P(&st, "s*s*s"), x;
  int64_t vals[EM_MAX_SYMS] = {(int64_t)1 << 22}, v;
  CHECK(em_dim_eval_checked(&st, &cube, vals, &v) == EM_DIM_EOVERFLOW);
  vals[0] = 1 << 20;
  CHECK(em_dim_eval_checked(&st, &cube, vals, &v) == 0 && v == (int64_t)1 << 60);
  x = P(&st, "4*s*s*s+4*s*s*s");
  CHECK(em_dim_eval_checked(&st, &x, vals, &v) == EM_DIM_EOVERFLOW);
}

/* issue 21: 10,000 nested parentheses overflowed the C stack; nesting is bounded by EM_DIM_MAX_DEPTH. */
TEST(dim_parse_depth_limit) {
  em_symtab st = {0};
  char err[EM_ERR_MAX];
  em_symtab_add(&st, "s", 8, 1, 64, err);
  static char buf[90000]; /* 10,000 levels of "cdiv(" … ",1)" */
  em_dim d;
  const char *open[] = {"(", "-", "cdiv(", "-("};
  for (int k = 0; k < 4; k++) {
    for (int depth = EM_DIM_MAX_DEPTH - 2; depth <= 10000; depth = depth < 100 ? depth + 1 : depth * 10) {
      size_t o = 0, lo = strlen(open[k]);
      for (int i = 0; i < depth; i++, o += lo) memcpy(buf + o, open[k], lo);
      buf[o++] = 's';
      for (int i = 0; i < depth; i++) {
        if (k == 2) buf[o++] = ',', buf[o++] = '1';
        if (k != 1) buf[o++] = ')';
      }
      buf[o] = 0;
      em_status rc = em_dim_parse(&st, buf, &d, err);
      int deep = depth * (k == 3 ? 2 : 1) >= EM_DIM_MAX_DEPTH; /* "-(" opens two levels */
      CHECK(deep ? rc == EM_EINPUT && strstr(err, "nesting deeper than") != NULL && strlen(err) < 300 : rc == EM_OK);
    }
  }
}

TEST(op_schemas_parse) {
  for (int op = 0; op < EM_NOPS; op++) {
    const em_opspec *sp = em_op_spec((em_op)op);
    CHECK(sp->nargs >= 1);
    CHECK(!strncmp(sp->aten, "aten.", 5));
  }
  int add = em_op_find("aten.add.Tensor");
  CHECK(add == EM_OP_ADD);
  CHECK(em_op_argindex(EM_OP_ADD, "alpha") == 2);
  CHECK(em_op_spec(EM_OP_SDPA)->args[6].kind == EM_ARG_FLOATOPT);
  CHECK(em_op_find("aten.nope.default") == -1);
}

static void args_default(em_op op, em_arg *a) {
  const em_opspec *sp = em_op_spec(op);
  memset(a, 0, sizeof(em_arg) * EM_MAX_ARGS);
  for (int i = 0; i < sp->nargs; i++) em_arg_set_default(&sp->args[i], &a[i]);
}

static int add_in(em_graph *g, const char *name, em_dtype dt, int rank, const char **dims) {
  em_shape s = {rank};
  char err[EM_ERR_MAX];
  for (int i = 0; i < rank; i++) em_dim_parse(&g->syms, dims[i], &s.d[i], err);
  return em_graph_add_input(g, name, EM_V_INPUT, NULL, dt, &s, err);
}

TEST(infer_linear_and_errors) {
  em_graph *g = em_graph_new("t");
  char err[EM_ERR_MAX];
  em_symtab_add(&g->syms, "s", 8, 1, 64, err);
  int x = add_in(g, "x", EM_BF16, 3, (const char *[]){"1", "s", "32"});
  int w = add_in(g, "w", EM_BF16, 2, (const char *[]){"48", "32"});
  int wbad = add_in(g, "wbad", EM_BF16, 2, (const char *[]){"48", "31"});
  em_arg a[EM_MAX_ARGS];
  args_default(EM_OP_LINEAR, a);
  a[0].present = 1, a[0].tensor = x;
  a[1].present = 1, a[1].tensor = w;
  int y = em_graph_add_node(g, EM_OP_LINEAR, a, "y", NULL, NULL, err);
  CHECK(y >= 0);
  char buf[128];
  CHECK(!strcmp(em_shape_format(&g->syms, &g->values.v[y].shape, buf, sizeof buf), "[1, s, 48]"));
  args_default(EM_OP_LINEAR, a);
  a[0].present = 1, a[0].tensor = x;
  a[1].present = 1, a[1].tensor = wbad;
  CHECK(em_graph_add_node(g, EM_OP_LINEAR, a, "z", NULL, NULL, err) < 0);
  CHECK(strstr(err, "node 'z' (aten.linear.default): input [1, s, 32] has last dim 32 but weight [48, 31] expects 31") != NULL);
  em_graph_free(g);
}

TEST(infer_promotion) {
  em_graph *g = em_graph_new("t");
  int xb = add_in(g, "xb", EM_BF16, 1, (const char *[]){"4"});
  int xf = add_in(g, "xf", EM_F32, 1, (const char *[]){"4"});
  int xi = add_in(g, "xi", EM_I64, 1, (const char *[]){"4"});
  char err[EM_ERR_MAX];
  em_arg a[EM_MAX_ARGS];
  args_default(EM_OP_ADD, a);
  a[0].present = 1, a[0].tensor = xb;
  a[1].present = 1, a[1].is_tensor = 1, a[1].tensor = xf;
  int v = em_graph_add_node(g, EM_OP_ADD, a, NULL, NULL, NULL, err);
  CHECK(g->values.v[v].dtype == EM_F32);
  args_default(EM_OP_MUL, a);
  a[0].present = 1, a[0].tensor = xi;
  a[1].present = 1, a[1].is_float = 1, a[1].f = 2.0;
  v = em_graph_add_node(g, EM_OP_MUL, a, NULL, NULL, NULL, err);
  CHECK(g->values.v[v].dtype == EM_F32);
  args_default(EM_OP_MUL, a);
  a[0].present = 1, a[0].tensor = xb;
  a[1].present = 1, a[1].is_float = 1, a[1].f = 0.5;
  v = em_graph_add_node(g, EM_OP_MUL, a, NULL, NULL, NULL, err);
  CHECK(g->values.v[v].dtype == EM_BF16);
  args_default(EM_OP_DIV, a);
  a[0].present = 1, a[0].tensor = xi;
  a[1].present = 1, a[1].is_tensor = 1, a[1].tensor = xi;
  v = em_graph_add_node(g, EM_OP_DIV, a, NULL, NULL, NULL, err);
  CHECK(g->values.v[v].dtype == EM_F32);
  em_graph_free(g);
}

static uint64_t small_graph_hash(const char *xname, int64_t hint, int interleave) {
  em_graph *g = em_graph_new(xname);
  char err[EM_ERR_MAX];
  em_symtab_add(&g->syms, xname, hint, 1, 64, err);
  em_shape s = {2};
  s.d[0] = em_dim_sym(0);
  s.d[1] = em_dim_const(8);
  int x = em_graph_add_input(g, xname, EM_V_INPUT, NULL, EM_F32, &s, err);
  em_arg a[EM_MAX_ARGS];
  args_default(EM_OP_NEG, a);
  a[0].present = 1, a[0].tensor = x;
  int n = -1, y;
  if (interleave) n = em_graph_add_node(g, EM_OP_NEG, a, "n", NULL, NULL, err);
  y = em_graph_add_input(g, "y", EM_V_INPUT, NULL, EM_F32, &s, err);
  if (!interleave) n = em_graph_add_node(g, EM_OP_NEG, a, "n", NULL, NULL, err);
  args_default(EM_OP_ADD, a);
  a[0].present = 1, a[0].tensor = n;
  a[1].present = 1, a[1].is_tensor = 1, a[1].tensor = y;
  em_graph_add_output(g, em_graph_add_node(g, EM_OP_ADD, a, NULL, "mod", NULL, err), err);
  uint64_t h = em_graph_hash(g);
  em_graph_free(g);
  return h;
}

TEST(hash_invariants) {
  uint64_t h = small_graph_hash("s", 8, 0);
  CHECK(small_graph_hash("seq", 9, 0) == h); /* names and hints excluded */
  CHECK(small_graph_hash("s", 8, 1) == h);    /* declaration interleaving excluded */
  CHECK(h != EM_FNV_SEED); /* the golden value of a full graph lives in tests/lua/test_ir.lua */
}

/* issue 21: an input of [2147483648]*3 compiled to a kernel whose total was 0 (the element count wrapped).
 * Shapes whose element count or byte size passes 63 bits are refused where they enter the graph. */
TEST(shape_overflow_refused) {
  em_graph *g = em_graph_new("t");
  char err[EM_ERR_MAX];
  em_symtab_add(&g->syms, "s", 8, 1, (int64_t)1 << 40, err);
  em_shape sh = {3};
  for (int i = 0; i < 3; i++) sh.d[i] = em_dim_const((int64_t)1 << 31);
  CHECK(em_graph_add_input(g, "x", EM_V_INPUT, NULL, EM_F32, &sh, err) < 0 &&
        strstr(err, "input 'x': shape [2147483648, 2147483648, 2147483648] has more than 2^63-1 elements"));
  sh.rank = 2; /* 2^62 elements fit; their 2^65 bytes as f64 do not */
  CHECK(em_graph_add_input(g, "x", EM_V_INPUT, NULL, EM_F64, &sh, err) < 0 && strstr(err, "more than 2^63-1 bytes"));
  sh.rank = 1;
  sh.d[0] = em_dim_const(-3);
  CHECK(em_graph_add_input(g, "x", EM_V_INPUT, NULL, EM_F32, &sh, err) < 0 && strstr(err, "negative size"));
  /* a node whose result passes 63 bits: expand [1] to [2^62, 8] */
  int one = add_in(g, "one", EM_F32, 1, (const char *[]){"1"});
  em_arg a[EM_MAX_ARGS];
  args_default(EM_OP_EXPAND, a);
  a[0].present = 1, a[0].tensor = one;
  a[1].present = 1, a[1].n = 2, a[1].ilist = em_alloc(2 * sizeof(em_dim));
  a[1].ilist[0] = em_dim_const((int64_t)1 << 62), a[1].ilist[1] = em_dim_const(8);
  CHECK(em_graph_add_node(g, EM_OP_EXPAND, a, "big", NULL, NULL, err) < 0 && strstr(err, "node 'big'") &&
        strstr(err, "more than 2^63-1 elements"));
  /* symbolic shapes are checked at each binding: [s, s, s] f32 is fine at s = 1024, not at s = 2^21 */
  int x = add_in(g, "cube", EM_F32, 3, (const char *[]){"s", "s", "s"});
  CHECK(x >= 0);
  int64_t vals[EM_MAX_SYMS] = {1024};
  CHECK(em_graph_check_binding(g, vals, err) == EM_OK);
  vals[0] = (int64_t)1 << 21;
  CHECK(em_graph_check_binding(g, vals, err) == EM_EINPUT &&
        strstr(err, "at s=2097152, value 'cube' [s, s, s] is more than 2^63-1 bytes"));
  em_graph_free(g);
}

/* issue 21: a 40,000-node chain took 26 s to load (each name lookup scanned every value). */
TEST(graph_find_is_indexed) {
  em_graph *g = em_graph_new("chain");
  char err[EM_ERR_MAX], name[32];
  int prev = add_in(g, "x", EM_F32, 1, (const char *[]){"4"});
  for (int i = 0; i < 20000; i++) {
    em_arg a[EM_MAX_ARGS];
    args_default(EM_OP_NEG, a);
    a[0].present = 1, a[0].tensor = prev;
    snprintf(name, sizeof name, "v%d", i);
    prev = em_graph_add_node(g, EM_OP_NEG, a, name, NULL, NULL, err);
  }
  CHECK(prev == 20000 && em_graph_find(g, "v19999") == 20000 && em_graph_find(g, "x") == 0);
  CHECK(em_graph_find(g, "v20000") == -1 && em_graph_find(g, "") == -1);
  em_arg a[EM_MAX_ARGS];
  args_default(EM_OP_NEG, a);
  a[0].present = 1, a[0].tensor = prev;
  CHECK(em_graph_add_node(g, EM_OP_NEG, a, "v123", NULL, NULL, err) < 0 && strstr(err, "used twice"));
  em_graph_free(g);
}
