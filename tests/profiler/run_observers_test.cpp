// tests/profiler/run_observers_test.cpp: each profiler observer
// (profiler/run_observers.h) under the real step loop over a fake step
// source (tests/fake_steps.h), with no backend: which steps the phase and
// layer timers count, the trace window's steps, ranges closed on failure,
// the findings, and CUPTI's GPU time per phase (over a stand-in for CUPTI)
// landing in the run's phases whichever observer ends first.
#include "catch2_compat.h"

#include <algorithm>
#include <cmath>

#include "fake_steps.h"
#include "profiler/run_observers.h"
#include "profiler/trace.h"

using namespace xrun;
using namespace xrun::profiler;
using xrun_test::FakeSteps;
using xrun_test::loop_plan;

namespace {

const PhaseRecord* phase(const TrainResult& r, const std::string& name) {
  for (const PhaseRecord& p : r.phases)
    if (p.phase == name) return &p;
  return nullptr;
}

// Drives `obs` through a run of `plan` over a fake source; returns the result.
TrainResult run(RunObserver& obs, const LoopPlan& plan) {
  FakeSteps src;
  TrainResult result;
  obs.on_run_begin({}, {});
  const LoopResult loop = run_steps(src, plan, obs, {});
  obs.on_run_end(result);
  order_phases(result.phases);
  return result;
}

// CUPTI as a stand-in: while tracing, every range pushed "launches" one
// 2 ms kernel attributed to that range; flush hands the records over.
class FakeCapture final : public ActivityCapture {
 public:
  void set_tracing(bool on) override { tracing_ = on; }
  uint64_t now_ns() override { return clock_ += 1000; }
  void push_range(uint64_t id) override {
    if (!tracing_) return;
    const uint32_t corr = ++correlation_;
    const uint64_t start = now_ns();
    kernels_.push_back({"kernel", start, start + 2'000'000, 7, corr});
    external_.push_back({corr, id});
  }
  void pop_range() override {}
  void flush(ActivityLog& log) override {
    for (const ExternalCorrelation& e : external_) log.add(e);
    for (KernelActivity& k : kernels_) log.add(std::move(k));
    external_.clear();
    kernels_.clear();
  }
  uint32_t host_thread() const override { return 1; }
  int64_t dropped_records() const override { return 0; }

 private:
  bool tracing_ = true;
  uint64_t clock_ = 1'000'000;
  uint32_t correlation_ = 0;
  std::vector<KernelActivity> kernels_;
  std::vector<ExternalCorrelation> external_;
};

}  // namespace

TEST_CASE("observers: phase times count measured steps, eval and checkpoint always",
          "[profiler][observers]") {
  RunObservers obs;
  obs.add(std::make_unique<PhaseTimes>());
  const TrainResult r = run(obs, loop_plan(5, 5, 2));  // 2 warmup, 3 measured, 1 epoch
  REQUIRE(phase(r, "forward"));
  CHECK(phase(r, "forward")->calls == 3);
  CHECK(phase(r, "optimizer")->calls == 3);
  CHECK(phase(r, "eval")->calls == 1);
  CHECK(phase(r, "checkpoint")->calls == 1);
  CHECK(r.phases.front().phase == "data_wait");  // pipeline order
  CHECK(r.phases.back().phase == "checkpoint");
  for (const PhaseRecord& p : r.phases) CHECK(p.host_ms >= 0);
}

TEST_CASE("observers: layer times per layer and pass over the measured steps",
          "[profiler][observers]") {
  RunObservers obs;
  obs.add(std::make_unique<LayerTimes>());
  const TrainResult r = run(obs, loop_plan(6, 6, 2, 3));  // 3 measured of 6
  REQUIRE(r.layers.size() == 4);  // conv1 and fc, forward and backward
  for (const KernelRecord& k : r.layers) {
    CHECK(k.calls == 3);
    CHECK((k.phase == "forward" || k.phase == "backward"));
  }
}

