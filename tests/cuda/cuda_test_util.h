// tests/cuda/cuda_test_util.h: what the CUDA test cases share: the
// precisions, the per-op NMSE thresholds, running one build on the CPU and
// on the GPU, the NMSE check, and the list of every comparison made, which
// cuda_main.cpp prints as a table after the session (test-backend-ops
// style: op, precision, what, error, threshold, verdict).
//
// test_cuda has its own main (cuda_main.cpp): where no GPU can run this
// build's kernels it runs no case at all and exits 77, which CTest reports
// as skipped; so the cases here may assume a usable GPU.
#pragma once

#include "catch2_compat.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/torch_parity.h"

namespace xrun::cudatest {

// One comparison, a row of the table.
struct Comparison {
  std::string op;         // "conv", "bn", "step", ...
  std::string precision;  // fp32 | tf32 | fp16 | bf16
  std::string what;       // shape and tensor, or what a summary row covers
  std::string measure;    // "nmse" or "parity" (worst error / bound; <= 1 passes)
  double error = 0;
  double threshold = 0;
  bool ok = false;
};

// Every comparison of the session, in order (defined in cuda_main.cpp).
std::vector<Comparison>& comparisons();

inline void record(Comparison c) { comparisons().push_back(std::move(c)); }

inline bool print_errors() { return std::getenv("XRUN_TEST_ERRORS") != nullptr; }

inline std::vector<std::string> precisions() { return {"fp32", "tf32", "fp16", "bf16"}; }

// Per-op NMSE thresholds: fp32 1e-9 (cuDNN and oneDNN sum in different
// orders; ~3e-5 relative RMS), tf32 1e-5 (10-bit mantissas in the
// products), fp16 1e-5, bf16 1e-4 (8-bit mantissas).
inline double op_threshold(const std::string& precision) {
  if (precision == "fp32") return 1e-9;
  if (precision == "bf16") return 1e-4;
  return 1e-5;
}

inline std::unique_ptr<Backend> gpu(const std::string& precision) {
  BackendOptions o;
  o.precision = parse_precision(precision);
  return make_backend("cuda:0", o);
}

inline std::vector<float> random_floats(int64_t n, uint32_t seed, float lo = -1, float hi = 1) {
  std::mt19937 g(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = lo + (hi - lo) * static_cast<float>(g() >> 8) / 16777216.0f;
  return v;
}

// `v` rounded (to nearest, ties to even) to what the precision stores
// activations in: fp16 (11 significant bits, subnormals down to 2^-24) or
// bf16 (8 significant bits); fp32 and tf32 store fp32. Inputs written so are
// the same numbers on both backends: the comparison then sees only the
// rounding inside the op, not that of its inputs (a ReLU input within
// rounding of zero would otherwise fall on either side and move a whole
// gradient term).
inline std::vector<float> representable(std::vector<float> v, const std::string& precision) {
  const int bits = precision == "fp16" ? 11 : precision == "bf16" ? 8 : 0;
  if (bits == 0) return v;
  for (float& x : v) {
    if (x == 0 || !std::isfinite(x)) continue;
    int e = 0;
    std::frexp(x, &e);  // x = f 2^e, 0.5 <= |f| < 1
    double spacing = std::ldexp(1.0, e - bits);
    if (precision == "fp16") spacing = std::max(spacing, std::ldexp(1.0, -24));
    x = static_cast<float>(std::nearbyint(x / spacing) * spacing);
  }
  return v;
}

inline std::vector<float> read(Backend& be, const Tensor* t) {
  std::vector<float> v(static_cast<size_t>(t->numel()));
  be.read(t, v);
  return v;
}

using testing::parity::nmse;  // NMSE = sum (gpu - cpu)^2 / sum cpu^2

// Checks NMSE(gpu, cpu) <= threshold and records the comparison.
inline void check_nmse(const std::vector<float>& gpu_values, const std::vector<float>& cpu_values,
                       double threshold, const std::string& op, const std::string& precision,
                       const std::string& what) {
  REQUIRE(gpu_values.size() == cpu_values.size());
  const double e = nmse(gpu_values, cpu_values);
  const bool ok = std::isfinite(e) && e <= threshold;
  record({op, precision, what, "nmse", e, threshold, ok});
  if (print_errors())
    std::printf("nmse %-10s %-5s %-48s %.3g (threshold %.3g)\n", op.c_str(), precision.c_str(),
                what.c_str(), e, threshold);
  INFO(op << " " << precision << " " << what << ": NMSE " << e << " (threshold " << threshold
          << ")");
  CHECK(std::isfinite(e));
  CHECK(e <= threshold);
}

// Runs `build_and_run` on the CPU backend and on the GPU backend with the
// precision; it returns named tensors (read back canonically), each
// compared as "<what>: <name>".
using Outputs = std::map<std::string, std::vector<float>>;
template <class F>
void compare_backends(const std::string& op, const std::string& precision, double threshold,
                      const std::string& what, F&& build_and_run) {
  cpu::CpuBackend cpu(0);
  const Outputs want = build_and_run(static_cast<Backend&>(cpu));
  auto g = gpu(precision);
  const Outputs got = build_and_run(*g);
  for (const auto& [name, values] : want) {
    REQUIRE(got.count(name));
    check_nmse(got.at(name), values, threshold, op, precision, what + ": " + name);
  }
}

}  // namespace xrun::cudatest
