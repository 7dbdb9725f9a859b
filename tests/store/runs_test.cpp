// tests/store/runs_test.cpp: writing runs and reading them back: round trips
// of every record type, NaN as NULL, list_runs filters, UUID prefixes,
// find_complete, stale-run recovery, the run_summary view and plain SQL.
#include "catch2_compat.h"

#include <sqlite3.h>

#include <cmath>
#include <limits>
#include <set>

#include "store/internal.h"
#include "store/store.h"
#include "store_test_util.h"

using namespace xrun;
using namespace xrun::store;
using store_test::make_run;
using store_test::sql_exec;
using store_test::sql_int;
using store_test::sql_text;
using store_test::TempDir;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

RunSummary make_summary() {
  RunSummary s;
  s.measured_steps = 90;
  s.measured_images = 90 * 512;
  s.measured_seconds = 18.5;
  s.throughput = 2490.8;
  s.step_ms_median = 205.25;
  s.step_ms_p10 = 201.0;
  s.step_ms_p90 = 212.5;
  s.step_ms_mean = 206.0;
  s.step_ms_stddev = 3.5;
  s.step_outliers = 2;
  s.data_wait_fraction = 0.015;
  s.peak_memory_bytes = 21474836480LL;
  s.skipped_steps = 1;
  s.final_loss = 0.75;
  s.test_accuracy = kNaN;  // not evaluated
  s.test_loss = kNaN;
  s.flops_per_step = 6.291e12;
  s.peak_flops = 165.2e12;
  s.peak_source = "published: NVIDIA GeForce RTX 4090 D, bf16 dense";
  s.peak_bytes_per_s = 1008e9;
  s.peak_bandwidth_source = "memory clock 10501 MHz x 2 x 384-bit bus";
  s.target_accuracy = 0.6;
  s.time_to_target_s = 25.75;
  s.time_to_target_eval_s = 1.5;
  s.epochs_to_target = 1.0;
  s.steps_to_target = 10;
  s.images_to_target = 5120;
  s.best_accuracy = 0.61;
  s.lr = 4e-3;
  s.batch_size = 512;
  s.ranks = 2;
  s.global_batch = 2048;  // 512 x accumulate 2 x 2 ranks
  return s;
}

std::vector<StepRecord> make_steps(int n) {
  std::vector<StepRecord> steps;
  for (int i = 0; i < n; ++i) {
    StepRecord s;
    s.step = i;
    s.epoch = i / 10;
    s.kind = i < 3 ? StepKind::warmup : (i % 7 == 0 ? StepKind::unmeasured : StepKind::measured);
    s.step_ms = 200.0 + i;
    s.data_wait_ms = 0.25 * i;
    s.loss = i % 4 == 0 ? kNaN : 2.0 - 0.01 * i;
    s.lr = 1e-3;
    s.loss_scale = 65536.0;
    s.images = 512;
    s.skipped = i == 5;
    steps.push_back(s);
  }
  return steps;
}

}  // namespace

TEST_CASE("RunStatus names round-trip and unknown names are refused", "[store]") {
  for (RunStatus s : {RunStatus::planned, RunStatus::running, RunStatus::complete,
                      RunStatus::failed, RunStatus::interrupted})
    CHECK(run_status_from_string(to_string(s)) == s);
  CHECK_THROWS_AS(run_status_from_string("done"), StoreError);
}

TEST_CASE("UUIDs are random version 4", "[store]") {
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    std::string u = detail::new_uuid();
    REQUIRE(u.size() == 36);
    CHECK(u[8] == '-');
    CHECK(u[14] == '4');
    CHECK(std::string("89ab").find(u[19]) != std::string::npos);
    seen.insert(u);
  }
  CHECK(seen.size() == 1000);
}

