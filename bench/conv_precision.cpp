// bench/conv_precision.cpp: how fast oneDNN runs ResNet50's convolutions on
// this CPU in fp32 and in bf16 (bf16 source, weights and output, fp32
// accumulation, fp32 weight gradients: what a bf16 training step needs), pass
// by pass, before any of it is built into the engine (issue #22: measure
// before optimising). Every distinct convolution of torchvision's resnet50 at
// one batch and image size, layouts chosen by oneDNN (format any), reorders
// into those layouts left out, the median of --reps calls each; the totals
// weigh each shape by how often the network has it. Prints the implementation
// oneDNN chose (its ISA) beside each time. A second table times the
// convolutions with 4 output pixels or fewer (xrun runs those as GEMMs) as
// single matrix products in fp32 and bf16 through oneDNN's matmul.
//
//   build/bench/conv_precision [--batch 8] [--image 224] [--reps 5]
//   ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 build/bench/conv_precision ...  (no AMX)
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "engine/cpu/dnnl_compat.h"

namespace {

using dnnl::memory;
namespace compat = xrun::cpu::dnnl_compat;

struct Shape {
  int64_t n, c, h, k, r, stride;
  int64_t pad() const { return r / 2; }
  int64_t out() const { return (h + 2 * pad() - r) / stride + 1; }
  double macs() const { return double(n) * k * out() * out() * c * r * r; }
  bool operator<(const Shape& o) const {
    return std::tie(n, c, h, k, r, stride) < std::tie(o.n, o.c, o.h, o.k, o.r, o.stride);
  }
};

// torchvision resnet50: conv1, then bottlenecks [3, 4, 6, 3] with the stride
// on the 3x3 conv and a 1x1 downsample on each stage's first block.
std::map<Shape, int> resnet50_convs(int64_t n, int64_t image) {
  std::map<Shape, int> count;
  ++count[{n, 3, image, 64, 7, 2}];
  int64_t h = (image / 2 + 1) / 2, in = 64;  // after conv1 (stride 2) and the max pool
  const int blocks[4] = {3, 4, 6, 3};
  for (int stage = 0; stage < 4; ++stage) {
    const int64_t width = 64 << stage, out = width * 4;
    for (int b = 0; b < blocks[stage]; ++b) {
      const int64_t stride = (b == 0 && stage > 0) ? 2 : 1;
      ++count[{n, in, h, width, 1, 1}];
      ++count[{n, width, h, width, 3, stride}];
      const int64_t oh = (h + 2 - 3) / stride + 1;
      ++count[{n, width, oh, out, 1, 1}];
      if (b == 0) ++count[{n, in, h, out, 1, stride}];
      in = out, h = oh;
    }
  }
  return count;
}

std::string describe(const Shape& sh) {
  char what[48];
  std::snprintf(what, sizeof what, "%lld %lldx%lld -> %lld %lldx%lld /%lld",
                static_cast<long long>(sh.c), static_cast<long long>(sh.h),
                static_cast<long long>(sh.h), static_cast<long long>(sh.k),
                static_cast<long long>(sh.r), static_cast<long long>(sh.r),
                static_cast<long long>(sh.stride));
  return what;
}

template <class F>
double median_ms(F&& run, dnnl::stream& s, int reps) {
  run(), s.wait();  // the first call may JIT or warm caches
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto a = std::chrono::steady_clock::now();
    run(), s.wait();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a)
                    .count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct Passes {
  double fwd = 0, bwd_data = 0, bwd_weights = 0;
  std::string impl;  // forward / backward-data / backward-weights
};

Passes measure(const Shape& sh, memory::data_type dt, dnnl::engine& eng, dnnl::stream& s,
               int reps) {
  const auto any = [&](memory::dims d, memory::data_type t) {
    return memory::desc(d, t, memory::format_tag::any);
  };
  const memory::dims x{sh.n, sh.c, sh.h, sh.h}, w{sh.k, sh.c, sh.r, sh.r},
      y{sh.n, sh.k, sh.out(), sh.out()}, st{sh.stride, sh.stride}, pad{sh.pad(), sh.pad()};
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const auto fwd = compat::conv_forward(eng, attr, dnnl::prop_kind::forward_training, any(x, dt),
                                        any(w, dt), any(y, dt), st, pad);
  // Weight gradients in fp32 (the master weights' type), whatever the inputs.
  const auto bww = compat::conv_backward_weights(eng, attr, fwd.src_desc(),
                                                 any(w, memory::data_type::f32), fwd.dst_desc(),
                                                 st, pad, fwd);
  const auto bwd = compat::conv_backward_data(eng, attr, fwd.src_desc(), any(w, dt),
                                              fwd.dst_desc(), st, pad, fwd);
  const auto alloc = [&](const memory::desc& md) {
    memory m(md, eng);
    std::memset(m.get_data_handle(), 0, md.get_size());
    return m;
  };
  size_t pad_bytes = std::max({fwd.scratchpad_desc().get_size(), bww.scratchpad_desc().get_size(),
                               bwd.scratchpad_desc().get_size()});
  memory sp = alloc(memory::desc({static_cast<memory::dim>(pad_bytes)}, memory::data_type::u8,
                                 memory::format_tag::a));
  memory src = alloc(fwd.src_desc()), wei = alloc(fwd.weights_desc()), dst = alloc(fwd.dst_desc());
  memory dw = alloc(bww.diff_weights_desc()), dx = alloc(bwd.diff_src_desc());
  memory src_w = bww.src_desc() == fwd.src_desc() ? src : alloc(bww.src_desc());
  memory dy_w = bww.diff_dst_desc() == fwd.dst_desc() ? dst : alloc(bww.diff_dst_desc());
  memory wei_d = bwd.weights_desc() == fwd.weights_desc() ? wei : alloc(bwd.weights_desc());
  Passes p;
  dnnl::convolution_forward f(fwd);
  p.fwd = median_ms([&] { f.execute(s, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei},
                                        {DNNL_ARG_DST, dst}, {DNNL_ARG_SCRATCHPAD, sp}}); },
                    s, reps);
  dnnl::convolution_backward_weights bw(bww);
  p.bwd_weights = median_ms([&] { bw.execute(s, {{DNNL_ARG_SRC, src_w}, {DNNL_ARG_DIFF_DST, dy_w},
                                                 {DNNL_ARG_DIFF_WEIGHTS, dw},
                                                 {DNNL_ARG_SCRATCHPAD, sp}}); },
                            s, reps);
  if (sh.c != 3) {  // conv1's input needs no gradient
    dnnl::convolution_backward_data bd(bwd);
    p.bwd_data = median_ms([&] { bd.execute(s, {{DNNL_ARG_DIFF_DST, dst}, {DNNL_ARG_WEIGHTS, wei_d},
                                                {DNNL_ARG_DIFF_SRC, dx},
                                                {DNNL_ARG_SCRATCHPAD, sp}}); },
                           s, reps);
  }
  p.impl = std::string(fwd.impl_info_str()) + " / " + (sh.c != 3 ? bwd.impl_info_str() : std::string("-")) +
           " / " + bww.impl_info_str();
  return p;
}

