/* watchdog.h — ends the process when a blocking GPU call never returns (a kernel that does not finish). */
#ifndef EM_WATCHDOG_H
#define EM_WATCHDOG_H

/* Marks the start of this thread's blocking call `call` (a driver entry point's name); last_launch is the name of
 * the kernel most recently enqueued on its context, read only if the call hangs. */
void em_wd_begin(const char *call, const char *last_launch);
/* Marks its end. */
void em_wd_end(void);

#endif
