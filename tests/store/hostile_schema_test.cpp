// tests/store/hostile_schema_test.cpp: store files altered to break xrun
// (issue #10): a negative PRAGMA user_version (found by fuzzing: it indexed
// the migrations out of bounds) and a store whose run_summary or runs is a
// recursive view of its own (found in review: `xrun runs` and `xrun merge`
// never finished and grew without bound) are refused as StoreError when
// opened for reading or writing, or merged; objects another program adds are
// accepted.
#include "catch2_compat.h"

#include <filesystem>

#include "store/merge.h"
#include "store/schema.h"
#include "store/store.h"
#include "store_test_util.h"

using namespace xrun::store;
using Catch::Contains;
using store_test::make_run;
using store_test::sql_exec;
using store_test::sql_text;
using store_test::TempDir;

namespace {

// A store with two runs, closed.
std::string two_runs(const TempDir& dir, const std::string& name) {
  const std::string path = dir.file(name);
  Store s(path);
  s.begin_run(make_run("fp16", 512, "box-a"));
  s.begin_run(make_run("fp32", 64, "box-b"));
  return path;
}

// Rows without end: the body of a recursive view.
const std::string kEndless =
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) ";

void expect_refused(const TempDir& dir, const std::string& path, const std::string& why) {
  CHECK_THROWS_WITH(Store(path, Store::Access::read_only), Contains(path) && Contains(why));
  // Opened to write (xrun run --db): refused too, before anything is written.
  CHECK_THROWS_WITH(Store(path), Contains(path) && Contains(why));
  const std::string out = dir.file("merged.db");
  CHECK_THROWS_WITH(merge_stores(out, {path}), Contains(path) && Contains(why));
  CHECK_FALSE(std::filesystem::exists(out));
}

}  // namespace

TEST_CASE("a negative schema version is refused, not used as an index", "[store][hostile]") {
  TempDir dir;
  const std::string path = two_runs(dir, "negative.db");
  sql_exec(path, "PRAGMA user_version = -1");
  expect_refused(dir, path, "schema version -1 is not one xrun writes");
  CHECK_THROWS_WITH(Store(path), Contains("schema version -1"));
}

TEST_CASE("a run_summary or runs of another program's making is refused", "[store][hostile]") {
  TempDir dir;
  SECTION("run_summary as an endless view") {
    const std::string path = two_runs(dir, "endless-summary.db");
    sql_exec(path, "DROP VIEW run_summary; CREATE VIEW run_summary AS " + kEndless +
                       "SELECT x AS id, 'u' AS uuid FROM c;");
    expect_refused(dir, path, "its view run_summary is not xrun's");
  }
  SECTION("runs as an endless view") {
    const std::string path = two_runs(dir, "endless-runs.db");
    // Every column of runs, each the counter, then the table swapped for the
    // view (legacy_alter_table: run_summary keeps naming runs).
    const std::string columns = sql_text(
        path, "SELECT group_concat('x AS \"' || name || '\"', ', ') FROM pragma_table_info('runs')");
    sql_exec(path, "PRAGMA legacy_alter_table = ON; ALTER TABLE runs RENAME TO runs_kept;"
                   "CREATE VIEW runs AS " + kEndless + "SELECT " + columns + " FROM c;");
    expect_refused(dir, path, "its table runs is not xrun's");
  }
  SECTION("a table missing") {
    const std::string path = two_runs(dir, "no-memory.db");
    sql_exec(path, "DROP TABLE memory;");
    expect_refused(dir, path, "its table memory is missing");
  }
}

TEST_CASE("objects another program adds to a store are accepted", "[store][hostile]") {
  TempDir dir;
  const std::string path = two_runs(dir, "annotated.db");
  sql_exec(path, "CREATE TABLE notes (run INTEGER, text TEXT);"
                 "CREATE VIEW fast AS SELECT * FROM run_summary WHERE throughput > 1000;"
                 "CREATE INDEX runs_by_label ON runs (label);");
  CHECK(Store(path, Store::Access::read_only).list_runs().size() == 2);
  CHECK(merge_stores(dir.file("merged.db"), {path}).at(0).added == 2);
}
