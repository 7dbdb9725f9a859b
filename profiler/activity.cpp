// profiler/activity.cpp: see activity.h.
#include "profiler/activity.h"

#include <cxxabi.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <memory>

#include "core/stats.h"
#include "profiler/phase_timer.h"

namespace xrun::profiler {

const char* to_string(CopyDirection d) {
  switch (d) {
    case CopyDirection::h2d: return "h2d";
    case CopyDirection::d2h: return "d2h";
    case CopyDirection::d2d: return "d2d";
    case CopyDirection::h2h: return "h2h";
    case CopyDirection::peer: return "peer";
    case CopyDirection::memset: return "memset";
    case CopyDirection::other: break;
  }
  return "other";
}

const char* to_string(HostMemory m) {
  switch (m) {
    case HostMemory::pageable: return "pageable";
    case HostMemory::pinned: return "pinned";
    case HostMemory::device: return "device";
    case HostMemory::other: break;
  }
  return "other";
}

// --- RangePaths -------------------------------------------------------------------

uint64_t RangePaths::push(const std::string& name) {
  std::string path = paths_[current()];
  if (!path.empty()) path += '/';
  path += name;
  auto [it, inserted] = ids_.emplace(path, paths_.size());
  if (inserted) paths_.push_back(path);
  stack_.push_back(it->second);
  return it->second;
}

uint64_t RangePaths::pop() {
  if (!stack_.empty()) stack_.pop_back();
  return current();
}

const std::string& RangePaths::path(uint64_t id) const {
  return id < paths_.size() ? paths_[id] : paths_[0];
}

Attribution attribute(const std::string& path) {
  std::vector<std::string> parts;
  for (size_t start = 0; start <= path.size();) {
    const size_t slash = std::min(path.find('/', start), path.size());
    if (slash > start) parts.push_back(path.substr(start, slash - start));
    start = slash + 1;
  }
  Attribution a;
  size_t phase_at = parts.size();
  for (size_t i = parts.size(); i-- > 0;) {
    for (int p = 0; p < static_cast<int>(Phase::count); ++p)
      if (parts[i] == phase_name(static_cast<Phase>(p))) phase_at = i;
    if (phase_at != parts.size()) break;
  }
  if (phase_at == parts.size()) return a;
  a.phase = parts[phase_at];
  if (phase_at + 1 < parts.size()) a.layer = parts.back();
  return a;
}

std::string demangle(const std::string& name) {
  if (name.rfind("_Z", 0) != 0) return name;
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> out(
      abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status), &std::free);
  return status == 0 && out ? std::string(out.get()) : name;
}

// --- ActivityLog ------------------------------------------------------------------

namespace {

double ms_between(uint64_t start, uint64_t end) {
  return end > start ? static_cast<double>(end - start) / 1e6 : 0.0;
}

int64_t relative(uint64_t t, uint64_t origin) {
  return static_cast<int64_t>(t) - static_cast<int64_t>(origin);
}

}  // namespace

const Attribution& ActivityLog::path_attribution(uint64_t path_id) {
  auto known = attributions_.find(path_id);  // a path's attribution never changes
  if (known == attributions_.end())
    known = attributions_.emplace(path_id, attribute(paths_->path(path_id))).first;
  return known->second;
}

Attribution ActivityLog::attribution_of(uint32_t correlation) {
  auto it = external_.find(correlation);
  if (it == external_.end() || paths_ == nullptr) {
    ++unattributed_;
    return {};
  }
  return path_attribution(it->second);
}

void ActivityLog::enter_range(uint64_t path_id) {
  if (paths_ == nullptr) return;
  const Attribution& a = path_attribution(path_id);
  if (!a.layer.empty()) ++layer_entries_[{a.phase, a.layer}];
}

// One traced step's kernel time per layer into the totals: the step's time
// per call is its kernel time over the times the range was entered. Kernels
// of a range whose entry was not seen add time and no call.
void ActivityLog::close_layers(const std::map<LayerKey, double>& step_ms) {
  for (const auto& [key, ms] : step_ms) {
    KernelTotals& t = layer_totals_[key];
    t.total_ms += ms;
    auto entries = layer_entries_.find(key);
    if (entries == layer_entries_.end() || entries->second <= 0) continue;
    const double per_call = ms / static_cast<double>(entries->second);
    t.min_ms = t.calls == 0 ? per_call : std::min(t.min_ms, per_call);
    t.max_ms = t.calls == 0 ? per_call : std::max(t.max_ms, per_call);
    t.calls += entries->second;
  }
  layer_entries_.clear();
}

std::vector<KernelRecord> ActivityLog::layers() const {
  std::vector<KernelRecord> out;
  for (const auto& [key, t] : layer_totals_)
    out.push_back({key.second, key.first, t.calls, t.total_ms, t.min_ms, t.max_ms});
  return out;
}

