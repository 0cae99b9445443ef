/* cuda.h — the CUDA driver runtime: a device's primary context, device buffers with copies that convert emmy host
 * tensors to and from their device layout, cubin modules and functions, launches, streams, events, CUDA-graph
 * capture and replay, and event timing. The driver is reached through dl.h at first use (no CUDA header), so emmy
 * builds and starts where there is none. Every failure is one line naming the driver call, the error's name and
 * string. After a sticky error (illegal address, failed launch, ...) the device's context is marked lost and every
 * later call on that device fails at once with that reason, for the rest of the process (CUDA cannot recover from
 * a sticky error in-process; the worker that ran the broken kernel is thrown away). */
#ifndef EM_CUDA_H
#define EM_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "base.h"
#include "tensor.h"

typedef struct em_cu_ctx em_cu_ctx;
typedef struct em_cu_buf em_cu_buf;
typedef struct em_cu_module em_cu_module;
typedef struct em_cu_fn em_cu_fn;
typedef struct em_cu_stream em_cu_stream;
typedef struct em_cu_event em_cu_event;
typedef struct em_cu_graph em_cu_graph;
typedef struct em_cu_host em_cu_host;

typedef struct {
  int device;             /* ordinal */
  char name[128];         /* "NVIDIA H200" */
  int driver_version;     /* 13000 for CUDA 13.0 */
  int cc_major, cc_minor;
  int sm_count;
  int smem_per_block;     /* without opt-in (48 KB) */
  int smem_optin;         /* max dynamic + static shared memory per block with opt-in */
  int smem_per_sm;
  int regs_per_sm, threads_per_sm;
  int l2_bytes;
  int clock_khz, mem_clock_khz, bus_width_bits;
  size_t total_mem;
} em_cu_info;

/* Initializes the driver, retains device's primary context and makes it current on the calling thread, with one
 * stream of its own that launches and timing use. NULL with err when there is no driver (err then starts with
 * "CUDA driver (libcuda.so.1) not found"), no such device, or a device whose context this process lost. The caller
 * owns the result: em_cu_close. */
em_cu_ctx *em_cu_open(int device, char *err);
/* Drops the caller's reference. The context lives on while buffers, modules, functions, streams, events or graphs
 * made from it exist; the last one released releases the primary context. NULL is a no-op. */
void em_cu_close(em_cu_ctx *c);
const em_cu_info *em_cu_ctx_info(const em_cu_ctx *c);
/* EM_OK where c may take work, else the one-line refusal of a lost context (as every call here gives) for `what`. */
em_status em_cu_usable(em_cu_ctx *c, const char *what, char *err);
/* NULL while the context is usable; else the one-line reason it was lost. */
const char *em_cu_lost(const em_cu_ctx *c);
/* Whether the driver exports name (a probe for version differences); 0 when there is no driver. */
int em_cu_has_symbol(const char *name);

/* Device memory. A buffer holds its context alive. Allocation of 0 bytes gives a 1-byte buffer of size 0. */
em_cu_buf *em_cu_alloc(em_cu_ctx *c, size_t bytes, char *err);
void em_cu_free(em_cu_buf *b);
uint64_t em_cu_buf_ptr(const em_cu_buf *b);
size_t em_cu_buf_bytes(const em_cu_buf *b);
em_cu_ctx *em_cu_buf_ctx(const em_cu_buf *b);
/* Sets every byte (cuMemsetD8_v2); 0xFF poisons float outputs with NaN. */
em_status em_cu_fill(em_cu_buf *b, unsigned char byte, char *err);
/* em_cu_fill enqueued on the context's stream (no wait). */
em_status em_cu_fill_async(em_cu_buf *b, unsigned char byte, char *err);
/* Raw copies of n bytes at offset; both wait for the context's stream (it is a blocking stream). */
em_status em_cu_write(em_cu_buf *b, size_t offset, const void *src, size_t n, char *err);
em_status em_cu_read(em_cu_buf *b, size_t offset, void *dst, size_t n, char *err);
/* Bytes a tensor of dt and numel takes on the device: bf16/f16 2, f32/i32 4, f64/i64 8, bool 1 each. */
size_t em_cu_dtype_bytes(em_dtype dt, int64_t numel);
/* Writes t in its dtype's device layout at the start of b; EM_EINPUT when it does not fit. */
em_status em_cu_upload_into(em_cu_buf *b, const em_tensor *t, char *err);
/* A new buffer holding t in its device layout; the caller owns it. */
em_cu_buf *em_cu_upload(em_cu_ctx *c, const em_tensor *t, char *err);
/* A new host tensor of dt and shape read from the start of b (NaN bit patterns stay NaN); the caller owns it. */
em_tensor *em_cu_download(em_cu_buf *b, em_dtype dt, int rank, const int64_t *shape, char *err);
/* The same from offset bytes into the buffer (emmy serve: one pooled row of the hidden states). */
em_tensor *em_cu_download_at(em_cu_buf *b, size_t offset, em_dtype dt, int rank, const int64_t *shape, char *err);

