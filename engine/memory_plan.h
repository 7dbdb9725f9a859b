// engine/memory_plan.h: what both backends' memory plans share: region names
// as stored, and the refusal of a plan that does not fit (how much it needs,
// how much there is, and the largest batch that would fit, from the part of
// the plan that grows with the batch).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/records.h"
#include "core/tensor.h"

namespace xrun {

const char* region_name(TensorRole role);
std::string format_gib(int64_t bytes);

// Throws std::runtime_error unless the plan (total bytes) fits in `usable`.
// `per_batch`: the bytes of the plan that scale with `batch`.
void check_plan_fits(const std::vector<MemoryRecord>& plan, int64_t per_batch, int64_t batch,
                     int64_t usable, const std::string& where);

}  // namespace xrun
