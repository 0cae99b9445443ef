/* test_prior.c — the prior's math (src/prior.c): the roofline on hand-computed cases, Spearman with ties, and the
 * boosted trees (an interaction of two columns, missing values, determinism, checks of a loaded model). The
 * fixture-level checks (the roofline against the plain Lua formula, the online half against measured tiles)
 * are in tests/lua/test_prior.lua. */
#include <stdlib.h>
#include <string.h>

#include "prior.h"
#include "unit.h"

static em_prior_weights weights(void) {
  return (em_prior_weights){.clock_ghz = 1,
                            .rate = {0.5, 1, 2},
                            .transport = {0.5, 0.6, 0.8},
                            .stage_hide = 0.5,
                            .warps_full = 12,
                            .bk_sync = 32,
                            .reuse_half = 1,
                            .l2_gbps = 1,
                            .dram_gbps = 1,
                            .fixed_us = 4,
                            .split_us = 1.5};
}

TEST(prior_roofline_by_hand) {
  em_prior_weights w = weights();
  /* rate 1e3 FLOP/µs; feed 0.5 (fills, no ring), occupancy 1, shape 0.5, sync 0.5: efficiency 0.125. The busiest
   * SM runs 3 tiles 2 at a time: 2 rounds of 2 tiles of 1000 FLOP = 32 µs; memory 1 µs; + 4 fixed + 1.5 split. */
  em_prior_features f = {.tier = 1, .transport = 0, .stages = 1, .warps = 24, .reuse = 1, .bk = 32, .busiest = 3,
                         .per_sm = 2, .tile_flops = 1000, .l2_bytes = 1000, .bytes = 10, .split = 2};
  char err[EM_ERR_MAX];
  double us = 0;
  CHECK(em_prior_roofline(&f, &w, &us, err) == EM_OK);
  CHECK_NEAR(us, 37.5, 1e-12);
  /* a cp.async ring of 2 stages hides 1 - 0.5^2 = 0.75 of the rest: feed 0.6 + 0.4 * 0.75 = 0.9 */
  f.transport = 1, f.stages = 2, f.split = 1;
  CHECK(em_prior_roofline(&f, &w, &us, err) == EM_OK);
  CHECK_NEAR(us, 2 * 2 * 1000 / (1000 * 0.9 * 0.25) + 4, 1e-9);
  /* memory bound: 1e6 bytes through L2 at 1 GB/s is 1000 µs */
  f.l2_bytes = 1e6;
  CHECK(em_prior_roofline(&f, &w, &us, err) == EM_OK);
  CHECK_NEAR(us, 1004, 1e-9);
  f.tier = 3;
  CHECK(em_prior_roofline(&f, &w, &us, err) == EM_EINPUT && strstr(err, "tier 3"));
  f.tier = 1, f.transport = 0.5;
  CHECK(em_prior_roofline(&f, &w, &us, err) == EM_EINPUT && strstr(err, "transport"));
}

TEST(prior_spearman_ties) {
  char err[EM_ERR_MAX];
  double rho = 0;
  double a[] = {1, 1, 2}, b[] = {5, 5, 9};
  CHECK(em_prior_spearman(a, b, 3, &rho, err) == EM_OK);
  CHECK_NEAR(rho, 1, 1e-12);
  double c[] = {1, 2, 3, 4}, d[] = {40, 30, 20, 10};
  CHECK(em_prior_spearman(c, d, 4, &rho, err) == EM_OK);
  CHECK_NEAR(rho, -1, 1e-12);
  /* ranks of e: 1.5 1.5 3 4; of f: 2 1 3.5 3.5 -> Pearson of the ranks */
  double e[] = {0, 0, 1, 2}, f[] = {1, 0, 5, 5};
  CHECK(em_prior_spearman(e, f, 4, &rho, err) == EM_OK);
  double ra[] = {1.5, 1.5, 3, 4}, rb[] = {2, 1, 3.5, 3.5}, sab = 0, saa = 0, sbb = 0;
  for (int i = 0; i < 4; i++) {
    sab += (ra[i] - 2.5) * (rb[i] - 2.5);
    saa += (ra[i] - 2.5) * (ra[i] - 2.5);
    sbb += (rb[i] - 2.5) * (rb[i] - 2.5);
  }
  CHECK_NEAR(rho, sab / sqrt(saa * sbb), 1e-12);
  double g[] = {3, 3, 3};
  CHECK(em_prior_spearman(g, c, 3, &rho, err) == EM_OK && rho == 0);
  CHECK(em_prior_spearman(c, d, 1, &rho, err) == EM_OK && rho == 0);
  double h[] = {1, NAN};
  CHECK(em_prior_spearman(h, c, 2, &rho, err) == EM_EINPUT && strstr(err, "value 2"));
}

/* A 10 × 10 grid: y = 1 where both columns are above 0.5 (an interaction no sum of one-column terms holds), else 0. */
static void and_data(double *X, double *y, int n) {
  for (int r = 0; r < n; r++) {
    double a = (r % 10) / 10.0, b = (r / 10 % 10) / 10.0;
    X[2 * r] = a;
    X[2 * r + 1] = b;
    y[r] = (a > 0.5 && b > 0.5) ? 1 : 0;
  }
}

