// profiler/activity.h: what CUPTI's activity records mean for a run, as
// plain code that needs neither a GPU nor CUPTI. profiler/cupti_records.cpp
// turns CUPTI's structs into the neutral records below; an ActivityLog joins
// them (kernel -> the range that launched it, through the external
// correlation ids pushed for each NVTX range) and folds each traced step
// into totals: per kernel and phase, per copy direction, GPU time per phase,
// device-to-host copies and GPU idle time per step, and, inside the trace
// window, timeline events (GPU stream tracks, launches on the host track,
// flow ids joining the two).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/records.h"

namespace xrun::profiler {

// --- Neutral records (timestamps in CUPTI's clock, ns) -----------------------------

struct KernelActivity {
  std::string name;  // as the driver reports it (mangled)
  uint64_t start_ns = 0, end_ns = 0;
  uint32_t stream = 0;
  uint32_t correlation = 0;
};

enum class CopyDirection { h2d, d2h, d2d, h2h, peer, memset, other };
enum class HostMemory { pageable, pinned, device, other };
const char* to_string(CopyDirection d);
const char* to_string(HostMemory m);

struct CopyActivity {  // a memcpy, or a memset (direction memset)
  CopyDirection direction = CopyDirection::other;
  HostMemory memory = HostMemory::other;  // the host side's kind (device for d2d, memset)
  uint64_t bytes = 0;
  uint64_t start_ns = 0, end_ns = 0;
  uint32_t stream = 0;
  uint32_t correlation = 0;
};

struct ApiActivity {  // a CUDA runtime or driver call on a host thread
  std::string name;   // "cudaLaunchKernel", "cuLaunchKernel"
  uint64_t start_ns = 0, end_ns = 0;
  uint32_t thread = 0;
  uint32_t correlation = 0;
};

struct ExternalCorrelation {  // the range id pushed when the call was made
  uint32_t correlation = 0;
  uint64_t external_id = 0;
};

// --- Range paths ------------------------------------------------------------------

// The ids pushed as external correlation ids: one per distinct path of open
// NVTX ranges ("run/epoch/step/forward/layer1.0.conv1"), so a kernel's id
// names its phase and its layer.
class RangePaths {
 public:
  // Pushes a range under the current path; returns the new path's id.
  uint64_t push(const std::string& name);
  // Pops the innermost range; returns the id of the path now current (0 at the top).
  uint64_t pop();
  uint64_t current() const { return stack_.empty() ? 0 : stack_.back(); }
  // The path of an id ("" for 0 or an unknown id).
  const std::string& path(uint64_t id) const;

 private:
  std::unordered_map<std::string, uint64_t> ids_;
  std::vector<std::string> paths_{""};  // paths_[id]
  std::vector<uint64_t> stack_;
};

// Where a path puts its work: the phase (data_wait, h2d, forward, backward,
// optimizer, graph, eval, checkpoint; "" when none) and the innermost range
// below the phase (a layer name, "" when none).
struct Attribution {
  std::string phase;
  std::string layer;
};
Attribution attribute(const std::string& path);

// Demangled C++ name ("void at::native::vectorized_elementwise_kernel<...>");
// names that are not mangled come back unchanged.
std::string demangle(const std::string& name);

// --- The log ----------------------------------------------------------------------

struct StepActivity {
  int64_t d2h_copies = 0;  // device-to-host copies issued in the step
  double gpu_busy_ms = 0;  // union of kernel and copy intervals inside the step
  double step_ms = 0;      // the host's step window
};

class ActivityLog {
 public:
  explicit ActivityLog(const RangePaths* paths) : paths_(paths) {}

  void add(KernelActivity k) { kernels_.push_back(std::move(k)); }
  void add(CopyActivity c) { copies_.push_back(c); }
  void add(ApiActivity a) { apis_.push_back(std::move(a)); }
  void add(const ExternalCorrelation& e) { external_[e.correlation] = e.external_id; }
  // A range entered inside a traced step (GpuActivity, from the NVTX
  // listener): a layer's range counts one call of that layer in its phase.
  void enter_range(uint64_t path_id);

