// tests/cli/submit_test.cpp: `xrun submit --slurm` and `xrun collect`.
// Through a real single-node Slurm cluster (tests/cli/slurm_cluster.h): a
// sweep of four CPU runs submitted, trained as a job array, collected into
// one store, and resubmitted (nothing left to do). Without one: the batch
// script of a job array, one task per planned run, checked line by line;
// a bad experiment file submits and writes nothing (exit 2); runs complete
// in their task store are left out of the next submission; with no sbatch
// on the PATH the script and the frozen experiment are written and the
// error says so; and the written script, run by bash as Slurm would run
// array task 1, trains that task's run into its own store. And the README's
// cluster example, eight runs from submit to compare, run as written there.
// Hostile input (issue #20): a FIFO or <(...) read once and frozen as
// planned; frozen copies named by SHA-256 and compared before reuse, one
// script per submission; jobs facing an empty sacct State, a gigabyte log
// and a FIFO for jobs.tsv; collect letting a completed retry win over a
// dead try's running row, and skipping a corrupt task store by name.
#include "catch2_compat.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <vector>

#include "cli_util.h"
#include "slurm_cluster.h"

using namespace xrun_test;
using Catch::Contains;

namespace {

// Four runs (lr x seed) of two steps each: seconds on two cores.
std::string four_runs() {
  return R"(name = "tiny"
[model]
arch = "resnet18"
[data]
source = "synthetic"
image_size = 16
samples = 64
test_samples = 16
workers = 0
[train]
device = "cpu"
batch_size = 8
steps = 2
eval = false
threads = 1
[measure]
warmup_steps = 1
[sweep]
train.optimizer.lr = [0.001, 0.01]
train.seed = [1, 2]
)";
}

}  // namespace

TEST_CASE("xrun submit --dry-run: one array task per planned run, the same --set values",
          "[cli][submit]") {
  CliFixture f;
  const std::string file = f.write_experiment("tiny.toml", four_runs());
  const CommandResult r =
      f.xrun("submit tiny.toml --slurm --dry-run --results out --max-parallel 2 --partition gpu "
             "--gpus-per-run 1 --cpus-per-run 4 --mem 16G --time 01:30:00 "
             "--set 'store.label=\"rack 3\"'");
  INFO(r.output);
  REQUIRE(r.status == 0);
  const std::string dir = std::filesystem::canonical(f.dir.path()).string();
  const std::string out = dir + "/out";
  CHECK_THAT(r.output, Contains("#!/bin/bash\n"));
  CHECK_THAT(r.output, Contains("#SBATCH --job-name=xrun-tiny\n"));
  CHECK_THAT(r.output, Contains("#SBATCH --array=0-3%2\n"));
  CHECK_THAT(r.output, Contains("#SBATCH --output=" + out + "/logs/%A_%a.out\n"));
  CHECK_THAT(r.output, Contains("#SBATCH --chdir=" + dir + "\n"));
  CHECK_THAT(r.output, Contains("#SBATCH --partition=gpu\n"));
  CHECK_THAT(r.output, Contains("#SBATCH --gpus-per-task=1\n"));
  CHECK_THAT(r.output, Contains("#SBATCH --cpus-per-task=4\n"));
  CHECK_THAT(r.output, Contains("#SBATCH --mem=16G\n"));
  CHECK_THAT(r.output, Contains("#SBATCH --time=01:30:00\n"));
  CHECK_THAT(r.output, Contains("runs=(0 1 2 3)\nrun=${runs[$SLURM_ARRAY_TASK_ID]}\n"));
  CHECK_THAT(r.output, Contains(" run " + out + "/experiment-") &&
                           Contains(".toml --only \"$run\" --db " + out + "/task-\"$run\".db "
                                    "--set 'store.label=\"rack 3\"'\n"));
  CHECK_FALSE(std::filesystem::exists(f.dir.file("out")));  // a dry run writes nothing
}

TEST_CASE("xrun submit: a bad file or a bad option submits and writes nothing", "[cli][submit]") {
  CliFixture f;
  f.write_experiment("bad.toml", "name = \"bad\"\n[train]\nbatch_size = \"many\"\n");
  const CommandResult bad = f.xrun("submit bad.toml --slurm --results out");
  CHECK(bad.status == 2);
  CHECK_THAT(bad.output, Contains("bad.toml:3"));
  f.write_experiment("tiny.toml", four_runs());
  const CommandResult no_scheduler = f.xrun("submit tiny.toml --results out");
  CHECK(no_scheduler.status == 2);
  CHECK_THAT(no_scheduler.output, Contains("--slurm"));
  const CommandResult past_end = f.xrun("submit tiny.toml --slurm --only 7 --results out");
  CHECK(past_end.status == 2);
  CHECK_THAT(past_end.output, Contains("plans runs 0..3"));
  CHECK_FALSE(std::filesystem::exists(f.dir.file("out")));
}

