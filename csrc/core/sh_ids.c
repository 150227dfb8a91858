#include "sh_grow.h"
#include "stagehand.h"

#include <stdlib.h>
#if defined(_MSC_VER) && !defined(__clang__) && !defined(SH_NO_BUILTINS)
#include <intrin.h>
#endif

/* Free ids below `high` are set bits in bits[0]; each bit of level k + 1
 * says whether a word of level k has any bit set. SH_MAX_ID is 2^24, so
 * four levels reach one word: 2^18, 2^12 and 2^6 words below it. Taking
 * the lowest free id reads one word per level; giving one back sets one bit
 * per level. Levels 0 and 1 grow with `high`; the small ones are kept whole. */
struct sh_ids {
  uint64_t *bits0;  /* a bit per id below high: set when free */
  uint64_t *bits1;  /* a bit per word of bits0: set when it has a free id */
  uint64_t bits2[64];
  uint64_t bits3;
  size_t words0, words1; /* allocated words of bits0 and bits1 */
  int32_t high;          /* ids at or above it were never taken */
  int32_t taken;
};

#define BIT(i) ((uint64_t)1 << ((i) & 63))

static int lowest_bit(uint64_t w) {
#if (defined(__GNUC__) || defined(__clang__)) && !defined(SH_NO_BUILTINS)
  return __builtin_ctzll(w);
#elif defined(_MSC_VER) && (defined(_M_X64) || defined(_M_ARM64)) && !defined(SH_NO_BUILTINS)
  unsigned long i;
  _BitScanForward64(&i, w); /* (w is never 0) */
  return (int)i;
#else
  int i = 0;
  while (!(w & 1)) {
    w >>= 1;
    i++;
  }
  return i;
#endif
}

sh_ids *sh_ids_new(void) { return (sh_ids *)calloc(1, sizeof(sh_ids)); }

void sh_ids_free(sh_ids *s) {
  if (!s) return;
  free(s->bits0);
  free(s->bits1);
  free(s);
}

/* Makes room in both grown levels for id (zeroed: taken, no free bit).
 * bits1 grows first: out of memory for bits0 then leaves bits1 longer
 * than needed, which is harmless, where the other order left bits0 with
 * words that bits1 has no bit for. */
static int grow(sh_ids *s, int32_t id) {
  size_t need0 = (size_t)id / 64 + 1, need1, n = s->words0;
  if (need0 > n) {
    n = n ? n : 4;
    while (n < need0) n *= 2;
  }
  need1 = (n + 63) / 64;
  if (need1 > s->words1) {
    uint64_t *w = (uint64_t *)sh__grow_zeroed(s->bits1, s->words1, need1, sizeof *w);
    if (!w) return SH_ENOMEM;
    s->bits1 = w;
    s->words1 = need1;
  }
  if (n > s->words0) {
    uint64_t *w = (uint64_t *)sh__grow_zeroed(s->bits0, s->words0, n, sizeof *w);
    if (!w) return SH_ENOMEM;
    s->bits0 = w;
    s->words0 = n;
  }
  return SH_OK;
}

int32_t sh_ids_take(sh_ids *s) {
  int32_t u, v, w, id;
  if (!s) return SH_EINVAL;
  if (!s->bits3) { /* none given back: the next id never taken */
    if (s->high >= SH_MAX_ID) return SH_ESTATE;
    if (grow(s, s->high) != SH_OK) return SH_ENOMEM;
    s->taken++;
    return s->high++;
  }
  u = lowest_bit(s->bits3);
  v = u * 64 + lowest_bit(s->bits2[u]);
  w = v * 64 + lowest_bit(s->bits1[v]);
  id = w * 64 + lowest_bit(s->bits0[w]);
  s->bits0[w] &= s->bits0[w] - 1;
  if (!s->bits0[w]) {
    s->bits1[v] &= ~BIT(w);
    if (!s->bits1[v]) {
      s->bits2[u] &= ~BIT(v);
      if (!s->bits2[u]) s->bits3 &= ~BIT(u);
    }
  }
  s->taken++;
  return id;
}

int sh_ids_give(sh_ids *s, int32_t id) {
  int32_t w;
  if (!s || id < 0 || id >= s->high) return SH_EINVAL;
  w = id / 64;
  if (s->bits0[w] & BIT(id)) return SH_ESTATE; /* given back already */
  s->bits0[w] |= BIT(id);
  s->bits1[w / 64] |= BIT(w);
  s->bits2[w / 4096] |= BIT(w / 64);
  s->bits3 |= BIT(w / 4096);
  s->taken--;
  return SH_OK;
}

int32_t sh_ids_count(const sh_ids *s) { return s ? s->taken : 0; }

int sh_ids_check(const sh_ids *s) {
  size_t w;
  int32_t i, free_ids = 0;
  if (!s) return SH_EINVAL;
  if (s->high < 0 || s->high > SH_MAX_ID || (size_t)s->high > s->words0 * 64) return SH_ESTATE;
  for (w = 0; w < s->words0; w++) {
    uint64_t bits = s->bits0[w];
    int any1 = (s->bits1[w / 64] & BIT(w)) != 0;
    if ((bits != 0) != any1) return SH_ESTATE;
    for (i = 0; i < 64; i++) {
      if (!(bits & BIT(i))) continue;
      if ((int64_t)w * 64 + i >= s->high) return SH_ESTATE; /* free bit above high */
      free_ids++;
    }
  }
  for (w = 0; w < s->words1; w++)
    if ((s->bits1[w] != 0) != ((s->bits2[w / 64] & BIT(w)) != 0)) return SH_ESTATE;
  for (w = s->words1; w < 4096; w++)
    if (s->bits2[w / 64] & BIT(w)) return SH_ESTATE;
  for (w = 0; w < 64; w++)
    if ((s->bits2[w] != 0) != ((s->bits3 & BIT(w)) != 0)) return SH_ESTATE;
  return s->taken == s->high - free_ids ? SH_OK : SH_ESTATE;
}
