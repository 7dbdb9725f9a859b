// runner/run_command.cpp: `xrun plan` and `xrun run`. `run` plans the whole
// experiment first (every error before any work), then for each selected run
// not already complete in the store: writes the run row as `running`, trains
// it (steps stored from a background writer as they finish, epochs as they
// end), and finalises the row as complete, failed or interrupted. A failed run
// does not stop the sweep; Ctrl-C stops it after the current step.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>

#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/safetensors.h"
#include "engine/data/dataset.h"
#include "engine/device/device_info.h"
#include "engine/backend.h"
#include "engine/distributed/communicator.h"
#include "engine/distributed/rank_stats.h"
#include "engine/trainer.h"
#include "profiler/run_observers.h"
#include "runner/commands.h"
#include "runner/config_schema.h"
#include "runner/experiment.h"
#include "runner/parallel_runs.h"
#include "runner/progress.h"
#include "runner/rank_launch.h"
#include "runner/roofline.h"
#include "store/store.h"

namespace xrun::cli {

namespace {

std::atomic<int> g_interrupts{0};
std::atomic<int> g_signal{0};  // the first stop signal received

// Ctrl-C (SIGINT), and SIGTERM and SIGHUP (what `timeout`, Slurm and `docker
// stop` send, and a closed terminal): stop after the current step and store
// the run as interrupted.
constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};

void on_stop_signal(int sig) {
  int none = 0;
  g_signal.compare_exchange_strong(none, sig);
  if (g_interrupts.fetch_add(1) >= 1) {
    // A second signal: stop now. The run row stays `running`; the next
    // `xrun run` marks it interrupted.
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
}

// Stop signals for the lifetime of a `run` command. They are blocked in this
// thread, so in every thread started after it (OpenMP's, oneDNN's, the data
// loader's), and taken by one thread of their own with sigwait(): a signal
// handler that interrupted oneDNN's JIT GEMM kernels mid-call corrupted the
// heap now and then (seen with SIGTERM during CPU training, about 1 run in
// 25). The handlers stay installed for threads that existed before.
constexpr int kWake = SIGUSR2;  // tells the signal thread to finish

struct InterruptGuard {
  void (*previous[std::size(kStopSignals)])(int);
  sigset_t set{}, old_mask{};
  std::thread waiter;
  InterruptGuard() {
    g_interrupts = 0;
    g_signal = 0;
    for (size_t i = 0; i < std::size(kStopSignals); ++i)
      previous[i] = std::signal(kStopSignals[i], on_stop_signal);
    sigemptyset(&set);
    for (int sig : kStopSignals) sigaddset(&set, sig);
    sigaddset(&set, kWake);
    pthread_sigmask(SIG_BLOCK, &set, &old_mask);
    waiter = std::thread([this] {
      for (;;) {
        int sig = 0;
        if (sigwait(&set, &sig) != 0 || sig == kWake) return;
        if (g_interrupts.load() >= 1) {  // the second: die of it, as unhandled
          sigset_t one;
          sigemptyset(&one);
          sigaddset(&one, sig);
          pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
        }
        on_stop_signal(sig);
      }
    });
  }
  ~InterruptGuard() {
    pthread_kill(waiter.native_handle(), kWake);
    waiter.join();
    pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
    for (size_t i = 0; i < std::size(kStopSignals); ++i) std::signal(kStopSignals[i], previous[i]);
  }
};

// The exit code of an interrupted `xrun run`: 128 + the signal, as a shell
// reports a process that signal ended (130 for Ctrl-C, 143 for SIGTERM).
int interrupted_exit_code() {
  const int sig = g_signal.load();
  return sig > 0 ? 128 + sig : kInterrupted;
}

PlanOptions plan_options(const std::vector<std::string>& sets) {
  PlanOptions o;
  o.sets = sets;
  o.gpu_available = xrun::cuda_engine_available();
  // XRUN_TEST_GPU_UNUSABLE (tests/cli): stands for a GPU this build cannot use.
  const char* unusable = std::getenv("XRUN_TEST_GPU_UNUSABLE");
  if (!o.gpu_available) o.gpu_unusable = unusable ? unusable : xrun::gpu_unusable_reason();
  o.hostname = hostname();
  const CpuInfo cpu = query_cpu();
  o.cpu_bf16_kernels = cpu.bf16_kernels;
  o.cpu_isa = cpu.onednn_isa;
  return o;
}

store::NewRun new_run(const Plan& plan, const RunSpec& spec, const RunConfig& cfg) {
  store::NewRun r;
  r.experiment = plan.name;
  r.experiment_file = plan.file;
  r.description = plan.description;
  r.sweep_index = spec.index;
  r.config_json = spec.canonical;
  r.config_hash = spec.config_hash;
  r.experiment_hash = spec.experiment_hash;
  r.label = spec.config.at("store").at("label").get<std::string>();
  r.device = cfg.train.device.name();
  r.params = spec.params;
  r.environment = collect_environment(r.device);
  return r;
}

// Files a run writes besides the store: train.checkpoint and its optimizer
// companion. "" when every selected run's are safe to write; otherwise what
// is wrong. A checkpoint never replaces the store (or its -wal/-shm), the
// experiment file, a directory, or an existing file that is not an xrun
// checkpoint. Neither it nor model.weights (read) may be a FIFO, device or
// socket: opening one blocks (a FIFO waits for a writer, deaf to SIGTERM)
// or reads what is no safetensors file. Checked with stat(), which opens
// nothing.
std::string check_output_paths(const Plan& plan, const std::vector<const RunSpec*>& selected,
                               const std::string& db_path) {
  namespace fs = std::filesystem;
  // "" or why `path`, when it exists, is not a file a run can read or write.
  auto not_regular = [](const std::string& path) -> std::string {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)) return "";
    const char* what = S_ISFIFO(st.st_mode) ? "a FIFO (named pipe)"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                       : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                                                                    : "not a regular file";
    return path + " is " + what + ", not a safetensors file; give a regular file";
  };
  auto same = [](const std::string& a, const std::string& b) {
    std::error_code ec;
    return fs::equivalent(a, b, ec) ||
           fs::weakly_canonical(a, ec) == fs::weakly_canonical(b, ec);
  };
  for (const RunSpec* spec : selected) {
    const std::string weights = spec->config.at("model").at("weights").get<std::string>();
    if (!weights.empty())
      if (const std::string why = not_regular(weights); !why.empty())
        return "run #" + std::to_string(spec->index) + ": model.weights = \"" + weights + "\": " +
               why;
    const std::string ckpt = spec->config.at("train").at("checkpoint").get<std::string>();
    if (ckpt.empty()) continue;
    const std::string where = "run #" + std::to_string(spec->index) + ": train.checkpoint = \"" +
                              ckpt + "\"";
    for (const std::string& target : {ckpt, optimizer_state_path(ckpt)}) {
      for (const char* suffix : {"", "-wal", "-shm", "-journal"})
        if (same(target, db_path + suffix))
          return where + " would overwrite the result store " + db_path + "; choose another file";
      if (same(target, plan.file))
        return where + " would overwrite the experiment file " + plan.file + "; choose another file";
      if (const std::string why = not_regular(target); !why.empty()) return where + ": " + why;
      std::error_code ec;
      if (fs::is_directory(target, ec))
        return where + ": " + target + " is a directory; give a file name (run.safetensors)";
      if (fs::exists(target, ec))
        if (const std::string why = checkpoint_file_problem(target); !why.empty())
          return where + ": " + target + " exists and " + why + "; refusing to " +
                 "overwrite it (move it away or choose another file)";
    }
  }
  return "";
}

