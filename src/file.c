/* file.c — the one way emmy writes a file: temp file next to the destination, every write and the close checked,
 * fsync where the data must survive a crash, rename(2) over the destination. Built on the POSIX calls (open,
 * write, fsync, close, rename), not stdio, so that no error is buffered away and the fault-injection tests can
 * interpose each step (tests/fixtures/fault_inject.c). */
#include "file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct em_file_out {
  char *path;   /* as the caller named it: every message names this */
  char *target; /* the file replaced (path, or a symbolic link's target) */
  char *tmp;    /* the temp file; NULL when writing in place */
  int fd;
  int flags;
  int in_place; /* not a regular file: written directly, no temp, no rename, no fsync */
  int failed;   /* the first put failure, kept for later puts and the commit */
  char err[EM_ERR_MAX];
};

static em_status fail_os(em_file_out *f, char *err, int e, const char *step) {
  if (!f->failed) {
    snprintf(f->err, sizeof f->err, "cannot write %s: %s%s%s%s", f->path, strerror(e), step ? " (" : "",
             step ? step : "", step ? ")" : "");
    f->failed = 1;
  }
  return em_fail(err, EM_ERUN, "%s", f->err);
}

static void free_out(em_file_out *f) {
  free(f->path);
  free(f->target);
  free(f->tmp);
  free(f);
}

em_status em_file_begin(em_file_out **out, const char *path, int flags, char *err) {
  static unsigned long counter;
  *out = NULL;
  if (!path || !*path) return em_fail(err, EM_ERUN, "cannot write a file with an empty name");
  em_file_out *f = em_alloc(sizeof *f);
  f->path = em_strdup(path);
  f->flags = flags;
  f->fd = -1;
  struct stat st;
  int exists = 0;
  if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) {
    char buf[PATH_MAX];
    if (!realpath(path, buf)) {
      em_status s = fail_os(f, err, errno, "following the symbolic link");
      free_out(f);
      return s;
    }
    f->target = em_strdup(buf);
  } else {
    f->target = em_strdup(path);
  }
  if (stat(f->target, &st) == 0) exists = 1;
  if (exists && !S_ISREG(st.st_mode)) {
    /* a device, a pipe, /dev/stdout (or a folder: open says EISDIR) */
    f->in_place = 1;
    f->fd = open(f->target, O_WRONLY | O_CLOEXEC);
    if (f->fd < 0) {
      em_status s = fail_os(f, err, errno, NULL);
      free_out(f);
      return s;
    }
    *out = f;
    return EM_OK;
  }
  const char *slash = strrchr(f->target, '/');
  const char *base = slash ? slash + 1 : f->target;
  unsigned long n = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
  char suffix[64];
  snprintf(suffix, sizeof suffix, ".tmp.%ld.%lu", (long)getpid(), n);
  size_t dlen = slash ? (size_t)(slash - f->target) + 1 : 0;
  size_t cap = strlen(f->target) + strlen(suffix) + 16;
  f->tmp = em_alloc(cap);
  if (strlen(base) + strlen(suffix) <= NAME_MAX)
    snprintf(f->tmp, cap, "%s%s", f->target, suffix);
  else /* the name is too long to take the suffix: a hidden temp name in the same folder */
    snprintf(f->tmp, cap, "%.*s.emmy%s", (int)dlen, f->target, suffix);
  mode_t mode = exists ? (st.st_mode & 07777) : 0666;
  f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (f->fd < 0) {
    em_status s = fail_os(f, err, errno, NULL);
    free_out(f);
    return s;
  }
  /* the replaced file's mode exactly (open applied the umask to it) */
  if (exists && fchmod(f->fd, mode) != 0) {
    em_status s = fail_os(f, err, errno, "setting its mode");
    em_file_abort(f);
    return s;
  }
  *out = f;
  return EM_OK;
}

em_status em_file_put(em_file_out *f, const void *data, size_t n, char *err) {
  if (f->failed) return em_fail(err, EM_ERUN, "%s", f->err);
  const char *p = data;
  while (n > 0) {
    ssize_t w = write(f->fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return fail_os(f, err, errno, NULL);
    if (w == 0) return fail_os(f, err, EIO, "the write wrote nothing");
    p += w;
    n -= (size_t)w;
  }
  return EM_OK;
}

/* fsync of the folder holding target (after the rename: the new name is on disk). EINVAL: a file system without
 * folder fsync, nothing more can be done. */
static int sync_folder(const char *target) {
  const char *slash = strrchr(target, '/');
  char dir[PATH_MAX];
  if (!slash) snprintf(dir, sizeof dir, ".");
  else if (slash == target) snprintf(dir, sizeof dir, "/");
  else snprintf(dir, sizeof dir, "%.*s", (int)(slash - target), target);
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno;
  int e = fsync(fd) != 0 && errno != EINVAL ? errno : 0;
  close(fd);
  return e;
}

em_status em_file_commit(em_file_out *f, char *err) {
  em_status s = EM_OK;
  if (f->failed) {
    s = em_fail(err, EM_ERUN, "%s", f->err);
    goto abort;
  }
  if (!f->in_place && (f->flags & EM_FILE_SYNC) && fsync(f->fd) != 0) {
    s = fail_os(f, err, errno, "fsync");
    goto abort;
  }
  int fd = f->fd;
  f->fd = -1;
  if (close(fd) != 0) {
    s = fail_os(f, err, errno, "at close");
    goto abort;
  }
  if (f->in_place) goto done;
  if (rename(f->tmp, f->target) != 0) {
    s = fail_os(f, err, errno, "renaming the temp file into place");
    goto abort;
  }
  if (f->flags & EM_FILE_SYNC) {
    int e = sync_folder(f->target);
    if (e) s = em_fail(err, EM_ERUN, "wrote %s, but cannot make it durable: %s (fsync of its folder)", f->path, strerror(e));
  }
done:
  free_out(f);
  return s;
abort:
  em_file_abort(f);
  return s;
}

void em_file_abort(em_file_out *f) {
  if (!f) return;
  if (f->fd >= 0) close(f->fd);
  if (f->tmp) unlink(f->tmp);
  free_out(f);
}

em_status em_file_write(const char *path, const void *data, size_t n, int flags, char *err) {
  em_file_out *f;
  em_status s = em_file_begin(&f, path, flags, err);
  if (s) return s;
  if (em_file_put(f, data, n, err)) {
    em_file_abort(f);
    return EM_ERUN;
  }
  return em_file_commit(f, err);
}
