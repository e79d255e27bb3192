/* kernel.h - kernel sources as kernel.c reads them (private to the core). */
#ifndef GT_KERNEL_H
#define GT_KERNEL_H
#include "core.h"

/* One parameter of a __global__ function: its name, its type as written,
   GT_P_* and (for a pointer) the element's GT_* dtype. */
typedef struct gt_kparam { char name[128]; char text[128]; uint8_t ptype, pdtype; } gt_kparam;
/* One __global__ function as declared. */
typedef struct gt_kdecl { char name[128]; int np; gt_kparam p[GT_MAX_PARAMS]; } gt_kdecl;

/* Finds every __global__ function of src: *nk declarations into ks (cap of
   them).  GT_ERR with err saying which kernel and parameter when one cannot
   be passed (a pointer to a pointer, an unknown scalar type, no name). */
int gt_kernel_parse(const char *src, gt_kdecl *ks, int cap, int *nk, char *err);
/* What NVRTC compiles: src into out (as long) with the device C headers'
   #include lines blanked; GT_ERR (chunk's file:line in the message) for a
   host header or a std:: name, which NVRTC refuses. */
int gt_kernel_portable(gt_runtime *rt, const char *src, char *out, const char *chunk);
#endif
