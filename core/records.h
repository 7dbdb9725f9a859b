// core/records.h: the plain values a training run hands to the store:
// one StepRecord per step, one EpochRecord per epoch, phase and kernel totals,
// the environment the run saw, the run's summary figures, and the whole
// TrainResult the observers fill at the run's end.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace xrun {

enum class StepKind { warmup, measured, unmeasured };

struct StepRecord {
  int64_t step = 0;        // 0-based optimizer step index within the run
  int epoch = 0;           // 0-based
  StepKind kind = StepKind::measured;
  double step_ms = 0;      // wall time of the whole step (data wait included)
  double data_wait_ms = 0; // time the step waited for its batch
  double loss = 0;         // NaN when not read back this step
  double lr = 0;
  double loss_scale = 1;   // fp16: the dynamic scale used for this step
  int64_t images = 0;      // images consumed by this step (accumulation included)
  bool skipped = false;    // fp16: optimizer step skipped on inf/NaN gradients
};

struct EpochRecord {
  int epoch = 0;
  double train_loss = 0;    // mean of the losses read back during the epoch
  double test_loss = 0;     // NaN when not evaluated
  double test_accuracy = 0; // top-1 in [0,1], NaN when not evaluated
  double seconds = 0;       // wall time of the epoch's training (eval excluded)
  double eval_seconds = 0;
  int64_t images = 0;
};

// One evaluation on the test split: at each epoch's end and every
// train.eval_every steps. Times run from the start of the run's first step
// (this process's: a resumed run starts its clock again).
struct EvalRecord {
  int64_t step = 0;          // optimizer steps done when it ran
  int epoch = 0;             // 0-based epoch it ran in
  int64_t images = 0;        // training images seen by then
  double wall_seconds = 0;   // to this evaluation's end, evaluations included
  double eval_seconds = 0;   // of which in evaluations, this one included
  double test_loss = 0, test_accuracy = 0;
};

// Time spent in one phase (data_wait, h2d, forward, backward, optimizer, eval,
// ...) over the measured steps.
struct PhaseRecord {
  std::string phase;
  int64_t calls = 0;
  double host_ms = 0;  // host wall time
  double gpu_ms = 0;   // device time (0 on the CPU engine)
};

// One kernel name's totals (CUDA engine with CUPTI).
struct KernelRecord {
  std::string name;
  std::string phase;
  int64_t calls = 0;
  double total_ms = 0, min_ms = 0, max_ms = 0;
};

// One layer's work in one pass of a micro-batch, from the model's shapes
// (engine/model/step_flops.h, step_bytes.h): its FLOPs and the least bytes
// it moves. pass: forward | backward_data | backward_weights | backward.
struct LayerCostRecord {
  std::string layer;  // as profile.layers names it: "layer1.0.conv1"
  std::string pass;
  double flops = 0;
  double bytes = 0;
};

// Copies (or memsets) of one direction and host memory kind over the traced
// steps (CUDA engine with CUPTI). direction: h2d | d2h | d2d | h2h | memset;
// memory: pinned | pageable | device.
struct MemcpyRecord {
  std::string direction;
  std::string memory;
  int64_t count = 0;
  int64_t bytes = 0;
  double total_ms = 0;
};

// One range of a trace window (profiler/trace.h): a track (the host's
// training thread, later a GPU stream), nested ranges on it.
struct TraceEvent {
  std::string track;     // "host"
  std::string name;      // "step", "forward", "layer1.0.conv1"
  int64_t start_ns = 0;  // since the window began
  int64_t dur_ns = 0;
  int64_t payload = -1;  // the step index of a step range
  int depth = 0;         // nesting depth on its track
  int64_t flow = 0;      // CUPTI correlation id joining a launch to its kernel (0: none)
};

// A troubleshooting check that fired (profiler/findings.h).
struct FindingRecord {
  std::string check;
  std::string message;
  double value = 0;
};

