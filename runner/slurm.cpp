// runner/slurm.cpp: see slurm.h.
#include "runner/slurm.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <stdexcept>

#include "runner/rank_launch.h"
#include "store/store.h"

namespace xrun::cli {

std::string shell_quote(const std::string& s) {
  const bool plain = !s.empty() && s.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                       "abcdefghijklmnopqrstuvwxyz"
                                                       "0123456789_-./:=,+@%") == std::string::npos;
  if (plain) return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string task_store(const std::string& results, int run) {
  return (std::filesystem::path(results) / ("task-" + std::to_string(run) + ".db")).string();
}

namespace {

// `c` as \uXXXX.
std::string escaped_char(unsigned char c) {
  char code[8];
  std::snprintf(code, sizeof code, "\\u%04X", c);
  return code;
}

// "" or what is wrong with one value: its first control character (the
// value shown with every control character as \uXXXX).
std::string control_character(const std::string& what, const std::string& value) {
  const auto bad = [](unsigned char c) { return c < 0x20 || c == 0x7f; };
  const auto first = std::find_if(value.begin(), value.end(), bad);
  if (first == value.end()) return "";
  std::string shown;
  for (unsigned char c : value) shown += bad(c) ? escaped_char(c) : std::string(1, char(c));
  const unsigned char c = *first;
  return what + " \"" + shown + "\" holds a control character (" + escaped_char(c) +
         (c == '\n' || c == '\r' ? ", a line break" : "") +
         "); a value written into the batch script must be one line of printable text";
}

}  // namespace

std::string slurm_script_problem(const SlurmJob& job) {
  const std::pair<std::string, const std::string*> values[] = {
      {"the experiment name", &job.name},
      {"--partition", &job.partition},
      {"--mem", &job.mem},
      {"--time", &job.time},
      {"the working directory (the job's --chdir)", &job.workdir},
      {"--results", &job.results},
      {"the frozen experiment's path", &job.experiment},
      {"the path of the xrun binary", &job.xrun},
  };
  for (const auto& [what, value] : values)
    if (std::string p = control_character(what, *value); !p.empty()) return p;
  for (const std::string& set : job.sets)
    if (std::string p = control_character("--set", set); !p.empty()) return p;
  return "";
}

std::string slurm_batch_script(const SlurmJob& job) {
  if (const std::string problem = slurm_script_problem(job); !problem.empty())
    throw std::invalid_argument(problem);
  const int tasks = static_cast<int>(job.runs.size());
  std::string s = "#!/bin/bash\n";
  s += "# Written by `xrun submit`: " + std::to_string(tasks) + " run(s) of " + job.name +
       ", one array task each.\n";
  s += "# Each task trains one planned run into a store of its own (task-RUN.db);\n";
  s += "# `xrun collect " + shell_quote(job.results) + " --into OUT` merges them.\n";
  s += "#SBATCH --job-name=" + shell_quote("xrun-" + job.name) + "\n";
  s += "#SBATCH --array=0-" + std::to_string(tasks - 1) +
       (job.max_parallel > 0 ? "%" + std::to_string(job.max_parallel) : "") + "\n";
  s += "#SBATCH --output=" + shell_quote(job.results + "/logs/%A_%a.out") + "\n";
  s += "#SBATCH --chdir=" + shell_quote(job.workdir) + "\n";
  s += "#SBATCH --ntasks=" + std::to_string(job.ranked ? job.ranks : 1) + "\n";
  if (!job.partition.empty()) s += "#SBATCH --partition=" + shell_quote(job.partition) + "\n";
  // A ranked run: each rank a task with the cores and GPU a run would have.
  if (job.cpus_per_run > 0) s += "#SBATCH --cpus-per-task=" + std::to_string(job.cpus_per_run) + "\n";
  if (job.gpus_per_run > 0)
    s += "#SBATCH --gpus-per-task=" + std::to_string(job.ranked ? 1 : job.gpus_per_run) + "\n";
  if (!job.mem.empty()) s += "#SBATCH --mem=" + shell_quote(job.mem) + "\n";
  if (!job.time.empty()) s += "#SBATCH --time=" + shell_quote(job.time) + "\n";
  s += "set -euo pipefail\n";
  s += "runs=(";
  for (int i = 0; i < tasks; ++i) {
    if (i) s += ' ';
    s += std::to_string(job.runs[i]);
  }
  s += ")\n";
  s += "run=${runs[$SLURM_ARRAY_TASK_ID]}\n";
  std::string command = shell_quote(job.xrun) + " run " + shell_quote(job.experiment) +
                        " --only \"$run\" --db " + shell_quote(job.results) + "/task-\"$run\".db";
  for (const std::string& set : job.sets) command += " --set " + shell_quote(set);
  if (!job.ranked) return s + "exec " + command + "\n";
  // The ranks: one srun task each, told their rank by Slurm (SLURM_PROCID),
  // meeting in a folder of this array task's own on the shared results
  // folder (mode 0700, with the run's secret); srun ends the others when one fails and labels each line of the
  // log with its rank ("1: ...").
  s += "# " + std::to_string(job.ranks) +
       " ranks: srun starts one task per rank; rank 0 stores the run.\n";
  s += "export XRUN_RANKS_FROM=slurm\n";
  s += "export XRUN_RENDEZVOUS=" + shell_quote(job.results) +
       "/rendezvous-\"$SLURM_ARRAY_JOB_ID\"_\"$SLURM_ARRAY_TASK_ID\"\n";
  s += "rm -rf \"$XRUN_RENDEZVOUS\"\n";
  s += "mkdir -p -m 700 \"$XRUN_RENDEZVOUS\"\n";
  // The run's secret, which every rank proves it holds before any data is
  // exchanged (only the user can read the folder; the file is 0600).
  s += "(umask 077 && od -An -N32 -tx1 /dev/urandom | tr -d ' \\n' > \"$XRUN_RENDEZVOUS/secret\")\n";
  s += "trap 'rm -rf \"$XRUN_RENDEZVOUS\"' EXIT\n";
  s += "srun --kill-on-bad-exit=1 --label " + command + "\n";
  return s;
}

std::vector<RunGroup> group_by_ranks(const Plan& plan, const std::vector<int>& runs) {
  std::map<std::pair<bool, int>, std::vector<int>> by;
  for (const int index : runs)
    for (const RunSpec& spec : plan.runs)
      if (spec.index == index) {
        const bool ranked = trained_by_ranks(spec);
        by[{ranked, ranked ? planned_ranks(spec) : 1}].push_back(index);
      }
  std::vector<RunGroup> out;
  for (auto& [key, list] : by) {
    std::sort(list.begin(), list.end());
    out.push_back({key.first, key.second, std::move(list)});
  }
  return out;
}

std::vector<int> runs_left(const Plan& plan, const std::vector<int>& only,
                           const std::string& results) {
  std::set<int> wanted(only.begin(), only.end());
  std::vector<int> left;
  for (const RunSpec& run : plan.runs) {
    if (!wanted.empty() && !wanted.count(run.index)) continue;
    const std::string db = task_store(results, run.index);
    std::error_code ec;
    if (std::filesystem::is_regular_file(db, ec)) {
      store::Store store(db, store::Store::Access::read_only);
      if (store.find_complete_experiment(run.experiment_hash)) continue;
    }
    left.push_back(run.index);
  }
  return left;
}

}  // namespace xrun::cli
