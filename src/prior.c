/* prior.c — the tuner's prior, its math only: the offline roofline cost (the formula; its features and weights
 * stay editable Lua in rules/prior/), Spearman rank correlation, and the gradient-boosted regression trees of
 * the online half (fit on measured rows, predict, check a loaded model). No Lua here: lib_prior.c binds it. */
#include "prior.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- offline roofline --------------------------------------------------------------------------------- */

static double dmin(double a, double b) { return a < b ? a : b; }
static double dmax(double a, double b) { return a > b ? a : b; }

static int small_index(double v) { return v == 0 || v == 1 || v == 2; }

em_status em_prior_roofline(const em_prior_features *f, const em_prior_weights *w, double *us, char *err) {
  if (!small_index(f->tier)) return em_fail(err, EM_EINPUT, "roofline: tier %g is not 0, 1 or 2", f->tier);
  if (!small_index(f->transport))
    return em_fail(err, EM_EINPUT, "roofline: transport %g is not 0, 1 or 2", f->transport);
  if (!(f->per_sm > 0)) return em_fail(err, EM_EINPUT, "roofline: per_sm %g is not positive", f->per_sm);
  if (!(w->l2_gbps > 0) || !(w->dram_gbps > 0))
    return em_fail(err, EM_EINPUT, "roofline: l2_gbps %g and dram_gbps %g must be positive", w->l2_gbps, w->dram_gbps);
  int tier = (int)f->tier, tr = (int)f->transport;
  /* the same operations in the same order as the plain Lua formula in tests/lua/test_prior.lua, so the two
   * agree to the bit wherever LuaJIT's ^ and libm's pow do */
  double rate = w->rate[tier] * w->clock_ghz * 1e3; /* FLOP per µs per SM */
  double hide = tr == 0 ? 0 : (1 - pow(1 - w->stage_hide, f->stages));
  double feed = w->transport[tr] + (1 - w->transport[tr]) * hide;
  double occ = dmin(1, f->warps / w->warps_full);
  double shape = f->reuse / (f->reuse + w->reuse_half);
  double sync = f->bk / (f->bk + w->bk_sync);
  double eff = feed * occ * shape * sync;
  /* the busiest SM runs its tiles per_sm at a time sharing one pipe: a partial last round costs a full one */
  double rounds = ceil(f->busiest / f->per_sm);
  double t_sm = rounds * dmin(f->busiest, f->per_sm) * f->tile_flops / (rate * eff);
  double t_mem = dmax(f->l2_bytes / (w->l2_gbps * 1e3), f->bytes / (w->dram_gbps * 1e3));
  /* split-K: the partial sums' round trip through scratch (L2-resident at these sizes) and the last block's sum */
  *us = dmax(t_sm, t_mem) + w->fixed_us + (f->split > 1 ? w->split_us + f->split_bytes / (w->l2_gbps * 1e3) : 0);
  return EM_OK;
}

/* ---- Spearman ----------------------------------------------------------------------------------------- */

typedef struct {
  double v;
  int i;
} keyed;

static int by_value(const void *a, const void *b) {
  const keyed *x = a, *y = b;
  if (x->v != y->v) return x->v < y->v ? -1 : 1;
  return (x->i > y->i) - (x->i < y->i);
}

/* r[i] = the 1-based rank of x[i], ties given their mean rank; tmp has n entries. */
static void ranks(const double *x, int n, double *r, keyed *tmp) {
  for (int i = 0; i < n; i++) tmp[i] = (keyed){x[i], i};
  qsort(tmp, (size_t)n, sizeof *tmp, by_value);
  for (int i = 0; i < n;) {
    int j = i;
    while (j + 1 < n && tmp[j + 1].v == tmp[i].v) j++;
    double mean = ((i + 1) + (j + 1)) / 2.0;
    for (int q = i; q <= j; q++) r[tmp[q].i] = mean;
    i = j + 1;
  }
}

em_status em_prior_spearman(const double *a, const double *b, int n, double *rho, char *err) {
  *rho = 0;
  if (n < 0) return em_fail(err, EM_EINPUT, "spearman: negative length %d", n);
  for (int i = 0; i < n; i++)
    if (isnan(a[i]) || isnan(b[i])) return em_fail(err, EM_EINPUT, "spearman: value %d is NaN", i + 1);
  if (n < 2) return EM_OK;
  double *ra = em_alloc((size_t)n * sizeof *ra), *rb = em_alloc((size_t)n * sizeof *rb);
  keyed *tmp = em_alloc((size_t)n * sizeof *tmp);
  ranks(a, n, ra, tmp);
  ranks(b, n, rb, tmp);
  double m = (n + 1) / 2.0, sab = 0, saa = 0, sbb = 0;
  for (int i = 0; i < n; i++) {
    sab += (ra[i] - m) * (rb[i] - m);
    saa += (ra[i] - m) * (ra[i] - m);
    sbb += (rb[i] - m) * (rb[i] - m);
  }
  *rho = (saa > 0 && sbb > 0) ? sab / sqrt(saa * sbb) : 0;
  free(ra);
  free(rb);
  free(tmp);
  return EM_OK;
}

