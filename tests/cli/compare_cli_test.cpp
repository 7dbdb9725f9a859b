// tests/cli/compare_cli_test.cpp: `xrun compare` as a user runs it: each
// output format parsed back (CSV rows, JSON, a Markdown table), exit codes
// for bad arguments and for nothing to compare, and one end-to-end
// comparison of real tiny CPU runs.
#include "catch2_compat.h"

#include <nlohmann/json.hpp>

#include <sstream>

#include "cli_util.h"
#include "compare/compare_test_util.h"

using Catch::Contains;
using compare_test::add_run;
using compare_test::expected_throughput;
using compare_test::labelled;
using compare_test::step_times;
using xrun_test::CliFixture;
using xrun_test::shell_quote;

namespace {

struct Output {
  int status = -1;
  std::string out, err;  // stdout, stderr
};

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

std::vector<std::string> csv_fields(const std::string& line) {
  std::vector<std::string> out;
  std::istringstream in(line);
  for (std::string field; std::getline(in, field, ',');) out.push_back(field);
  if (!line.empty() && line.back() == ',') out.push_back("");
  return out;
}

// A store of runs labelled a and b at batch 64 (b clearly faster) and 128
// (the same step times on both sides), and one run of a at 256 alone.
class CompareFixture : public CliFixture {
 public:
  std::vector<double> a64 = step_times(100, 0.1, 30), b64 = step_times(60, 0.1, 30, 4);
  std::vector<double> a128 = step_times(150, 0.2, 30);
  std::string lonely;

  CompareFixture() {
    xrun::store::Store store(db());
    add_run(store, labelled("a", 64), a64);
    add_run(store, labelled("b", 64), b64);
    add_run(store, labelled("a", 128), a128);
    add_run(store, labelled("b", 128), std::vector<double>(a128.rbegin(), a128.rend()));
    lonely = add_run(store, labelled("a", 256), a64);
  }
  double ratio64() const { return expected_throughput(b64) / expected_throughput(a64); }

  // `xrun compare --db results.db ARGS`, stdout and stderr apart.
  Output compare(const std::string& args) const {
    const std::string err = dir.file("stderr.txt");
    const auto r = xrun_test::run_command(
        "{ cd " + shell_quote(dir.str()) + " && " + shell_quote(xrun_test::xrun_binary()) +
        " compare --db " + shell_quote(db()) + " " + args + " 2>" + shell_quote(err) + "; }");
    return {r.status, r.output, xrun_test::read_bytes(err)};
  }
};

}  // namespace

TEST_CASE("xrun compare --format csv: one row per group and value", "[cli][compare]") {
  CompareFixture f;
  const Output r = f.compare("--by label --format csv");
  REQUIRE(r.status == 0);
  const auto rows = lines(r.out);
  REQUIRE(rows.size() == 5);  // header + 2 groups x 2 values
  const auto header = csv_fields(rows[0]);
  auto column = [&](const std::string& name) {
    const auto it = std::find(header.begin(), header.end(), name);
    REQUIRE(it != header.end());
    return static_cast<size_t>(it - header.begin());
  };
  std::vector<std::vector<std::string>> cells;
  for (size_t i = 1; i < rows.size(); ++i) {
    cells.push_back(csv_fields(rows[i]));
    REQUIRE(cells.back().size() == header.size());
  }
  const size_t batch = column("train.batch_size"), label = column("label");
  CHECK(cells[0][batch] == "64");
  CHECK(cells[0][label] == "a");
  CHECK(cells[0][column("baseline")] == "true");
  CHECK(cells[1][batch] == "64");
  CHECK(cells[1][label] == "b");
  CHECK(cells[2][batch] == "128");
  const double ratio = std::stod(cells[1][column("ratio")]);
  CHECK(ratio == Approx(f.ratio64()).epsilon(1e-12));
  CHECK(std::stod(cells[1][column("ratio_lo")]) < ratio);
  CHECK(std::stod(cells[1][column("ratio_hi")]) > ratio);
  CHECK(cells[1][column("interval_includes_one")] == "false");
  CHECK(cells[3][column("interval_includes_one")] == "true");
  CHECK(std::stod(cells[1][column("throughput")]) ==
        Approx(expected_throughput(f.b64)).epsilon(1e-12));
  // The unmatched run goes to stderr, out of the way of the CSV.
  CHECK_THAT(r.err, Contains(f.lonely.substr(0, 8)));
  CHECK(r.out.find(f.lonely.substr(0, 8)) == std::string::npos);
}

