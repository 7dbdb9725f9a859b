// runner/rank_launch.h: the launcher side of a run with train.ranks = N > 1
// on one machine (as torchrun --standalone): N children `xrun run FILE
// --only I`, one per rank, each told its rank through the environment
// (XRUN_RANK, XRUN_WORLD_SIZE, XRUN_RENDEZVOUS, XRUN_RANK_HOST,
// XRUN_RANK_TIMEOUT_S; engine/distributed/communicator.h reads them), each
// on its own share of the CPU cores, their output prefixed "[rank R]". Rank 0
// stores the run; the others only train. They meet in a fresh directory
// beside the store (gloo's FileStore), never on a fixed port, and prove to
// each other that they hold the secret written there.
#pragma once

#include <string>
#include <vector>

#include "runner/experiment.h"
#include "runner/parallel_runs.h"

namespace xrun::cli {

// A planned run's train.ranks, and whether ranks train it: several, or one
// joined through a distributed.backend the file names (check.sh's one-GPU
// NCCL run). Such a run is started by a launcher (`xrun run`'s, or srun in
// an `xrun submit` job), never trained in the planning process.
int planned_ranks(const RunSpec& spec);
bool trained_by_ranks(const RunSpec& spec);

struct RankLaunch {
  std::vector<std::string> argv;  // one rank's command (the same for all)
  int ranks = 2;
  std::string rendezvous;         // the directory they meet in
  int timeout_s = 120;            // distributed.timeout_s
  bool pin = true;                // each rank on its slot's cores (CPU ranks)
};

// One ChildRun per rank, in rank order (index = the planned run's index).
std::vector<ChildRun> rank_children(const RankLaunch& launch, int run_index);

// A fresh rendezvous directory ".xrun-ranks-XXXXXX" in `beside`'s folder
// (the store's: a folder every rank can see; mode 0700) holding the run's
// secret (dist::write_rank_secret), removed with its contents when this
// object ends. ok() false, with error(), when it cannot be made.
class RendezvousDir {
 public:
  explicit RendezvousDir(const std::string& beside);
  ~RendezvousDir();
  RendezvousDir(const RendezvousDir&) = delete;
  RendezvousDir& operator=(const RendezvousDir&) = delete;
  bool ok() const { return error_.empty(); }
  const std::string& path() const { return path_; }
  const std::string& error() const { return error_; }

 private:
  std::string path_, error_;
};

}  // namespace xrun::cli
