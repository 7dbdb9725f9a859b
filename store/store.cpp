// store/store.cpp: writing runs and their records, and the queries behind
// `xrun runs`, `xrun show` and the runner's "already complete?" check. Every
// write is one BEGIN IMMEDIATE transaction, so a failure (disk full, I/O
// error, busy past the timeout) rolls back only that write and surfaces as a
// StoreError; rows committed earlier stay. Schema: see schema.cpp.
#include "store/store.h"

#include <cmath>
#include <errno.h>
#include <signal.h>
#include <sqlite3.h>
#include <time.h>
#include <unistd.h>

#include <array>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>

#include "store/internal.h"
#include "store/schema.h"
#include "store/sqlite_util.h"

namespace xrun::store {

using detail::Statement;
using detail::Transaction;

// --- Small helpers ----------------------------------------------------------------

namespace detail {

// Current time as ISO 8601 UTC with milliseconds: "2025-01-31T12:00:00.000Z".
std::string now_iso8601() {
  using namespace std::chrono;
  const auto now = system_clock::now();
  const time_t secs = system_clock::to_time_t(now);
  const auto ms = duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000;
  struct tm utc {};
  gmtime_r(&secs, &utc);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", utc.tm_year + 1900,
                utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec,
                static_cast<int>(ms));
  return buf;
}

// A random (version 4) UUID, lower-case hex. Fresh entropy every time (no
// cached generator state, which a fork() would duplicate into two processes).
std::string new_uuid() {
  std::random_device rd;  // the OS entropy source on Linux
  std::array<uint8_t, 16> b{};
  for (size_t i = 0; i < b.size(); i += 4) {
    const uint32_t r = rd();
    for (size_t j = 0; j < 4; ++j) b[i + j] = static_cast<uint8_t>(r >> (8 * j));
  }
  b[6] = static_cast<uint8_t>((b[6] & 0x0f) | 0x40);  // version 4
  b[8] = static_cast<uint8_t>((b[8] & 0x3f) | 0x80);  // RFC 4122 variant
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < b.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
    s += hex[b[i] >> 4];
    s += hex[b[i] & 0x0f];
  }
  return s;
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

// The plain-text form of a canonical JSON value for run_params.value:
// strings without quotes, null as NULL, anything else as JSON writes it.
std::optional<std::string> plain_value(const std::string& json_text) {
  auto j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return json_text;  // not JSON: keep as given
  if (j.is_null()) return std::nullopt;
  if (j.is_string()) return j.get<std::string>();
  return j.dump();
}

const char* step_kind_name(StepKind k) {
  switch (k) {
    case StepKind::warmup: return "warmup";
    case StepKind::measured: return "measured";
    case StepKind::unmeasured: return "unmeasured";
  }
  return "measured";
}

StepKind step_kind_from(const std::string& s) {
  if (s == "warmup") return StepKind::warmup;
  if (s == "unmeasured") return StepKind::unmeasured;
  return StepKind::measured;
}

// The run's integer id; throws when no run has this UUID.
int64_t run_id(sqlite3* db, const std::string& file, const std::string& uuid) {
  Statement st(db, file, "SELECT id FROM runs WHERE uuid = ?1");
  st.bind(1, uuid);
  if (!st.step()) throw StoreError(file + ": no run with UUID " + uuid);
  return st.int64(0);
}

const char* const kInsertStepSql =
    "INSERT INTO steps (run, step, epoch, kind, step_ms, data_wait_ms, loss, lr, loss_scale,"
    " images, skipped) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)";

void insert_steps(sqlite3* db, const std::string& file, int64_t run,
                  std::span<const StepRecord> steps, Statement* reuse) {
  std::optional<Statement> own;
  Statement* st = reuse;
  if (!st) st = &own.emplace(db, file, kInsertStepSql);
  for (const StepRecord& s : steps) {
    st->bind(1, run).bind(2, s.step).bind(3, s.epoch).bind(4, step_kind_name(s.kind));
    st->bind(5, s.step_ms).bind(6, s.data_wait_ms).bind(7, s.loss).bind(8, s.lr);
    st->bind(9, s.loss_scale).bind(10, s.images).bind(11, static_cast<int64_t>(s.skipped));
    st->run();
  }
}

}  // namespace detail

