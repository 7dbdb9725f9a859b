// engine/step_loop.cpp: see step_loop.h.
#include "engine/step_loop.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace xrun {

namespace {

std::string where(int64_t step, int epoch) {
  return "step " + std::to_string(step) + " (epoch " + std::to_string(epoch + 1) + ")";
}

// The figures of the epoch under way.
struct EpochTally {
  EpochRecord rec;
  double loss_sum = 0;
  int64_t loss_rows = 0, steps = 0;
  double start = 0;         // clock seconds
  double eval_seconds = 0;  // in its evaluations
};

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

StepKind step_kind(const MeasureConfig& measure, int64_t step) {
  if (step < measure.warmup_steps) return StepKind::warmup;
  if (measure.measure_steps > 0 && step >= measure.warmup_steps + measure.measure_steps)
    return StepKind::unmeasured;
  return StepKind::measured;
}

LoopResult run_steps(StepSource& source, const LoopPlan& plan, RunObserver& obs,
                     const std::function<bool()>& stop_requested) {
  LoopResult out;
  out.last_loss = out.test_loss = out.test_accuracy = NAN;
  // Room for the steps, but never for all of a long run up front: train.steps
  // may be up to 1e12, and 4e8 records alone would not fit in memory.
  constexpr int64_t kReserveCap = 1 << 16;
  out.steps.reserve(static_cast<size_t>(
      std::clamp<int64_t>(plan.total_steps - plan.start_step, 0, kReserveCap)));
  int64_t step = plan.start_step;
  int epoch = static_cast<int>(step / plan.steps_per_epoch);
  int64_t in_epoch = step % plan.steps_per_epoch;
  EpochTally tally;
  bool epoch_open = false;
  const std::function<double()> clock = plan.clock ? plan.clock : steady_seconds;
  const double run_start = clock();
  double eval_total = 0;
  int64_t images = 0;
  // One evaluation after `step` steps: timed, recorded, told to observers;
  // false where the source does not evaluate.
  const auto evaluate = [&](double& test_loss, double& test_accuracy) {
    const double e0 = clock();
    if (!source.evaluate(obs, test_loss, test_accuracy)) return false;
    const double end = clock();
    tally.eval_seconds += end - e0;
    eval_total += end - e0;
    EvalRecord ev{step, epoch, images, end - run_start, eval_total, test_loss, test_accuracy};
    out.evals.push_back(ev);
    obs.on_eval(ev);
    return true;
  };
  while (step < plan.total_steps) {
    if (stop_requested && stop_requested()) {
      source.save(step, obs);
      throw TrainInterrupted("interrupted before " + where(step, epoch));
    }
    if (!epoch_open) {
      source.start_epoch(epoch, in_epoch);
      tally = EpochTally{};
      tally.start = clock();
      tally.rec.epoch = epoch;
      obs.on_epoch_begin(epoch);
      epoch_open = true;
    }
    const StepStart at{step, epoch, step_kind(plan.measure, step)};
    obs.on_step_begin(at);
    StepRecord rec = source.step(at, obs);
    rec.step = step;
    rec.epoch = epoch;
    rec.kind = at.kind;
    ++step;
    ++in_epoch;
    ++tally.steps;
    images += rec.images;
    const bool epoch_done = in_epoch == plan.steps_per_epoch || step == plan.total_steps;
    const bool eval_due = plan.eval_every > 0 && step % plan.eval_every == 0 && !epoch_done;

    // The loss: every step where reading it costs nothing, else at logging
    // intervals, epoch ends and before an evaluation (whose own losses go
    // through the same totals): a mean over the steps since the last read.
    rec.loss = NAN;
    if (plan.loss_every_step || step % plan.log_every == 0 || epoch_done || eval_due) {
      const LossTotals t = source.read_loss();
      if (t.rows > 0) {
        rec.loss = t.loss_sum / static_cast<double>(t.rows);
        tally.loss_sum += t.loss_sum;
        tally.loss_rows += t.rows;
        if (!std::isfinite(rec.loss)) {
          out.steps.push_back(rec);
          obs.on_step_end(rec);
          throw TrainError("loss is " + std::string(std::isnan(rec.loss) ? "NaN" : "infinite") +
                           " at " + where(step - 1, epoch) + " (" + plan.context + ", lr " +
                           std::to_string(rec.lr) + ")");
        }
        out.last_loss = rec.loss;
      }
    }
    out.steps.push_back(rec);
    obs.on_step_end(rec);
    if (eval_due) {
      double test_loss = NAN, test_accuracy = NAN;
      if (evaluate(test_loss, test_accuracy)) {
        out.test_loss = test_loss;
        out.test_accuracy = test_accuracy;
      }
    }
    if (!epoch_done) continue;

    EpochRecord& e = tally.rec;
    e.seconds = clock() - tally.start - tally.eval_seconds;  // training only
    e.images = tally.steps * plan.images_per_step;
    e.train_loss = tally.loss_rows ? tally.loss_sum / static_cast<double>(tally.loss_rows) : NAN;
    e.test_loss = e.test_accuracy = NAN;
    if (evaluate(e.test_loss, e.test_accuracy)) {
      out.test_loss = e.test_loss;
      out.test_accuracy = e.test_accuracy;
    }
    e.eval_seconds = tally.eval_seconds;  // the epoch's evaluations, mid-epoch ones too
    obs.on_epoch_end(e);
    source.save(step, obs);
    epoch_open = false;
    ++epoch;
    in_epoch = 0;
  }
  return out;
}

}  // namespace xrun
