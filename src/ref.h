/* ref.h — the CPU reference interpreter: runs a graph at a concrete binding of its symbols.
 * It computes in f32 (f64 accumulation for reductions, contractions and attention) and rounds to bf16/f16
 * exactly where the graph's dtypes say, as PyTorch does; it is the numerical truth every GPU kernel is
 * checked against. */
#ifndef EM_REF_H
#define EM_REF_H

#include "graph.h"
#include "tensor.h"

typedef struct {
  int nthreads;  /* 0: one per online CPU */
  int keep_all;  /* 1: keep every intermediate value (per-kernel checks); 0: free after last use */
} em_ref_opts;

typedef struct {
  int nvalues;
  em_tensor **vals; /* one per graph value: inputs borrowed from the caller, computed ones owned; NULL when freed */
  int64_t symvals[EM_MAX_SYMS];
} em_ref_result;

/* Resolves each symbol's value from given[i] (i below g->syms.n; EM_SYM_UNBOUND when not given) or else its
 * hint, checks [min, max], computes derived symbols and checks that every dim of the graph fits 64 bits at
 * the binding (em_graph_check_binding); given may be NULL (all hints); out has EM_MAX_SYMS entries. On
 * failure err names the symbol or value ("symbol 'seq_len' = -5 is outside its range …"). */
em_status em_ref_bind(const em_graph *g, const int64_t *given, int64_t *out, char *err);

/* Runs g. inputs[i] is the tensor for g->inputs.v[i] (borrowed; shapes and dtypes are checked against the
 * binding). On success *res holds the values (free with em_ref_result_free); on failure err names the node. */
em_status em_ref_run(const em_graph *g, const int64_t *symvals, em_tensor *const *inputs, const em_ref_opts *opts,
                     em_ref_result *res, char *err);
void em_ref_result_free(em_ref_result *res);

/* C[M,N] = A[M,K] · B[N,K]ᵀ with f64 accumulation; A and B are double, C is written as double. Multi-threaded. */
void em_gemm_nt(int64_t M, int64_t N, int64_t K, const double *A, int64_t lda, const double *B, int64_t ldb,
                double *C, int64_t ldc, int nthreads);

/* The mask of sequences packed end to end (lens[0..n), T their sum): each query attends to the keys of its own
 * sequence up to itself (block-diagonal and causal: emmy serve's batches), as T*T bytes 0/1 (the device's bool)
 * written over m, row-major. */
void em_packed_mask_bytes(unsigned char *m, const int64_t *lens, int n, int64_t T);

#endif
