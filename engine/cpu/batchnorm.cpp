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
// updated PyTorch's way (momentum 0.1, unbiased variance). Activations are
// f32 or bf16 (a bf16 run): bf16 values are widened on load and the results
// rounded to bf16 on store; every sum and coefficient stays fp32 / double.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <type_traits>

#include "engine/cpu/bf16.h"
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
  bool nhwc = false;
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
  g.nhwc = nhwc;
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
  typedef uint16_t H __attribute__((vector_size(32)));  // bf16 lanes
  typedef uint32_t U __attribute__((vector_size(64)));  // a float's bits
  XRUN_ALWAYS_INLINE static D wide(F v) { return __builtin_convertvector(v, D); }
};
template <>
struct Lanes<8> {
  typedef float F __attribute__((vector_size(32)));
  typedef double D __attribute__((vector_size(64)));
  typedef uint16_t H __attribute__((vector_size(16)));
  typedef uint32_t U __attribute__((vector_size(32)));
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

// W lanes of activation values of type E (float, or bf16_t) as floats:
// bf16 widened exactly; and back, bf16 rounded to nearest even (the vector
// form does not keep a NaN's payload; arithmetic's NaNs stay NaN).
template <class V, class E>
XRUN_ALWAYS_INLINE typename V::F ld(const E* p) {
  using F = typename V::F;
  if constexpr (std::is_same_v<E, float>) {
    return load<F>(p);
  } else if constexpr (std::is_same_v<F, float>) {
    return bf16_to_float(*p);
  } else {
    const typename V::U u = __builtin_convertvector(load<typename V::H>(p), typename V::U) << 16;
    return load<F>(&u);
  }
}
template <class V, class E>
XRUN_ALWAYS_INLINE void st(E* p, typename V::F v) {
  if constexpr (std::is_same_v<E, float>) {
    store(p, v);
  } else if constexpr (std::is_same_v<typename V::F, float>) {
    *p = float_to_bf16(v);
  } else {
    typename V::U u = load<typename V::U>(&v);
    u += 0x7fffu + ((u >> 16) & 1u);
    store(p, __builtin_convertvector(u >> 16, typename V::H));
  }
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
  template <class E>
  XRUN_ALWAYS_INLINE static void run(int64_t l, Span s, const E* x, const float* shift,
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
          const E* xr = x + s.row(i, p) + l;
          for (int c = 0; c < NC; ++c) {
            const F d = ld<V>(xr + c * W) - sh[c];
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
XRUN_VECTOR_CLONES
void stats_block(Span s, const bf16_t* x, const float* shift, double* s1, double* s2) {
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
  template <BnActivation A, class E>
  XRUN_ALWAYS_INLINE static void body(int64_t l, Span s, const E* x, const E* r, E* y,
                                      ApplyCoef k) {
    using V = Lanes<W>;
    using F = typename V::F;
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
          F v = ((ld<V>(x + o) - hi[c]) - lo[c]) * scale[c] + beta[c];
          if constexpr (A == BnActivation::add_relu) v += ld<V>(r + o);
          if constexpr (A != BnActivation::none) v = v < F{} ? F{} : v;
          st<V>(y + o, v);
        }
  }
  template <class E>
  XRUN_ALWAYS_INLINE static void run(int64_t l, BnActivation act, Span s, const E* x,
                                     const E* r, E* y, ApplyCoef k) {
    switch (act) {
      case BnActivation::none: return body<BnActivation::none, E>(l, s, x, r, y, k);
      case BnActivation::relu: return body<BnActivation::relu, E>(l, s, x, r, y, k);
      case BnActivation::add_relu: return body<BnActivation::add_relu, E>(l, s, x, r, y, k);
    }
  }
};

XRUN_VECTOR_CLONES
void apply_block(BnActivation act, Span s, const float* x, const float* r, float* y,
                 ApplyCoef k) {
  by_lane_groups<ApplyKernel>(s.lanes, act, s, x, r, y, k);
}
XRUN_VECTOR_CLONES
void apply_block(BnActivation act, Span s, const bf16_t* x, const bf16_t* r, bf16_t* y,
                 ApplyCoef k) {
  by_lane_groups<ApplyKernel>(s.lanes, act, s, x, r, y, k);
}

// The tensors of a block's backward, each at the block's first element.
template <class E>
struct GradBlock {
  const E *x, *y, *dy;
  E *dres, *dx;
};

// The gradient reaching the normalisation at element o: dy, or dy where
// y > 0 (ReLU and add + ReLU, whose y is the activation's output).
template <class V, BnActivation A, class E>
XRUN_ALWAYS_INLINE typename V::F masked_grad(const GradBlock<E>& t, int64_t o) {
  using F = typename V::F;
  const F d = ld<V>(t.dy + o);
  if constexpr (A == BnActivation::none) return d;
  else return ld<V>(t.y + o) > F{} ? d : F{};
}

// Per-lane sums of g and g * (x - mean), g the masked gradient, in float
// over runs of up to kRun positions, then in double; x - mean is taken as
// (x - hi) - lo. With add_relu, g is also written to dres (the residual's
// gradient).
template <int W, int NC>
struct GradSumsKernel {
  template <BnActivation A, class E>
  XRUN_ALWAYS_INLINE static void body(int64_t l, Span s, GradBlock<E> t, const float* mean_hi,
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
            const F g = masked_grad<V, A>(t, o);
            if constexpr (A == BnActivation::add_relu) st<V>(t.dres + o, g);  // exact: g is dy
            f1[c] += g;
            f2[c] += g * ((ld<V>(t.x + o) - hi[c]) - lo[c]);
          }
        for (int c = 0; c < NC; ++c) a1[c] += V::wide(f1[c]), a2[c] += V::wide(f2[c]);
      }
    for (int c = 0; c < NC; ++c) store(s1 + l + c * W, a1[c]), store(s2 + l + c * W, a2[c]);
  }
  template <class E>
  XRUN_ALWAYS_INLINE static void run(int64_t l, BnActivation act, Span s, GradBlock<E> t,
                                     const float* hi, const float* lo, double* s1, double* s2) {
    switch (act) {
      case BnActivation::none: return body<BnActivation::none, E>(l, s, t, hi, lo, s1, s2);
      case BnActivation::relu: return body<BnActivation::relu, E>(l, s, t, hi, lo, s1, s2);
      case BnActivation::add_relu:
        return body<BnActivation::add_relu, E>(l, s, t, hi, lo, s1, s2);
    }
  }
};

XRUN_VECTOR_CLONES
void grad_sums_block(BnActivation act, Span s, GradBlock<float> t, const float* hi,
                     const float* lo, double* s1, double* s2) {
  by_lane_groups<GradSumsKernel>(s.lanes, act, s, t, hi, lo, s1, s2);
}
XRUN_VECTOR_CLONES
void grad_sums_block(BnActivation act, Span s, GradBlock<bf16_t> t, const float* hi,
                     const float* lo, double* s1, double* s2) {
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
  template <BnActivation A, class E>
  XRUN_ALWAYS_INLINE static void body(int64_t l, Span s, GradBlock<E> t, GradCoef k) {
    using V = Lanes<W>;
    using F = typename V::F;
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
            g = ld<V>(t.dres + o);  // written by the sums pass
          else
            g = masked_grad<V, A>(t, o);
          const F xc = (ld<V>(t.x + o) - hi[c]) - lo[c];
          st<V>(t.dx + o, a[c] * ((g - k1[c]) - xc * k2[c]));
        }
  }
  template <class E>
  XRUN_ALWAYS_INLINE static void run(int64_t l, BnActivation act, Span s, GradBlock<E> t,
                                     GradCoef k) {
    switch (act) {
      case BnActivation::none: return body<BnActivation::none, E>(l, s, t, k);
      case BnActivation::relu: return body<BnActivation::relu, E>(l, s, t, k);
      case BnActivation::add_relu: return body<BnActivation::add_relu, E>(l, s, t, k);
    }
  }
};

