// store/schema.cpp: the store's schema as a list of numbered forward
// migrations, and opening a file safely (reject what is not ours, then WAL,
// then migrate). PRAGMA user_version holds the number of the last migration
// applied; PRAGMA application_id = 'xrun' marks the file as an xrun store.
//
// Schema at the latest version (10):
//
//   experiments(id, name, file, description, first_seen)  UNIQUE(name, file)
//   runs(id INTEGER PK, uuid UNIQUE (random v4), experiment -> experiments.id,
//        sweep_index, status planned|running|complete|failed|interrupted,
//        config_json, config_hash, experiment_hash, label, device ("cpu",
//        "cuda:0"), host, pid, started_at, finished_at (ISO 8601 UTC,
//        "2025-01-31T12:00:00.000Z"), error,
//        environment copies: device_name, device_uuid, compute_capability,
//          driver, cuda_runtime, cudnn, cublas, onednn, xrun_version,
//          git_commit, cpu,
//        summary (NULL until finished): batch_size, measured_steps,
//          measured_images, measured_seconds, throughput (img/s),
//          step_ms_median, step_ms_p10, step_ms_p90, step_ms_mean,
//          step_ms_stddev, step_outliers, data_wait_fraction,
//          peak_memory_bytes, skipped_steps, final_loss, test_accuracy,
//          test_loss)
//   run_params(run, key, value, value_json)  one row per flattened setting:
//        key   "train.precision"
//        value plain text: JSON strings without quotes ("fp16"), numbers and
//              booleans as JSON writes them ("512", "0.001", "true"), NULL
//              for JSON null. Filter with  key='train.precision' AND value='fp16'.
//        value_json the canonical JSON text ("\"fp16\"", "512").
//   run_environment(run, key, value)  every Environment field of the run
//   steps(run, step, epoch, kind warmup|measured|unmeasured, step_ms,
//         data_wait_ms, loss, lr, loss_scale, images, skipped 0|1)
//   epochs(run, epoch, train_loss, test_loss, test_accuracy, seconds,
//          eval_seconds, images)
//   phases(run, phase, calls, host_ms, gpu_ms)                 [version 2]
//   kernels(run, name, phase, calls, total_ms, min_ms, max_ms)  [version 2]
//   memory(run, region, bytes)  the run's memory plan by region  [version 3]
//   conv_algorithms(run, layer, pass, key, algo, algo_name, math_type,
//        workspace_bytes, time_ms, source)  CUDA: each convolution's choice
//   conv_algo_cache(device_key, key, algo, math_type, workspace_bytes,
//        time_ms, updated_at)  timed choices by card+driver+cuDNN, reused by
//        cudnn_benchmark = "cached"; runs.algo_search_ms  [version 4]
//   findings(run, check_name, message, value)  troubleshooting checks  [version 5]
//   trace_events(run, seq, track, name, start_ns, dur_ns, payload, depth)
//        profile.cupti = "trace": the ranges of a window of measured steps  [version 6]
//   memcpy(run, direction, memory, count, bytes, total_ms)  CUPTI: copies per
//        direction and host memory kind; runs.cupti_overhead, runs.cupti_steps;
//        trace_events.flow (launch -> kernel correlation id)  [version 7]
//   runs.flops_per_step: the FLOPs of one optimizer step, counted from the
//        model's layer shapes (NULL for runs stored before); runs.peak_flops,
//        runs.peak_source: the device's peak for the run's precision;
//   cpu_peaks(cpu, isa, threads, fp32_flops, bf16_flops, copy_bytes_per_s,
//        kernels, measured_at)  `xrun doctor --peak`'s measurements  [version 8]
//   runs.peak_bytes_per_s, runs.peak_bandwidth_source: the device's memory
//        bandwidth peak and where it came from; run_summary gains
//        flops_per_step, achieved_flops, peak_flops, fraction_of_peak,
//        peak_bytes_per_s, target_accuracy, time_to_target_s, best_accuracy
//   evals(run, step, epoch, images, wall_seconds, eval_seconds, test_loss,
//        test_accuracy)  every evaluation (epoch ends, train.eval_every),
//        timed from the first step; runs.target_accuracy, time_to_target_s,
//        time_to_target_eval_s, epochs_to_target, steps_to_target,
//        images_to_target (the first evaluation at or above the target; NULL
//        when never reached), best_accuracy; runs.lr: the peak learning
//        rate after train.optimizer.lr_scaling;
//   layer_costs(run, layer, pass, flops, bytes)  each layer's FLOPs and least
//        bytes per pass of a micro-batch, from the model's shapes (the
//        roofline's x and y with profile.layers' times)  [version 9]
//   runs.ranks, runs.global_batch: processes that trained the run
//        (train.ranks) and images per optimizer step over all of them;
//   ranks(run, rank, host, device, step_ms_median, data_wait_ms,
//        allreduce_ms, bytes_reduced, bus_bytes_per_s)  each rank of a run
//        trained by several, over the measured steps  [version 10]
//   view run_summary: one row per run: id, uuid, experiment (name),
//        sweep_index, label, device, device_name, batch_size (summary, else
//        run_params train.batch_size), precision, cudnn_benchmark, workers
//        (run_params train.precision, train.cudnn_benchmark, data.workers),
//        throughput, step_ms_median, step_ms_p10, step_ms_p90,
//        peak_memory_bytes, test_accuracy, final_loss, status, started_at,
//        finished_at, config_hash, experiment_hash, host, error   [version 2],
//        flops_per_step, achieved_flops (FLOP/s over the measured steps),
//        peak_flops, fraction_of_peak (achieved / peak), peak_bytes_per_s,
//        target_accuracy, time_to_target_s, best_accuracy  [version 9],
//        ranks, global_batch  [version 10]
//
// Real numbers that are NaN are stored as NULL. Child rows reference
// runs(id) with ON DELETE CASCADE.
//
// Adding a migration: append a step to kMigrations; never edit a released
// one. A step that changes run_summary drops and recreates the view.
#include "store/schema.h"

