/* nvrtc.h — in-process CUDA C++ compilation with NVRTC (opened with dlopen, no CUDA headers needed): one job or
 * many on a thread pool, an optional forked child killed at a deadline, the ptxas resource usage parsed from the
 * log, and a content-addressed cache of cubins keyed by source, arch, options and NVRTC identity.
 * A compile's outcome (ok, compile error, timeout, compiler crash) is data in the result, never an abort. */
#ifndef EM_NVRTC_H
#define EM_NVRTC_H

#include <stddef.h>

#include "base.h"

/* X(ENUM, label) — the outcome of one job. compile_fail is deterministic (bad source or option) and cached;
 * timeout, crash, error (NVRTC internal or system failure) and cancelled are not. */
#define EM_NVRTC_STATUSES(X)   \
  X(OK, "ok")                  \
  X(COMPILE_FAIL, "compile_fail") \
  X(TIMEOUT, "timeout")        \
  X(CRASH, "crash")            \
  X(ERROR, "error")            \
  X(CANCELLED, "cancelled")

typedef enum {
#define X(e, s) EM_NVRTC_##e,
  EM_NVRTC_STATUSES(X)
#undef X
  EM_NVRTC_NSTATUS
} em_nvrtc_status;

/* "ok", "compile_fail", … (static storage). */
const char *em_nvrtc_status_name(em_nvrtc_status s);

/* One compile. Every pointer is borrowed and must stay valid until the call returns. */
typedef struct {
  const char *source;             /* CUDA C++ text (required) */
  const char *name;               /* program name the log and line info use; NULL → "kernel.cu" */
  const char *arch;               /* "sm_90a" → cubin (ptxas runs, resource usage parsed); "compute_90a" → PTX */
  const char *const *options;     /* extra NVRTC options in order; "-std=c++17" is added unless one sets -std */
  int noptions;
  int fast_math;                  /* adds --use_fast_math */
  int lineinfo;                   /* adds -lineinfo */
  const char *const *name_exprs;  /* optional nvrtcAddNameExpression inputs; lowered names come back */
  int nname_exprs;
  int timeout_ms;                 /* > 0: compile in a fork()ed child, SIGKILLed at the deadline (NVRTC cannot
                                     be cancelled promptly: its flow callback can stay silent for seconds inside
                                     ptxas); 0: compile in the calling thread */
  int no_cache;                   /* 1: neither read nor write the cubin cache */
  const char *cache_dir;          /* NULL: $EMMY_CUBIN_CACHE or ~/.cache/emmy/cubin; "off" disables */
} em_nvrtc_job;

/* ptxas -v figures for one function; -1 where the log gave none. */
typedef struct {
  char *name;             /* mangled name (extern "C" names are plain) */
  int entry;              /* 1: a __global__ entry; 0: a non-inlined device function (stack and spills only) */
  int regs, barriers;
  int smem, cmem0;        /* static shared memory, constant bank 0 (params; NVRTC 13 no longer prints it on sm_90) */
  int stack, cumulative_stack, spill_stores, spill_loads; /* bytes */
} em_nvrtc_kernel;

typedef struct {
  em_nvrtc_status status;
  char *log;                      /* the full program log ("" when empty); for timeout/crash/error, emmy's line
                                     followed by whatever NVRTC logged */
  unsigned char *code;            /* cubin bytes, or PTX text (NUL-terminated, not counted) when is_ptx */
  size_t code_size;
  int is_ptx;
  em_nvrtc_kernel *kernels;       /* in log order */
  int nkernels;
  /* Summary: regs and smem are the largest over entries; stack and spills the largest over every function
   * (a callee's spills run inside its kernel). -1 when the log has no ptxas info (PTX targets, failures). */
  int regs, smem, stack, spill_stores, spill_loads;
  char **lowered;                 /* lowered[i] for job->name_exprs[i] (NULL when unknown); nlowered entries */
  int nlowered;
  double ms;                      /* wall ms of the em_nvrtc_compile call (a cache hit: the lookup) */
  double compile_ms;              /* wall ms of NVRTC itself (a cache hit: that of the cached compile) */
  int cache_hit;
  char key[33];                   /* cache key, 32 hex digits (set even when the cache is off) */
} em_nvrtc_result;

