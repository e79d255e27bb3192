/* nccl.h - NCCL opened at run time (nccl.c): the cuda backend's group for
   gt.dist.  Uses nothing in src/ but util. */
#ifndef GT_NCCL_H
#define GT_NCCL_H
#include <stddef.h>
#include <stdint.h>
#include "coll.h"

typedef struct gt_nccl gt_nccl;

/* Loads libnccl.so.2 (GTLUA_NCCL, the loader's path, PyTorch's wheels
   (site-packages/nvidia/nccl/lib, nvidia/cu13/lib), the CUDA toolkit) and
   joins the communicator of world ranks as rank, on the device whose
   context is current.  id "host:port": the ranks meet through
   NCCL_COMM_ID=host:(port+1) (set when unset; port itself is left to a
   launcher's store), so every rank's ncclGetUniqueId gives the same id.
   0, or -1 with a sentence naming the call in err. */
int gt_nccl_open(gt_nccl **out, int rank, int world, const char *id, char *err, size_t errlen);
/* Enqueues collective c on stream (a CUstream): device addresses src in,
   dst out.  Under stream capture it is captured.  0, or -1 with err. */
int gt_nccl_run(gt_nccl *n, const gt_coll *c, uint64_t dst, uint64_t src, void *stream, char *err, size_t errlen);
void gt_nccl_close(gt_nccl *n);   /* the communicator destroyed */
#endif
