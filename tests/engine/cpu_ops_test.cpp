// tests/engine/cpu_ops_test.cpp: every op family of the CPU (oneDNN) backend,
// forward and backward, against the naive double-precision reference in
// reference_ops.cpp, on small random shapes (odd sizes, stride 2, channel
// counts that are and are not multiples of the 8/16 blocking, N = 1 and 3),
// with inputs both in plain NCHW (the model input) and in the blocked layout
// a convolution produces (every other activation of the model). Every output
// element is compared.
//
// Tolerances: an element passes when |got - want| <= atol + rtol * |want|,
// `want` from the double reference on the same float inputs. The backend
// computes in fp32, so the error is rounding in fp32 accumulation, whose order
// differs from the reference's; inputs are O(1) (|x| <= 1 or 2, |w| <= 0.5),
// so the bounds below are absolute errors for O(1) values:
//   conv (fwd, bwd-data, bwd-weights)  atol 2e-5, rtol 1e-5: sums of up to
//       K = 24*3*3 (fwd/bwd-data) or N*OH*OW (bwd-weights, <= 3*9*9) products;
//       fp32 rounding ~ sqrt(K) * 6e-8 * sum|terms| ~ 1e-6..5e-6 seen.
//   batch norm y, dx, residual grad    atol 2e-5, rtol 1e-5: batch mean/variance
//       in fp32 over N*H*W <= 150 values, then 1/sqrt(var + eps) (|xhat| <= ~3).
//   batch norm dgamma, dbeta           atol 5e-5, rtol 1e-5: sums of N*H*W <= 150
//       terms of size up to 3.
//   running stats                      atol 1e-6, rtol 1e-5: one fp32 fma chain.
//   max pool forward                   exact (atol 0): it selects values.
//   max pool backward                  atol 2e-7, rtol 2.4e-7: overlapping windows
//       (kernel 3, stride 2) add up to 4 gradients into one input in fp32.
//   global avg pool                    atol 1e-6, rtol 1e-6: a mean of <= 81 values.
//   linear (y, dx, dW, db)             atol 1e-5, rtol 1e-5: sums of <= 24 terms.
//   loss value                         rtol 1e-9: computed in double by both.
//   dlogits                            atol 1e-7 * scale, rtol 1e-6: one fp32 rounding.
//   add_inplace                        rtol 2.4e-7: one fp32 rounding; copy exact.
//   gradient accumulation              atol = rtol = 2.4e-7: two fp32 roundings of
//       O(1) values whose sum may cancel.
//   optimizer parameters and state     atol 1e-6, rtol 1e-5: a few fp32 ops per
//       step on O(1) values (AdamW's m / (sqrt(v) + eps) is ~1 in size).
// The worst errors seen (AVX-512 machine, oneDNN 2.6) are at most 0.17 of
// these bounds, most below 0.07: the margin leaves room for other ISAs'
// blocking and accumulation orders. Run with XRUN_TEST_ERRORS=1 to print the
// worst error per family.
#include "catch2_compat.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <tuple>
#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/cpu/bf16.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/device/device_info.h"
#include "op_test_util.h"
#include "reference_ops.h"
#include "skip.h"
#include "torch_fixtures.h"

namespace {

using xrun::BnActivation;
using xrun::ConvShape;
using xrun::Tensor;
using xrun::TensorRole;
using xrun::cpu::CpuBackend;
using namespace xrun::optest;
namespace ref = xrun::ref;

constexpr Tol kConvTol{2e-5, 1e-5};
constexpr Tol kBnTol{2e-5, 1e-5};
constexpr Tol kBnParamGradTol{5e-5, 1e-5};
constexpr Tol kRunningTol{1e-6, 1e-5};
constexpr Tol kExact{0, 0};
constexpr Tol kMaxPoolBwdTol{2e-7, 2.4e-7};
constexpr Tol kAvgPoolTol{1e-6, 1e-6};
constexpr Tol kLinearTol{1e-5, 1e-5};
constexpr Tol kOneRounding{0, 2.4e-7};
constexpr Tol kOptimizerTol{1e-6, 1e-5};

// The plain model input (Backend::input) takes at most 16 channels; wider
// shapes are tested in the blocked layout only.
constexpr int64_t kMaxInputChannels = 16;

// An activation tensor of canonical dims [n, c, h, w] and its gradient: either
// the plain model input, or (blocked) the output of a 1x1 convolution in front,
// which oneDNN keeps in its blocked layout (nChw8c / nChw16c). Values are
// written straight into it; the convolution in front is never run.
struct Activation {
  Tensor* x = nullptr;
  Tensor* dx = nullptr;
  std::unique_ptr<xrun::ConvOp> producer;
};
Activation make_activation(CpuBackend& be, int64_t n, int64_t c, int64_t h, int64_t w,
                           bool blocked) {
  Activation a;
  if (!blocked) {
    a.x = be.input(n, c, h, w);
    a.dx = be.tensor_like(a.x, "dx", TensorRole::activation_grad);
    return a;
  }
  // A 1x1 activation comes from a stride-2 conv on 2x2, as in the model (a
  // conv on a 1x1 input would take the GEMM path and hand over plain NCHW).
  const int64_t f = h == 1 && w == 1 ? 2 : 1;
  Tensor* in = be.input(n, 3, h * f, w * f);
  ConvShape sh{.n = n, .c = 3, .h = h * f, .w = w * f, .k = c, .r = 1, .s = 1, .stride = f,
               .pad = 0};
  a.producer = be.conv("producer", sh, in, nullptr);
  a.x = a.producer->y;
  a.dx = a.producer->dy;
  return a;
}

// An NHWC activation and its gradient, as a convolution run as GEMMs (a
// small output map) hands over.
Activation make_nhwc_activation(CpuBackend& be, int64_t n, int64_t c, int64_t h, int64_t w) {
  const dnnl::memory::desc md({n, c, h, w}, dnnl::memory::data_type::f32,
                              dnnl::memory::format_tag::nhwc);
  Activation a;
  a.x = be.declare("x_nhwc", {n, c, h, w}, md, TensorRole::activation);
  a.dx = be.declare("dx_nhwc", {n, c, h, w}, md, TensorRole::activation_grad);
  return a;
}

// The three input layouts the ops see: the model input, oneDNN's blocked
// layouts, NHWC.
enum class In { plain, blocked, nhwc };
Activation make_activation(CpuBackend& be, int64_t n, int64_t c, int64_t h, int64_t w, In in) {
  if (in == In::nhwc) return make_nhwc_activation(be, n, c, h, w);
  return make_activation(be, n, c, h, w, in == In::blocked);
}

std::string layout_of(const Tensor* t) {
  const dnnl::memory::desc& md = xrun::cpu::as_cpu(t)->md;
  if (xrun::cpu::is_plain(md)) return "plain";
  const dnnl::memory::desc nhwc(xrun::cpu::dnnl_compat::dims_of(md), dnnl::memory::data_type::f32,
                                dnnl::memory::format_tag::nhwc);
  return md == nhwc ? "nhwc" : "blocked";
}

// Per-channel offsets and scales, so batch statistics are not all alike.
std::vector<float> channel_varied(Rng& rng, int64_t n, int64_t c, int64_t hw) {
  std::vector<float> offset = rng.floats(c, -1.0f, 1.0f), scale = rng.floats(c, 0.3f, 2.0f);
  std::vector<float> x(static_cast<size_t>(n * c * hw));
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t p = 0; p < hw; ++p)
        x[(b * c + ch) * hw + p] = offset[ch] + scale[ch] * rng.uniform(-1.0f, 1.0f);
  return x;
}

const char* act_name(BnActivation a) {
  switch (a) {
    case BnActivation::none: return "none";
    case BnActivation::relu: return "relu";
    case BnActivation::add_relu: return "add_relu";
  }
  return "?";
}

}  // namespace

// ---------------------------------------------------------------- conv --

