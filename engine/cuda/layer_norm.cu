// engine/cuda/layer_norm.cu: GPT-2's layer norm on the device. One warp a
// row (a block holds 8 rows): the forward pass takes the row's mean, then its
// variance about that mean (two passes over a row the warp's L1 keeps: no
// cancellation for rows far from zero mean), and keeps mean and rstd for the
// backward pass. The parameter gradients are column sums over every row,
// taken as bias_grad's are: 32 columns a block over one chunk of rows, the
// rows over 8 warps, the warps' sums in a fixed order, then the chunks' in
// order (the same bits every run; no atomics).
#include <type_traits>

#include "engine/cuda/cuda_types.cuh"

namespace xrun::cuda {

namespace {

constexpr int kRowsPerBlock = 8;  // warps of a block, one row each

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <class T>
__global__ void ln_forward_kernel(const T* x, const float* gamma, const float* beta, int64_t rows,
                                  int64_t c, float eps, T* y, float* mean, float* rstd) {
  const int64_t r = blockIdx.x * static_cast<int64_t>(kRowsPerBlock) + threadIdx.y;
  if (r >= rows) return;
  const T* xr = x + r * c;
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < c; j += 32) sum += to_float(xr[j]);
  const float m = warp_sum(sum) / static_cast<float>(c);
  float squares = 0.0f;
  for (int64_t j = threadIdx.x; j < c; j += 32) {
    const float d = to_float(xr[j]) - m;
    squares += d * d;
  }
  const float s = rsqrtf(warp_sum(squares) / static_cast<float>(c) + eps);
  T* yr = y + r * c;
  for (int64_t j = threadIdx.x; j < c; j += 32)
    yr[j] = from_float<T>((to_float(xr[j]) - m) * s * gamma[j] + beta[j]);
  if (threadIdx.x == 0) {
    mean[r] = m;
    rstd[r] = s;
  }
}

// dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy gamma.
template <class T>
__global__ void ln_backward_dx_kernel(const T* dy, const T* x, const float* gamma,
                                      const float* mean, const float* rstd, int64_t rows,
                                      int64_t c, T* dx, bool add_to_dx) {
  const int64_t r = blockIdx.x * static_cast<int64_t>(kRowsPerBlock) + threadIdx.y;
  if (r >= rows) return;
  const T* xr = x + r * c;
  const T* dyr = dy + r * c;
  const float m = mean[r], s = rstd[r];
  float g_sum = 0.0f, gx_sum = 0.0f;
  for (int64_t j = threadIdx.x; j < c; j += 32) {
    const float g = to_float(dyr[j]) * gamma[j];
    g_sum += g;
    gx_sum += g * (to_float(xr[j]) - m) * s;
  }
  const float g_mean = warp_sum(g_sum) / static_cast<float>(c);
  const float gx_mean = warp_sum(gx_sum) / static_cast<float>(c);
  T* dxr = dx + r * c;
  for (int64_t j = threadIdx.x; j < c; j += 32) {
    const float xhat = (to_float(xr[j]) - m) * s;
    float d = s * (to_float(dyr[j]) * gamma[j] - g_mean - xhat * gx_mean);
    if (add_to_dx) d += to_float(dxr[j]);
    dxr[j] = from_float<T>(d);
  }
}

// Over the rows of chunk blockIdx.y: dgamma[j] = sum_r dy xhat and
// dbeta[j] = sum_r dy, into dgamma[chunk, j] and dbeta[chunk, j].
template <class T>
__global__ void ln_param_grad_kernel(const T* dy, const T* x, const float* mean,
                                     const float* rstd, int64_t rows, int64_t c,
                                     int64_t rows_per_chunk, float* dgamma, float* dbeta) {
  __shared__ float part_g[8][33], part_b[8][33];
  const int64_t j = blockIdx.x * 32 + threadIdx.x;
  const int64_t r0 = blockIdx.y * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  float g = 0.0f, b = 0.0f;
  if (j < c)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += 8) {
      const float d = to_float(dy[r * c + j]);
      g += d * (to_float(x[r * c + j]) - mean[r]) * rstd[r];
      b += d;
    }
  part_g[threadIdx.y][threadIdx.x] = g;
  part_b[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y == 0 && j < c) {
    float tg = 0.0f, tb = 0.0f;
    for (int w = 0; w < 8; ++w) tg += part_g[w][threadIdx.x], tb += part_b[w][threadIdx.x];
    dgamma[blockIdx.y * c + j] = tg;
    dbeta[blockIdx.y * c + j] = tb;
  }
}

// The chunks' sums in order.
__global__ void ln_sum_chunks_kernel(const float* partials, int64_t chunks, int64_t c,
                                     float* dgamma, float* dbeta) {
  XRUN_GRID_LOOP(j, c) {
    float g = 0.0f, b = 0.0f;
    for (int64_t k = 0; k < chunks; ++k) g += partials[k * c + j], b += partials[(chunks + k) * c + j];
    dgamma[j] = g;
    dbeta[j] = b;
  }
}

unsigned row_blocks(int64_t rows) {
  return static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
}

}  // namespace

void layer_norm_forward(const void* x, DataType dt, const float* gamma, const float* beta,
                        int64_t rows, int64_t c, float eps, void* y, float* mean, float* rstd,
                        cudaStream_t stream) {
  dispatch(dt, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    ln_forward_kernel<T><<<row_blocks(rows), dim3(32, kRowsPerBlock), 0, stream>>>(
        static_cast<const T*>(x), gamma, beta, rows, c, eps, static_cast<T*>(y), mean, rstd);
    XRUN_CHECK_LAUNCH();
  });
}

void layer_norm_backward(const void* dy, const void* x, DataType dt, const float* gamma,
                         const float* mean, const float* rstd, int64_t rows, int64_t c,
                         void* dx, bool add_to_dx, float* dgamma, float* dbeta,
                         float* partials, cudaStream_t stream) {
  const int64_t chunks = partials ? column_chunks(rows) : 1;
  const int64_t per_chunk = (rows + chunks - 1) / chunks;
  float* g_out = chunks > 1 ? partials : dgamma;
  float* b_out = chunks > 1 ? partials + chunks * c : dbeta;
  dispatch(dt, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const dim3 grid(static_cast<unsigned>((c + 31) / 32), static_cast<unsigned>(chunks));
    ln_param_grad_kernel<T><<<grid, dim3(32, 8), 0, stream>>>(
        static_cast<const T*>(dy), static_cast<const T*>(x), mean, rstd, rows, c, per_chunk,
        g_out, b_out);
    XRUN_CHECK_LAUNCH();
    if (chunks > 1) {
      ln_sum_chunks_kernel<<<blocks_for(c), kThreads, 0, stream>>>(partials, chunks, c, dgamma,
                                                                   dbeta);
      XRUN_CHECK_LAUNCH();
    }
    ln_backward_dx_kernel<T><<<row_blocks(rows), dim3(32, kRowsPerBlock), 0, stream>>>(
        static_cast<const T*>(dy), static_cast<const T*>(x), gamma, mean, rstd, rows, c,
        static_cast<T*>(dx), add_to_dx);
    XRUN_CHECK_LAUNCH();
  });
}

}  // namespace xrun::cuda