#include <sqlite3.h>

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <chrono>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "store/sqlite_util.h"

namespace xrun::store::detail {
namespace {

// --- Migrations -------------------------------------------------------------------

// Version 1: experiments, runs (with environment and summary columns),
// flattened parameters, environment, steps and epochs.
constexpr const char* kVersion1 = R"sql(
CREATE TABLE experiments (
  id          INTEGER PRIMARY KEY,
  name        TEXT NOT NULL,
  file        TEXT NOT NULL,
  description TEXT NOT NULL DEFAULT '',
  first_seen  TEXT NOT NULL,
  UNIQUE (name, file)
);
CREATE TABLE runs (
  id                 INTEGER PRIMARY KEY,
  uuid               TEXT NOT NULL UNIQUE,
  experiment         INTEGER NOT NULL REFERENCES experiments(id),
  sweep_index        INTEGER NOT NULL DEFAULT 0,
  status             TEXT NOT NULL
                     CHECK (status IN ('planned','running','complete','failed','interrupted')),
  config_json        TEXT NOT NULL,
  config_hash        TEXT NOT NULL,
  experiment_hash    TEXT NOT NULL,
  label              TEXT NOT NULL DEFAULT '',
  device             TEXT NOT NULL DEFAULT '',
  host               TEXT NOT NULL DEFAULT '',
  pid                INTEGER,
  started_at         TEXT,
  finished_at        TEXT,
  error              TEXT,
  device_name        TEXT,
  device_uuid        TEXT,
  compute_capability TEXT,
  driver             TEXT,
  cuda_runtime       TEXT,
  cudnn              TEXT,
  cublas             TEXT,
  onednn             TEXT,
  xrun_version       TEXT,
  git_commit         TEXT,
  cpu                TEXT,
  batch_size         INTEGER,
  measured_steps     INTEGER,
  measured_images    INTEGER,
  measured_seconds   REAL,
  throughput         REAL,
  step_ms_median     REAL,
  step_ms_p10        REAL,
  step_ms_p90        REAL,
  step_ms_mean       REAL,
  step_ms_stddev     REAL,
  step_outliers      INTEGER,
  data_wait_fraction REAL,
  peak_memory_bytes  INTEGER,
  skipped_steps      INTEGER,
  final_loss         REAL,
  test_accuracy      REAL,
  test_loss          REAL
);
CREATE TABLE run_params (
  run        INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  key        TEXT NOT NULL,
  value      TEXT,
  value_json TEXT NOT NULL,
  PRIMARY KEY (run, key)
) WITHOUT ROWID;
CREATE TABLE run_environment (
  run   INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  key   TEXT NOT NULL,
  value TEXT NOT NULL,
  PRIMARY KEY (run, key)
) WITHOUT ROWID;
CREATE TABLE steps (
  run          INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  step         INTEGER NOT NULL,
  epoch        INTEGER NOT NULL,
  kind         TEXT NOT NULL CHECK (kind IN ('warmup','measured','unmeasured')),
  step_ms      REAL,
  data_wait_ms REAL,
  loss         REAL,
  lr           REAL,
  loss_scale   REAL,
  images       INTEGER NOT NULL DEFAULT 0,
  skipped      INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (run, step)
) WITHOUT ROWID;
CREATE TABLE epochs (
  run           INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  epoch         INTEGER NOT NULL,
  train_loss    REAL,
  test_loss     REAL,
  test_accuracy REAL,
  seconds       REAL,
  eval_seconds  REAL,
  images        INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (run, epoch)
) WITHOUT ROWID;
)sql";

// Version 2: phase and kernel totals, indexes for the runner's look-ups and
// parameter filters, and the run_summary view.
constexpr const char* kVersion2 = R"sql(
CREATE TABLE phases (
  run     INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  phase   TEXT NOT NULL,
  calls   INTEGER NOT NULL DEFAULT 0,
  host_ms REAL,
  gpu_ms  REAL,
  UNIQUE (run, phase)
);
CREATE TABLE kernels (
  run      INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  name     TEXT NOT NULL,
  phase    TEXT NOT NULL DEFAULT '',
  calls    INTEGER NOT NULL DEFAULT 0,
  total_ms REAL,
  min_ms   REAL,
  max_ms   REAL,
  UNIQUE (run, name, phase)
);
CREATE INDEX runs_by_config_hash ON runs (config_hash, status);
CREATE INDEX runs_by_status_host ON runs (status, host);
CREATE INDEX runs_by_experiment ON runs (experiment);
CREATE INDEX run_params_by_key_value ON run_params (key, value);
CREATE VIEW run_summary AS
SELECT
  r.id, r.uuid, e.name AS experiment, r.sweep_index, r.label, r.device, r.device_name,
  COALESCE(r.batch_size,
           (SELECT CAST(p.value AS INTEGER) FROM run_params p
             WHERE p.run = r.id AND p.key = 'train.batch_size' AND p.value GLOB '[0-9]*'))
    AS batch_size,
  (SELECT p.value FROM run_params p WHERE p.run = r.id AND p.key = 'train.precision')
    AS precision,
  (SELECT p.value FROM run_params p WHERE p.run = r.id AND p.key = 'train.cudnn_benchmark')
    AS cudnn_benchmark,
  (SELECT CAST(p.value AS INTEGER) FROM run_params p
    WHERE p.run = r.id AND p.key = 'data.workers' AND p.value GLOB '[0-9]*')
    AS workers,
  r.throughput, r.step_ms_median, r.step_ms_p10, r.step_ms_p90, r.peak_memory_bytes,
  r.test_accuracy, r.final_loss, r.status, r.started_at, r.finished_at,
  r.config_hash, r.experiment_hash, r.host, r.error
FROM runs r JOIN experiments e ON e.id = r.experiment;
)sql";

