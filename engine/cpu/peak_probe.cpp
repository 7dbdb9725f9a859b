// engine/cpu/peak_probe.cpp: the measurements of peak_probe.h. A matmul of
// size^3 multiply-adds (2 * size^3 FLOPs) on random-free constant data (the
// kernels' speed does not depend on the values), timed per call after one
// untimed call; the copy over 256 MiB, larger than any cache here.
#include "engine/cpu/peak_probe.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include <dnnl.hpp>

#include "engine/cpu/dnnl_compat.h"
#include "engine/device/device_info.h"

namespace xrun::cpu {
namespace {

using dnnl::memory;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Best FLOP/s of `repeats` calls of one [size x size] x [size x size] matmul
// with inputs of type `in` and an f32 output; its implementation name.
double matmul_flops(const dnnl::engine& eng, memory::data_type in, int size, int repeats,
                    std::string& kernel) {
  const memory::dim n = size;
  const memory::desc a(memory::dims{n, n}, in, memory::format_tag::ab);
  const memory::desc b(memory::dims{n, n}, in, memory::format_tag::any);
  const memory::desc c(memory::dims{n, n}, memory::data_type::f32, memory::format_tag::ab);
  const auto pd = dnnl_compat::matmul(eng, dnnl::primitive_attr(), a, b, c);
  kernel = pd.impl_info_str();
  memory ma(a, eng), mb(pd.weights_desc(), eng), mc(c, eng);
  std::memset(ma.get_data_handle(), 0x3c, a.get_size());  // bf16 1.15 / f32 ~0.01
  std::memset(mb.get_data_handle(), 0x3c, pd.weights_desc().get_size());
  dnnl::matmul prim(pd);
  dnnl::stream s(eng);
  const std::unordered_map<int, memory> args = {
      {DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
  prim.execute(s, args);
  s.wait();
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    const auto t = Clock::now();
    prim.execute(s, args);
    s.wait();
    best = std::max(best, 2.0 * static_cast<double>(n) * n * n / seconds_since(t));
  }
  return best;
}

double copy_bytes_per_s(int repeats) {
  const size_t bytes = size_t{256} << 20;
  std::vector<char> from(bytes, 1), to(bytes, 2);
  const int chunks = 64;
  const size_t chunk = bytes / chunks;
  double best = 0;
  for (int r = 0; r <= repeats; ++r) {
    const auto t = Clock::now();
#pragma omp parallel for schedule(static)
    for (int i = 0; i < chunks; ++i)
      std::memcpy(to.data() + i * chunk, from.data() + i * chunk, chunk);
    const double rate = 2.0 * static_cast<double>(bytes) / seconds_since(t);
    if (r > 0) best = std::max(best, rate);  // the first touches the pages
  }
  return best;
}

}  // namespace

CpuPeak measure_cpu_peak(int threads, int size) {
  CpuPeak p;
  p.threads = threads > 0 ? threads : omp_get_num_procs();
  omp_set_num_threads(p.threads);
  const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  p.fp32_flops = matmul_flops(eng, memory::data_type::f32, size, 5, p.fp32_kernel);
  if (!bf16_kernels_for_isa(static_cast<unsigned>(dnnl_get_effective_cpu_isa())).empty())
    p.bf16_flops = matmul_flops(eng, memory::data_type::bf16, size, 20, p.bf16_kernel);
  p.copy_bytes_per_s = copy_bytes_per_s(4);
  return p;
}

}  // namespace xrun::cpu
