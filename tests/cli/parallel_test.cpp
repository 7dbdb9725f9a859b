// tests/cli/parallel_test.cpp: `xrun run --parallel N` and `--gpus`: the
// slot plan alone (cores split, one GPU per run, bad options), then the real
// binary: two CPU runs trained at once into one store give the losses of the
// same runs trained one at a time; Ctrl-C from a terminal (the parent's
// process group) and SIGTERM to the parent alone each stop every child with
// its run stored as interrupted; --gpus hands each child its own
// CUDA_VISIBLE_DEVICES; a failing run does not stop the others; a child
// refuses an experiment file that changed after the parent planned it.
#include "catch2_compat.h"

#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <sstream>
#include <thread>

#include "cli/cli_util.h"
#include "engine/device/device_info.h"
#include "runner/parallel_runs.h"

using namespace xrun_test;
using Catch::Contains;
using xrun::cli::plan_slots;
using xrun::cli::SlotPlan;

namespace {

// Runs that differ in learning rate; `steps` steps each, threads left to
// xrun (0 = all cores), evaluation off.
std::string lr_runs(int steps, const std::string& lrs = "[0.001, 0.003]") {
  return "name = \"par\"\n[model]\narch = \"resnet18\"\n[data]\nsource = \"synthetic\"\n"
         "image_size = 16\nsamples = 64\nworkers = 1\n[train]\ndevice = \"cpu\"\n"
         "batch_size = 8\nsteps = " +
         std::to_string(steps) +
         "\neval = false\nlog_every = 1\n[measure]\nwarmup_steps = 1\n[sweep]\n"
         "train.optimizer.lr = " +
         lrs + "\n";
}

// The per-step losses of the run with this sweep index, by step.
std::vector<double> losses(const std::string& db, int sweep_index) {
  std::vector<double> out;
  const std::string q =
      "SELECT group_concat(loss, ' ') FROM (SELECT s.loss FROM steps s JOIN runs r ON r.id = s.run"
      " WHERE r.sweep_index = " +
      std::to_string(sweep_index) + " AND s.loss IS NOT NULL ORDER BY s.step)";
  const CommandResult r = run_command("sqlite3 " + shell_quote(db) + " " + shell_quote(q));
  std::istringstream in(r.output);
  for (double v; in >> v;) out.push_back(v);
  return out;
}

// Waits until `runs` runs each have stored at least `steps` steps.
bool wait_for_runs_with_steps(const CliFixture& f, int runs, int steps, pid_t pid) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return false;
    try {
      if (std::filesystem::exists(f.db()) &&
          std::stoi(f.sql("SELECT count(*) FROM (SELECT run FROM steps GROUP BY run HAVING "
                          "count(*) >= " + std::to_string(steps) + ")")) >= runs)
        return true;
    } catch (const std::exception&) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

}  // namespace

TEST_CASE("parallel slots: the cores split evenly, one GPU per run, bad options refused",
          "[cli][parallel]") {
  SlotPlan p;
  REQUIRE(plan_slots(2, {}, {0, 1, 2, 3}, p).empty());
  REQUIRE(p.slots.size() == 2);
  CHECK(p.cpu_threads == 2);
  CHECK(p.slots[0].cpus == std::vector<int>{0, 1});
  CHECK(p.slots[1].cpus == std::vector<int>{2, 3});
  CHECK(p.slots[0].gpu.empty());
  CHECK(p.notes.empty());

  // Cores left over stay free; an affinity mask with gaps is followed.
  REQUIRE(plan_slots(3, {}, {2, 3, 5, 7, 8, 9, 11}, p).empty());
  CHECK(p.cpu_threads == 2);
  CHECK(p.slots[2].cpus == std::vector<int>{8, 9});

  // More runs than cores: one thread each, nothing pinned, and a note.
  REQUIRE(plan_slots(4, {}, {0, 1}, p).empty());
  CHECK(p.cpu_threads == 1);
  REQUIRE(p.slots.size() == 4);
  CHECK(p.slots[3].cpus.empty());
  REQUIRE(p.notes.size() == 1);
  CHECK_THAT(p.notes[0], Contains("4 runs at once on 2 core(s)"));

  // --gpus alone: one run per GPU, the cores split between them too.
  REQUIRE(plan_slots(0, {"0", "1", "GPU-8f6a"}, {0, 1, 2, 3, 4, 5}, p).empty());
  REQUIRE(p.slots.size() == 3);
  CHECK(p.slots[2].gpu == "GPU-8f6a");
  CHECK(p.slots[1].cpus == std::vector<int>{2, 3});
  REQUIRE(plan_slots(2, {"0", "1", "2"}, {0, 1}, p).empty());
  CHECK(p.slots.size() == 2);

  CHECK_THAT(plan_slots(3, {"0", "1"}, {0, 1}, p), Contains("at most 2 at once"));
  CHECK_THAT(plan_slots(0, {"0", "0"}, {0, 1}, p), Contains("GPU 0 twice"));
  CHECK_THAT(plan_slots(0, {"0", ""}, {0, 1}, p), Contains("--gpus ''"));
  CHECK_THAT(plan_slots(0, {"a b"}, {0, 1}, p), Contains("expected GPU indices"));
  CHECK_THAT(plan_slots(0, {}, {0, 1}, p), Contains("--parallel 0"));
}

