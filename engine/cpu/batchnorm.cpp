// engine/cpu/batchnorm.cpp: batch norm, training and inference, with its
// activation fused in (none, ReLU, or residual add + ReLU): one pass over the
// data for the statistics and one to write y; one pass for the gradient sums
// and one to write dx. xrun's own loops rather than oneDNN's: oneDNN 2.6 sums
// each channel sequentially in fp32, which made dgamma and dbeta 4-35x noisier
// than a careful fp32 (bench/README.md, issue #13). Here:
//   - per-channel sums are taken in double, one partial sum per (image,
//     channel) added in image order afterwards, so the result does not depend
//     on the thread count;
//   - the variance comes from one pass of sums shifted by a sample of the
//     channel (in double, no cancellation to speak of);
//   - the mean is kept as a float pair hi + lo, so x - mean is exact when the
//     mean dwarfs the spread, and in double for the gradient sums.
// The loops run over any layout whose channels sit in blocks of contiguous
// lanes at evenly spaced positions: nChw16c / nChw8c (what convolutions hand
// over), nhwc (blocks of 16 or 8 of its C lanes, or one block of C when C is
// no multiple of 8; what a conv run as GEMMs hands over) and nchw (C blocks
// of one lane). The blocks are shared out among the threads. Padded
// lanes of a blocked layout get y = 0 and dx = 0. Running statistics are
// updated PyTorch's way (momentum 0.1, unbiased variance).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "engine/cpu/cpu_backend.h"