/* ---- gradient-boosted trees --------------------------------------------------------------------------- */

#define GBT_MAX_DEPTH 8
/* Values closer than this (relative) are never split apart: their difference is floating-point noise, and a
 * threshold between them would not survive a model saved with 14 significant digits (cjson). */
#define SPLIT_TOL 1e-9
#define GBT_MAX_TREES 100000

int em_prior_gbt_tree_size(int depth) { return (1 << (depth + 1)) - 1; }

em_status em_prior_gbt_new(int ncols, int ntrees, int depth, double base, em_gbt **out, char *err) {
  *out = NULL;
  if (ncols < 1) return em_fail(err, EM_EINPUT, "gbt: %d columns (needs at least 1)", ncols);
  if (ntrees < 0 || ntrees > GBT_MAX_TREES) return em_fail(err, EM_EINPUT, "gbt: %d trees (0..%d)", ntrees, GBT_MAX_TREES);
  if (depth < 1 || depth > GBT_MAX_DEPTH) return em_fail(err, EM_EINPUT, "gbt: depth %d (1..%d)", depth, GBT_MAX_DEPTH);
  if (!isfinite(base)) return em_fail(err, EM_EINPUT, "gbt: base %g is not finite", base);
  em_gbt *m = em_alloc(sizeof *m);
  m->ncols = ncols;
  m->ntrees = ntrees;
  m->depth = depth;
  m->base = base;
  size_t nn = (size_t)ntrees * (size_t)em_prior_gbt_tree_size(depth);
  m->nodes = em_alloc((nn ? nn : 1) * sizeof *m->nodes);
  for (size_t i = 0; i < nn; i++) m->nodes[i].feat = -1;
  *out = m;
  return EM_OK;
}

void em_prior_gbt_free(em_gbt *m) {
  if (!m) return;
  free(m->nodes);
  free(m);
}

em_status em_prior_gbt_check(const em_gbt *m, char *err) {
  int ts = em_prior_gbt_tree_size(m->depth), inner = em_prior_gbt_tree_size(m->depth - 1);
  for (int t = 0; t < m->ntrees; t++)
    for (int i = 0; i < ts; i++) {
      const em_gbt_node *nd = &m->nodes[(size_t)t * (size_t)ts + (size_t)i];
      if (nd->feat < -1 || nd->feat >= m->ncols)
        return em_fail(err, EM_EINPUT, "gbt: tree %d node %d tests no column of %d", t + 1, i + 1, m->ncols);
      if (nd->feat >= 0 && i >= inner)
        return em_fail(err, EM_EINPUT, "gbt: tree %d node %d splits below depth %d", t + 1, i + 1, m->depth);
      if (!isfinite(nd->thr) || !isfinite(nd->value))
        return em_fail(err, EM_EINPUT, "gbt: tree %d node %d holds a non-finite number", t + 1, i + 1);
    }
  return EM_OK;
}

/* The leaf of tree nodes[] that row x reaches. */
static const em_gbt_node *leaf_of(const em_gbt_node *nodes, const double *x) {
  int i = 0;
  while (nodes[i].feat >= 0) {
    double v = x[nodes[i].feat];
    int left = isfinite(v) ? v <= nodes[i].thr : nodes[i].miss_left;
    i = 2 * i + (left ? 1 : 2);
  }
  return &nodes[i];
}

double em_prior_gbt_predict(const em_gbt *m, const double *x) {
  int ts = em_prior_gbt_tree_size(m->depth);
  double s = m->base;
  for (int t = 0; t < m->ntrees; t++) s += leaf_of(m->nodes + (size_t)t * (size_t)ts, x)->value;
  return s;
}

/* Per-fit scratch: the columns pre-sorted once, and per-node sums of the level being split. */
typedef struct {
  const double *X;
  int n, p, ts;
  const em_gbt_params *prm;
  int **order;      /* order[j]: the rows whose column j is finite, by value then row */
  int *nord;        /* their count */
  int **missing;    /* missing[j]: the rows whose column j is not finite */
  int *nmiss;
  int *node_of;     /* the node each row sits in */
  double *res;      /* residuals of the current round */
  double *G, *gl, *gm, *last, *best;
  int *N, *nl, *nm, *has_last, *bfeat, *bmiss;
  double *bthr;
} fit_ctx;

