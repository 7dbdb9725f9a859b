// engine/cuda/loss.cu: fused softmax cross-entropy: one block per row reads
// the logits once for the max (and argmax, for accuracy), once for the
// log-sum-exp, and writes the gradient; the loss sum, correct count and row
// count accumulate in device memory until the host reads them.
#include <type_traits>

#include "engine/cuda/cuda_types.cuh"

namespace xrun::cuda {

namespace {

constexpr int kLossThreads = 128;

// Block-wide max with the smallest index among equal maxima.
__device__ void block_argmax(float& value, int& index) {
  __shared__ float vals[kLossThreads];
  __shared__ int idxs[kLossThreads];
  vals[threadIdx.x] = value;
  idxs[threadIdx.x] = index;
  __syncthreads();
  for (int s = kLossThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      const float v = vals[threadIdx.x + s];
      const int j = idxs[threadIdx.x + s];
      if (v > vals[threadIdx.x] || (v == vals[threadIdx.x] && j < idxs[threadIdx.x])) {
        vals[threadIdx.x] = v;
        idxs[threadIdx.x] = j;
      }
    }
    __syncthreads();
  }
  value = vals[0];
  index = idxs[0];
  __syncthreads();
}

__device__ float block_sum(float value) {
  __shared__ float vals[kLossThreads];
  vals[threadIdx.x] = value;
  __syncthreads();
  for (int s = kLossThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) vals[threadIdx.x] += vals[threadIdx.x + s];
    __syncthreads();
  }
  const float total = vals[0];
  __syncthreads();
  return total;
}

template <class T>
__global__ void softmax_ce_kernel(const T* logits, T* dlogits, const int32_t* labels,
                                  int64_t valid, int64_t classes, int64_t ld,
                                  const float* grad_scale, bool backward, LossTotals* totals) {
  const int64_t row = blockIdx.x;
  const T* z = logits + row * ld;
  T* dz = dlogits + row * ld;
  const int label = row < valid ? labels[row] : -1;
  if (row >= valid || label < 0 || label >= classes) {
    if (row < valid && threadIdx.x == 0) atomicAdd(&totals->bad_label, 1u);
    if (backward)
      for (int64_t j = threadIdx.x; j < ld; j += blockDim.x) dz[j] = from_float<T>(0.0f);
    return;
  }
  float mx = -INFINITY;
  int arg = static_cast<int>(classes);
  for (int64_t j = threadIdx.x; j < classes; j += blockDim.x) {
    const float v = to_float(z[j]);
    if (v > mx) mx = v, arg = static_cast<int>(j);
  }
  block_argmax(mx, arg);
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < classes; j += blockDim.x) sum += __expf(to_float(z[j]) - mx);
  sum = block_sum(sum);
  const float lse = mx + __logf(sum);
  if (threadIdx.x == 0) {
    atomicAdd(&totals->loss_sum, static_cast<double>(lse - to_float(z[label])));
    atomicAdd(&totals->rows, 1ull);
    if (arg == label) atomicAdd(&totals->correct, 1ull);
  }
  if (backward) {
    const float scale = *grad_scale / static_cast<float>(valid);
    for (int64_t j = threadIdx.x; j < classes; j += blockDim.x) {
      const float p = __expf(to_float(z[j]) - lse);
      dz[j] = from_float<T>((p - (j == label ? 1.0f : 0.0f)) * scale);
    }
    for (int64_t j = classes + threadIdx.x; j < ld; j += blockDim.x) dz[j] = from_float<T>(0.0f);
  }
}

}  // namespace

void softmax_cross_entropy(const void* logits, void* dlogits, DataType dt, const int32_t* labels,
                           int64_t rows, int64_t valid, int64_t classes, int64_t ld,
                           const float* grad_scale, bool backward, LossTotals* totals,
                           cudaStream_t stream) {
  dispatch(dt, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    softmax_ce_kernel<T><<<static_cast<unsigned>(rows), kLossThreads, 0, stream>>>(
        static_cast<const T*>(logits), static_cast<T*>(dlogits), labels, valid, classes, ld,
        grad_scale, backward, totals);
    XRUN_CHECK_LAUNCH();
  });
}

}  // namespace xrun::cuda