// Version 3: the memory plan of each run, by region (parameters, gradients,
// optimizer state, activations, workspace, ...).
constexpr const char* kVersion3 = R"sql(
CREATE TABLE memory (
  run    INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  region TEXT NOT NULL,
  bytes  INTEGER NOT NULL,
  UNIQUE (run, region)
);
)sql";

// Version 4: convolution algorithm choices (per run, and the cache shared by
// runs on the same card, driver and cuDNN version) and the time spent
// choosing them.
constexpr const char* kVersion4 = R"sql(
CREATE TABLE conv_algorithms (
  run             INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  layer           TEXT NOT NULL,
  pass            TEXT NOT NULL,
  key             TEXT NOT NULL,
  algo            INTEGER NOT NULL,
  algo_name       TEXT NOT NULL,
  math_type       INTEGER NOT NULL,
  workspace_bytes INTEGER NOT NULL,
  time_ms         REAL,
  source          TEXT NOT NULL,
  UNIQUE (run, layer, pass)
);
CREATE TABLE conv_algo_cache (
  device_key      TEXT NOT NULL,
  key             TEXT NOT NULL,
  algo            INTEGER NOT NULL,
  math_type       INTEGER NOT NULL,
  workspace_bytes INTEGER NOT NULL,
  time_ms         REAL,
  updated_at      TEXT NOT NULL,
  PRIMARY KEY (device_key, key)
);
ALTER TABLE runs ADD COLUMN algo_search_ms REAL;
)sql";

