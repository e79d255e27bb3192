/* key.c - C tests of key.c: what a key sees, the cursor's hits and misses. */
#include <stdlib.h>
#include <string.h>
#include "core.h"
#include "key.h"
#include "predict.h"
#include "ctest.h"

/* A tree by hand, in the middle of its first segment: two buffers made in
   the segment (made), tensors from outside (ext), weights (stat). */
typedef struct fx {
  gt_tree t;
  gt_node root;
  gt_buf ext[3], stat[2], made[2];
  gt_buf *bufs[2];
  int segstart[1];
  int64_t aoff, boff;      /* the views of a and b (byte offsets) */
} fx;

static const uint8_t kio[] = { GT_P_OUT, GT_P_IN, GT_P_IN, GT_P_F32 };
static gt_kernel kk = { .name = "k", .nparams = 4, .ptype = kio, .graphable = 1, .id = 1 };

static void fx_init(fx *f) {
  static gt_runtime rt;   /* (the lane's count of lazy launches: none) */
  free(f->t.kfirst); free(f->t.cfirst);
  memset(f, 0, sizeof *f);
  f->t.rt = &rt;
  f->t.gen = 7;
  f->t.segstart = f->segstart;
  f->t.bufs = f->bufs;
  f->root.depth = -1;
  for (int i = 0; i < 3; i++) f->ext[i] = (gt_buf){ .addr = 0x100000u * (i + 1), .bytes = 1024 };
  for (int i = 0; i < 2; i++) f->stat[i] = (gt_buf){ .addr = 0x800000u * (i + 1), .bytes = 1024, .flags = GT_BUF_STATIC };
  for (int i = 0; i < 2; i++) {
    f->made[i] = (gt_buf){ .bytes = 512, .flags = GT_BUF_TREE | GT_BUF_SLAB, .tree = &f->t, .gen = 7, .idx = i };
    f->bufs[i] = &f->made[i];
  }
  f->t.nbufs = 2;
}

/* The segment: k(made0, a, s, x) with grid g, then k(made1, made0, b, x).
   cursor: each launch is pushed past the cursor, as gt_submit does. */
static void fx_queue(fx *f, gt_buf *a, gt_buf *b, gt_buf *s, float x, unsigned g, int cursor) {
  gt_queue_clear(&f->t.q);
  gt_qlaunch l = { .kind = GT_GN_KERNEL, .k = &kk, .grid = { g, 1, 1 }, .block = { 32, 1, 1 }, .nargs = 4 };
  gt_arg a1[4] = { { .buf = &f->made[0], .nbytes = 512 }, { .buf = a, .off = f->aoff, .nbytes = 256 }, { .buf = s, .nbytes = 1024 }, { .v.f32 = x } };
  gt_arg a2[4] = { { .buf = &f->made[1], .nbytes = 512 }, { .buf = &f->made[0], .nbytes = 512 }, { .buf = b, .off = f->boff, .nbytes = 256 }, { .v.f32 = x } };
  GT_CHECK(gt_queue_push(&f->t.q, &l, a1) == GT_OK);
  if (cursor) gt_cursor_push(&f->t);
  l.grid[0] = 4;
  GT_CHECK(gt_queue_push(&f->t.q, &l, a2) == GT_OK);
  if (cursor) gt_cursor_push(&f->t);
}

static uint64_t key_of(fx *f, gt_buf *a, gt_buf *b, gt_buf *s, float x, unsigned g, int topology) {
  fx_queue(f, a, b, s, x, g, 0);
  return gt_segment_key(&f->t, topology);
}

