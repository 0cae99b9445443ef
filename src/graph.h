/* graph.h — the graph IR: symbols, typed values with symbolic shapes, ATen nodes in topological order.
 * A graph owns every string and list reachable from it; em_graph_free releases them all. Nodes are added
 * in order and each addition runs shape/dtype inference, so a graph is valid at every moment. */
#ifndef EM_GRAPH_H
#define EM_GRAPH_H

#include "base.h"
#include "dim.h"
#include "dtype.h"
#include "ops.h"

#define EM_MAX_RANK 6

typedef struct {
  int rank;
  em_dim d[EM_MAX_RANK];
} em_shape;

typedef enum { EM_V_INPUT, EM_V_PARAM, EM_V_NODE } em_vkind;

typedef struct {
  char *name;
  em_vkind kind;
  em_dtype dtype;
  em_shape shape;
  char *weight; /* params: the weight it maps to (checkpoint tensor name) */
  int node;     /* EM_V_NODE: producing node index; else -1 */
} em_value;

/* One bound argument of a node, interpreted by its schema kind. */
typedef struct {
  int present;   /* 0: None / absent optional */
  int is_tensor; /* TS: 1 when a tensor */
  int tensor;    /* T, T?, TS: value id */
  em_dim i;      /* i, i?, s (integral) */
  int is_float;  /* s: 1 when f holds a non-integral number */
  double f;      /* f, f?, s */
  int b;         /* b */
  int dtype;     /* d? */
  int n;         /* lists */
  em_dim *ilist; /* i[] */
  int *tlist;    /* T[] */
} em_arg;

typedef struct {
  em_op op;
  em_arg args[EM_MAX_ARGS];
  int out;          /* value id of the result */
  char *src_module; /* provenance: module path, e.g. "model.layers.0.self_attn" (may be NULL) */
  char *src_op;     /* provenance: original torch op, e.g. "torch.nn.functional.rms_norm" (may be NULL) */
} em_node;

typedef struct {
  char *key, *val;
} em_meta;

typedef struct em_graph {
  char *name;
  EM_VEC(em_meta) meta; /* free-form provenance (model, layer, weights source); not part of the hash */
  em_symtab syms;
  EM_VEC(em_value) values;
  EM_VEC(em_node) nodes;
  EM_VEC(int) inputs; /* value ids of inputs and params, in declaration order */
  EM_VEC(int) outputs;
  int *name_ix;       /* values by name: open addressing, value id + 1 per slot (0 empty), at most half full */
  int name_cap;       /* slots in name_ix, a power of two (0 before the first value) */
} em_graph;

em_graph *em_graph_new(const char *name);
void em_graph_free(em_graph *g);

/* Adds a graph input (kind EM_V_INPUT or EM_V_PARAM; weight only for params). Returns the value id, or -1
 * with err filled (duplicate name, too high a rank). */
int em_graph_add_input(em_graph *g, const char *name, em_vkind kind, const char *weight, em_dtype dt,
                       const em_shape *shape, char *err);
/* Adds a node with args already bound by schema position (ownership of list storage passes to the graph,
 * also on failure). Runs inference; returns the new value id, or -1 with err naming the node. */
int em_graph_add_node(em_graph *g, em_op op, em_arg *args, const char *name, const char *src_module,
                      const char *src_op, char *err);
em_status em_graph_add_output(em_graph *g, int value, char *err);
/* Sets (val non-NULL) or removes a metadata entry; entries stay sorted by key. */
void em_graph_set_meta(em_graph *g, const char *key, const char *val);
const char *em_graph_get_meta(const em_graph *g, const char *key);
/* Value id by name, or -1; constant time (a hash index), so building a graph is linear in its size. */
int em_graph_find(const em_graph *g, const char *name);
/* Structural hash: ops, arguments, dtypes, shapes (symbols by index), input kinds, wiring and outputs.
 * Names, hints, weights' names and provenance are excluded. */
uint64_t em_graph_hash(const em_graph *g);

/* Extracts nodes (indices into g->nodes, in order) as a self-contained graph: every value they read that
 * they do not compute becomes an input (params stay params with their weight names; other values become
 * activations named as in g), outs (value ids of g) become its outputs. Symbols, names and provenance are
 * kept. Returns the new graph, or NULL with err filled. */
em_graph *em_graph_subgraph(const em_graph *g, const int *nodes, int n, const int *outs, int nouts, const char *name,
                            char *err);

/* Fills dt/shape for node args of op; err names the problem (the caller prefixes the node). */
em_status em_infer(em_graph *g, em_op op, const em_arg *args, em_dtype *dt, em_shape *shape, char *err);

/* Writes "[1, seq_len, 1024]" into buf. */
char *em_shape_format(const em_symtab *st, const em_shape *s, char *buf, int n);
int em_shape_eq(const em_shape *a, const em_shape *b);
/* Product of dims (may fail on term overflow: -1). */
int em_shape_numel(const em_shape *s, em_dim *out);
/* Checks that every dim of g fits 64 bits at the binding vals (one value per symbol, derived ones computed):
 * each value's dims, element count and byte size, and each integral node argument. EM_OK, or EM_EINPUT
 * with err naming the value, its shape and the binding. */
em_status em_graph_check_binding(const em_graph *g, const int64_t *vals, char *err);
/* Checks a shape as a value of dtype dt may have it: its element count (a polynomial) can be formed, and
 * when it is constant, it and its byte size fit 63 bits. EM_OK, or EM_EINPUT with err describing it. */
em_status em_shape_check(const em_symtab *st, const em_shape *s, em_dtype dt, char *err);
/* Frees list storage held by an argument array. */
void em_args_free(em_arg *args, int nargs);
/* 1 when the argument equals its schema default (and so is omitted when written). */
int em_arg_is_default(const em_argspec *spec, const em_arg *a);
/* Sets the argument to its schema default; returns 0, or -1 when the schema has no default. */
int em_arg_set_default(const em_argspec *spec, em_arg *a);

#endif