TEST_CASE("cpu conv: forward, backward-data, backward-weights match the reference",
          "[ops][conv]") {
  const std::vector<ConvShape> shapes = {
      // the stem: 7x7 / 2, pad 3, 3 input channels, odd sizes
      {.n = 1, .c = 3, .h = 15, .w = 13, .k = 16, .r = 7, .s = 7, .stride = 2, .pad = 3},
      // 1x1, channels not multiples of 8, N = 3
      {.n = 3, .c = 24, .h = 5, .w = 5, .k = 5, .r = 1, .s = 1, .stride = 1, .pad = 0},
      // 1x1 / 2 (a downsample shortcut), odd input
      {.n = 2, .c = 5, .h = 7, .w = 7, .k = 24, .r = 1, .s = 1, .stride = 2, .pad = 0},
      // 3x3 pad 1, 5 -> 3 channels, non-square
      {.n = 3, .c = 5, .h = 6, .w = 7, .k = 3, .r = 3, .s = 3, .stride = 1, .pad = 1},
      // 3x3 / 2 pad 1, 16 -> 32 (the blocked fast path), even input
      {.n = 2, .c = 16, .h = 8, .w = 8, .k = 32, .r = 3, .s = 3, .stride = 2, .pad = 1},
      // 3x3 / 2 pad 1, 24 -> 24, odd input
      {.n = 1, .c = 24, .h = 9, .w = 9, .k = 24, .r = 3, .s = 3, .stride = 2, .pad = 1},
      // 1x1 output (layer4 at 32x32 and the stride-2 convs into it): run as
      // one GEMM per live tap when the output channels fill whole blocks;
      // k = 24 takes the direct path
      {.n = 3, .c = 32, .h = 1, .w = 1, .k = 48, .r = 3, .s = 3, .stride = 1, .pad = 1},
      {.n = 2, .c = 48, .h = 1, .w = 1, .k = 16, .r = 1, .s = 1, .stride = 1, .pad = 0},
      {.n = 2, .c = 16, .h = 1, .w = 1, .k = 32, .r = 3, .s = 3, .stride = 2, .pad = 1},
      {.n = 2, .c = 24, .h = 1, .w = 1, .k = 24, .r = 3, .s = 3, .stride = 1, .pad = 1},
      {.n = 3, .c = 24, .h = 2, .w = 2, .k = 32, .r = 1, .s = 1, .stride = 2, .pad = 0},
      {.n = 2, .c = 16, .h = 2, .w = 2, .k = 16, .r = 3, .s = 3, .stride = 2, .pad = 1},
      {.n = 2, .c = 5, .h = 3, .w = 3, .k = 16, .r = 3, .s = 3, .stride = 1, .pad = 0},
      // Up to 4 output pixels (layer3 at 32x32 and the convs into it): one
      // GEMM per live tap and pixel, y in NHWC. A 3x3 on a 2x2 map (oneDNN
      // 2.6 on AVX2 has only a reference backward-weights for it in blocked
      // layouts); a 1x1 on a 2x2 map (one GEMM over all pixels); a 3x3 / 2
      // and a 1x1 / 2 into a 2x2 map; a 1x4 row, odd channels
      {.n = 2, .c = 16, .h = 2, .w = 2, .k = 24, .r = 3, .s = 3, .stride = 1, .pad = 1},
      {.n = 3, .c = 24, .h = 2, .w = 2, .k = 16, .r = 1, .s = 1, .stride = 1, .pad = 0},
      {.n = 2, .c = 16, .h = 4, .w = 4, .k = 24, .r = 3, .s = 3, .stride = 2, .pad = 1},
      {.n = 2, .c = 8, .h = 4, .w = 3, .k = 16, .r = 1, .s = 1, .stride = 2, .pad = 0},
      {.n = 3, .c = 5, .h = 1, .w = 4, .k = 7, .r = 3, .s = 3, .stride = 1, .pad = 1},
      // 9 output pixels: the direct convolution again
      {.n = 2, .c = 16, .h = 3, .w = 3, .k = 16, .r = 3, .s = 3, .stride = 1, .pad = 1},
      // resnet18's layer3 3x3 at 64x64 (4x4 maps, 256 channels)
      {.n = 4, .c = 256, .h = 4, .w = 4, .k = 256, .r = 3, .s = 3, .stride = 1, .pad = 1},
  };
  Rng rng(1234);
  for (const ConvShape& sh : shapes) {
    for (In layout : {In::plain, In::blocked, In::nhwc}) {
      if (layout == In::plain && sh.c > kMaxInputChannels) continue;
      // NHWC comes only out of a conv with 4 output pixels or fewer, and
      // goes only into convs whose output is no larger
      if (layout == In::nhwc && sh.out_h() * sh.out_w() > 4) continue;
      CpuBackend be(test_threads(&sh == &shapes.front()));
      Activation in = make_activation(be, sh.n, sh.c, sh.h, sh.w, layout);
      auto conv = be.conv("conv", sh, in.x, in.dx);
      be.allocate();
      INFO("conv n" << sh.n << " c" << sh.c << " " << sh.h << "x" << sh.w << " -> k" << sh.k
                    << " " << sh.r << "x" << sh.s << "/" << sh.stride << " pad " << sh.pad
                    << ", input " << layout_of(in.x) << ", output " << layout_of(conv->y));
      REQUIRE(conv->y->dims == std::vector<int64_t>{sh.n, sh.k, sh.out_h(), sh.out_w()});

      // Two rounds, as two training steps: new inputs, weights and dy each
      // time (a primitive or copy that keeps the first step's values fails
      // the second).
      for (int round = 1; round <= 2; ++round) {
        INFO("round " << round);
        const auto x = rng.floats(in.x->numel(), -1, 1);
        const auto w = rng.floats(conv->weight->numel(), -0.5f, 0.5f);
        const auto dy = rng.floats(conv->y->numel(), -1, 1);
        write(be, in.x, x);
        write(be, conv->weight, w);
        write(be, conv->dy, dy);
        // The blocked weight layout round-trips exactly.
        CHECK(read(be, conv->weight) == w);

        conv->forward();
        check_close("conv.forward", "y", read(be, conv->y),
                    ref::conv2d_forward(sh, to_double(x), to_double(w)), kConvTol);
        conv->backward_data();
        check_close("conv.backward_data", "dx", read(be, in.dx),
                    ref::conv2d_backward_data(sh, to_double(dy), to_double(w)), kConvTol);
        conv->backward_weights();
        check_close("conv.backward_weights", "dw", read(be, conv->weight_grad),
                    ref::conv2d_backward_weights(sh, to_double(x), to_double(dy)), kConvTol);
      }
    }
  }
}

// bf16 on NHWC input (the model's layout on AMX) with a small output, or
// 1x1 at any size: the im2col matmuls of conv_gemm_bf16.cpp, checked per element against the
// double reference on the values the conv reads (x, w and dy rounded to
// bf16). y and dx are rounded to bf16 once (relative 2^-9) after fp32 sums:
// atol 1e-4, rtol 4e-3; dw stays fp32: kConvTol. Each shape takes a
// different branch: taps in padding, a stride-2 gather, a tap range with
// dead taps (the centre alone at 1x1), x used directly (1x1 stride 1).
TEST_CASE("cpu conv in bf16, small outputs and 1x1 (im2col matmuls), matches the reference",
          "[ops][conv][bf16]") {
  const std::string kernels =
      xrun::bf16_kernels_for_isa(static_cast<unsigned>(dnnl_get_effective_cpu_isa()));
  if (kernels.empty()) XRUN_SKIP("this CPU has no oneDNN bf16 kernels (needs AVX512_BF16 or AMX)");
  constexpr Tol kBf16Rounded{1e-4, 4e-3};
  const std::vector<ConvShape> shapes = {
      {.n = 2, .c = 16, .h = 2, .w = 2, .k = 32, .r = 3, .s = 3, .stride = 1, .pad = 1},
      {.n = 3, .c = 32, .h = 2, .w = 2, .k = 16, .r = 1, .s = 1, .stride = 1, .pad = 0},
      {.n = 2, .c = 16, .h = 4, .w = 4, .k = 32, .r = 3, .s = 3, .stride = 2, .pad = 1},
      {.n = 2, .c = 32, .h = 4, .w = 3, .k = 16, .r = 1, .s = 1, .stride = 2, .pad = 0},
      {.n = 3, .c = 32, .h = 1, .w = 1, .k = 48, .r = 3, .s = 3, .stride = 1, .pad = 1},
      {.n = 2, .c = 16, .h = 2, .w = 2, .k = 32, .r = 3, .s = 3, .stride = 2, .pad = 1},
      {.n = 3, .c = 8, .h = 1, .w = 4, .k = 16, .r = 3, .s = 3, .stride = 1, .pad = 1},
      // 1x1 at larger maps: x itself (stride 1), a gather leaving 3 of 4
      // input pixels without a gradient (stride 2)
      {.n = 2, .c = 32, .h = 6, .w = 5, .k = 16, .r = 1, .s = 1, .stride = 1, .pad = 0},
      {.n = 2, .c = 16, .h = 8, .w = 7, .k = 32, .r = 1, .s = 1, .stride = 2, .pad = 0},
  };
  const auto rounded = [](std::vector<float> v) {
    for (float& f : v) f = xrun::cpu::bf16_to_float(xrun::cpu::float_to_bf16(f));
    return v;
  };
  Rng rng(4321);
  for (const ConvShape& sh : shapes) {
    CpuBackend be(2, xrun::Precision::bf16);
    const dnnl::memory::desc md({sh.n, sh.c, sh.h, sh.w}, dnnl::memory::data_type::bf16,
                                dnnl::memory::format_tag::nhwc);
    Tensor* x_t = be.declare("x", {sh.n, sh.c, sh.h, sh.w}, md, TensorRole::activation);
    Tensor* dx_t = be.declare("dx", {sh.n, sh.c, sh.h, sh.w}, md, TensorRole::activation_grad);
    auto conv = be.conv("conv", sh, x_t, dx_t);
    be.allocate();
    INFO("bf16 conv n" << sh.n << " c" << sh.c << " " << sh.h << "x" << sh.w << " -> k" << sh.k
                       << " " << sh.r << "x" << sh.s << "/" << sh.stride << " pad " << sh.pad);
    // The GEMM path keeps the master weight [R][S][C][K]; oneDNN's direct
    // bf16 convolution keeps it in its backward-weights layout.
    const dnnl::memory::desc rsck({sh.k, sh.c, sh.r, sh.s}, dnnl::memory::data_type::f32,
                                  dnnl::memory::dims{1, sh.k, sh.s * sh.c * sh.k, sh.c * sh.k});
    REQUIRE(xrun::cpu::as_cpu(conv->weight)->md == rsck);
    for (int round = 1; round <= 2; ++round) {  // new values each round (stale copies fail)
      INFO("round " << round);
      const auto x = rng.floats(x_t->numel(), -1, 1);
      const auto w = rng.floats(conv->weight->numel(), -0.5f, 0.5f);
      const auto dy = rng.floats(conv->y->numel(), -1, 1);
      write(be, x_t, x);
      write(be, conv->weight, w);
      write(be, conv->dy, dy);
      const ref::Vec xr = to_double(rounded(x)), wr = to_double(rounded(w)),
                     dyr = to_double(rounded(dy));
      conv->forward();
      check_close("conv.bf16.forward", "y", read(be, conv->y), ref::conv2d_forward(sh, xr, wr),
                  kBf16Rounded);
      conv->backward_data();
      check_close("conv.bf16.backward_data", "dx", read(be, dx_t),
                  ref::conv2d_backward_data(sh, dyr, wr), kBf16Rounded);
      conv->backward_weights();
      check_close("conv.bf16.backward_weights", "dw", read(be, conv->weight_grad),
                  ref::conv2d_backward_weights(sh, xr, dyr), kConvTol);
    }
  }
}

