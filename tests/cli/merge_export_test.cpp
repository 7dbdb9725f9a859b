// tests/cli/merge_export_test.cpp: `xrun merge` and `xrun export` as a user
// runs them, on stores written through the store API: merge output lines,
// exit codes and untouched outputs on errors; exports parsed back (CSV by a
// small RFC 4180 reader, JSON by nlohmann) and compared value by value with
// SQL on the same file; --where filtering; usage errors.
#include "catch2_compat.h"

#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <set>

#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "store/store.h"
#include "store/store_test_util.h"

using Catch::Contains;
using nlohmann::json;
using xrun_test::CliFixture;
using xrun_test::read_bytes;
using xrun_test::shell_quote;

namespace {

using Table = std::vector<std::vector<std::string>>;

// RFC 4180: comma-separated fields, a quoted field may hold commas, newlines
// and doubled quotes; each record ends with a newline.
Table parse_csv(const std::string& text) {
  Table rows;
  std::vector<std::string> row;
  std::string field;
  bool quoted = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        field += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      row.push_back(std::move(field));
      field.clear();
    } else if (c == '\n') {
      row.push_back(std::move(field));
      field.clear();
      rows.push_back(std::move(row));
      row.clear();
    } else {
      field += c;
    }
  }
  REQUIRE_FALSE(quoted);
  REQUIRE(field.empty());  // the last record ended with its newline
  return rows;
}

// The rows of a query, each an array of typed values: null, integer, real, text.
json sql_rows(const std::string& path, const std::string& query) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  INFO(query);
  const int prepared = sqlite3_prepare_v2(db, query.c_str(), -1, &st, nullptr);
  INFO(sqlite3_errmsg(db));
  REQUIRE(prepared == SQLITE_OK);
  json rows = json::array();
  while (sqlite3_step(st) == SQLITE_ROW) {
    json row = json::array();
    for (int c = 0; c < sqlite3_column_count(st); ++c) {
      switch (sqlite3_column_type(st, c)) {
        case SQLITE_NULL: row.push_back(nullptr); break;
        case SQLITE_INTEGER: row.push_back(sqlite3_column_int64(st, c)); break;
        case SQLITE_FLOAT: row.push_back(sqlite3_column_double(st, c)); break;
        default: row.push_back(reinterpret_cast<const char*>(sqlite3_column_text(st, c)));
      }
    }
    rows.push_back(row);
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  return rows;
}

std::vector<std::string> sql_list(const std::string& path, const std::string& query) {
  std::vector<std::string> out;
  for (const json& row : sql_rows(path, query)) out.push_back(row[0].get<std::string>());
  return out;
}

// A CSV field against a stored value: NULL is empty, text is itself, a
// number reads back to the same double.
bool same_cell(const std::string& csv, const json& stored) {
  if (stored.is_null()) return csv.empty();
  if (stored.is_string()) return csv == stored.get<std::string>();
  return !csv.empty() && std::stod(csv) == stored.get<double>();
}

std::vector<xrun::StepRecord> some_steps(int n, double base) {
  std::vector<xrun::StepRecord> steps(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    auto& s = steps[static_cast<size_t>(i)];
    s.step = i;
    s.kind = i < 2 ? xrun::StepKind::warmup : xrun::StepKind::measured;
    s.step_ms = base + i / 3.0;
    s.data_wait_ms = 0.1 * i;
    s.loss = i % 2 ? std::nan("") : 2.5 - 0.01 * i;
    s.lr = 0.1;
    s.images = 32;
  }
  return steps;
}

