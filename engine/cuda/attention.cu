// engine/cuda/attention.cu: the kernels of GPT-2's causal self-attention
// between cuBLAS's batched GEMMs (attention.cpp), as llm.c's first CUDA
// attention is cut: the fused projection's q, k, v split into per-head
// [B, H, T, hs] blocks and back, and the causal softmax over [T, T] score
// blocks and its backward pass, one warp a row, in fp32 arithmetic whatever
// the storage type.
#include <type_traits>

#include "engine/cuda/cuda_types.cuh"

namespace xrun::cuda {

namespace {

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Element i of a [B, H, T, hs] block: its (b, h, t, d).
struct HeadIndex {
  int64_t b, h, t, d;
};
__device__ __forceinline__ HeadIndex head_index(int64_t i, int64_t h, int64_t t, int64_t hs) {
  HeadIndex x;
  x.d = i % hs;
  i /= hs;
  x.t = i % t;
  i /= t;
  x.h = i % h;
  x.b = i / h;
  return x;
}

template <class T>
__global__ void split_heads_kernel(const T* qkv, int64_t b, int64_t t, int64_t h, int64_t hs,
                                   T* q, T* k, T* v) {
  const int64_t c = h * hs;
  XRUN_GRID_LOOP(i, b * t * c) {
    const HeadIndex x = head_index(i, h, t, hs);
    const T* row = qkv + (x.b * t + x.t) * 3 * c + x.h * hs + x.d;
    q[i] = row[0];
    k[i] = row[c];
    v[i] = row[2 * c];
  }
}

template <class T>
__global__ void merge_head_grads_kernel(const T* dq, const T* dk, const T* dv, int64_t b,
                                        int64_t t, int64_t h, int64_t hs, T* dqkv) {
  const int64_t c = h * hs;
  XRUN_GRID_LOOP(i, b * t * c) {
    const HeadIndex x = head_index(i, h, t, hs);
    T* row = dqkv + (x.b * t + x.t) * 3 * c + x.h * hs + x.d;
    row[0] = dq[i];
    row[c] = dk[i];
    row[2 * c] = dv[i];
  }
}

// to_rows: [B, H, T, hs] -> [B, T, C]; else the reverse.
template <class T>
__global__ void heads_rows_kernel(const T* src, int64_t b, int64_t t, int64_t h, int64_t hs,
                                  T* dst, bool to_rows) {
  const int64_t c = h * hs;
  XRUN_GRID_LOOP(i, b * t * c) {
    const HeadIndex x = head_index(i, h, t, hs);
    const int64_t r = (x.b * t + x.t) * c + x.h * hs + x.d;
    if (to_rows)
      dst[r] = src[i];
    else
      dst[i] = src[r];
  }
}

constexpr int kWarps = 8;  // rows a block

template <class T>
__global__ void causal_softmax_kernel(T* att, int64_t blocks, int64_t t) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(kWarps) + threadIdx.y;  // over blocks * t
  if (row >= blocks * t) return;
  const int64_t pos = row % t;  // this row sees u <= pos
  T* a = att + row * t;
  float mx = -INFINITY;
  for (int64_t u = threadIdx.x; u <= pos; u += 32) mx = fmaxf(mx, to_float(a[u]));
  mx = warp_max(mx);
  float sum = 0.0f;
  for (int64_t u = threadIdx.x; u <= pos; u += 32) sum += expf(to_float(a[u]) - mx);
  const float inv = 1.0f / warp_sum(sum);
  for (int64_t u = threadIdx.x; u < t; u += 32)
    a[u] = from_float<T>(u <= pos ? expf(to_float(a[u]) - mx) * inv : 0.0f);
}

template <class T>
__global__ void causal_softmax_backward_kernel(const T* p, T* dp, int64_t blocks, int64_t t) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(kWarps) + threadIdx.y;
  if (row >= blocks * t) return;
  const int64_t pos = row % t;
  const T* pr = p + row * t;
  T* d = dp + row * t;
  float dot = 0.0f;
  for (int64_t u = threadIdx.x; u <= pos; u += 32) dot += to_float(pr[u]) * to_float(d[u]);
  dot = warp_sum(dot);
  for (int64_t u = threadIdx.x; u < t; u += 32)
    d[u] = from_float<T>(u <= pos ? to_float(pr[u]) * (to_float(d[u]) - dot) : 0.0f);
}

unsigned row_blocks(int64_t rows) { return static_cast<unsigned>((rows + kWarps - 1) / kWarps); }

}  // namespace

void split_heads(const void* qkv, DataType dt, int64_t b, int64_t t, int64_t h, int64_t hs,
                 void* q, void* k, void* v, cudaStream_t stream) {
  dispatch(dt, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    split_heads_kernel<T><<<blocks_for(b * t * h * hs), kThreads, 0, stream>>>(
        static_cast<const T*>(qkv), b, t, h, hs, static_cast<T*>(q), static_cast<T*>(k),
        static_cast<T*>(v));
    XRUN_CHECK_LAUNCH();
  });
}

void merge_head_grads(const void* dq, const void* dk, const void* dv, DataType dt, int64_t b,
                      int64_t t, int64_t h, int64_t hs, void* dqkv, cudaStream_t stream) {
  dispatch(dt, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    merge_head_grads_kernel<T><<<blocks_for(b * t * h * hs), kThreads, 0, stream>>>(
        static_cast<const T*>(dq), static_cast<const T*>(dk), static_cast<const T*>(dv), b, t, h,
        hs, static_cast<T*>(dqkv));
    XRUN_CHECK_LAUNCH();
  });
}

void heads_to_rows(const void* src, DataType dt, int64_t b, int64_t t, int64_t h, int64_t hs,
                   void* dst, cudaStream_t stream) {
  dispatch(dt, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    heads_rows_kernel<T><<<blocks_for(b * t * h * hs), kThreads, 0, stream>>>(
        static_cast<const T*>(src), b, t, h, hs, static_cast<T*>(dst), true);
    XRUN_CHECK_LAUNCH();
  });
}

void rows_to_heads(const void* src, DataType dt, int64_t b, int64_t t, int64_t h, int64_t hs,
                   void* dst, cudaStream_t stream) {
  dispatch(dt, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    heads_rows_kernel<T><<<blocks_for(b * t * h * hs), kThreads, 0, stream>>>(
        static_cast<const T*>(src), b, t, h, hs, static_cast<T*>(dst), false);
    XRUN_CHECK_LAUNCH();
  });
}

void causal_softmax(void* att, DataType dt, int64_t blocks, int64_t t, cudaStream_t stream) {
  dispatch(dt, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    causal_softmax_kernel<T><<<row_blocks(blocks * t), dim3(32, kWarps), 0, stream>>>(
        static_cast<T*>(att), blocks, t);
    XRUN_CHECK_LAUNCH();
  });
}

void causal_softmax_backward(const void* p, void* dp, DataType dt, int64_t blocks, int64_t t,
                             cudaStream_t stream) {
  dispatch(dt, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    causal_softmax_backward_kernel<T><<<row_blocks(blocks * t), dim3(32, kWarps), 0, stream>>>(
        static_cast<const T*>(p), static_cast<T*>(dp), blocks, t);
    XRUN_CHECK_LAUNCH();
  });
}

}  // namespace xrun::cuda
