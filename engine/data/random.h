// engine/data/random.h: the few random-number pieces the data code needs,
// written out so every draw is the same on every platform and standard
// library: SplitMix64 for hashing (seed, epoch, index) tuples into
// independent streams, and an unbiased uniform integer by rejection.
#pragma once

#include <cstdint>

namespace xrun::data {

// One SplitMix64 step: advances `state` and returns a well-mixed 64-bit value.
inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Hashes a tuple of integers into one 64-bit seed (order matters).
inline uint64_t mix_seed(uint64_t a, uint64_t b, uint64_t c = 0, uint64_t d = 0) {
  uint64_t s = a;
  uint64_t h = splitmix64(s);
  s = h ^ b;
  h = splitmix64(s);
  s = h ^ c;
  h = splitmix64(s);
  s = h ^ d;
  return splitmix64(s);
}

// Uniform integer in [0, n) (n >= 1) from any generator returning uint64_t,
// without modulo bias: rejects the top partial block of 2^64.
template <class Next>
uint64_t uniform_below(uint64_t n, Next&& next) {
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;  // multiple of n
  for (;;) {
    const uint64_t v = next();
    if (v < limit) return v % n;
  }
}

}  // namespace xrun::data