// A result file as a machine would leave it: `runs` runs labelled `label`,
// the first complete with steps, epochs and kernels, later ones failed; the
// last has a setting and an environment field the others lack.
std::vector<std::string> write_store(const std::string& path, const std::string& label, int runs,
                                     double base) {
  xrun::store::Store store(path);
  std::vector<std::string> uuids;
  for (int i = 0; i < runs; ++i) {
    auto run = store_test::make_run(i % 2 ? "fp32" : "fp16", 64 << i, label);
    run.params["name"] = "\"classic\"";  // a setting without a dot
    if (i == runs - 1) {
      run.params["train.note"] = "\"odd, \\\"quoted\\\"\"";
      run.environment.fields["special"] = "line one\nline two";
    }
    const std::string uuid = store.begin_run(run);
    store.write_steps(uuid, some_steps(7 + i, base + 10 * i));
    if (i == 0) {
      store.write_epoch(uuid, {0, 1.5, 1.25, 0.375, 10.0, 1.0, 224});
      store.write_epoch(uuid, {1, 1.25, std::nan(""), std::nan(""), 9.5, 0.0, 224});
      const std::vector<xrun::KernelRecord> kernels = {{"conv, fused\nbn", "forward", 8, base, 0.5, 2},
                                                       {"relu", "backward", 8, 0.1, 0.01, 0.02}};
      store.write_kernels(uuid, kernels);
      xrun::RunSummary summary;
      summary.measured_steps = 5;
      summary.throughput = 1000.0 / 3.0;
      summary.step_ms_median = base;
      summary.peak_memory_bytes = 21474836480LL;
      summary.test_accuracy = std::nan("");
      summary.measured_seconds = 5 * base / 1000.0;
      summary.flops_per_step = 4.25e9;
      summary.peak_flops = 2.5e12;
      summary.peak_bytes_per_s = 2.75e10;
      store.finish_run(uuid, xrun::store::RunStatus::complete, summary);
    } else {
      store.finish_run(uuid, xrun::store::RunStatus::failed, {}, "out of memory, \"really\"");
    }
    uuids.push_back(uuid);
  }
  return uuids;
}

// The columns `xrun export --table runs` starts with, as the README lists them.
const std::vector<std::string> kRunColumns = {
    "id", "uuid", "experiment", "sweep_index", "status", "label", "device", "device_name",
    "batch_size", "precision", "cudnn_benchmark", "workers", "throughput", "step_ms_median",
    "step_ms_p10", "step_ms_p90", "peak_memory_bytes", "test_accuracy", "achieved_flops",
    "fraction_of_peak", "started_at", "host", "error", "finished_at", "flops_per_step",
    "peak_flops", "peak_bytes_per_s", "target_accuracy", "time_to_target_s", "best_accuracy",
    "ranks", "global_batch"};
const std::vector<std::string> kLead = {"uuid", "label", "experiment", "device_name"};

// The expected header of a runs export: the run columns, then every setting
// and every environment field ("env.") any of the runs has, sorted.
std::vector<std::string> runs_header(const std::string& db) {
  std::vector<std::string> header = kRunColumns;
  for (const auto& k : sql_list(db, "SELECT DISTINCT key FROM run_params ORDER BY key"))
    header.push_back(k);
  for (const auto& k : sql_list(db, "SELECT DISTINCT 'env.' || key FROM run_environment ORDER BY 1"))
    header.push_back(k);
  return header;
}

// What the store holds for column `index` of a run's export row: a
// run_summary column, then settings (their JSON values), then "env." fields.
json stored_run_value(const std::string& db, const std::string& uuid,
                      const std::vector<std::string>& header, size_t index) {
  const std::string& column = header[index];
  const std::string run = "(SELECT id FROM runs WHERE uuid = '" + uuid + "')";
  if (index < kRunColumns.size()) {
    return sql_rows(db, "SELECT \"" + column + "\" FROM run_summary WHERE uuid = '" + uuid +
                            "'")[0][0];
  }
  if (column.rfind("env.", 0) == 0) {
    const json rows = sql_rows(db, "SELECT value FROM run_environment WHERE run = " + run +
                                       " AND key = '" + column.substr(4) + "'");
    return rows.empty() ? json(nullptr) : rows[0][0];
  }
  const json rows = sql_rows(db, "SELECT value_json FROM run_params WHERE run = " + run +
                                     " AND key = '" + column + "'");
  return rows.empty() ? json(nullptr) : json::parse(rows[0][0].get<std::string>());
}

