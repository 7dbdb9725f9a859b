// profiler/run_observers.cpp: see run_observers.h.
#include "profiler/run_observers.h"

#include "profiler/findings.h"
#include "profiler/nvtx.h"
#include "profiler/trace.h"

namespace xrun::profiler {

// ---- Ranges -----------------------------------------------------------------
Ranges::Ranges(bool nvtx) { Nvtx::set_enabled(nvtx); }

Ranges::~Ranges() {
  while (open_ > 0) pop();
}

void Ranges::push(const std::string& name, int64_t payload) {
  Nvtx::push(name, payload);
  ++open_;
}

void Ranges::pop() {
  if (open_ == 0) return;
  Nvtx::pop();
  --open_;
}

void Ranges::on_thread_start(const std::string& name) { Nvtx::name_this_thread(name); }

// ---- PhaseTimes -------------------------------------------------------------
void PhaseTimes::on_phase_begin(Phase p) { started_[static_cast<size_t>(p)] = Clock::now(); }

void PhaseTimes::on_phase_end(Phase p) {
  if (is_step_phase(p) && !measured_) return;
  const auto ms = std::chrono::duration<double, std::milli>(
      Clock::now() - started_[static_cast<size_t>(p)]);
  timer_.add(p, ms.count());
}

void PhaseTimes::on_run_end(TrainResult& result) {
  for (const PhaseRecord& r : timer_.records()) {
    PhaseRecord& into = phase_record(result.phases, r.phase);
    into.calls = r.calls;
    into.host_ms = r.host_ms;
  }
}

// ---- LayerTimes -------------------------------------------------------------
void LayerTimes::on_phase_begin(Phase p) {
  if (p == Phase::forward) timer_.set_phase("forward");
  if (p == Phase::backward) timer_.set_phase("backward");
  if (p == Phase::eval) timer_.set_enabled(false);  // eval's forward passes are not training's
}

// ---- TraceWindow ------------------------------------------------------------
TraceWindow::~TraceWindow() {
  if (HostTrace::active()) HostTrace::stop();  // a failed run: the window is dropped
}

void TraceWindow::on_step_begin(const StepStart& s) {
  if (s.kind == StepKind::measured && !HostTrace::active() && traced_ < steps_)
    HostTrace::start();
}

void TraceWindow::on_step_end(const StepRecord&) {
  if (HostTrace::active() && ++traced_ == steps_) stop();
}

void TraceWindow::stop() {
  HostTrace::stop();
  std::vector<TraceEvent> taken = HostTrace::take();
  events_.insert(events_.end(), taken.begin(), taken.end());
}

void TraceWindow::on_run_end(TrainResult& result) {
  if (HostTrace::active()) stop();  // fewer measured steps than the window
  result.trace.insert(result.trace.end(), events_.begin(), events_.end());
  assign_depths(result.trace);
}

// ---- CuptiActivity ----------------------------------------------------------
std::unique_ptr<CuptiActivity> CuptiActivity::start(int64_t trace_window, int log_every,
                                                    std::string& why_not) {
  std::unique_ptr<GpuActivity> gpu = GpuActivity::start(trace_window, why_not);
  if (!gpu) return nullptr;
  return std::make_unique<CuptiActivity>(std::move(gpu), log_every);
}

void CuptiActivity::on_step_begin(const StepStart& s) {
  measuring_ = s.kind == StepKind::measured;
  if (!measuring_) return;
  // GPU events are placed relative to the host trace window's start (the
  // TraceWindow observer, ahead of this one, has just opened it).
  if (HostTrace::active() && !origin_marked_) {
    gpu_->mark_trace_origin();
    origin_marked_ = true;
  }
  gpu_->begin_step(measured_index_);
}

void CuptiActivity::on_step_end(const StepRecord& r) {
  if (!measuring_) return;
  gpu_->end_step(r.step_ms);
  ++measured_index_;
  measuring_ = false;
}

// CUPTI's figures into the result: kernels, copies, GPU time per phase
// (merged into the host phases, whichever observer ends first), the
// overhead, the GPU findings, and GPU tracks joined to the host trace.
void CuptiActivity::on_run_end(TrainResult& result) {
  const ActivityLog& log = gpu_->log();
  result.kernels = log.kernels();
  result.copies = log.copies();
  result.summary.cupti_steps = log.steps();
  result.summary.cupti_overhead = gpu_->overhead();
  for (const FindingRecord& f : activity_findings(log, log_every_)) result.findings.push_back(f);
  if (gpu_->dropped_records() > 0)
    result.findings.push_back(
        {"cupti_dropped", std::to_string(gpu_->dropped_records()) +
                              " CUPTI record(s) dropped: kernel and copy totals are incomplete",
         static_cast<double>(gpu_->dropped_records())});
  for (const auto& [phase, ms] : log.phase_gpu_ms()) phase_record(result.phases, phase).gpu_ms = ms;
  // profile.layers on a GPU: each layer's kernel time (the host's time per
  // layer would be its launches only).
  if (std::vector<KernelRecord> layers = log.layers(); !layers.empty())
    result.layers = std::move(layers);
  std::vector<TraceEvent> gpu_events = gpu_->take_trace();
  if (!gpu_events.empty()) {
    result.trace.insert(result.trace.end(), gpu_events.begin(), gpu_events.end());
    assign_depths(result.trace);
  }
}

// ---- Findings ---------------------------------------------------------------
void Findings::on_run_end(TrainResult& result) {
  for (const Finding& f : run_findings(cfg_, result.summary))
    result.findings.push_back({f.check, f.message, f.value});
}

}  // namespace xrun::profiler