// oneDNN's default floating-point math mode (ONEDNN_DEFAULT_FPMATH_MODE=BF16
// in the environment, or dnnl_set_default_fpmath_mode) lets an fp32
// convolution or inner product compute in bf16 on a CPU that has bf16
// instructions: an fp32 run would then silently mean something else. The
// backend pins its primitives to strict fp32 math; here the default is set to
// bf16 and the backend's conv and linear must still meet the fp32 bounds. On a
// CPU where oneDNN computes fp32 in fp32 even in bf16 mode (checked first, with
// a primitive made in that mode) the case cannot fail and is skipped (oneDNN
// 2.6 on every CPU seen); it runs, and passes, on an AMX Xeon with 3.7.2.
namespace {
struct DefaultFpmath {
  explicit DefaultFpmath(dnnl::fpmath_mode m) : saved(dnnl::get_default_fpmath_mode()) {
    dnnl::set_default_fpmath_mode(m);
  }
  ~DefaultFpmath() { dnnl::set_default_fpmath_mode(saved); }
  dnnl::fpmath_mode saved;
};

// Max |y - reference| of one conv made under the default math mode, in the
// layouts oneDNN picks (format any, as the backend's convs): the kernels that
// honour a bf16 math mode (AMX's brg_conv) are chosen for those (NHWC here),
// not for the plain NCHW a user buffer has.
double conv_error_in_default_mode(const ConvShape& sh, const std::vector<float>& x,
                                  const std::vector<float>& w, const ref::Vec& want) {
  using dnnl::memory;
  const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);
  const auto md = [](memory::dims d, memory::format_tag t) {
    return memory::desc(d, memory::data_type::f32, t);
  };
  const memory::dims xd{sh.n, sh.c, sh.h, sh.w}, wd{sh.k, sh.c, sh.r, sh.s},
      yd{sh.n, sh.k, sh.out_h(), sh.out_w()};
  const auto pd = xrun::cpu::dnnl_compat::conv_forward(
      eng, dnnl::primitive_attr(), dnnl::prop_kind::forward_training,
      md(xd, memory::format_tag::any), md(wd, memory::format_tag::any),
      md(yd, memory::format_tag::any), {sh.stride, sh.stride}, {sh.pad, sh.pad});
  std::vector<float> y(static_cast<size_t>(sh.n * sh.k * sh.out_h() * sh.out_w()));
  memory xs(md(xd, memory::format_tag::nchw), eng, const_cast<float*>(x.data())),
      ws(md(wd, memory::format_tag::oihw), eng, const_cast<float*>(w.data())),
      ys(md(yd, memory::format_tag::nchw), eng, y.data());
  memory xb(pd.src_desc(), eng), wb(pd.weights_desc(), eng), yb(pd.dst_desc(), eng);
  dnnl::reorder(xs, xb).execute(strm, xs, xb);
  dnnl::reorder(ws, wb).execute(strm, ws, wb);
  dnnl::convolution_forward(pd).execute(
      strm, {{DNNL_ARG_SRC, xb}, {DNNL_ARG_WEIGHTS, wb}, {DNNL_ARG_DST, yb}});
  dnnl::reorder(yb, ys).execute(strm, yb, ys);
  strm.wait();
  double worst = 0;
  for (size_t i = 0; i < y.size(); ++i) worst = std::max(worst, std::fabs(y[i] - want[i]));
  return worst;
}
}  // namespace

TEST_CASE("cpu conv and linear stay fp32 when oneDNN's default math mode is bf16",
          "[ops][conv][linear]") {
  const ConvShape sh{.n = 2, .c = 64, .h = 8, .w = 8, .k = 64, .r = 3, .s = 3, .stride = 1,
                     .pad = 1};
  Rng rng(77);
  const auto x = rng.floats(sh.n * sh.c * sh.h * sh.w, -1, 1);
  const auto w = rng.floats(sh.k * sh.c * sh.r * sh.s, -0.5f, 0.5f);
  const ref::Vec want = ref::conv2d_forward(sh, to_double(x), to_double(w));
  const DefaultFpmath bf16_default(dnnl::fpmath_mode::bf16);
  const double probe = conv_error_in_default_mode(sh, x, w, want);
  if (probe <= 1e-4)  // 10x the fp32 bound at |y| ~ 4; bf16 inputs are off by ~1e-2
    XRUN_SKIP("oneDNN " << dnnl::version()->major << "." << dnnl::version()->minor
                        << " on this CPU (" << xrun::cpu::dnnl_compat::isa_name(
                                                   static_cast<dnnl_cpu_isa_t>(
                                                       dnnl::get_effective_cpu_isa()))
                        << ") computes an fp32 conv in fp32 even in bf16 math mode (error "
                        << probe << "): nothing to catch here");
  INFO("a conv made in bf16 math mode is off by " << probe);

  // NHWC input: on an AMX CPU oneDNN 3.x runs it in brg_conv kernels, which
  // honour a bf16 math mode (its jit kernels on nChw16c do not): with the
  // strict pin removed this case failed there (oneDNN 3.7.2, off by 3e-2).
  CpuBackend be(1);
  Activation in = make_activation(be, sh.n, sh.c, sh.h, sh.w, In::nhwc);
  auto conv = be.conv("conv", sh, in.x, in.dx);
  be.allocate();
  write(be, in.x, x);
  write(be, conv->weight, w);
  conv->forward();
  check_close("conv.fpmath", "y", read(be, conv->y), want, kConvTol);

  CpuBackend be_fc(1);  // (a backend has one input)
  const int64_t ln = 4, lin = 256, lout = 32;
  Activation pooled_in = make_activation(be_fc, ln, lin, 1, 1, In::blocked);
  auto pool = be_fc.global_avg_pool("avgpool", pooled_in.x, pooled_in.dx);
  auto fc = be_fc.linear("fc", pool->y, pool->dy, lout);
  be_fc.allocate();

  const auto lx = rng.floats(ln * lin, -1, 1);
  const auto lw = rng.floats(lout * lin, -0.5f, 0.5f);
  const auto lb = rng.floats(lout, -0.5f, 0.5f);
  write(be_fc, pool->y, lx);
  write(be_fc, fc->weight, lw);
  write(be_fc, fc->bias, lb);
  fc->forward();
  check_close("linear.fpmath", "y", read(be_fc, fc->y),
              ref::linear_forward(ln, lin, lout, to_double(lx), to_double(lw), to_double(lb)),
              kLinearTol);
}

// ---------------------------------------------------------- batch norm --

