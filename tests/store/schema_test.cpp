// tests/store/schema_test.cpp: creating a store, migrating an older file,
// and refusing files that are newer, not SQLite, or someone else's database.
#include "catch2_compat.h"

#include <fstream>
#include <iterator>

#include "store/schema.h"
#include "store/store.h"
#include "store_test_util.h"

using namespace xrun::store;
using store_test::sql_exec;
using store_test::sql_int;
using store_test::sql_text;
using store_test::TempDir;

namespace {

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

bool has_object(const std::string& path, const std::string& type, const std::string& name) {
  return sql_int(path, "SELECT count(*) FROM sqlite_master WHERE type = '" + type +
                           "' AND name = '" + name + "'") == 1;
}

}  // namespace

TEST_CASE("a new store has every table, the view, the latest version and WAL", "[store][schema]") {
  TempDir tmp;
  const std::string path = tmp.file("results.db");
  {
    Store store(path);
    CHECK(store.schema_version() == Store::latest_schema_version());
    CHECK(store.path() == path);
  }
  CHECK(Store::latest_schema_version() >= 2);
  for (const char* table : {"experiments", "runs", "run_params", "run_environment", "steps",
                            "epochs", "phases", "kernels", "memory", "conv_algorithms",
                            "conv_algo_cache", "findings", "trace_events"})
    CHECK(has_object(path, "table", table));
  CHECK(has_object(path, "view", "run_summary"));
  CHECK(sql_int(path, "PRAGMA user_version") == Store::latest_schema_version());
  CHECK(sql_int(path, "PRAGMA application_id") == detail::kApplicationId);
  CHECK(sql_text(path, "PRAGMA journal_mode") == "wal");

  // Opening again changes nothing.
  Store again(path);
  CHECK(again.schema_version() == Store::latest_schema_version());
}

TEST_CASE("a version-1 file migrates forward with its rows intact", "[store][schema]") {
  TempDir tmp;
  const std::string path = tmp.file("old.db");
  detail::create_at_version(path, 1);
  REQUIRE(sql_int(path, "PRAGMA user_version") == 1);
  REQUIRE_FALSE(has_object(path, "table", "phases"));
  REQUIRE_FALSE(has_object(path, "view", "run_summary"));

  // Rows as a version-1 xrun would have written them.
  sql_exec(path,
           "INSERT INTO experiments (id, name, file, description, first_seen)"
           " VALUES (1, 'classic', 'classic.toml', 'old one', '2024-01-01T00:00:00.000Z');"
           "INSERT INTO runs (id, uuid, experiment, sweep_index, status, config_json,"
           " config_hash, experiment_hash, label, device, host, pid, started_at, finished_at,"
           " device_name, batch_size, measured_steps, throughput, step_ms_median, test_accuracy)"
           " VALUES (1, '11111111-2222-4333-8444-555555555555', 1, 3, 'complete', '{}', 'h1',"
           " 'e1', 'old-box', 'cuda:0', 'oldhost', 42, '2024-01-01T00:00:01.000Z',"
           " '2024-01-01T01:00:00.000Z', 'NVIDIA GeForce RTX 3090', 512, 100, 2500.5, 204.8,"
           " NULL);"
           "INSERT INTO run_params (run, key, value, value_json) VALUES"
           " (1, 'train.precision', 'fp16', '\"fp16\"'), (1, 'train.batch_size', '512', '512'),"
           " (1, 'data.workers', '8', '8');"
           "INSERT INTO run_environment (run, key, value) VALUES (1, 'driver', '535.1');"
           "INSERT INTO steps (run, step, epoch, kind, step_ms, data_wait_ms, loss, lr,"
           " loss_scale, images, skipped) VALUES (1, 0, 0, 'warmup', 300, 1, 2.3, 0.001, 65536,"
           " 512, 0), (1, 1, 0, 'measured', 200, 0.5, NULL, 0.001, 65536, 512, 1);"
           "INSERT INTO epochs (run, epoch, train_loss, test_loss, test_accuracy, seconds,"
           " eval_seconds, images) VALUES (1, 0, 1.5, NULL, 0.55, 30, 2, 50000);");

  Store store(path);
  CHECK(store.schema_version() == Store::latest_schema_version());
  CHECK(has_object(path, "table", "phases"));
  CHECK(has_object(path, "table", "kernels"));
  CHECK(has_object(path, "view", "run_summary"));

  auto runs = store.list_runs();
  REQUIRE(runs.size() == 1);
  CHECK(runs[0].uuid == "11111111-2222-4333-8444-555555555555");
  CHECK(runs[0].experiment == "classic");
  CHECK(runs[0].sweep_index == 3);
  CHECK(runs[0].precision == "fp16");
  CHECK(runs[0].batch_size == 512);
  CHECK(runs[0].workers == 8);
  CHECK(runs[0].throughput == Approx(2500.5));
  CHECK(std::isnan(runs[0].test_accuracy));

  auto detail = store.get_run("1111");
  REQUIRE(detail);
  CHECK(detail->host == "oldhost");
  CHECK(detail->pid == 42);
  CHECK(detail->description == "old one");
  CHECK(detail->environment.get("driver") == "535.1");
  CHECK(detail->step_count == 2);
  REQUIRE(detail->epochs.size() == 1);
  CHECK(std::isnan(detail->epochs[0].test_loss));
  CHECK(detail->epochs[0].test_accuracy == Approx(0.55));
  auto steps = store.get_steps(runs[0].uuid);
  REQUIRE(steps.size() == 2);
  CHECK(steps[0].kind == xrun::StepKind::warmup);
  CHECK(std::isnan(steps[1].loss));
  CHECK(steps[1].skipped);

  // The version-2 tables are usable on the migrated file.
  std::vector<xrun::PhaseRecord> phases = {{"forward", 100, 50.0, 48.0}};
  store.write_phases(runs[0].uuid, phases);
  CHECK(store.get_run("1")->phases.size() == 1);
}