static void test_keys(void) {
  static fx f;
  fx_init(&f);
  gt_buf *e = f.ext, *s = f.stat;
  uint64_t k0 = key_of(&f, &e[0], &e[1], &s[0], 1.0f, 8, 0), t0 = key_of(&f, &e[0], &e[1], &s[0], 1.0f, 8, 1);
  GT_CHECK(key_of(&f, &e[0], &e[1], &s[0], 1.0f, 8, 0) == k0);            /* the same segment, the same key */
  GT_CHECK(key_of(&f, &e[0], &e[1], &s[0], 2.5f, 8, 0) == k0);            /* scalars are patched, not keyed */
  GT_CHECK(key_of(&f, &e[0], &e[1], &s[0], 1.0f, 16, 0) != k0);           /* a grid is baked in */
  GT_CHECK(key_of(&f, &e[0], &e[1], &s[0], 1.0f, 16, 1) == t0);           /* ... but not in the topology */
  GT_CHECK(key_of(&f, &e[0], &e[1], &s[1], 1.0f, 8, 0) != k0);            /* a static tensor's address is baked in */
  GT_CHECK(key_of(&f, &e[0], &e[1], &s[1], 1.0f, 8, 1) == t0);            /* ... the topology keys weights by order */
  GT_CHECK(key_of(&f, &e[1], &e[2], &s[0], 1.0f, 8, 0) == k0);            /* external tensors at new addresses: patched */
  GT_CHECK(key_of(&f, &e[0], &e[0], &s[0], 1.0f, 8, 0) != k0);            /* ... but their aliasing is keyed */
  GT_CHECK(key_of(&f, &e[2], &e[2], &s[0], 1.0f, 8, 0) == key_of(&f, &e[1], &e[1], &s[0], 1.0f, 8, 0));
  f.aoff = 512;                                                           /* an external view at another offset: */
  GT_CHECK(key_of(&f, &e[0], &e[1], &s[0], 1.0f, 8, 0) == k0);            /* its address is patched, not keyed */
  uint64_t k1 = key_of(&f, &e[0], &e[0], &s[0], 1.0f, 8, 0);              /* two views of one buffer, 512 B apart... */
  f.aoff = 0;
  GT_CHECK(key_of(&f, &e[0], &e[0], &s[0], 1.0f, 8, 0) != k1);            /* ... are not the same one view twice */
  f.aoff = 768, f.boff = 256;
  GT_CHECK(key_of(&f, &e[0], &e[0], &s[0], 1.0f, 8, 0) == k1);            /* ... but the same two views elsewhere */
  f.aoff = f.boff = 0;
  f.made[1].bytes = 1024;
  GT_CHECK(key_of(&f, &e[0], &e[1], &s[0], 1.0f, 8, 0) != k0);            /* the size of a buffer made in the segment */
  f.made[1].bytes = 512;
  gt_buf *rel = &f.made[0];
  f.t.rels = &rel;
  f.t.nrels = 1;
  rel->rel = 2;
  GT_CHECK(key_of(&f, &e[0], &e[1], &s[0], 1.0f, 8, 0) != k0);            /* a release plans memory: keyed */
  f.t.nrels = 0;
  gt_queue_free(&f.t.q);
  free(f.t.kfirst); free(f.t.cfirst);
  f.t.kfirst = f.t.cfirst = NULL;
  f.t.kfirstcap = f.t.cfirstcap = 0;
}

/* Records the queued segment as node n under f's root (what record() keeps). */
static void fx_record(fx *f, gt_node *n) {
  memset(n, 0, sizeof *n);
  n->parent = &f->root;
  n->launches = malloc(f->t.q.n * sizeof *n->launches);
  memcpy(n->launches, f->t.q.l, f->t.q.n * sizeof *n->launches);
  GT_CHECK(gt_cursor_save(&f->t, n, 0) == GT_OK);
}

/* The segment queued again past the cursor: the node it hits, or NULL. */
static gt_node *replayed(fx *f, gt_buf *a, gt_buf *b, gt_buf *s, float x, unsigned g) {
  gt_cursor_start(&f->t, &f->root);
  fx_queue(f, a, b, s, x, g, 1);
  return gt_cursor_hit(&f->t, 0);
}

