// engine/cpu/layer_norm.cpp: see layer_norm.h. Rows in parallel (OpenMP),
// each row's statistics and arithmetic in double; the parameter gradients
// summed per thread over a fixed block of rows, in double, then the blocks
// in order.
#include "engine/cpu/layer_norm.h"

#include <omp.h>

#include <cmath>
#include <vector>

#include "engine/cpu/cpu_backend.h"

namespace xrun::cpu {

namespace {

// A row's mean and 1 / sqrt(biased variance + eps), in double, two passes
// (no cancellation for rows far from zero mean).
inline void row_stats(const float* xr, int64_t c, double eps, double& m, double& s) {
  double sum = 0;
  for (int64_t j = 0; j < c; ++j) sum += xr[j];
  m = sum / static_cast<double>(c);
  double squares = 0;
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
    for (int64_t j = 0; j < c; ++j)
      yr[j] = static_cast<float>((xr[j] - m) * s * gamma[j] + beta[j]);
    mean[r] = static_cast<float>(m);
    rstd[r] = static_cast<float>(s);
  }
}

XRUN_VECTOR_CLONES
void layer_norm_backward(const float* dy, const float* x, const float* gamma, int64_t rows,
                         int64_t c, float* dx, float* dgamma, float* dbeta) {
  const int threads = omp_get_max_threads();
  std::vector<double> partial(static_cast<size_t>(threads) * 2 * c, 0.0);
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), n = omp_get_num_threads();
    double* dg = partial.data() + static_cast<size_t>(t) * 2 * c;
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
      for (int64_t j = 0; j < c; ++j) {
        const double xhat = (xr[j] - m) * s;
        dxr[j] = static_cast<float>(s * (static_cast<double>(dyr[j]) * gamma[j] - g_mean -
                                         xhat * gx_mean));
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
