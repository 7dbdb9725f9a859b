// engine/distributed/rank_stats.cpp: see rank_stats.h.
#include "engine/distributed/rank_stats.h"

#include <cmath>
#include <iomanip>
#include <limits>
#include <sstream>

namespace xrun::dist {

std::vector<std::string> all_gather_text(Communicator& comm, const std::string& mine,
                                         size_t max_bytes) {
  const size_t n = static_cast<size_t>(comm.size());
  // One row per rank: a length, then one byte per value (0..255: exact in a double).
  const size_t row = max_bytes + 1;
  std::vector<double> table(n * row, 0.0);
  const size_t len = std::min(mine.size(), max_bytes);
  double* own = table.data() + static_cast<size_t>(comm.rank()) * row;
  own[0] = static_cast<double>(len);
  for (size_t i = 0; i < len; ++i) own[1 + i] = static_cast<unsigned char>(mine[i]);
  comm.all_reduce_sum(table.data(), table.size());
  std::vector<std::string> out(n);
  for (size_t r = 0; r < n; ++r) {
    const double* at = table.data() + r * row;
    const size_t l = std::min(static_cast<size_t>(at[0]), max_bytes);
    for (size_t i = 0; i < l; ++i) out[r].push_back(static_cast<char>(at[1 + i]));
  }
  return out;
}

std::vector<RankRecord> gather_rank_records(Communicator& comm, RankRecord mine) {
  mine.rank = comm.rank();
  const std::vector<std::string> hosts = all_gather_text(comm, mine.host);
  const std::vector<std::string> devices = all_gather_text(comm, mine.device);
  constexpr size_t kFields = 5;
  const size_t n = static_cast<size_t>(comm.size());
  std::vector<double> table(n * kFields, 0.0);
  double* own = table.data() + static_cast<size_t>(comm.rank()) * kFields;
  own[0] = mine.step_ms_median;
  own[1] = mine.data_wait_ms;
  own[2] = mine.allreduce_ms;
  own[3] = mine.bytes_reduced;
  own[4] = mine.bus_bytes_per_s;
  comm.all_reduce_sum(table.data(), table.size());
  std::vector<RankRecord> out(n);
  for (size_t r = 0; r < n; ++r) {
    const double* at = table.data() + r * kFields;
    out[r] = {static_cast<int>(r), hosts[r], devices[r], at[0], at[1], at[2], at[3], at[4]};
  }
  return out;
}

double allreduce_bus_bandwidth(double bytes, double seconds, int ranks) {
  if (!(seconds > 0) || ranks < 1) return std::numeric_limits<double>::quiet_NaN();
  return bytes / seconds * 2.0 * (ranks - 1) / ranks;
}

bool exposed_allreduce_finding(const std::vector<RankRecord>& ranks, double bucket_mb,
                               FindingRecord& out, double threshold) {
  const RankRecord* worst = nullptr;
  double share = 0;
  for (const RankRecord& r : ranks) {
    if (!(r.step_ms_median > 0)) continue;
    const double s = r.allreduce_ms / r.step_ms_median;
    if (!worst || s > share) worst = &r, share = s;
  }
  if (!worst || !(share > threshold)) return false;
  std::ostringstream m;
  m << std::fixed << std::setprecision(1) << "rank " << worst->rank << " waited "
    << worst->allreduce_ms << " ms of its " << worst->step_ms_median << " ms step ("
    << std::setprecision(0) << 100.0 * share
    << "%) for the gradient all-reduce that the backward pass did not hide: "
    << std::setprecision(1) << worst->bytes_reduced / 1048576.0 << " MiB per step";
  if (std::isfinite(worst->bus_bytes_per_s))
    m << " at " << std::setprecision(2) << worst->bus_bytes_per_s / 1e9 << " GB/s bus bandwidth";
  if (bucket_mb > 0)
    m << ", buckets of " << std::setprecision(1) << bucket_mb
      << " MiB; a larger batch per rank (more compute per byte) or a faster interconnect "
         "would shrink it";
  else
    m << ", one all-reduce after the backward pass; distributed.bucket_mb = 25 overlaps it "
         "with the backward pass, a larger batch per rank gives more compute per byte";
  out = {"allreduce_exposed", m.str(), share};
  return true;
}

}  // namespace xrun::dist
