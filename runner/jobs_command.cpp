// runner/jobs_command.cpp: `xrun jobs [--results DIR]`: what each array task
// of the jobs `xrun submit` made there is doing, from Slurm itself: squeue
// for tasks pending or running (with the reason a task waits), then sacct
// for the finished ones, or `scontrol show job` where the cluster keeps no
// accounting; with each task's run index and swept settings (from the
// frozen experiment), and the last lines of the log of a task that failed.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runner/commands.h"
#include "runner/experiment.h"
#include "runner/subprocess.h"

namespace xrun::cli {

namespace {

namespace fs = std::filesystem;

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, sep)) out.push_back(part);
  return out;
}

// The array task index of a job id ("4242_7" -> 7); -1 for anything else
// (a pending range "4242_[2-5%2]", a job step "4242_7.batch").
int array_task(const std::string& id) {
  const size_t us = id.find('_');
  if (us == std::string::npos) return -1;
  const std::string index = id.substr(us + 1);
  if (index.empty() || index.size() > 9 || index.find_first_not_of("0123456789") != std::string::npos)
    return -1;
  return std::stoi(index);
}

struct TaskState {
  std::string state;   // PENDING, RUNNING, COMPLETED, FAILED, TIMEOUT, CANCELLED...
  std::string detail;  // the reason a task waits, or the exit code
};

// Task index -> state, for array job `job`: squeue, then sacct or scontrol.
std::map<int, TaskState> task_states(const std::string& job, std::string& source) {
  std::map<int, TaskState> out;
  std::string text;
  if (run_program({"squeue", "-h", "-r", "-j", job, "-o", "%i|%T|%r"}, text, false) == 0)
    for (const std::string& line : split(text, '\n')) {
      const auto f = split(line, '|');
      if (f.size() < 3 || array_task(f[0]) < 0) continue;
      out[array_task(f[0])] = {f[1], f[2] == "None" ? "" : f[2]};
    }
  text.clear();
  source = "sacct";
  if (run_program({"sacct", "-n", "-P", "-X", "-j", job, "-o", "JobID,State,ExitCode"}, text, false) == 0 &&
      !text.empty()) {
    for (const std::string& line : split(text, '\n')) {
      const auto f = split(line, '|');
      if (f.size() < 3 || array_task(f[0]) < 0) continue;
      out.emplace(array_task(f[0]), TaskState{split(f[1], ' ').front(), "exit " + f[2]});
    }
    return out;
  }
  // No accounting: the controller still knows jobs that ended recently.
  text.clear();
  source = "scontrol";
  if (run_program({"scontrol", "show", "job", job}, text, false) != 0) return out;
  std::map<std::string, std::string> fields;  // of the record being read
  auto end_record = [&] {
    if (const int i = array_task("_" + fields["ArrayTaskId"]); i >= 0)
      out.emplace(i, TaskState{fields["JobState"], "exit " + fields["ExitCode"]});
    fields.clear();
  };
  // Records are blank-line separated; fields are KEY=VALUE words.
  for (const std::string& line : split(text, '\n')) {
    if (line.find_first_not_of(' ') == std::string::npos) {
      end_record();
      continue;
    }
    for (const std::string& word : split(line, ' ')) {
      const size_t eq = word.find('=');
      if (eq != std::string::npos) fields[word.substr(0, eq)] = word.substr(eq + 1);
    }
  }
  end_record();
  return out;
}

std::string last_lines(const fs::path& file, int n) {
  std::ifstream in(file);
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  std::string out;
  for (size_t i = lines.size() > static_cast<size_t>(n) ? lines.size() - n : 0; i < lines.size(); ++i)
    out += "    | " + lines[i] + "\n";
  return out;
}

// The jobs submitted to one results folder, task by task; returns how many
// tasks failed, or -1 when the folder holds no jobs.tsv.
int list_jobs(const fs::path& dir) {
  std::ifstream in(dir / "jobs.tsv");
  if (!in) return -1;
  std::string line;
  int failed = 0;
  while (std::getline(in, line)) {
    const auto f = split(line, '\t');
    if (f.size() < 5) continue;
    const std::string& job = f[0];
    std::vector<int> runs;
    for (const std::string& r : split(f[4], ','))  // as `xrun submit` wrote them
      if (!r.empty() && r.size() <= 9 && r.find_first_not_of("0123456789") == std::string::npos)
        runs.push_back(std::stoi(r));
    Plan plan;
    try {
      PlanOptions o;
      o.sets = nlohmann::json::parse(f[3]).get<std::vector<std::string>>();
      plan = load_plan(f[2], o);
    } catch (const std::exception&) {  // settings are a courtesy: the states still show
    }
    std::string source;
    const auto states = task_states(job, source);
    std::cout << "job " << job << " (" << runs.size() << " task(s), states from squeue and "
              << source << ")\n";
    for (size_t i = 0; i < runs.size(); ++i) {
      const int run = runs[i];
      auto it = states.find(static_cast<int>(i));
      const TaskState st = it != states.end() ? it->second : TaskState{"UNKNOWN", "not in squeue or " + source};
      std::string settings;
      if (run >= 0 && run < static_cast<int>(plan.runs.size())) settings = swept_text(plan.runs[run]);
      std::cout << "  task " << i << "  run " << run << "  " << st.state
                << (st.detail.empty() ? "" : " (" + st.detail + ")")
                << (settings.empty() ? "" : "  " + settings) << "\n";
      const bool bad = st.state == "FAILED" || st.state == "TIMEOUT" || st.state == "CANCELLED" ||
                       st.state == "OUT_OF_MEMORY" || st.state == "NODE_FAIL";
      if (bad) {
        ++failed;
        std::cout << last_lines(dir / "logs" / (job + "_" + std::to_string(i) + ".out"), 5);
      }
    }
  }
  return failed;
}

}  // namespace

int jobs_command(const JobsArgs& args) {
  if (!args.results.empty()) {
    const int failed = list_jobs(args.results);
    if (failed < 0) {
      std::cerr << "xrun jobs: no jobs submitted to " << args.results
                << " (no jobs.tsv: the --results of xrun submit)\n";
      return kUsage;
    }
    return failed ? kRunFailed : kOk;
  }
  // Without --results: every folder `xrun submit` made here by default.
  std::vector<fs::path> dirs;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(kDefaultResultsRoot, ec))
    if (fs::exists(entry.path() / "jobs.tsv", ec)) dirs.push_back(entry.path());
  std::sort(dirs.begin(), dirs.end());
  if (dirs.empty()) {
    std::cerr << "xrun jobs: no jobs submitted from this folder (no " << kDefaultResultsRoot
              << "/*/jobs.tsv); give the --results DIR of xrun submit\n";
    return kUsage;
  }
  int failed = 0;
  for (const fs::path& dir : dirs) {
    std::cout << dir.string() << ":\n";
    failed += list_jobs(dir);
  }
  return failed ? kRunFailed : kOk;
}

}  // namespace xrun::cli
