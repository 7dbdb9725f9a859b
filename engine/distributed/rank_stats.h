// engine/distributed/rank_stats.h: what the ranks of one run tell each other
// when it ends: each rank's RankRecord (core/records.h), gathered on every
// rank, so rank 0 can store them all. Built on all_reduce_sum alone (each
// rank writes its own row of a zeroed table and the sum is the table), so
// every Communicator has it.
#pragma once

#include <string>
#include <vector>

#include "core/records.h"
#include "engine/distributed/communicator.h"

namespace xrun::dist {

// Every rank's `mine`, in rank order (text up to `max_bytes` bytes each,
// longer text cut there). Collective.
std::vector<std::string> all_gather_text(Communicator& comm, const std::string& mine,
                                         size_t max_bytes = 256);

// Every rank's record, in rank order; `mine.rank` is set from `comm`.
// Collective.
std::vector<RankRecord> gather_rank_records(Communicator& comm, RankRecord mine);

// nccl-tests' bus bandwidth of an all-reduce of `bytes` over `ranks` ranks
// that took `seconds`: bytes / seconds x 2 (ranks - 1) / ranks, the traffic
// each rank's link carries in a ring. NaN when seconds is not positive.
double allreduce_bus_bandwidth(double bytes, double seconds, int ranks);

// The `allreduce_exposed` finding: where the slowest rank's exposed
// all-reduce is more than `threshold` of its median step, a FindingRecord
// (value: that share) with the time, the bytes per step, the bus bandwidth
// and the bucket size it saw, and what to try. false otherwise.
bool exposed_allreduce_finding(const std::vector<RankRecord>& ranks, double bucket_mb,
                               FindingRecord& out, double threshold = 0.2);

}  // namespace xrun::dist
