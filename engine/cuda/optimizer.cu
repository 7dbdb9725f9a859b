// engine/cuda/optimizer.cu: the optimizer over the whole flat parameter
// region in one pass (a multi-tensor step without a tensor list: every
// parameter, gradient and state value sits at the same offset in its
// region): AdamW and SGD with PyTorch's semantics on fp32 master weights,
// writing the fp16/bf16 weight copies the convolutions use; the inf/NaN check
// of the gradients; gradient accumulation; clipping by the global norm.
#include <type_traits>

#include "engine/cuda/cuda_types.cuh"

namespace xrun::cuda {

namespace {

template <class H>
__device__ __forceinline__ float gradient(const float* g32, const H* g16, int64_t i) {
  float g = g32 ? g32[i] : 0.0f;
  if (g16) g += to_float(g16[i]);
  return g;
}

template <class H>
__global__ void check_finite_kernel(const float* g32, const H* g16, int64_t count,
                                    int* found_inf) {
  bool bad = false;
  XRUN_GRID_LOOP(i, count) bad = bad || !isfinite(gradient(g32, g16, i));
  if (bad) *found_inf = 1;
}

template <class H>
__global__ void adamw_kernel(float* p, H* p16, const float* g32, const H* g16, float* m, float* v,
                             int64_t count, const AdamWArgs* args, const int* found_inf) {
  if (found_inf && *found_inf) return;
  const AdamWArgs a = *args;
  const float decay = 1.0f - a.lr * a.weight_decay;
  XRUN_GRID_LOOP(i, count) {
    const float grad = gradient(g32, g16, i) * a.inv_scale;
    float w = p[i] * decay;
    const float mi = m[i] + (grad - m[i]) * (1.0f - a.beta1);
    const float vi = v[i] * a.beta2 + (1.0f - a.beta2) * grad * grad;
    w -= a.step_size * mi / (sqrtf(vi) / a.bc2_sqrt + a.eps);
    m[i] = mi;
    v[i] = vi;
    p[i] = w;
    if (p16) p16[i] = from_float<H>(w);
  }
}

template <class H>
__global__ void sgd_kernel(float* p, H* p16, const float* g32, const H* g16, float* buf,
                           int64_t count, const SgdArgs* args, const int* found_inf) {
  if (found_inf && *found_inf) return;
  const SgdArgs a = *args;
  XRUN_GRID_LOOP(i, count) {
    const float d = gradient(g32, g16, i) * a.inv_scale + a.weight_decay * p[i];
    float step = d;
    if (buf) {
      const float b = a.first ? d : buf[i] * a.momentum + d;
      buf[i] = b;
      step = a.nesterov ? d + a.momentum * b : b;
    }
    const float w = p[i] - a.lr * step;
    p[i] = w;
    if (p16) p16[i] = from_float<H>(w);
  }
}

template <class H>
__global__ void accumulate_kernel(float* acc, const float* g32, const H* g16, int64_t count,
                                  bool first) {
  XRUN_GRID_LOOP(i, count) {
    const float g = gradient(g32, g16, i);
    acc[i] = first ? g : acc[i] + g;
  }
}

// Each block's sum of (g inv_scale)^2 over its grid-stride share, in
// double, reduced in the block in a fixed order.
template <class H>
__global__ void sum_squares_kernel(const float* g32, const H* g16, int64_t count, float inv_scale,
                                   double* partials) {
  __shared__ double part[kThreads];
  double sum = 0;
  XRUN_GRID_LOOP(i, count) {
    const double v = static_cast<double>(gradient(g32, g16, i)) * inv_scale;
    sum += v * v;
  }
  part[threadIdx.x] = sum;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = part[0];
}

// One thread sums the partials in order and leaves the factor in
// partials[blocks]: limit / (norm + 1e-6) where the norm is above the limit,
// else 1 (a NaN norm too: left to the inf/NaN check).
__global__ void clip_factor_kernel(double* partials, int blocks, double limit) {
  double sum = 0;
  for (int b = 0; b < blocks; ++b) sum += partials[b];
  const double norm = sqrt(sum);
  partials[blocks] = norm > limit ? limit / (norm + 1e-6) : 1.0;
}

// Both gradient parts scaled by the factor, where it is not 1.
template <class H>
__global__ void clip_kernel(float* g32, H* g16, int64_t count, const double* factor_at) {
  const double f = *factor_at;
  if (f == 1.0) return;
  const float factor = static_cast<float>(f);
  XRUN_GRID_LOOP(i, count) {
    if (g32) g32[i] *= factor;
    if (g16) g16[i] = from_float<H>(to_float(g16[i]) * factor);
  }
}

// The half type of the gradient/weight mirrors: fp16 or bf16 (fp32 runs have
// no mirrors; any type serves for the null pointers then).
template <class F>
void dispatch_half(DataType t, F&& f) {
  if (t == DataType::bf16)
    f(static_cast<__nv_bfloat16*>(nullptr));
  else
    f(static_cast<__half*>(nullptr));
}

}  // namespace

void check_finite(const GradientSource& g, int64_t count, int* found_inf, cudaStream_t stream) {
  dispatch_half(g.half_type, [&](auto* tag) {
    using H = std::remove_pointer_t<decltype(tag)>;
    check_finite_kernel<H><<<blocks_for(count), kThreads, 0, stream>>>(
        g.g32, static_cast<const H*>(g.g16), count, found_inf);
    XRUN_CHECK_LAUNCH();
  });
}

void adamw_step(float* p, void* p16, DataType half_type, const GradientSource& g, float* m,
                float* v, int64_t count, const AdamWArgs* args, const int* found_inf,
                cudaStream_t stream) {
  dispatch_half(half_type, [&](auto* tag) {
    using H = std::remove_pointer_t<decltype(tag)>;
    adamw_kernel<H><<<blocks_for(count), kThreads, 0, stream>>>(
        p, static_cast<H*>(p16), g.g32, static_cast<const H*>(g.g16), m, v, count, args,
        found_inf);
    XRUN_CHECK_LAUNCH();
  });
}

void sgd_step(float* p, void* p16, DataType half_type, const GradientSource& g, float* buf,
              int64_t count, const SgdArgs* args, const int* found_inf, cudaStream_t stream) {
  dispatch_half(half_type, [&](auto* tag) {
    using H = std::remove_pointer_t<decltype(tag)>;
    sgd_kernel<H><<<blocks_for(count), kThreads, 0, stream>>>(
        p, static_cast<H*>(p16), g.g32, static_cast<const H*>(g.g16), buf, count, args,
        found_inf);
    XRUN_CHECK_LAUNCH();
  });
}

void accumulate_gradients(float* acc, const GradientSource& g, int64_t count, bool first,
                          cudaStream_t stream) {
  dispatch_half(g.half_type, [&](auto* tag) {
    using H = std::remove_pointer_t<decltype(tag)>;
    accumulate_kernel<H><<<blocks_for(count), kThreads, 0, stream>>>(
        acc, g.g32, static_cast<const H*>(g.g16), count, first);
    XRUN_CHECK_LAUNCH();
  });
}

void clip_grad_norm(float* g32, void* g16, DataType half_type, int64_t count, float inv_scale,
                    double limit, double* partials, cudaStream_t stream) {
  dispatch_half(half_type, [&](auto* tag) {
    using H = std::remove_pointer_t<decltype(tag)>;
    sum_squares_kernel<H><<<kClipBlocks, kThreads, 0, stream>>>(
        g32, static_cast<const H*>(g16), count, inv_scale, partials);
    XRUN_CHECK_LAUNCH();
    clip_factor_kernel<<<1, 1, 0, stream>>>(partials, kClipBlocks, limit);
    XRUN_CHECK_LAUNCH();
    clip_kernel<H><<<blocks_for(count), kThreads, 0, stream>>>(g32, static_cast<H*>(g16), count,
                                                               partials + kClipBlocks);
    XRUN_CHECK_LAUNCH();
  });
}

}  // namespace xrun::cuda
