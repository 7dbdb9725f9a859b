// runner/compare.cpp: see compare.h. Loads the complete runs (settings and
// measured steps), groups them by their settings without the compared key,
// picks the baseline, and computes each cell's throughput and its ratio to
// the baseline with a bootstrap interval.
#include "runner/compare.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "core/sha256.h"
#include "core/stats.h"
#include "runner/experiment.h"

namespace xrun::analysis {
namespace {

// One measured step: all the throughput and the bootstrap need.
struct Sample {
  double ms = 0;
  int64_t images = 0;
};

// A complete run as the comparison sees it.
struct Candidate {
  store::RunInfo info;
  std::map<std::string, std::string> settings;  // dotted key -> canonical JSON text
  std::optional<std::string> value;             // the compared key's value, plain text
  std::vector<Sample> steps;                    // measured steps only
  std::string isa;  // CPU runs: the oneDNN ISA their kernels used ("" otherwise)
  std::string data;  // the data's fingerprint (file-backed sources; "" for synthetic or older runs)
};

// Runs with equal settings (other than the compared key), by compared value.
struct Group {
  std::string match_key;
  std::map<std::string, std::string> shared;  // the settings they share (JSON text)
  std::map<std::string, std::vector<const Candidate*>> by_value;
};

// --- Values ---------------------------------------------------------------------------

// Plain text of a canonical JSON value: strings without quotes, anything
// else as JSON writes it ("512", "true", "null", "[0.9,0.999]").
std::string plain_text(const std::string& json_text) {
  const auto j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_string()) return j.get<std::string>();
  return json_text;
}

std::optional<double> as_number(const std::string& s) {
  if (s.empty() || std::isspace(static_cast<unsigned char>(s.front()))) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Compares the digit runs starting at a[i] and b[j] as numbers and moves
// past them; returns <0, 0 or >0.
int compare_digit_runs(const std::string& a, size_t& i, const std::string& b, size_t& j) {
  auto take = [](const std::string& s, size_t& k) {
    while (k < s.size() && s[k] == '0' && k + 1 < s.size() && is_digit(s[k + 1])) ++k;
    const size_t start = k;
    while (k < s.size() && is_digit(s[k])) ++k;
    return s.substr(start, k - start);
  };
  const std::string x = take(a, i), y = take(b, j);
  if (x.size() != y.size()) return x.size() < y.size() ? -1 : 1;
  return x.compare(y);
}

// Text with runs of digits compared as numbers ("run2" < "run10").
bool natural_text_less(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (is_digit(a[i]) && is_digit(b[j])) {
      if (const int c = compare_digit_runs(a, i, b, j); c != 0) return c < 0;
      continue;
    }
    if (a[i] != b[j]) return a[i] < b[j];
    ++i;
    ++j;
  }
  if ((i < a.size()) != (j < b.size())) return j < b.size();
  return a < b;  // equal but for leading zeros
}

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

template <typename Range>
std::vector<std::string> naturally_sorted(const Range& items) {
  std::vector<std::string> out(items.begin(), items.end());
  std::sort(out.begin(), out.end(), natural_less);
  return out;
}

// --- Loading runs ---------------------------------------------------------------------

// The measured steps that have a time and images (every one a trainer writes).
std::vector<Sample> measured_steps(const store::Store& db, const std::string& uuid) {
  std::vector<Sample> out;
  for (const StepRecord& s : db.get_steps(uuid))
    if (s.kind == StepKind::measured && std::isfinite(s.step_ms) && s.step_ms > 0 && s.images > 0)
      out.push_back({s.step_ms, s.images});
  return out;
}

std::optional<std::string> compared_value(const Candidate& run, const std::string& by) {
  if (by == "label") return run.info.label;
  if (by == "device") {
    if (run.info.device_name.empty()) return std::nullopt;
    return run.info.device_name;
  }
  if (by == "isa") {
    if (run.isa.empty()) return std::nullopt;
    return run.isa;
  }
  const auto it = run.settings.find(by);
  if (it == run.settings.end()) return std::nullopt;
  return plain_text(it->second);
}

std::vector<Candidate> load_complete_runs(const store::Store& db, const CompareOptions& options) {
  auto where = options.where;
  where.emplace_back("status", "complete");
  std::vector<Candidate> out;
  for (const store::RunInfo& info : db.list_runs(where)) {
    Candidate run;
    run.info = info;
    if (const auto detail = db.get_run(std::to_string(info.id))) {
      run.settings = detail->params;
      if (info.device == "cpu") run.isa = detail->environment.get("onednn_isa");
      run.data = detail->environment.get("data_fingerprint");
    }
    run.steps = measured_steps(db, info.uuid);
    run.value = compared_value(run, options.by);
    out.push_back(std::move(run));
  }
  return out;
}

// --by must name something a run has: label, device, or one of their settings.
void check_key(const std::vector<Candidate>& runs, const std::string& by) {
  if (by.empty()) throw std::invalid_argument("--by: give label, device, isa or a setting");
  if (by == "label" || by == "device" || by == "isa" || runs.empty()) return;
  std::set<std::string> keys;
  for (const Candidate& run : runs) {
    if (run.settings.count(by)) return;
    for (const auto& [key, value] : run.settings) keys.insert(key);
  }
  throw std::invalid_argument("--by " + by + ": no complete run has this key; the keys are: " +
                              joined({"label", "device", "isa"}) + ", " +
                              joined(std::vector<std::string>(keys.begin(), keys.end())));
}

// --- Grouping -------------------------------------------------------------------------

// What two runs must share: every setting but the compared key and the keys
// the experiment hash leaves out; comparing by a setting, also the label and
// the device name (runs of two machines are never pooled); and, for CPU
// runs compared by anything but the ISA, the oneDNN ISA their kernels used
// (a run capped by ONEDNN_MAX_CPU_ISA=AVX2 is never pooled with one on
// AVX-512 kernels of the same CPU); and the data's fingerprint where the run
// stored one.
std::map<std::string, std::string> shared_settings(const Candidate& run, const std::string& by) {
  std::map<std::string, std::string> out = run.settings;
  out.erase(by);
  for (const std::string& key : experiment_hash_excluded_keys()) out.erase(key);
  if (by != "label" && by != "device") {
    constexpr auto replace = nlohmann::json::error_handler_t::replace;  // stored bytes may be any
    out["label"] = nlohmann::json(run.info.label).dump(-1, ' ', false, replace);
    out["device"] = nlohmann::json(run.info.device_name).dump(-1, ' ', false, replace);
  }
  if (by != "isa" && !run.isa.empty())
    out["isa"] = nlohmann::json(run.isa).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  // The data itself: data.path is where it lies, not what it is (two text
  // files, two folders of IDX files); runs on other content never pool.
  if (!run.data.empty()) {
    std::string quoted = "\"";  // (built by appends: GCC 12 warns falsely on "x" + string&&)
    quoted += sha256_hex(run.data).substr(0, 16);
    quoted += '"';
    out["data"] = quoted;
  }
  return out;
}

std::string match_key(const std::map<std::string, std::string>& shared) {
  std::string text;
  for (const auto& [key, value] : shared) text += key + "=" + value + "\n";
  return fnv1a_hex(text);
}

std::vector<Group> group_runs(const std::vector<const Candidate*>& runs, const std::string& by) {
  std::map<std::string, Group> groups;
  for (const Candidate* run : runs) {
    auto shared = shared_settings(*run, by);
    const std::string key = match_key(shared);
    Group& g = groups[key];
    g.match_key = key;
    g.shared = std::move(shared);
    g.by_value[*run->value].push_back(run);
  }
  std::vector<Group> out;
  for (auto& [key, group] : groups) out.push_back(std::move(group));
  return out;
}

// The keys whose value (or presence) is not the same in every group.
std::vector<std::string> differing_keys(const std::vector<Group>& groups) {
  std::set<std::string> all;
  for (const Group& g : groups)
    for (const auto& [key, value] : g.shared) all.insert(key);
  std::vector<std::string> out;
  for (const std::string& key : all) {
    std::set<std::optional<std::string>> seen;
    for (const Group& g : groups) {
      const auto it = g.shared.find(key);
      seen.insert(it == g.shared.end() ? std::nullopt : std::optional(it->second));
    }
    if (seen.size() > 1) out.push_back(key);
  }
  return out;
}

std::map<std::string, std::string> displayed_settings(const Group& g,
                                                      const std::vector<std::string>& keys) {
  std::map<std::string, std::string> out;
  for (const std::string& key : keys) {
    const auto it = g.shared.find(key);
    out[key] = it == g.shared.end() ? "" : plain_text(it->second);
  }
  return out;
}

bool settings_less(const CompareGroup& a, const CompareGroup& b) {
  for (const auto& [key, value] : a.settings) {
    const std::string& other = b.settings.at(key);
    if (value != other) return natural_less(value, other);
  }
  return a.match_key < b.match_key;
}

// --- Baseline -------------------------------------------------------------------------

// The requested baseline, or the first value (natural order) matched with
// another, or the first value of all.
std::string choose_baseline(const std::vector<Group>& groups, const std::string& requested,
                            const std::string& by) {
  std::set<std::string> all, matched;
  for (const Group& g : groups)
    for (const auto& [value, runs] : g.by_value) {
      all.insert(value);
      if (g.by_value.size() > 1) matched.insert(value);
    }
  if (!requested.empty()) {
    if (all.empty() || all.count(requested)) return requested;
    throw std::invalid_argument("--baseline " + requested + ": no complete run has " + by + " = " +
                                requested + "; the values are: " + joined(naturally_sorted(all)));
  }
  const auto& pool = matched.empty() ? all : matched;
  return pool.empty() ? "" : naturally_sorted(pool).front();
}

// --- Throughput and the bootstrap ------------------------------------------------------

// Images per second over the steps.
double throughput(const std::vector<Sample>& steps) {
  double ms = 0, images = 0;
  for (const Sample& s : steps) {
    ms += s.ms;
    images += static_cast<double>(s.images);
  }
  return 1000.0 * images / ms;
}

// A cell's measured steps, run by run (repeats of the same settings).
using RunSteps = std::vector<std::vector<Sample>>;

// The throughput of one two-level resample, with replacement: as many runs
// as the cell has, then each chosen run's steps, so that with repeats the
// interval also covers how much runs differ from one another (with one run
// it is a resample of its steps). rng() % n has a bias of n / 2^64: none
// worth a word, and portable, unlike the standard distributions.
double resampled_throughput(const RunSteps& runs, std::mt19937_64& rng) {
  double ms = 0, images = 0;
  for (size_t r = 0; r < runs.size(); ++r) {
    const std::vector<Sample>& steps = runs[runs.size() == 1 ? 0 : rng() % runs.size()];
    for (size_t k = 0; k < steps.size(); ++k) {
      const Sample& s = steps[rng() % steps.size()];
      ms += s.ms;
      images += static_cast<double>(s.images);
    }
  }
  return 1000.0 * images / ms;
}

// The generator of one cell: the seed and the cell's identity, so that a
// cell's interval does not depend on which other runs the store holds.
std::mt19937_64 cell_rng(uint64_t seed, const std::string& match_key, const std::string& value) {
  const uint64_t cell = std::stoull(fnv1a_hex(match_key + "\n" + value), nullptr, 16);
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
                    static_cast<uint32_t>(cell), static_cast<uint32_t>(cell >> 32)};
  return std::mt19937_64(seq);
}

