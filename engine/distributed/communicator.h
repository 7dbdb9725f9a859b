// engine/distributed/communicator.h: the collectives data-parallel training
// needs between the ranks of one run (train.ranks), behind one interface:
// gloo between CPU processes (gloo_communicator.cpp, TCP, rendezvous through
// a directory every rank can see) and a one-rank stand-in that does nothing.
// Every call is collective: each rank makes the same calls in the same order
// with the same sizes, or the run hangs until the timeout.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

namespace xrun::dist {

// A collective that failed: a rank gone (its process ended, its connection
// reset) or silent past the timeout. The message names the ranks known gone.
class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;  // "gloo", "local"
  // Sums `n` values across the ranks, in place, on every rank (host memory).
  virtual void all_reduce_sum(float* data, size_t n) = 0;
  virtual void all_reduce_sum(double* data, size_t n) = 0;
  virtual void barrier() = 0;
};

// One rank: every collective leaves its data as it is.
class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "local"; }
  void all_reduce_sum(float*, size_t) override {}
  void all_reduce_sum(double*, size_t) override {}
  void barrier() override {}
};

// Where a rank finds the others: its own rank, how many there are, the
// rendezvous directory (gloo's FileStore: every rank writes its address
// there; fresh for each launch), the address this rank listens on
// ("127.0.0.1" when every rank is on one machine; the host's name across
// machines) and how long a collective may wait for the others.
struct RankInfo {
  int rank = 0;
  int size = 1;
  std::string rendezvous;
  std::string host = "127.0.0.1";
  std::chrono::milliseconds timeout{std::chrono::seconds(120)};
};

// The ranks as the environment names them (XRUN_RANK, XRUN_WORLD_SIZE,
// XRUN_RENDEZVOUS, XRUN_RANK_HOST, XRUN_RANK_TIMEOUT_S: set by `xrun run`'s
// rank launcher for its children); nullopt-like size 1 when XRUN_RANK is
// unset. std::invalid_argument when the variables are malformed.
RankInfo rank_info_from_environment();

// Joins the others through gloo over TCP (blocks until every rank has
// joined or the timeout passes: CommError). Each rank also leaves
// "rank-R.pid" (host and process id) in the rendezvous directory, so a
// failed collective can say which ranks are gone.
std::unique_ptr<Communicator> connect_gloo(const RankInfo& info);

// The ranks of `info` whose rank-R.pid names a process of this host that
// no longer runs ("rank 1 (pid 4242) has ended"); "" when none is known gone.
std::string lost_ranks(const RankInfo& info);

}  // namespace xrun::dist
