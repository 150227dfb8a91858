#ifndef SH_SYNC_H
#define SH_SYNC_H
/* Internal to the core: the slices a stoppable wait takes (the waits
 * themselves, locks and atomics are sh_platform.h's). */
#include "sh_platform.h"

/* A wait that can be stopped (a worker told to stop) looks at its stop
 * flag at least this often. */
#define SH__STOP_SLICE_MS 10.0

#endif
