// engine/cpu/gpt2_pointwise.cpp: see gpt2_pointwise.h. GELU in float,
// vectorised (each value a few float roundings from float64); the embedding
// in plain loops; the ops of these families and of the residual add.
#include "engine/cpu/gpt2_pointwise.h"

#include <cmath>

#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/fast_exp.h"

namespace xrun::cpu {

namespace {
constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluA = 0.044715f;
constexpr float kGeluExpMax = 80.0f;
inline float gelu_exp_arg(float v) {
  const float a = -2.0f * kGeluC * (v + kGeluA * v * v * v);
  return a < kGeluExpMax ? a : kGeluExpMax;
}
}  // namespace

// With s = 1 / (1 + exp(-2u)), u = sqrt(2 / pi) (x + 0.044715 x^3): 1 +
// tanh(u) = 2s and 1 - tanh(u)^2 = 4 s (1 - s), so GELU is x s and its slope
// s + 2 x s (1 - s) du/dx, 1 - s taken as e s (e = exp(-2u)): one vectorised exp per element (fast_exp.h), and
// no cancellation where tanh(u) is near -1. The exp's argument is held at
// kGeluExpMax (x below about -9.4): e s stays at most 1, so the slope of a
// large negative input is its tiny finite value, not inf x 0 = NaN.
XRUN_VECTOR_CLONES
void gelu_tanh_forward(const float* x, int64_t n, float* y) {
#pragma omp parallel for simd
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float s = 1.0f / (1.0f + exp_vectorizable(gelu_exp_arg(v)));
    y[i] = v * s;
  }
}

XRUN_VECTOR_CLONES
void gelu_tanh_backward(const float* x, const float* dy, int64_t n, float* dx) {
#pragma omp parallel for simd
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float e = exp_vectorizable(gelu_exp_arg(v));
    const float s = 1.0f / (1.0f + e);  // and 1 - s = e s, without cancellation
    const float du = kGeluC * (1.0f + 3.0f * kGeluA * v * v);
    dx[i] = dy[i] * (s + (2.0f * v * du) * (e * s) * s);
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

// ------------------------------------------------------------ the ops --
#include <cstring>
#include <stdexcept>
#include <string>

namespace xrun::cpu {
namespace {

float* f(Tensor* t) { return static_cast<float*>(t->data); }

void check_rows(const std::string& name, const CpuTensor* x) {
  if (x->dims.size() != 2 || x->dtype != DType::f32 || !is_plain(x->md))
    throw std::logic_error(name + ": expects a plain fp32 [rows, C] tensor, got " + x->name);
}

class CpuEmbedding final : public EmbeddingOp {
 public:
  CpuEmbedding(CpuBackend& be, const std::string& wte_name, const std::string& wpe_name,
               CpuTensor* tokens, int64_t vocab, int64_t context, int64_t width)
      : tokens_(tokens) {
    if (tokens->dims.size() != 2 || tokens->dtype != DType::i32)
      throw std::logic_error("embedding: expects the int32 token input [B, T]");
    batch_ = tokens->dims[0], t_ = tokens->dims[1], c_ = width;
    if (t_ > context) throw std::logic_error("embedding: rows longer than the context");
    auto [e, eg] =
        be.declare_parameter(wte_name + ".weight", {vocab, width}, plain_md({vocab, width}));
    auto [p, pg] =
        be.declare_parameter(wpe_name + ".weight", {context, width}, plain_md({context, width}));
    wte = e, wte_grad = eg, wpe = p, wpe_grad = pg;
    const int64_t rows = batch_ * t_;
    y = be.declare(wte_name + ".y", {rows, width}, plain_md({rows, width}), TensorRole::activation);
    dy = be.declare(wte_name + ".dy", {rows, width}, plain_md({rows, width}),
                    TensorRole::activation_grad);
  }
  void forward() override {
    embedding_forward(static_cast<const int32_t*>(tokens_->data), f(wte), f(wpe), batch_, t_, c_,
                      f(y));
  }
  void backward() override {
    std::memset(wpe_grad->data, 0, wpe_grad->bytes);
    embedding_backward(static_cast<const int32_t*>(tokens_->data), f(dy), batch_, t_, c_,
                       f(wte_grad), f(wpe_grad));
  }

 private:
  CpuTensor* tokens_;
  int64_t batch_, t_, c_;
};

class CpuGelu final : public ActivationOp {
 public:
  CpuGelu(CpuBackend& be, const std::string& name, CpuTensor* x, CpuTensor* dx)
      : x_(x), dx_(dx) {
    check_rows(name, x);
    y = be.declare(name + ".y", x->dims, x->md, TensorRole::activation);
    dy = be.declare(name + ".dy", x->dims, x->md, TensorRole::activation_grad);
  }
  void forward() override { gelu_tanh_forward(f(x_), x_->numel(), f(y)); }
  void backward() override { gelu_tanh_backward(f(x_), f(dy), x_->numel(), f(dx_)); }

 private:
  CpuTensor* x_;
  CpuTensor* dx_;
};

XRUN_VECTOR_CLONES
void add_rows(const float* a, const float* b, int64_t n, float* y) {
#pragma omp parallel for simd
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

class CpuResidualAdd final : public ResidualAddOp {
 public:
  CpuResidualAdd(CpuBackend& be, const std::string& name, CpuTensor* a, CpuTensor* da,
                 CpuTensor* b, CpuTensor* db)
      : a_(a), da_(da), b_(b), db_(db) {
    check_rows(name, a);
    if (!(a->md == b->md)) throw std::logic_error(name + ": the two inputs differ in shape");
    y = be.declare(name + ".y", a->dims, a->md, TensorRole::activation);
    dy = be.declare(name + ".dy", a->dims, a->md, TensorRole::activation_grad);
  }
  void forward() override { add_rows(f(a_), f(b_), a_->numel(), f(y)); }
  void backward() override {
    std::memcpy(da_->data, dy->data, dy->bytes);
    std::memcpy(db_->data, dy->data, dy->bytes);
  }

 private:
  CpuTensor* a_;
  CpuTensor* da_;
  CpuTensor* b_;
  CpuTensor* db_;
};

}  // namespace

std::unique_ptr<EmbeddingOp> make_embedding(CpuBackend& be, const std::string& wte_name,
                                            const std::string& wpe_name, CpuTensor* tokens,
                                            int64_t vocab, int64_t context, int64_t width) {
  return std::make_unique<CpuEmbedding>(be, wte_name, wpe_name, tokens, vocab, context, width);
}
std::unique_ptr<ActivationOp> make_gelu(CpuBackend& be, const std::string& name, CpuTensor* x,
                                        CpuTensor* dx) {
  return std::make_unique<CpuGelu>(be, name, x, dx);
}
std::unique_ptr<ResidualAddOp> make_residual_add(CpuBackend& be, const std::string& name,
                                                 CpuTensor* a, CpuTensor* da, CpuTensor* b,
                                                 CpuTensor* db) {
  return std::make_unique<CpuResidualAdd>(be, name, a, da, b, db);
}

}  // namespace xrun::cpu
