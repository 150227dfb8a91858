#include "stagehand.h"

#include <stdlib.h>

struct sh_barrier {
  int32_t size, arrived;
  uint8_t *seen;
};

sh_barrier *sh_barrier_new(int32_t size) {
  sh_barrier *b;
  if (size < 0 || size >= SH_MAX_ID) return NULL;
  b = (sh_barrier *)calloc(1, sizeof *b);
  if (!b) return NULL;
  b->seen = (uint8_t *)calloc((size_t)size + 1, 1);
  if (!b->seen) {
    free(b);
    return NULL;
  }
  b->size = size;
  return b;
}

void sh_barrier_free(sh_barrier *b) {
  if (!b) return;
  free(b->seen);
  free(b);
}

int sh_barrier_arrive(sh_barrier *b, int32_t index) {
  if (!b || index < 0 || index >= b->size) return SH_EINVAL;
  if (b->seen[index]) return 0;
  b->seen[index] = 1;
  b->arrived++;
  return 1;
}

int32_t sh_barrier_arrived(const sh_barrier *b) { return b ? b->arrived : 0; }
int32_t sh_barrier_size(const sh_barrier *b) { return b ? b->size : 0; }

int32_t sh_barrier_next_missing(const sh_barrier *b, int32_t after) {
  int32_t i;
  if (!b) return -1;
  for (i = after < 0 ? 0 : after + 1; i < b->size; i++)
    if (!b->seen[i]) return i;
  return -1;
}
