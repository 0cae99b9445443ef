/* test_safetensors.c — the .safetensors reader and writer: round trips of every emmy dtype, the exact bytes
 * the reference Rust crate writes (its own test vectors), conversions between dtypes, one hand-made bad file
 * per validation check (each must fail with one line naming the file and the check), and the load speed of a
 * Qwen3-sized bf16 embedding. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "safetensors.h"
#include "unit.h"

/* ---- helpers ---------------------------------------------------------------------------------------- */

typedef struct {
  char dir[64];
  char path[4][160]; /* at() rotates through these, so a few paths can be live at once */
  int k;
} scratch;

static void scratch_open(scratch *s) {
  memset(s, 0, sizeof *s);
  snprintf(s->dir, sizeof s->dir, "/tmp/emmy-st-XXXXXX");
  if (!mkdtemp(s->dir)) {
    perror("mkdtemp");
    abort();
  }
}

/* Removes every file in the scratch folder, then the folder. */
static void scratch_close(scratch *s) {
  DIR *d = opendir(s->dir);
  struct dirent *e;
  char p[400];
  while (d && (e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    snprintf(p, sizeof p, "%s/%s", s->dir, e->d_name);
    unlink(p);
  }
  if (d) closedir(d);
  rmdir(s->dir);
}

static const char *at(scratch *s, const char *name) {
  char *p = s->path[s->k++ % 4];
  size_t dl = strlen(s->dir), nl = strlen(name);
  if (dl + 1 + nl >= sizeof s->path[0]) abort();
  memcpy(p, s->dir, dl);
  p[dl] = '/';
  memcpy(p + dl + 1, name, nl + 1);
  return p;
}

static int file_exists(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0;
}

/* How many temp files of this process's writes (src/file.c: "<name>.tmp.<pid>.<n>") are in the scratch folder. */
static int own_temps(scratch *s) {
  char mark[32];
  snprintf(mark, sizeof mark, ".tmp.%ld.", (long)getpid());
  DIR *d = opendir(s->dir);
  struct dirent *e;
  int n = 0;
  while (d && (e = readdir(d))) n += strstr(e->d_name, mark) != NULL;
  if (d) closedir(d);
  return n;
}

static void write_bytes(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(p, 1, n, f) != n) abort();
  fclose(f);
}

static unsigned char *read_all(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  *n = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc(*n ? *n : 1);
  if (fread(b, 1, *n, f) != *n) abort();
  fclose(f);
  return b;
}

/* A file of: hlen as u64 LE, the header text, ndata bytes of a fixed pattern. */
static void craft_len(const char *path, uint64_t hlen, const char *header, size_t ndata) {
  size_t hl = strlen(header), n = 8 + hl + ndata;
  unsigned char *b = malloc(n);
  memcpy(b, &hlen, 8);
  memcpy(b + 8, header, hl);
  for (size_t i = 0; i < ndata; i++) b[8 + hl + i] = (unsigned char)(i * 7 + 3);
  write_bytes(path, b, n);
  free(b);
}

static void craft(const char *path, const char *header, size_t ndata) {
  craft_len(path, strlen(header), header, ndata);
}

/* Opening path must fail with one line that starts with the path and contains phrase. */
#define EXPECT_BAD(path, phrase)                                                                         \
  do {                                                                                                   \
    char e_[EM_ERR_MAX] = "";                                                                            \
    em_st_file *f_ = em_st_open(path, e_);                                                               \
    CHECK(f_ == NULL);                                                                                   \
    em_st_close(f_);                                                                                     \
    CHECK(strncmp(e_, path, strlen(path)) == 0 && !strncmp(e_ + strlen(path), ": ", 2));                \
    CHECK(strchr(e_, '\n') == NULL);                                                                     \
    if (!strstr(e_, phrase)) {                                                                           \
      fprintf(stderr, "    %s:%d: wanted '%s' in: %s\n", __FILE__, __LINE__, phrase, e_);                \
      (*unit_failed)++;                                                                                  \
    }                                                                                                    \
  } while (0)

/* A bad header written into a fresh file, then EXPECT_BAD. */
#define BAD_HEADER(s, header, ndata, phrase)                                                             \
  do {                                                                                                   \
    const char *p_ = at(s, "bad.safetensors");                                                           \
    craft(p_, header, ndata);                                                                            \
    EXPECT_BAD(p_, phrase);                                                                              \
  } while (0)

static em_tensor *mk(em_dtype dt, int rank, const int64_t *shape) {
  char err[EM_ERR_MAX];
  em_tensor *t = em_tensor_new(dt, rank, shape, err);
  if (!t) abort();
  return t;
}

/* ---- round trips ------------------------------------------------------------------------------------ */

