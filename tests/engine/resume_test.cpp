// tests/engine/resume_test.cpp: what a run leaves does not depend on how it
// was run. Checkpoints of a run trained whole, trained with another number of
// loader workers, and trained in three parts (Ctrl-C, then train.resume)
// with SGD momentum, accumulation 2, resumes on both sides of an epoch
// boundary and a different worker count in each part, are the same bytes.
// With accumulation the loader must skip step_in_epoch x accumulate batches
// on resume (it counts batches, the loop counts steps).
#include <catch2/catch.hpp>

#include "engine/checkpoint/checkpoint.h"
#include "engine/trainer.h"
#include "test_util.h"
#include "train_test_util.h"

using namespace xrun;
using Catch::Matchers::Contains;

namespace {

void check_same_tensors(const std::string& a_path, const std::string& b_path) {
  for (const auto& [a_file, b_file] :
       {std::pair{a_path, b_path}, std::pair{optimizer_state_path(a_path), optimizer_state_path(b_path)}}) {
    INFO(a_file << " against " << b_file);
    const auto a = xrun_test::tensor_bytes(a_file), b = xrun_test::tensor_bytes(b_file);
    REQUIRE(a.size() == b.size());
    REQUIRE(!a.empty());
    int differing = 0;
    for (const auto& [name, bytes] : a) {
      INFO(name);
      REQUIRE(b.count(name));
      if (b.at(name) != bytes) ++differing;
    }
    CHECK(differing == 0);
  }
}

// Trains `cfg` until `stop_before` steps are done in all (Ctrl-C), or to
// the end when it is 0; returns the steps this part trained.
std::vector<StepRecord> train_part(const RunConfig& cfg, int64_t stop_before) {
  xrun_test::RunWatch watch;
  TrainContext ctx;
  ctx.stop_requested = [&] {
    return stop_before > 0 && !watch.steps.empty() && watch.steps.back().step + 1 >= stop_before;
  };
  if (stop_before > 0)
    REQUIRE_THROWS_AS(train(cfg, watch, ctx), TrainInterrupted);
  else
    train(cfg, watch, ctx);
  return watch.steps;
}

}  // namespace

TEST_CASE("trainer: 0 and 2 loader workers leave the same checkpoint bytes", "[trainer][resume]") {
  xrun_test::ScratchDir dir;
  RunConfig c = xrun_test::tiny_run(dir.file("w0.safetensors"), 4);
  c.data.workers = 0;
  train_part(c, 0);
  c.train.checkpoint = dir.file("w2.safetensors");
  c.data.workers = 2;
  train_part(c, 0);
  CHECK(xrun_test::read_bytes(dir.file("w0.safetensors")) ==
        xrun_test::read_bytes(dir.file("w2.safetensors")));
  CHECK(xrun_test::read_bytes(optimizer_state_path(dir.file("w0.safetensors"))) ==
        xrun_test::read_bytes(optimizer_state_path(dir.file("w2.safetensors"))));
}

TEST_CASE("trainer: SGD momentum with accumulate 2, resumed twice across epochs, ends bit-identical",
          "[trainer][resume]") {
  xrun_test::ScratchDir dir;
  // 48 images at batch 8 x accumulate 2: 3 steps per epoch, 8 steps in all.
  const std::string whole = dir.file("whole.safetensors"), parts = dir.file("parts.safetensors");
  RunConfig c = xrun_test::tiny_run(whole, 8);
  c.train.accumulate = 2;
  c.data.workers = 2;
  const auto all = train_part(c, 0);
  REQUIRE(all.size() == 8);

  // Part 1: steps 0-1, stopped mid-epoch 0 (2 workers).
  c.train.checkpoint = parts;
  const auto p1 = train_part(c, 2);
  REQUIRE(p1.size() == 2);
  CHECK(SafetensorsFile::open(parts).metadata().at("xrun.step") == "2");
  // Part 2: resumed at step 2 (batch 4 of epoch 0), across the boundary at
  // step 3, stopped after step 4, mid-epoch 1; no loader threads.
  c.train.resume = true;
  c.data.workers = 0;
  const auto p2 = train_part(c, 5);
  REQUIRE(p2.size() == 3);
  CHECK(p2.front().step == 2);
  CHECK(p2.back().epoch == 1);
  // Part 3: resumed at step 5 (batch 4 of epoch 1), across step 6, to the end; one thread.
  c.data.workers = 1;
  const auto p3 = train_part(c, 0);
  REQUIRE(p3.size() == 3);
  CHECK(p3.front().step == 5);
  CHECK(p3.back().epoch == 2);

  // The losses of every step, and the final state, are the whole run's.
  for (const auto* part : {&p1, &p2, &p3})
    for (const StepRecord& s : *part) {
      INFO("step " << s.step);
      CHECK(s.loss == all[static_cast<size_t>(s.step)].loss);
    }
  check_same_tensors(whole, parts);
}

// The trainer with train.steps = 1e12 (the most the schema allows), stopped
// after two steps: it starts, trains and saves, rather than failing with
// std::bad_alloc before the first step.
TEST_CASE("trainer: train.steps = 1e12 starts and stops cleanly", "[trainer]") {
  xrun_test::ScratchDir dir;
  RunConfig c = xrun_test::tiny_run(dir.file("long.safetensors"), 1'000'000'000'000);
  const auto steps = train_part(c, 2);
  CHECK(steps.size() == 2);
  CHECK(SafetensorsFile::open(c.train.checkpoint).metadata().at("xrun.step") == "2");
}
