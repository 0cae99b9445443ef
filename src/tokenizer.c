/* tokenizer.c — byte-level BPE (see tokenizer.h): string-keyed hash maps for the vocabulary, the merge ranks and
 * a cache of pieces already merged; PCRE2 for the pre-tokenizer's split, utf8proc for NFC. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer.h"

#include <pcre2.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ---- a string-keyed open-addressing map (keys owned, values int or an owned int array) ------------------- */

typedef struct {
  char *k;
  size_t kn;
  int v;       /* the id or rank */
  int *ids;    /* the cache's merged ids (v of them) */
} slot;

typedef struct {
  slot *s;
  size_t cap, n;
} smap;

static uint64_t hash(const char *k, size_t n) { return em_fnv1a(EM_FNV_SEED, k, n); }

static slot *smap_find(const smap *m, const char *k, size_t n) {
  if (!m->cap) return NULL;
  for (size_t i = hash(k, n) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
    slot *s = &m->s[i];
    if (!s->k) return NULL;
    if (s->kn == n && !memcmp(s->k, k, n)) return s;
  }
}

static slot *smap_put(smap *m, const char *k, size_t n) {
  if (2 * (m->n + 1) > m->cap) {
    smap g = {em_alloc(sizeof(slot) * (m->cap ? 2 * m->cap : 1024)), m->cap ? 2 * m->cap : 1024, m->n};
    for (size_t i = 0; i < m->cap; i++) {
      if (!m->s[i].k) continue;
      size_t j = hash(m->s[i].k, m->s[i].kn) & (g.cap - 1);
      while (g.s[j].k) j = (j + 1) & (g.cap - 1);
      g.s[j] = m->s[i];
    }
    free(m->s);
    *m = g;
  }
  size_t i = hash(k, n) & (m->cap - 1);
  for (; m->s[i].k; i = (i + 1) & (m->cap - 1))
    if (m->s[i].kn == n && !memcmp(m->s[i].k, k, n)) return &m->s[i];
  m->s[i].k = em_alloc(n + 1);
  memcpy(m->s[i].k, k, n);
  m->s[i].kn = n;
  m->n++;
  return &m->s[i];
}

static void smap_free(smap *m) {
  for (size_t i = 0; i < m->cap; i++) {
    free(m->s[i].k);
    free(m->s[i].ids);
  }
  free(m->s);
}

/* ---- the tokenizer ------------------------------------------------------------------------------------- */

typedef struct {
  char *s;
  size_t n;
  int id;
} added;

struct em_tok {
  smap vocab, merges, cache;
  pcre2_code *re;
  pcre2_match_data *md;
  EM_VEC(added) added;
  int nfc, ignore_merges;
  char byte_cp[256][3]; /* GPT-2's printable code point of each byte, as UTF-8 (NUL-terminated) */
};

/* GPT-2's bytes_to_unicode: the printable Latin-1 bytes stand for themselves, the others for 256, 257, ... */
static void byte_map(em_tok *t) {
  int next = 256;
  for (int b = 0; b < 256; b++) {
    int keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    int cp = keep ? b : next++;
    char *o = t->byte_cp[b];
    if (cp < 0x80) o[0] = (char)cp, o[1] = 0;
    else o[0] = (char)(0xc0 | (cp >> 6)), o[1] = (char)(0x80 | (cp & 0x3f)), o[2] = 0;
  }
}

em_tok *em_tok_new(void) {
  em_tok *t = em_alloc(sizeof *t);
  byte_map(t);
  return t;
}

void em_tok_free(em_tok *t) {
  if (!t) return;
  smap_free(&t->vocab);
  smap_free(&t->merges);
  smap_free(&t->cache);
  for (int i = 0; i < t->added.n; i++) free(t->added.v[i].s);
  free(t->added.v);
  if (t->md) pcre2_match_data_free(t->md);
  if (t->re) pcre2_code_free(t->re);
  free(t);
}

int em_tok_vocab(em_tok *t, const char *s, size_t n, int id) {
  smap_put(&t->vocab, s, n)->v = id;
  return 0;
}

