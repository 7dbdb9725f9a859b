// runner/collect_command.cpp: `xrun collect DIR --into OUT`: the task
// stores a Slurm job array wrote under DIR (task-RUN.db, runner/slurm.h)
// merged into one store with the existing merge (by run UUID: collecting
// twice adds nothing, the task stores are only read). A task whose store
// still holds a running run is reported and left out, never half-merged;
// but a run left `running` by a try that died (a node lost, a SIGKILL)
// does not hold back a later try of the same run (same experiment hash)
// that completed: that store is collected from a private copy in which the
// dead try is marked interrupted. A task store that cannot be read (not an
// xrun store, or corrupt by SQLite's quick_check) is named with the reason
// and skipped, the others are collected, and the exit code is 1. Runs
// submitted (DIR/jobs.tsv) with no store yet are reported as not started.
#include <sqlite3.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "runner/commands.h"
#include "runner/regular_file.h"
#include "store/merge.h"
#include "store/store.h"

namespace xrun::cli {

namespace {

namespace fs = std::filesystem;

// The run index of "task-12.db", or -1.
int task_index(const std::string& name) {
  if (name.rfind("task-", 0) != 0 || name.size() < 9 || name.substr(name.size() - 3) != ".db")
    return -1;
  const std::string digits = name.substr(5, name.size() - 8);
  if (digits.empty() || digits.size() > 9 ||
      digits.find_first_not_of("0123456789") != std::string::npos)
    return -1;
  return std::stoi(digits);
}

// The run indices every submission named (last column of jobs.tsv); `why`
// says why jobs.tsv could not be read ("" when read or absent).
std::set<int> submitted_runs(const fs::path& dir, std::string& why) {
  std::set<int> runs;
  const RegularFile tsv = read_regular_file((dir / "jobs.tsv").string(), 64 << 20);
  if (tsv.status == RegularFile::not_regular || tsv.status == RegularFile::unreadable)
    why = (dir / "jobs.tsv").string() + " is " +
          (tsv.status == RegularFile::not_regular ? tsv.why + ", not a regular file"
                                                  : "unreadable: " + tsv.why);
  std::stringstream in(tsv.text);
  std::string line;
  while (std::getline(in, line)) {
    const size_t tab = line.rfind('\t');
    if (tab == std::string::npos) continue;
    std::stringstream list(line.substr(tab + 1));
    std::string word;
    while (std::getline(list, word, ','))
      if (!word.empty() && word.find_first_not_of("0123456789") == std::string::npos &&
          word.size() <= 9)
        runs.insert(std::stoi(word));
  }
  return runs;
}

// A folder of its own under the system's temporary folder, removed with
// everything in it at the end of the scope.
class ScratchFolder {
 public:
  const fs::path& path() {
    if (path_.empty()) {
      std::string tmpl = (fs::temp_directory_path() / "xrun-collect-XXXXXX").string();
      if (!mkdtemp(tmpl.data()))
        throw store::StoreError(tmpl + ": cannot create a temporary folder for a task store copy");
      path_ = tmpl;
    }
    return path_;
  }
  ~ScratchFolder() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }

 private:
  fs::path path_;
};

// A copy of `task` (at `path`) in `scratch` in which each run of `stale` is
// marked interrupted, the later try that completed it named; the task
// store itself is only read.
std::string superseded_copy(const store::Store& task, const std::string& path,
                            const std::vector<std::pair<store::RunInfo, std::string>>& stale,
                            ScratchFolder& scratch) {
  const std::string copy = (scratch.path() / fs::path(path).filename()).string();
  sqlite3_stmt* st = nullptr;
  int rc = sqlite3_prepare_v2(task.handle(), "VACUUM INTO ?1", -1, &st, nullptr);
  if (rc == SQLITE_OK) rc = sqlite3_bind_text(st, 1, copy.c_str(), -1, SQLITE_TRANSIENT);
  if (rc == SQLITE_OK) rc = sqlite3_step(st) == SQLITE_DONE ? SQLITE_OK : SQLITE_ERROR;
  const std::string error = sqlite3_errmsg(task.handle());
  sqlite3_finalize(st);
  if (rc != SQLITE_OK) throw store::StoreError(path + ": cannot copy it to " + copy + " (" + error + ")");
  store::Store out(copy);
  for (const auto& [run, completed_by] : stale)
    out.finish_run(run.uuid, store::RunStatus::interrupted, {},
                   "left running by a try that ended without a word; a later try of the same "
                   "run completed it as run " + completed_by);
  return copy;
}

}  // namespace