// The columns a per-run table export has after the lead columns, and the SQL
// that reads the same rows in the same order.
std::vector<std::string> own_columns(const std::string& db, const std::string& table) {
  return sql_list(db, "SELECT name FROM pragma_table_info('" + table +
                          "') WHERE name != 'run' ORDER BY cid");
}

json stored_table(const std::string& db, const std::string& table) {
  std::string cols = "r.uuid, r.label, e.name, r.device_name";
  for (const auto& c : own_columns(db, table)) cols += ", t.\"" + c + "\"";
  const std::string order = table == "kernels" ? "t.rowid" : table == "steps" ? "t.step" : "t.epoch";
  return sql_rows(db, "SELECT " + cols + " FROM " + table +
                          " t JOIN runs r ON r.id = t.run JOIN experiments e ON e.id = r.experiment"
                          " ORDER BY r.id, " + order);
}

// A CSV setting value: a JSON string without its quotes, anything else as JSON.
bool same_setting(const std::string& csv, const json& stored) {
  if (stored.is_string() || stored.is_null()) return same_cell(csv, stored);
  if (stored.is_number()) return same_cell(csv, stored);
  return json::parse(csv) == stored;
}

}  // namespace

TEST_CASE("xrun merge: two machines' files into one, and merging again adds nothing", "[cli][merge]") {
  CliFixture f;
  const auto a = write_store(f.dir.file("a.db"), "gpu-box", 2, 100);
  const auto b = write_store(f.dir.file("b.db"), "cpu-box", 1, 900);
  auto r = f.xrun("merge --into all.db a.db b.db");
  REQUIRE(r.status == 0);
  CHECK_THAT(r.output, Contains("a.db: 2 run(s) added, 0 already present\n") &&
                           Contains("b.db: 1 run(s) added, 0 already present\n") &&
                           Contains("total: 3 run(s) added, 0 already present, from 2 file(s) into all.db"));
  auto listed = f.xrun("runs --db all.db --format json");
  REQUIRE(listed.status == 0);
  std::set<std::string> uuids;
  for (const json& run : json::parse(listed.output)) uuids.insert(run.at("uuid").get<std::string>());
  CHECK(uuids == std::set<std::string>{a[0], a[1], b[0]});
  CHECK(sql_rows(f.dir.file("all.db"), "SELECT count(*) FROM steps")[0][0] == 7 + 8 + 7);

  auto again = f.xrun("merge --into all.db b.db a.db");
  REQUIRE(again.status == 0);
  CHECK_THAT(again.output, Contains("b.db: 0 run(s) added, 1 already present\n") &&
                               Contains("a.db: 0 run(s) added, 2 already present\n") &&
                               Contains("total: 0 run(s) added, 3 already present"));
  CHECK(sql_rows(f.dir.file("all.db"), "SELECT count(*) FROM runs")[0][0] == 3);
}

TEST_CASE("xrun merge: a bad input exits 1, names the file, and leaves the output alone",
          "[cli][merge]") {
  CliFixture f;
  write_store(f.dir.file("a.db"), "gpu-box", 1, 100);
  write_store(f.dir.file("all.db"), "here", 1, 50);
  store_test::sql_exec(f.dir.file("shop.db"), "CREATE TABLE customers (id INTEGER PRIMARY KEY);");
  const std::string before = read_bytes(f.dir.file("all.db"));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"a.db nowhere.db", "nowhere.db: no such file"},
      {"a.db shop.db", "shop.db: an SQLite database but not an xrun store"},
      {"a.db all.db", "all.db: this is the store being merged into"}};
  for (const auto& [inputs, message] : cases) {
    auto r = f.xrun("merge --into all.db " + inputs);
    INFO(r.output);
    CHECK(r.status == 1);
    CHECK_THAT(r.output, Contains(message) && Contains("nothing was merged into all.db"));
    CHECK(read_bytes(f.dir.file("all.db")) == before);
  }
  CHECK(f.xrun("merge a.db").status == 2);               // no --into
  CHECK(f.xrun("merge --into all.db").status == 2);      // no input
  CHECK_FALSE(std::filesystem::exists(f.dir.file("nowhere.db")));
}

