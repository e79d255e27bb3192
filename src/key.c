/* key.c - what a graph bakes in: segment keys.

   A segment's key hashes everything its graph bakes in (launches, each
   tensor argument's role and identity, the sizes of the buffers it makes,
   its releases); scalars and external addresses are patched, not keyed.
   The key finds a node among its siblings.  On the replay path no key is
   computed: the predictor (predict.c) compares the same fields instead of
   hashing them. */
#include <stdlib.h>
#include <string.h>
#include "core.h"
#include "key.h"

static inline uint64_t mix(uint64_t h, uint64_t v) {
  h = (h ^ v) * 0x9e3779b97f4a7c15ull;
  return h ^ (h >> 29);
}

static uint32_t serial_counter;
uint32_t gt_key_serial(void) { return ++serial_counter ? serial_counter : ++serial_counter; }

/* Numbers buffers in order of first appearance within one key computation
   (serial): O(1) per argument through a mark on the buffer. */
static uint32_t ordinal(uint32_t serial, uint32_t *nseen, gt_buf *b) {
  if (b->kmark != serial) { b->kmark = serial; b->kord = (*nseen)++; }
  return b->kord;
}

int gt_role_of(const gt_tree *t, const gt_buf *b) {
  if (b->flags & GT_BUF_STAGING) return GT_ROLE_EXTERNAL;
  if ((b->flags & GT_BUF_TREE) && b->tree == t && b->gen == t->gen) return b->seg == t->depth ? GT_ROLE_INTERNAL : GT_ROLE_PATH;
  return (b->flags & GT_BUF_STATIC) ? GT_ROLE_STATIC : GT_ROLE_EXTERNAL;
}

gt_asig gt_key_arg(const gt_tree *t, const gt_arg *a, int topology, uint32_t serial, uint32_t *nseen,
                   int64_t **first, int *cap) {
  gt_buf *b = a->buf;
  gt_asig s = { 0, a->off, a->nbytes, gt_role_of(t, b), 0, b };
  switch (s.role) {
  case GT_ROLE_INTERNAL: s.id = (uint64_t)b->idx; break;
  case GT_ROLE_PATH: s.id = ((uint64_t)b->seg << 32) | (uint32_t)b->idx; break;
  case GT_ROLE_STATIC: s.id = topology ? ordinal(serial, nseen, b) : b->addr; break;
  default: {
    int fresh = b->kmark != serial;
    s.id = ordinal(serial, nseen, b);
    if (fresh && !GT_GROW(*first, *cap, (int)s.id + 1)) (*first)[s.id] = a->off;
    if ((int)s.id < *cap) s.off = a->off - (*first)[s.id];   /* (out of host memory: absolute, another node at worst) */
    break;
  }
  }
  return s;
}

uint64_t gt_segment_key(gt_tree *t, int topology) {
  gt_queue *q = &t->q;
  uint32_t nseen = 0, ser = gt_key_serial();
  int first = t->segstart[t->depth];
  uint64_t h = mix(0x51ed270b27f1a3ull + (uint64_t)topology, (uint64_t)(t->nbufs - first));
  for (int i = first; i < t->nbufs; i++) h = mix(h, t->bufs[i]->bytes);
  for (int i = 0; i < q->n; i++) {
    const gt_qlaunch *l = &q->l[i];
    h = mix(h, ((uint64_t)l->kind << 62) ^ ((uint64_t)l->smem << 32) ^ (l->k ? (uint64_t)l->k->id : l->bytes));
    if (l->kind == GT_GN_COLL) h = mix(h, (uint64_t)(uint32_t)l->value);   /* (which collective: its node is its own) */
    if (!topology) {
      h = mix(h, ((uint64_t)l->grid[0] << 40) ^ ((uint64_t)l->grid[1] << 20) ^ l->grid[2]);
      h = mix(h, ((uint64_t)l->block[0] << 40) ^ ((uint64_t)l->block[1] << 20) ^ l->block[2]);
    }
    const gt_arg *a = q->args + l->arg0;
    for (int j = 0; j < l->nargs; j++) {
      if (!a[j].buf) continue;
      gt_asig s = gt_key_arg(t, &a[j], topology, ser, &nseen, &t->kfirst, &t->kfirstcap);
      h = mix(h, ((uint64_t)s.role << 60) ^ ((uint64_t)j << 52) ^ (uint64_t)s.off);
      h = mix(mix(h, (uint64_t)s.nbytes), s.id);
    }
  }
  for (int i = 0; i < t->nrels; i++) {   /* releases plan memory: the same launches released otherwise are another node */
    gt_buf *b = t->rels[i];
    h = mix(mix(h, 0x7e1ea5eull ^ ((uint64_t)b->rel << 20)), ((uint64_t)b->seg << 32) | (uint32_t)b->idx);
  }
  return h;
}