// Version 5: the troubleshooting checks' findings per run.
constexpr const char* kVersion5 = R"sql(
CREATE TABLE findings (
  run        INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  check_name TEXT NOT NULL,
  message    TEXT NOT NULL,
  value      REAL,
  UNIQUE (run, check_name)
);
)sql";

// Version 6: trace windows (the timeline `xrun trace` exports).
constexpr const char* kVersion6 = R"sql(
CREATE TABLE trace_events (
  run      INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  seq      INTEGER NOT NULL,
  track    TEXT NOT NULL,
  name     TEXT NOT NULL,
  start_ns INTEGER NOT NULL,
  dur_ns   INTEGER NOT NULL,
  payload  INTEGER,
  depth    INTEGER NOT NULL,
  PRIMARY KEY (run, seq)
) WITHOUT ROWID;
)sql";

// Version 7: CUPTI figures. Copies and memsets per direction and host memory
// kind; the CUPTI overhead (step time traced / untraced - 1) and the number
// of traced steps the kernel and copy totals cover; a flow id joining a
// launch on a host track to its kernel on a GPU stream track.
constexpr const char* kVersion7 = R"sql(
CREATE TABLE memcpy (
  run       INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  direction TEXT NOT NULL,
  memory    TEXT NOT NULL,
  count     INTEGER NOT NULL DEFAULT 0,
  bytes     INTEGER NOT NULL DEFAULT 0,
  total_ms  REAL,
  UNIQUE (run, direction, memory)
);
ALTER TABLE runs ADD COLUMN cupti_overhead REAL;
ALTER TABLE runs ADD COLUMN cupti_steps INTEGER;
ALTER TABLE trace_events ADD COLUMN flow INTEGER;
)sql";

// Version 8: the FLOPs of one optimizer step, so a run's achieved FLOP/s can
// be read beside its img/s, and the device's peak it is a share of; the
// CPU peaks `xrun doctor --peak` measured.
constexpr const char* kVersion8 = R"sql(
ALTER TABLE runs ADD COLUMN flops_per_step REAL;
ALTER TABLE runs ADD COLUMN peak_flops REAL;
ALTER TABLE runs ADD COLUMN peak_source TEXT;
CREATE TABLE cpu_peaks (
  cpu              TEXT NOT NULL,
  isa              TEXT NOT NULL,
  threads          INTEGER NOT NULL,
  fp32_flops       REAL,
  bf16_flops       REAL,
  copy_bytes_per_s REAL,
  kernels          TEXT,
  measured_at      TEXT NOT NULL,
  PRIMARY KEY (cpu, isa, threads)
);
)sql";

