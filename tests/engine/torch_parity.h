// tests/engine/torch_parity.h: the PyTorch parity rule, shared by the CPU
// engine's test (tests/engine/torch_parity_test.cpp) and the CUDA engine's
// (tests/cuda/cuda_parity_test.cpp), so both engines are judged against
// PyTorch float64 by the same rule with the same yardstick.
//
// Fixture: tests/engine/fixtures/torch_parity.json (make_torch_fixtures.py):
// PyTorch 1.13 + torchvision on the same weights and batch, three training
// steps (SGD with momentum and weight decay) of resnet18 and resnet50 at
// 64x64, in float64 (the reference) and in fp32 (the yardstick), each tensor
// stored as a summary (n, sum, L2 norm), sampled elements, and PyTorch fp32's
// error against float64 (err32_l2 = ‖t32 - r‖, err32_max = max_i |t32_i - r_i|).
//
// A freshly initialised ResNet50 is ill-conditioned (rounding noise grows by
// orders of magnitude towards the first layers: PyTorch fp32 is 2% off
// float64 in some early gradients, and 18% in the second step's logits), so
// a fixed tolerance would be either blind or flaky. The rule instead: an
// engine's fp32 result must be as close to float64 as PyTorch's fp32 result
// is, within a factor kFactor, plus a floor of kFloor relative to the
// tensor's scale:
//   sampled element  |x - r| <= kFactor * max_i|t32_i - r_i| + kFloor * rms(r)
//   L2 norm          |‖x‖ - ‖r‖| <= kFactor * ‖t32 - r‖ + kFloor * ‖r‖
//   sum              |Σx - Σr| <= sqrt(n) * (kFactor * ‖t32 - r‖ + kFloor * ‖r‖)
// (the last two follow from |‖a‖-‖b‖| <= ‖a-b‖ and |Σa| <= sqrt(n)‖a‖).
// Where PyTorch fp32 is itself far off (resnet50's steps 2-3 and its eval
// logits: 18-42% of the tensor's norm), that yardstick stops discriminating:
// 4 x 42% accepts all-zero logits, and 4 x PyTorch's 0.12 accepts a loss
// 22% off. So each bound is also capped by a ceiling relative to the
// tensor's own scale, whatever PyTorch did:
//   sampled element  at most kCeiling * rms(r),  L2 and sum  kCeiling * ‖r‖
//   (the sum scaled by sqrt(n) as above), and for a loss kLossCeiling * |r|.
// kCeiling = 0.5: no element may be off by half the tensor's typical size
// (zero logits are off by all of it); the CPU engine's worst under it is the
// resnet50 eval logits' L2 at 0.4 of the ceiling. kLossCeiling = 0.2: a
// loss 21% off float64 fails (0.48 of 2.14, 22%, passed before). The CPU
// engine's resnet50 losses at steps 2 and 3 are 6.4% and 7.9% off here
// (AVX-512), 3.0% and 3.9% with oneDNN held to AVX2, 5.0% and 5.6% to
// SSE4.1; PyTorch fp32's are 5.7% and 6.6%. A tighter ceiling (9% was
// tried) leaves an engine as close as PyTorch's own fp32 almost no room on
// another machine's kernels or on the GPU: a fresh ResNet50 after one SGD
// step is chaotic in fp32, and what this fixture cannot judge more finely
// needs a better-conditioned one, not a tighter bound.
// One exception: a ReLU whose input lies within rounding of zero may fall on
// either side in fp32, which moves the gradient of the elements behind it by
// a whole dy (a kink, not an error). Up to kKinks sampled elements per model
// may exceed their bound; the tensor-level L2 and sum bounds still hold.
// Checked: losses and logits of every step, every parameter's gradient (step
// 1) and updated value (after step 1), BN running statistics after every
// step, eval-mode logits at the end. SGD rather than AdamW because its update
// is linear in the gradient (AdamW's first steps move every weight by about
// lr * sign(g)); AdamW is checked op by op in cpu_ops_test.cpp.
//
// run_fixture() runs one fixture run on any Backend and hands each tensor
// the fixture has a reference for to a visitor; run_parity() is that run
// judged by the rule above.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/model/resnet.h"
#include "torch_fixtures.h"

