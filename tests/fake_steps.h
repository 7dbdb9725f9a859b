// tests/fake_steps.h: a StepSource with no backend, for the step loop's and
// the observers' tests. Each step reports the phases a CPU step reports
// (data_wait, h2d, forward and backward with two layers each, optimizer),
// adds its loss (from `losses`, 1.0 past the end) for the next read, and
// every call the loop makes is counted. An observer that writes down every
// event in order comes with it.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/run_observer.h"
#include "engine/step_loop.h"

namespace xrun_test {

struct FakeSteps final : xrun::StepSource {
  int batch = 4;
  std::vector<double> losses;
  bool evaluates = true;
  std::vector<std::pair<int, int64_t>> epochs_started;  // (epoch, step in epoch)
  std::vector<int64_t> saves;                           // steps done at each save
  int evaluations = 0, loss_reads = 0;
  // A fake clock (LoopPlan::clock reads it) that each step and evaluation
  // moves on, and the accuracy of each evaluation in turn (0.75 past the end).
  double now = 0, step_seconds = 0, eval_seconds = 0;
  std::vector<double> accuracies;

  void start_epoch(int epoch, int64_t step_in_epoch) override {
    epochs_started.emplace_back(epoch, step_in_epoch);
  }
  xrun::StepRecord step(const xrun::StepStart& at, xrun::RunObserver& obs) override {
    using xrun::Phase;
    using xrun::PhaseScope;
    { PhaseScope p(obs, Phase::data_wait); }
    { PhaseScope p(obs, Phase::h2d); }
    for (Phase pass : {Phase::forward, Phase::backward}) {
      PhaseScope p(obs, pass);
      for (const char* layer : {"conv1", "fc"}) {
        obs.on_layer_begin(layer);
        obs.on_layer_end();
      }
    }
    { PhaseScope p(obs, Phase::optimizer); }
    const double loss = static_cast<size_t>(at.step) < losses.size() ? losses[at.step] : 1.0;
    loss_sum_ += loss * batch;
    rows_ += batch;
    now += step_seconds;
    xrun::StepRecord r;
    r.images = batch;
    r.step_ms = 1.0 + static_cast<double>(at.step);
    r.lr = 0.1;
    return r;
  }
  xrun::LossTotals read_loss() override {
    ++loss_reads;
    xrun::LossTotals t{loss_sum_, 0, rows_};
    loss_sum_ = 0;
    rows_ = 0;
    return t;
  }
  bool evaluate(xrun::RunObserver& obs, double& test_loss, double& test_accuracy) override {
    if (!evaluates) return false;
    xrun::PhaseScope p(obs, xrun::Phase::eval);
    // A training loss left unread would be mixed into the evaluation's.
    if (rows_ != 0) throw std::logic_error("evaluation with training losses unread");
    test_loss = 0.5;
    test_accuracy = static_cast<size_t>(evaluations) < accuracies.size() ? accuracies[evaluations] : 0.75;
    ++evaluations;
    now += eval_seconds;
    return true;
  }
  void save(int64_t step, xrun::RunObserver& obs) override {
    xrun::PhaseScope p(obs, xrun::Phase::checkpoint);
    saves.push_back(step);
  }

 private:
  double loss_sum_ = 0;
  int64_t rows_ = 0;
};

// Every event as a short line: "step_begin 3 measured", "phase forward", ...
struct EventLog final : xrun::RunObserver {
  std::string tag;  // prefixed to each line (to tell two logs apart)
  std::vector<std::string>* out = nullptr;
  std::vector<std::string> own;
  explicit EventLog(std::string t = "", std::vector<std::string>* shared = nullptr)
      : tag(std::move(t)), out(shared ? shared : &own) {}
  void put(const std::string& s) { out->push_back(tag + s); }
  static const char* kind(xrun::StepKind k) {
    return k == xrun::StepKind::warmup ? "warmup"
           : k == xrun::StepKind::measured ? "measured" : "unmeasured";
  }
  void on_run_begin(const xrun::Environment&, const xrun::RunShape&) override { put("run_begin"); }
  void on_epoch_begin(int e) override { put("epoch_begin " + std::to_string(e)); }
  void on_step_begin(const xrun::StepStart& s) override {
    put("step_begin " + std::to_string(s.step) + " " + kind(s.kind));
  }
  void on_phase_begin(xrun::Phase p) override { put(std::string("phase ") + xrun::phase_name(p)); }
  void on_phase_end(xrun::Phase p) override { put(std::string("/phase ") + xrun::phase_name(p)); }
  void on_layer_begin(const std::string& l) override { put("layer " + l); }
  void on_layer_end() override { put("/layer"); }
  void on_step_end(const xrun::StepRecord& r) override { put("step_end " + std::to_string(r.step)); }
  void on_epoch_end(const xrun::EpochRecord& e) override { put("epoch_end " + std::to_string(e.epoch)); }
  void on_eval(const xrun::EvalRecord& e) override { put("eval " + std::to_string(e.step)); }
  void on_run_end(xrun::TrainResult&) override { put("run_end"); }
  void on_message(const std::string& m) override { put("message " + m); }
};

inline xrun::LoopPlan loop_plan(int64_t total_steps, int64_t steps_per_epoch,
                                int64_t warmup = 0, int64_t measure = 0) {
  xrun::LoopPlan p;
  p.total_steps = total_steps;
  p.steps_per_epoch = steps_per_epoch;
  p.images_per_step = 4;
  p.log_every = 2;
  p.measure.warmup_steps = warmup;
  p.measure.measure_steps = measure;
  p.context = "precision fp32";
  return p;
}

}  // namespace xrun_test