TEST_CASE("begin_run writes a running run with host, pid, params and environment",
          "[store][runs]") {
  TempDir tmp;
  const std::string path = tmp.file("r.db");
  Store store(path);
  const NewRun nr = make_run("fp16", 512);
  const std::string uuid = store.begin_run(nr);

  auto d = store.get_run(uuid);
  REQUIRE(d);
  CHECK(d->info.uuid == uuid);
  CHECK(d->info.status == "running");
  CHECK(d->info.experiment == "classic");
  CHECK(d->info.label == "box-a");
  CHECK(d->info.device == "cuda:0");
  CHECK(d->info.device_name == "NVIDIA GeForce RTX 4090 D");
  CHECK(d->info.config_hash == nr.config_hash);
  CHECK(d->info.experiment_hash == "exp-classic");
  CHECK(d->info.batch_size == 512);  // from params until the run finishes
  CHECK(d->info.precision == "fp16");
  CHECK(d->info.cudnn_benchmark == "true");
  CHECK(d->info.workers == 4);
  CHECK(std::isnan(d->info.throughput));  // no figures yet
  CHECK_FALSE(d->has_summary);
  CHECK(d->info.started_at.size() == 24);
  CHECK(d->info.started_at.back() == 'Z');
  CHECK(d->info.finished_at.empty());
  CHECK(d->host == detail::host_name());
  CHECK(d->pid == getpid());
  CHECK(d->description == nr.description);
  CHECK(d->experiment_file == nr.experiment_file);
  CHECK(d->config_json == nr.config_json);
  CHECK(d->params == nr.params);  // canonical JSON kept as given
  CHECK(d->environment.fields == nr.environment.fields);
  CHECK(d->summary.measured_steps == 0);
  CHECK(d->step_count == 0);

  // Environment columns and the plain-text parameter column.
  const std::string run = "(SELECT id FROM runs WHERE uuid = '" + uuid + "')";
  CHECK(sql_text(path, "SELECT cudnn FROM runs WHERE uuid = '" + uuid + "'") == "9.1.0");
  CHECK(sql_text(path, "SELECT compute_capability || '/' || cpu || '/' || git_commit FROM runs") ==
        "8.9/AMD EPYC 7763/abc123");
  CHECK(sql_int(path, "SELECT count(*) FROM run_environment WHERE run = " + run) == 13);
  CHECK(sql_text(path, "SELECT value FROM run_params WHERE key = 'train.precision'") == "fp16");
  CHECK(sql_text(path, "SELECT value_json FROM run_params WHERE key = 'train.precision'") ==
        "\"fp16\"");
  CHECK(sql_text(path, "SELECT value FROM run_params WHERE key = 'train.lr'") == "0.001");
  CHECK(sql_int(path, "SELECT value IS NULL FROM run_params WHERE key = 'data.root'") == 1);

  // set_environment adds and overwrites fields.
  Environment more;
  more.fields = {{"cudnn", "9.2.0"}, {"cupti", "2024.1"}};
  store.set_environment(uuid, more);
  d = store.get_run(uuid);
  CHECK(d->environment.get("cudnn") == "9.2.0");
  CHECK(d->environment.get("cupti") == "2024.1");
  CHECK(d->environment.get("driver") == "550.54");
  CHECK(sql_text(path, "SELECT cudnn FROM runs") == "9.2.0");

  // A second run of the same experiment reuses its experiment row.
  store.begin_run(make_run("fp32", 512));
  CHECK(sql_int(path, "SELECT count(*) FROM experiments") == 1);
  CHECK_THROWS_AS(store.write_steps("no-such-uuid", make_steps(1)), StoreError);
}

