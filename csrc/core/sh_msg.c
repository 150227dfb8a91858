#include "sh_threads.h"
#include "stagehand.h"

#include <stdlib.h>
#include <string.h>

typedef struct ref {
  int kind;
  void *obj;
} ref;

/* A message's bytes start in the message itself: most requests and replies
 * (a number, a short string, a small table) fit there, and a message is
 * then one allocation (a request and its reply share one: sh_msg_clear). */
#define SMALL 96
/* A message cleared for another value keeps a grown buffer up to this
 * size; a larger one goes back to the allocator. */
#define KEEP 4096

struct sh_msg {
  unsigned char *data; /* small, or an allocation once it outgrows it */
  size_t len, cap;
  ref *refs;
  int32_t nrefs, refcap;
  unsigned char small[SMALL];
};

sh_msg *sh_msg_new(void) {
  sh_msg *m = (sh_msg *)malloc(sizeof *m);
  if (!m) return NULL;
  m->data = m->small;
  m->len = 0, m->cap = SMALL;
  m->refs = NULL;
  m->nrefs = 0, m->refcap = 0;
  return m;
}

static void drop_refs(sh_msg *m) {
  int32_t i;
  for (i = 0; i < m->nrefs; i++) {
    if (m->refs[i].kind == SH_REF_PORT) sh_port_unref((sh_port *)m->refs[i].obj);
    else sh_rounds_unref((sh_rounds *)m->refs[i].obj);
  }
  m->nrefs = 0;
}

void sh_msg_free(sh_msg *m) {
  if (!m) return;
  drop_refs(m);
  free(m->refs);
  if (m->data != m->small) free(m->data);
  free(m);
}

void sh_msg_clear(sh_msg *m) {
  drop_refs(m);
  if (m->data != m->small && m->cap > KEEP) {
    free(m->data);
    m->data = m->small;
    m->cap = SMALL;
  }
  m->len = 0;
}

unsigned char *sh_msg_room(sh_msg *m, size_t n) {
  unsigned char *d;
  if (n > m->cap - m->len) {
    size_t cap = m->cap;
    unsigned char *grown;
    while (cap - m->len < n) {
      if (cap > ((size_t)-1) / 2) return NULL;
      cap *= 2;
    }
    if (m->data == m->small) {
      grown = (unsigned char *)malloc(cap);
      if (grown) memcpy(grown, m->small, m->len);
    } else {
      grown = (unsigned char *)realloc(m->data, cap);
    }
    if (!grown) return NULL;
    m->data = grown;
    m->cap = cap;
  }
  d = m->data + m->len;
  m->len += n;
  return d;
}

int sh_msg_put(sh_msg *m, const void *p, size_t n) {
  unsigned char *d = sh_msg_room(m, n);
  if (!d) return SH_ENOMEM;
  if (n) memcpy(d, p, n);
  return SH_OK;
}

int sh_msg_set_u32(sh_msg *m, size_t offset, uint32_t v) {
  if (offset > m->len || m->len - offset < sizeof v) return SH_EINVAL;
  memcpy(m->data + offset, &v, sizeof v);
  return SH_OK;
}

const unsigned char *sh_msg_data(const sh_msg *m, size_t *len) {
  *len = m->len;
  return m->data;
}

int32_t sh_msg_add_ref(sh_msg *m, int kind, void *obj) {
  if (kind != SH_REF_PORT && kind != SH_REF_ROUNDS) return SH_EINVAL;
  if (m->nrefs == m->refcap) {
    int32_t cap = m->refcap ? m->refcap * 2 : 4;
    ref *grown = (ref *)realloc(m->refs, (size_t)cap * sizeof *grown);
    if (!grown) return SH_ENOMEM;
    m->refs = grown;
    m->refcap = cap;
  }
  if (kind == SH_REF_PORT) sh_port_ref((sh_port *)obj);
  else sh_rounds_ref((sh_rounds *)obj);
  m->refs[m->nrefs].kind = kind;
  m->refs[m->nrefs].obj = obj;
  return m->nrefs++;
}

int32_t sh_msg_nrefs(const sh_msg *m) { return m->nrefs; }

void *sh_msg_ref(const sh_msg *m, int32_t i, int *kind) {
  if (i < 0 || i >= m->nrefs) return NULL;
  *kind = m->refs[i].kind;
  return m->refs[i].obj;
}
