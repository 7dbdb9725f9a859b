// runner/slurm.h: a planned sweep as a Slurm job array (`xrun submit`):
// the batch script, one array task per planned run, each task training its
// run with `xrun run FROZEN --only I --db DIR/task-I.db` (a store per task,
// so no two tasks ever write one SQLite file over a shared file system; a
// ranked run's N Slurm tasks through srun, rank 0 storing),
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
  // Runs trained by ranks (train.ranks > 1, or a distributed.backend named):
  // each array task then asks for `ranks` Slurm tasks (--ntasks; with GPUs
  // one per task) and starts them with srun, each joining as rank
  // SLURM_PROCID (XRUN_RANKS_FROM=slurm) through a rendezvous folder
  // results/rendezvous-JOB_TASK. Every run of one job has the same ranks.
  bool ranked = false;
  int ranks = 1;
};

// The planned runs `runs` of `plan` cut into the jobs they need: job arrays
// cannot vary --ntasks, so the runs of one rank count go together (plain
// runs first, then ranked ones by ascending ranks). Each group in ascending
// run order.
struct RunGroup {
  bool ranked = false;
  int ranks = 1;
  std::vector<int> runs;
};
std::vector<RunGroup> group_by_ranks(const Plan& plan, const std::vector<int>& runs);

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