static double score(double g, double n, double shrink) { return g * g / (n + shrink); }

/* Considers splitting node k of the current level on column j at thr: the rows seen so far go left. */
static void consider(fit_ctx *c, int k, int j, double thr) {
  double s = c->prm->shrink, parent = score(c->G[k], c->N[k], s);
  double gr = c->G[k] - c->gm[k] - c->gl[k];
  int nr = c->N[k] - c->nm[k] - c->nl[k], ml = c->prm->min_leaf;
  for (int miss_left = 0; miss_left <= (c->nm[k] > 0); miss_left++) {
    double gL = c->gl[k] + (miss_left ? c->gm[k] : 0), gR = gr + (miss_left ? 0 : c->gm[k]);
    int nL = c->nl[k] + (miss_left ? c->nm[k] : 0), nR = nr + (miss_left ? 0 : c->nm[k]);
    if (nL < ml || nR < ml) continue;
    double gain = score(gL, nL, s) + score(gR, nR, s) - parent;
    if (gain > c->best[k]) {
      c->best[k] = gain;
      c->bthr[k] = thr;
      /* with no missing rows here, a missing value at predict time follows the larger side */
      c->bmiss[k] = c->nm[k] > 0 ? miss_left : c->nl[k] >= nr;
      c->bfeat[k] = j;
    }
  }
}

/* Grows one tree on c->res into nodes[0..ts), level by level; leaves node_of at each row's leaf. */
static void grow(fit_ctx *c, em_gbt_node *nodes) {
  const em_gbt_params *prm = c->prm;
  for (int r = 0; r < c->n; r++) c->node_of[r] = 0;
  for (int i = 0; i < c->ts; i++) nodes[i] = (em_gbt_node){-1, 0, 0, 0};
  for (int level = 0; level <= prm->depth; level++) {
    int lo = (1 << level) - 1, hi = (1 << (level + 1)) - 2;
    for (int k = lo; k <= hi; k++) c->G[k] = 0, c->N[k] = 0, c->best[k] = prm->min_gain, c->bfeat[k] = -1;
    for (int r = 0; r < c->n; r++) {
      int k = c->node_of[r];
      if (k >= lo) c->G[k] += c->res[r], c->N[k]++;
    }
    if (level < prm->depth) {
      for (int j = 0; j < c->p; j++) {
        for (int k = lo; k <= hi; k++) c->gl[k] = 0, c->nl[k] = 0, c->gm[k] = 0, c->nm[k] = 0, c->has_last[k] = 0;
        for (int q = 0; q < c->nmiss[j]; q++) {
          int r = c->missing[j][q], k = c->node_of[r];
          if (k >= lo) c->gm[k] += c->res[r], c->nm[k]++;
        }
        for (int q = 0; q < c->nord[j]; q++) {
          int r = c->order[j][q], k = c->node_of[r];
          if (k < lo) continue;
          double v = c->X[(size_t)r * (size_t)c->p + (size_t)j];
          if (c->has_last[k] && v - c->last[k] > SPLIT_TOL * fmax(fabs(v), fabs(c->last[k]))) {
            double a = c->last[k], thr = a + 0.5 * (v - a);
            if (!(thr < v)) thr = a; /* adjacent doubles: the midpoint rounded up to v */
            consider(c, k, j, thr);
          }
          c->gl[k] += c->res[r];
          c->nl[k]++;
          c->last[k] = v;
          c->has_last[k] = 1;
        }
      }
    }
    for (int k = lo; k <= hi; k++) {
      if (c->bfeat[k] >= 0) {
        nodes[k].feat = c->bfeat[k];
        nodes[k].thr = c->bthr[k];
        nodes[k].miss_left = c->bmiss[k];
      } else {
        nodes[k].value = c->N[k] > 0 ? prm->rate * c->G[k] / (c->N[k] + prm->shrink) : 0;
      }
    }
    if (level == prm->depth) break;
    for (int r = 0; r < c->n; r++) {
      int k = c->node_of[r];
      if (k < lo || nodes[k].feat < 0) continue;
      double v = c->X[(size_t)r * (size_t)c->p + (size_t)nodes[k].feat];
      int left = isfinite(v) ? v <= nodes[k].thr : nodes[k].miss_left;
      c->node_of[r] = 2 * k + (left ? 1 : 2);
    }
  }
}

