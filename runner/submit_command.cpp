// runner/submit_command.cpp: `xrun submit FILE --slurm`: plans the sweep as
// `xrun run` does (same validation, exit 2 on a bad file, nothing
// submitted), leaves out runs already complete in the results folder,
// freezes the experiment file there (a copy named by its content, so the
// planned runs cannot change if FILE is edited while the job waits), writes
// the job array's batch script beside it (runner/slurm.h) and submits it
// with `sbatch --parsable`. --dry-run prints the script and writes and
// submits nothing.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runner/atomic_file.h"
#include "runner/commands.h"
#include "runner/experiment.h"
#include "runner/slurm.h"
#include "runner/subprocess.h"

namespace xrun::cli {

namespace {

namespace fs = std::filesystem;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file(const std::string& path, const std::string& text) {
  AtomicFile f(path);
  f.stream() << text;
  f.commit();
}

std::string utc_stamp() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
  return buf;
}

}  // namespace

int submit_command(const SubmitArgs& args) {
  if (!args.slurm) {
    std::cerr << "xrun submit: say where to submit: --slurm (the only scheduler xrun submits to)\n";
    return kUsage;
  }
  Plan plan;
  try {
    PlanOptions options;
    options.sets = args.sets;
    // The submitting host (a login node) may have no GPU: runs on cuda
    // devices are checked where they train.
    plan = load_plan(args.file, options);
  } catch (const ExperimentError& e) {
    std::cerr << "xrun: " << e.what() << "\n";
    return kUsage;
  }
  std::vector<const RunSpec*> selected;  // runs_left reads --only again, with the stores
  if (const std::string problem = select_runs(plan, args.only, selected); !problem.empty()) {
    std::cerr << "xrun: " << problem << "\n";
    return kUsage;
  }
  std::error_code ec;
  const fs::path results =
      fs::absolute(args.results.empty() ? fs::path(kDefaultResultsRoot) / plan.name
                                         : fs::path(args.results),
                     ec);
  if (fs::exists(results, ec) && !fs::is_directory(results, ec)) {
    std::cerr << "xrun submit: --results " << results.string() << " is a file; give a folder\n";
    return kUsage;
  }

  SlurmJob job;
  try {
    job.runs = runs_left(plan, args.only, results.string());
  } catch (const std::exception& e) {
    std::cerr << "xrun submit: " << e.what() << "\n";
    return kRunFailed;
  }
  if (job.runs.empty()) {
    std::cout << plan.name << ": every selected run is complete in " << results.string()
              << "; nothing to submit\n";
    return kOk;
  }
  const std::string text = read_file(args.file);
  job.name = plan.name;
  job.xrun = fs::read_symlink("/proc/self/exe", ec).string();
  job.experiment = (results / ("experiment-" + short_hash(fnv1a_hex(text)) + ".toml")).string();
  job.results = results.string();
  job.workdir = fs::current_path(ec).string();
  job.sets = args.sets;
  job.partition = args.partition;
  job.gpus_per_run = args.gpus_per_run;
  job.cpus_per_run = args.cpus_per_run;
  job.mem = args.mem;
  job.time = args.time;
  job.max_parallel = args.max_parallel;
  const std::string script = slurm_batch_script(job);
  if (args.dry_run) {
    std::cout << script;
    return kOk;
  }

  const std::string script_path = (results / ("job-" + utc_stamp() + ".sh")).string();
  try {
    fs::create_directories(results / "logs");
    if (!fs::exists(job.experiment)) write_file(job.experiment, text);
    write_file(script_path, script);
  } catch (const std::exception& e) {
    std::cerr << "xrun submit: " << e.what() << "\n";
    return kRunFailed;
  }
  std::string out;
  const int rc = run_program({"sbatch", "--parsable", script_path}, out, true);
  if (rc != 0) {
    std::cerr << "xrun submit: sbatch " << script_path << " failed (exit " << rc << "): " << out
              << (rc == 127 ? "(is Slurm's sbatch on the PATH?)\n" : "");
    return kRunFailed;
  }
  const std::string job_id = out.substr(0, out.find_first_of(";\n"));
  std::string runs;
  for (int r : job.runs) {
    if (!runs.empty()) runs += ',';
    runs += std::to_string(r);
  }
  try {
    // One line per submission: job, script, frozen experiment, --set values
    // (JSON), runs in array order (last: what `collect` reads).
    std::ofstream(results / "jobs.tsv", std::ios::app)
        << job_id << '\t' << script_path << '\t' << job.experiment << '\t'
        << nlohmann::json(job.sets).dump() << '\t' << runs << '\n';
  } catch (const std::exception&) {
  }
  std::cout << "submitted job " << job_id << ": " << job.runs.size() << " run(s) of " << plan.name
            << " (" << runs << ")\nresults: " << results.string() << "\n";
  return kOk;
}

}  // namespace xrun::cli
