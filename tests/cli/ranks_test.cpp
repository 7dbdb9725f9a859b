// tests/cli/ranks_test.cpp: one run trained by several processes
// (train.ranks, gloo over loopback), through the real binary: 2 ranks x
// batch 8 give the weights of 1 rank with accumulate = 2 over the same
// samples, bit for bit, for SGD with momentum and AdamW, in fp32 and (where
// the CPU has bf16 kernels) bf16; every rank fed the
// same batch gives one process's weights bit for bit; a rank killed mid-run
// fails the run with the lost rank named and leaves no process behind;
// Ctrl-C to the launcher stops every rank after the same step and stores the
// run interrupted; what cannot work together is refused before training.
#include "catch2_compat.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/cli_util.h"
#include "skip.h"
#include "engine/checkpoint/safetensors.h"

using namespace xrun_test;
using Catch::Contains;

namespace {

// ResNet18 on 16x16 synthetic images, one thread per process (oneDNN's
// sums then run in the same order in every process), `steps` steps.
std::string ranks_experiment(int steps, const std::string& extra = "") {
  return "name = \"ranks\"\n[model]\narch = \"resnet18\"\n[data]\nsource = \"synthetic\"\n"
         "image_size = 16\nsamples = 256\ntest_samples = 64\nworkers = 1\n[train]\n"
         "device = \"cpu\"\nbatch_size = 8\nthreads = 1\nlog_every = 1\nsteps = " +
         std::to_string(steps) + "\n" + extra + "[measure]\nwarmup_steps = 1\n";
}

using Tensors = std::map<std::string, std::vector<float>>;

// The F32 tensors of a checkpoint by name (num_batches_tracked is I64).
Tensors read_floats(const std::string& path) {
  const xrun::SafetensorsFile file = xrun::SafetensorsFile::open(path);
  Tensors out;
  for (const auto& e : file.entries())
    if (e.dtype == "F32") out[e.name] = e.to_vector<float>();
  return out;
}

bool is_trained(const std::string& name) {
  return name.ends_with(".weight") || name.ends_with(".bias");
}

// Process ids written by the ranks of a run still in progress
// (.xrun-ranks-*/rank-R.pid beside the store); empty until they exist.
std::vector<pid_t> rank_pids(const CliFixture& f, int ranks) {
  namespace fs = std::filesystem;
  for (const auto& entry : fs::directory_iterator(f.dir.str())) {
    if (entry.path().filename().string().rfind(".xrun-ranks-", 0) != 0) continue;
    std::vector<pid_t> pids;
    for (int r = 0; r < ranks; ++r) {
      std::ifstream in(entry.path() / ("rank-" + std::to_string(r) + ".pid"));
      std::string host;
      long pid = 0;
      if (!(in >> host >> pid)) return {};
      pids.push_back(static_cast<pid_t>(pid));
    }
    return pids;
  }
  return {};
}

bool alive(pid_t pid) { return kill(pid, 0) == 0; }

// How many values differ (bitwise, as ==); the sizes must match. A count,
// not the vectors, in a failure message: they hold millions of values.
size_t mismatches(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return std::max(a.size(), b.size());
  size_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += !(a[i] == b[i]);
  return n;
}

// 2 ranks x batch 8 against 1 rank with accumulate = 2 over the same
// samples in `precision`, for SGD with momentum and AdamW: the same samples
// in the same order: rank r takes slice r of each global batch of 16, as
// micro-batch r of a step with accumulate = 2. Each rank's gradients are
// scaled by 1/2 as each micro-batch's are, and the sum of two fp32 values is
// the same whichever comes first, so the tolerance is zero. Batch norm
// statistics are per rank (DDP's default): the running means and variances
// differ, the trained parameters must not.
void check_two_ranks_equal_accumulate(const std::string& precision) {
  // AdamW's rate scaled linearly from a reference batch of 8: both runs
  // take 16 images a step, so both train at 4e-3 (a rate scaled from one
  // rank's batch alone would be 2e-3 on the two ranks).
  for (const std::string optimizer :
       {"name = \"sgd\"\nlr = 0.05\nmomentum = 0.9\n",
        "name = \"adamw\"\nlr = 2e-3\nlr_scaling = \"linear\"\nreference_batch = 8\n"}) {
    INFO(precision << " " << optimizer);
    CliFixture f;
    const std::string opt = "[train.optimizer]\n" + optimizer;
    const std::string p = "precision = \"" + precision + "\"\n";
    const std::string two = f.write_experiment(
        "two.toml",
        ranks_experiment(4, p + "ranks = 2\ncheckpoint = \"two.safetensors\"\n") + opt);
    const std::string one = f.write_experiment(
        "one.toml",
        ranks_experiment(4, p + "accumulate = 2\ncheckpoint = \"one.safetensors\"\n") + opt);
    // This CPU's peak at one thread, so both runs get a % of peak.
    const bool peaks = precision == "fp32" && optimizer.find("sgd") != std::string::npos;
    if (peaks) REQUIRE(f.xrun("doctor --peak --threads 1 --db " + shell_quote(f.db())).status == 0);
    const auto r2 = f.xrun(run_args(f, two));
    INFO(r2.output);
    REQUIRE(r2.status == 0);
    CHECK_THAT(r2.output, Contains("[rank 0]") && Contains("2 ranks joined through gloo"));
    const auto r1 = f.xrun(run_args(f, one));
    INFO(r1.output);
    REQUIRE(r1.status == 0);

    const Tensors a = read_floats(f.dir.file("two.safetensors"));
    const Tensors b = read_floats(f.dir.file("one.safetensors"));
    REQUIRE(a.size() == b.size());
    int trained = 0, statistics_differ = 0;
    for (const auto& [name, values] : a) {
      INFO(name);
      REQUIRE(b.count(name));
      if (is_trained(name)) {
        CHECK(mismatches(values, b.at(name)) == 0);
        ++trained;
      } else if (mismatches(values, b.at(name)) > 0) {
        ++statistics_differ;
      }
    }
    CHECK(trained == 62);             // resnet18: every conv, bn and fc parameter
    CHECK(statistics_differ > 0);     // rank 0 saw half of each step's samples
    // The store: one run, each step's loss over both ranks' samples (the
    // accumulating run's, to the bit), 16 images a step.
    CHECK(f.sql("SELECT count(*) FROM runs WHERE status = 'complete'") == "2");
    const std::string loss_of =
        "SELECT group_concat(loss, ',') FROM (SELECT s.loss FROM steps s JOIN runs r ON "
        "r.uuid = s.run WHERE r.id = ";
    CHECK(f.sql(loss_of + "1 ORDER BY s.step)") == f.sql(loss_of + "2 ORDER BY s.step)"));
    CHECK(f.sql("SELECT min(images) || ' ' || max(images) FROM steps") == "16 16");
    CHECK(f.sql("SELECT count(DISTINCT lr) FROM runs") == "1");
    if (optimizer.find("linear") != std::string::npos)
      CHECK(f.sql_double("SELECT lr FROM runs WHERE id = 1") == Approx(4e-3));
    // Both runs: 16 images per optimizer step; the 2-rank one has a row per
    // rank, each reducing every gradient (at least 4 bytes per parameter).
    CHECK(f.sql("SELECT group_concat(ranks || 'x' || global_batch, ' ') FROM "
                "(SELECT * FROM run_summary ORDER BY id)") == "2x16 1x16");
    CHECK(f.sql("SELECT count(*) FROM ranks") == "2");
    if (peaks) {
      // Two ranks of one thread each: twice one thread's peak, so the % of
      // peak compares the run's FLOP/s (both ranks' work) with both shares.
      CHECK(f.sql_double("SELECT peak_flops FROM runs WHERE id = 1") ==
            Approx(2 * f.sql_double("SELECT peak_flops FROM runs WHERE id = 2")));
      CHECK_THAT(f.sql("SELECT peak_source FROM runs WHERE id = 1"), Contains(" x 2 ranks"));
    }
    CHECK(f.sql("SELECT group_concat(rank, ',') FROM ranks") == "0,1");
    const double params = f.sql_double(
        "SELECT value FROM run_environment WHERE key = 'parameters' AND run = 1");
    CHECK(f.sql_double("SELECT min(bytes_reduced) FROM ranks") >= 4 * params);
    CHECK(f.sql_double("SELECT min(allreduce_ms) FROM ranks") > 0);
    CHECK(f.sql_double("SELECT min(bus_bytes_per_s) FROM ranks") > 0);
    const auto shown = f.xrun("show 1 --db " + shell_quote(f.db()));
    CHECK_THAT(shown.output, Contains("2 processes, global batch 16") &&
                                 Contains("ranks (over the measured steps"));
    const auto listed = f.xrun("runs --db " + shell_quote(f.db()));
    CHECK_THAT(listed.output, Contains(" 8x2 "));  // batch 8 on each of 2 ranks
    const auto listed_csv = f.xrun("runs --format csv --db " + shell_quote(f.db()));
    CHECK_THAT(listed_csv.output, Contains(",ranks,global_batch") && Contains(",2,16"));
    const auto csv = f.xrun("export --table ranks --format csv --db " + shell_quote(f.db()));
    CHECK(csv.status == 0);
    CHECK_THAT(csv.output, Contains("rank,host,device,step_ms_median") && Contains(",0,") &&
                               Contains(",1,"));
  }
}

}  // namespace

