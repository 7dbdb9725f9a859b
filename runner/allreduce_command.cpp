// runner/allreduce_command.cpp: `xrun doctor --allreduce`: the all-reduce
// a run's CPU ranks do on this machine (gloo over loopback), timed over
// sizes from 1 MiB to --max-mb, with the algorithm and bus bandwidth as
// nccl-tests' all_reduce_perf defines them (engine/distributed/
// allreduce_probe.h). What the all-reduce of a run's gradients could cost
// here, before training one.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>

#include "core/system_memory.h"
#include "engine/distributed/allreduce_probe.h"
#include "engine/distributed/communicator.h"
#include "runner/commands.h"
#include "runner/rank_launch.h"

namespace xrun::cli {

namespace {

// Raises the soft limit on open descriptors towards `want` (up to the hard
// limit); returns the limit now in force.
long raise_descriptor_limit(long want) {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return want;  // unknown: let gloo say
  if (lim.rlim_cur != RLIM_INFINITY && static_cast<long>(lim.rlim_cur) < want) {
    rlimit raised = lim;
    raised.rlim_cur = lim.rlim_max == RLIM_INFINITY ? static_cast<rlim_t>(want)
                                                   : std::min<rlim_t>(lim.rlim_max, static_cast<rlim_t>(want));
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) lim = raised;
  }
  return lim.rlim_cur == RLIM_INFINITY ? want : static_cast<long>(lim.rlim_cur);
}

}  // namespace

int allreduce_command(const AllreduceArgs& args) {
  if (args.ranks < 2 || args.ranks > 64) {
    std::cerr << "xrun: doctor --allreduce --ranks " << args.ranks << ": expected 2 to 64\n";
    return kUsage;
  }
  if (args.max_mb < 1 || args.max_mb > 4096) {
    std::cerr << "xrun: doctor --allreduce --max-mb " << args.max_mb << ": expected 1 to 4096\n";
    return kUsage;
  }
  // Memory: every rank (a thread here) holds the largest size, and gloo's
  // ring as much again for what it receives.
  const double need_bytes = 2.0 * args.ranks * (static_cast<double>(args.max_mb) * (1 << 20));
  if (const double available = static_cast<double>(available_memory_bytes());
      available > 0 && need_bytes > available) {
    std::fprintf(stderr,
                 "xrun: doctor --allreduce --ranks %d --max-mb %d needs about %.1f GiB (each rank "
                 "holds %d MiB, and gloo as much again); this machine has %.1f GiB available: "
                 "lower --ranks or --max-mb\n",
                 args.ranks, args.max_mb, need_bytes / (1 << 30), args.max_mb,
                 available / (1 << 30));
    return kUsage;
  }
  // Descriptors: every pair of ranks is a connection with a socket at each
  // end and a listening one, all in this one process.
  const long need_fds = 3L * args.ranks * (args.ranks - 1) + 64;
  if (const long have = raise_descriptor_limit(need_fds); have < need_fds) {
    std::cerr << "xrun: doctor --allreduce --ranks " << args.ranks << " needs about " << need_fds
              << " open file descriptors (a connection between every two ranks, all in this "
                 "process); the limit is "
              << have << " (ulimit -n): raise it or lower --ranks\n";
    return kUsage;
  }
  std::error_code ec;
  const std::filesystem::path tmp = std::filesystem::temp_directory_path(ec);
  const RendezvousDir meet((ec ? std::filesystem::path("/tmp") : tmp) / "xrun-allreduce");
  if (!meet.ok()) {
    std::cerr << "xrun: doctor --allreduce: cannot make a rendezvous folder " << meet.error() << "\n";
    return kRunFailed;
  }
  constexpr int kIterations = 5;
  std::cout << "all-reduce: gloo, " << args.ranks
            << " ranks (threads of this process) over loopback TCP, float32 sum, mean of "
            << kIterations << " after one untimed\n"
            << "bus bandwidth = algorithm bandwidth x 2 (n - 1) / n (nccl-tests' definition)\n\n";
  std::printf("%10s %12s %14s %14s\n", "size", "time", "algbw", "busbw");
  std::fflush(stdout);
  try {
    const auto samples = dist::measure_allreduce(
        args.ranks, dist::allreduce_sizes(static_cast<size_t>(args.max_mb) << 20), kIterations,
        meet.path());
    for (const dist::AllreduceSample& s : samples)
      std::printf("%6zu MiB %9.2f ms %9.2f GB/s %9.2f GB/s\n", s.bytes >> 20, s.seconds * 1e3,
                  s.algbw / 1e9, s.busbw / 1e9);
  } catch (const dist::CommError& e) {
    std::cerr << "xrun: doctor --allreduce: " << e.what() << "\n";
    return kRunFailed;
  }
  return kOk;
}

}  // namespace xrun::cli
