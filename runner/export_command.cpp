// runner/export_command.cpp: `xrun export`: a table of the runs --where
// selects, as CSV or as a JSON array of objects, for pandas or a spreadsheet.
//   runs     one row per run: the columns of `xrun runs --format csv`, then
//            host, error, finished_at, one column per setting (run_params:
//            train.batch_size, ...) and one per environment field (env.driver,
//            ...); the union over the runs, empty where a run lacks one.
//   steps, epochs, evals, kernels, ranks
//            every row of that table for those runs, each led by its run's
//            uuid, label, experiment and device_name.
// NULL (NaN) is an empty CSV field and JSON null; numbers stay numbers.
// Rows are written as they are read, so millions of steps never sit in memory.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <set>

#include <nlohmann/json.hpp>

#include "runner/atomic_file.h"
#include "runner/commands.h"
#include "runner/output.h"
#include "store/store.h"
#include "store/table_rows.h"

namespace xrun::cli {
namespace {

using nlohmann::json;
using Row = std::vector<json>;
using Cells = std::vector<store::Cell>;

// The columns `xrun runs --format csv` prints, then host, error, finished_at,
// flops_per_step, peak_flops, peak_bytes_per_s, target_accuracy,
// time_to_target_s, best_accuracy, ranks, global_batch: all read from the
// run_summary view.
const std::vector<std::string> kRunColumns = {
    "id", "uuid", "experiment", "sweep_index", "status", "label", "device", "device_name",
    "batch_size", "precision", "cudnn_benchmark", "workers", "throughput", "step_ms_median",
    "step_ms_p10", "step_ms_p90", "peak_memory_bytes", "test_accuracy", "achieved_flops",
    "fraction_of_peak", "started_at", "host", "error", "finished_at", "flops_per_step",
    "peak_flops", "peak_bytes_per_s", "target_accuracy", "time_to_target_s", "best_accuracy",
    "ranks", "global_batch"};

// What leads each row of a per-run table: the run it belongs to.
const std::vector<std::string> kRunKeyColumns = {"uuid", "label", "experiment", "device_name"};

const std::set<std::string> kRunTables = {"steps", "epochs", "evals", "kernels", "ranks"};

std::string json_text(const json& v) {
  return v.dump(-1, ' ', false, json::error_handler_t::replace);
}

// A real number in the fewest digits (15 to 17) that read back to it, with
// ".0" on whole numbers so a reader still sees a real column.
std::string real_text(double v) {
  char buf[40];
  for (int digits = 15; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string text = buf;
  if (text.find_first_of(".eEn") == std::string::npos) text += ".0";
  return text;
}

// A value as JSON writes it, reals in their shortest form.
std::string value_text(const json& v) {
  return v.is_number_float() ? real_text(v.get<double>()) : json_text(v);
}

json cell_json(const store::Cell& cell) {
  if (const auto* i = std::get_if<int64_t>(&cell)) return *i;
  if (const auto* d = std::get_if<double>(&cell)) return number_or_null(*d);
  if (const auto* s = std::get_if<std::string>(&cell)) return *s;
  return nullptr;
}

// A key or text value read as text, whatever SQLite stored.
std::string cell_text(const store::Cell& cell) {
  if (const auto* s = std::get_if<std::string>(&cell)) return *s;
  const json v = cell_json(cell);
  return v.is_null() ? std::string() : value_text(v);
}

Row cells_json(const Cells& cells) {
  Row row;
  row.reserve(cells.size());
  for (const store::Cell& c : cells) row.push_back(cell_json(c));
  return row;
}

// --- Writers ------------------------------------------------------------------------

// Writes rows under a fixed list of columns, one at a time.
class RowWriter {
 public:
  virtual ~RowWriter() = default;
  virtual void row(const Row& values) = 0;
  virtual void finish() = 0;
};

// A header line, then RFC 4180 fields: NULL empty, text as is, numbers and
// other JSON values as JSON writes them.
class CsvWriter : public RowWriter {
 public:
  CsvWriter(std::ostream& out, const std::vector<std::string>& columns) : out_(out) {
    Row header(columns.begin(), columns.end());
    row(header);
  }
  void row(const Row& values) override {
    for (size_t i = 0; i < values.size(); ++i) {
      const json& v = values[i];
      out_ << (i ? "," : "")
           << (v.is_null() ? "" : csv_field(v.is_string() ? v.get<std::string>() : value_text(v)));
    }
    out_ << "\n";
  }
  void finish() override {}

 private:
  std::ostream& out_;
};

// A JSON array with one object per row, keys in column order.
class JsonWriter : public RowWriter {
 public:
  JsonWriter(std::ostream& out, const std::vector<std::string>& columns) : out_(out) {
    for (const std::string& c : columns) keys_.push_back(json_text(c) + ":");
    out_ << "[";
  }
  void row(const Row& values) override {
    out_ << (rows_++ ? ",\n" : "\n") << "{";
    for (size_t i = 0; i < values.size(); ++i)
      out_ << (i ? "," : "") << keys_[i] << value_text(values[i]);
    out_ << "}";
  }
  void finish() override { out_ << (rows_ ? "\n]\n" : "]\n"); }

 private:
  std::ostream& out_;
  std::vector<std::string> keys_;
  size_t rows_ = 0;
};

std::unique_ptr<RowWriter> make_writer(const std::string& format, std::ostream& out,
                                       const std::vector<std::string>& columns) {
  if (format == "json") return std::make_unique<JsonWriter>(out, columns);
  return std::make_unique<CsvWriter>(out, columns);
}

// --- Tables -------------------------------------------------------------------------

// One run's row of the runs table: its run_summary cells, settings and
// environment fields ("env." + key).
struct RunRow {
  Row summary;
  std::map<std::string, json> fields;
};

// A setting's plain value: the canonical JSON parsed (text that is not JSON
// stays text), so numbers stay numbers and strings lose their quotes.
json setting_value(const std::string& value_json) {
  json v = json::parse(value_json, nullptr, /*allow_exceptions=*/false);
  return v.is_discarded() ? json(value_json) : v;
}

RunRow read_run_row(const store::Store& db, int64_t id, std::set<std::string>& settings,
                    std::set<std::string>& environment) {
  RunRow r;
  store::for_each_row(db, "run_summary", kRunColumns, "id", id,
                      [&](const Cells& cells) { r.summary = cells_json(cells); });
  store::for_each_row(db, "run_params", {"key", "value_json"}, "run", id, [&](const Cells& c) {
    const std::string key = cell_text(c[0]);
    settings.insert(key);
    r.fields[key] = setting_value(cell_text(c[1]));
  });
  store::for_each_row(db, "run_environment", {"key", "value"}, "run", id, [&](const Cells& c) {
    const std::string key = "env." + cell_text(c[0]);
    environment.insert(key);
    r.fields[key] = cell_json(c[1]);
  });
  return r;
}

// One row per run; the columns are only known once every run is read, so
// the (few) runs are held, never their steps.
size_t export_runs(const store::Store& db, const std::vector<store::RunInfo>& runs,
                   const std::string& format, std::ostream& out) {
  std::set<std::string> settings, environment;
  std::vector<RunRow> rows;
  for (const store::RunInfo& r : runs)
    rows.push_back(read_run_row(db, r.id, settings, environment));
  std::vector<std::string> columns = kRunColumns;
  columns.insert(columns.end(), settings.begin(), settings.end());
  columns.insert(columns.end(), environment.begin(), environment.end());
  auto writer = make_writer(format, out, columns);
  for (RunRow& r : rows) {
    Row values = std::move(r.summary);
    for (size_t i = kRunColumns.size(); i < columns.size(); ++i) {
      auto it = r.fields.find(columns[i]);
      values.push_back(it == r.fields.end() ? json(nullptr) : it->second);
    }
    writer->row(values);
  }
  writer->finish();
  return rows.size();
}

// Every row of a per-run table for the runs, streamed; returns the count.
size_t export_run_table(const store::Store& db, const std::vector<store::RunInfo>& runs,
                        const std::string& table, const std::string& format, std::ostream& out) {
  std::vector<std::string> own;
  for (std::string& c : store::table_columns(db, table))
    if (c != "run") own.push_back(std::move(c));
  std::vector<std::string> columns = kRunKeyColumns;
  columns.insert(columns.end(), own.begin(), own.end());
  auto writer = make_writer(format, out, columns);
  size_t count = 0;
  for (const store::RunInfo& r : runs) {
    Row lead;
    store::for_each_row(db, "run_summary", kRunKeyColumns, "id", r.id,
                        [&](const Cells& cells) { lead = cells_json(cells); });
    store::for_each_row(db, table, own, "run", r.id, [&](const Cells& cells) {
      Row values = lead;
      for (const store::Cell& c : cells) values.push_back(cell_json(c));
      writer->row(values);
      ++count;
    });
  }
  writer->finish();
  return count;
}

size_t export_table(const store::Store& db, const std::vector<store::RunInfo>& runs,
                    const ExportArgs& args, std::ostream& out) {
  if (args.table == "runs") return export_runs(db, runs, args.format, out);
  return export_run_table(db, runs, args.table, args.format, out);
}

bool check_choices(const ExportArgs& args) {
  if (args.format != "csv" && args.format != "json") {
    std::cerr << "xrun: --format " << args.format << ": expected csv or json\n";
    return false;
  }
  if (args.table != "runs" && kRunTables.count(args.table) == 0) {
    std::cerr << "xrun: --table " << args.table << ": expected runs, steps, epochs, evals, kernels or ranks\n";
    return false;
  }
  return true;
}

// Writes the export to args.output (whole or not at all: an existing file
// keeps its bytes when an error stops the export) and says so.
int export_to_file(const store::Store& db, const std::vector<store::RunInfo>& runs,
                   const ExportArgs& args) {
  size_t rows = 0;
  try {
    AtomicFile file(args.output);
    rows = export_table(db, runs, args, file.stream());
    file.commit();
  } catch (const store::StoreError&) {
    throw;
  } catch (const std::runtime_error& e) {
    std::cerr << "xrun: " << e.what() << "\n";
    return kRunFailed;
  }
  std::cout << rows << " row(s) of " << args.table << " from " << runs.size()
            << " run(s) written to " << args.output << "\n";
  return kOk;
}

}  // namespace

int export_command(const ExportArgs& args) {
  Filters filters;
  if (!parse_where(args.where, filters) || !check_choices(args)) return kUsage;
  if (const std::string why = output_overwrites_store(args.output, args.db); !why.empty()) {
    std::cerr << "xrun: export: " << why << "\n";
    return kUsage;
  }
  try {
    std::unique_ptr<store::Store> db;
    if (!open_existing(args.db, db)) return kRunFailed;
    if (!check_where_keys(*db, filters)) return kUsage;
    const std::vector<store::RunInfo> runs = db->list_runs(filters);
    if (!args.output.empty() && args.output != "-") return export_to_file(*db, runs, args);
    export_table(*db, runs, args, std::cout);
    std::cout.flush();
    return std::cout ? kOk : kRunFailed;
  } catch (const store::StoreError& e) {
    std::cerr << "xrun: " << e.what() << "\n";
    return kRunFailed;
  }
}

}  // namespace xrun::cli
