// tests/engine/step_loop_test.cpp: the training loop (engine/step_loop.h)
// over a fake step source, with no backend: step kinds, epochs, when the
// loss is read and what a NaN does, evaluation and checkpoints at epoch
// ends and every eval_every steps (timed on a fake clock, and the time to a
// target accuracy from them), Ctrl-C, resuming mid-epoch, the order
// observers see events in, and the nsys capture window
// (engine/capture_window.h).
#include "catch2_compat.h"

#include <algorithm>
#include <cmath>

#include "engine/capture_window.h"
#include "engine/step_stats.h"
#include "engine/step_loop.h"
#include "fake_steps.h"

using namespace xrun;
using xrun_test::EventLog;
using xrun_test::FakeSteps;
using xrun_test::loop_plan;

TEST_CASE("step loop: warmup, measured and unmeasured steps", "[step_loop]") {
  MeasureConfig m;
  m.warmup_steps = 2;
  m.measure_steps = 3;
  CHECK(step_kind(m, 0) == StepKind::warmup);
  CHECK(step_kind(m, 1) == StepKind::warmup);
  CHECK(step_kind(m, 2) == StepKind::measured);
  CHECK(step_kind(m, 4) == StepKind::measured);
  CHECK(step_kind(m, 5) == StepKind::unmeasured);
  m.measure_steps = 0;  // all after warmup
  CHECK(step_kind(m, 1000) == StepKind::measured);
}

TEST_CASE("step loop: epochs, records and the epoch's figures", "[step_loop]") {
  FakeSteps src;
  src.losses = {4, 2, 3, 1, 5};
  EventLog log;
  const LoopResult r = run_steps(src, loop_plan(5, 3, 1), log, {});
  REQUIRE(r.steps.size() == 5);
  for (size_t i = 0; i < 5; ++i) {
    CHECK(r.steps[i].step == static_cast<int64_t>(i));
    CHECK(r.steps[i].epoch == (i < 3 ? 0 : 1));
  }
  CHECK(r.steps[0].kind == StepKind::warmup);
  CHECK(r.steps[1].kind == StepKind::measured);
  CHECK(src.epochs_started == std::vector<std::pair<int, int64_t>>{{0, 0}, {1, 0}});
  // log_every 2: read after steps 2 and 4 (the mean since the last read), at
  // the epoch end (step 3) and at the last step (5).
  CHECK(std::isnan(r.steps[0].loss));
  CHECK(r.steps[1].loss == 3.0);  // (4 + 2) / 2
  CHECK(r.steps[2].loss == 3.0);  // epoch end
  CHECK(r.steps[3].loss == 1.0);
  CHECK(r.steps[4].loss == 5.0);
  CHECK(src.loss_reads == 4);
  CHECK(r.last_loss == 5.0);
  // Evaluation and checkpoint at each epoch's end, after the epoch's last step.
  CHECK(src.evaluations == 2);
  CHECK(src.saves == std::vector<int64_t>{3, 5});
  CHECK(r.test_loss == 0.5);
  CHECK(r.test_accuracy == 0.75);
}

TEST_CASE("step loop: host-synchronous backends read the loss every step", "[step_loop]") {
  FakeSteps src;
  src.losses = {4, 2, 3};
  LoopPlan plan = loop_plan(3, 3);
  plan.loss_every_step = true;
  RunObserver none;
  const LoopResult r = run_steps(src, plan, none, {});
  CHECK(r.steps[0].loss == 4.0);
  CHECK(r.steps[1].loss == 2.0);
  CHECK(r.steps[2].loss == 3.0);
}

TEST_CASE("step loop: a NaN loss stops the run saying where, its step kept", "[step_loop]") {
  FakeSteps src;
  src.losses = {1, 1, 1, NAN};
  EventLog log;
  try {
    run_steps(src, loop_plan(10, 10), log, {});
    FAIL("no error");
  } catch (const TrainError& e) {
    CHECK_THAT(e.what(), Catch::Contains("loss is NaN at step 3 (epoch 1)") &&
                             Catch::Contains("precision fp32"));
  }
  CHECK(log.own.back() == "step_end 3");  // the NaN step was reported before the stop
  CHECK(src.saves.empty());               // no checkpoint of a diverged run
}

TEST_CASE("step loop: a stop request saves the checkpoint and interrupts", "[step_loop]") {
  FakeSteps src;
  EventLog log;
  // 3 steps per epoch; the request comes once epoch 2 has begun, so the loop
  // sees it before step 4 (after the epoch-end checkpoint at step 3).
  auto stop_in_epoch_2 = [&] { return src.epochs_started.size() > 1; };
  REQUIRE_THROWS_WITH(run_steps(src, loop_plan(9, 3), log, stop_in_epoch_2),
                      Catch::Contains("interrupted before step 4 (epoch 2)"));
  CHECK(src.saves == std::vector<int64_t>{3, 4});
}

