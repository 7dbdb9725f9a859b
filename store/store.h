// store/store.h: the SQLite result store. One file holds experiments, runs
// (one UUID each), their flattened parameters, per-step and per-epoch records,
// phase/kernel totals and environment. Versioned schema (PRAGMA user_version)
// with forward migrations, WAL and busy_timeout so several xrun processes can
// share one file. See README.md ("The store") for the schema and queries.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/records.h"
#include "core/run_observer.h"

struct sqlite3;

namespace xrun::store {

namespace detail {
class Transaction;
}

// Any SQLite failure, a foreign or corrupt file, a schema newer than this
// build. what() names the file and the failing statement.
class StoreError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// begin_run found another live xrun process on this host training the same
// config (a `running` row whose process exists): the caller skips it.
class RunInProgress : public std::runtime_error {
 public:
  RunInProgress(int64_t pid, const std::string& uuid)
      : std::runtime_error("being trained by process " + std::to_string(pid) + " (" + uuid + ")"),
        pid(pid), uuid(uuid) {}
  int64_t pid;
  std::string uuid;
};

// begin_run (without NewRun::force) found the config already complete: a
// process that finished it between the caller's check and the write lock.
class RunAlreadyComplete : public std::runtime_error {
 public:
  explicit RunAlreadyComplete(const std::string& uuid)
      : std::runtime_error("already complete (" + uuid + ")"), uuid(uuid) {}
  std::string uuid;
};

enum class RunStatus { planned, running, complete, failed, interrupted };
const char* to_string(RunStatus s);
RunStatus run_status_from_string(const std::string& s);  // throws StoreError

// What the runner knows when a run starts.
struct NewRun {
  std::string experiment;       // experiment name from the file
  std::string experiment_file;  // path as given
  std::string description;
  int sweep_index = 0;
  std::string config_json;      // canonical resolved config
  std::string config_hash;      // identifies completeness (device + label included)
  std::string experiment_hash;  // same experiment on any machine
  std::string label;            // store.label
  std::string device;           // resolved train.device ("cpu", "cuda:0")
  // Flattened resolved settings: dotted key -> value as canonical JSON text
  // ("train.batch_size" -> "512", "train.precision" -> "\"fp16\"").
  std::map<std::string, std::string> params;
  Environment environment;
  bool force = false;  // train it again even when a complete run of config_hash exists
};

// One row of `xrun runs` / the run_summary view.
struct RunInfo {
  int64_t id = 0;
  std::string uuid;
  std::string experiment;
  int sweep_index = 0;
  std::string status;
  std::string label;
  std::string device;       // "cpu", "cuda:0"
  std::string device_name;  // "NVIDIA GeForce RTX 4090 D", "AMD EPYC ..."
  std::string config_hash, experiment_hash;
  std::string started_at, finished_at;  // ISO 8601 UTC
  int batch_size = 0;
  std::string precision;
  std::string cudnn_benchmark;
  int workers = 0;
  // NaN when the run stored no figures (failed or interrupted before its
  // measured steps).
  double throughput = 0;    // img/s, or tok/s where throughput_unit says so
  // What the throughput counts: "images/s", or "tokens/s" (a GPT-2 run's
  // environment says so; runs stored before it said anything count images).
  std::string throughput_unit = "images/s";
  double step_ms_median = 0, step_ms_p10 = 0, step_ms_p90 = 0;
  int64_t peak_memory_bytes = 0;
  double test_accuracy = 0; // NaN when none
  double final_loss = 0;
  std::string error;
  // FLOP/s over the measured steps, the device's peak for the run's precision
  // and their ratio; NaN where not known (schema 9's run_summary columns).
  double achieved_flops = 0, peak_flops = 0, fraction_of_peak = 0;
  // measure.target_accuracy and the wall time to it (NaN: none, not reached).
  double target_accuracy = 0, time_to_target_s = 0;
  // Processes that trained the run and its images per optimizer step over
  // all of them (schema 10; 1 and 0 for runs stored before).
  int ranks = 1;
  int64_t global_batch = 0;
};

// A table column's label for these runs' throughputs: "img/s", "tok/s", or
// "img|tok/s" where both kinds are among them.
std::string throughput_label(const std::vector<const RunInfo*>& runs);

// Everything `xrun show` prints about one run.
struct RunDetail {
  RunInfo info;
  std::string description;
  std::string experiment_file;
  std::string config_json;
  std::map<std::string, std::string> params;
  Environment environment;
  RunSummary summary;
  bool has_summary = false;  // false: the run ended before storing figures
  std::vector<EpochRecord> epochs;
  std::vector<EvalRecord> evals;  // every evaluation, in order (schema 9)
  std::vector<PhaseRecord> phases;
  std::vector<KernelRecord> kernels;
  std::vector<MemcpyRecord> memcpy;
  std::vector<MemoryRecord> memory;
  std::vector<ConvAlgoRecord> conv_algorithms;
  std::vector<FindingRecord> findings;
  std::vector<LayerCostRecord> layer_costs;  // forward order (schema 9)
  std::vector<RankRecord> ranks;  // a run of several ranks: each, in order (schema 10)
  int64_t step_count = 0;
  std::string host;
  int64_t pid = 0;
};

class Store {
 public:
  enum class Access {
    read_write,  // opens or creates, WAL, migrates the file forward
    read_only,   // an existing store as it is: never written, never created;
                 // works in a read-only directory; an older schema is
                 // migrated in a private in-memory copy
  };
  // Opens the file (read_write: creating it if absent, WAL, busy_timeout,
  // migrations in one transaction each). Throws StoreError for a file that
  // is not an SQLite database, not an xrun store, or newer than this build,
  // and (read_only) for an empty one.
  explicit Store(const std::string& path, Access access = Access::read_write);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  const std::string& path() const { return path_; }
  int schema_version() const;
  static int latest_schema_version();

