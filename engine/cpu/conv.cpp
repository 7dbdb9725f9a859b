// engine/cpu/conv.cpp: convolution on oneDNN: forward, backward-data and
// backward-weights primitives made once. The weight parameter is kept in the
// forward primitive's preferred layout; the backward primitives get reorders
// only where their preferred layouts differ (typically the weights of
// backward-data, blocked the other way round).
//
// One special case: a convolution with a small output (4 pixels or fewer:
// layer3 and layer4 of ResNet50 on 32x32 images, and the stride-2
// convolutions into them) is a sum of matrix products, one per kernel tap
// and output pixel where the tap meets the input (CpuConvAsGemm). As sgemm
// calls it runs 3-10x faster than the direct convolution's kernels at such
// shapes (backward-weights above all: its reduction is only N long). In
// bf16 on AMX the same shapes run as three matmuls over an im2col matrix
// (conv_gemm_bf16.cpp): oneDNN's AMX kernels want whole contiguous products.
#include <cstring>
#include <stdexcept>

#include "engine/cpu/cpu_backend.h"

namespace xrun::cpu {

namespace {

using namespace dnnl;

class CpuConv final : public ConvOp, public CpuOp {
 public:
  CpuConv(CpuBackend& be, const std::string& name, const ConvShape& sh, CpuTensor* x,
          CpuTensor* dx)
      : be_(be), x_(x), dx_(dx) {
    const memory::dims strides = {sh.stride, sh.stride}, pad = {sh.pad, sh.pad};
    const memory::dims w_dims = {sh.k, sh.c, sh.r, sh.s};
    const memory::dims y_dims = {sh.n, sh.k, sh.out_h(), sh.out_w()};
    if (x->dims != std::vector<int64_t>{sh.n, sh.c, sh.h, sh.w})
      throw std::logic_error(name + ": input dims do not match the conv shape");

    // bf16: activations and the weight copies the primitives read in bf16;
    // the weight itself (the master) and its gradient fp32, kept in the
    // layout backward-weights writes, so dw needs no reorder.
    const memory::data_type act = be.activation_type();
    bf16_ = act == memory::data_type::bf16;
    fwd_pd_ = dnnl_compat::conv_forward(be.engine(), be.attr(), prop_kind::forward_training,
                                        x->md, any_md(w_dims, act), be.activation_md(y_dims),
                                        strides, pad);
    fwd_ = convolution_forward(fwd_pd_);
    be.need_scratchpad(fwd_pd_.scratchpad_desc());

    // Backward weights: dW in fp32, in the parameter's layout (fp32: the
    // forward's weight layout, reordered into where it differs).
    bww_pd_ = dnnl_compat::conv_backward_weights(be.engine(), be.attr(), fwd_pd_.src_desc(),
                                                 any_md(w_dims), fwd_pd_.dst_desc(), strides, pad,
                                                 fwd_pd_);
    if (is_reference(bww_pd_.impl_info_str())) use_nhwc_backward_weights(sh);
    bww_ = convolution_backward_weights(bww_pd_);
    be.need_scratchpad(bww_pd_.scratchpad_desc());

    const memory::desc master_md = bf16_ ? bww_pd_.diff_weights_desc() : fwd_pd_.weights_desc();
    auto [w, wg] = be.declare_parameter(name + ".weight", {sh.k, sh.c, sh.r, sh.s}, master_md);
    weight = w;
    weight_grad = wg;
    y = be.declare(name + ".y", {sh.n, sh.k, sh.out_h(), sh.out_w()}, fwd_pd_.dst_desc(),
                   TensorRole::activation);
    dy = be.declare(name + ".dy", y->dims, fwd_pd_.dst_desc(), TensorRole::activation_grad);
    if (bf16_) {
      w_fwd_copy_.make(be.engine(), master_md, fwd_pd_.weights_desc());
      w_fwd_ = be.declare(name + ".weight_bf16", weight->dims, fwd_pd_.weights_desc(),
                          TensorRole::workspace);
    }

    bww_src_.make(be.engine(), fwd_pd_.src_desc(), bww_pd_.src_desc());
    bww_dy_.make(be.engine(), fwd_pd_.dst_desc(), bww_pd_.diff_dst_desc());
    if (bww_src_.needed)
      x_copy_ = be.declare(name + ".x_bww", x->dims, bww_pd_.src_desc(), TensorRole::workspace);
    if (bww_dy_.needed)
      dy_copy_ = be.declare(name + ".dy_bww", y->dims, bww_pd_.diff_dst_desc(),
                            TensorRole::workspace);
    dw_reorder_.make(be.engine(), bww_pd_.diff_weights_desc(), master_md);
    if (dw_reorder_.needed)
      dw_tmp_ = be.declare(name + ".dw_tmp", weight->dims, bww_pd_.diff_weights_desc(),
                           TensorRole::workspace);

    // Backward data, only when the input needs a gradient. Its weights come
    // from the master by a reorder before each call (fp32: into its layout
    // where that differs; bf16: always, converting).
    if (dx) {
      if (!(dx->md == x->md)) throw std::logic_error(name + ": dx layout differs from x");
      bwd_pd_ = dnnl_compat::conv_backward_data(be.engine(), be.attr(), x->md,
                                                any_md(w_dims, act), fwd_pd_.dst_desc(), strides,
                                                pad, fwd_pd_);
      bwd_ = convolution_backward_data(bwd_pd_);
      be.need_scratchpad(bwd_pd_.scratchpad_desc());
      if (!(bwd_pd_.diff_dst_desc() == fwd_pd_.dst_desc()) || !(bwd_pd_.diff_src_desc() == x->md))
        throw std::logic_error(name + ": backward-data wants other activation layouts");
      w_reorder_.make(be.engine(), master_md, bwd_pd_.weights_desc());
      if (w_reorder_.needed)
        w_tmp_ = be.declare(name + ".w_bwd", weight->dims, bwd_pd_.weights_desc(),
                            TensorRole::workspace);
      be.note_kernel("conv bwd_data", bwd_pd_.impl_info_str());
    }
    be.note_kernel("conv fwd", fwd_pd_.impl_info_str());
    be.note_kernel("conv bwd_weights", bww_pd_.impl_info_str());
    be.register_op(this);
  }