TEST_CASE("observers: on a GPU each layer's time is its kernels' time from CUPTI",
          "[profiler][observers][cupti]") {
  CuptiActivity cupti(GpuActivity::over(std::make_unique<FakeCapture>(), 0), 10);
  Ranges ranges(false);  // the layer ranges CUPTI's correlation ids follow
  RunObservers obs;
  obs.add(cupti).add(ranges);
  const TrainResult r = run(obs, loop_plan(4, 4));
  REQUIRE(r.summary.cupti_steps == 2);  // measured steps 0 and 2
  // Each layer range launched one 2 ms kernel in each traced step.
  REQUIRE(r.layers.size() == 4);
  for (const std::string phase : {"backward", "forward"})
    for (const std::string layer : {"conv1", "fc"}) {
      INFO(phase << " " << layer);
      const auto it = std::find_if(r.layers.begin(), r.layers.end(), [&](const KernelRecord& k) {
        return k.name == layer && k.phase == phase;
      });
      REQUIRE(it != r.layers.end());
      CHECK(it->calls == 2);
      CHECK(it->total_ms == Approx(4.0));
      CHECK(it->min_ms == Approx(2.0));
      CHECK(it->max_ms == Approx(2.0));
    }
}

TEST_CASE("observers: the trace window keeps the ranges of the first measured steps",
          "[profiler][observers]") {
  RunObservers obs;
  obs.add(std::make_unique<TraceWindow>(2));
  obs.add(std::make_unique<Ranges>(false));
  const TrainResult r = run(obs, loop_plan(6, 6, 2));
  std::vector<int64_t> steps;
  int forward = 0;
  for (const TraceEvent& e : r.trace) {
    if (e.name == "step") steps.push_back(e.payload);
    if (e.name == "forward") {
      ++forward;
      CHECK(e.depth == 1);  // inside its step
    }
  }
  CHECK(steps == std::vector<int64_t>{2, 3});
  CHECK(forward == 2);
  CHECK_FALSE(HostTrace::active());
}

TEST_CASE("observers: ranges left open by a failing run are closed", "[profiler][observers]") {
  HostTrace::start();
  {
    Ranges ranges(false);
    FakeSteps src;
    src.losses = {NAN};
    ranges.on_run_begin({}, {});
    CHECK_THROWS_AS(run_steps(src, loop_plan(3, 3), ranges, {}), TrainError);
  }  // run and epoch ranges still open here
  HostTrace::stop();
  int run_ranges = 0, epoch_ranges = 0;
  for (const TraceEvent& e : HostTrace::take()) {
    run_ranges += e.name == "run";
    epoch_ranges += e.name == "epoch";
  }
  CHECK(run_ranges == 1);
  CHECK(epoch_ranges == 1);
}

TEST_CASE("observers: findings of the finished run", "[profiler][observers]") {
  RunConfig cfg;
  Findings findings(cfg);
  TrainResult r;
  r.summary.measured_steps = 5;  // too few
  findings.on_run_end(r);
  REQUIRE(r.findings.size() == 1);
  CHECK(r.findings[0].check == "few_measured_steps");
}

TEST_CASE("observers: CUPTI's GPU time per phase lands in the phases, whichever ends first",
          "[profiler][observers][cupti]") {
  // The defect this guards against: GPU time was written into the result's
  // phases before the host timers filled them, so gpu_ms was always 0.
  for (const bool cupti_first : {true, false}) {
    INFO((cupti_first ? "CUPTI observer first" : "CUPTI observer last"));
    CuptiActivity cupti(GpuActivity::over(std::make_unique<FakeCapture>(), 0), 10);
    Ranges ranges(false);
    PhaseTimes times;
    RunObservers obs;
    if (cupti_first)
      obs.add(cupti).add(ranges).add(times);
    else
      obs.add(times).add(ranges).add(cupti);
    const TrainResult r = run(obs, loop_plan(4, 4));  // 4 measured steps
    // Traced: measured steps 0 and 2 (every other one, for the overhead).
    CHECK(r.summary.cupti_steps == 2);
    const PhaseRecord* forward = phase(r, "forward");
    REQUIRE(forward);
    CHECK(forward->calls == 4);  // host: every measured step
    // GPU: per traced step, the forward range and its two layers launched
    // one 2 ms kernel each.
    CHECK(forward->gpu_ms == Approx(2 * 3 * 2.0));
    CHECK(phase(r, "optimizer")->gpu_ms == Approx(2 * 2.0));
    CHECK(phase(r, "eval")->gpu_ms == 0);  // outside the measured steps
  }
}