TEST_CASE("a file from a newer xrun is refused without being changed", "[store][schema]") {
  TempDir tmp;
  const std::string path = tmp.file("future.db");
  detail::create_at_version(path, Store::latest_schema_version());
  const int newer = Store::latest_schema_version() + 5;
  sql_exec(path, "PRAGMA user_version = " + std::to_string(newer));
  REQUIRE_THROWS_WITH(Store(path),
                      path + ": schema version " + std::to_string(newer) +
                          " is newer than this xrun (" +
                          std::to_string(Store::latest_schema_version()) + "); upgrade xrun");
  CHECK(sql_int(path, "PRAGMA user_version") == newer);
  // A StepWriter opens the file the same way.
  REQUIRE_THROWS_AS(StepWriter(path, "whatever"), StoreError);
}

TEST_CASE("a file that is not SQLite is refused and left alone", "[store][schema]") {
  TempDir tmp;
  const std::string path = tmp.file("garbage.db");
  std::string garbage;
  for (int i = 0; i < 8192; ++i) garbage += static_cast<char>((i * 7919 + 13) % 251);
  {
    std::ofstream out(path, std::ios::binary);
    out << garbage;
  }
  REQUIRE_THROWS_WITH(Store(path), Catch::StartsWith(path + ": not an SQLite database"));
  CHECK(read_bytes(path) == garbage);

  // A short text file too.
  const std::string text = tmp.file("notes.txt");
  {
    std::ofstream out(text);
    out << "hello, this is not a database\n";
  }
  REQUIRE_THROWS_WITH(Store(text), Catch::StartsWith(text + ": not an SQLite database"));
}

TEST_CASE("a foreign SQLite database is refused and left alone", "[store][schema]") {
  TempDir tmp;
  const std::string path = tmp.file("shop.db");
  sql_exec(path, "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT);"
                 "INSERT INTO customers (name) VALUES ('Ada');");
  REQUIRE_THROWS_WITH(Store(path), Catch::StartsWith(path + ": an SQLite database but not an "
                                                            "xrun store") &&
                                       Catch::Contains("customers"));
  CHECK(sql_text(path, "PRAGMA journal_mode") == "delete");  // not switched to WAL
  CHECK_FALSE(has_object(path, "table", "runs"));
  CHECK(sql_int(path, "SELECT count(*) FROM customers") == 1);

  // Another program's file that only set user_version is not ours either.
  const std::string other = tmp.file("other.db");
  sql_exec(other, "PRAGMA user_version = 1");
  REQUIRE_THROWS_WITH(Store(other), Catch::Contains("not an xrun store"));
}

TEST_CASE("a path that cannot be opened is a StoreError naming it", "[store][schema]") {
  TempDir tmp;
  const std::string path = tmp.file("no/such/dir/results.db");
  REQUIRE_THROWS_WITH(Store(path), Catch::StartsWith(path + ": cannot open"));
}

TEST_CASE("several processes creating one new file at once all succeed", "[store][schema]") {
  TempDir tmp;
  const std::string path = tmp.file("shared.db");
  constexpr int kProcs = 4;
  std::vector<pid_t> kids;
  for (int i = 0; i < kProcs; ++i) {
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int rc = 0;
      try {
        Store store(path);
        store.begin_run(store_test::make_run("fp32", 64 + i));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "child %d: %s\n", i, e.what());
        rc = 1;
      }
      _exit(rc);
    }
    kids.push_back(pid);
  }
  for (pid_t pid : kids) {
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  Store store(path);
  CHECK(store.schema_version() == Store::latest_schema_version());
  CHECK(store.list_runs().size() == kProcs);
  CHECK(sql_int(path, "SELECT count(*) FROM experiments") == 1);
}
