// tests/engine/layer_norm_test.cpp: the CPU layer norm kernels (GPT-2's,
// engine/cpu/layer_norm.h) against a float64 reference written here: the
// forward pass, the input, weight and bias gradients; the reference's
// gradient formula itself checked against central differences of the
// float64 forward pass (so the test is not the kernel's formula judging
// itself); rows far from zero mean (the cancellation a one-pass variance
// would suffer); and a second backward pass equal to the first, bit for bit.
#include "catch2_compat.h"

#include <cmath>
#include <vector>

#include "engine/cpu/layer_norm.h"
#include "torch_fixtures.h"

using namespace xrun;

namespace {

struct Case {
  int64_t rows, c;
  std::vector<float> x, gamma, beta, dy;
};

// Values from the fixtures' closed form: x around `offset` with spread 0.5.
Case make_case(int64_t rows, int64_t c, double offset) {
  Case k{rows, c, {}, {}, {}, {}};
  const auto fill = [](const std::string& name, int64_t n, double scale, double shift) {
    std::vector<float> v(n);
    for (int64_t i = 0; i < n; ++i)
      v[i] = static_cast<float>(shift + scale * testing::hashed_uniform(testing::name_seed(name), i));
    return v;
  };
  k.x = fill("ln.x", rows * c, 0.5, offset);
  k.gamma = fill("ln.gamma", c, 0.2, 1.0);
  k.beta = fill("ln.beta", c, 0.1, 0.0);
  k.dy = fill("ln.dy", rows * c, 1.0, 0.0);
  return k;
}

// A row's mean and 1 / sqrt(variance + eps), float64.
void ref_stats(const double* x, int64_t c, double& m, double& s) {
  double v = 0;
  m = 0;
  for (int64_t j = 0; j < c; ++j) m += x[j];
  m /= c;
  for (int64_t j = 0; j < c; ++j) v += (x[j] - m) * (x[j] - m);
  s = 1.0 / std::sqrt(v / c + cpu::kLayerNormEps);
}

// float64 forward of one row.
std::vector<double> ref_forward_row(const double* x, const float* g, const float* b, int64_t c) {
  double m, s;
  ref_stats(x, c, m, s);
  std::vector<double> y(c);
  for (int64_t j = 0; j < c; ++j) y[j] = (x[j] - m) * s * g[j] + b[j];
  return y;
}

// float64 dx of one row by the closed form.
std::vector<double> ref_dx_row(const double* x, const double* dy, const float* g, int64_t c) {
  double m, s;
  ref_stats(x, c, m, s);
  double gm = 0, gxm = 0;
  for (int64_t j = 0; j < c; ++j) {
    gm += dy[j] * g[j];
    gxm += dy[j] * g[j] * (x[j] - m) * s;
  }
  gm /= c, gxm /= c;
  std::vector<double> dx(c);
  for (int64_t j = 0; j < c; ++j) dx[j] = s * (dy[j] * g[j] - gm - (x[j] - m) * s * gxm);
  return dx;
}

}  // namespace

TEST_CASE("layer norm: the float64 reference's gradient is the forward pass's derivative",
          "[layer_norm]") {
  const Case k = make_case(1, 7, 0.3);
  std::vector<double> x(k.x.begin(), k.x.end()), w(k.dy.begin(), k.dy.end());
  const std::vector<double> dx = ref_dx_row(x.data(), w.data(), k.gamma.data(), k.c);
  for (int64_t j = 0; j < k.c; ++j) {  // L = sum w * y; dL/dx_j by central differences
    const double h = 1e-6;
    std::vector<double> xp = x, xm = x;
    xp[j] += h, xm[j] -= h;
    const auto yp = ref_forward_row(xp.data(), k.gamma.data(), k.beta.data(), k.c);
    const auto ym = ref_forward_row(xm.data(), k.gamma.data(), k.beta.data(), k.c);
    double lp = 0, lm = 0;
    for (int64_t i = 0; i < k.c; ++i) lp += w[i] * yp[i], lm += w[i] * ym[i];
    CHECK((lp - lm) / (2 * h) == Approx(dx[j]).margin(1e-7));
  }
}

TEST_CASE("layer norm: forward and backward against float64, near and far from zero mean",
          "[layer_norm]") {
  for (const double offset : {0.0, 100.0}) {
    INFO("rows around " << offset);
    const Case k = make_case(37, 96, offset);
    std::vector<float> y(k.x.size()), mean(k.rows), rstd(k.rows);
    cpu::layer_norm_forward(k.x.data(), k.gamma.data(), k.beta.data(), k.rows, k.c,
                            cpu::kLayerNormEps, y.data(), mean.data(), rstd.data());
    std::vector<float> dx(k.x.size()), dg(k.c), db(k.c);
    cpu::layer_norm_backward(k.dy.data(), k.x.data(), k.gamma.data(), k.rows, k.c, dx.data(),
                             dg.data(), db.data());
    std::vector<double> dg_ref(k.c, 0.0), db_ref(k.c, 0.0);
    double y_err = 0, dx_err = 0, dx_norm = 0;
    for (int64_t r = 0; r < k.rows; ++r) {
      std::vector<double> xr(k.x.begin() + r * k.c, k.x.begin() + (r + 1) * k.c);
      std::vector<double> dyr(k.dy.begin() + r * k.c, k.dy.begin() + (r + 1) * k.c);
      const auto yr = ref_forward_row(xr.data(), k.gamma.data(), k.beta.data(), k.c);
      const auto dxr = ref_dx_row(xr.data(), dyr.data(), k.gamma.data(), k.c);
      for (int64_t j = 0; j < k.c; ++j) {
        y_err = std::max(y_err, std::abs(y[r * k.c + j] - yr[j]));
        dx_err = std::max(dx_err, std::abs(dx[r * k.c + j] - dxr[j]));
        dx_norm = std::max(dx_norm, std::abs(dxr[j]));
        const double xhat = (yr[j] - k.beta[j]) / k.gamma[j];
        dg_ref[j] += dyr[j] * xhat;
        db_ref[j] += dyr[j];
      }
    }
    // Both sides read the same float inputs and the kernel computes in
    // double: what is left is y's own rounding to float (y is O(1), half an
    // ulp is 6e-8) and dx's, at any offset (a float mean would be off by
    // 4e-6 at 100, times rstd 3.5: PyTorch fp32's error there).
    CHECK(y_err < 4e-7);
    CHECK(dx_err < 4e-7 * dx_norm);
    for (int64_t r = 0; r < k.rows; ++r) CHECK(std::abs(mean[r] - offset) < 0.2);
    for (int64_t j = 0; j < k.c; ++j) {
      INFO("channel " << j);
      CHECK(dg[j] == Approx(dg_ref[j]).epsilon(1e-6).margin(1e-6));
      CHECK(db[j] == Approx(db_ref[j]).epsilon(1e-6).margin(1e-6));
    }
    // Again: the same bits (the parameter sums' order is fixed).
    std::vector<float> dx2(k.x.size()), dg2(k.c), db2(k.c);
    cpu::layer_norm_backward(k.dy.data(), k.x.data(), k.gamma.data(), k.rows, k.c, dx2.data(),
                             dg2.data(), db2.data());
    CHECK(dx2 == dx);
    CHECK(dg2 == dg);
    CHECK(db2 == db);
  }
}