namespace {

// Environment keys that also have a column of their own in runs.
constexpr std::array<const char*, 11> kEnvColumns = {
    "device_name", "device_uuid", "compute_capability", "driver",       "cuda_runtime", "cudnn",
    "cublas",      "onednn",      "xrun_version",       "git_commit",   "cpu"};

// Writes env into run_environment (upsert) and the matching runs columns.
void write_environment(sqlite3* db, const std::string& file, int64_t run, const Environment& env) {
  Statement kv(db, file,
               "INSERT INTO run_environment (run, key, value) VALUES (?1, ?2, ?3)"
               " ON CONFLICT (run, key) DO UPDATE SET value = excluded.value");
  for (const auto& [key, value] : env.fields) {
    kv.bind(1, run).bind(2, key).bind(3, value);
    kv.run();
  }
  for (const char* col : kEnvColumns) {
    auto it = env.fields.find(col);
    if (it == env.fields.end()) continue;
    // Column names come from the fixed list above, never from input.
    Statement up(db, file, std::string("UPDATE runs SET ") + col + " = ?1 WHERE id = ?2");
    up.bind(1, it->second).bind(2, run);
    up.run();
  }
}

// The columns of run_summary that make a RunInfo, in read_info's order.
constexpr const char* kInfoColumns =
    "s.id, s.uuid, s.experiment, s.sweep_index, s.status, s.label, s.device, s.device_name,"
    " s.config_hash, s.experiment_hash, s.started_at, s.finished_at, s.batch_size, s.precision,"
    " s.cudnn_benchmark, s.workers, s.throughput, s.step_ms_median, s.step_ms_p10,"
    " s.step_ms_p90, s.peak_memory_bytes, s.test_accuracy, s.final_loss, s.error,"
    " s.achieved_flops, s.peak_flops, s.fraction_of_peak, s.target_accuracy, s.time_to_target_s,"
    " s.ranks, coalesce(s.global_batch, 0),"
    " coalesce((SELECT e.value FROM run_environment e WHERE e.run = s.id"
    " AND e.key = 'throughput_unit'), 'images/s')";

RunInfo read_info(const Statement& st) {
  RunInfo r;
  r.id = st.int64(0);
  r.uuid = st.text(1);
  r.experiment = st.text(2);
  r.sweep_index = static_cast<int>(st.int64(3));
  r.status = st.text(4);
  r.label = st.text(5);
  r.device = st.text(6);
  r.device_name = st.text(7);
  r.config_hash = st.text(8);
  r.experiment_hash = st.text(9);
  r.started_at = st.text(10);
  r.finished_at = st.text(11);
  r.batch_size = static_cast<int>(st.int64(12));
  r.precision = st.text(13);
  r.cudnn_benchmark = st.text(14);
  r.workers = static_cast<int>(st.int64(15));
  r.throughput = st.real(16);  // NaN when the run stored no figures
  r.step_ms_median = st.real(17);
  r.step_ms_p10 = st.real(18);
  r.step_ms_p90 = st.real(19);
  r.peak_memory_bytes = st.int64(20);
  r.test_accuracy = st.real(21);  // NaN when none
  r.final_loss = st.real(22);     // NaN when none
  r.error = st.text(23);
  r.achieved_flops = st.real(24);  // NaN when none
  r.peak_flops = st.real(25);
  r.fraction_of_peak = st.real(26);
  r.target_accuracy = st.real(27);
  r.time_to_target_s = st.real(28);
  r.ranks = static_cast<int>(st.int64(29));
  r.global_batch = st.int64(30);
  r.throughput_unit = st.text(31);
  return r;
}

// Run columns list_runs can filter on directly; any other key is a parameter.
constexpr std::array<std::pair<const char*, const char*>, 9> kFilterColumns = {{
      {"status", "s.status"},
      {"label", "s.label"},
      {"device", "s.device"},
      {"experiment", "s.experiment"},
      {"uuid", "s.uuid"},
      {"device_name", "s.device_name"},
      {"config_hash", "s.config_hash"},
      {"experiment_hash", "s.experiment_hash"},
      {"host", "s.host"},
}};

const char* filter_column(const std::string& key) {
  for (const auto& [name, column] : kFilterColumns)
    if (key == name) return column;
  return nullptr;
}

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

}  // namespace

// --- RunStatus ----------------------------------------------------------------------

const char* to_string(RunStatus s) {
  switch (s) {
    case RunStatus::planned: return "planned";
    case RunStatus::running: return "running";
    case RunStatus::complete: return "complete";
    case RunStatus::failed: return "failed";
    case RunStatus::interrupted: return "interrupted";
  }
  return "failed";
}

RunStatus run_status_from_string(const std::string& s) {
  for (RunStatus r : {RunStatus::planned, RunStatus::running, RunStatus::complete,
                      RunStatus::failed, RunStatus::interrupted})
    if (s == to_string(r)) return r;
  throw StoreError("unknown run status '" + s +
                   "' (expected planned, running, complete, failed or interrupted)");
}

// --- Store: opening -------------------------------------------------------------------

Store::Store(const std::string& path, Access access)
    : path_(path),
      db_(access == Access::read_only ? detail::open_for_reading(path)
                                      : detail::open_database(path, detail::latest_version())) {}

Store::~Store() { sqlite3_close_v2(db_); }

int Store::latest_schema_version() { return detail::latest_version(); }

int Store::schema_version() const {
  Statement st(db_, path_, "PRAGMA user_version");
  st.step();
  return static_cast<int>(st.int64(0));
}

// --- Store: writes ----------------------------------------------------------------------

std::optional<std::pair<int64_t, std::string>> Store::find_in_progress(
    const std::string& config_hash) const {
  Statement live(db_, path_,
                 "SELECT pid, uuid FROM runs WHERE config_hash = ?1 AND status = 'running'"
                 " AND host = ?2 AND pid IS NOT NULL AND pid > 0 AND pid != ?3");
  live.bind(1, config_hash).bind(2, detail::host_name()).bind(3, static_cast<int64_t>(getpid()));
  while (live.step()) {
    const int64_t pid = live.int64(0);
    if (kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM)
      return std::make_pair(pid, live.text(1));
  }
  return std::nullopt;
}

