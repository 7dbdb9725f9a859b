// tests/store/table_rows_test.cpp: table_columns and for_each_row: columns in
// schema order, cells typed as SQLite stored them (NULL, integer, real,
// text), rows in insertion order, only the asked-for key, and names that are
// not columns refused rather than pasted into SQL.
#include "catch2_compat.h"

#include <cmath>

#include "store/store.h"
#include "store/table_rows.h"
#include "store_test_util.h"

using namespace xrun;
using namespace xrun::store;
using store_test::make_run;
using store_test::TempDir;

TEST_CASE("table_rows: typed cells of one run's rows in insertion order", "[store][table_rows]") {
  TempDir tmp;
  Store store(tmp.file("s.db"));
  const std::string first = store.begin_run(make_run());
  const std::string second = store.begin_run(make_run("fp32"));
  const std::vector<KernelRecord> kernels = {{"z_conv", "forward", 3, 1.5, std::nan(""), 0.75},
                                             {"a_bn", "forward", 4, 0.25, 0.01, 0.1}};
  store.write_kernels(first, kernels);
  store.write_kernels(second, std::vector<KernelRecord>{{"other", "forward", 1, 1, 1, 1}});

  CHECK(table_columns(store, "kernels") ==
        std::vector<std::string>{"run", "name", "phase", "calls", "total_ms", "min_ms", "max_ms"});
  CHECK(table_columns(store, "run_summary").front() == "id");  // views too

  const int64_t id = store.get_run(first)->info.id;
  std::vector<std::vector<Cell>> rows;
  for_each_row(store, "kernels", {"name", "calls", "min_ms", "total_ms"}, "run", id,
               [&](const std::vector<Cell>& cells) { rows.push_back(cells); });
  REQUIRE(rows.size() == 2);
  CHECK(std::get<std::string>(rows[0][0]) == "z_conv");  // insertion order, not name order
  CHECK(std::get<int64_t>(rows[0][1]) == 3);
  CHECK(std::holds_alternative<std::monostate>(rows[0][2]));  // NaN was stored as NULL
  CHECK(std::get<double>(rows[0][3]) == 1.5);
  CHECK(std::get<std::string>(rows[1][0]) == "a_bn");

  int summary_rows = 0;
  for_each_row(store, "run_summary", {"uuid", "precision"}, "id", id,
               [&](const std::vector<Cell>& cells) {
                 ++summary_rows;
                 CHECK(std::get<std::string>(cells[0]) == first);
                 CHECK(std::get<std::string>(cells[1]) == "fp16");
               });
  CHECK(summary_rows == 1);
}

TEST_CASE("table_rows: unknown tables and columns are refused", "[store][table_rows]") {
  TempDir tmp;
  Store store(tmp.file("s.db"));
  auto ignore = [](const std::vector<Cell>&) {};
  CHECK_THROWS_WITH(table_columns(store, "layers"), Catch::Contains("no table or view layers"));
  CHECK_THROWS_WITH(for_each_row(store, "steps", {"step", "loss; DROP TABLE runs"}, "run", 1, ignore),
                    Catch::Contains("steps has no column loss; DROP TABLE runs"));
  CHECK_THROWS_WITH(for_each_row(store, "steps", {"step"}, "nope", 1, ignore),
                    Catch::Contains("steps has no column nope"));
  CHECK(table_columns(store, "runs").size() > 10);  // still there
}