// The observers of one run, from profile.* (core/run_observer.h gives the
// order's meaning): the trace window and CUPTI ahead of the ranges they
// follow, then timers, findings, what the user sees, what the store keeps.
void add_profiler_observers(RunObservers& obs, const RunConfig& cfg, ProgressDisplay& display) {
  if (cfg.profile.cupti == CuptiMode::trace)
    obs.add(std::make_unique<profiler::TraceWindow>(cfg.profile.trace_steps));
  if (cfg.profile.cupti != CuptiMode::off && cfg.train.device.is_gpu()) {
    std::string why_not;
    auto cupti = profiler::CuptiActivity::start(
        cfg.profile.cupti == CuptiMode::trace ? cfg.profile.trace_steps : 0, cfg.train.log_every,
        why_not);
    if (cupti)
      obs.add(std::move(cupti));
    else
      display.message("CUPTI tracing off: " + why_not + "; NVTX ranges and host timers go on" +
                      (cfg.profile.layers ? " (no per-layer times: on a GPU they come from CUPTI)"
                                          : ""));
  } else if (cfg.profile.cupti == CuptiMode::summary) {
    display.message("profile.cupti = \"summary\" records GPU activity; this " +
                    cfg.train.device.name() + " run has its host phase timers");
  } else if (cfg.profile.layers && cfg.train.device.is_gpu()) {
    display.message("profile.layers on a GPU times each layer's kernels through CUPTI, which "
                    "profile.cupti = \"off\" leaves off: the layers get NVTX ranges only");
  }
  obs.add(std::make_unique<profiler::Ranges>(cfg.profile.nvtx));
  obs.add(std::make_unique<profiler::PhaseTimes>());
  // On a GPU the host sees a layer's launches, not its work: CUPTI times it.
  if (cfg.profile.layers && !cfg.train.device.is_gpu())
    obs.add(std::make_unique<profiler::LayerTimes>());
  obs.add(std::make_unique<profiler::Findings>(cfg));
}

// The memory-bound finding, where profile.layers timed the layers and the
// device's peaks are known (runner/roofline.h).
void add_roofline_finding(TrainResult& result) {
  if (result.layers.empty()) return;
  const analysis::Roofline r =
      analysis::make_roofline(result.layers, result.layer_costs, result.summary);
  FindingRecord f;
  if (analysis::memory_bound_finding(r, f)) result.findings.push_back(f);
}

// What the store keeps while the run goes: its environment and its epochs.
class StoredRecords final : public RunObserver {
 public:
  StoredRecords(store::Store& db, const std::string& uuid) : db_(db), uuid_(uuid) {}
  void on_run_begin(const Environment& env, const RunShape&) override {
    db_.set_environment(uuid_, env);
  }
  void on_epoch_end(const EpochRecord& e) override { db_.write_epoch(uuid_, e); }
  void on_eval(const EvalRecord& e) override { db_.write_eval(uuid_, e); }

 private:
  store::Store& db_;
  const std::string& uuid_;
};

struct Outcome {
  store::RunStatus status;
  std::string line;  // for the final table
  bool skipped = false;  // another process has it (running or complete): not this one's failure
};

// The final table's line for a complete run.
// A GPT-2 run (`tokens`) counts tokens and reports next-token accuracy and
// its validation loss and perplexity (`test_loss`, NaN when none).
std::string complete_line(double throughput, double step_ms_median, double test_accuracy,
                          double test_loss, bool tokens) {
  char line[256];
  std::snprintf(line, sizeof line, "complete: %.1f %s (median step %.1f ms)", throughput,
                tokens ? "tok/s" : "img/s", step_ms_median);
  std::string text = line;
  if (!std::isnan(test_accuracy)) {
    std::snprintf(line, sizeof line, ", %s %.2f%%",
                  tokens ? "next-token accuracy" : "test accuracy", 100.0 * test_accuracy);
    text += line;
  }
  if (tokens && !std::isnan(test_loss)) {
    std::snprintf(line, sizeof line, ", val loss %.4f (perplexity %.2f)", test_loss,
                  std::exp(test_loss));
    text += line;
  }
  return text;
}

