/* prior.h — the math of the tuner's prior: the offline roofline cost of a contraction tile (features and
 * weights come from rules/prior/, editable Lua), Spearman rank correlation, and the online half's small
 * gradient-boosted regression trees (fit and predict; the model is plain data so Lua can serialize it). */
#ifndef EM_PRIOR_H
#define EM_PRIOR_H

#include "base.h"

/* The features the roofline reads (rules/prior/features.lua computes them; names match its fields). */
typedef struct {
  double tier;       /* 0 FFMA, 1 mma.sync, 2 wgmma */
  double transport;  /* 0 element-wise fills, 1 cp.async ring, 2 TMA */
  double stages;     /* ring stages */
  double warps;      /* resident warps per SM */
  double reuse;      /* warp-tile operand reuse */
  double bk;         /* k-tile depth */
  double busiest;    /* tiles the busiest SM runs */
  double per_sm;     /* tiles resident per SM */
  double tile_flops; /* FLOP of one tile */
  double l2_bytes;   /* bytes read through L2 */
  double bytes;      /* bytes moved to and from DRAM */
  double split;      /* split-K factor */
  double split_bytes; /* split-K partial sums written to and read back from scratch (0 without split-K) */
} em_prior_features;

/* The roofline's weights (rules/prior/offline.lua's table W; names match its fields). */
typedef struct {
  double clock_ghz;
  double rate[3];      /* FLOP per cycle per SM, by tier */
  double transport[3]; /* feed efficiency, by transport */
  double stage_hide, warps_full, bk_sync, reuse_half;
  double l2_gbps, dram_gbps;
  double fixed_us, split_us;
} em_prior_weights;

/* Computes the roofline cost of one contraction variant in µs into *us. Fails with EM_EINPUT (err names the
 * field) when tier or transport is not 0, 1 or 2, or a weight that divides is not positive. */
em_status em_prior_roofline(const em_prior_features *f, const em_prior_weights *w, double *us, char *err);

/* Spearman rank correlation of a[0..n) and b[0..n) into *rho: the Pearson correlation of the ranks, ties
 * given their mean rank; 0 when either list is constant or n < 2. Fails with EM_EINPUT on a NaN. */
em_status em_prior_spearman(const double *a, const double *b, int n, double *rho, char *err);

/* Gradient-boosted regression trees for squared loss. Each tree is complete to `depth`, stored breadth-first
 * (node i's children are 2i+1 and 2i+2); a node whose feat is -1 is a leaf. A row goes left when its value is
 * <= thr; a missing value (NaN or ±inf) goes left when miss_left is set. A leaf's value already carries the
 * learning rate, so a prediction is base + Σ over trees of the leaf value reached. */
typedef struct {
  int feat;       /* column tested, or -1: a leaf */
  int miss_left;  /* where a missing value goes */
  double thr;     /* left when x <= thr */
  double value;   /* a leaf's contribution */
} em_gbt_node;

typedef struct {
  int ncols, ntrees, depth;
  double base;        /* the mean target of the rows fit */
  em_gbt_node *nodes; /* ntrees × em_prior_gbt_tree_size(depth), owned */
} em_gbt;

typedef struct {
  int ntrees;      /* boosting rounds, >= 0 */
  int depth;       /* 1..8 */
  double rate;     /* learning rate: each tree's leaves are scaled by it, (0, 1] */
  int min_leaf;    /* fewest rows a leaf may hold, >= 1 */
  double shrink;   /* pseudo-rows at 0 in every leaf: value = Σ residual / (count + shrink), >= 0 */
  double min_gain; /* a split must lower the squared error by more than this, >= 0 */
} em_gbt_params;

/* Nodes per tree of the given depth: 2^(depth+1) - 1. */
int em_prior_gbt_tree_size(int depth);

/* Fits trees to y[0..n) from X (n rows × p columns, row-major; NaN and ±inf are missing). Deterministic:
 * ties between equally good splits go to the lower column, then the lower threshold. Two values closer than
 * 1e-9 relative are never split apart, so a threshold printed with 14 significant digits keeps every row of
 * the fit on its side. On success *out is a new
 * model the caller frees with em_prior_gbt_free. Fails with EM_EINPUT on bad parameters, n < 1, p < 1 or a
 * non-finite y. */
em_status em_prior_gbt_fit(const double *X, const double *y, int n, int p, const em_gbt_params *prm, em_gbt **out,
                           char *err);

/* A new model of ntrees empty trees (every node a leaf of value 0), for a caller that fills it from saved data
 * and then checks it with em_prior_gbt_check. Fails with EM_EINPUT on a size out of range. */
em_status em_prior_gbt_new(int ncols, int ntrees, int depth, double base, em_gbt **out, char *err);

/* Checks a filled model: every split column below ncols, every split at an inner level, every number finite.
 * Returns EM_OK or EM_EINPUT with err naming the tree and node. */
em_status em_prior_gbt_check(const em_gbt *m, char *err);

/* The prediction for one row x[0..m->ncols) (NaN and ±inf are missing) of a model that passed
 * em_prior_gbt_check or came from em_prior_gbt_fit. */
double em_prior_gbt_predict(const em_gbt *m, const double *x);

/* Frees m and its nodes; NULL is a no-op. */
void em_prior_gbt_free(em_gbt *m);

#endif
