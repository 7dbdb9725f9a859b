// runner/report/report_data.h: what `xrun report` shows, read from a store
// in one go: the runs matching the filters with everything stored about
// them, a short name for each run that tells it apart from the others, and
// the comparison behind the speedup chart (runner/compare.h).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runner/compare.h"
#include "store/store.h"

namespace xrun::report {

struct ReportOptions {
  std::vector<std::pair<std::string, std::string>> where;  // as Store::list_runs
  std::string by = "label";  // the comparison axis of the speedup chart
  std::string baseline;      // "" = the first value in sort order
  std::string generated_at;  // "" = now (UTC)
};

struct ReportRun {
  store::RunDetail detail;        // info, environment, epochs, phases, kernels, summary
  std::vector<StepRecord> steps;  // every stored step, in order
  std::string name;               // "#7 RTX 4090 D · fp16 · batch_size=64"
  size_t style = 0;               // colour of this run in every per-run chart
};

struct ReportData {
  std::string store_path;
  std::string generated_at;
  ReportOptions options;
  std::vector<ReportRun> runs;  // by id
  analysis::Comparison comparison;
};

// Throws store::StoreError for store failures and std::invalid_argument for
// an unknown --by key or a baseline value no run has (from compare_runs).
ReportData gather_report(const store::Store& db, const ReportOptions& options);

// How runs are referred to: "#7", and "#1, #3, #7".
std::string run_tag(int64_t id);
std::string run_tags(const std::vector<int64_t>& ids);

// "NVIDIA GeForce RTX 4090 D" -> "RTX 4090 D": the vendor words left out.
std::string short_device_name(const std::string& device_name);

// A setting as a name shows it: a string value alone ("fp16"), anything else
// with the key's last part ("batch_size=64"); text that is not JSON as given.
std::string setting_text(const std::string& key, const std::string& value);

}  // namespace xrun::report
