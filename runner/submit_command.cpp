// runner/submit_command.cpp: `xrun submit FILE --slurm`: plans the sweep as
// `xrun run` does (same validation, exit 2 on a bad file, nothing
// submitted), leaves out runs already complete in the results folder,
// freezes the experiment file there (the bytes read once, so a FIFO or
// <(...) plans and freezes the same text; a copy named by its SHA-256 and
// reused only when its bytes are the same, so the planned runs cannot
// change if FILE is edited while the job waits), writes the job array's
// batch script beside it under a name no other submission holds
// (runner/slurm.h: values with control characters refused, exit 2) and
// submits it with `sbatch --parsable`; runs trained by several ranks go in
// a job array of their own per rank count (--ntasks cannot vary in one). --dry-run prints the script and
// writes and submits nothing.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "core/sha256.h"
#include "runner/atomic_file.h"
#include "runner/commands.h"
#include "runner/experiment.h"
#include "runner/slurm.h"
#include "runner/subprocess.h"

namespace xrun::cli {

namespace {

namespace fs = std::filesystem;

// stem + ext, or stem-N + ext for N > 1.
std::string numbered(const std::string& stem, int n, const char* ext) {
  std::string name = stem;
  if (n > 1) {
    name += '-';
    name += std::to_string(n);
  }
  return name + ext;
}

// True when `path` is a regular file (not followed through a link) holding
// exactly `bytes`; never blocks on a FIFO.
bool holds_exactly(const fs::path& path, const std::string& bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  bool same = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
              static_cast<uint64_t>(st.st_size) == bytes.size();
  std::string text;
  char buf[65536];
  ssize_t n = 0;
  while (same && (n = ::read(fd, buf, sizeof buf)) > 0 && text.size() <= bytes.size())
    text.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return same && n == 0 && text == bytes;
}

// Where the frozen copy of `text` goes in `results`: experiment-SHA256.toml,
// or, when a file of that name holds other bytes (edited by hand, or not a
// regular file), the first experiment-SHA256-N.toml that is absent or holds
// exactly `text`. `exists`: it is there already, with those bytes.
fs::path frozen_copy(const fs::path& results, const std::string& text, bool& exists) {
  const std::string stem = "experiment-" + sha256_hex(text);
  for (int n = 1;; ++n) {
    const fs::path path = results / numbered(stem, n, ".toml");
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(path, ec))) {
      exists = false;
      return path;
    }
    if (holds_exactly(path, text)) {
      exists = true;
      return path;
    }
  }
}