int collect_command(const CollectArgs& args) {
  const fs::path dir(args.dir);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    std::cerr << "xrun collect: " << args.dir << " is not a folder (the --results of xrun submit)\n";
    return kUsage;
  }
  std::vector<std::pair<int, std::string>> tasks;  // (run index, store path)
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const int index = task_index(e.path().filename().string());
    if (index >= 0 && e.is_regular_file()) tasks.emplace_back(index, e.path().string());
  }
  std::sort(tasks.begin(), tasks.end());
  std::vector<std::string> finished;           // stores to merge, or their copies
  std::map<std::string, std::string> copy_of;  // copy -> the task store it copies
  ScratchFolder scratch;
  std::set<int> seen;
  int unfinished = 0, unreadable = 0;
  for (const auto& [index, path] : tasks) {
    seen.insert(index);
    try {
      store::Store task(path, store::Store::Access::read_only);
      if (const std::string damage = task.quick_check(); !damage.empty()) {
        std::cout << "run " << index << ": " << path << " is corrupt (SQLite's quick_check: "
                  << damage << "); skipped, not collected\n";
        ++unreadable;
        continue;
      }
      // A running run with a complete run of the same experiment hash
      // beside it is a try that died and was tried again: the completed
      // retry wins. Any other running run holds the store back.
      const auto complete = task.list_runs({{"status", "complete"}});
      std::vector<std::pair<store::RunInfo, std::string>> stale;  // (run, completed by)
      int running = 0;
      for (const store::RunInfo& r : task.list_runs({{"status", "running"}})) {
        const auto retry = std::find_if(complete.begin(), complete.end(), [&](const store::RunInfo& c) {
          return !r.experiment_hash.empty() && c.experiment_hash == r.experiment_hash;
        });
        if (retry != complete.end()) stale.emplace_back(r, retry->uuid);
        else ++running;
      }
      if (running) {
        std::cout << "run " << index << ": still running in " << path
                  << " (or its task ended without a word: see its log); not collected\n";
        ++unfinished;
        continue;
      }
      if (stale.empty()) {
        finished.push_back(path);
        continue;
      }
      for (const auto& [run, completed_by] : stale)
        std::cout << "run " << index << ": a try left run " << run.uuid << " running in " << path
                  << "; a later try completed it (run " << completed_by
                  << "): collected, the earlier try as interrupted\n";
      const std::string copy = superseded_copy(task, path, stale, scratch);
      copy_of[copy] = path;
      finished.push_back(copy);
    } catch (const store::StoreError& e) {
      std::cout << "run " << index << ": " << path << " cannot be read (" << e.what()
                << "); skipped, not collected\n";
      ++unreadable;
    }
  }
  std::string tsv_problem;
  for (int run : submitted_runs(dir, tsv_problem))
    if (!seen.count(run)) {
      std::cout << "run " << run << ": submitted, no store yet (pending, or failed to start)\n";
      ++unfinished;
    }
  if (!tsv_problem.empty()) {
    std::cout << "runs submitted: not known: " << tsv_problem << "\n";
    ++unreadable;
  }
  const std::string unread_note =
      unreadable ? std::to_string(unreadable) + " store(s) or file(s) not read (above)" : "";
  if (finished.empty()) {
    std::cout << "nothing to collect from " << args.dir << " yet"
              << (unreadable ? "; " + unread_note : std::string()) << "\n";
    return unreadable ? kRunFailed : kOk;
  }
  try {
    int64_t added = 0, present = 0;
    for (const store::MergeCount& c : store::merge_stores(args.into, finished)) {
      added += c.added;
      present += c.already_present;
    }
    std::cout << "collected " << finished.size() << " task store(s) from " << args.dir << " into "
              << args.into << ": " << added << " run(s) added, " << present
              << " already present" << (unfinished ? "; " + std::to_string(unfinished) +
                                                         " run(s) not finished (above)"
                                                   : std::string())
              << (unreadable ? "; " + unread_note : std::string()) << "\n";
    return unreadable ? kRunFailed : kOk;
  } catch (const store::StoreError& e) {
    // A copy's temporary path means nothing to the user: name its task store.
    std::string what = e.what();
    for (const auto& [copy, path] : copy_of)
      for (size_t at = 0; (at = what.find(copy, at)) != std::string::npos; at += path.size())
        what.replace(at, copy.size(), path);
    std::cerr << "xrun: " << what << "\nxrun: nothing was merged into " << args.into << "\n";
    return kRunFailed;
  }
}

}  // namespace xrun::cli
