/* knobs.c — the knob table (knobs.h) as data, and the checks every consumer of a knob name or value shares:
 * lookup by name, legal values, and the one-line message for a name or value the table does not have. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "knobs.h"

const em_knob_info em_knob_table[EM_NKNOBS] = {
#define X(name, fam, def, vals, kinds, doc) {#name, #fam, def, vals, kinds, doc},
    EM_KNOBS(X)
#undef X
};

int em_knob_find(const char *name) {
  if (!name) return -1;
  for (int i = 0; i < EM_NKNOBS; i++)
    if (!strcmp(em_knob_table[i].name, name)) return i;
  return -1;
}

/* Walks the legal-values text s ("0,1" or "32..1024"): 1 when v is among them. */
static int values_hold(const char *s, int64_t v) {
  char *end;
  long long lo = strtoll(s, &end, 10);
  if (end[0] == '.' && end[1] == '.') return v >= lo && v <= strtoll(end + 2, NULL, 10);
  for (;;) {
    if (v == lo) return 1;
    if (*end != ',') return 0;
    lo = strtoll(end + 1, &end, 10);
  }
}

int em_knob_legal(em_knob_id id, int64_t v) {
  return (unsigned)id < EM_NKNOBS && values_hold(em_knob_table[id].values, v);
}

int em_knob_structural(em_knob_id id) {
  switch (id) {
  case EM_KNOB_SPLIT_CONE:
  case EM_KNOB_VIEW_OUT:
  case EM_KNOB_ROPE_EPI:
  case EM_KNOB_NORM_EPI:
  case EM_KNOB_DUAL_GATE:
  case EM_KNOB_MERGE_SIBLINGS: return 1;
  default: return 0;
  }
}

int em_knob_for_kind(em_knob_id id, const char *kind) {
  if ((unsigned)id >= EM_NKNOBS || !kind || !*kind) return 0;
  const char *s = em_knob_table[id].kinds;
  if (!strncmp(s, "any", 3)) return 1;
  size_t n = strcspn(s, "("), k = strlen(kind);
  for (size_t i = 0; i + k <= n; i++)
    if (!strncmp(s + i, kind, k) && (i == 0 || !isalpha((unsigned char)s[i - 1])) && !isalpha((unsigned char)s[i + k]))
      return 1;
  return 0;
}

/* Edit distance of a and b (both shorter than 64 bytes; longer ones count as far apart). */
static int distance(const char *a, const char *b) {
  size_t na = strlen(a), nb = strlen(b);
  if (na >= 64 || nb >= 64) return 64;
  int row[65];
  for (size_t j = 0; j <= nb; j++) row[j] = (int)j;
  for (size_t i = 1; i <= na; i++) {
    int diag = row[0];
    row[0] = (int)i;
    for (size_t j = 1; j <= nb; j++) {
      int up = row[j], best = diag + (a[i - 1] != b[j - 1]);
      if (up + 1 < best) best = up + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      diag = up;
      row[j] = best;
    }
  }
  return row[nb];
}

em_status em_knob_check(const char *name, int64_t v, char *err) {
  int id = em_knob_find(name);
  if (id < 0) {
    int best = -1, bd = 3; /* suggest a knob within two edits */
    for (int i = 0; name && i < EM_NKNOBS; i++) {
      int d = distance(name, em_knob_table[i].name);
      if (d < bd) bd = d, best = i;
    }
    if (best >= 0)
      return em_fail(err, EM_EINPUT, "'%s' is not a knob (did you mean %s? `emmy knobs` lists them)", name ? name : "",
                     em_knob_table[best].name);
    return em_fail(err, EM_EINPUT, "'%s' is not a knob (`emmy knobs` lists them)", name ? name : "");
  }
  if (!em_knob_legal((em_knob_id)id, v))
    return em_fail(err, EM_EINPUT, "%s=%lld is not a legal value of %s (it takes %s)", name, (long long)v, name,
                   em_knob_table[id].values);
  return EM_OK;
}
