/* cuda.c — the CUDA driver runtime over dlopen: driver types and entry points declared here (never cuda.h), the
 * primary context of each device shared by every handle on it, a per-device "lost" mark set by sticky errors
 * (for the rest of the process: the driver reports a sticky error even from a new primary context, as seen with
 * driver 580 on an H200), and reference counts so that buffers, modules and functions keep what they need alive
 * in any release order. */
#include "cuda.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dl.h"
#include "watchdog.h"

/* ---- driver types, enum values and entry points (the subset emmy uses; values from the CUDA 13.0 headers) ---- */

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;

enum {
  CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK = 8,
  CU_DEVICE_ATTRIBUTE_CLOCK_RATE = 13,
  CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
  CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE = 36,
  CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH = 37,
  CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE = 38,
  CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR = 39,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
  CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR = 81,
  CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR = 82,
  CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
};
enum {
  CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0,
  CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1,
  CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES = 2,
  CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES = 3,
  CU_FUNC_ATTRIBUTE_NUM_REGS = 4,
  CU_FUNC_ATTRIBUTE_PTX_VERSION = 5,
  CU_FUNC_ATTRIBUTE_BINARY_VERSION = 6,
  CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
};
enum { CU_JIT_ERROR_LOG_BUFFER = 5, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6 };
enum { CU_STREAM_DEFAULT = 0, CU_EVENT_DEFAULT = 0, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1 };

/* Errors after which the context is unusable: the driver reports them from every later call. */
static int sticky(CUresult rc) {
  switch (rc) {
  case 214: /* CUDA_ERROR_ECC_UNCORRECTABLE */
  case 220: /* CUDA_ERROR_NVLINK_UNCORRECTABLE */
  case 700: /* CUDA_ERROR_ILLEGAL_ADDRESS */
  case 702: /* CUDA_ERROR_LAUNCH_TIMEOUT */
  case 710: /* CUDA_ERROR_ASSERT */
  case 714: /* CUDA_ERROR_HARDWARE_STACK_ERROR */
  case 715: /* CUDA_ERROR_ILLEGAL_INSTRUCTION */
  case 716: /* CUDA_ERROR_MISALIGNED_ADDRESS */
  case 717: /* CUDA_ERROR_INVALID_ADDRESS_SPACE */
  case 718: /* CUDA_ERROR_INVALID_PC */
  case 719: /* CUDA_ERROR_LAUNCH_FAILED */
  case 911: /* CUDA_ERROR_EXTERNAL_DEVICE */
    return 1;
  default:
    return 0;
  }
}

/* X(field, return, parameters, symbol, fallback symbol or NULL). Versioned names are the ones the CUDA 13 headers
 * map the plain names to. cuGraphInstantiateWithFlags, not the exported "cuGraphInstantiate", whose ABI is the
 * legacy five-argument one. */
#define CU_API(X)                                                                                                    \
  X(Init, CUresult, (unsigned), "cuInit", NULL)                                                                      \
  X(DriverGetVersion, CUresult, (int *), "cuDriverGetVersion", NULL)                                                 \
  X(DeviceGetCount, CUresult, (int *), "cuDeviceGetCount", NULL)                                                     \
  X(DeviceGet, CUresult, (CUdevice *, int), "cuDeviceGet", NULL)                                                     \
  X(DeviceGetName, CUresult, (char *, int, CUdevice), "cuDeviceGetName", NULL)                                       \
  X(DeviceGetAttribute, CUresult, (int *, int, CUdevice), "cuDeviceGetAttribute", NULL)                              \
  X(DeviceTotalMem, CUresult, (size_t *, CUdevice), "cuDeviceTotalMem_v2", NULL)                                     \
  X(PrimaryCtxRetain, CUresult, (CUcontext *, CUdevice), "cuDevicePrimaryCtxRetain", NULL)                           \
  X(PrimaryCtxRelease, CUresult, (CUdevice), "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease")            \
  X(PrimaryCtxReset, CUresult, (CUdevice), "cuDevicePrimaryCtxReset_v2", "cuDevicePrimaryCtxReset")                  \
  X(CtxSetCurrent, CUresult, (CUcontext), "cuCtxSetCurrent", NULL)                                                   \
  X(CtxSynchronize, CUresult, (void), "cuCtxSynchronize", NULL)                                                      \
  X(GetErrorName, CUresult, (CUresult, const char **), "cuGetErrorName", NULL)                                       \
  X(GetErrorString, CUresult, (CUresult, const char **), "cuGetErrorString", NULL)                                   \
  X(MemAlloc, CUresult, (CUdeviceptr *, size_t), "cuMemAlloc_v2", NULL)                                              \
  X(MemFree, CUresult, (CUdeviceptr), "cuMemFree_v2", NULL)                                                          \
  X(MemcpyHtoD, CUresult, (CUdeviceptr, const void *, size_t), "cuMemcpyHtoD_v2", NULL)                              \
  X(MemcpyDtoH, CUresult, (void *, CUdeviceptr, size_t), "cuMemcpyDtoH_v2", NULL)                                    \
  X(MemcpyHtoDAsync, CUresult, (CUdeviceptr, const void *, size_t, CUstream), "cuMemcpyHtoDAsync_v2", NULL)          \
  X(MemcpyDtoHAsync, CUresult, (void *, CUdeviceptr, size_t, CUstream), "cuMemcpyDtoHAsync_v2", NULL)                \
  X(MemHostAlloc, CUresult, (void **, size_t, unsigned), "cuMemHostAlloc", NULL)                                     \
  X(MemFreeHost, CUresult, (void *), "cuMemFreeHost", NULL)                                                          \
  X(MemsetD8, CUresult, (CUdeviceptr, unsigned char, size_t), "cuMemsetD8_v2", NULL)                                 \
  X(MemsetD8Async, CUresult, (CUdeviceptr, unsigned char, size_t, CUstream), "cuMemsetD8Async", NULL)                \
  X(ModuleLoadDataEx, CUresult, (CUmodule *, const void *, unsigned, int *, void **), "cuModuleLoadDataEx", NULL)    \
  X(ModuleUnload, CUresult, (CUmodule), "cuModuleUnload", NULL)                                                      \
  X(ModuleGetFunction, CUresult, (CUfunction *, CUmodule, const char *), "cuModuleGetFunction", NULL)                \
  X(FuncGetAttribute, CUresult, (int *, int, CUfunction), "cuFuncGetAttribute", NULL)                                \
  X(FuncSetAttribute, CUresult, (CUfunction, int, int), "cuFuncSetAttribute", NULL)                                  \
  X(LaunchKernel, CUresult,                                                                                          \
    (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void **, void **),  \
    "cuLaunchKernel", NULL)                                                                                          \
  X(StreamCreate, CUresult, (CUstream *, unsigned), "cuStreamCreate", NULL)                                          \
  X(StreamSynchronize, CUresult, (CUstream), "cuStreamSynchronize", NULL)                                            \
  X(StreamDestroy, CUresult, (CUstream), "cuStreamDestroy_v2", NULL)                                                 \
  X(EventCreate, CUresult, (CUevent *, unsigned), "cuEventCreate", NULL)                                             \
  X(EventRecord, CUresult, (CUevent, CUstream), "cuEventRecord", NULL)                                               \
  X(EventSynchronize, CUresult, (CUevent), "cuEventSynchronize", NULL)                                               \
  X(EventElapsedTime, CUresult, (float *, CUevent, CUevent), "cuEventElapsedTime_v2", "cuEventElapsedTime")          \
  X(EventDestroy, CUresult, (CUevent), "cuEventDestroy_v2", NULL)                                                    \
  X(StreamBeginCapture, CUresult, (CUstream, int), "cuStreamBeginCapture_v2", NULL)                                  \
  X(StreamEndCapture, CUresult, (CUstream, CUgraph *), "cuStreamEndCapture", NULL)                                   \
  X(GraphInstantiate, CUresult, (CUgraphExec *, CUgraph, unsigned long long), "cuGraphInstantiateWithFlags", NULL)   \
  X(GraphLaunch, CUresult, (CUgraphExec, CUstream), "cuGraphLaunch", NULL)                                           \
  X(GraphExecDestroy, CUresult, (CUgraphExec), "cuGraphExecDestroy", NULL)                                           \
  X(GraphDestroy, CUresult, (CUgraph), "cuGraphDestroy", NULL)