TEST_CASE("cpu batch norm: training/inference forward, backward, running stats",
          "[ops][batchnorm]") {
  struct Shape {
    int64_t n, c, h, w;
  };
  // NHWC: C = 32 and 16 in blocks of 16 lanes, 24 in blocks of 8, 5 and 3
  // as one block; a 1x1 map (layer4 at 32x32)
  const std::vector<Shape> shapes = {{3, 5, 7, 7}, {1, 24, 5, 3}, {2, 3, 4, 4},
                                     {2, 16, 3, 3}, {3, 32, 2, 2}, {4, 32, 1, 1}};
  Rng rng(99);
  for (const Shape& s : shapes) {
    for (In layout : {In::plain, In::blocked, In::nhwc}) {
      if (layout == In::plain && s.c > kMaxInputChannels) continue;
      for (BnActivation act : {BnActivation::none, BnActivation::relu, BnActivation::add_relu}) {
        CpuBackend be(test_threads(&s == &shapes.front()));
        Activation in = make_activation(be, s.n, s.c, s.h, s.w, layout);
        Tensor* residual = nullptr;
        Tensor* d_residual = nullptr;
        if (act == BnActivation::add_relu) {
          residual = be.tensor_like(in.x, "residual", TensorRole::activation);
          d_residual = be.tensor_like(in.x, "d_residual", TensorRole::activation_grad);
        }
        auto bn = be.batch_norm("bn", in.x, in.dx, act, residual, d_residual);
        be.allocate();
        INFO("batch norm n" << s.n << " c" << s.c << " " << s.h << "x" << s.w << ", act "
                            << act_name(act) << ", layout " << layout_of(in.x));

        const ref::BnShape sh{s.n, s.c, s.h * s.w};
        const auto x1 = channel_varied(rng, s.n, s.c, s.h * s.w);
        const auto x2 = channel_varied(rng, s.n, s.c, s.h * s.w);
        const auto gamma = rng.floats(s.c, -1.5f, 1.5f);
        const auto beta = rng.floats(s.c, -0.5f, 0.5f);
        const auto rm0 = rng.floats(s.c, -0.5f, 0.5f);
        const auto rv0 = rng.floats(s.c, 0.5f, 2.0f);
        const auto res = rng.floats(in.x->numel(), -1, 1);
        const auto dy = rng.floats(in.x->numel(), -1, 1);
        write(be, in.x, x1);
        write(be, bn->gamma, gamma);
        write(be, bn->beta, beta);
        write(be, bn->running_mean, rm0);
        write(be, bn->running_var, rv0);
        if (residual) write(be, residual, res);
        const ref::Vec res_d = to_double(res);
        const ref::Vec* res_ptr = residual ? &res_d : nullptr;
        ref::Vec rm = to_double(rm0), rv = to_double(rv0);

        // Training forward 1: batch statistics, one running-stat update.
        bn->forward_train();
        const auto f1 = ref::batch_norm_train_forward(sh, to_double(x1), to_double(gamma),
                                                      to_double(beta), act, res_ptr);
        ref::batch_norm_update_running(sh, f1, rm, rv);
        check_close("bn.forward_train", "y (1st batch)", read(be, bn->y), f1.y, kBnTol);
        check_close("bn.running_stats", "running_mean after 1", read(be, bn->running_mean), rm,
                    kRunningTol);
        check_close("bn.running_stats", "running_var after 1", read(be, bn->running_var), rv,
                    kRunningTol);

        // Backward from the first batch.
        write(be, bn->dy, dy);
        bn->backward();
        const auto g = ref::batch_norm_backward(sh, to_double(x1), to_double(gamma), f1,
                                                to_double(dy), act);
        check_close("bn.backward.dx", "dx", read(be, in.dx), g.dx, kBnTol);
        check_close("bn.backward.dgamma_dbeta", "dgamma", read(be, bn->gamma_grad), g.dgamma,
                    kBnParamGradTol);
        check_close("bn.backward.dgamma_dbeta", "dbeta", read(be, bn->beta_grad), g.dbeta,
                    kBnParamGradTol);
        if (act == BnActivation::add_relu)
          check_close("bn.backward.dresidual", "d_residual", read(be, d_residual), g.dresidual,
                      kBnTol);

        // Training forward 2 on another batch: second running-stat update.
        write(be, in.x, x2);
        bn->forward_train();
        const auto f2 = ref::batch_norm_train_forward(sh, to_double(x2), to_double(gamma),
                                                      to_double(beta), act, res_ptr);
        ref::batch_norm_update_running(sh, f2, rm, rv);
        check_close("bn.forward_train", "y (2nd batch)", read(be, bn->y), f2.y, kBnTol);
        check_close("bn.running_stats", "running_mean after 2", read(be, bn->running_mean), rm,
                    kRunningTol);
        check_close("bn.running_stats", "running_var after 2", read(be, bn->running_var), rv,
                    kRunningTol);

        // Inference on the first batch with the running statistics; no update.
        write(be, in.x, x1);
        bn->forward_infer();
        check_close("bn.forward_infer", "y (inference)", read(be, bn->y),
                    ref::batch_norm_infer_forward(sh, to_double(x1), to_double(gamma),
                                                  to_double(beta), rm, rv, act, res_ptr),
                    kBnTol);
        check_close("bn.running_stats", "running_mean after inference",
                    read(be, bn->running_mean), rm, kRunningTol);
      }
    }
  }
}

// Issue 13's question, measured: how far the CPU engine's batch norm lands
// from float64, beside a careful fp32 implementation of the same formulas
// (two-pass variance, pairwise sums). oneDNN 2.6's batch norm was 4-35x
// noisier than the careful fp32 in dgamma/dbeta; xrun's own (batchnorm.cpp)
// is below it. A measurement, run by hand (hidden tag):
//   build/tests/test_engine "[.fidelity]"
// It prints a table and asserts only that the figures are finite.
namespace {

float pairwise_sum(const float* v, size_t n) {
  if (n <= 16) {
    float s = 0;
    for (size_t i = 0; i < n; ++i) s += v[i];
    return s;
  }
  const size_t h = n / 2;
  return pairwise_sum(v, h) + pairwise_sum(v + h, n - h);
}

// Normalised RMS error of `got` against float64 `want`.
double nrmse(const std::vector<float>& got, const ref::Vec& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

struct Fp32Bn {
  std::vector<float> dx, dgamma, dbeta;
};

// Batch norm training forward + backward (no activation) in fp32, NCHW.
Fp32Bn careful_fp32_bn(int64_t n, int64_t c, int64_t hw, const std::vector<float>& x,
                       const std::vector<float>& gamma, const std::vector<float>& dy) {
  Fp32Bn out{std::vector<float>(x.size()), std::vector<float>(c), std::vector<float>(c)};
  const size_t m = static_cast<size_t>(n * hw);
  std::vector<float> xs(m), ds(m), tmp(m);
  for (int64_t ch = 0; ch < c; ++ch) {
    for (int64_t b = 0; b < n; ++b)
      for (int64_t p = 0; p < hw; ++p) {
        xs[b * hw + p] = x[(b * c + ch) * hw + p];
        ds[b * hw + p] = dy[(b * c + ch) * hw + p];
      }
    const float mean = pairwise_sum(xs.data(), m) / static_cast<float>(m);
    for (size_t i = 0; i < m; ++i) tmp[i] = (xs[i] - mean) * (xs[i] - mean);
    const float var = pairwise_sum(tmp.data(), m) / static_cast<float>(m);
    const float inv = 1.0f / std::sqrt(var + 1e-5f);
    for (size_t i = 0; i < m; ++i) tmp[i] = ds[i] * (xs[i] - mean) * inv;
    const float dgamma = pairwise_sum(tmp.data(), m), dbeta = pairwise_sum(ds.data(), m);
    out.dgamma[ch] = dgamma;
    out.dbeta[ch] = dbeta;
    for (int64_t b = 0; b < n; ++b)
      for (int64_t p = 0; p < hw; ++p) {
        const size_t i = static_cast<size_t>(b * hw + p);
        const float xhat = (xs[i] - mean) * inv;
        out.dx[(b * c + ch) * hw + p] =
            gamma[ch] * inv * (ds[i] - dbeta / m - xhat * dgamma / m);
      }
  }
  return out;
}

}  // namespace

TEST_CASE("cpu batch norm: error against float64 beside a careful fp32, ResNet50 shapes",
          "[.fidelity]") {
  struct Case {
    int64_t n, c, h;
    float offset, spread_lo, spread_hi;  // channel means in [-offset, offset], spreads
    const char* what;
  };
  const std::vector<Case> cases = {
      {8, 64, 16, 1.0f, 0.3f, 2.0f, "bn1 at 32x32"},
      {8, 256, 8, 1.0f, 0.3f, 2.0f, "layer1 at 32x32"},
      {8, 512, 4, 1.0f, 0.3f, 2.0f, "layer2 at 32x32"},
      {8, 2048, 1, 1.0f, 0.3f, 2.0f, "layer4 at 32x32"},
      {8, 256, 8, 8.0f, 0.02f, 0.2f, "layer1, mean >> spread"},
      {8, 2048, 1, 8.0f, 0.02f, 0.2f, "layer4, mean >> spread"},
      {8, 64, 112, 1.0f, 0.3f, 2.0f, "bn1 at 224x224"},
  };
  std::printf("%-24s %-7s %12s %12s %8s\n", "case", "tensor", "xrun NRMSE", "fp32 NRMSE", "ratio");
  Rng rng(13);
  for (const Case& k : cases) {
    CpuBackend be(2);
    Activation in = make_activation(be, k.n, k.c, k.h, k.h, true);
    auto bn = be.batch_norm("bn", in.x, in.dx, BnActivation::none, nullptr, nullptr);
    be.allocate();
    const int64_t hw = k.h * k.h;
    std::vector<float> offset = rng.floats(k.c, -k.offset, k.offset),
                       spread = rng.floats(k.c, k.spread_lo, k.spread_hi);
    std::vector<float> x(static_cast<size_t>(k.n * k.c * hw));
    for (int64_t b = 0; b < k.n; ++b)
      for (int64_t ch = 0; ch < k.c; ++ch)
        for (int64_t p = 0; p < hw; ++p)
          x[(b * k.c + ch) * hw + p] = offset[ch] + spread[ch] * rng.uniform(-1.0f, 1.0f);
    const auto gamma = rng.floats(k.c, 0.5f, 1.5f), beta = rng.floats(k.c, -0.5f, 0.5f);
    const auto dy = rng.floats(static_cast<int64_t>(x.size()), -1, 1);
    write(be, in.x, x);
    write(be, bn->gamma, gamma);
    write(be, bn->beta, beta);
    bn->forward_train();
    write(be, bn->dy, dy);
    bn->backward();
    const ref::BnShape sh{k.n, k.c, hw};
    const auto f = ref::batch_norm_train_forward(sh, to_double(x), to_double(gamma),
                                                 to_double(beta), BnActivation::none);
    const auto g = ref::batch_norm_backward(sh, to_double(x), to_double(gamma), f, to_double(dy),
                                            BnActivation::none);
    const Fp32Bn careful = careful_fp32_bn(k.n, k.c, hw, x, gamma, dy);
    const std::vector<std::tuple<const char*, std::vector<float>, std::vector<float>, const ref::Vec*>>
        rows = {{"dx", read(be, in.dx), careful.dx, &g.dx},
                {"dgamma", read(be, bn->gamma_grad), careful.dgamma, &g.dgamma},
                {"dbeta", read(be, bn->beta_grad), careful.dbeta, &g.dbeta}};
    for (const auto& [name, engine, fp32, want] : rows) {
      const double e = nrmse(engine, *want), c = nrmse(fp32, *want);
      std::printf("%-24s %-7s %12.3e %12.3e %8.2f\n", k.what, name, e, c, c > 0 ? e / c : 0.0);
      CHECK(std::isfinite(e));
      CHECK(std::isfinite(c));
    }
  }
}

// Issue 22's fidelity question, op by op: every distinct convolution of
// ResNet50 (batch 8, 32x32: oneDNN's direct kernels in layer1-2, the GEMM
// path at 4 output pixels or fewer in layer3-4) on the closed-form x, w, dy
// of tests/engine/fixtures/torch_conv_ops.json, each pass (forward,
// backward-data, backward-weights) judged against the same op in float64.
// Rule: xrun's normalised RMS error is at most kOpFidelityFactor times
// PyTorch fp32's worst configuration on the same op (contiguous and
// channels_last, 1 and 2 threads; measured and stored by
// make_torch_fixtures.py conv_ops). Op by op because a whole pass is
// luck-driven: a ReLU input within rounding of zero lands on either side, and
// over 8 batches every engine, PyTorch's four configurations included, moves
// 0.01%-1% of a first AdamW step's elements off float64's
// (bench/fp32_update_fidelity.py, bench/README.md). Each shape runs on both
// input layouts the model hands a convolution (oneDNN's channel blocks, and
// NHWC from a GEMM-path conv); ctest runs it again on oneDNN's AVX-512 and
// AVX2 kernels.
namespace {
constexpr double kOpFidelityFactor = 2.0;

// The fixture's closed-form inputs (conv_op_inputs in the Python twin).
std::vector<float> hashed(const std::string& name, int64_t n, bool relu) {
  const uint64_t seed = xrun::testing::name_seed(name);
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const double u = xrun::testing::hashed_uniform(seed, static_cast<uint64_t>(i));
    v[i] = static_cast<float>(relu ? std::max(u, 0.0) : u);
  }
  return v;
}
}  // namespace

