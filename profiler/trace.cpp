// profiler/trace.cpp: see trace.h. Ranges nest (NVTX push/pop), so a stack of
// open ranges is enough; only the thread that started the window records
// (the training thread), and ranges opened before the window are ignored
// when they close.
#include "profiler/trace.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

namespace xrun::profiler {

namespace {

using Clock = std::chrono::steady_clock;

struct State {
  std::mutex mu;
  std::atomic<bool> active{false};
  std::thread::id owner;
  Clock::time_point origin;
  struct Open {
    std::string name;
    int64_t payload;
    Clock::time_point start;
  };
  std::vector<Open> open;
  std::vector<TraceEvent> done;
  int depth_before = 0;  // ranges open when the window began, never recorded
};

State& state() {
  static State s;
  return s;
}

int64_t ns(Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
}

}  // namespace

void HostTrace::start() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.owner = std::this_thread::get_id();
  s.origin = Clock::now();
  s.open.clear();
  s.done.clear();
  s.active = true;
}

void HostTrace::stop() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.active = false;
  s.open.clear();
}

bool HostTrace::active() { return state().active; }

void HostTrace::begin(const std::string& name, int64_t payload) {
  State& s = state();
  if (!s.active || std::this_thread::get_id() != s.owner) return;
  std::lock_guard<std::mutex> lock(s.mu);
  s.open.push_back({name, payload, Clock::now()});
}

void HostTrace::end() {
  State& s = state();
  if (!s.active || std::this_thread::get_id() != s.owner) return;
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.open.empty()) return;  // a range opened before the window
  const auto now = Clock::now();
  const State::Open& o = s.open.back();
  s.done.push_back({"host", o.name, ns(o.start - s.origin), ns(now - o.start), o.payload,
                    static_cast<int>(s.open.size()) - 1});
  s.open.pop_back();
}

std::vector<TraceEvent> HostTrace::take() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  std::vector<TraceEvent> out = std::move(s.done);
  s.done.clear();
  std::stable_sort(out.begin(), out.end(), [](const TraceEvent& a, const TraceEvent& b) {
    return a.start_ns < b.start_ns || (a.start_ns == b.start_ns && a.depth < b.depth);
  });
  return out;
}

}  // namespace xrun::profiler