TEST_CASE("records round-trip, NaN stored as NULL and read back as NaN", "[store][runs]") {
  TempDir tmp;
  const std::string path = tmp.file("r.db");
  Store store(path);
  const std::string uuid = store.begin_run(make_run());

  const auto steps = make_steps(25);
  store.write_steps(uuid, std::span<const StepRecord>(steps).first(10));
  store.write_steps(uuid, std::span<const StepRecord>(steps).subspan(10));
  store.write_epoch(uuid, {0, 1.9, kNaN, kNaN, 12.5, 0.0, 5120});
  store.write_epoch(uuid, {1, 1.2, 1.1, 0.61, 12.0, 1.5, 5120});
  store.write_eval(uuid, {5, 0, 2560, 12.75, 0.25, 1.5, 0.4});
  store.write_eval(uuid, {10, 1, 5120, 25.75, 1.5, 1.1, 0.61});
  store.write_eval(uuid, {12, 1, 6144, 30.0, 2.0, kNaN, kNaN});
  std::vector<PhaseRecord> phases = {{"data_wait", 90, 3.5, 0.0},
                                     {"forward", 90, 100.0, 95.5},
                                     {"backward", 90, 180.0, kNaN}};
  store.write_phases(uuid, phases);
  std::vector<KernelRecord> kernels = {
      {"sm80_xmma_fprop_implicit_gemm", "forward", 4770, 812.5, 0.01, 1.2},
      {"cudnn::bn_fw_tr_1C11_kernel", "forward", 4770, 120.0, 0.005, kNaN}};
  store.write_kernels(uuid, kernels);
  std::vector<MemoryRecord> memory = {{"parameters", 94112088}, {"activations", 812345600}};
  store.write_memory(uuid, memory);
  const std::vector<RankRecord> ranks = {
      {0, "node-a", "cuda:0 (NVIDIA H200)", 150.25, 0.5, 12.5, 102228128.0, 8.25e9},
      {1, "node-b", "cuda:0 (NVIDIA H200)", 151.0, 0.25, 13.0, 102228128.0, kNaN}};
  store.write_ranks(uuid, ranks);
  const RunSummary sum = make_summary();
  store.finish_run(uuid, RunStatus::complete, sum);

  auto back = store.get_steps(uuid);
  REQUIRE(back.size() == steps.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    INFO("step " << i);
    CHECK(back[i].step == steps[i].step);
    CHECK(back[i].epoch == steps[i].epoch);
    CHECK(back[i].kind == steps[i].kind);
    CHECK(back[i].step_ms == steps[i].step_ms);
    CHECK(back[i].data_wait_ms == steps[i].data_wait_ms);
    if (std::isnan(steps[i].loss))
      CHECK(std::isnan(back[i].loss));
    else
      CHECK(back[i].loss == steps[i].loss);
    CHECK(back[i].lr == steps[i].lr);
    CHECK(back[i].loss_scale == steps[i].loss_scale);
    CHECK(back[i].images == steps[i].images);
    CHECK(back[i].skipped == steps[i].skipped);
  }
  CHECK(sql_int(path, "SELECT count(*) FROM steps WHERE loss IS NULL") == 7);

  auto d = store.get_run(uuid);
  REQUIRE(d);
  CHECK(d->info.status == "complete");
  CHECK(d->info.finished_at.size() == 24);
  CHECK(d->info.error.empty());
  CHECK(d->step_count == 25);
  REQUIRE(d->epochs.size() == 2);
  CHECK(d->epochs[0].epoch == 0);
  CHECK(d->epochs[0].train_loss == 1.9);
  CHECK(std::isnan(d->epochs[0].test_loss));
  CHECK(std::isnan(d->epochs[0].test_accuracy));
  CHECK(d->epochs[0].images == 5120);
  CHECK(d->epochs[1].test_accuracy == 0.61);
  CHECK(d->epochs[1].eval_seconds == 1.5);
  REQUIRE(d->evals.size() == 3);
  CHECK(d->evals[1].step == 10);
  CHECK(d->evals[1].epoch == 1);
  CHECK(d->evals[1].images == 5120);
  CHECK(d->evals[1].wall_seconds == 25.75);
  CHECK(d->evals[1].eval_seconds == 1.5);
  CHECK(d->evals[1].test_loss == 1.1);
  CHECK(d->evals[1].test_accuracy == 0.61);
  CHECK(std::isnan(d->evals[2].test_accuracy));
  REQUIRE(d->phases.size() == 3);
  CHECK(d->phases[0].phase == "data_wait");
  CHECK(d->phases[1].gpu_ms == 95.5);
  CHECK(std::isnan(d->phases[2].gpu_ms));
  REQUIRE(d->memory.size() == 2);
  CHECK(d->memory[0].region == "parameters");
  CHECK(d->memory[0].bytes == 94112088);
  CHECK(d->memory[1].bytes == 812345600);
  REQUIRE(d->kernels.size() == 2);
  CHECK(d->kernels[0].name == "sm80_xmma_fprop_implicit_gemm");
  CHECK(d->kernels[0].phase == "forward");
  CHECK(d->kernels[0].calls == 4770);
  CHECK(d->kernels[0].total_ms == 812.5);
  CHECK(d->kernels[0].min_ms == 0.01);
  CHECK(std::isnan(d->kernels[1].max_ms));

  const RunSummary& s = d->summary;
  CHECK(s.measured_steps == sum.measured_steps);
  CHECK(s.measured_images == sum.measured_images);
  CHECK(s.measured_seconds == sum.measured_seconds);
  CHECK(s.throughput == sum.throughput);
  CHECK(s.step_ms_median == sum.step_ms_median);
  CHECK(s.step_ms_p10 == sum.step_ms_p10);
  CHECK(s.step_ms_p90 == sum.step_ms_p90);
  CHECK(s.step_ms_mean == sum.step_ms_mean);
  CHECK(s.step_ms_stddev == sum.step_ms_stddev);
  CHECK(s.step_outliers == sum.step_outliers);
  CHECK(s.data_wait_fraction == sum.data_wait_fraction);
  CHECK(s.peak_memory_bytes == sum.peak_memory_bytes);
  CHECK(s.skipped_steps == sum.skipped_steps);
  CHECK(s.final_loss == sum.final_loss);
  CHECK(s.flops_per_step == sum.flops_per_step);
  CHECK(s.peak_flops == sum.peak_flops);
  CHECK(s.peak_source == sum.peak_source);
  CHECK(s.peak_bytes_per_s == sum.peak_bytes_per_s);
  CHECK(s.peak_bandwidth_source == sum.peak_bandwidth_source);
  CHECK(s.target_accuracy == sum.target_accuracy);
  CHECK(s.time_to_target_s == sum.time_to_target_s);
  CHECK(s.time_to_target_eval_s == sum.time_to_target_eval_s);
  CHECK(s.epochs_to_target == sum.epochs_to_target);
  CHECK(s.steps_to_target == sum.steps_to_target);
  CHECK(s.images_to_target == sum.images_to_target);
  CHECK(s.best_accuracy == sum.best_accuracy);
  CHECK(s.lr == sum.lr);
  CHECK(s.ranks == 2);
  CHECK(s.global_batch == 2048);
  CHECK(sql_int(path, "SELECT ranks * 10000 + global_batch FROM run_summary") == 22048);
  REQUIRE(d->ranks.size() == 2);
  for (size_t r = 0; r < 2; ++r) {
    INFO("rank " << r);
    CHECK(d->ranks[r].rank == ranks[r].rank);
    CHECK(d->ranks[r].host == ranks[r].host);
    CHECK(d->ranks[r].device == ranks[r].device);
    CHECK(d->ranks[r].step_ms_median == ranks[r].step_ms_median);
    CHECK(d->ranks[r].data_wait_ms == ranks[r].data_wait_ms);
    CHECK(d->ranks[r].allreduce_ms == ranks[r].allreduce_ms);
    CHECK(d->ranks[r].bytes_reduced == ranks[r].bytes_reduced);
  }
  CHECK(d->ranks[0].bus_bytes_per_s == 8.25e9);
  CHECK(std::isnan(d->ranks[1].bus_bytes_per_s));
  CHECK(sql_int(path, "SELECT time_to_target_s = 25.75 FROM run_summary") == 1);
  CHECK(achieved_flops(s) == Approx(6.291e12 * 90 / 18.5).epsilon(1e-15));
  CHECK(std::isnan(s.test_accuracy));
  CHECK(std::isnan(s.test_loss));
  CHECK(s.batch_size == 512);
  CHECK(sql_int(path, "SELECT test_accuracy IS NULL FROM runs") == 1);

  CHECK(d->info.throughput == sum.throughput);
  CHECK(d->info.step_ms_median == sum.step_ms_median);
  CHECK(d->info.peak_memory_bytes == sum.peak_memory_bytes);
  CHECK(std::isnan(d->info.test_accuracy));
  CHECK(d->info.final_loss == 0.75);

  // Rewriting an epoch or a phase replaces it.
  store.write_epoch(uuid, {1, 1.0, 1.0, 0.7, 12.0, 1.5, 5120});
  std::vector<PhaseRecord> again = {{"forward", 91, 101.0, 96.0}};
  store.write_phases(uuid, again);
  d = store.get_run(uuid);
  CHECK(d->epochs.size() == 2);
  CHECK(d->epochs[1].test_accuracy == 0.7);
  CHECK(d->phases.size() == 3);

  // Writing a step number twice is an error and leaves the stored steps alone.
  CHECK_THROWS_AS(store.write_steps(uuid, std::span<const StepRecord>(steps).first(2)),
                  StoreError);
  CHECK(store.get_steps(uuid).size() == 25);
}