TEST(safetensors_roundtrip_every_dtype) {
  scratch s;
  scratch_open(&s);
  static const em_dtype dts[] = {EM_BF16, EM_F16, EM_F32, EM_F64, EM_I32, EM_I64, EM_BOOL};
  static const char *const names[] = {"w.bf16", "w.f16", "w.f32", "w.f64", "i.i32", "i.i64", "b.bool"};
  static const char *const stnames[] = {"BF16", "F16", "F32", "F64", "I32", "I64", "BOOL"};
  enum { N = 7 };
  em_tensor *ts[N];
  const int64_t shapes[N][3] = {{3, 5, 2}, {7, 3}, {4, 9}, {2, 2, 3}, {11}, {3, 4}, {5, 3}};
  const int ranks[N] = {3, 2, 2, 3, 1, 2, 2};
  for (int i = 0; i < N; i++) {
    ts[i] = mk(dts[i], ranks[i], shapes[i]);
    if (em_dtype_is_float(dts[i])) em_tensor_fill_normal(ts[i], 100 + (uint64_t)i, 0.5, 3.0);
    else if (dts[i] == EM_BOOL) em_tensor_fill_int(ts[i], 7, 0, 2);
    else if (dts[i] == EM_I32) em_tensor_fill_int(ts[i], 8, -2000000000, 2000000000);
    else em_tensor_fill_int(ts[i], 9, -((int64_t)1 << 50), (int64_t)1 << 50);
  }
  const char *meta[] = {"format", "pt", "note", "quote \" backslash \\ newline \n tab \t é", NULL};
  char err[EM_ERR_MAX];
  const char *path = at(&s, "rt.safetensors");
  CHECK(em_st_write(path, N, names, (const em_tensor *const *)ts, meta, err) == EM_OK);
  CHECK(own_temps(&s) == 0);
  path = at(&s, "rt.safetensors");

  /* the header length is a multiple of 8 and the header is padded with spaces */
  size_t fsz;
  unsigned char *raw = read_all(path, &fsz);
  uint64_t hlen;
  memcpy(&hlen, raw, 8);
  CHECK(hlen % 8 == 0 && hlen + 8 <= fsz);
  CHECK(raw[8] == '{');
  size_t last = 8 + (size_t)hlen - 1;
  while (raw[last] == ' ') last--;
  CHECK(raw[last] == '}' && 8 + hlen - 1 - last < 8);
  CHECK(!memcmp(raw + 8, "{\"__metadata__\":{\"format\":\"pt\",\"note\":", 38)); /* metadata first, keys sorted */
  free(raw);

  em_st_file *f = em_st_open(path, err);
  CHECK(f != NULL);
  if (!f) {
    fprintf(stderr, "    %s\n", err);
    goto cleanup;
  }
  CHECK(em_st_count(f) == N);
  CHECK(!strcmp(em_st_meta(f, "format"), "pt"));
  CHECK(!strcmp(em_st_meta(f, "note"), meta[3]));
  CHECK(em_st_meta(f, "missing") == NULL);
  CHECK(em_st_meta_count(f) == 2 && !strcmp(em_st_meta_key(f, 0), "format"));
  /* file order is name order: b.bool, i.i32, i.i64, w.bf16, w.f16, w.f32, w.f64 */
  for (int i = 1; i < N; i++) CHECK(strcmp(em_st_name(f, i - 1), em_st_name(f, i)) < 0);
  const unsigned char *prev_end = NULL;
  for (int i = 0; i < N; i++) {
    size_t nb;
    const unsigned char *d = em_st_data(f, i, &nb);
    if (prev_end) CHECK(d == prev_end);
    prev_end = d + nb;
  }
  CHECK(em_st_find(f, "nope") == -1);
  for (int i = 0; i < N; i++) {
    int k = em_st_find(f, names[i]);
    CHECK(k >= 0);
    if (k < 0) continue;
    CHECK(!strcmp(em_st_name(f, k), names[i]));
    CHECK(!strcmp(em_st_dtype(f, k), stnames[i]));
    CHECK(em_st_rank(f, k) == ranks[i]);
    for (int j = 0; j < ranks[i]; j++) CHECK(em_st_shape(f, k)[j] == shapes[i][j]);
    size_t nb;
    em_st_data(f, k, &nb);
    CHECK(nb == (size_t)ts[i]->numel * (size_t)em_dtype_bytes(dts[i]));
    em_tensor *u = em_st_load(f, k, dts[i], err);
    CHECK(u != NULL);
    if (!u) continue;
    CHECK(u->dtype == dts[i] && u->rank == ranks[i] && u->numel == ts[i]->numel);
    int64_t diff = 0, nonzero = 0;
    for (int64_t e = 0; e < u->numel; e++) {
      diff += em_t_get(u, e) != em_t_get(ts[i], e);
      nonzero += em_t_get(u, e) != 0;
    }
    CHECK(diff == 0);
    CHECK(nonzero > 0);
    em_tensor_free(u);
  }
  em_st_close(f);

  /* writing again replaces the file; no metadata means no __metadata__ entry */
  CHECK(em_st_write(path, 1, names, (const em_tensor *const *)ts, NULL, err) == EM_OK);
  f = em_st_open(path, err);
  CHECK(f && em_st_count(f) == 1 && em_st_meta_count(f) == 0);
  em_st_close(f);
cleanup:
  for (int i = 0; i < N; i++) em_tensor_free(ts[i]);
  scratch_close(&s);
}