int em_tok_merge(em_tok *t, const char *a, const char *b, int rank) {
  size_t na = strlen(a), nb = strlen(b);
  char *k = em_alloc(na + nb + 2);
  memcpy(k, a, na);
  k[na] = '\x01';
  memcpy(k + na + 1, b, nb);
  slot *s = smap_put(&t->merges, k, na + nb + 1);
  if (!s->v || rank < s->v - 1) s->v = rank + 1; /* (stored + 1: 0 is "absent"; the first listing wins) */
  free(k);
  return 0;
}

int em_tok_pattern(em_tok *t, const char *re, char err[EM_ERR_MAX]) {
  int code;
  PCRE2_SIZE off;
  pcre2_code *c = pcre2_compile((PCRE2_SPTR)re, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &code, &off, NULL);
  if (!c) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(code, msg, sizeof msg);
    return (em_fail(err, EM_EINPUT, "pre-tokenizer regex at offset %zu: %s", (size_t)off, (char *)msg), -1);
  }
  pcre2_jit_compile(c, PCRE2_JIT_COMPLETE); /* (where the library has a JIT; else it interprets) */
  if (t->re) pcre2_code_free(t->re);
  if (t->md) pcre2_match_data_free(t->md);
  t->re = c;
  t->md = pcre2_match_data_create_from_pattern(c, NULL);
  return 0;
}

int em_tok_added(em_tok *t, const char *s, int id) {
  added a = {em_strdup(s), strlen(s), id};
  if (!a.n) {
    free(a.s);
    return 0;
  }
  EM_VEC_PUSH(t->added, a);
  return 0;
}

void em_tok_set_nfc(em_tok *t, int on) { t->nfc = on; }
void em_tok_set_ignore_merges(em_tok *t, int on) { t->ignore_merges = on; }

/* ---- encoding ------------------------------------------------------------------------------------------ */

typedef struct {
  int *v;
  size_t n, cap;
} ibuf;

static void ipush(ibuf *b, int x) {
  if (b->n == b->cap) b->v = em_realloc(b->v, sizeof(int) * (b->cap = b->cap ? 2 * b->cap : 64));
  b->v[b->n++] = x;
}

/* The length of the UTF-8 sequence starting with byte c (1 for a stray continuation byte: never split one). */
static size_t u8len(unsigned char c) { return c < 0xc0 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4; }


/* One piece (raw bytes) through the byte map and the merges into ids, cached by its bytes. */
static int bpe_piece(em_tok *t, const char *p, size_t n, ibuf *out, char err[EM_ERR_MAX]) {
  slot *hit = smap_find(&t->cache, p, n);
  if (hit) {
    for (int i = 0; i < hit->v; i++) ipush(out, hit->ids[i]);
    return 0;
  }
  size_t cap = 2 * n + 1, ns = 0;
  char *m = em_alloc(cap + 1);
  size_t *st = em_alloc(sizeof(size_t) * (n + 1)), *ln = em_alloc(sizeof(size_t) * (n + 1)), mn = 0;
  for (size_t i = 0; i < n; i++) {
    const char *c = t->byte_cp[(unsigned char)p[i]];
    size_t cl = strlen(c);
    st[ns] = mn, ln[ns++] = cl;
    memcpy(m + mn, c, cl);
    mn += cl;
  }
  char *key = em_alloc(cap + 2);
  slot *whole = t->ignore_merges ? smap_find(&t->vocab, m, mn) : NULL;
  if (whole) ns = 1, ln[0] = mn; /* (ignore_merges: a piece in the vocabulary is its own token) */
  for (; !whole;) {
    int best = 0;
    size_t at = 0;
    for (size_t i = 0; i + 1 < ns; i++) {
      /* symbols are adjacent in m: i's bytes, \x01, i+1's bytes */
      memcpy(key, m + st[i], ln[i]);
      key[ln[i]] = '\x01';
      memcpy(key + ln[i] + 1, m + st[i + 1], ln[i + 1]);
      slot *s = smap_find(&t->merges, key, ln[i] + ln[i + 1] + 1);
      if (s && (!best || s->v < best)) best = s->v, at = i;
    }
    if (!best) break;
    ln[at] += ln[at + 1];
    memmove(st + at + 1, st + at + 2, sizeof(size_t) * (ns - at - 2));
    memmove(ln + at + 1, ln + at + 2, sizeof(size_t) * (ns - at - 2));
    ns--;
  }
  int *ids = em_alloc(sizeof(int) * (ns ? ns : 1)), rc = 0;
  for (size_t i = 0; i < ns && !rc; i++) {
    slot *s = smap_find(&t->vocab, m + st[i], ln[i]);
    if (!s) rc = (em_fail(err, EM_EINPUT, "the symbol '%.*s' is not in the vocabulary", (int)ln[i], m + st[i]), -1);
    else ids[i] = s->v, ipush(out, s->v);
  }
  if (!rc) {
    slot *c = smap_put(&t->cache, p, n);
    free(c->ids);
    c->ids = ids, c->v = (int)ns;
  } else {
    free(ids);
  }
  free(m);
  free(st);
  free(ln);
  free(key);
  return rc;
}

