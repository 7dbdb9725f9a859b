// tests/store/merge_test.cpp: merge_stores on real store files: runs from two
// machines arrive with every row of every per-run table under the right run,
// ids are assigned anew and experiments matched; merging twice adds nothing;
// the convolution cache keeps the newer entry; older-version inputs are
// migrated without their bytes changing; bad inputs leave the output as it was.
#include "catch2_compat.h"

#include <stdlib.h>

#include <filesystem>
#include <set>

#include "store/merge.h"
#include "store/schema.h"
#include "store/store.h"
#include "store_test_util.h"

using namespace xrun;
using namespace xrun::store;
using store_test::make_run;
using store_test::sql_exec;
using store_test::sql_int;
using store_test::sql_text;
using store_test::TempDir;
using xrun_test::read_bytes;

namespace {

// Tables with a `run` column, as SQLite lists them in `path`.
std::vector<std::string> per_run_tables(const std::string& path) {
  const std::string list = sql_text(
      path,
      "SELECT group_concat(name, ' ') FROM (SELECT m.name FROM sqlite_master m"
      " WHERE m.type = 'table' AND EXISTS (SELECT 1 FROM pragma_table_info(m.name) p"
      " WHERE p.name = 'run') ORDER BY m.name)");
  std::vector<std::string> out;
  size_t start = 0;
  while (start < list.size()) {
    size_t end = list.find(' ', start);
    if (end == std::string::npos) end = list.size();
    out.push_back(list.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// Every row of `table` for the run `uuid` (where `key` is its id), the
// columns not in `excluded` as SQL literals (quote()), one sorted line per
// row: equal when the rows are.
std::string rows_of(const std::string& path, const std::string& table, const std::string& uuid,
                    const std::string& key = "run", const std::string& excluded = "'run'") {
  const std::string expr = sql_text(
      path, "SELECT group_concat('quote(\"' || name || '\")', ' || ''|'' || ') FROM"
            " pragma_table_info('" + table + "') WHERE name NOT IN (" + excluded + ")");
  REQUIRE_FALSE(expr.empty());
  return sql_text(path, "SELECT group_concat(line, char(10)) FROM (SELECT " + expr +
                            " AS line FROM \"" + table + "\" WHERE " + key +
                            " = (SELECT id FROM runs WHERE uuid = '" + uuid +
                            "') ORDER BY line)");
}

long long count_rows(const std::string& path, const std::string& table) {
  return sql_int(path, "SELECT count(*) FROM \"" + table + "\"");
}

std::vector<StepRecord> steps_for(int n, double base) {
  std::vector<StepRecord> steps;
  for (int i = 0; i < n; ++i) {
    StepRecord s;
    s.step = i;
    s.epoch = i / 4;
    s.kind = i == 0 ? StepKind::warmup : StepKind::measured;
    s.step_ms = base + i;
    s.data_wait_ms = 0.5 * i;
    s.loss = i % 3 == 0 ? std::nan("") : 2.0 - 0.1 * i;
    s.lr = 1e-3;
    s.loss_scale = 1024;
    s.images = 64;
    steps.push_back(s);
  }
  return steps;
}

// A run with rows in every per-run table. Kernels and phases are written out
// of name order, so a copy that followed an index instead of insertion order
// would show.
std::string full_run(Store& store, NewRun run, double base, const std::string& device_key) {
  const std::string uuid = store.begin_run(run);
  store.write_steps(uuid, steps_for(9, base));
  store.write_epoch(uuid, {0, 1.5, 1.25, 0.5, 10.0, 1.0, 576});
  store.write_epoch(uuid, {1, 1.25, std::nan(""), std::nan(""), 9.5, 0.0, 576});
  store.write_eval(uuid, {4, 0, 288, 10.0 + base, 1.0, 1.25, 0.5});
  store.write_eval(uuid, {9, 1, 576, 20.5 + base, 1.0, std::nan(""), std::nan("")});
  const std::vector<LayerCostRecord> costs = {{"conv1", "forward", 1e9 * base, 2e7},
                                              {"conv1", "backward_weights", 1e9, 2e7}};
  store.write_layer_costs(uuid, costs);
  const std::vector<PhaseRecord> phases = {{"forward", 8, base, base / 2}, {"backward", 8, 2 * base, base},
                                           {"data_wait", 8, 0.5, 0}};
  store.write_phases(uuid, phases);
  const std::vector<KernelRecord> kernels = {{"z_conv", "forward", 8, base, 0.5, 2.0},
                                             {"a_bn", "forward", 8, 1.5, 0.1, 0.3},
                                             {"m_relu, inplace", "backward", 8, 0.75, 0.05, 0.1}};
  store.write_kernels(uuid, kernels);
  const std::vector<MemcpyRecord> copies = {{"h2d", "pinned", 8, 1 << 20, 0.8}};
  store.write_memcpy(uuid, copies);
  const std::vector<MemoryRecord> memory = {{"parameters", 46 << 20}, {"activations", 900 << 20}};
  store.write_memory(uuid, memory);
  std::vector<ConvAlgoRecord> algos(2);
  algos[0] = {"conv1", "forward", "k-conv1-" + device_key, "IMPLICIT_GEMM", "benchmark", {1, 0, 4096, 0.25}};
  algos[1] = {"conv1", "backward_data", "k-conv1-bd", "ALGO_0", "heuristic", {0, 1, 0, std::nan("")}};
  store.write_conv_algorithms(uuid, algos, device_key);
  const std::vector<FindingRecord> findings = {{"data_wait", "the loader is slow", 0.25}};
  store.write_findings(uuid, findings);
  const std::vector<TraceEvent> trace = {{"host", "step", 0, 1000, 3, 0, 0},
                                         {"host", "forward", 10, 400, -1, 1, 7}};
  store.write_trace(uuid, trace);
  const std::vector<RankRecord> ranks = {
      {0, "node-a", "cpu (cores 0-3)", base, 0.5, 12.0, 4.5e7, 3.75e9},
      {1, "node-b", "cpu (cores 4-7)", base + 1, 0.25, 11.0, 4.5e7, std::nan("")}};
  store.write_ranks(uuid, ranks);
  RunSummary summary;
  summary.measured_steps = 8;
  summary.throughput = 1000.0 / base;
  summary.test_accuracy = std::nan("");
  store.finish_run(uuid, RunStatus::complete, summary);
  return uuid;
}

NewRun cpu_run(const std::string& experiment, const std::string& label) {
  NewRun r = make_run("fp32", 64, label);
  r.experiment = experiment;
  r.device = "cpu";
  r.environment.fields = {{"device_name", "AMD EPYC 9654"}, {"cpu", "AMD EPYC 9654"},
                          {"onednn", "3.5"}, {"cores", "96"}};
  return r;
}

// Two result files as two machines would leave them, and their run UUIDs.
struct TwoMachines {
  TempDir tmp;
  std::string a = tmp.file("gpu-box.db"), b = tmp.file("cpu-box.db");
  std::vector<std::string> uuids_a, uuids_b;
  TwoMachines() {
    {
      Store store(a);
      uuids_a.push_back(full_run(store, make_run("fp16", 512, "gpu-box"), 200, "4090|550|9.1"));
      const std::string failed = store.begin_run(make_run("fp32", 256, "gpu-box"));
      store.write_steps(failed, steps_for(2, 300));
      store.finish_run(failed, RunStatus::failed, {}, "out of memory, at step 2");
      uuids_a.push_back(failed);
    }
    {
      Store store(b);
      uuids_b.push_back(full_run(store, cpu_run("classic", "cpu-box"), 900, "cpu"));
      uuids_b.push_back(full_run(store, cpu_run("other", "cpu-box"), 950, "cpu"));
    }
  }
};

}  // namespace

TEST_CASE("merge: runs of two machines arrive with every row of every per-run table",
          "[store][merge]") {
  TwoMachines m;
  const std::string out = m.tmp.file("all.db");
  std::string own;
  {
    Store store(out);  // the output has a run of its own, so ids must move
    own = store.begin_run(make_run("bf16", 128, "here"));
  }
  const auto tables = per_run_tables(out);
  std::map<std::string, long long> before;
  for (const auto& t : tables) before[t] = count_rows(out, t);

  const auto counts = merge_stores(out, {m.a, m.b});
  REQUIRE(counts.size() == 2);
  CHECK(counts[0].input == m.a);
  CHECK(counts[0].added == 2);
  CHECK(counts[0].already_present == 0);
  CHECK(counts[1].input == m.b);
  CHECK(counts[1].added == 2);
  CHECK(counts[1].already_present == 0);

  // Every per-run table: the inputs' rows all arrived, and the fixture put
  // rows in each (a table added later without fixture rows fails here).
  for (const auto& t : tables) {
    INFO("table " << t);
    const long long in_inputs = count_rows(m.a, t) + count_rows(m.b, t);
    CHECK(in_inputs > 0);
    CHECK(count_rows(out, t) == before[t] + in_inputs);
  }
  // ... under the right run, with the same values.
  for (const auto& [file, uuids] : {std::pair{m.a, m.uuids_a}, std::pair{m.b, m.uuids_b}}) {
    for (const std::string& uuid : uuids) {
      INFO("run " << uuid);
      for (const auto& t : tables) {
        INFO("table " << t);
        CHECK(rows_of(out, t, uuid) == rows_of(file, t, uuid));
      }
      // The runs row: every column but the two integer ids; the experiment
      // by name and file.
      CHECK(rows_of(out, "runs", uuid, "id", "'id', 'experiment'") ==
            rows_of(file, "runs", uuid, "id", "'id', 'experiment'"));
      const std::string experiment =
          "SELECT e.name || '|' || e.file FROM runs r JOIN experiments e ON e.id = r.experiment"
          " WHERE r.uuid = '" + uuid + "'";
      CHECK(sql_text(out, experiment) == sql_text(file, experiment));
    }
  }
  // Ids are the output's: its own run keeps 1, merged runs follow in order.
  CHECK(sql_int(out, "SELECT id FROM runs WHERE uuid = '" + own + "'") == 1);
  CHECK(sql_int(out, "SELECT id FROM runs WHERE uuid = '" + m.uuids_a[0] + "'") == 2);
  CHECK(sql_int(out, "SELECT id FROM runs WHERE uuid = '" + m.uuids_b[1] + "'") == 5);
  // Experiments by (name, file): "classic" is shared by all three files.
  CHECK(count_rows(out, "experiments") == 2);
  // The cache holds both machines' timed choices.
  CHECK(sql_text(out, "SELECT group_concat(device_key, ',') FROM (SELECT device_key FROM"
                      " conv_algo_cache ORDER BY device_key)") == "4090|550|9.1,cpu");

  // Read back through the Store: summary view and insertion order intact.
  Store merged(out);
  const auto runs = merged.list_runs({{"label", "cpu-box"}});
  REQUIRE(runs.size() == 2);
  CHECK(runs[0].device_name == "AMD EPYC 9654");
  CHECK(runs[1].experiment == "other");
  const auto copied = merged.get_run(m.uuids_a[0]);
  const auto original = Store(m.a).get_run(m.uuids_a[0]);
  REQUIRE(copied);
  REQUIRE(original);
  REQUIRE(copied->kernels.size() == 3);
  for (size_t i = 0; i < 3; ++i) CHECK(copied->kernels[i].name == original->kernels[i].name);
  CHECK(copied->kernels[0].name == "z_conv");
  CHECK(copied->phases[1].phase == "backward");
  CHECK(copied->info.throughput == Approx(5.0));
  CHECK(merged.get_steps(m.uuids_a[1]).size() == 2);
  CHECK(merged.get_run(m.uuids_a[1])->info.error == "out of memory, at step 2");
}

TEST_CASE("merge: only experiments, runs, conv_algo_cache and cpu_peaks lack a run column",
          "[store][merge]") {
  // Every other table is copied as a run's child; a new table without a
  // `run` column would need merge_stores to learn how to merge it.
  TempDir tmp;
  const std::string path = tmp.file("s.db");
  { Store store(path); }
  const std::string others = sql_text(
      path,
      "SELECT group_concat(name, ',') FROM (SELECT m.name FROM sqlite_master m"
      " WHERE m.type = 'table' AND NOT EXISTS (SELECT 1 FROM pragma_table_info(m.name) p"
      " WHERE p.name = 'run') ORDER BY m.name)");
  CHECK(others == "conv_algo_cache,cpu_peaks,experiments,runs");
}

TEST_CASE("merge: merging twice adds nothing", "[store][merge]") {
  TwoMachines m;
  const std::string out = m.tmp.file("all.db");
  merge_stores(out, {m.a});
  std::map<std::string, long long> after_first;
  for (const auto& t : per_run_tables(out)) after_first[t] = count_rows(out, t);
  after_first["runs"] = count_rows(out, "runs");
  after_first["experiments"] = count_rows(out, "experiments");
  after_first["conv_algo_cache"] = count_rows(out, "conv_algo_cache");

  // Again, with the same file also given twice and the other machine's file.
  const auto counts = merge_stores(out, {m.a, m.b, m.a});
  REQUIRE(counts.size() == 3);
  CHECK(counts[0].added == 0);
  CHECK(counts[0].already_present == 2);
  CHECK(counts[1].added == 2);
  CHECK(counts[2].added == 0);
  CHECK(counts[2].already_present == 2);
  const auto again = merge_stores(out, {m.b});
  CHECK(again[0].added == 0);
  CHECK(again[0].already_present == 2);
  CHECK(count_rows(out, "runs") == 4);
  for (const auto& [table, n] : after_first)
    CHECK(count_rows(out, table) == n + count_rows(m.b, table) - (table == "experiments" ? 1 : 0));
}

TEST_CASE("merge: conv_algo_cache entries merge by (device_key, key), the newer winning",
          "[store][merge]") {
  TempDir tmp;
  const std::string in = tmp.file("in.db"), out = tmp.file("out.db");
  auto cache_run = [](const std::string& path, const std::vector<std::pair<std::string, int>>& keys) {
    Store store(path);
    const std::string uuid = store.begin_run(make_run());
    std::vector<ConvAlgoRecord> records;
    for (const auto& [key, algo] : keys)
      records.push_back({"layer-" + key, "forward", key, "ALGO", "benchmark", {algo, 0, 0, 1.0}});
    store.write_conv_algorithms(uuid, records, "dev");
  };
  cache_run(out, {{"k1", 1}, {"k2", 1}});
  cache_run(in, {{"k1", 2}, {"k2", 2}, {"k3", 2}});
  sql_exec(out, "UPDATE conv_algo_cache SET updated_at = CASE key WHEN 'k1' THEN"
                " '2025-01-01T00:00:00.000Z' ELSE '2025-03-01T00:00:00.000Z' END");
  sql_exec(in, "UPDATE conv_algo_cache SET updated_at = '2025-02-01T00:00:00.000Z'");

  merge_stores(out, {in});
  auto algo = [&](const std::string& key) {
    return sql_int(out, "SELECT algo FROM conv_algo_cache WHERE device_key = 'dev' AND key = '" +
                            key + "'");
  };
  CHECK(algo("k1") == 2);  // the input's entry is newer
  CHECK(algo("k2") == 1);  // the output's entry is newer
  CHECK(algo("k3") == 2);  // only the input had it
  CHECK(sql_text(out, "SELECT updated_at FROM conv_algo_cache WHERE key = 'k1'") ==
        "2025-02-01T00:00:00.000Z");
  CHECK(count_rows(out, "conv_algo_cache") == 3);
}

TEST_CASE("merge: CPU peaks merge by (cpu, isa, threads), the newer measurement winning",
          "[store][merge]") {
  TempDir tmp;
  const std::string in = tmp.file("in.db"), out = tmp.file("out.db");
  auto peaks = [](const std::string& path, double fp32, const std::vector<int>& threads) {
    Store store(path);
    for (int t : threads) store.put_cpu_peak({"Xeon", "avx512_core_amx", t, fp32, 0, 2e10, "k", ""});
  };
  peaks(out, 1e11, {1, 2});
  peaks(in, 2e11, {2, 4});
  sql_exec(out, "UPDATE cpu_peaks SET measured_at = CASE threads WHEN 1 THEN"
                " '2026-01-01T00:00:00.000Z' ELSE '2026-03-01T00:00:00.000Z' END");
  sql_exec(in, "UPDATE cpu_peaks SET measured_at = '2026-02-01T00:00:00.000Z'");
  merge_stores(out, {in});
  auto fp32 = [&](int threads) {
    return sql_text(out, "SELECT fp32_flops FROM cpu_peaks WHERE threads = " + std::to_string(threads));
  };
  CHECK(fp32(1) == "100000000000.0");  // only the output had it
  CHECK(fp32(2) == "100000000000.0");  // the output's is newer
  CHECK(fp32(4) == "200000000000.0");  // only the input had it
  CHECK(count_rows(out, "cpu_peaks") == 3);
  sql_exec(in, "UPDATE cpu_peaks SET measured_at = '2026-04-01T00:00:00.000Z'");
  merge_stores(out, {in});
  CHECK(fp32(2) == "200000000000.0");  // now the input's is newer
}

TEST_CASE("merge: an input of every older schema version is migrated in a copy, its bytes unchanged",
          "[store][merge]") {
  TempDir tmp;
  // The migrated copies go to $TMPDIR: point it at an empty directory to see
  // them removed afterwards.
  const std::string scratch = tmp.file("tmpdir");
  std::filesystem::create_directory(scratch);
  const char* old_tmpdir = std::getenv("TMPDIR");
  const std::string saved = old_tmpdir ? old_tmpdir : "";
  setenv("TMPDIR", scratch.c_str(), 1);

  const std::string out = tmp.file("out.db");
  for (int version = 1; version < Store::latest_schema_version(); ++version) {
    INFO("schema version " << version);
    const std::string in = tmp.file("v" + std::to_string(version) + ".db");
    const std::string uuid = "00000000-0000-4000-8000-00000000000" + std::to_string(version);
    detail::create_at_version(in, version);
    sql_exec(in,
             "INSERT INTO experiments (id, name, file, description, first_seen) VALUES"
             " (7, 'old', 'old.toml', 'from version " + std::to_string(version) + "',"
             " '2024-01-01T00:00:00.000Z');"
             "INSERT INTO runs (id, uuid, experiment, status, config_json, config_hash,"
             " experiment_hash, label, device, host, device_name, throughput, started_at)"
             " VALUES (3, '" + uuid + "', 7, 'complete', '{}', 'h', 'e', 'v" +
             std::to_string(version) + "', 'cuda:0', 'oldhost', 'NVIDIA A100', 1234.5,"
             " '2024-01-01T00:00:01.000Z');"
             "INSERT INTO run_params (run, key, value, value_json) VALUES"
             " (3, 'train.batch_size', '256', '256'), (3, 'train.precision', 'bf16', '\"bf16\"');"
             "INSERT INTO run_environment (run, key, value) VALUES (3, 'driver', '535.1');"
             "INSERT INTO steps (run, step, epoch, kind, step_ms, images) VALUES"
             " (3, 0, 0, 'warmup', 50, 256), (3, 1, 0, 'measured', 40, 256);"
             "INSERT INTO epochs (run, epoch, train_loss, seconds, images) VALUES"
             " (3, 0, 1.75, 12.5, 512);");
    const std::string bytes = read_bytes(in);

    const auto counts = merge_stores(out, {in});
    CHECK(counts.at(0).added == 1);
    CHECK(read_bytes(in) == bytes);
    CHECK(sql_int(in, "PRAGMA user_version") == version);

    Store merged(out);
    const auto run = merged.get_run(uuid);
    REQUIRE(run);
    CHECK(run->info.label == "v" + std::to_string(version));
    CHECK(run->info.precision == "bf16");
    CHECK(run->info.batch_size == 256);
    CHECK(run->info.throughput == Approx(1234.5));
    CHECK(run->host == "oldhost");
    CHECK(run->description == "from version 1");  // the first input's experiment row stays
    CHECK(run->environment.get("driver") == "535.1");
    CHECK(run->step_count == 2);
    REQUIRE(run->epochs.size() == 1);
    CHECK(run->epochs[0].train_loss == Approx(1.75));
  }
  CHECK(sql_int(out, "SELECT count(*) FROM runs") == Store::latest_schema_version() - 1);
  CHECK(std::filesystem::is_empty(scratch));  // the migrated copies are gone

  if (old_tmpdir)
    setenv("TMPDIR", saved.c_str(), 1);
  else
    unsetenv("TMPDIR");
}

TEST_CASE("merge: a bad input is refused by name and the output is left exactly as it was",
          "[store][merge]") {
  TwoMachines m;
  const std::string out = m.tmp.file("out.db");
  {
    Store store(out);
    store.begin_run(make_run("bf16", 128, "here"));
  }
  // A store with enough steps for many pages; one page in the middle damaged.
  const std::string corrupt = m.tmp.file("corrupt.db");
  {
    Store store(corrupt);
    const std::string uuid = store.begin_run(make_run());
    store.write_steps(uuid, steps_for(3000, 100));
  }
  {
    const size_t page = static_cast<size_t>(sql_int(corrupt, "PRAGMA page_size"));
    std::string bytes = read_bytes(corrupt);
    const size_t middle = bytes.size() / page / 2 * page;
    REQUIRE(bytes.size() > 8 * page);
    std::fill(bytes.begin() + static_cast<long>(middle),
              bytes.begin() + static_cast<long>(middle + page), '\xa5');
    xrun_test::write_bytes(corrupt, bytes);
  }
  const std::string text = m.tmp.file("notes.txt");
  xrun_test::write_bytes(text, std::string(5000, 'x'));
  const std::string empty = m.tmp.file("empty.db");
  xrun_test::write_bytes(empty, "");
  const std::string foreign = m.tmp.file("shop.db");
  sql_exec(foreign, "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT);");
  const std::string newer = m.tmp.file("newer.db");
  detail::create_at_version(newer, Store::latest_schema_version());
  sql_exec(newer, "PRAGMA user_version = " + std::to_string(Store::latest_schema_version() + 1));
  const std::string missing = m.tmp.file("missing.db");
  const std::string alias = m.tmp.file("alias.db");  // the output by another name
  std::filesystem::create_symlink(out, alias);

  const std::vector<std::pair<std::string, std::string>> cases = {
      {corrupt, "the SQLite file is corrupt"},
      {text, "not an SQLite database"},
      {empty, "an empty database, not an xrun store"},
      {foreign, "not an xrun store"},
      {newer, "is newer than this xrun"},
      {missing, "no such file"},
      {m.tmp.str(), "not a regular file"},
      {out, "this is the store being merged into"},
      {alias, "this is the store being merged into"}};
  const std::string before = read_bytes(out);
  for (const auto& [bad, reason] : cases) {
    INFO(bad);
    // The good input comes first: nothing of it may be written either.
    REQUIRE_THROWS_WITH(merge_stores(out, {m.a, bad}),
                        Catch::StartsWith(bad + ": ") && Catch::Contains(reason));
    CHECK(read_bytes(out) == before);
    CHECK_FALSE(std::filesystem::exists(out + "-wal"));  // never even opened
    // An output that did not exist is not created.
    if (bad == out || bad == alias) continue;  // not the output of this merge
    const std::string fresh = m.tmp.file("fresh.db");
    REQUIRE_THROWS_AS(merge_stores(fresh, {m.a, bad}), StoreError);
    CHECK_FALSE(std::filesystem::exists(fresh));
  }
  // A foreign or newer output is refused before anything is written to it.
  for (const std::string& target : {foreign, newer}) {
    const std::string bytes = read_bytes(target);
    REQUIRE_THROWS_WITH(merge_stores(target, {m.a}), Catch::StartsWith(target + ": "));
    CHECK(read_bytes(target) == bytes);
  }
  CHECK(sql_int(out, "SELECT count(*) FROM runs") == 1);
}
