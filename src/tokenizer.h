/* tokenizer.h — a byte-level BPE tokenizer (the model family of GPT-2, Llama 3, Qwen): literal added tokens split
 * the text first; each other segment is NFC-normalized (utf8proc) where asked, split by the pre-tokenizer's regex
 * (PCRE2 with Unicode properties; matches and the gaps between them both become pieces), mapped byte by byte to
 * GPT-2's printable code points, and merged pair by pair in merge-rank order; the merged symbols are the vocabulary's
 * tokens. What tokenizer.json holds is read by scripts/emmy/tokenizer.lua, which fills this through emmy.tokenizer. */
#ifndef EM_TOKENIZER_H
#define EM_TOKENIZER_H

#include <stddef.h>

#include "base.h"

typedef struct em_tok em_tok;

em_tok *em_tok_new(void);
void em_tok_free(em_tok *t);
/* A vocabulary entry: token text (byte-level code points, UTF-8) -> id. 0, or -1 (out of memory). */
int em_tok_vocab(em_tok *t, const char *s, size_t n, int id);
/* A merge of the adjacent symbols a and b, rank its order in the file (lower merges first). */
int em_tok_merge(em_tok *t, const char *a, const char *b, int rank);
/* The pre-tokenizer's split regex (HF "Split" with behavior "Isolated"); NULL: the whole segment is one piece. */
int em_tok_pattern(em_tok *t, const char *re, char err[EM_ERR_MAX]);
/* An added token matched literally in the raw text before anything else (special or not). */
int em_tok_added(em_tok *t, const char *s, int id);
/* 1: NFC-normalize the segments between added tokens. */
void em_tok_set_nfc(em_tok *t, int on);
/* 1: a piece found whole in the vocabulary is that token, unmerged (BPE's ignore_merges, Llama 3). */
void em_tok_set_ignore_merges(em_tok *t, int on);
/* The ids of text[0..n) into *ids (malloc'd, *nids of them). 0, or -1 with err (invalid UTF-8, a symbol missing
 * from the vocabulary). */
int em_tok_encode(em_tok *t, const char *text, size_t n, int **ids, size_t *nids, char err[EM_ERR_MAX]);

#endif
