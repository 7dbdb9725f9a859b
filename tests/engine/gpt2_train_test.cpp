// tests/engine/gpt2_train_test.cpp: whole GPT-2 runs on the CPU engine
// (issue #25): a small GPT-2 learns a text file (the loss falls, the
// validation loss is reported), trains from llm.c token files, writes
// transformers' state_dict (the tied lm_head.weight left out) and loads one
// that holds it; gradient clipping moves the weights exactly the clipped
// norm, with accumulation too; per-layer updates equal the update after the backward pass.
#include "catch2_compat.h"

#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/gpt2_shapes.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/safetensors.h"
#include "engine/trainer.h"
#include "test_util.h"
#include "torch_fixtures.h"
#include "train_test_util.h"

using namespace xrun;
using xrun_test::RunWatch;

namespace {

std::string repeated_text(const xrun_test::ScratchDir& dir) {
  std::string text;
  for (int i = 0; i < 40; ++i) text += "the quick brown fox jumps over the lazy dog. ";
  const std::string path = dir.file("fox.txt");
  xrun_test::write_bytes(path, text);
  return path;
}

// Every float of a checkpoint, name by name in file order.
std::vector<double> all_weights(const std::string& path) {
  std::vector<double> out;
  const SafetensorsFile f = SafetensorsFile::open(path);
  for (const auto& e : f.entries())
    for (const float v : e.to_vector<float>()) out.push_back(v);
  return out;
}

}  // namespace

TEST_CASE("gpt2: a small GPT-2 learns a text file on the CPU engine and checkpoints "
          "transformers' state_dict",
          "[gpt2][train]") {
  xrun_test::ScratchDir dir;
  RunConfig c = xrun_test::tiny_gpt2(repeated_text(dir), 200);
  c.train.checkpoint = dir.file("gpt2.safetensors");
  RunWatch watch;
  const TrainResult r = train(c, watch);
  REQUIRE(watch.steps.size() == 200);
  // From about ln 256 = 5.5 to a text that repeats itself.
  CHECK(watch.steps.front().loss > 4.5);
  CHECK(watch.steps.back().loss < 2.0);
  CHECK(r.summary.test_loss < 1.5);  // the last 10% of the same sentence
  CHECK(r.summary.test_accuracy > 0.5);
  // Throughput counts tokens: 4 sequences of 8 a step.
  CHECK(watch.steps.back().images == 32);
  CHECK(r.summary.global_batch == 32);
  CHECK(r.environment.get("throughput_unit") == "tokens/s");
  // 6 N + 12 L H Q T FLOPs a token (N without the position table).
  const double n = static_cast<double>(r.summary.flops_per_step) / 32;
  CHECK(n == Approx(6.0 * (gpt2_parameters({2, 2, 32, 16, 256}) - 16 * 32) + 12.0 * 2 * 2 * 16 * 8));

  // transformers' GPT2LMHeadModel state_dict (the fixture's list, at vocab
  // 256), lm_head.weight left out as save_pretrained leaves it.
  const auto fixture = testing::load_fixture("gpt2_state_dicts.json");
  const auto& expected = fixture.at("models").at("small").at("state_dict");
  const SafetensorsFile file = SafetensorsFile::open(c.train.checkpoint);
  size_t compared = 0;
  for (const auto& e : expected) {
    const std::string name = e[0];
    INFO(name);
    std::vector<int64_t> shape = e[1];
    if (name == "lm_head.weight") {
      CHECK_FALSE(file.contains(name));
      continue;
    }
    REQUIRE(file.contains(name));
    if (name == "transformer.wte.weight") shape[0] = 256;  // the fixture's vocabulary is 64
    CHECK(file.get(name).shape == shape);
    ++compared;
  }
  CHECK(compared == file.entries().size());
}

TEST_CASE("gpt2: weights load with or without the tied lm_head.weight, and not with a "
          "different one",
          "[gpt2][train][checkpoint]") {
  xrun_test::ScratchDir dir;
  const std::string text = repeated_text(dir);
  RunConfig c = xrun_test::tiny_gpt2(text, 3);
  c.train.eval = false;
  c.train.checkpoint = dir.file("a.safetensors");
  RunWatch quiet;
  train(c, quiet);

  // The same tensors plus lm_head.weight = wte (transformers' state_dict).
  const SafetensorsFile a = SafetensorsFile::open(c.train.checkpoint);
  std::vector<TensorView> views;
  for (const auto& e : a.entries()) views.push_back({e.name, e.dtype, e.shape, e.data, e.bytes});
  const auto& wte = a.get("transformer.wte.weight");
  views.push_back({"lm_head.weight", wte.dtype, wte.shape, wte.data, wte.bytes});
  write_safetensors(dir.file("tied.safetensors"), views);
  std::vector<float> other = wte.to_vector<float>();
  other[5] += 1.0f;
  views.back().data = other.data();
  write_safetensors(dir.file("untied.safetensors"), views);

  // Starting from either file with lr 0 keeps the weights as they were.
  for (const char* from : {"a.safetensors", "tied.safetensors"}) {
    INFO(from);
    RunConfig b = c;
    b.model.weights = dir.file(from);
    b.train.optimizer.lr = 0;
    b.train.steps = 2;
    b.train.checkpoint = dir.file(std::string("from-") + from);
    train(b, quiet);
    CHECK(all_weights(b.train.checkpoint) == all_weights(c.train.checkpoint));
  }
  RunConfig bad = c;
  bad.model.weights = dir.file("untied.safetensors");
  bad.train.checkpoint = "";
  try {
    train(bad, quiet);
    FAIL("a different lm_head.weight was taken");
  } catch (const std::exception& e) {
    CHECK_THAT(e.what(), Catch::Contains("lm_head.weight differs from transformer.wte.weight"));
  }
}