/* Page-locked host memory (cuMemHostAlloc), the other end of the copies the host does not wait for: emmy serve's
 * staged inputs and read-back rows. Holds its context alive; zeroed when made. */
em_cu_host *em_cu_host_alloc(em_cu_ctx *c, size_t bytes, char *err);
void em_cu_host_free(em_cu_host *h);
void *em_cu_host_ptr(const em_cu_host *h);
size_t em_cu_host_bytes(const em_cu_host *h);
/* n bytes between b at boff and h at hoff, enqueued on the context's stream (after the launches and graph replays
 * enqueued before, before those after) and returning at once: h's bytes may be rewritten (write) or read (read) only
 * once an event recorded after the copy has completed. */
em_status em_cu_write_async(em_cu_buf *b, size_t boff, const em_cu_host *h, size_t hoff, size_t n, char *err);
em_status em_cu_read_async(em_cu_buf *b, size_t boff, em_cu_host *h, size_t hoff, size_t n, char *err);
/* t written into h at off in its dtype's device layout (as em_cu_upload_into stages it); a host tensor of dt and shape
 * read from h at off (as em_cu_download_at converts it). EM_EINPUT / NULL when the range is outside h. */
em_status em_cu_host_put(em_cu_host *h, size_t off, const em_tensor *t, char *err);
em_tensor *em_cu_host_get(const em_cu_host *h, size_t off, em_dtype dt, int rank, const int64_t *shape, char *err);

/* Modules and functions. The image (cubin, fatbin or PTX) is read during the call only. A function holds its module
 * alive, a module its context. */
em_cu_module *em_cu_module_load(em_cu_ctx *c, const void *image, char *err);
void em_cu_module_free(em_cu_module *m);
em_cu_fn *em_cu_fn_get(em_cu_module *m, const char *name, char *err);
void em_cu_fn_free(em_cu_fn *f);
const char *em_cu_fn_name(const em_cu_fn *f);
em_cu_ctx *em_cu_fn_ctx(const em_cu_fn *f);

typedef struct {
  int max_threads;      /* per block, as compiled */
  int regs;             /* per thread */
  int local_bytes;      /* per thread (spills, local arrays) */
  int static_smem;      /* bytes */
  int const_bytes;
  int max_dynamic_smem; /* currently allowed dynamic shared memory */
  int ptx_version, binary_version; /* 90 = sm_90 */
} em_cu_fn_attrs;
em_status em_cu_fn_attrs_get(em_cu_fn *f, em_cu_fn_attrs *a, char *err);
/* Allows up to bytes of dynamic shared memory (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES); launches do
 * this themselves when they ask for more than 48 KB. */
em_status em_cu_fn_set_max_dynamic_smem(em_cu_fn *f, int bytes, char *err);
/* How many clusters of the kernel's compiled cluster shape fit on the device at once with this launch's block and
 * dynamic shared memory (cuOccupancyMaxActiveClusters; a persistent clustered grid larger than that runs a second
 * wave). *n = -1 where the driver has no such query or the device is older than compute capability 9. */
em_status em_cu_fn_max_clusters(em_cu_fn *f, const unsigned grid[3], const unsigned block[3], unsigned smem, int *n,
                                char *err);

/* X(ENUM, Lua tag) — kinds of kernel arguments. */
#define EM_CU_ARG_KINDS(X) \
  X(PTR, "ptr")            \
  X(I32, "i32")            \
  X(I64, "i64")            \
  X(F32, "f32")            \
  X(TMAP, "tmap")

typedef enum {
#define X(e, n) EM_CU_ARG_##e,
  EM_CU_ARG_KINDS(X)
#undef X
  EM_CU_NARG_KINDS
} em_cu_arg_kind;

typedef struct {
  em_cu_arg_kind kind;
  union {
    uint64_t ptr; /* CUdeviceptr */
    int32_t i32;
    int64_t i64;
    float f32;
    _Alignas(64) unsigned char tmap[128]; /* a CUtensorMap, passed by value (__grid_constant__) */
  } v;
} em_cu_arg;