TEST_CASE("ranks: 2 ranks x batch 8 train the weights of 1 rank with accumulate 2, bit for bit",
          "[cli][ranks]") {
  check_two_ranks_equal_accumulate("fp32");
}

TEST_CASE("ranks: in bf16 too, 2 ranks x batch 8 train the weights of 1 rank with accumulate 2, bit "
          "for bit",
          "[cli][ranks][bf16]") {
  // Activations in bf16, gradients summed in fp32 as in fp32 runs.
  CliFixture probe;
  const auto doctor = probe.xrun("doctor --json");
  const auto j = nlohmann::json::parse(doctor.output, nullptr, false);
  if (j.is_discarded() || j["cpu"]["train_precisions"].dump().find("bf16") == std::string::npos)
    XRUN_SKIP("this CPU has no oneDNN bf16 kernels (AVX512_BF16 or AMX): bf16 runs are refused here");
  check_two_ranks_equal_accumulate("bf16");
}

TEST_CASE("ranks: every rank fed the same batch gives one process's weights, bit for bit",
          "[cli][ranks]") {
  // XRUN_TEST_RANKS_SAME_DATA: each rank reads what one process alone reads.
  // Scaling a gradient by 1/2 is exact, and g/2 + g/2 = g.
  CliFixture f;
  const std::string opt = "[train.optimizer]\nname = \"sgd\"\nlr = 0.05\nmomentum = 0.9\n";
  const std::string two = f.write_experiment(
      "two.toml", ranks_experiment(3, "ranks = 2\ncheckpoint = \"two.safetensors\"\n") + opt);
  const std::string one = f.write_experiment(
      "one.toml", ranks_experiment(3, "checkpoint = \"one.safetensors\"\n") + opt);
  const auto r2 = f.xrun_env("XRUN_TEST_RANKS_SAME_DATA=1", run_args(f, two));
  INFO(r2.output);
  REQUIRE(r2.status == 0);
  const auto r1 = f.xrun(run_args(f, one));
  REQUIRE(r1.status == 0);
  const Tensors a = read_floats(f.dir.file("two.safetensors"));
  const Tensors b = read_floats(f.dir.file("one.safetensors"));
  REQUIRE(a.size() == b.size());
  for (const auto& [name, values] : a) {
    INFO(name);
    CHECK(mismatches(values, b.at(name)) == 0);  // statistics too: every rank saw the one batch
  }
}

