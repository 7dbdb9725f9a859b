// engine/trainer.cpp: the training run. Reads top to bottom: set up (backend,
// data, model, optimizer, memory plan, weights), the step loop (micro-batches
// with accumulation, optimizer step, records), epoch ends (evaluation,
// checkpoint), summary. Every step's record leaves through TrainEvents as
// soon as the step ends.
#include "engine/trainer.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>

#include "engine/backend.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/data/dataset.h"
#include "engine/data/loader.h"
#include "engine/loss_scaler.h"
#include "engine/model/resnet.h"
#include "engine/schedule.h"
#include "engine/step_stats.h"
#include "profiler/activity_capture.h"
#include "profiler/layer_timer.h"
#include "profiler/nvtx.h"
#include "profiler/trace.h"
#include "profiler/phase_timer.h"

namespace xrun {

namespace {

using Clock = std::chrono::steady_clock;
using profiler::Phase;
using profiler::ScopedPhase;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

std::string where(int64_t step, int epoch) {
  return "step " + std::to_string(step) + " (epoch " + std::to_string(epoch + 1) + ")";
}

data::LoaderOptions loader_options(const RunConfig& cfg, int batch, bool training,
                                   Backend& backend) {
  data::LoaderOptions o;
  o.batch_size = batch;
  o.shuffle = training && cfg.data.shuffle;
  o.drop_last = training;
  o.random_crop = training && cfg.data.random_crop;
  o.hflip = training && cfg.data.hflip;
  // The CUDA backend crops and flips on the device: loader threads only draw.
  o.augment_elsewhere = (o.random_crop || o.hflip) && backend.augments_batches();
  o.workers = cfg.data.workers;
  o.prefetch = cfg.data.prefetch;
  o.seed = cfg.train.seed;
  const bool pinned = cfg.data.pin_memory;
  o.allocator.allocate = [&backend, pinned](size_t n) { return backend.allocate_host(n, pinned); };
  o.allocator.release = [&backend, pinned](void* p) { backend.free_host(p, pinned); };
  const std::string thread_name = training ? "xrun loader " : "xrun eval loader ";
  o.on_worker_start = [thread_name](int w) {
    profiler::Nvtx::name_this_thread(thread_name + std::to_string(w));
  };
  return o;
}

// Everything one run holds, built in order.
struct Run {
  const RunConfig& cfg;
  const TrainEvents& ev;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<data::Dataset> train_set, test_set;
  std::unique_ptr<ResNet> model;
  std::unique_ptr<LossOp> loss;
  std::unique_ptr<OptimizerOp> optimizer;
  std::unique_ptr<data::Loader> train_loader, test_loader;
  profiler::PhaseTimer phases;
  profiler::LayerTimer layers;
  int batch = 0;
  int64_t steps_per_epoch = 0, total_steps = 0;
  int epochs = 0;
  LossScaler scaler;
  int64_t optimizer_steps = 0;  // applied (not skipped) steps: AdamW's step count
  bool graph_recorded = false;  // train.cuda_graphs: the step is recorded
  const std::map<std::string, ConvAlgoChoice>& algo_cache;

  Run(const RunConfig& c, const TrainEvents& e, const TrainContext& ctx)
      : cfg(c), ev(e), scaler(c.train.precision == "fp16"), algo_cache(ctx.algo_cache) {}

  void message(const std::string& m) const {
    if (ev.message) ev.message(m);
  }

  BackendOptions backend_options() const {
    BackendOptions bo;
    bo.threads = cfg.train.threads;
    bo.precision = cfg.train.precision;
    bo.cudnn_benchmark = cfg.train.cudnn_benchmark;
    bo.algo_cache = algo_cache;
    return bo;
  }

  OptimizerSettings optimizer_settings() const {
    OptimizerSettings os;
    os.name = cfg.train.optimizer.name;
    os.weight_decay = cfg.train.optimizer.weight_decay;
    os.beta1 = cfg.train.optimizer.beta1;
    os.beta2 = cfg.train.optimizer.beta2;
    os.eps = cfg.train.optimizer.eps;
    os.momentum = cfg.train.optimizer.momentum;
    os.nesterov = cfg.train.optimizer.nesterov;
    return os;
  }

