// tests/engine/accumulation_test.cpp: gradient accumulation end to end. The
// trainer with train.accumulate = 2 at batch B must leave the very bits of a
// loop written here against the Backend API, step after step: per step, two
// batches from the loader, each a forward and backward at gradient scale 1
// (the gradient of its own mean loss), their sum halved (the gradient of the
// mean over the 2B images), then one SGD-with-momentum (or AdamW) step.
//
// Why this is exact, not approximate: the trainer scales each micro-batch's
// loss gradient by 1/2 instead and adds the two scaled gradients. Scaling by
// a power of two commutes with every fp32 rounding (the backward pass is
// linear in the loss gradient: convolutions, batch norm and pooling only
// multiply and add it), so its g1/2 + g2/2 rounds to exactly (g1 + g2)/2.
// Batch norm sees B images per forward in both, as the trainer's
// micro-batches do (batch 2B with accumulate 1 would normalise over 2B
// images, which is a different computation).
//
// What a wrong accumulation does here: a gradient not divided by
// `accumulate` doubles every update (SGD's loss then climbs); accumulation
// that adds into the last step's sum instead of starting afresh piles stale
// gradients up from the second step. Both change the bits of every layer.
#include "catch2_compat.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/cpu/cpu_backend.h"
#include "engine/data/dataset.h"
#include "engine/data/loader.h"
#include "engine/model/resnet.h"
#include "engine/trainer.h"
#include "test_util.h"
#include "train_test_util.h"

using namespace xrun;

namespace {

// The parameters, running statistics and batch counter after `steps` steps
// of accumulation by hand, by state_dict name, as the checkpoint stores them.
std::map<std::string, std::string> accumulate_by_hand(const RunConfig& cfg, int64_t steps) {
  const int accumulate = cfg.train.accumulate;
  auto train_set = data::open_dataset(cfg.data, data::Split::train, cfg.train.seed);
  cpu::CpuBackend be(cfg.train.threads);
  ModelSpec spec;
  spec.arch = cfg.model.arch;
  spec.num_classes = cfg.model.num_classes;
  spec.batch = cfg.train.batch_size;
  spec.channels = cfg.data.channels;
  spec.image_size = cfg.data.image_size;
  ResNet model(be, spec);
  auto loss = be.softmax_cross_entropy(model.logits(), model.dlogits());
  OptimizerSettings os;
  os.name = cfg.train.optimizer.name;
  os.weight_decay = cfg.train.optimizer.weight_decay;
  os.momentum = cfg.train.optimizer.momentum;
  auto optimizer = be.optimizer(os, false);  // no accumulation region: the sum is kept here
  be.allocate();
  model.init_parameters(cfg.train.seed);

  data::LoaderOptions lo;
  lo.batch_size = cfg.train.batch_size;
  lo.shuffle = cfg.data.shuffle;
  lo.drop_last = true;
  lo.random_crop = cfg.data.random_crop;
  lo.hflip = cfg.data.hflip;
  lo.workers = 0;
  lo.seed = cfg.train.seed;
  data::Loader loader(*train_set, lo);
  const int64_t steps_per_epoch = loader.batches_per_epoch() / accumulate;

  float* grad = be.region(TensorRole::gradient);
  const size_t n = be.region_bytes(TensorRole::gradient) / sizeof(float);
  std::vector<float> sum(n);
  for (int64_t step = 0; step < steps; ++step) {
    if (step % steps_per_epoch == 0) loader.start_epoch(step / steps_per_epoch);
    for (int micro = 0; micro < accumulate; ++micro) {
      const data::HostBatch* b = loader.next();
      REQUIRE(b != nullptr);
      const int count = b->count;
      be.load_batch(b->images, b->labels, count, cfg.data.mean, cfg.data.std, nullptr);
      loader.release(b);
      model.forward(true);
      loss->forward_backward(count, 1.0f);
      model.backward();
      for (size_t i = 0; i < n; ++i) sum[i] = micro == 0 ? grad[i] : sum[i] + grad[i];
    }
    for (size_t i = 0; i < n; ++i) grad[i] = sum[i] / static_cast<float>(accumulate);
    OptimizerStep st;
    st.lr = cfg.train.optimizer.lr;  // constant schedule
    st.step = step + 1;
    optimizer->step(st);
  }

  std::map<std::string, std::string> out;
  for (const StateEntry& e : model.state()) {
    if (e.kind == StateEntry::Kind::counter) {
      const int64_t counter = model.num_batches_tracked;
      out[e.name] = std::string(reinterpret_cast<const char*>(&counter), sizeof counter);
      continue;
    }
    std::vector<float> v(static_cast<size_t>(e.tensor->numel()));
    be.read(e.tensor, v);
    out[e.name] = std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  }
  return out;
}

}  // namespace

TEST_CASE("trainer: accumulate 2 leaves the bits of a hand-written accumulation loop",
          "[trainer][accumulate]") {
  xrun_test::ScratchDir dir;
  for (const std::string optimizer : {"sgd", "adamw"}) {
    INFO(optimizer);
    // 48 images at batch 8: 6 batches, 3 steps per epoch; 5 steps cross an epoch.
    RunConfig c = xrun_test::tiny_run(dir.file(optimizer + ".safetensors"), 5);
    c.train.accumulate = 2;
    if (optimizer == "adamw") {
      c.train.optimizer.name = "adamw";
      c.train.optimizer.lr = 1e-3;
      c.train.optimizer.weight_decay = 0.01;
      c.train.optimizer.momentum = 0;
    }
    xrun_test::RunWatch watch;
    train(c, watch);
    REQUIRE(watch.steps.size() == 5);
    for (const StepRecord& s : watch.steps) CHECK(s.images == 16);

    const auto trainer = xrun_test::tensor_bytes(c.train.checkpoint);
    const auto by_hand = accumulate_by_hand(c, 5);
    REQUIRE(trainer.size() == by_hand.size());
    // The tensors whose bits differ, each with its largest difference.
    std::string differing;
    int count = 0;
    for (const auto& [name, bytes] : by_hand) {
      REQUIRE(trainer.count(name));
      const std::string& got = trainer.at(name);
      if (got == bytes) continue;
      double worst = 0;
      if (name.find("num_batches_tracked") == std::string::npos && got.size() == bytes.size()) {
        std::vector<float> a(got.size() / 4), b(a.size());
        std::memcpy(a.data(), got.data(), got.size());
        std::memcpy(b.data(), bytes.data(), bytes.size());
        for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, double(std::fabs(a[i] - b[i])));
      }
      if (count++ < 8) differing += " " + name + " (up to " + std::to_string(worst) + ")";
    }
    INFO(count << " of " << by_hand.size() << " tensors differ:" << differing);
    CHECK(count == 0);
  }
}