TEST_CASE("xrun export --table runs: CSV and JSON hold what the store holds", "[cli][export]") {
  CliFixture f;
  write_store(f.db(), "box, \"a\"", 3, 100);
  const std::vector<std::string> header = runs_header(f.db());
  REQUIRE(header.size() > kRunColumns.size() + 6);  // settings and env.* columns
  const auto uuids = sql_list(f.db(), "SELECT uuid FROM runs ORDER BY id");

  auto csv = f.xrun("export --db " + shell_quote(f.db()) + " --format csv");
  REQUIRE(csv.status == 0);
  const Table table = parse_csv(csv.output);
  REQUIRE(table.size() == 1 + uuids.size());
  CHECK(table[0] == header);
  for (size_t i = 1; i < table.size(); ++i) {
    REQUIRE(table[i].size() == header.size());
    CHECK(table[i][1] == uuids[i - 1]);
    for (size_t c = 0; c < header.size(); ++c) {
      INFO("run " << i << ", column " << header[c] << ": '" << table[i][c] << "'");
      CHECK(same_setting(table[i][c], stored_run_value(f.db(), uuids[i - 1], header, c)));
    }
  }
  // A setting only the last run has is empty for the others.
  const size_t note = static_cast<size_t>(
      std::find(header.begin(), header.end(), "train.note") - header.begin());
  REQUIRE(note < header.size());
  CHECK(table[1][note].empty());
  CHECK(table[3][note] == "odd, \"quoted\"");

  auto written = f.xrun("export --db " + shell_quote(f.db()) + " --format json -o runs.json");
  REQUIRE(written.status == 0);
  CHECK_THAT(written.output, Contains("3 row(s) of runs from 3 run(s) written to runs.json"));
  const json runs = json::parse(read_bytes(f.dir.file("runs.json")));
  REQUIRE(runs.size() == uuids.size());
  for (size_t i = 0; i < runs.size(); ++i) {
    REQUIRE(runs[i].size() == header.size());
    for (size_t c = 0; c < header.size(); ++c) {
      INFO("run " << i << ", column " << header[c]);
      CHECK(runs[i].at(header[c]) == stored_run_value(f.db(), uuids[i], header, c));
    }
  }
  CHECK(runs[0].at("train.batch_size").is_number());  // numbers stay numbers
  CHECK(runs[0].at("test_accuracy").is_null());       // NaN is null
  CHECK(runs[0].at("peak_memory_bytes") == 21474836480LL);
}

TEST_CASE("xrun export --table steps, epochs, kernels: every row, led by its run", "[cli][export]") {
  CliFixture f;
  write_store(f.db(), "gpu-box", 2, 100);
  write_store(f.dir.file("b.db"), "cpu-box", 2, 900);
  REQUIRE(f.xrun("merge --into " + shell_quote(f.db()) + " b.db").status == 0);
  for (const std::string table : {"steps", "epochs", "kernels"}) {
    INFO("table " << table);
    std::vector<std::string> header = kLead;
    for (const auto& c : own_columns(f.db(), table)) header.push_back(c);
    const json stored = stored_table(f.db(), table);
    REQUIRE(stored.size() > 1);

    auto csv = f.xrun("export --db " + shell_quote(f.db()) + " --table " + table +
                      " --format csv -o out.csv");
    REQUIRE(csv.status == 0);
    const Table rows = parse_csv(read_bytes(f.dir.file("out.csv")));
    REQUIRE(rows.size() == stored.size() + 1);
    CHECK(rows[0] == header);
    for (size_t i = 0; i < stored.size(); ++i) {
      REQUIRE(rows[i + 1].size() == header.size());
      for (size_t c = 0; c < header.size(); ++c) {
        INFO("row " << i << ", column " << header[c] << ": '" << rows[i + 1][c] << "'");
        CHECK(same_cell(rows[i + 1][c], stored[i][c]));
      }
    }

    auto js = f.xrun("export --db " + shell_quote(f.db()) + " --table " + table + " --format json");
    REQUIRE(js.status == 0);
    const json objects = json::parse(js.output);
    REQUIRE(objects.size() == stored.size());
    for (size_t i = 0; i < stored.size(); ++i) {
      REQUIRE(objects[i].size() == header.size());
      for (size_t c = 0; c < header.size(); ++c) {
        INFO("row " << i << ", column " << header[c]);
        CHECK(objects[i].at(header[c]) == stored[i][c]);
      }
    }
  }
}