  // Folds the records added since the last call (one traced step, flushed
  // after the step's synchronisation) into the totals. [begin_ns, end_ns] is
  // the host's step window in CUPTI's clock. With `keep_trace`, the records
  // also become timeline events relative to `trace_origin_ns`, API calls of
  // `host_thread` on the "host" track (others on "host thread N").
  void close_step(uint64_t begin_ns, uint64_t end_ns, bool keep_trace = false,
                  uint64_t trace_origin_ns = 0, uint32_t host_thread = 0);

  int64_t steps() const { return static_cast<int64_t>(steps_.size()); }
  const std::vector<StepActivity>& step_activity() const { return steps_; }
  // Per (demangled kernel name, phase), the most time first.
  std::vector<KernelRecord> kernels() const;
  // Per (direction, host memory kind), in a fixed order.
  std::vector<MemcpyRecord> copies() const;
  // Kernel and copy time per phase (their sum: overlapping work counts twice).
  std::map<std::string, double> phase_gpu_ms() const { return phase_gpu_ms_; }
  // Per (layer, phase), the kernel time launched inside the layer's range
  // (the innermost range under a phase) over the traced steps, as
  // profile.layers' rows: name = the layer, calls = the times its range was
  // entered (one a micro-batch; kernels of an entry not seen add time, no
  // call), min/max = a traced step's time per call.
  // Ordered by phase then layer.
  std::vector<KernelRecord> layers() const;
  std::vector<TraceEvent> take_trace() { return std::move(trace_); }
  // Records of a kernel or copy whose launch had no external id.
  int64_t unattributed() const { return unattributed_; }

 private:
  Attribution attribution_of(uint32_t correlation);
  void trace_step(uint64_t origin, uint32_t host_thread);

  const RangePaths* paths_;
  std::vector<KernelActivity> kernels_;
  std::vector<CopyActivity> copies_;
  std::vector<ApiActivity> apis_;
  std::unordered_map<uint32_t, uint64_t> external_;

  struct KernelTotals {
    int64_t calls = 0;
    double total_ms = 0, min_ms = 0, max_ms = 0;
  };
  std::map<std::pair<std::string, std::string>, KernelTotals> kernel_totals_;  // (name, phase)
  std::map<std::pair<int, int>, MemcpyRecord> copy_totals_;  // (direction, memory)
  std::map<std::string, double> phase_gpu_ms_;
  using LayerKey = std::pair<std::string, std::string>;  // (phase, layer)
  std::map<LayerKey, KernelTotals> layer_totals_;
  std::map<LayerKey, int64_t> layer_entries_;  // in the step not yet closed
  void close_layers(const std::map<LayerKey, double>& step_ms);
  const Attribution& path_attribution(uint64_t path_id);
  std::unordered_map<std::string, std::string> demangled_;
  std::unordered_map<uint64_t, Attribution> attributions_;  // by range path id
  std::vector<StepActivity> steps_;
  std::vector<TraceEvent> trace_;
  int64_t unattributed_ = 0;
};

// Busy time of a set of [start, end) intervals clipped to [begin, end]: the
// length of their union (ns).
uint64_t union_length(std::vector<std::pair<uint64_t, uint64_t>> intervals, uint64_t begin,
                      uint64_t end);

// The CUPTI overhead figure: median step time of traced steps over that of
// untraced ones, minus 1; NaN unless both have at least 3 steps.
double tracing_overhead(const std::vector<double>& traced_ms,
                        const std::vector<double>& untraced_ms);

// Whether measured step `index` (0-based among the measured steps) is traced:
// every step of the trace window (the first `window` measured steps), then
// every other one, so untraced steps interleave with traced ones for the
// overhead figure.
bool step_is_traced(int64_t index, int64_t window);

// Gives every event its nesting depth on its track (ranges that nest by time),
// sorting each track by start (longer first on ties).
void assign_depths(std::vector<TraceEvent>& events);

}  // namespace xrun::profiler
