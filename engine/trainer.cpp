// engine/trainer.cpp: a training run. The Run below sets everything up in
// order (data, backend, model, optimizer, memory plan, weights) and is the
// step loop's StepSource: steps through the StepRunner, the loss read-back,
// evaluation and checkpoints. train() at the bottom is the whole run.
#include "engine/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>

#include "core/stats.h"
#include "engine/backend.h"
#include "engine/batch_input.h"
#include "engine/capture_window.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/data/dataset.h"
#include "engine/data/loader.h"
#include "engine/data/tokens.h"
#include "engine/distributed/rank_stats.h"
#include "engine/model/gpt2.h"
#include "engine/model/gpt2_costs.h"
#include "engine/model/resnet.h"
#include "engine/model/step_bytes.h"
#include "engine/model/step_flops.h"
#include "engine/step_runner.h"
#include "engine/step_stats.h"

namespace xrun {

namespace {

data::LoaderOptions loader_options(const RunConfig& cfg, int batch, bool training,
                                   Backend& backend, RunObserver& obs,
                                   const dist::Communicator& comm, bool same_data) {
  data::LoaderOptions o;
  o.batch_size = batch;
  o.rank = same_data ? 0 : comm.rank();  // each rank its slice of every global batch
  o.ranks = same_data ? 1 : comm.size();
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
  o.on_worker_start = [thread_name, &obs](int w) {
    obs.on_thread_start(thread_name + std::to_string(w));
  };
  return o;
}

// Everything one run holds, built in order.
class Run final : public StepSource {
 public:
  Run(const RunConfig& c, RunObserver& obs, const TrainContext& ctx)
      : cfg(c),
        comm(ctx.comm ? *ctx.comm : local_),
        obs_(obs),
        algo_cache_(ctx.algo_cache),
        config_hash_(ctx.config_hash),
        same_data_(ctx.every_rank_reads_all) {
    if (comm.size() != cfg.train.ranks)
      throw TrainError("train.ranks = " + std::to_string(cfg.train.ranks) + " but " +
                       std::to_string(comm.size()) + " rank(s) joined");
  }

  const RunConfig& cfg;
 private:
  dist::LocalCommunicator local_;  // one rank, where the caller gave no communicator
 public:
  dist::Communicator& comm;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<data::Dataset> train_set, test_set;
  std::unique_ptr<Model> model;
  std::unique_ptr<LossOp> loss;
  std::unique_ptr<OptimizerOp> optimizer;
  std::unique_ptr<data::Loader> train_loader, test_loader;
  std::unique_ptr<BatchInput> input;
  std::unique_ptr<StepRunner> runner;
  int batch = 0;
  int64_t steps_per_epoch = 0, total_steps = 0;
  int epochs = 0;

  void set_up() {
    if (cfg.model.is_gpt2()) {  // token windows, dealt by the loader as images are
      const int vocab = static_cast<int>(cfg.model.vocab);
      train_set = data::open_token_windows(cfg.data, data::Split::train, cfg.train.seed, vocab);
      if (cfg.train.eval)
        test_set = data::open_token_windows(cfg.data, data::Split::test, cfg.train.seed, vocab);
    } else {
      train_set = data::open_dataset(cfg.data, data::Split::train, cfg.train.seed);
      if (cfg.train.eval)
        test_set = data::open_dataset(cfg.data, data::Split::test, cfg.train.seed);
    }
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

    train_loader = std::make_unique<data::Loader>(
        *train_set, loader_options(cfg, batch, true, *backend, obs_, comm, same_data_));
    if (test_set)
      test_loader = std::make_unique<data::Loader>(
          *test_set, loader_options(cfg, batch, false, *backend, obs_, comm, same_data_));
    steps_per_epoch = train_loader->batches_per_epoch() / cfg.train.accumulate;
    if (steps_per_epoch < 1)
      throw TrainError("the training set (" + std::to_string(train_set->size()) +
                       " images) is smaller than one step (batch " + std::to_string(batch) +
                       " x accumulate " + std::to_string(cfg.train.accumulate) +
                       (comm.size() > 1 ? " x ranks " + std::to_string(comm.size()) : "") + ")");
    if (cfg.train.epochs > 0) {
      epochs = cfg.train.epochs;
      total_steps = steps_per_epoch * epochs;
    } else {
      total_steps = cfg.train.steps;
      // Saturated for the run's shape: 1e12 steps of one batch is no int.
      epochs = static_cast<int>(std::min<int64_t>((total_steps + steps_per_epoch - 1) / steps_per_epoch,
                                                  std::numeric_limits<int>::max()));
    }
    runner = std::make_unique<StepRunner>(
        cfg, StepParts{*backend, *model, *loss, *optimizer, *train_loader, *input, comm}, batch,
        steps_per_epoch, total_steps);
  }

