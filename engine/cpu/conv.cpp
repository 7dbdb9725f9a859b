// engine/cpu/conv.cpp: convolution on oneDNN: forward, backward-data and
// backward-weights primitives made once. The weight parameter is kept in the
// forward primitive's preferred layout; the backward primitives get reorders
// only where their preferred layouts differ (typically the weights of
// backward-data, blocked the other way round).
//
// One special case: a convolution whose input and output are 1x1 (layer4 of
// ResNet50 on 32x32 images) touches one tap of its kernel, and is then a
// matrix product y[N, K] = x[N, C] w_tap^T. It runs as oneDNN inner
// products (GEMMs), 3-6x faster than the direct convolution's kernels at
// such shapes (backward-weights above all: its reduction is only N long),
// with the weight kept tap-major so the live tap is one [K, C] matrix; the
// other taps' gradients stay zero, as they are.
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
    bww_ = convolution_backward_weights(bww_pd_);
    be.need_scratchpad(bww_pd_.scratchpad_desc());
    if (!(bww_pd_.src_desc() == fwd_pd_.src_desc()) ||
        !(bww_pd_.diff_dst_desc() == fwd_pd_.dst_desc()))
      throw std::logic_error(name + ": backward-weights wants other activation layouts");
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
    bww_args_ = {{DNNL_ARG_SRC, src},
                 {DNNL_ARG_DIFF_DST, as_cpu(dy)->mem},
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
    bww_.execute(be_.stream(), bww_args_);
    dw_reorder_.run(be_.stream());
  }

 private:
  CpuBackend& be_;
  CpuTensor* x_;
  CpuTensor* dx_;
  convolution_forward::primitive_desc fwd_pd_;
  convolution_backward_weights::primitive_desc bww_pd_;
  convolution_backward_data::primitive_desc bwd_pd_;
  convolution_forward fwd_;
  convolution_backward_weights bww_;
  convolution_backward_data bwd_;
  Reorder dw_reorder_, w_reorder_;
  CpuTensor* dw_tmp_ = nullptr;
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

class CpuConvAsGemm final : public ConvOp, public CpuOp {
 public:
  CpuConvAsGemm(CpuBackend& be, const std::string& name, const ConvShape& sh, CpuTensor* x,
                CpuTensor* dx)
      : be_(be), x_(x), dx_(dx), n_(sh.n), c_(sh.c), k_(sh.k),
        tap_offset_((sh.pad * sh.s + sh.pad) * sh.k * sh.c) {
    if (dx && !(dx->md == x->md)) throw std::logic_error(name + ": dx layout differs from x");
    // Weights tap-major: [R][S][K][C], so tap (pad, pad) is one [K, C] matrix.
    const memory::desc w_md({sh.k, sh.c, sh.r, sh.s}, memory::data_type::f32,
                            memory::dims{sh.c, 1, sh.s * sh.k * sh.c, sh.k * sh.c});
    auto [w, wg] = be.declare_parameter(name + ".weight", {sh.k, sh.c, sh.r, sh.s}, w_md);
    weight = w, weight_grad = wg;
    const memory::desc y_md = like_layout(x->md, {sh.n, sh.k, 1, 1});
    if (!is_flat_nc(y_md)) throw std::logic_error(name + ": GEMM conv output is not [N, K]");
    y = be.declare(name + ".y", {sh.n, sh.k, 1, 1}, y_md, TensorRole::activation);
    dy = be.declare(name + ".dy", y->dims, y_md, TensorRole::activation_grad);

    const memory::desc x2 = plain_md({n_, c_}), y2 = plain_md({n_, k_}),
                       w2 = plain_md({k_, c_});
    fwd_pd_ = inner_product_forward::primitive_desc(
        inner_product_forward::desc(prop_kind::forward_training, x2, w2, y2), be.attr(),
        be.engine());
    fwd_ = inner_product_forward(fwd_pd_);
    bww_pd_ = inner_product_backward_weights::primitive_desc(
        inner_product_backward_weights::desc(x2, w2, y2), be.attr(), be.engine(), fwd_pd_);
    bww_ = inner_product_backward_weights(bww_pd_);
    be.need_scratchpad(fwd_pd_.scratchpad_desc());
    be.need_scratchpad(bww_pd_.scratchpad_desc());
    if (dx) {
      bwd_pd_ = inner_product_backward_data::primitive_desc(
          inner_product_backward_data::desc(x2, w2, y2), be.attr(), be.engine(), fwd_pd_);
      bwd_ = inner_product_backward_data(bwd_pd_);
      be.need_scratchpad(bwd_pd_.scratchpad_desc());
    }
    be.register_op(this);
  }