  void bind() override {
    const memory& sp = be_.scratchpad();
    const memory& src = x_->mem;  // the forward primitive takes x's layout as it is
    const memory& w_fwd = w_fwd_ ? w_fwd_->mem : as_cpu(weight)->mem;
    if (w_fwd_) w_fwd_copy_.bind(as_cpu(weight)->mem, w_fwd);
    fwd_args_ = {{DNNL_ARG_SRC, src},
                 {DNNL_ARG_WEIGHTS, w_fwd},
                 {DNNL_ARG_DST, as_cpu(y)->mem},
                 {DNNL_ARG_SCRATCHPAD, sp}};
    const memory& dw = dw_reorder_.needed ? dw_tmp_->mem : as_cpu(weight_grad)->mem;
    const memory& bww_x = bww_src_.needed ? x_copy_->mem : src;
    const memory& bww_dy = bww_dy_.needed ? dy_copy_->mem : as_cpu(dy)->mem;
    bww_src_.bind(src, bww_x);
    bww_dy_.bind(as_cpu(dy)->mem, bww_dy);
    bww_args_ = {{DNNL_ARG_SRC, bww_x},
                 {DNNL_ARG_DIFF_DST, bww_dy},
                 {DNNL_ARG_DIFF_WEIGHTS, dw},
                 {DNNL_ARG_SCRATCHPAD, sp}};
    dw_reorder_.bind(dw, as_cpu(weight_grad)->mem);
    if (dx_) {
      const memory& w = w_reorder_.needed ? w_tmp_->mem : as_cpu(weight)->mem;
      w_reorder_.bind(as_cpu(weight)->mem, w);
      bwd_args_ = {{DNNL_ARG_DIFF_DST, as_cpu(dy)->mem},
                   {DNNL_ARG_WEIGHTS, w},
                   {DNNL_ARG_DIFF_SRC, dx_->mem},
                   {DNNL_ARG_SCRATCHPAD, sp}};
    }
  }

