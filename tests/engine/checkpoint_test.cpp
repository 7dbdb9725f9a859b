// tests/engine/checkpoint_test.cpp: checkpoints through the real trainer:
// the weights file has torchvision's state_dict (names, shapes, dtypes from
// the torchvision fixture) and is read by PyPI's safetensors (the reference
// reader) with the values xrun holds; an interrupted run resumed from its
// checkpoint ends bit-identical to an uninterrupted one; loading weights that
// do not fit names every missing, unexpected and mis-shaped tensor.
#include "catch2_compat.h"
#include <map>
#include <set>

#include "engine/checkpoint/checkpoint.h"
#include "engine/model/resnet.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/trainer.h"
#include "test_util.h"
#include "torch_fixtures.h"

using namespace xrun;
using Catch::Contains;

namespace {

// What a test wants to see of a run: its steps and notices.
struct Watch final : RunObserver {
  std::vector<StepRecord> steps;
  std::vector<std::string> messages;
  void on_step_end(const StepRecord& s) override { steps.push_back(s); }
  void on_message(const std::string& m) override { messages.push_back(m); }
};

TrainResult train_quietly(const RunConfig& cfg) {
  Watch none;
  return train(cfg, none);
}

RunConfig small_run(const std::string& checkpoint, int64_t steps) {
  RunConfig c;
  c.name = "ckpt";
  c.model.arch = "resnet18";
  c.model.num_classes = 10;
  c.data.source = "synthetic";
  c.data.image_size = 16;
  c.data.samples = 96;  // 6 steps per epoch at batch 16: resuming crosses epochs
  c.data.test_samples = 32;
  c.data.mean = {0.5f, 0.5f, 0.5f};
  c.data.std = {0.25f, 0.25f, 0.25f};
  c.data.random_crop = c.data.hflip = true;
  c.data.workers = 2;
  c.train.batch_size = 16;
  c.train.steps = steps;
  c.train.threads = 2;
  c.train.checkpoint = checkpoint;
  c.train.schedule.name = "cosine";
  c.train.schedule.warmup_steps = 2;
  c.measure.warmup_steps = 1;
  return c;
}

// Every tensor of a safetensors file as raw bytes, by name.
std::map<std::string, std::string> tensors_of(const std::string& path) {
  std::map<std::string, std::string> out;
  const SafetensorsFile f = SafetensorsFile::open(path);
  for (const auto& e : f.entries())
    out[e.name] = std::string(reinterpret_cast<const char*>(e.data), e.bytes);
  return out;
}

}  // namespace

TEST_CASE("checkpoint: torchvision's state_dict, read back by PyPI's safetensors", "[checkpoint]") {
  xrun_test::ScratchDir dir;
  const std::string path = dir.file("r18.safetensors");
  train_quietly(small_run(path, 3));
  REQUIRE(std::filesystem::exists(path));
  REQUIRE(std::filesystem::exists(optimizer_state_path(path)));

  // Names, shapes and dtypes: exactly torchvision's resnet18(num_classes=10).
  const auto fixture = testing::load_fixture("torchvision_state_dicts.json");
  const auto& expected = fixture.at("models").at("resnet18_10").at("state_dict");
  const SafetensorsFile file = SafetensorsFile::open(path);
  REQUIRE(file.entries().size() == expected.size());
  for (const auto& e : expected) {
    const std::string name = e[0];
    INFO(name);
    REQUIRE(file.contains(name));
    CHECK(file.get(name).shape == e[1].get<std::vector<int64_t>>());
    CHECK(file.get(name).dtype == (e[2] == "int64" ? "I64" : "F32"));
  }
  CHECK(file.get("bn1.num_batches_tracked").to_vector<int64_t>() == std::vector<int64_t>{3});
  CHECK(file.metadata().at("xrun.step") == "3");

  // The reference reader sees the same names, shapes and values: python
  // prints name, dtype, shape and float64 sum per tensor; compare with ours.
  const std::string script = R"(
import sys
from safetensors.numpy import load_file
for name, a in sorted(load_file(sys.argv[1]).items()):
    print(name, a.dtype, "x".join(map(str, a.shape)) or "scalar", repr(float(a.astype("float64").sum())))
)";
  xrun_test::write_bytes(dir.file("read.py"), script);
  const auto r = xrun_test::run_command(xrun_test::python() + " " + dir.file("read.py") + " " + path);
  INFO(r.output);
  REQUIRE(r.status == 0);
  std::istringstream lines(r.output);
  std::string name, dtype, shape;
  double sum = 0;
  size_t count = 0;
  while (lines >> name >> dtype >> shape >> sum) {
    INFO(name);
    REQUIRE(file.contains(name));
    const auto& entry = file.get(name);
    CHECK(dtype == (entry.dtype == "I64" ? "int64" : "float32"));
    double ours = 0;
    if (entry.dtype == "I64") {
      for (int64_t v : entry.to_vector<int64_t>()) ours += static_cast<double>(v);
    } else {
      for (float v : entry.to_vector<float>()) ours += v;
    }
    CHECK(sum == Approx(ours).epsilon(1e-9).margin(1e-9));
    ++count;
  }
  CHECK(count == expected.size());
}

