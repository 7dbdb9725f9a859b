// tests/compare/compare_test.cpp: compare_runs() on stores built through the
// store API with chosen step times: the ratio against one computed here from
// the same numbers, bootstrap intervals (their ends pinned against a
// bootstrap computed here), grouping, pooling, unmatched runs, comparing by
// device, errors and determinism.
#include "catch2_compat.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "compare_test_util.h"
#include "runner/compare.h"

using namespace xrun;
using namespace xrun::store;
using xrun::analysis::Comparison;
using xrun::analysis::CompareCell;
using xrun::analysis::CompareOptions;
using xrun::analysis::compare_runs;
using xrun::analysis::natural_less;
using namespace compare_test;

namespace {

std::vector<double> concat(std::vector<double> a, const std::vector<double>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

CompareOptions by(const std::string& key, const std::string& baseline = "") {
  CompareOptions o;
  o.by = key;
  o.baseline = baseline;
  return o;
}

const CompareCell& cell(const Comparison& c, size_t group, const std::string& value) {
  for (const CompareCell& x : c.groups.at(group).cells)
    if (x.value == value) return x;
  throw std::runtime_error("no cell " + value);
}

bool mentions(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("the ratio is the throughput ratio of the measured steps, with a clear interval",
          "[compare]") {
  store_test::TempDir dir;
  Store db(dir.file("r.db"));
  const auto slow = step_times(100, 0.1, 40);
  const auto fast = step_times(50, 0.1, 40, 3);
  const std::string slow_uuid = add_run(db, labelled("box-9"), slow);
  const std::string fast_uuid = add_run(db, labelled("box-10"), fast);

  const Comparison c = compare_runs(db, by("label"));
  REQUIRE(c.groups.size() == 1);
  CHECK(c.baseline == "box-9");  // natural order: 9 before 10
  CHECK(c.values == std::vector<std::string>{"box-9", "box-10"});
  CHECK(c.unmatched.empty());
  REQUIRE(c.groups[0].cells.size() == 2);
  const CompareCell& base = c.groups[0].cells[0];
  const CompareCell& other = c.groups[0].cells[1];
  CHECK(base.is_baseline);
  CHECK(base.value == "box-9");
  CHECK(base.run_uuids == std::vector<std::string>{slow_uuid});
  CHECK(base.measured_steps == 40);
  CHECK(base.throughput == Approx(expected_throughput(slow)).epsilon(1e-12));
  CHECK_FALSE(other.is_baseline);
  CHECK(other.run_uuids == std::vector<std::string>{fast_uuid});
  CHECK(other.throughput == Approx(expected_throughput(fast)).epsilon(1e-12));

  const double ratio = expected_throughput(fast) / expected_throughput(slow);
  CHECK(other.ratio == Approx(ratio).epsilon(1e-12));
  CHECK(other.ratio_lo < ratio);
  CHECK(other.ratio_hi > ratio);
  CHECK(other.ratio_lo > 1.0);
  CHECK_FALSE(other.interval_includes_one);
  CHECK(base.peak_memory_bytes == 1 << 30);
  CHECK(std::isnan(other.scaling));  // only by train.ranks

  SECTION("against the other baseline the ratio is the inverse") {
    const Comparison inv = compare_runs(db, by("label", "box-10"));
    REQUIRE(inv.groups.size() == 1);
    CHECK(inv.values == std::vector<std::string>{"box-10", "box-9"});
    const CompareCell& s = cell(inv, 0, "box-9");
    CHECK(s.ratio == Approx(1.0 / ratio).epsilon(1e-12));
    CHECK(s.ratio_hi < 1.0);
    CHECK_FALSE(s.interval_includes_one);
  }
}

TEST_CASE("two runs of one distribution give an interval that includes 1", "[compare]") {
  store_test::TempDir dir;
  Store db(dir.file("r.db"));
  const auto times = step_times(80, 0.2, 30);
  add_run(db, labelled("a"), times);
  add_run(db, labelled("b"), std::vector<double>(times.rbegin(), times.rend()));
  const Comparison c = compare_runs(db, by("label"));
  REQUIRE(c.groups.size() == 1);
  const CompareCell& b = cell(c, 0, "b");
  CHECK(b.ratio == Approx(1.0).epsilon(1e-12));
  CHECK(b.ratio_lo < 1.0);
  CHECK(b.ratio_hi > 1.0);
  CHECK(b.interval_includes_one);
}

TEST_CASE("runs group by their other settings, which each group shows", "[compare]") {
  store_test::TempDir dir;
  Store db(dir.file("r.db"));
  // Added in an order unlike the expected one: 128 after 64 (numerically).
  const std::string a128 = add_run(db, labelled("a", 128), step_times(200, 0.1, 20));
  const std::string b64 = add_run(db, labelled("b", 64), step_times(60, 0.1, 20));
  const std::string a64 = add_run(db, labelled("a", 64), step_times(100, 0.1, 20));
  const std::string b128 = add_run(db, labelled("b", 128), step_times(110, 0.1, 20));

  const Comparison c = compare_runs(db, by("label"));
  REQUIRE(c.groups.size() == 2);
  using Settings = std::map<std::string, std::string>;
  CHECK(c.groups[0].settings == Settings{{"train.batch_size", "64"}});
  CHECK(c.groups[1].settings == Settings{{"train.batch_size", "128"}});
  CHECK(c.groups[0].match_key != c.groups[1].match_key);
  CHECK(cell(c, 0, "a").run_uuids == std::vector<std::string>{a64});
  CHECK(cell(c, 0, "b").run_uuids == std::vector<std::string>{b64});
  CHECK(cell(c, 1, "a").run_uuids == std::vector<std::string>{a128});
  CHECK(cell(c, 1, "b").run_uuids == std::vector<std::string>{b128});
  CHECK(cell(c, 0, "b").ratio ==
        Approx(expected_throughput(step_times(60, 0.1, 20)) /
               expected_throughput(step_times(100, 0.1, 20))).epsilon(1e-12));

  SECTION("comparing by the batch size instead groups by label: machines are not pooled") {
    const Comparison bs = compare_runs(db, by("train.batch_size"));
    CHECK(bs.baseline == "64");
    CHECK(bs.values == std::vector<std::string>{"64", "128"});
    REQUIRE(bs.groups.size() == 2);
    CHECK(bs.groups[0].settings == Settings{{"label", "a"}});
    CHECK(bs.groups[1].settings == Settings{{"label", "b"}});
    CHECK(cell(bs, 0, "128").run_uuids == std::vector<std::string>{a128});
    CHECK(cell(bs, 1, "128").run_uuids == std::vector<std::string>{b128});
  }
  SECTION("--where narrows the runs") {
    CompareOptions o = by("label");
    o.where = {{"train.batch_size", "128"}};
    const Comparison w = compare_runs(db, o);
    REQUIRE(w.groups.size() == 1);
    CHECK(w.groups[0].settings.empty());  // a single group: nothing to tell apart
    CHECK(cell(w, 0, "a").run_uuids == std::vector<std::string>{a128});
  }
}

TEST_CASE("runs without a counterpart are listed with the reason", "[compare]") {
  store_test::TempDir dir;
  Store db(dir.file("r.db"));
  add_run(db, labelled("a"), step_times(100, 0.1, 20));
  add_run(db, labelled("b"), step_times(90, 0.1, 20));
  const std::string lonely = add_run(db, labelled("a", 256), step_times(100, 0.1, 20));
  const std::string no_base_b = add_run(db, labelled("b", 1024), step_times(100, 0.1, 20));
  const std::string no_base_c = add_run(db, labelled("c", 1024), step_times(100, 0.1, 20));
  const std::string unmeasured = add_run(db, labelled("b", 256), {});
  add_run(db, labelled("b", 256), step_times(10, 0.1, 20), RunStatus::failed);

  const Comparison c = compare_runs(db, by("label"));
  REQUIRE(c.groups.size() == 1);
  CHECK(c.baseline == "a");
  CHECK(c.values == std::vector<std::string>{"a", "b"});
  REQUIRE(c.unmatched.size() == 4);  // the failed run takes no part at all
  std::map<std::string, std::string> reasons;
  for (const auto& u : c.unmatched) reasons[u.uuid] = u.reason;
  CHECK(mentions(reasons.at(lonely), "no run with another label has the same settings"));
  CHECK(mentions(reasons.at(no_base_b), "no label = a run"));
  CHECK(mentions(reasons.at(no_base_c), "no label = a run"));
  CHECK(reasons.at(unmeasured) == "no measured steps");
  CHECK(c.unmatched[0].value == "a");
  CHECK(c.unmatched[0].uuid == lonely);  // in run order
  // The matched group shows the batch size that tells it from the others.
  CHECK(c.groups[0].settings.at("train.batch_size") == "512");
}

TEST_CASE("a run without the compared setting is listed, not compared", "[compare]") {
  store_test::TempDir dir;
  Store db(dir.file("r.db"));
  NewRun slow = labelled("a"), fast = labelled("a"), without = labelled("a");
  fast.params["train.lr"] = "0.002";
  fast.config_hash += "-lr";
  without.params.erase("train.lr");
  without.config_hash += "-none";
  add_run(db, slow, step_times(100, 0.1, 20));
  add_run(db, fast, step_times(90, 0.1, 20));
  const std::string none = add_run(db, without, step_times(80, 0.1, 20));
  const Comparison c = compare_runs(db, by("train.lr"));
  CHECK(c.values == std::vector<std::string>{"0.001", "0.002"});
  REQUIRE(c.groups.size() == 1);
  REQUIRE(c.unmatched.size() == 1);
  CHECK(c.unmatched[0].uuid == none);
  CHECK(c.unmatched[0].reason == "no train.lr setting");
}

TEST_CASE("repeats with the same settings pool their steps", "[compare]") {
  store_test::TempDir dir;
  Store db(dir.file("r.db"));
  const auto base = step_times(100, 0.15, 25);
  const auto first = step_times(70, 0.15, 25, 2);
  const auto second = step_times(75, 0.15, 25, 4);
  add_run(db, labelled("a"), base);
  const std::string r1 = add_run(db, labelled("b"), first, RunStatus::complete, 1 << 20);
  const Comparison single = compare_runs(db, by("label"));
  const std::string r2 = add_run(db, labelled("b"), second, RunStatus::complete, 3 << 20);
  const Comparison pooled = compare_runs(db, by("label"));

  REQUIRE(pooled.groups.size() == 1);
  const CompareCell& b = cell(pooled, 0, "b");
  CHECK(b.run_uuids == std::vector<std::string>{r1, r2});
  CHECK(b.measured_steps == 50);
  const double expected = expected_throughput(concat(first, second));
  CHECK(b.throughput == Approx(expected).epsilon(1e-12));
  CHECK(b.ratio == Approx(expected / expected_throughput(base)).epsilon(1e-12));
  CHECK(b.peak_memory_bytes == 3 << 20);  // the largest of the two

  SECTION("a repeat of the same steps makes the interval tighter") {
    store_test::TempDir dir2;
    Store db2(dir2.file("r.db"));
    add_run(db2, labelled("a"), base);
    add_run(db2, labelled("b"), first);
    const CompareCell once = cell(compare_runs(db2, by("label")), 0, "b");
    add_run(db2, labelled("b"), first);
    const CompareCell twice = cell(compare_runs(db2, by("label")), 0, "b");
    CHECK(twice.ratio == Approx(once.ratio).epsilon(1e-12));
    CHECK(twice.ratio_hi - twice.ratio_lo < once.ratio_hi - once.ratio_lo);
  }
  CHECK(cell(single, 0, "b").run_uuids == std::vector<std::string>{r1});
}

TEST_CASE("repeats that disagree widen the interval: runs are resampled, then steps",
          "[compare]") {
  // Side b: one run at ~100 ms a step and a repeat at ~50 ms; side a: two
  // runs at ~75 ms. The pooled throughputs are equal, so the ratio is 1; each
  // b run's steps alone are steady, so resampling pooled steps would give a
  // narrow interval. Resampling runs first shows the disagreement: a
  // resample of b can hold the slow run twice (ratio 0.75) or the fast one
  // twice (1.5).
  store_test::TempDir dir;
  Store db(dir.file("r.db"));
  add_run(db, labelled("a"), step_times(75, 0.02, 30));
  add_run(db, labelled("a"), step_times(75, 0.02, 30, 3));
  add_run(db, labelled("b"), step_times(100, 0.02, 30));
  add_run(db, labelled("b"), step_times(50, 0.02, 30, 5));
  const CompareCell b = cell(compare_runs(db, by("label")), 0, "b");
  CHECK(b.ratio == Approx(expected_throughput(concat(step_times(100, 0.02, 30),
                                                     step_times(50, 0.02, 30, 5))) /
                          expected_throughput(concat(step_times(75, 0.02, 30),
                                                     step_times(75, 0.02, 30, 3))))
                       .epsilon(1e-12));
  CHECK(b.interval_includes_one);
  CHECK(b.ratio_lo < 0.8);
  CHECK(b.ratio_hi > 1.4);
}

TEST_CASE("by device compares the stored device names, not train.device", "[compare]") {
  store_test::TempDir dir;
  Store db(dir.file("r.db"));
  NewRun ampere = labelled("box-3090");
  ampere.environment.fields["device_name"] = "NVIDIA GeForce RTX 3090";
  ampere.params["store.label"] = "\"box-3090\"";
  ampere.params["data.path"] = "\"/data/a\"";
  ampere.params["train.device"] = "\"cuda:0\"";
  NewRun ada = labelled("box-4090D");
  ada.environment.fields["device_name"] = "NVIDIA GeForce RTX 4090 D";
  ada.params["store.label"] = "\"box-4090D\"";
  ada.params["data.path"] = "\"/mnt/other\"";  // left out of matching, as by the experiment hash
  ada.params["train.device"] = "\"cuda:0\"";
  const auto t3090 = step_times(140, 0.05, 30);
  const auto t4090 = step_times(100, 0.05, 30, 1);
  add_run(db, ampere, t3090);
  add_run(db, ada, t4090);

  const Comparison c = compare_runs(db, by("device"));
  REQUIRE(c.groups.size() == 1);
  CHECK(c.values ==
        std::vector<std::string>{"NVIDIA GeForce RTX 3090", "NVIDIA GeForce RTX 4090 D"});
  const CompareCell& x = cell(c, 0, "NVIDIA GeForce RTX 4090 D");
  CHECK(x.ratio == Approx(expected_throughput(t4090) / expected_throughput(t3090)).epsilon(1e-12));
  CHECK_FALSE(x.interval_includes_one);

  // train.device is "cuda:0" on both: one value, nothing matched.
  const Comparison by_string = compare_runs(db, by("train.device"));
  CHECK(by_string.groups.empty());
  CHECK(by_string.unmatched.size() == 2);
}

TEST_CASE("by device, each card's FLOP/s and its share of its own peak", "[compare][peak]") {
  store_test::TempDir dir;
  Store db(dir.file("r.db"));
  NewRun ampere = labelled("lab");
  ampere.environment.fields["device_name"] = "NVIDIA GeForce RTX 3090";
  NewRun ada = labelled("lab");
  ada.environment.fields["device_name"] = "NVIDIA GeForce RTX 4090 D";
  const double flops_per_step = kImages * 24.55e9;  // ResNet50 at 224x224, AdamW
  const auto t3090 = step_times(140, 0.05, 30);
  const auto t4090 = step_times(100, 0.05, 30, 1);
  const auto t4090_again = step_times(104, 0.05, 30, 2);
  add_run(db, ampere, t3090, RunStatus::complete, 1 << 30, flops_per_step, 71e12);
  add_run(db, ada, t4090, RunStatus::complete, 1 << 30, flops_per_step, 147.1e12);
  add_run(db, ada, t4090_again, RunStatus::complete, 1 << 30, flops_per_step, 147.1e12);

  const Comparison c = compare_runs(db, by("device"));
  REQUIRE(c.groups.size() == 1);
  const CompareCell& a = cell(c, 0, "NVIDIA GeForce RTX 3090");
  const CompareCell& d = cell(c, 0, "NVIDIA GeForce RTX 4090 D");
  const double flops_3090 = flops_per_step / kImages * expected_throughput(t3090);
  // The repeats pool: FLOP/s at the pooled throughput.
  const double flops_4090 =
      flops_per_step / kImages * expected_throughput(concat(t4090, t4090_again));
  CHECK(a.achieved_flops == Approx(flops_3090).epsilon(1e-9));
  CHECK(d.achieved_flops == Approx(flops_4090).epsilon(1e-9));
  CHECK(a.peak_flops == 71e12);
  CHECK(a.fraction_of_peak == Approx(flops_3090 / 71e12).epsilon(1e-9));
  CHECK(d.fraction_of_peak == Approx(flops_4090 / 147.1e12).epsilon(1e-9));

  // Runs stored without FLOPs or peak: NaN, not 0.
  NewRun old = labelled("lab", 256);
  old.environment.fields["device_name"] = "NVIDIA GeForce RTX 3090";
  NewRun old_ada = labelled("lab", 256);
  old_ada.environment.fields["device_name"] = "NVIDIA GeForce RTX 4090 D";
  add_run(db, old, t3090);
  add_run(db, old_ada, t4090, RunStatus::complete, 1 << 30, flops_per_step, 0);
  const Comparison both = compare_runs(db, by("device"));
  REQUIRE(both.groups.size() == 2);
  for (const auto& g : both.groups) {
    if (g.settings.at("train.batch_size") != "256") continue;
    CHECK(std::isnan(g.cells.at(0).achieved_flops));
    CHECK(std::isfinite(g.cells.at(1).achieved_flops));
    CHECK(std::isnan(g.cells.at(1).fraction_of_peak));
  }
}

TEST_CASE("each cell's time to the target accuracy: the mean over its runs that reached it",
          "[compare][target]") {
  store_test::TempDir dir;
  const std::string path = dir.file("r.db");
  std::vector<std::string> a, b;
  {
    Store db(path);
    NewRun ampere = labelled("lab"), ada = labelled("lab");
    ampere.environment.fields["device_name"] = "RTX 3090";
    ada.environment.fields["device_name"] = "RTX 4090 D";
    for (int i = 0; i < 2; ++i) {
      a.push_back(add_run(db, ampere, step_times(140, 0.05, 30, i)));
      b.push_back(add_run(db, ada, step_times(100, 0.05, 30, i)));
    }
  }
  // As runs with measure.target_accuracy = 0.88 store it: the 3090's both
  // reached it (50 and 60 s), one 4090 D run did (40 s), the other not.
  const auto set = [&](const std::string& uuid, const std::string& seconds) {
    store_test::sql_exec(path, "UPDATE runs SET target_accuracy = 0.88, time_to_target_s = " +
                                   seconds + " WHERE uuid = '" + uuid + "'");
  };
  set(a[0], "50");
  set(a[1], "60");
  set(b[0], "40");
  set(b[1], "NULL");
  Store db(path);
  const Comparison c = compare_runs(db, by("device"));
  REQUIRE(c.groups.size() == 1);
  const CompareCell& x = cell(c, 0, "RTX 3090");
  const CompareCell& y = cell(c, 0, "RTX 4090 D");
  CHECK(x.target_accuracy == 0.88);
  CHECK(x.time_to_target_s == 55);
  CHECK(x.reached_target == 2);
  CHECK(y.time_to_target_s == 40);
  CHECK(y.reached_target == 1);
  // No target stored: NaN, nothing reached.
  store_test::sql_exec(path, "UPDATE runs SET target_accuracy = NULL, time_to_target_s = NULL");
  const Comparison none = compare_runs(db, by("device"));
  CHECK(std::isnan(cell(none, 0, "RTX 3090").target_accuracy));
  CHECK(cell(none, 0, "RTX 3090").reached_target == 0);
}

// A CPU run on AVX2 kernels (ONEDNN_MAX_CPU_ISA=AVX2) and one on AMX kernels of
// the same CPU: by isa they compare; by a setting they are never pooled.
TEST_CASE("by train.ranks, the scaling efficiency: the ratio over the ranks' ratio",
          "[compare][ranks]") {
  store_test::TempDir dir;
  Store db(dir.file("r.db"));
  const auto ranked = [](int n) {
    xrun::store::NewRun r = labelled("box");
    r.params["train.ranks"] = std::to_string(n);
    r.config_hash += "-ranks" + std::to_string(n);
    return r;
  };
  add_run(db, ranked(1), step_times(100, 0.1, 30));
  add_run(db, ranked(2), step_times(60, 0.1, 30, 2));
  add_run(db, ranked(4), step_times(35, 0.1, 30, 5));
  const Comparison c = compare_runs(db, by("train.ranks"));
  REQUIRE(c.groups.size() == 1);
  CHECK(c.values == std::vector<std::string>{"1", "2", "4"});
  const CompareCell& one = cell(c, 0, "1");
  CHECK(one.scaling == 1.0);
  for (const auto& [value, n] : {std::pair{"2", 2}, std::pair{"4", 4}}) {
    INFO(value);
    const CompareCell& x = cell(c, 0, value);
    CHECK(x.scaling == Approx(x.ratio / n).epsilon(1e-12));
    CHECK(x.scaling_lo == Approx(x.ratio_lo / n).epsilon(1e-12));
    CHECK(x.scaling_hi == Approx(x.ratio_hi / n).epsilon(1e-12));
    CHECK(x.scaling_lo < x.scaling);
    CHECK(x.scaling < x.scaling_hi);
  }
  // Against 2 ranks, 4 ranks' ideal is twice the throughput.
  const Comparison from_two = compare_runs(db, by("train.ranks", "2"));
  const CompareCell& four = cell(from_two, 0, "4");
  CHECK(four.scaling == Approx(four.ratio / 2).epsilon(1e-12));
}

TEST_CASE("CPU runs compare by oneDNN ISA, and only runs of one ISA pool", "[compare]") {
  store_test::TempDir dir;
  Store db(dir.file("r.db"));
  auto cpu_run = [](const std::string& precision, const std::string& isa) {
    NewRun r = labelled("xeon", 32, precision);
    r.device = "cpu";
    r.environment.fields["device_name"] = "Intel(R) Xeon(R) Processor";
    r.environment.fields["onednn_isa"] = isa;
    return r;
  };
  const auto avx2_fp32 = step_times(200, 0.05, 20), amx_fp32 = step_times(150, 0.05, 20, 1);
  const auto amx_bf16 = step_times(90, 0.05, 20, 2);
  add_run(db, cpu_run("fp32", "avx2"), avx2_fp32);
  add_run(db, cpu_run("fp32", "avx512_core_amx"), amx_fp32);
  add_run(db, cpu_run("bf16", "avx512_core_amx"), amx_bf16);
  // A GPU run has no ISA to compare: listed, with why.
  add_run(db, labelled("xeon", 32, "fp32"), step_times(20, 0.05, 20));

  const Comparison by_isa = compare_runs(db, by("isa", "avx2"));
  REQUIRE(by_isa.groups.size() == 1);  // fp32 on both ISAs; bf16 has no AVX2 twin
  CHECK(by_isa.values == std::vector<std::string>{"avx2", "avx512_core_amx"});
  CHECK(cell(by_isa, 0, "avx512_core_amx").ratio ==
        Approx(expected_throughput(amx_fp32) / expected_throughput(avx2_fp32)).epsilon(1e-12));
  bool gpu_listed = false;
  for (const auto& u : by_isa.unmatched)
    if (u.device == "cuda:0") gpu_listed = mentions(u.reason, "not a CPU run");
  CHECK(gpu_listed);

  // By precision, bf16 (AMX) meets fp32 on AMX only, never the AVX2 run.
  const Comparison by_precision = compare_runs(db, by("train.precision", "fp32"));
  REQUIRE(by_precision.groups.size() == 1);
  const CompareCell& base = cell(by_precision, 0, "fp32");
  REQUIRE(base.run_uuids.size() == 1);
  CHECK(base.throughput == Approx(expected_throughput(amx_fp32)).epsilon(1e-12));
  // The group says which ISA it ran on (the unmatched runs' ISAs differ).
  CHECK(by_precision.groups[0].settings.at("isa") == "avx512_core_amx");
}

TEST_CASE("an unknown key or baseline is refused with what exists", "[compare]") {
  store_test::TempDir dir;
  Store db(dir.file("r.db"));
  add_run(db, labelled("a", 512, "fp16"), step_times(100, 0.1, 10));
  add_run(db, labelled("a", 512, "bf16"), step_times(90, 0.1, 10));
  try {
    compare_runs(db, by("train.precison"));
    FAIL("no error for an unknown key");
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    CHECK(mentions(what, "--by train.precison"));
    CHECK(mentions(what, "train.precision"));
    CHECK(mentions(what, "label"));
    CHECK(mentions(what, "device"));
  }
  try {
    compare_runs(db, by("train.precision", "fp8"));
    FAIL("no error for an unknown baseline");
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    CHECK(mentions(what, "--baseline fp8"));
    CHECK(mentions(what, "the values are: bf16, fp16"));
  }
  CHECK_THROWS_AS(compare_runs(db, by("")), std::invalid_argument);
  const Comparison ok = compare_runs(db, by("train.precision", "fp16"));
  REQUIRE(ok.groups.size() == 1);
  CHECK(ok.values == std::vector<std::string>{"fp16", "bf16"});
}

TEST_CASE("a store with nothing to compare gives no groups", "[compare]") {
  store_test::TempDir dir;
  Store db(dir.file("r.db"));
  CHECK(compare_runs(db, by("label")).groups.empty());
  add_run(db, labelled("a"), step_times(100, 0.1, 10));
  const Comparison one = compare_runs(db, by("label"));
  CHECK(one.groups.empty());
  REQUIRE(one.unmatched.size() == 1);
  CHECK(one.baseline == "a");
}

namespace {

// The 2.5% and 97.5% percentiles of the two-level bootstrap of the ratio
// b / a, computed here independently of compare.cpp: another generator
// (SplitMix64), many more resamples, runs drawn then steps.
std::pair<double, double> reference_interval(const std::vector<std::vector<double>>& a,
                                             const std::vector<std::vector<double>>& b,
                                             int resamples) {
  uint64_t state = 0x9e3779b97f4a7c15ull;
  const auto next = [&state](uint64_t n) {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (z ^ (z >> 31)) % n;
  };
  const auto resample = [&](const std::vector<std::vector<double>>& runs) {
    double ms = 0, steps = 0;
    for (size_t r = 0; r < runs.size(); ++r) {
      const std::vector<double>& run = runs[next(runs.size())];
      for (size_t k = 0; k < run.size(); ++k) {
        ms += run[next(run.size())];
        steps += 1;
      }
    }
    return steps / ms;  // images per ms, up to the same constant on both sides
  };
  std::vector<double> ratios(static_cast<size_t>(resamples));
  for (double& r : ratios) r = resample(b) / resample(a);
  std::sort(ratios.begin(), ratios.end());
  const auto at = [&](double q) { return ratios[static_cast<size_t>(q * (ratios.size() - 1))]; };
  return {at(0.025), at(0.975)};
}

}  // namespace

TEST_CASE("the interval is the 95% bootstrap interval, pinned against one computed here",
          "[compare]") {
  // One run a side, and two disagreeing repeats a side. 40,000 resamples in
  // compare, 400,000 here: each end lands within 2% of the interval's width
  // (the Monte Carlo error is about 0.5% of it), while a 90% interval's ends
  // sit about 8% of the width inside a 95% one's.
  const std::vector<std::vector<double>> one_a = {step_times(100, 0.3, 40)},
                                         one_b = {step_times(90, 0.3, 40, 4)};
  const std::vector<std::vector<double>> two_a = {step_times(100, 0.1, 30),
                                                  step_times(80, 0.1, 30, 2)},
                                         two_b = {step_times(95, 0.1, 30, 5),
                                                  step_times(70, 0.1, 30, 7)};
  for (const auto& [a, b] : {std::pair{one_a, one_b}, std::pair{two_a, two_b}}) {
    INFO(a.size() << " run(s) a side");
    store_test::TempDir dir;
    Store db(dir.file("r.db"));
    for (const auto& run : a) add_run(db, labelled("a"), run);
    for (const auto& run : b) add_run(db, labelled("b"), run);
    CompareOptions o = by("label");
    o.bootstrap_samples = 40000;
    const CompareCell c = cell(compare_runs(db, o), 0, "b");
    const auto [lo, hi] = reference_interval(a, b, 400000);
    const double width = hi - lo;
    INFO("compare [" << c.ratio_lo << ", " << c.ratio_hi << "], here [" << lo << ", " << hi << "]");
    CHECK(width > 0.05);
    CHECK(std::abs(c.ratio_lo - lo) < 0.02 * width);
    CHECK(std::abs(c.ratio_hi - hi) < 0.02 * width);
  }
}

TEST_CASE("the bootstrap is deterministic for a seed", "[compare]") {
  store_test::TempDir dir;
  Store db(dir.file("r.db"));
  add_run(db, labelled("a"), step_times(100, 0.3, 15));
  add_run(db, labelled("b"), step_times(95, 0.3, 15, 6));
  CompareOptions o = by("label");
  o.seed = 42;
  const CompareCell x = cell(compare_runs(db, o), 0, "b");
  const CompareCell y = cell(compare_runs(db, o), 0, "b");
  CHECK(x.ratio_lo == y.ratio_lo);
  CHECK(x.ratio_hi == y.ratio_hi);
  o.seed = 43;
  const CompareCell z = cell(compare_runs(db, o), 0, "b");
  CHECK(z.ratio == x.ratio);
  CHECK(z.ratio_lo != x.ratio_lo);
  o.bootstrap_samples = 0;
  CHECK_THROWS_AS(compare_runs(db, o), std::invalid_argument);
}

TEST_CASE("natural order puts numbers first, numerically", "[compare]") {
  CHECK(natural_less("9", "10"));
  CHECK(natural_less("0.0005", "0.001"));
  CHECK(natural_less("64", "128"));
  CHECK(natural_less("1e3", "2000"));
  CHECK(natural_less("512", "auto"));
  CHECK_FALSE(natural_less("auto", "512"));
  CHECK(natural_less("box-9", "box-10"));
  CHECK(natural_less("1-thread", "2-threads"));
  CHECK(natural_less("bf16", "fp16"));
  CHECK_FALSE(natural_less("fp16", "fp16"));
  std::vector<std::string> v = {"run10", "run2", "b", "10", "run1", "2", "a"};
  std::sort(v.begin(), v.end(), natural_less);
  CHECK(v == std::vector<std::string>{"2", "10", "a", "b", "run1", "run2", "run10"});
}