XRUN_VECTOR_CLONES
void grad_input_block(BnActivation act, Span s, GradBlock<float> t, GradCoef k) {
  by_lane_groups<GradInputKernel>(s.lanes, act, s, t, k);
}
XRUN_VECTOR_CLONES
void grad_input_block(BnActivation act, Span s, GradBlock<bf16_t> t, GradCoef k) {
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
    if (x->dtype != DType::f32 && x->dtype != DType::bf16)
      throw std::logic_error(name + ": batch norm needs f32 or bf16 activations");
    bf16_ = x->dtype == DType::bf16;
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
    // NHWC with more than one block of lanes and more than a few pixels
    // (bf16 on AMX): tiles of about kTileBytes (each_tile).
    tiled_ = geo_.nhwc && geo_.blocks > 1 && geo_.hw > 4;
    if (tiled_) {
      constexpr int64_t kTileBytes = 256 * 1024;
      const int64_t row = cp * static_cast<int64_t>(dtype_size(x->dtype));
      tile_pixels_ = std::max<int64_t>(1, kTileBytes / row / kRun) * kRun;
      const int64_t doubles = geo_.n * tiles_per_image() * 2 * cp;
      partials_ = be.declare(name + ".tile_sums", {2 * doubles}, plain_md({2 * doubles}),
                             TensorRole::workspace);
    }
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
    if (bf16_) return forward_train_as<bf16_t>();
    forward_train_as<float>();
  }
  void forward_infer() override {
    if (bf16_) return forward_infer_as<bf16_t>();
    forward_infer_as<float>();
  }
  void backward() override {
    if (bf16_) return backward_as<bf16_t>();
    backward_as<float>();
  }

 private:
  template <class E>
  void forward_train_as() {
    const Geometry& g = geo_;
    const int64_t cp = g.padded_c();
    const E* x = data<E>(x_);
    float* k = coefficients();
    const ApplyCoef coef{k, k + cp, k + 2 * cp, k + 3 * cp};
    float* shift = k + 5 * cp;  // a value of each channel: sums of x - shift
    double* s1 = sums();
    double* s2 = s1 + cp;
    residual_in_.run(be_.stream());
    if (tiled_) {  // nhwc: channel ch's first value is x[ch]
      for (int64_t ch = 0; ch < cp; ++ch) shift[ch] = as_float(x[ch]);
      each_tile([&](int64_t t, int64_t o, Span sp) {
        double* part = partial_sums(t);
        for (int64_t b = 0, l = 0; b < g.blocks; ++b, l += g.lanes)
          stats_block(sp, x + o + l, shift + l, part + l, part + cp + l);
      });
      reduce_partial_sums();
      for (int64_t ch = 0; ch < cp; ++ch) finish_statistics(ch);
      each_tile([&](int64_t, int64_t o, Span sp) {
        for (int64_t b = 0, l = 0; b < g.blocks; ++b, l += g.lanes)
          apply_block(act_, sp, x + o + l, residual_input<E>(o + l), data<E>(y) + o + l,
                      coef.at(l));
      });
      return;
    }
    each_block([&](int64_t b) {
      const int64_t l = b * g.lanes, o = g.offset(0, b);
      for (int64_t ch = l; ch < l + g.lanes; ++ch) shift[ch] = as_float(x[o + ch - l]);
      stats_block(span(), x + o, shift + l, s1 + l, s2 + l);
      for (int64_t ch = l; ch < l + g.lanes; ++ch) finish_statistics(ch);
      apply_block(act_, span(), x + o, residual_input<E>(o), data<E>(y) + o, coef.at(l));
    });
  }

  template <class E>
  void forward_infer_as() {
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
    if (tiled_) {
      each_tile([&](int64_t, int64_t o, Span sp) {
        for (int64_t b = 0, l = 0; b < geo_.blocks; ++b, l += geo_.lanes)
          apply_block(act_, sp, data<E>(x_) + o + l, residual_input<E>(o + l),
                      data<E>(y) + o + l, coef.at(l));
      });
      return;
    }
    each_block([&](int64_t b) {
      const int64_t o = geo_.offset(0, b);
      apply_block(act_, span(), data<E>(x_) + o, residual_input<E>(o), data<E>(y) + o,
                  coef.at(b * geo_.lanes));
    });
  }

  template <class E>
  void backward_as() {
    if (!dx_) throw std::logic_error("batch norm backward without dx");
    const Geometry& g = geo_;
    const int64_t cp = g.padded_c();
    float* k = coefficients();
    const GradCoef coef{k, k + cp, k + 2 * cp, k + 3 * cp, k + 4 * cp};
    double* s1 = sums();
    double* s2 = s1 + cp;
    if (tiled_) {
      for (int64_t ch = 0; ch < cp; ++ch) split(batch_mean()[ch], k[ch], k[cp + ch]);
      each_tile([&](int64_t t, int64_t o, Span sp) {
        double* part = partial_sums(t);
        for (int64_t b = 0, l = 0; b < g.blocks; ++b, l += g.lanes)
          grad_sums_block(act_, sp, grad_block_at<E>(o + l), coef.hi + l, coef.lo + l,
                          part + l, part + cp + l);
      });
      reduce_partial_sums();
      for (int64_t ch = 0; ch < cp; ++ch) finish_gradients(ch);
      each_tile([&](int64_t, int64_t o, Span sp) {
        for (int64_t b = 0, l = 0; b < g.blocks; ++b, l += g.lanes)
          grad_input_block(act_, sp, grad_block_at<E>(o + l), coef.at(l));
      });
      d_residual_out_.run(be_.stream());
      return;
    }
    each_block([&](int64_t b) {
      const int64_t l = b * g.lanes;
      for (int64_t ch = l; ch < l + g.lanes; ++ch)
        split(batch_mean()[ch], k[ch], k[cp + ch]);  // coef.hi, coef.lo
      grad_sums_block(act_, span(), grad_block<E>(b), coef.hi + l, coef.lo + l, s1 + l,
                      s2 + l);
      for (int64_t ch = l; ch < l + g.lanes; ++ch) finish_gradients(ch);
      grad_input_block(act_, span(), grad_block<E>(b), coef.at(l));
    });
    d_residual_out_.run(be_.stream());
  }

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
  template <class E>
  static E* data(Tensor* t) { return static_cast<E*>(t->data); }
  static float as_float(float v) { return v; }
  static float as_float(bf16_t v) { return bf16_to_float(v); }
  Span span() const { return {geo_.n, geo_.stride_n, geo_.hw, geo_.lanes, geo_.stride_p}; }
  template <class E>
  GradBlock<E> grad_block(int64_t b) {
    return grad_block_at<E>(geo_.offset(0, b));
  }
  template <class E>
  GradBlock<E> grad_block_at(int64_t o) {
    const bool add = act_ == BnActivation::add_relu;
    CpuTensor* dres = d_residual_copy_ ? d_residual_copy_ : d_residual_;
    return {data<E>(x_) + o, data<E>(y) + o, data<E>(dy) + o,
            add ? data<E>(dres) + o : nullptr, data<E>(dx_) + o};
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

  // Tiles (nhwc with several channel blocks): every channel of up to
  // tile_pixels_ consecutive pixels of one image, kept in L2 while the
  // blocks' strided passes go over it (block by block over the whole
  // tensor, each pass would stream it from memory again, 16 times for 256
  // channels). fn(tile, offset of its first value, its span) on all threads;
  // sums go to the tile's own partial sums, added in tile order afterwards,
  // so the result does not depend on the thread count either.
  template <class Fn>
  void each_tile(Fn&& fn) {
    const int64_t per_image = tiles_per_image(), tiles = geo_.n * per_image;
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t i = t / per_image, p0 = (t % per_image) * tile_pixels_;
      const Span sp{1, geo_.stride_n, std::min(tile_pixels_, geo_.hw - p0), geo_.lanes,
                    geo_.stride_p};
      fn(t, i * geo_.stride_n + p0 * geo_.stride_p, sp);
    }
  }
  int64_t tiles_per_image() const { return (geo_.hw + tile_pixels_ - 1) / tile_pixels_; }
  double* partial_sums(int64_t tile) {
    return static_cast<double*>(partials_->data) + tile * 2 * geo_.padded_c();
  }
  // sums() = the tiles' partial sums, added in tile order, per channel.
  void reduce_partial_sums() {
    const int64_t cp = geo_.padded_c(), tiles = geo_.n * tiles_per_image();
    double* s = sums();
    const double* part = partial_sums(0);
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < 2 * cp; ++j) {
      double v = 0;
      for (int64_t t = 0; t < tiles; ++t) v += part[t * 2 * cp + j];
      s[j] = v;
    }
  }

  template <class E>
  const E* residual_input(int64_t offset) {
    if (act_ != BnActivation::add_relu) return nullptr;
    return data<E>(residual_copy_ ? residual_copy_ : residual_) + offset;
  }

  CpuBackend& be_;
  CpuTensor* x_;
  CpuTensor* dx_;
  BnActivation act_;
  bool bf16_ = false;  // activations in bf16 (else f32)
  CpuTensor* residual_;
  CpuTensor* d_residual_;
  Geometry geo_;
  int64_t count_ = 1;  // values per channel: N*H*W
  bool tiled_ = false;       // each_tile rather than each_block
  int64_t tile_pixels_ = 0;  // pixels per tile: a multiple of kRun
  CpuTensor* partials_ = nullptr;  // per tile: 2 x padded C sums, double
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