TEST_CASE("checkpoint: an interrupted run resumed from its checkpoint ends bit-identical", "[checkpoint]") {
  xrun_test::ScratchDir dir;
  const std::string whole = dir.file("whole.safetensors"), parts = dir.file("parts.safetensors");
  train_quietly(small_run(whole, 10));

  // Ctrl-C after step 4: the trainer saves the checkpoint and stops.
  Watch first_part;
  TrainContext stop_after_4;
  stop_after_4.stop_requested = [&] { return first_part.steps.size() >= 4; };
  REQUIRE_THROWS_AS(train(small_run(parts, 10), first_part, stop_after_4), TrainInterrupted);
  CHECK(SafetensorsFile::open(parts).metadata().at("xrun.step") == "4");

  RunConfig resumed = small_run(parts, 10);
  resumed.train.resume = true;
  Watch second_part;
  train(resumed, second_part);
  REQUIRE(second_part.steps.size() == 6);
  CHECK(second_part.steps.front().step == 4);

  const auto a = tensors_of(whole), b = tensors_of(parts);
  REQUIRE(a.size() == b.size());
  for (const auto& [n, bytes] : a) {
    INFO(n);
    CHECK(b.at(n) == bytes);
  }
  const auto oa = tensors_of(optimizer_state_path(whole)), ob = tensors_of(optimizer_state_path(parts));
  REQUIRE(oa.size() == ob.size());
  for (const auto& [n, bytes] : oa) {
    INFO(n);
    CHECK(ob.at(n) == bytes);
  }
}

TEST_CASE("checkpoint: weights that do not fit are refused, naming every problem", "[checkpoint]") {
  xrun_test::ScratchDir dir;
  cpu::CpuBackend be(1);
  ModelSpec spec;
  spec.arch = "resnet18";
  spec.batch = 2;
  spec.image_size = 16;
  ResNet model(be, spec);
  be.allocate();
  model.init_parameters(1);

  // A state_dict with one tensor missing, one extra and one of the wrong shape.
  std::vector<std::vector<float>> keep;
  keep.reserve(model.state().size() + 1);
  std::vector<TensorView> views;
  const int64_t counter = 0;
  for (const StateEntry& e : model.state()) {
    if (e.name == "layer2.0.conv1.weight") continue;  // missing
    if (e.kind == StateEntry::Kind::counter) {
      views.push_back({e.name, "I64", {}, &counter, sizeof counter});
      continue;
    }
    std::vector<int64_t> dims = e.dims;
    if (e.name == "fc.weight") dims = {1000, 512};  // mis-shaped
    keep.emplace_back(std::accumulate(dims.begin(), dims.end(), int64_t{1}, std::multiplies<>()));
    views.push_back({e.name, "F32", dims, keep.back().data(), keep.back().size() * 4});
  }
  keep.emplace_back(4);
  views.push_back({"head.weight", "F32", {4}, keep.back().data(), 16});  // unexpected
  write_safetensors(dir.file("bad.safetensors"), views);

  REQUIRE_THROWS_WITH(load_weights(dir.file("bad.safetensors"), model, be),
                      Contains("missing tensors (1): layer2.0.conv1.weight") &&
                          Contains("unexpected tensors (1): head.weight") &&
                          Contains("fc.weight has shape [1000, 512], expected [10, 512]") &&
                          Contains("bad.safetensors"));
}

TEST_CASE("checkpoint: model.weights starts training from a file", "[checkpoint]") {
  xrun_test::ScratchDir dir;
  const std::string first = dir.file("first.safetensors");
  train_quietly(small_run(first, 2));
  RunConfig next = small_run(dir.file("second.safetensors"), 1);
  next.model.weights = first;
  next.train.optimizer.lr = 1e-30;  // one step that changes (almost) nothing
  next.train.optimizer.weight_decay = 0;
  next.measure.warmup_steps = 0;  // the one step is measured (a run measures at least one)
  Watch ev;
  train(next, ev);
  REQUIRE_FALSE(ev.messages.empty());
  CHECK_THAT(ev.messages.front(), Contains("loaded weights from"));
  // Convolution weights carried over unchanged (lr 1e-30); BN statistics moved
  // by one more batch.
  const auto a = tensors_of(first), b = tensors_of(dir.file("second.safetensors"));
  CHECK(a.at("layer3.1.conv2.weight") == b.at("layer3.1.conv2.weight"));
  CHECK(a.at("bn1.running_mean") != b.at("bn1.running_mean"));
}

