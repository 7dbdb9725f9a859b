// runner/compare.h: matching stored runs that differ only in one key and
// comparing their throughput. Used by `xrun compare` and the speedup chart of
// `xrun report`. Plain code over the store: no engine, no CUDA.
//
// Matching: two complete runs match when every flattened setting except the
// compared key (and the keys the experiment hash leaves out, as
// experiment_hash_excluded_keys(): store.path, description, train.device,
// store.label, data.path) is equal. Comparing by "device" means the card or
// CPU model (environment device_name), by "label" store.label, by "isa" the
// oneDNN ISA a CPU run's kernels used (environment onednn_isa: avx2,
// avx512_core_amx, ...), otherwise the setting of that dotted name; comparing
// by a setting, runs must also have the same label and device name (two
// machines' runs are never pooled), CPU runs the same ISA, and runs on
// file-backed data the same data (environment data_fingerprint: the content
// of the splits, engine/data/dataset.h's dataset_fingerprint).
// Several complete runs with the same settings and the same compared value
// pool their measured step times.
//
// Per cell: throughput = sum(images) / sum(step time) over the measured
// steps; the ratio to the baseline cell of its group with a 95% bootstrap
// interval (each side resampled with replacement, independently, at two
// levels: its runs, then each chosen run's steps, so disagreeing repeats
// widen the interval; the 2.5% and 97.5% percentiles of the resampled
// ratios). Per cell also its FLOP/s and share of the device's peak, from
// the figures its runs stored (schema 9's run_summary), and, comparing by
// train.ranks, the scaling efficiency: the ratio over the ranks' ratio.
#pragma once

#include <cstdint>
#include <limits>
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
  double throughput = 0;             // img/s (tok/s) over the pooled measured steps
  int64_t measured_steps = 0;
  int64_t peak_memory_bytes = 0;     // the largest of its runs'
  double ratio = 1;                  // throughput / baseline throughput
  double ratio_lo = 1, ratio_hi = 1; // 95% bootstrap interval of the ratio
  bool interval_includes_one = true; // no clear difference from the baseline
  bool is_baseline = false;          // (ratio and interval exactly 1)
  // FLOP/s at the cell's throughput (its runs' FLOPs per image x img/s), the
  // device's peak for the precision, and their ratio; NaN where its runs
  // stored no FLOP count or no peak.
  double achieved_flops = std::numeric_limits<double>::quiet_NaN();
  double peak_flops = std::numeric_limits<double>::quiet_NaN();
  double fraction_of_peak = std::numeric_limits<double>::quiet_NaN();
  // measure.target_accuracy of its runs (NaN: none) and the mean wall time to
  // it over those that reached it (NaN: none did), how many did.
  double target_accuracy = std::numeric_limits<double>::quiet_NaN();
  double time_to_target_s = std::numeric_limits<double>::quiet_NaN();
  int reached_target = 0;
  // By train.ranks: the scaling efficiency, throughput(N) / (N / B x
  // throughput(B)) against the baseline's B ranks (1 = perfect), with the
  // ratio's interval scaled alike; NaN by any other key.
  double scaling = std::numeric_limits<double>::quiet_NaN();
  double scaling_lo = std::numeric_limits<double>::quiet_NaN();
  double scaling_hi = std::numeric_limits<double>::quiet_NaN();
};

// Runs whose settings (other than the compared key) are all equal. Every
// group in a Comparison holds the baseline and at least one other value.
struct CompareGroup {
  std::string match_key;                        // hash of the shared settings
  std::map<std::string, std::string> settings;  // the settings that differ across groups
                                                // (plain text: fp16, 512; "" when unset),
                                                // with "label" and "device" when they do
  std::vector<CompareCell> cells;               // in the order of Comparison::values
};

// A complete run that takes no part: why, and its compared value ("" when
// it has none).
struct UnmatchedRun : store::RunInfo {
  std::string value;
  std::string reason;  // "no measured steps", "no other label with the same settings", ...
};

struct Comparison {
  std::string by;
  std::string baseline;
  std::vector<std::string> values;  // every value in a group, baseline first, then in
                                    // natural order (numbers numerically)
  std::vector<CompareGroup> groups; // ordered by their differing settings (natural order)
  std::vector<UnmatchedRun> unmatched;  // complete runs with no counterpart
  std::string throughput_label = "img/s";  // what the compared runs count (tok/s: GPT-2)
};

// Natural order of values: numbers numerically before any other text, other
// text with runs of digits compared as numbers ("run2" < "run10").
bool natural_less(const std::string& a, const std::string& b);

// Throws store::StoreError for store failures and std::invalid_argument for
// an empty or unknown --by key (the message lists the keys the runs have) or
// a baseline value no run has (the message lists the values). The default
// baseline is the first value, in natural order, that is matched with
// another; a store with no complete run gives a Comparison without groups.
Comparison compare_runs(const store::Store& db, const CompareOptions& options);

}  // namespace xrun::analysis
