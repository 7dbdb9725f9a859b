// runner/trace_command.cpp: `xrun trace RUN [--db PATH] -o trace.json`: the
// run's trace window as Chrome trace JSON, which Perfetto
// (ui.perfetto.dev) and chrome://tracing open. Host tracks (NVTX ranges and,
// with CUPTI, the CUDA API calls) are threads of one "host" process, GPU
// streams threads of a "GPU" process; every range a complete ("X") event with
// ts/dur in microseconds; step ranges carry their step index; a flow arrow
// ("s" at the launch, "f" at the kernel or copy, one id per CUPTI
// correlation id) joins each launch to its device work. Written as a stream,
// event by event.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>

#include <nlohmann/json.hpp>

#include "runner/atomic_file.h"
#include "runner/commands.h"
#include "runner/output.h"
#include "store/store.h"

namespace xrun::cli {

int trace_command(const TraceArgs& args) {
  if (const std::string why = output_overwrites_store(args.output, args.db); !why.empty()) {
    std::cerr << "xrun: trace: " << why << "\n";
    return kUsage;
  }
  try {
    std::unique_ptr<store::Store> db;
    std::optional<store::RunDetail> run;
    if (const int rc = open_run(args.db, args.run, "trace", db, run); rc != kOk) return rc;
    const std::vector<TraceEvent> events = db->get_trace(run->info.uuid);
    if (events.empty()) {
      std::cerr << "xrun: run " << run->info.id << " has no trace: run it with "
                << "--set profile.cupti=\"trace\" (profile.trace_steps measured steps are kept)\n";
      return kRunFailed;
    }
    AtomicFile file(args.output);  // a full disk leaves no truncated JSON
    std::ostream& out = file.stream();
    using nlohmann::json;
    // Tracks become threads, numbered as met: host tracks in process 1, GPU
    // stream tracks in process 2.
    auto on_gpu = [](const std::string& track) { return track.rfind("GPU", 0) == 0; };
    std::map<std::string, int> tids;
    bool any_gpu = false;
    for (const TraceEvent& e : events) {
      tids.emplace(e.track, static_cast<int>(tids.size()) + 1);
      any_gpu = any_gpu || on_gpu(e.track);
    }
    auto pid_of = [&](const std::string& track) { return on_gpu(track) ? 2 : 1; };
    const std::string who = " (run " + std::to_string(run->info.id) + ")";
    out << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
    out << json_text(json{{"ph", "M"}, {"pid", 1}, {"name", "process_name"},
                          {"args", {{"name", "xrun host, " + run->info.device + who}}}});
    if (any_gpu)
      out << ",\n"
          << json_text(json{{"ph", "M"}, {"pid", 2}, {"name", "process_name"},
                            {"args", {{"name", "GPU " + run->info.device_name + who}}}});
    for (const auto& [track, tid] : tids)
      out << ",\n"
          << json_text(json{{"ph", "M"}, {"pid", pid_of(track)}, {"tid", tid},
                            {"name", "thread_name"}, {"args", {{"name", track}}}});
    for (const TraceEvent& e : events) {
      const double ts = static_cast<double>(e.start_ns) / 1000.0;
      const int pid = pid_of(e.track), tid = tids.at(e.track);
      json ev = {{"ph", "X"}, {"pid", pid}, {"tid", tid}, {"name", e.name}, {"ts", ts},
                 {"dur", static_cast<double>(e.dur_ns) / 1000.0}};
      if (e.payload >= 0) ev["args"] = {{"step", e.payload}};
      out << ",\n" << json_text(ev);
      if (e.flow != 0) {  // the launch starts an arrow, its device work ends it
        json flow = {{"ph", pid == 1 ? "s" : "f"}, {"pid", pid}, {"tid", tid}, {"ts", ts},
                     {"id", e.flow}, {"name", "launch"}, {"cat", "launch"}};
        if (pid == 2) flow["bp"] = "e";
        out << ",\n" << json_text(flow);
      }
    }
    out << "\n]}\n";
    file.commit();
    // Written to standard output (-o -), the note goes to standard error.
    std::fprintf(args.output == "-" ? stderr : stdout, "%zu events of run %lld written to %s\n",
                 events.size(), static_cast<long long>(run->info.id), args.output.c_str());
    return kOk;
  } catch (const store::StoreError& e) {
    std::cerr << "xrun: " << e.what() << "\n";
    return kRunFailed;
  } catch (const std::runtime_error& e) {  // the output file
    std::cerr << "xrun: " << e.what() << "\n";
    return kRunFailed;
  }
}

}  // namespace xrun::cli
