// engine/cuda/pointwise.cu: element-wise kernels on NHWC activations
// (residual sums, ReLU and its backward where cuDNN's fused batch norm is
// not used), the fc layer's bias and its gradient, global average pooling.
// All arithmetic in fp32, whatever the storage type.
#include <type_traits>

#include "engine/cuda/cuda_types.cuh"

namespace xrun::cuda {

namespace {

template <class T>
__global__ void add_kernel(T* dst, const T* src, int64_t count) {
  XRUN_GRID_LOOP(i, count) dst[i] = from_float<T>(to_float(dst[i]) + to_float(src[i]));
}

template <class T>
__global__ void relu_kernel(T* y, int64_t count) {
  XRUN_GRID_LOOP(i, count) y[i] = from_float<T>(fmaxf(to_float(y[i]), 0.0f));
}

template <class T>
__global__ void add_relu_kernel(T* y, const T* r, int64_t count) {
  XRUN_GRID_LOOP(i, count) y[i] = from_float<T>(fmaxf(to_float(y[i]) + to_float(r[i]), 0.0f));
}

template <class T>
__global__ void relu_backward_kernel(const T* y, const T* dy, T* dx, int64_t count) {
  XRUN_GRID_LOOP(i, count) dx[i] = to_float(y[i]) > 0.0f ? dy[i] : from_float<T>(0.0f);
}

template <class T>
__global__ void add_bias_kernel(T* y, const float* bias, int64_t rows, int64_t cols) {
  XRUN_GRID_LOOP(i, rows * cols) y[i] = from_float<T>(to_float(y[i]) + bias[i % cols]);
}

// 32 columns a block (one per lane, reads coalesced) over one chunk of
// rows (blockIdx.y), each of the 8 warps summing every 8th row of it; then
// the warps' sums in order into out[chunk, c]: the same bits every run.
template <class T>
__global__ void column_chunk_kernel(const T* dy, int64_t rows, int64_t cols,
                                    int64_t rows_per_chunk, float* out) {
  __shared__ float part[8][33];
  const int64_t c = blockIdx.x * 32 + threadIdx.x;
  const int64_t r0 = blockIdx.y * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  float sum = 0.0f;
  if (c < cols)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += 8) sum += to_float(dy[r * cols + c]);
  part[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float total = 0.0f;
    for (int w = 0; w < 8; ++w) total += part[w][threadIdx.x];
    out[blockIdx.y * cols + c] = total;
  }
}

// db[c] = the chunks' sums of column c, in order.
__global__ void sum_chunks_kernel(const float* partials, int64_t chunks, int64_t cols,
                                  float* db) {
  XRUN_GRID_LOOP(c, cols) {
    float total = 0.0f;
    for (int64_t k = 0; k < chunks; ++k) total += partials[k * cols + c];
    db[c] = total;
  }
}

template <class T>
__global__ void avg_pool_kernel(const T* x, T* y, int64_t n, int64_t hw, int64_t c) {
  XRUN_GRID_LOOP(i, n * c) {
    const int64_t img = i / c, ch = i % c;
    float sum = 0.0f;
    for (int64_t p = 0; p < hw; ++p) sum += to_float(x[(img * hw + p) * c + ch]);
    y[i] = from_float<T>(sum / static_cast<float>(hw));
  }
}

template <class T>
__global__ void avg_pool_backward_kernel(const T* dy, T* dx, int64_t n, int64_t hw, int64_t c) {
  XRUN_GRID_LOOP(i, n * hw * c) {
    const int64_t ch = i % c, img = i / (hw * c);
    dx[i] = from_float<T>(to_float(dy[img * c + ch]) / static_cast<float>(hw));
  }
}

}  // namespace

void add_inplace(void* dst, const void* src, DataType dt, int64_t count, cudaStream_t stream) {
  XRUN_LAUNCH(add_kernel, count, static_cast<T*>(dst), static_cast<const T*>(src), count);
}

void relu_inplace(void* y, DataType dt, int64_t count, cudaStream_t stream) {
  XRUN_LAUNCH(relu_kernel, count, static_cast<T*>(y), count);
}

void add_relu_inplace(void* y, const void* residual, DataType dt, int64_t count,
                      cudaStream_t stream) {
  XRUN_LAUNCH(add_relu_kernel, count, static_cast<T*>(y), static_cast<const T*>(residual), count);
}

void relu_backward(const void* y, const void* dy, void* dx, DataType dt, int64_t count,
                   cudaStream_t stream) {
  XRUN_LAUNCH(relu_backward_kernel, count, static_cast<const T*>(y), static_cast<const T*>(dy),
              static_cast<T*>(dx), count);
}

void add_bias(void* y, DataType dt, const float* bias, int64_t rows, int64_t cols,
              cudaStream_t stream) {
  XRUN_LAUNCH(add_bias_kernel, rows * cols, static_cast<T*>(y), bias, rows, cols);
}

int64_t column_chunks(int64_t rows) {
  const int64_t chunks = rows / 512;
  return chunks < 1 ? 1 : chunks > 64 ? 64 : chunks;
}

void bias_grad(const void* dy, DataType dt, float* db, int64_t rows, int64_t cols,
               float* partials, cudaStream_t stream) {
  const int64_t chunks = partials ? column_chunks(rows) : 1;
  const int64_t per_chunk = (rows + chunks - 1) / chunks;
  dispatch(dt, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const dim3 grid(static_cast<unsigned>((cols + 31) / 32), static_cast<unsigned>(chunks));
    column_chunk_kernel<T><<<grid, dim3(32, 8), 0, stream>>>(
        static_cast<const T*>(dy), rows, cols, per_chunk, chunks > 1 ? partials : db);
    XRUN_CHECK_LAUNCH();
  });
  if (chunks > 1) {
    sum_chunks_kernel<<<blocks_for(cols), kThreads, 0, stream>>>(partials, chunks, cols, db);
    XRUN_CHECK_LAUNCH();
  }
}

void global_avg_pool(const void* x, void* y, DataType dt, int64_t n, int64_t hw, int64_t c,
                     cudaStream_t stream) {
  XRUN_LAUNCH(avg_pool_kernel, n * c, static_cast<const T*>(x), static_cast<T*>(y), n, hw, c);
}

void global_avg_pool_backward(const void* dy, void* dx, DataType dt, int64_t n, int64_t hw,
                              int64_t c, cudaStream_t stream) {
  XRUN_LAUNCH(avg_pool_backward_kernel, n * hw * c, static_cast<const T*>(dy),
              static_cast<T*>(dx), n, hw, c);
}

}  // namespace xrun::cuda