  // Weights: resume from the checkpoint, or given weights, or fresh init.
  // Returns the step to start from.
  int64_t initialise() {
    const std::string& ckpt = cfg.train.checkpoint;
    if (cfg.train.resume && !ckpt.empty() && std::filesystem::exists(ckpt)) {
      check_checkpoint_owner(ckpt);
      CheckpointState st = load_checkpoint(ckpt, *model, *backend, *optimizer);
      runner->optimizer_steps = st.optimizer_steps;
      runner->scaler().restore(st.loss_scale, st.scaler_growth_tracker);
      if (st.step > total_steps)
        throw TrainError(ckpt + " is at step " + std::to_string(st.step) +
                         ", beyond this run's " + std::to_string(total_steps) + " steps");
      if (!measures_a_step(st.step))
        throw TrainError(
            "train.resume: " + ckpt + " is at step " + std::to_string(st.step) +
            (st.step == total_steps ? ", the end of this run: nothing is left to train or measure"
                                    : ", past this run's measured steps: nothing is left to measure") +
            ", and a run without a measured step is never stored complete. Move the file away "
            "(or set train.resume = false) to train the run again");
      obs_.on_message("resumed from " + ckpt + " at step " + std::to_string(st.step));
      return st.step;
    }
    if (cfg.train.resume && !ckpt.empty())
      obs_.on_message("train.resume: no checkpoint at " + ckpt + " yet; starting from scratch");
    if (!cfg.model.weights.empty()) {
      load_weights(cfg.model.weights, *model, *backend);
      obs_.on_message("loaded weights from " + cfg.model.weights);
    } else {
      model->init_parameters(cfg.train.seed);
    }
    return 0;
  }

  // Whether steps [start, total_steps) hold a measured one (every figure of
  // a run comes from its measured steps).
  bool measures_a_step(int64_t start) const {
    const int64_t first = std::max(start, cfg.measure.warmup_steps);
    return first < total_steps &&
           (cfg.measure.measure_steps == 0 ||
            first < cfg.measure.warmup_steps + cfg.measure.measure_steps);
  }

  // A checkpoint resumes only the configuration that wrote it: a sweep whose
  // runs share train.checkpoint would otherwise continue one run's training
  // as another's. Not checked where the caller gave no hash; a checkpoint
  // that names none (older xrun) is taken as before, with a notice.
  void check_checkpoint_owner(const std::string& ckpt) {
    if (config_hash_.empty()) return;
    const std::string owner = checkpoint_config_hash(ckpt);
    if (owner.empty()) {
      obs_.on_message("train.resume: " + ckpt + " names no configuration (written by an older "
                      "xrun); resuming from it");
      return;
    }
    if (owner == config_hash_) return;
    throw TrainError("train.resume: " + ckpt + " holds a run of another configuration (config " +
                     owner.substr(0, 8) + "; this run is config " + config_hash_.substr(0, 8) +
                     "), so it is neither resumed nor overwritten. Give each run its own "
                     "train.checkpoint, or move the file away to train this run from scratch");
  }

  RunShape shape(int64_t start) const {
    RunShape s;
    s.total_steps = total_steps;
    s.steps_per_epoch = steps_per_epoch;
    s.start_step = start;
    s.epochs = epochs;
    s.batch_size = batch;
    s.parameters = model->parameter_count();
    return s;
  }

  LoopPlan loop_plan(int64_t start) const {
    LoopPlan p;
    p.start_step = start;
    p.total_steps = total_steps;
    p.steps_per_epoch = steps_per_epoch;
    p.images_per_step = samples_per_step();
    p.log_every = cfg.train.log_every;
    p.loss_every_step = backend->host_synchronous();
    p.measure = cfg.measure;
    p.eval_every = cfg.train.eval_every;
    p.context = std::string("precision ") + to_string(cfg.train.precision);
    return p;
  }