  // Runs. begin_run inserts the experiment if new and a run row with status
  // running, the current host and pid, and returns its new UUID. Throws
  // RunInProgress, writing nothing, when another live process on this host
  // has a `running` row of the same config hash, and (unless run.force)
  // RunAlreadyComplete when a complete one exists: both checked under the
  // write lock, so two processes given one sweep never train one config
  // twice, even when one finishes it just as the other reaches it.
  std::string begin_run(const NewRun& run);
  void set_environment(const std::string& uuid, const Environment& env);
  void write_steps(const std::string& uuid, std::span<const StepRecord> steps);
  void write_epoch(const std::string& uuid, const EpochRecord& epoch);
  void write_eval(const std::string& uuid, const EvalRecord& eval);
  void write_phases(const std::string& uuid, std::span<const PhaseRecord> phases);
  void write_kernels(const std::string& uuid, std::span<const KernelRecord> kernels);
  void write_memcpy(const std::string& uuid, std::span<const MemcpyRecord> copies);
  void write_memory(const std::string& uuid, std::span<const MemoryRecord> regions);
  // CUDA: the run's convolution algorithm choices; timed ones (source
  // "benchmark") also go into the cache of `device_key` (card, driver, cuDNN).
  void write_conv_algorithms(const std::string& uuid, std::span<const ConvAlgoRecord> records,
                             const std::string& device_key);
  void write_layer_costs(const std::string& uuid, std::span<const LayerCostRecord> costs);
  void write_ranks(const std::string& uuid, std::span<const RankRecord> ranks);
  void write_findings(const std::string& uuid, std::span<const FindingRecord> findings);
  void write_trace(const std::string& uuid, std::span<const TraceEvent> events);
  std::vector<TraceEvent> get_trace(const std::string& uuid) const;
  // The cached choices for a device, by ConvAlgoRecord::key.
  std::map<std::string, ConvAlgoChoice> conv_algo_cache(const std::string& device_key) const;
  // `xrun doctor --peak`'s measurements, one row per CPU, ISA and thread
  // count (a new one replaces the old; measured_at is set here).
  void put_cpu_peak(const CpuPeakRecord& peak);
  std::optional<CpuPeakRecord> cpu_peak(const std::string& cpu, const std::string& isa,
                                        int threads) const;
  // Groups every write made through this Store until commit() into one
  // transaction (the write_* calls nest as savepoints), so a crash or an
  // error between a run's tables never leaves part of them, nor a run marked
  // complete without its results. Destroying it uncommitted rolls back.
  class Batch {
   public:
    explicit Batch(Store& store);
    ~Batch();
    Batch(const Batch&) = delete;
    Batch& operator=(const Batch&) = delete;
    void commit();

   private:
    std::unique_ptr<detail::Transaction> tx_;
  };

  // Ends a run: status, summary figures (for complete runs) and error text.
  void finish_run(const std::string& uuid, RunStatus status, const RunSummary& summary,
                  const std::string& error = "");

  // PRAGMA quick_check: "" when the file is sound, else what SQLite found
  // (first lines). Run before training, so a corrupt store is found before
  // hours of work, not after.
  std::string quick_check() const;

  // The UUID of a complete run with this config hash, if any.
  std::optional<std::string> find_complete(const std::string& config_hash) const;
  // (pid, uuid) of a `running` row of this config whose process still lives
  // on this host (what begin_run throws RunInProgress for), if any.
  std::optional<std::pair<int64_t, std::string>> find_in_progress(const std::string& config_hash) const;
  // The same by experiment hash (the run on any machine: device, label and
  // data path aside), for work planned on one host and run on another.
  std::optional<std::string> find_complete_experiment(const std::string& experiment_hash) const;
  // Runs left `running` on this host by a process that no longer exists are
  // marked interrupted. Returns how many.
  int mark_stale_runs_interrupted();

  // Queries. `where` filters on flattened parameters or run columns:
  // ("train.precision", "fp16"), ("label", "4090D-box"), ("status", "complete").
  std::vector<RunInfo> list_runs(
      const std::vector<std::pair<std::string, std::string>>& where = {}) const;
  // Every key list_runs can filter on in this store: the run columns and the
  // setting keys its runs have stored.
  std::vector<std::string> filter_keys() const;
  // By integer id or a unique UUID prefix (at least 4 characters).
  // Throws StoreError when the prefix is ambiguous; nullopt when none matches.
  std::optional<RunDetail> get_run(const std::string& id_or_uuid) const;
  std::vector<StepRecord> get_steps(const std::string& uuid) const;

  sqlite3* handle() const { return db_; }

 private:
  std::string path_;
  sqlite3* db_ = nullptr;
};

// Writes step records from a background thread in batched transactions so the
// training thread never waits on SQLite. Owns its own connection. As a run
// observer it takes each step as the step ends.
class StepWriter final : public RunObserver {
 public:
  StepWriter(const std::string& db_path, std::string uuid, size_t batch_size = 64);
  ~StepWriter() override;  // flushes; never throws
  void on_step_end(const StepRecord& step) override { push(step); }
  void push(const StepRecord& step);  // cheap; never touches SQLite
  void flush();                       // blocks until everything pushed is written;
                                      // rethrows a write error from the thread
  // True once a batch has failed (a full disk): the caller stops training,
  // since nothing more it produces can be stored.
  bool failing() const;
 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace xrun::store