TEST_CASE("failed runs keep their error text and no summary", "[store][runs]") {
  TempDir tmp;
  Store store(tmp.file("r.db"));
  const std::string uuid = store.begin_run(make_run());
  store.finish_run(uuid, RunStatus::failed, RunSummary{}, "CUDA out of memory");
  auto d = store.get_run(uuid);
  REQUIRE(d);
  CHECK(d->info.status == "failed");
  CHECK(d->info.error == "CUDA out of memory");
  CHECK(d->summary.measured_steps == 0);
  CHECK(d->summary.throughput == 0);
  CHECK_FALSE(d->has_summary);
  CHECK(std::isnan(d->info.throughput));  // shown as "-" and JSON null, never 0
  CHECK(d->info.batch_size == 512);  // from params
  CHECK_THROWS_AS(store.finish_run("nope", RunStatus::complete, RunSummary{}), StoreError);
}

TEST_CASE("list_runs filters on run columns and parameters, AND-ed", "[store][runs]") {
  TempDir tmp;
  Store store(tmp.file("r.db"));
  const std::string a = store.begin_run(make_run("fp16", 512, "box-a"));
  const std::string b = store.begin_run(make_run("fp32", 512, "box-a"));
  const std::string c = store.begin_run(make_run("fp16", 256, "box-b"));
  NewRun other = make_run("bf16", 128, "box-b");
  other.experiment = "quick";
  other.device = "cpu";
  other.environment.fields["device_name"] = "AMD EPYC 7763";
  const std::string d = store.begin_run(other);
  store.finish_run(a, RunStatus::complete, make_summary());
  store.finish_run(c, RunStatus::complete, make_summary());

  auto uuids = [](const std::vector<RunInfo>& runs) {
    std::vector<std::string> out;
    for (const auto& r : runs) out.push_back(r.uuid);
    return out;
  };
  using V = std::vector<std::string>;
  CHECK(uuids(store.list_runs()) == V{a, b, c, d});
  CHECK(uuids(store.list_runs({{"status", "complete"}})) == V{a, c});
  CHECK(uuids(store.list_runs({{"status", "running"}})) == V{b, d});
  CHECK(uuids(store.list_runs({{"label", "box-b"}})) == V{c, d});
  CHECK(uuids(store.list_runs({{"device", "cpu"}})) == V{d});
  CHECK(uuids(store.list_runs({{"experiment", "quick"}})) == V{d});
  CHECK(uuids(store.list_runs({{"device_name", "AMD EPYC 7763"}})) == V{d});
  CHECK(uuids(store.list_runs({{"uuid", b}})) == V{b});
  CHECK(uuids(store.list_runs({{"config_hash", "cfg-fp16-256-box-b"}})) == V{c});
  CHECK(uuids(store.list_runs({{"experiment_hash", "exp-classic"}})) == V{a, b, c, d});
  CHECK(uuids(store.list_runs({{"train.precision", "fp16"}})) == V{a, c});
  CHECK(uuids(store.list_runs({{"train.batch_size", "512"}})) == V{a, b});
  CHECK(uuids(store.list_runs({{"train.precision", "fp16"}, {"train.batch_size", "512"}})) ==
        V{a});
  CHECK(uuids(store.list_runs({{"train.precision", "fp16"}, {"label", "box-b"}})) == V{c});
  CHECK(uuids(store.list_runs({{"status", "running"}, {"train.precision", "fp16"}})).empty());
  CHECK(uuids(store.list_runs({{"train.lr", "0.001"}, {"data.workers", "4"}})) == V{a, b, c, d});
  CHECK(store.list_runs({{"no.such.key", "1"}}).empty());
  // Values are bound, never pasted into SQL.
  CHECK(store.list_runs({{"label", "x' OR '1'='1"}}).empty());
}

