/* version.c — the build's version and git revision, baked in by the Makefile. */
#include "base.h"

#ifndef EM_VERSION
#define EM_VERSION "0.0.0"
#endif
#ifndef EM_GIT_REV
#define EM_GIT_REV "unknown"
#endif

const char em_version[] = EM_VERSION;
const char em_git_rev[] = EM_GIT_REV;
