// engine/trainer.h: one training run, start to finish: backend, data, model,
// optimizer, the step loop (warmup steps, measured steps, epochs, eval),
// checkpoints. Results leave through TrainEvents as plain values while the
// run goes (so an interrupted run keeps what it did) and as a TrainResult at
// the end. The runner (runner/run_command.cpp) stores them.
#pragma once

#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/config.h"
#include "engine/records.h"

namespace xrun {

// A run that cannot go on: NaN/inf loss, a batch that does not fit, bad
// weights file... what() says what and where (step, epoch, file).
class TrainError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Ctrl-C (TrainEvents::stop_requested) ended the run between two steps.
class TrainInterrupted : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Progress {
  int64_t step = 0;          // steps done
  int64_t total_steps = 0;
  int epoch = 0;             // 0-based
  int epochs = 0;
  double loss = 0;           // last loss read back
  double images_per_second = 0;  // over the last progress interval
  double eta_seconds = 0;
  bool warmup = false;
};

// The run's size, known once data and model are set up.
struct RunShape {
  int64_t total_steps = 0;
  int64_t steps_per_epoch = 0;
  int64_t start_step = 0;  // > 0 when resumed from a checkpoint
  int epochs = 0;
  int batch_size = 0;
  int64_t parameters = 0;
};

struct TrainEvents {
  // Backend, data and model are up, weights loaded; before the first step.
  std::function<void(const Environment&, const RunShape&)> started;
  std::function<void(const StepRecord&)> step;
  std::function<void(const EpochRecord&)> epoch;
  std::function<void(const Progress&)> progress;        // every log_every steps
  std::function<void(const std::string&)> message;      // one-line notices
  std::function<bool()> stop_requested;                 // polled between steps
};

struct TrainResult {
  RunSummary summary;
  std::vector<PhaseRecord> phases;
  std::vector<KernelRecord> layers;  // profile.layers: per layer and pass, largest first
  std::vector<MemoryRecord> memory;  // the memory plan by region
  std::vector<ConvAlgoRecord> conv_algorithms;  // CUDA: per convolution and pass
  std::vector<TraceEvent> trace;  // profile.cupti = "trace": the first measured steps' ranges
  // CUDA with CUPTI (profile.cupti summary/trace): per kernel and phase,
  // copies per direction, and the GPU checks' findings, over the traced steps.
  std::vector<KernelRecord> kernels;
  std::vector<MemcpyRecord> copies;
  std::vector<FindingRecord> gpu_findings;
  Environment environment;
};

// What a run may reuse from earlier runs (the runner reads it from the store).
struct TrainContext {
  // train.cudnn_benchmark = "cached": convolution algorithms chosen before on
  // this card, driver and cuDNN, by ConvAlgoRecord::key.
  std::map<std::string, ConvAlgoChoice> algo_cache;
};

// Trains per `cfg`. Throws TrainError, TrainInterrupted, data::DataError, or
// std::runtime_error for a device that cannot be used.
TrainResult train(const RunConfig& cfg, const TrainEvents& events, const TrainContext& context = {});

}  // namespace xrun