em_status em_prior_gbt_fit(const double *X, const double *y, int n, int p, const em_gbt_params *prm, em_gbt **out,
                           char *err) {
  *out = NULL;
  if (n < 1) return em_fail(err, EM_EINPUT, "gbt: no rows to fit");
  if (prm->min_leaf < 1) return em_fail(err, EM_EINPUT, "gbt: min_leaf %d (needs at least 1)", prm->min_leaf);
  if (!(prm->rate > 0 && prm->rate <= 1)) return em_fail(err, EM_EINPUT, "gbt: rate %g is outside (0, 1]", prm->rate);
  if (!(prm->shrink >= 0) || !isfinite(prm->shrink)) return em_fail(err, EM_EINPUT, "gbt: shrink %g is not >= 0", prm->shrink);
  if (!(prm->min_gain >= 0) || !isfinite(prm->min_gain))
    return em_fail(err, EM_EINPUT, "gbt: min_gain %g is not >= 0", prm->min_gain);
  double base = 0;
  for (int r = 0; r < n; r++) {
    if (!isfinite(y[r])) return em_fail(err, EM_EINPUT, "gbt: target %d is not finite", r + 1);
    base += y[r];
  }
  base /= n;
  em_gbt *m = NULL;
  em_status st = em_prior_gbt_new(p, prm->ntrees, prm->depth, base, &m, err);
  if (st) return st;

  fit_ctx c = {.X = X, .n = n, .p = p, .ts = em_prior_gbt_tree_size(prm->depth), .prm = prm};
  size_t un = (size_t)n, up = (size_t)p, uts = (size_t)c.ts;
  c.order = em_alloc(up * sizeof *c.order);
  c.missing = em_alloc(up * sizeof *c.missing);
  c.nord = em_alloc(up * sizeof *c.nord);
  c.nmiss = em_alloc(up * sizeof *c.nmiss);
  keyed *tmp = em_alloc(un * sizeof *tmp);
  for (int j = 0; j < p; j++) {
    c.order[j] = em_alloc(un * sizeof **c.order);
    c.missing[j] = em_alloc(un * sizeof **c.missing);
    int k = 0;
    for (int r = 0; r < n; r++) {
      double v = X[(size_t)r * up + (size_t)j];
      if (isfinite(v)) tmp[k++] = (keyed){v, r};
      else c.missing[j][c.nmiss[j]++] = r;
    }
    qsort(tmp, (size_t)k, sizeof *tmp, by_value);
    for (int q = 0; q < k; q++) c.order[j][q] = tmp[q].i;
    c.nord[j] = k;
  }
  free(tmp);
  c.node_of = em_alloc(un * sizeof *c.node_of);
  c.res = em_alloc(un * sizeof *c.res);
  double *pred = em_alloc(un * sizeof *pred);
  c.G = em_alloc(uts * sizeof *c.G);
  c.gl = em_alloc(uts * sizeof *c.gl);
  c.gm = em_alloc(uts * sizeof *c.gm);
  c.last = em_alloc(uts * sizeof *c.last);
  c.best = em_alloc(uts * sizeof *c.best);
  c.bthr = em_alloc(uts * sizeof *c.bthr);
  c.N = em_alloc(uts * sizeof *c.N);
  c.nl = em_alloc(uts * sizeof *c.nl);
  c.nm = em_alloc(uts * sizeof *c.nm);
  c.has_last = em_alloc(uts * sizeof *c.has_last);
  c.bfeat = em_alloc(uts * sizeof *c.bfeat);
  c.bmiss = em_alloc(uts * sizeof *c.bmiss);

  for (int r = 0; r < n; r++) pred[r] = base;
  for (int t = 0; t < prm->ntrees; t++) {
    em_gbt_node *nodes = m->nodes + (size_t)t * uts;
    for (int r = 0; r < n; r++) c.res[r] = y[r] - pred[r];
    grow(&c, nodes);
    for (int r = 0; r < n; r++) pred[r] += nodes[c.node_of[r]].value;
  }
  *out = m;

  for (int j = 0; j < p; j++) {
    free(c.order[j]);
    free(c.missing[j]);
  }
  free(c.order);
  free(c.missing);
  free(c.nord);
  free(c.nmiss);
  free(c.node_of);
  free(c.res);
  free(pred);
  free(c.G);
  free(c.gl);
  free(c.gm);
  free(c.last);
  free(c.best);
  free(c.bthr);
  free(c.N);
  free(c.nl);
  free(c.nm);
  free(c.has_last);
  free(c.bfeat);
  free(c.bmiss);
  return EM_OK;
}
