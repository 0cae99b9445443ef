/* test_file.c — src/file.c, the one file writer: a whole new file or the old one, never a mix; the mode of the
 * replaced file kept; a symbolic link's target replaced and the link kept; devices written in place with every
 * write checked (/dev/full: ENOSPC); a failed put kept until the commit; one line naming the file and the OS
 * error; no temp file left behind. The full-disk and fault-injection cases of every command are in
 * tests/lua/test_faults.lua. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "file.h"
#include "unit.h"

typedef struct {
  char dir[64];
  char path[4][300];
  int k;
} fscratch;

static void fs_open(fscratch *s) {
  memset(s, 0, sizeof *s);
  snprintf(s->dir, sizeof s->dir, "/tmp/emmy-file-XXXXXX");
  if (!mkdtemp(s->dir)) {
    perror("mkdtemp");
    abort();
  }
}

static void fs_close(fscratch *s) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", s->dir);
  if (system(cmd) != 0) fprintf(stderr, "    cannot remove %s\n", s->dir);
}

static const char *at(fscratch *s, const char *name) {
  char *p = s->path[s->k++ % 4];
  size_t dl = strlen(s->dir), nl = strlen(name);
  if (dl + 1 + nl >= sizeof s->path[0]) abort();
  memcpy(p, s->dir, dl);
  p[dl] = '/';
  memcpy(p + dl + 1, name, nl + 1);
  return p;
}

/* The file's bytes as a NUL-terminated string (at most cap - 1 bytes), or "<missing>". */
static const char *slurp(const char *path, char *buf, size_t cap) {
  FILE *f = fopen(path, "rb");
  if (!f) return "<missing>";
  size_t n = fread(buf, 1, cap - 1, f);
  fclose(f);
  buf[n] = 0;
  return buf;
}

/* Entries of the folder (. and .. excluded). */
static int entries(fscratch *s) {
  DIR *d = opendir(s->dir);
  struct dirent *e;
  int n = 0;
  while (d && (e = readdir(d))) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
  if (d) closedir(d);
  return n;
}

TEST(file_write_replaces_whole_and_keeps_mode) {
  fscratch s;
  fs_open(&s);
  char err[EM_ERR_MAX], buf[256];
  const char *p = at(&s, "out.json");
  CHECK(em_file_write(p, "first", 5, EM_FILE_SYNC, err) == EM_OK);
  CHECK(!strcmp(slurp(p, buf, sizeof buf), "first"));
  CHECK(chmod(p, 0640) == 0);
  CHECK(em_file_write(p, "second, longer", 14, 0, err) == EM_OK);
  CHECK(!strcmp(slurp(p, buf, sizeof buf), "second, longer"));
  struct stat st;
  CHECK(stat(p, &st) == 0 && (st.st_mode & 07777) == 0640);
  CHECK(em_file_write(p, "", 0, 0, err) == EM_OK); /* an empty file is a file */
  CHECK(!strcmp(slurp(p, buf, sizeof buf), ""));
  CHECK(entries(&s) == 1);
  fs_close(&s);
}

TEST(file_write_streams_and_a_failed_put_is_kept) {
  fscratch s;
  fs_open(&s);
  char err[EM_ERR_MAX], buf[256];
  const char *p = at(&s, "a.txt");
  CHECK(em_file_write(p, "old", 3, 0, err) == EM_OK);
  em_file_out *f;
  CHECK(em_file_begin(&f, p, 0, err) == EM_OK);
  CHECK(em_file_put(f, "ne", 2, err) == EM_OK);
  CHECK(!strcmp(slurp(p, buf, sizeof buf), "old")); /* nothing visible before the commit */
  CHECK(em_file_put(f, "w", 1, err) == EM_OK);
  CHECK(em_file_commit(f, err) == EM_OK);
  CHECK(!strcmp(slurp(p, buf, sizeof buf), "new"));
  /* an abort leaves the old file and no temp */
  CHECK(em_file_begin(&f, p, EM_FILE_SYNC, err) == EM_OK);
  CHECK(em_file_put(f, "discarded", 9, err) == EM_OK);
  CHECK(entries(&s) == 2);
  em_file_abort(f);
  em_file_abort(NULL);
  CHECK(!strcmp(slurp(p, buf, sizeof buf), "new") && entries(&s) == 1);
  fs_close(&s);
}