TEST_CASE("xrun submit: runs complete in their task store are left out, the script trains a task",
          "[cli][submit]") {
  CliFixture f;
  f.write_experiment("tiny.toml", four_runs());
  std::filesystem::create_directories(f.dir.file("out"));
  // Run 1 trained before, into its task store (as its array task would).
  const CommandResult first = f.xrun("run tiny.toml --only 1 --db out/task-1.db");
  INFO(first.output);
  REQUIRE(first.status == 0);
  const CommandResult dry = f.xrun("submit tiny.toml --slurm --dry-run --results out");
  REQUIRE(dry.status == 0);
  CHECK_THAT(dry.output, Contains("#SBATCH --array=0-2\n") && Contains("runs=(0 2 3)\n"));

  // No sbatch here: the script and the frozen experiment are written, and
  // the error says what is missing.
  const CommandResult sub =
      run_command("cd " + shell_quote(f.dir.str()) + " && env PATH=/nonexistent " +
                  shell_quote(xrun_binary()) + " submit tiny.toml --slurm --results out --only 2,3");
  INFO(sub.output);
  CHECK(sub.status == 1);
  CHECK_THAT(sub.output, Contains("sbatch"));
  std::string script;
  int frozen = 0;
  for (const auto& e : std::filesystem::directory_iterator(f.dir.file("out"))) {
    const std::string name = e.path().filename().string();
    if (name.rfind("job-", 0) == 0) script = e.path().string();
    if (name.rfind("experiment-", 0) == 0) ++frozen;
  }
  REQUIRE_FALSE(script.empty());
  CHECK(frozen == 1);
  // Slurm would run array task 1 of (2 3): run 3, into out/task-3.db.
  const CommandResult task = run_command("SLURM_ARRAY_TASK_ID=1 bash " + shell_quote(script));
  INFO(task.output);
  REQUIRE(task.status == 0);
  REQUIRE(std::filesystem::exists(f.dir.file("out/task-3.db")));
  CHECK_FALSE(std::filesystem::exists(f.dir.file("out/task-2.db")));
  const CommandResult runs = f.xrun("runs --db out/task-3.db --format csv");
  CHECK_THAT(runs.output, Contains("complete"));
}

TEST_CASE("xrun collect: finished task stores merged, a running one reported and left out",
          "[cli][submit]") {
  CliFixture f;
  f.write_experiment("tiny.toml", four_runs());
  std::filesystem::create_directories(f.dir.file("out"));
  for (int run : {0, 2}) {
    const CommandResult r = f.xrun("run tiny.toml --only " + std::to_string(run) +
                                   " --db out/task-" + std::to_string(run) + ".db");
    INFO(r.output);
    REQUIRE(r.status == 0);
  }
  // Run 1's task is killed mid-run: its store holds a run still marked running.
  const std::string slow = f.write_experiment(
      "slow.toml", small_experiment("slow", "", "lr = 1e-3"));
  const pid_t pid = spawn_xrun(f, slow);
  REQUIRE(wait_for_steps(f, 2, pid));
  kill(pid, SIGKILL);
  wait_exit(pid);
  for (const char* suffix : {"", "-wal", "-shm"})
    if (std::filesystem::exists(f.db() + suffix))
      std::filesystem::copy_file(f.db() + suffix, f.dir.file(std::string("out/task-1.db") + suffix));
  // What a submission of runs 0 to 3 leaves beside the stores (xrun submit).
  write_bytes(f.dir.file("out/jobs.tsv"), "4242\t/x/job.sh\t0,1,2,3\n");

  const CommandResult c = f.xrun("collect out --into all.db");
  INFO(c.output);
  REQUIRE(c.status == 0);
  CHECK_THAT(c.output, Contains("run 1: still running"));
  CHECK_THAT(c.output, Contains("run 3: submitted, no store yet"));
  CHECK_THAT(c.output, Contains("collected 2 task store(s)") && Contains("2 run(s) added") &&
                           Contains("2 run(s) not finished"));
  const CommandResult listed = f.xrun("runs --db all.db --format csv");
  CHECK_THAT(listed.output, Contains("tiny"));
  CHECK_FALSE(listed.output.find("slow") != std::string::npos);  // not half-merged
  // Collecting again adds nothing.
  const CommandResult again = f.xrun("collect out --into all.db");
  CHECK_THAT(again.output, Contains("0 run(s) added, 2 already present"));
  CHECK(f.xrun("collect nowhere --into all.db").status == 2);
  // A hand-edited jobs.tsv is read as far as it makes sense, never a crash.
  write_bytes(f.dir.file("out/jobs.tsv"), "4242\t/x/job.sh\t/x/e.toml\t[]\t0,x,99999999999\n"
                                          "short line\n");
  const CommandResult odd = f.xrun("jobs --results out");
  CHECK((odd.status == 0 || odd.status == 1));
  CHECK_THAT(odd.output, Contains("job 4242 (1 task(s)"));
  CHECK(f.xrun("jobs --results nowhere").status == 2);
  // Without --results: the folders under xrun-results, and here there are none.
  const CommandResult none = f.xrun("jobs");
  CHECK(none.status == 2);
  CHECK_THAT(none.output, Contains("no xrun-results/*/jobs.tsv"));
}

