// profiler/activity_capture.h: CUPTI activity capture behind a plain
// interface, so the trainer needs no CUPTI headers: profiler/cupti_collector.cpp
// implements it where the CUDA toolkit's CUPTI is built in, and
// profiler/cupti_unavailable.cpp says why not elsewhere. GpuActivity ties a
// capture to the NVTX ranges (external correlation ids), decides which
// measured steps are traced, and folds them into an ActivityLog.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/records.h"
#include "profiler/activity.h"
#include "profiler/nvtx.h"

namespace xrun::profiler {

class ActivityCapture {
 public:
  virtual ~ActivityCapture() = default;
  // Subscribes and enables kernel, copy, memset, runtime, driver and
  // external-correlation records. nullptr with `why_not` set when CUPTI
  // cannot start: no device, another profiler (nsys, ncu) already attached,
  // or a build without CUPTI.
  static std::unique_ptr<ActivityCapture> start(std::string& why_not);

  virtual void set_tracing(bool on) = 0;  // between steps: records on or off
  virtual uint64_t now_ns() = 0;          // CUPTI's clock (the records' clock)
  virtual void push_range(uint64_t id) = 0;  // external correlation id of the calling thread
  virtual void pop_range() = 0;
  // Flushes CUPTI's buffers (after a device synchronisation) into `log`.
  virtual void flush(ActivityLog& log) = 0;
  virtual uint32_t host_thread() const = 0;  // the thread that started the capture
  virtual int64_t dropped_records() const = 0;
};

// CUPTI for one run (profile.cupti = "summary" or "trace").
class GpuActivity : private RangeListener {
 public:
  // nullptr (and `why_not`) when CUPTI cannot start. `trace_window`: how many
  // measured steps keep their records as timeline events (0 for "summary").
  static std::unique_ptr<GpuActivity> start(int64_t trace_window, std::string& why_not);
  // Over a given capture (tests: a stand-in for CUPTI).
  static std::unique_ptr<GpuActivity> over(std::unique_ptr<ActivityCapture> capture,
                                           int64_t trace_window);
  ~GpuActivity() override;

  // Around each measured step (`index` counts measured steps from 0);
  // end_step comes after the step's device synchronisation.
  void begin_step(int64_t index);
  void end_step(double step_ms);
  // Marks the start of the host trace window: GPU events are placed relative to it.
  void mark_trace_origin() { trace_origin_ = capture_->now_ns(); }

  const ActivityLog& log() const { return log_; }
  std::vector<TraceEvent> take_trace() { return log_.take_trace(); }
  double overhead() const { return tracing_overhead(traced_ms_, untraced_ms_); }
  int64_t dropped_records() const { return capture_->dropped_records(); }

 private:
  GpuActivity(std::unique_ptr<ActivityCapture> capture, int64_t trace_window);
  void on_push(const std::string& name) override;
  void on_pop() override;

  std::unique_ptr<ActivityCapture> capture_;
  int64_t trace_window_ = 0;
  RangePaths paths_;
  ActivityLog log_{&paths_};
  bool traced_ = false, in_window_ = false;
  uint64_t step_begin_ = 0, trace_origin_ = 0;
  std::vector<double> traced_ms_, untraced_ms_;
};

// The GPU checks that need CUPTI's figures: device-to-host copies per step
// beyond the loss read-back, and GPU idle time inside a step.
std::vector<FindingRecord> activity_findings(const ActivityLog& log, int log_every);

}  // namespace xrun::profiler