namespace xrun::testing::parity {

constexpr double kFactor = 4.0;
constexpr double kFloor = 1e-5;
constexpr int kKinks = 2;
constexpr double kCeiling = 0.5;
constexpr double kLossCeiling = 0.2;

// The fixed loss scale of the CUDA engine's fp16 parity runs
// (tests/cuda/cuda_parity_test.cpp), which must never overflow: the CPU
// resnet50 test checks that the largest step-1 gradient, scaled by it,
// stays kFp16Headroom times below fp16's largest value. 1024 left 1.35x
// (conv1.weight's gradient reaches 47.35: 48,483 scaled); 256 leaves 5.4x.
constexpr float kFp16LossScale = 256.0f;
constexpr double kFp16Max = 65504.0;
constexpr double kFp16Headroom = 4.0;

// The fixture file. XRUN_TEST_SOURCE_DIR overrides the source tree compiled
// in: binaries built on one machine and run from another checkout (the GPU
// bundle of scripts/device_bundle.sh; tests/gpu/check.sh sets it).
inline nlohmann::json load_fixture() {
  const char* dir = std::getenv("XRUN_TEST_SOURCE_DIR");
  const std::string path = std::string(dir && *dir ? dir : XRUN_SOURCE_DIR) +
                           "/tests/engine/fixtures/torch_parity.json";
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open fixture " + path);
  return nlohmann::json::parse(in);
}

inline std::vector<float> read_tensor(Backend& be, const Tensor* t) {
  std::vector<float> v(static_cast<size_t>(t->numel()));
  be.read(t, v);
  return v;
}

// Runs one fixture run (its model, weights, batch, labels, optimizer and
// steps) on `be`, calling visit(what, values, ref) for every tensor the
// fixture holds a reference for: `what` names it ("resnet50 step 1 grad
// conv1.weight"), `values` are the engine's (canonical layout), `ref` the
// fixture's entry (n, l2, sum, err32_l2, err32_max, index, values).
// `loss_scale` (a power of two; fp16 runs) scales the loss gradient as the
// trainer's loss scaling does: the step divides it out and checks for
// inf/NaN (an overflow fails here), the gradients visited are unscaled.
// `unscale` (0: loss_scale) is what the step divides the gradients by and
// the visited gradients are divided by: a negative control passes another
// value to plant a gradient off by loss_scale / unscale, as a missing or
// wrong unscaling would.
template <class Visit>
void run_fixture(Backend& be, const nlohmann::json& run, Visit&& visit, float loss_scale = 1.0f,
                 float unscale = 0.0f) {
  if (unscale == 0.0f) unscale = loss_scale;
  const std::string arch = run.at("arch");
  const int64_t n = run.at("batch"), size = run.at("image_size"), classes = run.at("classes");
  ModelSpec spec;
  spec.arch = arch;
  spec.num_classes = classes;
  spec.batch = n;
  spec.channels = 3;
  spec.image_size = size;
  ResNet model(be, spec);
  auto loss = be.softmax_cross_entropy(model.logits(), model.dlogits());
  OptimizerSettings os;
  os.name = run.at("optimizer");
  os.momentum = run.at("momentum");
  os.weight_decay = run.at("weight_decay");
  auto opt = be.optimizer(os, false);
  be.allocate();

  std::map<std::string, const StateEntry*> by_name;
  for (const StateEntry& e : model.state()) {
    by_name[e.name] = &e;
    if (e.kind != StateEntry::Kind::counter)
      be.write(e.tensor, deterministic_values(e.name, e.dims));
  }
  be.write(model.input(), deterministic_input(n, 3, size, size));
  be.write_labels(deterministic_labels(n));

  const auto& steps = run.at("steps");
  for (size_t step = 0; step < steps.size(); ++step) {
    const nlohmann::json& ref = steps[step];
    const std::string at = arch + " step " + std::to_string(step + 1);
    model.forward(true);
    loss->forward_backward(static_cast<int>(n), loss_scale);
    model.backward();
    const auto r = loss->read_results();
    const std::vector<float> mean_loss = {static_cast<float>(r.loss_sum / r.rows)};
    visit(at + " loss", mean_loss, ref.at("loss"));
    visit(at + " logits", read_tensor(be, model.logits()), ref.at("logits"));
    if (ref.contains("grads"))
      for (const auto& [name, g] : ref.at("grads").items()) {
        REQUIRE(by_name.count(name));
        std::vector<float> grad = read_tensor(be, by_name[name]->grad);
        for (float& v : grad) v /= unscale;
        visit(at + " grad " + name, grad, g);
      }
    const bool scaled = unscale != 1.0f;
    opt->step({run.at("lr").get<double>(), static_cast<int64_t>(step) + 1, unscale, scaled});
    if (scaled) {
      INFO(at << ": a gradient overflowed with the loss scaled by " << loss_scale);
      REQUIRE_FALSE(opt->found_inf());
    }
    if (ref.contains("weights"))
      for (const auto& [name, w] : ref.at("weights").items()) {
        REQUIRE(by_name.count(name));
        visit(at + " updated " + name, read_tensor(be, by_name.at(name)->tensor), w);
      }
    for (const auto& [name, s] : ref.at("running_stats").items()) {
      REQUIRE(by_name.count(name));
      visit(at + " " + name, read_tensor(be, by_name.at(name)->tensor), s);
    }
  }
  CHECK(model.num_batches_tracked == static_cast<int64_t>(steps.size()));
  model.forward(false);
  visit(arch + " eval logits", read_tensor(be, model.logits()), run.at("eval_logits"));
}

// ---- The error budget of the reduced-precision CUDA comparisons ----------
// (tests/cuda/cuda_parity_test.cpp explains it): a tensor on which PyTorch
// fp32 was off by rel32 (relative L2) may be off by
// (kFactor max(1, rel32 / u32) u_p + kFloor)^2 in NMSE at precision p; a
// budget above kNmseCap cannot be judged.
constexpr double kNmseCap = 0.25;

inline double unit_roundoff(const std::string& precision) {
  if (precision == "bf16") return std::ldexp(1.0, -8);
  if (precision == "tf32" || precision == "fp16") return std::ldexp(1.0, -11);
  return std::ldexp(1.0, -24);
}

inline double nmse_budget(double rel32, const std::string& precision) {
  const double amplification = std::max(1.0, rel32 / unit_roundoff("fp32"));
  const double rel = kFactor * amplification * unit_roundoff(precision) + kFloor;
  return rel * rel;
}

// The budget of the fixture entry `ref` at `precision`.
inline double nmse_budget(const nlohmann::json& ref, const std::string& precision) {
  const double l2 = ref.at("l2"), e32 = ref.at("err32_l2");
  return nmse_budget(l2 > 0 ? e32 / l2 : 0.0, precision);
}

// NMSE = sum (got - want)^2 / sum want^2 (as ggml's test-backend-ops does).
inline double nmse(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    err += d * d;
    ref += static_cast<double>(want[i]) * want[i];
  }
  return ref > 0 ? err / ref : err;
}