TEST_CASE("list_runs reads what a throughput counts, images unless the environment says tokens",
          "[store][runs]") {
  TempDir tmp;
  Store store(tmp.file("r.db"));
  const std::string images = store.begin_run(make_run("fp16", 512, "box-a"));
  NewRun lm = make_run("fp32", 8, "box-a");
  lm.environment.fields["throughput_unit"] = "tokens/s";
  const std::string tokens = store.begin_run(lm);
  const std::vector<RunInfo> runs = store.list_runs();
  REQUIRE(runs.size() == 2);
  CHECK(runs[0].uuid == images);
  CHECK(runs[0].throughput_unit == "images/s");
  CHECK(runs[1].uuid == tokens);
  CHECK(runs[1].throughput_unit == "tokens/s");
  CHECK(store.get_run(tokens)->info.throughput_unit == "tokens/s");
  // A table's column label: one kind, or both.
  CHECK(throughput_label({&runs[0]}) == "img/s");
  CHECK(throughput_label({&runs[1]}) == "tok/s");
  CHECK(throughput_label({&runs[0], &runs[1]}) == "img|tok/s");
  CHECK(throughput_label({}) == "img/s");
}

TEST_CASE("get_run takes an id or a UUID prefix of at least 4 characters", "[store][runs]") {
  TempDir tmp;
  const std::string path = tmp.file("r.db");
  Store store(path);
  const std::string a = store.begin_run(make_run("fp16"));
  const std::string b = store.begin_run(make_run("fp32"));
  // Give the two runs UUIDs with a known common prefix.
  const std::string ua = "abcd1234-0000-4000-8000-000000000001";
  const std::string ub = "abcd5678-0000-4000-8000-000000000002";
  sql_exec(path, "UPDATE runs SET uuid = '" + ua + "' WHERE uuid = '" + a + "';"
                 "UPDATE runs SET uuid = '" + ub + "' WHERE uuid = '" + b + "';");

  CHECK(store.get_run("1")->info.uuid == ua);
  CHECK(store.get_run("2")->info.uuid == ub);
  CHECK(store.get_run(ua)->info.id == 1);
  CHECK(store.get_run("abcd1")->info.uuid == ua);
  CHECK(store.get_run("ABCD5")->info.uuid == ub);  // case-insensitive
  REQUIRE_THROWS_WITH(store.get_run("abcd"),
                      Catch::Contains("ambiguous") && Catch::Contains(ua) && Catch::Contains(ub));
  CHECK_FALSE(store.get_run("abc"));  // too short to be a prefix
  CHECK_FALSE(store.get_run("ffff"));
  CHECK_FALSE(store.get_run("99"));
  CHECK_FALSE(store.get_run(""));
  CHECK_FALSE(store.get_run("ab%d"));
}

