// tests/engine/torch_fixtures.h: reading the PyTorch reference fixtures in
// tests/engine/fixtures/ (made by make_torch_fixtures.py with torchvision),
// and the closed-form weights and inputs both sides compute (the C++ twin of
// deterministic_values / deterministic_input in that script).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace xrun::testing {

inline nlohmann::json load_fixture(const std::string& file) {
  const std::string path = std::string(XRUN_SOURCE_DIR) + "/tests/engine/fixtures/" + file;
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open fixture " + path);
  return nlohmann::json::parse(in);
}

// FNV-1a of the name: the seed of its values.
inline uint64_t name_seed(const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// splitmix64 of (seed + i * golden), bit-exact with numpy's uint64 version.
inline uint64_t splitmix64(uint64_t seed, uint64_t i) {
  uint64_t z = i * 0x9E3779B97F4A7C15ull + seed;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Value i in [-1, 1), from splitmix64.
inline double hashed_uniform(uint64_t seed, uint64_t i) {
  const uint64_t z = splitmix64(seed, i);
  return 2.0 * static_cast<double>(z >> 11) * (1.0 / 9007199254740992.0) - 1.0;
}

inline bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Values of one state_dict entry (see the Python twin), times `scale` (in
// double, before the rounding to float).
inline std::vector<float> deterministic_values(const std::string& name,
                                               const std::vector<int64_t>& shape,
                                               double scale = 1.0) {
  const int64_t n = std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
  std::vector<float> v(n);
  const uint64_t seed = name_seed(name);
  const bool fc = name.rfind("fc.", 0) == 0;
  for (int64_t i = 0; i < n; ++i) {
    const double s = hashed_uniform(seed, static_cast<uint64_t>(i));
    double x;
    if (fc && ends_with(name, ".weight"))
      x = s / std::sqrt(static_cast<double>(shape[1]));
    else if (fc)
      x = s / std::sqrt(512.0);
    else if (shape.size() == 4)
      x = s * std::sqrt(2.0 / static_cast<double>(shape[0] * shape[2] * shape[3])) * std::sqrt(3.0);
    else if (ends_with(name, ".weight"))
      x = 1.0 + 0.1 * s;
    else if (ends_with(name, ".bias"))
      x = 0.1 * s;
    else if (ends_with(name, ".running_mean"))
      x = 0.0;
    else if (ends_with(name, ".running_var"))
      x = 1.0;
    else
      throw std::invalid_argument("no deterministic values for " + name);
    v[i] = static_cast<float>(x * scale);
  }
  return v;
}

// GPT-2's closed form (gpt2_values in make_gpt2_fixture.py): 2-D weights
// uniform with GPT-2's initial spread (std 0.02), layer norm weights
// 1 + 0.1 s and biases 0.1 s, other biases 0.01 s; the same double
// operations in the same order, then rounded to float.
inline std::vector<float> gpt2_values(const std::string& name, const std::vector<int64_t>& shape) {
  const int64_t n = std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
  std::vector<float> v(n);
  const uint64_t seed = name_seed(name);
  const bool matrix = ends_with(name, ".weight") && shape.size() == 2;
  const bool layer_norm = name.find(".ln_") != std::string::npos;
  for (int64_t i = 0; i < n; ++i) {
    const double s = hashed_uniform(seed, static_cast<uint64_t>(i));
    double x;
    if (matrix)
      x = s * 0.02 * std::sqrt(3.0);
    else if (layer_norm && ends_with(name, ".weight"))
      x = 1.0 + 0.1 * s;
    else if (layer_norm)
      x = 0.1 * s;
    else
      x = 0.01 * s;
    v[i] = static_cast<float>(x);
  }
  return v;
}

// The fixture's tokens: batch x (tokens + 1) from the name "gpt2.tokens"
// (inputs the first `tokens` of a row, targets the last).
inline std::vector<int32_t> gpt2_tokens(int64_t batch, int64_t tokens, int64_t vocab) {
  std::vector<int32_t> t(batch * (tokens + 1));
  const uint64_t seed = name_seed("gpt2.tokens");
  for (size_t i = 0; i < t.size(); ++i) {
    const double x = std::floor((hashed_uniform(seed, i) + 1.0) / 2.0 * static_cast<double>(vocab));
    t[i] = static_cast<int32_t>(std::clamp<double>(x, 0, static_cast<double>(vocab - 1)));
  }
  return t;
}

// Whether `name` is the weight of a residual branch's last BN
// ("layerL.B.<residual_bn>.weight"), as residual_bn_scaled() in the script.
inline bool residual_bn_scaled(const std::string& name, const std::string& residual_bn) {
  const std::string suffix = "." + residual_bn + ".weight";
  if (name.rfind("layer", 0) != 0 || !ends_with(name, suffix)) return false;
  return std::count(name.begin(), name.end(), '.') == 3;
}

inline std::vector<float> deterministic_input(int64_t n, int64_t c, int64_t h, int64_t w) {
  std::vector<float> x(n * c * h * w);
  const uint64_t seed = name_seed("input");
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(1.5 * hashed_uniform(seed, i));
  return x;
}

inline std::vector<int32_t> deterministic_labels(int64_t n) {
  std::vector<int32_t> y(n);
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<int32_t>((i * 3) % 10);
  return y;
}

// The same summary the fixture holds for a tensor.
struct Summary {
  double sum = 0, l1 = 0, l2 = 0;
};
inline Summary summarize(const std::vector<float>& v) {
  Summary s;
  for (float f : v) {
    s.sum += f;
    s.l1 += std::fabs(f);
    s.l2 += static_cast<double>(f) * f;
  }
  s.l2 = std::sqrt(s.l2);
  return s;
}

}  // namespace xrun::testing
