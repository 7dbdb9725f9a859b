// tests/store/robustness_test.cpp: the store under faults and misuse (issue
// #10): read-only opening (a read-only directory, an older schema, an empty
// file: nothing is ever written), a run's results in one transaction, a
// config that a live process is training refused, quick_check, and errors in
// plain words.
#include <signal.h>

#include "catch2_compat.h"
#include <cmath>
#include <fstream>

#include "skip.h"
#include "store/schema.h"
#include "store_test_util.h"

using namespace xrun;
using namespace xrun::store;
using namespace store_test;
using Catch::Contains;

namespace {

int files_in(const TempDir& dir) {
  return static_cast<int>(std::distance(std::filesystem::directory_iterator(dir.path()),
                                        std::filesystem::directory_iterator()));
}

}  // namespace

TEST_CASE("read-only opening works in a read-only directory and writes nothing", "[store][readonly]") {
  TempDir dir;
  const std::string path = dir.file("r.db");
  {
    Store db(path);
    const std::string uuid = db.begin_run(make_run("fp16", 256));
    db.finish_run(uuid, RunStatus::complete, RunSummary{});
  }
  const std::string before = xrun_test::read_bytes(path);
  REQUIRE(files_in(dir) == 1);  // the last close checkpointed and removed the WAL
  xrun_test::ReadOnlyDir read_only(dir.str());
  if (!read_only.ok()) {
    XRUN_SKIP(read_only.why());
  }
  {
    Store db(path, Store::Access::read_only);
    REQUIRE(db.list_runs().size() == 1);
    CHECK(db.list_runs({{"train.batch_size", "256"}}).size() == 1);
    CHECK(db.get_run("1")->info.status == "complete");
  }
  CHECK(xrun_test::read_bytes(path) == before);
  CHECK(files_in(dir) == 1);
  // Writing is refused in plain words, naming the file.
  CHECK_THROWS_WITH(Store(path), Contains(path) && Contains("cannot be written"));
}

TEST_CASE("read-only opening of an older schema migrates a private copy, not the file", "[store][readonly]") {
  TempDir dir;
  const std::string path = dir.file("old.db");
  detail::create_at_version(path, 3);
  sql_exec(path,
           "INSERT INTO experiments (name, file, description, first_seen) VALUES ('e', 'e.toml', '', 'x');"
           "INSERT INTO runs (uuid, experiment, sweep_index, status, config_json, config_hash,"
           " experiment_hash, label, device, host, pid, started_at)"
           " VALUES ('0123abcd-0000-4000-8000-000000000000', 1, 0, 'complete', '{}', 'h', 'x',"
           " 'box', 'cpu', 'host', 1, '2026-01-01T00:00:00.000Z')");
  const std::string before = xrun_test::read_bytes(path);
  {
    Store db(path, Store::Access::read_only);
    CHECK(db.schema_version() == Store::latest_schema_version());  // the copy's
    const auto runs = db.list_runs();
    REQUIRE(runs.size() == 1);
    CHECK(runs[0].label == "box");
    CHECK(std::isnan(runs[0].throughput));
  }
  CHECK(xrun_test::read_bytes(path) == before);
  CHECK(sql_int(path, "PRAGMA user_version") == 3);
}

TEST_CASE("read-only opening refuses an empty file and leaves it empty", "[store][readonly]") {
  TempDir dir;
  const std::string path = dir.file("empty.db");
  xrun_test::write_bytes(path, "");
  CHECK_THROWS_WITH(Store(path, Store::Access::read_only),
                    Contains(path) && Contains("an empty database, not an xrun store"));
  CHECK(std::filesystem::file_size(path) == 0);
  CHECK(files_in(dir) == 1);
  CHECK_THROWS_WITH(Store(dir.file("missing.db"), Store::Access::read_only),
                    Contains("missing.db") && Contains("cannot open"));
  CHECK_FALSE(std::filesystem::exists(dir.file("missing.db")));
}