TEST_CASE("xrun compare --format json: the whole comparison", "[cli][compare]") {
  CompareFixture f;
  const Output r = f.compare("--by label --baseline a --format json");
  REQUIRE(r.status == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j.at("by") == "label");
  CHECK(j.at("baseline") == "a");
  CHECK(j.at("values") == nlohmann::json({"a", "b"}));
  REQUIRE(j.at("groups").size() == 2);
  const auto& g = j.at("groups")[0];
  CHECK(g.at("settings") == nlohmann::json({{"train.batch_size", "64"}}));
  REQUIRE(g.at("cells").size() == 2);
  CHECK(g.at("cells")[0].at("baseline") == true);
  CHECK(g.at("cells")[1].at("ratio").get<double>() == Approx(f.ratio64()).epsilon(1e-12));
  CHECK(g.at("cells")[1].at("interval_includes_one") == false);
  CHECK(j.at("groups")[1].at("cells")[1].at("interval_includes_one") == true);
  REQUIRE(j.at("unmatched").size() == 1);
  CHECK(j.at("unmatched")[0].at("uuid") == f.lonely);
  CHECK_THAT(j.at("unmatched")[0].at("reason").get<std::string>(), Contains("no run with another label"));
}

TEST_CASE("xrun compare --format markdown and table", "[cli][compare]") {
  CompareFixture f;
  const Output md = f.compare("--by label --format markdown");
  REQUIRE(md.status == 0);
  std::vector<std::string> table;
  for (const auto& line : lines(md.out))
    if (!line.empty() && line.front() == '|') table.push_back(line);
  REQUIRE(table.size() == 6);  // header, separator, 4 rows
  CHECK(table[1].find_first_not_of("|-: ") == std::string::npos);
  CHECK_THAT(table[1], Contains("---"));
  const auto bars = std::count(table[0].begin(), table[0].end(), '|');
  for (const auto& line : table) CHECK(std::count(line.begin(), line.end(), '|') == bars);
  CHECK_THAT(table[0], Contains("train.batch_size") && Contains("label") && Contains("ratio"));
  CHECK_THAT(md.out, Contains(f.lonely.substr(0, 8)));

  const Output text = f.compare("--by label");
  REQUIRE(text.status == 0);
  CHECK_THAT(text.out, Contains("train.batch_size") && Contains("baseline") &&
                           Contains("95% interval") && Contains(f.lonely.substr(0, 8)));
  // The 128 group's identical runs are marked, and the mark explained.
  CHECK_THAT(text.out, Contains("~ the interval includes 1"));
}

TEST_CASE("xrun compare: exit codes", "[cli][compare]") {
  CompareFixture f;
  const Output key = f.compare("--by train.batchsize");
  CHECK(key.status == 2);
  CHECK_THAT(key.err, Contains("--by train.batchsize") && Contains("train.batch_size"));
  const Output base = f.compare("--by label --baseline c");
  CHECK(base.status == 2);
  CHECK_THAT(base.err, Contains("--baseline c") && Contains("a, b"));
  CHECK(f.compare("--by label --format xml").status == 2);
  CHECK(f.compare("").status == 2);  // --by is required
  CHECK(f.compare("--by label --where batch").status == 2);

  const Output none = f.compare("--by label --where label=a --format json");
  CHECK(none.status == 1);
  CHECK(none.out.empty());
  CHECK_THAT(none.err, Contains("nothing to compare") && Contains(f.lonely.substr(0, 8)));
  const Output filtered = f.compare("--by label --where label=zz");
  CHECK(filtered.status == 1);
  CHECK_THAT(filtered.err, Contains("no complete run"));

  const auto missing = f.xrun("compare --by label --db nowhere.db");
  CHECK(missing.status == 1);
  CHECK_THAT(missing.output, Contains("nowhere.db"));
  CHECK_FALSE(std::filesystem::exists(f.dir.file("nowhere.db")));
}

