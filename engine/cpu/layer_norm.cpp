// engine/cpu/layer_norm.cpp: see layer_norm.h. Rows in parallel (OpenMP),
// each row's statistics and arithmetic in double (the row sums as SIMD
// reductions: lanes of partial sums, then added); the parameter gradients
// summed per thread over a fixed block of rows, in double, then the blocks
// in order.
#include "engine/cpu/layer_norm.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/cpu/cpu_backend.h"

namespace xrun::cpu {

namespace {

// A row's mean and 1 / sqrt(biased variance + eps), in double, two passes
// (no cancellation for rows far from zero mean).
[[gnu::always_inline]] inline void row_stats(const float* xr, int64_t c, double eps, double& m, double& s) {
  double sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < c; ++j) sum += xr[j];
  m = sum / static_cast<double>(c);
  double squares = 0;
#pragma omp simd reduction(+ : squares)
  for (int64_t j = 0; j < c; ++j) {
    const double d = xr[j] - m;
    squares += d * d;
  }
  s = 1.0 / std::sqrt(squares / static_cast<double>(c) + eps);
}

}  // namespace

XRUN_VECTOR_CLONES
void layer_norm_forward(const float* x, const float* gamma, const float* beta, int64_t rows,
                        int64_t c, double eps, float* y, float* mean, float* rstd) {
#pragma omp parallel for
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * c;
    double m, s;
    row_stats(xr, c, eps, m, s);
    float* yr = y + r * c;
#pragma omp simd
    for (int64_t j = 0; j < c; ++j)
      yr[j] = static_cast<float>((xr[j] - m) * s * gamma[j] + beta[j]);
    if (mean) mean[r] = static_cast<float>(m);
    if (rstd) rstd[r] = static_cast<float>(s);
  }
}

size_t layer_norm_scratch_values(int64_t c) {
  return static_cast<size_t>(omp_get_max_threads()) * 2 * static_cast<size_t>(c);
}

XRUN_VECTOR_CLONES
void layer_norm_backward(const float* dy, const float* x, const float* gamma, int64_t rows,
                         int64_t c, float* dx, float* dgamma, float* dbeta, bool add_to_dx,
                         double* partial) {
  const int threads = omp_get_max_threads();
  std::vector<double> own;
  if (!partial) {
    own.resize(layer_norm_scratch_values(c));
    partial = own.data();
  }
  std::fill(partial, partial + static_cast<size_t>(threads) * 2 * c, 0.0);
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), n = omp_get_num_threads();
    double* dg = partial + static_cast<size_t>(t) * 2 * c;
    double* db = dg + c;
    const int64_t begin = rows * t / n, end = rows * (t + 1) / n;
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = x + r * c;
      const float* dyr = dy + r * c;
      // The row's statistics again, in double: the saved float mean is off
      // by up to half an ulp of the mean, which a row far from zero turns
      // into a systematic error in every xhat (PyTorch's fp32 has it).
      double m, s;
      row_stats(xr, c, kLayerNormEps, m, s);
      double g_sum = 0, gx_sum = 0;  // sum of g, sum of g xhat
#pragma omp simd reduction(+ : g_sum, gx_sum)
      for (int64_t j = 0; j < c; ++j) {
        const double xhat = (xr[j] - m) * s;
        const double g = static_cast<double>(dyr[j]) * gamma[j];
        g_sum += g;
        gx_sum += g * xhat;
        dg[j] += dyr[j] * xhat;
        db[j] += dyr[j];
      }
      const double g_mean = g_sum / static_cast<double>(c), gx_mean = gx_sum / static_cast<double>(c);
      float* dxr = dx + r * c;
#pragma omp simd
      for (int64_t j = 0; j < c; ++j) {
        const double xhat = (xr[j] - m) * s;
        const double d = s * (static_cast<double>(dyr[j]) * gamma[j] - g_mean - xhat * gx_mean);
        dxr[j] = add_to_dx ? static_cast<float>(dxr[j] + d) : static_cast<float>(d);
      }
    }
  }
  for (int64_t j = 0; j < c; ++j) {
    double g = 0, b = 0;
    for (int t = 0; t < threads; ++t) {
      g += partial[static_cast<size_t>(t) * 2 * c + j];
      b += partial[static_cast<size_t>(t) * 2 * c + c + j];
    }
    dgamma[j] = static_cast<float>(g);
    dbeta[j] = static_cast<float>(b);
  }
}

}  // namespace xrun::cpu

// ------------------------------------------------------------ the op --
namespace xrun::cpu {
namespace {

class CpuLayerNorm final : public LayerNormOp {
 public:
  CpuLayerNorm(CpuBackend& be, const std::string& name, CpuTensor* x, CpuTensor* dx,
               bool add_to_dx)
      : x_(x), dx_(dx), add_to_dx_(add_to_dx) {
    if (x->dims.size() != 2 || x->dtype != DType::f32 || !is_plain(x->md))
      throw std::logic_error(name + ": expects a plain fp32 [rows, C] input");
    rows_ = x->dims[0], c_ = x->dims[1];
    auto [g, gg] = be.declare_parameter(name + ".weight", {c_}, plain_md({c_}));
    auto [b, bg] = be.declare_parameter(name + ".bias", {c_}, plain_md({c_}));
    gamma = g, gamma_grad = gg, beta = b, beta_grad = bg;
    y = be.declare(name + ".y", x->dims, x->md, TensorRole::activation);
    dy = be.declare(name + ".dy", x->dims, x->md, TensorRole::activation_grad);
    partial_.resize(layer_norm_scratch_values(c_));
    be.note_kernel("layer_norm", "xrun:rows_double");
  }
  void forward() override {
    layer_norm_forward(f(x_), f(gamma), f(beta), rows_, c_, kLayerNormEps, f(y), nullptr,
                       nullptr);
  }
  void backward() override {
    if (!dx_) throw std::logic_error("layer norm: backward without dx");
    layer_norm_backward(f(dy), f(x_), f(gamma), rows_, c_, f(dx_), f(gamma_grad), f(beta_grad),
                        add_to_dx_, partial_.data());
  }

 private:
  static float* f(Tensor* t) { return static_cast<float*>(t->data); }
  CpuTensor* x_;
  CpuTensor* dx_;
  bool add_to_dx_;
  int64_t rows_, c_;
  std::vector<double> partial_;
};

}  // namespace

std::unique_ptr<LayerNormOp> make_layer_norm(CpuBackend& be, const std::string& name,
                                             CpuTensor* x, CpuTensor* dx, bool add_to_dx) {
  return std::make_unique<CpuLayerNorm>(be, name, x, dx, add_to_dx);
}

}  // namespace xrun::cpu