TEST(prior_gbt_interaction) {
  enum { N = 100 };
  double X[2 * N], y[N];
  and_data(X, y, N);
  em_gbt_params prm = {.ntrees = 60, .depth = 2, .rate = 0.3, .min_leaf = 2, .shrink = 0, .min_gain = 0};
  char err[EM_ERR_MAX];
  em_gbt *m = NULL, *m2 = NULL;
  CHECK(em_prior_gbt_fit(X, y, N, 2, &prm, &m, err) == EM_OK);
  if (!m) return;
  double worst = 0;
  for (int r = 0; r < N; r++) worst = fmax(worst, fabs(em_prior_gbt_predict(m, X + 2 * r) - y[r]));
  CHECK(worst < 0.01);
  CHECK(em_prior_gbt_check(m, err) == EM_OK);
  /* the same data, the same trees */
  CHECK(em_prior_gbt_fit(X, y, N, 2, &prm, &m2, err) == EM_OK);
  if (m2) {
    int ts = em_prior_gbt_tree_size(2);
    CHECK(ts == 7);
    CHECK(m2->base == m->base && !memcmp(m2->nodes, m->nodes, (size_t)(m->ntrees * ts) * sizeof *m->nodes));
  }
  em_prior_gbt_free(m);
  em_prior_gbt_free(m2);
}

TEST(prior_gbt_missing) {
  enum { N = 60 };
  double X[N], y[N];
  /* rows with a missing value all have y = 5; the rest a step at 0.5 */
  for (int r = 0; r < N; r++) {
    X[r] = r % 3 == 0 ? NAN : (r % 10) / 10.0;
    y[r] = r % 3 == 0 ? 5 : X[r] > 0.5 ? 1 : 0;
  }
  em_gbt_params prm = {.ntrees = 80, .depth = 2, .rate = 0.3, .min_leaf = 2, .shrink = 0, .min_gain = 0};
  char err[EM_ERR_MAX];
  em_gbt *m = NULL;
  CHECK(em_prior_gbt_fit(X, y, N, 1, &prm, &m, err) == EM_OK);
  if (!m) return;
  double nan = NAN, inf = INFINITY, lo = 0.2, hi = 0.9;
  CHECK_NEAR(em_prior_gbt_predict(m, &nan), 5, 0.01);
  CHECK_NEAR(em_prior_gbt_predict(m, &inf), 5, 0.01);
  CHECK_NEAR(em_prior_gbt_predict(m, &lo), 0, 0.01);
  CHECK_NEAR(em_prior_gbt_predict(m, &hi), 1, 0.01);
  em_prior_gbt_free(m);
}

TEST(prior_gbt_refusals) {
  char err[EM_ERR_MAX];
  em_gbt *m = NULL;
  double X[2] = {1, 2}, y[2] = {1, NAN};
  em_gbt_params prm = {.ntrees = 3, .depth = 2, .rate = 0.1, .min_leaf = 1, .shrink = 1, .min_gain = 0};
  CHECK(em_prior_gbt_fit(X, y, 2, 1, &prm, &m, err) == EM_EINPUT && strstr(err, "target 2") && !m);
  y[1] = 2;
  prm.rate = 0;
  CHECK(em_prior_gbt_fit(X, y, 2, 1, &prm, &m, err) == EM_EINPUT && strstr(err, "rate") && !m);
  prm.rate = 0.1, prm.depth = 9;
  CHECK(em_prior_gbt_fit(X, y, 2, 1, &prm, &m, err) == EM_EINPUT && strstr(err, "depth 9") && !m);
  prm.depth = 2, prm.min_leaf = 0;
  CHECK(em_prior_gbt_fit(X, y, 2, 1, &prm, &m, err) == EM_EINPUT && strstr(err, "min_leaf") && !m);
  CHECK(em_prior_gbt_fit(X, y, 0, 1, &prm, &m, err) == EM_EINPUT && !m);
  /* a model filled from saved data: a split at the last level, a column out of range, a NaN leaf */
  CHECK(em_prior_gbt_new(2, 2, 2, 0.5, &m, err) == EM_OK);
  if (!m) return;
  CHECK(em_prior_gbt_check(m, err) == EM_OK);
  double x[2] = {0, 0};
  CHECK(em_prior_gbt_predict(m, x) == 0.5);
  m->nodes[7 + 5].feat = 0;
  CHECK(em_prior_gbt_check(m, err) == EM_EINPUT && strstr(err, "tree 2 node 6"));
  m->nodes[7 + 5].feat = -1;
  m->nodes[1].feat = 2;
  CHECK(em_prior_gbt_check(m, err) == EM_EINPUT && strstr(err, "tree 1 node 2"));
  m->nodes[1].feat = -1;
  m->nodes[3].value = NAN;
  CHECK(em_prior_gbt_check(m, err) == EM_EINPUT && strstr(err, "non-finite"));
  em_prior_gbt_free(m);
  CHECK(em_prior_gbt_new(0, 1, 2, 0, &m, err) == EM_EINPUT && !m);
}
