// engine/cuda/cuda_types.cuh: device-side helpers shared by xrun's kernels:
// load/store of fp32/fp16/bf16 values as float, the type dispatch used by
// every launcher, the launch geometry of element-wise kernels, and the check
// that follows every <<<>>> launch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <stdexcept>
#include <type_traits>

#include "engine/cuda/cuda_check.h"
#include "engine/cuda/kernels.h"

namespace xrun::cuda {

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <class T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// Calls f with a null pointer of the element type named by dt:
//   dispatch(dt, [&](auto* tag) { using T = std::remove_pointer_t<decltype(tag)>; ... });
template <class F>
void dispatch(DataType dt, F&& f) {
  switch (dt) {
    case DataType::f32: f(static_cast<float*>(nullptr)); return;
    case DataType::f16: f(static_cast<__half*>(nullptr)); return;
    case DataType::bf16: f(static_cast<__nv_bfloat16*>(nullptr)); return;
  }
  throw std::invalid_argument("unknown data type");
}

constexpr int kThreads = 256;
inline unsigned blocks_for(int64_t count) {
  const int64_t b = (count + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 * 8 ? 65535 * 8 : b));
}

// After every <<<>>>: a launch that failed (bad configuration, no kernel
// image for this card...) throws here instead of leaving wrong numbers.
// cudaPeekAtLastError does not clear the error and is legal while a CUDA
// graph is being captured.
#define XRUN_CHECK_LAUNCH() CUDA_CHECK(cudaPeekAtLastError())

// Grid-stride loop over [0, count).
#define XRUN_GRID_LOOP(i, count)                                                      \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (count); \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)

// In a launcher with `dt` (the element type) and `stream`: kernel<T> over
// `count` elements (grid-stride geometry), then the launch check.
#define XRUN_LAUNCH(kernel, count, ...)                                  \
  dispatch(dt, [&](auto* tag) {                                          \
    using T = std::remove_pointer_t<decltype(tag)>;                      \
    kernel<T><<<blocks_for(count), kThreads, 0, stream>>>(__VA_ARGS__); \
    XRUN_CHECK_LAUNCH();                                                 \
  })

}  // namespace xrun::cuda