  ModelSpec model_spec(int b) const {
    ModelSpec spec;
    spec.arch = cfg.model.arch;
    spec.num_classes = cfg.model.num_classes;
    spec.batch = b;
    spec.channels = cfg.data.channels;
    spec.image_size = cfg.data.image_size;
    return spec;
  }

  // Builds backend, model, loss and optimizer for batch `b` and allocates
  // the plan (throws when it does not fit).
  void build(int b) {
    model.reset();
    loss.reset();
    optimizer.reset();
    backend = make_backend(cfg.train.device, backend_options());
    model = std::make_unique<ResNet>(*backend, model_spec(b));
    if (cfg.profile.layers)
      model->set_layer_hooks({[this](const std::string& name) {
                                profiler::Nvtx::push(name);
                                layers.begin(name);
                              },
                              [this] {
                                layers.end();
                                profiler::Nvtx::pop();
                              }});
    loss = backend->softmax_cross_entropy(model->logits(), model->dlogits());
    optimizer = backend->optimizer(optimizer_settings(), cfg.train.accumulate > 1);
    backend->allocate();
  }

  // The plan's size at batch `b`, without allocating it.
  int64_t planned_bytes(int b) const {
    auto be = make_backend(cfg.train.device, backend_options());
    ResNet m(*be, model_spec(b));
    auto l = be->softmax_cross_entropy(m.logits(), m.dlogits());
    auto o = be->optimizer(optimizer_settings(), cfg.train.accumulate > 1);
    int64_t total = 0;
    for (const MemoryRecord& r : be->memory_plan()) total += r.bytes;
    return total;
  }

  // batch_size = "auto": the largest multiple of 8 whose plan fits in
  // memory_fraction of the device memory (doubling, then bisecting), then
  // confirmed by allocating it (stepping down by 8 if the device disagrees).
  int auto_batch() {
    const int64_t memory = device_memory_bytes(cfg.train.device);
    if (memory <= 0)
      throw TrainError("train.batch_size = \"auto\" sizes the batch to GPU memory; on " +
                       cfg.train.device + " give a number");
    const int64_t budget = static_cast<int64_t>(cfg.train.memory_fraction * memory);
    int lo = 0, hi = 8;
    while (hi <= 65536 && planned_bytes(hi) <= budget) lo = hi, hi *= 2;
    if (lo == 0)
      throw TrainError("train.batch_size = \"auto\": not even batch 8 fits in " +
                       std::to_string(cfg.train.memory_fraction) + " of " + cfg.train.device +
                       "'s memory");
    while (hi - lo > 8) {
      const int mid = (lo + hi) / 2 / 8 * 8;
      if (planned_bytes(mid) <= budget) lo = mid; else hi = mid;
    }
    for (int b = lo; b >= 8; b -= 8) {
      try {
        build(b);
        message("batch_size auto: " + std::to_string(b) + " (the largest multiple of 8 whose plan fits in " +
                std::to_string(static_cast<int>(cfg.train.memory_fraction * 100)) + "% of " +
                cfg.train.device + "'s memory)");
        return b;
      } catch (const std::runtime_error& e) {
        message("batch " + std::to_string(b) + " did not allocate (" + e.what() + "); trying " +
                std::to_string(b - 8));
      }
    }
    throw TrainError("train.batch_size = \"auto\": no batch could be allocated");
  }

