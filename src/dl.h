/* dl.h — the CUDA driver, NVRTC and CUPTI opened with dlopen at first use, so emmy starts and runs every
 * GPU-free command on a machine with no GPU, no driver and no toolkit. */
#ifndef EM_DL_H
#define EM_DL_H

#include "base.h"

typedef enum { EM_LIB_CUDA, EM_LIB_NVRTC, EM_LIB_CUPTI, EM_NLIBS } em_lib;

/* Opens lib once (thread-safe) and returns its handle, or NULL with err saying which files were tried. */
void *em_dl_open(em_lib lib, char *err);
/* Resolves a symbol of an opened library; NULL with err naming it when absent. */
void *em_dl_sym(em_lib lib, const char *name, char *err);

typedef struct {
  int driver_version; /* e.g. 13000 */
  int device_count;
  char name[128];     /* device 0 */
  int cc_major, cc_minor, sm_count;
} em_cuda_info;

/* Initializes the driver and describes device 0; EM_ERUN with err when there is no driver or no GPU. */
em_status em_cuda_probe(em_cuda_info *info, char *err);
/* NVRTC's version, e.g. 13, 0. */
em_status em_nvrtc_version(int *major, int *minor, char *err);

#endif
