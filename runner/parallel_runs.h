// runner/parallel_runs.h: `xrun run FILE --parallel N [--gpus 0,1,...]`:
// up to N planned runs trained at once on one machine, each by a child
// process (`xrun run FILE --only I` into the same store, which takes several
// writers). A child process per run, not a thread: each run needs its own
// CUDA_VISIBLE_DEVICES before CUDA starts, its own OpenMP thread count and
// CPU affinity, and a crash in one run must not end the others.
//
// Two parts, each tested alone: plan_slots (what each concurrent run gets: a
// GPU of its own, or its share of the CPU cores) and run_children (starts the
// children in free slots, prefixes their output, forwards Ctrl-C).
#pragma once

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace xrun::cli {

// What one of the N concurrent runs gets.
struct Slot {
  std::string gpu;        // CUDA_VISIBLE_DEVICES for the child ("" = left as it is)
  std::vector<int> cpus;  // the child's CPU affinity (empty = not pinned)
};

struct SlotPlan {
  std::vector<Slot> slots;
  int cpu_threads = 0;             // train.threads for a CPU run whose threads are 0 (all cores)
  std::vector<std::string> notes;  // what the user should know (more runs than cores)
};

// The slots of `--parallel parallel --gpus gpus` on a machine whose usable
// CPUs are `cpus` (sched_getaffinity). parallel = 0 means one per GPU. The
// cores are split evenly: slot k gets cpus[k*T, (k+1)*T), T = cores / N, and
// a CPU run with threads = 0 trains with T threads. With more runs than
// cores nothing is pinned and each run gets one thread. Returns "" or what is
// wrong with the options (the caller exits 2).
std::string plan_slots(int parallel, const std::vector<std::string>& gpus,
                       const std::vector<int>& cpus, SlotPlan& out);

// One child to run: the planned run's index (for the output prefix) and argv
// (argv[0] a path to execute). `pin`: apply the slot's CPU affinity.
struct ChildRun {
  int index = 0;
  std::vector<std::string> argv;
  bool pin = false;
  std::string label;  // its output's prefix, "[label] "; "" = "[#index] "
  std::vector<std::pair<std::string, std::string>> env;  // set in the child
};

struct ChildEnd {
  int index = 0;
  int exit_code = 0;  // 128 + N when signal N ended it; 127 when it could not start
  bool started = false;  // false: a stop signal came before its turn
  long pid = 0;          // the child's process id (0: none), as the store records it
};

struct ChildrenOutcome {
  std::vector<ChildEnd> ends;  // in the order of `runs`
  int stop_signal = 0;         // the first SIGINT/SIGTERM/SIGHUP received, 0 if none
};

// Runs `runs` in order, at most slots.size() at once, each child in a free
// slot (CUDA_VISIBLE_DEVICES, CPU affinity), in its own process group, with
// stdin from /dev/null and PR_SET_PDEATHSIG = SIGTERM (it stops and stores
// its run as interrupted if this process dies). Each line a child prints is
// written to `out` as "[#I] line". A stop signal to this process (Ctrl-C
// reaches only it, the children being in their own groups) is passed to
// every running child, the second one too (a child's second signal stops it
// at once); no child starts after the first. Returns when all have ended.
// `stop_others_after_s` >= 0 (the ranks of one run, which cannot go on
// without each other): once a child has ended with a non-zero status, the
// ones still running get SIGTERM after that many seconds and SIGKILL 10 s
// later, so that none is left behind.
ChildrenOutcome run_children(const std::vector<ChildRun>& runs, const std::vector<Slot>& slots,
                             std::FILE* out, int stop_others_after_s = -1);

// The bytes of an experiment file as the parent read them, in a temporary
// file of their own ($TMPDIR or /tmp, xrun-experiment-XXXXXX.toml) that each
// child reads instead of the file: a FIFO or `<(...)` gives its bytes once,
// and an edit made meanwhile must not change what a child trains. Removed
// when this object ends.
class FrozenExperiment {
 public:
  explicit FrozenExperiment(const std::string& text);
  ~FrozenExperiment();
  FrozenExperiment(const FrozenExperiment&) = delete;
  FrozenExperiment& operator=(const FrozenExperiment&) = delete;
  bool ok() const { return error_.empty(); }
  const std::string& path() const { return path_; }
  const std::string& error() const { return error_; }  // the OS error, when !ok()

 private:
  std::string path_, error_;
};

}  // namespace xrun::cli
