/* cupti.h — kernel activity records from CUPTI (libcupti opened with dlopen at first use): the start and end
 * of every kernel the GPU ran between em_cupti_start and em_cupti_stop, CUDA-graph launches included. emmy uses
 * them for each kernel's in-program time inside a whole-graph replay. */
#ifndef EM_CUPTI_H
#define EM_CUPTI_H

#include "base.h"

typedef struct {
  char name[128];        /* the kernel's name (emmy's kernels are extern "C": the plain name) */
  uint64_t start, end;   /* GPU timestamps, ns */
  uint32_t correlation;  /* the launch's correlation id */
  uint64_t graph_node;   /* the graph node's id, 0 outside a graph */
} em_cupti_rec;

/* Starts recording kernel activity (the first call registers the buffer callbacks). EM_ERUN with err when
 * CUPTI is missing, was not built in (no cupti_activity.h at build time), or refuses. */
em_status em_cupti_start(char *err);
/* Flushes, stops recording and hands over the records in GPU start order (*recs: caller frees; *dropped:
 * records CUPTI could not store). */
em_status em_cupti_stop(em_cupti_rec **recs, int *n, int *dropped, char *err);

#endif
