/* dl.c — lazy, thread-safe dlopen of libcuda, libnvrtc and libcupti with their search paths. */
#include "dl.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const candidates[EM_NLIBS][8] = {
    [EM_LIB_CUDA] = {"libcuda.so.1", "libcuda.so", NULL},
    [EM_LIB_NVRTC] = {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12", "/usr/local/cuda/lib64/libnvrtc.so",
                      "/usr/local/cuda/lib64/libnvrtc.so.13", "/usr/local/cuda/lib64/libnvrtc.so.12", NULL},
    [EM_LIB_CUPTI] = {"libcupti.so", "libcupti.so.13", "libcupti.so.12", "/usr/local/cuda/lib64/libcupti.so",
                      "/usr/local/cuda/lib/libcupti.so", "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so", NULL},
};
static const char *const lib_names[EM_NLIBS] = {"CUDA driver (libcuda.so.1)", "NVRTC (libnvrtc.so)",
                                                "CUPTI (libcupti.so)"};
static const char *const env_names[EM_NLIBS] = {"EMMY_LIBCUDA", "EMMY_LIBNVRTC", "EMMY_LIBCUPTI"};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static void *handles[EM_NLIBS];
static int tried[EM_NLIBS];
static char why[EM_NLIBS][EM_ERR_MAX];

void *em_dl_open(em_lib lib, char *err) {
  pthread_mutex_lock(&mu);
  if (!tried[lib]) {
    tried[lib] = 1;
    const char *env = getenv(env_names[lib]);
    char first_err[256] = "";
    char cuda_home_path[512];
    const char *home = getenv("CUDA_HOME");
    if (env && *env) {
      handles[lib] = dlopen(env, RTLD_NOW | RTLD_LOCAL);
      if (!handles[lib]) snprintf(first_err, sizeof first_err, "%s", dlerror());
    }
    // an explicit path is the only one tried: EMMY_LIBCUDA=/nonexistent means "no driver", never a fallback
    // to the system's (which would quietly run the GPU steps a GPU-less run was asked for)
    int pinned = env && *env;
    if (!handles[lib] && !pinned && home && *home && lib != EM_LIB_CUDA) {
      snprintf(cuda_home_path, sizeof cuda_home_path, "%s/lib64/%s", home, lib == EM_LIB_NVRTC ? "libnvrtc.so" : "libcupti.so");
      handles[lib] = dlopen(cuda_home_path, RTLD_NOW | RTLD_LOCAL);
    }
    for (int i = 0; !pinned && !handles[lib] && candidates[lib][i]; i++) {
      handles[lib] = dlopen(candidates[lib][i], RTLD_NOW | RTLD_LOCAL);
      if (!handles[lib] && !first_err[0]) snprintf(first_err, sizeof first_err, "%s", dlerror());
    }
    if (!handles[lib])
      snprintf(why[lib], sizeof why[lib], "%s not found (%s); set %s to its path", lib_names[lib],
               first_err[0] ? first_err : "no candidate", env_names[lib]);
  }
  void *h = handles[lib];
  if (!h && err) snprintf(err, EM_ERR_MAX, "%s", why[lib]);
  pthread_mutex_unlock(&mu);
  return h;
}

void *em_dl_sym(em_lib lib, const char *name, char *err) {
  void *h = em_dl_open(lib, err);
  if (!h) return NULL;
  void *s = dlsym(h, name);
  if (!s) em_fail(err, EM_ERUN, "%s has no symbol %s", lib_names[lib], name);
  return s;
}

typedef int (*cu_int_fn)(int *);
typedef int (*cu_init_fn)(unsigned);
typedef int (*cu_dev_get_fn)(int *, int);
typedef int (*cu_dev_name_fn)(char *, int, int);
typedef int (*cu_dev_attr_fn)(int *, int, int);

em_status em_cuda_probe(em_cuda_info *info, char *err) {
  memset(info, 0, sizeof *info);
  cu_init_fn init = (cu_init_fn)em_dl_sym(EM_LIB_CUDA, "cuInit", err);
  if (!init) return EM_ERUN;
  cu_int_fn ver = (cu_int_fn)em_dl_sym(EM_LIB_CUDA, "cuDriverGetVersion", err);
  cu_int_fn count = (cu_int_fn)em_dl_sym(EM_LIB_CUDA, "cuDeviceGetCount", err);
  cu_dev_get_fn get = (cu_dev_get_fn)em_dl_sym(EM_LIB_CUDA, "cuDeviceGet", err);
  cu_dev_name_fn name = (cu_dev_name_fn)em_dl_sym(EM_LIB_CUDA, "cuDeviceGetName", err);
  cu_dev_attr_fn attr = (cu_dev_attr_fn)em_dl_sym(EM_LIB_CUDA, "cuDeviceGetAttribute", err);
  if (!ver || !count || !get || !name || !attr) return EM_ERUN;
  int rc = init(0);
  if (rc) return em_fail(err, EM_ERUN, "cuInit failed with CUDA error %d (no usable GPU?)", rc);
  ver(&info->driver_version);
  if ((rc = count(&info->device_count)) || info->device_count == 0)
    return em_fail(err, EM_ERUN, "the CUDA driver sees no GPU (error %d)", rc);
  int dev;
  get(&dev, 0);
  name(info->name, sizeof info->name, dev);
  attr(&info->cc_major, 75, dev); /* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR */
  attr(&info->cc_minor, 76, dev); /* ..._MINOR */
  attr(&info->sm_count, 16, dev); /* CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT */
  return EM_OK;
}

em_status em_nvrtc_version(int *major, int *minor, char *err) {
  typedef int (*ver_fn)(int *, int *);
  ver_fn v = (ver_fn)em_dl_sym(EM_LIB_NVRTC, "nvrtcVersion", err);
  if (!v) return EM_ERUN;
  if (v(major, minor)) return em_fail(err, EM_ERUN, "nvrtcVersion failed");
  return EM_OK;
}