TEST_CASE("xrun jobs reads finished tasks from sacct where the cluster keeps accounting",
          "[cli][submit]") {
  // The test cluster keeps no accounting (slurmdbd needs a MariaDB server),
  // so here sacct is a stand-in printing what `sacct -n -P -X -o
  // JobID,State,ExitCode` prints for an array job, and squeue knows no task.
  CliFixture f;
  f.write_experiment("tiny.toml", four_runs());
  std::filesystem::create_directories(f.dir.file("bin"));
  std::filesystem::create_directories(f.dir.file("out/logs"));
  write_bytes(f.dir.file("bin/squeue"), "#!/bin/sh\nexit 0\n");
  write_bytes(f.dir.file("bin/sacct"),
              "#!/bin/sh\necho \"$*\" > \"$(dirname \"$0\")/sacct.args\"\n"
              "printf '4242_0|COMPLETED|0:0\\n4242_1|FAILED|1:0\\n4242_2|CANCELLED by 0|0:15\\n'\n");
  std::filesystem::permissions(f.dir.file("bin/squeue"), std::filesystem::perms::owner_all);
  std::filesystem::permissions(f.dir.file("bin/sacct"), std::filesystem::perms::owner_all);
  write_bytes(f.dir.file("out/jobs.tsv"), "4242\t/x/job.sh\t" + f.dir.file("tiny.toml") +
                                              "\t[]\t0,1,2,3\n");
  write_bytes(f.dir.file("out/logs/4242_1.out"), "training...\nxrun: run #1 failed: out of memory\n");
  const CommandResult r = run_command("cd " + shell_quote(f.dir.str()) + " && PATH=" +
                                      shell_quote(f.dir.file("bin")) + ":$PATH " +
                                      shell_quote(xrun_binary()) + " jobs --results out");
  INFO(r.output);
  CHECK(r.status == 1);  // a task failed
  CHECK_THAT(r.output, Contains("job 4242 (4 task(s), states from squeue and sacct)"));
  CHECK_THAT(r.output, Contains("task 0  run 0  COMPLETED (exit 0:0)  train.optimizer.lr=0.001 train.seed=1"));
  CHECK_THAT(r.output, Contains("task 1  run 1  FAILED (exit 1:0)"));
  CHECK_THAT(r.output, Contains("| xrun: run #1 failed: out of memory"));
  CHECK_THAT(r.output, Contains("task 2  run 2  CANCELLED (exit 0:15)"));
  CHECK_THAT(r.output, Contains("task 3  run 3  UNKNOWN (not in squeue or sacct)"));
  CHECK(read_bytes(f.dir.file("bin/sacct.args")) == "-n -P -X -j 4242 -o JobID,State,ExitCode\n");
}

TEST_CASE("Slurm: four runs submitted as a job array, trained, collected, resubmitting does nothing",
          "[cli][submit][slurm]") {
  const std::string missing = SlurmCluster::missing();
  INFO("not installed: " << missing << " (scripts/setup.sh installs slurm-wlm and munge)");
  REQUIRE(missing.empty());
  SlurmCluster cluster;
  CliFixture f;
  f.write_experiment("tiny.toml", four_runs());
  const CommandResult sub = f.xrun("submit tiny.toml --slurm --results out --cpus-per-run 1");
  INFO(sub.output);
  REQUIRE(sub.status == 0);
  CHECK_THAT(sub.output, Contains("submitted job ") && Contains("4 run(s) of tiny (0,1,2,3)"));
  INFO("cluster logs: " << cluster.log_dir());
  REQUIRE(cluster.wait_idle(300));
  const CommandResult c = f.xrun("collect out --into all.db");
  INFO(c.output);
  REQUIRE(c.status == 0);
  CHECK_THAT(c.output, Contains("collected 4 task store(s)") && Contains("4 run(s) added"));
  CHECK_THAT(f.xrun("runs --db all.db --where status=complete --format csv").output,
             Contains("tiny"));
  const CommandResult count = run_command(
      "sqlite3 " + shell_quote(f.dir.file("all.db")) +
      " \"SELECT count(*), (SELECT count(*) FROM steps) FROM runs WHERE status = 'complete'\"");
  CHECK(count.output == "4|8\n");  // 4 runs of 2 steps
  const CommandResult jobs = f.xrun("jobs --results out");
  INFO(jobs.output);
  CHECK(jobs.status == 0);
  for (const char* task : {"task 0  run 0  COMPLETED", "task 3  run 3  COMPLETED"})
    CHECK_THAT(jobs.output, Contains(task));
  CHECK_THAT(jobs.output, Contains("train.optimizer.lr=0.01 train.seed=2"));  // run 3's settings
  const CommandResult again = f.xrun("submit tiny.toml --slurm --results out");
  CHECK(again.status == 0);
  CHECK_THAT(again.output, Contains("every selected run is complete"));
}