TEST_CASE("xrun compare: real CPU runs by thread count and by label", "[cli][compare][train]") {
  CliFixture f;
  const std::string exp = shell_quote(
      f.write_experiment("small.toml", xrun_test::small_experiment("small")));
  const std::string db = " --db " + shell_quote(f.db());
  auto sweep = f.xrun("run " + exp + db +
                      " --set train.epochs=1 --set 'sweep.train.threads=[1,2]'"
                      " --set store.label=cpu-box");
  REQUIRE(sweep.status == 0);
  auto other = f.xrun("run " + exp + db +
                      " --set train.epochs=1 --set train.threads=1 --set store.label=other-box");
  REQUIRE(other.status == 0);

  auto threads = f.xrun("compare --format json --by train.threads" + db);
  REQUIRE(threads.status == 0);
  const auto t = nlohmann::json::parse(threads.output.substr(threads.output.find('{')));
  CHECK(t.at("values") == nlohmann::json({"1", "2"}));
  REQUIRE(t.at("groups").size() == 1);
  CHECK(t.at("groups")[0].at("settings") == nlohmann::json({{"label", "cpu-box"}}));
  const auto& two = t.at("groups")[0].at("cells")[1];
  const double ratio = two.at("ratio").get<double>();
  CHECK(ratio > 0);
  CHECK(two.at("ratio_lo").get<double>() <= ratio);
  CHECK(two.at("ratio_hi").get<double>() >= ratio);
  CHECK(ratio == Approx(two.at("throughput").get<double>() /
                        t.at("groups")[0].at("cells")[0].at("throughput").get<double>()));
  REQUIRE(t.at("unmatched").size() == 1);  // other-box's run has no other thread count

  auto labels = f.xrun("compare --by label --baseline cpu-box" + db);
  REQUIRE(labels.status == 0);
  CHECK_THAT(labels.output, Contains("other-box") && Contains("train.threads") &&
                                Contains("no run with another label"));
}

// Runs of a million steps are bootstrapped in at most 10,000 blocks of
// consecutive steps (runner/compare.cpp); the time that saves (101 s -> 9 s
// on 2 cores) is a benchmark figure (bench/README.md), not a pass/fail
// threshold: this checks the blocked bootstrap's answer.
TEST_CASE("xrun compare: two runs of 1M steps each: the exact ratio inside a narrow interval",
          "[cli][compare]") {
  CliFixture f;
  {
    xrun::store::Store store(f.db());
    add_run(store, labelled("a"), step_times(100, 0.1, 1000000));
    add_run(store, labelled("b"), step_times(90, 0.1, 1000000, 3));
  }
  const auto start = std::chrono::steady_clock::now();
  const auto r = f.xrun("compare --by label --format json --db " + shell_quote(f.db()));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO(r.output << "\n" << seconds << " s");
  REQUIRE(r.status == 0);
  const nlohmann::json cell = nlohmann::json::parse(r.output).at("groups").at(0).at("cells").at(1);
  const double ratio = expected_throughput(step_times(90, 0.1, 1000000, 3)) /
                       expected_throughput(step_times(100, 0.1, 1000000));
  CHECK(cell.at("ratio").get<double>() == Approx(ratio).epsilon(1e-9));
  // The interval still holds the ratio, and is narrow: a million steps each.
  CHECK(cell.at("ratio_lo").get<double>() <= ratio);
  CHECK(cell.at("ratio_hi").get<double>() >= ratio);
  CHECK(cell.at("ratio_hi").get<double>() - cell.at("ratio_lo").get<double>() < 0.01);
}