TEST_CASE("find_complete matches complete runs only", "[store][runs]") {
  TempDir tmp;
  Store store(tmp.file("r.db"));
  const NewRun nr = make_run();
  CHECK_FALSE(store.find_complete(nr.config_hash));
  const std::string running = store.begin_run(nr);
  CHECK_FALSE(store.find_complete(nr.config_hash));
  const std::string failed = store.begin_run(nr);
  store.finish_run(failed, RunStatus::failed, RunSummary{}, "boom");
  const std::string interrupted = store.begin_run(nr);
  store.finish_run(interrupted, RunStatus::interrupted, RunSummary{});
  CHECK_FALSE(store.find_complete(nr.config_hash));
  const std::string done = store.begin_run(nr);
  store.finish_run(done, RunStatus::complete, make_summary());
  CHECK(store.find_complete(nr.config_hash) == done);
  CHECK_FALSE(store.find_complete("cfg-other"));
  (void)running;
}

TEST_CASE("stale running runs of dead processes on this host become interrupted",
          "[store][runs]") {
  TempDir tmp;
  const std::string path = tmp.file("r.db");
  Store store(path);
  const std::string dead = store.begin_run(make_run("fp16"));
  const std::string live = store.begin_run(make_run("fp32"));
  const std::string elsewhere = store.begin_run(make_run("bf16"));
  const std::string finished = store.begin_run(make_run("tf32"));
  store.finish_run(finished, RunStatus::complete, make_summary());
  const pid_t gone = store_test::dead_pid();
  sql_exec(path, "UPDATE runs SET pid = " + std::to_string(gone) + " WHERE uuid IN ('" + dead +
                     "', '" + elsewhere + "', '" + finished + "');"
                     "UPDATE runs SET host = 'some-other-host' WHERE uuid = '" + elsewhere + "';");

  CHECK(store.mark_stale_runs_interrupted() == 1);
  auto d = store.get_run(dead);
  CHECK(d->info.status == "interrupted");
  CHECK(d->info.error ==
        "process " + std::to_string(gone) + " ended without finishing the run");
  CHECK_FALSE(d->info.finished_at.empty());
  CHECK(store.get_run(live)->info.status == "running");       // our own pid: alive
  CHECK(store.get_run(elsewhere)->info.status == "running");  // another host's
  CHECK(store.get_run(finished)->info.status == "complete");
  CHECK(store.mark_stale_runs_interrupted() == 0);
}