std::string Store::begin_run(const NewRun& run) {
  const std::string uuid = detail::new_uuid();
  const std::string now = detail::now_iso8601();
  Transaction tx(db_, path_);

  if (const auto live = find_in_progress(run.config_hash)) throw RunInProgress(live->first, live->second);
  if (!run.force)
    if (auto done = find_complete(run.config_hash)) throw RunAlreadyComplete(*done);

  Statement exp_insert(db_, path_,
                       "INSERT INTO experiments (name, file, description, first_seen)"
                       " VALUES (?1, ?2, ?3, ?4) ON CONFLICT (name, file) DO NOTHING");
  exp_insert.bind(1, run.experiment).bind(2, run.experiment_file).bind(3, run.description);
  exp_insert.bind(4, now);
  exp_insert.run();
  Statement exp_id(db_, path_, "SELECT id FROM experiments WHERE name = ?1 AND file = ?2");
  exp_id.bind(1, run.experiment).bind(2, run.experiment_file);
  exp_id.step();
  const int64_t experiment = exp_id.int64(0);
  exp_id.reset();  // no statement may be active at COMMIT

  Statement ins(db_, path_,
                "INSERT INTO runs (uuid, experiment, sweep_index, status, config_json,"
                " config_hash, experiment_hash, label, device, host, pid, started_at)"
                " VALUES (?1, ?2, ?3, 'running', ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)");
  ins.bind(1, uuid).bind(2, experiment).bind(3, run.sweep_index).bind(4, run.config_json);
  ins.bind(5, run.config_hash).bind(6, run.experiment_hash).bind(7, run.label);
  ins.bind(8, run.device).bind(9, detail::host_name()).bind(10, static_cast<int64_t>(getpid()));
  ins.bind(11, now);
  ins.run();
  const int64_t id = sqlite3_last_insert_rowid(db_);

  Statement param(db_, path_,
                  "INSERT INTO run_params (run, key, value, value_json) VALUES (?1, ?2, ?3, ?4)");
  for (const auto& [key, json] : run.params) {
    param.bind(1, id).bind(2, key).bind(3, detail::plain_value(json)).bind(4, json);
    param.run();
  }
  write_environment(db_, path_, id, run.environment);
  tx.commit();
  return uuid;
}

void Store::set_environment(const std::string& uuid, const Environment& env) {
  Transaction tx(db_, path_);
  write_environment(db_, path_, detail::run_id(db_, path_, uuid), env);
  tx.commit();
}

void Store::write_steps(const std::string& uuid, std::span<const StepRecord> steps) {
  Transaction tx(db_, path_);
  detail::insert_steps(db_, path_, detail::run_id(db_, path_, uuid), steps, nullptr);
  tx.commit();
}

void Store::write_epoch(const std::string& uuid, const EpochRecord& e) {
  Transaction tx(db_, path_);
  Statement st(db_, path_,
               "INSERT OR REPLACE INTO epochs (run, epoch, train_loss, test_loss, test_accuracy,"
               " seconds, eval_seconds, images) VALUES (?1,?2,?3,?4,?5,?6,?7,?8)");
  st.bind(1, detail::run_id(db_, path_, uuid)).bind(2, e.epoch).bind(3, e.train_loss);
  st.bind(4, e.test_loss).bind(5, e.test_accuracy).bind(6, e.seconds).bind(7, e.eval_seconds);
  st.bind(8, e.images);
  st.run();
  tx.commit();
}

void Store::write_eval(const std::string& uuid, const EvalRecord& e) {
  Transaction tx(db_, path_);
  Statement st(db_, path_,
               "INSERT OR REPLACE INTO evals (run, step, epoch, images, wall_seconds, eval_seconds,"
               " test_loss, test_accuracy) VALUES (?1,?2,?3,?4,?5,?6,?7,?8)");
  st.bind(1, detail::run_id(db_, path_, uuid)).bind(2, e.step).bind(3, e.epoch).bind(4, e.images);
  st.bind(5, e.wall_seconds).bind(6, e.eval_seconds).bind(7, e.test_loss);
  st.bind(8, e.test_accuracy);
  st.run();
  tx.commit();
}

void Store::write_phases(const std::string& uuid, std::span<const PhaseRecord> phases) {
  Transaction tx(db_, path_);
  const int64_t run = detail::run_id(db_, path_, uuid);
  Statement st(db_, path_,
               "INSERT OR REPLACE INTO phases (run, phase, calls, host_ms, gpu_ms)"
               " VALUES (?1, ?2, ?3, ?4, ?5)");
  for (const PhaseRecord& p : phases) {
    st.bind(1, run).bind(2, p.phase).bind(3, p.calls).bind(4, p.host_ms).bind(5, p.gpu_ms);
    st.run();
  }
  tx.commit();
}

void Store::write_kernels(const std::string& uuid, std::span<const KernelRecord> kernels) {
  Transaction tx(db_, path_);
  const int64_t run = detail::run_id(db_, path_, uuid);
  Statement st(db_, path_,
               "INSERT OR REPLACE INTO kernels (run, name, phase, calls, total_ms, min_ms, max_ms)"
               " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)");
  for (const KernelRecord& k : kernels) {
    st.bind(1, run).bind(2, k.name).bind(3, k.phase).bind(4, k.calls).bind(5, k.total_ms);
    st.bind(6, k.min_ms).bind(7, k.max_ms);
    st.run();
  }
  tx.commit();
}

