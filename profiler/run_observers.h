// profiler/run_observers.h: the profiler's side of a training run, one
// RunObserver (core/run_observer.h) per concern. The runner picks them from
// profile.* (runner/run_command.cpp), in this order:
//   TraceWindow    profile.cupti = "trace": the ranges of the first
//                  trace_steps measured steps, as TraceEvents
//   CuptiActivity  profile.cupti on a GPU: kernels, copies, GPU time per
//                  phase (and per layer with profile.layers), the tracing
//                  overhead, the GPU findings
//   Ranges         the run, epoch, step, phase and layer ranges: NVTX (for
//                  Nsight Systems, profile.nvtx), the trace window and
//                  CUPTI's correlation ids all follow them
//   PhaseTimes     host time per phase over the measured steps (eval and
//                  checkpoint always)
//   LayerTimes     profile.layers on the CPU: host time per layer and pass
//   Findings       the troubleshooting checks on the finished run
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/run_observer.h"
#include "profiler/activity_capture.h"
#include "profiler/layer_timer.h"
#include "profiler/phase_timer.h"

namespace xrun::profiler {

// NVTX ranges; the ranges still open when the run fails are closed when
// the observer goes.
class Ranges final : public RunObserver {
 public:
  explicit Ranges(bool nvtx);  // profile.nvtx
  ~Ranges() override;
  void on_run_begin(const Environment&, const RunShape&) override { push("run"); }
  void on_epoch_begin(int epoch) override { push("epoch", epoch); }
  void on_step_begin(const StepStart& s) override { push("step", s.step); }
  void on_phase_begin(Phase p) override { push(phase_name(p)); }
  void on_phase_end(Phase) override { pop(); }
  void on_layer_begin(const std::string& layer) override { push(layer); }
  void on_layer_end() override { pop(); }
  void on_step_end(const StepRecord&) override { pop(); }
  void on_epoch_end(const EpochRecord&) override { pop(); }
  void on_run_end(TrainResult&) override { pop(); }
  void on_thread_start(const std::string& name) override;

 private:
  void push(const std::string& name, int64_t payload = -1);
  void pop();
  int open_ = 0;
};

// Host wall time per phase: step phases of measured steps only, eval and
// checkpoint whenever they run.
class PhaseTimes final : public RunObserver {
 public:
  void on_step_begin(const StepStart& s) override { measured_ = s.kind == StepKind::measured; }
  void on_phase_begin(Phase p) override;
  void on_phase_end(Phase p) override;
  void on_run_end(TrainResult& result) override;

 private:
  using Clock = std::chrono::steady_clock;
  PhaseTimer timer_;
  bool measured_ = false;
  Clock::time_point started_[static_cast<size_t>(Phase::count)]{};
};

// Host wall time per layer and pass over the measured steps.
class LayerTimes final : public RunObserver {
 public:
  void on_step_begin(const StepStart& s) override { timer_.set_enabled(s.kind == StepKind::measured); }
  void on_phase_begin(Phase p) override;
  void on_layer_begin(const std::string& layer) override { timer_.begin(layer); }
  void on_layer_end() override { timer_.end(); }
  void on_run_end(TrainResult& result) override { result.layers = timer_.records(); }

 private:
  LayerTimer timer_;
};

// The host ranges of the first `steps` measured steps.
class TraceWindow final : public RunObserver {
 public:
  explicit TraceWindow(int64_t steps) : steps_(steps) {}
  ~TraceWindow() override;
  void on_step_begin(const StepStart& s) override;
  void on_step_end(const StepRecord&) override;
  void on_run_end(TrainResult& result) override;

 private:
  void stop();
  int64_t steps_, traced_ = 0;
  std::vector<TraceEvent> events_;
};

// CUPTI over the measured steps (GpuActivity: every step of the trace
// window, then every other one, so that untraced steps give the overhead).
class CuptiActivity final : public RunObserver {
 public:
  // nullptr, with `why_not`, when CUPTI cannot start.
  static std::unique_ptr<CuptiActivity> start(int64_t trace_window, int log_every,
                                              std::string& why_not);
  // Over a given GpuActivity (tests: one on a stand-in capture).
  CuptiActivity(std::unique_ptr<GpuActivity> gpu, int log_every)
      : gpu_(std::move(gpu)), log_every_(log_every) {}
  void on_step_begin(const StepStart& s) override;
  void on_step_end(const StepRecord& r) override;
  void on_run_end(TrainResult& result) override;

 private:
  std::unique_ptr<GpuActivity> gpu_;
  int log_every_;
  bool measuring_ = false, origin_marked_ = false;
  int64_t measured_index_ = 0;
};

// The checks of profiler/findings.h on the run's summary.
class Findings final : public RunObserver {
 public:
  explicit Findings(const RunConfig& cfg) : cfg_(cfg) {}
  void on_run_end(TrainResult& result) override;

 private:
  RunConfig cfg_;
};

}  // namespace xrun::profiler