TEST_CASE("Slurm: a run of 2 ranks is a job of 2 tasks started by srun, collected as one run",
          "[cli][submit][slurm][ranks]") {
  const std::string missing = SlurmCluster::missing();
  INFO("not installed: " << missing << " (scripts/setup.sh installs slurm-wlm and munge)");
  REQUIRE(missing.empty());
  // train.ranks = [1, 2]: an array cannot vary --ntasks, so two jobs.
  std::string text = four_runs();
  text = text.substr(0, text.find("[sweep]")) + "[sweep]\ntrain.ranks = [1, 2]\n";
  text.replace(text.find("steps = 2"), 9, "steps = 3");
  CliFixture f;
  f.write_experiment("ranked.toml", text);
  const CommandResult dry = f.xrun("submit ranked.toml --slurm --results out --dry-run");
  INFO(dry.output);
  REQUIRE(dry.status == 0);
  CHECK_THAT(dry.output, Contains("# ---- job 1 of 2") && Contains("# ---- job 2 of 2") &&
                             Contains("#SBATCH --ntasks=1") && Contains("#SBATCH --ntasks=2") &&
                             Contains("export XRUN_RANKS_FROM=slurm") &&
                             Contains("srun --kill-on-bad-exit=1 --label "));

  // With GPUs: one per rank, whatever a plain run would ask for.
  const CommandResult gpus = f.xrun("submit ranked.toml --slurm --results out --dry-run --gpus-per-run 2");
  const std::string ranked_job = gpus.output.substr(gpus.output.find("# ---- job 2 of 2"));
  CHECK_THAT(gpus.output.substr(0, gpus.output.find("# ---- job 2 of 2")),
             Contains("#SBATCH --gpus-per-task=2"));
  CHECK_THAT(ranked_job, Contains("#SBATCH --ntasks=2\n") && Contains("#SBATCH --gpus-per-task=1\n"));

  SlurmCluster cluster;
  const CommandResult sub = f.xrun("submit ranked.toml --slurm --results out --cpus-per-run 1");
  INFO(sub.output);
  REQUIRE(sub.status == 0);
  CHECK_THAT(sub.output, Contains("1 run(s) of tiny (0)\n") &&
                             Contains("1 run(s) of tiny (1), 2 Slurm task(s) per run, one per rank"));
  INFO("cluster logs: " << cluster.log_dir());
  REQUIRE(cluster.wait_idle(300));
  const CommandResult jobs = f.xrun("jobs --results out");
  INFO(jobs.output);
  CHECK_THAT(jobs.output, Contains("run 0  COMPLETED") && Contains("run 1  COMPLETED"));
  const CommandResult c = f.xrun("collect out --into all.db");
  INFO(c.output);
  REQUIRE(c.status == 0);
  const std::string db = shell_quote(f.dir.file("all.db"));
  // One run per planned run (rank 1 stored nothing), the 2-rank one with its
  // global batch, a row per rank, both on this node.
  CHECK(run_command("sqlite3 " + db +
                    " \"SELECT group_concat(status || ' ' || ranks || 'x' || global_batch, ', ') "
                    "FROM (SELECT * FROM run_summary ORDER BY ranks)\"")
            .output == "complete 1x8, complete 2x16\n");
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  CHECK(run_command("sqlite3 " + db + " \"SELECT group_concat(rank || ' ' || host, ', ') FROM "
                                      "(SELECT * FROM ranks ORDER BY rank)\"")
            .output == "0 " + std::string(host) + ", 1 " + std::string(host) + "\n");
  const std::string log = read_bytes(f.dir.file("out/logs/" + [&] {
    for (const auto& e : std::filesystem::directory_iterator(f.dir.file("out/logs")))
      if (read_bytes(e.path().string()).find("2 ranks joined through gloo") != std::string::npos)
        return e.path().filename().string();
    return std::string("none");
  }()));
  // srun --label: each line starts with its rank (rank 1 trains silently).
  CHECK(log.rfind("0: ", 0) == 0);
  CHECK_THAT(log, Contains("\n0: run 1/1: 2 ranks joined through gloo"));
  for (const auto& e : std::filesystem::directory_iterator(f.dir.file("out")))  // cleaned up
    CHECK(e.path().filename().string().rfind("rendezvous-", 0) == std::string::npos);
  const CommandResult again = f.xrun("submit ranked.toml --slurm --results out");
  CHECK_THAT(again.output, Contains("every selected run is complete"));
}

TEST_CASE("Slurm: a run that fails is reported with its reason, resubmitting sends only it",
          "[cli][submit][slurm]") {
  REQUIRE(SlurmCluster::missing().empty());
  SlurmCluster cluster;
  CliFixture f;
  // Run 2 reads CIFAR-10 from a folder that is not there; the others are synthetic.
  std::string toml = four_runs();
  toml = toml.substr(0, toml.find("[sweep]")) +
         "[sweep]\nmode = \"zip\"\ndata.source = [\"synthetic\", \"synthetic\", \"cifar10\", "
         "\"synthetic\"]\ntrain.seed = [1, 2, 3, 4]\n";
  f.write_experiment("mixed.toml", toml);
  const std::string set = " --set 'data.path=\"/nonexistent/cifar\"'";
  const CommandResult sub = f.xrun("submit mixed.toml --slurm --results out" + set);
  INFO(sub.output);
  REQUIRE(sub.status == 0);
  INFO("cluster logs: " << cluster.log_dir());
  REQUIRE(cluster.wait_idle(300));
  const CommandResult jobs = f.xrun("jobs --results out");
  INFO(jobs.output);
  CHECK(jobs.status == 1);
  CHECK_THAT(jobs.output, Contains("task 2  run 2  FAILED") && Contains("/nonexistent/cifar"));
  CHECK_THAT(jobs.output, Contains("task 1  run 1  COMPLETED"));
  const CommandResult c = f.xrun("collect out --into all.db");
  INFO(c.output);
  REQUIRE(c.status == 0);
  const CommandResult count = run_command(
      "sqlite3 " + shell_quote(f.dir.file("all.db")) +
      " \"SELECT group_concat(status || ':' || sweep_index, ' ') FROM"
      " (SELECT status, sweep_index FROM runs ORDER BY sweep_index)\"");
  CHECK(count.output == "complete:0 complete:1 failed:2 complete:3\n");
  const CommandResult again = f.xrun("submit mixed.toml --slurm --results out" + set);
  INFO(again.output);
  CHECK(again.status == 0);
  CHECK_THAT(again.output, Contains("1 run(s) of tiny (2)"));
  REQUIRE(cluster.wait_idle(300));
}

