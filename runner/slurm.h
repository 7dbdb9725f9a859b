// runner/slurm.h: a planned sweep as a Slurm job array (`xrun submit`):
// the batch script, one array task per planned run, each task training its
// run with `xrun run FROZEN --only I --db DIR/task-I.db` (a store per task,
// so no two tasks ever write one SQLite file over a shared file system),
// and which planned runs are already complete in a results folder. Plain
// functions of their inputs, tested without Slurm (tests/cli/submit_test.cpp).
#pragma once

#include <string>
#include <vector>

#include "runner/experiment.h"

namespace xrun::cli {

struct SlurmJob {
  std::string name;                 // the experiment's name: the job's name
  std::string xrun;                 // absolute path of the xrun binary the tasks run
  std::string experiment;           // absolute path of the frozen experiment file
  std::string results;              // absolute results folder: task stores, logs
  std::string workdir;              // absolute: where the tasks start (relative data paths)
  std::vector<std::string> sets;    // --set KEY=VALUE, as given, in order
  std::vector<int> runs;            // the planned run indices to train, ascending
  std::string partition;            // "" = the cluster's default
  int gpus_per_run = 0;
  int cpus_per_run = 0;             // 0 = the cluster's default
  std::string mem;                  // "" = the cluster's default; else Slurm's form (16G)
  std::string time;                 // "" = the partition's limit; else HH:MM:SS
  int max_parallel = 0;             // 0 = no limit on tasks running at once
};

// "" when every text of `job` can go into the batch script, else what is
// wrong, naming the option it came from ("--partition holds a control
// character (\u000A, a line break) ..."): a line break in a value would end
// its #SBATCH line or comment and start a command of its own, so no value
// that reaches the script may hold a control character. Everything else is
// quoted there.
std::string slurm_script_problem(const SlurmJob& job);

// The batch script (bash, #SBATCH lines first). Throws std::invalid_argument
// when slurm_script_problem(job) is not "".
std::string slurm_batch_script(const SlurmJob& job);

// `s` as one word for bash: in single quotes unless it is plain.
std::string shell_quote(const std::string& s);

// The store of task `run` in `results`: results/task-<run>.db.
std::string task_store(const std::string& results, int run);

// The runs of `plan` (all, or those in `only`) not complete in their task
// store under `results`; a run counts as complete there by its experiment
// hash (the submitting host may resolve train.device "auto" differently
// from the node that trains it).
std::vector<int> runs_left(const Plan& plan, const std::vector<int>& only,
                           const std::string& results);

}  // namespace xrun::cli