TEST_CASE("ranks: a rank killed mid-run fails the run naming it, and no process is left",
          "[cli][ranks][faults]") {
  CliFixture f;
  const std::string file =
      f.write_experiment("long.toml", ranks_experiment(100000, "ranks = 2\neval = false\n"
                                                               "[distributed]\ntimeout_s = 30\n"));
  const pid_t launcher = spawn_xrun(f, file);
  REQUIRE(wait_for_steps(f, 3, launcher));
  const std::vector<pid_t> pids = rank_pids(f, 2);
  REQUIRE(pids.size() == 2);
  const auto killed_at = std::chrono::steady_clock::now();
  REQUIRE(kill(pids[1], SIGKILL) == 0);
  const int code = wait_exit(launcher);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  const std::string log = read_bytes(f.dir.file("xrun.log"));
  INFO(log);
  CHECK(code == 1);
  CHECK(took < 30);  // the connection reset ends rank 0's all-reduce at once
  CHECK(f.sql("SELECT status FROM runs") == "failed");
  const std::string error = f.sql("SELECT error FROM runs");
  CHECK_THAT(error, Contains("rank 1 (pid " + std::to_string(pids[1]) + ") has ended"));
  CHECK(std::stoi(f.sql("SELECT count(*) FROM steps")) >= 3);  // what it trained is kept
  for (const pid_t pid : pids) CHECK_FALSE(alive(pid));
  CHECK(rank_pids(f, 2).empty());  // the rendezvous folder is gone
}