// XRUN_TEST_RANKS_SAME_DATA=1 (tests/cli/ranks_test.cpp): every rank reads
// what one process alone would (TrainContext::every_rank_reads_all).
bool same_data_test_hook() {
  const char* v = std::getenv("XRUN_TEST_RANKS_SAME_DATA");
  return v && std::string(v) == "1";
}

// Trains one planned run and stores everything about it.
// `rank`: rank 0 of a run with train.ranks > 1 (a child of run_ranks),
// which joins the others before training; nullptr for one rank.
Outcome run_one(store::Store& db, const Plan& plan, const RunSpec& spec, int position, int count,
                bool force, ProgressDisplay& display, const dist::RankInfo* rank = nullptr) {
  const RunConfig cfg = to_run_config(spec.config);
  display.begin_run(position, count, spec.index, short_hash(spec.config_hash), swept_text(spec));
  store::NewRun row = new_run(plan, spec, cfg);
  row.force = force;
  std::string uuid;
  try {
    uuid = db.begin_run(row);
  } catch (const store::RunInProgress& e) {
    const std::string line = std::string(e.what()) + " on this host, skipped";
    display.end_run(line);
    return {store::RunStatus::running, line, true};
  } catch (const store::RunAlreadyComplete& e) {  // another process finished it just now
    const std::string line = std::string(e.what()) + ", skipped";
    display.end_run(line);
    return {store::RunStatus::complete, line, true};
  }
  // Convolution algorithm choices are shared by runs on the same card,
  // driver and cuDNN version (cudnn_benchmark = "cached").
  const Environment& env0 = row.environment;
  const std::string device_key =
      !cfg.train.device.is_gpu() ? ""
                                : env0.get("device_name") + " | cc " +
                                      env0.get("compute_capability") + " | driver " +
                                      env0.get("driver") + " | cuDNN " + env0.get("cudnn");
  TrainContext context;
  context.config_hash = spec.config_hash;  // a checkpoint resumes only its own configuration
  context.device_note = spec.device_note;
  if (!spec.device_note.empty()) display.message(spec.device_note);
  if (cfg.train.cudnn_benchmark == CudnnBenchmark::cached)
    context.algo_cache = db.conv_algo_cache(device_key);
  display.message("stored as " + uuid + " in " + db.path());

  store::StepWriter steps(db.path(), uuid);
  ProgressLine progress(display, cfg);
  StoredRecords stored(db, uuid);
  // A stop signal, or a store that can no longer take the steps (disk full):
  // no point training on when nothing it produces can be kept.
  context.stop_requested = [&steps] { return g_interrupts.load() > 0 || steps.failing(); };

  RunSummary empty;
  std::unique_ptr<dist::Communicator> comm;
  try {
    if (rank) {
      comm = dist::connect(*rank, cfg.distributed.backend, cfg.train.device.is_gpu(),
                           cfg.train.device.index);
      context.comm = comm.get();
      context.every_rank_reads_all = same_data_test_hook();
      display.message(std::to_string(rank->size) + (rank->size == 1 ? " rank" : " ranks") +
                      " joined through " + comm->backend());
    }
    RunObservers observers;
    add_profiler_observers(observers, cfg, display);
    observers.add(progress).add(steps).add(stored);
    TrainResult result = train(cfg, observers, context);
    steps.flush();
    store::Store::Batch batch(db);  // the results and the status land together or not at all
    db.write_phases(uuid, result.phases);
    db.write_kernels(uuid, result.layers);
    db.write_kernels(uuid, result.kernels);
    db.write_memcpy(uuid, result.copies);
    db.write_memory(uuid, result.memory);
    db.write_conv_algorithms(uuid, result.conv_algorithms, device_key);
    attach_peak(db, result.environment, cfg.train.precision, cfg.train.device.is_gpu(),
                result.summary);
    // A CPU's peak is measured, not looked up: say once how to get it.
    static bool told_peak = false;
    if (!cfg.train.device.is_gpu() && !std::isfinite(result.summary.peak_flops) && !told_peak) {
      told_peak = true;
      const std::string threads = result.environment.get("cpu_threads");
      display.message("no % of peak for this run: " + db.path() + " holds no peak of this CPU at " +
                      threads + " threads; `xrun doctor --peak --threads " + threads + " --db " +
                      db.path() + "` measures it (about a second) for the runs stored after");
    }
    add_roofline_finding(result);
    if (FindingRecord f; dist::exposed_allreduce_finding(result.ranks, cfg.distributed.bucket_mb, f))
      result.findings.push_back(f);
    db.write_findings(uuid, result.findings);
    db.write_trace(uuid, result.trace);
    db.write_layer_costs(uuid, result.layer_costs);
    db.write_ranks(uuid, result.ranks);
    db.finish_run(uuid, store::RunStatus::complete, result.summary);
    batch.commit();
    const std::string line =
        complete_line(result.summary.throughput, result.summary.step_ms_median,
                      result.summary.test_accuracy, result.summary.test_loss, cfg.model.is_gpt2());
    display.end_run(line);
    return {store::RunStatus::complete, line};
  } catch (const TrainInterrupted& e) {
    steps.flush();
    db.finish_run(uuid, store::RunStatus::interrupted, empty, e.what());
    display.end_run(std::string("interrupted: ") + e.what());
    return {store::RunStatus::interrupted, e.what()};
  } catch (const store::StoreError&) {
    throw;  // the store itself is failing: nothing more can be recorded
  } catch (const std::exception& e) {
    try {
      steps.flush();
    } catch (const std::exception&) {
    }
    db.finish_run(uuid, store::RunStatus::failed, empty, e.what());
    display.end_run(std::string("failed: ") + e.what());
    return {store::RunStatus::failed, e.what()};
  }
}

}  // namespace