TEST_CASE("cpu conv at every ResNet50 layer shape: forward, dx and dw no noisier against "
          "float64 than PyTorch fp32",
          "[fidelity][conv-fidelity]") {
  const nlohmann::json f = xrun::testing::load_fixture("torch_conv_ops.json");
  REQUIRE(f.at("shapes").size() >= 20);
  const char* isa = xrun::cpu::dnnl_compat::isa_name(
      static_cast<dnnl_cpu_isa_t>(dnnl::get_effective_cpu_isa()));
  std::printf("oneDNN %d.%d, ISA %s\n", dnnl::version()->major, dnnl::version()->minor,
              isa ? isa : "(unnamed)");
  std::printf("%-22s %-7s %-5s %10s %10s  (xrun / PyTorch fp32's worst, factor %.0f allowed)\n",
              "layer", "layout", "pass", "xrun", "PyTorch", kOpFidelityFactor);
  for (const auto& e : f.at("shapes")) {
    const auto d = e.at("shape").get<std::vector<int64_t>>();
    const ConvShape sh{.n = d[0], .c = d[1], .h = d[2], .w = d[3], .k = d[4], .r = d[5],
                       .s = d[6], .stride = d[7], .pad = d[8]};
    char key[96];
    std::snprintf(key, sizeof key, "conv_ops.%lldx%lldx%lldx%lld-%lldx%lldx%llds%lldp%lld",
                  static_cast<long long>(sh.n), static_cast<long long>(sh.c),
                  static_cast<long long>(sh.h), static_cast<long long>(sh.w),
                  static_cast<long long>(sh.k), static_cast<long long>(sh.r),
                  static_cast<long long>(sh.s), static_cast<long long>(sh.stride),
                  static_cast<long long>(sh.pad));
    const bool first = sh.c == 3;  // conv1: the image, no dx
    const auto x = hashed(std::string(key) + ".x", sh.n * sh.c * sh.h * sh.w, !first);
    const auto w = xrun::testing::deterministic_values(std::string(key) + ".w", {sh.k, sh.c, sh.r, sh.s});
    const auto dy = hashed(std::string(key) + ".dy", sh.n * sh.k * sh.out_h() * sh.out_w(), false);
    const ref::Vec xd = to_double(x), wd = to_double(w), dyd = to_double(dy);
    const std::map<std::string, ref::Vec> want = {
        {"fwd", ref::conv2d_forward(sh, xd, wd)},
        {"dw", ref::conv2d_backward_weights(sh, xd, dyd)},
        {"dx", first ? ref::Vec{} : ref::conv2d_backward_data(sh, dyd, wd)}};
    const std::string layer = e.at("layer");
    std::vector<std::string> layouts_seen;
    for (In layout : first ? std::vector<In>{In::plain} : std::vector<In>{In::blocked, In::nhwc}) {
      CpuBackend be(2);
      Activation in = make_activation(be, sh.n, sh.c, sh.h, sh.w, layout);
      // (A small map's producer is itself a GEMM-path conv: NHWC already.)
      if (std::find(layouts_seen.begin(), layouts_seen.end(), layout_of(in.x)) != layouts_seen.end())
        continue;
      layouts_seen.push_back(layout_of(in.x));
      auto conv = be.conv(layer, sh, in.x, first ? nullptr : in.dx);
      be.allocate();
      write(be, in.x, x);
      write(be, conv->weight, w);
      write(be, conv->dy, dy);
      conv->forward();
      conv->backward_data();
      conv->backward_weights();
      const std::map<std::string, std::vector<float>> got = {
          {"fwd", read(be, conv->y)},
          {"dw", read(be, conv->weight_grad)},
          {"dx", first ? std::vector<float>{} : read(be, in.dx)}};
      for (const char* pass : {"fwd", "dx", "dw"}) {
        if (!e.contains(pass)) continue;
        const auto torch = e.at(pass).get<std::vector<double>>();
        const double worst = *std::max_element(torch.begin(), torch.end());
        const double err = nrmse(got.at(pass), want.at(pass));
        std::printf("%-22s %-7s %-5s %10.3e %10.3e\n", layer.c_str(), layout_of(in.x).c_str(),
                    pass, err, worst);
        INFO(layer << " (" << key << "), " << layout_of(in.x) << " input, " << pass
                   << ": xrun's normalised RMS error " << err << ", PyTorch fp32's worst "
                   << worst);
        CHECK(err <= kOpFidelityFactor * worst);
      }
    }
  }
}

// ------------------------------------------------------------- pooling --