// Version 9: the device's memory bandwidth peak (the roofline's second roof)
// beside its FLOP/s peak; every evaluation with its wall time and the time to
// a target accuracy (measure.target_accuracy); the efficiency figures in
// run_summary.
constexpr const char* kVersion9 = R"sql(
ALTER TABLE runs ADD COLUMN peak_bytes_per_s REAL;
ALTER TABLE runs ADD COLUMN peak_bandwidth_source TEXT;
CREATE TABLE evals (
  run           INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  step          INTEGER NOT NULL,
  epoch         INTEGER NOT NULL,
  images        INTEGER NOT NULL,
  wall_seconds  REAL,
  eval_seconds  REAL,
  test_loss     REAL,
  test_accuracy REAL,
  UNIQUE (run, step)
);
ALTER TABLE runs ADD COLUMN target_accuracy REAL;
ALTER TABLE runs ADD COLUMN time_to_target_s REAL;
ALTER TABLE runs ADD COLUMN time_to_target_eval_s REAL;
ALTER TABLE runs ADD COLUMN epochs_to_target REAL;
ALTER TABLE runs ADD COLUMN steps_to_target INTEGER;
ALTER TABLE runs ADD COLUMN images_to_target INTEGER;
ALTER TABLE runs ADD COLUMN best_accuracy REAL;
ALTER TABLE runs ADD COLUMN lr REAL;
CREATE TABLE layer_costs (
  run   INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  layer TEXT NOT NULL,
  pass  TEXT NOT NULL,
  flops REAL,
  bytes REAL,
  UNIQUE (run, layer, pass)
);
DROP VIEW run_summary;
CREATE VIEW run_summary AS
SELECT
  r.id, r.uuid, e.name AS experiment, r.sweep_index, r.label, r.device, r.device_name,
  COALESCE(r.batch_size,
           (SELECT CAST(p.value AS INTEGER) FROM run_params p
             WHERE p.run = r.id AND p.key = 'train.batch_size' AND p.value GLOB '[0-9]*'))
    AS batch_size,
  (SELECT p.value FROM run_params p WHERE p.run = r.id AND p.key = 'train.precision')
    AS precision,
  (SELECT p.value FROM run_params p WHERE p.run = r.id AND p.key = 'train.cudnn_benchmark')
    AS cudnn_benchmark,
  (SELECT CAST(p.value AS INTEGER) FROM run_params p
    WHERE p.run = r.id AND p.key = 'data.workers' AND p.value GLOB '[0-9]*')
    AS workers,
  r.throughput, r.step_ms_median, r.step_ms_p10, r.step_ms_p90, r.peak_memory_bytes,
  r.test_accuracy, r.final_loss, r.status, r.started_at, r.finished_at,
  r.config_hash, r.experiment_hash, r.host, r.error,
  r.flops_per_step,
  CASE WHEN r.measured_seconds > 0 AND r.measured_steps > 0
       THEN r.flops_per_step * r.measured_steps / r.measured_seconds END AS achieved_flops,
  r.peak_flops,
  CASE WHEN r.measured_seconds > 0 AND r.measured_steps > 0 AND r.peak_flops > 0
       THEN r.flops_per_step * r.measured_steps / r.measured_seconds / r.peak_flops END
    AS fraction_of_peak,
  r.peak_bytes_per_s, r.target_accuracy, r.time_to_target_s, r.best_accuracy
FROM runs r JOIN experiments e ON e.id = r.experiment;
)sql";

constexpr const char* kVersion10 = R"sql(
ALTER TABLE runs ADD COLUMN ranks INTEGER;
ALTER TABLE runs ADD COLUMN global_batch INTEGER;
CREATE TABLE ranks (
  run             INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  rank            INTEGER NOT NULL,
  host            TEXT,
  device          TEXT,
  step_ms_median  REAL,
  data_wait_ms    REAL,
  allreduce_ms    REAL,
  bytes_reduced   REAL,
  bus_bytes_per_s REAL,
  UNIQUE (run, rank)
);
DROP VIEW run_summary;
CREATE VIEW run_summary AS
SELECT
  r.id, r.uuid, e.name AS experiment, r.sweep_index, r.label, r.device, r.device_name,
  COALESCE(r.batch_size,
           (SELECT CAST(p.value AS INTEGER) FROM run_params p
             WHERE p.run = r.id AND p.key = 'train.batch_size' AND p.value GLOB '[0-9]*'))
    AS batch_size,
  (SELECT p.value FROM run_params p WHERE p.run = r.id AND p.key = 'train.precision')
    AS precision,
  (SELECT p.value FROM run_params p WHERE p.run = r.id AND p.key = 'train.cudnn_benchmark')
    AS cudnn_benchmark,
  (SELECT CAST(p.value AS INTEGER) FROM run_params p
    WHERE p.run = r.id AND p.key = 'data.workers' AND p.value GLOB '[0-9]*')
    AS workers,
  r.throughput, r.step_ms_median, r.step_ms_p10, r.step_ms_p90, r.peak_memory_bytes,
  r.test_accuracy, r.final_loss, r.status, r.started_at, r.finished_at,
  r.config_hash, r.experiment_hash, r.host, r.error,
  r.flops_per_step,
  CASE WHEN r.measured_seconds > 0 AND r.measured_steps > 0
       THEN r.flops_per_step * r.measured_steps / r.measured_seconds END AS achieved_flops,
  r.peak_flops,
  CASE WHEN r.measured_seconds > 0 AND r.measured_steps > 0 AND r.peak_flops > 0
       THEN r.flops_per_step * r.measured_steps / r.measured_seconds / r.peak_flops END
    AS fraction_of_peak,
  r.peak_bytes_per_s, r.target_accuracy, r.time_to_target_s, r.best_accuracy,
  COALESCE(r.ranks, 1) AS ranks, r.global_batch