TEST(file_write_follows_links_and_writes_devices_in_place) {
  fscratch s;
  fs_open(&s);
  char err[EM_ERR_MAX], buf[256];
  const char *target = at(&s, "target.txt"), *link = at(&s, "link.txt");
  CHECK(em_file_write(target, "t0", 2, 0, err) == EM_OK);
  CHECK(symlink("target.txt", link) == 0);
  CHECK(em_file_write(link, "via link", 8, EM_FILE_SYNC, err) == EM_OK);
  struct stat st;
  CHECK(lstat(link, &st) == 0 && S_ISLNK(st.st_mode));
  CHECK(!strcmp(slurp(target, buf, sizeof buf), "via link"));
  CHECK(em_file_write("/dev/null", "x", 1, EM_FILE_SYNC, err) == EM_OK);
  /* /dev/full: every write fails with ENOSPC, and says so */
  if (access("/dev/full", W_OK) == 0) {
    CHECK(em_file_write("/dev/full", "x", 1, 0, err) == EM_ERUN);
    CHECK(strstr(err, "cannot write /dev/full: No space left on device") != NULL);
    em_file_out *f;
    CHECK(em_file_begin(&f, "/dev/full", 0, err) == EM_OK);
    CHECK(em_file_put(f, "abc", 3, err) == EM_ERUN);
    err[0] = 0;
    CHECK(em_file_put(f, "def", 3, err) == EM_ERUN && strstr(err, "No space left on device"));
    err[0] = 0;
    CHECK(em_file_commit(f, err) == EM_ERUN && strstr(err, "No space left on device"));
  }
  fs_close(&s);
}

TEST(file_write_errors_are_one_line_naming_the_file) {
  fscratch s;
  fs_open(&s);
  char err[EM_ERR_MAX], buf[256];
  const char *p = at(&s, "no/such/folder/x.json");
  CHECK(em_file_write(p, "x", 1, 0, err) == EM_ERUN);
  CHECK(strstr(err, "cannot write ") == err && strstr(err, p) && strstr(err, "No such file or directory"));
  CHECK(!strchr(err, '\n'));
  /* a folder as the destination */
  CHECK(em_file_write(s.dir, "x", 1, 0, err) == EM_ERUN && strstr(err, "Is a directory"));
  /* a name too long to take the temp suffix still gets a temp in the same folder */
  char name[256];
  memset(name, 'n', 250);
  name[250] = 0;
  const char *longp = at(&s, name);
  CHECK(em_file_write(longp, "long", 4, 0, err) == EM_OK);
  CHECK(!strcmp(slurp(longp, buf, sizeof buf), "long"));
  CHECK(em_file_write("", "x", 1, 0, err) == EM_ERUN);
  fs_close(&s);
}

TEST(file_write_unwritable_folder_keeps_the_old_file) {
  if (geteuid() == 0) {
    unit_skip("running as root: permission bits do not stop root (tests/lua/test_faults.lua covers a read-only mount)");
    return;
  }
  fscratch s;
  fs_open(&s);
  char err[EM_ERR_MAX], buf[256];
  const char *sub = at(&s, "ro");
  CHECK(mkdir(sub, 0755) == 0);
  char q[400];
  snprintf(q, sizeof q, "%s/kept.txt", sub);
  CHECK(em_file_write(q, "kept", 4, 0, err) == EM_OK);
  CHECK(chmod(sub, 0555) == 0);
  CHECK(em_file_write(q, "lost?", 5, 0, err) == EM_ERUN && strstr(err, "Permission denied") && strstr(err, q));
  CHECK(!strcmp(slurp(q, buf, sizeof buf), "kept"));
  CHECK(chmod(sub, 0755) == 0);
  fs_close(&s);
}