void set_ratio(CompareCell& cell, const RunSteps& steps, const RunSteps& baseline_steps,
               double baseline_throughput, const CompareOptions& options,
               std::mt19937_64 rng) {
  cell.ratio = cell.throughput / baseline_throughput;
  std::vector<double> ratios(static_cast<size_t>(options.bootstrap_samples));
  for (double& r : ratios)
    r = resampled_throughput(steps, rng) / resampled_throughput(baseline_steps, rng);
  std::sort(ratios.begin(), ratios.end());
  cell.ratio_lo = quantile_of_sorted(ratios, 0.025);
  cell.ratio_hi = quantile_of_sorted(ratios, 0.975);
  cell.interval_includes_one = cell.ratio_lo <= 1.0 && 1.0 <= cell.ratio_hi;
}

// --- Cells and groups -------------------------------------------------------------------

std::vector<Sample> pooled_steps(const std::vector<const Candidate*>& runs) {
  std::vector<Sample> out;
  for (const Candidate* run : runs) out.insert(out.end(), run->steps.begin(), run->steps.end());
  return out;
}

// Most units one run's steps are resampled in. A run of more steps is
// resampled in blocks of consecutive steps (a block's time and images the
// sums of its steps'), at most this many blocks: the work of the bootstrap
// is bounded by it (two runs of 1M steps took 40 s at 2000 resamples, now
// well under a second), throughput (a ratio of sums) is unchanged, and the
// resampled sums keep the variance of the steps' for independent steps
// (block bootstrap; with correlated step times, a better estimate). Runs up
// to this size are resampled step by step, as before.
constexpr size_t kMaxResampledUnits = 10000;

