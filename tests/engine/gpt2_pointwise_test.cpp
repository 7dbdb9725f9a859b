// tests/engine/gpt2_pointwise_test.cpp: GPT-2's GELU (tanh form) and token
// + position embedding kernels on the CPU (engine/cpu/gpt2_pointwise.h):
// GELU against the float64 formula and its gradient against central
// differences of it, out to inputs of -30 and 30 (where exp(-2u) passes
// float's range); the embedding's rows exactly wte[token] + wpe[t]; its
// backward pass adding into the tables (repeated tokens summed, what was
// there kept) as float64 sums say.
#include "catch2_compat.h"

#include <cmath>
#include <vector>

#include "engine/cpu/gpt2_pointwise.h"
#include "torch_fixtures.h"

using namespace xrun;

namespace {

double gelu64(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

std::vector<float> values(const std::string& name, int64_t n, double scale) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i)
    v[i] = static_cast<float>(scale * testing::hashed_uniform(testing::name_seed(name), i));
  return v;
}

}  // namespace

TEST_CASE("gelu (tanh form): float64's values, its derivative by central differences",
          "[gpt2_pointwise]") {
  std::vector<float> x = values("gelu.x", 4001, 6.0);  // [-6, 6)
  for (const float far : {-30.0f, -12.0f, -10.25f, -10.0f, -9.5f, 9.5f, 12.0f, 30.0f})
    x.push_back(far);  // exp(-2u) overflows float below about -10.1
  const std::vector<float> dy = values("gelu.dy", static_cast<int64_t>(x.size()), 1.0);
  std::vector<float> y(x.size()), dx(x.size());
  cpu::gelu_tanh_forward(x.data(), static_cast<int64_t>(x.size()), y.data());
  cpu::gelu_tanh_backward(x.data(), dy.data(), static_cast<int64_t>(x.size()), dx.data());
  double y_err = 0, dx_err = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double ref = gelu64(x[i]);
    y_err = std::max(y_err, std::abs(y[i] - ref) / (1.0 + std::abs(ref)));
    const double h = 1e-5;
    const double fd = (gelu64(x[i] + h) - gelu64(x[i] - h)) / (2 * h);
    dx_err = std::max(dx_err, std::abs(dx[i] - dy[i] * fd));
  }
  INFO("largest errors: y " << y_err << ", dx " << dx_err);
  CHECK(y_err < 1e-6);   // a few float roundings
  CHECK(dx_err < 1e-6);  // the derivative is at most 1.13
  // transformers' gelu_new at 1 and -1 (the tanh form, not erf's 0.8413).
  CHECK(gelu64(1.0) == Approx(0.8411919906082768));
  float one = 1.0f, at_one = 0;
  cpu::gelu_tanh_forward(&one, 1, &at_one);
  CHECK(at_one == Approx(0.8411919906082768).epsilon(1e-7));
}

TEST_CASE("embedding: rows are wte[token] + wpe[t], and the backward pass adds into both tables",
          "[gpt2_pointwise]") {
  const int64_t B = 3, T = 5, C = 70, V = 11;  // C over one 64-channel block
  const std::vector<float> wte = values("emb.wte", V * C, 0.1);
  const std::vector<float> wpe = values("emb.wpe", T * C, 0.05);
  std::vector<int32_t> tokens(B * T);
  for (int64_t r = 0; r < B * T; ++r) tokens[r] = static_cast<int32_t>((r * 7) % 4);  // repeats
  std::vector<float> y(B * T * C);
  cpu::embedding_forward(tokens.data(), wte.data(), wpe.data(), B, T, C, y.data());
  for (int64_t r = 0; r < B * T; ++r)
    for (int64_t j = 0; j < C; ++j)
      CHECK(y[r * C + j] == wte[tokens[r] * C + j] + wpe[(r % T) * C + j]);

  const std::vector<float> dy = values("emb.dy", B * T * C, 1.0);
  std::vector<float> dwte(V * C, 0.25f), dwpe(T * C, -0.5f);  // what was there stays added
  cpu::embedding_backward(tokens.data(), dy.data(), B, T, C, dwte.data(), dwpe.data());
  std::vector<double> te(V * C, 0.25), pe(T * C, -0.5);
  for (int64_t r = 0; r < B * T; ++r)
    for (int64_t j = 0; j < C; ++j) {
      te[tokens[r] * C + j] += dy[r * C + j];
      pe[(r % T) * C + j] += dy[r * C + j];
    }
  for (int64_t i = 0; i < V * C; ++i) CHECK(dwte[i] == Approx(te[i]).margin(1e-6));
  for (int64_t i = 0; i < T * C; ++i) CHECK(dwpe[i] == Approx(pe[i]).margin(1e-6));
  CHECK(dwte[10 * C] == 0.25f);  // token 10 never appears: untouched
}
