// runner/run_config.cpp: a resolved experiment config (RunSpec::config) to
// the engine's typed RunConfig. Every key of the schema lands in one field,
// except store.* and description, which the engine never sees.
#include "runner/experiment.h"

namespace xrun {

RunConfig to_run_config(const nlohmann::json& c) {
  RunConfig r;
  r.name = c.at("name").get<std::string>();

  const auto& m = c.at("model");
  r.model.arch = m.at("arch").get<std::string>();
  r.model.num_classes = m.at("num_classes").get<int>();
  r.model.weights = m.at("weights").get<std::string>();
  r.model.layers = m.at("layers").get<int64_t>();
  r.model.heads = m.at("heads").get<int64_t>();
  r.model.width = m.at("width").get<int64_t>();
  r.model.context = m.at("context").get<int64_t>();
  r.model.vocab = m.at("vocab").get<int64_t>();

  const auto& d = c.at("data");
  r.data.source = d.at("source").get<std::string>();
  r.data.path = d.at("path").get<std::string>();
  r.data.image_size = d.at("image_size").get<int>();
  r.data.channels = d.at("channels").get<int>();
  r.data.num_classes = d.at("num_classes").get<int>();
  r.data.mean = d.at("mean").get<std::vector<float>>();
  r.data.std = d.at("std").get<std::vector<float>>();
  r.data.random_crop = r.data.hflip = false;
  for (const auto& a : d.at("augment")) {
    if (a == "random_crop") r.data.random_crop = true;
    if (a == "hflip") r.data.hflip = true;
  }
  r.data.shuffle = d.at("shuffle").get<bool>();
  r.data.workers = d.at("workers").get<int>();
  r.data.pin_memory = d.at("pin_memory").get<bool>();
  r.data.prefetch = d.at("prefetch").get<int>();
  r.data.limit = d.at("limit").get<int64_t>();
  r.data.test_limit = d.at("test_limit").get<int64_t>();
  r.data.learnable = d.at("learnable").get<bool>();
  r.data.samples = d.at("samples").get<int64_t>();
  r.data.sequence_length = d.at("sequence_length").get<int64_t>();
  r.data.test_samples = d.at("test_samples").get<int64_t>();

  const auto& t = c.at("train");
  r.train.device = Device::parse(t.at("device").get<std::string>());
  const auto& batch = t.at("batch_size");
  r.train.batch_size = batch.is_string() ? 0 : batch.get<int>();  // "auto" -> 0
  r.train.memory_fraction = t.at("memory_fraction").get<double>();
  r.train.accumulate = t.at("accumulate").get<int>();
  r.train.epochs = t.at("epochs").get<int>();
  r.train.steps = t.at("steps").get<int64_t>();
  r.train.precision = parse_precision(t.at("precision").get<std::string>());
  const auto& bench = t.at("cudnn_benchmark");
  r.train.cudnn_benchmark = parse_cudnn_benchmark(
      bench.is_string() ? bench.get<std::string>() : bench.get<bool>() ? "true" : "false");
  r.train.cuda_graphs = t.at("cuda_graphs").get<bool>();
  r.train.per_layer_update = t.at("per_layer_update").get<bool>();
  r.train.clip_grad_norm = t.at("clip_grad_norm").get<double>();
  r.train.seed = t.at("seed").get<uint64_t>();
  r.train.threads = t.at("threads").get<int>();
  r.train.eval = t.at("eval").get<bool>();
  r.train.eval_every = t.at("eval_every").get<int64_t>();
  r.train.checkpoint = t.at("checkpoint").get<std::string>();
  r.train.resume = t.at("resume").get<bool>();
  r.train.log_every = t.at("log_every").get<int>();
  r.train.ranks = t.at("ranks").get<int>();

  const auto& o = t.at("optimizer");
  r.train.optimizer.name = o.at("name").get<std::string>();
  r.train.optimizer.lr = o.at("lr").get<double>();
  r.train.optimizer.weight_decay = o.at("weight_decay").get<double>();
  r.train.optimizer.beta1 = o.at("betas").at(0).get<double>();
  r.train.optimizer.beta2 = o.at("betas").at(1).get<double>();
  r.train.optimizer.eps = o.at("eps").get<double>();
  r.train.optimizer.momentum = o.at("momentum").get<double>();
  r.train.optimizer.nesterov = o.at("nesterov").get<bool>();
  r.train.optimizer.lr_scaling = o.at("lr_scaling").get<std::string>();
  r.train.optimizer.reference_batch = o.at("reference_batch").get<int64_t>();

  const auto& s = t.at("schedule");
  r.train.schedule.name = s.at("name").get<std::string>();
  r.train.schedule.warmup_steps = s.at("warmup_steps").get<int64_t>();
  r.train.schedule.min_lr = s.at("min_lr").get<double>();
  r.train.schedule.step_size = s.at("step_size").get<int64_t>();
  r.train.schedule.gamma = s.at("gamma").get<double>();

  const auto& me = c.at("measure");
  r.measure.warmup_steps = me.at("warmup_steps").get<int64_t>();
  r.measure.measure_steps = me.at("measure_steps").get<int64_t>();
  r.measure.target_accuracy = me.at("target_accuracy").get<double>();

  const auto& p = c.at("profile");
  r.profile.nvtx = p.at("nvtx").get<bool>();
  r.profile.cupti = parse_cupti_mode(p.at("cupti").get<std::string>());
  r.profile.layers = p.at("layers").get<bool>();
  r.profile.trace_steps = p.at("trace_steps").get<int64_t>();

  const auto& dist = c.at("distributed");
  r.distributed.backend = dist.at("backend").get<std::string>();
  r.distributed.timeout_s = dist.at("timeout_s").get<int>();
  r.distributed.bucket_mb = dist.at("bucket_mb").get<double>();
  return r;
}

}  // namespace xrun
