// runner/resolve.cpp: one run's resolved config. Every key of the schema gets
// a value: the one given (file, --set or sweep axis), its static default, or
// a computed one (the data source's native size, channels, classes and
// statistics; weight decay per optimizer; epochs/steps; device; label). Then
// the rules that join several keys, and the device rules, are checked.
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "core/gpt2_shapes.h"
#include "core/resnet_shapes.h"
#include "engine/data/dataset.h"
#include "runner/config_schema.h"
#include "runner/experiment_detail.h"

namespace xrun::detail {

using nlohmann::json;

namespace {

// A source's per-channel statistics fitted to `channels`: as they are when
// the counts match, one value replicated (gray -> RGB), or the average.
json fit_channels(const std::vector<float>& stats, int channels) {
  json out = json::array();
  if (int(stats.size()) == channels) {
    for (float v : stats) out.push_back(schema::float_to_double(v));
    return out;
  }
  double mean = 0;
  for (float v : stats) mean += schema::float_to_double(v);
  mean /= double(stats.size());
  if (stats.size() == 1) mean = schema::float_to_double(stats[0]);
  for (int c = 0; c < channels; ++c) out.push_back(mean);
  return out;
}

class Resolver {
 public:
  Resolver(const Settings& s, const RunContext& c) : settings_(s), ctx_(c) {}

  json run() {
    // Given values and static defaults.
    for (auto& spec : schema::keys()) {
      if (!spec.run_setting) continue;
      auto it = settings_.find(spec.key);
      if (it != settings_.end()) put(spec.key, it->second.value);
      else if (!spec.default_value.is_null()) put(spec.key, spec.default_value);
      else put(spec.key, nullptr);
    }
    resolve_data();
    resolve_model();
    resolve_train();
    check_rules();
    check_device();
    return cfg_;
  }

 private:
  const json& get(const std::string& key) const { return cfg_.at(pointer(key)); }
  void put(const std::string& key, json v) { cfg_[pointer(key)] = std::move(v); }
  bool given(const std::string& key) const { return settings_.count(key) != 0; }
  void fill(const std::string& key, json v) {
    if (!given(key)) put(key, std::move(v));
  }
  Origin origin(const std::string& key) const {
    auto it = settings_.find(key);
    return it != settings_.end() ? it->second.origin : Origin{ctx_.file, 0, 0, ""};
  }
  std::string run_prefix(bool always) const {
    return always || ctx_.in_sweep ? "run " + std::to_string(ctx_.index) + ": " : "";
  }
  [[noreturn]] void rule(const std::string& key, const std::string& message, bool always_name_run = false) const {
    fail(origin(key), key, run_prefix(always_name_run) + message);
  }

  bool gpt2() const { return get("model.arch").get<std::string>().rfind("gpt2", 0) == 0; }

  // GPT-2's shape: the preset's values where none is given; the vocabulary
  // is the text source's 256 bytes. A ResNet gets 0 for every GPT-2 key.
  void resolve_model() {
    const std::string arch = get("model.arch"), source = get("data.source");
    static const char* const kShapeKeys[] = {"model.layers", "model.heads", "model.width",
                                             "model.context", "model.vocab",
                                             "data.sequence_length"};
    if (!gpt2()) {
      for (const char* key : kShapeKeys) {
        if (given(key)) rule(key, "a GPT-2 key; model.arch = \"" + arch + "\" is a ResNet");
        put(key, 0);
      }
      if (source == "tokens" || source == "text")
        rule("data.source", "'" + source + "' feeds a language model: set model.arch = \"gpt2\" "
                            "(a ResNet trains on cifar10, idx or synthetic images)");
      return;
    }
    if (source == "cifar10" || source == "idx")
      rule("data.source", "GPT-2 trains on tokens: \"tokens\" (llm.c .bin files), \"text\" "
                          "(UTF-8 as bytes) or \"synthetic\"; found '" + source + "'");
    if (!get("data.augment").empty())
      rule("data.augment", "image augmentations; GPT-2 reads token windows");
    const Gpt2Shape preset = *gpt2_preset(arch);
    fill("model.layers", preset.layers);
    fill("model.heads", preset.heads);
    fill("model.width", preset.width);
    fill("model.context", preset.context);
    fill("model.vocab", source == "text" ? 256 : preset.vocab);
    fill("data.sequence_length", get("model.context"));
    for (const char* key : kShapeKeys)
      if (get(key).get<int64_t>() < 1) rule(key, "expected at least 1 for GPT-2, found 0");
    const Gpt2Shape shape{get("model.layers"), get("model.heads"), get("model.width"),
                          get("model.context"), get("model.vocab")};
    if (const std::string problem = gpt2_shape_problem(shape); !problem.empty())
      rule("model.heads", problem);
    if (source == "text" && shape.vocab < 256)
      rule("model.vocab", "text is read as bytes: the vocabulary must hold all 256, found " +
                              std::to_string(shape.vocab));
    if (get("data.sequence_length").get<int64_t>() > shape.context)
      rule("data.sequence_length", "expected at most model.context (" +
                                       std::to_string(shape.context) + " positions), found " +
                                       get("data.sequence_length").dump());
    if (given("model.num_classes") && get("model.num_classes") != shape.vocab)
      rule("model.num_classes", "GPT-2's outputs are its vocabulary (model.vocab = " +
                                    std::to_string(shape.vocab) + "); leave num_classes out");
    put("model.num_classes", shape.vocab);
    put("data.num_classes", shape.vocab);
  }