// Creates results/job-STAMP.sh holding `script`, or job-STAMP-N.sh when that
// name is taken (two submissions in one second): O_EXCL, so no two
// submissions ever share a script. Returns its path; throws on an error.
std::string write_new_script(const fs::path& results, const std::string& stamp,
                             const std::string& script) {
  for (int n = 1;; ++n) {
    const fs::path path = results / numbered("job-" + stamp, n, ".sh");
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && errno == EEXIST && n < 10000) continue;
    if (fd < 0) throw std::runtime_error("cannot write " + path.string() + ": " + std::strerror(errno));
    size_t done = 0;
    while (done < script.size()) {
      const ssize_t w = ::write(fd, script.data() + done, script.size() - done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        const int err = errno;
        ::close(fd);
        ::unlink(path.c_str());
        throw std::runtime_error("cannot write " + path.string() + ": " + std::strerror(err));
      }
      done += static_cast<size_t>(w);
    }
    if (::close(fd) != 0) {
      const int err = errno;
      ::unlink(path.c_str());
      throw std::runtime_error("cannot write " + path.string() + ": " + std::strerror(err));
    }
    return path.string();
  }
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
  // The file is read once: a FIFO or <(...) yields its bytes one time, and
  // the plan and the frozen copy come from the same bytes.
  std::string text;
  Plan plan;
  try {
    PlanOptions options;
    options.sets = args.sets;
    // The submitting host (a login node) may have no GPU: runs on cuda
    // devices are checked where they train.
    text = read_experiment_text(args.file);
    plan = load_plan_from_string(text, args.file, options);
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
  const fs::file_status jobs_tsv = fs::symlink_status(results / "jobs.tsv", ec);
  if (fs::exists(jobs_tsv) && !fs::is_regular_file(jobs_tsv)) {
    std::cerr << "xrun submit: " << (results / "jobs.tsv").string()
              << " is not a regular file; xrun submit appends a line per job there\n";
    return kUsage;
  }

  SlurmJob job;
  bool frozen_exists = false;
  job.name = plan.name;
  job.xrun = fs::read_symlink("/proc/self/exe", ec).string();
  job.experiment = frozen_copy(results, text, frozen_exists).string();
  job.results = results.string();
  job.workdir = fs::current_path(ec).string();
  job.sets = args.sets;
  job.partition = args.partition;
  job.gpus_per_run = args.gpus_per_run;
  job.cpus_per_run = args.cpus_per_run;
  job.mem = args.mem;
  job.time = args.time;
  job.max_parallel = args.max_parallel;
  if (const std::string problem = slurm_script_problem(job); !problem.empty()) {
    std::cerr << "xrun submit: " << problem << "; nothing submitted\n";
    return kUsage;
  }
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
  // One job per rank count (an array cannot vary --ntasks).
  const std::vector<RunGroup> groups = group_by_ranks(plan, job.runs);
  std::vector<SlurmJob> jobs;
  for (const RunGroup& g : groups) {
    SlurmJob j = job;
    j.runs = g.runs;
    j.ranked = g.ranked;
    j.ranks = g.ranks;
    jobs.push_back(std::move(j));
  }
  if (args.dry_run) {
    for (size_t k = 0; k < jobs.size(); ++k) {
      if (jobs.size() > 1)
        std::cout << (k ? "\n" : "") << "# ---- job " << k + 1 << " of " << jobs.size() << "\n";
      std::cout << slurm_batch_script(jobs[k]);
    }
    return kOk;
  }

  try {
    fs::create_directories(results / "logs");
    if (!frozen_exists) write_file(job.experiment, text);
  } catch (const std::exception& e) {
    std::cerr << "xrun submit: " << e.what() << "\n";
    return kRunFailed;
  }
  for (size_t k = 0; k < jobs.size(); ++k) {
    const SlurmJob& j = jobs[k];
    std::string script_path;
    try {
      script_path = write_new_script(results, utc_stamp(), slurm_batch_script(j));
    } catch (const std::exception& e) {
      std::cerr << "xrun submit: " << e.what() << "\n";
      return kRunFailed;
    }
    std::string out;
    const int rc = run_program({"sbatch", "--parsable", script_path}, out, true);
    if (rc != 0) {
      std::cerr << "xrun submit: sbatch " << script_path << " failed (exit " << rc << "): " << out
                << (rc == 127 ? "(is Slurm's sbatch on the PATH?)\n" : "")
                << (k > 0 ? "(the jobs above were submitted; submitting again sends only what "
                            "is left)\n"
                          : "");
      return kRunFailed;
    }
    const std::string job_id = out.substr(0, out.find_first_of(";\n"));
    std::string runs;
    for (int r : j.runs) {
      if (!runs.empty()) runs += ',';
      runs += std::to_string(r);
    }
    try {
      // One line per job: job, script, frozen experiment, --set values
      // (JSON), runs in array order (last: what `collect` reads).
      std::ofstream(results / "jobs.tsv", std::ios::app)
          << job_id << '\t' << script_path << '\t' << j.experiment << '\t'
          << nlohmann::json(j.sets).dump() << '\t' << runs << '\n';
    } catch (const std::exception&) {
    }
    std::cout << "submitted job " << job_id << ": " << j.runs.size() << " run(s) of " << plan.name
              << " (" << runs << ")"
              << (j.ranked ? ", " + std::to_string(j.ranks) + " Slurm task(s) per run, one per rank"
                           : std::string())
              << "\n";
  }
  std::cout << "results: " << results.string() << "\n";
  return kOk;
}

}  // namespace xrun::cli
