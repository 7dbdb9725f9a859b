// runner/main.cpp: the `xrun` command line (CLI11). Parses arguments and
// hands each subcommand to its function in runner/commands.h; maps parse
// errors to exit code 2. Subcommands: plan, run, runs, show, trace, merge,
// compare, report, export, doctor (and the hidden `keys`, which
// prints the experiment-key reference).
#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <exception>
#include <iostream>
#include <new>
#include <string>

#include "engine/device/doctor.h"
#include "runner/commands.h"
#include "runner/config_schema.h"
#include "runner/experiment.h"
#include "xrun_version.h"

namespace {

// Standard output flushed and checked: a write error (a full disk, a closed
// file) is a failure, not a silent exit 0.
int finish_output(int code) {
  std::cout.flush();
  errno = 0;
  const bool failed = !std::cout || std::fflush(stdout) != 0 || std::ferror(stdout);
  if (!failed) return code;
  std::cerr << "xrun: writing to standard output failed"
            << (errno != 0 ? std::string(": ") + std::strerror(errno) : std::string()) << "\n";
  return code == xrun::cli::kOk ? xrun::cli::kRunFailed : code;
}

// The last resort for an exception no command caught, on any thread: a
// message naming it and exit code 1 (a failed command), never an abort.
[[noreturn]] void uncaught_exception() {
  std::string what = "an exception of unknown type";
  if (const std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::bad_alloc&) {
      what = "out of memory (std::bad_alloc)";
    } catch (const std::exception& x) {
      what = x.what();
    } catch (...) {
    }
  } else {
    what = "std::terminate called without an exception";
  }
  std::fprintf(stderr, "xrun: internal error: %s\n", what.c_str());
  std::_Exit(xrun::cli::kRunFailed);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace xrun::cli;
  std::set_terminate(uncaught_exception);
  CLI::App app{"xrun: declarative ResNet training experiments, profiled and stored in SQLite"};
  app.set_version_flag("--version", std::string("xrun ") + XRUN_VERSION + " (" +
                                        XRUN_GIT_COMMIT + ")");
  app.require_subcommand(1);
  int code = kOk;

  PlanArgs plan;
  auto* plan_cmd = app.add_subcommand("plan", "Validate an experiment file and list the runs it expands to");
  plan_cmd->add_option("file", plan.file, "Experiment file (TOML)")->required();
  plan_cmd->add_option("--set", plan.sets, "Override a key before the sweep expands: KEY=VALUE (a TOML value)");
  plan_cmd->add_flag("--json", plan.json, "Print the plan as JSON");
  plan_cmd->callback([&] { code = plan_command(plan); });