/* Encodes a tiled tensor map (cuTensorMapEncodeTiled) over a tensor of 2-byte elements (bf16 or f16) at ptr of rank
 * 2..5: dims[0] the innermost extent, strides[i] the bytes between steps of dims[i + 1] (rank - 1 of them, multiples
 * of 16), box[i] the box's extent in dims[i] (box[0] * 2 must be 128, each 1..256), staged with the 128-byte swizzle;
 * elements outside the tensor read as zero and are not written. The driver entry point is looked up on first use: a
 * driver without it is an error, not a failed start. */
em_status em_cu_tmap_encode(void *out128, uint64_t ptr, int bf16, int rank, const uint64_t *dims, const uint64_t *strides,
                            const unsigned *box, char *err);

typedef struct {
  unsigned grid[3], block[3];
  unsigned smem;         /* dynamic shared memory, bytes */
  em_cu_stream *stream;  /* NULL: the context's stream */
  int pdl;               /* 1: programmatic dependent launch (cuLaunchKernelEx with programmatic stream
                          * serialization): the kernel may start before the previous one in the stream ends, so it
                          * must wait for it (griddepcontrol.wait) before it touches global memory */
} em_cu_launch_cfg;

/* Enqueues f. Errors the launch itself detects come back here; faults inside the kernel come back from the next
 * synchronizing call, which names the last kernel launched. */
em_status em_cu_launch(em_cu_fn *f, const em_cu_launch_cfg *cfg, const em_cu_arg *args, int nargs, char *err);
/* Waits for all work of the context (cuCtxSynchronize). */
em_status em_cu_sync(em_cu_ctx *c, char *err);

em_cu_stream *em_cu_stream_new(em_cu_ctx *c, char *err);
em_status em_cu_stream_sync(em_cu_stream *s, char *err);
void em_cu_stream_free(em_cu_stream *s);

em_cu_event *em_cu_event_new(em_cu_ctx *c, char *err);
/* Records on s (NULL: the context's stream). */
em_status em_cu_event_record(em_cu_event *e, em_cu_stream *s, char *err);
em_status em_cu_event_sync(em_cu_event *e, char *err);
em_status em_cu_event_elapsed_ms(em_cu_event *start, em_cu_event *end, float *ms, char *err);
void em_cu_event_free(em_cu_event *e);

/* Work to capture or time: enqueues on the context's stream; returns EM_OK or fills err. */
typedef em_status (*em_cu_body)(void *ud, char *err);

/* Runs body once while the context's stream is captured (thread-local mode) and instantiates the captured graph.
 * The body must only enqueue work: a synchronizing call inside it fails and invalidates the capture. */
em_cu_graph *em_cu_graph_capture(em_cu_ctx *c, em_cu_body body, void *ud, char *err);
/* Enqueues one replay on the context's stream. */
em_status em_cu_graph_launch(em_cu_graph *g, char *err);
void em_cu_graph_free(em_cu_graph *g);

typedef struct {
  int reps;              /* samples, 1 to 100000 */
  int warmup;            /* untimed runs first, 0 to 100000 */
  int graph;             /* 1: capture body once and time graph replays */
  double min_sample_us;  /* a sample repeats the work until it lasts this long (<= 0: 20, with graph 200 as torch's
                          * timer); not with flush_bytes */
  double warmup_ms;      /* after the warmup runs, more runs until this much GPU time has passed (0: none) */
  size_t flush_bytes;    /* > 0: an L2 flush of this many bytes (more than the L2; flush_mode: written or read)
                          * before each sample, untimed; one run per sample */
  int flush_mode;        /* with flush_bytes: 1 reads that many bytes instead of writing them (the L2 left clean),
                          * 2 writes them (a memset); 0: $EMMY_FLUSH decides (memset, the default, or read) */
} em_cu_time_opts;
#define EM_CU_TIME_DEFAULTS {50, 5, 0, 0, 0, 0, 0}

typedef struct {
  double median_us, min_us, p20_us, p80_us, mean_us; /* per run of the body (or replay) */
  int samples, batch, graph, flushed;
  double *all_us;        /* samples values in order of measurement; owned: em_cu_timing_free */
} em_cu_timing;

/* Times body with events on the context's stream: warmup runs (then more for warmup_ms of GPU time), and either
 * a calibration that picks batch (runs per sample so that a sample lasts min_sample_us; with graph, the batch is
 * captured into one graph, up to 1024 runs a replay, as torch's timer does) and reps chained samples
 * with no sync between them, or (flush_bytes > 0) reps single-run samples each after an untimed L2-flushing memset. */
em_status em_cu_time(em_cu_ctx *c, em_cu_body body, void *ud, const em_cu_time_opts *o, em_cu_timing *out, char *err);
void em_cu_timing_free(em_cu_timing *t);

#endif
