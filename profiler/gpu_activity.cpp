// profiler/gpu_activity.cpp: GpuActivity (see activity_capture.h) and the
// GPU checks on its figures. Thresholds are rules of thumb: more than one
// device-to-host copy per logging interval beyond the loss read-back means a
// hidden sync (.item(), a host-side check); a GPU idle for more than 10% of
// a step waits for the host (launch overhead, data, syncs).
#include <algorithm>
#include <cstdio>

#include "profiler/activity_capture.h"

namespace xrun::profiler {

std::unique_ptr<GpuActivity> GpuActivity::start(int64_t trace_window, std::string& why_not) {
  std::unique_ptr<ActivityCapture> capture = ActivityCapture::start(why_not);
  if (!capture) return nullptr;
  return over(std::move(capture), trace_window);
}

std::unique_ptr<GpuActivity> GpuActivity::over(std::unique_ptr<ActivityCapture> capture,
                                               int64_t trace_window) {
  return std::unique_ptr<GpuActivity>(new GpuActivity(std::move(capture), trace_window));
}

GpuActivity::GpuActivity(std::unique_ptr<ActivityCapture> capture, int64_t trace_window)
    : capture_(std::move(capture)), trace_window_(trace_window) {
  capture_->set_tracing(false);
  Nvtx::set_listener(this);
}

GpuActivity::~GpuActivity() { Nvtx::set_listener(nullptr); }

void GpuActivity::on_push(const std::string& name) {
  const uint64_t id = paths_.push(name);
  capture_->push_range(id);
  if (traced_) log_.enter_range(id);  // a layer's calls, for its time per call
}

void GpuActivity::on_pop() {
  paths_.pop();
  capture_->pop_range();
}

void GpuActivity::begin_step(int64_t index) {
  traced_ = step_is_traced(index, trace_window_);
  in_window_ = index < trace_window_;
  capture_->set_tracing(traced_);
  step_begin_ = capture_->now_ns();
}

void GpuActivity::end_step(double step_ms) {
  (traced_ ? traced_ms_ : untraced_ms_).push_back(step_ms);
  if (!traced_) return;
  traced_ = false;  // ranges between steps (eval) count no layer calls
  const uint64_t step_end = capture_->now_ns();
  capture_->set_tracing(false);
  capture_->flush(log_);
  log_.close_step(step_begin_, step_end, in_window_, trace_origin_, capture_->host_thread());
}

namespace {
std::string fixed1(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}
}  // namespace

std::vector<FindingRecord> activity_findings(const ActivityLog& log, int log_every) {
  std::vector<FindingRecord> out;
  const auto& steps = log.step_activity();
  if (steps.empty()) return out;
  double d2h = 0, busy = 0, span = 0;
  for (const StepActivity& s : steps) {
    d2h += static_cast<double>(s.d2h_copies);
    busy += s.gpu_busy_ms;
    span += s.step_ms;
  }
  const double n = static_cast<double>(steps.size());
  // The loss is read back once per logging interval (one or two copies).
  const double expected = 2.0 / std::max(1, log_every);
  if (d2h / n > expected + 0.5)
    out.push_back({"d2h_copies",
                   fixed1(d2h / n) + " device-to-host copies per step (the loss read-back needs " +
                       fixed1(expected) +
                       "): each one makes the host wait for the GPU; look for values read back "
                       "every step",
                   d2h / n});
  const double idle = span > 0 ? 1.0 - busy / span : 0;
  if (idle > 0.10)
    out.push_back({"gpu_idle",
                   "the GPU was idle " + fixed1(100.0 * idle) +
                       "% of the step time: it waits for the host (launch overhead, data, syncs); "
                       "try train.cuda_graphs, a larger batch or more data.workers",
                   idle});
  return out;
}

}  // namespace xrun::profiler
