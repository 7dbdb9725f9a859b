// engine/distributed/allreduce_probe.h: `xrun doctor --allreduce`'s
// measurement: the all-reduce a run's ranks would do, timed over sizes
// from 1 MiB up, as NVIDIA's nccl-tests all_reduce_perf reports it
// (algorithm bandwidth = bytes / time; bus bandwidth = algorithm bandwidth
// x 2 (n - 1) / n, the traffic on each rank's link in a ring). Here the ranks
// are threads of one process joined through gloo over loopback TCP, as a
// run's CPU ranks on one machine talk.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace xrun::dist {

struct AllreduceSample {
  size_t bytes = 0;      // float32 values x 4
  double seconds = 0;    // mean per all-reduce over the timed iterations (rank 0)
  double algbw = 0;      // bytes / s
  double busbw = 0;      // bytes / s
};

// Sizes 1, 4, 16, ... MiB up to `max_bytes` (at least 1 MiB).
std::vector<size_t> allreduce_sizes(size_t max_bytes);

// `ranks` ranks meeting in `rendezvous` (an empty folder), each size once
// untimed, then `iterations` times between barriers. Throws CommError.
std::vector<AllreduceSample> measure_allreduce(int ranks, const std::vector<size_t>& sizes,
                                               int iterations, const std::string& rendezvous);

}  // namespace xrun::dist