  void set_up() {
    train_set = data::open_dataset(cfg.data, data::Split::train, cfg.train.seed);
    if (cfg.train.eval) test_set = data::open_dataset(cfg.data, data::Split::test, cfg.train.seed);
    if (train_set->num_classes() > cfg.model.num_classes)
      throw TrainError("model.num_classes = " + std::to_string(cfg.model.num_classes) +
                       " but the data has " + std::to_string(train_set->num_classes()) +
                       " classes");
    if (cfg.train.cuda_graphs && cfg.train.accumulate != 1)
      throw TrainError("train.cuda_graphs records one whole step: it needs train.accumulate = 1");
    if (cfg.train.cuda_graphs && cfg.profile.layers)
      throw TrainError("profile.layers times layers on the host, which a replayed CUDA graph "
                       "never visits: turn one of them off");
    if (cfg.train.batch_size > 0) {
      batch = cfg.train.batch_size;
      build(batch);
    } else {
      batch = auto_batch();
    }
    if (cfg.train.cuda_graphs && !backend->supports_graphs())
      throw TrainError("train.cuda_graphs: " + backend->name() + " does not record CUDA graphs");

    train_loader = std::make_unique<data::Loader>(*train_set,
                                                  loader_options(cfg, batch, true, *backend));
    if (test_set)
      test_loader = std::make_unique<data::Loader>(*test_set,
                                                   loader_options(cfg, batch, false, *backend));
    steps_per_epoch = train_loader->batches_per_epoch() / cfg.train.accumulate;
    if (steps_per_epoch < 1)
      throw TrainError("the training set (" + std::to_string(train_set->size()) +
                       " images) is smaller than one step (batch " + std::to_string(batch) +
                       " x accumulate " + std::to_string(cfg.train.accumulate) + ")");
    if (cfg.train.epochs > 0) {
      epochs = cfg.train.epochs;
      total_steps = steps_per_epoch * epochs;
    } else {
      total_steps = cfg.train.steps;
      epochs = static_cast<int>((total_steps + steps_per_epoch - 1) / steps_per_epoch);
    }
  }

  // Weights: resume from the checkpoint, or given weights, or fresh init.
  // Returns the step to start from.
  int64_t initialise() {
    const std::string& ckpt = cfg.train.checkpoint;
    if (cfg.train.resume && !ckpt.empty() && std::filesystem::exists(ckpt)) {
      CheckpointState st = load_checkpoint(ckpt, *model, *backend, *optimizer);
      optimizer_steps = st.optimizer_steps;
      scaler.restore(st.loss_scale, st.scaler_growth_tracker);
      message("resumed from " + ckpt + " at step " + std::to_string(st.step));
      if (st.step > total_steps)
        throw TrainError(ckpt + " is at step " + std::to_string(st.step) +
                         ", beyond this run's " + std::to_string(total_steps) + " steps");
      return st.step;
    }
    if (cfg.train.resume && !ckpt.empty())
      message("train.resume: no checkpoint at " + ckpt + " yet; starting from scratch");
    if (!cfg.model.weights.empty()) {
      load_weights(cfg.model.weights, *model, *backend);
      message("loaded weights from " + cfg.model.weights);
    } else {
      model->init_parameters(cfg.train.seed);
    }
    return 0;
  }

  void save(int64_t step) {
    if (cfg.train.checkpoint.empty()) return;
    profiler::NvtxRange range("checkpoint");
    const auto t0 = Clock::now();
    CheckpointState st;
    st.step = step;
    st.optimizer_steps = optimizer_steps;
    st.loss_scale = scaler.scale();
    st.scaler_growth_tracker = scaler.growth_tracker();
    st.arch = cfg.model.arch;
    save_checkpoint(cfg.train.checkpoint, *model, *backend, *optimizer, st);
    phases.add(Phase::checkpoint, ms_since(t0));
  }

  // Loss and top-1 accuracy on the test split, BN in inference mode.
  std::pair<double, double> evaluate() {
    profiler::NvtxRange range("eval");
    const auto t0 = Clock::now();
    layers.set_enabled(false);
    double loss_sum = 0;
    int64_t correct = 0, rows = 0;
    test_loader->start_epoch(0);
    while (const data::HostBatch* b = test_loader->next()) {
      backend->load_batch(b->images, b->labels, b->count, cfg.data.mean, cfg.data.std);
      const int count = b->count;
      test_loader->release(b);
      model->forward(false);
      loss->forward(count);
      const LossOp::Results r = loss->read_results();
      loss_sum += r.loss_sum;
      correct += r.correct;
      rows += r.rows;
    }
    phases.add(Phase::eval, ms_since(t0));
    if (rows == 0) return {NAN, NAN};
    return {loss_sum / rows, static_cast<double>(correct) / rows};
  }

