// engine/capture_window.h: the Nsight Systems capture range as a run
// observer: cudaProfilerStart() when the measured steps begin and
// cudaProfilerStop() when they end (or the run does), so `nsys profile
// --capture-range=cudaProfilerApi` records the measured steps alone. The
// switch is given as a function (the backend's profiler_start/stop), so the
// rule is tested without one.
#pragma once

#include <functional>
#include <utility>

#include "core/run_observer.h"

namespace xrun {

class CaptureWindow final : public RunObserver {
 public:
  explicit CaptureWindow(std::function<void(bool on)> set) : set_(std::move(set)) {}
  ~CaptureWindow() override {
    try {
      close();
    } catch (...) {  // a failing run is already on its way out
    }
  }
  void on_step_begin(const StepStart& s) override {
    const bool want = s.kind == StepKind::measured;
    if (want == on_) return;
    set_(want);
    on_ = want;
  }
  void on_run_end(TrainResult&) override { close(); }

 private:
  void close() {
    if (!on_) return;
    on_ = false;
    set_(false);
  }
  std::function<void(bool)> set_;
  bool on_ = false;
};

}  // namespace xrun