TEST_CASE("step loop: resuming mid-epoch starts the loader at that step", "[step_loop]") {
  FakeSteps src;
  LoopPlan plan = loop_plan(7, 3);
  plan.start_step = 4;
  RunObserver none;
  const LoopResult r = run_steps(src, plan, none, {});
  REQUIRE(r.steps.size() == 3);
  CHECK(r.steps.front().step == 4);
  CHECK(r.steps.front().epoch == 1);
  CHECK(src.epochs_started == std::vector<std::pair<int, int64_t>>{{1, 1}, {2, 0}});
  CHECK(src.saves == std::vector<int64_t>{6, 7});
}

TEST_CASE("step loop: the events of a step and an epoch, in order", "[step_loop]") {
  FakeSteps src;
  EventLog log;
  run_steps(src, loop_plan(1, 1), log, {});
  const std::vector<std::string> want = {
      "epoch_begin 0", "step_begin 0 measured", "phase data_wait", "/phase data_wait",
      "phase h2d", "/phase h2d", "phase forward", "layer conv1", "/layer", "layer fc", "/layer",
      "/phase forward", "phase backward", "layer conv1", "/layer", "layer fc", "/layer",
      "/phase backward", "phase optimizer", "/phase optimizer", "step_end 0", "phase eval",
      "/phase eval", "eval 1", "epoch_end 0", "phase checkpoint", "/phase checkpoint"};
  CHECK(log.own == want);
}

TEST_CASE("run observers: begin events first to last, end events last to first", "[step_loop]") {
  std::vector<std::string> seen;
  EventLog a("a:", &seen), b("b:", &seen);
  RunObservers obs;
  obs.add(a).add(b);
  TrainResult result;
  obs.on_run_begin({}, {});
  obs.on_step_begin({0, 0, StepKind::measured});
  {
    PhaseScope p(obs, Phase::forward);
  }
  obs.on_step_end({});
  obs.on_run_end(result);
  CHECK(seen == std::vector<std::string>{"a:run_begin", "b:run_begin", "a:step_begin 0 measured",
                                         "b:step_begin 0 measured", "a:phase forward",
                                         "b:phase forward", "b:/phase forward", "a:/phase forward",
                                         "b:step_end 0", "a:step_end 0", "b:run_end", "a:run_end"});
}

TEST_CASE("capture window: on over the measured steps, off after them and at the end",
          "[step_loop]") {
  std::vector<bool> switched;
  {
    CaptureWindow w([&](bool on) { switched.push_back(on); });
    FakeSteps src;
    run_steps(src, loop_plan(6, 6, 2, 2), w, {});  // 2 warmup, 2 measured, 2 unmeasured
    CHECK(switched == std::vector<bool>{true, false});
    TrainResult r;
    w.on_run_end(r);
    CHECK(switched.size() == 2);  // already off
  }
  switched.clear();
  {
    // A run that fails while measuring: the window closes as the observer goes.
    CaptureWindow w([&](bool on) { switched.push_back(on); });
    FakeSteps src;
    src.losses = {1, NAN};
    CHECK_THROWS_AS(run_steps(src, loop_plan(6, 6), w, {}), TrainError);
    CHECK(switched == std::vector<bool>{true});
  }
  CHECK(switched == std::vector<bool>{true, false});
}

// train.steps may be up to 1e12: the loop keeps a record per step it takes,
// never one per step planned up front (4e8 records alone were too many to
// allocate, so such a run failed at once with std::bad_alloc). Here a run of
// 1e12 steps, stopped after 3.
TEST_CASE("step loop: 1e12 planned steps allocate nothing up front", "[step_loop]") {
  FakeSteps src;
  EventLog log;
  int polls = 0;
  const auto stop_after_3 = [&] { return ++polls > 3; };
  CHECK_THROWS_AS(run_steps(src, loop_plan(1'000'000'000'000, 1'000'000'000'000), log, stop_after_3),
                  TrainInterrupted);
  CHECK(src.saves == std::vector<int64_t>{3});
}

