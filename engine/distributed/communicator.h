// engine/distributed/communicator.h: the collectives data-parallel training
// needs between the ranks of one run (train.ranks), behind one interface:
// gloo between CPU processes (gloo_communicator.cpp, TCP, rendezvous through
// a directory every rank can see), NCCL between GPUs (nccl_communicator.cpp,
// the library loaded at run time) and a one-rank stand-in that does nothing.
// What keeps other processes out: the run's secret (rank_secret.cpp), which
// every gloo rank proves it holds before any data is exchanged, and NCCL's
// unique id (its bootstrap checks the id's random magic), both in the
// rendezvous folder only the user can read.
// Every call is collective: each rank makes the same calls in the same order
// with the same sizes, or the run hangs until the timeout.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

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
  virtual std::string backend() const = 0;  // "gloo", "nccl", "local"
  // Sums `n` values across the ranks, in place, on every rank (host memory).
  virtual void all_reduce_sum(float* data, size_t n) = 0;
  virtual void all_reduce_sum(double* data, size_t n) = 0;
  virtual void barrier() = 0;
  // Whether all_reduce_sum_device works: device memory summed on the device.
  virtual bool sums_device_memory() const { return false; }
  // Sums `n` floats of device memory in place, queued on the CUDA stream
  // `stream` after what is already there; returns once the sum is done (or
  // CommError: a rank gone, or the timeout). Only where sums_device_memory().
  virtual void all_reduce_sum_device(float* data, size_t n, void* stream);
  // The same without waiting (gradient buckets during the backward pass):
  // queued after what `stream` holds so far, on a stream of the
  // communicator's own, and returns at once. wait_device() then waits for
  // every sum queued so, orders `stream`'s later work after them, and
  // returns the time they took on the device (ms, summed).
  virtual void all_reduce_sum_device_async(float* data, size_t n, void* stream);
  virtual double wait_device(void* stream);
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
  bool sums_device_memory() const override { return true; }
  void all_reduce_sum_device(float*, size_t, void*) override {}
  void all_reduce_sum_device_async(float*, size_t, void*) override {}
  double wait_device(void*) override { return 0; }
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
  bool launched = false;  // told by a launcher (xrun run's, or Slurm's srun)
  bool timeout_given = false;  // XRUN_RANK_TIMEOUT_S was set (else the run's own)
  // The run's secret; "" = read it from the rendezvous folder's "secret" at
  // connect (read_rank_secret). Set here only by tests (an impostor's).
  std::string secret;
};

// The run's secret: 32 random bytes as 64 hex digits in "secret" in the
// rendezvous folder (created 0600, never replaced), written by whoever makes
// the folder before any rank starts: `xrun run`'s launcher (RendezvousDir),
// the batch script of `xrun submit` (a folder per job, mode 0700), doctor
// --allreduce. CommError when it cannot be written.
void write_rank_secret(const std::string& rendezvous);
// The secret as written; CommError naming the file and what is wrong when it
// is missing, not a regular file, another user's, readable or writable by
// others (any of mode 077), or not 32-128 characters.
std::string read_rank_secret(const std::string& rendezvous);
// What rank `from` answers rank `to`'s challenge `nonce` with: HMAC-SHA-256
// under the secret of both ranks' numbers and the nonce (32 bytes). Bound to
// the direction, so a proof cannot be replayed on another pair or reflected.
std::string rank_proof(const std::string& secret, int from, int to, std::string_view nonce);
// Whether two proofs are equal, in time independent of where they differ.
bool same_proof(std::string_view a, std::string_view b);
// `n` bytes from the kernel's random source (getrandom).
std::string random_bytes(size_t n);

// The ranks as the environment names them (XRUN_RANK, XRUN_WORLD_SIZE,
// XRUN_RENDEZVOUS, XRUN_RANK_HOST, XRUN_RANK_TIMEOUT_S: set by `xrun run`'s
// rank launcher for its children), or with XRUN_RANKS_FROM=slurm (what
// `xrun submit`'s batch script sets before srun starts one task per rank)
// as Slurm names them: rank SLURM_PROCID of SLURM_NTASKS, listening on this
// host's name (the others may be on other nodes; where the name does not
// resolve, this host's first non-loopback IPv4 address), XRUN_RENDEZVOUS and
// XRUN_RANK_TIMEOUT_S as above. One rank, not launched, when neither is
// set. std::invalid_argument when the variables are malformed.
RankInfo rank_info_from_environment();

// "" when `host` resolves to an address this rank can listen on, else why
// not (gloo crashes on a name that does not resolve: it is checked first).
std::string address_problem(const std::string& host);

// Leaves "rank-R.pid" (this host's name and this process's id) in the
// rendezvous directory: what lost_ranks reads. Every backend's connect does.
void leave_pid_file(const RankInfo& info);

// Joins the others through gloo over TCP (blocks until every rank has
// joined or the timeout passes: CommError). Then, before any data, every
// rank challenges every other with a fresh nonce and checks its rank_proof:
// a process that connected to a rank's port first (gloo takes the first
// connection as the peer) fails the join with a CommError that says so. A
// message gloo cannot take (a stranger's, on a port it won) ends the rank
// with exit code 1 and a message saying so, never an abort. Each rank also
// leaves "rank-R.pid" (host and process id) in the rendezvous directory, so
// a failed collective can say which ranks are gone.
std::unique_ptr<Communicator> connect_gloo(const RankInfo& info);

// Joins the others through NCCL on CUDA device `device` (this process's
// numbering: a launched rank sees its own GPU as 0): rank 0 draws the unique
// id and writes it as "nccl-id" into the rendezvous directory (written
// whole, then renamed), the others wait for it; one rank needs no directory.
// CommError when NCCL cannot be loaded (engine/device/nccl_api.h says
// why), when this build has no NCCL, or when the ranks do not all join
// within the timeout.
std::unique_ptr<Communicator> connect_nccl(const RankInfo& info, int device);

// What distributed.backend ("auto", "gloo", "nccl") joins a run's ranks
// with: auto is NCCL between GPUs, gloo between CPU processes.
std::string backend_for(const std::string& setting, bool gpu);
// connect_nccl(info, device) or connect_gloo(info), as backend_for says.
std::unique_ptr<Communicator> connect(const RankInfo& info, const std::string& setting, bool gpu,
                                      int device);

// The ranks of `info` whose rank-R.pid names a process of this host that
// no longer runs ("rank 1 (pid 4242) has ended"); "" when none is known gone.
std::string lost_ranks(const RankInfo& info);

}  // namespace xrun::dist
