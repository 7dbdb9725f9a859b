// engine/cpu/gpt2_pointwise.cpp: see gpt2_pointwise.h. GELU in float, as
// PyTorch's fp32 computes it (vectorised where the compiler can; each value
// a few float roundings from float64); the embedding in plain loops.
#include "engine/cpu/gpt2_pointwise.h"

#include <cmath>

#include "engine/cpu/cpu_backend.h"

namespace xrun::cpu {

namespace {
constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluA = 0.044715f;
}  // namespace

XRUN_VECTOR_CLONES
void gelu_tanh_forward(const float* x, int64_t n, float* y) {
#pragma omp parallel for simd
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.0f + std::tanh(kGeluC * (v + kGeluA * v * v * v)));
  }
}

XRUN_VECTOR_CLONES
void gelu_tanh_backward(const float* x, const float* dy, int64_t n, float* dx) {
#pragma omp parallel for simd
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float th = std::tanh(kGeluC * (v + kGeluA * v * v * v));
    const float du = kGeluC * (1.0f + 3.0f * kGeluA * v * v);
    dx[i] = dy[i] * (0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * du);
  }
}

void embedding_forward(const int32_t* tokens, const float* wte, const float* wpe, int64_t batch,
                       int64_t tokens_per_row, int64_t c, float* y) {
  const int64_t rows = batch * tokens_per_row;
#pragma omp parallel for
  for (int64_t r = 0; r < rows; ++r) {
    const float* e = wte + static_cast<int64_t>(tokens[r]) * c;
    const float* p = wpe + (r % tokens_per_row) * c;
    float* out = y + r * c;
    for (int64_t j = 0; j < c; ++j) out[j] = e[j] + p[j];
  }
}

void embedding_backward(const int32_t* tokens, const float* dy, int64_t batch,
                        int64_t tokens_per_row, int64_t c, float* dwte, float* dwpe) {
  const int64_t rows = batch * tokens_per_row;
  constexpr int64_t kBlock = 64;  // channels a thread owns: rows read 256 bytes at a time
#pragma omp parallel for
  for (int64_t j0 = 0; j0 < c; j0 += kBlock) {
    const int64_t j1 = j0 + kBlock < c ? j0 + kBlock : c;
    for (int64_t r = 0; r < rows; ++r) {
      const float* g = dy + r * c;
      float* te = dwte + static_cast<int64_t>(tokens[r]) * c;
      float* pe = dwpe + (r % tokens_per_row) * c;
      for (int64_t j = j0; j < j1; ++j) {
        te[j] += g[j];
        pe[j] += g[j];
      }
    }
  }
}

}  // namespace xrun::cpu