// 10 steps of 1 s in epochs of 4, evaluations of 0.5 s every 3 steps and at
// epoch ends: after steps 3, 4 (end), 6, 8 (end), 9 and 10 (the last).
TEST_CASE("step loop: evaluations every eval_every steps and at epoch ends, timed from the first step",
          "[step_loop][target]") {
  FakeSteps src;
  src.step_seconds = 1.0;
  src.eval_seconds = 0.5;
  src.accuracies = {0.1, 0.3, 0.5, 0.45, 0.7, 0.6};
  LoopPlan plan = loop_plan(10, 4);
  plan.eval_every = 3;
  plan.clock = [&] { return src.now; };
  EventLog log;
  const LoopResult r = run_steps(src, plan, log, {});
  REQUIRE(r.evals.size() == 6);
  const std::vector<int64_t> steps = {3, 4, 6, 8, 9, 10};
  const std::vector<int> epochs = {0, 0, 1, 1, 2, 2};
  for (size_t i = 0; i < steps.size(); ++i) {
    const EvalRecord& e = r.evals[i];
    INFO("evaluation " << i);
    CHECK(e.step == steps[i]);
    CHECK(e.epoch == epochs[i]);
    CHECK(e.images == 4 * steps[i]);
    // Wall time: the steps so far and every evaluation, this one included.
    CHECK(e.wall_seconds == Approx(1.0 * steps[i] + 0.5 * (i + 1)));
    CHECK(e.eval_seconds == Approx(0.5 * (i + 1)));
    CHECK(e.test_accuracy == src.accuracies[i]);
  }
  // Each evaluation is told to observers, before its epoch's end.
  CHECK(std::count(log.own.begin(), log.own.end(), "eval 3") == 1);
  const auto at = [&](const std::string& event) {
    return std::find(log.own.begin(), log.own.end(), event) - log.own.begin();
  };
  CHECK(at("eval 4") < at("epoch_end 0"));
  CHECK(at("eval 3") < at("step_begin 3 measured"));
  // The training loss is read before each evaluation (the fake throws if
  // not): step 3 (log_every 2 would not read there) has its loss.
  CHECK(std::isfinite(r.steps[2].loss));
  // The last evaluation's figures are the run's.
  CHECK(r.test_accuracy == 0.6);
  CHECK(src.evaluations == 6);
  CHECK(src.saves == std::vector<int64_t>{4, 8, 10});  // checkpoints at epoch ends only
}

TEST_CASE("step loop: an epoch's seconds exclude its evaluations, its eval_seconds hold them all",
          "[step_loop][target]") {
  FakeSteps src;
  src.step_seconds = 1.0;
  src.eval_seconds = 0.5;
  LoopPlan plan = loop_plan(8, 4);
  plan.eval_every = 2;  // after steps 2 and 6 mid-epoch, 4 and 8 at the ends
  plan.clock = [&] { return src.now; };
  struct Epochs final : RunObserver {
    std::vector<EpochRecord> seen;
    void on_epoch_end(const EpochRecord& e) override { seen.push_back(e); }
  } epochs;
  run_steps(src, plan, epochs, {});
  REQUIRE(epochs.seen.size() == 2);
  for (const EpochRecord& e : epochs.seen) {
    CHECK(e.seconds == Approx(4.0));
    CHECK(e.eval_seconds == Approx(1.0));
  }
}

TEST_CASE("time to target: the first evaluation at or above it, wall time with evaluations",
          "[step_loop][target]") {
  std::vector<EvalRecord> evals;
  const double acc[] = {0.1, 0.3, 0.5, 0.45, 0.7, 0.6};
  const int64_t steps[] = {3, 4, 6, 8, 9, 10};
  for (int i = 0; i < 6; ++i)
    evals.push_back({steps[i], static_cast<int>(steps[i] / 4), 4 * steps[i],
                     1.0 * steps[i] + 0.5 * (i + 1), 0.5 * (i + 1), 1.0, acc[i]});
  RunSummary s;
  summarize_evals(evals, 0.5, 4, s);  // reached exactly at the third
  CHECK(s.target_accuracy == 0.5);
  CHECK(s.time_to_target_s == Approx(7.5));
  CHECK(s.time_to_target_eval_s == Approx(1.5));
  CHECK(s.steps_to_target == 6);
  CHECK(s.epochs_to_target == Approx(1.5));
  CHECK(s.images_to_target == 24);
  CHECK(s.best_accuracy == 0.7);

  RunSummary above;
  summarize_evals(evals, 0.65, 4, above);  // the fifth, not the sixth (0.6)
  CHECK(above.steps_to_target == 9);
  CHECK(above.time_to_target_s == Approx(11.5));

  RunSummary below;  // never reached: stored as such, with the best it got
  summarize_evals(evals, 0.8, 4, below);
  CHECK(below.target_accuracy == 0.8);
  CHECK(std::isnan(below.time_to_target_s));
  CHECK(below.steps_to_target == 0);
  CHECK(below.best_accuracy == 0.7);

  RunSummary none;  // no target: nothing but the best accuracy
  summarize_evals(evals, 0, 4, none);
  CHECK(std::isnan(none.target_accuracy));
  CHECK(std::isnan(none.time_to_target_s));
  CHECK(none.best_accuracy == 0.7);

  // A NaN accuracy (an empty test set) never reaches a target.
  std::vector<EvalRecord> nan_first = evals;
  nan_first[0].test_accuracy = NAN;
  RunSummary low;
  summarize_evals(nan_first, 0.01, 4, low);
  CHECK(low.steps_to_target == 4);
}
