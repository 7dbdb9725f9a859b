// engine/cpu/conv.cpp: convolution on oneDNN: forward, backward-data and
// backward-weights primitives made once. The weight parameter is kept in the
// forward primitive's preferred layout; the backward primitives get reorders
// only where their preferred layouts differ (typically the weights of
// backward-data, blocked the other way round).
//
// One special case: a convolution with a 1x1 output (layer4 of ResNet50 on
// 32x32 images, and the stride-2 convolutions into it) is a sum of matrix
// products, one per kernel tap that meets the input (CpuConvAsGemm). As
// sgemm calls it runs 3-10x faster than the direct convolution's kernels at
// such shapes (backward-weights above all: its reduction is only N long).
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

    auto fwd_desc = convolution_forward::desc(prop_kind::forward_training,
                                              algorithm::convolution_direct, x->md,
                                              any_md(w_dims), any_md(y_dims), strides, pad, pad);
    fwd_pd_ = convolution_forward::primitive_desc(fwd_desc, be.attr(), be.engine());
    fwd_ = convolution_forward(fwd_pd_);
    be.need_scratchpad(fwd_pd_.scratchpad_desc());

    auto [w, wg] = be.declare_parameter(name + ".weight", {sh.k, sh.c, sh.r, sh.s},
                                        fwd_pd_.weights_desc());
    weight = w;
    weight_grad = wg;
    y = be.declare(name + ".y", {sh.n, sh.k, sh.out_h(), sh.out_w()}, fwd_pd_.dst_desc(),
                   TensorRole::activation);
    dy = be.declare(name + ".dy", y->dims, fwd_pd_.dst_desc(), TensorRole::activation_grad);

    // Backward weights: dW in the parameter layout.
    auto bww_desc = convolution_backward_weights::desc(algorithm::convolution_direct,
                                                       fwd_pd_.src_desc(), any_md(w_dims),
                                                       fwd_pd_.dst_desc(), strides, pad, pad);
    bww_pd_ = convolution_backward_weights::primitive_desc(bww_desc, be.attr(), be.engine(),
                                                           fwd_pd_);
    if (is_reference(bww_pd_.impl_info_str())) use_nhwc_backward_weights(sh);
    bww_ = convolution_backward_weights(bww_pd_);
    be.need_scratchpad(bww_pd_.scratchpad_desc());
    bww_src_.make(be.engine(), fwd_pd_.src_desc(), bww_pd_.src_desc());
    bww_dy_.make(be.engine(), fwd_pd_.dst_desc(), bww_pd_.diff_dst_desc());
    if (bww_src_.needed)
      x_copy_ = be.declare(name + ".x_bww", x->dims, bww_pd_.src_desc(), TensorRole::workspace);
    if (bww_dy_.needed)
      dy_copy_ = be.declare(name + ".dy_bww", y->dims, bww_pd_.diff_dst_desc(),
                            TensorRole::workspace);
    dw_reorder_.make(be.engine(), bww_pd_.diff_weights_desc(), fwd_pd_.weights_desc());
    if (dw_reorder_.needed)
      dw_tmp_ = be.declare(name + ".dw_tmp", weight->dims, bww_pd_.diff_weights_desc(),
                           TensorRole::workspace);

    // Backward data, only when the input needs a gradient.
    if (dx) {
      if (!(dx->md == x->md)) throw std::logic_error(name + ": dx layout differs from x");
      auto bwd_desc = convolution_backward_data::desc(algorithm::convolution_direct, x->md,
                                                      any_md(w_dims), fwd_pd_.dst_desc(),
                                                      strides, pad, pad);
      bwd_pd_ = convolution_backward_data::primitive_desc(bwd_desc, be.attr(), be.engine(),
                                                          fwd_pd_);
      bwd_ = convolution_backward_data(bwd_pd_);
      be.need_scratchpad(bwd_pd_.scratchpad_desc());
      if (!(bwd_pd_.diff_dst_desc() == fwd_pd_.dst_desc()) || !(bwd_pd_.diff_src_desc() == x->md))
        throw std::logic_error(name + ": backward-data wants other activation layouts");
      w_reorder_.make(be.engine(), fwd_pd_.weights_desc(), bwd_pd_.weights_desc());
      if (w_reorder_.needed)
        w_tmp_ = be.declare(name + ".w_bwd", weight->dims, bwd_pd_.weights_desc(),
                            TensorRole::workspace);
    }
    be.register_op(this);
  }

  void bind() override {
    const memory& sp = be_.scratchpad();
    const memory& src = x_->mem;  // the forward primitive takes x's layout as it is
    fwd_args_ = {{DNNL_ARG_SRC, src},
                 {DNNL_ARG_WEIGHTS, as_cpu(weight)->mem},
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
    const memory::desc x_nhwc({sh.n, sh.c, sh.h, sh.w}, memory::data_type::f32,
                              memory::format_tag::nhwc);
    const memory::desc y_nhwc({sh.n, sh.k, sh.out_h(), sh.out_w()}, memory::data_type::f32,
                              memory::format_tag::nhwc);
    const memory::desc w_any = any_md({sh.k, sh.c, sh.r, sh.s});
    auto hint = convolution_forward::primitive_desc(
        convolution_forward::desc(prop_kind::forward_training, algorithm::convolution_direct,
                                  x_nhwc, w_any, y_nhwc, strides, pad, pad),
        be_.attr(), be_.engine());
    auto pd = convolution_backward_weights::primitive_desc(
        convolution_backward_weights::desc(algorithm::convolution_direct, x_nhwc, w_any, y_nhwc,
                                           strides, pad, pad),
        be_.attr(), be_.engine(), hint);
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
  CpuTensor* dw_tmp_ = nullptr;
  CpuTensor* x_copy_ = nullptr;
  CpuTensor* dy_copy_ = nullptr;
  CpuTensor* w_tmp_ = nullptr;
  Args fwd_args_, bww_args_, bwd_args_;
};

// Does `md` ([N, C, 1, 1]) hold its values as a row-major [N, C] matrix?
// (nchw, nhwc, or nChw16c / nChw8c with C a multiple of the block.)
bool is_flat_nc(const memory::desc& md) {
  const dnnl_memory_desc_t& d = md.data;
  if (d.ndims != 4 || d.dims[2] != 1 || d.dims[3] != 1 || d.offset0 != 0 ||
      d.format_kind != dnnl_blocked || d.padded_dims[1] != d.dims[1])
    return false;
  const auto& bk = d.format_desc.blocking;
  const int64_t c = d.dims[1];
  if (bk.strides[0] != c) return false;
  if (bk.inner_nblks == 0) return bk.strides[1] == 1;
  return bk.inner_nblks == 1 && bk.inner_idxs[0] == 1 && bk.strides[1] == bk.inner_blks[0];
}

// x's layout family for another channel count (the output of a GEMM conv).
memory::desc like_layout(const memory::desc& x, const memory::dims& dims) {
  const auto& bk = x.data.format_desc.blocking;
  using tag = memory::format_tag;
  if (bk.inner_nblks == 1 && bk.inner_blks[0] == 16) return {dims, memory::data_type::f32, tag::nChw16c};
  if (bk.inner_nblks == 1 && bk.inner_blks[0] == 8) return {dims, memory::data_type::f32, tag::nChw8c};
  return plain_md(dims);
}

// Row-major sgemm (oneDNN's, on the backend's threads); a failure is a bug.
void sgemm(char ta, char tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (dnnl_sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc) != dnnl_success)
    throw std::logic_error("dnnl_sgemm failed");
}