  void forward() override {
    if (w_fwd_ && w_fwd_version_ != be_.weights_version()) {  // bf16: the weight changed
      w_fwd_copy_.run(be_.stream());
      w_fwd_version_ = be_.weights_version();
    }
    fwd_.execute(be_.stream(), fwd_args_);
  }
  void backward_data() override {
    if (!dx_) return;
    w_reorder_.run(be_.stream());
    bwd_.execute(be_.stream(), bwd_args_);
  }
  void backward_weights() override {
    bww_src_.run(be_.stream());
    bww_dy_.run(be_.stream());
    bww_.execute(be_.stream(), bww_args_);
    dw_reorder_.run(be_.stream());
  }

 private:
  static bool is_reference(const std::string& impl) { return impl.rfind("ref", 0) == 0; }

  // oneDNN 2.6 has no JIT backward-weights for some blocked shapes on AVX2
  // (a 3x3 kernel on a 2x2 map: layer3 of ResNet50 on 32x32 images); its
  // reference kernel took 600-800 ms a call where the NHWC version, a GEMM,
  // takes 3.5. Use that one, on NHWC copies of x and dy.
  void use_nhwc_backward_weights(const ConvShape& sh) {
    const memory::dims strides = {sh.stride, sh.stride}, pad = {sh.pad, sh.pad};
    const memory::data_type act = be_.activation_type();
    const memory::desc x_nhwc({sh.n, sh.c, sh.h, sh.w}, act, memory::format_tag::nhwc);
    const memory::desc y_nhwc({sh.n, sh.k, sh.out_h(), sh.out_w()}, act,
                              memory::format_tag::nhwc);
    const memory::dims w_dims = {sh.k, sh.c, sh.r, sh.s};
    auto hint = dnnl_compat::conv_forward(be_.engine(), be_.attr(), prop_kind::forward_training,
                                          x_nhwc, any_md(w_dims, act), y_nhwc, strides, pad);
    auto pd = dnnl_compat::conv_backward_weights(be_.engine(), be_.attr(), x_nhwc,
                                                 any_md(w_dims), y_nhwc, strides, pad, hint);
    if (is_reference(pd.impl_info_str())) return;  // no better: keep the first
    bww_pd_ = pd;
  }