TEST_CASE("cpu max pool and global average pool match the reference", "[ops][pool]") {
  struct Case {
    int64_t n, c, h, w, kernel, stride, pad;
    bool all_negative;  // padding must never win, even over negative values
  };
  const std::vector<Case> max_cases = {
      {3, 5, 9, 7, 3, 2, 1, false}, {1, 24, 8, 8, 3, 2, 1, false}, {2, 3, 5, 5, 3, 2, 1, true},
      {2, 16, 6, 6, 3, 2, 1, true}, {1, 5, 2, 3, 3, 2, 1, true},   {2, 5, 6, 6, 2, 2, 0, false},
  };
  Rng rng(7);
  for (const Case& k : max_cases) {
    for (bool blocked : {false, true}) {
      if (!blocked && k.c > kMaxInputChannels) continue;
      CpuBackend be(test_threads(&k == &max_cases.front()));
      Activation in = make_activation(be, k.n, k.c, k.h, k.w, blocked);
      auto pool = be.max_pool("maxpool", in.x, in.dx, k.kernel, k.stride, k.pad);
      be.allocate();
      INFO("max pool n" << k.n << " c" << k.c << " " << k.h << "x" << k.w << " kernel "
                        << k.kernel << "/" << k.stride << " pad " << k.pad << ", layout "
                        << layout_of(in.x) << (k.all_negative ? ", all negative" : ""));
      const auto x = k.all_negative ? rng.floats(in.x->numel(), -2.0f, -1.0f)
                                    : rng.floats(in.x->numel(), -1.0f, 1.0f);
      const auto f = ref::max_pool_forward(k.n, k.c, k.h, k.w, to_double(x), k.kernel, k.stride,
                                           k.pad);
      REQUIRE(pool->y->dims == std::vector<int64_t>{k.n, k.c, f.oh, f.ow});
      const auto dy = rng.floats(pool->y->numel(), -1, 1);
      write(be, in.x, x);
      write(be, pool->dy, dy);

      pool->forward_train();
      check_close("maxpool.forward", "y (train)", read(be, pool->y), f.y, kExact);
      pool->backward();
      check_close("maxpool.backward", "dx", read(be, in.dx),
                  ref::max_pool_backward(in.x->numel(), f, to_double(dy)), kMaxPoolBwdTol);
      write(be, pool->y, std::vector<float>(pool->y->numel(), 0.0f));
      pool->forward_infer();
      check_close("maxpool.forward", "y (inference)", read(be, pool->y), f.y, kExact);
    }
  }

  struct GapCase {
    int64_t n, c, h, w;
  };
  const std::vector<GapCase> gap_cases = {{3, 5, 7, 7}, {1, 24, 4, 3}, {2, 16, 1, 1},
                                          {2, 3, 9, 9}};
  for (const GapCase& k : gap_cases) {
    for (bool blocked : {false, true}) {
      if (!blocked && k.c > kMaxInputChannels) continue;
      CpuBackend be(test_threads(&k == &gap_cases.front()));
      Activation in = make_activation(be, k.n, k.c, k.h, k.w, blocked);
      auto pool = be.global_avg_pool("avgpool", in.x, in.dx);
      be.allocate();
      INFO("global avg pool n" << k.n << " c" << k.c << " " << k.h << "x" << k.w
                               << ", layout " << layout_of(in.x));
      REQUIRE(pool->y->dims == std::vector<int64_t>{k.n, k.c});
      const auto x = rng.floats(in.x->numel(), -1, 1);
      const auto dy = rng.floats(pool->y->numel(), -1, 1);
      write(be, in.x, x);
      write(be, pool->dy, dy);
      const int64_t hw = k.h * k.w;
      const auto want = ref::global_avg_pool_forward(k.n, k.c, hw, to_double(x));
      pool->forward_train();
      check_close("avgpool.forward", "y (train)", read(be, pool->y), want, kAvgPoolTol);
      pool->backward();
      check_close("avgpool.backward", "dx", read(be, in.dx),
                  ref::global_avg_pool_backward(k.n, k.c, hw, to_double(dy)), kAvgPoolTol);
      pool->forward_infer();
      check_close("avgpool.forward", "y (inference)", read(be, pool->y), want, kAvgPoolTol);
    }
  }
}

// -------------------------------------------------------------- linear --

TEST_CASE("cpu linear: forward and backward (dx, dW, db) match the reference",
          "[ops][linear]") {
  struct Case {
    int64_t n, in, out;
    bool after_pool;  // x is a global-average-pool output (blocked [N, C, 1, 1])
  };
  Rng rng(21);
  const std::vector<Case> cases = {
      {3, 5, 3, false}, {1, 13, 10, false}, {2, 20, 7, true}, {3, 16, 10, true}};
  for (const Case& k : cases) {
    CpuBackend be(test_threads(&k == &cases.front()));
    Tensor* x = nullptr;
    Tensor* dx = nullptr;
    Activation in;
    std::unique_ptr<xrun::PoolOp> pool;
    if (k.after_pool) {
      in = make_activation(be, k.n, k.in, 3, 3, true);
      pool = be.global_avg_pool("avgpool", in.x, in.dx);
      x = pool->y;
      dx = pool->dy;
    } else {
      x = be.input(k.n, k.in, 1, 1);
      dx = be.tensor_like(x, "dx", TensorRole::activation_grad);
    }
    auto fc = be.linear("fc", x, dx, k.out);
    be.allocate();
    INFO("linear n" << k.n << " " << k.in << " -> " << k.out << ", input " << layout_of(x));
    REQUIRE(fc->y->dims == std::vector<int64_t>{k.n, k.out});
    REQUIRE(fc->weight->dims == std::vector<int64_t>{k.out, k.in});

    const auto xv = rng.floats(k.n * k.in, -1, 1);
    const auto w = rng.floats(k.out * k.in, -0.5f, 0.5f);
    const auto b = rng.floats(k.out, -0.5f, 0.5f);
    const auto dy = rng.floats(k.n * k.out, -1, 1);
    write(be, x, xv);
    write(be, fc->weight, w);
    write(be, fc->bias, b);
    write(be, fc->dy, dy);
    fc->forward();
    check_close("linear.forward", "y", read(be, fc->y),
                ref::linear_forward(k.n, k.in, k.out, to_double(xv), to_double(w), to_double(b)),
                kLinearTol);
    fc->backward();
    const auto g =
        ref::linear_backward(k.n, k.in, k.out, to_double(xv), to_double(w), to_double(dy));
    check_close("linear.backward", "dx", read(be, dx), g.dx, kLinearTol);
    check_close("linear.backward", "dW", read(be, fc->weight_grad), g.dw, kLinearTol);
    check_close("linear.backward", "db", read(be, fc->bias_grad), g.db, kLinearTol);
  }
}

// ---------------------------------------------------------------- loss --

TEST_CASE("cpu softmax cross-entropy: mean over valid rows and its gradient", "[ops][loss]") {
  const int64_t n = 6, k = 10;
  CpuBackend be(test_threads(true));
  Tensor* x = be.input(n, 4, 1, 1);
  auto fc = be.linear("fc", x, nullptr, k);  // only to get plain [N, K] logits
  auto loss = be.softmax_cross_entropy(fc->y, fc->dy);
  be.allocate();
  Rng rng(5);

  struct Case {
    int valid;
    float grad_scale;
  };
  for (const Case& c : std::vector<Case>{{6, 1.0f}, {4, 1.0f}, {1, 1024.0f}, {5, 65536.0f}}) {
    INFO("valid " << c.valid << " of " << n << ", grad_scale " << c.grad_scale);
    const auto logits = rng.floats(n * k, -4, 4);
    std::vector<int32_t> labels(n);
    for (auto& l : labels) l = static_cast<int32_t>(rng.below(k));
    // Make row 0's label its largest logit so `correct` is not always 0.
    labels[0] = static_cast<int32_t>(
        std::max_element(logits.begin(), logits.begin() + k) - logits.begin());
    write(be, fc->y, logits);
    be.write_labels(labels);
    // Garbage in dlogits: padded rows must come back as exact zeros.
    write(be, fc->dy, std::vector<float>(n * k, 7.0f));

    const auto want = ref::softmax_cross_entropy(n, k, to_double(logits), labels, c.valid,
                                                 c.grad_scale);
    loss->forward_backward(c.valid, c.grad_scale);
    auto r = loss->read_results();
    CHECK(r.rows == c.valid);
    CHECK(r.correct == want.correct);
    CHECK(r.loss_sum == Approx(want.loss_sum).epsilon(1e-9));
    CHECK(r.loss_sum / r.rows == Approx(want.loss_mean).epsilon(1e-9));
    const auto dl = read(be, fc->dy);
    check_close("loss.dlogits", "dlogits", dl, want.dlogits,
                Tol{1e-7 * c.grad_scale, 1e-6});
    for (int64_t i = c.valid * k; i < n * k; ++i) REQUIRE(dl[i] == 0.0f);

    loss->forward(c.valid);  // evaluation: same loss and hits
    r = loss->read_results();
    CHECK(r.rows == c.valid);
    CHECK(r.correct == want.correct);
    CHECK(r.loss_sum == Approx(want.loss_sum).epsilon(1e-9));
  }

  SECTION("a label outside [0, K) is an error") {
    std::vector<int32_t> labels(n, 0);
    labels[2] = static_cast<int32_t>(k);
    be.write_labels(labels);
    CHECK_THROWS_AS(loss->forward_backward(n, 1.0f), std::runtime_error);
    labels[2] = -1;
    be.write_labels(labels);
    CHECK_THROWS_AS(loss->forward(n), std::runtime_error);
  }
}

