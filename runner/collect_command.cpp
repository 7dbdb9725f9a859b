// runner/collect_command.cpp: `xrun collect DIR --into OUT`: the task
// stores a Slurm job array wrote under DIR (task-RUN.db, runner/slurm.h)
// merged into one store with the existing merge (by run UUID: collecting
// twice adds nothing, the task stores are only read). A task whose store
// still holds a running run is reported and left out, never half-merged;
// runs submitted (DIR/jobs.tsv) with no store yet are reported as not
// started.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

#include "runner/commands.h"
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

// The run indices every submission named (third column of jobs.tsv).
std::set<int> submitted_runs(const fs::path& dir) {
  std::set<int> runs;
  std::ifstream in(dir / "jobs.tsv");
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
  std::vector<std::string> finished;
  std::set<int> seen;
  int unfinished = 0;
  for (const auto& [index, path] : tasks) {
    seen.insert(index);
    try {
      store::Store task(path, store::Store::Access::read_only);
      const auto running = task.list_runs({{"status", "running"}});
      if (!running.empty()) {
        std::cout << "run " << index << ": still running in " << path
                  << " (or its task ended without a word: see its log); not collected\n";
        ++unfinished;
        continue;
      }
      finished.push_back(path);
    } catch (const store::StoreError& e) {
      std::cout << "run " << index << ": " << path << " cannot be read (" << e.what()
                << "); not collected\n";
      ++unfinished;
    }
  }
  for (int run : submitted_runs(dir))
    if (!seen.count(run)) {
      std::cout << "run " << run << ": submitted, no store yet (pending, or failed to start)\n";
      ++unfinished;
    }
  if (finished.empty()) {
    std::cout << "nothing to collect from " << args.dir << " yet\n";
    return kOk;
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
              << "\n";
    return kOk;
  } catch (const store::StoreError& e) {
    std::cerr << "xrun: " << e.what() << "\nxrun: nothing was merged into " << args.into << "\n";
    return kRunFailed;
  }
}

}  // namespace xrun::cli
