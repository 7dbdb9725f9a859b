// core/run_observer.h: what a training run tells the parts that watch it.
// The engine's loop (engine/step_loop.cpp) calls, in this order:
//   on_run_begin
//   for each epoch: on_epoch_begin, then for each step
//     on_step_begin, on_phase_begin/on_phase_end per phase of the step (with
//     on_layer_begin/on_layer_end inside forward and backward where
//     profile.layers asks), on_step_end (after the step's device
//     synchronisation and loss read-back);
//     every train.eval_every steps: the eval phase, on_eval;
//     at the epoch's end: the eval phase, on_eval, on_epoch_end, the
//     checkpoint phase
//   on_run_end(result), only when the run finished; an interrupted or failed
//   run ends with the observers' destruction (which closes what they opened).
// RunObservers passes begin events first to last and end events last to
// first, so ranges that observers open nest.
// Observers: profiler/run_observers.h (NVTX ranges, host phase and layer
// timers, the trace window, CUPTI, findings), engine/capture_window.h (the
// nsys capture range), runner/progress.h (the progress line and the
// runner's records), store/step_writer.h (steps as they happen).
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "core/phase.h"
#include "core/records.h"

namespace xrun {

struct StepStart {
  int64_t step = 0;  // 0-based index within the run
  int epoch = 0;     // 0-based
  StepKind kind = StepKind::measured;
};

class RunObserver {
 public:
  virtual ~RunObserver() = default;
  virtual void on_run_begin(const Environment&, const RunShape&) {}
  virtual void on_epoch_begin(int /*epoch*/) {}
  virtual void on_step_begin(const StepStart&) {}
  virtual void on_phase_begin(Phase) {}
  virtual void on_phase_end(Phase) {}
  virtual void on_layer_begin(const std::string& /*layer*/) {}
  virtual void on_layer_end() {}
  virtual void on_step_end(const StepRecord&) {}
  virtual void on_epoch_end(const EpochRecord&) {}
  // After each evaluation (epoch end or train.eval_every), before that
  // epoch's on_epoch_end.
  virtual void on_eval(const EvalRecord&) {}
  // Each observer adds its figures to the result (phases merge by name).
  virtual void on_run_end(TrainResult&) {}
  virtual void on_message(const std::string&) {}  // one-line notices
  // On a thread the run starts (data loader workers), as it starts.
  virtual void on_thread_start(const std::string& /*name*/) {}
};

// Observers in order: begin events go first to last, end events last to
// first. Holds some (add(unique_ptr)) and refers to others (add(RunObserver&)).
class RunObservers final : public RunObserver {
 public:
  RunObservers& add(RunObserver& o) {
    list_.push_back(&o);
    return *this;
  }
  template <class T>
  T& add(std::unique_ptr<T> o) {
    T& ref = *o;
    owned_.push_back(std::move(o));
    list_.push_back(&ref);
    return ref;
  }
  bool empty() const { return list_.empty(); }

  void on_run_begin(const Environment& e, const RunShape& s) override {
    for (RunObserver* o : list_) o->on_run_begin(e, s);
  }
  void on_epoch_begin(int epoch) override {
    for (RunObserver* o : list_) o->on_epoch_begin(epoch);
  }
  void on_step_begin(const StepStart& s) override {
    for (RunObserver* o : list_) o->on_step_begin(s);
  }
  void on_phase_begin(Phase p) override {
    for (RunObserver* o : list_) o->on_phase_begin(p);
  }
  void on_phase_end(Phase p) override {
    for (auto it = list_.rbegin(); it != list_.rend(); ++it) (*it)->on_phase_end(p);
  }
  void on_layer_begin(const std::string& layer) override {
    for (RunObserver* o : list_) o->on_layer_begin(layer);
  }
  void on_layer_end() override {
    for (auto it = list_.rbegin(); it != list_.rend(); ++it) (*it)->on_layer_end();
  }
  void on_step_end(const StepRecord& r) override {
    for (auto it = list_.rbegin(); it != list_.rend(); ++it) (*it)->on_step_end(r);
  }
  void on_epoch_end(const EpochRecord& e) override {
    for (auto it = list_.rbegin(); it != list_.rend(); ++it) (*it)->on_epoch_end(e);
  }
  void on_eval(const EvalRecord& e) override {
    for (RunObserver* o : list_) o->on_eval(e);
  }
  void on_run_end(TrainResult& r) override {
    for (auto it = list_.rbegin(); it != list_.rend(); ++it) (*it)->on_run_end(r);
  }
  void on_message(const std::string& m) override {
    for (RunObserver* o : list_) o->on_message(m);
  }
  void on_thread_start(const std::string& name) override {
    for (RunObserver* o : list_) o->on_thread_start(name);
  }

 private:
  std::vector<std::unique_ptr<RunObserver>> owned_;
  std::vector<RunObserver*> list_;
};

// Phase records in pipeline order (core/phase.h), whichever observer
// added them first.
inline void order_phases(std::vector<PhaseRecord>& phases) {
  auto rank = [](const PhaseRecord& r) {
    for (int p = 0; p < static_cast<int>(Phase::count); ++p)
      if (r.phase == phase_name(static_cast<Phase>(p))) return p;
    return static_cast<int>(Phase::count);
  };
  std::stable_sort(phases.begin(), phases.end(),
                   [&](const PhaseRecord& a, const PhaseRecord& b) { return rank(a) < rank(b); });
}

// A phase as a scope: on_phase_begin now, on_phase_end when it closes.
class PhaseScope {
 public:
  PhaseScope(RunObserver& o, Phase p) : o_(o), p_(p) { o_.on_phase_begin(p_); }
  ~PhaseScope() { o_.on_phase_end(p_); }
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  RunObserver& o_;
  Phase p_;
};

}  // namespace xrun
