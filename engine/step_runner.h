// engine/step_runner.h: one training step on a built model: each
// micro-batch's batch taken from the loader and loaded (or staged ahead on
// the GPU), forward, loss, backward and gradient accumulation, then the
// optimizer update with the fp16 loss scaler's verdict (or, with
// train.per_layer_update on the CPU, layer by layer inside the backward
// pass), or the whole step as
// a recorded CUDA graph; with several ranks, the gradients summed across
// them first (the allreduce phase); each phase reported to the run's observers. The
// trainer (engine/trainer.cpp) builds it; the loop (engine/step_loop.h)
// calls it once per step.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>

#include "core/config.h"
#include "core/run_observer.h"
#include "engine/backend.h"
#include "engine/data/loader.h"
#include "engine/distributed/communicator.h"
#include "engine/distributed/gradient_buckets.h"
#include "engine/loss_scaler.h"
#include "engine/batch_input.h"
#include "engine/model/model.h"

namespace xrun {

struct StepParts {
  Backend& backend;
  Model& model;
  LossOp& loss;
  OptimizerOp& optimizer;
  data::Loader& loader;
  BatchInput& input;  // the loader's batches into the model's input
  // The run's ranks (train.ranks): with more than one, each micro-batch's
  // gradients are scaled by 1 / (accumulate x ranks) and summed across the
  // ranks before the update, so every rank applies the same one.
  dist::Communicator& comm;
};

class StepRunner {
 public:
  StepRunner(const RunConfig& cfg, const StepParts& parts, int batch, int64_t steps_per_epoch,
             int64_t total_steps);

  void start_epoch(int epoch, int64_t step_in_epoch);
  StepRecord step(const StepStart& at, RunObserver& obs);

  // State a checkpoint keeps.
  LossScaler& scaler() { return scaler_; }
  // The peak learning rate: train.optimizer.lr scaled to batch x accumulate
  // by train.optimizer.lr_scaling (what the schedule warms up to).
  double peak_lr() const { return peak_lr_; }
  int64_t optimizer_steps = 0;  // applied (not skipped) steps: AdamW's step count
  // Several ranks: the gradient sums of the measured steps (their time, as
  // the step waited for them, and how many), and the bytes each one reduces.
  double allreduce_ms_measured = 0;       // exposed: what the step waited
  double allreduce_busy_ms_measured = 0;  // the all-reduces' own time, hidden or not
  int64_t allreduce_measured = 0;
  double reduced_bytes = 0;

 private:
  const data::HostBatch* take_batch(StepRecord& rec, RunObserver& obs);
  void load(const data::HostBatch* b, bool was_staged, RunObserver& obs);
  void stage(const data::HostBatch* b);
  void replay_graph(const OptimizerStep& os);
  void finish(StepRecord& rec);
  void reduce_gradients(RunObserver& obs, bool measured);

  const RunConfig& cfg_;
  StepParts p_;
  int batch_;
  int64_t steps_per_epoch_, total_steps_;
  int accumulate_;
  int ranks_;
  bool reduce_;  // joined to others (even alone): the gradients are summed before the update
  double peak_lr_;
  LossScaler scaler_;
  DeviceHooks* device_;  // null on the CPU: no staging, no graphs
  // Overlapped input (a backend that stages batches, pinned memory, one
  // batch per step, room for two in the ring): step N+1's batch is taken and
  // its copy issued before step N's synchronisation.
  bool overlap_;
  const data::HostBatch* staged_ = nullptr;
  bool graph_recorded_ = false;  // train.cuda_graphs: the step is recorded
  // train.per_layer_update on a backend that can: each layer's parameters
  // are updated in the backward pass as soon as their gradients are complete
  // (not with accumulation, loss scaling or graphs, which need every gradient).
  bool per_layer_;
  // Several ranks, one micro-batch a step, distributed.bucket_mb > 0: the
  // gradients summed in buckets during the backward pass (each parameter's
  // place in the gradient region by its tensor).
  std::unique_ptr<dist::GradientBuckets> buckets_;
  std::unordered_map<const Tensor*, size_t> grad_start_;
};

}  // namespace xrun