static void test_cursor(void) {
  static fx f;
  static gt_node n, m;
  gt_node *kids[2] = { &n, &m };
  fx_init(&f);
  gt_buf *e = f.ext, *s = f.stat;
  fx_queue(&f, &e[0], &e[1], &s[0], 1.0f, 8, 0);
  fx_record(&f, &n);
  fx_queue(&f, &e[0], &e[1], &s[0], 1.0f, 16, 0);
  fx_record(&f, &m);
  f.root.kids = kids;
  f.root.nkids = 2;
  f.root.pred.last_kid = &n;
  GT_CHECK(replayed(&f, &e[0], &e[1], &s[0], 1.0f, 8) == &n);             /* the recording again: a hit */
  GT_CHECK(replayed(&f, &e[1], &e[2], &s[0], 3.0f, 8) == &n);             /* new scalars, inputs elsewhere: still a hit */
  /* GTLUA_VERIFY_LANE's compare in full agrees with such a hit, and finds
     a fast tier that would have patched too little, or matched another
     input (n's graph holding the recording's values) */
  fx_queue(&f, &e[0], &e[1], &s[0], 1.0f, 8, 0);
  uint64_t vals[8];
  for (int i = 0; i < f.t.q.n; i++) gt_queue_resolve(&f.t.q, i, vals + f.t.q.l[i].arg0);
  n.argvals = vals, n.nargvals = f.t.q.nargs;
  GT_CHECK(replayed(&f, &e[1], &e[2], &s[0], 3.0f, 8) == &n);
  GT_CHECK(f.t.pred.cexact && f.t.pred.ndirty == 2 && gt_predict_verify(&f.t, &n) == GT_OK);
  f.t.pred.ndirty = 1;
  GT_CHECK(gt_predict_verify(&f.t, &n) == GT_ERR && strstr(f.t.rt->err, "launch 2 (k)") &&
           strstr(f.t.rt->err, "not among those the replay patches"));
  f.t.pred.ndirty = 2;
  n.pred.asig[1].id ^= 1;
  GT_CHECK(gt_predict_verify(&f.t, &n) == GT_ERR && strstr(f.t.rt->err, "launch 1 (k, argument 2)") &&
           strstr(f.t.rt->err, "another buffer"));
  n.pred.asig[1].id ^= 1;
  n.argvals = NULL, n.nargvals = 0;
  GT_CHECK(replayed(&f, &e[0], &e[1], &s[1], 1.0f, 8) == NULL);           /* another weight: a miss (the key decides) */
  GT_CHECK(replayed(&f, &e[0], &e[0], &s[0], 1.0f, 8) == NULL);           /* other aliasing: a miss */
  GT_CHECK(replayed(&f, &e[0], &e[1], &s[0], 1.0f, 16) == &m);            /* the sibling's grid: the cursor switches to it */
  GT_CHECK(replayed(&f, &e[0], &e[1], &s[0], 1.0f, 32) == NULL);          /* a grid no node recorded: a miss */
  uint64_t was = s[0].addr;
  s[0].addr = 0x900000u;                                                   /* the struct of a freed static, reused: */
  gt_static_frees++;                                                       /* (no live static moves) */
  GT_CHECK(replayed(&f, &e[0], &e[1], &s[0], 1.0f, 8) == NULL);           /* its address is compared again: a miss */
  s[0].addr = was;
  GT_CHECK(replayed(&f, &e[0], &e[1], &s[0], 1.0f, 8) == &n);
  f.made[0].bytes = 256;
  GT_CHECK(replayed(&f, &e[0], &e[1], &s[0], 1.0f, 8) == NULL);           /* a buffer of another size: a miss */
  f.made[0].bytes = 512;
  f.root.pred.last_kid = NULL;
  GT_CHECK(replayed(&f, &e[0], &e[1], &s[0], 1.0f, 8) == NULL);           /* no prediction: the key decides */
  gt_cursor_forget(&n); gt_cursor_forget(&m);
  free(n.launches); free(m.launches);
  gt_queue_free(&f.t.q);
}

