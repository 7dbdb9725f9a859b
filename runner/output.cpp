// runner/output.cpp: see output.h.
#include "runner/output.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>

namespace xrun::cli {

bool parse_where(const std::vector<std::string>& where, Filters& out) {
  for (const std::string& w : where) {
    const auto eq = w.find('=');
    if (eq == std::string::npos || eq == 0) {
      std::cerr << "xrun: --where " << w << ": expected KEY=VALUE\n";
      return false;
    }
    out.emplace_back(w.substr(0, eq), w.substr(eq + 1));
  }
  return true;
}

using nlohmann::json;

json number_or_null(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

std::string fixed(double v, int digits) {
  if (!std::isfinite(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string mib(int64_t bytes) {
  return bytes > 0 ? fixed(static_cast<double>(bytes) / (1 << 20), 0) + " MiB" : "-";
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

json run_json(const store::RunInfo& r) {
  return {{"id", r.id},
          {"uuid", r.uuid},
          {"experiment", r.experiment},
          {"sweep_index", r.sweep_index},
          {"status", r.status},
          {"label", r.label},
          {"device", r.device},
          {"device_name", r.device_name},
          {"batch_size", r.batch_size},
          {"precision", r.precision},
          {"cudnn_benchmark", r.cudnn_benchmark},
          {"workers", r.workers},
          {"throughput", number_or_null(r.throughput)},
          {"step_ms_median", number_or_null(r.step_ms_median)},
          {"step_ms_p10", number_or_null(r.step_ms_p10)},
          {"step_ms_p90", number_or_null(r.step_ms_p90)},
          {"peak_memory_bytes", r.peak_memory_bytes},
          {"test_accuracy", number_or_null(r.test_accuracy)},
          {"final_loss", number_or_null(r.final_loss)},
          {"config_hash", r.config_hash},
          {"experiment_hash", r.experiment_hash},
          {"started_at", r.started_at},
          {"finished_at", r.finished_at},
          {"error", r.error}};
}

// Opens an existing store for reading; a missing file is an error, not a new store.
bool open_existing(const std::string& path, std::unique_ptr<store::Store>& db) {
  if (!std::filesystem::exists(path)) {
    std::cerr << "xrun: no result store at " << path << " (run an experiment, or pass --db)\n";
    return false;
  }
  db = std::make_unique<store::Store>(path);
  return true;
}


}  // namespace xrun::cli
