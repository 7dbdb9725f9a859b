// tests/engine/resume_test.cpp: what a run leaves does not depend on how it
// was run. Checkpoints of a run trained whole, trained with another number of
// loader workers, and trained in three parts (Ctrl-C, then train.resume)
// with SGD momentum, accumulation 2, resumes on both sides of an epoch
// boundary and a different worker count in each part, are the same bytes.
// With accumulation the loader must skip step_in_epoch x accumulate batches
// on resume (it counts batches, the loop counts steps).
#include "catch2_compat.h"

#include "engine/checkpoint/checkpoint.h"
#include "engine/trainer.h"
#include "test_util.h"
#include "train_test_util.h"

using namespace xrun;
using Catch::Contains;

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

// A checkpoint belongs to the configuration that wrote it (its config hash
// is in the metadata). A sweep whose runs share train.checkpoint with
// train.resume used to let run #1 resume run #0's final checkpoint, train
// nothing and be stored complete at 0 img/s; now run #1 is refused, by
// name, and the checkpoint is left as it was.
TEST_CASE("trainer: train.resume refuses a checkpoint another configuration wrote",
          "[trainer][resume]") {
  xrun_test::ScratchDir dir;
  const std::string shared = dir.file("shared.safetensors");
  RunConfig a = xrun_test::tiny_run(shared, 3);
  a.train.resume = true;  // nothing there yet: trains from scratch
  TrainContext run0;
  run0.config_hash = "aaaaaaaaaaaaaaaa";
  xrun_test::RunWatch w0;
  train(a, w0, run0);
  REQUIRE(w0.steps.size() == 3);
  CHECK(SafetensorsFile::open(shared).metadata().at("xrun.config_hash") == "aaaaaaaaaaaaaaaa");
  CHECK(SafetensorsFile::open(optimizer_state_path(shared)).metadata().at("xrun.config_hash") ==
        "aaaaaaaaaaaaaaaa");
  const std::string before = xrun_test::read_bytes(shared);

  RunConfig b = a;
  b.train.optimizer.lr = 0.01;
  TrainContext run1;
  run1.config_hash = "bbbbbbbbbbbbbbbb";
  xrun_test::RunWatch w1;
  CHECK_THROWS_AS(train(b, w1, run1), TrainError);
  CHECK_THROWS_WITH(train(b, w1, run1), Contains(shared) && Contains("another configuration") &&
                                            Contains("aaaaaaaa") && Contains("bbbbbbbb"));
  CHECK(w1.steps.empty());
  CHECK(xrun_test::read_bytes(shared) == before);
}

// A run that would measure nothing is refused rather than stored complete
// at 0 img/s: resuming a finished checkpoint of the same configuration
// (`xrun run --force` with train.resume), or one past the measured steps.
TEST_CASE("trainer: a resume that leaves no step to measure is refused", "[trainer][resume]") {
  xrun_test::ScratchDir dir;
  TrainContext ctx;
  ctx.config_hash = "cccccccccccccccc";
  RunConfig c = xrun_test::tiny_run(dir.file("done.safetensors"), 3);
  c.train.resume = true;
  xrun_test::RunWatch first;
  train(c, first, ctx);
  REQUIRE(first.steps.size() == 3);
  xrun_test::RunWatch again;
  CHECK_THROWS_WITH(train(c, again, ctx),
                    Contains("done.safetensors") && Contains("step 3") && Contains("nothing"));
  CHECK(again.steps.empty());

  // measure: 1 warmup step, 2 measured (steps 1 and 2); stopped at step 4 of 6.
  RunConfig m = xrun_test::tiny_run(dir.file("late.safetensors"), 6);
  m.measure.measure_steps = 2;
  m.train.resume = true;
  xrun_test::RunWatch part;
  TrainContext stop_at_4 = ctx;
  stop_at_4.stop_requested = [&] { return part.steps.size() >= 4; };
  REQUIRE_THROWS_AS(train(m, part, stop_at_4), TrainInterrupted);
  xrun_test::RunWatch rest;
  CHECK_THROWS_WITH(train(m, rest, ctx), Contains("late.safetensors") && Contains("step 4") &&
                                             Contains("measure"));
  CHECK(rest.steps.empty());
}

// The same configuration resumes; so does a checkpoint that names none (as
// xrun wrote them before), with a notice.
TEST_CASE("trainer: train.resume takes its own configuration's checkpoint and an unnamed one",
          "[trainer][resume]") {
  xrun_test::ScratchDir dir;
  TrainContext ctx;
  ctx.config_hash = "dddddddddddddddd";
  RunConfig c = xrun_test::tiny_run(dir.file("own.safetensors"), 5);
  c.train.resume = true;
  xrun_test::RunWatch part;
  TrainContext stop_at_2 = ctx;
  stop_at_2.stop_requested = [&] { return part.steps.size() >= 2; };
  REQUIRE_THROWS_AS(train(c, part, stop_at_2), TrainInterrupted);
  xrun_test::RunWatch rest;
  train(c, rest, ctx);
  REQUIRE(rest.steps.size() == 3);
  CHECK(rest.steps.front().step == 2);

  RunConfig old = xrun_test::tiny_run(dir.file("old.safetensors"), 5);
  old.train.resume = true;
  xrun_test::RunWatch old_part;
  TrainContext no_hash;  // as a checkpoint written before config hashes were kept
  no_hash.stop_requested = [&] { return old_part.steps.size() >= 2; };
  REQUIRE_THROWS_AS(train(old, old_part, no_hash), TrainInterrupted);
  CHECK(SafetensorsFile::open(old.train.checkpoint).metadata().count("xrun.config_hash") == 0);
  xrun_test::RunWatch old_rest;
  train(old, old_rest, ctx);
  CHECK(old_rest.steps.size() == 3);
  bool noticed = false;
  for (const std::string& m : old_rest.messages)
    noticed = noticed || m.find("names no configuration") != std::string::npos;
  CHECK(noticed);
}