TEST_CASE("xrun compare --by device: the cards' FLOP/s, % of their peaks, and the sentence",
          "[cli][compare][peak]") {
  CliFixture f;
  const double flops_per_step = compare_test::kImages * 24.55e9;
  const auto t3090 = step_times(140, 0.05, 30), t4090 = step_times(100, 0.05, 30, 1);
  {
    xrun::store::Store store(f.db());
    auto ampere = labelled("lab"), ada = labelled("lab");
    ampere.environment.fields["device_name"] = "RTX 3090";
    ada.environment.fields["device_name"] = "RTX 4090 D";
    add_run(store, ampere, t3090, xrun::store::RunStatus::complete, 1 << 30, flops_per_step, 71e12);
    add_run(store, ada, t4090, xrun::store::RunStatus::complete, 1 << 30, flops_per_step,
            147.1e12);
  }
  const auto r = xrun_test::run_command(shell_quote(xrun_test::xrun_binary()) + " compare --db " +
                                        shell_quote(f.db()) + " --by device");
  INFO(r.output);
  REQUIRE(r.status == 0);
  const auto pct = [&](const std::vector<double>& ms, double peak) {
    const double achieved = flops_per_step / compare_test::kImages * expected_throughput(ms);
    char buf[16];
    std::snprintf(buf, sizeof buf, "%.0f%%", 100.0 * achieved / peak);
    return std::string(buf);
  };
  char ratio[16];
  std::snprintf(ratio, sizeof ratio, "%.2fx",
                expected_throughput(t4090) / expected_throughput(t3090));
  CHECK_THAT(r.output, Contains("achieved") && Contains("of peak") && Contains("TFLOP/s"));
  CHECK_THAT(r.output, Contains(std::string("RTX 4090 D: ") + ratio + " the throughput of RTX 3090"));
  CHECK_THAT(r.output, Contains("(faster); " + pct(t4090, 147.1e12) + " of its peak against " +
                                pct(t3090, 71e12)));
  const auto j = nlohmann::json::parse(
      xrun_test::run_command(shell_quote(xrun_test::xrun_binary()) + " compare --format json --db " +
                             shell_quote(f.db()) + " --by device")
          .output);
  const auto& cells = j.at("groups")[0].at("cells");
  CHECK(cells[0].at("peak_flops").get<double>() == 71e12);
  CHECK(cells[1].at("fraction_of_peak").get<double>() ==
        Approx(flops_per_step / compare_test::kImages * expected_throughput(t4090) / 147.1e12));
}

TEST_CASE("xrun compare: time to the target accuracy per value, and the values ranked by it",
          "[cli][compare][target]") {
  CliFixture f;
  std::vector<std::string> uuids;
  {
    xrun::store::Store store(f.db());
    for (const char* label : {"a", "b", "c"})
      for (int i = 0; i < 2; ++i) uuids.push_back(add_run(store, labelled(label, 64), step_times(100, 0.1, 20, i)));
  }
  // a: 50 and 60 s; b: 40 s and not reached; c: neither reached.
  const char* times[] = {"50", "60", "40", "NULL", "NULL", "NULL"};
  for (size_t i = 0; i < uuids.size(); ++i)
    store_test::sql_exec(f.db(), std::string("UPDATE runs SET target_accuracy = 0.88, time_to_target_s = ") +
                                     times[i] + " WHERE uuid = '" + uuids[i] + "'");
  const auto r = xrun_test::run_command(shell_quote(xrun_test::xrun_binary()) + " compare --db " +
                                        shell_quote(f.db()) + " --by label");
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.output, Contains("to target") && Contains("55.0 s") &&
                           Contains("40.0 s (1 of 2 runs)") && Contains("not reached"));
  CHECK_THAT(r.output, Contains("by time to 88% test accuracy: b 40.0 s (1 of 2 runs), a 55.0 s, c not reached"));
}
