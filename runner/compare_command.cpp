// runner/compare_command.cpp: `xrun compare`: runs matched setting by
// setting (runner/compare.h), printed as an aligned table, a GitHub Markdown
// table, CSV or JSON. Runs that take no part are listed (on stderr for CSV).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "runner/commands.h"
#include "runner/compare.h"
#include "runner/output.h"

namespace xrun::cli {
namespace {

using analysis::CompareCell;
using analysis::CompareGroup;
using analysis::Comparison;
using analysis::CompareOptions;
using nlohmann::json;

constexpr const char* kNoClearDifference = "~";
constexpr const char* kLegend = "~ the interval includes 1: no clear difference from the baseline";

// Rows of text under a header, for the table and Markdown formats.
struct TextTable {
  std::vector<std::string> header;
  std::vector<bool> right_aligned;
  std::vector<std::vector<std::string>> rows;
};

std::vector<std::string> setting_keys(const Comparison& c) {
  std::vector<std::string> keys;
  for (const auto& [key, value] : c.groups.front().settings) keys.push_back(key);
  return keys;
}

std::string interval_text(const CompareCell& cell) {
  if (cell.is_baseline) return "baseline";
  return "[" + fixed(cell.ratio_lo, 3) + ", " + fixed(cell.ratio_hi, 3) + "]";
}

// "38%", "-" where not known.
std::string percent(double fraction) {
  return std::isfinite(fraction) ? fixed(100.0 * fraction, 0) + "%" : "-";
}

// "47.5 s", "47.5 s (2 of 3 runs)", "not reached", "-" (no target).
std::string target_text(const CompareCell& cell) {
  if (!std::isfinite(cell.target_accuracy)) return "-";
  if (cell.reached_target == 0) return "not reached";
  std::string text = fixed(cell.time_to_target_s, 1) + " s";
  if (static_cast<size_t>(cell.reached_target) < cell.run_uuids.size())
    text += " (" + std::to_string(cell.reached_target) + " of " +
            std::to_string(cell.run_uuids.size()) + " runs)";
  return text;
}

// With one group and a target accuracy: its values ranked by the time to it
// ("by time to 88%: 128 47.5 s, 64 50.7 s, 512 not reached").
void print_target_ranking(const Comparison& c) {
  if (c.groups.size() != 1) return;
  std::vector<const CompareCell*> cells;
  for (const CompareCell& cell : c.groups.front().cells)
    if (std::isfinite(cell.target_accuracy)) cells.push_back(&cell);
  if (cells.empty()) return;
  std::stable_sort(cells.begin(), cells.end(), [](const CompareCell* a, const CompareCell* b) {
    const bool ra = a->reached_target > 0, rb = b->reached_target > 0;
    if (ra != rb) return ra;
    return ra && a->time_to_target_s < b->time_to_target_s;
  });
  std::cout << "\nby time to " << fixed(100.0 * cells.front()->target_accuracy, 0) << "% test accuracy:";
  for (size_t i = 0; i < cells.size(); ++i)
    std::cout << (i ? ", " : " ") << terminal_text(cells[i]->value) << " " << target_text(*cells[i]);
  std::cout << "\n";
}

// By train.ranks: "87% [82%, 91%]" of perfect scaling.
std::string scaling_text(const CompareCell& cell) {
  if (!std::isfinite(cell.scaling)) return "-";
  if (cell.is_baseline) return percent(cell.scaling);
  return percent(cell.scaling) + " [" + percent(cell.scaling_lo) + ", " + percent(cell.scaling_hi) +
         "]";
}

// With one group (two cards, two precisions): each value against the
// baseline in a sentence, "RTX 4090 D: 1.41x the throughput of RTX 3090
// [1.38, 1.44]; 41% of its peak against 38%".
void print_sentences(const Comparison& c) {
  if (c.groups.size() != 1) return;
  const CompareGroup& g = c.groups.front();
  const CompareCell* base = nullptr;
  for (const CompareCell& cell : g.cells)
    if (cell.is_baseline) base = &cell;
  if (!base) return;
  std::cout << "\n";
  for (const CompareCell& cell : g.cells) {
    if (cell.is_baseline) continue;
    std::cout << terminal_text(cell.value) << ": " << fixed(cell.ratio, 2) << "x the throughput of "
              << terminal_text(base->value) << " " << interval_text(cell)
              << (cell.interval_includes_one ? " (no clear difference)"
                  : cell.ratio > 1       ? " (faster)"
                                         : " (slower)");
    if (std::isfinite(cell.fraction_of_peak) || std::isfinite(base->fraction_of_peak))
      std::cout << "; " << percent(cell.fraction_of_peak) << " of its peak against "
                << percent(base->fraction_of_peak);
    if (std::isfinite(cell.scaling))
      std::cout << "; scaling efficiency " << scaling_text(cell);
    std::cout << "\n";
  }
}

std::vector<std::string> cell_row(const CompareGroup& g, const CompareCell& cell, bool scaling) {
  std::vector<std::string> row;
  for (const auto& [key, value] : g.settings) row.push_back(value);
  row.insert(row.end(), {cell.value, std::to_string(cell.run_uuids.size()),
                         std::to_string(cell.measured_steps), fixed(cell.throughput, 1),
                         flops_text(cell.achieved_flops, "FLOP/s"), percent(cell.fraction_of_peak),
                         target_text(cell),
                         fixed(cell.ratio, 3), interval_text(cell),
                         !cell.is_baseline && cell.interval_includes_one ? kNoClearDifference : "",
                         mib(cell.peak_memory_bytes)});
  if (scaling) row.insert(row.end() - 1, scaling_text(cell));
  return row;
}

TextTable comparison_cells(const Comparison& c) {
  TextTable t;
  t.header = setting_keys(c);
  t.right_aligned.assign(t.header.size(), false);
  t.header.insert(t.header.end(), {c.by, "runs", "steps", c.throughput_label, "achieved", "of peak",
                                   "to target", "ratio", "95% interval", "", "peak memory"});
  t.right_aligned.insert(t.right_aligned.end(),
                         {false, true, true, true, true, true, true, true, false, false, true});
  const bool scaling = c.by == "train.ranks";
  if (scaling) {
    t.header.insert(t.header.end() - 1, "scaling");
    t.right_aligned.insert(t.right_aligned.end() - 1, true);
  }
  for (const CompareGroup& g : c.groups)
    for (const CompareCell& cell : g.cells) t.rows.push_back(cell_row(g, cell, scaling));
  return t;
}

// Every cell is stored text (settings, labels, device names, perhaps from a
// merged store) and goes to a terminal: control characters escaped.
TextTable comparison_table(const Comparison& c) {
  TextTable t = comparison_cells(c);
  for (std::string& h : t.header) h = terminal_text(h);
  for (auto& row : t.rows)
    for (std::string& cell : row) cell = terminal_text(cell);
  return t;
}

bool any_unclear(const Comparison& c) {
  for (const CompareGroup& g : c.groups)
    for (const CompareCell& cell : g.cells)
      if (!cell.is_baseline && cell.interval_includes_one) return true;
  return false;
}

std::string unmatched_line(const analysis::UnmatchedRun& u, const std::string& by) {
  return terminal_text("run " + std::to_string(u.id) + " " + u.uuid.substr(0, 8) + " " +
                       u.experiment + " #" + std::to_string(u.sweep_index) + " " + by + "=" +
                       u.value + ": " + u.reason);
}

// --- table ----------------------------------------------------------------------------

std::string padded(const std::string& s, size_t width, bool right) {
  const std::string fill(width > s.size() ? width - s.size() : 0, ' ');
  return right ? fill + s : s + fill;
}

void print_aligned(const TextTable& t, size_t setting_columns) {
  std::vector<size_t> width(t.header.size(), 0);
  for (size_t i = 0; i < width.size(); ++i) {
    width[i] = t.header[i].size();
    for (const auto& row : t.rows) width[i] = std::max(width[i], row[i].size());
  }
  auto print = [&](const std::vector<std::string>& row) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i)
      line += (i ? "  " : "") + padded(row[i], width[i], t.right_aligned[i]);
    line.erase(line.find_last_not_of(' ') + 1);
    std::cout << line << "\n";
  };
  print(t.header);
  const std::vector<std::string>* previous = nullptr;
  for (const auto& row : t.rows) {
    std::vector<std::string> shown = row;
    const bool same_group =
        previous && std::equal(row.begin(), row.begin() + setting_columns, previous->begin());
    if (same_group) std::fill(shown.begin(), shown.begin() + setting_columns, "");
    print(shown);
    previous = &row;
  }
}