  // StepSource
  void start_epoch(int epoch, int64_t step_in_epoch) override {
    runner->start_epoch(epoch, step_in_epoch);
  }
  StepRecord step(const StepStart& at, RunObserver& obs) override { return runner->step(at, obs); }
  // The loss over every rank's rows (each rank reads at the same steps).
  LossTotals read_loss() override {
    const LossOp::Results r = loss->read_results();
    double t[3] = {r.loss_sum, static_cast<double>(r.correct), static_cast<double>(r.rows)};
    comm.all_reduce_sum(t, 3);
    return {t[0], static_cast<int64_t>(t[1]), static_cast<int64_t>(t[2])};
  }

  // Loss and top-1 accuracy on the test split, BN in inference mode.
  bool evaluate(RunObserver& obs, double& test_loss, double& test_accuracy) override {
    if (!test_loader) return false;
    PhaseScope phase(obs, Phase::eval);
    double loss_sum = 0;
    int64_t correct = 0, rows = 0;
    test_loader->start_epoch(0);
    while (const data::HostBatch* b = test_loader->next()) {
      input->load(*backend, *b);
      const int batch_rows = input->loss_rows(b->count);
      test_loader->release(b);
      model->forward(false);
      loss->forward(batch_rows);
      const LossOp::Results r = loss->read_results();
      loss_sum += r.loss_sum;
      correct += r.correct;
      rows += r.rows;
    }
    // Each rank evaluated its slices of the test set: the totals over all.
    double t[3] = {loss_sum, static_cast<double>(correct), static_cast<double>(rows)};
    comm.all_reduce_sum(t, 3);
    loss_sum = t[0];
    correct = static_cast<int64_t>(t[1]);
    rows = static_cast<int64_t>(t[2]);
    test_loss = rows ? loss_sum / static_cast<double>(rows) : NAN;
    test_accuracy = rows ? static_cast<double>(correct) / static_cast<double>(rows) : NAN;
    return true;
  }

  void save(int64_t step, RunObserver& obs) override {
    if (cfg.train.checkpoint.empty() || comm.rank() != 0) return;  // the ranks' weights are one
    PhaseScope phase(obs, Phase::checkpoint);
    CheckpointState st;
    st.step = step;
    st.optimizer_steps = runner->optimizer_steps;
    st.loss_scale = runner->scaler().scale();
    st.scaler_growth_tracker = runner->scaler().growth_tracker();
    st.arch = cfg.model.arch;
    st.config_hash = config_hash_;
    save_checkpoint(cfg.train.checkpoint, *model, *backend, *optimizer, st);
  }

  // One optimizer step's FLOPs: train.accumulate passes and one update, on
  // every rank.
  double flops_per_step() const {
    if (const Gpt2* gpt2 = dynamic_cast<const Gpt2*>(model.get()))  // 6N + attention, per token
      return gpt2_flops_per_token(gpt2->spec().shape, gpt2->spec().tokens) *
             static_cast<double>(samples_per_step());
    return count_step_flops(resnet(), optimizer_settings()).per_step(cfg.train.accumulate) *
           comm.size();
  }

  // What the throughput counts per optimizer step over all ranks: images,
  // or a language model's tokens.
  int64_t samples_per_step() const {
    return static_cast<int64_t>(batch) * model->rows_per_sample() * cfg.train.accumulate *
           comm.size();
  }

  // Each layer's FLOPs and least bytes per pass of one micro-batch, tensors
  // at the precision's element size.
  std::vector<LayerCostRecord> layer_costs() const {
    const int element = cfg.train.precision == Precision::fp16 ||
                                cfg.train.precision == Precision::bf16 ? 2 : 4;
    if (const auto* gpt2 = dynamic_cast<const Gpt2*>(model.get()))
      return gpt2_layer_costs(gpt2->spec().shape, gpt2->spec().batch, gpt2->spec().tokens,
                              element);
    const StepFlops flops = count_step_flops(resnet(), optimizer_settings());
    const std::vector<LayerBytes> bytes = count_layer_bytes(resnet().layer_shapes(), element);
    std::vector<LayerCostRecord> out;
    for (const LayerFlops& f : flops.layers) {
      LayerCostRecord r{f.layer, f.pass, f.flops, 0};
      for (const LayerBytes& b : bytes)
        if (b.layer == f.layer && b.pass == f.pass) r.bytes = b.bytes;
      out.push_back(r);
    }
    return out;
  }

