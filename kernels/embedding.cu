// embedding.cu - table lookups: y[i, :] = table[ids[i], :].
//
// ids i32 [n], table f32 [V, D], y f32 [n, D].  1-D grid of 1-D blocks with a
// grid-stride loop over the n*D outputs.  An id outside [0, V) gives a row of
// zeros (a kernel cannot raise; check ids on the host if that matters).

__global__ void embedding_f32(float *y, const int *ids, const float *table, long long n, int D, int V) {
  long long total = n * D;
  for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < total;
       k += (long long)blockDim.x * gridDim.x) {
    long long i = k / D;
    int d = (int)(k - i * D);
    int id = ids[i];
    y[k] = (id >= 0 && id < V) ? table[(long long)id * D + d] : 0.0f;
  }
}
