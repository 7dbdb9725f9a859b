// engine/trainer.h: one training run, start to finish: backend, data, model,
// optimizer and weights set up (engine/trainer.cpp), then the step loop
// (engine/step_loop.h) over the StepRunner (engine/step_runner.h), then the
// summary. Everything the run does goes to its observers as it happens
// (core/run_observer.h: so an interrupted run keeps what it did) and the
// whole TrainResult at the end. The runner (runner/run_command.cpp) picks
// the observers and stores what they gather.
#pragma once

#include <functional>
#include <map>
#include <string>

#include "core/config.h"
#include "core/records.h"
#include "core/run_observer.h"
#include "engine/distributed/communicator.h"
#include "engine/step_loop.h"

namespace xrun {

// What a run may reuse or be told from outside.
struct TrainContext {
  // train.cudnn_benchmark = "cached": convolution algorithms chosen before on
  // this card, driver and cuDNN, by ConvAlgoRecord::key.
  std::map<std::string, ConvAlgoChoice> algo_cache;
  // Polled between steps (Ctrl-C, a store that can no longer keep steps).
  std::function<bool()> stop_requested;
  // The run's configuration hash (the store's config_hash): kept in the
  // checkpoint's metadata, and train.resume takes only a checkpoint of the
  // same configuration. "" where the caller has none (then not checked).
  std::string config_hash;
  // Why this run trains on the CPU although the machine has a GPU ("" when
  // not so): stored with the run's environment as device_note.
  std::string device_note;
  // The run's ranks (train.ranks > 1: every rank calls train() with its own
  // communicator, rank 0's result is the run's); nullptr = one rank.
  dist::Communicator* comm = nullptr;
  // Test hook (tests/cli/ranks_test.cpp, XRUN_TEST_RANKS_SAME_DATA=1 to
  // xrun): every rank reads what one process alone would, so N ranks must
  // give that process's weights bit for bit.
  bool every_rank_reads_all = false;
};

// Trains per `cfg`. Throws TrainError, TrainInterrupted, data::DataError, or
// std::runtime_error for a device that cannot be used.
TrainResult train(const RunConfig& cfg, RunObserver& observers, const TrainContext& context = {});

}  // namespace xrun