// The GEMMs of xrun's small-map path (outputs of 4 pixels or fewer, issue
// #13), as one product each: forward [N*P, C*R*S] x [C*R*S, K] and
// backward-weights [C*R*S, N*P] x [N*P, K] (the path splits them per live
// tap and pixel; the work is at most this). fp32 against bf16 inputs with
// fp32 output, through oneDNN's matmul (the bf16 GEMM oneDNN offers).
struct GemmTimes {
  double fwd = 0, bwd_weights = 0;
  std::string impl;
};

GemmTimes measure_gemms(const Shape& sh, memory::data_type dt, dnnl::engine& eng,
                        dnnl::stream& s, int reps) {
  const memory::dim rows = sh.n * sh.out() * sh.out(), inner = sh.c * sh.r * sh.r;
  const auto time_one = [&](memory::dim m, memory::dim k, memory::dim n, std::string* impl) {
    const auto md = [](memory::dims d, memory::data_type t, memory::format_tag f) {
      return memory::desc(d, t, f);
    };
    const auto pd = compat::matmul(eng, dnnl::primitive_attr(),
                                   md({m, k}, dt, memory::format_tag::ab),
                                   md({k, n}, dt, memory::format_tag::any),
                                   md({m, n}, memory::data_type::f32, memory::format_tag::ab));
    memory a(pd.src_desc(), eng), b(pd.weights_desc(), eng), c(pd.dst_desc(), eng);
    for (memory* x : {&a, &b}) std::memset(x->get_data_handle(), 0, x->get_desc().get_size());
    dnnl::matmul mm(pd);
    if (impl) *impl = pd.impl_info_str();
    return median_ms([&] { mm.execute(s, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b},
                                          {DNNL_ARG_DST, c}}); },
                     s, reps);
  };
  GemmTimes t;
  t.fwd = time_one(rows, inner, sh.k, &t.impl);
  t.bwd_weights = time_one(inner, rows, sh.k, nullptr);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t batch = 8, image = 224;
  int reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--batch") batch = std::atoll(argv[i + 1]);
    else if (a == "--image") image = std::atoll(argv[i + 1]);
    else if (a == "--reps") reps = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: %s [--batch N] [--image S] [--reps R]\n", argv[0]);
      return 2;
    }
  }
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream s(eng);
  const char* isa = compat::isa_name(static_cast<dnnl_cpu_isa_t>(dnnl::get_effective_cpu_isa()));
  std::printf("oneDNN %d.%d.%d, ISA %s; resnet50 convolutions, batch %lld, %lldx%lld, median of %d\n",
              dnnl::version()->major, dnnl::version()->minor, dnnl::version()->patch,
              isa ? isa : "?", static_cast<long long>(batch), static_cast<long long>(image),
              static_cast<long long>(image), reps);
  std::printf("%-26s %3s | %8s %8s %8s | %8s %8s %8s | %s\n", "conv (c hxw -> k rxr /s)", "x",
              "f32 fwd", "bwd_d", "bwd_w", "bf16 fwd", "bwd_d", "bwd_w", "bf16 implementations");
  double total_f32 = 0, total_bf16 = 0, macs = 0;
  for (const auto& [sh, count] : resnet50_convs(batch, image)) {
    const Passes a = measure(sh, memory::data_type::f32, eng, s, reps);
    Passes b;
    try {
      b = measure(sh, memory::data_type::bf16, eng, s, reps);
    } catch (const dnnl::error& e) {
      std::printf("bf16 convolution unavailable on this CPU (%s)\n", e.what());
      return 1;
    }
    std::printf("%-26s %3d | %8.3f %8.3f %8.3f | %8.3f %8.3f %8.3f | %s\n",
                describe(sh).c_str(), count, a.fwd,
                a.bwd_data, a.bwd_weights, b.fwd, b.bwd_data, b.bwd_weights, b.impl.c_str());
    total_f32 += count * (a.fwd + a.bwd_data + a.bwd_weights);
    total_bf16 += count * (b.fwd + b.bwd_data + b.bwd_weights);
    macs += count * sh.macs() * (sh.c == 3 ? 2 : 3);
  }
  std::printf("step's convolutions: fp32 %.1f ms (%.0f GFLOP/s), bf16 %.1f ms (%.0f GFLOP/s), "
              "bf16 %.2fx faster\n",
              total_f32, 2 * macs / total_f32 / 1e6, total_bf16, 2 * macs / total_bf16 / 1e6,
              total_f32 / total_bf16);

  std::printf("\nthe small-map convolutions (4 output pixels or fewer) as single GEMMs, "
              "oneDNN matmul, ms:\n%-26s %3s | %8s %8s | %8s %8s | %s\n",
              "conv (c hxw -> k rxr /s)", "x", "f32 fwd", "bwd_w", "bf16 fwd", "bwd_w",
              "bf16 implementation");
  double gemm_f32 = 0, gemm_bf16 = 0;
  for (const auto& [sh, count] : resnet50_convs(batch, image)) {
    if (sh.out() * sh.out() > 4) continue;
    const GemmTimes a = measure_gemms(sh, memory::data_type::f32, eng, s, reps);
    const GemmTimes b = measure_gemms(sh, memory::data_type::bf16, eng, s, reps);
    std::printf("%-26s %3d | %8.3f %8.3f | %8.3f %8.3f | %s\n", describe(sh).c_str(), count,
                a.fwd, a.bwd_weights, b.fwd, b.bwd_weights, b.impl.c_str());
    gemm_f32 += count * (a.fwd + a.bwd_weights);
    gemm_bf16 += count * (b.fwd + b.bwd_weights);
  }
  if (gemm_f32 > 0)
    std::printf("small-map GEMMs (fwd + bwd_w): fp32 %.1f ms, bf16 %.1f ms, bf16 %.2fx faster\n",
                gemm_f32, gemm_bf16, gemm_f32 / gemm_bf16);
  return 0;
}