// What a parity run found: the tensors judged, the largest error as a
// fraction of its bound over the L2 and sum bounds (<= 1 passes) and where,
// and the sampled elements beyond their bound.
struct Result {
  int tensors = 0;
  double worst_ratio = 0;
  std::string worst_what;
  std::vector<std::string> outliers;
};

inline double ratio(double error, double bound) {
  if (!std::isfinite(error)) return INFINITY;
  return bound > 0 ? error / bound : (error > 0 ? INFINITY : 0.0);
}

// One tensor judged by the rule, without asserting anything: its L2 and
// sum errors with their bounds, and the sampled elements beyond theirs.
struct Verdict {
  double l2_error = 0, l2_bound = 0, sum_error = 0, sum_bound = 0;
  std::vector<std::string> outliers;
  double worst() const { return std::max(ratio(l2_error, l2_bound), ratio(sum_error, sum_bound)); }
  bool passes() const { return worst() <= 1.0 && outliers.empty(); }
};

inline bool is_loss(const std::string& what) {
  return what.size() >= 5 && what.compare(what.size() - 5, 5, " loss") == 0;
}

inline Verdict judge(const std::vector<float>& x, const nlohmann::json& ref,
                     const std::string& what) {
  Verdict v;
  const double n = ref.at("n").get<double>();
  const double l2 = ref.at("l2"), e_l2 = ref.at("err32_l2"), e_max = ref.at("err32_max");
  const double rms = l2 / std::sqrt(n);
  const double ceiling = is_loss(what) ? kLossCeiling : kCeiling;
  // The yardstick, capped by the ceiling where the tensor has a scale.
  auto capped = [&](double yardstick, double scale) {
    return scale > 0 ? std::min(yardstick, ceiling * scale) : yardstick;
  };
  const Summary s = summarize(x);
  v.l2_bound = capped(kFactor * e_l2 + kFloor * l2, l2);
  v.l2_error = std::fabs(s.l2 - l2);
  v.sum_bound = std::sqrt(n) * v.l2_bound;
  v.sum_error = std::fabs(s.sum - ref.at("sum").get<double>());
  const double element_bound = capped(kFactor * e_max + kFloor * rms, rms);
  const auto idx = ref.at("index").get<std::vector<int64_t>>();
  const auto val = ref.at("values").get<std::vector<double>>();
  for (size_t i = 0; i < idx.size(); ++i) {
    const double xi = x[static_cast<size_t>(idx[i])];
    if (!(std::fabs(xi - val[i]) <= element_bound))
      v.outliers.push_back(what + "[" + std::to_string(idx[i]) + "]: engine " +
                           std::to_string(xi) + ", float64 " + std::to_string(val[i]) +
                           ", bound " + std::to_string(element_bound) +
                           " (torch fp32 off by up to " + std::to_string(e_max) + ")");
  }
  return v;
}

