// runner/commands.h: the xrun subcommands, one function each, called by
// runner/main.cpp after CLI11 has parsed the arguments. Each returns the
// process exit code: 0 success, 1 a run failed, 2 usage or experiment-file
// error, 130 interrupted.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/config.h"
#include "core/records.h"

namespace xrun::store {
class Store;
}

namespace xrun::cli {

enum ExitCode { kOk = 0, kRunFailed = 1, kUsage = 2, kInterrupted = 130 };

struct PlanArgs {
  std::string file;
  std::vector<std::string> sets;
  bool json = false;
};
int plan_command(const PlanArgs& args);

struct RunArgs {
  std::string file;
  std::string db;                 // "" = store.path from the file
  std::vector<std::string> only_text;  // --only as given ("0", "3")
  std::vector<int> only;          // run indices parsed from only_text; empty = all
  std::vector<std::string> sets;
  bool force = false;
  std::string nsys;  // --nsys [OUT]: run under Nsight Systems, report OUT ("" = not asked)
  int parallel = 0;               // --parallel N: up to N runs at once (0 or 1: one at a time)
  std::vector<std::string> gpus;  // --gpus 0,1: one run per GPU (CUDA_VISIBLE_DEVICES)
  // Hidden options that --parallel gives each child it starts:
  std::string expect_config;    // the run's config hash as the parent planned it
  std::string sweep_position;   // "P/N": where the run stands in the parent's list
  int cpu_threads_per_run = 0;  // PlanOptions::cpu_threads_per_run
  std::string experiment_path;  // the file as the user named it; `file` is the parent's
                                // frozen copy of the bytes it read (a FIFO reads once)
  // Several runs at once, each in a child process (runner/parallel_runs.h).
  bool in_parallel() const { return parallel > 1 || !gpus.empty(); }
};
int run_command(const RunArgs& args);

// --only's words -> run indices: each a whole non-negative number. "" when
// they all are, else the message (`--only ''` is an error, not run 0).
std::string parse_only(const std::vector<std::string>& words, std::vector<int>& indices);

// `xrun run ... --nsys OUT`: replaces this process with
//   nsys profile -t cuda,nvtx,cudnn,cublas --capture-range=cudaProfilerApi
//        --capture-range-end=stop -o OUT --force-overwrite true xrun run ...
// (the same arguments without --nsys). Returns only on failure (exit code),
// saying so when nsys is not on the PATH.
int run_under_nsys(const RunArgs& args);

// `xrun submit FILE --slurm ...` (runner/submit_command.cpp, runner/slurm.h).
// Without --results, the results go to kDefaultResultsRoot/NAME, where
// `xrun jobs` without --results looks.
inline constexpr const char* kDefaultResultsRoot = "xrun-results";
struct SubmitArgs {
  std::string file;
  bool slurm = false;
  std::string partition;
  int gpus_per_run = 0;
  int cpus_per_run = 0;
  std::string mem;
  std::string time;
  int max_parallel = 0;
  std::string results;                 // "" = xrun-results/<experiment name>
  std::vector<std::string> only_text;
  std::vector<int> only;
  std::vector<std::string> sets;
  bool dry_run = false;
};
int submit_command(const SubmitArgs& args);

// `xrun collect DIR --into OUT` (runner/collect_command.cpp).
struct CollectArgs {
  std::string dir;
  std::string into;
};
int collect_command(const CollectArgs& args);

// `xrun jobs --results DIR` (runner/jobs_command.cpp): exit 1 when a task
// failed, timed out or was cancelled.
struct JobsArgs {
  std::string results;
};
int jobs_command(const JobsArgs& args);

struct RunsArgs {
  std::string db = "xrun.db";
  std::vector<std::string> where;  // "KEY=VALUE"
  std::string format = "table";    // table | csv | json
};
int runs_command(const RunsArgs& args);

// `xrun doctor --peak` (runner/peak_command.cpp): this CPU's measured peaks
// into the store. attach_peak gives a run its device's FLOP/s peak for its
// precision and its memory bandwidth peak: a CPU run from the store's
// measurement (none until doctor --peak ran), a GPU run from its card's
// published table row or architecture rate (engine/device/gpu_peaks.h);
// a run of N ranks N times that, as its FLOP/s counts every rank's work.
struct PeakArgs {
  std::string db = "xrun.db";
  int threads = 0;  // 0: every core this process may use
};
int peak_command(const PeakArgs& args);

// `xrun doctor --allreduce` (runner/allreduce_command.cpp): the all-reduce
// of CPU ranks on this machine, timed over sizes, as nccl-tests reports it.
struct AllreduceArgs {
  int ranks = 2;
  int max_mb = 256;  // the largest size
};
int allreduce_command(const AllreduceArgs& args);
void attach_peak(const store::Store& db, const Environment& env, Precision precision, bool gpu,
                 RunSummary& summary);

struct ShowArgs {
  std::string run;  // id or UUID prefix
  std::string db = "xrun.db";
  bool json = false;
};
int show_command(const ShowArgs& args);

struct TraceArgs {
  std::string run;  // id or UUID prefix
  std::string db = "xrun.db";
  std::string output = "trace.json";
};
int trace_command(const TraceArgs& args);

// `xrun merge --into OUT IN...` (runner/merge_command.cpp, store/merge.cpp).
struct MergeArgs {
  std::string into;
  std::vector<std::string> inputs;
};
int merge_command(const MergeArgs& args);

// `xrun compare --by KEY ...` (runner/compare_command.cpp, runner/compare.cpp).
struct CompareArgs {
  std::string db = "xrun.db";
  std::string by;                  // label | device | a setting (train.precision)
  std::string baseline;            // "" = the first value in sort order
  std::vector<std::string> where;  // "KEY=VALUE"
  std::string format = "table";    // table | markdown | csv | json
};
int compare_command(const CompareArgs& args);

// `xrun report -o report.html` (runner/report_command.cpp, runner/report/).
struct ReportArgs {
  std::string db = "xrun.db";
  std::vector<std::string> where;  // "KEY=VALUE"
  std::string output = "report.html";
  std::string by = "label";        // the comparison axis of the speedup chart
  std::string baseline;            // "" = the first value
};
int report_command(const ReportArgs& args);

// `xrun export --format csv|json --table ...` (runner/export_command.cpp).
struct ExportArgs {
  std::string db = "xrun.db";
  std::vector<std::string> where;  // "KEY=VALUE"
  std::string format = "csv";      // csv | json
  std::string table = "runs";      // runs | steps | epochs | kernels
  std::string output;              // "" = standard output
};
int export_command(const ExportArgs& args);

}  // namespace xrun::cli