std::vector<Sample> in_blocks(const std::vector<Sample>& steps) {
  if (steps.size() <= kMaxResampledUnits) return steps;
  const size_t per_block = (steps.size() + kMaxResampledUnits - 1) / kMaxResampledUnits;
  std::vector<Sample> blocks;
  blocks.reserve(kMaxResampledUnits);
  for (size_t i = 0; i < steps.size(); i += per_block) {
    Sample b = steps[i];
    for (size_t k = i + 1; k < std::min(steps.size(), i + per_block); ++k) {
      b.ms += steps[k].ms;
      b.images += steps[k].images;
    }
    blocks.push_back(b);
  }
  return blocks;
}

RunSteps run_steps(const std::vector<const Candidate*>& runs) {
  RunSteps out;
  for (const Candidate* run : runs) out.push_back(in_blocks(run->steps));
  return out;
}

CompareCell make_cell(const std::string& value, const std::vector<const Candidate*>& runs,
                      const std::vector<Sample>& steps) {
  CompareCell cell;
  cell.value = value;
  for (const Candidate* run : runs) {
    cell.run_uuids.push_back(run->info.uuid);
    cell.peak_memory_bytes = std::max(cell.peak_memory_bytes, run->info.peak_memory_bytes);
  }
  cell.measured_steps = static_cast<int64_t>(steps.size());
  cell.throughput = throughput(steps);
  // A cell's runs share every setting, so one FLOP count per image: the
  // ratio of a run's FLOP/s to its img/s over the same measured steps.
  for (const Candidate* run : runs) {
    const store::RunInfo& r = run->info;
    if (std::isnan(cell.achieved_flops) && std::isfinite(r.achieved_flops) && r.throughput > 0)
      cell.achieved_flops = r.achieved_flops / r.throughput * cell.throughput;
    if (std::isnan(cell.peak_flops) && r.peak_flops > 0) cell.peak_flops = r.peak_flops;
  }
  cell.fraction_of_peak = cell.achieved_flops / cell.peak_flops;
  // Runs of one cell share their settings, measure.target_accuracy among them.
  double to_target = 0;
  for (const Candidate* run : runs) {
    const store::RunInfo& r = run->info;
    if (std::isfinite(r.target_accuracy)) cell.target_accuracy = r.target_accuracy;
    if (std::isfinite(r.time_to_target_s)) to_target += r.time_to_target_s, ++cell.reached_target;
  }
  if (cell.reached_target > 0) cell.time_to_target_s = to_target / cell.reached_target;
  return cell;
}

