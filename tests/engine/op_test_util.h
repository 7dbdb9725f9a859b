// tests/engine/op_test_util.h: helpers shared by the CPU op tests and the
// gradient checks: portable random values, canonical read/write of backend
// tensors, an element-by-element comparison against the double-precision
// reference that reports the worst element when it fails, and why a case
// needing oneDNN's bf16 kernels cannot run here.
#pragma once

#include "catch2_compat.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "engine/backend.h"
#include "engine/device/device_info.h"
#include "reference_ops.h"

namespace xrun::optest {

// Platform-independent uniform draws (std:: distributions differ between
// standard libraries; mt19937's raw sequence does not).
class Rng {
 public:
  explicit Rng(uint32_t seed) : gen_(seed) {}
  double uniform() { return (gen_() >> 8) * (1.0 / 16777216.0); }  // [0, 1), 24 bits
  float uniform(float lo, float hi) { return static_cast<float>(lo + (hi - lo) * uniform()); }
  std::vector<float> floats(int64_t n, float lo, float hi) {
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = uniform(lo, hi);
    return v;
  }
  int64_t below(int64_t n) { return static_cast<int64_t>(uniform() * static_cast<double>(n)); }
  // `k` distinct indices in [0, n), or all of them when k >= n.
  std::vector<int64_t> sample(int64_t n, int64_t k) {
    std::vector<int64_t> all(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) all[i] = i;
    for (int64_t i = 0; i < std::min(k, n); ++i) std::swap(all[i], all[i + below(n - i)]);
    all.resize(static_cast<size_t>(std::min(k, n)));
    return all;
  }

 private:
  std::mt19937 gen_;
};

// Threads for a test backend: 2 (this machine's cores) for the first case of
// each op family, so the multi-threaded paths (oneDNN's work split, the
// engine's OpenMP loops and reductions) are checked, and 1 for the others.
// Most cases run on one thread because the tests make thousands of tiny
// calls, each an OpenMP parallel region: when the machine is busy (CI runs
// suites side by side) GOMP's spinning barriers make two threads 10x slower.
inline int test_threads(bool first_case) { return first_case ? 2 : 1; }

inline ref::Vec to_double(const std::vector<float>& v) { return ref::Vec(v.begin(), v.end()); }

inline std::vector<float> read(Backend& be, const Tensor* t) {
  std::vector<float> v(static_cast<size_t>(t->numel()));
  be.read(t, v);
  return v;
}
inline ref::Vec read_d(Backend& be, const Tensor* t) { return to_double(read(be, t)); }
inline void write(Backend& be, Tensor* t, const std::vector<float>& v) { be.write(t, v); }

// |got - want| <= atol + rtol * |want|, element by element.
struct Tol {
  double atol = 0, rtol = 0;
};

// Worst errors seen per label, printed at exit when XRUN_TEST_ERRORS is set
// (to choose and document tolerances).
struct ErrorLog {
  struct Worst {
    double abs = 0, rel_to_bound = 0;
  };
  std::map<std::string, Worst> worst;
  ~ErrorLog() {
    if (!std::getenv("XRUN_TEST_ERRORS")) return;
    for (const auto& [label, w] : worst)
      std::printf("worst %-40s abs %.3g  (%.3g of the bound)\n", label.c_str(), w.abs,
                  w.rel_to_bound);
  }
};
inline ErrorLog& error_log() {
  static ErrorLog log;
  return log;
}

// Compares every element; one CHECK per tensor, with the worst element and the
// number of elements out of tolerance in the message. `family` groups the
// error log ("conv.fwd").
inline void check_close(const std::string& family, const std::string& what,
                        const std::vector<float>& got, const ref::Vec& want, Tol tol) {
  REQUIRE(got.size() == want.size());
  int64_t bad = 0, worst_i = -1;
  double worst_ratio = 0, worst_abs = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    const double bound = tol.atol + tol.rtol * std::fabs(want[i]);
    const double ratio = err / bound;
    if (!(err <= bound)) ++bad;  // NaN counts as bad
    if (!(ratio <= worst_ratio)) worst_ratio = ratio, worst_i = static_cast<int64_t>(i);
    worst_abs = std::max(worst_abs, err);
  }
  auto& w = error_log().worst[family];
  w.abs = std::max(w.abs, worst_abs);
  w.rel_to_bound = std::max(w.rel_to_bound, worst_ratio);
  INFO(what << ": " << bad << " of " << got.size() << " elements out of tolerance (atol "
            << tol.atol << ", rtol " << tol.rtol << "); worst at " << worst_i << ": got "
            << (worst_i >= 0 ? got[worst_i] : 0.0f) << ", want "
            << (worst_i >= 0 ? want[worst_i] : 0.0) << ", |err| " << worst_abs);
  CHECK(bad == 0);
}

// Normalised mean squared error of `got` against `want`: sum (got - want)^2
// / sum want^2, in double.
inline double nmse(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  return num / den;
}

// Why this CPU cannot run oneDNN's bf16 kernels ("" where it can), for
// XRUN_SKIP (which returns from the case itself, so each case calls it).
inline std::string no_cpu_bf16_kernels() {
  if (!bf16_kernels_for_isa(static_cast<unsigned>(dnnl_get_effective_cpu_isa())).empty()) return "";
  return "this CPU has no oneDNN bf16 kernels (needs AVX512_BF16 or AMX; oneDNN's ISA here: " +
         query_cpu().onednn_isa + ")";
}

}  // namespace xrun::optest
