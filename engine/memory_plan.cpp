// engine/memory_plan.cpp: see memory_plan.h.
#include "engine/memory_plan.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

namespace xrun {

const char* region_name(TensorRole role) {
  switch (role) {
    case TensorRole::parameter: return "parameters";
    case TensorRole::gradient: return "gradients";
    case TensorRole::state: return "running_stats";
    case TensorRole::activation: return "activations";
    case TensorRole::activation_grad: return "activation_gradients";
    case TensorRole::workspace: return "workspace";
    case TensorRole::io: return "input";
  }
  return "?";
}

std::string format_gib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / (1 << 30));
  return buf;
}

void check_plan_fits(const std::vector<MemoryRecord>& plan, int64_t per_batch, int64_t batch,
                     int64_t usable, const std::string& where) {
  int64_t total = 0;
  for (const MemoryRecord& m : plan) total += m.bytes;
  if (total <= usable) return;
  const int64_t fixed = total - per_batch;
  const int64_t per_sample = std::max<int64_t>(1, per_batch / std::max<int64_t>(1, batch));
  const int64_t fits = std::max<int64_t>(0, (usable - fixed) / per_sample) / 8 * 8;
  throw std::runtime_error(
      "batch " + std::to_string(batch) + " does not fit " + where + ": the plan needs " +
      format_gib(total) + " (" + format_gib(per_batch) + " of it grows with the batch), " +
      format_gib(usable) + " is available; " +
      (fits > 0 ? "the largest batch that fits is about " + std::to_string(fits)
                : std::string("no batch fits")));
}

}  // namespace xrun