TEST_CASE("cpu load_batch normalises images, zeroes padded rows and writes labels",
          "[ops][loss]") {
  const int64_t n = 3, c = 3, h = 4, w = 5;
  CpuBackend be(test_threads(true));
  Tensor* x = be.input(n, c, h, w);
  auto pool = be.global_avg_pool("avgpool", x, nullptr);
  auto fc = be.linear("fc", pool->y, nullptr, 2);
  auto loss = be.softmax_cross_entropy(fc->y, fc->dy);
  be.allocate();
  Rng rng(11);
  std::vector<uint8_t> images(n * c * h * w);
  for (auto& p : images) p = static_cast<uint8_t>(rng.below(256));
  const std::vector<int32_t> labels = {1, 0, 1};
  const std::vector<float> mean = {0.49f, 0.48f, 0.45f}, std = {0.25f, 0.24f, 0.26f};
  const int count = 2;
  be.load_batch(images.data(), labels.data(), count, mean, std, nullptr);
  ref::Vec want(n * c * h * w, 0.0);
  for (int64_t i = 0; i < count * c * h * w; ++i) {
    const int64_t ch = (i / (h * w)) % c;
    want[i] = (images[i] / 255.0 - mean[ch]) / std[ch];
  }
  check_close("load_batch", "normalised input", read(be, x), want, Tol{1e-6, 1e-6});
  const int32_t* got = static_cast<const int32_t*>(loss->labels->data);
  CHECK(got[0] == 1);
  CHECK(got[1] == 0);
  CHECK(got[2] == 0);  // beyond count
}

// ----------------------------------------------------------- pointwise --

TEST_CASE("cpu pointwise add_inplace and copy, plain and blocked", "[ops][pointwise]") {
  Rng rng(3);
  for (bool blocked : {false, true}) {
    CpuBackend be(test_threads(!blocked));
    Activation in = make_activation(be, 3, 5, 5, 7, blocked);
    Tensor* other = be.tensor_like(in.x, "other", TensorRole::activation);
    Tensor* third = be.tensor_like(in.x, "third", TensorRole::activation);
    be.allocate();
    INFO("layout " << layout_of(in.x));
    const auto a = rng.floats(in.x->numel(), -1, 1), b = rng.floats(in.x->numel(), -1, 1);
    write(be, in.x, a);
    write(be, other, b);
    be.pointwise().add_inplace(in.x, other);
    ref::Vec sum(a.size());
    for (size_t i = 0; i < a.size(); ++i) sum[i] = static_cast<double>(a[i]) + b[i];
    check_close("pointwise", "a += b", read(be, in.x), sum, kOneRounding);
    check_close("pointwise", "b unchanged", read(be, other), to_double(b), kExact);
    be.pointwise().copy(third, other);
    check_close("pointwise", "copy", read(be, third), to_double(b), kExact);
  }
  SECTION("tensors of different layouts are refused") {
    CpuBackend be(test_threads(false));
    Tensor* plain = be.input(2, 5, 4, 4);
    ConvShape sh{.n = 2, .c = 5, .h = 4, .w = 4, .k = 5, .r = 1, .s = 1, .stride = 1, .pad = 0};
    auto conv = be.conv("conv", sh, plain, nullptr);
    be.allocate();
    REQUIRE(layout_of(conv->y) != layout_of(plain));
    CHECK_THROWS_AS(be.pointwise().add_inplace(conv->y, plain), std::logic_error);
    CHECK_THROWS_AS(be.pointwise().copy(plain, conv->y), std::logic_error);
  }
}

// ----------------------------------------------------------- optimizer --

namespace {

// A few parameters of different kinds and layouts: a 3x3 conv weight (in
// oneDNN's blocked layout, output channels padded to the block), BN
// gamma/beta, fc weight and bias. The ops are never run; parameters and
// gradients are written directly.
struct ParamModel {
  CpuBackend be;
  Activation in;
  std::unique_ptr<xrun::ConvOp> conv;
  std::unique_ptr<xrun::BatchNormOp> bn;
  std::unique_ptr<xrun::PoolOp> pool;
  std::unique_ptr<xrun::LinearOp> fc;
  std::vector<std::pair<Tensor*, Tensor*>> params;  // parameter, gradient

  explicit ParamModel(int threads) : be(threads) {
    in = make_activation(be, 2, 3, 5, 5, false);
    ConvShape sh{.n = 2, .c = 3, .h = 5, .w = 5, .k = 5, .r = 3, .s = 3, .stride = 1, .pad = 1};
    conv = be.conv("conv", sh, in.x, in.dx);
    bn = be.batch_norm("bn", conv->y, conv->dy, BnActivation::relu, nullptr, nullptr);
    pool = be.global_avg_pool("avgpool", bn->y, bn->dy);
    fc = be.linear("fc", pool->y, pool->dy, 4);
    params = {{conv->weight, conv->weight_grad},
              {bn->gamma, bn->gamma_grad},
              {bn->beta, bn->beta_grad},
              {fc->weight, fc->weight_grad},
              {fc->bias, fc->bias_grad}};
  }
};

using Values = std::vector<std::vector<float>>;  // one vector per parameter

Values random_values(Rng& rng, const ParamModel& m, float lo, float hi) {
  Values v;
  for (auto& [p, g] : m.params) v.push_back(rng.floats(p->numel(), lo, hi));
  return v;
}

}  // namespace

TEST_CASE("cpu optimizer: AdamW steps, state read/write round trip", "[ops][optimizer]") {
  ParamModel m(test_threads(true));
  xrun::OptimizerSettings s;
  s.name = "adamw";
  s.weight_decay = 0.1;
  auto opt = m.be.optimizer(s, false);
  m.be.allocate();
  REQUIRE(opt->state_names() == std::vector<std::string>{"exp_avg", "exp_avg_sq"});
  Rng rng(17);
  const ref::AdamW o{.lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1};
  const size_t np = m.params.size();

  Values p0 = random_values(rng, m, -1, 1);
  std::vector<ref::Vec> p(np), mom(np), sq(np);
  for (size_t i = 0; i < np; ++i) {
    write(m.be, m.params[i].first, p0[i]);
    p[i] = to_double(p0[i]);
    mom[i].assign(p[i].size(), 0.0);
    sq[i].assign(p[i].size(), 0.0);
  }
  for (int64_t step = 1; step <= 4; ++step) {
    // Step 3 runs with loss scaling: gradients arrive multiplied by 256.
    const float scale = step == 3 ? 256.0f : 1.0f;
    Values g = random_values(rng, m, -1, 1);
    for (size_t i = 0; i < np; ++i) {
      std::vector<float> scaled = g[i];
      for (auto& v : scaled) v *= scale;
      write(m.be, m.params[i].second, scaled);
    }
    if (step == 4) {
      // Resume: state written through write_state must be read back as is and
      // be what the next step uses.
      for (size_t i = 0; i < np; ++i) {
        const auto m_new = rng.floats(p[i].size(), -0.1f, 0.1f);
        const auto v_new = rng.floats(p[i].size(), 0.0f, 0.01f);
        opt->write_state(0, m.params[i].first, m_new);
        opt->write_state(1, m.params[i].first, v_new);
        std::vector<float> back(p[i].size());
        opt->read_state(0, m.params[i].first, back);
        CHECK(back == m_new);
        opt->read_state(1, m.params[i].first, back);
        CHECK(back == v_new);
        mom[i] = to_double(m_new);
        sq[i] = to_double(v_new);
      }
    }
    opt->step({.lr = o.lr, .step = step, .grad_scale = scale});
    for (size_t i = 0; i < np; ++i) {
      ref::adamw_step(o, step, p[i], to_double(g[i]), mom[i], sq[i]);
      INFO("step " << step << ", " << m.params[i].first->name);
      check_close("optimizer.adamw", "parameter", read(m.be, m.params[i].first), p[i],
                  kOptimizerTol);
      std::vector<float> st(p[i].size());
      opt->read_state(0, m.params[i].first, st);
      check_close("optimizer.adamw", "exp_avg", st, mom[i], kOptimizerTol);
      opt->read_state(1, m.params[i].first, st);
      check_close("optimizer.adamw", "exp_avg_sq", st, sq[i], kOptimizerTol);
    }
  }
}