TEST_CASE("parallel 2 on the CPU: both runs stored at once, threads split, the losses of one "
          "at a time", "[cli][parallel]") {
  CliFixture f;
  const std::string file = f.write_experiment("par.toml", lr_runs(8));
  const CommandResult par = f.xrun(run_args(f, file) + " --parallel 2");
  INFO(par.output);
  REQUIRE(par.status == 0);
  CHECK_THAT(par.output, Contains("[#0] run 1/2: #0") && Contains("[#1] run 2/2: #1"));
  CHECK_THAT(par.output, Contains("par: 2 of 2 run(s)"));
  CHECK(f.sql("SELECT group_concat(status) FROM runs") == "complete,complete");

  // Each run trained with its share of the cores, on cores of its own.
  const std::vector<int> cpus = xrun::usable_cpus();
  const int threads = cpus.size() >= 2 ? static_cast<int>(cpus.size() / 2) : 1;
  CHECK(f.sql("SELECT group_concat(DISTINCT value) FROM run_params WHERE key = 'train.threads'") ==
        std::to_string(threads));
  CHECK(f.sql("SELECT group_concat(DISTINCT value) FROM run_environment WHERE key = "
              "'cpu_threads'") == std::to_string(threads));
  if (cpus.size() >= 2)
    CHECK(f.sql("SELECT count(DISTINCT value) FROM run_environment WHERE key = 'cpu_affinity'") ==
          "2");
  // At the same time: each started before the other finished.
  CHECK(f.sql("SELECT count(*) FROM runs a JOIN runs b ON a.id < b.id WHERE a.started_at < "
              "b.finished_at AND b.started_at < a.finished_at") == "1");

  // The same runs one at a time, with the same thread count: the same
  // settings (one config hash each) and the same losses.
  const std::string seq_db = f.dir.file("one-at-a-time.db");
  const CommandResult seq = f.xrun("run " + shell_quote(file) + " --db " + shell_quote(seq_db) +
                                   " --set train.threads=" + std::to_string(threads));
  INFO(seq.output);
  REQUIRE(seq.status == 0);
  for (int run = 0; run < 2; ++run) {
    const std::string hash_q =
        "SELECT config_hash FROM runs WHERE sweep_index = " + std::to_string(run);
    CHECK(run_command("sqlite3 " + shell_quote(seq_db) + " " + shell_quote(hash_q)).output ==
          f.sql(hash_q) + "\n");
    const std::vector<double> a = losses(f.db(), run), b = losses(seq_db, run);
    REQUIRE(a.size() == 8);
    REQUIRE(b.size() == a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      INFO("run " << run << " step " << i << ": " << a[i] << " vs " << b[i]);
      CHECK(std::abs(a[i] - b[i]) <= 1e-3 * std::abs(b[i]));
    }
  }

  // Run again: both complete, nothing trained.
  const CommandResult again = f.xrun(run_args(f, file) + " --parallel 2");
  INFO(again.output);
  CHECK(again.status == 0);
  CHECK_THAT(again.output, Contains("already complete, skipped"));
  CHECK(f.sql("SELECT count(*) FROM runs") == "2");
}

TEST_CASE("Ctrl-C stops every run of --parallel, each stored as interrupted",
          "[cli][parallel]") {
  CliFixture f;
  const std::string file = f.write_experiment("par.toml", lr_runs(5000, "[0.001, 0.002, 0.003]"));
  const pid_t pid = spawn_xrun(f, file, {"--parallel", "2"}, "job.log", true);
  REQUIRE(wait_for_runs_with_steps(f, 2, 3, pid));
  kill(-pid, SIGINT);  // a terminal's Ctrl-C: the foreground job's whole group
  const int code = wait_exit(pid);
  const std::string log = read_bytes(f.dir.file("job.log"));
  INFO(log);
  CHECK(code == 130);
  CHECK(f.sql("SELECT group_concat(status) FROM runs") == "interrupted,interrupted");
  CHECK(f.sql("SELECT count(*) FROM runs WHERE error LIKE 'interrupted before step%'") == "2");
  CHECK_THAT(log, Contains("#2   ") && Contains("not started: stopped before its turn"));
  // The steps trained before the stop are kept.
  CHECK(std::stoi(f.sql("SELECT count(DISTINCT run) FROM steps")) == 2);
}

