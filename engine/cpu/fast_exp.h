// engine/cpu/fast_exp.h: exp in float that the compiler vectorises (glibc's
// expf is a call per element; its vector forms need -ffast-math): Cephes'
// expf, a Cody-Waite reduction by ln 2 and a degree-6 polynomial, within 2
// ulp of the correctly rounded value over the range below (tested against
// std::exp in double). Inputs below -87.3 give about 1e-38, not 0; above
// 88, about 1.65e38 (finite: 88.7 rounded to 2^128, infinity).
#pragma once

#include <bit>
#include <cstdint>

namespace xrun::cpu {

inline float exp_vectorizable(float x) {
  x = x < -87.3f ? -87.3f : x;
  x = x > 88.0f ? 88.0f : x;
  // n = x / ln 2 rounded to nearest by adding and taking away 1.5 x 2^23
  // (floorf would keep GCC from vectorising the loop).
  constexpr float kRound = 12582912.0f;
  const float n = (x * 1.44269504088896341f + kRound) - kRound;
  const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e = p * r * r + r + 1.0f;
  return e * std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);  // x 2^n
}

}  // namespace xrun::cpu