FROM runs r JOIN experiments e ON e.id = r.experiment;
)sql";


// kMigrations[i] takes a file from version i to version i + 1.
const std::vector<const char*> kMigrations = {kVersion1, kVersion2, kVersion3,
                                              kVersion4, kVersion5, kVersion6,
                                              kVersion7, kVersion8, kVersion9,
                                              kVersion10};

// --- Opening ----------------------------------------------------------------------

// What a file holds before we touch it.
struct FileState {
  int64_t application_id = 0;
  int64_t version = 0;
  int64_t objects = 0;     // entries in sqlite_master
  std::string tables;      // a few table names, for the "foreign" message
};

FileState read_state(sqlite3* db, const std::string& path) {
  const char* sql =
      "SELECT (SELECT application_id FROM pragma_application_id),"
      "       (SELECT user_version FROM pragma_user_version),"
      "       (SELECT count(*) FROM sqlite_master),"
      "       (SELECT group_concat(name, ', ') FROM"
      "          (SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name LIMIT 5))";
  try {
    Statement st(db, path, sql);
    FileState s;
    if (st.step()) {
      s.application_id = st.int64(0);
      s.version = st.int64(1);
      s.objects = st.int64(2);
      s.tables = st.text(3);
    }
    return s;
  } catch (const StoreError&) {
    int code = sqlite3_errcode(db);
    if (code == SQLITE_NOTADB)
      throw StoreError(path + ": not an SQLite database (" + sqlite3_errmsg(db) + ")");
    if (code == SQLITE_CORRUPT)
      throw StoreError(path + ": the SQLite file is corrupt (" + sqlite3_errmsg(db) + ")");
    throw;
  }
}

// Throws for a file we must not open: newer than this build, or not ours.
void validate(const FileState& s, const std::string& path) {
  const bool empty = s.objects == 0 && s.version == 0 && s.application_id == 0;
  if (empty) return;
  if (s.application_id != kApplicationId) {
    std::string what = s.tables.empty() ? std::string("no xrun tables")
                                        : "tables " + s.tables + ", no xrun tables";
    throw StoreError(path + ": an SQLite database but not an xrun store (" + what +
                     "); refusing to modify it");
  }
  if (s.version > latest_version())
    throw StoreError(path + ": schema version " + std::to_string(s.version) +
                     " is newer than this xrun (" + std::to_string(latest_version()) +
                     "); upgrade xrun");
  // PRAGMA user_version is a signed 32-bit number; a negative one indexed
  // kMigrations out of bounds (found by tests/fuzz/fuzz_store.cpp).
  if (s.version < 0)
    throw StoreError(path + ": schema version " + std::to_string(s.version) +
                     " is not one xrun writes (a damaged file?)");
}

// The tables and views (type, name, SQL) the migrations make up to
// `version`, made once per version in an in-memory database.
struct SchemaObject {
  std::string type, name, sql;
};
const std::vector<SchemaObject>& pristine_objects(int version) {
  static std::mutex mutex;
  static std::map<int, std::vector<SchemaObject>> made;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = made.find(version); it != made.end()) return it->second;
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(":memory:", &db, SQLITE_OPEN_READWRITE, nullptr) != SQLITE_OK) {
    sqlite3_close_v2(db);
    throw StoreError("cannot open an in-memory database to compare a store's schema with");
  }
  std::vector<SchemaObject> objects;
  try {
    for (int v = 0; v < version; ++v) exec(db, ":memory:", kMigrations[static_cast<size_t>(v)]);
    Statement st(db, ":memory:",
                 "SELECT type, name, sql FROM sqlite_master WHERE type IN ('table', 'view')");
    while (st.step()) objects.push_back({st.text(0), st.text(1), st.text(2)});
  } catch (...) {
    sqlite3_close_v2(db);
    throw;
  }
  sqlite3_close_v2(db);
  return made[version] = std::move(objects);
}