std::string parse_only(const std::vector<std::string>& words, std::vector<int>& indices) {
  indices.clear();
  for (const std::string& w : words) {
    const bool digits = !w.empty() && w.size() <= 9 &&
                        std::all_of(w.begin(), w.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits)
      return "--only '" + w + "': expected run indices from `xrun plan`, e.g. --only 0,3,5";
    indices.push_back(std::stoi(w));
  }
  return "";
}

// Why `xrun run` cannot train on `device` here ("" when it can): no GPU the
// CUDA engine can use, or an index past this machine's GPUs.
std::string device_problem(const std::string& device) {
  if (device.rfind("cuda", 0) != 0) return "";
  if (!xrun::cuda_engine_available())
    return "device " + device + " needs a GPU that this build's CUDA engine can run on " +
           "(see `xrun doctor`)";
  if (device.size() > 5 && device[4] == ':') {
    static const size_t gpus = query_cuda().gpus.size();  // once, not once per planned run
    if (std::stoul(device.substr(5)) >= gpus)
      return "device " + device + ": this machine has " + std::to_string(gpus) + " GPU(s), cuda:0" +
             (gpus > 1 ? "..cuda:" + std::to_string(gpus - 1) : "");
  }
  return "";
}

int plan_command(const PlanArgs& args) {
  try {
    PlanOptions options = plan_options(args.sets);
    // `plan` refuses what `run` would refuse here, except a missing GPU: a
    // GPU sweep may be planned on a laptop, with a note that says so.
    const bool have_gpu = xrun::cuda_engine_available();
    options.device_check = [have_gpu](const nlohmann::json&, const std::string& device) {
      return have_gpu ? device_problem(device) : std::string();
    };
    Plan plan = load_plan(args.file, options);
    if (!have_gpu)
      for (const RunSpec& r : plan.runs)
        if (const std::string why = device_problem(r.config.at("train").at("device").get<std::string>());
            !why.empty()) {
          plan.notices.push_back("`xrun run` on this machine would refuse it: " + why);
          break;
        }
    std::cout << format_plan(plan, args.json);
    return kOk;
  } catch (const ExperimentError& e) {
    std::cerr << "xrun: " << e.what() << "\n";
    return kUsage;
  }
}

namespace {

using Outcomes = std::vector<std::pair<const RunSpec*, Outcome>>;

// The table `run` ends with: one line per selected run.
void print_outcomes(const Plan& plan, const Outcomes& outcomes, const std::string& db_path) {
  std::printf("\n%s: %zu of %zu run(s) in %s\n", plan.name.c_str(), outcomes.size(),
              plan.runs.size(), db_path.c_str());
  for (const auto& [spec, o] : outcomes)
    std::printf("  #%-3d %s  %-11s %s\n", spec->index, short_hash(spec->config_hash).c_str(),
                store::to_string(o.status), o.line.c_str());
}

// Opens the store for training: damaged files refused, stale runs marked.
// Returns nullptr after printing why when the store cannot be used.
std::unique_ptr<store::Store> open_for_training(const std::string& db_path,
                                                ProgressDisplay& display) {
  auto db = std::make_unique<store::Store>(db_path);
  if (const std::string problems = db->quick_check(); !problems.empty()) {
    std::cerr << "xrun: store: " << db_path << " is damaged (" << problems
              << "); nothing trained. Keep a copy, then recover what SQLite can with "
              << "`sqlite3 " << db_path << " .recover | sqlite3 recovered.db`\n";
    return nullptr;
  }
  if (int stale = db->mark_stale_runs_interrupted())
    display.message(std::to_string(stale) + " run(s) left running by an ended xrun process " +
                    "marked interrupted");
  return db;
}

// The skip rule of `run`: a run complete in the store is not trained again
// unless --force. Returns the outcome of a skipped run.
std::optional<Outcome> already_complete(const store::Store& db, const RunSpec& spec, bool force,
                                        ProgressDisplay& display) {
  if (force) return std::nullopt;
  auto done = db.find_complete(spec.config_hash);
  if (!done) return std::nullopt;
  display.message("run #" + std::to_string(spec.index) + " [" + short_hash(spec.config_hash) +
                  "] already complete (" + *done + "), skipping; --force runs it again");
  return Outcome{store::RunStatus::complete, "already complete, skipped", true};
}

// What a child process that trained `spec` left in the store: the row it
// began (found by its pid among the rows newer than `last_id`), read back;
// a row it left `running` (killed, crashed, stopped at once by a second
// Ctrl-C) is ended here, with why. `stopped`: a stop signal came meanwhile.
// `stored_uuid`, where given, gets the row's UUID when there is one.
Outcome child_outcome(store::Store& db, const RunSpec& spec, const ChildEnd& end, int64_t last_id,
                      bool stopped, const std::string& exe, std::string* stored_uuid = nullptr) {
  std::optional<store::RunInfo> mine;
  if (end.started && end.pid > 0)
    for (const store::RunInfo& r : db.list_runs({{"config_hash", spec.config_hash}}))
      if (r.id > last_id)
        if (const auto detail = db.get_run(r.uuid); detail && detail->pid == end.pid) mine = r;
  if (!end.started) return {store::RunStatus::interrupted, "not started: stopped before its turn"};
  if (!mine && end.exit_code == 0) {
    // It stored nothing and succeeded: another process had the run
    // (another `run --parallel` on the same sweep), as plain `run` skips it.
    const auto complete = db.find_complete(spec.config_hash);
    return {complete ? store::RunStatus::complete : store::RunStatus::running,
            complete ? "completed by another xrun process (" + *complete + "), skipped"
                     : std::string("being trained by another xrun process, skipped"),
            true};
  }
  if (!mine)
    return {store::RunStatus::failed,
            end.exit_code == 127 ? std::string("could not start ") + exe
                                 : "ended (exit code " + std::to_string(end.exit_code) +
                                       ") before storing the run; its output is above"};
  Outcome o;
  if (stored_uuid) *stored_uuid = mine->uuid;
  if (mine->status == store::to_string(store::RunStatus::running)) {
    const int sig = end.exit_code > 128 ? end.exit_code - 128 : 0;
    const std::string how =
        sig > 0 ? "killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")"
                : "ended with exit code " + std::to_string(end.exit_code);
    o = stopped ? Outcome{store::RunStatus::interrupted,
                          "the process training it was " + how + " after the stop signal"}
                : Outcome{store::RunStatus::failed,
                          "the process training it was " + how + " before the run ended"};
    db.finish_run(mine->uuid, o.status, RunSummary{}, o.line);
    return o;
  }
  o.status = store::run_status_from_string(mine->status);
  if (o.status == store::RunStatus::complete) {
    const auto detail = db.get_run(mine->uuid);  // the validation loss (a language model's)
    o.line = complete_line(mine->throughput, mine->step_ms_median, mine->test_accuracy,
                           detail && detail->has_summary ? detail->summary.test_loss : NAN,
                           mine->throughput_unit == "tokens/s");
  } else {
    o.line = mine->error;
  }
  return o;
}