TEST_CASE("ranks: a rank killed after rank 0 stored the run leaves it stored failed, and it runs again",
          "[cli][ranks][faults]") {
  // Rank 1 stays after training (a test hook) until this test kills it,
  // after rank 0 has stored the run complete: the launcher's exit code and
  // the store must agree, and the next `xrun run` must not skip the run.
  CliFixture f;
  const std::string file = f.write_experiment(
      "end.toml", ranks_experiment(4, "ranks = 2\neval = false\n[distributed]\ntimeout_s = 60\n"));
  ::setenv("XRUN_TEST_RANK_HOLD_AT_END", "1", 1);
  const pid_t launcher = spawn_xrun(f, file);
  ::unsetenv("XRUN_TEST_RANK_HOLD_AT_END");
  std::vector<pid_t> pids;
  bool stored = false;
  for (int i = 0; i < 2400 && !stored; ++i) {  // at most 120 s
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (pids.empty()) pids = rank_pids(f, 2);
    try {
      stored = std::filesystem::exists(f.db()) && f.sql("SELECT status FROM runs") == "complete";
    } catch (const std::exception&) {
    }
  }
  REQUIRE(stored);
  REQUIRE(pids.size() == 2);
  REQUIRE(kill(pids[1], SIGKILL) == 0);
  CHECK(wait_exit(launcher) == 1);
  const std::string log = read_bytes(f.dir.file("xrun.log"));
  INFO(log);
  CHECK_THAT(log, Contains("rank 1 was killed by signal 9"));
  CHECK(f.sql("SELECT status FROM runs") == "failed");
  CHECK_THAT(f.sql("SELECT error FROM runs"), Contains("rank 1 was killed by signal 9 (Killed) after "
                                                       "rank 0 stored the run"));
  CHECK(f.sql("SELECT measured_steps FROM runs") == "3");  // its figures are kept
  const auto again = f.xrun(run_args(f, file));
  INFO(again.output);
  CHECK(again.status == 0);
  CHECK_THAT(again.output, !Contains("already complete"));
  CHECK(f.sql("SELECT count(*) FROM runs WHERE status = 'complete'") == "1");
}

TEST_CASE("ranks: a second launch of a run in progress skips it at once, as one rank's does",
          "[cli][ranks][faults]") {
  CliFixture f;
  const std::string file = f.write_experiment(
      "busy.toml", ranks_experiment(100000, "ranks = 2\neval = false\n[distributed]\ntimeout_s = 30\n"));
  const pid_t launcher = spawn_xrun(f, file);
  REQUIRE(wait_for_steps(f, 2, launcher));
  const auto start = std::chrono::steady_clock::now();
  const auto second = f.xrun(run_args(f, file));
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  kill(launcher, SIGINT);
  wait_exit(launcher);
  INFO(second.output);
  CHECK(second.status == 0);
  CHECK_THAT(second.output, Contains("being trained by process") && Contains("skipped"));
  CHECK_THAT(second.output, !Contains("ended with exit code"));
  CHECK(took < 20);  // no rank waited for a partner that never came
}

TEST_CASE("ranks: Ctrl-C stops every rank after the same step, the run stored interrupted",
          "[cli][ranks][faults]") {
  CliFixture f;
  const std::string file =
      f.write_experiment("long.toml", ranks_experiment(100000, "ranks = 2\neval = false\n"));
  const pid_t launcher = spawn_xrun(f, file, {}, "xrun.log", /*own_group=*/true);
  REQUIRE(wait_for_steps(f, 3, launcher));
  const std::vector<pid_t> pids = rank_pids(f, 2);
  REQUIRE(pids.size() == 2);
  REQUIRE(kill(-launcher, SIGINT) == 0);  // the terminal's Ctrl-C: the launcher's group
  const int code = wait_exit(launcher);
  const std::string log = read_bytes(f.dir.file("xrun.log"));
  INFO(log);
  CHECK(code == 130);
  CHECK(f.sql("SELECT status FROM runs") == "interrupted");
  CHECK_THAT(log, Contains("[rank 1] interrupted: interrupted before step"));
  for (const pid_t pid : pids) CHECK_FALSE(alive(pid));
}