/* Compiles job into res (zeroed first; free with em_nvrtc_result_free). Returns EM_OK whenever res holds an
 * outcome — compile errors, timeouts and crashes included; EM_EINPUT for a malformed job (no source, bad arch,
 * an -arch option) and EM_ERUN when NVRTC is missing or the system fails (pipe, fork): then err has one line
 * and res->status is EM_NVRTC_ERROR with that line as its log. Thread-safe. */
em_status em_nvrtc_compile(const em_nvrtc_job *job, em_nvrtc_result *res, char *err);

/* Frees what res owns and zeroes it; safe on a zeroed or already freed result. */
void em_nvrtc_result_free(em_nvrtc_result *res);

/* Called from the thread that called em_nvrtc_compile_many, one call at a time, as each job finishes:
 * done of total finished, index the job, r its result (read-only, valid until compile_many returns).
 * A nonzero return cancels the jobs not yet started (their status becomes cancelled) and ends the calls. */
typedef int (*em_nvrtc_progress_fn)(void *ctx, int done, int total, int index, const em_nvrtc_result *r);

/* Compiles jobs[0..n) on nthreads threads (0: one per online CPU; never more than n), results[i] for jobs[i]
 * (caller-owned array of n, each freed with em_nvrtc_result_free). Per-job failures are in the results (a job
 * whose em_nvrtc_compile failed has status error and the line as its log). Returns EM_ERUN only when NVRTC is
 * missing; the results are then all status error. When no thread can be started the calling thread compiles.
 * progress may be NULL. */
em_status em_nvrtc_compile_many(const em_nvrtc_job *jobs, int n, em_nvrtc_result *results, int nthreads,
                                em_nvrtc_progress_fn progress, void *ctx, char *err);

/* The same in the background: em_nvrtc_batch_start returns at once (NULL, err and every result status error when
 * NVRTC is missing) while nthreads threads compile; jobs, results and what the jobs point to stay valid until
 * em_nvrtc_batch_end. em_nvrtc_batch_next gives the index of a finished job not given before (in the order they
 * finished), waiting up to wait_ms for one (< 0: as long as it takes; 0: not at all): -1 when none finished in
 * time, -2 once every job was given. em_nvrtc_batch_cancel makes the jobs not yet started "cancelled";
 * em_nvrtc_batch_end waits for the running ones, trims the cache like compile_many and frees the batch (NULL is a
 * no-op). One thread drives a batch. */
typedef struct em_nvrtc_batch em_nvrtc_batch;
em_nvrtc_batch *em_nvrtc_batch_start(const em_nvrtc_job *jobs, int n, em_nvrtc_result *results, int nthreads,
                                     char *err);
int em_nvrtc_batch_next(em_nvrtc_batch *b, int wait_ms);
void em_nvrtc_batch_cancel(em_nvrtc_batch *b);
void em_nvrtc_batch_end(em_nvrtc_batch *b);

/* Fills res->kernels and the summary from a ptxas -v log (replacing earlier ones). Exposed for tests. */
void em_nvrtc_parse_log(const char *log, em_nvrtc_result *res);

/* The cache folder for override (NULL: $EMMY_CUBIN_CACHE, else $HOME/.cache/emmy/cubin) into buf (cap bytes).
 * Returns 1, or 0 when the cache is off ("off" or no HOME) or the path does not fit. */
int em_nvrtc_cache_dir(const char *override, char *buf, size_t cap);

/* Removes every cache entry (and stale temporary file) from the cache folder of override; other files and the
 * folder itself stay. *removed (may be NULL) gets the number of files removed. A missing folder is not an
 * error; EM_ERUN when the cache is off or a file cannot be removed. */
em_status em_nvrtc_cache_clear(const char *override, int *removed, char *err);

/* Keeps the cache folder of override under max_bytes (0: no cap): whole entries (an entry's .cubin, .ptx and .meta)
 * removed least recently used first (a cache hit touches the .meta) until the rest is at most 90% of the cap.
 * *kept gets the bytes left, *removed the files removed (both may be NULL). A missing folder or an off cache is
 * not an error. em_nvrtc_compile_many trims to em_nvrtc_cache_cap() after it stored a new entry. */
em_status em_nvrtc_cache_trim(const char *override, long long max_bytes, long long *kept, int *removed, char *err);

/* $EMMY_CUBIN_CACHE_MB in bytes; 2048 MB when unset or not a number. */
long long em_nvrtc_cache_cap(void);

#endif
