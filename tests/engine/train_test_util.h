// tests/engine/train_test_util.h: what the whole-run tests of the engine
// share (accumulation_test.cpp, resume_test.cpp, eval_test.cpp, the gpt2
// tests): a tiny CPU run (resnet18 on 8x8 synthetic images; a small GPT-2 on
// a text file), an observer that keeps the steps
// and notices, and the tensors of a checkpoint as bytes by name.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/run_observer.h"
#include "engine/checkpoint/safetensors.h"

namespace xrun_test {

// What a test wants to see of a run: its steps and notices.
struct RunWatch final : xrun::RunObserver {
  std::vector<xrun::StepRecord> steps;
  std::vector<std::string> messages;
  void on_step_end(const xrun::StepRecord& s) override { steps.push_back(s); }
  void on_message(const std::string& m) override { messages.push_back(m); }
};

// resnet18 at 8x8 on `samples` synthetic images, batch `batch`, SGD with
// momentum and weight decay at a constant rate, two threads, no evaluation,
// one warmup step, augmentation on (the loader crops and flips on the CPU).
inline xrun::RunConfig tiny_run(const std::string& checkpoint, int64_t steps, int batch = 8,
                                int64_t samples = 48) {
  xrun::RunConfig c;
  c.name = "tiny";
  c.model.arch = "resnet18";
  c.model.num_classes = 10;
  c.data.source = "synthetic";
  c.data.image_size = 8;
  c.data.samples = samples;
  c.data.test_samples = 20;
  c.data.mean = {0.5f, 0.5f, 0.5f};
  c.data.std = {0.25f, 0.25f, 0.25f};
  c.data.random_crop = c.data.hflip = true;
  c.data.workers = 0;
  c.train.batch_size = batch;
  c.train.steps = steps;
  c.train.threads = 2;
  c.train.eval = false;
  c.train.checkpoint = checkpoint;
  c.train.seed = 5;
  c.train.optimizer.name = "sgd";
  c.train.optimizer.lr = 0.05;
  c.train.optimizer.momentum = 0.9;
  c.train.optimizer.weight_decay = 5e-4;
  c.measure.warmup_steps = 1;
  return c;
}

// The fixture's small GPT-2 (2 layers, 2 heads, width 32, context 16) on
// byte-level text (vocabulary 256), 8 tokens per sequence, AdamW.
inline xrun::RunConfig tiny_gpt2(const std::string& text, int64_t steps) {
  xrun::RunConfig c;
  c.name = "gpt2-tiny";
  c.model.arch = "gpt2";
  c.model.layers = 2;
  c.model.heads = 2;
  c.model.width = 32;
  c.model.context = 16;
  c.model.vocab = 256;
  c.model.num_classes = 256;
  c.data.source = "text";
  c.data.path = text;
  c.data.sequence_length = 8;
  c.data.workers = 0;
  c.train.batch_size = 4;
  c.train.steps = steps;
  c.train.threads = 2;
  c.train.eval = true;
  c.train.seed = 3;
  c.train.optimizer.name = "adamw";
  c.train.optimizer.lr = 1e-2;
  c.train.optimizer.weight_decay = 0.1;
  c.measure.warmup_steps = 1;
  return c;
}

// Every tensor of a safetensors file as raw bytes, by name.
inline std::map<std::string, std::string> tensor_bytes(const std::string& path) {
  std::map<std::string, std::string> out;
  const xrun::SafetensorsFile f = xrun::SafetensorsFile::open(path);
  for (const auto& e : f.entries())
    out[e.name] = std::string(reinterpret_cast<const char*>(e.data), e.bytes);
  return out;
}

}  // namespace xrun_test