// A convolution with a 1x1 output as matrix products, one per live tap.
// Tap (r, s) meets input pixel p = (r - pad, s - pad) or falls in padding;
// with x_p the [N, C] values at pixel p and w_t the tap's [C, K] weights:
//   y = sum_t x_p(t) w_t        dw_t = x_p^T dy        dx_p = dy w_t^T
// The weight is kept [R][S][C][K], so each tap is one [C, K] matrix and the
// forward and backward-weights products need no transpose; x is gathered
// once into NHWC (a [N, C] matrix per pixel); backward-data computes
// dx_p^T = w_t dy^T into a [pixel][C][N] buffer (dy^T is a small copy), so
// no product runs in oneDNN's slow x w^T form at few rows. Pixels no tap
// meets get dx = 0; dead taps keep a zero gradient.
class CpuConvAsGemm final : public ConvOp, public CpuOp {
 public:
  CpuConvAsGemm(CpuBackend& be, const std::string& name, const ConvShape& sh, CpuTensor* x,
                CpuTensor* dx)
      : be_(be), x_(x), dx_(dx), n_(sh.n), c_(sh.c), k_(sh.k), hw_(sh.h * sh.w) {
    if (dx && !(dx->md == x->md)) throw std::logic_error(name + ": dx layout differs from x");
    for (int64_t r = 0; r < sh.r; ++r)
      for (int64_t q = 0; q < sh.s; ++q) {
        const int64_t i = r - sh.pad, j = q - sh.pad;
        if (i >= 0 && i < sh.h && j >= 0 && j < sh.w) taps_.push_back({r * sh.s + q, i * sh.w + j});
      }
    const memory::dim c = sh.c, k = sh.k, n = sh.n;
    const memory::desc w_md({k, c, sh.r, sh.s}, memory::data_type::f32,
                            memory::dims{1, k, sh.s * c * k, c * k});
    auto [w, wg] = be.declare_parameter(name + ".weight", {k, c, sh.r, sh.s}, w_md);
    weight = w, weight_grad = wg;
    const memory::desc y_md = like_layout(x->md, {n, k, 1, 1});
    y = be.declare(name + ".y", {n, k, 1, 1}, y_md, TensorRole::activation);
    dy = be.declare(name + ".dy", y->dims, y_md, TensorRole::activation_grad);

    const memory::desc x_nhwc({n, c, sh.h, sh.w}, memory::data_type::f32,
                              memory::format_tag::nhwc);
    x_nhwc_ = be.declare(name + ".x_nhwc", x->dims, x_nhwc, TensorRole::workspace);
    gather_.make(be.engine(), x->md, x_nhwc, true);
    if (dx) {
      const memory::desc dy_t({n, k, 1, 1}, memory::data_type::f32, memory::dims{1, n, n * k, n * k});
      dy_t_ = be.declare(name + ".dy_t", y->dims, dy_t, TensorRole::workspace);
      transpose_dy_.make(be.engine(), y_md, dy_t, true);
      const memory::desc dx_t({n, c, sh.h, sh.w}, memory::data_type::f32,
                              memory::dims{1, n, sh.w * c * n, c * n});
      dx_t_ = be.declare(name + ".dx_t", x->dims, dx_t, TensorRole::workspace);
      scatter_.make(be.engine(), dx_t, dx->md, true);
    }
    be.register_op(this);
  }

