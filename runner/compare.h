// runner/compare.h: matching stored runs that differ only in one key and
// comparing their throughput. Used by `xrun compare` and the speedup chart of
// `xrun report`. Plain code over the store: no engine, no CUDA.
//
// Matching: two runs match when every flattened setting except the compared
// key (and the keys the experiment hash leaves out: train.device, store.label,
// data.path, description) is equal. Comparing by "device" means the card or
// CPU model (environment device_name), by "label" store.label, otherwise the
// setting of that dotted name. Several complete runs with the same settings
// and the same compared value pool their measured step times.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "store/store.h"

namespace xrun::analysis {

struct CompareOptions {
  std::string by;        // label | device | a setting ("train.precision")
  std::string baseline;  // "" = the first value in sort order
  std::vector<std::pair<std::string, std::string>> where;  // as Store::list_runs
  int bootstrap_samples = 2000;
  uint64_t seed = 1;     // the bootstrap is deterministic for a given seed
};

// One compared value within a matched group.
struct CompareCell {
  std::string value;                 // the compared key's value on this side
  std::vector<std::string> run_uuids;
  double throughput = 0;             // img/s over the pooled measured steps
  int64_t measured_steps = 0;
  int64_t peak_memory_bytes = 0;
  double ratio = 1;                  // throughput / baseline throughput
  double ratio_lo = 1, ratio_hi = 1; // 95% bootstrap interval of the ratio
  bool interval_includes_one = true; // no clear difference from the baseline
  bool is_baseline = false;
};

// Runs whose settings (other than the compared key) are all equal.
struct CompareGroup {
  std::string match_key;                      // hash of the shared settings
  std::map<std::string, std::string> settings;  // the settings that differ across groups
  std::vector<CompareCell> cells;             // in the order of Comparison::values
  bool has_baseline = false;
};

struct Comparison {
  std::string by;
  std::string baseline;
  std::vector<std::string> values;  // every compared value seen, baseline first
  std::vector<CompareGroup> groups; // with two or more values, or the baseline and one other
  std::vector<store::RunInfo> unmatched;  // complete runs with no counterpart
};

// Throws store::StoreError for store failures and std::invalid_argument for
// an unknown --by key or a baseline value no run has.
Comparison compare_runs(const store::Store& db, const CompareOptions& options);

}  // namespace xrun::analysis