  CpuBackend& be_;
  CpuTensor* x_;
  CpuTensor* dx_;
  convolution_forward::primitive_desc fwd_pd_;
  convolution_backward_weights::primitive_desc bww_pd_;
  convolution_backward_data::primitive_desc bwd_pd_;
  convolution_forward fwd_;
  convolution_backward_weights bww_;
  convolution_backward_data bwd_;
  Reorder dw_reorder_, w_reorder_, bww_src_, bww_dy_;
  bool bf16_ = false;
  Reorder w_fwd_copy_;              // bf16: master -> the forward's bf16 weight
  CpuTensor* w_fwd_ = nullptr;      // bf16: that copy
  uint64_t w_fwd_version_ = 0;      // the weights_version() it was made at
  CpuTensor* dw_tmp_ = nullptr;
  CpuTensor* x_copy_ = nullptr;
  CpuTensor* dy_copy_ = nullptr;
  CpuTensor* w_tmp_ = nullptr;
  Args fwd_args_, bww_args_, bwd_args_;
};

// Does `md` ([N, C, 1, 1]) hold its values as a row-major [N, C] matrix?
// (nchw, nhwc, or nChw16c / nChw8c with C a multiple of the block.)
bool is_flat_nc(const memory::desc& md) {
  const dnnl_compat::Layout d = dnnl_compat::layout_of(md);
  if (d.ndims != 4 || d.dims[2] != 1 || d.dims[3] != 1 || d.offset0 != 0 || !d.blocked ||
      d.padded_dims[1] != d.dims[1])
    return false;
  const int64_t c = d.dims[1];
  if (d.strides[0] != c) return false;
  if (d.inner_nblks() == 0) return d.strides[1] == 1;
  return d.inner_nblks() == 1 && d.inner_idxs[0] == 1 && d.strides[1] == d.inner_blks[0];
}

// x's layout family for another channel count (the output of a GEMM conv):
// its channel blocks, or NHWC for an unblocked x. (Not NCHW: the same bytes
// at a 1x1 map, but oneDNN 2.6 runs the global average pooling after layer4
// on NCHW in its simple_nchw kernel, 8x slower than its NHWC JIT kernel.)
memory::desc like_layout(const memory::desc& x, const memory::dims& dims) {
  const dnnl_compat::Layout bk = dnnl_compat::layout_of(x);
  using tag = memory::format_tag;
  if (bk.inner_nblks() == 1 && bk.inner_blks[0] == 16) return {dims, memory::data_type::f32, tag::nChw16c};
  if (bk.inner_nblks() == 1 && bk.inner_blks[0] == 8) return {dims, memory::data_type::f32, tag::nChw8c};
  return {dims, memory::data_type::f32, tag::nhwc};
}

// Row-major sgemm (oneDNN's, on the backend's threads); a failure is a bug.
void sgemm(char ta, char tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (dnnl_sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc) != dnnl_success)
    throw std::logic_error("dnnl_sgemm failed");
}

// A convolution with a small output (kMaxGemmPixels pixels or fewer) as
// matrix products, one per live (tap, output pixel) pair. Tap t = (r, s)
// at output pixel o = (oh, ow) meets input pixel i = (oh * stride + r - pad,
// ow * stride + s - pad) or falls in padding; with x_i the [N, C] values at
// pixel i and w_t the tap's [C, K] weights:
//   y_o = sum x_i w_t        dw_t = sum x_i^T dy_o        dx_i = sum dy_o w_t^T
// A tap that meets pixel o itself at every output pixel (stride 1, the
// centre of a 3x3, every tap of a 1x1) is one product over all N * P rows.
// The weight is kept [R][S][C][K], so each tap is one [C, K] matrix and the
// forward and backward-weights products need no transpose; x is read in NHWC
// (gathered once when it comes in another layout); y and dy are NHWC ([N][P]
// [K]), or x's own layout for a 1x1 output, where that is the same matrix;
// backward-data computes dx_i^T = w_t dy_o^T into a [C][pixel][N] buffer
// (dy^T is a small copy, [K][P][N]), so no product runs in oneDNN's slow
// x w^T form at few rows. Only the live pairs are computed: a 3x3 kernel on
// a 2x2 map has 16 of 36 (layer3 of ResNet50 on 32x32 images), where
// oneDNN's direct kernels compute all 36. Pixels no tap meets get dx = 0;
// dead taps keep a zero gradient.
constexpr int64_t kMaxGemmPixels = 4;

class CpuConvAsGemm final : public ConvOp, public CpuOp {
 public:
  CpuConvAsGemm(CpuBackend& be, const std::string& name, const ConvShape& sh, CpuTensor* x,
                CpuTensor* dx)
      : be_(be), x_(x), dx_(dx), n_(sh.n), c_(sh.c), k_(sh.k), hw_(sh.h * sh.w),
        p_(sh.out_h() * sh.out_w()) {
    if (dx && !(dx->md == x->md)) throw std::logic_error(name + ": dx layout differs from x");
    plan_products(sh);
    const memory::dim c = sh.c, k = sh.k, n = sh.n, oh = sh.out_h(), ow = sh.out_w();
    const memory::desc w_md({k, c, sh.r, sh.s}, memory::data_type::f32,
                            memory::dims{1, k, sh.s * c * k, c * k});
    auto [w, wg] = be.declare_parameter(name + ".weight", {k, c, sh.r, sh.s}, w_md);
    weight = w, weight_grad = wg;
    const memory::desc y_md = p_ == 1 ? like_layout(x->md, {n, k, 1, 1})
                                      : memory::desc({n, k, oh, ow}, memory::data_type::f32,
                                                     memory::format_tag::nhwc);
    y = be.declare(name + ".y", {n, k, oh, ow}, y_md, TensorRole::activation);
    dy = be.declare(name + ".dy", y->dims, y_md, TensorRole::activation_grad);

    const memory::desc x_nhwc({n, c, sh.h, sh.w}, memory::data_type::f32,
                              memory::format_tag::nhwc);
    gather_.make(be.engine(), x->md, x_nhwc);
    if (gather_.needed)
      x_nhwc_ = be.declare(name + ".x_nhwc", x->dims, x_nhwc, TensorRole::workspace);
    if (dx) {
      const memory::desc dy_t({n, k, oh, ow}, memory::data_type::f32,
                              memory::dims{1, p_ * n, ow * n, n});
      dy_t_ = be.declare(name + ".dy_t", y->dims, dy_t, TensorRole::workspace);
      transpose_dy_.make(be.engine(), y_md, dy_t, true);
      const memory::desc dx_t({n, c, sh.h, sh.w}, memory::data_type::f32,
                              memory::dims{1, hw_ * n, sh.w * n, n});
      dx_t_ = be.declare(name + ".dx_t", x->dims, dx_t, TensorRole::workspace);
      scatter_.make(be.engine(), dx_t, dx->md, true);
      be.note_kernel("conv bwd_data", "dnnl_sgemm");
    }
    be.note_kernel("conv fwd", "dnnl_sgemm");
    be.note_kernel("conv bwd_weights", "dnnl_sgemm");
    be.register_op(this);
  }

