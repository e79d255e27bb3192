// elementwise.cu - fill, copy, arithmetic and activations over flat f32 buffers.
//
// Launch: 1-D grid of 1-D blocks (gt.ops uses 256 threads); every kernel walks
// the buffer with a grid-stride loop, so any grid covers any n.  Outputs come
// first, then inputs, then sizes and scalars.

#define GT_STRIDE_LOOP(i, n) \
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
       i += (long long)blockDim.x * gridDim.x)

// -- Fill and copy (the tensor layer's zeros/ones/full/fill use fill_*) -------

__global__ void fill_f32(float *y, long long n, float v) { GT_STRIDE_LOOP(i, n) y[i] = v; }
__global__ void fill_i32(int *y, long long n, int v) { GT_STRIDE_LOOP(i, n) y[i] = v; }
__global__ void fill_i64(long long *y, long long n, long long v) { GT_STRIDE_LOOP(i, n) y[i] = v; }
__global__ void fill_u8(unsigned char *y, long long n, int v) {
  GT_STRIDE_LOOP(i, n) y[i] = (unsigned char)v;
}

__global__ void copy_f32(float *y, const float *x, long long n) { GT_STRIDE_LOOP(i, n) y[i] = x[i]; }

// -- Arithmetic -------------------------------------------------------------

__global__ void add_f32(float *y, const float *a, const float *b, long long n) {
  GT_STRIDE_LOOP(i, n) y[i] = a[i] + b[i];
}

__global__ void mul_f32(float *y, const float *a, const float *b, long long n) {
  GT_STRIDE_LOOP(i, n) y[i] = a[i] * b[i];
}

// b has m elements and repeats along a's rows: y[i] = a[i] + b[i % m] (a bias).
__global__ void add_rows_f32(float *y, const float *a, const float *b, long long n, long long m) {
  GT_STRIDE_LOOP(i, n) y[i] = a[i] + b[i % m];
}

__global__ void mul_rows_f32(float *y, const float *a, const float *b, long long n, long long m) {
  GT_STRIDE_LOOP(i, n) y[i] = a[i] * b[i % m];
}

// y = a*x + b with scalars a, b (scaling by, or adding, a number).
__global__ void affine_f32(float *y, const float *x, long long n, float a, float b) {
  GT_STRIDE_LOOP(i, n) y[i] = a * x[i] + b;
}

// y = a*x + b*y, in place on y.
__global__ void axpby_f32(float *y, const float *x, long long n, float a, float b) {
  GT_STRIDE_LOOP(i, n) y[i] = a * x[i] + b * y[i];
}

// -- Activations ------------------------------------------------------------

__device__ __forceinline__ float gt_gelu(float v) {
  // tanh approximation, as PyTorch's gelu(approximate="tanh")
  return 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
}

__device__ __forceinline__ float gt_sigmoid(float v) { return 1.0f / (1.0f + expf(-v)); }

__global__ void relu_f32(float *y, const float *x, long long n) { GT_STRIDE_LOOP(i, n) y[i] = fmaxf(x[i], 0.0f); }
__global__ void gelu_f32(float *y, const float *x, long long n) { GT_STRIDE_LOOP(i, n) y[i] = gt_gelu(x[i]); }
__global__ void tanh_f32(float *y, const float *x, long long n) { GT_STRIDE_LOOP(i, n) y[i] = tanhf(x[i]); }
__global__ void sigmoid_f32(float *y, const float *x, long long n) { GT_STRIDE_LOOP(i, n) y[i] = gt_sigmoid(x[i]); }
