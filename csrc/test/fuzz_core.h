/* One fuzz input: a byte string decoded into operations on a stall clock,
 * a timer heap, a slot pool and a barrier. Returns 0, or aborts on a broken
 * invariant (so libFuzzer and the replaying C tests both see the failure). */
#ifndef SH_FUZZ_CORE_H
#define SH_FUZZ_CORE_H
#include <stddef.h>
#include <stdint.h>
int sh_fuzz_one(const uint8_t *data, size_t size);
#endif