void print_table(const Comparison& c, const CompareOptions& o) {
  std::cout << "by " << terminal_text(c.by) << ", baseline " << terminal_text(c.baseline)
            << ": throughput ratio to the baseline with its 95% bootstrap interval ("
            << o.bootstrap_samples << " resamples)\n\n";
  print_aligned(comparison_table(c), setting_keys(c).size());
  print_sentences(c);
  print_target_ranking(c);
  if (any_unclear(c)) std::cout << "\n" << kLegend << "\n";
  if (c.unmatched.empty()) return;
  std::cout << "\n" << c.unmatched.size() << " complete run(s) without a match:\n";
  for (const auto& u : c.unmatched) std::cout << "  " << unmatched_line(u, c.by) << "\n";
}

// --- markdown -------------------------------------------------------------------------

std::string markdown_cell(const std::string& s) {
  std::string out;
  for (char ch : s) out += ch == '|' ? std::string("\\|") : std::string(1, ch);
  return out;
}

void print_markdown_row(const std::vector<std::string>& row) {
  std::cout << "|";
  for (const std::string& cell : row) std::cout << " " << markdown_cell(cell) << " |";
  std::cout << "\n";
}

void print_markdown(const Comparison& c, const CompareOptions& o) {
  std::cout << "Throughput by `" << terminal_text(c.by) << "`, ratio to `"
            << terminal_text(c.baseline)
            << "` with its 95% bootstrap interval (" << o.bootstrap_samples
            << " resamples).\n\n";
  const TextTable t = comparison_table(c);
  print_markdown_row(t.header);
  std::cout << "|";
  for (bool right : t.right_aligned) std::cout << (right ? "---:|" : "---|");
  std::cout << "\n";
  for (const auto& row : t.rows) print_markdown_row(row);
  if (any_unclear(c)) std::cout << "\n" << kLegend << "\n";
  if (c.unmatched.empty()) return;
  std::cout << "\nComplete runs without a match:\n\n";
  for (const auto& u : c.unmatched) std::cout << "- " << markdown_cell(unmatched_line(u, c.by)) << "\n";
}

