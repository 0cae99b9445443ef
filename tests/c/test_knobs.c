/* test_knobs.c — the knob table (knobs.h) and the knob assignment of the tile IR (emit.h): the table is well
 * formed, names and values outside it are errors, and an assignment holds every knob of the table. */
#include <stdlib.h>
#include <string.h>

#include "emit.h"
#include "unit.h"

/* 1 when s is "I,I,…" or "I..I" (decimal integers, a range low to high). */
static int values_well_formed(const char *s) {
  char *end;
  long long lo = strtoll(s, &end, 10);
  if (end == s) return 0;
  if (end[0] == '.' && end[1] == '.') {
    const char *p = end + 2;
    long long hi = strtoll(p, &end, 10);
    return end != p && *end == 0 && hi > lo;
  }
  while (*end == ',') {
    const char *p = end + 1;
    long long x = strtoll(p, &end, 10);
    if (end == p || x <= lo) return 0; /* ascending */
    lo = x;
  }
  return *end == 0;
}

TEST(knobs_table_is_well_formed) {
  CHECK(EM_NKNOBS > 24); /* more than the old fixed limit of an assignment */
  for (int i = 0; i < EM_NKNOBS; i++) {
    const em_knob_info *k = &em_knob_table[i];
    CHECK(k->name && k->name[0] && k->family && k->family[0] && k->kinds[0] && k->doc[0]);
    CHECK(em_knob_find(k->name) == i); /* names are unique */
    for (const char *p = k->name; *p; p++) CHECK((*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_');
    if (!values_well_formed(k->values)) fprintf(stderr, "    %s: values '%s'\n", k->name, k->values);
    CHECK(values_well_formed(k->values));
    if (!em_knob_legal((em_knob_id)i, k->def)) fprintf(stderr, "    %s: default %lld\n", k->name, (long long)k->def);
    CHECK(em_knob_legal((em_knob_id)i, k->def));
    CHECK(strchr(k->doc, '|') == NULL && strchr(k->kinds, '|') == NULL); /* they are markdown table cells */
  }
}

TEST(knobs_persist_is_declared) {
  int id = em_knob_find("PERSIST");
  CHECK(id == EM_KNOB_PERSIST);
  CHECK(id >= 0 && em_knob_table[id].def == 0 && !strcmp(em_knob_table[id].values, "0,1"));
  CHECK(id >= 0 && !strcmp(em_knob_table[id].family, "TILE"));
}

TEST(knobs_legal_values) {
  CHECK(em_knob_legal(EM_KNOB_BM, 64) && em_knob_legal(EM_KNOB_BM, 256) && !em_knob_legal(EM_KNOB_BM, 48));
  CHECK(em_knob_legal(EM_KNOB_THREADS, 32) && em_knob_legal(EM_KNOB_THREADS, 1024));
  CHECK(!em_knob_legal(EM_KNOB_THREADS, 31) && !em_knob_legal(EM_KNOB_THREADS, 2048));
  CHECK(!em_knob_legal(EM_KNOB_MMA, -1) && !em_knob_legal(EM_KNOB_MMA, 2));
  CHECK(!em_knob_legal((em_knob_id)EM_NKNOBS, 0) && !em_knob_legal((em_knob_id)-1, 0));
}

TEST(knobs_check_messages) {
  char err[EM_ERR_MAX];
  CHECK(em_knob_check("BM", 64, err) == EM_OK);
  CHECK(em_knob_check("BMM", 64, err) == EM_EINPUT);
  CHECK(strstr(err, "'BMM' is not a knob") && strstr(err, "did you mean BM?"));
  CHECK(em_knob_check("NOT_A_KNOB_AT_ALL", 1, err) == EM_EINPUT);
  CHECK(strstr(err, "'NOT_A_KNOB_AT_ALL' is not a knob") && !strstr(err, "did you mean"));
  CHECK(em_knob_check(NULL, 1, err) == EM_EINPUT);
  CHECK(em_knob_check("BM", 48, err) == EM_EINPUT);
  CHECK(strstr(err, "BM=48") && strstr(err, "16,32,64,128,256"));
}

TEST(knobs_assignment_holds_every_knob) {
  em_knobs k;
  memset(&k, 0, sizeof k);
  char err[EM_ERR_MAX];
  /* every knob of the table, in reverse order: all kept (the old limit dropped the 25th), sorted by name */
  for (int i = EM_NKNOBS - 1; i >= 0; i--) CHECK(em_knob_set(&k, em_knob_table[i].name, em_knob_table[i].def, err) == EM_OK);
  CHECK(k.n == EM_NKNOBS);
  for (int i = 1; i < k.n; i++) CHECK(strcmp(em_knob_table[k.id[i - 1]].name, em_knob_table[k.id[i]].name) < 0);
  /* a second set replaces the value */
  CHECK(em_knob_set(&k, "BM", 128, err) == EM_OK);
  CHECK(k.n == EM_NKNOBS && em_knob_value(&k, EM_KNOB_BM) == 128);
}

TEST(knobs_assignment_refuses_unknown_and_illegal) {
  em_knobs k;
  memset(&k, 0, sizeof k);
  char err[EM_ERR_MAX];
  CHECK(em_knob_set(&k, "BN", 128, err) == EM_OK);
  CHECK(em_knob_set(&k, "BMM", 64, err) == EM_EINPUT && strstr(err, "BMM"));
  CHECK(em_knob_set(&k, "BM", 48, err) == EM_EINPUT && strstr(err, "BM=48"));
  CHECK(k.n == 1 && k.id[0] == EM_KNOB_BN && k.val[0] == 128); /* unchanged */
  /* a knob left out reads as the table's default */
  CHECK(em_knob_value(&k, EM_KNOB_BM) == em_knob_table[EM_KNOB_BM].def);
  CHECK(em_knob_value(&k, EM_KNOB_BN) == 128);
}

TEST(knobs_structural_and_kinds) {
  /* the kernel former's knobs, which the emitter's check of unread knobs exempts */
  int n = 0;
  for (int i = 0; i < EM_NKNOBS; i++) n += em_knob_structural((em_knob_id)i);
  CHECK(n == 6 && em_knob_structural(EM_KNOB_DUAL_GATE) && em_knob_structural(EM_KNOB_SPLIT_CONE));
  CHECK(!em_knob_structural(EM_KNOB_FLASH) && !em_knob_structural(EM_KNOB_MMA));
  CHECK(em_knob_for_kind(EM_KNOB_BQ, "attention") && !em_knob_for_kind(EM_KNOB_BQ, "contraction"));
  CHECK(em_knob_for_kind(EM_KNOB_BLOCK, "pointwise") && em_knob_for_kind(EM_KNOB_BLOCK, "reduce"));
  CHECK(!em_knob_for_kind(EM_KNOB_BLOCK, "row") && em_knob_for_kind(EM_KNOB_PLANT, "row"));
  /* the kinds text names a kind before its conditions: "(PERSIST=1)" names none */
  CHECK(em_knob_for_kind(EM_KNOB_EPI_SMEM, "contraction") && !em_knob_for_kind(EM_KNOB_EPI_SMEM, "PERSIST"));
  CHECK(!em_knob_for_kind(EM_KNOB_BM, "") && !em_knob_for_kind(EM_KNOB_BM, NULL));
  /* every knob an emitter reads names the kernels it is for, so that an unread one can say whose it is */
  static const char *const kinds[] = {"pointwise", "row", "reduce", "contraction", "attention"};
  for (int i = 0; i < EM_NKNOBS; i++) {
    int any = em_knob_structural((em_knob_id)i);
    for (int j = 0; j < 5; j++) any |= em_knob_for_kind((em_knob_id)i, kinds[j]);
    if (!any) fprintf(stderr, "    %s: kinds '%s' names no kernel kind\n", em_knob_table[i].name, em_knob_table[i].kinds);
    CHECK(any);
  }
}