  void bind() override {
    if (gather_.needed) gather_.bind(x_->mem, x_nhwc_->mem);
    if (dx_) {
      transpose_dy_.bind(as_cpu(dy)->mem, dy_t_->mem);
      scatter_.bind(dx_t_->mem, dx_->mem);
      std::memset(dx_t_->data, 0, dx_t_->bytes);  // pixels no tap meets stay zero
    }
    std::memset(weight_grad->data, 0, weight_grad->bytes);  // so do dead taps
  }

  void forward() override {
    gather_.run(be_.stream());
    const float* xs = x_nhwc();
    for (const Product& g : products_) {
      const float* w = tap(weight, g.tap);
      if (g.all_pixels)
        sgemm('N', 'N', n_ * p_, k_, c_, xs, c_, w, k_, g.first_y ? 0.0f : 1.0f, f32(y), k_);
      else
        sgemm('N', 'N', n_, k_, c_, xs + g.in * c_, hw_ * c_, w, k_, g.first_y ? 0.0f : 1.0f,
              f32(y) + g.out * k_, p_ * k_);
    }
  }
  void backward_data() override {
    if (!dx_) return;
    transpose_dy_.run(be_.stream());
    const float* dyt = f32(dy_t_);
    float* dxt = f32(dx_t_);
    for (const Product& g : products_) {
      const float* w = tap(weight, g.tap);
      if (g.all_pixels)  // hw == p: dx^T [C][P*N] from dy^T [K][P*N]
        sgemm('N', 'N', c_, p_ * n_, k_, w, k_, dyt, p_ * n_, g.first_dx ? 0.0f : 1.0f, dxt,
              p_ * n_);
      else
        sgemm('N', 'N', c_, n_, k_, w, k_, dyt + g.out * n_, p_ * n_, g.first_dx ? 0.0f : 1.0f,
              dxt + g.in * n_, hw_ * n_);
    }
    scatter_.run(be_.stream());
  }
  void backward_weights() override {  // x (or its gather) still holds the forward's values
    const float* xs = x_nhwc();
    for (const Product& g : products_) {
      float* dw = tap(weight_grad, g.tap);
      if (g.all_pixels)
        sgemm('T', 'N', c_, k_, n_ * p_, xs, c_, f32(dy), k_, g.first_dw ? 0.0f : 1.0f, dw, k_);
      else
        sgemm('T', 'N', c_, k_, n_, xs + g.in * c_, hw_ * c_, f32(dy) + g.out * k_, p_ * k_,
              g.first_dw ? 0.0f : 1.0f, dw, k_);
    }
  }

 private:
  // One matrix product: tap `tap` (r * S + s) from input pixel `in` to
  // output pixel `out`, or over every pixel at once (in == out for all).
  // The first_* flags: the first product to write that y pixel, dx pixel or
  // tap gradient (beta 0; the later ones add).
  struct Product {
    int64_t tap = 0, in = 0, out = 0;
    bool all_pixels = false, first_y = false, first_dx = false, first_dw = false;
  };