// The run's rank > 0 (a child of run_ranks): trains beside rank 0, which
// stores the run; this one stores nothing and says only what went wrong.
int run_rank_worker(const RunSpec& spec, const dist::RankInfo& rank) {
  const RunConfig cfg = to_run_config(spec.config);
  InterruptGuard guard;
  try {
    const std::unique_ptr<dist::Communicator> comm = dist::connect(
        rank, cfg.distributed.backend, cfg.train.device.is_gpu(), cfg.train.device.index);
    TrainContext context;
    context.config_hash = spec.config_hash;
    context.comm = comm.get();
    context.every_rank_reads_all = same_data_test_hook();
    context.stop_requested = [] { return g_interrupts.load() > 0; };
    RunObservers observers;
    train(cfg, observers, context);
    // XRUN_TEST_RANK_HOLD_AT_END=1 (tests/cli/ranks_test.cpp): stay after
    // training, so a test can end this rank after rank 0 stored the run.
    if (const char* hold = std::getenv("XRUN_TEST_RANK_HOLD_AT_END"); hold && std::string(hold) == "1")
      std::this_thread::sleep_for(std::chrono::seconds(60));
    return kOk;
  } catch (const TrainInterrupted& e) {
    std::cerr << "interrupted: " << e.what() << "\n";
    return interrupted_exit_code();
  } catch (const std::exception& e) {
    std::cerr << "xrun: rank " << rank.rank << ": " << e.what() << "\n";
    return kRunFailed;
  }
}

// The GPUs this process sees, by the names a child's CUDA_VISIBLE_DEVICES
// takes: the entries of this process's own CUDA_VISIBLE_DEVICES where it is
// set, else 0..count-1.
std::vector<std::string> visible_gpus() {
  const size_t count = query_cuda().gpus.size();
  std::vector<std::string> out;
  if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES"); v && *v) {
    std::stringstream in(v);
    for (std::string item; std::getline(in, item, ',') && out.size() < count;)
      if (!item.empty()) out.push_back(item);
    return out;
  }
  for (size_t i = 0; i < count; ++i) out.push_back(std::to_string(i));
  return out;
}

