// engine/cpu/conv.cpp: convolution on oneDNN: forward, backward-data and
// backward-weights primitives made once. The weight parameter is kept in the
// forward primitive's preferred layout; the backward primitives get reorders
// only where their preferred layouts differ (typically the weights of
// backward-data, blocked the other way round).
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

}  // namespace

std::unique_ptr<ConvOp> make_conv(CpuBackend& be, const std::string& name, const ConvShape& shape,
                                  CpuTensor* x, CpuTensor* dx) {
  return std::make_unique<CpuConv>(be, name, shape, x, dx);
}

}  // namespace xrun::cpu
