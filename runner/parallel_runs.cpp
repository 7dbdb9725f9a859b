// runner/parallel_runs.cpp: see parallel_runs.h.
#include "runner/parallel_runs.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>

namespace xrun::cli {

std::string plan_slots(int parallel, const std::vector<std::string>& gpus,
                       const std::vector<int>& cpus, SlotPlan& out) {
  out = SlotPlan{};
  if (parallel < 0) return "--parallel " + std::to_string(parallel) + ": expected at least 1";
  std::set<std::string> seen;
  for (const std::string& g : gpus) {
    const bool word = !g.empty() && std::none_of(g.begin(), g.end(), [](char c) {
      return std::isspace(static_cast<unsigned char>(c)) || c == '=';
    });
    if (!word)
      return "--gpus '" + g + "': expected GPU indices or UUIDs as nvidia-smi lists them, " +
             "e.g. --gpus 0,1";
    if (!seen.insert(g).second) return "--gpus lists GPU " + g + " twice: one run per GPU";
  }
  size_t n = static_cast<size_t>(parallel);
  if (!gpus.empty()) {
    if (n == 0) n = gpus.size();
    if (n > gpus.size())
      return "--parallel " + std::to_string(parallel) + " with --gpus listing " +
             std::to_string(gpus.size()) + " GPU(s): one run per GPU, so at most " +
             std::to_string(gpus.size()) + " at once";
  } else if (n == 0) {
    return "--parallel 0: expected at least 1 (or --gpus to run one per GPU)";
  }
  const size_t cores = cpus.size();
  const size_t per_slot = cores >= n ? cores / n : 0;
  out.cpu_threads = per_slot > 0 ? static_cast<int>(per_slot) : 1;
  if (per_slot == 0 && cores > 0)
    out.notes.push_back(std::to_string(n) + " runs at once on " + std::to_string(cores) +
                        " core(s): each CPU run trains with 1 thread and they share the cores");
  for (size_t k = 0; k < n; ++k) {
    Slot s;
    if (!gpus.empty()) s.gpu = gpus[k];
    if (per_slot > 0)
      s.cpus.assign(cpus.begin() + static_cast<long>(k * per_slot),
                    cpus.begin() + static_cast<long>((k + 1) * per_slot));
    out.slots.push_back(std::move(s));
  }
  return "";
}

namespace {

std::atomic<int> g_received{0};  // stop signals received while the children run
std::atomic<int> g_first{0};     // the first of them

void on_stop_signal(int sig) {
  int none = 0;
  g_first.compare_exchange_strong(none, sig);
  g_received.fetch_add(1);
}

constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};

// The stop-signal handlers for the lifetime of run_children; no SA_RESTART,
// so poll() returns at once and the signal is passed on without delay.
struct StopSignals {
  struct sigaction previous[std::size(kStopSignals)];
  StopSignals() {
    g_received = 0;
    g_first = 0;
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < std::size(kStopSignals); ++i)
      sigaction(kStopSignals[i], &sa, &previous[i]);
  }
  ~StopSignals() {
    for (size_t i = 0; i < std::size(kStopSignals); ++i)
      sigaction(kStopSignals[i], &previous[i], nullptr);
  }
};

struct Live {
  pid_t pid = -1;
  int fd = -1;         // read end of the child's stdout + stderr
  size_t run = 0;      // into runs
  size_t slot = 0;     // into slots
  std::string partial; // output after the last newline
};

// Starts one child in `slot`; its output goes to the returned Live's fd.
Live start_child(const ChildRun& run, size_t run_pos, const Slot& slot, size_t slot_pos) {
  Live live;
  live.run = run_pos;
  live.slot = slot_pos;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return live;
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return live;
  }
  if (pid == 0) {
    // Its own process group: the terminal's Ctrl-C reaches only the parent,
    // which passes it on once. If the parent dies, SIGTERM stops the child.
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(128 + SIGTERM);
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    if (const int null = open("/dev/null", O_RDONLY); null >= 0) dup2(null, STDIN_FILENO);
    if (!slot.gpu.empty()) setenv("CUDA_VISIBLE_DEVICES", slot.gpu.c_str(), 1);
    for (const auto& [name, value] : run.env) setenv(name.c_str(), value.c_str(), 1);
    if (run.pin && !slot.cpus.empty()) {
      cpu_set_t set;
      CPU_ZERO(&set);
      for (int c : slot.cpus) CPU_SET(c, &set);
      sched_setaffinity(0, sizeof set, &set);
    }
    std::vector<char*> argv;
    for (const std::string& a : run.argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    std::fprintf(stderr, "cannot start %s: %s\n", run.argv[0].c_str(), std::strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid);  // also here, so the group exists before any signal is passed on
  close(fds[1]);
  fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK);
  live.pid = pid;
  live.fd = fds[0];
  return live;
}

