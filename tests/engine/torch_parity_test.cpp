// tests/engine/torch_parity_test.cpp: xrun's CPU engine against PyTorch 1.13 +
// torchvision on the same weights and batch: three training steps (SGD with
// momentum and weight decay) of resnet18 and resnet50 at 64x64, judged
// against PyTorch float64 (every element of the smaller tensors, a sketch of
// the larger) with PyTorch fp32's own error as the yardstick.
// The rule, the fixture and what is checked: tests/engine/torch_parity.h
// (shared with the CUDA engine's test, tests/cuda/cuda_parity_test.cpp).
#include "catch2_compat.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "engine/cpu/cpu_backend.h"
#include "torch_parity.h"

using namespace xrun;
namespace parity = xrun::testing::parity;

TEST_CASE("CPU engine matches PyTorch on resnet18 over three SGD steps", "[parity]") {
  const nlohmann::json f = parity::load_fixture();
  cpu::CpuBackend be(0);
  parity::run_parity(be, f.at("runs").at(0));
}

TEST_CASE("CPU engine matches PyTorch on resnet50 over three SGD steps", "[parity]") {
  const nlohmann::json f = parity::load_fixture();
  const nlohmann::json& run = f.at("runs").at(1);
  cpu::CpuBackend be(0);
  // The CUDA fp16 parity run scales this run's loss by kFp16LossScale and
  // fails on any overflow: the largest gradient, scaled, must keep
  // kFp16Headroom below fp16's largest value.
  double largest = 0;
  std::string where;
  std::map<std::string, std::vector<float>> kept;
  const std::string sketched = "resnet50 step 1 grad layer4.2.conv2.weight";
  const std::string full = "resnet50 step 1 grad layer1.0.conv1.weight";
  parity::run_parity(be, run, [&](const std::string& what, const std::vector<float>& x) {
    if (what == sketched || what == full) kept[what] = x;
    if (what.find(" grad ") == std::string::npos) return;
    for (float v : x)
      if (std::fabs(v) > largest) largest = std::fabs(v), where = what;
  });
  INFO("largest step-1 gradient " << largest << " (" << where << "), scaled by "
                                  << parity::kFp16LossScale);
  CHECK(largest > 0);
  CHECK(largest * parity::kFp16LossScale * parity::kFp16Headroom <= parity::kFp16Max);

  // Negative controls for the distance judge (issue 20: norms, sums and 8
  // sampled elements could not see these): the engine's own gradients,
  // which pass, reversed in order or negated must not; one element of a
  // tensor stored in full negated must be named.
  const nlohmann::json& grads = run.at("steps").at(0).at("grads");
  {
    const nlohmann::json& ref = grads.at("layer4.2.conv2.weight");
    REQUIRE(ref.contains("sketch"));
    std::vector<float> reversed(kept.at(sketched).rbegin(), kept.at(sketched).rend());
    std::vector<float> negated = kept.at(sketched);
    for (float& v : negated) v = -v;
    const parity::Verdict r = parity::judge(reversed, ref, sketched);
    const parity::Verdict m = parity::judge(negated, ref, sketched);
    INFO(sketched << " reversed: sketched distance " << r.l2_error << ", bound " << r.l2_bound
                  << "; negated: " << m.l2_error);
    CHECK(r.worst() > 1.0);
    CHECK(m.worst() > 1.0);
  }
  {
    const nlohmann::json& ref = grads.at("layer1.0.conv1.weight");
    REQUIRE(ref.contains("offset"));
    std::vector<float> x = kept.at(full);
    CHECK(parity::judge(x, ref, full).passes());
    const auto big = std::max_element(x.begin(), x.end(),
                                      [](float a, float b) { return std::fabs(a) < std::fabs(b); });
    *big = -*big;
    const parity::Verdict v = parity::judge(x, ref, full);
    INFO(full << " with element " << (big - x.begin()) << " negated");
    REQUIRE(v.outliers.size() == 1);
    CHECK(v.outliers[0].find("[" + std::to_string(big - x.begin()) + "]") != std::string::npos);
  }
}

// A negative control for the CUDA engine's reduced-precision comparison
// (tests/cuda/cuda_parity_test.cpp), which runs only on a GPU: the same
// comparison, run here between the CPU engine and the CPU engine with every
// gradient doubled (the loss scaled by 2 and never divided out: a broken
// fp16 unscaling), must reject some judged tensor by the fp16 budget. A
// budget loose enough to accept that would accept a broken GPU engine.
TEST_CASE("the fp16 error budget of the CUDA comparison rejects gradients off by 2x",
          "[parity]") {
  const nlohmann::json f = parity::load_fixture();
  for (int run_index : {0, 1}) {
    const nlohmann::json& run = f.at("runs").at(run_index);
    std::map<std::string, std::vector<float>> want;
    std::map<std::string, double> budget;
    {
      cpu::CpuBackend be(0);
      parity::run_fixture(be, run,
                          [&](const std::string& what, const std::vector<float>& x,
                              const nlohmann::json& ref) {
                            want[what] = x;
                            budget[what] = parity::nmse_budget(ref, "fp16");
                          });
    }
    int judged = 0, rejected = 0;
    std::string first_rejected;
    cpu::CpuBackend be(0);
    parity::run_fixture(
        be, run,
        [&](const std::string& what, const std::vector<float>& x, const nlohmann::json&) {
          if (budget.at(what) > parity::kNmseCap) return;
          ++judged;
          if (parity::nmse(x, want.at(what)) > budget.at(what)) {
            if (!rejected++) first_rejected = what;
          }
        },
        2.0f, 1.0f);
    INFO(run.at("arch").get<std::string>() << ": " << rejected << " of " << judged
                                           << " judged tensors rejected; first: "
                                           << first_rejected);
    CHECK(judged > 0);
    CHECK(rejected > 0);
  }
}

// Negative controls for the rule itself (issue 20): on the chaotic resnet50
// fixture the bounds used to accept all-zero eval logits and a loss off by
// 0.48 of 2.14. The CPU engine's own results pass (the case above);
// all-zero eval logits, or a step's loss 21% above or below float64's, must
// not. (Judged from the fixture alone: no engine run needed.)
TEST_CASE("the parity rule rejects zero eval logits and a loss 21% off, on resnet50",
          "[parity]") {
  const nlohmann::json f = parity::load_fixture();
  const nlohmann::json& run = f.at("runs").at(1);
  REQUIRE(run.at("arch") == "resnet50");
  {
    const nlohmann::json& ref = run.at("eval_logits");
    const std::string what = "resnet50 eval logits";
    const parity::Verdict zeros =
        parity::judge(std::vector<float>(ref.at("n").get<size_t>(), 0.0f), ref, what);
    INFO(what << ": L2 off by " << zeros.l2_error << ", bound " << zeros.l2_bound);
    CHECK_FALSE(zeros.passes());
    CHECK(zeros.worst() > 1.0);  // the L2 bound itself, which no kink allowance excuses
  }
  const nlohmann::json& steps = run.at("steps");
  REQUIRE(steps.size() == 3);
  for (size_t step = 1; step < steps.size(); ++step) {
    const nlohmann::json& ref = steps[step].at("loss");
    const std::string what = "resnet50 step " + std::to_string(step + 1) + " loss";
    const double r = ref.at("sum");
    for (double off : {1.21, 0.79}) {
      const parity::Verdict v = parity::judge({static_cast<float>(r * off)}, ref, what);
      INFO(what << " at " << off << " x float64's " << r << ": off by " << v.l2_error
                << ", bound " << v.l2_bound);
      CHECK(v.worst() > 1.0);
    }
  }
}