static struct {
#define X(f, r, params, s1, s2) r(*f) params;
  CU_API(X)
#undef X
} cu;

static pthread_mutex_t api_mu = PTHREAD_MUTEX_INITIALIZER;
static int api_state; /* 0 untried, 1 loaded, -1 failed (api_err says why) */
static char api_err[EM_ERR_MAX];

/* Resolves every entry point once; the first failure is remembered and repeated. */
static em_status load_api(char *err) {
  pthread_mutex_lock(&api_mu);
  if (!api_state) {
    struct {
      const char *s1, *s2;
      void *slot;
    } tab[] = {
#define X(f, r, params, s1, s2) {s1, s2, (void *)&cu.f},
        CU_API(X)
#undef X
    };
    api_state = 1;
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++) {
      void *s = em_dl_sym(EM_LIB_CUDA, tab[i].s1, api_err);
      if (!s && tab[i].s2 && em_dl_open(EM_LIB_CUDA, NULL)) s = em_dl_sym(EM_LIB_CUDA, tab[i].s2, api_err);
      if (!s) {
        api_state = -1;
        break;
      }
      memcpy(tab[i].slot, &s, sizeof s);
    }
  }
  em_status st = api_state == 1 ? EM_OK : EM_ERUN;
  if (st) em_fail(err, EM_ERUN, "%s", api_err);
  pthread_mutex_unlock(&api_mu);
  return st;
}

int em_cu_has_symbol(const char *name) {
  if (!em_dl_open(EM_LIB_CUDA, NULL)) return 0;
  char err[EM_ERR_MAX];
  return em_dl_sym(EM_LIB_CUDA, name, err) != NULL;
}

/* ---- contexts and the per-device lost mark ---- */

#define EM_CU_MAX_DEVICES 64

/* One entry per device, shared by every handle on it (they share the primary context). */
static pthread_mutex_t dev_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
  int open; /* emmy contexts retaining the primary context */
  int lost;
  char why[EM_ERR_MAX];
} devs[EM_CU_MAX_DEVICES];

struct em_cu_ctx {
  int refs; /* the caller's handle plus every object made from the context */
  CUdevice dev;
  CUcontext cu;
  CUstream stream;
  em_cu_info info;
  char last_launch[160]; /* the kernel (or graph) most recently enqueued, for errors that surface later */
};

struct em_cu_buf {
  em_cu_ctx *ctx;
  CUdeviceptr ptr;
  size_t bytes;
};

struct em_cu_module {
  em_cu_ctx *ctx;
  CUmodule mod;
  int refs; /* the caller's handle plus its functions */
};

struct em_cu_fn {
  em_cu_module *m;
  CUfunction f;
  char *name;
  int dyn_smem;    /* dynamic shared memory allowed so far */
  int static_smem; /* the function's static shared memory (queried at its first launch), -1 before */
};

struct em_cu_host {
  em_cu_ctx *ctx;
  void *p;
  size_t bytes;
};

struct em_cu_stream {
  em_cu_ctx *ctx;
  CUstream s;
};

struct em_cu_event {
  em_cu_ctx *ctx;
  CUevent e;
};

struct em_cu_graph {
  em_cu_ctx *ctx;
  CUgraphExec exec;
  char label[160];
};

static void ctx_ref(em_cu_ctx *c) { __atomic_add_fetch(&c->refs, 1, __ATOMIC_RELAXED); }

const char *em_cu_lost(const em_cu_ctx *c) {
  int d = c->info.device;
  return __atomic_load_n(&devs[d].lost, __ATOMIC_ACQUIRE) ? devs[d].why : NULL;
}