/* The byte-exact outputs of the reference crate's own tests (safetensors/src/tensor.rs: test_serialization,
 * test_serialization_forced_alignement, test_empty). */
TEST(safetensors_writer_matches_reference_bytes) {
  scratch s;
  scratch_open(&s);
  char err[EM_ERR_MAX];
  static const unsigned char want1[] = {
      64,  0,   0,   0,   0,   0,   0,   0,   123, 34,  97,  116, 116, 110, 46,  48,  34,  58,  123, 34,  100,
      116, 121, 112, 101, 34,  58,  34,  70,  51,  50,  34,  44,  34,  115, 104, 97,  112, 101, 34,  58,  91,
      49,  44,  50,  44,  51,  93,  44,  34,  100, 97,  116, 97,  95,  111, 102, 102, 115, 101, 116, 115, 34,
      58,  91,  48,  44,  50,  52,  93,  125, 125, 0,   0,   0,   0,   0,   0,   128, 63,  0,   0,   0,   64,
      0,   0,   64,  64,  0,   0,   128, 64,  0,   0,   160, 64};
  static const unsigned char want2[] = {
      72,  0,   0,   0,   0,   0,   0,   0,   123, 34,  97,  116, 116, 110, 48,  34,  58,  123, 34,  100, 116,
      121, 112, 101, 34,  58,  34,  70,  51,  50,  34,  44,  34,  115, 104, 97,  112, 101, 34,  58,  91,  49,
      44,  49,  44,  50,  44,  51,  93,  44,  34,  100, 97,  116, 97,  95,  111, 102, 102, 115, 101, 116, 115,
      34,  58,  91,  48,  44,  50,  52,  93,  125, 125, 32,  32,  32,  32,  32,  32,  32,  0,   0,   0,   0,
      0,   0,   128, 63,  0,   0,   0,   64,  0,   0,   64,  64,  0,   0,   128, 64,  0,   0,   160, 64};
  static const unsigned char want_empty[] = {8, 0, 0, 0, 0, 0, 0, 0, 123, 125, 32, 32, 32, 32, 32, 32};
  static const unsigned char want_meta[] = {40,  0,   0,   0,   0,   0,   0,   0,  123, 34,  95,  95,  109, 101,
                                            116, 97,  100, 97,  116, 97,  95,  95, 34,  58,  123, 34,  102, 114,
                                            97,  109, 101, 119, 111, 114, 107, 34, 58,  34,  112, 116, 34,  125,
                                            125, 32,  32,  32,  32,  32};
  const int64_t sh1[] = {1, 2, 3}, sh2[] = {1, 1, 2, 3};
  em_tensor *a = mk(EM_F32, 3, sh1), *b = mk(EM_F32, 4, sh2);
  for (int i = 0; i < 6; i++) em_t_set(a, i, i), em_t_set(b, i, i);
  const char *n1[] = {"attn.0"}, *n2[] = {"attn0"};
  const char *fw[] = {"framework", "pt", NULL};
  struct {
    const char *file;
    const char *const *names;
    em_tensor *t;
    const char *const *meta;
    const unsigned char *want;
    size_t n;
  } cases[] = {{"s1.safetensors", n1, a, NULL, want1, sizeof want1},
               {"s2.safetensors", n2, b, NULL, want2, sizeof want2},
               {"e.safetensors", NULL, NULL, NULL, want_empty, sizeof want_empty},
               {"m.safetensors", NULL, NULL, fw, want_meta, sizeof want_meta}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    const char *path = at(&s, cases[c].file);
    const em_tensor *ts[1] = {cases[c].t};
    CHECK(em_st_write(path, cases[c].t ? 1 : 0, cases[c].names, ts, cases[c].meta, err) == EM_OK);
    size_t n;
    unsigned char *got = read_all(path, &n);
    CHECK(got && n == cases[c].n && !memcmp(got, cases[c].want, n));
    free(got);
    em_st_file *f = em_st_open(path, err);
    CHECK(f != NULL);
    em_st_close(f);
  }
  em_tensor_free(a);
  em_tensor_free(b);
  scratch_close(&s);
}

/* ---- conversions ------------------------------------------------------------------------------------ */

