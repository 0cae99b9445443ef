/* emit.h — CUDA C++ emission for one kernel: a reproducer graph (the kernel's ops as a self-contained
 * graph), its kind and anchor, and a complete knob assignment (the tile IR) give readable CUDA source with
 * the symbolic dims as kernel arguments and masked tiles, plus how to launch it.
 * Every value is computed by index remapping: a thread asks for value v at a multi-index and the emitter
 * walks the op DAG backwards (views permute / re-linearize / offset indices, elementwise ops broadcast,
 * gathers read indices), so views are never materialized. Outputs are written at indices aligned with the
 * kernel's domain (the anchor's output, or a row kernel's reduction input). */
#ifndef EM_EMIT_H
#define EM_EMIT_H

#include "ctr_legal.h"
#include "graph.h"
#include "knobs.h"

typedef enum { EM_K_POINTWISE, EM_K_ROW, EM_K_REDUCE, EM_K_CONTRACTION, EM_K_ATTENTION, EM_NKINDS } em_kkind;

/* A knob assignment: distinct knobs of the table (knobs.h), kept sorted by name — the kernel's header comment
 * lists them in this order. Every knob fits: there are EM_NKNOBS of them. */
typedef struct {
  int n;
  em_knob_id id[EM_NKNOBS];
  int64_t val[EM_NKNOBS];
} em_knobs;

/* The tile IR: a kernel with every knob bound. */
typedef struct {
  const em_graph *g; /* the reproducer */
  em_kkind kind;
  int anchor;        /* value id of the anchor in g, or -1 (pointwise) */
  em_knobs knobs;
  const char *name;  /* kernel entry name */
} em_tile;

/* Launch shape: each extent is an expression over the symbols (canonical dim text), evaluated at launch. */
typedef struct {
  char grid[3][160];
  int block[3];
  int64_t smem;      /* dynamic shared memory bytes */
  int64_t scratch_per_tile; /* bytes of zero-initialised scratch per block of the grid (an argument after the
                              * outputs): SPLIT_K > 1, per (m, n) tile, the kernel leaving its counters at zero again;
                              * STAMP=1, per CTA of a persistent grid, its stamp record (overwritten each launch) */
  int ntmaps;        /* TMA=1: tensor-map arguments after the outputs (encoded per launch, runtime shapes) */
  struct {
    int input;       /* kernel input position (or output position, when output is 1): a row-major [rows, inner]
                      * tensor of 2-byte elements */
    int output;      /* 1: the map is of kernel output `input` (a TMA store) */
    int64_t inner;   /* the row's elements, when not the tensor's last dim (a contiguous view of [rows, inner]); 0 */
    int box[2];      /* box: inner elements x rows */
    int own;         /* 1: the map has the tensor's own dims (rank 3..5, innermost first), box[1] rows of the second
                      * innermost and one of each outer dim (EPI_SMEM=7 into heads: [B, H, S, D]); 0: rows x inner */
  } tmaps[4];
  int persistent;    /* 0, or the cluster size (1, 2): grid[0] counts tiles and the launcher caps it at the SM count,
                      * rounded down to a multiple of the cluster size (a persistent loop) */
  int sm_blocks;     /* a persistent grid's CTAs an SM (the cap is the SM count times this; 0 or 1: one) */
  int group;         /* a persistent grid's CTAs in groups of this many beyond any cluster (SPLIT_L2=1: one tile's K
                      * parts, summed through the scratch): the cap rounded down to a multiple of it; 0 or 1: none */
  int pdl;           /* 1 (EMMY_PDL=1): the kernel waits for the previous grid in the stream (griddepcontrol.wait)
                      * before anything else and lets the next one launch early, so the launcher may use
                      * programmatic dependent launch */
  int nsyms;         /* symbol arguments passed after the tensors, in symbol-table order */
  int syms[EM_MAX_SYMS];
} em_launch;

/* Emits the kernel; *src is malloc'ed (caller frees). Returns EM_EINPUT with err naming the kernel and the
 * reason when the kernel cannot be emitted with these knobs (a gate should have refused it). */
em_status em_emit(const em_tile *t, char **src, em_launch *launch, char *err);

/* The legality table's facts (ctr_legal.h) of the contraction over anchor (a value id of g) into f, resolved as em_emit
 * resolves them for every knob plan (they read no knob): the rules' kernel summary takes them from here, so that the
 * rules and the emitter judge a variant on one set of facts. Returns EM_EINPUT with err where the emitter builds no
 * contraction over anchor (every variant of it would fail with that reason). */
em_status em_emit_ctr_facts(const em_graph *g, int anchor, em_ctr_facts *f, char *err);

/* Sets knob name to v in k (replacing its value if set). Returns EM_EINPUT with err naming the knob when name is
 * not in the knob table or v is not one of its legal values (k unchanged). */
em_status em_knob_set(em_knobs *k, const char *name, int64_t v, char *err);
/* The value of knob id in k, or the table's default when k leaves it out. */
int64_t em_knob_value(const em_knobs *k, em_knob_id id);
const char *em_kkind_name(em_kkind k);
int em_kkind_parse(const char *s);

#endif