/* The lane's lazy launches (lane.c): an external input it replayed is
   numbered and tested by the cursor when they are checked, as it would
   have been as it landed: where it moved, where it aliases otherwise. */
static const uint8_t kord[] = { 0, 1, 2, 3 };
static gt_kernel kl = { .name = "kl", .nparams = 4, .ptype = kio, .order = kord, .ntensors = 3, .n4 = 1, .graphable = 1, .id = 2 };

static void fx_lean(fx *f, gt_buf *out, gt_buf *in, int cursor) {
  gt_qlaunch l = { .kind = GT_GN_KERNEL, .cfg = 9, .k = &kl, .grid = { 8, 1, 1 }, .block = { 32, 1, 1 }, .nargs = 4 };
  gt_arg a[4] = { { .buf = out, .nbytes = 512 }, { .buf = in, .nbytes = 256 }, { .buf = &f->stat[0], .nbytes = 1024 }, { .v.f32 = 1.0f } };
  GT_CHECK(gt_queue_push(&f->t.q, &l, a) == GT_OK);
  if (cursor) gt_cursor_push(&f->t);
}

static void lane_segment(fx *f, int lazy) {   /* a segment begins on the prediction; the lane takes lazy launches */
  gt_queue_clear(&f->t.q);
  f->t.rt->lane.lazy = 0;
  gt_cursor_start(&f->t, &f->root);
  gt_lane_start(&f->t);
  f->t.rt->lane.lazy = lazy;
}

static void test_lane(void) {
  static fx f;
  static gt_node n;
  gt_node *kids[1] = { &n };
  fx_init(&f);
  gt_buf *e = f.ext;
  fx_lean(&f, &f.made[0], &e[0], 0);
  fx_lean(&f, &f.made[1], &e[1], 0);
  fx_record(&f, &n);
  uint64_t vals[8];
  for (int i = 0; i < 8; i++) vals[i] = f.t.q.args[i].buf ? f.t.q.args[i].buf->addr + (uint64_t)f.t.q.args[i].off : f.t.q.args[i].v.u64;
  n.argvals = vals;
  n.nargvals = 8;
  f.root.kids = kids;
  f.root.nkids = 1;
  f.root.pred.last_kid = &n;
  lane_segment(&f, 2);
  GT_CHECK(f.t.rt->lane.n == 2 && n.pred.lane_ext == 2);                       /* external inputs: the lane's too */
  GT_CHECK(gt_lane_check(&f.t) == 1 && f.t.pred.ndirty == 0 && gt_cursor_hit(&f.t, 0) == &n);
  e[0].addr += 0x1000;                                                     /* its struct, other memory: */
  lane_segment(&f, 2);
  GT_CHECK(gt_lane_check(&f.t) == 1 && f.t.pred.ndirty == 1 && f.t.pred.cdirty[0] == 0);   /* patched */
  GT_CHECK(gt_lane_check(&f.t) == 1 && f.t.pred.ndirty == 1);                  /* (checked once) */
  GT_CHECK(gt_cursor_hit(&f.t, 0) == &n);
  e[0].addr -= 0x1000;
  lane_segment(&f, 0);                                                     /* e1 first (the core), then as recorded (the lane): */
  fx_lean(&f, &f.made[0], &e[1], 1);
  f.t.rt->lane.lazy = 1;
  GT_CHECK(gt_lane_check(&f.t) == 0 && gt_cursor_hit(&f.t, 0) == NULL);  /* one input twice, not two: a miss */
  f.t.rt->lane.lazy = 0;
  gt_lane_close(f.t.rt);
  n.argvals = NULL;
  gt_cursor_forget(&n);
  free(n.launches);
  gt_queue_free(&f.t.q);
}

void test_key(void) {
  test_keys();
  test_cursor();
  test_lane();
}
