// engine/step_runner.cpp: see step_runner.h.
#include "engine/step_runner.h"

#include <chrono>
#include <cmath>
#include <stdexcept>

#include "engine/schedule.h"
#include "engine/step_loop.h"

namespace xrun {

StepRunner::StepRunner(const RunConfig& cfg, const StepParts& parts, int batch,
                       int64_t steps_per_epoch, int64_t total_steps)
    : cfg_(cfg),
      p_(parts),
      batch_(batch),
      steps_per_epoch_(steps_per_epoch),
      total_steps_(total_steps),
      accumulate_(cfg.train.accumulate),
      ranks_(parts.comm.size()),
      reduce_(parts.comm.backend() != "local"),
      peak_lr_(scaled_lr(cfg.train.optimizer,
                         int64_t{batch} * cfg.train.accumulate * parts.comm.size())),
      scaler_(cfg.train.precision == Precision::fp16),
      device_(parts.backend.device()),
      // (token windows go through load_tokens: no staged image copy)
      overlap_(device_ && cfg.data.pin_memory && cfg.train.accumulate == 1 &&
               cfg.data.prefetch >= 2 && !parts.input.tokens()),
      per_layer_(cfg.train.per_layer_update && parts.optimizer.per_layer() &&
                 cfg.train.accumulate == 1 && !scaler_.enabled() && !cfg.train.cuda_graphs &&
                 !reduce_) {
  // Buckets during the backward pass wherever the ranks sum (a single
  // joined rank too, so check.sh's one-GPU NCCL run goes through them).
  if (reduce_ && accumulate_ == 1 && cfg.distributed.bucket_mb > 0) {
    std::vector<size_t> starts;
    for (const StateEntry& e : parts.model.state())
      if (e.kind == StateEntry::Kind::parameter && e.grad) {
        const size_t start = e.grad->offset / sizeof(float);
        grad_start_[e.tensor] = start;
        starts.push_back(start);
      }
    const auto bytes = static_cast<size_t>(cfg.distributed.bucket_mb * 1024 * 1024);
    const std::span<float> host = parts.optimizer.host_gradients();
    const OptimizerOp::DeviceGradients device = parts.optimizer.device_gradients();
    if (!starts.empty() && !host.empty()) {
      buckets_ = std::make_unique<dist::GradientBuckets>(parts.comm, host, std::move(starts), bytes);
      reduced_bytes = static_cast<double>(host.size_bytes());
    } else if (!starts.empty() && device.data && parts.comm.sums_device_memory()) {
      OptimizerOp& optimizer = parts.optimizer;
      buckets_ = std::make_unique<dist::GradientBuckets>(
          parts.comm,
          dist::GradientBuckets::DeviceRegion{
              device.data, device.count, device.stream,
              [&optimizer](size_t b, size_t e) { optimizer.fold_half_gradients(b, e); }},
          std::move(starts), bytes);
      reduced_bytes = static_cast<double>(device.count * sizeof(float));
    }
  }
  // (The norm needs every gradient; a recorded graph would keep the first
  // step's loss scale.)
  if (cfg.train.clip_grad_norm > 0 && (per_layer_ || cfg.train.cuda_graphs))
    throw TrainError("train.clip_grad_norm needs every gradient before the update: not with "
                     "train.per_layer_update or train.cuda_graphs");
  if (reduce_ && cfg.train.cuda_graphs)
    throw TrainError("train.cuda_graphs records the whole step, which leaves no place for the "
                     "ranks to sum their gradients: not with train.ranks > 1");
  if (cfg.train.cuda_graphs && !device_)
    throw TrainError("train.cuda_graphs: " + parts.backend.name() + " does not record CUDA graphs");
  if (cfg.train.schedule.name == "cosine" && cfg.train.schedule.min_lr > peak_lr_)
    throw TrainError("train.schedule.min_lr = " + std::to_string(cfg.train.schedule.min_lr) +
                     " is above the learning rate " + std::to_string(peak_lr_) + " that " +
                     cfg.train.optimizer.lr_scaling + " scaling gives batch " +
                     std::to_string(batch) + " x accumulate " + std::to_string(accumulate_) +
                     (ranks_ > 1 ? " x ranks " + std::to_string(ranks_) : std::string()) +
                     " (train.optimizer.lr at reference_batch " +
                     std::to_string(cfg.train.optimizer.reference_batch) + ")");
}

void StepRunner::start_epoch(int epoch, int64_t step_in_epoch) {
  if (staged_) throw std::logic_error("a staged batch is left from the previous epoch");
  p_.loader.start_epoch(epoch, step_in_epoch * accumulate_);
}

const data::HostBatch* StepRunner::take_batch(StepRecord& rec, RunObserver& obs) {
  double wait_ms = 0;
  const data::HostBatch* b = nullptr;
  {
    PhaseScope phase(obs, Phase::data_wait);
    b = p_.loader.next(&wait_ms);
  }
  if (!b) throw std::logic_error("loader ran out of batches inside an epoch");
  rec.data_wait_ms += wait_ms;
  return b;
}

void StepRunner::stage(const data::HostBatch* b) {
  const BatchAugment augment{cfg_.data.random_crop, cfg_.data.hflip, b->draws};
  device_->stage_batch(b->images, b->labels, b->count, b->draws ? &augment : nullptr);
}

void StepRunner::load(const data::HostBatch* b, bool was_staged, RunObserver& obs) {
  PhaseScope phase(obs, Phase::h2d);
  if (overlap_) {
    if (!was_staged) stage(b);
    device_->consume_staged_batch(cfg_.data.mean, cfg_.data.std);
  } else {
    p_.input.load(p_.backend, *b);
  }
}

// The loss scaler's verdict (reading the inf flag waits for the GPU), the
// applied-step count, the synchronisation.
void StepRunner::finish(StepRecord& rec) {
  if (scaler_.enabled()) rec.skipped = !scaler_.update(p_.optimizer.found_inf());
  if (!rec.skipped) ++optimizer_steps;
  p_.backend.synchronize();
}

// Several ranks: the gradients the update reads (the accumulated ones, with
// accumulation) summed across the ranks; each rank scaled its own by
// 1 / ranks, so the sum is their mean.
void StepRunner::reduce_gradients(RunObserver& obs, bool measured) {
  PhaseScope phase(obs, Phase::allreduce);
  if (buckets_) {  // most of it went out during the backward pass
    const double waited = buckets_->finish();
    if (measured) {
      allreduce_ms_measured += waited;
      allreduce_busy_ms_measured += buckets_->busy_ms_last_step();
      ++allreduce_measured;
    }
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  if (accumulate_ > 1) p_.optimizer.accumulate_end();
  if (const std::span<float> grads = p_.optimizer.host_gradients(); !grads.empty()) {
    p_.comm.all_reduce_sum(grads.data(), grads.size());
    reduced_bytes = static_cast<double>(grads.size_bytes());
  } else if (const OptimizerOp::DeviceGradients g = p_.optimizer.device_gradients();
             g.data && p_.comm.sums_device_memory()) {
    // Queued after the backward pass on the update's stream; the time
    // includes waiting for that pass's kernels (the host runs ahead of them).
    p_.optimizer.fold_half_gradients(0, g.count);
    p_.comm.all_reduce_sum_device(g.data, g.count, g.stream);
    reduced_bytes = static_cast<double>(g.count * sizeof(float));
  } else {
    throw TrainError(p_.backend.name() + " keeps its gradients where " + p_.comm.backend() +
                     " cannot sum them: " +
                     (g.data ? "device memory needs distributed.backend = \"nccl\""
                             : "host memory needs distributed.backend = \"gloo\""));
  }
  if (measured) {
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    allreduce_ms_measured += ms;
    allreduce_busy_ms_measured += ms;  // nothing hid it
    ++allreduce_measured;
  }
}

// train.cuda_graphs after warmup: forward, loss, backward and optimizer are
// recorded once and replayed; the per-step values (loss scale, learning
// rate, step count) live on the device.
void StepRunner::replay_graph(const OptimizerStep& os) {
  p_.optimizer.set_step(os);
  if (!graph_recorded_) {
    device_->begin_capture();
    p_.model.forward(true);  // counts num_batches_tracked for this step
    p_.loss.forward_backward(p_.input.loss_rows(batch_));
    p_.model.backward();
    p_.optimizer.apply();
    device_->end_capture();
    graph_recorded_ = true;
  } else {
    ++p_.model.num_batches_tracked;
  }
  device_->replay();
}

StepRecord StepRunner::step(const StepStart& at, RunObserver& obs) {
  StepRecord rec;
  rec.lr = learning_rate(cfg_.train.schedule, peak_lr_, at.step, total_steps_);
  rec.loss_scale = scaler_.scale();
  OptimizerStep os;
  os.lr = rec.lr;
  os.step = optimizer_steps + 1;  // AdamW's bias correction counts applied steps
  os.grad_scale = static_cast<float>(scaler_.scale());
  os.check_finite = scaler_.enabled();
  const bool use_graph = cfg_.train.cuda_graphs && at.kind != StepKind::warmup;
  const auto t0 = std::chrono::steady_clock::now();

  const data::HostBatch* in_use = nullptr;  // overlap: released after the step's sync
  for (int micro = 0; micro < accumulate_; ++micro) {
    const data::HostBatch* b = staged_;  // overlap: its copy was issued last step
    staged_ = nullptr;
    const bool was_staged = b != nullptr;
    if (!b) b = take_batch(rec, obs);
    const int count = b->count;
    load(b, was_staged, obs);
    if (overlap_)
      in_use = b;
    else
      p_.loader.release(b);
    rec.images += p_.input.loss_rows(count);  // GPT-2: tokens
    p_.loss.set_grad_scale(static_cast<float>(scaler_.scale()) /
                           static_cast<float>(accumulate_ * ranks_));
    if (use_graph) break;  // accumulate is 1 with graphs (checked when the run is built)
    {
      PhaseScope phase(obs, Phase::forward);
      p_.model.forward(true);
    }
    PhaseScope phase(obs, Phase::backward);
    p_.loss.forward_backward(p_.input.loss_rows(count));
    if (per_layer_) {
      p_.optimizer.set_step(os);
      p_.model.backward([this](std::span<Tensor* const> params) { p_.optimizer.apply_to(params); });
    } else if (buckets_) {
      p_.model.backward([this](std::span<Tensor* const> params) {
        for (const Tensor* t : params) buckets_->ready(grad_start_.at(t));
      });
    } else {
      p_.model.backward();
    }
    if (accumulate_ > 1)
      micro == 0 ? p_.optimizer.accumulate_begin() : p_.optimizer.accumulate_add();
  }
  if (use_graph) {
    PhaseScope phase(obs, Phase::graph);
    replay_graph(os);
    if (!overlap_) finish(rec);
  } else if (per_layer_) {
    if (!overlap_) finish(rec);  // the update was done in the backward pass
  } else {
    if (reduce_) reduce_gradients(obs, at.kind == StepKind::measured);  // ends accumulation too
    PhaseScope phase(obs, Phase::optimizer);
    if (accumulate_ > 1 && !reduce_) p_.optimizer.accumulate_end();
    if (cfg_.train.clip_grad_norm > 0)
      p_.optimizer.clip_grad_norm(cfg_.train.clip_grad_norm, os.grad_scale);
    p_.optimizer.step(os);
    if (!overlap_) finish(rec);
  }
  if (overlap_) {
    // The next batch's copy goes out while the GPU still computes this step.
    const bool next_in_epoch =
        (at.step % steps_per_epoch_) + 1 < steps_per_epoch_ && at.step + 1 < total_steps_;
    if (next_in_epoch) {
      staged_ = take_batch(rec, obs);
      PhaseScope phase(obs, Phase::h2d);
      stage(staged_);
    }
    {
      PhaseScope phase(obs, Phase::sync);
      finish(rec);
    }
    p_.loader.release(in_use);
  }
  rec.images *= ranks_;  // every rank trains as many (the loader's slices are equal)
  rec.step_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return rec;
}

}  // namespace xrun
