// engine/distributed/rank_stats.cpp: see rank_stats.h.
#include "engine/distributed/rank_stats.h"

#include <cmath>
#include <limits>

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

}  // namespace xrun::dist
