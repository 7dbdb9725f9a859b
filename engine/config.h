// engine/config.h: the fully resolved settings of one training run, as the
// engine sees them. The runner fills this from a validated experiment file
// (runner/config_schema.cpp maps every key); the engine never reads TOML.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace xrun {

struct ModelConfig {
  std::string arch = "resnet50";  // resnet18|34|50|101|152
  int num_classes = 10;           // resolved: never 0 here
  std::string weights;            // safetensors file to start from, "" = init
};

struct DataConfig {
  std::string source = "synthetic";  // cifar10 | idx | synthetic
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
};

struct OptimizerConfig {
  std::string name = "adamw";  // adamw | sgd
  double lr = 1e-3;
  double weight_decay = 0.01;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double momentum = 0.0;
  bool nesterov = false;
};

struct ScheduleConfig {
  std::string name = "constant";  // constant | cosine | step
  int64_t warmup_steps = 0;       // linear warmup from lr*warmup_start_factor
  double min_lr = 0.0;            // cosine: lr at the last step
  int64_t step_size = 1000;       // step: decay every step_size steps
  double gamma = 0.1;             // step: decay factor
};

struct TrainConfig {
  std::string device = "cpu";  // resolved: "cpu" or "cuda:N"
  int batch_size = 32;         // 0 = "auto" (largest that fits)
  double memory_fraction = 0.9;
  int accumulate = 1;
  int epochs = 0;              // exactly one of epochs / steps is > 0
  int64_t steps = 0;
  std::string precision = "fp32";  // fp32 | tf32 | fp16 | bf16
  std::string cudnn_benchmark = "false";  // "false" | "true" | "cached"
  bool cuda_graphs = false;
  uint64_t seed = 0;
  int threads = 0;             // CPU threads, 0 = all cores
  bool eval = true;            // evaluate on the test split after each epoch
  std::string checkpoint;      // safetensors path written at the end ("" = none)
  bool resume = false;         // continue from `checkpoint` if it exists
  int log_every = 10;          // steps between loss read-backs / progress lines
  OptimizerConfig optimizer;
  ScheduleConfig schedule;
};

struct MeasureConfig {
  int64_t warmup_steps = 5;   // first steps of the run, never in a figure
  int64_t measure_steps = 0;  // steps after warmup that count, 0 = all
};

struct ProfileConfig {
  bool nvtx = true;
  std::string cupti = "off";  // off | summary | trace
  bool layers = false;        // one range per layer
  int64_t trace_steps = 5;    // cupti = trace: raw records of this many steps
};

struct RunConfig {
  std::string name;
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  MeasureConfig measure;
  ProfileConfig profile;
};

}  // namespace xrun