TEST(safetensors_load_converts_dtypes) {
  scratch s;
  scratch_open(&s);
  char err[EM_ERR_MAX];
  /* data laid out by hand: I8[4] U8[4] BOOL[3] I16[2] U16[2] F16[2] BF16[2] F32[3] U32[1] U64[1] F64[1] F8[2] */
  unsigned char d[64];
  size_t o = 0;
  int8_t i8[4] = {-128, -1, 0, 127};
  uint8_t u8[4] = {0, 1, 200, 255};
  uint8_t bl[3] = {0, 1, 2};
  int16_t i16[2] = {-32768, 1234};
  uint16_t u16[2] = {65535, 7};
  uint16_t f16[2] = {em_f32_to_f16_bits(1.5f), em_f32_to_f16_bits(-0.099975586f)};
  uint16_t bf[2] = {em_f32_to_bf16_bits(3.140625f), em_f32_to_bf16_bits(-1e30f)};
  float f32[3] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-9f, 0.1f};
  uint32_t u32[1] = {4000000000u};
  uint64_t u64[1] = {(uint64_t)1 << 40};
  double f64[1] = {1.0 / 3.0};
  uint8_t f8[2] = {0x38, 0x40};
#define PUT(x) (memcpy(d + o, x, sizeof x), o += sizeof x)
  PUT(i8), PUT(u8), PUT(bl), PUT(i16), PUT(u16), PUT(f16), PUT(bf), PUT(f32), PUT(u32), PUT(u64), PUT(f64), PUT(f8);
#undef PUT
  const char *hdr = "{\"i8\":{\"dtype\":\"I8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                    "\"u8\":{\"dtype\":\"U8\",\"shape\":[2,2],\"data_offsets\":[4,8]},"
                    "\"bool\":{\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":[8,11]},"
                    "\"i16\":{\"dtype\":\"I16\",\"shape\":[2],\"data_offsets\":[11,15]},"
                    "\"u16\":{\"dtype\":\"U16\",\"shape\":[2],\"data_offsets\":[15,19]},"
                    "\"f16\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[19,23]},"
                    "\"bf16\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[23,27]},"
                    "\"f32\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[27,39]},"
                    "\"u32\":{\"dtype\":\"U32\",\"shape\":[],\"data_offsets\":[39,43]},"
                    "\"u64\":{\"dtype\":\"U64\",\"shape\":[1],\"data_offsets\":[43,51]},"
                    "\"f64\":{\"dtype\":\"F64\",\"shape\":[1,1],\"data_offsets\":[51,59]},"
                    "\"fp8\":{\"dtype\":\"F8_E4M3\",\"shape\":[2],\"data_offsets\":[59,61]},"
                    "\"empty\":{\"dtype\":\"F32\",\"shape\":[0,5],\"data_offsets\":[61,61]}}";
  CHECK(o == 61);
  size_t hl = strlen(hdr);
  unsigned char *file = malloc(8 + hl + o);
  uint64_t h64 = hl;
  memcpy(file, &h64, 8);
  memcpy(file + 8, hdr, hl);
  memcpy(file + 8 + hl, d, o);
  const char *path = at(&s, "conv.safetensors");
  write_bytes(path, file, 8 + hl + o);
  free(file);
  em_st_file *f = em_st_open(path, err);
  CHECK(f != NULL);
  if (!f) {
    fprintf(stderr, "    %s\n", err);
    scratch_close(&s);
    return;
  }
  CHECK(em_st_count(f) == 13);
  CHECK(!strcmp(em_st_name(f, 0), "i8") && !strcmp(em_st_name(f, 11), "fp8")); /* file order */
  /* the zero-size tensor [61, 61) comes after fp8 [59, 61) */
  CHECK(!strcmp(em_st_name(f, 12), "empty"));

  struct {
    const char *name;
    em_dtype want;
    double v[4];
    int n;
  } cases[] = {
      {"i8", EM_F32, {-128, -1, 0, 127}, 4},
      {"i8", EM_I32, {-128, -1, 0, 127}, 4},
      {"u8", EM_I64, {0, 1, 200, 255}, 4},
      {"u8", EM_BOOL, {0, 1, 1, 1}, 4},
      {"bool", EM_BOOL, {0, 1, 1}, 3},
      {"bool", EM_F32, {0, 1, 1}, 3},
      {"i16", EM_I32, {-32768, 1234}, 2},
      {"u16", EM_F64, {65535, 7}, 2},
      {"f16", EM_F32, {1.5, (double)em_f16_bits_to_f32(f16[1])}, 2},
      {"f16", EM_F16, {1.5, (double)em_f16_bits_to_f32(f16[1])}, 2},
      {"f16", EM_BF16, {1.5, (double)em_round_bf16(em_f16_bits_to_f32(f16[1]))}, 2},
      {"bf16", EM_BF16, {3.140625, (double)em_bf16_bits_to_f32(bf[1])}, 2},
      {"bf16", EM_F32, {3.140625, (double)em_bf16_bits_to_f32(bf[1])}, 2},
      {"bf16", EM_I32, {3, -2147483648.0}, 2},                    /* out of range: the integer minimum */
      {"f32", EM_BF16, {1.0, 1.0 + 0x1p-7, (double)em_round_bf16(0.1f)}, 3}, /* ties to even; rounds up */
      {"f32", EM_F16, {(double)em_round_f16(f32[0]), (double)em_round_f16(f32[1]), (double)em_round_f16(0.1f)}, 3},
      {"f32", EM_F64, {(double)f32[0], (double)f32[1], (double)0.1f}, 3},
      {"u32", EM_I64, {4000000000.0}, 1},
      {"u32", EM_I32, {-2147483648.0}, 1},
      {"u64", EM_I64, {1099511627776.0}, 1},
      {"f64", EM_F32, {(double)(float)(1.0 / 3.0)}, 1},
      {"f64", EM_BF16, {(double)em_round_bf16((float)(1.0 / 3.0))}, 1},
      {"f64", EM_F64, {1.0 / 3.0}, 1},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    int k = em_st_find(f, cases[c].name);
    em_tensor *t = k >= 0 ? em_st_load(f, k, cases[c].want, err) : NULL;
    CHECK(t != NULL);
    if (!t) continue;
    CHECK(t->dtype == cases[c].want && t->numel == cases[c].n);
    for (int e = 0; e < cases[c].n && e < t->numel; e++) {
      if (em_t_get(t, e) != cases[c].v[e]) {
        fprintf(stderr, "    case %zu (%s as %s) element %d: %.17g, expected %.17g\n", c, cases[c].name,
                em_dtype_name(cases[c].want), e, em_t_get(t, e), cases[c].v[e]);
        (*unit_failed)++;
      }
    }
    em_tensor_free(t);
  }
  em_tensor *t = em_st_load(f, em_st_find(f, "u32"), EM_F32, err);
  CHECK(t && t->rank == 0 && t->numel == 1);
  em_tensor_free(t);
  t = em_st_load(f, em_st_find(f, "empty"), EM_BF16, err);
  CHECK(t && t->rank == 2 && t->shape[0] == 0 && t->shape[1] == 5 && t->numel == 0);
  em_tensor_free(t);

  /* unsupported source dtype and bad index: errors naming the file and the tensor */
  err[0] = 0;
  CHECK(em_st_load(f, em_st_find(f, "fp8"), EM_F32, err) == NULL);
  CHECK(strstr(err, path) == err && strstr(err, "tensor 'fp8'") && strstr(err, "F8_E4M3"));
  CHECK(em_st_load(f, 99, EM_F32, err) == NULL && strstr(err, "index 99"));
  em_st_close(f);

  /* rank above EM_TENSOR_MAX_RANK: the file is valid, the load is refused */
  path = at(&s, "rank7.safetensors");
  craft(path, "{\"r7\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,2],\"data_offsets\":[0,2]}}", 2);
  f = em_st_open(path, err);
  CHECK(f != NULL);
  if (f) {
    CHECK(em_st_rank(f, 0) == 7);
    CHECK(em_st_load(f, 0, EM_F32, err) == NULL && strstr(err, "tensor 'r7' has rank 7"));
  }
  em_st_close(f);
  scratch_close(&s);
}