// Throws unless the objects xrun reads are the ones its migrations made for
// `version`: each table a real table, each view xrun's own SQL. Another
// program may add objects (they are never read), but a file whose
// run_summary or runs is a view of its own could make every query endless
// (a recursive view yields rows forever: `xrun runs` and `xrun merge` hung,
// growing without bound).
void check_objects(sqlite3* db, const std::string& path, int version) {
  if (version < 1) return;
  Statement have(db, path, "SELECT type, sql FROM sqlite_master WHERE name = ?1");
  for (const SchemaObject& want : pristine_objects(version)) {
    have.bind(1, want.name);
    const bool found = have.step();
    const std::string type = found ? have.text(0) : "", sql = found ? have.text(1) : "";
    have.reset();
    const bool virtual_table = sql.rfind("CREATE VIRTUAL", 0) == 0;
    if (!found || type != want.type || virtual_table || (want.type == "view" && sql != want.sql))
      throw StoreError(path + ": not a store xrun wrote: its " + want.type + " " + want.name +
                       " is " + (found ? "not xrun's (altered by another program?)" : "missing") +
                       "; refusing to read it");
  }
}

// Applies the migrations after the file's version up to `target`, one
// transaction each; re-reads the version under the write lock so two
// processes opening one new file never apply a step twice.
void migrate(sqlite3* db, const std::string& path, int target) {
  for (;;) {
    Transaction tx(db, path);
    FileState s = read_state(db, path);
    validate(s, path);
    if (s.version >= target) {
      tx.commit();
      return;
    }
    const int next = static_cast<int>(s.version) + 1;
    exec(db, path, kMigrations[static_cast<size_t>(next - 1)]);
    exec(db, path, "PRAGMA application_id = " + std::to_string(kApplicationId));
    exec(db, path, "PRAGMA user_version = " + std::to_string(next));
    tx.commit();
  }
}

}  // namespace

int latest_version() { return static_cast<int>(kMigrations.size()); }

// Switching a file to WAL takes a lock that SQLite does not wait for with its
// busy handler (several processes creating one store at once see
// SQLITE_BUSY): retry for as long as busy_timeout would have waited.
void enable_wal(sqlite3* db, const std::string& path) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kBusyTimeoutMs);
  for (;;) {
    const int rc = sqlite3_exec(db, "PRAGMA journal_mode = WAL", nullptr, nullptr, nullptr);
    if (rc == SQLITE_OK) return;
    if ((rc & 0xff) != SQLITE_BUSY && (rc & 0xff) != SQLITE_LOCKED)
      check(rc, db, path, "PRAGMA journal_mode = WAL");
    if (std::chrono::steady_clock::now() > deadline)
      check(rc, db, path, "PRAGMA journal_mode = WAL");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

namespace {

// sqlite3_open_v2 with `flags`, extended result codes and busy_timeout.
sqlite3* open_handle(const std::string& path, int flags) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db, flags, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = path + ": cannot open (" +
                      (db ? sqlite3_errmsg(db) : std::string("out of memory")) + ")";
    sqlite3_close_v2(db);
    throw StoreError(msg);
  }
  sqlite3_extended_result_codes(db, 1);
  const int busy = sqlite3_busy_timeout(db, kBusyTimeoutMs);
  if (busy != SQLITE_OK) {
    sqlite3_close_v2(db);
    throw StoreError(path + ": sqlite3_busy_timeout failed");
  }
  return db;
}

