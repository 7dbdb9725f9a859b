// engine/model/init_rng.h: the random draws of parameter initialisation,
// shared by the model definitions. Platform-independent: mt19937_64's
// sequence is fixed by the standard; the conversions below are ours (std::
// distributions differ between libraries).
#pragma once

#include <cmath>
#include <cstdint>
#include <random>

namespace xrun {

struct InitRng {
  std::mt19937_64 gen;
  explicit InitRng(uint64_t seed) : gen(seed) {}
  double uniform() { return (gen() >> 11) * (1.0 / 9007199254740992.0); }  // [0,1)
  double normal() {
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
};

}  // namespace xrun
