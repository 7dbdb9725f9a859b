// tests/store/store_test_util.h: fixtures for the store tests: a fresh temp
// directory per test, a filled-in NewRun, raw SQL helpers and a dead pid.
#pragma once

#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "store/store.h"
#include "test_util.h"

namespace store_test {

using TempDir = xrun_test::ScratchDir;

// A run as the runner would describe it; `precision` and `batch` go into the
// flattened params (and the config hash) so tests can tell runs apart.
inline xrun::store::NewRun make_run(const std::string& precision = "fp16", int batch = 512,
                                    const std::string& label = "box-a") {
  xrun::store::NewRun r;
  r.experiment = "classic";
  r.experiment_file = "experiments/classic.toml";
  r.description = "ResNet50 on CIFAR-10";
  r.sweep_index = 0;
  r.config_json = "{\"train\":{\"precision\":\"" + precision + "\",\"batch_size\":" +
                  std::to_string(batch) + "}}";
  r.config_hash = "cfg-" + precision + "-" + std::to_string(batch) + "-" + label;
  r.experiment_hash = "exp-classic";
  r.label = label;
  r.device = "cuda:0";
  r.force = true;  // tests store repeats of one config, as `xrun run --force` does
  r.params = {{"train.precision", "\"" + precision + "\""},
              {"train.batch_size", std::to_string(batch)},
              {"train.cudnn_benchmark", "true"},
              {"train.lr", "0.001"},
              {"data.workers", "4"},
              {"data.root", "null"}};
  r.environment.fields = {{"device_name", "NVIDIA GeForce RTX 4090 D"},
                          {"device_uuid", "GPU-1234"},
                          {"compute_capability", "8.9"},
                          {"driver", "550.54"},
                          {"cuda_runtime", "12.4"},
                          {"cudnn", "9.1.0"},
                          {"cublas", "12.4.2"},
                          {"onednn", "3.4"},
                          {"xrun_version", "0.1.0"},
                          {"git_commit", "abc123"},
                          {"cpu", "AMD EPYC 7763"},
                          {"sm_count", "114"},
                          {"memory_bytes", "25757220864"}};
  return r;
}

// Runs SQL on a separate raw connection; returns the first column of the
// first row as text ("" when no row).
inline std::string sql_text(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) throw std::runtime_error("open failed");
  sqlite3_busy_timeout(db, 10000);
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) != SQLITE_OK) {
    std::string msg = sqlite3_errmsg(db);
    sqlite3_close(db);
    throw std::runtime_error("prepare failed: " + msg + " in " + sql);
  }
  std::string out;
  int rc = sqlite3_step(st);
  if (rc == SQLITE_ROW) {
    const unsigned char* t = sqlite3_column_text(st, 0);
    out = t ? reinterpret_cast<const char*>(t) : "";
  } else if (rc != SQLITE_DONE) {
    std::string msg = sqlite3_errmsg(db);
    sqlite3_finalize(st);
    sqlite3_close(db);
    throw std::runtime_error("step failed: " + msg + " in " + sql);
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  return out;
}

inline long long sql_int(const std::string& path, const std::string& sql) {
  return std::stoll(sql_text(path, sql));
}

// Executes statements (no results) on a raw connection.
inline void sql_exec(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) throw std::runtime_error("open failed");
  sqlite3_busy_timeout(db, 10000);
  char* err = nullptr;
  int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  std::string msg = err ? err : "";
  sqlite3_free(err);
  sqlite3_close(db);
  if (rc != SQLITE_OK) throw std::runtime_error("exec failed: " + msg + " in " + sql);
}

// The pid of a child that has exited and been reaped: no process has it.
inline pid_t dead_pid() {
  pid_t pid = fork();
  if (pid == 0) _exit(0);
  int status = 0;
  waitpid(pid, &status, 0);
  return pid;
}

}  // namespace store_test