  StepKind kind_of(int64_t step) const {
    if (step < cfg.measure.warmup_steps) return StepKind::warmup;
    if (cfg.measure.measure_steps > 0 &&
        step >= cfg.measure.warmup_steps + cfg.measure.measure_steps)
      return StepKind::unmeasured;
    return StepKind::measured;
  }
};

}  // namespace

// CUPTI's figures into the result: kernels, copies, GPU time per phase, the
// overhead, the GPU findings, and GPU tracks joined to the host trace.
static void collect_gpu_activity(profiler::GpuActivity& gpu, const RunConfig& cfg, TrainResult& result) {
  const profiler::ActivityLog& log = gpu.log();
  result.kernels = log.kernels();
  result.copies = log.copies();
  result.summary.cupti_steps = log.steps();
  result.summary.cupti_overhead = gpu.overhead();
  result.gpu_findings = profiler::activity_findings(log, cfg.train.log_every);
  if (gpu.dropped_records() > 0)
    result.gpu_findings.push_back(
        {"cupti_dropped", std::to_string(gpu.dropped_records()) +
                              " CUPTI record(s) dropped: kernel and copy totals are incomplete",
         static_cast<double>(gpu.dropped_records())});
  const auto gpu_ms = log.phase_gpu_ms();
  for (PhaseRecord& p : result.phases) {
    auto it = gpu_ms.find(p.phase);
    if (it != gpu_ms.end()) p.gpu_ms = it->second;
  }
  std::vector<TraceEvent> gpu_events = gpu.take_trace();
  if (!gpu_events.empty()) {
    result.trace.insert(result.trace.end(), gpu_events.begin(), gpu_events.end());
    profiler::assign_depths(result.trace);
  }
}

TrainResult train(const RunConfig& cfg, const TrainEvents& ev, const TrainContext& ctx) {
  profiler::Nvtx::set_enabled(cfg.profile.nvtx);
  profiler::NvtxRange run_range("run");
  Run run(cfg, ev, ctx);
  run.set_up();
  const int64_t start = run.initialise();
  TrainResult result;
  result.environment = run.backend->environment();
  result.environment.fields["parameters"] = std::to_string(run.model->parameter_count());
  if (ev.started) {
    RunShape shape;
    shape.total_steps = run.total_steps;
    shape.steps_per_epoch = run.steps_per_epoch;
    shape.start_step = start;
    shape.epochs = run.epochs;
    shape.batch_size = run.batch;
    shape.parameters = run.model->parameter_count();
    ev.started(result.environment, shape);
  }

  const int accumulate = cfg.train.accumulate;
  LossScaler& scaler = run.scaler;
  // Overlapped input (a backend that stages batches, pinned memory, one
  // batch per step, room for two in the ring): step N+1's batch is taken and
  // its copy issued before step N's synchronisation.
  const bool overlap = run.backend->stages_batches() && cfg.data.pin_memory &&
                       accumulate == 1 && cfg.data.prefetch >= 2;
  const data::HostBatch* staged = nullptr;
  auto augment_of = [&](const data::HostBatch* b) {
    return BatchAugment{cfg.data.random_crop, cfg.data.hflip, b->draws};
  };
  auto stage = [&](const data::HostBatch* b) {
    const BatchAugment augment = augment_of(b);
    run.backend->stage_batch(b->images, b->labels, b->count, b->draws ? &augment : nullptr);
  };
  // The end of a step: the loss scaler's verdict (reading the inf flag waits
  // for the GPU), the applied-step count, the synchronisation.
  auto finish_step = [&](StepRecord& rec) {
    if (scaler.enabled()) rec.skipped = !scaler.update(run.optimizer->found_inf());
    if (!rec.skipped) ++run.optimizer_steps;
    run.backend->synchronize();
  };
  const bool sync_backend = run.backend->host_synchronous();
  std::vector<StepRecord> records;
  records.reserve(static_cast<size_t>(run.total_steps - start));
  double last_loss = NAN, last_test_loss = NAN, last_test_acc = NAN;

  int64_t step = start;
  int epoch = static_cast<int>(step / run.steps_per_epoch);
  int64_t in_epoch = step % run.steps_per_epoch;
  if (step < run.total_steps) run.train_loader->start_epoch(epoch, in_epoch * accumulate);
  EpochRecord epoch_rec;
  epoch_rec.epoch = epoch;
  double epoch_loss_sum = 0;  // over the rows read back this epoch
  int64_t epoch_loss_rows = 0, epoch_steps = 0;
  auto epoch_start = Clock::now();
  auto progress_start = Clock::now();
  int64_t progress_images = 0, progress_steps = 0;

  std::optional<profiler::NvtxRange> epoch_range;
  bool capturing = false;  // cudaProfilerStart() .. Stop() around the measured steps
  const bool trace_wanted = cfg.profile.cupti == "trace";
  int64_t traced_steps = 0;
  // CUPTI on the GPU: kernels and copies of the traced measured steps (all
  // of the trace window, then every other step so that untraced steps give
  // the overhead figure). When it cannot start the run goes on with NVTX.
  std::unique_ptr<profiler::GpuActivity> gpu_activity;
  int64_t measured_index = 0;
  if (cfg.profile.cupti != "off" && !sync_backend) {
    std::string why_not;
    gpu_activity =
        profiler::GpuActivity::start(trace_wanted ? cfg.profile.trace_steps : 0, why_not);
    if (!gpu_activity && ev.message)
      ev.message("CUPTI tracing off: " + why_not + "; NVTX ranges and host timers go on");
  } else if (cfg.profile.cupti == "summary" && ev.message) {
    ev.message("profile.cupti = \"summary\" records GPU activity; this " +
               run.backend->name() + " run has its host phase timers");
  }
  // A window still open when the run ends or fails: keep what it has.
  struct TraceGuard {
    TrainResult& result;
    ~TraceGuard() {
      if (profiler::HostTrace::active()) profiler::HostTrace::stop();
    }
  } trace_guard{result};
  while (step < run.total_steps) {
    if (ev.stop_requested && ev.stop_requested()) {
      if (capturing) run.backend->profiler_stop();
      run.save(step);
      throw TrainInterrupted("interrupted before " + where(step, epoch));
    }
    if (!epoch_range) epoch_range.emplace("epoch", epoch);
    const StepKind kind = run.kind_of(step);
    if (trace_wanted && kind == StepKind::measured && !profiler::HostTrace::active() &&
        traced_steps < cfg.profile.trace_steps) {
      profiler::HostTrace::start();
      if (gpu_activity) gpu_activity->mark_trace_origin();
    }
    if (gpu_activity && kind == StepKind::measured) gpu_activity->begin_step(measured_index);
    std::optional<profiler::NvtxRange> step_range(std::in_place, "step", step);
    StepRecord rec;
    rec.step = step;
    rec.epoch = epoch;
    rec.kind = kind;
    rec.lr = learning_rate(cfg.train.schedule, cfg.train.optimizer.lr, step, run.total_steps);
    rec.loss_scale = scaler.scale();
    if (rec.kind == StepKind::measured && !capturing) {
      run.backend->profiler_start();
      capturing = true;
    } else if (rec.kind != StepKind::measured && capturing) {
      run.backend->profiler_stop();
      capturing = false;
    }
    run.phases.set_enabled(rec.kind == StepKind::measured);
    run.layers.set_enabled(cfg.profile.layers && rec.kind == StepKind::measured);
    const float micro_scale = static_cast<float>(scaler.scale()) / static_cast<float>(accumulate);
    OptimizerStep os;
    os.lr = rec.lr;
    os.step = run.optimizer_steps + 1;  // AdamW's bias correction counts applied steps
    os.grad_scale = static_cast<float>(scaler.scale());
    os.check_finite = scaler.enabled();
    // train.cuda_graphs: after warmup the step (forward, loss, backward,
    // optimizer) is recorded once and replayed; its per-step values (loss
    // scale, learning rate, step count) live on the device.
    const bool use_graph = cfg.train.cuda_graphs && rec.kind != StepKind::warmup;
    const auto t0 = Clock::now();
    const data::HostBatch* in_use = nullptr;  // overlap: released after the step's sync
    for (int micro = 0; micro < accumulate; ++micro) {
      const data::HostBatch* b = staged;  // overlap: its copy was issued last step
      staged = nullptr;
      const bool was_staged = b != nullptr;
      if (!b) {
        double wait_ms = 0;
        {
          ScopedPhase p(run.phases, Phase::data_wait);
          b = run.train_loader->next(&wait_ms);
        }
        if (!b) throw std::logic_error("loader ran out of batches inside an epoch");
        rec.data_wait_ms += wait_ms;
      }
      const int count = b->count;
      {
        ScopedPhase p(run.phases, Phase::h2d);
        if (overlap) {
          if (!was_staged) stage(b);
          run.backend->consume_staged_batch(cfg.data.mean, cfg.data.std);
        } else {
          const BatchAugment augment = augment_of(b);
          run.backend->load_batch(b->images, b->labels, count, cfg.data.mean, cfg.data.std,
                                  b->draws ? &augment : nullptr);
        }
      }
      if (overlap)
        in_use = b;
      else
        run.train_loader->release(b);
      rec.images += count;
      run.loss->set_grad_scale(micro_scale);
      if (use_graph) break;  // accumulate is 1 with graphs (checked in set_up)
      {
        ScopedPhase p(run.phases, Phase::forward);
        run.layers.set_phase("forward");
        run.model->forward(true);
      }
      {
        ScopedPhase p(run.phases, Phase::backward);
        run.loss->forward_backward(count);
        run.layers.set_phase("backward");
        run.model->backward();
        if (accumulate > 1)
          micro == 0 ? run.optimizer->accumulate_begin() : run.optimizer->accumulate_add();
      }
    }
    if (use_graph) {
      ScopedPhase p(run.phases, Phase::graph);
      run.optimizer->set_step(os);
      if (!run.graph_recorded) {
        run.backend->begin_capture();
        run.model->forward(true);  // counts num_batches_tracked for this step
        run.loss->forward_backward(run.batch);
        run.model->backward();
        run.optimizer->apply();
        run.backend->end_capture();
        run.graph_recorded = true;
      } else {
        ++run.model->num_batches_tracked;
      }
      run.backend->replay();
      if (!overlap) finish_step(rec);
    } else {
      ScopedPhase p(run.phases, Phase::optimizer);
      if (accumulate > 1) run.optimizer->accumulate_end();
      run.optimizer->step(os);
      if (!overlap) finish_step(rec);
    }
    if (overlap) {
      // The next batch's copy goes out while the GPU still computes this step.
      const bool next_in_epoch = in_epoch + 1 < run.steps_per_epoch && step + 1 < run.total_steps;
      if (next_in_epoch) {
        double wait_ms = 0;
        {
          ScopedPhase p(run.phases, Phase::data_wait);
          staged = run.train_loader->next(&wait_ms);
        }
        if (!staged) throw std::logic_error("loader ran out of batches inside an epoch");
        rec.data_wait_ms += wait_ms;
        ScopedPhase p(run.phases, Phase::h2d);
        stage(staged);
      }
      {
        ScopedPhase p(run.phases, Phase::sync);
        finish_step(rec);
      }
      run.train_loader->release(in_use);
    }
    rec.step_ms = ms_since(t0);
    if (gpu_activity && kind == StepKind::measured) {
      gpu_activity->end_step(rec.step_ms);
      ++measured_index;
    }
    ++step;
    ++in_epoch;
    ++epoch_steps;
    const bool epoch_done = in_epoch == run.steps_per_epoch || step == run.total_steps;

    // The loss: every step where reading it costs nothing, else at logging
    // intervals and epoch ends (a mean over the steps since the last read).
    rec.loss = NAN;
    if (sync_backend || step % cfg.train.log_every == 0 || epoch_done) {
      const LossOp::Results r = run.loss->read_results();
      if (r.rows > 0) {
        rec.loss = r.loss_sum / static_cast<double>(r.rows);
        epoch_loss_sum += r.loss_sum;
        epoch_loss_rows += r.rows;
        if (!std::isfinite(rec.loss)) {
          if (ev.step) ev.step(rec);
          throw TrainError("loss is " + std::string(std::isnan(rec.loss) ? "NaN" : "infinite") +
                           " at " + where(step - 1, epoch) + " (precision " +
                           cfg.train.precision + ", lr " + std::to_string(rec.lr) + ")");
        }
        last_loss = rec.loss;
      }
    }
    records.push_back(rec);
    if (ev.step) ev.step(rec);
    progress_images += rec.images;
    ++progress_steps;

    if (ev.progress && (step % cfg.train.log_every == 0 || step == run.total_steps)) {
      const double secs = ms_since(progress_start) / 1000.0;
      Progress pr;
      pr.step = step;
      pr.total_steps = run.total_steps;
      pr.epoch = epoch;
      pr.epochs = run.epochs;
      pr.loss = last_loss;
      pr.images_per_second = secs > 0 ? progress_images / secs : 0;
      pr.eta_seconds = progress_steps > 0 ? secs / progress_steps * (run.total_steps - step) : 0;
      pr.warmup = rec.kind == StepKind::warmup;
      ev.progress(pr);
      progress_start = Clock::now();
      progress_images = progress_steps = 0;
    }

    step_range.reset();  // the step's range closes before its epoch's
    if (profiler::HostTrace::active() && ++traced_steps == cfg.profile.trace_steps) {
      profiler::HostTrace::stop();
      result.trace = profiler::HostTrace::take();
    }
    if (epoch_done) {
      epoch_rec.seconds = ms_since(epoch_start) / 1000.0;
      epoch_rec.images = epoch_steps * static_cast<int64_t>(run.batch) * accumulate;
      epoch_rec.train_loss = epoch_loss_rows ? epoch_loss_sum / epoch_loss_rows : NAN;
      epoch_rec.test_loss = epoch_rec.test_accuracy = NAN;
      if (run.test_loader) {
        const auto e0 = Clock::now();
        std::tie(epoch_rec.test_loss, epoch_rec.test_accuracy) = run.evaluate();
        epoch_rec.eval_seconds = ms_since(e0) / 1000.0;
        last_test_loss = epoch_rec.test_loss;
        last_test_acc = epoch_rec.test_accuracy;
      }
      if (ev.epoch) ev.epoch(epoch_rec);
      run.save(step);
      epoch_range.reset();
      ++epoch;
      in_epoch = 0;
      epoch_rec = EpochRecord{};
      epoch_rec.epoch = epoch;
      epoch_loss_sum = 0;
      epoch_loss_rows = epoch_steps = 0;
      if (step < run.total_steps) run.train_loader->start_epoch(epoch);
      epoch_start = Clock::now();
      progress_start = Clock::now();
    }
  }

  if (capturing) run.backend->profiler_stop();
  if (profiler::HostTrace::active()) {  // fewer measured steps than trace_steps
    profiler::HostTrace::stop();
    result.trace = profiler::HostTrace::take();
  }
  if (gpu_activity) collect_gpu_activity(*gpu_activity, cfg, result);
  summarize_steps(records, result.summary);
  result.summary.peak_memory_bytes = run.backend->peak_memory_bytes();
  result.summary.final_loss = last_loss;
  result.summary.test_loss = last_test_loss;
  result.summary.test_accuracy = last_test_acc;
  result.summary.batch_size = run.batch;
  result.phases = run.phases.records();
  result.layers = run.layers.records();
  result.memory = run.backend->memory_plan();
  result.conv_algorithms = run.backend->conv_algorithms();
  result.summary.algo_search_ms = run.backend->conv_algorithm_search_ms();
  return result;
}

}  // namespace xrun
