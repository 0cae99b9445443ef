/* ops.c — parses the schema strings of the op table once, into em_opspec records. */
#include "ops.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
  const char *aten, *schema;
} op_src[] = {
#define X(e, n, s) {n, s},
    EM_OPS(X)
#undef X
};

static em_opspec specs[EM_NOPS];
static pthread_once_t specs_once = PTHREAD_ONCE_INIT;

static const struct {
  const char *tok;
  em_argkind kind;
} kinds[] = {
    {"T", EM_ARG_T},           {"T?", EM_ARG_TOPT},        {"T[]", EM_ARG_TLIST},
    {"TS", EM_ARG_TS},         {"i", EM_ARG_INT},          {"i?", EM_ARG_INTOPT},
    {"i[]", EM_ARG_INTLIST},   {"i[]?", EM_ARG_INTLISTOPT}, {"f", EM_ARG_FLOAT},
    {"f?", EM_ARG_FLOATOPT},   {"b", EM_ARG_BOOL},         {"s", EM_ARG_SCALAR},
    {"d?", EM_ARG_DTYPEOPT},
};

const char *em_argkind_name(em_argkind k) {
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
    if (kinds[i].kind == k) return kinds[i].tok;
  return "?";
}

/* The table is compiled in, so a malformed schema is a programming error: abort loudly. */
static void build_specs(void) {
  for (int op = 0; op < EM_NOPS; op++) {
    em_opspec *sp = &specs[op];
    sp->aten = op_src[op].aten;
    sp->schema = op_src[op].schema;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", sp->schema);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
      while (*tok == ' ') tok++;
      char kind[8], rest[64];
      if (sscanf(tok, "%7s %63s", kind, rest) != 2 || sp->nargs == EM_MAX_ARGS) {
        fprintf(stderr, "emmy: internal: bad schema for %s: '%s'\n", sp->aten, sp->schema);
        abort();
      }
      em_argspec *a = &sp->args[sp->nargs++];
      size_t kl = strlen(kind);
      if (kl > 1 && kind[kl - 1] == '+') a->ext = 1, kind[kl - 1] = 0;
      int found = 0;
      for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        if (!strcmp(kinds[k].tok, kind)) {
          a->kind = kinds[k].kind;
          found = 1;
        }
      if (!found) {
        fprintf(stderr, "emmy: internal: bad arg kind '%s' in %s\n", kind, sp->aten);
        abort();
      }
      char *eq = strchr(rest, '=');
      if (eq) {
        *eq = 0;
        a->has_default = 1;
        if (strlen(eq + 1) >= sizeof a->def) abort();
        memcpy(a->def, eq + 1, strlen(eq + 1) + 1);
      }
      if (strlen(rest) >= sizeof a->name) {
        fprintf(stderr, "emmy: internal: arg name too long in %s\n", sp->aten);
        abort();
      }
      memcpy(a->name, rest, strlen(rest) + 1);
    }
  }
}

const em_opspec *em_op_spec(em_op op) {
  pthread_once(&specs_once, build_specs);
  return (unsigned)op < EM_NOPS ? &specs[op] : NULL;
}

int em_op_find(const char *aten) {
  for (int i = 0; i < EM_NOPS; i++)
    if (!strcmp(op_src[i].aten, aten)) return i;
  return -1;
}

const char *em_op_name(em_op op) { return (unsigned)op < EM_NOPS ? op_src[op].aten : "?"; }

int em_op_argindex(em_op op, const char *name) {
  const em_opspec *sp = em_op_spec(op);
  for (int i = 0; i < sp->nargs; i++)
    if (!strcmp(sp->args[i].name, name)) return i;
  return -1;
}
