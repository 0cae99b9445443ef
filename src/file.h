/* file.h — the one way emmy writes a file (every -o, dump file, JSON summary, .npy, safetensors, cache entry):
 * the bytes go to a temp file in the destination's folder, every write and the close are checked, the temp is
 * fsynced when the data must survive a crash, then renamed over the destination. A failure at any step leaves
 * the destination as it was, removes the temp and reports one line naming the destination and the OS error. */
#ifndef EM_FILE_H
#define EM_FILE_H

#include <stddef.h>

#include "base.h"

typedef struct em_file_out em_file_out;

enum {
  EM_FILE_SYNC = 1 << 0, /* fsync the data before the rename and the folder after it: survives a crash */
};

/* Starts writing path. A regular file (or a path that does not exist yet) gets a temp file
 * "<path>.tmp.<pid>.<n>" next to it, created with the mode of the file it replaces (else 0666 less the umask).
 * A path that exists and is not a regular file (/dev/stdout, a pipe, a device) is written in place, every write
 * still checked. A symbolic link is followed: its target is replaced, the link kept.
 * Returns EM_OK and *out (owned by the caller until em_file_commit or em_file_abort), or EM_ERUN and err
 * ("cannot write PATH: <OS error>"); path untouched. */
em_status em_file_begin(em_file_out **out, const char *path, int flags, char *err);

/* Appends n bytes, retrying short writes. The first failure is kept: later puts and the commit return it (so a
 * caller may check only the commit). Returns EM_OK or EM_ERUN with err. */
em_status em_file_put(em_file_out *f, const void *data, size_t n, char *err);

/* Finishes f and frees it: fsync (EM_FILE_SYNC), close, rename over the destination, fsync of the folder
 * (EM_FILE_SYNC). Returns EM_OK, or EM_ERUN and err with the destination as it was and the temp removed. */
em_status em_file_commit(em_file_out *f, char *err);

/* Gives f up and frees it: the temp is removed, the destination is as it was. NULL is a no-op. */
void em_file_abort(em_file_out *f);

/* em_file_begin + em_file_put + em_file_commit of one buffer. */
em_status em_file_write(const char *path, const void *data, size_t n, int flags, char *err);

#endif
