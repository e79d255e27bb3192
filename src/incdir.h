/* incdir.h - where the CUDA headers are (cuda_fp16.h, cuda_bf16.h) for NVRTC's -I. */
#ifndef GT_INCDIR_H
#define GT_INCDIR_H
#include <stddef.h>

/* Finds a directory holding cuda_fp16.h and cuda_bf16.h, in this order:
   $GTLUA_CUDA_INCLUDE, $CUDA_HOME/include, $CUDA_PATH/include, the include
   directory next to the loaded libnvrtc (nvrtc_lib: its path, or NULL),
   /usr/local/cuda/include, /usr/local/cuda-X.Y/include, /opt/cuda/include,
   /usr/include, then the pip wheels' nvidia/cu13/include (and CUDA 12's
   nvidia/cuda_runtime/include) in $VIRTUAL_ENV, ~/.local and the system's
   site- and dist-packages.  0 with the NVRTC options in opts ("-I<dir>", and
   "-I<dir>/cccl" or the wheels' cuda_cccl when present); -1 with the places
   searched in searched (both of cap bytes). */
int gt_cuda_include(const char *nvrtc_lib, char *opts, size_t cap, char *searched, size_t scap);

/* 1 when a kernel source uses the half-precision types or functions (a word
   __half, half, half2, __nv_bfloat16, nv_bfloat16, an __h... or __float2half
   ... function) or includes cuda_fp16.h / cuda_bf16.h / mma.h (WMMA's nvcuda), else 0. */
int gt_uses_half(const char *src);
#endif