TEST_CASE("cpu optimizer: SGD plain, momentum, nesterov, with a state round trip",
          "[ops][optimizer]") {
  struct Case {
    double momentum, weight_decay;
    bool nesterov;
  };
  Rng rng(23);
  const std::vector<Case> cases = {
      {0.0, 0.01, false}, {0.9, 5e-4, false}, {0.9, 1e-3, true}, {0.5, 0.0, true}};
  for (const Case& c : cases) {
    INFO("sgd momentum " << c.momentum << " wd " << c.weight_decay << " nesterov "
                         << c.nesterov);
    ParamModel m(test_threads(&c == &cases.front()));
    xrun::OptimizerSettings s;
    s.name = "sgd";
    s.momentum = c.momentum;
    s.weight_decay = c.weight_decay;
    s.nesterov = c.nesterov;
    auto opt = m.be.optimizer(s, false);
    m.be.allocate();
    const bool has_buffer = c.momentum != 0;
    CHECK(opt->state_names() ==
          (has_buffer ? std::vector<std::string>{"momentum_buffer"} : std::vector<std::string>{}));
    const ref::Sgd o{.lr = 0.05, .momentum = c.momentum, .weight_decay = c.weight_decay,
                     .nesterov = c.nesterov};
    const size_t np = m.params.size();
    Values p0 = random_values(rng, m, -1, 1);
    std::vector<ref::Vec> p(np), buf(np);
    for (size_t i = 0; i < np; ++i) {
      write(m.be, m.params[i].first, p0[i]);
      p[i] = to_double(p0[i]);
      buf[i].assign(p[i].size(), 0.0);
    }
    for (int64_t step = 1; step <= 4; ++step) {
      const float scale = step == 2 ? 128.0f : 1.0f;
      Values g = random_values(rng, m, -1, 1);
      for (size_t i = 0; i < np; ++i) {
        std::vector<float> scaled = g[i];
        for (auto& v : scaled) v *= scale;
        write(m.be, m.params[i].second, scaled);
      }
      if (step == 4 && has_buffer) {
        for (size_t i = 0; i < np; ++i) {
          const auto b_new = rng.floats(p[i].size(), -0.5f, 0.5f);
          opt->write_state(0, m.params[i].first, b_new);
          std::vector<float> back(p[i].size());
          opt->read_state(0, m.params[i].first, back);
          CHECK(back == b_new);
          buf[i] = to_double(b_new);
        }
      }
      opt->step({.lr = o.lr, .step = step, .grad_scale = scale});
      for (size_t i = 0; i < np; ++i) {
        ref::sgd_step(o, step == 1, p[i], to_double(g[i]), buf[i]);
        INFO("step " << step << ", " << m.params[i].first->name);
        check_close("optimizer.sgd", "parameter", read(m.be, m.params[i].first), p[i],
                    kOptimizerTol);
        if (has_buffer) {
          std::vector<float> st(p[i].size());
          opt->read_state(0, m.params[i].first, st);
          check_close("optimizer.sgd", "momentum_buffer", st, buf[i], kOptimizerTol);
        }
      }
    }
  }
}

TEST_CASE("cpu optimizer: gradient accumulation sums, zero_grad clears", "[ops][optimizer]") {
  ParamModel m(test_threads(true));
  auto opt = m.be.optimizer(xrun::OptimizerSettings{}, true);
  auto no_acc = m.be.optimizer(xrun::OptimizerSettings{}, false);
  m.be.allocate();
  Rng rng(31);
  const size_t np = m.params.size();
  std::vector<ref::Vec> sum(np);
  for (int micro = 0; micro < 3; ++micro) {
    Values g = random_values(rng, m, -1, 1);
    for (size_t i = 0; i < np; ++i) {
      write(m.be, m.params[i].second, g[i]);
      if (micro == 0) sum[i].assign(g[i].size(), 0.0);
      for (size_t j = 0; j < g[i].size(); ++j) sum[i][j] += g[i][j];
    }
    micro == 0 ? opt->accumulate_begin() : opt->accumulate_add();
  }
  write(m.be, m.params[0].second, std::vector<float>(m.params[0].second->numel(), 5.0f));
  opt->accumulate_end();
  for (size_t i = 0; i < np; ++i) {
    INFO(m.params[i].second->name);
    // Two fp32 additions of O(1) values.
    check_close("optimizer.accumulate", "accumulated gradient", read(m.be, m.params[i].second),
                sum[i], Tol{2.4e-7, 2.4e-7});
  }
  opt->zero_grad();
  for (size_t i = 0; i < np; ++i)
    CHECK(read(m.be, m.params[i].second) == std::vector<float>(m.params[i].second->numel(), 0));
  CHECK_THROWS_AS(no_acc->accumulate_begin(), std::logic_error);
}

// A second accumulation after a step starts afresh: accumulate_begin copies
// the gradient in, so nothing of the last step's sum is left (an `acc +=`
// there piles stale gradients up from the second step on; the case above,
// one accumulation from a zeroed region, cannot tell the two apart).
TEST_CASE("cpu optimizer: each accumulation starts from the first micro-batch alone",
          "[ops][optimizer]") {
  ParamModel m(test_threads(true));
  auto opt = m.be.optimizer(xrun::OptimizerSettings{}, true);
  m.be.allocate();
  Rng rng(32);
  const size_t np = m.params.size();
  for (int round = 0; round < 3; ++round) {
    std::vector<ref::Vec> sum(np);
    for (int micro = 0; micro < 2; ++micro) {
      Values g = random_values(rng, m, -1, 1);
      for (size_t i = 0; i < np; ++i) {
        write(m.be, m.params[i].second, g[i]);
        if (micro == 0) sum[i].assign(g[i].size(), 0.0);
        for (size_t j = 0; j < g[i].size(); ++j) sum[i][j] += g[i][j];
      }
      micro == 0 ? opt->accumulate_begin() : opt->accumulate_add();
    }
    opt->accumulate_end();
    for (size_t i = 0; i < np; ++i) {
      INFO("round " << round << ", " << m.params[i].second->name);
      check_close("optimizer.accumulate", "accumulated gradient", read(m.be, m.params[i].second),
                  sum[i], Tol{2.4e-7, 2.4e-7});
    }
  }
}

// Batch norm where the mean dwarfs the spread: every channel near 100 with a
// standard deviation of 0.01 (a variance of 1e-4, ten times eps). Summing x
// and x^2 directly would cancel: x^2 ~ 1e4 holds only ~1e-3 of absolute
// precision in fp32, ten times the variance itself. batchnorm.cpp sums
// x - shift (a sample of the channel) instead, and keeps the mean as a float
// pair so x - mean is exact; this case checks both against the float64
// reference on the same float inputs, in every layout, for y, the running
// statistics, dx, dgamma and dbeta. Tolerances: y, dgamma, dbeta are O(1) and
// take the O(1) bounds above; dx is gamma / std ~ 100 times dy, so its
// bound is kBnTol scaled by 100.
TEST_CASE("cpu batch norm: mean 100, std 0.01, against float64", "[ops][batchnorm]") {
  struct Shape {
    int64_t n, c, h, w;
  };
  const std::vector<Shape> shapes = {{4, 5, 6, 6}, {2, 16, 5, 5}, {3, 24, 3, 3}, {8, 32, 1, 1}};
  Rng rng(100);
  for (const Shape& s : shapes) {
    for (In layout : {In::plain, In::blocked, In::nhwc}) {
      if (layout == In::plain && s.c > kMaxInputChannels) continue;
      for (BnActivation act : {BnActivation::none, BnActivation::relu}) {
        CpuBackend be(test_threads(&s == &shapes.front()));
        Activation in = make_activation(be, s.n, s.c, s.h, s.w, layout);
        auto bn = be.batch_norm("bn", in.x, in.dx, act, nullptr, nullptr);
        be.allocate();
        INFO("batch norm n" << s.n << " c" << s.c << " " << s.h << "x" << s.w << ", act "
                            << act_name(act) << ", layout " << layout_of(in.x));
        const int64_t hw = s.h * s.w;
        // Channel means in [99.5, 100.5]; uniform noise of std 0.01.
        const std::vector<float> offset = rng.floats(s.c, 99.5f, 100.5f);
        std::vector<float> x(static_cast<size_t>(s.n * s.c * hw));
        for (int64_t b = 0; b < s.n; ++b)
          for (int64_t ch = 0; ch < s.c; ++ch)
            for (int64_t p = 0; p < hw; ++p)
              x[(b * s.c + ch) * hw + p] = offset[ch] + 0.01f * rng.uniform(-1.7320508f, 1.7320508f);
        const auto gamma = rng.floats(s.c, 0.5f, 1.5f);
        const auto beta = rng.floats(s.c, -0.5f, 0.5f);
        const auto rm0 = rng.floats(s.c, -0.5f, 0.5f);
        const auto rv0 = rng.floats(s.c, 0.5f, 2.0f);
        const auto dy = rng.floats(in.x->numel(), -1, 1);
        write(be, in.x, x);
        write(be, bn->gamma, gamma);
        write(be, bn->beta, beta);
        write(be, bn->running_mean, rm0);
        write(be, bn->running_var, rv0);
        ref::Vec rm = to_double(rm0), rv = to_double(rv0);

        bn->forward_train();
        const ref::BnShape sh{s.n, s.c, hw};
        const auto f = ref::batch_norm_train_forward(sh, to_double(x), to_double(gamma),
                                                     to_double(beta), act);
        ref::batch_norm_update_running(sh, f, rm, rv);
        check_close("bn.large_mean", "y", read(be, bn->y), f.y, kBnTol);
        check_close("bn.large_mean", "running_mean", read(be, bn->running_mean), rm, kRunningTol);
        check_close("bn.large_mean", "running_var", read(be, bn->running_var), rv, kRunningTol);

        write(be, bn->dy, dy);
        bn->backward();
        const auto g = ref::batch_norm_backward(sh, to_double(x), to_double(gamma), f,
                                                to_double(dy), act);
        check_close("bn.large_mean.dx", "dx", read(be, in.dx), g.dx,
                    Tol{100 * kBnTol.atol, kBnTol.rtol});
        check_close("bn.large_mean", "dgamma", read(be, bn->gamma_grad), g.dgamma,
                    kBnParamGradTol);
        check_close("bn.large_mean", "dbeta", read(be, bn->beta_grad), g.dbeta, kBnParamGradTol);
      }
    }
  }
}
