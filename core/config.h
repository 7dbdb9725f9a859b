// core/config.h: the fully resolved settings of one training run, as the
// engine sees them. The runner fills this from a validated experiment file
// (runner/config_schema.cpp checks every key, runner/run_config.cpp maps
// it); the engine never reads TOML. Settings with a fixed set of values are
// enums here: once validated, a misspelt string cannot reach the engine.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace xrun {

enum class Precision { fp32, tf32, fp16, bf16 };
enum class CudnnBenchmark { off, on, cached };  // the key's false | true | "cached"
enum class CuptiMode { off, summary, trace };
enum class DeviceKind { cpu, cuda };

inline const char* to_string(Precision p) {
  switch (p) {
    case Precision::fp32: return "fp32";
    case Precision::tf32: return "tf32";
    case Precision::fp16: return "fp16";
    case Precision::bf16: return "bf16";
  }
  return "?";
}
// Why a run cannot train in bf16 on this CPU: oneDNN's ISA here (`isa`,
// "avx2") has no bf16 kernels. One text for `plan`, `run` and the engine.
inline std::string cpu_bf16_refusal(const std::string& isa) {
  return "precision 'bf16' on the CPU needs oneDNN's bf16 kernels (a CPU with AVX512_BF16 or "
         "AMX); oneDNN's ISA on this CPU is " + isa +
         ": train in fp32 here, or in bf16 on a CUDA device";
}
inline const char* to_string(CudnnBenchmark b) {
  switch (b) {
    case CudnnBenchmark::off: return "false";
    case CudnnBenchmark::on: return "true";
    case CudnnBenchmark::cached: return "cached";
  }
  return "?";
}
inline const char* to_string(CuptiMode m) {
  switch (m) {
    case CuptiMode::off: return "off";
    case CuptiMode::summary: return "summary";
    case CuptiMode::trace: return "trace";
  }
  return "?";
}

// Names to values; std::invalid_argument for a name the schema would refuse.
template <class E>
E parse_enum(const std::string& name, std::initializer_list<E> values, const char* what) {
  for (E v : values)
    if (name == to_string(v)) return v;
  throw std::invalid_argument(std::string("unknown ") + what + " '" + name + "'");
}
inline Precision parse_precision(const std::string& s) {
  return parse_enum(s, {Precision::fp32, Precision::tf32, Precision::fp16, Precision::bf16},
                    "precision");
}
inline CudnnBenchmark parse_cudnn_benchmark(const std::string& s) {
  return parse_enum(s, {CudnnBenchmark::off, CudnnBenchmark::on, CudnnBenchmark::cached},
                    "cudnn_benchmark");
}
inline CuptiMode parse_cupti_mode(const std::string& s) {
  return parse_enum(s, {CuptiMode::off, CuptiMode::summary, CuptiMode::trace}, "profile.cupti");
}

// A resolved device: "cpu" or "cuda:N".
struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;
  bool is_gpu() const { return kind == DeviceKind::cuda; }
  std::string name() const { return is_gpu() ? "cuda:" + std::to_string(index) : "cpu"; }
  bool operator==(const Device&) const = default;
  // std::invalid_argument unless `s` is "cpu" or "cuda:N".
  static Device parse(const std::string& s) {
    if (s == "cpu") return {};
    if (s.rfind("cuda:", 0) == 0 && s.size() > 5 && s.size() <= 9 &&
        s.find_first_not_of("0123456789", 5) == std::string::npos)
      return {DeviceKind::cuda, std::stoi(s.substr(5))};
    throw std::invalid_argument("device '" + s + "': expected cpu or cuda:N");
  }
};

struct ModelConfig {
  std::string arch = "resnet50";  // resnet18|34|50|101|152, gpt2|gpt2-medium|gpt2-large|gpt2-xl
  int num_classes = 10;           // resolved: never 0 here (GPT-2: the vocabulary)
  std::string weights;            // safetensors file to start from, "" = init
  // GPT-2's shape, resolved from the preset (model.arch) and the keys given;
  // all 0 for a ResNet.
  int64_t layers = 0, heads = 0, width = 0, context = 0, vocab = 0;
  bool is_gpt2() const { return arch.rfind("gpt2", 0) == 0; }
};