  void resolve_data() {
    const std::string source = get("data.source");
    data::SourceDefaults sd = data::source_defaults(source);
    fill("data.path", sd.path);
    fill("data.image_size", sd.image_size);
    fill("data.channels", sd.channels);
    fill("data.num_classes", sd.num_classes);
    const int channels = get("data.channels").get<int>();
    fill("data.mean", fit_channels(sd.mean, channels));
    fill("data.std", fit_channels(sd.std, channels));
    fill("model.num_classes", get("data.num_classes"));

    if (gpt2()) return;  // classes: the vocabulary (resolve_model)
    if (given("data.num_classes") && source != "synthetic" && get("data.num_classes") != sd.num_classes)
      rule("data.num_classes", "only synthetic data takes num_classes; " + source + " has " +
                                   std::to_string(sd.num_classes) + " classes, found " +
                                   get("data.num_classes").dump());
    for (const char* key : {"data.mean", "data.std"}) {
      size_t n = get(key).size();
      if (int(n) != channels)
        rule(key, "expected " + std::to_string(channels) + (channels == 1 ? " value" : " values") +
                      " (one per channel, data.channels = " + std::to_string(channels) + "), found " +
                      std::to_string(n));
    }
    if (get("model.num_classes").get<int64_t>() < get("data.num_classes").get<int64_t>())
      rule("model.num_classes", "expected at least the data's " + get("data.num_classes").dump() +
                                    " classes, found " + get("model.num_classes").dump());
  }

  void resolve_train() {
    fill("train.optimizer.weight_decay", get("train.optimizer.name") == "adamw" ? 0.01 : 0.0);

    const int64_t warmup = get("measure.warmup_steps").get<int64_t>();
    const int64_t measured = get("measure.measure_steps").get<int64_t>();
    const bool epochs = given("train.epochs"), steps = given("train.steps");
    if (epochs && steps)
      rule("train.steps", "give train.epochs or train.steps, not both (train.epochs = " +
                              get("train.epochs").dump() + " is set too)");
    if (!epochs && !steps) {
      put("train.epochs", measured > 0 ? 0 : 1);
      put("train.steps", measured > 0 ? warmup + measured : 0);
    } else if (epochs) {
      put("train.steps", 0);
    } else {
      put("train.epochs", 0);
      const int64_t n = get("train.steps").get<int64_t>();
      if (measured > 0 && n < warmup + measured)
        rule("train.steps", "expected at least measure.warmup_steps + measure.measure_steps = " +
                                std::to_string(warmup + measured) + ", found " + std::to_string(n));
      if (measured == 0 && n <= warmup)
        rule("train.steps", "expected more than measure.warmup_steps (" + std::to_string(warmup) +
                                ") so that some steps are measured, found " + std::to_string(n));
    }

    std::string device = get("train.device");
    if (device == "auto") device = ctx_.options->gpu_available ? "cuda:0" : "cpu";
    if (device == "cuda") device = "cuda:0";
    put("train.device", device);
    if (device == "cpu" && get("train.threads") == 0 && ctx_.options->cpu_threads_per_run > 0)
      put("train.threads", ctx_.options->cpu_threads_per_run);
    if (get("store.label") == "") put("store.label", ctx_.options->hostname);
  }

  void check_rules() {
    if (get("train.resume") == true && get("train.checkpoint") == "")
      rule("train.resume", "needs train.checkpoint, the file to resume from");
    if (get("train.eval") == false) {
      if (get("measure.target_accuracy").get<double>() > 0)
        rule("measure.target_accuracy", "needs train.eval = true: the time to a test accuracy is "
                                        "taken from the evaluations");
      if (get("train.eval_every").get<int64_t>() > 0)
        rule("train.eval_every", "needs train.eval = true");
    }
    if (get("train.optimizer.nesterov") == true &&
        (get("train.optimizer.name") != "sgd" || get("train.optimizer.momentum").get<double>() <= 0))
      rule("train.optimizer.nesterov", "needs train.optimizer.name = \"sgd\" and momentum > 0");
    const double lr = get("train.optimizer.lr"), min_lr = get("train.schedule.min_lr");
    const std::string scaling = get("train.optimizer.lr_scaling");
    if (min_lr > lr && scaling == "none")
      rule("train.schedule.min_lr", "expected at most train.optimizer.lr (" + schema::format_number(lr) +
                                        "), found " + schema::format_number(min_lr));
    // With lr_scaling the run's rate follows from its images per step,
    // known here unless the batch is "auto" (the engine checks it then).
    if (scaling != "none" && get("train.batch_size").is_number_integer()) {
      const int64_t images = get("train.batch_size").get<int64_t>() *
                             get("train.accumulate").get<int64_t>() * get("train.ranks").get<int64_t>();
      const int64_t reference = std::max<int64_t>(1, get("train.optimizer.reference_batch").get<int64_t>());
      const double ratio = static_cast<double>(images) / static_cast<double>(reference);
      const double scaled = scaling == "linear" ? lr * ratio : lr * std::sqrt(ratio);
      if (min_lr > scaled)
        rule("train.schedule.min_lr",
             "expected at most the run's scaled rate " + schema::format_number(scaled) + " (" +
                 "train.optimizer.lr " + schema::format_number(lr) + " scaled " + scaling + " to " +
                 std::to_string(images) + " samples a step from reference_batch " +
                 std::to_string(reference) + "), found " + schema::format_number(min_lr));
    }
  }