// Reads what the child has written; whole lines go to `out` with its prefix.
// Returns false at end of file.
bool pump(Live& live, const std::string& prefix, std::FILE* out, bool final) {
  char buf[8192];
  bool open = true;
  for (;;) {
    const ssize_t n = read(live.fd, buf, sizeof buf);
    if (n > 0) {
      live.partial.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    open = n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
    break;
  }
  size_t start = 0, nl;
  while ((nl = live.partial.find('\n', start)) != std::string::npos) {
    std::fprintf(out, "[%s] %.*s\n", prefix.c_str(), static_cast<int>(nl - start),
                 live.partial.data() + start);
    start = nl + 1;
  }
  live.partial.erase(0, start);
  if ((final || !open) && !live.partial.empty()) {
    std::fprintf(out, "[%s] %s\n", prefix.c_str(), live.partial.c_str());
    live.partial.clear();
  }
  std::fflush(out);
  return open;
}

}  // namespace

ChildrenOutcome run_children(const std::vector<ChildRun>& runs, const std::vector<Slot>& slots,
                             std::FILE* out, int stop_others_after_s) {
  ChildrenOutcome outcome;
  std::vector<std::string> prefixes;
  for (const ChildRun& r : runs) {
    std::string prefix = r.label;
    if (prefix.empty()) prefix.append("#").append(std::to_string(r.index));
    prefixes.push_back(std::move(prefix));
  }
  using Clock = std::chrono::steady_clock;
  std::optional<Clock::time_point> failed_at;  // the first child to end non-zero
  int escalation = 0;                          // 1: SIGTERM sent, 2: SIGKILL sent
  for (const ChildRun& r : runs) outcome.ends.push_back(ChildEnd{r.index, 0, false});
  if (slots.empty()) return outcome;
  StopSignals signals;
  std::vector<Live> live;
  std::vector<bool> slot_busy(slots.size(), false);
  size_t next = 0;
  int forwarded = 0;
  for (;;) {
    // Pass every stop signal received on to each running child.
    const int received = g_received.load();
    for (; forwarded < received; ++forwarded)
      for (const Live& l : live) kill(l.pid, g_first.load());
    // Start children in free slots, unless asked to stop.
    for (size_t s = 0; received == 0 && s < slots.size() && next < runs.size(); ++s) {
      if (slot_busy[s]) continue;
      Live l = start_child(runs[next], next, slots[s], s);
      outcome.ends[next].started = true;
      if (l.pid < 0) {
        outcome.ends[next].exit_code = 127;
        std::fprintf(out, "[%s] cannot start a process: %s\n", prefixes[next].c_str(),
                     std::strerror(errno));
      } else {
        outcome.ends[next].pid = l.pid;
        slot_busy[s] = true;
        live.push_back(std::move(l));
      }
      ++next;
    }
    if (live.empty() && (next == runs.size() || received > 0)) break;
    // Children that cannot go on without one that failed: stopped, then killed.
    if (failed_at && stop_others_after_s >= 0 && escalation < 2) {
      const double waited = std::chrono::duration<double>(Clock::now() - *failed_at).count();
      if (waited >= stop_others_after_s + 10.0 * escalation) {
        for (const Live& l : live) kill(l.pid, escalation == 0 ? SIGTERM : SIGKILL);
        ++escalation;
      }
    }

    std::vector<pollfd> fds;
    for (const Live& l : live) fds.push_back(pollfd{l.fd, static_cast<short>(l.fd >= 0 ? POLLIN : 0), 0});
    poll(fds.data(), fds.size(), 200);
    for (size_t i = 0; i < live.size(); ++i) {
      Live& l = live[i];
      if (l.fd >= 0 && !pump(l, prefixes[l.run], out, false)) {
        close(l.fd);
        l.fd = -1;
      }
    }
    // Reap the children that have ended.
    for (size_t i = 0; i < live.size();) {
      Live& l = live[i];
      int status = 0;
      if (waitpid(l.pid, &status, WNOHANG) != l.pid) {
        ++i;
        continue;
      }
      if (l.fd >= 0) {
        pump(l, prefixes[l.run], out, true);
        close(l.fd);
      }
      outcome.ends[l.run].exit_code =
          WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      if (outcome.ends[l.run].exit_code != 0 && !failed_at) failed_at = Clock::now();
      slot_busy[l.slot] = false;
      live.erase(live.begin() + static_cast<long>(i));
    }
  }
  outcome.stop_signal = g_first.load();
  return outcome;
}

FrozenExperiment::FrozenExperiment(const std::string& text) {
  std::error_code ec;
  std::string dir = std::filesystem::temp_directory_path(ec).string();
  if (ec || dir.empty()) dir = "/tmp";
  std::string name = (std::filesystem::path(dir) / "xrun-experiment-XXXXXX.toml").string();
  const int fd = mkstemps(name.data(), 5);
  if (fd < 0) {
    path_ = dir;
    error_ = std::strerror(errno);
    return;
  }
  path_ = name;
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error_ = n < 0 ? std::strerror(errno) : "nothing written";
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (close(fd) != 0 && error_.empty()) error_ = std::strerror(errno);
}

FrozenExperiment::~FrozenExperiment() {
  if (path_.find("xrun-experiment-") != std::string::npos) unlink(path_.c_str());
}

}  // namespace xrun::cli
