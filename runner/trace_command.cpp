// runner/trace_command.cpp: `xrun trace RUN [--db PATH] -o trace.json`: the
// run's trace window as Chrome trace JSON, which Perfetto
// (ui.perfetto.dev) and chrome://tracing open. One process for the host with
// one thread track per trace track; every range a complete ("X") event with
// ts/dur in microseconds; step ranges carry their step index. Written as a
// stream, event by event.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>

#include <nlohmann/json.hpp>

#include "runner/commands.h"
#include "store/store.h"

namespace xrun::cli {

int trace_command(const TraceArgs& args) {
  try {
    if (!std::filesystem::exists(args.db)) {
      std::cerr << "xrun: no result store at " << args.db << " (run an experiment, or pass --db)\n";
      return kRunFailed;
    }
    store::Store db(args.db);
    const auto run = db.get_run(args.run);
    if (!run) {
      std::cerr << "xrun: no run '" << args.run << "' in " << args.db << "\n";
      return kRunFailed;
    }
    const std::vector<TraceEvent> events = db.get_trace(run->info.uuid);
    if (events.empty()) {
      std::cerr << "xrun: run " << run->info.id << " has no trace: run it with "
                << "--set profile.cupti=\"trace\" (profile.trace_steps measured steps are kept)\n";
      return kRunFailed;
    }
    std::ofstream out(args.output, std::ios::trunc);
    if (!out) {
      std::cerr << "xrun: cannot write " << args.output << "\n";
      return kRunFailed;
    }
    using nlohmann::json;
    // Tracks become threads of one "xrun host" process, numbered as met.
    std::map<std::string, int> tids;
    for (const TraceEvent& e : events) tids.emplace(e.track, static_cast<int>(tids.size()) + 1);
    out << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
    out << json{{"ph", "M"}, {"pid", 1}, {"name", "process_name"},
                {"args", {{"name", "xrun " + run->info.device + " (run " +
                                       std::to_string(run->info.id) + ")"}}}}.dump();
    for (const auto& [track, tid] : tids)
      out << ",\n"
          << json{{"ph", "M"}, {"pid", 1}, {"tid", tid}, {"name", "thread_name"},
                  {"args", {{"name", track}}}}.dump();
    for (const TraceEvent& e : events) {
      json ev = {{"ph", "X"},
                 {"pid", 1},
                 {"tid", tids.at(e.track)},
                 {"name", e.name},
                 {"ts", static_cast<double>(e.start_ns) / 1000.0},
                 {"dur", static_cast<double>(e.dur_ns) / 1000.0}};
      if (e.payload >= 0) ev["args"] = {{"step", e.payload}};
      out << ",\n" << ev.dump();
    }
    out << "\n]}\n";
    out.close();
    if (!out) {
      std::cerr << "xrun: writing " << args.output << " failed\n";
      return kRunFailed;
    }
    std::printf("%zu events of run %lld written to %s\n", events.size(),
                static_cast<long long>(run->info.id), args.output.c_str());
    return kOk;
  } catch (const store::StoreError& e) {
    std::cerr << "xrun: " << e.what() << "\n";
    return kRunFailed;
  }
}

}  // namespace xrun::cli