  void check_device() {
    const std::string device = get("train.device");
    if (get("train.clip_grad_norm").get<double>() > 0) {
      if (get("train.per_layer_update") == true)
        rule("train.clip_grad_norm", "needs every gradient before the update: not with "
                                     "train.per_layer_update", true);
      if (get("train.cuda_graphs") == true)
        rule("train.clip_grad_norm", "not with train.cuda_graphs (a recorded step would keep "
                                     "its first loss scale)", true);
    }
    if (device == "cpu") {
      const std::string precision = get("train.precision");
      if (precision == "bf16" && ctx_.options->cpu_bf16_kernels.empty())
        rule("train.precision", cpu_bf16_refusal(ctx_.options->cpu_isa), true);
      if (precision != "fp32" && precision != "bf16")
        rule("train.precision",
             "precision '" + precision + "' needs a CUDA device; this run's device is cpu", true);
      if (get("train.cuda_graphs") == true)
        rule("train.cuda_graphs", "cuda_graphs needs a CUDA device; this run's device is cpu", true);
      if (get("train.batch_size") == "auto")
        rule("train.batch_size",
             "batch_size \"auto\" sizes the batch to GPU memory; this run's device is cpu: "
             "give a number", true);
    }
    const int64_t ranks = get("train.ranks").get<int64_t>();
    const std::string backend = get("distributed.backend");
    if (device == "cpu" && backend == "nccl")
      rule("distributed.backend", "nccl joins GPU ranks; this run's device is cpu: use \"gloo\" "
                                  "or \"auto\"", true);
    if (device != "cpu" && backend == "gloo")
      rule("distributed.backend", "gloo joins CPU ranks here; GPU ranks use nccl (\"auto\")", true);
    const bool launched = ranks > 1 || backend != "auto";
    if (device != "cpu" && device != "cuda:0" && launched)
      rule("train.device", "each GPU rank sees its own GPU as cuda:0 (xrun run gives rank r the "
                           "r-th GPU through CUDA_VISIBLE_DEVICES): write \"cuda:0\"", true);
    if (launched && get("train.per_layer_update") == true)
      rule("train.per_layer_update", "updates each layer before the ranks' gradients are "
                                     "averaged: not with train.ranks > 1 or a distributed.backend",
           true);
    if (launched && get("train.cuda_graphs") == true)
      rule("train.cuda_graphs", "records the whole step, which leaves no place for the ranks to "
                                "sum their gradients: not with train.ranks > 1 or a "
                                "distributed.backend", true);
    if (get("train.cuda_graphs") == true && get("train.accumulate") != 1)
      rule("train.cuda_graphs", "cuda_graphs records one whole step: it needs train.accumulate = 1",
           true);
    if (!gpt2() && get("train.batch_size").is_number_integer() &&
        get("data.image_size").is_number_integer()) {
      const std::string problem = resnet_training_shape_problem(
          get("train.batch_size").get<int64_t>(), get("data.image_size").get<int64_t>());
      if (!problem.empty()) rule("train.batch_size", problem, true);
    }
    if (get("train.per_layer_update") == true) {
      if (device != "cpu")
        rule("train.per_layer_update",
             "per_layer_update is the CPU engine's (CUDA updates every parameter in one launch "
             "after the backward pass); this run's device is " + device, true);
      if (get("train.accumulate") != 1)
        rule("train.per_layer_update",
             "per_layer_update updates during the backward pass: it needs train.accumulate = 1",
             true);
    }
    if (ctx_.options->device_check) {
      std::string reason = ctx_.options->device_check(cfg_, device);
      if (!reason.empty()) rule("train.device", reason, true);
    }
  }

  const Settings& settings_;
  const RunContext& ctx_;
  json cfg_ = json::object();
};

}  // namespace

json resolve_run(const Settings& settings, const RunContext& context) {
  return Resolver(settings, context).run();
}

}  // namespace xrun::detail