// A store in a read-only place: SQLite says "unable to open database file"
// (it cannot create the WAL's -shm beside it); say what it means.
void refuse_if_read_only(const std::string& path) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  if (::access(path.c_str(), W_OK) != 0 || ::access(dir.empty() ? "." : dir.c_str(), W_OK) != 0)
    throw StoreError(path + ": the store cannot be written: its file or directory is read-only (" +
                     std::strerror(errno) + "); the read-only commands (runs, show, export, "
                     "report, compare) can still read it");
}

}  // namespace

sqlite3* open_database(const std::string& path, int target_version) {
  if (target_version < 1 || target_version > latest_version())
    throw StoreError(path + ": no schema version " + std::to_string(target_version));
  sqlite3* db = open_handle(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  try {
    // The version and the objects read in one read transaction: another
    // process migrating the same new file between the two reads would
    // otherwise show version N with version N+1's run_summary (schema 9
    // recreates it) and the file would look altered.
    FileState s;
    exec(db, path, "BEGIN");
    try {
      try {
        s = read_state(db, path);
      } catch (const StoreError&) {
        const int code = sqlite3_errcode(db);
        if (code == SQLITE_CANTOPEN || code == SQLITE_READONLY) refuse_if_read_only(path);
        throw;
      }
      validate(s, path);  // before anything writes to the file
      check_objects(db, path, static_cast<int>(s.version));
    } catch (...) {
      sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
      throw;
    }
    exec(db, path, "COMMIT");
    enable_wal(db, path);
    exec(db, path, "PRAGMA foreign_keys = ON");
    if (s.version < target_version) migrate(db, path, target_version);
  } catch (...) {
    sqlite3_close_v2(db);
    throw;
  }
  return db;
}

namespace {

// "file:" URI of a path, for SQLite's URI parameters (RFC 3986 escapes).
std::string file_uri(const std::string& path) {
  static const char* hex = "0123456789ABCDEF";
  std::string uri = "file:";
  for (unsigned char c : path) {
    if (std::isalnum(c) || c == '/' || c == '.' || c == '-' || c == '_' || c == '~') {
      uri += static_cast<char>(c);
    } else {
      uri += '%';
      uri += hex[c >> 4];
      uri += hex[c & 15];
    }
  }
  return uri;
}

// A read-only handle whose first read has succeeded. A store in WAL mode
// needs its -shm file, which SQLite cannot create in a read-only directory:
// there the file is opened immutable (nothing written, no locks taken; what
// a live writer has not checkpointed yet is not seen).
sqlite3* open_readable(const std::string& path) {
  sqlite3* db = open_handle(path, SQLITE_OPEN_READONLY);
  const int rc = sqlite3_exec(db, "SELECT count(*) FROM sqlite_master", nullptr, nullptr, nullptr);
  const int primary = rc & 0xff;
  if (primary != SQLITE_CANTOPEN && primary != SQLITE_READONLY) return db;
  sqlite3_close_v2(db);
  return open_handle(file_uri(path) + "?immutable=1", SQLITE_OPEN_READONLY | SQLITE_OPEN_URI);
}

}  // namespace

sqlite3* open_read_only(const std::string& path, int& version) {
  sqlite3* db = open_readable(path);
  try {
    exec(db, path, "BEGIN");  // one snapshot for the version and the objects (open_database)
    FileState s = read_state(db, path);
    if (s.objects == 0 && s.application_id == 0)
      throw StoreError(path + ": an empty database, not an xrun store");
    validate(s, path);
    version = static_cast<int>(s.version);
    check_objects(db, path, version);
    exec(db, path, "COMMIT");
  } catch (...) {
    sqlite3_close_v2(db);  // an open read transaction ends with the handle
    throw;
  }
  return db;
}

sqlite3* open_for_reading(const std::string& path) {
  int version = 0;
  sqlite3* db = open_read_only(path, version);
  if (version >= latest_version()) return db;
  sqlite3* copy = nullptr;
  try {
    copy = backup_open(db, path, ":memory:");
    sqlite3_close_v2(db);
    db = nullptr;
    migrate(copy, path, latest_version());
  } catch (...) {
    sqlite3_close_v2(db);
    sqlite3_close_v2(copy);
    throw;
  }
  return copy;
}

void create_at_version(const std::string& path, int version) {
  sqlite3_close_v2(open_database(path, version));
}

}  // namespace xrun::store::detail
