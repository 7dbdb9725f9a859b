// profiler/findings.cpp: see findings.h. Thresholds are the usual rules of
// thumb: a step that waits more than 5% of its time for data is input-bound.
#include "profiler/findings.h"

#include <cstdio>

namespace xrun::profiler {

namespace {
std::string percent(double share) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100.0 * share);
  return buf;
}
}  // namespace

std::vector<Finding> run_findings(const RunConfig& cfg, const RunSummary& s) {
  std::vector<Finding> out;
  const bool gpu = cfg.train.device.is_gpu();
  if (s.measured_steps > 0 && s.data_wait_fraction > 0.05) {
    std::string advice = "raise data.workers (now " + std::to_string(cfg.data.workers) + ")";
    if (gpu && !cfg.data.pin_memory) advice += " or set data.pin_memory = true";
    out.push_back({"data_wait",
                   "steps waited for data " + percent(s.data_wait_fraction) +
                       " of their time: the input pipeline is the bottleneck; " + advice,
                   s.data_wait_fraction});
  }
  if (s.skipped_steps > 0)
    out.push_back({"loss_scale_backoff",
                   std::to_string(s.skipped_steps) +
                       " step(s) skipped on inf/NaN gradients (the fp16 loss scale backed off); "
                       "a few early on are normal, many mean the model overflows fp16: try bf16",
                   static_cast<double>(s.skipped_steps)});
  if (gpu && cfg.train.cudnn_benchmark == CudnnBenchmark::off)
    out.push_back({"cudnn_benchmark_off",
                   "cudnn_benchmark is off while convolutions are most of a ResNet step: "
                   "true (or \"cached\") times the candidates once and often picks faster "
                   "algorithms; the time spent choosing is kept out of the figures",
                   0});
  if (s.step_outliers > 0)
    out.push_back({"step_outliers",
                   std::to_string(s.step_outliers) +
                       " measured step(s) beyond 5 MADs of the median step time: another "
                       "process, thermal throttling or a sync point? Compare p10/p90",
                   static_cast<double>(s.step_outliers)});
  if (s.measured_steps > 0 && s.measured_steps < 10)
    out.push_back({"few_measured_steps",
                   "only " + std::to_string(s.measured_steps) +
                       " measured step(s): the figures are rough; raise measure.measure_steps "
                       "or train.steps",
                   static_cast<double>(s.measured_steps)});
  return out;
}

}  // namespace xrun::profiler
