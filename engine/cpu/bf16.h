// engine/cpu/bf16.h: bfloat16 <-> float on the host, for the CPU engine's own
// loops (batch loading, residual sums; batch norm has vector forms of the
// same rules). A bf16 is the upper half of a float: widening is exact,
// narrowing rounds to nearest, ties to even, as oneDNN's reorders do.
#pragma once

#include <cstdint>
#include <cstring>

namespace xrun::cpu {

using bf16_t = uint16_t;

inline float bf16_to_float(bf16_t h) {
  const uint32_t u = uint32_t{h} << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline bf16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<bf16_t>((u >> 16) | 0x40);  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<bf16_t>(u >> 16);
}

}  // namespace xrun::cpu
