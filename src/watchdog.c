/* watchdog.c — a kernel that never finishes (a deadlocked ring) blocks the next synchronizing call for ever, and with
 * it the command and the GPU machine's call until its timeout. Every blocking driver call (cuda.c: a synchronize, a
 * blocking copy or memset) marks its start in its thread's slot; a thread started with the first one looks once a
 * second and, when a call has waited longer than EMMY_HANG_S seconds (default 120; 0: no watchdog), writes one line
 * naming the call and the last kernel launched and ends the process with status 1: a context with a kernel that does
 * not end cannot be recovered in the process. Threads past the table's 64 slots go unwatched. */
#include "watchdog.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

enum { WD_SLOTS = 64 };
static struct {
  long long since; /* CLOCK_MONOTONIC ns the call began; 0: none waiting */
  const char *call;
  const char *last; /* the context's last launch (its buffer) */
} wd[WD_SLOTS];
static pthread_mutex_t wd_mu = PTHREAD_MUTEX_INITIALIZER;
static double wd_limit = -1; /* seconds; 0: off; -1: EMMY_HANG_S not read yet */
static int wd_slots_used, wd_started;
static __thread int wd_slot = -1;

static long long wd_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void *wd_main(void *arg) {
  (void)arg;
  for (;;) {
    sleep(1);
    long long now = wd_now();
    for (int i = 0; i < WD_SLOTS; i++) {
      long long t = __atomic_load_n(&wd[i].since, __ATOMIC_ACQUIRE);
      if (!t || (double)(now - t) < wd_limit * 1e9) continue;
      char last[160];
      snprintf(last, sizeof last, "%s", wd[i].last && wd[i].last[0] ? wd[i].last : "none");
      fflush(stdout);
      fprintf(stderr, "emmy: %s has waited %.0f s for the GPU (last launch: %s): a kernel that does not finish, a "
                      "deadlock; the process ends (EMMY_HANG_S sets the limit, 0 turns the watchdog off)\n",
              wd[i].call, (double)(now - t) / 1e9, last);
      _exit(1);
    }
  }
  return NULL;
}

void em_wd_begin(const char *call, const char *last_launch) {
  if (wd_slot < 0) {
    /* (this thread's first call: EMMY_HANG_S read once a process, the thread started once) */
    pthread_mutex_lock(&wd_mu);
    if (wd_limit < 0) {
      const char *e = getenv("EMMY_HANG_S");
      wd_limit = e && *e ? atof(e) : 120;
      if (wd_limit < 0) wd_limit = 0;
    }
    wd_slot = wd_limit > 0 && wd_slots_used < WD_SLOTS ? wd_slots_used++ : WD_SLOTS;
    pthread_t th;
    if (wd_slot < WD_SLOTS && !wd_started && !pthread_create(&th, NULL, wd_main, NULL)) {
      pthread_detach(th);
      wd_started = 1;
    }
    pthread_mutex_unlock(&wd_mu);
  }
  if (wd_slot >= WD_SLOTS) return;
  wd[wd_slot].call = call;
  wd[wd_slot].last = last_launch;
  __atomic_store_n(&wd[wd_slot].since, wd_now(), __ATOMIC_RELEASE);
}

void em_wd_end(void) {
  if (wd_slot >= 0 && wd_slot < WD_SLOTS) __atomic_store_n(&wd[wd_slot].since, 0, __ATOMIC_RELEASE);
}