// Judges one tensor by the rule (CHECKs the L2 and sum bounds, collects the
// sampled elements beyond theirs).
inline void check_against(const std::vector<float>& x, const nlohmann::json& ref,
                          const std::string& what, Result& result) {
  REQUIRE(static_cast<double>(x.size()) == ref.at("n").get<double>());
  const Verdict v = judge(x, ref, what);
  {
    INFO(what << " L2: engine off by " << v.l2_error << ", bound " << v.l2_bound << " (float64 "
              << ref.at("l2").get<double>() << ", torch fp32 off by "
              << ref.at("err32_l2").get<double>() << ")");
    CHECK(v.l2_error <= v.l2_bound);
  }
  {
    INFO(what << " sum: engine off by " << v.sum_error << ", bound " << v.sum_bound
              << " (float64 " << ref.at("sum").get<double>() << ")");
    CHECK(v.sum_error <= v.sum_bound);
  }
  const double worst = v.worst();
  if (std::getenv("XRUN_TEST_ERRORS"))
    std::printf("parity %-60s L2 %.3g sum %.3g of bound\n", what.c_str(),
                ratio(v.l2_error, v.l2_bound), ratio(v.sum_error, v.sum_bound));
  ++result.tensors;
  if (!(worst <= result.worst_ratio)) {  // NaN too
    result.worst_ratio = worst;
    result.worst_what = what;
  }
  result.outliers.insert(result.outliers.end(), v.outliers.begin(), v.outliers.end());
}

// One fixture run on `be`, judged by the rule; at most kKinks outliers.
// `also(what, values)` sees every judged tensor too.
template <class Also>
Result run_parity(Backend& be, const nlohmann::json& run, Also&& also) {
  Result result;
  run_fixture(be, run,
              [&](const std::string& what, const std::vector<float>& x, const nlohmann::json& ref) {
                check_against(x, ref, what, result);
                also(what, x);
              });
  for (const std::string& o : result.outliers) WARN("beyond the bound (a ReLU kink?): " << o);
  CHECK(result.outliers.size() <= static_cast<size_t>(kKinks));
  return result;
}

inline Result run_parity(Backend& be, const nlohmann::json& run) {
  return run_parity(be, run, [](const std::string&, const std::vector<float>&) {});
}

}  // namespace xrun::testing::parity
