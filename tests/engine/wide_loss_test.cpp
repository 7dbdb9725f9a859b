// tests/engine/wide_loss_test.cpp: the float fast paths GPT-2 leans on, each
// against double: exp_vectorizable (engine/cpu/fast_exp.h) within 2 ulp over
// the range softmax and GELU use, and the CPU loss's wide rows (a
// vocabulary's worth of classes: float, one vectorised exp per element): the
// loss, the top-1 count and every dlogit against a double softmax.
#include "catch2_compat.h"

#include <cmath>
#include <vector>

#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/fast_exp.h"
#include "torch_fixtures.h"

using namespace xrun;

TEST_CASE("exp_vectorizable: within 2 ulp of exp over [-87, 88]", "[fast_exp]") {
  double worst = 0;  // in ulps of the correctly rounded value
  for (int i = 0; i <= 400000; ++i) {
    const float x = -87.0f + 175.0f * static_cast<float>(i) / 400000.0f;
    const double ref = std::exp(static_cast<double>(x));
    const float r = static_cast<float>(ref);
    const double ulp = std::nextafter(r, INFINITY) - r;
    worst = std::max(worst, std::abs(cpu::exp_vectorizable(x) - ref) / ulp);
  }
  INFO("worst " << worst << " ulp");
  CHECK(worst <= 2.0);
  CHECK(cpu::exp_vectorizable(0.0f) == 1.0f);
  const float tiny = cpu::exp_vectorizable(-1000.0f);  // clamped: not NaN, not negative
  CHECK(tiny >= 0.0f);
  CHECK(tiny < 1e-37f);
  const float huge = cpu::exp_vectorizable(1000.0f);  // clamped: finite
  CHECK(std::isfinite(huge));
  CHECK(huge > 1e38f);
}

TEST_CASE("cpu loss: rows of a vocabulary's width meet a double softmax", "[fast_exp][loss]") {
  const int64_t n = 6, k = 5000;
  cpu::CpuBackend be(2);
  Tensor* z = be.declare("z", {n, k}, cpu::plain_md({n, k}), TensorRole::activation);
  Tensor* dz = be.declare("dz", {n, k}, cpu::plain_md({n, k}), TensorRole::activation_grad);
  auto loss = be.softmax_cross_entropy(z, dz);
  be.allocate();
  std::vector<float> logits(n * k);
  for (int64_t i = 0; i < n * k; ++i)
    logits[i] = static_cast<float>(8 * testing::hashed_uniform(testing::name_seed("wide"), i));
  std::vector<int32_t> labels = {0, 17, 4999, 2500, 3, 42};
  // Row 1's label holds the largest logit: a hit; row 3's ties it with an
  // earlier column: not a hit (the first largest counts).
  logits[1 * k + 17] = 9.0f;
  logits[3 * k + 10] = logits[3 * k + 2500] = 9.5f;
  be.write(z, logits);
  be.write_labels(labels);
  const float grad_scale = 0.5f;
  loss->forward_backward(static_cast<int>(n), grad_scale);
  std::vector<float> grad(n * k);
  be.read(dz, grad);
  const LossOp::Results r = loss->read_results();

  double want = 0, worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    double mx = -1e300, sum = 0;
    for (int64_t j = 0; j < k; ++j) mx = std::max<double>(mx, logits[i * k + j]);
    for (int64_t j = 0; j < k; ++j) sum += std::exp(logits[i * k + j] - mx);
    const double lse = mx + std::log(sum);
    want += lse - logits[i * k + labels[i]];
    for (int64_t j = 0; j < k; ++j) {
      const double g =
          (std::exp(logits[i * k + j] - lse) - (j == labels[i])) * grad_scale / static_cast<double>(n);
      worst = std::max(worst, std::abs(grad[i * k + j] - g));
    }
  }
  CHECK(r.rows == n);
  CHECK(r.loss_sum == Approx(want).epsilon(1e-6));
  CHECK(r.correct == 1);
  INFO("worst dlogit error " << worst);
  CHECK(worst < 1e-8);  // dlogits up to 1/12 here: a few float roundings
}
