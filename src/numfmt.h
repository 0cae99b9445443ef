/* numfmt.h — numbers as JSON text, fast: what `emmy serve` writes a thousand of per embedding. */
#ifndef EM_NUMFMT_H
#define EM_NUMFMT_H

#include <stddef.h>

/* Writes v as printf's "%.9g" writes it (nine significant digits: every float32 reads back to itself) into out, which
 * holds EM_NUMFMT_MAX bytes, NUL-terminated; returns the length. A finite v is written by integer arithmetic on a
 * scaled mantissa (~10x printf's speed); non-finite values and magnitudes outside 1e-30..1e30 go to snprintf. The
 * text is printf's except where the scaled value lies within a double's rounding of a tie in the ninth digit (then
 * the ninth digit may differ by one). */
#define EM_NUMFMT_MAX 32
size_t em_fmt_g9(char *out, double v);

#endif
