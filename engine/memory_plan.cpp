// engine/memory_plan.cpp: see memory_plan.h.
#include "engine/memory_plan.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

namespace xrun {

size_t MemoryPlan::place(TensorRole role, size_t bytes) {
  if (bound_) throw std::logic_error("memory plan: a tensor declared after allocation");
  Region& r = regions_[index(role)];
  const size_t offset = r.bytes;
  r.bytes += (bytes + alignment_ - 1) / alignment_ * alignment_;
  return offset;
}

void MemoryPlan::add_mirror(const std::string& name) {
  if (bound_) throw std::logic_error("memory plan: region " + name + " declared after allocation");
  mirrors_[name];
}

void MemoryPlan::set_mirror_base(const std::string& name, char* base) {
  mirrors_.at(name) = base;
}

char* MemoryPlan::mirror_base(const std::string& name) const {
  auto it = mirrors_.find(name);
  if (it == mirrors_.end() || !bound_)
    throw std::logic_error("memory plan: region " + name + " was not declared and allocated");
  return it->second;
}

std::vector<MemoryRecord> MemoryPlan::records(const std::vector<MemoryRecord>& extras) const {
  std::vector<MemoryRecord> out;
  for (size_t i = 0; i < regions_.size(); ++i)
    if (regions_[i].bytes > 0)
      out.push_back({region_name(static_cast<TensorRole>(i)),
                     static_cast<int64_t>(regions_[i].bytes)});
  const int64_t params = static_cast<int64_t>(region_bytes(TensorRole::parameter));
  for (const auto& entry : mirrors_) out.push_back({"optimizer." + entry.first, params});
  out.insert(out.end(), extras.begin(), extras.end());
  return out;
}

int64_t MemoryPlan::per_batch_bytes() const {
  int64_t n = 0;
  for (TensorRole role : {TensorRole::activation, TensorRole::activation_grad,
                          TensorRole::workspace, TensorRole::io})
    n += static_cast<int64_t>(region_bytes(role));
  return n;
}

void MemoryPlan::check_fits(const std::vector<MemoryRecord>& extras, int64_t batch,
                            int64_t usable, const std::string& where) const {
  check_plan_fits(records(extras), per_batch_bytes(), batch, usable, where);
}

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
