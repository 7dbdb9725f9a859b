// tests/cli/report_cli_test.cpp: `xrun report` as a user runs it: the page
// written from a store, what it prints, and each bad input's message and
// exit code, with the store left as it was.
#include "catch2_compat.h"

#include "cli_util.h"
#include "report/report_test_util.h"

using Catch::Contains;
using xrun_test::CliFixture;
using xrun_test::read_bytes;
using xrun_test::shell_quote;

namespace {

// A fixture whose store holds the two-card sweep of tests/report.
struct ReportFixture : CliFixture {
  ReportFixture() { report_test::build_store(db()); }
  xrun_test::CommandResult report(const std::string& args) const {
    return xrun("report --db " + shell_quote(db()) + " " + args);
  }
};

}  // namespace

TEST_CASE("xrun report: writes one page and says where", "[cli][report]") {
  ReportFixture f;
  const std::string out = f.dir.file("report.html");
  const auto r = f.report("--by device -o " + shell_quote(out));
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.output, Contains("wrote " + out) && Contains("12 run(s)"));
  const std::string html = read_bytes(out);
  CHECK(html.rfind("<!DOCTYPE html>", 0) == 0);
  CHECK_THAT(html, Contains("Speedup over RTX 3090 (by device)"));
  // --where narrows the runs.
  const auto fp16 = f.report("--where train.precision=fp16 -o " + shell_quote(out));
  CHECK(fp16.status == 0);
  CHECK_THAT(fp16.output, Contains("6 run(s)"));
  CHECK_THAT(read_bytes(out), Contains("train.precision=fp16"));
}

TEST_CASE("xrun report: bad arguments exit 2 and name what is wrong", "[cli][report]") {
  ReportFixture f;
  const std::string before = read_bytes(f.db());
  const std::string out = f.dir.file("r.html");
  const auto where = f.report("--where precision -o " + shell_quote(out));
  CHECK(where.status == 2);
  CHECK_THAT(where.output, Contains("--where precision") && Contains("KEY=VALUE"));
  const auto by = f.report("--by train.nonexistent -o " + shell_quote(out));
  CHECK(by.status == 2);
  CHECK_THAT(by.output, Contains("train.nonexistent") && Contains("train.precision"));
  const auto baseline = f.report("--baseline nobody -o " + shell_quote(out));
  CHECK(baseline.status == 2);
  CHECK_THAT(baseline.output, Contains("--baseline nobody") && Contains("4090D-box"));
  CHECK_FALSE(std::filesystem::exists(out));
  CHECK(read_bytes(f.db()) == before);  // the store is only read
}

TEST_CASE("xrun report: store and file problems exit 1", "[cli][report]") {
  CliFixture empty;
  const auto missing = empty.xrun("report --db " + shell_quote(empty.db()) + " -o r.html");
  CHECK(missing.status == 1);
  CHECK_THAT(missing.output, Contains(empty.db()));
  CHECK_FALSE(std::filesystem::exists(empty.db()));  // not created

  ReportFixture f;
  const auto none = f.report("--where label=nobody -o r.html");
  CHECK(none.status == 1);
  CHECK_THAT(none.output, Contains("no runs") && Contains(f.db()));
  const std::string unwritable = f.dir.file("no/such/dir/r.html");
  const auto write = f.report("-o " + shell_quote(unwritable));
  CHECK(write.status == 1);
  CHECK_THAT(write.output, Contains(unwritable));
  xrun_test::write_bytes(f.dir.file("notes.txt"), "not a store");
  const auto foreign = f.xrun("report --db " + shell_quote(f.dir.file("notes.txt")) + " -o r.html");
  CHECK(foreign.status == 1);
  CHECK_THAT(foreign.output, Contains("notes.txt"));
  CHECK(read_bytes(f.dir.file("notes.txt")) == "not a store");
}