TEST_CASE("run_summary answers one row per run with its headline figures", "[store][runs]") {
  TempDir tmp;
  const std::string path = tmp.file("r.db");
  Store store(path);
  const std::string a = store.begin_run(make_run("fp16", 512));
  const std::string b = store.begin_run(make_run("fp32", 256));
  NewRun auto_batch = make_run("bf16", 0);
  auto_batch.params["train.batch_size"] = "\"auto\"";
  const std::string c = store.begin_run(auto_batch);
  RunSummary s = make_summary();
  s.batch_size = 384;  // what "auto" resolved to
  s.test_accuracy = 0.93;
  store.finish_run(c, RunStatus::complete, s);
  std::vector<StepRecord> steps = make_steps(5);
  store.write_steps(a, steps);

  CHECK(sql_int(path, "SELECT count(*) FROM run_summary") == 3);
  CHECK(sql_int(path, "SELECT count(DISTINCT uuid) FROM run_summary") == 3);
  auto row = [&](const std::string& uuid, const std::string& cols) {
    return sql_text(path, "SELECT " + cols + " FROM run_summary WHERE uuid = '" + uuid + "'");
  };
  CHECK(row(a, "experiment || '|' || label || '|' || device || '|' || device_name") ==
        "classic|box-a|cuda:0|NVIDIA GeForce RTX 4090 D");
  CHECK(row(a, "batch_size || '|' || precision || '|' || cudnn_benchmark || '|' || workers") ==
        "512|fp16|true|4");
  CHECK(row(a, "status") == "running");
  CHECK(row(a, "throughput IS NULL AND step_ms_median IS NULL") == "1");
  CHECK(row(b, "batch_size") == "256");
  CHECK(row(c, "batch_size") == "384");
  CHECK(row(c, "precision || '|' || status") == "bf16|complete");
  CHECK(row(c, "throughput") == "2490.8");
  CHECK(row(c, "step_ms_median || '|' || step_ms_p10 || '|' || step_ms_p90") ==
        "205.25|201.0|212.5");
  CHECK(row(c, "peak_memory_bytes") == "21474836480");
  CHECK(row(c, "test_accuracy") == "0.93");
  CHECK(row(c, "started_at IS NOT NULL AND id = 3") == "1");

  auto runs = store.list_runs({{"uuid", c}});
  REQUIRE(runs.size() == 1);
  CHECK(runs[0].batch_size == 384);
  CHECK(runs[0].test_accuracy == 0.93);
}

TEST_CASE("plain SQL filters runs on a flattened parameter", "[store][runs]") {
  TempDir tmp;
  const std::string path = tmp.file("r.db");
  Store store(path);
  const std::string a = store.begin_run(make_run("fp16", 512));
  store.begin_run(make_run("fp32", 512));
  CHECK(sql_text(path,
                 "SELECT r.uuid FROM runs r JOIN run_params p ON p.run = r.id"
                 " WHERE p.key = 'train.precision' AND p.value = 'fp16'") == a);
  CHECK(sql_int(path,
                "SELECT count(*) FROM runs r JOIN run_params p ON p.run = r.id"
                " WHERE p.key = 'train.batch_size' AND p.value = '512'") == 2);
  // Numbers compare as numbers after a CAST.
  CHECK(sql_int(path,
                "SELECT count(*) FROM run_params"
                " WHERE key = 'train.batch_size' AND CAST(value AS INTEGER) >= 500") == 2);
}

TEST_CASE("a full disk is a StoreError and loses no committed row", "[store][runs]") {
  TempDir tmp;
  const std::string path = tmp.file("r.db");
  Store store(path);
  const std::string uuid = store.begin_run(make_run());
  const auto first = make_steps(10);
  store.write_steps(uuid, first);

  // Cap the file at its current size: the next growth fails with SQLITE_FULL.
  sqlite3_exec(store.handle(), "PRAGMA wal_checkpoint(TRUNCATE)", nullptr, nullptr, nullptr);
  const long long pages = sql_int(path, "PRAGMA page_count");
  sqlite3_exec(store.handle(), ("PRAGMA max_page_count = " + std::to_string(pages)).c_str(),
               nullptr, nullptr, nullptr);
  std::vector<StepRecord> many;
  for (int i = 10; i < 20000; ++i) {
    StepRecord s;
    s.step = i;
    many.push_back(s);
  }
  REQUIRE_THROWS_WITH(store.write_steps(uuid, many),
                      Catch::StartsWith(path + ": the disk is full: database or disk is full") &&
                          Catch::Contains("INSERT INTO steps"));
  // Nothing of the failed batch, everything from before.
  CHECK(store.get_steps(uuid).size() == 10);
  CHECK(store.get_run(uuid)->info.status == "running");

  sqlite3_exec(store.handle(), "PRAGMA max_page_count = 1073741823", nullptr, nullptr, nullptr);
  store.write_steps(uuid, many);
  store.finish_run(uuid, RunStatus::complete, make_summary());
  CHECK(store.get_run(uuid)->step_count == 20000);
}

TEST_CASE("a forked child draws different UUIDs from its parent", "[store]") {
  detail::new_uuid();  // any generator state the parent might cache
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const std::string u = detail::new_uuid();
    ssize_t n = write(fds[1], u.data(), u.size());
    _exit(n == static_cast<ssize_t>(u.size()) ? 0 : 1);
  }
  const std::string mine = detail::new_uuid();
  char buf[64] = {};
  ssize_t n = read(fds[0], buf, sizeof buf - 1);
  close(fds[0]);
  close(fds[1]);
  int status = 0;
  waitpid(pid, &status, 0);
  REQUIRE(n == 36);
  CHECK(std::string(buf, 36) != mine);
}