  void plan_products(const ConvShape& sh) {
    const int64_t oh = sh.out_h(), ow = sh.out_w();
    const bool same_grid = sh.stride == 1 && oh == sh.h && ow == sh.w;
    std::vector<Product> whole, single;
    for (int64_t r = 0; r < sh.r; ++r)
      for (int64_t q = 0; q < sh.s; ++q) {
        if (same_grid && r == sh.pad && q == sh.pad) {
          whole.push_back({r * sh.s + q, 0, 0, true});
          continue;
        }
        for (int64_t a = 0; a < oh; ++a)
          for (int64_t b = 0; b < ow; ++b) {
            const int64_t i = a * sh.stride + r - sh.pad, j = b * sh.stride + q - sh.pad;
            if (i >= 0 && i < sh.h && j >= 0 && j < sh.w)
              single.push_back({r * sh.s + q, i * sh.w + j, a * ow + b, false});
          }
      }
    products_ = whole;  // the all-pixel product first: it writes every pixel
    products_.insert(products_.end(), single.begin(), single.end());
    std::vector<bool> y_done(p_), dx_done(hw_), dw_done(sh.r * sh.s);
    for (Product& g : products_) {
      g.first_dw = !dw_done[g.tap];
      dw_done[g.tap] = true;
      if (g.all_pixels) {
        g.first_y = g.first_dx = true;
        y_done.assign(p_, true);
        dx_done.assign(hw_, true);
        continue;
      }
      g.first_y = !y_done[g.out];
      g.first_dx = !dx_done[g.in];
      y_done[g.out] = dx_done[g.in] = true;
    }
    for (bool done : y_done)
      if (!done) throw std::logic_error("conv as GEMM: an output pixel that no tap meets");
  }

  static float* f32(Tensor* t) { return static_cast<float*>(t->data); }
  float* tap(Tensor* w, int64_t t) { return f32(w) + t * c_ * k_; }
  const float* x_nhwc() { return f32(x_nhwc_ ? x_nhwc_ : x_); }

  CpuBackend& be_;
  CpuTensor* x_;
  CpuTensor* dx_;
  int64_t n_, c_, k_, hw_, p_;
  std::vector<Product> products_;
  CpuTensor *x_nhwc_ = nullptr, *dy_t_ = nullptr, *dx_t_ = nullptr;
  Reorder gather_, transpose_dy_, scatter_;
};

// A small output: a 1x1 one whose [N, K] values fill a row-major matrix in
// the layout the next op gets (channels a multiple of the block), or up to
// kMaxGemmPixels pixels, written in NHWC. In bf16 only on NHWC input (AMX:
// conv_gemm_bf16.cpp), and there every 1x1 convolution too, at any map
// size (their matmuls beat oneDNN 2.6's AMX convolutions, backward above
// all: 224x224 batch 8 went from 19.3 to 22.3 img/s; 3x3 convolutions
// through im2col lost, 20.8); blocked bf16 (AVX512_BF16 alone) keeps
// oneDNN's direct kernels.
bool is_gemm_conv(const ConvShape& sh, const CpuTensor* x) {
  const int64_t pixels = sh.out_h() * sh.out_w();
  if (x->dtype == DType::bf16) {
    const bool one_by_one = sh.r == 1 && sh.s == 1 && sh.pad == 0;
    return (pixels <= kMaxGemmPixels || one_by_one) && is_gemm_conv_bf16_input(x);
  }
  if (pixels == 1) return is_flat_nc(like_layout(x->md, {sh.n, sh.k, 1, 1}));
  return pixels <= kMaxGemmPixels;
}

}  // namespace

std::unique_ptr<ConvOp> make_conv(CpuBackend& be, const std::string& name, const ConvShape& shape,
                                  CpuTensor* x, CpuTensor* dx) {
  if (!is_gemm_conv(shape, x)) return std::make_unique<CpuConv>(be, name, shape, x, dx);
  if (x->dtype == DType::bf16) return make_conv_gemm_bf16(be, name, shape, x, dx);
  return std::make_unique<CpuConvAsGemm>(be, name, shape, x, dx);
}

}  // namespace xrun::cpu
