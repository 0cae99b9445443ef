/* ref_impl.h — what the CPU reference's interpreter (ref.c) and its op implementations (ref_ops.c) share. */
#ifndef EM_REF_IMPL_H
#define EM_REF_IMPL_H

#include "ref.h"

/* Per-run state: the graph, the binding and the live values. */
typedef struct {
  const em_graph *g;
  const int64_t *sym;
  int nthreads;
  em_tensor **vals;
} rctx;

/* A dim's value at the run's binding. */
int64_t ref_ev(const rctx *c, const em_dim *d);
/* "[a, b, c]" into buf. */
char *ref_fmt_shape(int rank, const int64_t *s, char *buf, size_t n);
/* Computes node nd's value into *out (a new tensor, or a view's copy); err names the problem. */
em_status ref_exec_node(rctx *c, const em_node *nd, em_tensor **out, char *err);

#endif