// A run with train.ranks = N > 1: N children, one per rank (runner/
// rank_launch.h), rank 0 storing the run; its outcome read back as
// run_parallel reads a child's. `stop_signal` gets a stop signal received
// meanwhile (passed on to every rank: they stop after the same step).
Outcome run_ranks(store::Store& db, const Plan& plan, const RunSpec& spec, const RunArgs& args,
                  const std::string& db_path, const std::string& experiment_copy, int position,
                  int count, ProgressDisplay& display, int& stop_signal) {
  const RunConfig cfg = to_run_config(spec.config);
  const int n = cfg.train.ranks;
  display.begin_run(position, count, spec.index, short_hash(spec.config_hash), swept_text(spec));
  std::error_code ec;
  const std::string exe = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec) return {store::RunStatus::failed, "cannot find this program's path to start its ranks"};
  SlotPlan slots;
  if (const std::string problem = plan_slots(n, {}, usable_cpus(), slots); !problem.empty())
    return {store::RunStatus::failed, problem};
  for (const std::string& note : slots.notes) display.message(note);
  // GPU ranks: rank r on the r-th GPU this process sees, as cuda:0 in its own.
  const bool gpu = cfg.train.device.is_gpu();
  std::string gpu_list;
  if (gpu) {
    const std::vector<std::string> visible = visible_gpus();
    if (static_cast<int>(visible.size()) < n)
      return {store::RunStatus::failed,
              "train.ranks = " + std::to_string(n) + " needs " + std::to_string(n) +
                  " GPUs, one per rank; this machine shows " + std::to_string(visible.size())};
    for (int r = 0; r < n; ++r) {
      slots.slots[r].gpu = visible[r];
      gpu_list += (r ? "," : "") + visible[r];
    }
  }
  // Another live process on this host trains it now (a second `xrun run` of
  // the same file): skipped, as one rank's run is, before any rank starts.
  if (const auto other = db.find_in_progress(spec.config_hash)) {
    const std::string line = "being trained by process " + std::to_string(other->first) + " (" +
                             other->second + ") on this host, skipped";
    display.end_run(line);
    return {store::RunStatus::running, line, true};
  }
  const RendezvousDir meet(db_path);
  if (!meet.ok())
    return {store::RunStatus::failed, "cannot make the ranks' rendezvous folder " + meet.error()};
  const auto earlier = db.list_runs({{"config_hash", spec.config_hash}});
  const int64_t last_id = earlier.empty() ? 0 : earlier.back().id;

  RankLaunch launch;
  launch.ranks = n;
  launch.rendezvous = meet.path();
  launch.timeout_s = cfg.distributed.timeout_s;
  launch.pin = !gpu && !slots.slots.front().cpus.empty();
  launch.argv = {exe, "run", experiment_copy, "--experiment-path", plan.file, "--db", db_path,
                 "--only", std::to_string(spec.index), "--expect-config", spec.config_hash,
                 "--sweep-position", std::to_string(position) + "/" + std::to_string(count)};
  for (const std::string& set : args.sets) launch.argv.insert(launch.argv.end(), {"--set", set});
  if (args.force) launch.argv.push_back("--force");
  std::string how = std::to_string(n) + (n == 1 ? " rank" : " ranks") + " through " +
                    dist::backend_for(cfg.distributed.backend, gpu) + " on this machine";
  if (gpu) how += ", GPUs " + gpu_list + " (CUDA_VISIBLE_DEVICES, one each)";
  if (launch.pin) {
    how += ", each on cores of its own:";
    for (const Slot& slot : slots.slots) how += " " + cpu_list_text(slot.cpus);
  }
  display.message(how);
  const ChildrenOutcome done = run_children(rank_children(launch, spec.index), slots.slots, stderr,
                                            cfg.distributed.timeout_s);
  stop_signal = done.stop_signal;
  std::string uuid;
  Outcome o = child_outcome(db, spec, done.ends.front(), last_id, done.stop_signal != 0, exe, &uuid);
  // Rank 0 stored the run complete but another rank did not end well: the
  // run failed, and the stored row says so (its figures kept), so the store
  // and the exit code agree and the next `xrun run` trains it again.
  for (size_t r = 1; r < done.ends.size(); ++r)
    if (done.ends[r].exit_code != 0 && o.status == store::RunStatus::complete && !o.skipped) {
      const int code = done.ends[r].exit_code;
      const std::string how =
          code > 128 ? "was killed by signal " + std::to_string(code - 128) + " (" +
                           strsignal(code - 128) + ")"
                     : "ended with exit code " + std::to_string(code);
      o = {store::RunStatus::failed,
           "rank " + std::to_string(r) + " " + how + " after rank 0 stored the run"};
      if (!uuid.empty()) db.finish_run(uuid, store::RunStatus::failed, RunSummary{}, o.line);
    }
  display.end_run(o.line);
  return o;
}