TEST_CASE("convolution algorithm choices are stored per run and cached per device", "[store]") {
  TempDir tmp;
  Store store(tmp.file("results.db"));
  const std::string uuid = store.begin_run(make_run());
  ConvAlgoRecord timed;
  timed.layer = "layer1.0.conv2";
  timed.pass = "forward";
  timed.key = "n256 c64 h56 w56 k64 r3 s3 u1 p1 fp16 forward";
  timed.algo_name = "IMPLICIT_PRECOMP_GEMM";
  timed.source = "benchmark";
  timed.choice = {1, 1, 1 << 20, 0.42};
  ConvAlgoRecord guessed = timed;
  guessed.layer = "conv1";
  guessed.key = "n256 c8 h224 w224 k64 r7 s7 u2 p3 fp16 forward";
  guessed.source = "heuristic";
  guessed.choice.time_ms = std::nan("");
  const std::vector<ConvAlgoRecord> records = {timed, guessed};
  store.write_conv_algorithms(uuid, records, "RTX 4090 D | cc 8.9 | driver 580 | cuDNN 91900");

  auto d = store.get_run(uuid);
  REQUIRE(d);
  REQUIRE(d->conv_algorithms.size() == 2);
  CHECK(d->conv_algorithms[0].layer == "layer1.0.conv2");
  CHECK(d->conv_algorithms[0].choice.workspace_bytes == (1 << 20));
  CHECK(d->conv_algorithms[0].choice.time_ms == 0.42);
  CHECK(std::isnan(d->conv_algorithms[1].choice.time_ms));
  // Only timed choices are cached, and only for the device they were timed on.
  const auto cache = store.conv_algo_cache("RTX 4090 D | cc 8.9 | driver 580 | cuDNN 91900");
  REQUIRE(cache.size() == 1);
  CHECK(cache.at(timed.key).algo == 1);
  CHECK(cache.at(timed.key).time_ms == 0.42);
  CHECK(store.conv_algo_cache("RTX 3090 | cc 8.6 | driver 580 | cuDNN 91900").empty());
}

TEST_CASE("findings round trip", "[store]") {
  TempDir tmp;
  Store store(tmp.file("results.db"));
  const std::string uuid = store.begin_run(make_run());
  const std::vector<FindingRecord> f = {{"data_wait", "steps waited 30%", 0.3},
                                        {"few_measured_steps", "only 4", 4}};
  store.write_findings(uuid, f);
  auto d = store.get_run(uuid);
  REQUIRE(d);
  REQUIRE(d->findings.size() == 2);
  CHECK(d->findings[0].check == "data_wait");
  CHECK(d->findings[0].message == "steps waited 30%");
  CHECK(d->findings[1].value == 4);
}

TEST_CASE("CPU peaks: one row per CPU, ISA and thread count, replaced when measured again", "[store]") {
  TempDir tmp;
  Store store(tmp.file("r.db"));
  CHECK_FALSE(store.cpu_peak("Xeon", "avx512_core_amx", 2));
  CpuPeakRecord p{"Xeon", "avx512_core_amx", 2, 2.9e11, 1.7e12, 2.3e10, "fp32: brg, bf16: brg_amx", ""};
  store.put_cpu_peak(p);
  CpuPeakRecord avx2{"Xeon", "avx2", 2, 1.5e11, 0, 2.2e10, "fp32: gemm:jit", ""};
  store.put_cpu_peak(avx2);
  const auto got = store.cpu_peak("Xeon", "avx512_core_amx", 2);
  REQUIRE(got);
  CHECK(got->fp32_flops == 2.9e11);
  CHECK(got->bf16_flops == 1.7e12);
  CHECK(got->copy_bytes_per_s == 2.3e10);
  CHECK(got->kernels == "fp32: brg, bf16: brg_amx");
  CHECK(got->measured_at.size() == 24);  // 2026-12-06T04:52:43.355Z
  CHECK_FALSE(store.cpu_peak("Xeon", "avx512_core_amx", 1));
  CHECK(store.cpu_peak("Xeon", "avx2", 2)->bf16_flops == 0);
  p.fp32_flops = 3.0e11;
  store.put_cpu_peak(p);
  CHECK(store.cpu_peak("Xeon", "avx512_core_amx", 2)->fp32_flops == 3.0e11);
  CHECK(sql_int(tmp.file("r.db"), "SELECT count(*) FROM cpu_peaks") == 2);
}