// --- csv and json ---------------------------------------------------------------------

std::string csv_number(double v) {
  const json j = number_or_null(v);
  return j.is_null() ? "" : json_text(j);
}

std::string joined_uuids(const CompareCell& cell) {
  std::string out;
  for (const std::string& uuid : cell.run_uuids) out += (out.empty() ? "" : " ") + uuid;
  return out;
}

std::vector<std::string> csv_row(size_t group_index, const CompareGroup& g,
                                 const CompareCell& cell) {
  std::vector<std::string> row = {std::to_string(group_index), g.match_key};
  for (const auto& [key, value] : g.settings) row.push_back(value);
  row.insert(row.end(), {cell.value, cell.is_baseline ? "true" : "false",
                         std::to_string(cell.run_uuids.size()),
                         std::to_string(cell.measured_steps), csv_number(cell.throughput),
                         csv_number(cell.achieved_flops), csv_number(cell.peak_flops),
                         csv_number(cell.fraction_of_peak), csv_number(cell.target_accuracy),
                         csv_number(cell.time_to_target_s), std::to_string(cell.reached_target),
                         csv_number(cell.ratio), csv_number(cell.ratio_lo),
                         csv_number(cell.ratio_hi), cell.interval_includes_one ? "true" : "false",
                         csv_number(cell.scaling), csv_number(cell.scaling_lo),
                         csv_number(cell.scaling_hi),
                         std::to_string(cell.peak_memory_bytes), joined_uuids(cell)});
  return row;
}

void print_csv_line(const std::vector<std::string>& fields) {
  for (size_t i = 0; i < fields.size(); ++i) std::cout << (i ? "," : "") << csv_field(fields[i]);
  std::cout << "\n";
}

void print_csv(const Comparison& c) {
  std::vector<std::string> header = {"group", "match_key"};
  for (const std::string& key : setting_keys(c)) header.push_back(key);
  header.insert(header.end(), {c.by, "baseline", "runs", "measured_steps", "throughput",
                               "achieved_flops", "peak_flops", "fraction_of_peak",
                               "target_accuracy", "time_to_target_s", "reached_target", "ratio",
                               "ratio_lo", "ratio_hi", "interval_includes_one", "scaling",
                               "scaling_lo", "scaling_hi", "peak_memory_bytes", "run_uuids"});
  print_csv_line(header);
  for (size_t g = 0; g < c.groups.size(); ++g)
    for (const CompareCell& cell : c.groups[g].cells) print_csv_line(csv_row(g, c.groups[g], cell));
  for (const auto& u : c.unmatched) std::cerr << "xrun: no match: " << unmatched_line(u, c.by) << "\n";
}