TEST_CASE("xrun export --where: the runs `xrun runs --where` selects", "[cli][export]") {
  CliFixture f;
  write_store(f.db(), "gpu-box", 3, 100);
  write_store(f.dir.file("b.db"), "cpu-box", 2, 900);
  REQUIRE(f.xrun("merge --into " + shell_quote(f.db()) + " b.db").status == 0);
  const std::string db = " --db " + shell_quote(f.db());
  for (const std::string where : {"label=cpu-box", "train.precision=fp16", "status=failed"}) {
    INFO("--where " << where);
    std::set<std::string> listed;
    for (const json& run : json::parse(f.xrun("runs --format json --where " + where + db).output))
      listed.insert(run.at("uuid").get<std::string>());
    REQUIRE_FALSE(listed.empty());
    REQUIRE(listed.size() < 5);

    std::set<std::string> exported;
    for (const json& run : json::parse(f.xrun("export --format json --where " + where + db).output))
      exported.insert(run.at("uuid").get<std::string>());
    CHECK(exported == listed);

    const json steps = json::parse(f.xrun("export --table steps --format json --where " + where + db).output);
    size_t expected = 0;
    for (const std::string& uuid : listed)
      expected += sql_rows(f.db(), "SELECT count(*) FROM steps WHERE run = (SELECT id FROM runs"
                                   " WHERE uuid = '" + uuid + "')")[0][0].get<size_t>();
    CHECK(steps.size() == expected);
    for (const json& s : steps) CHECK(listed.count(s.at("uuid").get<std::string>()) == 1);
  }
  // Nothing selected: a header alone, an empty array.
  CHECK(parse_csv(f.xrun("export --format csv --where label=nobody" + db).output).size() == 1);
  CHECK(json::parse(f.xrun("export --format json --where label=nobody" + db).output).empty());
}

TEST_CASE("xrun export: usage errors exit 2, store and file errors exit 1", "[cli][export]") {
  CliFixture f;
  write_store(f.db(), "gpu-box", 1, 100);
  const std::string db = " --db " + shell_quote(f.db());
  auto table = f.xrun("export --table layers" + db);
  CHECK(table.status == 2);
  CHECK_THAT(table.output, Contains("--table") && Contains("layers"));
  CHECK(f.xrun("export --format xml" + db).status == 2);
  auto where = f.xrun("export --where nokey" + db);
  CHECK(where.status == 2);
  CHECK_THAT(where.output, Contains("--where nokey: expected KEY=VALUE"));

  auto missing = f.xrun("export --db nowhere.db -o out.csv");
  CHECK(missing.status == 1);
  CHECK_THAT(missing.output, Contains("no result store at nowhere.db"));
  CHECK_FALSE(std::filesystem::exists(f.dir.file("out.csv")));
  CHECK_FALSE(std::filesystem::exists(f.dir.file("nowhere.db")));

  auto unwritable = f.xrun("export" + db + " -o no/such/dir/out.csv");
  CHECK(unwritable.status == 1);
  CHECK_THAT(unwritable.output, Contains("cannot write no/such/dir/out.csv"));
}
