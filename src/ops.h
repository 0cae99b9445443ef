/* ops.h — the one op vocabulary: ATen overload names with their argument schemas, from one X-macro table.
 * Argument names are ATen's own, so tools/torchref can call torch.ops.aten.<op> with them directly.
 * Kinds: T tensor, T? optional tensor, T[] tensor list, TS tensor or scalar, i SymInt, i? optional SymInt,
 * i[] SymInt list, i[]? optional list, f float, f? optional float, b bool, s scalar (number or SymInt),
 * d? optional dtype. */
#ifndef EM_OPS_H
#define EM_OPS_H

#include "dim.h"

/* X(ENUM, aten name, schema) */
#define EM_OPS(X)                                                                                            \
  X(EMBEDDING, "aten.embedding.default", "T weight, T indices, i padding_idx=-1, b scale_grad_by_freq=False, b sparse=False") \
  X(MM, "aten.mm.default", "T self, T mat2")                                                                 \
  X(BMM, "aten.bmm.default", "T self, T mat2")                                                               \
  X(MATMUL, "aten.matmul.default", "T self, T other")                                                        \
  X(LINEAR, "aten.linear.default", "T input, T weight, T? bias=None")                                        \
  X(ADD, "aten.add.Tensor", "T self, TS other, s alpha=1")                                                   \
  X(SUB, "aten.sub.Tensor", "T self, TS other, s alpha=1")                                                   \
  X(MUL, "aten.mul.Tensor", "T self, TS other")                                                              \
  X(DIV, "aten.div.Tensor", "T self, TS other")                                                              \
  X(POW, "aten.pow.Tensor_Scalar", "T self, s exponent")                                                     \
  X(CLAMP_MIN, "aten.clamp_min.default", "T self, s min")                                                    \
  X(NEG, "aten.neg.default", "T self")                                                                       \
  X(RECIPROCAL, "aten.reciprocal.default", "T self")                                                         \
  X(RSQRT, "aten.rsqrt.default", "T self")                                                                   \
  X(SQRT, "aten.sqrt.default", "T self")                                                                     \
  X(EXP, "aten.exp.default", "T self")                                                                       \
  X(SILU, "aten.silu.default", "T self")                                                                     \
  X(SIGMOID, "aten.sigmoid.default", "T self")                                                               \
  X(TANH, "aten.tanh.default", "T self")                                                                     \
  X(COS, "aten.cos.default", "T self")                                                                       \
  X(SIN, "aten.sin.default", "T self")                                                                       \
  X(MEAN, "aten.mean.dim", "T self, i[]? dim, b keepdim=False, d? dtype=None")                               \
  X(SUM, "aten.sum.dim_IntList", "T self, i[]? dim, b keepdim=False, d? dtype=None")                         \
  X(AMAX, "aten.amax.default", "T self, i[] dim=[], b keepdim=False")                                        \
  X(VECTOR_NORM, "aten.linalg_vector_norm.default", "T self, s ord=2, i[]? dim=None, b keepdim=False, d? dtype=None") \
  X(SOFTMAX, "aten._softmax.default", "T self, i dim, b half_to_float")                                      \
  X(SOFTMAX_INT, "aten.softmax.int", "T self, i dim, d? dtype=None")                                         \
  X(SDPA, "aten.scaled_dot_product_attention.default",                                                       \
    "T query, T key, T value, T? attn_mask=None, f dropout_p=0.0, b is_causal=False, f? scale=None, b enable_gqa=False, T?+ seq_pos=None") \
  X(CAT, "aten.cat.default", "T[] tensors, i dim=0")                                                         \
  X(SLICE, "aten.slice.Tensor", "T self, i dim=0, i? start=None, i? end=None, i step=1")                     \
  X(SELECT, "aten.select.int", "T self, i dim, i index")                                                     \
  X(INDEX_SELECT, "aten.index_select.default", "T self, i dim, T index")                                     \
  X(VIEW, "aten.view.default", "T self, i[] size")                                                           \
  X(RESHAPE, "aten.reshape.default", "T self, i[] shape")                                                    \
  X(UNSAFE_VIEW, "aten._unsafe_view.default", "T self, i[] size")                                            \
  X(TRANSPOSE, "aten.transpose.int", "T self, i dim0, i dim1")                                               \
  X(T, "aten.t.default", "T self")                                                                           \
  X(PERMUTE, "aten.permute.default", "T self, i[] dims")                                                     \
  X(EXPAND, "aten.expand.default", "T self, i[] size, b implicit=False")                                     \
  X(UNSQUEEZE, "aten.unsqueeze.default", "T self, i dim")                                                    \
  X(SQUEEZE, "aten.squeeze.dim", "T self, i dim")                                                            \
  X(CONTIGUOUS, "aten.contiguous.default", "T self")                                                         \
  X(CLONE, "aten.clone.default", "T self")                                                                   \
  X(TO_COPY, "aten._to_copy.default", "T self, d? dtype=None")                                               \
  X(ARANGE, "aten.arange.default", "s end, d? dtype=None")                                                   \
  X(ARANGE_START, "aten.arange.start", "s start, s end, d? dtype=None")

typedef enum {
#define X(e, n, s) EM_OP_##e,
  EM_OPS(X)
#undef X
  EM_NOPS
} em_op;

typedef enum {
  EM_ARG_T,         /* T */
  EM_ARG_TOPT,      /* T? */
  EM_ARG_TLIST,     /* T[] */
  EM_ARG_TS,        /* TS */
  EM_ARG_INT,       /* i */
  EM_ARG_INTOPT,    /* i? */
  EM_ARG_INTLIST,   /* i[] */
  EM_ARG_INTLISTOPT,/* i[]? */
  EM_ARG_FLOAT,     /* f */
  EM_ARG_FLOATOPT,  /* f? */
  EM_ARG_BOOL,      /* b */
  EM_ARG_SCALAR,    /* s */
  EM_ARG_DTYPEOPT,  /* d? */
} em_argkind;

#define EM_MAX_ARGS 9

typedef struct {
  char name[24];
  em_argkind kind;
  int has_default;
  int ext; /* an emmy extension of the aten schema (kind token ending in "+"): not in the structural hash while absent */
  char def[16]; /* default as written in the schema ("None", "False", "1", "[]", "-1", "0.0") */
} em_argspec;

typedef struct {
  const char *aten;
  const char *schema;
  int nargs;
  em_argspec args[EM_MAX_ARGS];
} em_opspec;

/* The parsed schema of op; the table is built once, on first use. */
const em_opspec *em_op_spec(em_op op);
/* Looks an op up by ATen name; returns -1 when unknown. */
int em_op_find(const char *aten);
const char *em_op_name(em_op op);
const char *em_argkind_name(em_argkind k);
/* Index of an argument by name in op's schema, or -1. */
int em_op_argindex(em_op op, const char *name);

#endif