namespace {

size_t occurrences(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = 0; (at = text.find(needle, at)) != std::string::npos; at += needle.size()) ++n;
  return n;
}

// The commands of the README's cluster example: the `xrun ...` lines of the
// first fenced block after the <!-- cluster-example --> marker, comments
// stripped.
std::vector<std::string> readme_cluster_example() {
  const std::string readme = read_bytes(source_path("README.md"));
  const size_t marker = readme.find("<!-- cluster-example -->");
  REQUIRE(marker != std::string::npos);
  const size_t open = readme.find("```sh\n", marker);
  const size_t close = readme.find("```", open + 6);
  REQUIRE((open != std::string::npos && close != std::string::npos));
  std::vector<std::string> commands;
  std::istringstream lines(readme.substr(open + 6, close - open - 6));
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("xrun ", 0) != 0) continue;
    line = line.substr(5, line.find("  #") == std::string::npos ? std::string::npos
                                                                : line.find("  #") - 5);
    while (!line.empty() && line.back() == ' ') line.pop_back();
    commands.push_back(line);
  }
  return commands;
}

}  // namespace

TEST_CASE("Slurm: the README's cluster example, eight runs from submit to compare",
          "[cli][submit][slurm]") {
  REQUIRE(SlurmCluster::missing().empty());
  const std::vector<std::string> commands = readme_cluster_example();
  REQUIRE(commands.size() == 4);
  REQUIRE(commands[0].rfind("submit ", 0) == 0);
  REQUIRE(commands[1].rfind("jobs", 0) == 0);
  REQUIRE(commands[2].rfind("collect ", 0) == 0);
  REQUIRE(commands[3].rfind("compare ", 0) == 0);
  SlurmCluster cluster;
  CliFixture f;
  std::filesystem::create_directories(f.dir.file("experiments"));
  std::filesystem::copy_file(source_path("experiments/cluster-sweep.toml"),
                             f.dir.file("experiments/cluster-sweep.toml"));
  INFO("cluster logs: " << cluster.log_dir());

  const CommandResult sub = f.xrun(commands[0]);
  INFO(sub.output);
  REQUIRE(sub.status == 0);
  CHECK_THAT(sub.output, Contains("8 run(s) of cluster-sweep"));
  REQUIRE(cluster.wait_idle(600));
  const CommandResult jobs = f.xrun(commands[1]);
  INFO(jobs.output);
  CHECK(jobs.status == 0);
  CHECK_THAT(jobs.output, Contains("xrun-results/cluster-sweep:"));
  CHECK(occurrences(jobs.output, "COMPLETED") == 8);

  const CommandResult collect = f.xrun(commands[2]);
  INFO(collect.output);
  REQUIRE(collect.status == 0);
  CHECK_THAT(collect.output, Contains("8 run(s) added"));
  CHECK(run_command("sqlite3 " + shell_quote(f.dir.file("all.db")) +
                    " \"SELECT count(*) FROM runs WHERE status = 'complete'\"")
            .output == "8\n");

  const CommandResult compare = f.xrun(commands[3]);
  INFO(compare.output);
  CHECK(compare.status == 0);
  CHECK_THAT(compare.output, Contains("by data.workers, baseline 0"));
  // One group per batch size, each with its baseline and a ratio.
  CHECK(occurrences(compare.output, "1.000  baseline") == 4);
  std::cout << compare.output;  // the README shows it
}

// --- Issue 20, hostile input: what submit, jobs and collect read ---

