/* safetensors.h — reading and writing .safetensors files (8-byte little-endian header length, a JSON header,
 * then the raw tensor bytes). A file is mmapped read-only and validated as strictly as the reference Rust
 * `safetensors` crate before any accessor sees it; em_st_load converts one entry to a host tensor. */
#ifndef EM_SAFETENSORS_H
#define EM_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "base.h"
#include "tensor.h"

/* Largest header the reference crate accepts. */
#define EM_ST_MAX_HEADER 100000000ULL

typedef struct em_st_file em_st_file;

/* Maps and validates path. Returns the open file (free with em_st_close), or NULL with one line in err
 * naming the file and the check that failed; nothing stays mapped or open on failure. */
em_st_file *em_st_open(const char *path, char *err);
/* Unmaps f and frees it; NULL is a no-op. Tensors returned by em_st_load stay valid (they are copies). */
void em_st_close(em_st_file *f);

/* The path f was opened with (owned by f). */
const char *em_st_path(const em_st_file *f);
/* Number of tensors. Entries are indexed 0..count-1 in file order (ascending data offset). */
int em_st_count(const em_st_file *f);
/* Name of entry i (owned by f; valid until em_st_close). */
const char *em_st_name(const em_st_file *f, int i);
/* Index of the tensor called name, or -1. O(log n). */
int em_st_find(const em_st_file *f, const char *name);
/* safetensors dtype name of entry i: "BF16", "F32", "F8_E4M3", … (static storage). */
const char *em_st_dtype(const em_st_file *f, int i);
/* Rank of entry i and its dims (owned by f; rank 0 is a scalar). */
int em_st_rank(const em_st_file *f, int i);
const int64_t *em_st_shape(const em_st_file *f, int i);
/* Raw little-endian bytes of entry i inside the mapping (no alignment guarantee); *nbytes gets their count. */
const void *em_st_data(const em_st_file *f, int i, size_t *nbytes);

/* "__metadata__" lookup: the value for key, or NULL (owned by f). */
const char *em_st_meta(const em_st_file *f, const char *key);
/* Metadata entries in ascending key order, for enumeration. */
int em_st_meta_count(const em_st_file *f);
const char *em_st_meta_key(const em_st_file *f, int i);
const char *em_st_meta_value(const em_st_file *f, int i);

/* Converts entry i to a new tensor of dtype want (caller frees). Sources BOOL, U8, I8, I16, U16, I32, U32,
 * I64, U64, F16, BF16, F32 and F64 convert through em_t_set's rounding (exact cases such as BF16→bf16 are
 * copied directly); F8 sources, a rank above EM_TENSOR_MAX_RANK or a bad index give NULL with err naming the
 * tensor. */
em_tensor *em_st_load(const em_st_file *f, int i, em_dtype want, char *err);

/* Writes n tensors to path: header entries sorted by name with data in that order, "__metadata__" first when
 * meta_kv (NULL-terminated k, v, k, v, … list; may be NULL) is given, the header padded with spaces to a
 * multiple of 8. Each tensor keeps its dtype (bf16→BF16, f16→F16, f32→F32, f64→F64, i32→I32, i64→I64,
 * bool→BOOL). The bytes go to "<path>.tmp", which is renamed over path only once complete, so an
 * interrupted write never leaves a partial file at path. Names must be distinct, valid UTF-8 and not
 * "__metadata__". Nothing is borrowed past the call. */
em_status em_st_write(const char *path, int n, const char *const *names, const em_tensor *const *tensors,
                      const char *const *meta_kv, char *err);

#endif