void Store::write_memcpy(const std::string& uuid, std::span<const MemcpyRecord> copies) {
  Transaction tx(db_, path_);
  const int64_t run = detail::run_id(db_, path_, uuid);
  Statement st(db_, path_,
               "INSERT OR REPLACE INTO memcpy (run, direction, memory, count, bytes, total_ms)"
               " VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
  for (const MemcpyRecord& m : copies) {
    st.bind(1, run).bind(2, m.direction).bind(3, m.memory).bind(4, m.count).bind(5, m.bytes);
    st.bind(6, m.total_ms);
    st.run();
  }
  tx.commit();
}

void Store::write_memory(const std::string& uuid, std::span<const MemoryRecord> regions) {
  Transaction tx(db_, path_);
  const int64_t run = detail::run_id(db_, path_, uuid);
  Statement st(db_, path_,
               "INSERT OR REPLACE INTO memory (run, region, bytes) VALUES (?1, ?2, ?3)");
  for (const MemoryRecord& m : regions) {
    st.bind(1, run).bind(2, m.region).bind(3, m.bytes);
    st.run();
  }
  tx.commit();
}

void Store::write_conv_algorithms(const std::string& uuid,
                                  std::span<const ConvAlgoRecord> records,
                                  const std::string& device_key) {
  Transaction tx(db_, path_);
  const int64_t run = detail::run_id(db_, path_, uuid);
  Statement st(db_, path_,
               "INSERT OR REPLACE INTO conv_algorithms (run, layer, pass, key, algo, algo_name,"
               " math_type, workspace_bytes, time_ms, source)"
               " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)");
  Statement cache(db_, path_,
                  "INSERT OR REPLACE INTO conv_algo_cache (device_key, key, algo, math_type,"
                  " workspace_bytes, time_ms, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)");
  const std::string now = detail::now_iso8601();
  for (const ConvAlgoRecord& r : records) {
    st.bind(1, run).bind(2, r.layer).bind(3, r.pass).bind(4, r.key).bind(5, int64_t{r.choice.algo});
    st.bind(6, r.algo_name).bind(7, int64_t{r.choice.math_type}).bind(8, r.choice.workspace_bytes);
    st.bind(9, r.choice.time_ms).bind(10, r.source);
    st.run();
    if (r.source == "benchmark" && !device_key.empty()) {
      cache.bind(1, device_key).bind(2, r.key).bind(3, int64_t{r.choice.algo});
      cache.bind(4, int64_t{r.choice.math_type}).bind(5, r.choice.workspace_bytes);
      cache.bind(6, r.choice.time_ms).bind(7, now);
      cache.run();
    }
  }
  tx.commit();
}

void Store::write_findings(const std::string& uuid, std::span<const FindingRecord> findings) {
  Transaction tx(db_, path_);
  const int64_t run = detail::run_id(db_, path_, uuid);
  Statement st(db_, path_,
               "INSERT OR REPLACE INTO findings (run, check_name, message, value)"
               " VALUES (?1, ?2, ?3, ?4)");
  for (const FindingRecord& f : findings) {
    st.bind(1, run).bind(2, f.check).bind(3, f.message).bind(4, f.value);
    st.run();
  }
  tx.commit();
}

void Store::write_layer_costs(const std::string& uuid, std::span<const LayerCostRecord> costs) {
  Transaction tx(db_, path_);
  const int64_t run = detail::run_id(db_, path_, uuid);
  Statement st(db_, path_,
               "INSERT OR REPLACE INTO layer_costs (run, layer, pass, flops, bytes)"
               " VALUES (?1, ?2, ?3, ?4, ?5)");
  for (const LayerCostRecord& c : costs) {
    st.bind(1, run).bind(2, c.layer).bind(3, c.pass).bind(4, c.flops).bind(5, c.bytes);
    st.run();
  }
  tx.commit();
}

void Store::write_ranks(const std::string& uuid, std::span<const RankRecord> ranks) {
  Transaction tx(db_, path_);
  const int64_t run = detail::run_id(db_, path_, uuid);
  Statement st(db_, path_,
               "INSERT OR REPLACE INTO ranks (run, rank, host, device, step_ms_median,"
               " data_wait_ms, allreduce_ms, bytes_reduced, bus_bytes_per_s)"
               " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)");
  for (const RankRecord& r : ranks) {
    st.bind(1, run).bind(2, r.rank).bind(3, r.host).bind(4, r.device).bind(5, r.step_ms_median);
    st.bind(6, r.data_wait_ms).bind(7, r.allreduce_ms).bind(8, r.bytes_reduced);
    st.bind(9, r.bus_bytes_per_s);
    st.run();
  }
  tx.commit();
}

void Store::write_trace(const std::string& uuid, std::span<const TraceEvent> events) {
  Transaction tx(db_, path_);
  const int64_t run = detail::run_id(db_, path_, uuid);
  Statement st(db_, path_,
               "INSERT OR REPLACE INTO trace_events (run, seq, track, name, start_ns, dur_ns,"
               " payload, depth, flow) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)");
  int64_t seq = 0;
  for (const TraceEvent& e : events) {
    st.bind(1, run).bind(2, seq++).bind(3, e.track).bind(4, e.name).bind(5, e.start_ns);
    st.bind(6, e.dur_ns).bind(8, e.depth);
    if (e.payload >= 0) st.bind(7, e.payload); else st.bind_null(7);
    if (e.flow != 0) st.bind(9, e.flow); else st.bind_null(9);
    st.run();
  }
  tx.commit();
}

std::vector<TraceEvent> Store::get_trace(const std::string& uuid) const {
  std::vector<TraceEvent> out;
  Statement st(db_, path_,
               "SELECT t.track, t.name, t.start_ns, t.dur_ns, coalesce(t.payload, -1), t.depth,"
               " coalesce(t.flow, 0)"
               " FROM trace_events t JOIN runs r ON r.id = t.run WHERE r.uuid = ?1 ORDER BY t.seq");
  st.bind(1, uuid);
  while (st.step())
    out.push_back({st.text(0), st.text(1), st.int64(2), st.int64(3), st.int64(4),
                   static_cast<int>(st.int64(5)), st.int64(6)});
  return out;
}

std::map<std::string, ConvAlgoChoice> Store::conv_algo_cache(const std::string& device_key) const {
  std::map<std::string, ConvAlgoChoice> out;
  Statement st(db_, path_,
               "SELECT key, algo, math_type, workspace_bytes, time_ms FROM conv_algo_cache"
               " WHERE device_key = ?1");
  st.bind(1, device_key);
  while (st.step())
    out[st.text(0)] = {static_cast<int>(st.int64(1)), static_cast<int>(st.int64(2)),
                       st.int64(3), st.real(4)};
  return out;
}

void Store::put_cpu_peak(const CpuPeakRecord& p) {
  Statement st(db_, path_,
               "INSERT OR REPLACE INTO cpu_peaks (cpu, isa, threads, fp32_flops, bf16_flops,"
               " copy_bytes_per_s, kernels, measured_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)");
  st.bind(1, p.cpu).bind(2, p.isa).bind(3, int64_t{p.threads}).bind(4, p.fp32_flops);
  st.bind(5, p.bf16_flops).bind(6, p.copy_bytes_per_s).bind(7, p.kernels);
  st.bind(8, detail::now_iso8601());
  st.run();
}

std::optional<CpuPeakRecord> Store::cpu_peak(const std::string& cpu, const std::string& isa,
                                             int threads) const {
  Statement st(db_, path_,
               "SELECT fp32_flops, bf16_flops, copy_bytes_per_s, kernels, measured_at"
               " FROM cpu_peaks WHERE cpu = ?1 AND isa = ?2 AND threads = ?3");
  st.bind(1, cpu).bind(2, isa).bind(3, int64_t{threads});
  if (!st.step()) return std::nullopt;
  CpuPeakRecord p{cpu, isa, threads, st.real(0), st.real(1), st.real(2), st.text(3), st.text(4)};
  return p;
}

void Store::finish_run(const std::string& uuid, RunStatus status, const RunSummary& s,
                       const std::string& error) {
  Transaction tx(db_, path_);
  const int64_t run = detail::run_id(db_, path_, uuid);
  Statement st(db_, path_,
               "UPDATE runs SET status = ?1, finished_at = ?2, error = ?3 WHERE id = ?4");
  st.bind(1, to_string(status)).bind(2, detail::now_iso8601());
  st.bind(3, error.empty() ? std::optional<std::string>() : std::optional<std::string>(error));
  st.bind(4, run);
  st.run();
  // The figures of a complete run, or of any run that measured something.
  if (status == RunStatus::complete || s.measured_steps > 0) {
    Statement sum(db_, path_,
                  "UPDATE runs SET batch_size = NULLIF(?1, 0), measured_steps = ?2,"
                  " measured_images = ?3, measured_seconds = ?4, throughput = ?5,"
                  " step_ms_median = ?6, step_ms_p10 = ?7, step_ms_p90 = ?8, step_ms_mean = ?9,"
                  " step_ms_stddev = ?10, step_outliers = ?11, data_wait_fraction = ?12,"
                  " peak_memory_bytes = ?13, skipped_steps = ?14, final_loss = ?15,"
                  " test_accuracy = ?16, test_loss = ?17, algo_search_ms = ?19,"
                  " cupti_overhead = ?20, cupti_steps = NULLIF(?21, 0), flops_per_step = ?22,"
                  " peak_flops = ?23, peak_source = NULLIF(?24, ''), peak_bytes_per_s = ?25,"
                  " peak_bandwidth_source = NULLIF(?26, ''), target_accuracy = ?27,"
                  " time_to_target_s = ?28, time_to_target_eval_s = ?29, epochs_to_target = ?30,"
                  " steps_to_target = NULLIF(?31, 0), images_to_target = NULLIF(?32, 0),"
                  " best_accuracy = ?33, lr = ?34, ranks = ?35, global_batch = NULLIF(?36, 0)"
                  " WHERE id = ?18");
    sum.bind(1, s.batch_size).bind(2, s.measured_steps).bind(3, s.measured_images);
    sum.bind(4, s.measured_seconds).bind(5, s.throughput).bind(6, s.step_ms_median);
    sum.bind(7, s.step_ms_p10).bind(8, s.step_ms_p90).bind(9, s.step_ms_mean);
    sum.bind(10, s.step_ms_stddev).bind(11, s.step_outliers).bind(12, s.data_wait_fraction);
    sum.bind(13, s.peak_memory_bytes).bind(14, s.skipped_steps).bind(15, s.final_loss);
    sum.bind(16, s.test_accuracy).bind(17, s.test_loss).bind(18, run).bind(19, s.algo_search_ms);
    sum.bind(20, s.cupti_overhead).bind(21, s.cupti_steps).bind(22, s.flops_per_step);
    sum.bind(23, s.peak_flops).bind(24, s.peak_source).bind(25, s.peak_bytes_per_s);
    sum.bind(26, s.peak_bandwidth_source).bind(27, s.target_accuracy);
    sum.bind(28, s.time_to_target_s).bind(29, s.time_to_target_eval_s);
    sum.bind(30, s.epochs_to_target).bind(31, s.steps_to_target).bind(32, s.images_to_target);
    sum.bind(33, s.best_accuracy).bind(34, s.lr).bind(35, s.ranks).bind(36, s.global_batch);
    sum.run();
  }
  tx.commit();
}

namespace {

// The UUID of the newest complete run whose `column` (config_hash or
// experiment_hash) is `value`.
std::optional<std::string> newest_complete(sqlite3* db, const std::string& path,
                                           const std::string& column, const std::string& value) {
  Statement st(db, path,
               "SELECT uuid FROM runs WHERE " + column +
                   " = ?1 AND status = 'complete' ORDER BY id DESC LIMIT 1");
  st.bind(1, value);
  if (!st.step()) return std::nullopt;
  return st.text(0);
}

}  // namespace

std::optional<std::string> Store::find_complete(const std::string& config_hash) const {
  return newest_complete(db_, path_, "config_hash", config_hash);
}

std::optional<std::string> Store::find_complete_experiment(const std::string& experiment_hash) const {
  return newest_complete(db_, path_, "experiment_hash", experiment_hash);
}

std::string Store::quick_check() const {
  std::string problems;
  try {
    Statement st(db_, path_, "PRAGMA quick_check(5)");
    while (st.step()) {
      // One row may hold several lines; "*** in database main ***" heads them.
      std::string text = st.text(0) + "\n";
      for (size_t start = 0, end; (end = text.find('\n', start)) != std::string::npos;
           start = end + 1) {
        const std::string line = text.substr(start, end - start);
        if (line.empty() || line == "ok" || line.rfind("***", 0) == 0) continue;
        problems += (problems.empty() ? "" : "; ") + line;
      }
    }
  } catch (const StoreError& e) {  // damage the check itself trips over
    if (sqlite3_errcode(db_) != SQLITE_CORRUPT && sqlite3_errcode(db_) != SQLITE_NOTADB) throw;
    problems += (problems.empty() ? "" : "; ") + std::string(sqlite3_errmsg(db_));
  }
  return problems;
}

Store::Batch::Batch(Store& store)
    : tx_(std::make_unique<detail::Transaction>(store.db_, store.path_)) {}
Store::Batch::~Batch() = default;
void Store::Batch::commit() { tx_->commit(); }

int Store::mark_stale_runs_interrupted() {
  Transaction tx(db_, path_);
  Statement running(db_, path_, "SELECT id, pid FROM runs WHERE status = 'running' AND host = ?1");
  running.bind(1, detail::host_name());
  std::vector<std::pair<int64_t, int64_t>> stale;
  while (running.step()) {
    const int64_t pid = running.int64(1);
    if (running.is_null(1) || pid <= 0) continue;  // unknown process: leave it
    if (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)
      stale.emplace_back(running.int64(0), pid);
  }
  Statement mark(db_, path_,
                 "UPDATE runs SET status = 'interrupted', finished_at = ?1, error = ?2"
                 " WHERE id = ?3 AND status = 'running'");
  const std::string now = detail::now_iso8601();
  for (const auto& [id, pid] : stale) {
    mark.bind(1, now)
        .bind(2, "process " + std::to_string(pid) + " ended without finishing the run")
        .bind(3, id);
    mark.run();
  }
  tx.commit();
  return static_cast<int>(stale.size());
}

std::string throughput_label(const std::vector<const RunInfo*>& runs) {
  bool images = false, tokens = false;
  for (const RunInfo* r : runs) (r->throughput_unit == "tokens/s" ? tokens : images) = true;
  return tokens && images ? "img|tok/s" : tokens ? "tok/s" : "img/s";
}

// --- Store: queries ---------------------------------------------------------------------

std::vector<RunInfo> Store::list_runs(
    const std::vector<std::pair<std::string, std::string>>& where) const {
  std::string sql = std::string("SELECT ") + kInfoColumns + " FROM run_summary s";
  int n = 0;
  for (const auto& [key, value] : where) {
    sql += n == 0 ? " WHERE " : " AND ";
    if (const char* column = filter_column(key)) {
      sql += std::string(column) + " = ?" + std::to_string(++n);
    } else {
      sql += "EXISTS (SELECT 1 FROM run_params p WHERE p.run = s.id AND p.key = ?" +
             std::to_string(n + 1) + " AND p.value = ?" + std::to_string(n + 2) + ")";
      n += 2;
    }
  }
  sql += " ORDER BY s.id";
  Statement st(db_, path_, sql);
  int i = 0;
  for (const auto& [key, value] : where) {
    if (!filter_column(key)) st.bind(++i, key);
    st.bind(++i, value);
  }
  std::vector<RunInfo> out;
  while (st.step()) out.push_back(read_info(st));
  return out;
}

std::vector<std::string> Store::filter_keys() const {
  std::vector<std::string> keys;
  for (const auto& [name, column] : kFilterColumns) keys.emplace_back(name);
  Statement st(db_, path_, "SELECT DISTINCT key FROM run_params ORDER BY key");
  while (st.step()) keys.push_back(st.text(0));
  return keys;
}

std::optional<RunDetail> Store::get_run(const std::string& id_or_uuid) const {
  // Find the run's id: an integer id first, then a UUID prefix.
  std::optional<int64_t> id;
  if (all_digits(id_or_uuid) && id_or_uuid.size() < 19) {
    Statement st(db_, path_, "SELECT id FROM runs WHERE id = ?1");
    st.bind(1, static_cast<int64_t>(std::stoll(id_or_uuid)));
    if (st.step()) id = st.int64(0);
  }
  if (!id && id_or_uuid.size() >= 4) {
    std::string prefix = id_or_uuid;
    for (char& c : prefix) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    Statement st(db_, path_,
                 "SELECT id, uuid FROM runs WHERE substr(uuid, 1, length(?1)) = ?1 ORDER BY id");
    st.bind(1, prefix);
    std::vector<std::pair<int64_t, std::string>> hits;
    while (st.step()) hits.emplace_back(st.int64(0), st.text(1));
    if (hits.size() > 1) {
      std::string msg = path_ + ": run prefix '" + id_or_uuid + "' is ambiguous; it matches";
      for (size_t k = 0; k < hits.size() && k < 10; ++k)
        msg += (k ? ", " : " ") + hits[k].second + " (id " + std::to_string(hits[k].first) + ")";
      if (hits.size() > 10) msg += " and " + std::to_string(hits.size() - 10) + " more";
      throw StoreError(msg);
    }
    if (hits.size() == 1) id = hits[0].first;
  }
  if (!id) return std::nullopt;

  RunDetail d;
  {
    Statement st(db_, path_, std::string("SELECT ") + kInfoColumns + " FROM run_summary s WHERE s.id = ?1");
    st.bind(1, *id);
    if (!st.step()) return std::nullopt;
    d.info = read_info(st);
  }
  {
    Statement st(db_, path_,
                 "SELECT e.description, e.file, r.config_json, r.host, r.pid,"
                 " r.measured_steps IS NOT NULL, r.measured_steps, r.measured_images,"
                 " r.measured_seconds, r.throughput, r.step_ms_median, r.step_ms_p10,"
                 " r.step_ms_p90, r.step_ms_mean, r.step_ms_stddev, r.step_outliers,"
                 " r.data_wait_fraction, r.peak_memory_bytes, r.skipped_steps, r.final_loss,"
                 " r.test_accuracy, r.test_loss, r.batch_size,"
                 " (SELECT count(*) FROM steps WHERE run = r.id), r.algo_search_ms,"
                 " r.cupti_overhead, coalesce(r.cupti_steps, 0), r.flops_per_step,"
                 " r.peak_flops, coalesce(r.peak_source, ''), r.peak_bytes_per_s,"
                 " coalesce(r.peak_bandwidth_source, ''), r.target_accuracy, r.time_to_target_s,"
                 " r.time_to_target_eval_s, r.epochs_to_target, coalesce(r.steps_to_target, 0),"
                 " coalesce(r.images_to_target, 0), r.best_accuracy, r.lr, coalesce(r.ranks, 1),"
                 " coalesce(r.global_batch, 0)"
                 " FROM runs r JOIN experiments e ON e.id = r.experiment WHERE r.id = ?1");
    st.bind(1, *id);
    st.step();
    d.description = st.text(0);
    d.experiment_file = st.text(1);
    d.config_json = st.text(2);
    d.host = st.text(3);
    d.pid = st.int64(4);
    d.has_summary = st.int64(5) != 0;
    if (d.has_summary) {
      RunSummary& s = d.summary;
      s.measured_steps = st.int64(6);
      s.measured_images = st.int64(7);
      s.measured_seconds = st.real(8);
      s.throughput = st.real(9);
      s.step_ms_median = st.real(10);
      s.step_ms_p10 = st.real(11);
      s.step_ms_p90 = st.real(12);
      s.step_ms_mean = st.real(13);
      s.step_ms_stddev = st.real(14);
      s.step_outliers = st.int64(15);
      s.data_wait_fraction = st.real(16);
      s.peak_memory_bytes = st.int64(17);
      s.skipped_steps = st.int64(18);
      s.final_loss = st.real(19);
      s.test_accuracy = st.real(20);
      s.test_loss = st.real(21);
      s.batch_size = static_cast<int>(st.int64(22));
      s.algo_search_ms = st.real(24);
      if (std::isnan(s.algo_search_ms)) s.algo_search_ms = 0;
      s.cupti_overhead = st.real(25);
      s.cupti_steps = st.int64(26);
      s.flops_per_step = st.real(27);
      s.peak_flops = st.real(28);
      s.peak_source = st.text(29);
      s.peak_bytes_per_s = st.real(30);
      s.peak_bandwidth_source = st.text(31);
      s.target_accuracy = st.real(32);
      s.time_to_target_s = st.real(33);
      s.time_to_target_eval_s = st.real(34);
      s.epochs_to_target = st.real(35);
      s.steps_to_target = st.int64(36);
      s.images_to_target = st.int64(37);
      s.best_accuracy = st.real(38);
      s.lr = st.real(39);
      s.ranks = static_cast<int>(st.int64(40));
      s.global_batch = st.int64(41);
    }
    d.step_count = st.int64(23);
  }
  {
    Statement st(db_, path_, "SELECT key, value_json FROM run_params WHERE run = ?1");
    st.bind(1, *id);
    while (st.step()) d.params[st.text(0)] = st.text(1);
  }
  {
    Statement st(db_, path_, "SELECT key, value FROM run_environment WHERE run = ?1");
    st.bind(1, *id);
    while (st.step()) d.environment.fields[st.text(0)] = st.text(1);
  }
  {
    Statement st(db_, path_,
                 "SELECT epoch, train_loss, test_loss, test_accuracy, seconds, eval_seconds,"
                 " images FROM epochs WHERE run = ?1 ORDER BY epoch");
    st.bind(1, *id);
    while (st.step()) {
      EpochRecord e;
      e.epoch = static_cast<int>(st.int64(0));
      e.train_loss = st.real(1);
      e.test_loss = st.real(2);
      e.test_accuracy = st.real(3);
      e.seconds = st.real(4);
      e.eval_seconds = st.real(5);
      e.images = st.int64(6);
      d.epochs.push_back(e);
    }
  }
  {
    Statement st(db_, path_,
                 "SELECT step, epoch, images, wall_seconds, eval_seconds, test_loss, test_accuracy"
                 " FROM evals WHERE run = ?1 ORDER BY step");
    st.bind(1, *id);
    while (st.step()) {
      EvalRecord e;
      e.step = st.int64(0);
      e.epoch = static_cast<int>(st.int64(1));
      e.images = st.int64(2);
      e.wall_seconds = st.real(3);
      e.eval_seconds = st.real(4);
      e.test_loss = st.real(5);
      e.test_accuracy = st.real(6);
      d.evals.push_back(e);
    }
  }
  {
    Statement st(db_, path_,
                 "SELECT phase, calls, host_ms, gpu_ms FROM phases WHERE run = ?1 ORDER BY rowid");
    st.bind(1, *id);
    while (st.step())
      d.phases.push_back({st.text(0), st.int64(1), st.real(2), st.real(3)});
  }
  {
    Statement st(db_, path_,
                 "SELECT name, phase, calls, total_ms, min_ms, max_ms FROM kernels"
                 " WHERE run = ?1 ORDER BY rowid");
    st.bind(1, *id);
    while (st.step())
      d.kernels.push_back(
          {st.text(0), st.text(1), st.int64(2), st.real(3), st.real(4), st.real(5)});
  }
  {
    Statement st(db_, path_,
                 "SELECT direction, memory, count, bytes, total_ms FROM memcpy WHERE run = ?1"
                 " ORDER BY rowid");
    st.bind(1, *id);
    while (st.step())
      d.memcpy.push_back({st.text(0), st.text(1), st.int64(2), st.int64(3), st.real(4)});
  }
  {
    Statement st(db_, path_, "SELECT region, bytes FROM memory WHERE run = ?1 ORDER BY rowid");
    st.bind(1, *id);
    while (st.step()) d.memory.push_back({st.text(0), st.int64(1)});
  }
  {
    Statement st(db_, path_,
                 "SELECT layer, pass, key, algo_name, source, algo, math_type, workspace_bytes,"
                 " time_ms FROM conv_algorithms WHERE run = ?1 ORDER BY rowid");
    st.bind(1, *id);
    while (st.step()) {
      ConvAlgoRecord r;
      r.layer = st.text(0);
      r.pass = st.text(1);
      r.key = st.text(2);
      r.algo_name = st.text(3);
      r.source = st.text(4);
      r.choice = {static_cast<int>(st.int64(5)), static_cast<int>(st.int64(6)), st.int64(7),
                  st.real(8)};
      d.conv_algorithms.push_back(r);
    }
  }
  {
    Statement st(db_, path_,
                 "SELECT check_name, message, value FROM findings WHERE run = ?1 ORDER BY rowid");
    st.bind(1, *id);
    while (st.step()) d.findings.push_back({st.text(0), st.text(1), st.real(2)});
  }
  {
    Statement st(db_, path_,
                 "SELECT layer, pass, flops, bytes FROM layer_costs WHERE run = ?1 ORDER BY rowid");
    st.bind(1, *id);
    while (st.step()) d.layer_costs.push_back({st.text(0), st.text(1), st.real(2), st.real(3)});
  }
  {
    Statement st(db_, path_,
                 "SELECT rank, host, device, step_ms_median, data_wait_ms, allreduce_ms,"
                 " bytes_reduced, bus_bytes_per_s FROM ranks WHERE run = ?1 ORDER BY rank");
    st.bind(1, *id);
    while (st.step())
      d.ranks.push_back({static_cast<int>(st.int64(0)), st.text(1), st.text(2), st.real(3),
                         st.real(4), st.real(5), st.real(6), st.real(7)});
  }
  return d;
}

std::vector<StepRecord> Store::get_steps(const std::string& uuid) const {
  Statement st(db_, path_,
               "SELECT s.step, s.epoch, s.kind, s.step_ms, s.data_wait_ms, s.loss, s.lr,"
               " s.loss_scale, s.images, s.skipped FROM steps s JOIN runs r ON r.id = s.run"
               " WHERE r.uuid = ?1 ORDER BY s.step");
  st.bind(1, uuid);
  std::vector<StepRecord> out;
  while (st.step()) {
    StepRecord s;
    s.step = st.int64(0);
    s.epoch = static_cast<int>(st.int64(1));
    s.kind = detail::step_kind_from(st.text(2));
    s.step_ms = st.real(3);
    s.data_wait_ms = st.real(4);
    s.loss = st.real(5);
    s.lr = st.real(6);
    s.loss_scale = st.real(7);
    s.images = st.int64(8);
    s.skipped = st.int64(9) != 0;
    out.push_back(s);
  }
  return out;
}

}  // namespace xrun::store