namespace {

// A stand-in sbatch in DIR/bin that accepts every script as job 4343 and
// keeps a copy of it (DIR/bin/submitted-N.sh, in order); `with_bin`
// prefixes a command with that PATH.
void fake_sbatch(const CliFixture& f) {
  std::filesystem::create_directories(f.dir.file("bin"));
  write_bytes(f.dir.file("bin/sbatch"),
              "#!/bin/sh\nd=\"$(dirname \"$0\")\"\nn=$(ls \"$d\" | grep -c '^submitted-')\n"
              "cp \"$2\" \"$d/submitted-$n.sh\"\necho 4343\n");
  std::filesystem::permissions(f.dir.file("bin/sbatch"), std::filesystem::perms::owner_all);
}
std::string with_bin(const CliFixture& f, const std::string& xrun_args) {
  return "cd " + shell_quote(f.dir.str()) + " && PATH=" + shell_quote(f.dir.file("bin")) +
         ":$PATH " + shell_quote(xrun_binary()) + " " + xrun_args;
}

// The frozen experiment a batch script runs: the word after " run ".
std::string frozen_of(const std::string& script) {
  const size_t at = script.find("exec ");
  const size_t run = script.find(" run ", at);
  const size_t end = script.find(" --only", run);
  REQUIRE((at != std::string::npos && run != std::string::npos && end != std::string::npos));
  return script.substr(run + 5, end - run - 5);
}

std::vector<std::string> files_starting(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().filename().string().rfind(prefix, 0) == 0) out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("xrun submit reads the experiment file once: a FIFO and <(...) freeze the bytes planned",
          "[cli][submit][hostile]") {
  CliFixture f;
  fake_sbatch(f);
  const std::string text = four_runs();
  f.write_experiment("tiny.toml", text);
  // Process substitution: before, the plan read the pipe and the frozen
  // copy was the empty second reading, submitted with exit 0.
  const CommandResult sub =
      run_command("bash -c " + shell_quote(with_bin(f, "submit <(cat tiny.toml) --slurm --results out")));
  INFO(sub.output);
  REQUIRE(sub.status == 0);
  const std::string script = read_bytes(f.dir.file("bin/submitted-0.sh"));
  CHECK(read_bytes(frozen_of(script)) == text);
  // A named FIFO: before, the second reading waited for a writer for ever.
  REQUIRE(run_command("mkfifo " + shell_quote(f.dir.file("tiny.fifo"))).status == 0);
  const CommandResult fifo = run_command(
      "(cat " + shell_quote(f.dir.file("tiny.toml")) + " > " + shell_quote(f.dir.file("tiny.fifo")) +
      " &) && timeout 60 sh -c " + shell_quote(with_bin(f, "submit tiny.fifo --slurm --results out2")));
  INFO(fifo.output);
  REQUIRE(fifo.status == 0);
  CHECK(read_bytes(frozen_of(read_bytes(f.dir.file("bin/submitted-1.sh")))) == text);
}

TEST_CASE("xrun submit: frozen copies named by SHA-256, reused only with the same bytes, one script each",
          "[cli][submit][hostile]") {
  CliFixture f;
  fake_sbatch(f);
  // Two files whose 32-bit FNV-1a names collided (found by a birthday search
  // over the comment's number): each must freeze its own bytes.
  const std::string a = four_runs() + "# 132645\n", b = four_runs() + "# 213508\n";
  f.write_experiment("a.toml", a);
  f.write_experiment("b.toml", b);
  const CommandResult first = run_command(with_bin(f, "submit a.toml --slurm --results out"));
  INFO(first.output);
  REQUIRE(first.status == 0);
  const CommandResult second = run_command(with_bin(f, "submit b.toml --slurm --results out"));
  INFO(second.output);
  REQUIRE(second.status == 0);
  const std::string frozen_a = frozen_of(read_bytes(f.dir.file("bin/submitted-0.sh")));
  const std::string frozen_b = frozen_of(read_bytes(f.dir.file("bin/submitted-1.sh")));
  CHECK(read_bytes(frozen_a) == a);
  CHECK(read_bytes(frozen_b) == b);
  // The name is the content's SHA-256, as sha256sum computes it.
  const CommandResult sum = run_command("sha256sum " + shell_quote(f.dir.file("a.toml")));
  REQUIRE(sum.status == 0);
  CHECK(std::filesystem::path(frozen_a).filename() == "experiment-" + sum.output.substr(0, 64) + ".toml");

  // A file of that name holding other bytes (edited by hand) is left as it
  // is and not used: the copy goes beside it.
  write_bytes(frozen_a, "name = \"edited\"\n");
  const CommandResult third = run_command(with_bin(f, "submit a.toml --slurm --results out"));
  INFO(third.output);
  REQUIRE(third.status == 0);
  const std::string frozen_a2 = frozen_of(read_bytes(f.dir.file("bin/submitted-2.sh")));
  CHECK(frozen_a2 != frozen_a);
  CHECK(read_bytes(frozen_a2) == a);
  CHECK(read_bytes(frozen_a) == "name = \"edited\"\n");
  // The same bytes again reuse their copy.
  REQUIRE(run_command(with_bin(f, "submit b.toml --slurm --results out")).status == 0);
  CHECK(frozen_of(read_bytes(f.dir.file("bin/submitted-3.sh"))) == frozen_b);

  // Submissions within one second: each has a script of its own (before,
  // the second overwrote the first's job-STAMP.sh).
  const CommandResult burst = run_command(with_bin(f, "submit a.toml --slurm --results burst") + " && " +
                                          with_bin(f, "submit b.toml --slurm --results burst") + " && " +
                                          with_bin(f, "submit a.toml --slurm --results burst"));
  INFO(burst.output);
  REQUIRE(burst.status == 0);
  const auto scripts = files_starting(f.dir.file("burst"), "job-");
  CHECK(scripts.size() == 3);
  // jobs.tsv names three scripts, each freezing what its submission read.
  std::set<std::string> named;
  std::istringstream tsv(read_bytes(f.dir.file("burst/jobs.tsv")));
  const std::string expected[] = {a, b, a};
  size_t line_no = 0;
  for (std::string line; std::getline(tsv, line) && line_no < 3; ++line_no) {
    const size_t tab = line.find('\t');
    const std::string script = line.substr(tab + 1, line.find('\t', tab + 1) - tab - 1);
    named.insert(script);
    CHECK(read_bytes(frozen_of(read_bytes(script))) == expected[line_no]);
  }
  CHECK(line_no == 3);
  CHECK(named.size() == 3);
}

TEST_CASE("xrun jobs: an empty sacct State, a huge log and a FIFO for jobs.tsv",
          "[cli][submit][hostile]") {
  CliFixture f;
  f.write_experiment("tiny.toml", four_runs());
  std::filesystem::create_directories(f.dir.file("bin"));
  std::filesystem::create_directories(f.dir.file("out/logs"));
  write_bytes(f.dir.file("bin/squeue"), "#!/bin/sh\nexit 0\n");
  // A task being requeued can show with no State at all.
  write_bytes(f.dir.file("bin/sacct"), "#!/bin/sh\nprintf '4242_0||0:0\\n4242_1|FAILED|1:0\\n'\n");
  std::filesystem::permissions(f.dir.file("bin/squeue"), std::filesystem::perms::owner_all);
  std::filesystem::permissions(f.dir.file("bin/sacct"), std::filesystem::perms::owner_all);
  write_bytes(f.dir.file("out/jobs.tsv"), "4242\t/x/job.sh\t" + f.dir.file("tiny.toml") + "\t[]\t0,1\n");
  // Task 1 printed a gigabyte (sparse here: no disk) before its last words.
  const std::string log = f.dir.file("out/logs/4242_1.out");
  write_bytes(log, "training...\n");
  std::filesystem::resize_file(log, 1ull << 30);
  {
    std::ofstream(log, std::ios::app) << "\nxrun: run #1 failed: out of memory\n";
  }
  // Under a 512 MiB limit on the data segment (heap and private writable
  // mappings: a log read whole cannot fit; not the address space, which a
  // CUDA build's libraries alone exceed when they are mapped). An ASan
  // build reserves terabytes of shadow memory, counted by either limit: there
  // the output is checked without the limit (the release build checks it).
  bool sanitized = false;
#if defined(__SANITIZE_ADDRESS__)
  sanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  sanitized = true;
#endif
#endif
  if (sanitized) WARN("ASan build: the log is read without the 512 MiB limit");
  const CommandResult r = run_command((sanitized ? "" : "ulimit -d 524288 && ") +
                                      with_bin(f, "jobs --results out"));
  INFO(r.output);
  CHECK(r.status == 1);  // task 1 failed; before, the empty State was a segfault (139)
  CHECK_THAT(r.output, Contains("task 0  run 0  UNKNOWN (sacct gave no state, exit 0:0)"));
  CHECK_THAT(r.output, Contains("task 1  run 1  FAILED (exit 1:0)") &&
                           Contains("    | xrun: run #1 failed: out of memory\n"));

  // A FIFO where jobs.tsv belongs: refused by name, never waited on.
  std::filesystem::create_directories(f.dir.file("fifo"));
  std::filesystem::create_directories(f.dir.file("xrun-results/x"));
  for (const char* tsv : {"fifo/jobs.tsv", "xrun-results/x/jobs.tsv"})
    REQUIRE(run_command("mkfifo " + shell_quote(f.dir.file(tsv))).status == 0);
  const CommandResult fifo = run_command("cd " + shell_quote(f.dir.str()) + " && timeout 60 " +
                                         shell_quote(xrun_binary()) + " jobs --results fifo");
  INFO(fifo.output);
  CHECK(fifo.status == 2);
  CHECK_THAT(fifo.output, Contains("fifo/jobs.tsv is a FIFO, not a regular file"));
  const CommandResult all = run_command("cd " + shell_quote(f.dir.str()) + " && timeout 60 " +
                                        shell_quote(xrun_binary()) + " jobs");
  INFO(all.output);
  CHECK(all.status == 2);
  CHECK_THAT(all.output, Contains("xrun-results/x/jobs.tsv is a FIFO, not a regular file"));
  // collect reads jobs.tsv too.
  const CommandResult collect = run_command("cd " + shell_quote(f.dir.str()) + " && timeout 60 " +
                                            shell_quote(xrun_binary()) + " collect fifo --into all.db");
  INFO(collect.output);
  CHECK(collect.status == 1);
  CHECK_THAT(collect.output, Contains("fifo/jobs.tsv is a FIFO, not a regular file"));
}

TEST_CASE("xrun collect: a completed retry wins over the running row its dead first try left",
          "[cli][submit][hostile]") {
  CliFixture f;
  f.write_experiment("tiny.toml", four_runs());
  std::filesystem::create_directories(f.dir.file("out"));
  const std::string task = f.dir.file("out/task-1.db");
  // Run 1's first try, on node A, was SIGKILLed mid-run: its row stays
  // `running` there (made here from a finished run, as node A would leave it).
  REQUIRE(f.xrun("run tiny.toml --only 1 --db out/task-1.db").status == 0);
  REQUIRE(run_command("sqlite3 " + shell_quote(task) +
                      " \"UPDATE runs SET status = 'running', host = 'node-a', finished_at = NULL\"")
              .status == 0);
  // Slurm requeues the task on node B (here), and it completes.
  const CommandResult retry = f.xrun("run tiny.toml --only 1 --db out/task-1.db");
  INFO(retry.output);
  REQUIRE(retry.status == 0);
  const std::string before = read_bytes(task);
  const CommandResult c = f.xrun("collect out --into all.db");
  INFO(c.output);
  CHECK(c.status == 0);
  CHECK_THAT(c.output, Contains("run 1: a try left run ") && Contains("a later try completed it"));
  CHECK_THAT(c.output, Contains("collected 1 task store(s)") && Contains("2 run(s) added"));
  CHECK_THAT(c.output, !Contains("still running"));
  const CommandResult rows = run_command(
      "sqlite3 " + shell_quote(f.dir.file("all.db")) +
      " \"SELECT group_concat(status, ' ') FROM (SELECT status FROM runs ORDER BY status)\"");
  CHECK(rows.output == "complete interrupted\n");
  CHECK(read_bytes(task) == before);  // the task store is only read
  // Collecting again adds nothing.
  CHECK_THAT(f.xrun("collect out --into all.db").output, Contains("0 run(s) added, 2 already present"));
}

TEST_CASE("xrun collect: a corrupt task store is named and skipped, the others collected, exit 1",
          "[cli][submit][hostile]") {
  CliFixture f;
  f.write_experiment("tiny.toml", four_runs());
  std::filesystem::create_directories(f.dir.file("out"));
  for (int run : {0, 2, 3})
    REQUIRE(f.xrun("run tiny.toml --only " + std::to_string(run) + " --db out/task-" +
                   std::to_string(run) + ".db")
                .status == 0);
  // Garbage in the steps table's b-tree page of task 2: the file opens and
  // its runs list, only an integrity check finds it.
  const std::string task2 = f.dir.file("out/task-2.db");
  const CommandResult page = run_command("sqlite3 " + shell_quote(task2) +
                                         " \"SELECT rootpage FROM sqlite_master WHERE name = 'steps'\"");
  REQUIRE(page.status == 0);
  {
    std::fstream db(task2, std::ios::in | std::ios::out | std::ios::binary);
    db.seekp((std::stol(page.output) - 1) * 4096 + 8);
    db << std::string(64, '\xff');
  }
  // And a file of that name that is no xrun store at all.
  write_bytes(f.dir.file("out/task-3.db"), "not a database, not even SQLite\n");
  const CommandResult c = f.xrun("collect out --into all.db");
  INFO(c.output);
  CHECK(c.status == 1);
  CHECK_THAT(c.output, Contains("run 2: out/task-2.db is corrupt (SQLite's quick_check: "));
  CHECK_THAT(c.output, Contains("run 3: ") && Contains("task-3.db cannot be read ("));
  CHECK_THAT(c.output, Contains("collected 1 task store(s)") && Contains("1 run(s) added") &&
                           Contains("2 store(s) or file(s) not read (above)"));
  CHECK(run_command("sqlite3 " + shell_quote(f.dir.file("all.db")) +
                    " \"SELECT count(*) FROM runs WHERE status = 'complete'\"")
            .output == "1\n");
}

TEST_CASE("Slurm: spaces, quotes and $ in the working directory and --results are quoted, not run",
          "[cli][submit][slurm][hostile]") {
  REQUIRE(SlurmCluster::missing().empty());
  SlurmCluster cluster;
  CliFixture f;
  // sbatch reads the #SBATCH values (--chdir, --output) with its own
  // quoting, bash the exec line: both must see each path as one word.
  const std::string dir = f.dir.file("it's a $HOME dir");
  std::filesystem::create_directories(dir);
  write_bytes(dir + "/tiny.toml", four_runs());
  const std::string results = "out put's $(touch PWNED) `x`";
  const CommandResult sub = run_command("cd " + shell_quote(dir) + " && " + shell_quote(xrun_binary()) +
                                        " submit tiny.toml --slurm --only 0 --cpus-per-run 1 --results " +
                                        shell_quote(results));
  INFO(sub.output);
  REQUIRE(sub.status == 0);
  INFO("cluster logs: " << cluster.log_dir());
  REQUIRE(cluster.wait_idle(300));
  const CommandResult c = run_command("cd " + shell_quote(dir) + " && " + shell_quote(xrun_binary()) +
                                      " collect " + shell_quote(results) + " --into all.db");
  INFO(c.output);
  CHECK(c.status == 0);
  CHECK_THAT(c.output, Contains("collected 1 task store(s)") && Contains("1 run(s) added"));
  CHECK(files_starting(dir + "/" + results + "/logs", "").size() == 1);  // --output as written
  CHECK_FALSE(std::filesystem::exists(dir + "/PWNED"));
  CHECK_FALSE(std::filesystem::exists(f.dir.file("PWNED")));
}