/* ---- validation ------------------------------------------------------------------------------------- */

#define E1(name, dtype, shape, offs) "\"" name "\":{\"dtype\":\"" dtype "\",\"shape\":" shape ",\"data_offsets\":" offs "}"

TEST(safetensors_rejects_bad_files) {
  scratch s;
  scratch_open(&s);
  const char *p;

  /* file and header bounds */
  p = at(&s, "short.safetensors");
  write_bytes(p, "\x02\0\0\0\0", 5);
  EXPECT_BAD(p, "file is 5 bytes; a safetensors file has at least 8");
  p = at(&s, "hlen.safetensors");
  craft_len(p, 1000, "{}", 10);
  EXPECT_BAD(p, "header length 1000 runs past the end of the file (20 bytes)");
  p = at(&s, "huge.safetensors");
  craft_len(p, 200000000, "{}", 10);
  EXPECT_BAD(p, "header length 200000000 exceeds the limit of 100000000 bytes");
  p = at(&s, "absent.safetensors");
  EXPECT_BAD(p, "cannot open");
  EXPECT_BAD(s.dir, "not a regular file");

  /* JSON */
  BAD_HEADER(&s, "{\"a\":", 0, "header is not valid JSON: unexpected end of header at byte 5");
  BAD_HEADER(&s, "{\"a\":{\"dtype\":\"F32\",}}", 0, "not valid JSON: expected a string key");
  BAD_HEADER(&s, "{\"a\" {}}", 0, "not valid JSON: expected ':' after a key");
  BAD_HEADER(&s, "{} x", 0, "not valid JSON: unexpected text after the header object at byte 3");
  BAD_HEADER(&s, "{'a':1}", 0, "not valid JSON");
  BAD_HEADER(&s, "{\"a\":[01]}", 0, "not valid JSON");
  BAD_HEADER(&s, "{\"a\":\"x\ty\"}", 0, "control character in a string");
  BAD_HEADER(&s, "{\"a\":\"\\ud800\"}", 0, "lone leading surrogate");
  BAD_HEADER(&s, "{\"a\":\"\\q\"}", 0, "unknown escape");
  BAD_HEADER(&s, "", 0, "not valid JSON: unexpected end of header");
  BAD_HEADER(&s, "        ", 0, "not valid JSON: unexpected end of header");
  BAD_HEADER(&s, "{\"\xff\":1}", 0, "header is not valid UTF-8 (byte 2)");
  BAD_HEADER(&s, "{\"\xc0\xaf\":1}", 0, "not valid UTF-8"); /* overlong '/' */
  {
    char deep[400];
    for (int i = 0; i < 200; i++) deep[i] = '[';
    deep[200] = 0;
    BAD_HEADER(&s, deep, 0, "nested deeper than 128");
  }
  BAD_HEADER(&s, "[1,2]", 0, "header is an array, not a JSON object");
  BAD_HEADER(&s, "\"x\"", 0, "header is a string, not a JSON object");

  /* entries */
  BAD_HEADER(&s, "{\"a\":3}", 0, "tensor 'a': entry is a number, not a JSON object");
  BAD_HEADER(&s, "{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "tensor 'a': no \"dtype\" field");
  BAD_HEADER(&s, "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, "tensor 'a': no \"shape\" field");
  BAD_HEADER(&s, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "tensor 'a': no \"data_offsets\" field");
  BAD_HEADER(&s, "{" E1("a", "F32", "[1]", "[0,4]") ",\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8],\"x\":1}}",
             8, "tensor 'b': unknown field \"x\"");
  BAD_HEADER(&s, "{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
             "tensor 'a': field \"dtype\" appears twice");
  BAD_HEADER(&s, "{" E1("a", "F7", "[1]", "[0,4]") "}", 4, "tensor 'a': unknown dtype 'F7'");
  BAD_HEADER(&s, "{" E1("a", "f32", "[1]", "[0,4]") "}", 4, "tensor 'a': unknown dtype 'f32'");
  BAD_HEADER(&s, "{\"a\":{\"dtype\":32,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "dtype is a number, not a string");
  BAD_HEADER(&s, "{" E1("a", "F32", "[2,-1]", "[0,4]") "}", 4, "tensor 'a': shape[1] = -1 is not a non-negative integer");
  BAD_HEADER(&s, "{" E1("a", "F32", "[2.0]", "[0,8]") "}", 8, "tensor 'a': shape[0] = 2.0 is not a non-negative integer");
  BAD_HEADER(&s, "{" E1("a", "F32", "[2e0]", "[0,8]") "}", 8, "shape[0] = 2e0 is not a non-negative integer");
  BAD_HEADER(&s, "{" E1("a", "F32", "[\"2\"]", "[0,8]") "}", 8, "shape[0] is a string, not a non-negative integer");
  BAD_HEADER(&s, "{" E1("a", "F32", "[18446744073709551616]", "[0,8]") "}", 8, "not a non-negative integer");
  BAD_HEADER(&s, "{" E1("a", "F32", "2", "[0,8]") "}", 8, "tensor 'a': shape is a number, not a list");
  BAD_HEADER(&s, "{" E1("a", "F32", "[1]", "[0]") "}", 4, "tensor 'a': data_offsets must be [begin, end]");
  BAD_HEADER(&s, "{" E1("a", "F32", "[1]", "[0,4,8]") "}", 4, "data_offsets must be [begin, end]");
  BAD_HEADER(&s, "{" E1("a", "F32", "[1]", "[0,-4]") "}", 4, "data_offsets must be [begin, end]");
  BAD_HEADER(&s, "{" E1("a", "F32", "[1]", "[8,4]") "}", 8, "tensor 'a': data_offsets [8, 4] has begin after end");
  BAD_HEADER(&s, "{" E1("lm_head.weight", "F32", "[2,4]", "[0,12]") "}", 12,
             "tensor 'lm_head.weight': data_offsets [0, 12] hold 12 bytes but shape [2, 4] × F32 needs 32");
  BAD_HEADER(&s, "{" E1("a", "BF16", "[3]", "[0,3]") "}", 3, "hold 3 bytes but shape [3] × BF16 needs 6");
  BAD_HEADER(&s, "{" E1("a", "F32", "[4294967296,4294967296]", "[0,0]") "}", 0,
             "tensor 'a': shape [4294967296, 4294967296] × F32 overflows 64 bits");
  BAD_HEADER(&s, "{" E1("a", "F64", "[2305843009213693952]", "[0,0]") "}", 0, "overflows 64 bits");

  /* the data section */
  BAD_HEADER(&s, "{" E1("a", "F32", "[1]", "[0,4]") "," E1("b", "F32", "[1]", "[8,12]") "}", 12,
             "gap of 4 bytes between tensor 'a' (ends at 4) and tensor 'b' (begins at 8)");
  BAD_HEADER(&s, "{" E1("a", "F32", "[2]", "[0,8]") "," E1("b", "F32", "[1]", "[4,8]") "}", 8,
             "tensor 'b' (bytes 4..8) overlaps tensor 'a' (ends at 8)");
  BAD_HEADER(&s, "{" E1("a", "F32", "[1]", "[4,8]") "}", 8, "tensor 'a' is first in the data but begins at byte 4, not 0");
  BAD_HEADER(&s, "{" E1("a", "F32", "[1]", "[0,4]") "}", 8,
             "4 trailing bytes after the last tensor (the tensors end at byte 4 of a 8-byte data section)");
  BAD_HEADER(&s, "{}", 3, "3 trailing bytes after the last tensor");
  BAD_HEADER(&s, "{" E1("a", "F32", "[2]", "[0,8]") "}", 5,
             "3 bytes missing: the tensors end at byte 8 but the data section has 5");
  BAD_HEADER(&s, "{" E1("a", "F32", "[1]", "[0,4]") "," E1("a", "F32", "[1]", "[4,8]") "}", 8,
             "tensor name 'a' appears twice in the header");

  /* metadata */
  BAD_HEADER(&s, "{\"__metadata__\":{\"k\":1}}", 0, "__metadata__ value for key 'k' is a number, not a string");
  BAD_HEADER(&s, "{\"__metadata__\":{\"k\":{\"x\":\"y\"}}}", 0, "__metadata__ value for key 'k' is an object");
  BAD_HEADER(&s, "{\"__metadata__\":[\"a\"]}", 0, "__metadata__ is an array, not an object of strings");
  BAD_HEADER(&s, "{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0, "__metadata__ key 'k' appears twice");
  BAD_HEADER(&s, "{\"__metadata__\":{},\"__metadata__\":{}}", 0, "\"__metadata__\" appears twice");

  /* a name with an escaped newline or a very long name still gives one line */
  BAD_HEADER(&s, "{" E1("a\\nb", "F7", "[1]", "[0,4]") "}", 4, "tensor 'a?b': unknown dtype");
  {
    char big[2000];
    int o = snprintf(big, sizeof big, "{\"");
    for (int i = 0; i < 1500; i++) big[o++] = 'x';
    snprintf(big + o, sizeof big - (size_t)o, "\":3}");
    BAD_HEADER(&s, big, 0, "xxx...': entry is a number");
  }
  scratch_close(&s);
}

TEST(safetensors_accepts_valid_variants) {
  scratch s;
  scratch_open(&s);
  char err[EM_ERR_MAX];
  struct {
    const char *header;
    size_t ndata;
    int count;
  } ok[] = {
      {"{}", 0, 0},
      {"{}      ", 0, 0},                                                    /* padding */
      {" \n\t{ } \r\n", 0, 0},                                             /* JSON whitespace */
      {"{\"__metadata__\":null}", 0, 0},                                   /* serde's Option */
      {"{\"__metadata__\":{}}", 0, 0},
      {"{" E1("b", "F32", "[1]", "[4,8]") "," E1("a", "F32", "[1]", "[0,4]") "}", 8, 2}, /* any header order */
      {"{\"a\":{\"data_offsets\":[0,4],\"shape\":[1],\"dtype\":\"I32\"}}", 4, 1},     /* any field order */
      {"{" E1("z", "F32", "[0]", "[0,0]") "," E1("a", "U8", "[3]", "[0,3]") "}", 3, 2}, /* zero-size first */
      {"{" E1("s", "F64", "[]", "[0,8]") "}", 8, 1},                                 /* scalar */
      {"{" E1("a", "F32", "[4294967296,4294967296,0]", "[0,0]") "}", 0, -1}, /* overflow before the 0: refused */
      {"{" E1("caf\\u00e9 \\ud83d\\ude00 \\\"q\\\" \\/", "U8", "[1]", "[0,1]") "}", 1, 1},
      {"{" E1("\xc3\xa9", "U8", "[1]", "[0,1]") "}", 1, 1},
      {"{" E1("a", "F8_E5M2", "[2]", "[0,2]") "," E1("b", "U64", "[1]", "[2,10]") "}", 10, 2},
  };
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    const char *p = at(&s, "ok.safetensors");
    craft(p, ok[i].header, ok[i].ndata);
    em_st_file *f = em_st_open(p, err);
    if (ok[i].count < 0) {
      CHECK(f == NULL && strstr(err, "overflows 64 bits"));
    } else {
      if (!f) fprintf(stderr, "    case %zu: %s\n", i, err);
      CHECK(f != NULL && em_st_count(f) == ok[i].count);
    }
    if (f && i == 5) CHECK(!strcmp(em_st_name(f, 0), "a") && !strcmp(em_st_name(f, 1), "b"));
    if (f && i == 10) CHECK(em_st_find(f, "café 😀 \"q\" /") == 0);
    if (f && i == 11) CHECK(em_st_find(f, "é") == 0);
    if (f && i == 8) {
      em_tensor *t = em_st_load(f, 0, EM_F64, err);
      CHECK(t && t->rank == 0 && t->numel == 1);
      em_tensor_free(t);
    }
    em_st_close(f);
  }
  scratch_close(&s);
}

TEST(safetensors_write_errors) {
  scratch s;
  scratch_open(&s);
  char err[EM_ERR_MAX];
  const int64_t sh[] = {2};
  em_tensor *a = mk(EM_F32, 1, sh);
  em_tensor_fill_normal(a, 1, 0, 1);
  const em_tensor *ts[] = {a, a};
  const char *dup[] = {"x", "x"}, *meta_name[] = {"__metadata__"}, *ok[] = {"x"};
  const char *path = at(&s, "w.safetensors");
  CHECK(em_st_write(path, 2, dup, ts, NULL, err) == EM_EINPUT && strstr(err, "tensor name 'x' is given twice"));
  CHECK(em_st_write(path, 1, meta_name, ts, NULL, err) == EM_EINPUT && strstr(err, "reserved"));
  const char *bad_utf8[] = {"\xff"};
  CHECK(em_st_write(path, 1, bad_utf8, ts, NULL, err) == EM_EINPUT && strstr(err, "not valid UTF-8"));
  const char *meta_dup[] = {"k", "1", "k", "2", NULL};
  CHECK(em_st_write(path, 1, ok, ts, meta_dup, err) == EM_EINPUT && strstr(err, "metadata key 'k' is given twice"));
  CHECK(!file_exists(path) && own_temps(&s) == 0);
  path = at(&s, "no/such/dir.safetensors");
  CHECK(em_st_write(path, 1, ok, ts, NULL, err) == EM_ERUN && strstr(err, "cannot write") && strstr(err, path) &&
        strstr(err, "No such file or directory"));

  /* a stale temp from a killed write does not matter; the old file stays until the rename */
  path = at(&s, "w.safetensors");
  write_bytes(at(&s, "w.safetensors.tmp.1.1"), "junk", 4);
  CHECK(em_st_write(path, 1, ok, ts, NULL, err) == EM_OK);
  CHECK(own_temps(&s) == 0);
  em_st_file *f = em_st_open(at(&s, "w.safetensors"), err);
  CHECK(f && em_st_count(f) == 1);
  em_st_close(f);
  em_tensor_free(a);
  scratch_close(&s);
}

/* ---- speed ------------------------------------------------------------------------------------------ */

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

TEST(safetensors_embedding_load_speed) {
  scratch s;
  scratch_open(&s);
  char err[EM_ERR_MAX];
  const int64_t rows = 151669, cols = 1024, n = rows * cols;
  const char *hdr = "{\"model.embed_tokens.weight\":{\"dtype\":\"BF16\",\"shape\":[151669,1024],"
                    "\"data_offsets\":[0,310618112]}}";
  size_t hl = strlen(hdr), pad = (8 - hl % 8) % 8;
  const char *path = at(&s, "embed.safetensors");
  FILE *fp = fopen(path, "wb");
  CHECK(fp != NULL);
  if (!fp) {
    scratch_close(&s);
    return;
  }
  uint64_t h64 = hl + pad;
  fwrite(&h64, 8, 1, fp);
  fwrite(hdr, 1, hl, fp);
  fwrite("       ", 1, pad, fp);
  enum { CH = 1 << 16 };
  uint16_t *chunk = malloc(sizeof(uint16_t) * CH);
  for (int64_t i = 0; i < n; i += CH) {
    int64_t m = n - i < CH ? n - i : CH;
    for (int64_t k = 0; k < m; k++) chunk[k] = em_f32_to_bf16_bits((float)((i + k) % 1000) * 0.001f - 0.5f);
    fwrite(chunk, 2, (size_t)m, fp);
  }
  free(chunk);
  fclose(fp);

  /* The first load also pays the first touch of ~600 MB of fresh memory (on a VM that can be a second by
   * itself); the second load measures the conversion. */
  double t0 = now();
  em_st_file *f = em_st_open(path, err);
  CHECK(f != NULL);
  if (!f) {
    fprintf(stderr, "    %s\n", err);
    scratch_close(&s);
    return;
  }
  double t1 = now();
  em_tensor *t = em_st_load(f, 0, EM_BF16, err);
  double t2 = now();
  em_tensor_free(t);
  double t3 = now();
  t = em_st_load(f, 0, EM_BF16, err);
  double t4 = now();
  CHECK(t != NULL && t->numel == n);
  if (t) {
    int bad = 0;
    for (int64_t i = 0; i < n; i += 9973)
      bad += em_t_get(t, i) != (double)em_round_bf16((float)(i % 1000) * 0.001f - 0.5f);
    CHECK(bad == 0);
  }
  em_tensor_free(t);
  em_st_close(f);
  fprintf(stderr, "    151669x1024 bf16 embedding: open %.3f s, first load as bf16 %.3f s, second %.3f s\n", t1 - t0,
          t2 - t1, t4 - t3);
  CHECK(t4 - t3 < 0.5);
  scratch_close(&s);
}