void ActivityLog::close_step(uint64_t begin_ns, uint64_t end_ns, bool keep_trace,
                             uint64_t trace_origin_ns, uint32_t host_thread) {
  StepActivity step;
  step.step_ms = ms_between(begin_ns, end_ns);
  std::vector<std::pair<uint64_t, uint64_t>> busy;
  std::map<LayerKey, double> step_layer_ms;
  for (const KernelActivity& k : kernels_) {
    const Attribution a = attribution_of(k.correlation);
    auto dm = demangled_.find(k.name);
    if (dm == demangled_.end()) dm = demangled_.emplace(k.name, demangle(k.name)).first;
    const double ms = ms_between(k.start_ns, k.end_ns);
    KernelTotals& t = kernel_totals_[{dm->second, a.phase}];
    t.min_ms = t.calls == 0 ? ms : std::min(t.min_ms, ms);
    t.max_ms = t.calls == 0 ? ms : std::max(t.max_ms, ms);
    t.total_ms += ms;
    ++t.calls;
    phase_gpu_ms_[a.phase] += ms;
    if (!a.layer.empty()) step_layer_ms[{a.phase, a.layer}] += ms;
    busy.emplace_back(k.start_ns, k.end_ns);
  }
  for (const CopyActivity& c : copies_) {
    const Attribution a = attribution_of(c.correlation);
    MemcpyRecord& t = copy_totals_[{static_cast<int>(c.direction), static_cast<int>(c.memory)}];
    t.direction = to_string(c.direction);
    t.memory = to_string(c.memory);
    ++t.count;
    t.bytes += static_cast<int64_t>(c.bytes);
    t.total_ms += ms_between(c.start_ns, c.end_ns);
    phase_gpu_ms_[a.phase] += ms_between(c.start_ns, c.end_ns);
    if (c.direction == CopyDirection::d2h) ++step.d2h_copies;
    busy.emplace_back(c.start_ns, c.end_ns);
  }
  close_layers(step_layer_ms);
  step.gpu_busy_ms = static_cast<double>(union_length(std::move(busy), begin_ns, end_ns)) / 1e6;
  steps_.push_back(step);
  if (keep_trace) trace_step(trace_origin_ns, host_thread);
  kernels_.clear();
  copies_.clear();
  apis_.clear();
  external_.clear();
}

void ActivityLog::trace_step(uint64_t origin, uint32_t host_thread) {
  std::unordered_map<uint32_t, bool> launched;  // correlation ids with device work
  auto stream_track = [](uint32_t stream) { return "GPU stream " + std::to_string(stream); };
  for (const KernelActivity& k : kernels_) {
    trace_.push_back({stream_track(k.stream), demangled_.at(k.name), relative(k.start_ns, origin),
                      static_cast<int64_t>(k.end_ns - k.start_ns), -1, 0, k.correlation});
    launched[k.correlation] = true;
  }
  for (const CopyActivity& c : copies_) {
    const std::string name = c.direction == CopyDirection::memset
                                 ? std::string("memset")
                                 : std::string("memcpy ") + to_string(c.direction) + " (" +
                                       to_string(c.memory) + ")";
    trace_.push_back({stream_track(c.stream), name, relative(c.start_ns, origin),
                      static_cast<int64_t>(c.end_ns - c.start_ns), -1, 0, c.correlation});
    launched[c.correlation] = true;
  }
  for (const ApiActivity& a : apis_) {
    const std::string track =
        a.thread == host_thread ? std::string("host") : "host thread " + std::to_string(a.thread);
    trace_.push_back({track, a.name, relative(a.start_ns, origin),
                      static_cast<int64_t>(a.end_ns - a.start_ns), -1, 0,
                      launched.count(a.correlation) ? a.correlation : 0});
  }
}

std::vector<KernelRecord> ActivityLog::kernels() const {
  std::vector<KernelRecord> out;
  for (const auto& [key, t] : kernel_totals_)
    out.push_back({key.first, key.second.empty() ? "other" : key.second, t.calls, t.total_ms,
                   t.min_ms, t.max_ms});
  std::stable_sort(out.begin(), out.end(), [](const KernelRecord& a, const KernelRecord& b) {
    return a.total_ms > b.total_ms;
  });
  return out;
}

std::vector<MemcpyRecord> ActivityLog::copies() const {
  std::vector<MemcpyRecord> out;
  for (const auto& [key, t] : copy_totals_) out.push_back(t);
  return out;
}

// --- Plain helpers ----------------------------------------------------------------

uint64_t union_length(std::vector<std::pair<uint64_t, uint64_t>> intervals, uint64_t begin,
                      uint64_t end) {
  for (auto& [s, e] : intervals) {
    s = std::clamp(s, begin, end);
    e = std::clamp(e, begin, end);
  }
  std::sort(intervals.begin(), intervals.end());
  uint64_t total = 0, covered_to = begin;
  for (const auto& [s, e] : intervals) {
    const uint64_t from = std::max(s, covered_to);
    if (e > from) {
      total += e - from;
      covered_to = e;
    }
  }
  return total;
}

double tracing_overhead(const std::vector<double>& traced_ms,
                        const std::vector<double>& untraced_ms) {
  if (traced_ms.size() < 3 || untraced_ms.size() < 3)
    return std::numeric_limits<double>::quiet_NaN();
  const double off = median(untraced_ms);
  return off > 0 ? median(traced_ms) / off - 1.0 : std::numeric_limits<double>::quiet_NaN();
}

bool step_is_traced(int64_t index, int64_t window) {
  return index < window || (index - window) % 2 == 0;
}

void assign_depths(std::vector<TraceEvent>& events) {
  std::stable_sort(events.begin(), events.end(), [](const TraceEvent& a, const TraceEvent& b) {
    if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
    return a.dur_ns > b.dur_ns;
  });
  std::map<std::string, std::vector<int64_t>> open_ends;  // per track: ends of open ranges
  for (TraceEvent& e : events) {
    std::vector<int64_t>& open = open_ends[e.track];
    while (!open.empty() && open.back() <= e.start_ns) open.pop_back();
    e.depth = static_cast<int>(open.size());
    open.push_back(e.start_ns + e.dur_ns);
  }
}

}  // namespace xrun::profiler