TEST_CASE("a Batch lands a run's results and status together or not at all", "[store][batch]") {
  TempDir dir;
  const std::string path = dir.file("b.db");
  Store db(path);
  const std::string uuid = db.begin_run(make_run());
  // A fault between the tables: the findings insert fails (a trigger stands
  // in for a full disk or a crash at that point).
  sql_exec(path, "CREATE TRIGGER boom BEFORE INSERT ON findings BEGIN SELECT RAISE(ABORT, 'boom'); END");
  RunSummary s;
  s.measured_steps = 10;
  s.throughput = 123;
  {
    Store::Batch batch(db);
    db.write_phases(uuid, std::vector<PhaseRecord>{{"forward", 10, 5.0, 0.0}});
    db.write_memory(uuid, std::vector<MemoryRecord>{{"weights", 1024}});
    CHECK_THROWS_WITH(db.write_findings(uuid, std::vector<FindingRecord>{{"c", "m", 1.0}}),
                      Contains("boom"));
    // Never committed: the batch rolls back as it goes out of scope.
  }
  CHECK(sql_int(path, "SELECT count(*) FROM phases") == 0);
  CHECK(sql_int(path, "SELECT count(*) FROM memory") == 0);
  CHECK(sql_text(path, "SELECT status FROM runs") == "running");
  CHECK(sql_text(path, "SELECT throughput FROM runs") == "");

  sql_exec(path, "DROP TRIGGER boom");
  {
    Store::Batch batch(db);
    db.write_phases(uuid, std::vector<PhaseRecord>{{"forward", 10, 5.0, 0.0}});
    db.write_findings(uuid, std::vector<FindingRecord>{{"c", "m", 1.0}});
    db.finish_run(uuid, RunStatus::complete, s);
    // Another connection sees nothing before the commit...
    CHECK(sql_text(path, "SELECT status FROM runs") == "running");
    batch.commit();
  }
  // ...and everything after it.
  CHECK(sql_int(path, "SELECT count(*) FROM phases") == 1);
  CHECK(sql_int(path, "SELECT count(*) FROM findings") == 1);
  CHECK(sql_text(path, "SELECT status FROM runs") == "complete");
}

TEST_CASE("begin_run refuses a config that a live process on this host is training", "[store][claim]") {
  TempDir dir;
  const std::string path = dir.file("c.db");
  Store db(path);
  const xrun::store::NewRun run = make_run("fp32", 64);
  const std::string first = db.begin_run(run);
  // Another process (alive) owns the running row.
  const pid_t other = fork();
  if (other == 0) {
    ::pause();
    _exit(0);
  }
  sql_exec(path, "UPDATE runs SET pid = " + std::to_string(other) + " WHERE uuid = '" + first + "'");
  try {
    db.begin_run(run);
    FAIL("no RunInProgress");
  } catch (const RunInProgress& e) {
    CHECK(e.pid == other);
    CHECK(e.uuid == first);
    CHECK_THAT(e.what(), Contains("being trained by process " + std::to_string(other)));
  }
  CHECK(sql_int(path, "SELECT count(*) FROM runs") == 1);  // nothing written
  // Another config is not blocked.
  CHECK_NOTHROW(db.begin_run(make_run("fp32", 128)));
  // Once that process is gone, the config may be trained again.
  kill(other, SIGKILL);
  int status = 0;
  waitpid(other, &status, 0);
  CHECK_NOTHROW(db.begin_run(run));
  CHECK(sql_int(path, "SELECT count(*) FROM runs") == 3);
}

TEST_CASE("begin_run refuses a config already complete unless forced", "[store][claim]") {
  // The runner checks for a complete run before it begins one; another
  // process may finish that config in between. The check under the write
  // lock closes that gap (two processes on one sweep once trained a config
  // twice this way).
  TempDir dir;
  const std::string path = dir.file("c.db");
  Store db(path);
  xrun::store::NewRun run = make_run("fp32", 64);
  run.force = false;
  const std::string first = db.begin_run(run);
  CHECK_NOTHROW(db.begin_run(make_run("fp32", 64)));  // running, but by this process
  db.finish_run(first, RunStatus::complete, RunSummary{});
  try {
    db.begin_run(run);
    FAIL("no RunAlreadyComplete");
  } catch (const RunAlreadyComplete& e) {
    CHECK(e.uuid == first);
    CHECK_THAT(e.what(), Contains("already complete (" + first + ")"));
  }
  CHECK(sql_int(path, "SELECT count(*) FROM runs") == 2);  // nothing written
  run.force = true;  // `xrun run --force`
  CHECK_NOTHROW(db.begin_run(run));
  CHECK(sql_int(path, "SELECT count(*) FROM runs") == 3);
}

TEST_CASE("quick_check is empty for a sound store and names the damage of a corrupt one", "[store][integrity]") {
  TempDir dir;
  const std::string path = dir.file("q.db");
  int steps_page = 0;
  {
    Store db(path);
    const std::string uuid = db.begin_run(make_run());
    std::vector<StepRecord> steps(200);
    for (size_t i = 0; i < steps.size(); ++i) steps[i].step = static_cast<int64_t>(i);
    db.write_steps(uuid, steps);
    CHECK(db.quick_check().empty());
  }
  steps_page = static_cast<int>(sql_int(path, "SELECT rootpage FROM sqlite_master WHERE name = 'steps'"));
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp((steps_page - 1) * 4096 + 8);
    f << std::string(64, '\xff');
  }
  Store db(path);
  const std::string problems = db.quick_check();
  CHECK_FALSE(problems.empty());
  // Either the damaged page is named, or SQLite's "malformed" verdict.
  CHECK_THAT(problems, Contains("page " + std::to_string(steps_page)) || Contains("malformed"));
  CHECK(problems.find('\n') == std::string::npos);
  CHECK(problems.find("***") == std::string::npos);
}