// Comparing by train.ranks: N ranks against the baseline's B give
// throughput(N) / throughput(B) = ratio; perfect scaling would be N / B.
void set_scaling(CompareCell& cell, const std::string& baseline) {
  const auto whole = [](const std::string& text, int& out) {
    char* end = nullptr;
    const long v = std::strtol(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || v <= 0 || v > 1 << 20) return false;
    out = static_cast<int>(v);
    return true;
  };
  int n = 0, b = 0;
  if (!whole(cell.value, n) || !whole(baseline, b)) return;
  const double k = static_cast<double>(b) / n;
  cell.scaling = cell.ratio * k;
  cell.scaling_lo = cell.ratio_lo * k;
  cell.scaling_hi = cell.ratio_hi * k;
}

CompareGroup compare_group(const Group& g, const std::vector<std::string>& values,
                           const std::vector<std::string>& shown_keys,
                           const CompareOptions& options) {
  CompareGroup out;
  out.match_key = g.match_key;
  out.settings = displayed_settings(g, shown_keys);
  const std::string& baseline = values.front();
  const std::vector<const Candidate*>& baseline_runs = g.by_value.at(baseline);
  const double baseline_throughput = throughput(pooled_steps(baseline_runs));
  const RunSteps baseline_steps = run_steps(baseline_runs);
  for (const std::string& value : values) {
    const auto it = g.by_value.find(value);
    if (it == g.by_value.end()) continue;
    const std::vector<Sample> steps = pooled_steps(it->second);
    CompareCell cell = make_cell(value, it->second, steps);
    cell.is_baseline = value == baseline;
    if (!cell.is_baseline)
      set_ratio(cell, run_steps(it->second), baseline_steps, baseline_throughput, options,
                cell_rng(options.seed, g.match_key, value));
    if (options.by == "train.ranks") set_scaling(cell, baseline);
    out.cells.push_back(std::move(cell));
  }
  return out;
}