  RunArgs run;
  auto* run_cmd = app.add_subcommand("run", "Train every planned run and store the results");
  run_cmd->add_option("file", run.file, "Experiment file (TOML)")->required();
  run_cmd->add_option("--db", run.db, "Result store (default: store.path from the file, xrun.db)");
  run_cmd->add_option("--only", run.only_text, "Run only these indices, e.g. 0,3,5")->delimiter(',');
  run_cmd->add_option("--set", run.sets, "Override a key before the sweep expands: KEY=VALUE (a TOML value)");
  run_cmd->add_flag("--force", run.force, "Run again runs that are already complete in the store");
  run_cmd->add_option("--nsys", run.nsys,
                      "Run under Nsight Systems (nsys on the PATH), recording the measured steps "
                      "into report OUT")
      ->expected(0, 1)
      ->default_str("xrun-report");
  run_cmd->add_option("--parallel", run.parallel,
                      "Train up to N runs at once into the store, the CPU cores split between "
                      "them (CPU runs with train.threads = 0 get cores/N threads each)")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            // CLI::PositiveNumber's message prints the range up to DBL_MAX.
            return text.find_first_not_of("0123456789") == std::string::npos && text.size() <= 9 &&
                           std::stoi(text) >= 1
                       ? std::string()
                       : text + ": must be a whole number >= 1 (runs at once)";
          },
          "N >= 1"));
  run_cmd->add_option("--gpus", run.gpus,
                      "Give each run its own GPU (CUDA_VISIBLE_DEVICES), one run per GPU at once, "
                      "e.g. --gpus 0,1,2,3")
      ->delimiter(',');
  run_cmd->add_option("--expect-config", run.expect_config)->group("");
  run_cmd->add_option("--sweep-position", run.sweep_position)->group("");
  run_cmd->add_option("--cpu-threads-per-run", run.cpu_threads_per_run)->group("");
  run_cmd->add_option("--experiment-path", run.experiment_path)->group("");
  run_cmd->callback([&] {
    if (const std::string problem = parse_only(run.only_text, run.only); !problem.empty()) {
      std::cerr << "xrun: " << problem << "\n";
      code = kUsage;
      return;
    }
    if (run_cmd->count("--nsys") > 0 && run.in_parallel()) {
      std::cerr << "xrun: --nsys records one process; run the sweep without --parallel/--gpus "
                   "under Nsight Systems\n";
      code = kUsage;
      return;
    }
    if (run_cmd->count("--nsys") > 0) {
      if (run.nsys.empty()) run.nsys = "xrun-report";
      code = run_under_nsys(run);
    } else {
      code = run_command(run);
    }
  });

  SubmitArgs submit;
  auto* submit_cmd = app.add_subcommand(
      "submit", "Submit the planned runs to a Slurm cluster as one job array (a store per task)");
  submit_cmd->add_option("file", submit.file, "Experiment file (TOML)")->required();
  submit_cmd->add_flag("--slurm", submit.slurm, "Submit with Slurm's sbatch");
  submit_cmd->add_option("--partition", submit.partition, "Slurm partition");
  submit_cmd->add_option("--gpus-per-run", submit.gpus_per_run, "GPUs for each run")
      ->check(CLI::NonNegativeNumber);
  submit_cmd->add_option("--cpus-per-run", submit.cpus_per_run, "CPU cores for each run")
      ->check(CLI::NonNegativeNumber);
  submit_cmd->add_option("--mem", submit.mem, "Memory for each run, as Slurm writes it (16G)");
  submit_cmd->add_option("--time", submit.time, "Time limit of each run, HH:MM:SS");
  submit_cmd->add_option("--max-parallel", submit.max_parallel, "At most this many runs at once")
      ->check(CLI::NonNegativeNumber);
  submit_cmd->add_option("--results", submit.results,
                         "Folder for the task stores, logs, script and frozen experiment "
                         "(default xrun-results/NAME)");
  submit_cmd->add_option("--only", submit.only_text, "Submit only these run indices, e.g. 0,3,5")
      ->delimiter(',');
  submit_cmd->add_option("--set", submit.sets, "Override a key before the sweep expands: KEY=VALUE");
  submit_cmd->add_flag("--dry-run", submit.dry_run, "Print the batch script; write and submit nothing");
  submit_cmd->callback([&] {
    if (const std::string problem = parse_only(submit.only_text, submit.only); !problem.empty()) {
      std::cerr << "xrun: " << problem << "\n";
      code = kUsage;
      return;
    }
    code = submit_command(submit);
  });

  CollectArgs collect;
  auto* collect_cmd = app.add_subcommand(
      "collect", "Merge the task stores of a submitted job array into one store");
  collect_cmd->add_option("dir", collect.dir, "Results folder of xrun submit")->required();
  collect_cmd->add_option("--into", collect.into, "The store to merge into")->required();
  collect_cmd->callback([&] { code = collect_command(collect); });

  JobsArgs jobs;
  auto* jobs_cmd = app.add_subcommand("jobs", "What each array task of the submitted jobs is doing (Slurm)");
  jobs_cmd->add_option("--results", jobs.results,
                       "Results folder of xrun submit (default: every folder under xrun-results)");
  jobs_cmd->callback([&] { code = jobs_command(jobs); });

  RunsArgs runs;
  auto* runs_cmd = app.add_subcommand("runs", "List stored runs with their headline figures");
  runs_cmd->add_option("--db", runs.db, "Result store")->capture_default_str();
  runs_cmd->add_option("--where", runs.where, "Filter: KEY=VALUE on a setting (train.precision=fp16) or a column (status, label, device, experiment)");
  runs_cmd->add_option("--format", runs.format, "Output format")
      ->check(CLI::IsMember({"table", "csv", "json"}))
      ->capture_default_str();
  runs_cmd->callback([&] { code = runs_command(runs); });

  ShowArgs show;
  auto* show_cmd = app.add_subcommand("show", "Show everything stored about one run");
  show_cmd->add_option("run", show.run, "Run id or UUID prefix")->required();
  show_cmd->add_option("--db", show.db, "Result store")->capture_default_str();
  show_cmd->add_flag("--json", show.json, "Print as JSON");
  show_cmd->callback([&] { code = show_command(show); });

  TraceArgs trace;
  auto* trace_cmd = app.add_subcommand("trace", "Export a run's trace window as Chrome trace JSON (Perfetto)");
  trace_cmd->add_option("run", trace.run, "Run id or UUID prefix")->required();
  trace_cmd->add_option("--db", trace.db, "Result store")->capture_default_str();
  trace_cmd->add_option("-o,--output", trace.output, "Output file")->capture_default_str();
  trace_cmd->callback([&] { code = trace_command(trace); });

  MergeArgs merge;
  auto* merge_cmd = app.add_subcommand("merge", "Bring the runs of result files from other machines into one store (by run UUID; merging twice adds nothing)");
  merge_cmd->add_option("--into", merge.into, "Store to merge into (created if absent)")->required();
  merge_cmd->add_option("inputs", merge.inputs, "Result files to merge from")->required();
  merge_cmd->callback([&] { code = merge_command(merge); });

  CompareArgs compare;
  auto* compare_cmd = app.add_subcommand("compare", "Match runs that differ only in one key and show throughput ratios with 95% confidence intervals");
  compare_cmd->add_option("--db", compare.db, "Result store")->capture_default_str();
  compare_cmd->add_option("--by", compare.by, "What to compare: label, device, isa (a CPU run's oneDNN ISA) or a setting (train.precision, train.batch_size, ...)")->required();
  compare_cmd->add_option("--baseline", compare.baseline, "The value ratios are taken against (default: the first)");
  compare_cmd->add_option("--where", compare.where, "Filter: KEY=VALUE on a setting or a column");
  compare_cmd->add_option("--format", compare.format, "Output format")
      ->check(CLI::IsMember({"table", "markdown", "csv", "json"}))
      ->capture_default_str();
  compare_cmd->callback([&] { code = compare_command(compare); });

  ReportArgs report;
  auto* report_cmd = app.add_subcommand("report", "Write a self-contained HTML report (charts as inline SVG)");
  report_cmd->add_option("--db", report.db, "Result store")->capture_default_str();
  report_cmd->add_option("--where", report.where, "Filter: KEY=VALUE on a setting or a column");
  report_cmd->add_option("--by", report.by, "Comparison axis of the speedup chart")->capture_default_str();
  report_cmd->add_option("--baseline", report.baseline, "Baseline value of the speedup chart (default: the first)");
  report_cmd->add_option("-o,--output", report.output, "Output file")->capture_default_str();
  report_cmd->callback([&] { code = report_command(report); });

  ExportArgs exp;
  auto* export_cmd = app.add_subcommand("export", "Export a table of the store as CSV or JSON (for pandas or a spreadsheet)");
  export_cmd->add_option("--db", exp.db, "Result store")->capture_default_str();
  export_cmd->add_option("--where", exp.where, "Filter runs: KEY=VALUE on a setting or a column");
  export_cmd->add_option("--format", exp.format, "Output format")
      ->check(CLI::IsMember({"csv", "json"}))
      ->capture_default_str();
  export_cmd->add_option("--table", exp.table, "What to export")
      ->check(CLI::IsMember({"runs", "steps", "epochs", "evals", "kernels", "ranks"}))
      ->capture_default_str();
  export_cmd->add_option("-o,--output", exp.output, "Output file (default: standard output)");
  export_cmd->callback([&] { code = export_command(exp); });

  bool doctor_json = false;
  std::string require;
  auto* doctor_cmd = app.add_subcommand("doctor", "What this machine can train on: driver, CUDA, cuDNN, cuBLAS, CUPTI, GPUs, CPU, oneDNN");
  doctor_cmd->add_flag("--json", doctor_json, "Print as JSON");
  doctor_cmd->add_option("--require", require, "Exit 1 unless this is available (cuda)");
  bool doctor_peak = false;
  xrun::cli::PeakArgs peak;
  doctor_cmd->add_flag("--peak", doctor_peak,
                       "Measure this CPU's peak FLOP/s (fp32, bf16) and copy bandwidth, and keep "
                       "them in the store: later runs report their % of peak");
  doctor_cmd->add_option("--db", peak.db, "With --peak: the result store")->capture_default_str();
  doctor_cmd->add_option("--threads", peak.threads,
                         "With --peak: threads to measure with (default: every core), as "
                         "train.threads");
  bool doctor_allreduce = false;
  xrun::cli::AllreduceArgs allreduce;
  doctor_cmd->add_flag("--allreduce", doctor_allreduce,
                       "Time the all-reduce of CPU ranks on this machine (gloo) from 1 MiB to "
                       "--max-mb, with algorithm and bus bandwidth as nccl-tests reports them");
  doctor_cmd->add_option("--ranks", allreduce.ranks, "With --allreduce: how many ranks")
      ->capture_default_str();
  doctor_cmd->add_option("--max-mb", allreduce.max_mb, "With --allreduce: the largest size (MiB)")
      ->capture_default_str();
  doctor_cmd->callback([&] {
    if (doctor_allreduce && (doctor_peak || doctor_json || !require.empty() ||
                             doctor_cmd->count("--db") || doctor_cmd->count("--threads"))) {
      std::cerr << "xrun: doctor --allreduce measures and prints; it takes only --ranks and "
                   "--max-mb\n";
      code = 2;
      return;
    }
    if (!doctor_allreduce && (doctor_cmd->count("--ranks") || doctor_cmd->count("--max-mb"))) {
      std::cerr << "xrun: doctor: --ranks and --max-mb go with --allreduce\n";
      code = 2;
      return;
    }
    if (doctor_allreduce) {
      code = xrun::cli::allreduce_command(allreduce);
      return;
    }
    if (doctor_peak && (doctor_json || !require.empty())) {
      std::cerr << "xrun: doctor --peak measures and stores; it takes neither --json nor --require\n";
      code = 2;
      return;
    }
    if (!doctor_peak && (doctor_cmd->count("--db") || doctor_cmd->count("--threads"))) {
      std::cerr << "xrun: doctor: --db and --threads go with --peak\n";
      code = 2;
      return;
    }
    code = doctor_peak ? xrun::cli::peak_command(peak)
                       : xrun::run_doctor(std::cout, std::cerr, doctor_json, require);
  });

  auto* keys_cmd = app.add_subcommand("keys", "Print the experiment-file key reference (Markdown)");
  keys_cmd->group("");  // hidden: used to regenerate docs/experiment-format.md
  keys_cmd->callback([&] { std::cout << xrun::schema_markdown(); });

  // A first word that is no option and no command: say so (CLI11 would say
  // "A subcommand is required").
  if (argc > 1 && argv[1][0] != '-') {
    const std::string word = argv[1];
    std::vector<std::string> names;
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
      if (!sub->get_group().empty()) names.push_back(sub->get_name());
    if (std::find(names.begin(), names.end(), word) == names.end() && word != "keys") {
      std::string list;
      for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
      std::cerr << "xrun: unknown command '" << word << "'";
      const std::string near = xrun::schema::closest_name(word, names);
      if (!near.empty()) std::cerr << "; did you mean '" << near << "'?";
      std::cerr << " (commands: " << list << "; xrun --help)\n";
      return kUsage;
    }
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? kOk : kUsage;
  } catch (const std::bad_alloc&) {
    std::cerr << "xrun: out of memory (std::bad_alloc)\n";
    return kRunFailed;
  } catch (const std::exception& e) {
    std::cerr << "xrun: internal error: " << e.what() << "\n";
    return kRunFailed;
  }
  return finish_output(code);
}