// The algorithm chosen for one convolution pass (CUDA engine).
struct ConvAlgoChoice {
  int algo = -1;
  int math_type = 0;
  int64_t workspace_bytes = 0;
  double time_ms = 0;  // as measured by the search that chose it
};
struct ConvAlgoRecord {
  std::string layer;   // "layer1.0.conv2"
  std::string pass;    // forward | backward_data | backward_filter
  std::string key;     // shape, types and pass: what a cached choice is reused for
  std::string algo_name;
  std::string source;  // heuristic | benchmark | cached
  ConvAlgoChoice choice;
};

// One region of a run's memory plan (parameters, gradients, optimizer
// state, activations, ...), in bytes.
struct MemoryRecord {
  std::string region;
  int64_t bytes = 0;
};

// Where a run ran: device, libraries, host. Flat key/value pairs so the store
// keeps whatever a backend knows without a schema change for each new field.
struct Environment {
  std::map<std::string, std::string> fields;  // e.g. "device_name" -> "AMD EPYC"
  std::string get(const std::string& key) const {
    auto it = fields.find(key);
    return it == fields.end() ? std::string() : it->second;
  }
};

// Headline figures of a finished run, computed from the measured steps.
struct RunSummary {
  int64_t measured_steps = 0;
  int64_t measured_images = 0;
  double measured_seconds = 0;
  double throughput = 0;        // images / wall time over the measured steps
  double step_ms_median = 0, step_ms_p10 = 0, step_ms_p90 = 0;
  double step_ms_mean = 0, step_ms_stddev = 0;
  int64_t step_outliers = 0;    // steps beyond median +- 5 scaled MAD (core/stats.h)
  double data_wait_fraction = 0;
  int64_t peak_memory_bytes = 0;
  int64_t skipped_steps = 0;
  double final_loss = 0;
  double test_accuracy = 0;     // last evaluation, NaN when none
  double test_loss = 0;
  int batch_size = 0;           // as run (resolves "auto"), per rank and micro-batch
  int ranks = 1;                // processes that trained the run (train.ranks)
  int64_t global_batch = 0;     // images per optimizer step: batch x accumulate x ranks
  // The peak learning rate the run trained with: train.optimizer.lr scaled
  // to batch x accumulate by train.optimizer.lr_scaling (NaN: not stored).
  double lr = std::numeric_limits<double>::quiet_NaN();
  double algo_search_ms = 0;    // CUDA: time spent choosing convolution algorithms
  // CUPTI (profile.cupti summary/trace): median step time of traced steps over
  // that of untraced ones, minus 1 (NaN when not measured), and how many
  // measured steps the kernel and copy totals cover.
  double cupti_overhead = std::numeric_limits<double>::quiet_NaN();
  int64_t cupti_steps = 0;
  // The FLOPs of one optimizer step, counted from the model's layer shapes
  // (engine/model/step_flops.h); NaN for runs stored before xrun counted
  // them. Achieved FLOP/s = flops_per_step * measured_steps / measured_seconds.
  double flops_per_step = std::numeric_limits<double>::quiet_NaN();
  // The device's peak FLOP/s for the run's precision and where it came from
  // ("measured by xrun doctor --peak, 2 threads, 2026-12-06T..."); NaN and ""
  // where none is known.
  double peak_flops = std::numeric_limits<double>::quiet_NaN();
  std::string peak_source;
  // The device's peak memory bandwidth (bytes/s) and where it came from (GPU:
  // memory clock and bus width from the driver; CPU: doctor --peak's copy);
  // NaN and "" where none is known.
  double peak_bytes_per_s = std::numeric_limits<double>::quiet_NaN();
  std::string peak_bandwidth_source;
  // measure.target_accuracy (NaN: none) and the first evaluation at or above
  // it (engine/step_stats.h): wall time from the first step with the
  // evaluation time in it, steps, epochs (steps / steps per epoch) and
  // training images; NaN and 0 when the run ended below it.
  double target_accuracy = std::numeric_limits<double>::quiet_NaN();
  double time_to_target_s = std::numeric_limits<double>::quiet_NaN();
  double time_to_target_eval_s = std::numeric_limits<double>::quiet_NaN();
  double epochs_to_target = std::numeric_limits<double>::quiet_NaN();
  int64_t steps_to_target = 0;
  int64_t images_to_target = 0;
  double best_accuracy = std::numeric_limits<double>::quiet_NaN();  // of every evaluation
};