void add_unmatched(Comparison& out, const Candidate& run, const std::string& reason) {
  out.unmatched.push_back({run.info, run.value.value_or(""), reason});
}

// Why the runs of a group without a comparison take no part.
std::string unmatched_reason(const Group& g, const Comparison& c) {
  if (g.by_value.size() < 2) return "no run with another " + c.by + " has the same settings";
  return "no " + c.by + " = " + c.baseline + " run has the same settings";
}

// Values in a group with the baseline, baseline first, the rest in natural order.
std::vector<std::string> compared_values(const std::vector<const Group*>& compared,
                                         const std::string& baseline) {
  std::set<std::string> others;
  for (const Group* g : compared)
    for (const auto& [value, runs] : g->by_value)
      if (value != baseline) others.insert(value);
  std::vector<std::string> out = {baseline};
  for (const std::string& v : naturally_sorted(others)) out.push_back(v);
  return out;
}

// The groups with the baseline and another value; the runs of the others
// go to the unmatched.
std::vector<const Group*> groups_with_baseline(const std::vector<Group>& groups, Comparison& out) {
  std::vector<const Group*> compared;
  for (const Group& g : groups) {
    if (g.by_value.size() > 1 && g.by_value.count(out.baseline)) {
      compared.push_back(&g);
      continue;
    }
    for (const auto& [value, members] : g.by_value)
      for (const Candidate* run : members) add_unmatched(out, *run, unmatched_reason(g, out));
  }
  return compared;
}

// Runs that cannot take part: no measured steps, or no value of the key.
std::vector<const Candidate*> taking_part(const std::vector<Candidate>& runs, Comparison& out) {
  std::vector<const Candidate*> kept;
  for (const Candidate& run : runs) {
    if (run.steps.empty())
      add_unmatched(out, run, "no measured steps");
    else if (!run.value)
      add_unmatched(out, run,
                    out.by == "device" ? "no device name stored"
                    : out.by == "isa"  ? "not a CPU run with a stored oneDNN ISA"
                                       : "no " + out.by + " setting");
    else
      kept.push_back(&run);
  }
  return kept;
}

}  // namespace

bool natural_less(const std::string& a, const std::string& b) {
  const auto x = as_number(a), y = as_number(b);
  if (x && y) return *x != *y ? *x < *y : a < b;
  if (x || y) return x.has_value();  // numbers first
  return natural_text_less(a, b);
}

Comparison compare_runs(const store::Store& db, const CompareOptions& options) {
  if (options.bootstrap_samples < 1)
    throw std::invalid_argument("bootstrap_samples: at least 1, not " +
                                std::to_string(options.bootstrap_samples));
  const std::vector<Candidate> runs = load_complete_runs(db, options);
  check_key(runs, options.by);
  Comparison out;
  out.by = options.by;
  const std::vector<Group> groups = group_runs(taking_part(runs, out), options.by);
  out.baseline = choose_baseline(groups, options.baseline, options.by);

  const std::vector<const Group*> compared = groups_with_baseline(groups, out);
  if (!compared.empty()) out.values = compared_values(compared, out.baseline);
  const std::vector<std::string> shown_keys = differing_keys(groups);
  std::vector<const store::RunInfo*> infos;
  for (const Group* g : compared) {
    out.groups.push_back(compare_group(*g, out.values, shown_keys, options));
    for (const auto& [value, members] : g->by_value)
      for (const Candidate* c : members) infos.push_back(&c->info);
  }
  out.throughput_label = store::throughput_label(infos);
  std::sort(out.groups.begin(), out.groups.end(), settings_less);
  std::sort(out.unmatched.begin(), out.unmatched.end(),
            [](const UnmatchedRun& a, const UnmatchedRun& b) { return a.id < b.id; });
  return out;
}

}  // namespace xrun::analysis
