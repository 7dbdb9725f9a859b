// runner/jobs_command.cpp: `xrun jobs [--results DIR]`: what each array task
// of the jobs `xrun submit` made there is doing, from Slurm itself: squeue
// for tasks pending or running (with the reason a task waits), then sacct
// for the finished ones, or `scontrol show job` where the cluster keeps no
// accounting; with each task's run index and swept settings (from the
// frozen experiment), and the last lines of the log of a task that failed
// (read from its end: a log may be huge). jobs.tsv, the logs and the frozen
// experiment are read only when they are regular files (a FIFO there would
// block), and a record with an empty field is shown as what it is.
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <map>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "runner/commands.h"
#include "runner/experiment.h"
#include "runner/regular_file.h"
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
      out[array_task(f[0])] = {f[1].empty() ? "UNKNOWN" : f[1], f[2] == "None" ? "" : f[2]};
    }
  text.clear();
  source = "sacct";
  if (run_program({"sacct", "-n", "-P", "-X", "-j", job, "-o", "JobID,State,ExitCode"}, text, false) == 0 &&
      !text.empty()) {
    for (const std::string& line : split(text, '\n')) {
      const auto f = split(line, '|');
      if (f.size() < 3 || array_task(f[0]) < 0) continue;
      // "CANCELLED by 0" -> CANCELLED; an empty State (seen on real
      // clusters for a task being requeued) -> UNKNOWN, saying so.
      const auto words = split(f[1], ' ');
      if (words.empty() || words.front().empty())
        out.emplace(array_task(f[0]), TaskState{"UNKNOWN", "sacct gave no state, exit " + f[2]});
      else
        out.emplace(array_task(f[0]), TaskState{words.front(), "exit " + f[2]});
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
      out.emplace(i, TaskState{fields["JobState"].empty() ? "UNKNOWN" : fields["JobState"],
                               "exit " + fields["ExitCode"]});
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

// The last `n` lines of a task's log, each indented and at most kLineBytes
// (its end). Only the log's last kTailBytes are read: a task that printed
// hundreds of megabytes costs no more than one that printed five lines.
std::string last_lines(const fs::path& file, int n) {
  constexpr size_t kTailBytes = 64 * 1024, kLineBytes = 1000;
  const RegularFile log = read_regular_file(file.string(), kTailBytes, true);
  if (log.status == RegularFile::missing) return "";
  if (log.status != RegularFile::ok)
    return "    (log " + file.string() + " not read: " + log.why + ")\n";
  std::vector<std::string> lines = split(log.text, '\n');
  if (log.cut && lines.size() > 1) lines.erase(lines.begin());  // began mid-line
  std::string out;
  for (size_t i = lines.size() > static_cast<size_t>(n) ? lines.size() - n : 0; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    out += "    | " +
           (line.size() > kLineBytes ? "..." + line.substr(line.size() - kLineBytes) : line) + "\n";
  }
  return out;
}

// Thrown for a jobs.tsv that cannot be read (a FIFO, a directory, too large).
struct JobsFileError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The jobs submitted to one results folder, task by task; returns how many
// tasks failed, or -1 when the folder holds no jobs.tsv. Throws
// JobsFileError when jobs.tsv is there but not a readable regular file.
int list_jobs(const fs::path& dir) {
  constexpr size_t kMaxJobsBytes = 64 << 20;  // some 300,000 submissions
  const std::string path = (dir / "jobs.tsv").string();
  const RegularFile tsv = read_regular_file(path, kMaxJobsBytes);
  if (tsv.status == RegularFile::missing) return -1;
  if (tsv.status != RegularFile::ok)
    throw JobsFileError(path + " is " + (tsv.status == RegularFile::not_regular ? "" : "unreadable: ") +
                        tsv.why + (tsv.status == RegularFile::not_regular ? ", not a regular file" : ""));
  if (tsv.cut)
    throw JobsFileError(path + " is larger than " + std::to_string(kMaxJobsBytes >> 20) +
                        " MiB; xrun submit writes one short line per job");
  int failed = 0;
  for (const std::string& line : split(tsv.text, '\n')) {
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
      std::error_code ec;
      if (fs::is_regular_file(f[2], ec)) plan = load_plan(f[2], o);  // never a FIFO
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
      // Slurm's job ids are numbers: any other text names no log of ours.
      const bool numeric_job = !job.empty() && job.find_first_not_of("0123456789") == std::string::npos;
      if (bad) {
        ++failed;
        if (numeric_job)
          std::cout << last_lines(dir / "logs" / (job + "_" + std::to_string(i) + ".out"), 5);
      }
    }
  }
  return failed;
}

}  // namespace

int jobs_command(const JobsArgs& args) {
  if (!args.results.empty()) {
    int failed = 0;
    try {
      failed = list_jobs(args.results);
    } catch (const JobsFileError& e) {
      std::cerr << "xrun jobs: " << e.what() << "\n";
      return kUsage;
    }
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
  bool unreadable = false;
  for (const fs::path& dir : dirs) {
    std::cout << dir.string() << ":\n";
    try {
      failed += list_jobs(dir);
    } catch (const JobsFileError& e) {
      std::cerr << "xrun jobs: " << e.what() << "\n";
      unreadable = true;
    }
  }
  return unreadable ? kUsage : failed ? kRunFailed : kOk;
}

}  // namespace xrun::cli
