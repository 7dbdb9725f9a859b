// engine/cpu/pointwise.cpp: elementwise ops on tensors that share a layout
// (residual gradient sums, copies), in f32 or bf16 (added in fp32, then
// rounded). Layout-agnostic: blocked padding is zero in both operands and
// stays zero.
#include <cstring>
#include <stdexcept>

#include "engine/cpu/bf16.h"
#include "engine/cpu/cpu_backend.h"

namespace xrun::cpu {

XRUN_VECTOR_CLONES
void add_floats(float* dst, const float* src, int64_t n) {
#pragma omp parallel for simd
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

XRUN_VECTOR_CLONES
void add_bf16(bf16_t* dst, const bf16_t* src, int64_t n) {
#pragma omp parallel for simd
  for (int64_t i = 0; i < n; ++i)
    dst[i] = float_to_bf16(bf16_to_float(dst[i]) + bf16_to_float(src[i]));
}

namespace {

class CpuPointwise final : public PointwiseOps {
 public:
  void add_inplace(Tensor* dst, const Tensor* src) override {
    check(dst, src);
    if (dst->dtype == DType::bf16)
      add_bf16(static_cast<bf16_t*>(dst->data), static_cast<const bf16_t*>(src->data),
               static_cast<int64_t>(dst->bytes / sizeof(bf16_t)));
    else
      add_floats(static_cast<float*>(dst->data), static_cast<const float*>(src->data),
                 static_cast<int64_t>(dst->bytes / sizeof(float)));
  }
  void copy(Tensor* dst, const Tensor* src) override {
    check(dst, src);
    std::memcpy(dst->data, src->data, dst->bytes);
  }

 private:
  static void check(const Tensor* dst, const Tensor* src) {
    if (!(as_cpu(dst)->md == as_cpu(src)->md) ||
        (dst->dtype != DType::f32 && dst->dtype != DType::bf16))
      throw std::logic_error("pointwise: " + dst->name + " and " + src->name +
                             " differ in layout or type");
  }
};

}  // namespace

std::unique_ptr<PointwiseOps> make_pointwise(CpuBackend&) {
  return std::make_unique<CpuPointwise>();
}

}  // namespace xrun::cpu
