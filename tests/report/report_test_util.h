// tests/report/report_test_util.h: a realistic store for the report tests,
// written through the store API: two GPU machines (RTX 4090 D and RTX 3090,
// each with its own label and host), two precisions and three batch sizes,
// each run with warmup/measured/unmeasured steps (losses, some not read
// back), three epochs with test accuracy, phase times (device time on the
// profiled 4090 D only) and kernel times. Step times come from a simple
// speed model with seeded jitter, so throughput rises with batch size.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "store/store.h"
#include "store/store_test_util.h"

namespace report_test {

struct Machine {
  std::string label, device_name, host, compute_capability, sm_count, memory_bytes;
  double speed;   // relative to the 4090 D
  bool profiled;  // device time per phase (CUPTI)
};

inline const std::vector<Machine>& machines() {
  static const std::vector<Machine> list = {{"4090D-box", "NVIDIA GeForce RTX 4090 D", "box-4090d",
                                             "8.9", "114", "25757220864", 1.0, true},
                                            {"3090 <lab&co>", "NVIDIA GeForce RTX 3090", "box-3090",
                                             "8.6", "82", "25438126080", 0.62, false}};
  return list;
}
inline const std::vector<std::string>& precisions() {
  static const std::vector<std::string> list = {"fp32", "fp16"};
  return list;
}
inline const std::vector<int>& batch_sizes() {
  static const std::vector<int> list = {64, 128, 256};
  return list;
}

constexpr int kWarmup = 3, kMeasured = 40, kUnmeasured = 6, kEpochs = 3;

// Deterministic jitter in [-1, 1].
class Jitter {
 public:
  explicit Jitter(uint64_t seed) : state_(seed * 6364136223846793005ULL + 1442695040888963407ULL) {}
  double next() {
    state_ = state_ * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<double>(state_ >> 11) / static_cast<double>(1ULL << 53) * 2.0 - 1.0;
  }