json cell_json(const CompareCell& cell) {
  return {{"value", cell.value},
          {"baseline", cell.is_baseline},
          {"run_uuids", cell.run_uuids},
          {"measured_steps", cell.measured_steps},
          {"throughput", number_or_null(cell.throughput)},
          {"achieved_flops", number_or_null(cell.achieved_flops)},
          {"peak_flops", number_or_null(cell.peak_flops)},
          {"fraction_of_peak", number_or_null(cell.fraction_of_peak)},
          {"target_accuracy", number_or_null(cell.target_accuracy)},
          {"time_to_target_s", number_or_null(cell.time_to_target_s)},
          {"reached_target", cell.reached_target},
          {"peak_memory_bytes", cell.peak_memory_bytes},
          {"ratio", number_or_null(cell.ratio)},
          {"ratio_lo", number_or_null(cell.ratio_lo)},
          {"ratio_hi", number_or_null(cell.ratio_hi)},
          {"interval_includes_one", cell.interval_includes_one},
          {"scaling", number_or_null(cell.scaling)},
          {"scaling_lo", number_or_null(cell.scaling_lo)},
          {"scaling_hi", number_or_null(cell.scaling_hi)}};
}

json comparison_json(const Comparison& c, const CompareOptions& o) {
  json groups = json::array();
  for (const CompareGroup& g : c.groups) {
    json cells = json::array();
    for (const CompareCell& cell : g.cells) cells.push_back(cell_json(cell));
    groups.push_back({{"match_key", g.match_key}, {"settings", g.settings}, {"cells", cells}});
  }
  json unmatched = json::array();
  for (const auto& u : c.unmatched) {
    json j = run_json(u);
    j["value"] = u.value;
    j["reason"] = u.reason;
    unmatched.push_back(j);
  }
  return {{"by", c.by},
          {"throughput_label", c.throughput_label},
          {"baseline", c.baseline},
          {"values", c.values},
          {"confidence", 0.95},
          {"bootstrap_samples", o.bootstrap_samples},
          {"seed", o.seed},
          {"groups", groups},
          {"unmatched", unmatched}};
}

// --- nothing to compare ---------------------------------------------------------------

void explain_nothing_to_compare(const Comparison& c, const CompareArgs& args) {
  std::cerr << "xrun: nothing to compare by " << args.by << " in " << args.db << ": ";
  if (c.unmatched.empty()) {
    std::cerr << "no complete run" << (args.where.empty() ? "" : " matches the --where filters")
              << "\n";
    return;
  }
  std::cerr << "no two complete runs with different " << args.by
            << " values have the same other settings\n";
  for (const auto& u : c.unmatched) std::cerr << "  " << unmatched_line(u, c.by) << "\n";
}

}  // namespace

int compare_command(const CompareArgs& args) {
  CompareOptions options;
  options.by = args.by;
  options.baseline = args.baseline;
  if (!parse_where(args.where, options.where)) return kUsage;
  try {
    std::unique_ptr<store::Store> db;
    if (!open_existing(args.db, db)) return kRunFailed;
    if (!check_where_keys(*db, options.where)) return kUsage;
    const Comparison c = analysis::compare_runs(*db, options);
    if (c.groups.empty()) {
      explain_nothing_to_compare(c, args);
      return kRunFailed;
    }
    if (args.format == "json")
      std::cout << json_text(comparison_json(c, options), 2) << "\n";
    else if (args.format == "csv")
      print_csv(c);
    else if (args.format == "markdown")
      print_markdown(c, options);
    else
      print_table(c, options);
    return kOk;
  } catch (const std::invalid_argument& e) {
    std::cerr << "xrun: " << args.db << ": " << e.what() << "\n";
    return kUsage;
  } catch (const store::StoreError& e) {
    std::cerr << "xrun: " << e.what() << "\n";
    return kRunFailed;
  }
}

}  // namespace xrun::cli
