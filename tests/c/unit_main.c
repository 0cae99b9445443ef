/* unit_main.c — runs every registered C unit test (optionally those whose name contains argv[1]). */
#include <stdlib.h>
#include <string.h>

#include "unit.h"

#define MAX_TESTS 1024
static struct {
  const char *name;
  unit_fn fn;
} tests[MAX_TESTS];
static int ntests;
static char skip_reason[256];

void unit_skip(const char *reason) {
  snprintf(skip_reason, sizeof skip_reason, "%s", reason && *reason ? reason : "skipped");
}

void unit_register(const char *name, unit_fn fn) {
  if (ntests < MAX_TESTS) {
    tests[ntests].name = name;
    tests[ntests++].fn = fn;
  }
}

static int by_name(const void *a, const void *b) {
  return strcmp(((const __typeof__(tests[0]) *)a)->name, ((const __typeof__(tests[0]) *)b)->name);
}

int main(int argc, char **argv) {
  qsort(tests, (size_t)ntests, sizeof tests[0], by_name);
  int passed = 0, failed = 0, skipped = 0;
  for (int i = 0; i < ntests; i++) {
    if (argc > 1 && !strstr(tests[i].name, argv[1])) continue;
    int f = 0;
    skip_reason[0] = 0;
    tests[i].fn(&f);
    if (f) {
      printf("FAIL c/%s\n", tests[i].name);
      failed++;
    } else if (skip_reason[0]) {
      printf("skip c/%s (%s)\n", tests[i].name, skip_reason);
      skipped++;
    } else {
      printf("ok   c/%s\n", tests[i].name);
      passed++;
    }
    fflush(stdout);
  }
  printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
  return failed ? 1 : 0;
}