 private:
  BackendOptions backend_options() const {
    BackendOptions bo;
    bo.threads = cfg.train.threads;
    bo.precision = cfg.train.precision;
    bo.cudnn_benchmark = cfg.train.cudnn_benchmark;
    bo.algo_cache = algo_cache_;
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

  const ResNet& resnet() const { return dynamic_cast<const ResNet&>(*model); }

  // The run's model at batch `b`, its ops declared on `be`.
  std::unique_ptr<Model> make_model(Backend& be, int b) const {
    if (cfg.model.is_gpt2()) {
      Gpt2Spec spec;
      spec.shape = {cfg.model.layers, cfg.model.heads, cfg.model.width, cfg.model.context,
                    cfg.model.vocab};
      spec.batch = b;
      spec.tokens = cfg.data.sequence_length;
      return std::make_unique<Gpt2>(be, spec);
    }
    return std::make_unique<ResNet>(be, model_spec(b));
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
    backend = make_backend(cfg.train.device.name(), backend_options());
    model = make_model(*backend, b);
    if (cfg.profile.layers)
      model->set_layer_hooks({[this](const std::string& name) { obs_.on_layer_begin(name); },
                              [this] { obs_.on_layer_end(); }});
    loss = backend->softmax_cross_entropy(model->logits(), model->dlogits());
    optimizer = backend->optimizer(optimizer_settings(), cfg.train.accumulate > 1);
    backend->allocate();
    if (const std::vector<Tensor*> undecayed = model->undecayed_parameters(); !undecayed.empty())
      optimizer->exclude_from_decay(undecayed);
    input = std::make_unique<BatchInput>(cfg, *model, b);
  }

  // The plan's size at batch `b`, without allocating it.
  int64_t planned_bytes(int b) const {
    auto be = make_backend(cfg.train.device.name(), backend_options());
    const std::unique_ptr<Model> m = make_model(*be, b);
    auto l = be->softmax_cross_entropy(m->logits(), m->dlogits());
    auto o = be->optimizer(optimizer_settings(), cfg.train.accumulate > 1);
    int64_t total = 0;
    for (const MemoryRecord& r : be->memory_plan()) total += r.bytes;
    return total;
  }

  // batch_size = "auto": the largest multiple of 8 whose plan fits in
  // memory_fraction of the device memory (doubling, then bisecting), then
  // confirmed by allocating it (stepping down by 8 if the device disagrees).
  int auto_batch() {
    const std::string device = cfg.train.device.name();
    const int64_t memory = device_memory_bytes(device);
    if (memory <= 0)
      throw TrainError("train.batch_size = \"auto\" sizes the batch to GPU memory; on " + device +
                       " give a number");
    const int64_t budget = static_cast<int64_t>(cfg.train.memory_fraction * memory);
    int lo = 0, hi = 8;
    while (hi <= 65536 && planned_bytes(hi) <= budget) lo = hi, hi *= 2;
    if (lo == 0)
      throw TrainError("train.batch_size = \"auto\": not even batch 8 fits in " +
                       std::to_string(cfg.train.memory_fraction) + " of " + device + "'s memory");
    while (hi - lo > 8) {
      const int mid = (lo + hi) / 2 / 8 * 8;
      if (planned_bytes(mid) <= budget) lo = mid; else hi = mid;
    }
    for (int b = lo; b >= 8; b -= 8) {
      try {
        build(b);
        obs_.on_message("batch_size auto: " + std::to_string(b) +
                        " (the largest multiple of 8 whose plan fits in " +
                        std::to_string(static_cast<int>(cfg.train.memory_fraction * 100)) +
                        "% of " + device + "'s memory)");
        return b;
      } catch (const std::runtime_error& e) {
        obs_.on_message("batch " + std::to_string(b) + " did not allocate (" + e.what() +
                        "); trying " + std::to_string(b - 8));
      }
    }
    throw TrainError("train.batch_size = \"auto\": no batch could be allocated");
  }

  RunObserver& obs_;
  const std::map<std::string, ConvAlgoChoice>& algo_cache_;
  std::string config_hash_;  // "" = none given
  bool same_data_;           // TrainContext::every_rank_reads_all
};

// This rank's figures over the measured steps, gathered from every rank
// (all of them call this at the same point).
std::vector<RankRecord> rank_records(Run& run, const LoopResult& loop, const TrainResult& result) {
  RankRecord mine;
  mine.host = result.environment.get("host");
  mine.device = run.backend->name();
  if (!run.cfg.train.device.is_gpu())
    mine.device += " (cores " + result.environment.get("cpu_affinity") + ")";
  else if (const std::string name = result.environment.get("device_name"); !name.empty())
    mine.device += " (" + name + ")";
  std::vector<double> waits;
  for (const StepRecord& s : loop.steps)
    if (s.kind == StepKind::measured) waits.push_back(s.data_wait_ms);
  mine.step_ms_median = result.summary.step_ms_median;
  mine.data_wait_ms = waits.empty() ? 0 : median(waits);
  const StepRunner& r = *run.runner;
  mine.allreduce_ms = r.allreduce_measured > 0
                          ? r.allreduce_ms_measured / static_cast<double>(r.allreduce_measured)
                          : 0;
  mine.bytes_reduced = r.reduced_bytes;
  const double busy_ms = r.allreduce_measured > 0 ? r.allreduce_busy_ms_measured /
                                                        static_cast<double>(r.allreduce_measured)
                                                  : 0;
  mine.bus_bytes_per_s =
      dist::allreduce_bus_bandwidth(r.reduced_bytes, busy_ms / 1000.0, run.comm.size());
  return dist::gather_rank_records(run.comm, mine);
}

}  // namespace

TrainResult train(const RunConfig& cfg, RunObserver& observers, const TrainContext& ctx) {
  Run run(cfg, observers, ctx);
  run.set_up();
  const int64_t start = run.initialise();
  if (!run.measures_a_step(start))
    throw TrainError("no step of this run would be measured (measure.warmup_steps = " +
                     std::to_string(cfg.measure.warmup_steps) + " of its " +
                     std::to_string(run.total_steps) +
                     " steps): a run without a measured step has no figures to store");
  Backend& backend = *run.backend;
  // The nsys capture range (a device backend's) first, so it opens before
  // and closes after every range the other observers open around the
  // measured steps.
  RunObservers obs;
  std::optional<CaptureWindow> capture;
  if (DeviceHooks* device = backend.device())
    obs.add(capture.emplace([device](bool on) {
      on ? device->profiler_start() : device->profiler_stop();
    }));
  obs.add(observers);

  TrainResult result;
  result.environment = backend.environment();
  result.environment.fields["parameters"] = std::to_string(run.model->parameter_count());
  // What the throughput counts (progress lines, `show`): a GPT-2 run's tokens.
  result.environment.fields["throughput_unit"] = cfg.model.is_gpt2() ? "tokens/s" : "images/s";
  if (!ctx.device_note.empty()) result.environment.fields["device_note"] = ctx.device_note;
  // What identifies the data where data.path does not (compare matches on
  // it): a file-backed source's content; synthetic data is its settings.
  if (cfg.data.source != "synthetic")
    result.environment.fields["data_fingerprint"] =
        data::dataset_fingerprint(*run.train_set) +
        (run.test_set ? " " + data::dataset_fingerprint(*run.test_set) : std::string());
  obs.on_run_begin(result.environment, run.shape(start));
  // Every rank stops at the same step: a stop any of them sees is agreed on
  // (one all-reduce of a flag per step; a rank that stopped alone would
  // leave the others waiting in the next collective).
  std::function<bool()> stop = ctx.stop_requested;
  if (run.comm.size() > 1)
    stop = [&run, local = ctx.stop_requested] {
      double flag = local && local() ? 1 : 0;
      run.comm.all_reduce_sum(&flag, 1);
      return flag > 0;
    };
  const LoopResult loop = run_steps(run, run.loop_plan(start), obs, stop);

  summarize_steps(loop.steps, result.summary);
  summarize_evals(loop.evals, cfg.measure.target_accuracy, run.steps_per_epoch, result.summary);
  result.summary.final_loss = loop.last_loss;
  result.summary.test_loss = loop.test_loss;
  result.summary.test_accuracy = loop.test_accuracy;
  result.summary.batch_size = run.batch;
  result.summary.lr = run.runner->peak_lr();
  result.summary.peak_memory_bytes = backend.peak_memory_bytes();
  result.summary.algo_search_ms = backend.conv_algorithm_search_ms();
  result.summary.flops_per_step = run.flops_per_step();
  result.layer_costs = run.layer_costs();
  result.memory = backend.memory_plan();
  result.conv_algorithms = backend.conv_algorithms();
  result.summary.ranks = run.comm.size();
  result.summary.global_batch = run.samples_per_step();
  obs.on_run_end(result);
  order_phases(result.phases);
  if (run.comm.size() > 1) result.ranks = rank_records(run, loop, result);
  return result;
}

}  // namespace xrun