// `run --parallel N` / `--gpus`: each selected run not yet complete is
// trained by a child `xrun run --only I` into the same store, up to one per
// slot at once (runner/parallel_runs.h). The final table is read back from
// the store.
int run_parallel(const RunArgs& args, const Plan& plan, const std::vector<const RunSpec*>& selected,
                 const std::string& db_path, const SlotPlan& slots,
                 const std::string& experiment_text) {
  const auto device_of = [](const RunSpec* s) {
    return s->config.at("train").at("device").get<std::string>();
  };
  if (!args.gpus.empty()) {
    for (const RunSpec* spec : selected)
      if (device_of(spec) == "cpu") {
        std::cerr << "xrun: --gpus gives each run a GPU, but run #" << spec->index
                  << " trains on the cpu (train.device); use --parallel N for CPU runs\n";
        return kUsage;
      }
    for (const RunSpec* spec : selected)
      if (const std::string d = device_of(spec); d.rfind("cuda:", 0) == 0 && d != "cuda:0") {
        std::cerr << "xrun: --gpus gives each run one GPU, which it sees as cuda:0; run #"
                  << spec->index << " asks for " << d << ": set train.device = \"cuda\"\n";
        return kUsage;
      }
  }
  ProgressDisplay display(stderr);
  for (const std::string& notice : plan.notices) display.message(notice);
  for (const std::string& note : slots.notes) display.message(note);
  if (args.gpus.empty() && slots.slots.size() > 1 &&
      std::any_of(selected.begin(), selected.end(),
                  [&](const RunSpec* s) { return device_of(s) != "cpu"; }))
    display.message("GPU runs started side by side share their GPU; --gpus 0,1,... gives each "
                    "its own");

  std::string exe;
  {
    std::error_code ec;
    exe = std::filesystem::read_symlink("/proc/self/exe", ec).string();
    if (ec) {
      std::cerr << "xrun: --parallel: cannot find this program's path (/proc/self/exe: "
                << ec.message() << ")\n";
      return kRunFailed;
    }
  }

  Outcomes outcomes;
  std::vector<ChildRun> children;
  std::map<int, int64_t> last_id_before;  // run index -> newest stored id of its config
  std::unique_ptr<store::Store> db;
  try {
    db = open_for_training(db_path, display);
    if (!db) return kRunFailed;
    for (const RunSpec* spec : selected)
      if (auto skipped = already_complete(*db, *spec, args.force, display)) {
        outcomes.push_back({spec, *skipped});
      } else {
        const auto earlier = db->list_runs({{"config_hash", spec->config_hash}});
        last_id_before[spec->index] = earlier.empty() ? 0 : earlier.back().id;
        outcomes.push_back({spec, {store::RunStatus::running, ""}});
      }
  } catch (const store::StoreError& e) {
    std::cerr << "xrun: store: " << e.what() << "\n";
    return kRunFailed;
  }
  const int to_train = static_cast<int>(last_id_before.size());
  // The children read the bytes this process planned, not the file again:
  // a FIFO or <(...) gives its bytes once, and a file edited meanwhile
  // would train something else.
  const FrozenExperiment frozen(experiment_text);
  if (to_train > 0 && !frozen.ok()) {
    std::cerr << "xrun: --parallel: cannot write a copy of " << plan.file << " for the runs in "
              << frozen.path() << ": " << frozen.error() << "\n";
    return kRunFailed;
  }
  int position = 0;
  for (const auto& [spec, o] : outcomes) {
    if (!last_id_before.count(spec->index)) continue;
    ChildRun c;
    c.index = spec->index;
    c.argv = {exe, "run", frozen.path(), "--experiment-path", plan.file, "--db", db_path,
              "--only", std::to_string(spec->index),
              "--expect-config", spec->config_hash, "--sweep-position",
              std::to_string(++position) + "/" + std::to_string(to_train),
              "--cpu-threads-per-run", std::to_string(slots.cpu_threads)};
    for (const std::string& set : args.sets) c.argv.insert(c.argv.end(), {"--set", set});
    if (args.force) c.argv.push_back("--force");
    c.pin = device_of(spec) == "cpu" &&
            spec->config.at("train").at("threads").get<int>() == slots.cpu_threads;
    children.push_back(std::move(c));
  }
  if (!children.empty()) {
    std::string how = std::to_string(children.size()) + " run(s), up to " +
                      std::to_string(std::min(children.size(), slots.slots.size())) + " at once";
    if (!args.gpus.empty()) {
      how += ", one per GPU:";
      for (const Slot& s : slots.slots) how += " " + s.gpu;
    } else if (!slots.slots.front().cpus.empty()) {
      how += "; a CPU run with train.threads = 0 trains with " + std::to_string(slots.cpu_threads) +
             " thread(s) on cores of its own:";
      for (const Slot& s : slots.slots) how += " " + cpu_list_text(s.cpus);
    }
    display.message(how);
  }
  const ChildrenOutcome done = run_children(children, slots.slots, stderr);

  // What each child left in the store: the row it began (by its pid).
  bool failed = false, interrupted = done.stop_signal != 0;
  try {
    for (const ChildEnd& end : done.ends) {
      auto it = std::find_if(outcomes.begin(), outcomes.end(),
                             [&](const auto& o) { return o.first->index == end.index; });
      Outcome& o = it->second;
      o = child_outcome(*db, *it->first, end, last_id_before[end.index], done.stop_signal != 0,
                        exe);
      failed = failed || o.status == store::RunStatus::failed;
      interrupted = interrupted || (!o.skipped && (o.status == store::RunStatus::interrupted ||
                                                   o.status == store::RunStatus::running));
    }
  } catch (const store::StoreError& e) {
    std::cerr << "xrun: store: " << e.what() << "\n";
    return kRunFailed;
  }
  print_outcomes(plan, outcomes, db_path);
  if (done.stop_signal != 0) return 128 + done.stop_signal;
  if (interrupted) return kInterrupted;
  return failed ? kRunFailed : kOk;
}

}  // namespace

