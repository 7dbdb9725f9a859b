// tests/cli/cli_util.h: running the real xrun binary from tests: a scratch
// directory with an experiment file and a store, the command's output and
// exit code, and raw SQL on the store it wrote.
#pragma once

#include <sqlite3.h>

#include <stdexcept>
#include <string>

#include "test_util.h"

namespace xrun_test {

// A small training experiment on learnable synthetic data: resnet18, 16x16,
// quick on two cores. `optimizer`: the lines of [train.optimizer]; `extra` is
// appended (more tables).
inline std::string small_experiment(const std::string& name, const std::string& extra = "",
                                    const std::string& optimizer = "lr = 2e-3") {
  return "name = \"" + name + "\"\n" + R"(
[model]
arch = "resnet18"
[data]
source = "synthetic"
image_size = 16
samples = 640
test_samples = 320
workers = 1
[train]
device = "cpu"
batch_size = 16
epochs = 3
threads = 2
log_every = 5
[measure]
warmup_steps = 3
[train.optimizer]
)" + optimizer + "\n" + extra;
}

class CliFixture {
 public:
  ScratchDir dir;
  std::string db() const { return dir.file("results.db"); }
  std::string write_experiment(const std::string& file, const std::string& toml) const {
    write_bytes(dir.file(file), toml);
    return dir.file(file);
  }
  // Runs xrun with `args` (already quoted where needed) in the scratch dir.
  CommandResult xrun(const std::string& args) const {
    return run_command("cd " + shell_quote(dir.str()) + " && " + shell_quote(xrun_binary()) +
                       " " + args);
  }
  // One value from the store (first column of the first row, "" when none).
  std::string sql(const std::string& query) const {
    sqlite3* db_handle = nullptr;
    if (sqlite3_open_v2(db().c_str(), &db_handle, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK)
      throw std::runtime_error("cannot open " + db());
    sqlite3_stmt* st = nullptr;
    std::string out;
    if (sqlite3_prepare_v2(db_handle, query.c_str(), -1, &st, nullptr) != SQLITE_OK) {
      std::string err = sqlite3_errmsg(db_handle);
      sqlite3_close(db_handle);
      throw std::runtime_error("bad query " + query + ": " + err);
    }
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
      out = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    sqlite3_close(db_handle);
    return out;
  }
  double sql_double(const std::string& query) const { return std::stod(sql(query)); }
};

}  // namespace xrun_test
