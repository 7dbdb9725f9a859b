// tests/cli/cli_util.h: running the real xrun binary from tests: a scratch
// directory with an experiment file and a store, the command's output and
// exit code, and raw SQL on the store it wrote.
#pragma once

#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

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
  // The same with environment assignments before the program ("A=1 B=2").
  CommandResult xrun_env(const std::string& assignments, const std::string& args) const {
    return run_command("cd " + shell_quote(dir.str()) + " && " + assignments + " " +
                       shell_quote(xrun_binary()) + " " + args);
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

// "run FILE --db STORE" for CliFixture::xrun (both quoted).
inline std::string run_args(const CliFixture& f, const std::string& file) {
  return "run " + shell_quote(file) + " --db " + shell_quote(f.db());
}

// Starts `xrun run FILE --db STORE [extra...]` in the background, its output
// to `log` in the scratch dir; returns its pid. `own_group`: in a process
// group of its own, as a shell starts a foreground job (kill(-pid, SIGINT)
// is then a terminal's Ctrl-C).
inline pid_t spawn_xrun(const CliFixture& f, const std::string& file,
                        const std::vector<std::string>& extra = {},
                        const std::string& log = "xrun.log", bool own_group = false) {
  const pid_t pid = fork();
  if (pid == 0) {
    if (own_group) setpgid(0, 0);
    const std::string log_path = f.dir.file(log);
    if (!freopen(log_path.c_str(), "w", stdout) || !freopen(log_path.c_str(), "a", stderr)) _exit(99);
    const std::string bin = xrun_binary(), db = f.db();
    std::vector<const char*> argv = {bin.c_str(), "run", file.c_str(), "--db", db.c_str()};
    for (const std::string& a : extra) argv.push_back(a.c_str());
    argv.push_back(nullptr);
    execv(bin.c_str(), const_cast<char* const*>(argv.data()));
    _exit(98);
  }
  if (own_group) setpgid(pid, pid);  // here too, so the group exists before any kill
  return pid;
}

// Waits until the store holds at least `steps` steps (or gives up after 120 s,
// or as soon as the process has ended).
inline bool wait_for_steps(const CliFixture& f, int steps, pid_t pid) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return false;  // it ended (and is reaped)
    try {
      if (std::filesystem::exists(f.db()) && std::stoi(f.sql("SELECT count(*) FROM steps")) >= steps)
        return true;
    } catch (const std::exception&) {  // store being created: try again
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// The exit code of a child: its status, or 128 + the signal that ended it.
inline int wait_exit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace xrun_test