// A CPU's measured peaks (`xrun doctor --peak`, engine/cpu/peak_probe.h),
// kept in the store per CPU model, oneDNN ISA and thread count; every later
// run on that CPU, ISA and thread count takes its precision's peak from it.
struct CpuPeakRecord {
  std::string cpu;  // model name, as the environment's device_name
  std::string isa;  // oneDNN's ISA (environment onednn_isa)
  int threads = 0;
  double fp32_flops = 0;
  double bf16_flops = 0;  // 0: no oneDNN bf16 kernels
  double copy_bytes_per_s = 0;
  std::string kernels;      // "fp32: IMPL, bf16: IMPL"
  std::string measured_at;  // ISO 8601 UTC
};

// FLOP/s over the measured steps; NaN where the run has no FLOP count or no
// measured time.
inline double achieved_flops(const RunSummary& s) {
  if (!(s.measured_seconds > 0) || s.measured_steps <= 0)
    return std::numeric_limits<double>::quiet_NaN();
  return s.flops_per_step * static_cast<double>(s.measured_steps) / s.measured_seconds;
}

// The run's size, known once data and model are set up.
struct RunShape {
  int64_t total_steps = 0;
  int64_t steps_per_epoch = 0;
  int64_t start_step = 0;  // > 0 when resumed from a checkpoint
  int epochs = 0;
  int batch_size = 0;
  int64_t parameters = 0;
};

// Everything a finished run produced. The engine fills the summary, memory
// and convolution choices; the observers add the rest (core/run_observer.h).
// One rank of a run trained by several (train.ranks > 1), over the
// measured steps: where it ran, its median step, its median wait for data,
// the all-reduce time per step it could not hide behind the backward pass,
// what it reduced per step and the bus bandwidth of those all-reduces (as
// nccl-tests define it: bytes x 2 (n - 1) / n over the time they took on
// their thread, hidden or not).
struct RankRecord {
  int rank = 0;
  std::string host;
  std::string device;          // "cpu (cores 0-7)", "cuda:0 (NVIDIA ...)"
  double step_ms_median = 0;
  double data_wait_ms = 0;     // median per step
  double allreduce_ms = 0;     // mean exposed all-reduce time per step
  double bytes_reduced = 0;    // per step
  double bus_bytes_per_s = 0;  // NaN when not measured
};

struct TrainResult {
  RunSummary summary;
  std::vector<PhaseRecord> phases;   // host timers; gpu_ms from CUPTI where traced
  std::vector<KernelRecord> layers;  // profile.layers: per layer and pass, largest first
  std::vector<MemoryRecord> memory;  // the memory plan by region
  std::vector<ConvAlgoRecord> conv_algorithms;  // CUDA: per convolution and pass
  std::vector<TraceEvent> trace;  // profile.cupti = "trace": the first measured steps' ranges
  // CUDA with CUPTI (profile.cupti summary/trace): per kernel and phase,
  // copies per direction, over the traced steps.
  std::vector<KernelRecord> kernels;
  std::vector<MemcpyRecord> copies;
  std::vector<FindingRecord> findings;  // the troubleshooting checks that fired
  std::vector<LayerCostRecord> layer_costs;  // per layer and pass, forward order
  std::vector<RankRecord> ranks;  // train.ranks > 1: every rank, in rank order
  Environment environment;
};

// The phase named `name` in `phases`, added (zeroed) when missing: observers
// merge their figures into one record per phase, in whatever order they run.
inline PhaseRecord& phase_record(std::vector<PhaseRecord>& phases, const std::string& name) {
  for (PhaseRecord& p : phases)
    if (p.phase == name) return p;
  phases.push_back({name, 0, 0.0, 0.0});
  return phases.back();
}

}  // namespace xrun