/* Names for errors the driver may be unable to name itself (a stub library answers every call with 34). */
static const struct {
  int code;
  const char *name, *str;
} fallback_names[] = {
    {34, "CUDA_ERROR_STUB_LIBRARY", "the CUDA driver found is a stub library, not the real driver"},
    {35, "CUDA_ERROR_INSUFFICIENT_DRIVER", "the installed NVIDIA driver is older than this CUDA needs"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

/* Formats a driver error as "call(what): NAME: string"; a sticky one marks the device lost. Returns EM_ERUN. */
static em_status fail_cu(em_cu_ctx *c, CUresult rc, const char *call, const char *what, char *err) {
  const char *name = NULL, *str = NULL;
  char num[32];
  if (cu.GetErrorName(rc, &name) || !name) name = NULL;
  if (cu.GetErrorString(rc, &str) || !str) str = NULL;
  for (size_t i = 0; i < sizeof fallback_names / sizeof fallback_names[0] && (!name || !str); i++)
    if (fallback_names[i].code == rc) {
      if (!name) name = fallback_names[i].name;
      if (!str) str = fallback_names[i].str;
    }
  if (!name) {
    snprintf(num, sizeof num, "CUDA_ERROR_%d", rc);
    name = num;
  }
  if (!str) str = "unknown error";
  char head[EM_ERR_MAX];
  snprintf(head, sizeof head, "%s%s%s%s", call, what ? "(" : "", what ? what : "", what ? ")" : "");
  if (c && sticky(rc)) {
    char last[200] = "";
    if (c->last_launch[0]) snprintf(last, sizeof last, " (last launch: %s)", c->last_launch);
    int d = c->info.device;
    pthread_mutex_lock(&dev_mu);
    if (!devs[d].lost) {
      snprintf(devs[d].why, sizeof devs[d].why, "%s: %s%s", head, name, last);
      __atomic_store_n(&devs[d].lost, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&dev_mu);
    return em_fail(err, EM_ERUN, "%s: %s: %s%s; the CUDA context is lost: later calls on device %d fail, in this process",
                   head, name, str, last, d);
  }
  return em_fail(err, EM_ERUN, "%s: %s: %s", head, name, str);
}

/* Refuses work on a lost context, else makes it current on this thread. Nonzero with err on refusal. */
static int enter(em_cu_ctx *c, const char *call, char *err) {
  const char *why = em_cu_lost(c);
  if (why) {
    em_fail(err, EM_ERUN, "%s: refused: the CUDA context of device %d was lost to %s; start a new process", call,
            c->info.device, why);
    return 1;
  }
  CUresult rc = cu.CtxSetCurrent(c->cu);
  if (rc) {
    fail_cu(c, rc, "cuCtxSetCurrent", NULL, err);
    return 1;
  }
  return 0;
}

static void ctx_unref(em_cu_ctx *c) {
  if (__atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) > 0) return;
  int d = c->info.device;
  if (!em_cu_lost(c) && !cu.CtxSetCurrent(c->cu)) cu.StreamDestroy(c->stream);
  pthread_mutex_lock(&dev_mu);
  int last = --devs[d].open == 0;
  /* The last emmy handle on a lost context: free what the dead context holds. The mark stays: the driver keeps
   * answering with the sticky error in this process. */
  if (last && devs[d].lost) cu.PrimaryCtxReset(c->dev);
  pthread_mutex_unlock(&dev_mu);
  cu.PrimaryCtxRelease(c->dev);
  free(c);
}

em_cu_ctx *em_cu_open(int device, char *err) {
  if (load_api(err)) return NULL;
  CUresult rc = cu.Init(0);
  if (rc) {
    fail_cu(NULL, rc, "cuInit", NULL, err);
    return NULL;
  }
  int n = 0;
  if ((rc = cu.DeviceGetCount(&n))) {
    fail_cu(NULL, rc, "cuDeviceGetCount", NULL, err);
    return NULL;
  }
  if (device < 0 || device >= n || device >= EM_CU_MAX_DEVICES) {
    em_fail(err, EM_EINPUT, "CUDA device %d does not exist (the driver sees %d)", device, n);
    return NULL;
  }
  pthread_mutex_lock(&dev_mu);
  if (devs[device].lost) {
    em_fail(err, EM_ERUN, "CUDA device %d is unusable in this process: its context was lost to %s; start a new process",
            device, devs[device].why);
    pthread_mutex_unlock(&dev_mu);
    return NULL;
  }
  devs[device].open++;
  pthread_mutex_unlock(&dev_mu);

  em_cu_ctx *c = em_alloc(sizeof *c);
  c->refs = 1;
  c->info.device = device;
  int retained = 0;
  const char *call = "cuDeviceGet";
  if ((rc = cu.DeviceGet(&c->dev, device))) goto fail;
  call = "cuDevicePrimaryCtxRetain";
  if ((rc = cu.PrimaryCtxRetain(&c->cu, c->dev))) goto fail;
  retained = 1;
  call = "cuCtxSetCurrent";
  if ((rc = cu.CtxSetCurrent(c->cu))) goto fail;
  /* A blocking stream: the synchronous copies and memsets (legacy stream) are ordered with its launches. */
  call = "cuStreamCreate";
  if ((rc = cu.StreamCreate(&c->stream, CU_STREAM_DEFAULT))) goto fail;
  em_cu_info *in = &c->info;
  cu.DriverGetVersion(&in->driver_version);
  call = "cuDeviceGetName";
  if ((rc = cu.DeviceGetName(in->name, (int)sizeof in->name, c->dev))) goto fail;
  call = "cuDeviceTotalMem_v2";
  if ((rc = cu.DeviceTotalMem(&in->total_mem, c->dev))) goto fail;
  struct {
    int attr, *out;
  } attrs[] = {
      {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, &in->cc_major},
      {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, &in->cc_minor},
      {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, &in->sm_count},
      {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, &in->smem_per_block},
      {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, &in->smem_optin},
      {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, &in->smem_per_sm},
      {CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR, &in->regs_per_sm},
      {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, &in->threads_per_sm},
      {CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, &in->l2_bytes},
      {CU_DEVICE_ATTRIBUTE_CLOCK_RATE, &in->clock_khz},
      {CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, &in->mem_clock_khz},
      {CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, &in->bus_width_bits},
  };
  call = "cuDeviceGetAttribute";
  for (size_t i = 0; i < sizeof attrs / sizeof attrs[0]; i++)
    if ((rc = cu.DeviceGetAttribute(attrs[i].out, attrs[i].attr, c->dev))) goto fail;
  return c;

fail:
  fail_cu(NULL, rc, call, NULL, err);
  if (c->stream) cu.StreamDestroy(c->stream);
  pthread_mutex_lock(&dev_mu);
  devs[device].open--;
  pthread_mutex_unlock(&dev_mu);
  if (retained) cu.PrimaryCtxRelease(c->dev);
  free(c);
  return NULL;
}

void em_cu_close(em_cu_ctx *c) {
  if (c) ctx_unref(c);
}

const em_cu_info *em_cu_ctx_info(const em_cu_ctx *c) { return &c->info; }

em_status em_cu_usable(em_cu_ctx *c, const char *what, char *err) { return enter(c, what, err) ? EM_ERUN : EM_OK; }

em_status em_cu_sync(em_cu_ctx *c, char *err) {
  if (enter(c, "cuCtxSynchronize", err)) return EM_ERUN;
  em_wd_begin("cuCtxSynchronize", c->last_launch);
  CUresult rc = cu.CtxSynchronize();
  em_wd_end();
  return rc ? fail_cu(c, rc, "cuCtxSynchronize", NULL, err) : EM_OK;
}

/* ---- memory ---- */

em_cu_buf *em_cu_alloc(em_cu_ctx *c, size_t bytes, char *err) {
  if (enter(c, "cuMemAlloc_v2", err)) return NULL;
  CUdeviceptr p = 0;
  CUresult rc = cu.MemAlloc(&p, bytes ? bytes : 1);
  if (rc) {
    char what[48];
    snprintf(what, sizeof what, "%zu bytes", bytes);
    fail_cu(c, rc, "cuMemAlloc_v2", what, err);
    return NULL;
  }
  em_cu_buf *b = em_alloc(sizeof *b);
  b->ctx = c;
  b->ptr = p;
  b->bytes = bytes;
  ctx_ref(c);
  return b;
}

void em_cu_free(em_cu_buf *b) {
  if (!b) return;
  /* A lost context's memory goes with the context; the driver is not asked again. */
  if (!em_cu_lost(b->ctx) && !cu.CtxSetCurrent(b->ctx->cu)) cu.MemFree(b->ptr);
  ctx_unref(b->ctx);
  free(b);
}

uint64_t em_cu_buf_ptr(const em_cu_buf *b) { return b->ptr; }
size_t em_cu_buf_bytes(const em_cu_buf *b) { return b->bytes; }
em_cu_ctx *em_cu_buf_ctx(const em_cu_buf *b) { return b->ctx; }

em_status em_cu_fill(em_cu_buf *b, unsigned char byte, char *err) {
  if (enter(b->ctx, "cuMemsetD8_v2", err)) return EM_ERUN;
  if (!b->bytes) return EM_OK;
  em_wd_begin("cuMemsetD8_v2", b->ctx->last_launch);
  CUresult rc = cu.MemsetD8(b->ptr, byte, b->bytes);
  em_wd_end();
  return rc ? fail_cu(b->ctx, rc, "cuMemsetD8_v2", NULL, err) : EM_OK;
}

em_status em_cu_fill_async(em_cu_buf *b, unsigned char byte, char *err) {
  if (enter(b->ctx, "cuMemsetD8Async", err)) return EM_ERUN;
  if (!b->bytes) return EM_OK;
  CUresult rc = cu.MemsetD8Async(b->ptr, byte, b->bytes, b->ctx->stream);
  return rc ? fail_cu(b->ctx, rc, "cuMemsetD8Async", NULL, err) : EM_OK;
}

static em_status check_range(const em_cu_buf *b, size_t offset, size_t n, const char *what, char *err) {
  if (offset > b->bytes || n > b->bytes - offset)
    return em_fail(err, EM_EINPUT, "%s of %zu bytes at offset %zu: the buffer holds %zu bytes", what, n, offset, b->bytes);
  return EM_OK;
}

em_status em_cu_write(em_cu_buf *b, size_t offset, const void *src, size_t n, char *err) {
  if (check_range(b, offset, n, "write", err)) return EM_EINPUT;
  if (enter(b->ctx, "cuMemcpyHtoD_v2", err)) return EM_ERUN;
  if (!n) return EM_OK;
  em_wd_begin("cuMemcpyHtoD_v2", b->ctx->last_launch);
  CUresult rc = cu.MemcpyHtoD(b->ptr + offset, src, n);
  em_wd_end();
  return rc ? fail_cu(b->ctx, rc, "cuMemcpyHtoD_v2", NULL, err) : EM_OK;
}

em_status em_cu_read(em_cu_buf *b, size_t offset, void *dst, size_t n, char *err) {
  if (check_range(b, offset, n, "read", err)) return EM_EINPUT;
  if (enter(b->ctx, "cuMemcpyDtoH_v2", err)) return EM_ERUN;
  if (!n) return EM_OK;
  em_wd_begin("cuMemcpyDtoH_v2", b->ctx->last_launch);
  CUresult rc = cu.MemcpyDtoH(dst, b->ptr + offset, n);
  em_wd_end();
  return rc ? fail_cu(b->ctx, rc, "cuMemcpyDtoH_v2", NULL, err) : EM_OK;
}

em_cu_host *em_cu_host_alloc(em_cu_ctx *c, size_t bytes, char *err) {
  if (enter(c, "cuMemHostAlloc", err)) return NULL;
  void *p = NULL;
  CUresult rc = cu.MemHostAlloc(&p, bytes ? bytes : 1, 0);
  if (rc) {
    char what[48];
    snprintf(what, sizeof what, "%zu bytes", bytes);
    fail_cu(c, rc, "cuMemHostAlloc", what, err);
    return NULL;
  }
  memset(p, 0, bytes ? bytes : 1);
  em_cu_host *h = em_alloc(sizeof *h);
  h->ctx = c;
  h->p = p;
  h->bytes = bytes;
  ctx_ref(c);
  return h;
}

void em_cu_host_free(em_cu_host *h) {
  if (!h) return;
  if (!em_cu_lost(h->ctx) && !cu.CtxSetCurrent(h->ctx->cu)) cu.MemFreeHost(h->p);
  ctx_unref(h->ctx);
  free(h);
}

void *em_cu_host_ptr(const em_cu_host *h) { return h->p; }
size_t em_cu_host_bytes(const em_cu_host *h) { return h->bytes; }

/* (the host side's range, as check_range the device side's) */
static em_status check_host_range(const em_cu_host *h, size_t offset, size_t n, const char *what, char *err) {
  if (offset > h->bytes || n > h->bytes - offset)
    return em_fail(err, EM_EINPUT, "%s of %zu bytes at host offset %zu: the host buffer holds %zu bytes", what, n, offset, h->bytes);
  return EM_OK;
}

em_status em_cu_write_async(em_cu_buf *b, size_t boff, const em_cu_host *h, size_t hoff, size_t n, char *err) {
  if (check_range(b, boff, n, "write_async", err) || check_host_range(h, hoff, n, "write_async", err)) return EM_EINPUT;
  if (enter(b->ctx, "cuMemcpyHtoDAsync_v2", err)) return EM_ERUN;
  if (!n) return EM_OK;
  CUresult rc = cu.MemcpyHtoDAsync(b->ptr + boff, (const char *)h->p + hoff, n, b->ctx->stream);
  return rc ? fail_cu(b->ctx, rc, "cuMemcpyHtoDAsync_v2", NULL, err) : EM_OK;
}

em_status em_cu_read_async(em_cu_buf *b, size_t boff, em_cu_host *h, size_t hoff, size_t n, char *err) {
  if (check_range(b, boff, n, "read_async", err) || check_host_range(h, hoff, n, "read_async", err)) return EM_EINPUT;
  if (enter(b->ctx, "cuMemcpyDtoHAsync_v2", err)) return EM_ERUN;
  if (!n) return EM_OK;
  CUresult rc = cu.MemcpyDtoHAsync((char *)h->p + hoff, b->ptr + boff, n, b->ctx->stream);
  return rc ? fail_cu(b->ctx, rc, "cuMemcpyDtoHAsync_v2", NULL, err) : EM_OK;
}

size_t em_cu_dtype_bytes(em_dtype dt, int64_t numel) { return (size_t)numel * (size_t)em_dtype_bytes(dt); }

/* Host tensor -> device layout of its dtype. */
static void to_device(const em_tensor *t, void *dst) {
  int64_t n = t->numel;
  switch (t->dtype) {
  case EM_BF16:
    for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = em_f32_to_bf16_bits((float)em_t_get(t, i));
    break;
  case EM_F16:
    for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = em_f32_to_f16_bits((float)em_t_get(t, i));
    break;
  case EM_F32:
    for (int64_t i = 0; i < n; i++) ((float *)dst)[i] = (float)em_t_get(t, i);
    break;
  case EM_F64:
    for (int64_t i = 0; i < n; i++) ((double *)dst)[i] = em_t_get(t, i);
    break;
  case EM_I32:
    for (int64_t i = 0; i < n; i++) ((int32_t *)dst)[i] = (int32_t)em_t_get(t, i);
    break;
  case EM_I64:
    for (int64_t i = 0; i < n; i++) ((int64_t *)dst)[i] = (int64_t)em_t_get(t, i);
    break;
  case EM_BOOL:
    for (int64_t i = 0; i < n; i++) ((uint8_t *)dst)[i] = em_t_get(t, i) != 0;
    break;
  default:
    break;
  }
}

/* Device layout -> host tensor storage (float for bf16/f16/f32, double otherwise), bit patterns kept (NaN stays). */
static void from_device(em_tensor *t, const void *src) {
  int64_t n = t->numel;
  float *f = t->is_f32 ? t->data : NULL;
  double *d = t->is_f32 ? NULL : t->data;
  switch (t->dtype) {
  case EM_BF16:
    for (int64_t i = 0; i < n; i++) f[i] = em_bf16_bits_to_f32(((const uint16_t *)src)[i]);
    break;
  case EM_F16:
    for (int64_t i = 0; i < n; i++) f[i] = em_f16_bits_to_f32(((const uint16_t *)src)[i]);
    break;
  case EM_F32:
    memcpy(f, src, (size_t)n * 4);
    break;
  case EM_F64:
    memcpy(d, src, (size_t)n * 8);
    break;
  case EM_I32:
    for (int64_t i = 0; i < n; i++) d[i] = (double)((const int32_t *)src)[i];
    break;
  case EM_I64:
    for (int64_t i = 0; i < n; i++) d[i] = (double)((const int64_t *)src)[i];
    break;
  case EM_BOOL:
    for (int64_t i = 0; i < n; i++) d[i] = ((const uint8_t *)src)[i] != 0;
    break;
  default:
    break;
  }
}

em_status em_cu_host_put(em_cu_host *h, size_t off, const em_tensor *t, char *err) {
  size_t n = em_cu_dtype_bytes(t->dtype, t->numel);
  if (check_host_range(h, off, n, "host put", err)) return EM_EINPUT;
  to_device(t, (char *)h->p + off);
  return EM_OK;
}

em_tensor *em_cu_host_get(const em_cu_host *h, size_t off, em_dtype dt, int rank, const int64_t *shape, char *err) {
  em_tensor *t = em_tensor_new(dt, rank, shape, err);
  if (!t) return NULL;
  if (check_host_range(h, off, em_cu_dtype_bytes(dt, t->numel), "host get", err)) {
    em_tensor_free(t);
    return NULL;
  }
  from_device(t, (const char *)h->p + off);
  return t;
}

em_status em_cu_upload_into(em_cu_buf *b, const em_tensor *t, char *err) {
  size_t n = em_cu_dtype_bytes(t->dtype, t->numel);
  if (n > b->bytes)
    return em_fail(err, EM_EINPUT, "upload of a %s tensor of %lld elements needs %zu bytes; the buffer holds %zu",
                   em_dtype_name(t->dtype), (long long)t->numel, n, b->bytes);
  if (!n) return EM_OK;
  void *stage = malloc(n);
  if (!stage) return em_fail(err, EM_ERUN, "upload: out of host memory staging %zu bytes", n);
  to_device(t, stage);
  em_status st = em_cu_write(b, 0, stage, n, err);
  free(stage);
  return st;
}

em_cu_buf *em_cu_upload(em_cu_ctx *c, const em_tensor *t, char *err) {
  em_cu_buf *b = em_cu_alloc(c, em_cu_dtype_bytes(t->dtype, t->numel), err);
  if (!b) return NULL;
  if (em_cu_upload_into(b, t, err)) {
    em_cu_free(b);
    return NULL;
  }
  return b;
}

em_tensor *em_cu_download(em_cu_buf *b, em_dtype dt, int rank, const int64_t *shape, char *err) {
  return em_cu_download_at(b, 0, dt, rank, shape, err);
}

em_tensor *em_cu_download_at(em_cu_buf *b, size_t offset, em_dtype dt, int rank, const int64_t *shape, char *err) {
  em_tensor *t = em_tensor_new(dt, rank, shape, err);
  if (!t) return NULL;
  size_t n = em_cu_dtype_bytes(dt, t->numel);
  void *stage = NULL;
  if (offset > b->bytes || n > b->bytes - offset) {
    em_fail(err, EM_EINPUT, "download of a %s tensor of %lld elements needs %zu bytes at offset %zu; the buffer holds %zu",
            em_dtype_name(dt), (long long)t->numel, n, offset, b->bytes);
    goto fail;
  }
  if (!n) return t;
  if (!(stage = malloc(n))) {
    em_fail(err, EM_ERUN, "download: out of host memory staging %zu bytes", n);
    goto fail;
  }
  if (em_cu_read(b, offset, stage, n, err)) goto fail;
  from_device(t, stage);
  free(stage);
  return t;
fail:
  free(stage);
  em_tensor_free(t);
  return NULL;
}

/* ---- modules and functions ---- */

em_cu_module *em_cu_module_load(em_cu_ctx *c, const void *image, char *err) {
  if (enter(c, "cuModuleLoadDataEx", err)) return NULL;
  char log[1024] = "";
  int opts[2] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void *vals[2] = {log, (void *)(uintptr_t)sizeof log};
  CUmodule mod = NULL;
  CUresult rc = cu.ModuleLoadDataEx(&mod, image, 2, opts, vals);
  if (rc) {
    log[sizeof log - 1] = 0;
    for (char *p = log; *p; p++)
      if (*p == '\n' || *p == '\r') *p = ' ';
    char msg[EM_ERR_MAX];
    fail_cu(c, rc, "cuModuleLoadDataEx", NULL, msg);
    em_fail(err, EM_ERUN, "%s%s%s", msg, log[0] ? ": " : "", log);
    return NULL;
  }
  em_cu_module *m = em_alloc(sizeof *m);
  m->ctx = c;
  m->mod = mod;
  m->refs = 1;
  ctx_ref(c);
  return m;
}

static void module_unref(em_cu_module *m) {
  if (__atomic_sub_fetch(&m->refs, 1, __ATOMIC_ACQ_REL) > 0) return;
  if (!em_cu_lost(m->ctx) && !cu.CtxSetCurrent(m->ctx->cu)) cu.ModuleUnload(m->mod);
  ctx_unref(m->ctx);
  free(m);
}

void em_cu_module_free(em_cu_module *m) {
  if (m) module_unref(m);
}

em_cu_fn *em_cu_fn_get(em_cu_module *m, const char *name, char *err) {
  if (enter(m->ctx, "cuModuleGetFunction", err)) return NULL;
  CUfunction f = NULL;
  CUresult rc = cu.ModuleGetFunction(&f, m->mod, name);
  if (rc) {
    fail_cu(m->ctx, rc, "cuModuleGetFunction", name, err);
    return NULL;
  }
  em_cu_fn *fn = em_alloc(sizeof *fn);
  fn->m = m;
  fn->f = f;
  fn->name = em_strdup(name);
  fn->static_smem = -1;
  __atomic_add_fetch(&m->refs, 1, __ATOMIC_RELAXED);
  return fn;
}

void em_cu_fn_free(em_cu_fn *f) {
  if (!f) return;
  module_unref(f->m);
  free(f->name);
  free(f);
}

const char *em_cu_fn_name(const em_cu_fn *f) { return f->name; }
em_cu_ctx *em_cu_fn_ctx(const em_cu_fn *f) { return f->m->ctx; }

em_status em_cu_fn_attrs_get(em_cu_fn *f, em_cu_fn_attrs *a, char *err) {
  memset(a, 0, sizeof *a);
  if (enter(f->m->ctx, "cuFuncGetAttribute", err)) return EM_ERUN;
  struct {
    int attr, *out;
  } tab[] = {
      {CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, &a->max_threads},
      {CU_FUNC_ATTRIBUTE_NUM_REGS, &a->regs},
      {CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, &a->local_bytes},
      {CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, &a->static_smem},
      {CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES, &a->const_bytes},
      {CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, &a->max_dynamic_smem},
      {CU_FUNC_ATTRIBUTE_PTX_VERSION, &a->ptx_version},
      {CU_FUNC_ATTRIBUTE_BINARY_VERSION, &a->binary_version},
  };
  for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++) {
    CUresult rc = cu.FuncGetAttribute(tab[i].out, tab[i].attr, f->f);
    if (rc) return fail_cu(f->m->ctx, rc, "cuFuncGetAttribute", f->name, err);
  }
  return EM_OK;
}

em_status em_cu_fn_set_max_dynamic_smem(em_cu_fn *f, int bytes, char *err) {
  if (enter(f->m->ctx, "cuFuncSetAttribute", err)) return EM_ERUN;
  /* (a variant pinned past the rules' resource check: say what does not fit, not the driver's "invalid argument") */
  int most = f->m->ctx->info.smem_optin;
  if (most > 0 && bytes > most) {
    snprintf(err, EM_ERR_MAX, "%s: %d bytes of dynamic shared memory exceed the device's %d a block (opt-in)", f->name, bytes, most);
    return EM_EINPUT;
  }
  CUresult rc = cu.FuncSetAttribute(f->f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes);
  if (rc) {
    char what[EM_ERR_MAX];
    snprintf(what, sizeof what, "%s, MAX_DYNAMIC_SHARED_SIZE_BYTES=%d", f->name, bytes);
    return fail_cu(f->m->ctx, rc, "cuFuncSetAttribute", what, err);
  }
  f->dyn_smem = bytes;
  return EM_OK;
}

/* ---- tensor maps (TMA) ---- */

typedef CUresult (*tmap_encode_fn)(void *, int, unsigned, void *, const unsigned long long *, const unsigned long long *,
                                   const unsigned *, const unsigned *, int, int, int, int);

em_status em_cu_tmap_encode(void *out128, uint64_t ptr, int bf16, int rank, const uint64_t *dims, const uint64_t *strides,
                            const unsigned *box, char *err) {
  static tmap_encode_fn enc;
  if (load_api(err)) return EM_ERUN;
  if (!enc) {
    void *s = em_dl_sym(EM_LIB_CUDA, "cuTensorMapEncodeTiled", err);
    if (!s) return em_fail(err, EM_ERUN, "this CUDA driver has no cuTensorMapEncodeTiled (TMA needs a CUDA 12+ driver)");
    memcpy(&enc, &s, sizeof s);
  }
  int ok = rank >= 2 && rank <= 5 && box[0] * 2 == 128 && ptr % 16 == 0;
  for (int i = 0; ok && i < rank; i++) ok = dims[i] >= 1 && box[i] >= 1 && box[i] <= 256 && (i == 0 || strides[i - 1] % 16 == 0);
  if (!ok)
    return em_fail(err, EM_EINPUT, "tensor map: rank %d, box %ux%u, dims %llux%llu, stride %llu B at 0x%llx (needs rank 2..5, "
                   "a 128-byte box row, box extents 1..256, 16-byte aligned strides)", rank, box[0], rank > 1 ? box[1] : 0,
                   (unsigned long long)dims[0], (unsigned long long)(rank > 1 ? dims[1] : 0),
                   (unsigned long long)(rank > 1 ? strides[0] : 0), (unsigned long long)ptr);
  unsigned long long d[5], st[4];
  unsigned bx[5], estr[5];
  for (int i = 0; i < rank; i++) d[i] = dims[i], bx[i] = box[i], estr[i] = 1;
  for (int i = 0; i + 1 < rank; i++) st[i] = strides[i];
  /* CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 = 9, FLOAT16 = 6; INTERLEAVE_NONE = 0; SWIZZLE_128B = 3; L2_PROMOTION_L2_128B = 2;
   * FLOAT_OOB_FILL_NONE = 0 (zeros) */
  CUresult rc = enc(out128, bf16 ? 9 : 6, (unsigned)rank, (void *)(uintptr_t)ptr, d, st, bx, estr, 0, 3, 2, 0);
  if (rc) {
    const char *name = NULL;
    if (cu.GetErrorName) cu.GetErrorName(rc, &name);
    return em_fail(err, EM_ERUN, "cuTensorMapEncodeTiled: %s (rank %d, dims %llux%llu, stride %llu B, box %ux%u)",
                   name ? name : "error", rank, d[0], d[1], st[0], bx[0], bx[1]);
  }
  return EM_OK;
}

/* ---- launches, streams, events ---- */

#define EM_CU_MAX_ARGS 256

/* cuLaunchKernelEx's configuration, as the CUDA 13 headers lay it out (cuda.h CUlaunchConfig, CUlaunchAttribute:
 * the attribute's id padded to 8 bytes, then a 64-byte value union) */
typedef struct {
  int id;
  char pad[4];
  union {
    char bytes[64];
    int i;
  } value;
} cu_launch_attr;
typedef struct {
  unsigned grid[3], block[3], smem;
  CUstream stream;
  cu_launch_attr *attrs;
  unsigned nattrs;
} cu_launch_config;
enum { CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6 };
_Static_assert(sizeof(cu_launch_attr) == 72 && sizeof(cu_launch_config) == 56, "cuLaunchKernelEx's layout (cuda.h)");

typedef CUresult (*launch_ex_fn)(const void *, CUfunction, void **, void **);

typedef CUresult (*max_clusters_fn)(int *, CUfunction, const void *);

em_status em_cu_fn_max_clusters(em_cu_fn *f, const unsigned grid[3], const unsigned block[3], unsigned smem, int *n,
                                char *err) {
  static max_clusters_fn q;
  static int looked;
  *n = -1;
  if (!looked) {
    char e2[EM_ERR_MAX];
    void *sym = em_dl_sym(EM_LIB_CUDA, "cuOccupancyMaxActiveClusters", e2);
    if (sym) memcpy(&q, &sym, sizeof sym);
    looked = 1;
  }
  if (!q || f->m->ctx->info.cc_major < 9) return EM_OK;
  if (smem > 48 * 1024 && (int)smem > f->dyn_smem) {
    em_status st = em_cu_fn_set_max_dynamic_smem(f, (int)smem, err);
    if (st) return st;
  }
  if (enter(f->m->ctx, "cuOccupancyMaxActiveClusters", err)) return EM_ERUN;
  /* (the cluster shape is the kernel's own, __cluster_dims__: the configuration names none) */
  cu_launch_config lc = {{grid[0], grid[1], grid[2]}, {block[0], block[1], block[2]}, smem, f->m->ctx->stream, NULL, 0};
  CUresult rc = q(n, f->f, &lc);
  if (rc) return fail_cu(f->m->ctx, rc, "cuOccupancyMaxActiveClusters", f->name, err);
  return EM_OK;
}

/* The launch itself: cuLaunchKernel, or with cfg->pdl on compute capability 9+ cuLaunchKernelEx (looked up on first
 * use; a driver without it launches plainly: the kernel's griddepcontrol.wait then has nothing to wait for) allowing
 * programmatic stream serialization. */
static CUresult launch_raw(em_cu_fn *f, const em_cu_launch_cfg *cfg, CUstream s, void **params) {
  static launch_ex_fn ex;
  static int looked;
  if (cfg->pdl && f->m->ctx->info.cc_major >= 9 && !looked) {
    char err[EM_ERR_MAX];
    void *sym = em_dl_sym(EM_LIB_CUDA, "cuLaunchKernelEx", err);
    if (sym) memcpy(&ex, &sym, sizeof sym);
    looked = 1;
  }
  if (!cfg->pdl || f->m->ctx->info.cc_major < 9 || !ex)
    return cu.LaunchKernel(f->f, cfg->grid[0], cfg->grid[1], cfg->grid[2], cfg->block[0], cfg->block[1], cfg->block[2],
                           cfg->smem, s, params, NULL);
  cu_launch_attr a;
  memset(&a, 0, sizeof a);
  a.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  a.value.i = 1;
  cu_launch_config lc = {{cfg->grid[0], cfg->grid[1], cfg->grid[2]}, {cfg->block[0], cfg->block[1], cfg->block[2]}, cfg->smem, s, &a, 1};
  return ex(&lc, f->f, params, NULL);
}

em_status em_cu_launch(em_cu_fn *f, const em_cu_launch_cfg *cfg, const em_cu_arg *args, int nargs, char *err) {
  em_cu_ctx *c = f->m->ctx;
  if (nargs < 0 || nargs > EM_CU_MAX_ARGS)
    return em_fail(err, EM_EINPUT, "launch of %s: %d arguments (at most %d)", f->name, nargs, EM_CU_MAX_ARGS);
  if (enter(c, "cuLaunchKernel", err)) return EM_ERUN;
  /* past 48 KB of static and dynamic shared memory together the function must be opted in to its dynamic
   * size (a 48 KB cp.async ring beside split-K's static counter, a staged RoPE tile beside static operand tiles) */
  if (cfg->smem > 0 && f->static_smem < 0) {
    CUresult rc = cu.FuncGetAttribute(&f->static_smem, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f->f);
    if (rc) return fail_cu(c, rc, "cuFuncGetAttribute", f->name, err);
  }
  if (cfg->smem > 0 && (long long)cfg->smem + (f->static_smem > 0 ? f->static_smem : 0) > 48 * 1024 &&
      (int)cfg->smem > f->dyn_smem) {
    em_status st = em_cu_fn_set_max_dynamic_smem(f, (int)cfg->smem, err);
    if (st) return st;
  }
  em_cu_arg local[EM_CU_MAX_ARGS];
  void *params[EM_CU_MAX_ARGS];
  for (int i = 0; i < nargs; i++) {
    local[i] = args[i];
    switch (local[i].kind) {
    case EM_CU_ARG_PTR: params[i] = &local[i].v.ptr; break;
    case EM_CU_ARG_I32: params[i] = &local[i].v.i32; break;
    case EM_CU_ARG_I64: params[i] = &local[i].v.i64; break;
    case EM_CU_ARG_F32: params[i] = &local[i].v.f32; break;
    case EM_CU_ARG_TMAP: params[i] = local[i].v.tmap; break;
    default: return em_fail(err, EM_EINPUT, "launch of %s: argument %d has an unknown kind", f->name, i + 1);
    }
  }
  CUstream s = cfg->stream ? cfg->stream->s : c->stream;
  CUresult rc = launch_raw(f, cfg, s, nargs ? params : NULL);
  if (rc) {
    char msg[EM_ERR_MAX];
    fail_cu(c, rc, "cuLaunchKernel", f->name, msg);
    return em_fail(err, EM_ERUN, "%s (grid %ux%ux%u, block %ux%ux%u, smem %u)", msg, cfg->grid[0], cfg->grid[1],
                   cfg->grid[2], cfg->block[0], cfg->block[1], cfg->block[2], cfg->smem);
  }
  snprintf(c->last_launch, sizeof c->last_launch, "%s", f->name);
  return EM_OK;
}

em_cu_stream *em_cu_stream_new(em_cu_ctx *c, char *err) {
  if (enter(c, "cuStreamCreate", err)) return NULL;
  CUstream s = NULL;
  CUresult rc = cu.StreamCreate(&s, CU_STREAM_DEFAULT);
  if (rc) {
    fail_cu(c, rc, "cuStreamCreate", NULL, err);
    return NULL;
  }
  em_cu_stream *st = em_alloc(sizeof *st);
  st->ctx = c;
  st->s = s;
  ctx_ref(c);
  return st;
}

em_status em_cu_stream_sync(em_cu_stream *s, char *err) {
  if (enter(s->ctx, "cuStreamSynchronize", err)) return EM_ERUN;
  em_wd_begin("cuStreamSynchronize", s->ctx->last_launch);
  CUresult rc = cu.StreamSynchronize(s->s);
  em_wd_end();
  return rc ? fail_cu(s->ctx, rc, "cuStreamSynchronize", NULL, err) : EM_OK;
}

void em_cu_stream_free(em_cu_stream *s) {
  if (!s) return;
  if (!em_cu_lost(s->ctx) && !cu.CtxSetCurrent(s->ctx->cu)) cu.StreamDestroy(s->s);
  ctx_unref(s->ctx);
  free(s);
}

em_cu_event *em_cu_event_new(em_cu_ctx *c, char *err) {
  if (enter(c, "cuEventCreate", err)) return NULL;
  CUevent e = NULL;
  CUresult rc = cu.EventCreate(&e, CU_EVENT_DEFAULT);
  if (rc) {
    fail_cu(c, rc, "cuEventCreate", NULL, err);
    return NULL;
  }
  em_cu_event *ev = em_alloc(sizeof *ev);
  ev->ctx = c;
  ev->e = e;
  ctx_ref(c);
  return ev;
}

em_status em_cu_event_record(em_cu_event *e, em_cu_stream *s, char *err) {
  if (enter(e->ctx, "cuEventRecord", err)) return EM_ERUN;
  CUresult rc = cu.EventRecord(e->e, s ? s->s : e->ctx->stream);
  return rc ? fail_cu(e->ctx, rc, "cuEventRecord", NULL, err) : EM_OK;
}

em_status em_cu_event_sync(em_cu_event *e, char *err) {
  if (enter(e->ctx, "cuEventSynchronize", err)) return EM_ERUN;
  em_wd_begin("cuEventSynchronize", e->ctx->last_launch);
  CUresult rc = cu.EventSynchronize(e->e);
  em_wd_end();
  return rc ? fail_cu(e->ctx, rc, "cuEventSynchronize", NULL, err) : EM_OK;
}

em_status em_cu_event_elapsed_ms(em_cu_event *start, em_cu_event *end, float *ms, char *err) {
  if (enter(start->ctx, "cuEventElapsedTime", err)) return EM_ERUN;
  CUresult rc = cu.EventElapsedTime(ms, start->e, end->e);
  return rc ? fail_cu(start->ctx, rc, "cuEventElapsedTime", NULL, err) : EM_OK;
}

void em_cu_event_free(em_cu_event *e) {
  if (!e) return;
  if (!em_cu_lost(e->ctx) && !cu.CtxSetCurrent(e->ctx->cu)) cu.EventDestroy(e->e);
  ctx_unref(e->ctx);
  free(e);
}

/* ---- graphs (timing over them: cuda_time.c) ---- */

em_cu_graph *em_cu_graph_capture(em_cu_ctx *c, em_cu_body body, void *ud, char *err) {
  if (enter(c, "cuStreamBeginCapture_v2", err)) return NULL;
  CUresult rc = cu.StreamBeginCapture(c->stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
  if (rc) {
    fail_cu(c, rc, "cuStreamBeginCapture_v2", NULL, err);
    return NULL;
  }
  c->last_launch[0] = 0;
  em_status st = body(ud, err);
  CUgraph g = NULL;
  cu.CtxSetCurrent(c->cu);
  rc = cu.StreamEndCapture(c->stream, &g);
  if (st || rc) {
    if (!st) fail_cu(c, rc, "cuStreamEndCapture", NULL, err);
    if (g) cu.GraphDestroy(g);
    return NULL;
  }
  CUgraphExec exec = NULL;
  rc = cu.GraphInstantiate(&exec, g, 0);
  cu.GraphDestroy(g);
  if (rc) {
    fail_cu(c, rc, "cuGraphInstantiateWithFlags", NULL, err);
    return NULL;
  }
  em_cu_graph *gr = em_alloc(sizeof *gr);
  gr->ctx = c;
  gr->exec = exec;
  snprintf(gr->label, sizeof gr->label, "graph ending in %s", c->last_launch[0] ? c->last_launch : "no kernel");
  ctx_ref(c);
  return gr;
}

em_status em_cu_graph_launch(em_cu_graph *g, char *err) {
  if (enter(g->ctx, "cuGraphLaunch", err)) return EM_ERUN;
  CUresult rc = cu.GraphLaunch(g->exec, g->ctx->stream);
  if (rc) return fail_cu(g->ctx, rc, "cuGraphLaunch", g->label, err);
  snprintf(g->ctx->last_launch, sizeof g->ctx->last_launch, "%s", g->label);
  return EM_OK;
}

void em_cu_graph_free(em_cu_graph *g) {
  if (!g) return;
  if (!em_cu_lost(g->ctx) && !cu.CtxSetCurrent(g->ctx->cu)) cu.GraphExecDestroy(g->exec);
  ctx_unref(g->ctx);
  free(g);
}