 private:
  uint64_t state_;
};

// img/s: rises with the batch size, fp16 about twice fp32. At fp32 batch 64
// both cards wait on kernel launches and run about as fast: a comparison
// with no clear difference.
inline double model_throughput(const Machine& m, const std::string& precision, int batch) {
  if (precision == "fp32" && batch == 64) return 560.0 * (m.speed < 1 ? 0.99 : 1.0);
  const double fp32 = 900.0 * std::pow(batch / 64.0, 0.12);
  return fp32 * (precision == "fp16" ? 2.1 : 1.0) * m.speed;
}

inline std::vector<xrun::StepRecord> make_steps(double step_ms, int batch, Jitter& jitter) {
  std::vector<xrun::StepRecord> steps;
  const int total = kWarmup + kMeasured + kUnmeasured;
  for (int i = 0; i < total; ++i) {
    xrun::StepRecord s;
    s.step = i;
    s.epoch = i * kEpochs / total;
    s.kind = i < kWarmup               ? xrun::StepKind::warmup
             : i < kWarmup + kMeasured ? xrun::StepKind::measured
                                       : xrun::StepKind::unmeasured;
    const double spread = 0.025 * (jitter.next() + jitter.next() + jitter.next());
    s.step_ms = step_ms * (i < kWarmup ? 3.0 : 1.0 + spread);
    s.data_wait_ms = 0.02 * s.step_ms;
    // The loss is read back on three steps of four.
    s.loss = i % 4 == 3 ? std::nan("") : 2.3 * std::exp(-i / 25.0) + 0.2 + 0.04 * jitter.next();
    s.lr = 1e-3;
    s.images = batch;
    steps.push_back(s);
  }
  return steps;
}

inline xrun::RunSummary summarize(const std::vector<xrun::StepRecord>& steps,
                                  const std::vector<xrun::EpochRecord>& epochs, int batch) {
  std::vector<double> ms;
  for (const auto& s : steps)
    if (s.kind == xrun::StepKind::measured) ms.push_back(s.step_ms);
  std::sort(ms.begin(), ms.end());
  double total = 0;
  for (double t : ms) total += t;
  xrun::RunSummary sum;
  sum.measured_steps = static_cast<int64_t>(ms.size());
  sum.measured_images = sum.measured_steps * batch;
  sum.measured_seconds = total / 1000;
  sum.throughput = static_cast<double>(sum.measured_images) / sum.measured_seconds;
  sum.step_ms_median = ms[ms.size() / 2];
  sum.step_ms_p10 = ms[ms.size() / 10];
  sum.step_ms_p90 = ms[ms.size() * 9 / 10];
  sum.step_ms_mean = total / static_cast<double>(ms.size());
  sum.batch_size = batch;
  sum.peak_memory_bytes = int64_t{batch} * (48LL << 20);
  sum.final_loss = 0.4;
  sum.test_accuracy = epochs.back().test_accuracy;
  sum.test_loss = epochs.back().test_loss;
  return sum;
}

inline std::vector<xrun::PhaseRecord> make_phases(double step_ms, bool profiled) {
  const std::vector<std::pair<const char*, double>> shares = {{"data_wait", 0.02},
                                                              {"h2d", 0.04},
                                                              {"forward", 0.3},
                                                              {"backward", 0.56},
                                                              {"optimizer", 0.08}};
  std::vector<xrun::PhaseRecord> phases;
  for (const auto& [phase, share] : shares) {
    const double host = share * step_ms * kMeasured;
    const bool on_gpu = profiled && std::string(phase) != "data_wait";
    phases.push_back({phase, kMeasured, host, on_gpu ? 0.93 * host : 0.0});
  }
  phases.push_back({"eval", kEpochs, 40 * step_ms, 0.0});
  return phases;
}

inline std::vector<xrun::KernelRecord> make_kernels(double step_ms) {
  const std::vector<std::pair<std::string, const char*>> names = {
      {"sm86_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize128x128x32",
       "forward"},
      {"sm86_xmma_dgrad_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize64x64x32",
       "backward"},
      {"sm86_xmma_wgrad_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize128x64x32",
       "backward"},
      {"cudnn::bn_fw_tr_1C11_kernel_NCHW", "forward"},
      {"cudnn::bn_bw_1C11_kernel_new", "backward"},
      {"xrun::relu_forward", "forward"},
      {"xrun::relu_backward", "backward"},
      {"xrun::adamw_step", "optimizer"},
      {"cutlass::Kernel<linear>", "forward"},
      {"cutlass::Kernel<linear_grad>", "backward"},
      {"xrun::maxpool_forward", "forward"},
      {"xrun::maxpool_backward", "backward"},
      {"xrun::cross_entropy", "forward"},
      {"xrun::add_residual", "forward"},
      {"xrun::scale_gradients", "optimizer"}};
  std::vector<xrun::KernelRecord> kernels;
  double share = 0.3;
  for (const auto& [name, phase] : names) {
    const double total = share * step_ms * kMeasured;
    kernels.push_back(
        {name, phase, kMeasured * 16, total, total / kMeasured / 20, total / kMeasured / 12});
    share *= 0.72;
  }
  return kernels;
}

inline std::vector<xrun::EpochRecord> make_epochs(Jitter& jitter, bool skip_an_eval) {
  std::vector<xrun::EpochRecord> epochs;
  for (int e = 0; e < kEpochs; ++e) {
    xrun::EpochRecord r;
    r.epoch = e;
    r.train_loss = 1.6 / (e + 1);
    r.test_loss = 1.7 / (e + 1);
    r.test_accuracy = 0.45 + 0.14 * e + 0.03 * jitter.next();
    if (skip_an_eval && e == 1) r.test_accuracy = r.test_loss = std::nan("");
    r.seconds = 30;
    r.images = 6000;
    epochs.push_back(r);
  }
  return epochs;
}

// One complete run of `machine`, written through the store API.
inline std::string add_run(xrun::store::Store& db, const Machine& machine,
                           const std::string& precision, int batch, uint64_t seed) {
  xrun::store::NewRun run = store_test::make_run(precision, batch, machine.label);
  run.experiment = "resnet50-sweep";
  run.experiment_file = "experiments/resnet50-sweep.toml";
  run.environment.fields["device_name"] = machine.device_name;
  run.environment.fields["compute_capability"] = machine.compute_capability;
  run.environment.fields["device_uuid"] = "GPU-" + machine.host;
  run.environment.fields["sm_count"] = machine.sm_count;
  run.environment.fields["memory_bytes"] = machine.memory_bytes;
  const std::string uuid = db.begin_run(run);
  Jitter jitter(seed);
  const double step_ms = 1000.0 * batch / model_throughput(machine, precision, batch);
  const auto steps = make_steps(step_ms, batch, jitter);
  db.write_steps(uuid, steps);
  const auto epochs = make_epochs(jitter, machine.speed < 1 && precision == "fp16" && batch == 256);
  for (const auto& e : epochs) db.write_epoch(uuid, e);
  // An evaluation at each epoch's end (the epoch's accuracy, NaN kept), at
  // a wall time of 100 of the run's steps per epoch plus 2 s per evaluation.
  std::vector<xrun::EvalRecord> evals;
  for (const auto& e : epochs) {
    const double n = e.epoch + 1.0;
    evals.push_back({static_cast<int64_t>(n * 100), e.epoch, static_cast<int64_t>(n * e.images),
                     n * (step_ms / 10.0 + 2.0), n * 2.0, e.test_loss, e.test_accuracy});
    db.write_eval(uuid, evals.back());
  }
  db.write_phases(uuid, make_phases(step_ms, machine.profiled));
  db.write_kernels(uuid, make_kernels(step_ms));
  if (machine.speed == 1.0 && precision == "fp16") {
    // profile.layers on the 4090 D's fp16 runs: three layers timed in both
    // passes (2 calls each), with their costs; the roofline chart's points.
    const std::vector<xrun::LayerCostRecord> costs = {
        {"layer1.0.conv2", "forward", 4e9 * batch / 64, 2e7 * batch / 64},
        {"layer1.0.conv2", "backward_data", 4e9 * batch / 64, 2e7 * batch / 64},
        {"layer1.0.conv2", "backward_weights", 4e9 * batch / 64, 2.5e7 * batch / 64},
        {"layer1.0.bn2", "forward", 6e7 * batch / 64, 5e7 * batch / 64},
        {"layer1.0.bn2", "backward", 8e7 * batch / 64, 8e7 * batch / 64},
        {"fc", "forward", 3e6 * batch / 64, 1e6 * batch / 64}};
    db.write_layer_costs(uuid, costs);
    const std::vector<xrun::KernelRecord> layers = {
        {"layer1.0.conv2", "forward", 2, step_ms / 10, 0, 0},
        {"layer1.0.conv2", "backward", 2, step_ms / 5, 0, 0},
        {"layer1.0.bn2", "forward", 2, step_ms / 20, 0, 0},
        {"layer1.0.bn2", "backward", 2, step_ms / 15, 0, 0}};  // fc: costs, no time
    db.write_kernels(uuid, layers);
  }
  xrun::RunSummary summary = summarize(steps, epochs, batch);
  summary.flops_per_step = batch * 24.55e9;  // ResNet50 at 224x224, AdamW
  if (machine.speed == 1.0) {  // the 4090 D's peaks; the 3090's runs stored none
    summary.peak_flops = precision == "fp16" ? 147.1e12 : 73.5e12;
    summary.peak_bytes_per_s = 1008e9;
  }
  if (precision == "fp16") {  // a target for the fp16 runs: some reach it, some not
    summary.target_accuracy = 0.74;
    for (const auto& e : evals) {
      if (std::isfinite(e.test_accuracy) && !(e.test_accuracy <= summary.best_accuracy))
        summary.best_accuracy = e.test_accuracy;
      if (e.test_accuracy >= 0.74 && std::isnan(summary.time_to_target_s)) {
        summary.time_to_target_s = e.wall_seconds;
        summary.time_to_target_eval_s = e.eval_seconds;
        summary.steps_to_target = e.step;
        summary.epochs_to_target = e.epoch + 1.0;
        summary.images_to_target = e.images;
      }
    }
  }
  db.finish_run(uuid, xrun::store::RunStatus::complete, summary);
  return uuid;
}

// The whole sweep, machine by machine, in a new store at `path`; each
// machine's runs carry its host name as if its store had been merged in.
inline std::vector<std::string> build_store(const std::string& path) {
  std::vector<std::string> uuids;
  {
    xrun::store::Store db(path);
    uint64_t seed = 1;
    for (const Machine& m : machines())
      for (const std::string& precision : precisions())
        for (int batch : batch_sizes()) uuids.push_back(add_run(db, m, precision, batch, seed++));
  }
  for (const Machine& m : machines())
    store_test::sql_exec(path,
                         "UPDATE runs SET host = '" + m.host + "' WHERE label = '" + m.label + "'");
  return uuids;
}

}  // namespace report_test
