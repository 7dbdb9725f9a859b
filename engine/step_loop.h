// engine/step_loop.h: the training loop, over any StepSource: which steps
// are warmup and which are measured, epochs, the loss read back at logging
// intervals and epoch ends (a NaN or infinite loss stops the run), the
// evaluation and checkpoint at each epoch's end, evaluations every
// train.eval_every steps (each timed from the first step, for the time to a
// target accuracy), Ctrl-C between steps, and
// every event to the run's observers (core/run_observer.h). The real source
// is the trainer's (engine/trainer.cpp: backend, model, data); tests drive
// the loop with a fake one and no backend.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/run_observer.h"

namespace xrun {

// A run that cannot go on: NaN/inf loss, a batch that does not fit, bad
// weights file... what() says what and where (step, epoch, file).
class TrainError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Ctrl-C (or another stop request) ended the run between two steps.
class TrainInterrupted : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Losses summed since the last read.
struct LossTotals {
  double loss_sum = 0;  // over rows of -log p(label)
  int64_t correct = 0;  // top-1 hits
  int64_t rows = 0;
};

// What the loop drives: one object per run.
class StepSource {
 public:
  virtual ~StepSource() = default;
  // Before the epoch's first step (or the resumed step within it).
  virtual void start_epoch(int epoch, int64_t step_in_epoch) = 0;
  // One optimizer step: its micro-batches, forward, backward, update and the
  // end-of-step synchronisation, each phase reported to `obs`. Fills the
  // record's step_ms, data_wait_ms, images, lr, loss_scale and skipped.
  virtual StepRecord step(const StepStart& at, RunObserver& obs) = 0;
  // The training losses since the last read (may wait for the device).
  virtual LossTotals read_loss() = 0;
  // Test loss and top-1 accuracy at an epoch's end; false where the run
  // does not evaluate.
  virtual bool evaluate(RunObserver& obs, double& test_loss, double& test_accuracy) = 0;
  // The checkpoint at `step` (steps done), where the run keeps one.
  virtual void save(int64_t step, RunObserver& obs) = 0;
};

struct LoopPlan {
  int64_t start_step = 0;       // > 0 when resumed
  int64_t total_steps = 0;
  int64_t steps_per_epoch = 1;
  int64_t images_per_step = 0;  // batch x accumulate
  int log_every = 10;
  bool loss_every_step = false; // host-synchronous backends: reading the loss costs nothing
  MeasureConfig measure;
  int64_t eval_every = 0;       // also evaluate every this many steps (0: epoch ends only)
  std::string context;          // for error messages: "precision fp16, lr ..." is added per step
  // Seconds on a monotonic clock, for the evaluations' wall times; empty:
  // std::chrono::steady_clock (tests pass a fake one).
  std::function<double()> clock;
};

// Warmup, measured or after the measured ones.
StepKind step_kind(const MeasureConfig& measure, int64_t step);

struct LoopResult {
  std::vector<StepRecord> steps;
  std::vector<EvalRecord> evals;  // every evaluation, in order
  double last_loss = 0, test_loss = 0, test_accuracy = 0;  // NaN where none
};

// Runs steps [start_step, total_steps). `stop_requested` is polled before
// each step: then the checkpoint is saved and TrainInterrupted thrown.
LoopResult run_steps(StepSource& source, const LoopPlan& plan, RunObserver& obs,
                     const std::function<bool()>& stop_requested);

}  // namespace xrun