  void bind() override {
    const memory& sp = be_.scratchpad();
    auto mem = [&](const memory::desc& md, Tensor* t, int64_t offset = 0) {
      return memory(md, be_.engine(), static_cast<float*>(t->data) + offset);
    };
    const memory::desc x2 = plain_md({n_, c_}), y2 = plain_md({n_, k_}),
                       w2 = plain_md({k_, c_});
    const memory x = mem(x2, x_), w = mem(w2, weight, tap_offset_);
    fwd_args_ = {{DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DST, mem(y2, y)},
                 {DNNL_ARG_SCRATCHPAD, sp}};
    bww_args_ = {{DNNL_ARG_SRC, x}, {DNNL_ARG_DIFF_DST, mem(y2, dy)},
                 {DNNL_ARG_DIFF_WEIGHTS, mem(w2, weight_grad, tap_offset_)},
                 {DNNL_ARG_SCRATCHPAD, sp}};
    if (dx_)
      bwd_args_ = {{DNNL_ARG_DIFF_DST, mem(y2, dy)}, {DNNL_ARG_WEIGHTS, w},
                   {DNNL_ARG_DIFF_SRC, mem(x2, dx_)}, {DNNL_ARG_SCRATCHPAD, sp}};
    // The other taps never reach the output: their gradient is zero.
    std::memset(weight_grad->data, 0, weight_grad->bytes);
  }

  void forward() override { fwd_.execute(be_.stream(), fwd_args_); }
  void backward_data() override {
    if (dx_) bwd_.execute(be_.stream(), bwd_args_);
  }
  void backward_weights() override { bww_.execute(be_.stream(), bww_args_); }

 private:
  CpuBackend& be_;
  CpuTensor* x_;
  CpuTensor* dx_;
  int64_t n_, c_, k_, tap_offset_;
  inner_product_forward::primitive_desc fwd_pd_;
  inner_product_backward_weights::primitive_desc bww_pd_;
  inner_product_backward_data::primitive_desc bwd_pd_;
  inner_product_forward fwd_;
  inner_product_backward_weights bww_;
  inner_product_backward_data bwd_;
  Args fwd_args_, bww_args_, bwd_args_;
};

// A 1x1 input and output: only tap (pad, pad) meets the input.
bool is_single_tap(const ConvShape& sh, const CpuTensor* x) {
  return sh.h == 1 && sh.w == 1 && sh.out_h() == 1 && sh.out_w() == 1 && sh.pad < sh.r &&
         sh.pad < sh.s && sh.r == sh.s && is_flat_nc(x->md) &&
         is_flat_nc(like_layout(x->md, {sh.n, sh.k, 1, 1}));
}

}  // namespace

std::unique_ptr<ConvOp> make_conv(CpuBackend& be, const std::string& name, const ConvShape& shape,
                                  CpuTensor* x, CpuTensor* dx) {
  if (is_single_tap(shape, x)) return std::make_unique<CpuConvAsGemm>(be, name, shape, x, dx);
  return std::make_unique<CpuConv>(be, name, shape, x, dx);
}

}  // namespace xrun::cpu
