// tests/engine/gpt2_parity_test.cpp: the GPT-2 model (engine/model/gpt2.cpp)
// on the CPU backend against transformers' GPT2LMHeadModel in float64
// (tests/engine/fixtures/gpt2_parity.json and .f64: a small GPT-2, 2 layers,
// 2 heads, width 32, one batch of 2 x 8 tokens): the loss, the logits,
// every parameter gradient and every parameter after one AdamW step (decay
// on matrices only), each no further from float64 than twice PyTorch
// fp32's own distance (the fixture's yardstick), the rule ResNet's parity
// tests keep.
#include "catch2_compat.h"

#include <cmath>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "engine/cpu/cpu_backend.h"
#include "engine/model/gpt2.h"
#include "torch_fixtures.h"

using namespace xrun;

namespace {

using Vec = std::vector<float>;

// Reads the fixture's tensors in order: name -> float64 values.
std::map<std::string, std::vector<double>> reference_tensors(const nlohmann::json& f) {
  std::ifstream blob(std::string(XRUN_SOURCE_DIR) + "/tests/engine/fixtures/gpt2_parity.f64",
                     std::ios::binary);
  REQUIRE(blob);
  std::map<std::string, std::vector<double>> out;
  for (const auto& t : f["tensors"]) {
    int64_t n = 1;
    for (const auto& d : t["shape"]) n *= d.get<int64_t>();
    std::vector<double> ref(n);
    blob.read(reinterpret_cast<char*>(ref.data()), static_cast<std::streamsize>(n * sizeof(double)));
    REQUIRE(blob);
    out[t["name"]] = std::move(ref);
  }
  return out;
}

// Twice PyTorch fp32's distance from float64, and never less than a float
// rounding of the tensor's largest value (PyTorch may be lucky on a small
// tensor). A parameter after the AdamW step ("step.<name>") may also differ
// by what its gradient's own error (bounded above) moves it: AdamW's first
// step is lr g / (|g| + eps) (both moments' bias corrections cancel), whose
// slope lr eps / (|g| + eps)^2 reaches 30 at |g| = 6e-7, so a gradient 1e-9
// off moves the weight 3e-8, ten times PyTorch fp32's luck on this tensor.
// Returns the number of tensors compared.
int compare(const nlohmann::json& f, const std::map<std::string, std::vector<double>>& refs,
            const std::map<std::string, Vec>& ours) {
  const double lr = f["adamw"]["lr"], eps = f["adamw"]["eps"];
  int compared = 0;
  for (const auto& t : f["tensors"]) {
    const std::string name = t["name"];
    const auto it = ours.find(name);
    if (it == ours.end()) continue;
    const std::vector<double>& ref = refs.at(name);
    const bool step = name.rfind("step.", 0) == 0;
    const std::vector<double>* g_ref = step ? &refs.at("grad." + name.substr(5)) : nullptr;
    const Vec* g_ours = step ? &ours.at("grad." + name.substr(5)) : nullptr;
    INFO(name);
    REQUIRE(it->second.size() == ref.size());
    double largest = 0;
    for (const double r : ref) largest = std::max(largest, std::abs(r));
    const double yardstick = t["fp32_max_abs"].get<double>();
    const double bound = 2 * yardstick + 1.2e-7 * largest;
    double err = 0, excess = 0;  // the largest error, and the largest beyond its element's bound
    for (size_t i = 0; i < ref.size(); ++i) {
      const double e = std::abs(it->second[i] - ref[i]);
      double allowed = bound;
      if (step) {
        const double g = std::abs((*g_ref)[i]) + eps;
        allowed += lr * eps / (g * g) * std::abs((*g_ours)[i] - (*g_ref)[i]);
      }
      err = std::max(err, e);
      excess = std::max(excess, e - allowed);
    }
    INFO("max error " << err << ", PyTorch fp32's " << yardstick << ", beyond the bound by "
                      << excess);
    CHECK(excess <= 0);
    ++compared;
  }
  return compared;
}

}  // namespace

TEST_CASE("gpt2: the model on the CPU meets transformers' float64 step: loss, logits, "
          "every gradient, one AdamW step",
          "[gpt2][parity]") {
  const nlohmann::json f = testing::load_fixture("gpt2_parity.json");
  Gpt2Spec spec;
  spec.shape = {f["config"]["n_layer"], f["config"]["n_head"], f["config"]["n_embd"],
                f["config"]["n_positions"], f["config"]["vocab_size"]};
  spec.batch = f["batch"];
  spec.tokens = f["tokens"];
  const int64_t B = spec.batch, T = spec.tokens, N = B * T;

  cpu::CpuBackend be(0);
  Gpt2 model(be, spec);
  auto loss = be.softmax_cross_entropy(model.logits(), model.dlogits());
  OptimizerSettings adamw;
  adamw.name = "adamw";
  adamw.beta1 = f["adamw"]["betas"][0];
  adamw.beta2 = f["adamw"]["betas"][1];
  adamw.eps = f["adamw"]["eps"];
  adamw.weight_decay = f["adamw"]["weight_decay"];
  auto opt = be.optimizer(adamw, false);
  be.allocate();

  // The state entries are transformers' state_dict, lm_head.weight (tied) left out.
  std::vector<std::string> names;
  for (const auto& e : model.state()) names.push_back(e.name);
  CHECK(names == f["parameters"].get<std::vector<std::string>>());
  for (const auto& e : model.state()) be.write(e.tensor, testing::gpt2_values(e.name, e.dims));

  // Decay on matrices only: the fixture names the decayed ones.
  std::vector<Tensor*> undecayed = model.undecayed_parameters();
  std::vector<std::string> decayed;
  for (const auto& e : model.state())
    if (std::find(undecayed.begin(), undecayed.end(), e.tensor) == undecayed.end())
      decayed.push_back(e.name);
  CHECK(decayed == f["adamw"]["decayed"].get<std::vector<std::string>>());
  opt->exclude_from_decay(undecayed);

  const std::vector<int32_t> rows = testing::gpt2_tokens(B, T, f["config"]["vocab_size"]);
  std::vector<int32_t> tokens(N), targets(N);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      tokens[b * T + t] = rows[b * (T + 1) + t];
      targets[b * T + t] = rows[b * (T + 1) + t + 1];
    }
  be.load_tokens(tokens.data(), targets.data(), static_cast<int>(B));

  model.forward(true);
  loss->forward_backward(static_cast<int>(N), 1.0f);
  model.backward();
  const LossOp::Results r = loss->read_results();
  REQUIRE(r.rows == N);

  std::map<std::string, Vec> ours;
  ours["loss"] = {static_cast<float>(r.loss_sum / r.rows)};
  auto read = [&](const Tensor* t) {
    Vec v(t->numel());
    be.read(t, v);
    return v;
  };
  ours["logits"] = read(model.logits());
  for (const auto& e : model.state()) ours["grad." + e.name] = read(e.grad);

  OptimizerStep st;
  st.lr = f["adamw"]["lr"];
  st.step = 1;
  opt->step(st);
  for (const auto& e : model.state()) ours["step." + e.name] = read(e.tensor);

  const auto refs = reference_tensors(f);
  const int compared = compare(f, refs, ours);
  CHECK(compared == 2 + 2 * static_cast<int>(f["parameters"].size()));
}