TEST_CASE("ranks: one rank joined through a named backend trains as a run without one",
          "[cli][ranks]") {
  // distributed.backend named with ranks = 1 goes through the launcher (one
  // child, a rendezvous folder) and sums every gradient over the one rank
  // before the update: the shape of check.sh's one-GPU NCCL run, here with
  // gloo. A sum over one rank is the value itself: the same weights, bit for
  // bit, batch norm statistics too (the one rank sees every sample).
  CliFixture f;
  const std::string opt = "[train.optimizer]\nname = \"adamw\"\nlr = 2e-3\n";
  const std::string joined = f.write_experiment(
      "joined.toml", ranks_experiment(3, "checkpoint = \"joined.safetensors\"\n") + opt +
                         "[distributed]\nbackend = \"gloo\"\n");
  const std::string plain = f.write_experiment(
      "plain.toml", ranks_experiment(3, "checkpoint = \"plain.safetensors\"\n") + opt);
  const auto rj = f.xrun(run_args(f, joined));
  INFO(rj.output);
  REQUIRE(rj.status == 0);
  CHECK_THAT(rj.output, Contains("1 rank through gloo on this machine") &&
                            Contains("[rank 0]") && Contains("1 rank joined through gloo"));
  const auto rp = f.xrun(run_args(f, plain));
  REQUIRE(rp.status == 0);
  const Tensors a = read_floats(f.dir.file("joined.safetensors"));
  const Tensors b = read_floats(f.dir.file("plain.safetensors"));
  REQUIRE(a.size() == b.size());
  for (const auto& [name, values] : a) {
    INFO(name);
    CHECK(mismatches(values, b.at(name)) == 0);
  }
  CHECK(f.sql("SELECT group_concat(ranks || 'x' || global_batch, ' ') FROM "
              "(SELECT * FROM run_summary ORDER BY id)") == "1x8 1x8");
  // Its all-reduce was timed (a per-rank row only with several ranks).
  CHECK(f.sql("SELECT count(*) FROM phases WHERE run = 1 AND phase = 'allreduce'") == "1");
  CHECK(f.sql("SELECT count(*) FROM phases WHERE run = 2 AND phase = 'allreduce'") == "0");
}

TEST_CASE("ranks: what cannot work with several ranks is refused before training",
          "[cli][ranks]") {
  CliFixture f;
  const std::string file = f.write_experiment("r.toml", ranks_experiment(4, "ranks = 2\n"));
  const auto parallel = f.xrun(run_args(f, file) + " --parallel 2");
  CHECK(parallel.status == 2);
  CHECK_THAT(parallel.output, Contains("takes processes of its own"));
  const auto per_layer = f.xrun(run_args(f, file) + " --set train.per_layer_update=true");
  CHECK(per_layer.status == 2);
  CHECK_THAT(per_layer.output, Contains("not with train.ranks > 1"));
  const auto nccl = f.xrun(run_args(f, file) + " --set distributed.backend='\"nccl\"'");
  CHECK(nccl.status == 2);
  CHECK_THAT(nccl.output, Contains("nccl joins GPU ranks"));
  // A rank started by hand, not by `xrun run`'s launcher.
  const auto stray = f.xrun_env("XRUN_RANK=1 XRUN_WORLD_SIZE=2 XRUN_RENDEZVOUS=.", run_args(f, file));
  CHECK(stray.status == 2);
  CHECK_THAT(stray.output, Contains("XRUN_RANK is set"));
  CHECK_FALSE(std::filesystem::exists(f.db()));  // nothing was even stored
}

TEST_CASE("doctor --allreduce times CPU ranks' all-reduce as nccl-tests reports it",
          "[cli][ranks]") {
  CliFixture f;
  const auto r = f.xrun("doctor --allreduce --ranks 2 --max-mb 4");
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.output, Contains("gloo, 2 ranks") && Contains("busbw") &&
                           Contains("     1 MiB") && Contains("     4 MiB"));
  CHECK_THAT(r.output, !Contains("16 MiB"));
  for (const std::string bad : {"doctor --allreduce --ranks 1", "doctor --allreduce --json",
                                "doctor --allreduce --peak", "doctor --ranks 2",
                                "doctor --allreduce --max-mb 0"}) {
    INFO(bad);
    CHECK(f.xrun(bad).status == 2);
  }
}