struct DataConfig {
  std::string source = "synthetic";  // cifar10 | idx | synthetic; GPT-2: tokens | text | synthetic
  std::string path;                  // directory of the dataset files
  int image_size = 32;               // images are placed/resized to this
  int channels = 3;                  // model input channels
  int num_classes = 10;              // synthetic only
  std::vector<float> mean;           // per channel, resolved (size == channels)
  std::vector<float> std;            // per channel, resolved
  bool random_crop = false;          // augment: 4-pixel pad + random crop
  bool hflip = false;                // augment: horizontal flip
  bool shuffle = true;
  int workers = 2;                   // loader threads; 0 = on the training thread
  bool pin_memory = false;
  int prefetch = 2;                  // batches in the ring
  int64_t limit = 0;                 // use at most this many training samples, 0 = all
  int64_t test_limit = 0;            // use at most this many test samples, 0 = all
  bool learnable = true;             // synthetic: class-dependent patterns
  int64_t samples = 50000;           // synthetic: training-set size
  int64_t test_samples = 10000;      // synthetic: test-set size
  int64_t sequence_length = 0;       // GPT-2: tokens per training sequence (resolved; 0 ResNet)
};

struct OptimizerConfig {
  std::string name = "adamw";  // adamw | sgd
  double lr = 1e-3;
  double weight_decay = 0.01;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double momentum = 0.0;
  bool nesterov = false;
  // lr is the learning rate at reference_batch images per step; the run's
  // is scaled to its own batch x accumulate: none | linear (Goyal et al.
  // 2017) | sqrt (engine/schedule.h: scaled_lr).
  std::string lr_scaling = "none";
  int64_t reference_batch = 256;
};

struct ScheduleConfig {
  std::string name = "constant";  // constant | cosine | step
  int64_t warmup_steps = 0;       // linear warmup from lr*warmup_start_factor
  double min_lr = 0.0;            // cosine: lr at the last step
  int64_t step_size = 1000;       // step: decay every step_size steps
  double gamma = 0.1;             // step: decay factor
};

struct TrainConfig {
  Device device;               // resolved: cpu or cuda:N
  int batch_size = 32;         // 0 = "auto" (largest that fits)
  double memory_fraction = 0.9;
  int accumulate = 1;
  int epochs = 0;              // exactly one of epochs / steps is > 0
  int64_t steps = 0;
  Precision precision = Precision::fp32;
  CudnnBenchmark cudnn_benchmark = CudnnBenchmark::off;
  bool cuda_graphs = false;
  bool per_layer_update = false; // CPU: update each layer's parameters in the backward pass
  double clip_grad_norm = 0;     // > 0: gradients scaled to at most this global L2 norm
  uint64_t seed = 0;
  int threads = 0;             // CPU threads, 0 = all cores
  bool eval = true;            // evaluate on the test split after each epoch
  std::string checkpoint;      // safetensors path written at the end ("" = none)
  bool resume = false;         // continue from `checkpoint` if it exists
  int64_t eval_every = 0;      // also evaluate every this many steps; 0 = epoch ends only
  int log_every = 10;          // steps between loss read-backs / progress lines
  int ranks = 1;               // processes training the run together (data parallel)
  OptimizerConfig optimizer;
  ScheduleConfig schedule;
};

struct MeasureConfig {
  int64_t warmup_steps = 5;   // first steps of the run, never in a figure
  int64_t measure_steps = 0;  // steps after warmup that count, 0 = all
  double target_accuracy = 0; // time to this test accuracy is stored; 0 = none
};

struct ProfileConfig {
  bool nvtx = true;
  CuptiMode cupti = CuptiMode::off;
  bool layers = false;        // one range per layer
  int64_t trace_steps = 5;    // cupti = trace: raw records of this many steps
};

// [distributed]: how the ranks of a run with train.ranks > 1 talk.
struct DistributedConfig {
  std::string backend = "auto";  // auto | gloo | nccl
  int timeout_s = 120;           // a rank's wait for the others
  double bucket_mb = 25;         // gradients reduced in buckets during backward; 0 = after it
};

struct RunConfig {
  std::string name;
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  MeasureConfig measure;
  ProfileConfig profile;
  DistributedConfig distributed;
};

}  // namespace xrun
