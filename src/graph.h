/* graph.h - a segment's graph: record, patch, rebuild, replay, launch (graph.c; private to the core). */
#ifndef GT_GRAPH_H
#define GT_GRAPH_H
#include "core.h"

/* Record n from the queue: plan, build, instantiate (or update the exec in
   place), launch.  Returns what ran: GT_V_RECORD, GT_V_UPDATE, or GT_V_EAGER
   when the graph build failed (n runs eagerly from now on); GT_ERR on failure. */
int gt_graph_record(gt_tree *t, gt_node *n, int first, int update);
/* Replay n: bind the new buffers to the plan, patch changed arguments,
   launch (or defer the launch).  GT_V_REPLAY, or GT_V_UPDATE when a moved
   copy needed a whole-graph update. */
int gt_graph_replay(gt_tree *t, gt_node *n, int first);
/* The queue run now, launch by launch (a cond decided on the host); n (or
   NULL) gets the device time when profiling. */
int gt_graph_run_eager(gt_tree *t, gt_node *n);
/* Launches the call's replayed segments not launched yet (in order, or as
   one graph): before anything that needs them to have run (a segment that
   runs otherwise, host.c's syncs and host copies, the call's end). */
int gt_graph_launch_pending(gt_tree *t);
int gt_graph_launch(gt_tree *t, gt_node *n);       /* launch n's graph (timed when profiling) */
void gt_graph_gpu_harvest(gt_backend *be, gt_node *n);   /* a sampled launch's device time, if it has run */
/* Sets launch i of n's graph to the values n->argvals holds (d >= 0: n's
   index in the call's path, noted for the floor); 1: the driver refused
   (a node in a conditional body): gt_graph_rebuild sets them all. */
int gt_graph_patch(gt_tree *t, int d, gt_node *n, int i);
int gt_graph_rebuild(gt_tree *t, gt_node *n);
#endif
