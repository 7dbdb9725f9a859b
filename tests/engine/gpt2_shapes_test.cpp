// tests/engine/gpt2_shapes_test.cpp: core/gpt2_shapes.h against what
// transformers' GPT2LMHeadModel holds (tests/engine/fixtures/
// gpt2_state_dicts.json, written by make_gpt2_fixture.py): each preset's
// parameter count, summed independently from the state_dict's shapes (the
// tied lm_head.weight once); the padded vocabulary; the FLOPs per token
// against the figure worked by hand from the PaLM / nanoGPT formula.
#include "catch2_compat.h"

#include "core/gpt2_shapes.h"
#include "torch_fixtures.h"

using namespace xrun;

TEST_CASE("gpt2 shapes: every preset's parameters as transformers counts them", "[gpt2]") {
  const nlohmann::json f = testing::load_fixture("gpt2_state_dicts.json");
  for (const char* name : {"gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "small"}) {
    INFO(name);
    const nlohmann::json& m = f.at("models").at(name);
    const nlohmann::json& c = m.at("config");
    const Gpt2Shape s = std::string(name) == "small"
                            ? Gpt2Shape{c.at("n_layer"), c.at("n_head"), c.at("n_embd"),
                                        c.at("n_positions"), c.at("vocab_size")}
                            : *gpt2_preset(name);
    CHECK(s.layers == c.at("n_layer").get<int64_t>());
    CHECK(s.heads == c.at("n_head").get<int64_t>());
    CHECK(s.width == c.at("n_embd").get<int64_t>());
    CHECK(s.context == c.at("n_positions").get<int64_t>());
    CHECK(s.vocab == c.at("vocab_size").get<int64_t>());
    CHECK(gpt2_shape_problem(s).empty());
    int64_t summed = 0;  // the state_dict's elements, the tied output weight left out
    for (const nlohmann::json& entry : m.at("state_dict")) {
      if (entry.at(0) == "lm_head.weight") continue;
      int64_t n = 1;
      for (const auto& d : entry.at(1)) n *= d.get<int64_t>();
      summed += n;
    }
    CHECK(gpt2_parameters(s) == summed);
    CHECK(gpt2_parameters(s) == m.at("parameters").get<int64_t>());
  }
  CHECK(gpt2_parameters(*gpt2_preset("gpt2")) == 124439808);
  CHECK_FALSE(gpt2_preset("gpt3"));
}

TEST_CASE("gpt2 shapes: rules, the padded vocabulary, FLOPs per token", "[gpt2]") {
  CHECK_THAT(gpt2_shape_problem(Gpt2Shape{2, 5, 32, 16, 64}),
             Catch::Contains("width 32 is not a multiple of heads 5"));
  CHECK_FALSE(gpt2_shape_problem(Gpt2Shape{0, 1, 8, 8, 8}).empty());
  CHECK(gpt2_padded_vocab(50257) == 50304);  // llm.c's padded_vocab_size
  CHECK(gpt2_padded_vocab(128) == 128);
  CHECK(gpt2_padded_vocab(256) == 256);
  CHECK(gpt2_padded_vocab(1) == 128);
  // gpt2 at T = 1024, by hand: N = 124,439,808 - 1024 x 768 = 123,653,376;
  // 6 N = 741,920,256; 12 L H Q T = 12 x 12 x 12 x 64 x 1024 = 113,246,208.
  CHECK(gpt2_flops_per_token(*gpt2_preset("gpt2"), 1024) == 855166464.0);
  // Shorter sequences: only the attention term shrinks.
  CHECK(gpt2_flops_per_token(*gpt2_preset("gpt2"), 256) == 741920256.0 + 113246208.0 / 4);
}

TEST_CASE("gpt2 fixture: the closed-form weights and tokens, reproduced in C++", "[gpt2]") {
  // What the parity test will train from: each parameter's values summed
  // (and squared) as the fixture script summed them, the tokens as drawn.
  const nlohmann::json f = testing::load_fixture("gpt2_parity.json");
  const nlohmann::json& weights = f.at("weights");
  REQUIRE(weights.size() == f.at("parameters").size());
  for (const nlohmann::json& w : weights) {
    const std::string name = w.at("name");
    INFO(name);
    const std::vector<float> v = testing::gpt2_values(name, w.at("shape").get<std::vector<int64_t>>());
    double sum = 0, squares = 0;
    for (const float x : v) {
      sum += x;
      squares += static_cast<double>(x) * x;
    }
    CHECK(sum == Approx(w.at("sum").get<double>()).epsilon(1e-12).margin(1e-12));
    CHECK(squares == Approx(w.at("sum_squares").get<double>()).epsilon(1e-12));
  }
  const int64_t batch = f.at("batch"), tokens = f.at("tokens");
  const std::vector<int32_t> t = testing::gpt2_tokens(batch, tokens, f.at("config").at("vocab_size"));
  std::vector<int32_t> expected;
  for (const auto& row : f.at("token_values"))
    for (const auto& x : row) expected.push_back(x.get<int32_t>());
  CHECK(t == expected);
}