/* A segment between added tokens: NFC, the regex's pieces (matches and the gaps between them), BPE each. */
static int encode_segment(em_tok *t, const char *s, size_t n, ibuf *out, char err[EM_ERR_MAX]) {
  char *norm = NULL;
  if (t->nfc && n) {
    char *z = em_alloc(n + 1);
    memcpy(z, s, n);
    norm = (char *)utf8proc_NFC((const utf8proc_uint8_t *)z);
    free(z);
    if (!norm) return (em_fail(err, EM_EINPUT, "the text is not valid UTF-8"), -1);
    s = norm, n = strlen(norm);
  }
  int rc = 0;
  size_t gap = 0, from = 0; /* the unmatched text starts at gap; the next match is searched from `from` */
  while (t->re && from < n && !rc) {
    int r = pcre2_match(t->re, (PCRE2_SPTR)s, n, from, 0, t->md, NULL);
    if (r == PCRE2_ERROR_NOMATCH) break;
    if (r < 0) {
      rc = (em_fail(err, EM_EINPUT, "the text is not valid UTF-8 (PCRE2 error %d)", r), -1);
      break;
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(t->md);
    size_t a = ov[0], b = ov[1];
    if (b == a) { /* (an empty match: its character stays in the gap) */
      from = a + u8len((unsigned char)s[a]);
      continue;
    }
    if (a > gap) rc = bpe_piece(t, s + gap, a - gap, out, err);
    if (!rc) rc = bpe_piece(t, s + a, b - a, out, err);
    gap = from = b;
  }
  if (!rc && gap < n) rc = bpe_piece(t, s + gap, n - gap, out, err);
  free(norm);
  return rc;
}

int em_tok_encode(em_tok *t, const char *text, size_t n, int **ids, size_t *nids, char err[EM_ERR_MAX]) {
  ibuf out = {0};
  size_t pos = 0;
  int rc = 0;
  while (pos <= n && !rc) {
    /* the earliest added token from pos (the longest where several start there) */
    size_t at = n, len = 0;
    int id = -1;
    for (int i = 0; i < t->added.n; i++) {
      const added *a = &t->added.v[i];
      const char *f = a->n <= n - pos ? memmem(text + pos, n - pos, a->s, a->n) : NULL;
      if (f && ((size_t)(f - text) < at || ((size_t)(f - text) == at && a->n > len))) at = (size_t)(f - text), len = a->n, id = a->id;
    }
    if (at > pos) rc = encode_segment(t, text + pos, at - pos, &out, err);
    if (rc || id < 0) break;
    ipush(&out, id);
    pos = at + len;
  }
  if (rc) {
    free(out.v);
    return -1;
  }
  *ids = out.v ? out.v : em_alloc(sizeof(int));
  *nids = out.n;
  return 0;
}