TEST_CASE("SIGTERM to the --parallel process alone reaches its runs", "[cli][parallel]") {
  CliFixture f;
  const std::string file = f.write_experiment("par.toml", lr_runs(5000));
  const pid_t pid = spawn_xrun(f, file, {"--parallel", "2"}, "job.log", true);
  REQUIRE(wait_for_runs_with_steps(f, 2, 3, pid));
  kill(pid, SIGTERM);  // as `timeout` or Slurm would send it
  const int code = wait_exit(pid);
  INFO(read_bytes(f.dir.file("job.log")));
  CHECK(code == 128 + SIGTERM);
  CHECK(f.sql("SELECT group_concat(status) FROM runs") == "interrupted,interrupted");
}

TEST_CASE("parallel --gpus: each run gets its own CUDA_VISIBLE_DEVICES, a failed run does not stop the "
          "others", "[cli][parallel]") {
  // Each child in its slot's CUDA_VISIBLE_DEVICES; the third takes the
  // first slot freed. (xrun refuses --gpus for CPU runs, so the slots are
  // seen through run_children with children of our own.)
  std::vector<xrun::cli::Slot> slots(2);
  slots[0].gpu = "3";
  slots[1].gpu = "5";
  std::vector<xrun::cli::ChildRun> children(3);
  for (int i = 0; i < 3; ++i) {
    children[i].index = i;
    children[i].argv = {"/bin/sh", "-c", "echo gpu=$CUDA_VISIBLE_DEVICES; sleep 0.3"};
  }
  std::FILE* out = std::tmpfile();
  REQUIRE(out);
  const xrun::cli::ChildrenOutcome done = xrun::cli::run_children(children, slots, out);
  std::rewind(out);
  std::string text;
  for (int c; (c = std::fgetc(out)) != EOF;) text += static_cast<char>(c);
  std::fclose(out);
  INFO(text);
  CHECK_THAT(text, Contains("[#0] gpu=3") && Contains("[#1] gpu=5"));
  CHECK((text.find("[#2] gpu=3") != std::string::npos ||
         text.find("[#2] gpu=5") != std::string::npos));
  for (const xrun::cli::ChildEnd& end : done.ends) {
    CHECK(end.exit_code == 0);
    CHECK(end.pid > 0);
  }

  CliFixture f;
  // Three CPU runs; run 1 reads CIFAR-10 from a folder that is not there.
  std::string toml = lr_runs(3);
  toml = toml.substr(0, toml.find("[sweep]")) +
         "[sweep]\nmode = \"zip\"\ndata.source = [\"synthetic\", \"cifar10\", \"synthetic\"]\n"
         "train.seed = [1, 2, 3]\n";
  const std::string file = f.write_experiment("gpus.toml", toml);
  const CommandResult r =
      f.xrun(run_args(f, file) + " --parallel 2 --set 'data.path=\"/nonexistent/cifar\"'");
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK(f.sql("SELECT group_concat(status || ':' || sweep_index, ' ') FROM (SELECT status, "
              "sweep_index FROM runs ORDER BY sweep_index)") ==
        "complete:0 failed:1 complete:2");
  CHECK(f.sql("SELECT error FROM runs WHERE sweep_index = 1").find("/nonexistent/cifar") !=
        std::string::npos);
}

TEST_CASE("parallel: options that cannot work are refused before anything runs",
          "[cli][parallel]") {
  CliFixture f;
  const std::string file = f.write_experiment("par.toml", lr_runs(3));
  const CommandResult too_many = f.xrun(run_args(f, file) + " --parallel 3 --gpus 0,1");
  CHECK(too_many.status == 2);
  CHECK_THAT(too_many.output, Contains("one run per GPU, so at most 2 at once"));
  const CommandResult nsys = f.xrun(run_args(f, file) + " --parallel 2 --nsys");
  CHECK(nsys.status == 2);
  CHECK_THAT(nsys.output, Contains("--nsys records one process"));
  const CommandResult zero = f.xrun(run_args(f, file) + " --parallel 0");
  CHECK(zero.status == 2);
  CHECK_FALSE(std::filesystem::exists(f.db()));

  // The child's guard: an experiment that no longer plans what the parent
  // planned is not trained.
  const CommandResult changed =
      f.xrun(run_args(f, file) + " --only 1 --expect-config 0123456789abcdef");
  INFO(changed.output);
  CHECK(changed.status == 2);
  CHECK_THAT(changed.output, Contains("changed after `xrun run --parallel` planned it"));
  CHECK_FALSE(std::filesystem::exists(f.db()));
}