int run_command(const RunArgs& args) {
  // What --parallel gives its children, refused as train.threads would be
  // (libgomp aborts or crashes on 100000 threads, leaving the run `running`).
  if (const double most = schema::find("train.threads")->range.max;
      args.cpu_threads_per_run < 0 || args.cpu_threads_per_run > most) {
    std::cerr << "xrun: --cpu-threads-per-run " << args.cpu_threads_per_run
              << ": expected 0 to " << static_cast<int>(most) << ", as train.threads\n";
    return kUsage;
  }
  const bool parallel = args.in_parallel();
  SlotPlan slots;
  if (parallel) {
    if (const std::string problem = plan_slots(args.parallel, args.gpus, usable_cpus(), slots);
        !problem.empty()) {
      std::cerr << "xrun: " << problem << "\n";
      return kUsage;
    }
  }
  Plan plan;
  PlanOptions options = plan_options(args.sets);
  options.cpu_threads_per_run = parallel ? slots.cpu_threads : args.cpu_threads_per_run;
  options.device_check = [](const nlohmann::json&, const std::string& device) {
    return device_problem(device);
  };
  // The file is read once: a FIFO gives its bytes once, and --parallel hands
  // the same bytes to its children. A child reads its parent's frozen copy
  // and names the file as the user did.
  std::string experiment_text;
  try {
    experiment_text = read_experiment_text(args.file);
    plan = load_plan_from_string(
        experiment_text, args.experiment_path.empty() ? args.file : args.experiment_path, options);
  } catch (const ExperimentError& e) {
    std::cerr << "xrun: " << e.what() << "\n";
    return kUsage;
  }
  std::vector<const RunSpec*> selected;
  if (const std::string problem = select_runs(plan, args.only, selected); !problem.empty()) {
    std::cerr << "xrun: " << problem << "\n";
    return kUsage;
  }
  // A child of --parallel trains what its parent planned, or nothing.
  const bool child = !args.expect_config.empty();
  if (child && (selected.size() != 1 || selected[0]->config_hash != args.expect_config)) {
    std::cerr << "xrun: " << plan.file << " changed after `xrun run --parallel` planned it: run #"
              << (selected.empty() ? -1 : selected[0]->index) << " is now ["
              << (selected.empty() ? "" : short_hash(selected[0]->config_hash)) << "], it was ["
              << short_hash(args.expect_config) << "]; not trained\n";
    return kUsage;
  }
  const std::string db_path =
      !args.db.empty() ? args.db : plan.runs.front().config.at("store").at("path").get<std::string>();

  if (std::error_code ec; std::filesystem::is_directory(db_path, ec)) {
    std::cerr << "xrun: --db " << db_path << " is a directory; give a file (" << db_path
              << "/xrun.db)\n";
    return kUsage;
  }
  if (std::error_code ec; std::filesystem::exists(db_path, ec) &&
                          !std::filesystem::is_regular_file(db_path, ec)) {
    std::cerr << "xrun: --db " << db_path
              << " is not a regular file (a FIFO, device or socket); give a store file\n";
    return kUsage;
  }
  if (std::string problem = check_output_paths(plan, selected, db_path); !problem.empty()) {
    std::cerr << "xrun: " << problem << "\n";
    return kUsage;
  }
  const auto ranks_of = [](const RunSpec* spec) { return planned_ranks(*spec); };
  const auto launched = [](const RunSpec* spec) { return trained_by_ranks(*spec); };
  const bool any_ranked = std::any_of(selected.begin(), selected.end(), launched);
  if (parallel && any_ranked) {
    std::cerr << "xrun: --parallel trains several runs at once; a run with train.ranks > 1 (or "
                 "a distributed.backend) takes processes of its own: run it without --parallel\n";
    return kUsage;
  }
  if (parallel) return run_parallel(args, plan, selected, db_path, slots, experiment_text);

  // A rank of a run with train.ranks > 1 (a child of run_ranks, told by the
  // environment): rank 0 trains and stores as below, the others only train.
  dist::RankInfo rank;
  try {
    rank = dist::rank_info_from_environment();
  } catch (const std::invalid_argument& e) {
    std::cerr << "xrun: " << e.what() << "\n";
    return kUsage;
  }
  const bool is_rank = rank.launched;
  // `xrun run`'s ranks are its children (--expect-config); Slurm's are the
  // tasks of one `xrun submit` job, each told one run (--only).
  const bool slurm_rank = is_rank && !std::getenv("XRUN_RANK");
  if (is_rank && (!(child || (slurm_rank && selected.size() == 1)) ||
                  ranks_of(selected[0]) != rank.size)) {
    std::cerr << "xrun: " << (slurm_rank ? "XRUN_RANKS_FROM=slurm" : "XRUN_RANK")
              << " is set (a rank of a run with train.ranks = " << rank.size
              << ") but this is not one such run as `xrun run` or `xrun submit` starts its "
                 "ranks\n";
    return kUsage;
  }
  if (is_rank && !rank.timeout_given)
    rank.timeout = std::chrono::seconds(
        selected[0]->config.at("distributed").value("timeout_s", 120));
  if (is_rank && rank.rank > 0) return run_rank_worker(*selected[0], rank);
  // The ranks of a run read the bytes this process planned, as --parallel's
  // children do.
  std::optional<FrozenExperiment> frozen;
  if (any_ranked && !is_rank) {
    frozen.emplace(experiment_text);
    if (!frozen->ok()) {
      std::cerr << "xrun: cannot write a copy of " << plan.file << " for the ranks in "
                << frozen->path() << ": " << frozen->error() << "\n";
      return kRunFailed;
    }
  }

  // Where the runs stand in the list the user sees ("run 3/8"): a child of
  // --parallel is told its place in its parent's list.
  int position = 0, count = static_cast<int>(selected.size());
  if (child) std::sscanf(args.sweep_position.c_str(), "%d/%d", &position, &count);

  ProgressDisplay display(stderr);
  for (const std::string& notice : plan.notices) display.message(notice);
  Outcomes outcomes;
  bool failed = false, interrupted = false;
  try {
    const auto db = open_for_training(db_path, display);
    if (!db) return kRunFailed;
    std::optional<InterruptGuard> guard;
    guard.emplace();
    for (const RunSpec* spec : selected) {
      const int at = child ? position : ++position;
      if (auto skipped = already_complete(*db, *spec, args.force, display)) {
        outcomes.push_back({spec, *skipped});
        continue;
      }
      if (launched(spec) && !is_rank) {
        // The ranks' launcher passes stop signals on itself (run_children).
        if (g_interrupts.load() > 0) {
          interrupted = true;
          break;
        }
        guard.reset();
        int stop_signal = 0;
        Outcome o = run_ranks(*db, plan, *spec, args, db_path, frozen->path(), at, count,
                              display, stop_signal);
        guard.emplace();
        failed = failed || o.status == store::RunStatus::failed;
        outcomes.push_back({spec, o});
        if (stop_signal != 0 || o.status == store::RunStatus::interrupted) {
          if (stop_signal != 0) g_signal = stop_signal;
          interrupted = true;
          break;
        }
        continue;
      }
      Outcome o = run_one(*db, plan, *spec, at, count, args.force, display,
                          is_rank ? &rank : nullptr);
      failed = failed || o.status == store::RunStatus::failed;
      outcomes.push_back({spec, o});
      if (o.status == store::RunStatus::interrupted) {
        interrupted = true;
        break;
      }
    }
  } catch (const store::StoreError& e) {
    std::cerr << "xrun: store: " << e.what() << "\n";
    return kRunFailed;
  }

  if (!child) print_outcomes(plan, outcomes, db_path);  // the parent prints the table
  if (interrupted) return interrupted_exit_code();
  return failed ? kRunFailed : kOk;
}

}  // namespace xrun::cli
