// engine/memory_plan.h: one backend's memory plan, the same class for both
// backends: a region per tensor role (each tensor placed at an aligned
// offset as it is declared), mirrors the size of the parameter region
// (optimizer state, gradient accumulation), and, once the backend has made
// one allocation per region, where each region lives. The plan is known
// before anything is allocated, so a plan that does not fit is refused
// first, saying how much it needs, how much there is, and the largest batch
// that would fit (from the part of the plan that grows with the batch).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/records.h"
#include "core/tensor.h"

namespace xrun {

const char* region_name(TensorRole role);  // as stored: "parameters", "activations", ...
std::string format_gib(int64_t bytes);

class MemoryPlan {
 public:
  // `alignment`: of every tensor's offset (64 on the CPU, 256 on the GPU).
  explicit MemoryPlan(size_t alignment) : alignment_(alignment) {}

  // Places `bytes` at the end of `role`'s region; returns the offset.
  // std::logic_error once the plan is bound.
  size_t place(TensorRole role, size_t bytes);
  // A region the size of the parameter region, named `name`.
  void add_mirror(const std::string& name);

  size_t region_bytes(TensorRole role) const { return regions_[index(role)].bytes; }
  const std::map<std::string, char*>& mirrors() const { return mirrors_; }
  // The regions in use, then "optimizer.<mirror>", then the backend's
  // `extras` (scratchpad, workspace...): the plan as stored.
  std::vector<MemoryRecord> records(const std::vector<MemoryRecord>& extras = {}) const;
  // The bytes that grow with the batch: activations, their gradients,
  // workspace, input.
  int64_t per_batch_bytes() const;
  // Throws std::runtime_error unless records(extras) fits in `usable` bytes.
  void check_fits(const std::vector<MemoryRecord>& extras, int64_t batch, int64_t usable,
                  const std::string& where) const;

  // After allocation: each region's and mirror's base, then bound() is true.
  void set_base(TensorRole role, char* base) { regions_[index(role)].base = base; }
  void set_mirror_base(const std::string& name, char* base);
  void mark_bound() { bound_ = true; }
  bool bound() const { return bound_; }
  char* base(TensorRole role) const { return regions_[index(role)].base; }
  // std::logic_error for a mirror not declared, or before allocation.
  char* mirror_base(const std::string& name) const;

 private:
  struct Region {
    size_t bytes = 0;
    char* base = nullptr;
  };
  static size_t index(TensorRole role) { return static_cast<size_t>(role); }
  size_t alignment_;
  std::array<Region, 7> regions_{};
  std::map<std::string, char*> mirrors_;
  bool bound_ = false;
};

// Throws std::runtime_error unless the plan (total bytes) fits in `usable`.
// `per_batch`: the bytes of the plan that scale with `batch`.
void check_plan_fits(const std::vector<MemoryRecord>& plan, int64_t per_batch, int64_t batch,
                     int64_t usable, const std::string& where);

}  // namespace xrun
