// tests/profiler/gpu_trace_export_test.cpp: a GPU run's trace as `xrun trace`
// exports it, without a GPU: host ranges and CUPTI records of one step (built
// in memory, through the ActivityLog as the trainer does) are stored with a
// run in a real store; the exported Chrome JSON is checked: GPU streams on
// their own process and tracks, each launch joined to its kernel by a flow
// arrow ("s" inside the launch on the host, "f" on the kernel), ranges nested
// per track, counts equal to the stored events. Also the store keeps the
// copies per direction and the CUPTI figures.
#include "catch2_compat.h"

#include <map>
#include <nlohmann/json.hpp>

#include "profiler/activity.h"
#include "store/store.h"
#include "test_util.h"

using namespace xrun;
using namespace xrun_test;

namespace {

store::NewRun gpu_run() {
  store::NewRun r;
  r.experiment = "gpu-trace";
  r.experiment_file = "gpu-trace.toml";
  r.config_json = "{}";
  r.config_hash = "cfg";
  r.experiment_hash = "exp";
  r.device = "cuda:0";
  r.environment.fields = {{"device_name", "NVIDIA GeForce RTX 4090 D"}};
  return r;
}

// One step: host ranges step > forward > (launches) and the device work.
std::vector<TraceEvent> one_step_trace() {
  profiler::RangePaths paths;
  paths.push("step");
  const uint64_t fwd = paths.push("forward");
  profiler::ActivityLog log(&paths);
  const uint32_t host = 100;
  for (uint32_t i = 0; i < 3; ++i) {
    const uint64_t t = 1'000'000 + i * 100'000;
    log.add(profiler::ExternalCorrelation{i + 1, fwd});
    log.add(profiler::ApiActivity{"cudaLaunchKernel", t + 10'000, t + 20'000, host, i + 1});
    log.add(profiler::KernelActivity{"_Z4convPf", t + 50'000, t + 140'000, 7, i + 1});
  }
  log.add(profiler::ApiActivity{"cudaMemcpyAsync", 1'350'000, 1'360'000, host, 9});
  log.add(profiler::CopyActivity{profiler::CopyDirection::d2h, profiler::HostMemory::pinned, 4,
                                 1'400'000, 1'410'000, 8, 9});
  log.close_step(1'000'000, 1'500'000, true, 1'000'000, host);
  std::vector<TraceEvent> events = log.take_trace();
  // The NVTX ranges the host trace recorded in the same window.
  events.push_back({"host", "step", 0, 500'000, 4, 0, 0});
  events.push_back({"host", "forward", 5'000, 390'000, -1, 0, 0});
  profiler::assign_depths(events);
  return events;
}

}  // namespace

TEST_CASE("xrun trace: GPU stream tracks and launch-to-kernel flow arrows",
          "[profiler][trace][cupti]") {
  ScratchDir dir;
  const std::string db_path = dir.file("gpu.db");
  const std::vector<TraceEvent> events = one_step_trace();
  {
    store::Store db(db_path);
    const std::string uuid = db.begin_run(gpu_run());
    db.write_trace(uuid, events);
    RunSummary s;
    s.measured_steps = 10;
    s.cupti_steps = 6;
    s.cupti_overhead = 0.04;
    db.write_memcpy(uuid, std::vector<MemcpyRecord>{{"h2d", "pinned", 6, 6 << 20, 1.5},
                                                    {"d2h", "pageable", 2, 8, 0.01}});
    db.finish_run(uuid, store::RunStatus::complete, s);
    const auto back = db.get_trace(uuid);
    REQUIRE(back.size() == events.size());
    for (size_t i = 0; i < back.size(); ++i) CHECK(back[i].flow == events[i].flow);
    const auto d = db.get_run(uuid);
    REQUIRE(d);
    CHECK(d->summary.cupti_steps == 6);
    CHECK(d->summary.cupti_overhead == Approx(0.04));
    REQUIRE(d->memcpy.size() == 2);
    CHECK(d->memcpy[0].direction == "h2d");
    CHECK(d->memcpy[0].bytes == (6 << 20));
    CHECK(d->memcpy[1].memory == "pageable");
  }
  const std::string out = dir.file("trace.json");
  const auto r = run_command(shell_quote(xrun_binary()) + " trace 1 --db " + shell_quote(db_path) +
                             " -o " + shell_quote(out));
  INFO(r.output);
  REQUIRE(r.status == 0);
  const auto j = nlohmann::json::parse(read_bytes(out));

  std::map<int, std::string> process, track;  // pid -> name, tid -> name
  struct Span { double start, end; int pid, tid; };
  std::vector<Span> spans;
  std::map<int64_t, Span> flow_start, flow_end;
  int complete = 0;
  for (const auto& e : j.at("traceEvents")) {
    const std::string ph = e.at("ph");
    if (ph == "M" && e.at("name") == "process_name")
      process[e.at("pid")] = e.at("args").at("name");
    else if (ph == "M" && e.at("name") == "thread_name")
      track[e.at("tid")] = e.at("args").at("name");
    else if (ph == "X") {
      ++complete;
      const double ts = e.at("ts"), dur = e.at("dur");
      spans.push_back({ts, ts + dur, e.at("pid"), e.at("tid")});
      const std::string name = e.at("name");
      const bool gpu = track.at(e.at("tid")).rfind("GPU", 0) == 0;
      CHECK(e.at("pid") == (gpu ? 2 : 1));
      if (name == "conv(float*)") CHECK(track.at(e.at("tid")) == "GPU stream 7");
    } else if (ph == "s" || ph == "f") {
      const Span at{e.at("ts"), e.at("ts"), e.at("pid"), e.at("tid")};
      (ph == "s" ? flow_start : flow_end)[e.at("id").get<int64_t>()] = at;
      if (ph == "f") CHECK(e.at("bp") == "e");
    }
  }
  CHECK(complete == static_cast<int>(events.size()));
  CHECK(process.at(2).find("RTX 4090 D") != std::string::npos);
  // Every launch with device work has one arrow: host -> GPU, forward in time.
  REQUIRE(flow_start.size() == 4);
  REQUIRE(flow_end.size() == 4);
  for (const auto& [id, s] : flow_start) {
    REQUIRE(flow_end.count(id));
    CHECK(s.pid == 1);
    CHECK(flow_end.at(id).pid == 2);
    CHECK(flow_end.at(id).start >= s.start);
  }
  // Per track, events in start order either nest or follow each other.
  std::map<std::pair<int, int>, std::vector<Span>> open;
  for (const Span& s : spans) {
    auto& stack = open[{s.pid, s.tid}];
    while (!stack.empty() && s.start >= stack.back().end) stack.pop_back();
    if (!stack.empty()) CHECK(s.end <= stack.back().end + 1e-3);
    stack.push_back(s);
  }
}