  void bind() override {
    gather_.bind(x_->mem, x_nhwc_->mem);
    if (dx_) {
      transpose_dy_.bind(as_cpu(dy)->mem, dy_t_->mem);
      scatter_.bind(dx_t_->mem, dx_->mem);
      std::memset(dx_t_->data, 0, dx_t_->bytes);  // pixels no tap meets stay zero
    }
    std::memset(weight_grad->data, 0, weight_grad->bytes);  // so do dead taps
  }

  void forward() override {
    gather_.run(be_.stream());
    for (size_t t = 0; t < taps_.size(); ++t)
      sgemm('N', 'N', n_, k_, c_, x_rows(taps_[t].pixel), hw_ * c_, tap(weight, taps_[t]), k_,
            t == 0 ? 0.0f : 1.0f, f32(y), k_);
  }
  void backward_data() override {
    if (!dx_) return;
    transpose_dy_.run(be_.stream());
    for (const Tap& t : taps_)
      sgemm('N', 'N', c_, n_, k_, tap(weight, t), k_, f32(dy_t_), n_, 0.0f,
            f32(dx_t_) + t.pixel * c_ * n_, n_);
    scatter_.run(be_.stream());
  }
  void backward_weights() override {  // x_nhwc still holds the forward's gather
    for (const Tap& t : taps_)
      sgemm('T', 'N', c_, k_, n_, x_rows(t.pixel), hw_ * c_, f32(dy), k_, 0.0f,
            tap(weight_grad, t), k_);
  }

 private:
  struct Tap {
    int64_t index, pixel;  // r * S + s; i * W + j
  };
  static float* f32(Tensor* t) { return static_cast<float*>(t->data); }
  float* tap(Tensor* w, const Tap& t) { return f32(w) + t.index * c_ * k_; }
  const float* x_rows(int64_t pixel) { return f32(x_nhwc_) + pixel * c_; }

  CpuBackend& be_;
  CpuTensor* x_;
  CpuTensor* dx_;
  int64_t n_, c_, k_, hw_;
  std::vector<Tap> taps_;
  CpuTensor *x_nhwc_ = nullptr, *dy_t_ = nullptr, *dx_t_ = nullptr;
  Reorder gather_, transpose_dy_, scatter_;
};

// A 1x1 output whose [N, K] values fill a row-major matrix in the layout
// the next op gets (channels a multiple of the block).
bool is_gemm_conv(const ConvShape& sh, const CpuTensor* x) {
  return sh.out_h() == 1 && sh.out_w() == 1 && is_flat_nc(like_layout(x->md, {sh.n, sh.k, 1, 1}));
}

}  // namespace

std::unique_ptr<ConvOp> make_conv(CpuBackend& be, const std::string& name, const ConvShape& shape,
                                  CpuTensor* x, CpuTensor* dx) {
  if (is_gemm_conv(shape, x)) return std::make_unique<CpuConvAsGemm>(be, name, shape, x, dx);
  return std::make_unique<CpuConv>(be, name, shape, x, dx);
}

}  // namespace xrun::cpu