TEST_CASE("gpt2: train.clip_grad_norm moves the weights by exactly the clipped norm under plain "
          "SGD",
          "[gpt2][train][clip]") {
  xrun_test::ScratchDir dir;
  const std::string text = repeated_text(dir);
  const auto one_step = [&](double lr, double clip, const std::string& name, int accumulate = 1) {
    RunConfig c = xrun_test::tiny_gpt2(text, 1);
    c.train.batch_size /= accumulate;
    c.train.accumulate = accumulate;
    c.train.eval = false;
    c.measure.warmup_steps = 0;
    c.train.optimizer.name = "sgd";
    c.train.optimizer.weight_decay = 0;
    c.train.optimizer.lr = lr;
    c.train.clip_grad_norm = clip;
    c.train.checkpoint = dir.file(name);
    RunWatch quiet;
    train(c, quiet);
    return all_weights(c.train.checkpoint);
  };
  const std::vector<double> w0 = one_step(0, 0, "w0.safetensors");
  const auto moved = [&](const std::vector<double>& w1) {
    double s = 0;
    for (size_t i = 0; i < w0.size(); ++i) s += (w1[i] - w0[i]) * (w1[i] - w0[i]);
    return std::sqrt(s);
  };
  // Unclipped, lr 1: the step is the gradient, whose norm is well above 0.05.
  const double gradient_norm = moved(one_step(1, 0, "free.safetensors"));
  CHECK(gradient_norm > 0.5);
  // Clipped to 0.05: the step's norm is 0.05 x |g| / (|g| + 1e-6).
  const double clipped = moved(one_step(1, 0.05, "clipped.safetensors"));
  CHECK(clipped == Approx(0.05 * gradient_norm / (gradient_norm + 1e-6)).epsilon(1e-3));
  // Above the norm, clipping changes nothing.
  CHECK(moved(one_step(1, 1e6, "loose.safetensors")) == Approx(gradient_norm).epsilon(1e-9));
  // Accumulated over two micro-batches of half the batch: the summed
  // gradient is clipped (clipping the last micro-batch before the sum would
  // leave the step unclipped).
  const double accumulated_norm = moved(one_step(1, 0, "acc-free.safetensors", 2));
  CHECK(accumulated_norm > 0.5);
  CHECK(moved(one_step(1, 0.05, "acc-clipped.safetensors", 2)) ==
        Approx(0.05 * accumulated_norm / (accumulated_norm + 1e-6)).epsilon(1e-3));
}

TEST_CASE("gpt2: per-layer updates in the backward pass give the weights of the update after it",
          "[gpt2][train]") {
  xrun_test::ScratchDir dir;
  const std::string text = repeated_text(dir);
  std::vector<double> weights[2];
  for (const bool per_layer : {false, true}) {
    RunConfig c = xrun_test::tiny_gpt2(text, 4);
    c.train.eval = false;
    c.train.per_layer_update = per_layer;
    c.train.checkpoint = dir.file(per_layer ? "p.safetensors" : "w.safetensors");
    RunWatch quiet;
    train(c, quiet);
    weights[per_layer] = all_weights(c.train.checkpoint);
  }
  CHECK(weights[0] == weights[1]);
}

TEST_CASE("gpt2: trains from llm.c token files, validated on the val file", "[gpt2][train]") {
  xrun_test::ScratchDir dir;
  // Version 1 files: a 256 x int32 header (magic, version, count), uint16 tokens.
  const auto token_file = [&](const std::string& name, int count) {
    std::vector<uint8_t> out(1024, 0);
    const auto put32 = [&](size_t at, uint32_t v) {
      for (int k = 0; k < 4; ++k) out[at + k] = static_cast<uint8_t>(v >> (8 * k));
    };
    put32(0, 20240520);
    put32(4, 1);
    put32(8, static_cast<uint32_t>(count));
    for (int i = 0; i < count; ++i) {
      const uint16_t t = static_cast<uint16_t>((i * 7) % 50);  // a cycle of 50 tokens
      out.push_back(static_cast<uint8_t>(t));
      out.push_back(static_cast<uint8_t>(t >> 8));
    }
    xrun_test::write_bytes(dir.file(name), std::string(out.begin(), out.end()));
  };
  token_file("cycle_train.bin", 2000);
  token_file("cycle_val.bin", 200);
  RunConfig c = xrun_test::tiny_gpt2("", 40);
  c.data.source = "tokens";
  c.data.path = dir.file("cycle_train.bin");
  c.model.vocab = c.model.num_classes = 64;
  RunWatch watch;
  const TrainResult r = train(c, watch);
  CHECK(watch.steps.back().loss < watch.steps.front().loss - 1.0);
  CHECK(std::isfinite(r.summary.test_loss));
  CHECK(r.summary.test_loss < 3.0);
}