TEST_CASE("parallel: --parallel 0 says N >= 1, --gpus for CPU runs is exit 2", "[cli][parallel]") {
  CliFixture f;
  const std::string file = f.write_experiment("par.toml", lr_runs(3));
  for (const std::string n : {"0", "-3", "x"}) {
    const CommandResult r = f.xrun(run_args(f, file) + " --parallel " + n);
    INFO(r.output);
    CHECK(r.status == 2);
    CHECK_THAT(r.output, Contains("must be a whole number >= 1"));
    CHECK(r.output.find("00000000") == std::string::npos);  // no range up to DBL_MAX
  }
  const CommandResult gpus = f.xrun(run_args(f, file) + " --gpus a,b");
  INFO(gpus.output);
  CHECK(gpus.status == 2);
  CHECK_THAT(gpus.output, Contains("--gpus gives each run a GPU, but run #0 trains on the cpu"));
  CHECK_FALSE(std::filesystem::exists(f.db()));
}

TEST_CASE("parallel: an experiment from <(cat file) reaches every child", "[cli][parallel]") {
  CliFixture f;
  f.write_experiment("par.toml", lr_runs(3));
  const CommandResult r = run_command(
      "cd " + shell_quote(f.dir.str()) + " && timeout -k 5 120 bash -c " +
      shell_quote(shell_quote(xrun_binary()) + " run <(cat par.toml) --db " + shell_quote(f.db()) +
                  " --parallel 2"));
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(f.sql("SELECT group_concat(status) FROM runs") == "complete,complete");
  CHECK_THAT(f.sql("SELECT file FROM experiments"), Contains("/dev/fd/"));
  // The frozen copies the children read are gone.
  CHECK(r.output.find("required key missing") == std::string::npos);
}

TEST_CASE("parallel: a second --parallel on a sweep being trained skips its runs, exit 0",
          "[cli][parallel]") {
  CliFixture f;
  const std::string file = f.write_experiment("par.toml", lr_runs(400));
  const pid_t first = spawn_xrun(f, file, {"--parallel", "2"}, "first.log");
  REQUIRE(wait_for_runs_with_steps(f, 2, 2, first));
  // Both runs are being trained by the first: the second's children skip them.
  const CommandResult second = f.xrun(run_args(f, file) + " --parallel 2");
  INFO(second.output);
  CHECK(second.status == 0);
  CHECK_THAT(second.output, Contains("being trained by another xrun process, skipped"));
  const int code = wait_exit(first);
  INFO(read_bytes(f.dir.file("first.log")));
  CHECK(code == 0);
  CHECK(f.sql("SELECT group_concat(status) FROM runs") == "complete,complete");
  // Once complete, a third skips them before starting any child.
  const CommandResult third = f.xrun(run_args(f, file) + " --parallel 2");
  CHECK(third.status == 0);
  CHECK_THAT(third.output, Contains("already complete, skipped"));
}

TEST_CASE("parallel: a child killed by SIGKILL: its run failed with why, the others go on, exit 1",
          "[cli][parallel]") {
  CliFixture f;
  std::string toml = lr_runs(3);
  toml = toml.substr(0, toml.find("steps = 3")) + toml.substr(toml.find("steps = 3") + 10);
  toml = toml.substr(0, toml.find("[sweep]")) +
         "[sweep]\nmode = \"zip\"\ntrain.steps = [5000, 40]\ntrain.seed = [1, 2]\n";
  const std::string file = f.write_experiment("kill.toml", toml);
  const pid_t parent = spawn_xrun(f, file, {"--parallel", "2"}, "kill.log");
  REQUIRE(wait_for_runs_with_steps(f, 2, 3, parent));
  const pid_t child = std::stoi(f.sql("SELECT pid FROM runs WHERE sweep_index = 0"));
  REQUIRE(child > 0);
  REQUIRE(::kill(child, SIGKILL) == 0);
  const int code = wait_exit(parent);
  const std::string log = read_bytes(f.dir.file("kill.log"));
  INFO(log);
  CHECK(code == 1);
  CHECK(f.sql("SELECT status FROM runs WHERE sweep_index = 0") == "failed");
  CHECK_THAT(f.sql("SELECT error FROM runs WHERE sweep_index = 0"),
             Contains("killed by signal 9"));
  CHECK(f.sql("SELECT status FROM runs WHERE sweep_index = 1") == "complete");
  CHECK_THAT(log, Contains("killed by signal 9"));
}