namespace xrun::cpu {

namespace {

using namespace dnnl;

// Where element (image i, channel block b, position p, lane l) lives:
// i * stride_n + b * stride_block + p * stride_p + l; channel = b * lanes + l.
// Blocked layouts have stride_p = lanes, nhwc has stride_p = C.
struct Geometry {
  int64_t n = 0, c = 0, hw = 0;
  int64_t lanes = 1, blocks = 0;
  int64_t stride_n = 0, stride_block = 0, stride_p = 0;
  int64_t padded_c() const { return blocks * lanes; }
  int64_t offset(int64_t i, int64_t b) const { return i * stride_n + b * stride_block; }
};

Geometry geometry_of(const memory::desc& md, const std::string& name) {
  const dnnl_compat::Layout d = dnnl_compat::layout_of(md);
  const dnnl_compat::Layout& bk = d;
  if (d.ndims != 4 || !d.blocked || d.offset0 != 0)
    throw std::logic_error(name + ": batch norm needs a dense 4-d activation");
  Geometry g;
  g.n = d.dims[0], g.c = d.dims[1], g.hw = d.dims[2] * d.dims[3];
  if (bk.inner_nblks() == 1 && bk.inner_idxs[0] == 1)
    g.lanes = bk.inner_blks[0];  // nChw16c, nChw8c
  else if (bk.inner_nblks() == 0 && bk.strides[1] == 1)
    g.lanes = g.c % 16 == 0 ? 16 : g.c % 8 == 0 ? 8 : g.c;  // nhwc
  else if (bk.inner_nblks() == 0)
    g.lanes = 1;  // nchw
  else
    throw std::logic_error(name + ": batch norm on an unsupported blocked layout");
  const bool nhwc = bk.inner_nblks() == 0 && bk.strides[1] == 1;
  g.stride_p = nhwc ? g.c : g.lanes;
  const int64_t h = d.dims[2], w = d.dims[3];
  if ((w > 1 && bk.strides[3] != g.stride_p) || (h > 1 && bk.strides[2] != w * g.stride_p))
    throw std::logic_error(name + ": batch norm needs H x W evenly spaced in each channel block");
  g.blocks = (g.c + g.lanes - 1) / g.lanes;
  g.stride_n = bk.strides[0];
  // per block of lanes: the outer channel stride, or (nhwc) the block's width
  g.stride_block = nhwc ? g.lanes : bk.strides[1];
  return g;
}

// ---- block kernels: one block of lanes, every image and position -------
// The loops work on groups of W = 16 or 8 lanes as GCC vectors (16 floats
// fill one AVX-512 register), or lane by lane (W = 1) when the lane count is
// not a multiple of 8. Each kernel is compiled per ISA
// (XRUN_VECTOR_CLONES). Sums run in a fixed order (image, then position),
// in double.

#define XRUN_ALWAYS_INLINE [[gnu::always_inline]] inline
// The vector helpers are always inlined, so no vector crosses a call; GCC
// still warns about the ABI a baseline clone would give such a call.
#pragma GCC diagnostic ignored "-Wpsabi"

template <int W>
struct Lanes;
template <>
struct Lanes<16> {
  typedef float F __attribute__((vector_size(64)));
  typedef double D __attribute__((vector_size(128)));
  XRUN_ALWAYS_INLINE static D wide(F v) { return __builtin_convertvector(v, D); }
};
template <>
struct Lanes<8> {
  typedef float F __attribute__((vector_size(32)));
  typedef double D __attribute__((vector_size(64)));
  XRUN_ALWAYS_INLINE static D wide(F v) { return __builtin_convertvector(v, D); }
};
template <>
struct Lanes<1> {
  using F = float;
  using D = double;
  XRUN_ALWAYS_INLINE static D wide(F v) { return v; }
};

template <class V, class E>
XRUN_ALWAYS_INLINE V load(const E* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class V, class E>
XRUN_ALWAYS_INLINE void store(E* p, V v) {
  std::memcpy(p, &v, sizeof v);
}

// Runs K<W, NC>::run(first_lane, args...) over a row of `lanes` lanes, in
// NC groups of W lanes per call.
template <template <int, int> class K, class... Args>
XRUN_ALWAYS_INLINE void by_lane_groups(int64_t lanes, Args... args) {
  if (lanes == 16) return K<16, 1>::run(0, args...);
  if (lanes == 8) return K<8, 1>::run(0, args...);
  if (lanes % 16 == 0) {
    for (int64_t l = 0; l < lanes; l += 16) K<16, 1>::run(l, args...);
    return;
  }
  if (lanes % 8 == 0) {
    for (int64_t l = 0; l < lanes; l += 8) K<8, 1>::run(l, args...);
    return;
  }
  for (int64_t l = 0; l < lanes; ++l) K<1, 1>::run(l, args...);
}

// Positions summed in float before the sum moves to double: short enough
// that the float rounding stays at one or two units in the last place.
constexpr int64_t kRun = 16;

// A block's elements: image i's rows start at i * stride_n; hw rows of
// `lanes` floats, stride_p apart.
struct Span {
  int64_t n, stride_n, hw, lanes, stride_p;
  int64_t row(int64_t i, int64_t p) const { return i * stride_n + p * stride_p; }
};

// Per-lane sums of (x - shift) and (x - shift)^2: in float over runs of up
// to kRun positions, then in double.
template <int W, int NC>
struct StatsKernel {
  XRUN_ALWAYS_INLINE static void run(int64_t l, Span s, const float* x, const float* shift,
                                     double* s1, double* s2) {
    using V = Lanes<W>;
    using F = typename V::F;
    typename V::D a1[NC] = {}, a2[NC] = {};
    F sh[NC];
    for (int c = 0; c < NC; ++c) sh[c] = load<F>(shift + l + c * W);
    for (int64_t i = 0; i < s.n; ++i)
      for (int64_t p0 = 0; p0 < s.hw; p0 += kRun) {
        F f1[NC] = {}, f2[NC] = {};
        for (int64_t p = p0; p < std::min(p0 + kRun, s.hw); ++p) {
          const float* xr = x + s.row(i, p) + l;
          for (int c = 0; c < NC; ++c) {
            const F d = load<F>(xr + c * W) - sh[c];
            f1[c] += d;
            f2[c] += d * d;
          }
        }
        for (int c = 0; c < NC; ++c) a1[c] += V::wide(f1[c]), a2[c] += V::wide(f2[c]);
      }
    for (int c = 0; c < NC; ++c) store(s1 + l + c * W, a1[c]), store(s2 + l + c * W, a2[c]);
  }
};

XRUN_VECTOR_CLONES
void stats_block(Span s, const float* x, const float* shift, double* s1, double* s2) {
  by_lane_groups<StatsKernel>(s.lanes, s, x, shift, s1, s2);
}

// Per-channel float coefficients of the normalisation: y = ((x - hi) - lo) *
// scale + beta (then the activation).
struct ApplyCoef {
  const float *hi, *lo, *scale, *beta;
  ApplyCoef at(int64_t l) const { return {hi + l, lo + l, scale + l, beta + l}; }
};

template <int W, int NC>
struct ApplyKernel {
  template <BnActivation A>
  XRUN_ALWAYS_INLINE static void body(int64_t l, Span s, const float* x, const float* r,
                                      float* y, ApplyCoef k) {
    using F = typename Lanes<W>::F;
    F hi[NC], lo[NC], scale[NC], beta[NC];
    for (int c = 0; c < NC; ++c) {
      const int64_t o = l + c * W;
      hi[c] = load<F>(k.hi + o), lo[c] = load<F>(k.lo + o);
      scale[c] = load<F>(k.scale + o), beta[c] = load<F>(k.beta + o);
    }
    for (int64_t i = 0; i < s.n; ++i)
      for (int64_t p = 0; p < s.hw; ++p)
        for (int c = 0; c < NC; ++c) {
          const int64_t o = s.row(i, p) + l + c * W;
          F v = ((load<F>(x + o) - hi[c]) - lo[c]) * scale[c] + beta[c];
          if constexpr (A == BnActivation::add_relu) v += load<F>(r + o);
          if constexpr (A != BnActivation::none) v = v < F{} ? F{} : v;
          store(y + o, v);
        }
  }
  XRUN_ALWAYS_INLINE static void run(int64_t l, BnActivation act, Span s, const float* x,
                                     const float* r, float* y, ApplyCoef k) {
    switch (act) {
      case BnActivation::none: return body<BnActivation::none>(l, s, x, r, y, k);
      case BnActivation::relu: return body<BnActivation::relu>(l, s, x, r, y, k);
      case BnActivation::add_relu: return body<BnActivation::add_relu>(l, s, x, r, y, k);
    }
  }
};

XRUN_VECTOR_CLONES
void apply_block(BnActivation act, Span s, const float* x, const float* r, float* y,
                 ApplyCoef k) {
  by_lane_groups<ApplyKernel>(s.lanes, act, s, x, r, y, k);
}

// The tensors of a block's backward, each at the block's first element.
struct GradBlock {
  const float *x, *y, *dy;
  float *dres, *dx;
};

// The gradient reaching the normalisation at element o: dy, or dy where
// y > 0 (ReLU and add + ReLU, whose y is the activation's output).
template <class F, BnActivation A>
XRUN_ALWAYS_INLINE F masked_grad(const GradBlock& t, int64_t o) {
  const F d = load<F>(t.dy + o);
  if constexpr (A == BnActivation::none) return d;
  else return load<F>(t.y + o) > F{} ? d : F{};
}

// Per-lane sums of g and g * (x - mean), g the masked gradient, in float
// over runs of up to kRun positions, then in double; x - mean is taken as
// (x - hi) - lo. With add_relu, g is also written to dres (the residual's
// gradient).
template <int W, int NC>
struct GradSumsKernel {
  template <BnActivation A>
  XRUN_ALWAYS_INLINE static void body(int64_t l, Span s, GradBlock t, const float* mean_hi,
                                      const float* mean_lo, double* s1, double* s2) {
    using V = Lanes<W>;
    using F = typename V::F;
    typename V::D a1[NC] = {}, a2[NC] = {};
    F hi[NC], lo[NC];
    for (int c = 0; c < NC; ++c)
      hi[c] = load<F>(mean_hi + l + c * W), lo[c] = load<F>(mean_lo + l + c * W);
    for (int64_t i = 0; i < s.n; ++i)
      for (int64_t p0 = 0; p0 < s.hw; p0 += kRun) {
        F f1[NC] = {}, f2[NC] = {};
        for (int64_t p = p0; p < std::min(p0 + kRun, s.hw); ++p)
          for (int c = 0; c < NC; ++c) {
            const int64_t o = s.row(i, p) + l + c * W;
            const F g = masked_grad<F, A>(t, o);
            if constexpr (A == BnActivation::add_relu) store(t.dres + o, g);
            f1[c] += g;
            f2[c] += g * ((load<F>(t.x + o) - hi[c]) - lo[c]);
          }
        for (int c = 0; c < NC; ++c) a1[c] += V::wide(f1[c]), a2[c] += V::wide(f2[c]);
      }
    for (int c = 0; c < NC; ++c) store(s1 + l + c * W, a1[c]), store(s2 + l + c * W, a2[c]);
  }
  XRUN_ALWAYS_INLINE static void run(int64_t l, BnActivation act, Span s, GradBlock t,
                                     const float* hi, const float* lo, double* s1, double* s2) {
    switch (act) {
      case BnActivation::none: return body<BnActivation::none>(l, s, t, hi, lo, s1, s2);
      case BnActivation::relu: return body<BnActivation::relu>(l, s, t, hi, lo, s1, s2);
      case BnActivation::add_relu: return body<BnActivation::add_relu>(l, s, t, hi, lo, s1, s2);
    }
  }
};

XRUN_VECTOR_CLONES
void grad_sums_block(BnActivation act, Span s, GradBlock t, const float* hi, const float* lo,
                     double* s1, double* s2) {
  by_lane_groups<GradSumsKernel>(s.lanes, act, s, t, hi, lo, s1, s2);
}

// dx = a * ((g - k1) - ((x - hi) - lo) * k2), per channel a = gamma * invstd,
// k1 = dbeta / M, k2 = invstd^2 * sum(g * (x - mean)) / M.
struct GradCoef {
  const float *hi, *lo, *a, *k1, *k2;
  GradCoef at(int64_t l) const { return {hi + l, lo + l, a + l, k1 + l, k2 + l}; }
};

template <int W, int NC>
struct GradInputKernel {
  template <BnActivation A>
  XRUN_ALWAYS_INLINE static void body(int64_t l, Span s, GradBlock t, GradCoef k) {
    using F = typename Lanes<W>::F;
    F hi[NC], lo[NC], a[NC], k1[NC], k2[NC];
    for (int c = 0; c < NC; ++c) {
      const int64_t o = l + c * W;
      hi[c] = load<F>(k.hi + o), lo[c] = load<F>(k.lo + o), a[c] = load<F>(k.a + o);
      k1[c] = load<F>(k.k1 + o), k2[c] = load<F>(k.k2 + o);
    }
    for (int64_t i = 0; i < s.n; ++i)
      for (int64_t p = 0; p < s.hw; ++p)
        for (int c = 0; c < NC; ++c) {
          const int64_t o = s.row(i, p) + l + c * W;
          F g;
          if constexpr (A == BnActivation::add_relu)
            g = load<F>(t.dres + o);  // written by the sums pass
          else
            g = masked_grad<F, A>(t, o);
          const F xc = (load<F>(t.x + o) - hi[c]) - lo[c];
          store(t.dx + o, a[c] * ((g - k1[c]) - xc * k2[c]));
        }
  }
  XRUN_ALWAYS_INLINE static void run(int64_t l, BnActivation act, Span s, GradBlock t,
                                     GradCoef k) {
    switch (act) {
      case BnActivation::none: return body<BnActivation::none>(l, s, t, k);
      case BnActivation::relu: return body<BnActivation::relu>(l, s, t, k);
      case BnActivation::add_relu: return body<BnActivation::add_relu>(l, s, t, k);
    }
  }
};

XRUN_VECTOR_CLONES
void grad_input_block(BnActivation act, Span s, GradBlock t, GradCoef k) {
  by_lane_groups<GradInputKernel>(s.lanes, act, s, t, k);
}

// Splits a double into floats hi + lo (hi the nearest float, lo the rest).
void split(double v, float& hi, float& lo) {
  hi = static_cast<float>(v);
  lo = static_cast<float>(v - hi);
}

class CpuBatchNorm final : public BatchNormOp, public CpuOp {
 public:
  CpuBatchNorm(CpuBackend& be, const std::string& name, CpuTensor* x, CpuTensor* dx,
               BnActivation act, CpuTensor* residual, CpuTensor* d_residual)
      : be_(be), x_(x), dx_(dx), act_(act), residual_(residual), d_residual_(d_residual),
        geo_(geometry_of(x->md, name)) {
    if (x->dtype != DType::f32) throw std::logic_error(name + ": batch norm needs fp32");
    if (dx && !(dx->md == x->md)) throw std::logic_error(name + ": dx layout differs from x");
    if (act == BnActivation::add_relu && (!residual || !d_residual))
      throw std::logic_error(name + ": add_relu needs the residual and its gradient");
    const int64_t c = geo_.c, cp = geo_.padded_c();
    count_ = geo_.n * geo_.hw;
    const memory::desc vec = plain_md({c});

    y = be.declare(name + ".y", x->dims, x->md, TensorRole::activation);
    dy = be.declare(name + ".dy", x->dims, x->md, TensorRole::activation_grad);
    auto [g, gg] = be.declare_parameter(name + ".weight", {c}, vec);
    auto [b, bg] = be.declare_parameter(name + ".bias", {c}, vec);
    gamma = g, gamma_grad = gg, beta = b, beta_grad = bg;
    running_mean = be.declare(name + ".running_mean", {c}, vec, TensorRole::state);
    running_var = be.declare(name + ".running_var", {c}, vec, TensorRole::state);
    // The batch mean and 1/sqrt(var + eps) in double, from forward to backward.
    batch_stats_ = be.declare(name + ".batch_stats", {4 * cp}, plain_md({4 * cp}),
                              TensorRole::workspace);
    be.need_scratchpad(plain_md({2 * 2 * cp + 6 * cp}));  // see sums()
    // A residual in another layout than x (an identity shortcut from a
    // blocked max pool into a block whose convolutions hand over NHWC:
    // resnet18/34's layer1 on 2x2 maps) is read through a copy in x's
    // layout, and its gradient written back through one.
    if (act == BnActivation::add_relu) {
      residual_in_.make(be.engine(), residual->md, x->md);
      d_residual_out_.make(be.engine(), x->md, d_residual->md);
      if (residual_in_.needed)
        residual_copy_ = be.declare(name + ".residual_in_x_layout", x->dims, x->md,
                                    TensorRole::activation);
      if (d_residual_out_.needed)
        d_residual_copy_ = be.declare(name + ".d_residual_in_x_layout", x->dims, x->md,
                                      TensorRole::activation_grad);
    }
    be.register_op(this);
  }

  void bind() override {
    if (residual_copy_) residual_in_.bind(residual_->mem, residual_copy_->mem);
    if (d_residual_copy_) d_residual_out_.bind(d_residual_copy_->mem, d_residual_->mem);
  }

  // Each channel block is finished by one thread, statistics to output,
  // while its data is still in cache.
  void forward_train() override {
    const Geometry& g = geo_;
    const int64_t cp = g.padded_c();
    const float* x = f32(x_);
    float* k = coefficients();
    const ApplyCoef coef{k, k + cp, k + 2 * cp, k + 3 * cp};
    float* shift = k + 5 * cp;  // a value of each channel: sums of x - shift
    double* s1 = sums();
    double* s2 = s1 + cp;
    residual_in_.run(be_.stream());
    each_block([&](int64_t b) {
      const int64_t l = b * g.lanes, o = g.offset(0, b);
      for (int64_t ch = l; ch < l + g.lanes; ++ch) shift[ch] = x[o + ch - l];
      stats_block(span(), x + o, shift + l, s1 + l, s2 + l);
      for (int64_t ch = l; ch < l + g.lanes; ++ch) finish_statistics(ch);
      apply_block(act_, span(), x + o, residual_input(o), f32(y) + o, coef.at(l));
    });
  }

  void forward_infer() override {
    const int64_t cp = geo_.padded_c();
    const float* gm = f32(gamma);
    const float* bt = f32(beta);
    const float* rm = f32(running_mean);
    const float* rv = f32(running_var);
    float* k = coefficients();
    float *hi = k, *lo = k + cp, *scale = k + 2 * cp, *shifted_beta = k + 3 * cp;
    for (int64_t ch = 0; ch < cp; ++ch) {
      const bool real = ch < geo_.c;
      hi[ch] = real ? rm[ch] : 0;
      lo[ch] = 0;
      scale[ch] = real ? static_cast<float>(gm[ch] / std::sqrt(double{rv[ch]} + kBatchNormEps))
                       : 0;
      shifted_beta[ch] = real ? bt[ch] : 0;
    }
    const ApplyCoef coef{hi, lo, scale, shifted_beta};
    residual_in_.run(be_.stream());
    each_block([&](int64_t b) {
      const int64_t o = geo_.offset(0, b);
      apply_block(act_, span(), f32(x_) + o, residual_input(o), f32(y) + o,
                  coef.at(b * geo_.lanes));
    });
  }

  void backward() override {
    if (!dx_) throw std::logic_error("batch norm backward without dx");
    const Geometry& g = geo_;
    const int64_t cp = g.padded_c();
    float* k = coefficients();
    const GradCoef coef{k, k + cp, k + 2 * cp, k + 3 * cp, k + 4 * cp};
    double* s1 = sums();
    double* s2 = s1 + cp;
    each_block([&](int64_t b) {
      const int64_t l = b * g.lanes;
      for (int64_t ch = l; ch < l + g.lanes; ++ch)
        split(batch_mean()[ch], k[ch], k[cp + ch]);  // coef.hi, coef.lo
      grad_sums_block(act_, span(), grad_block(b), coef.hi + l, coef.lo + l, s1 + l, s2 + l);
      for (int64_t ch = l; ch < l + g.lanes; ++ch) finish_gradients(ch);
      grad_input_block(act_, span(), grad_block(b), coef.at(l));
    });
    d_residual_out_.run(be_.stream());
  }

 private:
  // Channel ch's mean and 1/sqrt(var + eps) from its sums, the running
  // statistics' update, and its coefficients for y (all zero for padding).
  void finish_statistics(int64_t ch) {
    const int64_t cp = geo_.padded_c();
    float* k = coefficients();
    float &hi = k[ch], &lo = k[cp + ch], &scale = k[2 * cp + ch], &shifted_beta = k[3 * cp + ch];
    double &mean = batch_mean()[ch], &invstd = batch_invstd()[ch];
    if (ch >= geo_.c) {
      mean = invstd = 0, hi = lo = scale = shifted_beta = 0;
      return;
    }
    const double m = static_cast<double>(count_);
    const double d = sums()[ch] / m;
    const double var = std::max(sums()[cp + ch] / m - d * d, 0.0);
    mean = k[5 * cp + ch] + d;  // the shift plus the shifted mean
    invstd = 1.0 / std::sqrt(var + kBatchNormEps);
    split(mean, hi, lo);
    scale = static_cast<float>(f32(gamma)[ch] * invstd);
    shifted_beta = f32(beta)[ch];
    float& rm = f32(running_mean)[ch];
    float& rv = f32(running_var)[ch];
    const double unbias = count_ > 1 ? m / (m - 1) : 1.0;
    rm = static_cast<float>((1 - kBatchNormMomentum) * rm + kBatchNormMomentum * mean);
    rv = static_cast<float>((1 - kBatchNormMomentum) * rv + kBatchNormMomentum * var * unbias);
  }

  // Channel ch's dgamma and dbeta from its sums, and its coefficients for dx.
  void finish_gradients(int64_t ch) {
    const int64_t cp = geo_.padded_c();
    float* k = coefficients();
    float &a = k[2 * cp + ch], &k1 = k[3 * cp + ch], &k2 = k[4 * cp + ch];
    if (ch >= geo_.c) {
      a = k1 = k2 = 0;
      return;
    }
    const double m = static_cast<double>(count_);
    const double sg = sums()[ch], sgx = sums()[cp + ch], invstd = batch_invstd()[ch];
    f32(beta_grad)[ch] = static_cast<float>(sg);
    f32(gamma_grad)[ch] = static_cast<float>(sgx * invstd);
    a = static_cast<float>(f32(gamma)[ch] * invstd);
    k1 = static_cast<float>(sg / m);
    k2 = static_cast<float>(sgx * invstd * invstd / m);
  }

  static float* f32(Tensor* t) { return static_cast<float*>(t->data); }
  Span span() const { return {geo_.n, geo_.stride_n, geo_.hw, geo_.lanes, geo_.stride_p}; }
  GradBlock grad_block(int64_t b) {
    const int64_t o = geo_.offset(0, b);
    const bool add = act_ == BnActivation::add_relu;
    CpuTensor* dres = d_residual_copy_ ? d_residual_copy_ : d_residual_;
    return {f32(x_) + o, f32(y) + o, f32(dy) + o, add ? f32(dres) + o : nullptr, f32(dx_) + o};
  }
  // Scratch, per channel: two sums in double (s1, then s2), then six floats:
  // five coefficients (hi, lo, then scale and beta for y or a, k1, k2 for
  // dx) and the statistics' shift.
  double* sums() { return static_cast<double*>(be_.scratchpad().get_data_handle()); }
  float* coefficients() { return reinterpret_cast<float*>(sums() + 2 * geo_.padded_c()); }
  double* batch_mean() { return static_cast<double*>(batch_stats_->data); }
  double* batch_invstd() { return batch_mean() + geo_.padded_c(); }

  // fn(block) for every channel block, on all threads; each block's sums
  // are its own, so the result does not depend on the thread count.
  template <class Fn>
  void each_block(Fn&& fn) {
    const int64_t blocks = geo_.blocks;
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < blocks; ++b) fn(b);
  }

  const float* residual_input(int64_t offset) {
    if (act_ != BnActivation::add_relu) return nullptr;
    return f32(residual_copy_ ? residual_copy_ : residual_) + offset;
  }

  CpuBackend& be_;
  CpuTensor* x_;
  CpuTensor* dx_;
  BnActivation act_;
  CpuTensor* residual_;
  CpuTensor* d_residual_;
  Geometry geo_;
  int64_t count_ = 1;  // values per channel: N*H*W
  CpuTensor* batch_stats_ = nullptr;
  // The residual and its gradient in x's layout, where theirs differs.
  Reorder residual_in_, d_residual_out_;
  CpuTensor* residual_copy_ = nullptr;
  CpuTensor* d_residual_copy_ = nullptr;
};

}  // namespace

std::unique_ptr<BatchNormOp> make_batch_norm(CpuBackend& be, const std::string& name,
                                             CpuTensor* x, CpuTensor* dx, BnActivation act,
                                             CpuTensor* residual, CpuTensor* d_residual) {
  return std::make_unique<CpuBatchNorm>(be, name, x, dx, act, residual, d_residual);
}

}  // namespace xrun::cpu