TEST_CASE("trainer: gradient accumulation takes `accumulate` batches per step", "[trainer]") {
  xrun_test::ScratchDir dir;
  RunConfig c = small_run("", 3);
  c.train.accumulate = 2;
  Watch ev;
  const TrainResult r = train(c, ev);
  const std::vector<StepRecord>& steps = ev.steps;
  REQUIRE(steps.size() == 3);
  for (const StepRecord& s : steps) CHECK(s.images == 32);
  CHECK(r.summary.measured_images == 2 * 32);
  // 96 samples at 16 x 2 per step: 3 steps per epoch, the third step ends epoch 1.
  CHECK(steps[2].epoch == 0);
}

// train.per_layer_update: each layer's parameters updated in the backward
// pass as soon as their gradients are complete must give the very weights and
// optimizer state of the update after the whole backward pass, step after
// step (the same operations per element, in the same order), for AdamW and
// SGD with momentum (whose buffers start differently on the first step).
TEST_CASE("trainer: the layer-by-layer update leaves the same bits as the separate update",
          "[trainer]") {
  xrun_test::ScratchDir dir;
  auto run = [&](const std::string& name, bool per_layer, const std::string& optimizer,
                 int64_t steps = 5) {
    RunConfig c = small_run(dir.file(name + ".safetensors"), steps);
    c.train.per_layer_update = per_layer;
    c.train.optimizer.name = optimizer;
    c.train.optimizer.momentum = optimizer == "sgd" ? 0.9 : 0.0;
    c.train.optimizer.nesterov = optimizer == "sgd";
    c.train.optimizer.lr = optimizer == "sgd" ? 0.05 : 1e-3;
    Watch ev;
    train(c, ev);
    CHECK(ev.steps.size() == static_cast<size_t>(steps));
    return c.train.checkpoint;
  };
  for (const std::string optimizer : {"adamw", "sgd"}) {
    INFO(optimizer);
    const std::string separate = run(optimizer + "_separate", false, optimizer);
    const std::string layered = run(optimizer + "_layered", true, optimizer);
    const auto a = tensors_of(separate), b = tensors_of(layered);
    REQUIRE(a.size() == b.size());
    for (const auto& [n, bytes] : a) {
      INFO(n);
      CHECK(b.at(n) == bytes);
    }
    const auto oa = tensors_of(optimizer_state_path(separate));
    const auto ob = tensors_of(optimizer_state_path(layered));
    REQUIRE(oa.size() == ob.size());
    REQUIRE(!oa.empty());
    for (const auto& [n, bytes] : oa) {
      INFO(n);
      CHECK(ob.at(n) == bytes);
    }
    // One step less shows in every layer's bits: the comparison above would
    // have seen an update that went missing or went twice.
    const auto shorter = tensors_of(run(optimizer + "_4_steps", true, optimizer, 4));
    for (const char* n : {"conv1.weight", "bn1.bias", "layer2.0.downsample.0.weight", "fc.bias"}) {
      INFO(n);
      CHECK(shorter.at(n) != a.at(n));
    }
  }
}

// What `xrun run` says of an existing train.checkpoint it will not touch: a
// file cut short is "truncated" with the size its header promises and the
// size found (it used to be "not an xrun checkpoint"); a foreign file is
// not an xrun checkpoint; a whole one has no problem.
TEST_CASE("checkpoint: a truncated checkpoint is named truncated, with the sizes", "[checkpoint]") {
  xrun_test::ScratchDir dir;
  const std::string path = dir.file("cut.safetensors");
  std::vector<float> w(256, 0.5f);
  write_safetensors(path, {{"w", "F32", {256}, w.data(), w.size() * 4}}, {{"xrun.step", "4"}});
  CHECK(checkpoint_file_problem(path).empty());
  const std::string whole = xrun_test::read_bytes(path);
  xrun_test::write_bytes(path, whole.substr(0, whole.size() - 100));
  CHECK_THAT(checkpoint_file_problem(path),
             Contains("is truncated") &&
                 Contains("expected " + std::to_string(whole.size()) + " bytes") &&
                 Contains("found " + std::to_string(whole.size() - 100)));
  xrun_test::write_bytes(path, whole.substr(0, 12));
  CHECK_THAT(checkpoint_file_problem(path), Contains("is truncated") && Contains("found 12"));
  xrun_test::write_bytes(path, "notes, not a checkpoint");
  CHECK(checkpoint_file_problem(path) == "is not an xrun checkpoint");
  write_safetensors(path, {{"w", "F32", {256}, w.data(), w.size() * 4}}, {});
  CHECK(checkpoint_file_problem(path) == "is not an xrun checkpoint");
}
