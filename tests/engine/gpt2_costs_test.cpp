// tests/engine/gpt2_costs_test.cpp: GPT-2's per-layer FLOPs and bytes
// (engine/model/gpt2_costs.h): the layers profile.layers times, each with a
// forward and a backward pass; one block's forward FLOPs worked by hand from
// the header's rules on a tiny shape; the GEMM layers' bytes halving with
// 2-byte elements; and the whole count against the 6N + 12LHQT figure the
// run's FLOP/s uses (the rest is element-wise work, a few percent).
#include "catch2_compat.h"

#include <cmath>
#include <string>

#include "core/gpt2_shapes.h"
#include "engine/model/gpt2_costs.h"

using namespace xrun;

namespace {
const LayerCostRecord* find(const std::vector<LayerCostRecord>& c, const std::string& layer,
                            const std::string& pass) {
  for (const auto& r : c)
    if (r.layer == layer && r.pass == pass) return &r;
  return nullptr;
}
}  // namespace

TEST_CASE("gpt2 costs: every timed layer, a block's forward worked by hand", "[gpt2]") {
  Gpt2Shape s;
  s.layers = 2, s.heads = 2, s.width = 8, s.context = 16, s.vocab = 16;
  const auto c = gpt2_layer_costs(s, /*batch=*/2, /*tokens=*/4, 4);
  const std::vector<std::string> layers = {"transformer.wte", "transformer.h.0", "transformer.h.1",
                                           "transformer.ln_f", "lm_head", "loss"};
  REQUIRE(c.size() == 2 * layers.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    INFO(layers[i]);
    CHECK(c[2 * i].layer == layers[i]);
    CHECK(c[2 * i].pass == "forward");
    CHECK(c[2 * i + 1].layer == layers[i]);
    CHECK(c[2 * i + 1].pass == "backward");
    CHECK(c[2 * i].flops > 0);
    CHECK(c[2 * i].bytes > 0);
  }
  // R = 8 rows, C = 8, 2 heads of 4, T = 4: ln_1 8RC = 512; c_attn 2 R C 3C +
  // R 3C = 3264; attention scores B H T T = 64: 2 x 2 x 64 x 4 + 5 x 64 =
  // 1344; c_proj 2 R C C + R C = 1088; residual R C = 64; ln_2 512; c_fc
  // 2 R C 4C + R 4C = 4352; GELU 9 x R 4C = 2304; mlp c_proj 4160;
  // residual 64.
  CHECK(find(c, "transformer.h.0", "forward")->flops ==
        512 + 3264 + 1344 + 1088 + 64 + 512 + 4352 + 2304 + 4160 + 64);
  // lm_head: 2 R C V forward, twice that backward (dx and the tied weight's).
  CHECK(find(c, "lm_head", "forward")->flops == 2 * 8 * 8 * 16);
  CHECK(find(c, "lm_head", "backward")->flops == 4 * 8 * 8 * 16);
  // Its bytes are all tensors of the element size: 2-byte elements halve them.
  const auto half = gpt2_layer_costs(s, 2, 4, 2);
  CHECK(find(half, "lm_head", "forward")->bytes * 2 == find(c, "lm_head", "forward")->bytes);
  CHECK(find(half, "lm_head", "backward")->bytes * 2 == find(c, "lm_head", "backward")->bytes);
}

TEST_CASE("gpt2 costs: the layers' sum is the 6N + 12LHQT count plus the element-wise work",
          "[gpt2]") {
  const Gpt2Shape s = *gpt2_preset("gpt2");
  const int64_t batch = 4, tokens = 256;
  double total = 0;
  for (const auto& r : gpt2_layer_costs(s, batch, tokens, 4)) total += r.flops;
  const double standard = gpt2_flops_per_token(s, tokens) * static_cast<double>(batch * tokens);
  INFO("per-layer sum / (6N + 12LHQT) = " << total / standard);
  CHECK(total > standard * 0.999);  // the GEMMs and attention products are all there
  CHECK(total < standard * 1.05);   // the rest is element-wise: a few percent
}
